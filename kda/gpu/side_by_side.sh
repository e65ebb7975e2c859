#!/usr/bin/env bash
# kda/gpu/side_by_side.sh — issue 36's side-by-side run on the GPU machine: kda's chunked prefill
# (TF32 and 3×TF32 state pass), FLA's Triton chunk_kda and FlashKDA timed in one process by one rule,
# each checked against the fp64 recurrence (side_by_side.py says how).
#   KDA_FLA=DIR KDA_FLASHKDA=DIR kda/gpu/side_by_side.sh [side_by_side.py options, e.g. --quick]
# KDA_FLA: a directory holding FLA's `fla` package (a checkout of fla-org/flash-linear-attention).
# KDA_FLASHKDA: a directory holding FlashKDA's `flash_kda` package with its `flash_kda_C` extension
# built for this GPU (a checkout of MoonshotAI/FlashKDA with its cutlass submodule, then
# `python setup.py build_ext --inplace` per its README). Neither is part of this repository; a
# missing one is reported "not available" in the table and the rest still runs.
# Writes under $OUT (else build/side-by-side): side_by_side.{md,json,log}. Exit: as side_by_side.py.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-build/side-by-side}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1
python3 "$here/side_by_side.py" --self-test || exit 1
PYTHONUNBUFFERED=1 exec python3 "$here/side_by_side.py" --out "$out" "$@"
