#!/usr/bin/env bash
# prefill2 (session 3), device call 4: `ncu ... loupe probe run` with the allowlist fix (no --env),
# and chunk_gpu's guards with the smaller verified outputs (T = 1024 H = 16, 64; T = 65536 H = 64).
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
s ncu_around_loupe_allowlist
timeout 40 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --set T=1024 --set H=16 --budget 0.3 -- $B/bin/kda probe; echo "### exit $?"
s chunk_gpu_guards
timeout 60 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --zip T=1024,1024,65536 --zip H=16,64,64 --budget 1 -- $B/bin/kda probe; echo "### exit $?"
s end
} > $W/call4.txt 2>&1
tar czf $OUT/logs.tgz -C $W . 2>/dev/null
grep -vE "^\s*$" $W/call4.txt | grep -vE "observation:|reproduce:|^    |^ +-{5}" | cut -c1-260 | tail -80
