"""Probes in Python: ``@loupe.check``, ``@loupe.bench``, ``@loupe.scenario`` and
``loupe.subject_main()`` — what include/loupe/probe.hpp and src/subject do for a C++ subject.

A module declares probes with the decorators (they register at import, as LOUPE_CHECK does at
static initialisation) and ends with ``sys.exit(loupe.subject_main())``. The command line is
the one loupe::subject_main gives a C++ subject (docs/formats.md, "Subject command line"):

    subject.py list [--json]
    subject.py run PROBE [--set NAME=VALUE ...] [--seed N] [--hidden | --hidden-point I]
                   [--repeat N] [--variants NAME,NAME...] [--precision P] [--budget SECONDS]
                   --out DIR [--json]

`run` writes DIR/observation.json, .npy tensors and samples.json in the schema src/probe/analyze.cpp
reads. Like the C++ runtime it only observes and records, next to the candidate: each pass of a
check in a child process forked for it (CheckRun), outputs poisoned with NaNs keyed by a secret
of the run, input checksums, the environment guard, secret repeats, a second seed for the
reference; fresh inputs per timed call, paired rounds, verification of timed calls, the
environment guard and the roofline of a bench; the hidden points and ranges listed so loupe can
pass a hidden run like a shown one. Everything that decides runs in `loupe` from these files. Exit 0 once observation.json is written, 2 for a bad request (unknown
probe, option or parameter), 3 when a probe body fails.
"""

import copy
import ctypes
import ctypes.util
import datetime
import hashlib
import json
import math
import os
import platform
import random
import select
import socket
import struct
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

MASK64 = (1 << 64) - 1
USAGE = (
    "usage: SUBJECT list [--json]\n"
    "       SUBJECT run PROBE [--set NAME=VALUE ...] [--seed N] [--hidden | --hidden-point I]\n"
    "                   [--repeat N] [--variants NAME,NAME...]\n"
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

    def parse(self, text, hidden_ok=None):
        """The value `text` names; REQUIRES: it is of the parameter's type and allowed, or
        `hidden_ok(value)` says it is a hidden point's or range's value (loupe passes a hidden
        point exactly like an asked one)."""
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
        if self.allowed and value not in self.allowed and not (hidden_ok and hidden_ok(value)):
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


def check_hidden_ranges(name, params, ranges):
    """Hidden ranges as a list of {"name", "low", "high", "step"} over integer parameters
    (ProbeBuilder::hidden_range): loupe draws each in secret over the hidden point."""
    from ._errors import UsageError

    declared = {param.name: param for param in params}
    out = []
    for index, entry in enumerate(ranges):
        if isinstance(entry, dict):
            entry = (entry.get("name"), entry.get("low"), entry.get("high"), entry.get("step", 1))
        if not isinstance(entry, (tuple, list)) or len(entry) not in (3, 4):
            raise UsageError("probe '%s': hidden range %d is %r; expected (NAME, LOW, HIGH[, "
                             "STEP])" % (name, index, entry),
                             "for example hidden_ranges=[(\"N\", 500, 1500)]")
        key, low, high = entry[0], entry[1], entry[2]
        step = entry[3] if len(entry) == 4 else 1
        if key not in declared or declared[key].type_name != "int":
            raise UsageError("probe '%s': hidden range %d names '%s', which is not an int "
                             "parameter; its parameters are %s"
                             % (name, index, key, ", ".join(declared) or "none"),
                             "a hidden range draws an integer size")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high, step)) \
                or low > high or step < 1:
            raise UsageError("probe '%s': hidden range %d (%r, %r, %r): expected integers with "
                             "LOW <= HIGH and STEP >= 1" % (name, index, low, high, step))
        out.append({"name": key, "low": low, "high": high, "step": step})
    return out


def hidden_value_of(probe, name):
    """A predicate: is a value one of `probe`'s hidden points' or ranges' for parameter `name`
    (params.cpp accepts those like allowed ones)."""
    def accepts(value):
        for point in probe.hidden_points:
            if name in point and point[name] == value and \
                    value_type_name(point[name]) == value_type_name(value):
                return True
        for entry in getattr(probe, "hidden_ranges", []):
            if entry["name"] == name and isinstance(value, int) and \
                    not isinstance(value, bool) and entry["low"] <= value <= entry["high"] and \
                    (value - entry["low"]) % entry["step"] == 0:
                return True
        return False
    return accepts


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
        point[param.name] = (param.parse(given[param.name], hidden_value_of(probe, param.name))
                             if param.name in given else param.default)
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
                 oracle=None, hidden_points=(), hidden_ranges=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.hidden_ranges = check_hidden_ranges(name, params, hidden_ranges)
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
                 bytes_per_call=None, timer="cpu", hidden_points=(), hidden_ranges=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.hidden_ranges = check_hidden_ranges(name, params, hidden_ranges)
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

    def __init__(self, name, description, params, body, hidden_points=(), hidden_ranges=()):
        self.name = name
        # Points `list` only counts; `run --hidden` draws one (include/loupe/probe.hpp).
        self.hidden_points = check_hidden_points(name, params, hidden_points)
        self.hidden_ranges = check_hidden_ranges(name, params, hidden_ranges)
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


# --- guards next to the candidate ------------------------------------------------------------


def _mix(values):
    """splitmix64's finaliser over a uint64 array (src/subject/guards.cpp's mix)."""
    values = values + np.uint64(0x9E3779B97F4A7C15)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def poison_pattern(dtype, shape, key):
    """The poison an output buffer is handed: for a floating dtype a NaN whose sign and payload
    come from `key` (a secret of the run) and the element's index, as guards.cpp's poison_bits
    makes them; all bits set for any other dtype. No fixed pattern: a candidate cannot recognise
    loupe's buffers by their value."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)):
        return np.full(count * dtype.itemsize, 0xFF, dtype=np.uint8).view(dtype).reshape(shape)
    random = _mix(np.uint64(key) ^ _mix(np.arange(count, dtype=np.uint64)))
    sign = random >> np.uint64(63)

    def payload(bits):
        value = random & np.uint64((1 << bits) - 1)
        value[value == 0] = 1  # a zero payload would be the default NaN 0/0 makes
        return value

    if dtype == np.dtype(np.float32):
        bits = (sign << np.uint64(31)) | np.uint64(0x7FC00000) | payload(22)
        return bits.astype(np.uint32).view(np.float32).reshape(shape)
    if dtype == np.dtype(np.float64):
        bits = (sign << np.uint64(63)) | np.uint64(0x7FF8000000000000) | payload(51)
        return bits.view(np.float64).reshape(shape)
    bits = (sign << np.uint64(15)) | np.uint64(0x7E00) | payload(9)
    return bits.astype(np.uint16).view(np.float16).reshape(shape)


def count_poisoned(buffer, pattern):
    """Elements of `buffer` still bit for bit the poison they were handed: never written."""
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(buffer.dtype.itemsize)
    if width is None:
        return 0
    return int(np.count_nonzero(np.ascontiguousarray(buffer).reshape(-1).view(width) ==
                                pattern.reshape(-1).view(width)))


# The environment a path must leave as it found it (src/subject/isolation.cpp's ExecEnvironment):
# the floating-point state through libm (Python has no other way to it), the affinity, the nice
# value and the scheduling policy.
_FE_NAMES = {0: "to-nearest", 0x400: "downward", 0x800: "upward", 0xC00: "toward-zero"}
_POLICY_NAMES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH",
                 5: "SCHED_IDLE"}
_SCHED_RESET_ON_FORK = 0x40000000
_X86 = platform.machine() in ("x86_64", "AMD64", "i386", "i686")
_libm = None


def _libm_handle():
    global _libm
    if _libm is None:
        # libm.so.6 first: find_library runs ldconfig (a tenth of a second), once per process.
        for find in (lambda: "libm.so.6", lambda: ctypes.util.find_library("m")):
            try:
                _libm = ctypes.CDLL(find())
                _libm.fegetround.restype = ctypes.c_int
                break
            except (OSError, TypeError):
                _libm = False
    return _libm


def capture_environment(pid=0):
    """The environment of this process (pid 0; with the floating-point state) or of another."""
    environment = {"rounding": 0, "fp_control": 0, "x87_control": 0, "fenv": None}
    libm = _libm_handle() if pid == 0 else None
    if libm:
        environment["rounding"] = libm.fegetround()
        whole = ctypes.create_string_buffer(64)  # fenv_t: 32 bytes on x86-64
        if libm.fegetenv(whole) == 0:
            environment["fenv"] = whole
            if _X86 and struct.calcsize("P") == 8:
                # The control bits only: the exception flags (bits 0-5) change with arithmetic.
                environment["x87_control"] = struct.unpack_from("<H", whole.raw, 0)[0]
                environment["fp_control"] = struct.unpack_from("<I", whole.raw, 28)[0] & ~0x3F
    try:
        environment["cpus"] = sorted(os.sched_getaffinity(pid))
    except (OSError, AttributeError):  # AttributeError: a platform without affinity (macOS)
        environment["cpus"] = []
    try:
        environment["nice"] = os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        environment["nice"] = 0
    try:
        environment["policy"] = os.sched_getscheduler(pid) & ~_SCHED_RESET_ON_FORK
    except (OSError, AttributeError):
        environment["policy"] = -1
    return environment


def environment_changes(before, after):
    """Sentences naming each difference, worded as isolation.cpp's environment_changes."""
    changes = []
    if before["rounding"] != after["rounding"]:
        changes.append("rounding mode %s -> %s" % (
            _FE_NAMES.get(before["rounding"], str(before["rounding"])),
            _FE_NAMES.get(after["rounding"], str(after["rounding"]))))
    if before["fp_control"] != after["fp_control"]:
        what = "MXCSR 0x%04x -> 0x%04x" % (before["fp_control"], after["fp_control"])
        changed = before["fp_control"] ^ after["fp_control"]
        if changed & 0x8000:
            what += " (flush-to-zero %s)" % ("on" if after["fp_control"] & 0x8000 else "off")
        if changed & 0x40:
            what += " (denormals-are-zero %s)" % ("on" if after["fp_control"] & 0x40 else "off")
        changes.append(what)
    if before["x87_control"] != after["x87_control"]:
        changes.append("x87 control word 0x%04x -> 0x%04x" % (before["x87_control"],
                                                             after["x87_control"]))
    if before["cpus"] != after["cpus"]:
        changes.append("CPU affinity {%s} -> {%s}" % (",".join(map(str, before["cpus"])),
                                                      ",".join(map(str, after["cpus"]))))
    if before["nice"] != after["nice"]:
        changes.append("scheduling priority (nice) %d -> %d" % (before["nice"], after["nice"]))
    if before["policy"] != after["policy"] and before["policy"] >= 0 and after["policy"] >= 0:
        changes.append("scheduling policy %s -> %s" % (
            _POLICY_NAMES.get(before["policy"], str(before["policy"])),
            _POLICY_NAMES.get(after["policy"], str(after["policy"]))))
    return changes


def restore_environment(environment):
    """Puts this process's floating-point state, affinity, policy and nice value back (the last
    two where allowed: lowering a nice value needs privilege)."""
    libm = _libm_handle()
    if libm and environment["fenv"] is not None:
        libm.fesetenv(environment["fenv"])
    if environment["cpus"]:
        try:
            os.sched_setaffinity(0, environment["cpus"])
        except OSError:
            pass
    try:
        if environment["policy"] >= 0 and \
                os.sched_getscheduler(0) & ~_SCHED_RESET_ON_FORK != environment["policy"]:
            os.sched_setscheduler(0, environment["policy"], os.sched_param(0))
    except OSError:
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, environment["nice"])
    except OSError:
        pass


def process_cpu_seconds(pid):
    """CPU time of process `pid` on its own clock (the kernel's CPU-clock id for a process),
    -1 when it cannot be read."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return -1.0


def _anything_left(child_pid):
    """Whether the child's process group has a member, or this process a child: cheap enough
    to ask after every job, so the scan of /proc below runs only when one does."""
    try:
        os.killpg(child_pid, 0)
        return True
    except OSError:
        pass
    try:
        with open("/proc/self/task/%d/children" % os.getpid()) as children:
            return bool(children.read().split())
    except OSError:
        return True  # no children file (CONFIG_PROC_CHILDREN off): scan


def _processes_left(child_pid):
    """Processes in the child's process group, or re-parented to this process (the subreaper):
    (pid, 'name (pid N)') each."""
    left = []
    me = os.getpid()
    if not _anything_left(child_pid):
        return left
    try:
        entries = os.listdir("/proc")
    except OSError:
        return left  # no /proc (not Linux): nothing can be named
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        if len(fields) < 3 or fields[0] == "Z":
            continue
        parent, group = int(fields[1]), int(fields[2])
        if int(entry) != child_pid and (group == child_pid or parent == me):
            left.append((int(entry), "%s (pid %s)" % (name, entry)))
    return left


def _become_subreaper():
    """Orphans of a path's child come back to this process instead of init, to be named and
    killed (prctl PR_SET_CHILD_SUBREAPER; as harden_runtime_process does for C++)."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# --- checks --------------------------------------------------------------------------------

# The secret repeats (check_runner.cpp's constants): after the asked repeats, the candidate runs
# more times in the process of its first call, handed one call at a time, as many as fit a
# budget drawn in [25, 50) ms at the cheapest call so far, never fewer than a draw of 1 to 6,
# at most 256; past that floor they also stop after 4 budgets of wall time.
SECRET_REPEATS_FLOOR = 6
SECRET_REPEATS_MAX = 256
SECRET_BUDGET_SECONDS = 0.025
SECRET_WALL_BUDGETS = 4


class _ChildFailed(Exception):
    pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _Reader:
    """Reads a child's records from its pipe. Polls, so that a child that has ended while a
    process it started still holds the pipe open does not hang the runtime (check_runner.cpp's
    read_records)."""

    def __init__(self, fd, pid):
        self.fd = fd
        self.pid = pid
        self.pending = b""  # a tag read where a record was expected: the start of the end

    def _child_ended(self):
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def _read_some(self, limit):
        """Up to `limit` bytes; b"" once the pipe is closed or the child has ended and nothing
        is left to read."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while True:
            if poller.poll(50):
                return os.read(self.fd, limit)
            if self._child_ended():
                # Whatever it wrote before it ended is in the pipe already.
                return os.read(self.fd, limit) if poller.poll(0) else b""

    def exact(self, size):
        chunks = bytearray()
        while len(chunks) < size:
            got = self._read_some(min(size - len(chunks), 1 << 20))
            if not got:
                return None
            chunks += got
        return bytes(chunks)

    def rest(self):
        chunks = bytearray(self.pending)
        while True:
            got = self._read_some(1 << 20)
            if not got:
                return bytes(chunks)
            chunks += got


class CheckRun:
    """A check's passes, each in a child process forked for it (as src/subject/check_runner.cpp):
    the runtime process never calls a candidate, so the reference of the reference_first pass,
    which the candidate is judged against, runs before any candidate code in a process forked
    from one no candidate ran in. Each path's outputs go down a pipe to this process as soon as
    the path returns, before the next path runs: what is in the pipe no later code can change.
    Unwritten elements (the keyed poison), the secret repeats and what a path left behind
    (processes) are judged here, from what came down the pipe; a mutated input and a changed
    environment are seen in the child, restored there and reported with its last record."""

    def __init__(self, probe, point, seed, files, repeat):
        self.probe = probe
        self.point = point
        self.seed = seed
        self.files = files
        self.repeat = repeat
        # A secret of the run: the poison's key (check_runner's options.poison_key).
        self.poison_key = int.from_bytes(os.urandom(8), "little")
        self.outputs = probe.outputs(point)
        if not self.outputs:
            raise ProbeRequestError("subject", "check '%s' declares no outputs" % probe.name,
                                    "return a list of loupe.Output from outputs=")
        self.patterns = {o.name: poison_pattern(o.dtype, o.shape, self.poison_key)
                         for o in self.outputs}
        _libm_handle()  # loaded once here, not in every child
        self.guards = {"input_mutation": [], "output_unwritten": [], "output_alias": [],
                       "environment": [], "stray_processes": [], "output_overwritten": []}

    # -- inputs ----------------------------------------------------------------------------

    def make_inputs(self, input_seed):
        made = self.probe.inputs(self.point, np.random.default_rng(input_seed))
        inputs = {}
        for name, (array, axes) in made.items():
            inputs[name] = (np.ascontiguousarray(array), axes)
        return inputs

    def out_dtype(self, output, path):
        if path == "oracle" and output.dtype.kind == "f":
            return np.dtype(np.float64)
        return output.dtype

    def record_bytes(self, path):
        return sum(int(np.prod(o.shape, dtype=np.int64)) * self.out_dtype(o, path).itemsize
                   for o in self.outputs)

    # -- the child -------------------------------------------------------------------------

    def child_call(self, call_pass, path, inputs, pristine, base, records):
        """One path call in the child: poisoned buffers in, outputs out (as bytes), the inputs
        and the environment checked and restored."""
        plain = {name: array for name, (array, _) in inputs.items()}
        if path == "oracle":
            result = self.probe.oracle(self.point, plain)
            blobs = []
            for o in self.outputs:
                array = np.ascontiguousarray(np.asarray(result[o.name],
                                                        dtype=self.out_dtype(o, path)))
                if array.shape != o.shape:
                    raise ValueError("oracle output '%s' has shape %s; declared %s"
                                     % (o.name, array.shape, o.shape))
                blobs.append(array.tobytes())
        else:
            handed = {o.name: self.patterns[o.name].copy() for o in self.outputs}
            function = self.probe.candidate if path == "candidate" else self.probe.reference
            function(self.point, plain, dict(handed))
            # The buffers handed over, not whatever the dict holds now: a path writes into them.
            blobs = [handed[o.name].tobytes() for o in self.outputs]
        for name, (array, _) in inputs.items():
            if np.array_equal(array.reshape(-1).view(np.uint8),
                              pristine[name].reshape(-1).view(np.uint8)):
                continue
            records["input_mutation"].append(
                {"pass": call_pass, "path": path, "input": name,
                 "checksum_before": self.input_checksums[name], "checksum_after": checksum(array)})
            array.setflags(write=True)
            np.copyto(array, pristine[name])
        after = capture_environment()
        for change in environment_changes(base, after):
            records["environment"].append({"pass": call_pass, "path": path, "change": change})
        restore_environment(base)
        return b"".join(blobs)

    def child_main(self, calls, inputs, data_fd, gate):
        records = {"input_mutation": [], "environment": []}
        current = [""]
        try:
            # A group of its own, so whatever the path starts can be found and killed; and it
            # dies with the runtime process (PR_SET_PDEATHSIG) when loupe kills that on timeout.
            os.setpgid(0, 0)
            try:
                ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
            except (OSError, AttributeError):
                pass
            pristine = {name: array.copy() for name, (array, _) in inputs.items()}
            base = capture_environment()
            for call_pass, path in calls:
                current[0] = "the %s path (%s pass)" % (path, call_pass)
                _write_all(data_fd, b"O" + self.child_call(call_pass, path, inputs, pristine,
                                                           base, records))
            if gate is not None:
                seen = set()
                made = 0
                while gate.recv(1) == b"c":
                    made += 1
                    call_pass = "repeat/%d" % (self.repeat + made)
                    current[0] = "the candidate path (%s pass)" % call_pass
                    counts = {kind: len(entries) for kind, entries in records.items()}
                    blob = self.child_call(call_pass, "candidate", inputs, pristine, base,
                                           records)
                    # Each kind of record once for the secret repeats, not once per call.
                    for kind, entries in records.items():
                        kept = entries[:counts[kind]]
                        for entry in entries[counts[kind]:]:
                            key = json.dumps({k: v for k, v in entry.items() if k != "pass"},
                                             sort_keys=True)
                            if key not in seen:
                                seen.add(key)
                                kept.append(entry)
                        records[kind] = kept
                    _write_all(data_fd, b"O" + blob)
            end = json.dumps({"guards": records}).encode()
            _write_all(data_fd, b"E" + struct.pack("<Q", len(end)) + end)
            return 0
        except BaseException as error:  # the path's failure, reported as the subject's
            message = "probe '%s' failed in %s: %s: %s" % (self.probe.name, current[0],
                                                          type(error).__name__, error)
            end = json.dumps({"error": message}).encode()
            try:
                _write_all(data_fd, b"E" + struct.pack("<Q", len(end)) + end)
            except OSError:
                pass
            return 3

    # -- the runtime's side ----------------------------------------------------------------

    def run_job(self, calls, inputs, secret=False):
        """Runs `calls` ((pass, path) pairs, in order) in a child forked for them, and takes
        back each call's outputs as it returns. With `secret`, the secret repeats follow."""
        read_fd, write_fd = os.pipe()
        gate_parent, gate_child = socket.socketpair() if secret else (None, None)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.close(read_fd)
                if gate_parent is not None:
                    gate_parent.close()
                code = self.child_main(calls, inputs, write_fd, gate_child)
            finally:
                os._exit(code)
        os.close(write_fd)
        if gate_child is not None:
            gate_child.close()
        reader = _Reader(read_fd, pid)
        results = []
        secret_made, differing = 0, None
        failure = None
        try:
            for call_pass, path in calls:
                outputs = self.read_record(reader, path)
                if outputs is None:
                    break
                results.append((call_pass, path, outputs))
            if secret and len(results) == len(calls):
                secret_made, differing = self.secret_repeats(pid, reader, gate_parent,
                                                             results[0][2])
        finally:
            if gate_parent is not None:
                gate_parent.close()
            tail = reader.rest()
            os.close(read_fd)
            _, status = os.waitpid(pid, 0)
        # What the path left running: killed and named (guard.child_process). A process whose
        # parent is killed here comes back to this process (the subreaper): looked for again.
        left, named = _processes_left(pid), []
        for _ in range(3):
            if not left:
                break
            for other, name in left:
                named.append((other, name))
                try:
                    os.kill(other, 9)
                except OSError:
                    pass
            time.sleep(0.01)
            left = [entry for entry in _processes_left(pid)
                    if entry[0] not in {other for other, _ in named}]
        while named:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        left = named
        # The call the child was in when it ended (the last secret repeat, past the listed calls).
        now = "the %s path (%s pass)" % (calls[min(len(results), len(calls) - 1)][1],
                                         calls[min(len(results), len(calls) - 1)][0])
        if secret_made > 0:
            now = "the candidate path (repeat/%d pass)" % (self.repeat + secret_made)
        end = None
        if tail[:1] == b"E" and len(tail) >= 9:
            size = struct.unpack_from("<Q", tail, 1)[0]
            try:
                end = json.loads(tail[9:9 + size].decode())
            except (ValueError, UnicodeDecodeError):
                end = None
            if end is not None and len(tail) != 9 + size:
                self.guards["output_overwritten"].append(
                    {"pass": calls[0][0], "path": "", "output": "", "by": "candidate",
                     "record": "extra"})
        if isinstance(end, dict) and isinstance(end.get("error"), str):
            raise ProbeRequestError("subject", end["error"])
        if len(results) < len(calls) or not isinstance(end, dict) or "guards" not in end:
            if os.WIFSIGNALED(status):
                how = "was killed by signal %d" % os.WTERMSIG(status)
            elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
                how = "exited with %d" % os.WEXITSTATUS(status)
            else:
                how = "ended without sending its records"
            raise ProbeRequestError("subject", "check '%s': the child process running %s %s"
                                    % (self.probe.name, now, how),
                                    "run the probe directly (SUBJECT run ...) to see the failure")
        for kind in ("input_mutation", "environment"):
            for entry in end["guards"].get(kind, []):
                if isinstance(entry, dict):
                    self.guards[kind].append(entry)
        if left:
            self.guards["stray_processes"].append(
                {"after": now, "processes": [name for _, name in left]})
        return results, secret_made, differing

    def read_record(self, reader, path):
        tag = reader.exact(1)
        if tag != b"O":
            if tag == b"E":  # the child's error: read with the rest
                reader.pending = tag
            return None
        blob = reader.exact(self.record_bytes(path))
        if blob is None:
            return None
        outputs, offset = {}, 0
        for o in self.outputs:
            dtype = self.out_dtype(o, path)
            size = int(np.prod(o.shape, dtype=np.int64)) * dtype.itemsize
            outputs[o.name] = np.frombuffer(blob, dtype=dtype, count=size // dtype.itemsize,
                                            offset=offset).reshape(o.shape)
            offset += size
        return outputs

    def secret_repeats(self, pid, reader, gate, first):
        """The runtime's side of the secret repeats: one 'c' per call, each call's outputs
        compared with the first candidate call's as they come back; the count, decided here
        as the calls come back, is never in the child."""
        entropy = random.SystemRandom()
        least = 1 + entropy.randrange(SECRET_REPEATS_FLOOR)
        budget = SECRET_BUDGET_SECONDS * (1.0 + entropy.random())
        first_bytes = {name: array.tobytes() for name, array in first.items()}
        made, cheapest, spent, target = 0, 0.0, 0.0, least
        differing = None
        while made < target and not (made >= least and spent >= SECRET_WALL_BUDGETS * budget):
            started = time.monotonic()
            cpu_before = process_cpu_seconds(pid)
            try:
                gate.sendall(b"c")
            except OSError:
                break
            outputs = self.read_record(reader, "candidate")
            if outputs is None:
                break
            wall = time.monotonic() - started
            cpu = process_cpu_seconds(pid) - cpu_before
            spent += wall
            made += 1
            self.note_unwritten("repeat/%d" % (self.repeat + made), "candidate", outputs,
                                once=True)
            if any(outputs[name].tobytes() != first_bytes[name] for name in first_bytes):
                differing = (made, outputs)
                break  # the check fails on this repeat: a later one could add nothing
            # A call's cost: the lesser of its wall time (which waiting for a CPU lengthens)
            # and the CPU its process used (which sleeping does not).
            cost = min(wall, cpu) if cpu_before >= 0 and cpu >= 0 else wall
            if cost > 0 and (cheapest == 0 or cost < cheapest):
                cheapest = cost
            fit = budget / cheapest if cheapest > 0 else SECRET_REPEATS_MAX
            target = int(min(max(min(fit, SECRET_REPEATS_MAX), least), SECRET_REPEATS_MAX))
        try:
            gate.sendall(b"s")
        except OSError:
            pass
        return made, differing

    def note_unwritten(self, call_pass, path, outputs, once=False):
        if path == "oracle":
            return
        for o in self.outputs:
            poisoned = count_poisoned(outputs[o.name], self.patterns[o.name])
            if not poisoned:
                continue
            entry = {"pass": call_pass, "path": path, "output": o.name, "poisoned": poisoned,
                     "numel": int(outputs[o.name].size)}
            if once and any(e["path"] == path and e["output"] == o.name and
                            e["pass"].startswith("repeat/")
                            for e in self.guards["output_unwritten"]):
                continue
            self.guards["output_unwritten"].append(entry)

    def record(self, call_pass, path, outputs):
        stem = ("oracle/" if path == "oracle" else call_pass + "/" + path + ".")
        written = {o.name: self.files.write_tensor(stem + o.name, outputs[o.name])
                   for o in self.outputs}
        return {"pass": call_pass, "path": path, "outputs": written,
                "bound": {o.name: False for o in self.outputs}}

    def run(self):
        inputs = self.make_inputs(self.seed)
        self.input_checksums = {name: checksum(array) for name, (array, _) in inputs.items()}
        _become_subreaper()
        repeats = max(self.repeat, 0)
        first_calls = [("candidate_first", "candidate"), ("candidate_first", "reference")]
        first_calls += [("repeat/%d" % index, "candidate") for index in range(1, repeats + 1)]
        # Secret repeats only where repeats were asked for (`--repeat 0` turns them all off).
        first, secret_made, differing = self.run_job(first_calls, inputs, secret=repeats > 0)
        # The reference the candidate is judged against: first in a child of a process no
        # candidate ran in. The candidate_first pass's reference ran after the candidate in
        # its process and only confirms it (loupe: guard.reference_tampered).
        second, _, _ = self.run_job([("reference_first", "reference"),
                                     ("reference_first", "candidate")], inputs)
        oracle = None
        if self.probe.oracle is not None:
            oracle, _, _ = self.run_job([("oracle", "oracle")], inputs)
        alt_seed = derive_seed(self.seed, 1)
        alt_inputs = self.make_inputs(alt_seed)
        saved = self.input_checksums
        self.input_checksums = {name: checksum(array) for name, (array, _) in alt_inputs.items()}
        alt, _, _ = self.run_job([("alt_seed", "reference")], alt_inputs)
        self.input_checksums = saved

        for call_pass, path, outputs in first[:2] + second:
            self.note_unwritten(call_pass, path, outputs)
        runs = [self.record(p, path, out) for p, path, out in first[:2] + second]
        if oracle is not None:
            runs.append(self.record("oracle", "oracle", oracle[0][2]))
        section = {
            "inputs": [
                {"name": name, "dtype": array.dtype.name, "shape": list(array.shape),
                 "axes": axes, "checksum": self.input_checksums[name]}
                for name, (array, axes) in inputs.items()
            ],
            "outputs": [
                {"name": o.name, "dtype": o.dtype.name, "shape": list(o.shape), "axes": o.axes,
                 "profile_axis": o.along,
                 "tolerances": [{"metric": metric, "bound": bound, "relative_to_oracle": False}
                                for metric, bound in o.tolerances]}
                for o in self.outputs
            ],
            "has_oracle": self.probe.oracle is not None,
            "runs": runs,
            "alt_seed": {"seed": alt_seed,
                         "outputs": {o.name: self.files.write_tensor(
                             "alt_seed/reference." + o.name, alt[0][2][o.name])
                             for o in self.outputs}},
        }
        # The asked repeats and the secret ones: every candidate call after the first two. A
        # secret repeat bit-identical to the first call names the first call's file.
        made = len(first) - 2 + secret_made
        if made > 0:
            repeat_files = []
            for call_pass, path, outputs in first[2:]:
                self.note_unwritten(call_pass, path, outputs)
                repeat_files.append({o.name: self.files.write_tensor(
                    call_pass + "/candidate." + o.name, outputs[o.name]) for o in self.outputs})
            for index in range(1, secret_made + 1):
                if differing is None or index != differing[0]:
                    repeat_files.append(dict(runs[0]["outputs"]))
                    continue
                call_pass = "repeat/%d" % (repeats + index)
                repeat_files.append({o.name: self.files.write_tensor(
                    call_pass + "/candidate." + o.name, differing[1][o.name])
                    for o in self.outputs})
            section["repeat"] = {"count": made, "asked": repeats, "outputs": repeat_files}
        section["guards"] = self.guards
        section["poison"] = "NaN, payload and sign drawn per element from a secret of the run"
        return section


def run_check(probe, point, seed, files, repeat):
    return CheckRun(probe, point, seed, files, repeat).run()

# --- benches -------------------------------------------------------------------------------


def thread_count():
    """The threads that still have the process's memory (/proc/self/task/*/stat, vsize not 0): a
    thread leaving drops its memory before the kernel drops it from "Threads:", so a worker the
    body joined is not counted while it leaves, and one still running is (src/subject/isolation.hpp,
    live_thread_count)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return -1
    live = 0
    for task in tasks:
        try:
            with open("/proc/self/task/%s/stat" % task) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the thread left between the listing and the read
        if len(fields) > 20 and fields[20] != "0":  # field 23, vsize
            live += 1
    return live


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
    # The environment guard (benches): what the variants run in is read after every batch and
    # put back; a change fails the variant whose batch made it (guard.environment). The variants
    # share this one process, so this is what keeps one from slowing the next.
    base_environment = capture_environment()
    names_in_order = [name for name, _ in probe.variants]
    environment_changed = {name: [] for name in names_in_order}

    def check_environment(variant):
        now = capture_environment()
        changes = environment_changes(base_environment, now)
        if changes:
            for change in changes:
                if change not in environment_changed[names_in_order[variant]]:
                    environment_changed[names_in_order[variant]].append(change)
            restore_environment(base_environment)

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
        check_environment(variant)
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
        check_environment(variant)  # the untimed call may change it as well as a timed one
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
                   "block_orders": block_orders,
                   # What the runtime saw around each variant's batches (the C++ runtime's
                   # accounting carries these and more, from a process per variant).
                   "accounting": [{"variant": name,
                                   "environment_changes": environment_changed[name]}
                                  for name in names]}, out)
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
             "hidden_points": len(probe.hidden_points),
             # The values too (they are in the source): loupe passes a hidden point with --set,
             # exactly like an asked one, and draws the ranges over it, so nothing in the argv
             # says which run is hidden (subject_main.cpp lists the same).
             "hidden_point_values": [dict(point) for point in probe.hidden_points],
             "hidden_ranges": [dict(entry) for entry in probe.hidden_ranges],
             # run --variants selects a bench's variants (loupe passes a selection only then).
             **({"selects_variants": True} if probe.kind == "bench" else {})}
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


def select_variants(probe, text):
    """A copy of bench `probe` with only the variants `text` names ("a,b"), in that order: the
    first is the baseline of the comparisons. An empty name, a name given twice or one the bench
    does not declare is a usage error (exit 2)."""
    if probe.kind != "bench":
        raise ProbeRequestError("usage", "--variants: probe '%s' is a %s; expected a bench"
                                % (probe.name, probe.kind), "only a bench has variants")
    declared = dict(probe.variants)
    names = text.split(",")
    chosen = []
    for position, name in enumerate(names):
        if not name:
            raise ProbeRequestError(
                "usage", "--variants '%s': name %d is empty; expected variant names separated "
                "by commas" % (text, position + 1), "--variants base,double")
        if name in names[:position]:
            raise ProbeRequestError("usage", "--variants '%s': variant '%s' is named twice"
                                    % (text, name), "each variant runs once; name it once")
        if name not in declared:
            raise ProbeRequestError(
                "usage", "--variants: bench '%s' has no variant '%s'; its variants are: %s"
                % (probe.name, name, ", ".join(n for n, _ in probe.variants)),
                "name variants the bench declares, separated by commas")
        chosen.append((name, declared[name]))
    selected = copy.copy(probe)
    selected.variants = chosen
    return selected


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
    repeat, precision, budget_s = 2, 0.01, 2.0
    variants = None
    index = 2
    while index < len(args):
        flag = args[index]
        takes_value = flag in ("--set", "--seed", "--out", "--hidden-point", "--repeat",
                               "--precision", "--budget", "--variants")
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
        elif flag == "--variants":
            variants = value
        elif flag != "--json":
            raise ProbeRequestError(
                "usage",
                "run: unknown option '%s'; the options are --set, --seed, --hidden, "
                "--hidden-point, --repeat, --precision, --budget, --variants, --out, --json"
                % flag, USAGE)
        index += 2 if takes_value else 1
    if out_dir is None:
        raise ProbeRequestError("usage", "run: --out DIR is required", USAGE)
    if variants is not None:
        probe = select_variants(probe, variants)
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
          hidden_points: Any = (),
          hidden_ranges: Any = ()) -> Callable[[Callable[..., None]], "Check"]:
    """Declare a check (decorates the candidate): each pass runs in a child process of its own
    (candidate then reference, reference then candidate and the repeats, the oracle, the
    reference on a second seed) into outputs poisoned with NaNs keyed by a secret of the run,
    with input checksums and the environment checked after every path; the candidate is judged
    against the reference that ran before any candidate code in its process; ``loupe probe
    run`` compares and decides.

    ``inputs(point, rng) -> {name: (array, axes)}``; ``outputs(point) -> [Output]``;
    ``reference`` and the decorated candidate ``(point, inputs, out)`` write into the arrays
    ``out[name]`` (rebinding a key writes nothing); ``oracle(point, inputs) -> {name: float64
    array}``. ``params``: ``[Param]`` or ``{name: default}``. ``hidden_points``: ``[{name:
    value}]``, corners ``loupe probe run`` picks one of in secret for its hidden run (values may
    leave the allowed sets; parameters a point leaves out keep the shown point's);
    ``hidden_ranges``: ``[(name, low, high[, step])]`` over integer parameters, each drawn in
    secret over the corner. A candidate right only at the points it was shown fails
    ``guard.hidden_point``, and so does a probe whose hidden points are all in its source with
    no hidden range (a candidate's author can read them).

    Example::

        @loupe.check(params={"N": (1024, [256, 1024])}, hidden_points=[{"N": 777}],
                     hidden_ranges=[("N", 500, 1500)],
                     inputs=make_inputs, outputs=lambda p: [
            loupe.Output("y", np.float32, (p["N"],), ["N"])], reference=numpy_sum)
        def row_sums(point, inputs, out):
            out["y"][:] = my_kernel(inputs["x"])
    """
    def register(candidate):
        return _register(Check(name or candidate.__name__, description or (candidate.__doc__ or
                               "").strip().split("\n")[0], _params(params), inputs, outputs,
                               reference, candidate, oracle, hidden_points, hidden_ranges))
    return register


def bench(name: Optional[str] = None, *, description: str = "", params: Any = (),
          variants: Any, outputs: Optional[Callable[[Any], Dict[str, Any]]] = None,
          bytes_per_call: Optional[Callable[[Dict[str, Any]], float]] = None,
          timer: str = "cpu", hidden_points: Any = (),
          hidden_ranges: Any = ()) -> Callable[[Callable[..., Any]], "Bench"]:
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
                               bytes_per_call, timer, hidden_points, hidden_ranges))
    return register


def scenario(name: Optional[str] = None, *, description: str = "",
             params: Any = (), hidden_points: Any = (),
             hidden_ranges: Any = ()) -> Callable[[Callable[..., Any]], "Scenario"]:
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
                                  hidden_points, hidden_ranges))
    return register


def subject_main(argv: Optional[List[str]] = None, probes: Optional[List[Any]] = None) -> int:
    """The subject's command line (``list``, ``run PROBE ...``) over the declared probes; returns
    the exit code: ``sys.exit(loupe.subject_main())`` at the end of the subject's module.

    Example::

        if __name__ == "__main__":
            sys.exit(loupe.subject_main())
    """
    return main(list(_REGISTRY if probes is None else probes), argv)
