#!/usr/bin/env bash
# kda/gpu/run_trend.sh — the chunked prefill's trajectory as recorded runs (issues 36 and 38):
# one `loupe run examples/kda/gpu-prefill.toml` per kernel version, each in a clone checked out at
# that version's commit, so the ledger holds each run at its own commit and `loupe ledger trend`
# puts them in history order.
#
#   kda/gpu/run_trend.sh record REPO LOUPE COMMIT=BUNDLE [COMMIT=BUNDLE ...]     (on the device)
#     REPO    a git bundle or repository holding every COMMIT (`git bundle create FILE main`)
#     LOUPE   the loupe executable that runs and records every version (one recorder for all)
#     BUNDLE  the device bundle (scripts/device-bundle: bin/, lib/) built from COMMIT's tree
#   Writes under $OUT (else build/trend-run): ledger.sqlite, one export per run (run-N.json, for
#   `loupe ledger import`), trend.txt (everything printed). ROUNDS=N records every version N times,
#   versions interleaved (default 1). OBJECTIVE=FILE runs FILE in every clone instead of the
#   commit's own examples/kda/gpu-prefill.toml (the same questions asked of every version). Exit 1 when a run could not be recorded, else 0 (a run whose
#   time gates fail is recorded: a version that misses issue 36's bars is still a point of the trend).
#
#   kda/gpu/run_trend.sh draw LEDGER HTML [METRIC]                               (anywhere)
#     imports nothing: draws METRIC (default gate:prefill_8k_h64_within_0_9_flashkda) from LEDGER
#     into HTML with `loupe ledger trend`, from this repository's history.
set -uo pipefail

usage="usage: run_trend.sh record REPO LOUPE COMMIT=BUNDLE... | draw LEDGER HTML [METRIC]"
mode="${1:?$usage}"
shift

case "$mode" in
  record)
    [[ $# -ge 3 ]] || { echo "run_trend.sh record: $usage" >&2; exit 2; }
    repo="$1"
    loupe="$(realpath "$2")"
    shift 2
    out="$(mkdir -p "${OUT:-build/trend-run}" && cd "${OUT:-build/trend-run}" && pwd)"
    log="$out/trend.txt"
    work="$(mktemp -d)"
    home="$work/home"
    status=0
    for pair in "$@"; do
      [[ "$pair" == *=* ]] || { echo "run_trend.sh: '$pair': expected COMMIT=BUNDLE" >&2; exit 2; }
      bundle="$(realpath "${pair#*=}")"
      [[ -x "$bundle/bin/kda" ]] || { echo "run_trend.sh: $bundle/bin/kda: missing (expected a device bundle)" >&2; exit 2; }
    done
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
      --format=csv 2>&1 | tee -a "$log"
    for round in $(seq 1 "${ROUNDS:-1}"); do
      for pair in "$@"; do
        commit="${pair%%=*}"
        bundle="$(realpath "${pair#*=}")"
        clone="$work/clone-${commit:0:12}"
        if [[ ! -d "$clone" ]]; then
          if ! { git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$commit"; }; then
            echo "run_trend.sh: cannot check out $commit from $repo" | tee -a "$log"
            status=1
            continue
          fi
          mkdir -p "$clone/build"
          cp -r "$bundle/bin" "$bundle/lib" "$clone/build/"
          [[ -n "${OBJECTIVE:-}" ]] && cp "$OBJECTIVE" "$clone/examples/kda/gpu-prefill.toml"
        fi
        echo "### round $round: $commit ($(date +%s))" | tee -a "$log"
        (cd "$clone" && "$loupe" run examples/kda/gpu-prefill.toml --home "$home" \
          --ledger "$out/ledger.sqlite") 2>&1 | tee -a "$log"
        code=${PIPESTATUS[0]}
        echo "### exit $code ($(date +%s))" | tee -a "$log"
        # 0: every gate passed; 1: a gate failed (recorded all the same); else not recorded.
        [[ $code -le 1 ]] || status=1
      done
    done
    n=0
    while read -r id; do
      n=$((n + 1))
      "$loupe" ledger export "$id" --ledger "$out/ledger.sqlite" >"$out/run-$n.json" 2>>"$log" || status=1
    done < <("$loupe" ledger list --ledger "$out/ledger.sqlite" --json |
      python3 -c 'import json,sys; [print(r["id"]) for r in json.load(sys.stdin)["data"]["runs"]]')
    exit $status
    ;;
  draw)
    [[ $# -ge 2 ]] || { echo "run_trend.sh draw: $usage" >&2; exit 2; }
    metric="${3:-gate:prefill_8k_h64_within_0_9_flashkda}"
    exec loupe ledger trend "$metric" --ledger "$1" --html "$2"
    ;;
  *)
    echo "run_trend.sh: unknown mode '$mode' ($usage)" >&2
    exit 2
    ;;
esac
