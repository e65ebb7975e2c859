#!/usr/bin/env python3
"""`loupe diff --jsonl` against `--json` on many small tensors: how soon the first line arrives,
and the whole run's wall time of each, interleaved (json, jsonl, json, ...), best and median.

Writes two directories of N .npy pairs (default 10,000 float32 tensors of 64 elements; every
tenth pair differs) under --work, then times `loupe diff A B --json` and `--jsonl` with stdout
read through a pipe. The first-line latency is from the process's start to its first line of
output (for --json that is the whole run: it prints one envelope at the end).

    python3 python/bench/diff_jsonl_stream.py --loupe build/release/bin/loupe
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np


def write_dumps(root, count, elements):
    rng = np.random.default_rng(37)
    for side in ("a", "b"):
        os.makedirs(os.path.join(root, side), exist_ok=True)
    for index in range(count):
        reference = rng.standard_normal(elements).astype(np.float32)
        candidate = reference.copy()
        if index % 10 == 0:
            candidate[index % elements] += 1e-2
        np.save(os.path.join(root, "a", "t%05d.npy" % index), candidate)
        np.save(os.path.join(root, "b", "t%05d.npy" % index), reference)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """The process's user + system CPU time so far (/proc, clock-tick resolution)."""
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def timed(loupe, root, flag):
    """(wall s to the first line, CPU s to the first line, wall s to the end, CPU s to the end,
    lines) of one run. On a shared machine the CPU times are the figures that hold."""
    start = time.perf_counter()
    process = subprocess.Popen([loupe, "diff", os.path.join(root, "a"), os.path.join(root, "b"),
                                flag], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = process.stdout.readline()
    first_at = time.perf_counter() - start
    first_cpu = cpu_seconds(process.pid)
    lines = 1 if first else 0
    for _ in process.stdout:
        lines += 1
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return (first_at, first_cpu, time.perf_counter() - start, usage.ru_utime + usage.ru_stime,
            lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loupe", default="build/release/bin/loupe")
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--elements", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", default=None, help="where to write the dumps (a temp dir)")
    args = parser.parse_args()
    root = args.work or tempfile.mkdtemp(prefix="loupe_jsonl_")
    write_dumps(root, args.count, args.elements)
    results = {"--json": [], "--jsonl": []}
    for _ in range(args.repeats):
        for flag in results:
            results[flag].append(timed(args.loupe, root, flag))
    print("%d pairs of %d float32, load average %.2f" % (args.count, args.elements,
                                                          os.getloadavg()[0]))
    for flag, runs in results.items():
        column = list(zip(*runs))
        print("%-8s first line: wall median %.3f s (best %.3f), CPU median %.3f s; whole run: "
              "wall median %.3f s (best %.3f), CPU median %.3f s (best %.3f); %d lines" % (
                  flag, statistics.median(column[0]), min(column[0]),
                  statistics.median(column[1]), statistics.median(column[2]), min(column[2]),
                  statistics.median(column[3]), min(column[3]), runs[0][4]))
    for index, what in ((2, "wall"), (3, "CPU")):
        ratio = statistics.median(r[index] for r in results["--jsonl"]) / statistics.median(
            r[index] for r in results["--json"])
        print("jsonl / json whole-run %s median: %.3f" % (what, ratio))


if __name__ == "__main__":
    main()
