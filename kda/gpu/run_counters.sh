#!/usr/bin/env bash
# kda/gpu/run_counters.sh — issue 24's measurements on the GPU machine, from a device bundle
# (scripts/device-bundle):
#   kda/gpu/run_counters.sh BUNDLE [STAGE...]   stages (default: attach quick prefill fork):
#     attach   the bench attachment: `loupe probe run decode_gpu --counters merged_v_decode
#              --counters-launches 3`, the verdict, then one ncu pass of the last variant (merged)
#     quick    `loupe counters -- kda_gpu --time --quick` (ncu's default launch cap of 64)
#     prefill  ncu on the chunked prefill's two kernels at T = 65536, H = 64: the subject's
#              untimed counters pass of chunk_gpu's tf32 variant, whose input set's first pass
#              (chunk_intra, then chunk_state) is what --launch-count 2 profiles
#     fork     ncu around a timed bench (`kda probe run chunk_gpu`, whose runtime forks a child
#              per variant without exec) next to the same bench's counters pass (no fork): what
#              made the kda subject crash under ncu
# Writes under $OUT (else build/counters-run): one <stage>.txt each, and counters.tgz (the attach
# point's observation and its counters/ folder, without the .ncu-rep). Exit 1 when a stage failed.
set -uo pipefail

bundle="${1:?usage: run_counters.sh BUNDLE [attach|quick|prefill|fork ...]}"
shift
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(attach quick prefill fork)
bin="$(cd "$bundle/bin" && pwd)"
out="${OUT:-build/counters-run}"
mkdir -p "$out"
home="$(mktemp -d)"
scratch="$(mktemp -d)"
status=0

# step LOG SECONDS COMMAND...: the command's output and its exit status (with times) in LOG.
step() {
  local log="$out/$1.txt" limit="$2"
  shift 2
  echo "### $* ($(date +%s))" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local code=$?
  echo "### exit $code ($(date +%s))" >>"$log"
  return $code
}

ncu --version 2>&1 | tail -1
for stage in "${stages[@]}"; do
  case "$stage" in
    attach)
      step attach 300 "$bin/loupe" probe run --home "$home" --seed 26 decode_gpu \
        --counters merged_v_decode --counters-launches 3 -- "$bin/kda" probe || status=1
      (cd "$home" && find . -name '*.ncu-rep' -prune -o -path '*decode_gpu*' -type f -print |
        tar czf "$out/counters.tgz" -T -) 2>/dev/null
      ;;
    quick)
      step quick 300 "$bin/loupe" counters --home "$home" -- "$bin/kda_gpu" --time --quick ||
        status=1
      ;;
    prefill)
      step prefill 300 "$bin/loupe" counters --home "$home" --kernel chunk_ --launch-count 2 \
        -- "$bin/kda" probe run chunk_gpu --set T=65536 --set H=64 --seed 26 --counters-pass 1 \
        --counters-variant tf32 --out "$scratch/chunk_pass" --json || status=1
      ;;
    fork)
      # Not a failure of this script when the forked run crashes: that is what it looks for.
      step fork 120 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 \
        "$bin/kda" probe run chunk_gpu --set T=1024 --set H=16 --seed 26 --budget 0.2 \
        --out "$scratch/fork_timed" --json
      step fork 120 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 \
        "$bin/kda" probe run chunk_gpu --set T=1024 --set H=16 --seed 26 --counters-pass 1 \
        --counters-variant tf32 --out "$scratch/fork_pass" --json || status=1
      ;;
    *) echo "run_counters.sh: unknown stage $stage (expected attach, quick, prefill, fork)" >&2
       exit 2 ;;
  esac
done
exit $status
