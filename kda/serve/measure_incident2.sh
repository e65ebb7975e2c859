#!/usr/bin/env bash
# Incident 2's required result: prefill+transfer / prefill wall time over N interleaved repeats,
# with the ratio's 95 % confidence interval (t-interval of the per-pair log ratios, back-
# transformed) and the gate of issue 6: with --dispatch-holds-lock the lower bound must be >= 1.2,
# without it the upper bound <= 1.05. Each arm runs `kda serve --json` and reads its in-process
# wall_s (model construction and process start-up are outside it).
#   usage: kda/serve/measure_incident2.sh [KDA] [REPEATS] [-- extra kda serve options]
set -euo pipefail
kda=${1:-build/bin/kda}
repeats=${2:-7}
shift $(( $# >= 2 ? 2 : $# ))
[[ ${1:-} == "--" ]] && shift
extra=("$@")
wall() { "$kda" serve --json "$@" | python3 -c 'import json, sys; print(json.load(sys.stdin)["wall_s"])'; }
for holds in "--dispatch-holds-lock" ""; do
  pairs=()
  for ((i = 0; i < repeats; ++i)); do
    a=$(wall --mode prefill $holds "${extra[@]}")
    b=$(wall --mode prefill+transfer $holds "${extra[@]}")
    pairs+=("$a,$b")
  done
  python3 - "${holds:-released}" "${pairs[@]}" <<'PY'
import math, sys
label, pairs = sys.argv[1], [tuple(map(float, p.split(","))) for p in sys.argv[2:]]
logs = [math.log(b / a) for a, b in pairs]
n = len(logs)
mean = sum(logs) / n
sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) if n > 1 else float("inf")
# two-sided 95 % Student t quantiles for n - 1 = 1..30 degrees of freedom
t = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
     2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
     2.052, 2.048, 2.045, 2.042][min(n - 2, 29)] if n > 1 else float("inf")
half = t * sd / math.sqrt(n)
low, point, high = math.exp(mean - half), math.exp(mean), math.exp(mean + half)
holds = label == "--dispatch-holds-lock"
passed = low >= 1.2 if holds else high <= 1.05
gate = "lower bound >= 1.2" if holds else "upper bound <= 1.05"
print(f"dispatch {'holds' if holds else 'releases'} the lock: prefill+transfer / prefill = "
      f"{point:.3f} [{low:.3f}, {high:.3f}] over {n} interleaved pairs; gate {gate}: "
      f"{'pass' if passed else 'fail'}")
print("  pairs (prefill s, prefill+transfer s): " +
      ", ".join(f"({a:.4f}, {b:.4f})" for a, b in pairs))
PY
done
