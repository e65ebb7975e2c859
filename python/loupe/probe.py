"""Probes in Python: ``@loupe.check``, ``@loupe.bench``, ``@loupe.scenario`` and
``loupe.subject_main()`` — what include/loupe/probe.hpp and src/subject do for a C++ subject.

A module declares probes with the decorators (they register at import, as LOUPE_CHECK does at
static initialisation) and ends with ``sys.exit(loupe.subject_main())``. The command line is
the one loupe::subject_main gives a C++ subject (docs/formats.md, "Subject command line"):

    subject.py list [--json]
    subject.py run PROBE [--set NAME=VALUE ...] [--seed N] [--hidden | --hidden-point I]
                   [--repeat N] [--precision P] [--budget SECONDS] --out DIR [--json]

`run` writes DIR/observation.json, .npy tensors and samples.json in the schema src/probe/analyze.cpp
reads. Like the C++ runtime it only observes and records, next to the candidate: both orders of
a check, NaN-poisoned outputs, input checksums, a second seed for the reference, fresh inputs per
timed call, interleaved blocks, verification of timed calls, the roofline of a CPU bench, the
hidden point a `--hidden` run draws in secret. Everything that decides runs in
`loupe` from these files. Exit 0 once observation.json is written, 2 for a bad request (unknown
probe, option or parameter), 3 when a probe body fails.
"""

import datetime
import hashlib
import json
import math
import os
import platform
import random
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

MASK64 = (1 << 64) - 1
USAGE = (
    "usage: SUBJECT list [--json]\n"
    "       SUBJECT run PROBE [--set NAME=VALUE ...] [--seed N] [--hidden | --hidden-point I]\n"
    "                   [--repeat N]\n"
    "                   [--precision P] [--budget SECONDS] --out DIR [--json]"
)


class ProbeRequestError(Exception):
    """A request the subject refuses (exit 2) or a probe failure (exit 3), with a hint."""

    def __init__(self, code, message, hint=""):
        super().__init__(message)
        self.code = code  # "usage" or "subject"
        self.message = message
        self.hint = hint


def derive_seed(seed, stream):
    """splitmix64, as src/subject/environment.cpp: every seed follows from the recorded one."""
    z = (seed + 0x9E3779B97F4A7C15 * (stream + 1)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def checksum(array):
    """FNV-1a over 8-byte little-endian words, then the tail bytes, xor the size (guards.cpp)."""
    data = np.ascontiguousarray(array).tobytes()
    words = len(data) // 8
    value = 0xCBF29CE484222325
    prime = 0x100000001B3
    for word in np.frombuffer(data[: words * 8], dtype="<u8").tolist():
        value = ((value ^ word) * prime) & MASK64
    for byte in data[words * 8 :]:
        value = ((value ^ byte) * prime) & MASK64
    return "%016x" % (value ^ len(data))


# --- parameters ----------------------------------------------------------------------------


class Param:
    """One named parameter: its default fixes the type (bool, int, float, string); ``allowed``
    limits the values ``--set`` accepts.

    Example::

        loupe.Param("accumulate", "fp32", ["fp32", "fp16"], "precision of the sum of squares")
    """

    def __init__(self, name, default, allowed=(), description=""):
        self.name = name
        self.default = default
        self.allowed = list(allowed)
        self.description = description

    @property
    def type_name(self):
        if isinstance(self.default, bool):
            return "bool"
        if isinstance(self.default, int):
            return "int"
        if isinstance(self.default, float):
            return "float"
        return "string"

    def parse(self, text):
        kind = self.type_name
        try:
            if kind == "bool":
                if text not in ("true", "false"):
                    raise ValueError
                value = text == "true"
            elif kind == "int":
                value = int(text, 10)
            elif kind == "float":
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ProbeRequestError(
                "usage",
                "parameter '%s' is %s, but '%s' is not one" % (self.name, kind, text),
                "pass --set %s=%s" % (self.name, json.dumps(self.default)),
            )
        if self.allowed and value not in self.allowed:
            raise ProbeRequestError(
                "usage",
                "parameter '%s' = %s is not allowed; the allowed values are %s"
                % (self.name, text, ", ".join(json.dumps(v) for v in self.allowed)),
                "run `list` to see every probe and its parameters",
            )
        return value

    def to_json(self):
        entry = {
            "name": self.name,
            "type": self.type_name,
            "default": self.default,
            "allowed": self.allowed,
        }
        if self.description:
            entry["description"] = self.description
        return entry


def value_type_name(value):
    """The declared type a Python value stands for (Param.type_name of a default)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "string" if isinstance(value, str) else type(value).__name__


def check_hidden_points(name, params, points):
    """Hidden points as a list of dicts, each naming declared parameters with values of their
    declared type (src/subject/params.cpp refuses the same at run time; here the declaration
    fails at import, where the author sees it)."""
    from ._errors import UsageError

    declared = {param.name: param for param in params}
    out = []
    for index, point in enumerate(points):
        if not isinstance(point, dict) or not point:
            raise UsageError("probe '%s': hidden point %d is %r; expected a non-empty dict "
                             "{parameter: value}" % (name, index, point),
                             "for example hidden_points=[{\"N\": 777}]")
        for key, value in point.items():
            if key not in declared:
                raise UsageError("probe '%s': hidden point %d sets '%s', which is not a "
                                 "parameter; its parameters are %s"
                                 % (name, index, key, ", ".join(declared) or "none"),
                                 "declare the parameter in params= first")
            if value_type_name(value) != declared[key].type_name:
                raise UsageError("probe '%s': hidden point %d sets '%s' to %r, a %s; the "
                                 "parameter is %s" % (name, index, key, value,
                                                      value_type_name(value),
                                                      declared[key].type_name),
                                 "give the value the type of the parameter's default")
        out.append(dict(point))
    return out


def resolve_point(probe, sets, hidden_point=None):
    """The full point in declaration order from NAME=VALUE texts, then the hidden point's values
    over them (those may leave the allowed sets: that is their purpose)."""
    given = {}
    names = [param.name for param in probe.params]
    for text in sets:
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise ProbeRequestError("usage", "--set '%s': expected NAME=VALUE" % text, USAGE)
        if name not in names:
            raise ProbeRequestError(
                "usage",
                "probe '%s' has no parameter '%s'; its parameters are %s"
                % (probe.name, name, ", ".join(names) or "none"),
                "run `list` to see every probe and its parameters",
            )
        if name in given:
            raise ProbeRequestError("usage", "parameter '%s' is set twice" % name, USAGE)
        given[name] = value
    point = {}
    for param in probe.params:
        point[param.name] = param.parse(given[param.name]) if param.name in given else param.default
    if hidden_point is not None:
        point.update(hidden_point)
    return point


# --- probes --------------------------------------------------------------------------------


class Output:
    """A check output: dtype, shape, axis names, the axis its error profile follows, tolerances
    (metric, bound) on metric(candidate, reference).

    Example::

        loupe.Output("y", np.float32, (T, D), ["T", "D"], along="T",
                     tolerances=[("rms_ratio", 1e-5)])
    """

    def __init__(self, name, dtype, shape, axes, along="", tolerances=()):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(extent) for extent in shape)
        self.axes = list(axes)
        self.along = along
        self.tolerances = list(tolerances)


class Check:
    """inputs(point, rng) -> {name: (array, axes)}; outputs(point) -> [Output];
    reference/candidate(point, inputs, out) write into the arrays of `out`;
    oracle(point, inputs) -> {name: float64 array} or None."""

    kind = "check"

    def __init__(self, name, description, params, inputs, outputs, reference, candidate,
                 oracle=None, hidden_points=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.description = description
        self.params = params
        self.inputs = inputs
        self.outputs = outputs
        self.reference = reference
        self.candidate = candidate
        self.oracle = oracle


class Bench:
    """make(point, seed) -> work (a fresh input set); variants: [(name, call(work))];
    outputs(work) -> {name: array} for verification; bytes_per_call(point) for throughput."""

    kind = "bench"

    def __init__(self, name, description, params, make, variants, outputs=None,
                 bytes_per_call=None, timer="cpu", hidden_points=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.description = description
        self.params = params
        self.make = make
        self.variants = variants
        self.outputs = outputs
        self.bytes_per_call = bytes_per_call
        self.timer = timer  # "cpu" (perf_counter) or "cuda" (CUDA events on torch's stream)


class CudaEventClock:
    """Times CUDA work with events on torch's current stream, as src/bench/cuda does for C++:
    the device is synchronised before the start event, L2 is flushed (a write of twice its size)
    before each sample so every sample starts cold, and the device's own copy rate is measured
    for the roofline guard. NOT RUN ON A GPU in this repository's CI (CPU-only torch there)."""

    def __init__(self):
        import torch

        if not torch.cuda.is_available():
            raise ProbeRequestError("usage", "bench timer 'cuda': torch sees no CUDA device",
                                    "run on a machine with a GPU, or use timer='cpu'")
        self.torch = torch
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.device = properties.name
        l2_bytes = int(getattr(properties, "L2_cache_size", 0) or (64 << 20))
        self.flush_buffer = torch.empty(2 * l2_bytes // 4, dtype=torch.float32, device="cuda")
        self.copy_bytes_per_s = self._copy_rate()

    def _copy_rate(self):
        torch = self.torch
        source = torch.empty(256 << 18, dtype=torch.float32, device="cuda")  # 256 MiB
        target = torch.empty_like(source)
        best = float("inf")
        for _ in range(5):
            best = min(best, self.elapsed(lambda: target.copy_(source), flush=False))
        return source.numel() * 4 / best

    def elapsed(self, run, flush=True):
        torch = self.torch
        if flush:
            self.flush_buffer.zero_()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def roofline(self):
        # As src/bench/cuda's Timer::ceiling: beyond 4x the device's own copy rate is impossible.
        return {"device": self.device, "read_bytes_per_s": self.copy_bytes_per_s,
                "read_margin": 4.0, "hardware_threads": 1, "flops_per_s": 0.0}


class Scenario:
    """body(point, seed, out_dir) -> ({metric: number}, [(relative path, kind)]). The runtime
    records wall_s around the body unless the body reports it."""

    kind = "scenario"

    def __init__(self, name, description, params, body, hidden_points=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.description = description
        self.params = params
        self.body = body


# --- observation files -----------------------------------------------------------------------


class ObservationFiles:
    """Writes tensors once (identical dtype, shape and bytes share a file) and lists every file."""

    def __init__(self, directory):
        self.dir = directory
        self.listing = []
        self._written = {}

    def write_tensor(self, stem, array):
        array = np.ascontiguousarray(array)
        key = (array.dtype.str, array.shape, hashlib.sha256(array.tobytes()).hexdigest())
        if key in self._written:
            return self._written[key]
        path = stem + ".npy"
        full = os.path.join(self.dir, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        np.save(full, array, allow_pickle=False)
        self._written[key] = path
        self.listing.append(
            {"path": path, "kind": "tensor", "dtype": array.dtype.name, "shape": list(array.shape)}
        )
        return path

    def add(self, path, kind):
        self.listing.append({"path": path, "kind": kind})


POISON = {
    np.dtype(np.float32): np.array([0x7FC0DEAD], dtype=np.uint32).view(np.float32)[0],
    np.dtype(np.float64): np.array([0x7FF8DEADDEADDEAD], dtype=np.uint64).view(np.float64)[0],
}


def poisoned_buffer(output):
    buffer = np.empty(output.shape, dtype=output.dtype)
    buffer.fill(POISON[output.dtype] if output.dtype in POISON else -1)
    return buffer


def count_poisoned(output, buffer):
    if output.dtype not in POISON:
        return 0
    width = np.uint32 if output.dtype.itemsize == 4 else np.uint64
    poison = np.array([POISON[output.dtype]], dtype=output.dtype).view(width)[0]
    return int(np.count_nonzero(buffer.view(width) == poison))


# --- checks --------------------------------------------------------------------------------


def run_check(probe, point, seed, files, repeat):
    guards = {"input_mutation": [], "output_unwritten": [], "output_alias": []}
    outputs = probe.outputs(point)

    def make_inputs(input_seed):
        return probe.inputs(point, np.random.default_rng(input_seed))

    inputs = make_inputs(seed)
    checksums = {name: checksum(array) for name, (array, _) in inputs.items()}
    plain = {name: array for name, (array, _) in inputs.items()}

    def call(pass_name, path, function):
        out = {output.name: poisoned_buffer(output) for output in outputs}
        function(point, plain, out)
        for name, (array, _) in inputs.items():
            after = checksum(array)
            if after != checksums[name]:
                guards["input_mutation"].append(
                    {"pass": pass_name, "path": path, "input": name,
                     "checksum_before": checksums[name], "checksum_after": after}
                )
                inputs[name] = (make_inputs(seed)[name][0], inputs[name][1])
                plain[name] = inputs[name][0]
        for output in outputs:
            poisoned = count_poisoned(output, out[output.name])
            if poisoned:
                guards["output_unwritten"].append(
                    {"pass": pass_name, "path": path, "output": output.name,
                     "poisoned": poisoned, "numel": int(out[output.name].size)}
                )
        return out

    def record(pass_name, path, out, stem):
        written = {o.name: files.write_tensor(stem + "." + o.name, out[o.name]) for o in outputs}
        return {"pass": pass_name, "path": path, "outputs": written,
                "bound": {o.name: False for o in outputs}}

    runs = []
    # Both orders: a candidate whose output depends on running first is caught by loupe.
    candidate = call("candidate_first", "candidate", probe.candidate)
    runs.append(record("candidate_first", "candidate", candidate, "candidate_first/candidate"))
    reference = call("candidate_first", "reference", probe.reference)
    runs.append(record("candidate_first", "reference", reference, "candidate_first/reference"))
    reference = call("reference_first", "reference", probe.reference)
    runs.append(record("reference_first", "reference", reference, "reference_first/reference"))
    candidate = call("reference_first", "candidate", probe.candidate)
    runs.append(record("reference_first", "candidate", candidate, "reference_first/candidate"))
    if probe.oracle is not None:
        oracle = probe.oracle(point, plain)
        written = {o.name: files.write_tensor("oracle/" + o.name, np.asarray(oracle[o.name]))
                   for o in outputs}
        runs.append({"pass": "oracle", "path": "oracle", "outputs": written,
                     "bound": {o.name: False for o in outputs}})

    section = {
        "inputs": [
            {"name": name, "dtype": array.dtype.name, "shape": list(array.shape), "axes": axes,
             "checksum": checksums[name]}
            for name, (array, axes) in inputs.items()
        ],
        "outputs": [
            {"name": o.name, "dtype": o.dtype.name, "shape": list(o.shape), "axes": o.axes,
             "profile_axis": o.along,
             "tolerances": [{"metric": metric, "bound": bound, "relative_to_oracle": False}
                            for metric, bound in o.tolerances]}
            for o in outputs
        ],
        "has_oracle": probe.oracle is not None,
        "runs": runs,
    }

    # The reference on a second seed's inputs: a reference that ignores its inputs cannot
    # discriminate a wrong candidate.
    alt_seed = derive_seed(seed, 1)
    alt_inputs = {name: array for name, (array, _) in make_inputs(alt_seed).items()}
    alt_out = {output.name: poisoned_buffer(output) for output in outputs}
    probe.reference(point, alt_inputs, alt_out)
    section["alt_seed"] = {
        "seed": alt_seed,
        "outputs": {o.name: files.write_tensor("alt_seed/reference." + o.name, alt_out[o.name])
                    for o in outputs},
    }
    if repeat > 0:
        repeats = []
        for index in range(repeat):
            out = call("repeat", "candidate", probe.candidate)
            repeats.append({o.name: files.write_tensor(
                "repeat/%d.candidate.%s" % (index + 1, o.name), out[o.name]) for o in outputs})
        section["repeat"] = {"count": repeat, "outputs": repeats}
    section["guards"] = guards
    return section


# --- benches -------------------------------------------------------------------------------


def thread_count():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def median_relative_half_width(samples):
    """The sign-test interval of the median (order statistics, normal approximation of the
    ranks), as src/bench/stopping.cpp decides when to stop: (high - low) / 2 / median."""
    n = len(samples)
    if n < 2:
        return math.inf
    ordered = sorted(samples)
    center = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    spread = 1.959964 * math.sqrt(n) / 2
    low = ordered[max(0, int(math.floor(n / 2 - spread)))]
    high = ordered[min(n - 1, int(math.ceil(n / 2 + spread)) - 1)]
    return math.inf if center <= 0 else (high - low) / 2 / center


def minimum_detectable_effect(half_width):
    return half_width * (1.959964 + 0.841621) / 1.959964  # 95 % confidence, 80 % power


def cpu_roofline(bytes_per_call):
    """What one thread of this machine reads, measured next to the bench as src/subject's
    BenchRunner::measure_roofline does: the best of 7 streaming reads (numpy's vectorised sum)
    of a just-written buffer of bytes_per_call bytes (at most 1 GiB), as make() leaves its
    inputs. `loupe` fails guard.roofline for a variant claiming more than hardware_threads x 16
    times this rate: the timed call cannot be doing the declared work."""
    size = int(min(bytes_per_call, 1 << 30))
    buffer = np.empty(max(size // 8, 64), dtype=np.uint64)
    best = 0.0
    for attempt in range(7):
        buffer.fill(attempt * 0x9E3779B9 + 1)
        start = time.perf_counter()
        buffer.sum()
        seconds = time.perf_counter() - start
        if seconds > 0:
            best = max(best, buffer.nbytes / seconds)
    return {"method": "one thread: best of 7 numpy sums of a just-written uint64 buffer of "
                      "bytes_per_call bytes",
            "hardware_threads": max(1, os.cpu_count() or 1),
            "read_working_set_bytes": size, "read_bytes_per_s": best}


def run_bench(probe, point, seed, files, precision, budget_s):
    rng = random.Random(derive_seed(seed, 2))
    next_work = [0]

    clock = CudaEventClock() if getattr(probe, "timer", "cpu") == "cuda" else None

    def time_calls(variant, calls):
        seeds = []
        works = []
        for _ in range(calls):  # fresh inputs per timed call, built before the clock starts
            seeds.append(derive_seed(seed, 1000 + next_work[0]))
            next_work[0] += 1
            works.append(probe.make(point, seeds[-1]))
        function = probe.variants[variant][1]
        if clock is not None:
            elapsed = clock.elapsed(lambda: [function(work) for work in works])
        else:
            start = time.perf_counter()
            for work in works:
                function(work)
            elapsed = time.perf_counter() - start
        chosen = derive_seed(seeds[-1], 3) % calls  # any call of the batch may be verified
        return elapsed, seeds[chosen], works[chosen]

    names = [name for name, _ in probe.variants]
    samples = {name: [] for name in names}
    before = {name: [] for name in names}
    after = {name: [] for name in names}
    verified_counts = {name: 0 for name in names}
    verified = []

    def verify(variant, work_seed, work, index):
        name = names[variant]
        fresh = probe.make(point, work_seed)
        probe.variants[variant][1](fresh)
        stem = "verify/%s.%d" % (name, index)
        timed = {k: files.write_tensor(stem + ".timed." + k, v)
                 for k, v in probe.outputs(work).items()}
        untimed = {k: files.write_tensor(stem + ".untimed." + k, v)
                   for k, v in probe.outputs(fresh).items()}
        verified.append({"variant": name, "sample": index, "seed": work_seed,
                         "timed": timed, "untimed": untimed})
        verified_counts[name] += 1

    warmup_start = time.perf_counter()
    warmup_budget = min(0.5, 0.1 * budget_s)
    call_times = []
    make_seconds = 0.0
    makes = 0
    for variant in range(len(names)):
        variant_start = time.perf_counter()
        call = 0
        while call < 2 or time.perf_counter() - variant_start < warmup_budget / len(names):
            before_make = time.perf_counter()
            seconds, _, _ = time_calls(variant, 1)
            make_seconds += time.perf_counter() - before_make - seconds
            makes += 1
            call_times.append(seconds)
            call += 1
            if call > 1000:
                break
    call_times.sort()
    typical_call = call_times[len(call_times) // 2]
    typical_make = make_seconds / max(makes, 1)
    by_time = math.ceil(1e-3 / typical_call) if typical_call > 0 else 1e4
    by_inputs = math.floor(0.05 * budget_s / typical_make) if typical_make > 0 else 1e4
    calls_per_sample = int(min(max(min(by_time, by_inputs), 1), 10000))
    warmup_s = time.perf_counter() - warmup_start

    # Rounds, as the C++ runtime times them (src/subject/bench_runner.cpp): each round times one
    # batch of every variant, back to back, in an order drawn once and reversed every round (AB,
    # BA, AB, ...); the batches chosen for verification are verified after the round's last one,
    # so nothing but batches runs between a round's samples. Each sample carries its round
    # (samples.json `rounds`), so loupe compares the variants paired by round (the median of the
    # per-round ratios: load lasting longer than a round cancels in each ratio), and with two
    # variants or more the stopping rule decides on that same median.
    min_samples = 10
    forced_verify_at = {name: rng.randrange(min_samples) for name in names}
    rounds = {name: [] for name in names}
    order = list(range(len(names)))
    rng.shuffle(order)
    block_orders = []
    sampling_start = time.perf_counter()
    round_index = 0
    while True:
        if round_index > 0:
            order.reverse()
        block_orders.append(list(order))
        pending = []
        for variant in order:
            name = names[variant]
            threads = thread_count()
            elapsed, work_seed, work = time_calls(variant, calls_per_sample)
            before[name].append(threads)
            after[name].append(thread_count())
            samples[name].append(elapsed / calls_per_sample)
            rounds[name].append(round_index)
            index = len(samples[name]) - 1
            chosen = index == forced_verify_at[name] or rng.randrange(16) == 0
            if probe.outputs is not None and chosen and verified_counts[name] < 3:
                pending.append((variant, work_seed, work, index))
        for variant, work_seed, work, index in pending:
            verify(variant, work_seed, work, index)
        round_index += 1
        if len(names) == 1:
            widths = [median_relative_half_width(samples[names[0]])]
        else:
            # Every round holds one sample of each variant: the i-th samples share a round.
            widths = [median_relative_half_width(
                [b / a for a, b in zip(samples[names[0]], samples[name]) if a > 0])
                for name in names[1:]]
        n = min(len(values) for values in samples.values())
        elapsed = time.perf_counter() - warmup_start  # the budget includes the warm-up
        if n >= min_samples and all(width <= precision for width in widths):
            stop_reason = "precision_reached"
        elif elapsed >= budget_s:
            stop_reason = "budget_spent"
        elif n >= 100000:
            stop_reason = "sample_cap_reached"
        else:
            continue
        break
    sampling_s = time.perf_counter() - sampling_start
    if probe.outputs is not None:
        for variant, name in enumerate(names):
            if verified_counts[name] == 0:
                _, work_seed, work = time_calls(variant, calls_per_sample)
                verify(variant, work_seed, work, len(samples[name]) - 1)

    with open(os.path.join(files.dir, "samples.json"), "w") as out:
        json.dump({"unit": "seconds_per_call", "calls_per_sample": calls_per_sample,
                   "variants": [{"name": name, "samples": samples[name], "rounds": rounds[name],
                                 "threads_before": before[name], "threads_after": after[name]}
                                for name in names],
                   "block_orders": block_orders}, out)
    files.add("samples.json", "samples")
    section = {
        "skipped": None,
        "executed": True,
        "timer": "cuda_events" if clock is not None else "python_perf_counter",
        "bytes_per_call": float(probe.bytes_per_call(point)) if probe.bytes_per_call else 0.0,
        "flops_per_call": 0.0,
        "precision": precision,
        "budget_s": budget_s,
        "calls_per_sample": calls_per_sample,
        "warmup_s": warmup_s,
        "sampling_s": sampling_s,
        "stop_reason": stop_reason,
        # JSON has no infinity: a width the samples cannot define (fewer than two: the budget
        # ended sampling after one round) is null, as the C++ runtime writes it. (Written as
        # inf, the observation could not be written at all: the subject failed.)
        "stop_relative_half_width": [w if math.isfinite(w) else None for w in widths],
        "stop_minimum_detectable_effect": [minimum_detectable_effect(w) if math.isfinite(w)
                                           else None for w in widths],
        "variants": names,
        "samples_file": "samples.json",
        "verify_tolerance": {"metric": "rms_ratio", "bound": 1e-6},
        "verified": verified,
    }
    if clock is not None:
        section["roofline"] = clock.roofline()
    elif section["bytes_per_call"] > 0:
        section["roofline"] = cpu_roofline(section["bytes_per_call"])
    else:
        section["roofline"] = None  # nothing declared: nothing to bound (as the C++ runtime)
    return section


# --- scenarios -----------------------------------------------------------------------------


def run_scenario(probe, point, seed, files):
    start = time.perf_counter()
    metrics, written = probe.body(point, seed, files.dir)
    wall = time.perf_counter() - start
    metrics = dict(metrics)
    metrics.setdefault("wall_s", wall)
    traces = []
    for path, kind in written:
        if not os.path.exists(os.path.join(files.dir, path)):
            raise ProbeRequestError("subject", "scenario '%s' declares file '%s' but did not write it"
                               % (probe.name, path))
        files.add(path, kind)
        if kind == "trace":
            traces.append(path)
    return {"metrics": metrics, "traces": traces}


# --- the command line ----------------------------------------------------------------------


def environment():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    os_name = "unknown"
    try:
        with open("/etc/os-release") as release:
            for line in release:
                if line.startswith("PRETTY_NAME="):
                    os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    uname = os.uname()
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "os": os_name,
        "kernel": "%s %s %s" % (uname.sysname, uname.release, uname.machine),
        "hostname": socket.gethostname(),
        "compiler": "CPython %s, numpy %s" % (platform.python_version(), np.__version__),
        "build_type": "python",
    }


def list_json(program, probes):
    return {
        "subject": os.path.basename(program),
        "probes": [
            {"name": probe.name, "kind": probe.kind, "description": probe.description,
             "params": [param.to_json() for param in probe.params],
             "has_oracle": getattr(probe, "oracle", None) is not None,
             # Only how many: the points are revealed in the observation of a hidden run.
             "hidden_points": len(probe.hidden_points)}
            for probe in probes
        ],
    }


def positive(flag, text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ProbeRequestError("usage", "%s '%s': expected a positive number" % (flag, text))
    return value


def unsigned(flag, text):
    if not text.isdigit():
        raise ProbeRequestError("usage", "%s '%s': expected a non-negative integer" % (flag, text))
    return int(text)


def run_command(program, args, probes):
    names = ", ".join(probe.name for probe in probes)
    if len(args) < 2 or args[1].startswith("--"):
        raise ProbeRequestError("usage", "run: expected a probe name; the probes are: " + names, USAGE)
    matches = [probe for probe in probes if probe.name == args[1]]
    if not matches:
        raise ProbeRequestError("usage", "no probe named '%s'; the probes are: %s" % (args[1], names),
                           "run `list` to see every probe and its parameters")
    probe = matches[0]
    sets, seed, out_dir = [], None, None
    hidden, hidden_index = False, None
    repeat, precision, budget_s = 0, 0.01, 2.0
    index = 2
    while index < len(args):
        flag = args[index]
        takes_value = flag in ("--set", "--seed", "--out", "--hidden-point", "--repeat",
                               "--precision", "--budget")
        if takes_value and index + 1 >= len(args):
            raise ProbeRequestError("usage", flag + " needs a value", USAGE)
        value = args[index + 1] if takes_value else None
        if flag == "--set":
            sets.append(value)
        elif flag == "--seed":
            seed = unsigned(flag, value)
        elif flag == "--out":
            out_dir = value
        elif flag == "--hidden":
            hidden = True
        elif flag == "--hidden-point":
            hidden_index = unsigned(flag, value)
            if hidden_index >= len(probe.hidden_points):
                raise ProbeRequestError(
                    "usage", "--hidden-point %d: probe '%s' has %d hidden points"
                    % (hidden_index, probe.name, len(probe.hidden_points)),
                    "hidden points are numbered from 0, as in a hidden run's observation")
            hidden = True
        elif flag == "--repeat":
            repeat = min(unsigned(flag, value), 1000)
        elif flag == "--precision":
            precision = positive(flag, value)
        elif flag == "--budget":
            budget_s = positive(flag, value)
        elif flag != "--json":
            raise ProbeRequestError(
                "usage",
                "run: unknown option '%s'; the options are --set, --seed, --hidden, "
                "--hidden-point, --repeat, --precision, --budget, --out, --json" % flag, USAGE)
        index += 2 if takes_value else 1
    if out_dir is None:
        raise ProbeRequestError("usage", "run: --out DIR is required", USAGE)
    # The secret: the seed (and hidden point) the candidate's author cannot know in advance.
    secret = random.SystemRandom().getrandbits(64)
    hidden_json, hidden_point = None, None
    if hidden and probe.hidden_points:  # --hidden on a probe without hidden points: a plain run
        index = hidden_index if hidden_index is not None else secret % len(probe.hidden_points)
        hidden_point = probe.hidden_points[index]
        hidden_json = {"index": index, "of": len(probe.hidden_points),
                       "point": dict(hidden_point)}
    point = resolve_point(probe, sets, hidden_point)
    seed_source = "given" if seed is not None else "drawn"
    if seed is None:
        seed = derive_seed(secret, 7)

    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as error:
        raise ProbeRequestError("subject", "cannot create the observation directory %s: %s"
                           % (out_dir, error))
    files = ObservationFiles(out_dir)
    observation = {
        "loupe_observation": 1,
        "subject": os.path.basename(program),
        "probe": probe.name,
        "kind": probe.kind,
        "params": point,
        "seed": seed,
        "seed_source": seed_source,
        "hidden": hidden_json,
        "argv": [program] + list(args),
        "started_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "environment": environment(),
    }
    start = time.perf_counter()
    try:
        if probe.kind == "check":
            section = run_check(probe, point, seed, files, repeat)
        elif probe.kind == "bench":
            section = run_bench(probe, point, seed, files, precision, budget_s)
        else:
            section = run_scenario(probe, point, seed, files)
    except ProbeRequestError:
        raise
    except Exception as error:  # a probe body failed: the subject's failure, exit 3
        raise ProbeRequestError("subject", "probe '%s' failed: %s: %s"
                           % (probe.name, type(error).__name__, error))
    observation["wall_s"] = time.perf_counter() - start
    observation["metrics"] = section["metrics"] if probe.kind == "scenario" else {}
    observation[probe.kind] = section
    observation["files"] = files.listing
    observation["findings"] = []
    observation["stderr_tail"] = None
    path = os.path.join(out_dir, "observation.json")
    with open(path, "w") as out:
        json.dump(observation, out, indent=1, allow_nan=False)
        out.write("\n")
    return path, seed, seal_of(out_dir)


def seal_of(out_dir):
    """The SHA-256 of every file under out_dir, by relative path: sent on stdout, where loupe
    checks every file against it (guard.evidence_sealed), so that a change made after the runtime
    wrote them (a thread or a child the candidate left running) shows."""
    seal = {}
    for root, _, names in os.walk(out_dir):
        for name in names:
            full = os.path.join(root, name)
            digest = hashlib.sha256()
            with open(full, "rb") as data:
                for chunk in iter(lambda: data.read(1 << 20), b""):
                    digest.update(chunk)
            seal[os.path.relpath(full, out_dir).replace(os.sep, "/")] = digest.hexdigest()
    return seal


def main(probes, argv=None):
    """The command line over `probes` (a list of Check, Bench, Scenario); see subject_main."""
    argv = list(sys.argv if argv is None else argv)
    program, args = argv[0], argv[1:]
    as_json = "--json" in args
    name = os.path.basename(program)
    try:
        if not args or args[0] in ("--help", "-h", "help"):
            print(USAGE)
            return 2 if not args else 0
        if args[0] == "list":
            for extra in args[1:]:
                if extra != "--json":
                    raise ProbeRequestError("usage", "list: unknown option '%s'" % extra, USAGE)
            listing = list_json(program, probes)
            if as_json:
                print(json.dumps(listing))
            else:
                for probe in listing["probes"]:
                    print("%s  [%s]  %s" % (probe["name"], probe["kind"], probe["description"]))
                    for param in probe["params"]:
                        allowed = ", allowed %s" % json.dumps(param["allowed"]) \
                            if param["allowed"] else ""
                        print("    %s (%s, default %s%s)" % (param["name"], param["type"],
                                                             json.dumps(param["default"]),
                                                             allowed))
            return 0
        if args[0] == "run":
            path, seed, seal = run_command(program, args, probes)
            if as_json:
                print(json.dumps({"probe": args[1], "observation": path, "seed": seed,
                                  "seal": seal}))
            else:
                print("wrote " + path)
            return 0
        raise ProbeRequestError("usage", "unknown command '%s'; the commands are list, run" % args[0],
                           USAGE)
    except ProbeRequestError as error:
        if as_json:
            print(json.dumps({"error": {"code": error.code, "message": error.message,
                                        "hint": error.hint}}))
        sys.stderr.write("%s: %s\n" % (name, error.message))
        if error.hint:
            sys.stderr.write("hint: %s\n" % error.hint)
        return 2 if error.code == "usage" else 3


# --- decorators ----------------------------------------------------------------------------

_REGISTRY = []  # probes in declaration order, as the C++ registry keeps them


def _params(params):
    """A list of Param from a list of Param or a dict {name: default | Param | (default, allowed)}."""
    if isinstance(params, dict):
        out = []
        for name, value in params.items():
            if isinstance(value, Param):
                out.append(value)
            elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], list):
                out.append(Param(name, value[0], value[1]))
            else:
                out.append(Param(name, value))
        return out
    return list(params)


def _register(probe):
    from ._errors import UsageError

    if any(existing.name == probe.name for existing in _REGISTRY):
        raise UsageError("probe '%s' is declared twice" % probe.name,
                         "give each probe its own name (name=...)")
    _REGISTRY.append(probe)
    return probe


def check(name: Optional[str] = None, *, description: str = "", params: Any = (),
          inputs: Callable[..., Dict[str, Any]], outputs: Callable[..., List["Output"]],
          reference: Callable[..., None],
          oracle: Optional[Callable[..., Dict[str, Any]]] = None,
          hidden_points: Any = ()) -> Callable[[Callable[..., None]], "Check"]:
    """Declare a check (decorates the candidate): the candidate and the reference run on the same
    inputs, in both orders, into NaN-poisoned outputs, with input checksums and a second seed for
    the reference; ``loupe probe run`` compares and decides.

    ``inputs(point, rng) -> {name: (array, axes)}``; ``outputs(point) -> [Output]``;
    ``reference`` and the decorated candidate ``(point, inputs, out)`` write into ``out[name]``;
    ``oracle(point, inputs) -> {name: float64 array}``. ``params``: ``[Param]`` or
    ``{name: default}``. ``hidden_points``: ``[{name: value}]``, points ``list`` only counts and
    ``loupe probe run`` adds one of, drawn in secret (values may leave the allowed sets;
    parameters a point leaves out take their defaults): a candidate right only at the points it
    was shown fails ``guard.hidden_point``.

    Example::

        @loupe.check(params={"N": (1024, [256, 1024])}, hidden_points=[{"N": 777}],
                     inputs=make_inputs, outputs=lambda p: [
            loupe.Output("y", np.float32, (p["N"],), ["N"])], reference=numpy_sum)
        def row_sums(point, inputs, out):
            out["y"][:] = my_kernel(inputs["x"])
    """
    def register(candidate):
        return _register(Check(name or candidate.__name__, description or (candidate.__doc__ or
                               "").strip().split("\n")[0], _params(params), inputs, outputs,
                               reference, candidate, oracle, hidden_points))
    return register


def bench(name: Optional[str] = None, *, description: str = "", params: Any = (),
          variants: Any, outputs: Optional[Callable[[Any], Dict[str, Any]]] = None,
          bytes_per_call: Optional[Callable[[Dict[str, Any]], float]] = None,
          timer: str = "cpu", hidden_points: Any = ()) -> Callable[[Callable[..., Any]], "Bench"]:
    """Declare a bench (decorates ``make(point, seed) -> work``, a fresh input set per timed
    call): each variant ``call(work)`` is timed in rounds (one batch of each, back to back, the
    order reversed every round) with fresh inputs per call and verified against an untimed
    rerun; ``loupe probe run`` computes the statistics and the verdict, comparing the variants
    paired by round. ``variants``: ``{name: call}`` (the first is A); ``outputs(work) ->
    {name: array}`` for verification; ``bytes_per_call(point)`` for throughput and the roofline
    guard. ``timer="cuda"``: CUDA events on torch's current stream, L2 flushed before each
    sample, the device's copy rate recorded for the roofline guard. ``hidden_points`` as for a
    check (``run --hidden`` runs one; ``loupe probe run`` adds one only to checks, as for C++).

    Example::

        @loupe.bench(params={"T": 256}, variants={"vectorised": fast, "rowwise": slow},
                     outputs=lambda work: {"y": work["y"]})
        def rmsnorm_speed(point, seed):
            return make_work(point, seed)
    """
    if timer not in ("cpu", "cuda"):
        from ._errors import UsageError

        raise UsageError("bench timer '%s': expected 'cpu' or 'cuda'" % timer)

    def register(make):
        pairs = list(variants.items()) if isinstance(variants, dict) else list(variants)
        return _register(Bench(name or make.__name__, description or (make.__doc__ or "")
                               .strip().split("\n")[0], _params(params), make, pairs, outputs,
                               bytes_per_call, timer, hidden_points))
    return register


def scenario(name: Optional[str] = None, *, description: str = "",
             params: Any = (), hidden_points: Any = ()) -> Callable[[Callable[..., Any]],
                                                                     "Scenario"]:
    """Declare a scenario (decorates ``body(point, seed, out_dir) -> (metrics, files)``, files
    being ``[(relative path, kind)]`` with kind "trace" for a Chrome JSON trace); ``wall_s`` is
    recorded around the body unless it reports its own.

    Example::

        @loupe.scenario(params={"requests": 32})
        def generate(point, seed, out_dir):
            return {"tokens_per_s": serve(point)}, []
    """
    def register(body):
        return _register(Scenario(name or body.__name__, description or (body.__doc__ or "")
                                  .strip().split("\n")[0], _params(params), body,
                                  hidden_points))
    return register


def subject_main(argv: Optional[List[str]] = None, probes: Optional[List[Any]] = None) -> int:
    """The subject's command line (``list``, ``run PROBE ...``) over the declared probes; returns
    the exit code: ``sys.exit(loupe.subject_main())`` at the end of the subject's module.

    Example::

        if __name__ == "__main__":
            sys.exit(loupe.subject_main())
    """
    return main(list(_REGISTRY if probes is None else probes), argv)
