#!/usr/bin/env bash
# `kda kernel` end to end: files in, files out, checked by `loupe diff`, and bad input refused.
#   usage: kda_kernel_test.sh BIN_DIR WORK_DIR
set -euo pipefail
bin=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin/kda" generate --shape 1 256 1 1 64 64 --decay slow --seed 3 --out "$work/in" >/dev/null
"$bin/kda" kernel recurrent --in "$work/in" --out "$work/recurrent64" --dtype f64 >/dev/null
"$bin/kda" kernel chunk --in "$work/in" --out "$work/chunk32" --shards 4 >/dev/null
"$bin/kda" kernel cp --in "$work/in" --out "$work/cp_rz" --shards 4 --precision tf32_rz >/dev/null
for file in o.npy S.npy; do
  [[ -f "$work/chunk32/$file" ]] || fail "chunk wrote no $file"
done

# The fp32 chunked pass matches the fp64 token recurrence within FLA's bound.
"$bin/loupe" diff "$work/chunk32/o.npy" "$work/recurrent64/o.npy" --tol rms_ratio=5e-3 >/dev/null ||
  fail "chunk fp32 vs recurrent fp64 exceeded rms_ratio 5e-3"
# CP in truncated TF32 differs from the non-CP chunk pass at the shard starts, beyond fp32 noise.
set +e
"$bin/loupe" diff "$work/cp_rz/S_shard_starts.npy" "$work/chunk32/S_shard_starts.npy" \
  --tol rms_ratio=1e-5 >/dev/null
status=$?
set -e
[[ $status == 1 ]] || fail "cp tf32_rz vs chunk should exceed rms_ratio 1e-5 (exit 1), got exit $status"

# A beta.npy of the wrong shape: exit 2, naming the file and the expected shape.
cp "$work/in/q.npy" "$work/in/beta.npy"
set +e
message=$("$bin/kda" kernel chunk --in "$work/in" --out "$work/bad" 2>&1)
status=$?
set -e
[[ $status == 2 ]] || fail "a mis-shaped beta.npy should exit 2, got $status: $message"
[[ $message == *beta.npy* ]] || fail "the message should name beta.npy: $message"
[[ $message == *"expected (B,T,HV) = [1,256,1]"* ]] ||
  fail "the message should give the expected shape: $message"
# Regression (kda_kernel_decode_raw_inputs): `kda kernel decode` reaches the raw-input decode
# path the model and the probes run (sigmoid beta, softplus gate, L2-normalised q/k). The two
# variants agree on it, and reading the same files as log decay and beta gives other outputs.
"$bin/kda" generate --shape 2,6,2,2,32,32 --raw-decode --seed 5 --out "$work/raw" >/dev/null
[[ -f "$work/raw/a_log.npy" && -f "$work/raw/dt_bias.npy" ]] || fail "--raw-decode wrote no a_log/dt_bias"
for variant in tiled merged; do
  "$bin/kda" kernel decode --in "$work/raw" --out "$work/raw_$variant" --variant $variant \
    --gate softplus --beta sigmoid --l2norm >/dev/null
done
"$bin/loupe" diff "$work/raw_tiled/o.npy" "$work/raw_merged/o.npy" --tol rms_ratio=1e-6 >/dev/null ||
  fail "raw-input decode: tiled and merged disagree"
"$bin/kda" kernel decode --in "$work/raw" --out "$work/raw_as_given" --l2norm >/dev/null 2>&1 || true
if [[ -f "$work/raw_as_given/o.npy" ]]; then
  set +e
  "$bin/loupe" diff "$work/raw_merged/o.npy" "$work/raw_as_given/o.npy" --tol rms_ratio=1e-3 >/dev/null
  status=$?
  set -e
  [[ $status == 1 ]] || fail "--gate softplus --beta sigmoid should change decode's outputs"
fi
set +e
message=$("$bin/kda" kernel chunk --in "$work/raw" --out "$work/bad2" --gate softplus 2>&1)
status=$?
set -e
[[ $status == 2 && $message == *"decode only"* ]] || fail "--gate on chunk should exit 2: $message"
echo "kda kernel end to end: 3 kernels, raw decode, 3 diffs, 2 bad inputs: ok"
