#!/usr/bin/env python3
"""In-process loupe.diff against the numpy a careful user writes for the same answer, side by
side in one run, on two fp32 arrays (default 256 MiB each, 64 Mi elements).

The same answer: the largest |a - b|, its index, and the rms ratio rms(a - b) / rms(b) with
float64 accumulation. loupe.diff computes that and every other metric (max_rel, cos_dist, ULP
max and p99, mismatch count against assert_close's tolerance, NaN/Inf disagreement) and the
worst coordinate, in one pass on one core. Each side runs --repeats times, interleaved (loupe,
numpy, loupe, numpy, ...); the best and the median are printed. Throughput counts the bytes of
both arrays once (what must be read at least). Both sides are single-threaded, so the process's
CPU time is the time on one core; it is the figure that holds on a shared machine (wall time is
printed beside it with the load average, and equals it on an idle core).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/release/python \\
        taskset -c 1 /usr/bin/python3 python/bench/diff_vs_numpy.py
"""

import argparse
import os
import statistics
import time

import numpy as np

import loupe


def numpy_answer(a, b):
    """What a careful user writes: float64 accumulation, so a large tensor's rms is not lost."""
    difference = a - b
    magnitude = np.abs(difference)
    flat = int(np.argmax(magnitude))
    index = np.unravel_index(flat, a.shape)
    max_abs = float(magnitude.flat[flat])
    rms_diff = np.sqrt(np.mean(np.square(difference, dtype=np.float64)))
    rms_b = np.sqrt(np.mean(np.square(b, dtype=np.float64)))
    return max_abs, tuple(int(i) for i in index), float(rms_diff / (rms_b + 1e-8))


def loupe_answer(a, b):
    result = loupe.diff(a, b)
    tensor = result.tensors[0]
    return tensor.metrics["max_abs"], result.worst.index, tensor.metrics["rms_ratio"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="size of each array in MiB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--candidate", choices=["ulps", "bf16"], default="ulps",
                        help="a within a few ULPs of b (a float32 kernel against its reference), "
                             "or b rounded to bfloat16 (ULP distances in the thousands: loupe's "
                             "exact p99 then needs its slower path, as diff_bench's Float32Pair)")
    args = parser.parse_args()
    count = args.mib * (1 << 20) // 4
    rng = np.random.default_rng(7)
    b = rng.standard_normal(count, dtype=np.float32)
    if args.candidate == "ulps":
        a = b * np.float32(1 + 2e-7)
    else:  # round to nearest even at bfloat16's 8 significant bits
        bits = b.view(np.uint32)
        a = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
             ).view(np.float32)
    a[count // 3] += 1e-2  # one outlier: the answer's index
    total_bytes = a.nbytes + b.nbytes

    answers = {"loupe": loupe_answer(a, b), "numpy": numpy_answer(a, b)}
    assert answers["loupe"][1] == answers["numpy"][1], answers
    assert abs(answers["loupe"][0] - answers["numpy"][0]) <= 1e-9, answers
    assert abs(answers["loupe"][2] / answers["numpy"][2] - 1) < 1e-6, answers

    cpu = {"loupe": [], "numpy": []}
    wall = {"loupe": [], "numpy": []}
    for _ in range(args.repeats):
        for name, function in (("loupe", loupe_answer), ("numpy", numpy_answer)):
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            function(a, b)
            cpu[name].append(time.process_time() - cpu_start)
            wall[name].append(time.perf_counter() - wall_start)
    print("two fp32 arrays of %d MiB each (%d elements), candidate %s; %d interleaved repeats; "
          "load average %.1f" % (args.mib, count, args.candidate, args.repeats,
                                 os.getloadavg()[0]))
    print("answer: max_abs %.6g at %s, rms_ratio %.6g (both agree)" % answers["loupe"])
    for name in ("loupe", "numpy"):
        best, median = min(cpu[name]), statistics.median(cpu[name])
        print("%-6s CPU best %.3f s (%.2f GB/s)  median %.3f s (%.2f GB/s);  wall best %.3f s "
              "(%.2f GB/s)" % (name, best, total_bytes / best / 1e9, median,
                               total_bytes / median / 1e9, min(wall[name]),
                               total_bytes / min(wall[name]) / 1e9))
    print("numpy / loupe, CPU time: best %.2fx, median %.2fx;  wall: best %.2fx" % (
        min(cpu["numpy"]) / min(cpu["loupe"]),
        statistics.median(cpu["numpy"]) / statistics.median(cpu["loupe"]),
        min(wall["numpy"]) / min(wall["loupe"])))


if __name__ == "__main__":
    main()
