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
echo "kda kernel end to end: 3 kernels, 2 diffs, 1 bad input: ok"
