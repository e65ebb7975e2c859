#!/usr/bin/env bash
# prefill2's last device call: pick the fastest correct build among v4d, v4c (fallback v4a, the
# bundled kda), then run the final stage on it. Everything under $OUT.
set -u
D=.devrun/prefill2
root=$PWD
best=v4a; best_t=999999
mkdir -p /tmp/b/v4a/bin && ln -sfn $root/$D/device/lib /tmp/b/v4a/lib
cp $D/device/bin/loupe $D/device/bin/kda /tmp/b/v4a/bin/
for v in v4d v4c; do
  mkdir -p /tmp/b/$v/bin && ln -sfn $root/$D/device/lib /tmp/b/$v/lib
  cp $D/device/bin/loupe /tmp/b/$v/bin/ && xz -dc $D/kda_$v.xz > /tmp/b/$v/bin/kda && chmod +x /tmp/b/$v/bin/kda
  OUT=$OUT/pick_$v bash $D/run_prefill.sh /tmp/b/$v pick > /dev/null 2>&1; rc=$?
  rm -f $OUT/pick_$v/observations.tgz
  t=$(grep -A1 "T=8192,H=32" $OUT/pick_$v/prefill.txt | grep -m1 "tf32: median" | awk '{print $3}')
  echo "PICK $v rc=$rc t8192=$t"
  grep -E "\[check\].*: (pass|fail)|tf32: median|intra: median|state: median|tf32x3: median" $OUT/pick_$v/prefill.txt
  if [[ $rc -eq 0 && -n "$t" ]] && python3 -c "import sys; sys.exit(0 if float('$t') < float('$best_t') else 1)"; then
    best=$v; best_t=$t
  fi
done
echo "CHOSEN $best ($best_t us)"
echo "$best" > $OUT/chosen.txt
OUT=$OUT/final BENCH_BUDGET=1 bash $D/run_prefill.sh /tmp/b/$best final > /dev/null 2>&1
echo "final exit $?"
grep -E "^### exit|\[check\].*: (pass|fail)|rms_ratio|tf32: median|intra: median|state: median|tf32x3: median|\[bench\]" $OUT/final/prefill.txt | cut -c1-200
