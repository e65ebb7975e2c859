#!/usr/bin/env bash
# prefill2 (session 3), device call 2: issue 24 on hardware again (pinned accessors, the cascade's
# counters entry, ncu around `loupe probe run`), then `kda_gpu --prefill` (issue 26's whole shape
# table against the fp64 recurrence). Logs into $OUT/logs.tgz, a summary on stdout.
set -u
D=.devrun/p2
B=$PWD/$D/device
W=/tmp/w
mkdir -p $W
chmod +x $B/bin/* $D/*.sh
T0=$(date +%s)
home=$(mktemp -d)
s() { echo "### $* ($(( $(date +%s) - T0 )) s)"; }
s prefill_table | tee -a $W/counters2.txt
timeout 180 $B/bin/kda_gpu --prefill --seed 26 --json $W/prefill.json > $W/prefill_table.txt 2>&1
echo "### kda_gpu exit $? ($(( $(date +%s) - T0 )) s)" >> $W/prefill_table.txt
{
s attach
timeout 70 $B/bin/loupe probe run --home $home --seed 26 decode_gpu --counters merged_v_decode --counters-launches 3 -- $B/bin/kda probe; echo "### exit $?"
s chunk_gpu_small
timeout 50 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --set T=1024 --set H=16,64 --budget 0.5 -- $B/bin/kda probe; echo "### exit $?"
s ncu_around_loupe
timeout 50 ncu --clock-control none --kernel-name regex:chunk_intra --launch-count 1 $B/bin/loupe probe run --home $home --seed 26 chunk_gpu --set T=1024 --set H=16 --budget 0.3 -- $B/bin/kda probe; echo "### exit $?"
s cascade
mkdir -p $W/obj && cat > $W/obj/counters.toml <<TOML
name = "counters-entry"
[subject]
command = ["$B/bin/kda", "probe"]
timeout_s = 300
[[bench]]
probe = "decode_gpu"
variants = ["tiled", "merged"]
params = { batch = 32, H = 64, state = "cold", graph = false }
counters = { kernel = "merged_v_decode", launches = 2 }
seed = 26
[[gate]]
name = "merged_faster"
expr = "decode_gpu[merged] FASTER than decode_gpu[tiled]"
TOML
timeout 80 $B/bin/loupe run $W/obj/counters.toml --home $home; echo "### exit $?"
find $home/runs -path '*decode_gpu*counters*' -name '*.csv' | head; 
} > $W/counters2.txt 2>&1
(cd $home && find . -name '*.ncu-rep' -prune -o -name '*.npy' -prune -o -type f -print | tar czf $W/home.tgz -T -) 2>/dev/null

tar czf $OUT/logs.tgz -C $W . 2>/dev/null
grep -E "^###|fail |FAIL|deferred|counters \(ncu|bound:|and now|; merged is|SIGSEGV|Segmentation|==ERROR==|signal|gate|merged_faster" $W/counters2.txt | cut -c1-300
cat $W/prefill_table.txt | cut -c1-260
