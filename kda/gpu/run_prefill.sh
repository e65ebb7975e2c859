#!/usr/bin/env bash
# kda/gpu/run_prefill.sh — issue 26's measurements of the chunked prefill on the GPU machine, from a
# device bundle (scripts/device-bundle):
#   kda/gpu/run_prefill.sh BUNDLE [STAGE...]   stages: checks, large, cp, bench (default: all four),
#                                              or final (a short check of each, then the bench),
#                                              or speed (GVA check, the two target shapes, CP),
#                                              or pick (GVA check and the two target shapes)
#   large: the fp64-recurrence check at T = 65536, H = HV = 16, 32 and 64 (slow gates), the three
#          at once (each needs a few single-threaded passes of loupe's runtime over GBs of
#          tensors; the oracle uses every core), each in large_h<H>.txt; ~30 GB of RAM and /tmp
# BENCH_BUDGET (seconds per bench point, default 2) shortens the final stage's bench.
# Every probe runs through loupe (`loupe probe run ... -- kda probe`) with a fixed seed. Writes under
# $OUT (else build/prefill-run): prefill.txt (everything printed), observations.tgz (loupe's
# observation envelopes, without the tensors). Exit status: 1 when any probe run failed, else 0.
set -uo pipefail

bundle="${1:?usage: run_prefill.sh BUNDLE [checks|large|cp|bench ...]}"
shift
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(checks large cp bench)
bin="$(cd "$bundle/bin" && pwd)"
out="${OUT:-build/prefill-run}"
mkdir -p "$out"
home="$(mktemp -d)"
log="$out/prefill.txt"
status=0

run() {
  echo "### loupe probe run $* ($(date +%s))" | tee -a "$log"
  "$bin/loupe" probe run --home "$home" --seed 26 "$@" -- "$bin/kda" probe 2>&1 | tee -a "$log"
  local code=${PIPESTATUS[0]}
  echo "### exit $code ($(date +%s))" | tee -a "$log"
  [[ $code -eq 0 ]] || status=1
}

# run_alone LOG ARGS...: one probe run into its own log, for runs started side by side.
run_alone() {
  local own="$1"
  shift
  {
    echo "### loupe probe run $* ($(date +%s))"
    "$bin/loupe" probe run --home "$home" --seed 26 "$@" -- "$bin/kda" probe 2>&1
    echo "### exit $? ($(date +%s))"
  } >"$own"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1 | tee -a "$log"
for stage in "${stages[@]}"; do
  case "$stage" in
    checks)
      # GVA (H=2, HV=4), both chain precisions, both gates; then the CPU chunk comparison.
      run chunk_gpu_vs_recurrent --set T=1024 --set H=2 --set HV=4 --set precision=tf32,tf32x3 \
        --set decay=fast,slow
      run chunk_gpu_vs_cpu --set precision=tf32,tf32x3 --set decay=slow,fast
      run chunk_gpu_vs_recurrent --no-hidden --set T=1024,8192 --zip H=16,32,64 --zip HV=16,32,64
      ;;
    large)
      for heads in 16 32 64; do
        run_alone "$out/large_h$heads.txt" chunk_gpu_vs_recurrent --no-hidden --set T=65536 \
          --set H=$heads --set HV=$heads --set decay=slow &
      done
      wait
      cat "$out"/large_h*.txt >>"$log"
      for heads in 16 32 64; do grep -q "^### exit 0 " "$out/large_h$heads.txt" || status=1; done
      ;;
    cp)
      run cp_gpu_vs_nocp --set T=65536 --set shards=8 --set precision=tf32_truncate,tf32x3,fp32
      run cp_gpu_vs_nocp --set T=65536 --set shards=8 --set precision=tf32_truncate --set decay=fast
      ;;
    bench)
      run chunk_gpu --set T=1024,8192,65536 --set H=16,32,64 --budget 3
      ;;
    final)
      run chunk_gpu_vs_recurrent --set T=1024 --set H=2 --set HV=4 --set precision=tf32,tf32x3 \
        --set decay=fast,slow
      run chunk_gpu --set T=1024,8192,65536 --set H=16,32,64 --budget "${BENCH_BUDGET:-2}"
      run cp_gpu_vs_nocp --set T=65536 --set shards=8 --set precision=tf32_truncate,tf32x3
      run chunk_gpu_vs_cpu --set precision=tf32,tf32x3 --set decay=slow,fast
      run chunk_gpu_vs_recurrent --no-hidden --set T=8192 --zip H=16,32,64 --zip HV=16,32,64
      ;;
    speed)
      # One change's quick verdict: correct on GVA, timed at the issue's two target shapes, CP.
      run chunk_gpu_vs_recurrent --set T=1024 --set H=2 --set HV=4 --set precision=tf32,tf32x3 \
        --set decay=fast,slow
      run chunk_gpu --zip T=8192,65536 --zip H=32,64 --budget 2
      run cp_gpu_vs_nocp --set T=65536 --set shards=8 --set precision=tf32_truncate,tf32x3
      ;;
    pick)
      # Which of several builds to measure fully: correct on GVA (exit 0), and its two timings.
      run chunk_gpu_vs_recurrent --set T=1024 --set H=2 --set HV=4 --set precision=tf32,tf32x3 \
        --set decay=fast,slow
      run chunk_gpu --zip T=8192,65536 --zip H=32,64 --budget 1
      ;;
    *) echo "run_prefill.sh: unknown stage $stage (expected checks, large, cp, bench, final, speed, pick)" >&2
       exit 2 ;;
  esac
done
tar czf "$out/observations.tgz" -C "$home" --exclude='*.npy' --exclude='*.safetensors' . 2>/dev/null
exit $status
