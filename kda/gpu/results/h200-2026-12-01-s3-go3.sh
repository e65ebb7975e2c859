#!/usr/bin/env bash
# prefill2 (session 3), device call 3: what ncu's injection needs from the environment (why the kda
# subject crashes when ncu wraps `loupe probe run`), the workaround, and chunk_gpu's guards after
# the pinned accessor and the verify tolerance (T = 1024, and the two target shapes).
set -u
D=.devrun/p2
B=$PWD/$D/device
W=/tmp/w
mkdir -p $W
chmod +x $B/bin/*
T0=$(date +%s)
home=$(mktemp -d)
s() { echo "### $* ($(( $(date +%s) - T0 )) s)"; }
{
s ncu_env
env | cut -d= -f1 | sort > $W/env_plain.txt
timeout 20 ncu --clock-control none env 2>/dev/null | grep -v '^==' | cut -d= -f1 | sort > $W/env_ncu.txt
comm -13 $W/env_plain.txt $W/env_ncu.txt | tee $W/env_added.txt
timeout 20 ncu --clock-control none env 2>/dev/null | grep -E "^(LD_PRELOAD|CUDA_INJECTION64_PATH|NV_[A-Z_]*)=" | cut -c1-200
passes=()
for name in $(cat $W/env_added.txt); do passes+=(--env "$name"); done
echo "passing: ${passes[*]}"
s ncu_around_loupe_with_env
timeout 40 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 $B/bin/loupe probe run "${passes[@]}" --home $home --seed 26 chunk_gpu --set T=1024 --set H=16 --budget 0.3 -- $B/bin/kda probe; echo "### exit $?"
s chunk_gpu_guards
timeout 50 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --set T=1024 --set H=16,64 --budget 0.5 -- $B/bin/kda probe; echo "### exit $?"
s chunk_gpu_targets
timeout 80 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --zip T=8192,65536 --zip H=32,64 --budget 2 -- $B/bin/kda probe; echo "### exit $?"
s end
} > $W/call3.txt 2>&1
(cd $home && find . -name '*.ncu-rep' -prune -o -name '*.npy' -prune -o -type f -print | tar czf $W/home.tgz -T -) 2>/dev/null
tar czf $OUT/logs.tgz -C $W . 2>/dev/null
grep -vE "^\s*$" $W/call3.txt | grep -vE "observation:|reproduce:" | cut -c1-260 | tail -120
