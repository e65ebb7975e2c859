#!/usr/bin/env bash
# prefill2 (session 3), device call 1: issue 26's T = 65536 checks (H = 16, 32, 64 side by side)
# and issue 24's ncu runs, at once; everything into $OUT/logs.tgz plus a summary on stdout.
set -u
D=.devrun/p2
B=$D/device
W=/tmp/w
mkdir -p $W
chmod +x $B/bin/* $D/*.sh
T0=$(date +%s)
nproc; free -g | head -2; df -h /tmp | tail -1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv
(OUT=$W/prefill bash $D/run_prefill.sh $B large > $W/prefill_main.txt 2>&1; echo "large exit $? at $(( $(date +%s) - T0 ))" >> $W/prefill_main.txt) &
PL=$!
(OUT=$W/counters bash $D/run_counters.sh $B attach quick prefill fork > $W/counters_main.txt 2>&1; echo "counters exit $? at $(( $(date +%s) - T0 ))" >> $W/counters_main.txt) &
PC=$!
(while sleep 15; do echo "--- $(( $(date +%s) - T0 ))"; ps -eo pid,ppid,etimes,times,rss,pcpu,args --sort=start_time | grep -E 'kda|loupe|ncu' | grep -v grep | cut -c1-220; free -g | sed -n 2p; df -h /tmp | tail -1; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader; done > $W/ps.txt 2>&1) &
PS=$!
while (( $(date +%s) - T0 < ${DEADLINE:-555} )); do
  if ! kill -0 $PL 2>/dev/null && ! kill -0 $PC 2>/dev/null; then break; fi
  sleep 5
done
kill $PS 2>/dev/null
echo "stopped waiting at $(( $(date +%s) - T0 )) s"
tar czf $OUT/logs.tgz -C $W . 2>/dev/null
cat $W/prefill_main.txt $W/counters_main.txt
grep -hE "^### |: (pass|fail)|rms_ratio|oracle|wall|error|Error|SIGSEGV|signal" $W/prefill/large_h*.txt 2>/dev/null | cut -c1-220
for f in attach quick prefill fork; do echo "===== $f"; grep -vE "^\s*$" $W/counters/$f.txt 2>/dev/null | cut -c1-300 | tail -40; done
