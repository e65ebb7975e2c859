#!/usr/bin/env bash
# kda/gpu/run_cp_varlen.sh — issue 36's measurements of intra-card context parallelism, partial
# chunks and varlen batches on the GPU machine, from a source tree (no bundle: kda_gpu is built by
# scripts/gpu-run, the torch extension by side_by_side.py):
#   kda/gpu/run_cp_varlen.sh [STAGE...]     stages (default: check sweep):
#   check  `kda_gpu --prefill --quick` (the CP pass, T = 1000 and a varlen batch against the fp64
#          recurrence, with the issue-26 quick points) and `side_by_side.py --quick` (every kda
#          path through the extension, against its fp64 recurrence); builds the extension (~1 min)
#   sweep  T = 65536, H = 4: kda TF32, 3×TF32 and the CP pass at P = automatic, 2, 4, 8, 16, 32 in
#          one interleaved timing, bench and slow gates, each checked against the fp64 recurrence
#   gates  T = 8192, H = 32 and T = 65536, H = 64 timed under bench and slow gates (kda alone)
#   full   every shape side by side with FLA and FlashKDA (KDA_FLA, KDA_FLASHKDA: directories as
#          side_by_side.sh takes them; FlashKDA built there first), timed under bench gates as the
#          README's table (the slow-gate times are the sweep's and gates' stages)
# Writes under $OUT (else build/cp-varlen-run): run.txt (everything printed) and STAGE.md / .json
# per stage (three stages per device call stay within its 8 returned files; `full` takes a call
# of its own with the FlashKDA build). Exit status: 1 when a stage failed, else 0.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${OUT:-$root/build/cp-varlen-run}"
mkdir -p "$out"
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(check sweep)
log="$out/run.txt"
build="$(mktemp -d)"
module="$build/kda_prefill_torch.so"
export PYTHONUNBUFFERED=1
status=0

side_by_side() {  # STAGE ARGS...: one side_by_side.py run, its tables kept as STAGE.{md,json}
  local stage="$1"
  shift
  local dir="$build/$stage"
  local prebuilt=(--kda-build "$build")
  [[ -f "$module" ]] && prebuilt=(--kda-module "$module")
  echo "### side_by_side.py ${prebuilt[*]} $* ($(date -u +%H:%M:%S))" | tee -a "$log"
  python3 "$here/side_by_side.py" "${prebuilt[@]}" --out "$dir" "$@" 2>&1 | tee -a "$log" ||
    status=1
  cp "$dir/side_by_side.md" "$out/$stage.md" 2>/dev/null
  cp "$dir/side_by_side.json" "$out/$stage.json" 2>/dev/null
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
for stage in "${stages[@]}"; do
  case "$stage" in
    check)
      echo "### scripts/gpu-run --prefill --quick ($(date -u +%H:%M:%S))" | tee -a "$log"
      OUT="$build/gpu-run" "$root/scripts/gpu-run" --prefill --quick 2>&1 | tee -a "$log" || status=1
      side_by_side check --quick
      ;;
    sweep)
      side_by_side sweep --shapes 3 --kda-shards 0,2,4,8,16,32 --time-gates bench,slow
      ;;
    gates)
      side_by_side gates --shapes 0,2 --time-gates bench,slow
      ;;
    full)
      side_by_side full --fla "${KDA_FLA:?KDA_FLA: the FLA directory}" \
        --flashkda "${KDA_FLASHKDA:?KDA_FLASHKDA: the built FlashKDA directory}"
      ;;
    *)
      echo "run_cp_varlen.sh: unknown stage '$stage' (expected check, sweep, gates, full)" >&2
      exit 2
      ;;
  esac
done
rm -rf "$build"
exit "$status"
