#!/usr/bin/env bash
# kda/gpu/run_prefill_ab.sh — changes to the chunked prefill against the build before them, on the
# GPU machine, in one call (issue 36): device bundles (scripts/device-bundle), the first one the
# baseline, each labelled by its directory's name.
#   STAGES="checks fast ncu slow" kda/gpu/run_prefill_ab.sh BASELINE CHANGE...
#   checks  per change (the baseline is timed, not checked): `kda_gpu --prefill --quick` (GVA in
#           slow, fast and steep gates, CP, T = 1000, varlen against the fp64 recurrence) and the
#           GVA check through loupe in both chain precisions and both gates
#   fast    per bundle: `chunk_gpu` with decay=fast (FlashKDA's bench gates) at issue 36's shapes
#           (T = 8192 H = 32, T = 8192 H = 64, T = 65536 H = 64), every variant (tf32, tf32x3, and
#           the kernels alone: intra, state)
#   ncu     per bundle: Nsight Compute on one chunk_intra launch, T = 8192, H = 32, fast gates
#   slow    `chunk_gpu` as in fast with slow gates (what a change must not slow down)
# STAGES defaults to all four in that order; BENCH_BUDGET (seconds per bench point, default 1).
# Every probe runs through loupe with seed 26. Writes under $OUT (else build/prefill-ab): ab.txt
# (everything printed) and ncu_<label>.txt. Exit status 1 when anything failed.
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: run_prefill_ab.sh BASELINE_BUNDLE CHANGE_BUNDLE... (STAGES, BENCH_BUDGET)" >&2
  exit 2
fi
bundles=("$@")
read -r -a stages <<<"${STAGES:-checks fast ncu slow}"
out="${OUT:-build/prefill-ab}"
mkdir -p "$out"
log="$out/ab.txt"
home="$(mktemp -d)"
scratch="$(mktemp -d)"
status=0

# step LABEL COMMAND...: the command's output into the log, its exit status checked.
step() {
  local label="$1"
  shift
  echo "### [$label] $* ($(date +%s))" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local code=${PIPESTATUS[0]}
  echo "### [$label] exit $code ($(date +%s))" | tee -a "$log"
  [[ $code -eq 0 ]] || status=1
}

probe() {
  local label="$1" bin="$2"
  shift 2
  step "$label" "$bin/loupe" probe run --home "$home" --seed 26 "$@" -- "$bin/kda" probe
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1 | tee -a "$log"
for stage in "${stages[@]}"; do
  for index in "${!bundles[@]}"; do
    bin="$(cd "${bundles[$index]}/bin" && pwd)"
    label="$(basename "${bundles[$index]}")"
    case "$stage" in
      checks)
        [[ $index -eq 0 ]] && continue
        step "$label" "$bin/kda_gpu" --prefill --quick
        probe "$label" "$bin" chunk_gpu_vs_recurrent --set T=1024 --set H=2 --set HV=4 \
          --set precision=tf32,tf32x3 --set decay=fast,slow
        ;;
      fast | slow)
        probe "$label" "$bin" chunk_gpu --set decay="$stage" --zip T=8192,8192,65536 \
          --zip H=32,64,64 --budget "${BENCH_BUDGET:-1}"
        ;;
      ncu)
        echo "### [$label] ncu chunk_intra ($(date +%s))" | tee -a "$log"
        timeout 180 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats \
          --section LaunchStats --section ComputeWorkloadAnalysis \
          "$bin/kda" probe run chunk_gpu --set T=8192 --set H=32 --set decay=fast --seed 26 \
          --counters-pass 1 --counters-variant intra --out "$scratch/ncu_$label" --json \
          >"$out/ncu_$label.txt" 2>&1 || status=1
        grep -E "Duration|Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" \
          "$out/ncu_$label.txt" | head -16 | tee -a "$log"
        ;;
      *)
        echo "run_prefill_ab.sh: unknown stage $stage (expected checks, fast, ncu, slow)" >&2
        exit 2
        ;;
    esac
  done
done
exit $status
