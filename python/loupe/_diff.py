"""``loupe.diff`` and ``loupe.assert_close``: in-process comparisons through libloupe."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays
from ._errors import InputError, UsageError, native

Tol = Union[None, str, Mapping[str, float], Sequence[str]]
# A rules file (path), or rules in order as dicts {"match": REGEX, "when": [...], "name": ...}.
Rules = Union[None, str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]
Axes = Union[None, str, Sequence[str]]

# torch.testing.assert_close's default (rtol, atol) per dtype (torch/testing/_comparison.py,
# _DTYPE_PRECISIONS); every other dtype, fp8 and integers included, compares exactly.
DEFAULT_TOLERANCES: Dict[str, Tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}

# Listeners told of each failing assert_close (the pytest plugin's --loupe-report).
_failure_listeners: List[Callable[[Dict[str, Any]], None]] = []


@dataclass
class Worst:
    """The worst position of one tensor: the first disagreeing NaN/Inf, else the largest |a - b|.

    Example::

        w = loupe.diff(a, b).worst
        print(w.name, w.coords, w.actual, w.expected)   # tensor {'T': 46, 'D': 3} 0.1 0.6
    """

    name: str
    coords: Dict[str, int]
    index: Tuple[int, ...]
    actual: float
    expected: float
    abs_error: float
    rms_ratio: float


@dataclass
class Profile:
    """The error profile of the worst tensor along ``axis``: its shape word ("flat", "growing",
    "concentrated", "spiky"), the buckets ``(begin, end, rms error)``, the region holding most of
    the error and a sentence.

    Example::

        p = loupe.diff(a, b, axes="T,H,V", along="T").profile
        print(p.shape, p.sentence)   # growing  growing along T: x7.1 from the first ...
    """

    name: str
    axis: str
    shape: str
    buckets: List[Tuple[int, int, float]]
    region: Tuple[int, int]
    region_share: float
    sentence: str


@dataclass
class TensorDiff:
    """One compared pair: its name, shape, dtypes, whether it is past tolerance, its metrics
    (docs/formats.md names them) and the lines loupe prints for it.

    Example::

        for t in loupe.diff(dump_a, dump_b).tensors:
            print(t.name, t.metrics["rms_ratio"], t.headline)
    """

    name: str
    shape: Tuple[int, ...]
    dtype_a: str
    dtype_b: str
    axes: List[str]
    diverged: bool
    metrics: Dict[str, float]
    headline: str
    profile_sentence: Optional[str]
    slice_sentence: Optional[str]
    raw: Dict[str, Any] = field(repr=False)


class DiffResult:
    """What ``loupe.diff`` found.

    Attributes: ``passed`` (every bound holds, or without ``tol`` no element is outside
    assert_close's tolerance, and both sides hold the same names); ``findings`` (the finding
    dicts of ``loupe diff --json``); ``envelope`` (that whole envelope); ``tensors`` (one
    :class:`TensorDiff` per pair, in order); ``worst`` (:class:`Worst` or None when every pair is
    identical); ``profile`` (:class:`Profile` with ``along``, else None); ``first_divergence``
    (the name of the first pair past tolerance, in order; None when none); ``summary`` (the text
    ``loupe diff`` prints).

    Example::

        result = loupe.diff(out, ref, axes="T,D", along="T")
        assert result.passed, result.summary
    """

    def __init__(self, envelope: Dict[str, Any], summary: str,
                 sentences: List[Dict[str, Any]]) -> None:
        self.envelope = envelope
        self.summary = summary
        data = envelope.get("data", {})
        self.findings: List[Dict[str, Any]] = envelope.get("findings", [])
        self.only_in_actual: List[str] = data.get("pairing", {}).get("only_in_a", [])
        self.only_in_expected: List[str] = data.get("pairing", {}).get("only_in_b", [])
        self.tensors: List[TensorDiff] = []
        for raw, said in zip(data.get("tensors", []), sentences):
            metrics = {key: _number(value) for key, value in raw["metrics"].items()}
            metrics["finite_count"] = said["finite_count"]
            self.tensors.append(TensorDiff(
                raw["name"], tuple(raw["shape"]), raw["dtype_a"], raw["dtype_b"], raw["axes"],
                bool(raw["diverged"]), metrics, said["headline"], said["profile"], said["slice"],
                raw))
        self._worst_index = {t.name: s["worst_index"] for t, s in zip(self.tensors, sentences)}
        self.first_divergence: Optional[str] = data.get("first_divergence")
        if self.first_divergence is None and len(self.tensors) == 1 and self.tensors[0].diverged:
            self.first_divergence = self.tensors[0].name
        self.worst_names: List[str] = list(data.get("worst", []))
        verdict = envelope.get("verdict")
        if verdict in ("pass", "fail"):
            within = verdict == "pass"
        else:
            within = not any(tensor.diverged for tensor in self.tensors)
        self.passed: bool = within and not self.only_in_actual and not self.only_in_expected
        self.worst: Optional[Worst] = self._find_worst()
        self.profile: Optional[Profile] = self._find_profile()

    def _worst_tensor(self) -> Optional[TensorDiff]:
        by_name = {tensor.name: tensor for tensor in self.tensors}
        if self.worst_names:
            return by_name[self.worst_names[0]]
        differing = [t for t in self.tensors if self._worst_index.get(t.name, -1) >= 0]
        if not differing:
            return None
        return max(differing, key=lambda t: _severity(t.metrics.get("rms_ratio", 0.0)))

    def _find_worst(self) -> Optional[Worst]:
        tensor = self._worst_tensor()
        if tensor is None or self._worst_index[tensor.name] < 0:
            return None
        flat = self._worst_index[tensor.name]
        index = tuple(int(i) for i in np.unravel_index(flat, tensor.shape)) if tensor.shape \
            else ()
        values = tensor.raw["worst_values"]
        actual, expected = _number(values["a"]), _number(values["b"])
        return Worst(tensor.name, dict(tensor.raw["worst_coords"]), index, actual, expected,
                     abs(actual - expected) if math.isfinite(actual - expected) else math.inf,
                     tensor.metrics.get("rms_ratio", math.nan))

    def _find_profile(self) -> Optional[Profile]:
        tensor = self._worst_tensor()
        candidates = ([tensor] if tensor is not None else []) + self.tensors
        for candidate in candidates:
            raw = candidate.raw.get("profile")
            if raw:
                return Profile(candidate.name, raw["axis"], raw["shape"],
                               [(b["begin"], b["end"], _number(b["value"]))
                                for b in raw["buckets"]],
                               (raw["region"][0], raw["region"][1]),
                               _number(raw["region_share"]), candidate.profile_sentence or "")
        return None

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        past = sum(1 for tensor in self.tensors if tensor.diverged)
        parts = ["PASS" if self.passed else "FAIL",
                 "%d of %d tensor%s past tolerance" % (past, len(self.tensors),
                                                        "" if len(self.tensors) == 1 else "s")]
        if self.first_divergence is not None and len(self.tensors) > 1:
            parts.append("first divergence " + self.first_divergence)
        if self.worst is not None:
            where = ", ".join("%s=%d" % item for item in self.worst.coords.items())
            label = "worst at" if len(self.tensors) == 1 else "worst %s at" % self.worst.name
            parts.append("%s %s (rms_ratio %.3g)" % (label, where, self.worst.rms_ratio))
        if self.profile is not None:
            parts.append(self.profile.sentence.split(";")[0])
        missing = len(self.only_in_actual) + len(self.only_in_expected)
        if missing:
            parts.append("%d name%s on one side only" % (missing, "" if missing == 1 else "s"))
        return "<loupe.DiffResult %s>" % "; ".join(parts)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython shows the summary
        printer.text(repr(self) + "\n" + self.summary)


def _number(value: Any) -> float:
    # The envelope writes NaN and Inf as strings (JSON has no literal for them).
    if isinstance(value, str):
        return float(value.replace("Infinity", "inf"))
    return float(value) if value is not None else math.nan


def _severity(value: float) -> float:
    return math.inf if math.isnan(value) else value


def _axes_list(axes: Axes) -> List[str]:
    if axes is None:
        return []
    if isinstance(axes, str):
        return [name.strip() for name in axes.replace(" ", ",").split(",") if name.strip()]
    return [str(name) for name in axes]


def _bounds(tol: Tol) -> List[str]:
    if tol is None:
        return []
    if isinstance(tol, str):
        return [tol]
    if isinstance(tol, Mapping):
        return ["%s=%r" % (metric, float(limit)) for metric, limit in tol.items()]
    if isinstance(tol, (list, tuple)):
        return [str(text) for text in tol]
    raise UsageError("tol=%r: expected bounds such as {\"rms_ratio\": 1e-3} or \"max_abs=1e-2\""
                     % (tol,), "for elementwise rtol/atol use loupe.assert_close")


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def _apply_rules(options: Any, rules: Rules) -> None:
    """``rules=`` onto the compiled module's options: a TOML file's text, or rules given as dicts
    turned into the same TOML (docs/formats.md, "Threshold rules")."""
    if rules is None:
        return
    if isinstance(rules, (str, os.PathLike)):
        path = os.fspath(rules)
        try:
            with open(path, encoding="utf-8") as source:
                options.rules_text = source.read()
        except OSError as error:
            raise InputError("rules=%r: cannot read the file: %s" % (path, error.strerror),
                             "pass a TOML file of [[rule]] tables, or a list of dicts") from None
        options.rules_origin = path
        return
    if isinstance(rules, Sequence) and all(isinstance(rule, Mapping) for rule in rules):
        lines = []
        for number, rule in enumerate(rules):
            unknown = set(rule) - {"name", "match", "when"}
            if unknown or "match" not in rule or "when" not in rule:
                raise UsageError("rules[%d]=%r: expected keys match, when and optionally name"
                                 % (number, dict(rule)),
                                 "e.g. {\"match\": \"attn\", \"when\": [\"rel <= 0.0085\"]}")
            when = [rule["when"]] if isinstance(rule["when"], str) else list(rule["when"])
            lines.append("[[rule]]")
            if "name" in rule:
                lines.append("name = " + _toml_string(str(rule["name"])))
            lines.append("match = " + _toml_string(str(rule["match"])))
            lines.append("when = [" + ", ".join(_toml_string(str(p)) for p in when) + "]")
        options.rules_text = "\n".join(lines) + "\n"
        options.rules_origin = "rules="
        return
    raise UsageError("rules=%r: expected a rules file path or a list of dicts" % (rules,),
                     "e.g. rules=[{\"match\": \".*\", \"when\": [\"rel <= 0.0085\"]}]")


_TORCH_SUFFIXES = (".pt", ".pth", ".bin")


def _is_torch_file(path: Any) -> bool:
    return os.fspath(path).lower().endswith(_TORCH_SUFFIXES) and os.path.isfile(path)


def _natural_key(name: str) -> List[Any]:
    """Natural order, as `loupe diff` orders a directory: digit runs by value ("layer_2" before
    "layer_10"), the rest by characters, then the name itself."""
    parts: List[Any] = [(0, int(part), "") if part.isdigit() else (1, 0, part)
                        for part in re.split(r"(\d+)", name) if part]
    return parts + [(2, 0, name)]


def _is_torch_directory(path: Any) -> bool:
    """A directory of torch.save files and no .npy/.safetensors (SGLang's dumper writes one per
    rank: forward_pass_id=N___name=X___layer_id=L.pt)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return any(_is_torch_file(os.path.join(path, name)) for name in names) and not any(
        name.lower().endswith((".npy", ".safetensors")) for name in names)


def _torch_load(path: Any, side: str) -> Any:
    """A torch.save file's content (a tensor, or dicts/lists of them), on the CPU, without running
    code from it where this torch allows (weights_only); for a directory of them, {file name
    without its suffix: content} in natural order of the names."""
    path = os.fspath(path)
    if _is_torch_directory(path):
        files = sorted((name for name in os.listdir(path)
                        if _is_torch_file(os.path.join(path, name))), key=_natural_key)
        return {os.path.splitext(name)[0]: _torch_load(os.path.join(path, name), side)
                for name in files}
    if not _is_torch_file(path):
        raise UsageError("%s (%s): a torch.save file is compared with another torch.save file, and "
                         "a directory of them with another directory" % (side, path),
                         "pass two .pt files, or two .npy/.safetensors paths")
    try:
        import torch
    except ImportError:
        raise InputError("%s (%s): reading a .pt file needs torch, which is not importable here"
                         % (side, path), "install torch in this Python, or save the tensors as "
                                         ".safetensors / .npy") from None
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # a torch without weights_only
            return torch.load(path, map_location="cpu")
    except Exception as error:  # torch's unpickling errors have no common type
        raise InputError("%s (%s): torch.load failed: %s" % (side, path,
                                                             str(error).splitlines()[0]),
                         "pass a file written by torch.save holding tensors") from None


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _options(axes: Axes, along: Optional[str], tol: Tol, rtol: Optional[float],
             atol: Optional[float], reproduce: str, equal_nan: bool = False) -> Any:
    _loupe = native()

    options = _loupe.DiffOptions()
    options.axes = _axes_list(axes)
    options.along = along
    options.bounds = _bounds(tol)
    options.rtol = rtol
    options.atol = atol
    options.equal_nan = bool(equal_nan)
    options.reproduce = reproduce
    return options


def _flatten(value: Any, prefix: str = "") -> Dict[str, Any]:
    """Nested dicts, lists and tuples of tensors as {"key.sub": tensor}, in order."""
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif _is_container(value):
        items = enumerate(value)
    else:
        return {prefix[:-1] if prefix else "tensor": value}
    out: Dict[str, Any] = {}
    for key, item in items:
        out.update(_flatten(item, "%s%s." % (prefix, key)))
    return out


def _is_container(value: Any) -> bool:
    """A dict, or a list/tuple holding arrays (a list of numbers is one array)."""
    if isinstance(value, Mapping):
        return True
    if isinstance(value, (list, tuple)):
        return any(not isinstance(item, (bool, int, float, np.generic)) and not (
            isinstance(item, (list, tuple)) and not _is_container(item)) for item in value)
    return False


def _run(actual: Any, expected: Any, oracle: Any, options: Any) -> DiffResult:
    _loupe = native()

    if _is_path(actual) or _is_path(expected):
        if not (_is_path(actual) and _is_path(expected)):
            raise UsageError("actual and expected must both be paths (files or dump directories) "
                             "or both be arrays", "pass two paths, or two arrays / dicts")
        if oracle is not None and not _is_path(oracle):
            raise UsageError("with paths, the oracle must be a path too")
        if any(_is_torch_file(path) or _is_torch_directory(path)
               for path in (actual, expected, oracle) if path is not None):
            # torch.save files: read through torch, compared as the dicts (or tensors) they hold.
            kinds = {os.path.isdir(path) for path in (actual, expected, oracle) if path is not None}
            if len(kinds) > 1:
                raise UsageError("a torch.save file is compared with another torch.save file, and "
                                 "a directory of them with another directory",
                                 "pass two .pt files or two directories of .pt files")
            return _run(_torch_load(actual, "actual"), _torch_load(expected, "expected"),
                        _torch_load(oracle, "the oracle") if oracle is not None else None,
                        options)
        options.reproduce = None  # real files: the `loupe diff` command line reproduces it
        envelope, summary, sentences = _loupe.diff_paths(
            os.fspath(actual), os.fspath(expected),
            os.fspath(oracle) if oracle is not None else None, None, options)
        return DiffResult(json.loads(envelope), summary, sentences)
    single = not _is_container(actual) and not _is_container(expected)
    if single:
        named_a, named_b = {"tensor": actual}, {"tensor": expected}
        named_o = {"tensor": oracle} if oracle is not None else None
    else:
        named_a = _flatten(actual)
        named_b = _flatten(expected)
        named_o = _flatten(oracle) if oracle is not None else None
    pairs = []
    keep = []  # operands stay referenced until the compiled call returns
    for name, value in named_a.items():
        if name not in named_b:
            continue
        a = _arrays.operand(value, "actual '%s'" % name)
        b = _arrays.operand(named_b[name], "expected '%s'" % name)
        o = None
        if named_o is not None:
            if name not in named_o:
                raise InputError("the oracle has no entry '%s'" % name,
                                 "give the oracle the same keys as actual and expected")
            o = _arrays.operand(named_o[name], "the oracle '%s'" % name)
        keep.append((a, b, o))
        pairs.append((name, a.array, a.dtype, b.array, b.dtype,
                      o.array if o is not None else None, o.dtype if o is not None else None))
    if named_o is not None:
        options.label_oracle = "oracle"
    envelope_text, summary, sentences = _loupe.diff_arrays(pairs, options)
    envelope = json.loads(envelope_text)
    only_a = [name for name in named_a if name not in named_b]
    only_b = [name for name in named_b if name not in named_a]
    if only_a or only_b:
        pairing = envelope["data"].setdefault("pairing", {})
        pairing["only_in_a"], pairing["only_in_b"] = only_a, only_b
        for label, names in (("actual", only_a), ("expected", only_b)):
            if names:
                summary += "only in %s (%d): %s\n" % (label, len(names), ", ".join(names[:5]))
    del keep
    return DiffResult(envelope, summary, sentences)


def diff(actual: Any, expected: Any, *, oracle: Any = None, axes: Axes = None,
         along: Optional[str] = None, tol: Tol = None, rtol: Optional[float] = None,
         atol: Optional[float] = None, equal_nan: bool = False, rules: Rules = None,
         statistics: bool = False, dims: Any = None, parallel: Optional[str] = None,
         parallel_b: Optional[str] = None) -> DiffResult:
    """Compare ``actual`` with ``expected`` (and each with an ``oracle``): metrics, the worst
    coordinate, the slice holding the error, the error profile along ``along``, the first
    divergent entry. Runs in C++ (libloupe) on the arrays' own memory.

    ``actual``/``expected``: numpy arrays, torch tensors (CPU or CUDA, any float dtype including
    bfloat16 and fp8), numbers; dicts (or lists) of those, compared by key in ``actual``'s order;
    or two paths (.npy, .safetensors, dump directories), exactly as ``loupe diff A B``.
    ``axes``: one name per dimension ("B,T,H,V" or a sequence). ``along``: the axis to profile.
    ``tol``: bounds such as ``{"rms_ratio": 1e-3}`` or ``"max_abs=1e-2"``; without it, an element
    is past tolerance when |a - b| > atol + rtol * |b| with assert_close's per-dtype defaults, or
    ``rtol``/``atol`` (both or neither, as ``loupe diff --rtol/--atol``). The same infinity on both
    sides agrees; NaN against NaN only with ``equal_nan`` (``--equal-nan``).
    ``rules``: threshold rules (``loupe diff --rules``): a TOML file, or a list of dicts
    ``{"match": REGEX, "when": ["rel <= 0.0085", ...], "name": ...}``; the first rule whose pattern
    is found in a tensor's name decides it, and a tensor no rule matches raises ConfigError.
    ``statistics``: also compute mean_abs, the |a - b| percentiles, each side's stats and the
    downcast diff (a second pass over the data; done anyway when ``tol`` or a rule names one).
    ``dims``/``parallel``/``parallel_b`` (paths only): put rank-sharded dump directories
    (``rank-<r>/``) back together before comparing, as ``loupe diff --dims/--parallel``; ``dims``
    is one spec for every tensor (``"b t(cp,zigzag) h(tp) d"``), a dict ``{name: spec}``, or a
    list of ``"SPEC"``/``"NAME=SPEC"``; without them the dumps' ``loupe.dims``/``loupe.parallel``
    metadata decide (docs/sharded-diff.md).

    Example::

        >>> r = loupe.diff(np.ones((4, 8), np.float32), np.ones((4, 8), np.float32))
        >>> r.passed
        True
    """
    if (rtol is None) != (atol is None):
        raise UsageError("Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         "%s." % ("rtol" if rtol is None else "atol"))
    options = _options(axes, along, tol, rtol, atol,
                       "loupe.diff(actual, expected%s%s%s%s%s)" % (
                           ", axes=%r" % (axes,) if axes else "",
                           ", along=%r" % along if along else "",
                           ", tol=%r" % (tol,) if tol else "",
                           ", rtol=%r, atol=%r" % (rtol, atol) if rtol is not None else "",
                           ", equal_nan=True" if equal_nan else ""), equal_nan)
    options.statistics = bool(statistics)
    if rules is not None:
        if tol is not None or rtol is not None:
            raise UsageError("rules= with tol=/rtol=/atol=: expected one way of deciding",
                             "put the bounds in the rules (\"when\": [\"max_abs <= 1e-2\"])")
        _apply_rules(options, rules)
    if dims is not None or parallel is not None or parallel_b is not None:
        if not (_is_path(actual) and _is_path(expected)):
            raise UsageError("dims=, parallel= and parallel_b= put rank-sharded dump directories "
                             "back together: actual and expected must be paths",
                             "dump each rank into DIR/rank-<r>/ (loupe.dump does) and pass the "
                             "two directories")
        options.dims = _dims_list(dims)
        options.parallel = _text_or_none(parallel, "parallel")
        options.parallel_b = _text_or_none(parallel_b, "parallel_b")
    return _run(actual, expected, oracle, options)


def _dims_list(dims: Any) -> List[str]:
    """dims= as `loupe diff --dims` values: "SPEC" for every tensor or "NAME=SPEC" for one."""
    if dims is None:
        return []
    if isinstance(dims, str):
        return [dims]
    if isinstance(dims, Mapping):
        items = []
        for name, spec in dims.items():
            if not isinstance(name, str) or not isinstance(spec, str):
                raise UsageError("dims=%r: a dict maps tensor names to spec strings" % (dims,),
                                 "e.g. dims={\"attn.o\": \"b t(cp,zigzag) h(tp) d\"}")
            items.append("%s=%s" % (name, spec))
        return items
    if isinstance(dims, (list, tuple)) and all(isinstance(item, str) for item in dims):
        return list(dims)
    raise UsageError("dims=%r: expected a spec string, a dict {name: spec} or a list of "
                     "\"SPEC\"/\"NAME=SPEC\" strings" % (dims,),
                     "e.g. dims=\"b t(cp,zigzag) h(tp) d\"")


def _text_or_none(value: Any, name: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise UsageError("%s=%r: expected groups as text such as \"tp=2,cp=4\"" % (name, value),
                     "the first group varies fastest across ranks (docs/sharded-diff.md)")


def _default_tolerance(dtype_a: str, dtype_b: str) -> Tuple[float, float]:
    """torch's rule: the larger rtol and the larger atol of the two dtypes."""
    rtol_a, atol_a = DEFAULT_TOLERANCES.get(dtype_a, (0.0, 0.0))
    rtol_b, atol_b = DEFAULT_TOLERANCES.get(dtype_b, (0.0, 0.0))
    return max(rtol_a, rtol_b), max(atol_a, atol_b)


def _shape_text(shape: Tuple[int, ...], torch_style: bool) -> str:
    if torch_style:
        return "torch.Size([%s])" % ", ".join(str(extent) for extent in shape)
    return repr(tuple(shape))


def _short_dtype(label: str) -> str:
    return label.replace("torch.", "")


def _item(name: str) -> str:
    return "[%s]" % ", ".join(repr(int(part)) if part.isdigit() else repr(part)
                              for part in name.split("."))


def _widen(operand: _arrays.Operand) -> np.ndarray:
    if operand.dtype == "bfloat16":
        return (operand.array.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if operand.dtype in ("float8_e4m3fn", "float8_e5m2"):
        return fp8_values(operand.dtype)[operand.array]
    return operand.array.astype(np.float64)


def fp8_values(dtype: str) -> np.ndarray:
    """The 256 values of an fp8 dtype ("float8_e4m3fn" or "float8_e5m2"), indexed by bits:
    e4m3fn has no infinities and NaN at S.1111.111; e5m2 is IEEE-like (Inf at S.11111.00)."""
    exponent_bits, mantissa_bits = (4, 3) if dtype == "float8_e4m3fn" else (5, 2)
    bias = (1 << (exponent_bits - 1)) - 1
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = bits & ((1 << mantissa_bits) - 1)
    scale = float(1 << mantissa_bits)
    values = np.where(exponent == 0, mantissa / scale * 2.0 ** (1 - bias),
                      (1 + mantissa / scale) * 2.0 ** (exponent - bias)) * sign
    top = (1 << exponent_bits) - 1
    if dtype == "float8_e4m3fn":
        values[(exponent == top) & (mantissa == (1 << mantissa_bits) - 1)] = np.nan
    else:
        values[(exponent == top) & (mantissa == 0)] = sign[(exponent == top) & (mantissa == 0)] \
            * np.inf
        values[(exponent == top) & (mantissa != 0)] = np.nan
    return values


def _greatest_relative(a: _arrays.Operand, b: _arrays.Operand) -> Tuple[float, Tuple[int, ...]]:
    """torch's "Greatest relative difference" and its index (a failure path only)."""
    left = _widen(a) if a.dtype else a.array.astype(np.float64)
    right = _widen(b) if b.dtype else b.array.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.abs(left - right) / np.abs(right)
    finite_pairs = np.isfinite(left) & np.isfinite(right)
    relative = np.where(finite_pairs, relative, 0.0)
    relative = np.nan_to_num(relative, nan=0.0)  # 0/0
    if relative.size == 0:
        return 0.0, ()
    flat = int(np.argmax(relative))
    return float(relative.flat[flat]), tuple(int(i) for i in np.unravel_index(flat, relative.shape))


def assert_close(actual: Any, expected: Any, *, rtol: Optional[float] = None,
                 atol: Optional[float] = None, axes: Axes = None, along: Optional[str] = None,
                 oracle: Any = None, equal_nan: bool = False, check_dtype: bool = True,
                 check_device: bool = True, msg: Optional[str] = None, rules: Rules = None,
                 **ignored: Any) -> None:
    """A drop-in for ``torch.testing.assert_close`` whose AssertionError says where: the worst
    coordinate, the slice holding the error, the growth along ``along``, the first divergent
    entry of a dict.

    Same rules as torch: ``rtol`` and ``atol`` are both given or both omitted; omitted, they come
    from the dtype (float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5, float32 1.3e-6/1e-5, float64
    1e-7/1e-7, anything else 0/0, the larger of the two dtypes when they differ); an element
    passes when |actual - expected| <= atol + rtol * |expected|; NaN fails unless ``equal_nan``;
    shapes must match and, with ``check_dtype``, dtypes too (AssertionError "The values for
    attribute 'shape' do not match: ..."). Dicts and lists compare entry by entry. torch's other
    keywords (``allow_subclasses``, ``check_layout``, ``check_stride``) are accepted and ignored.
    numpy arrays and torch tensors may be mixed. ``rules`` (as in :func:`diff`) replaces the
    elementwise rule: each entry passes when the first rule matching its name holds.

    Example::

        >>> loupe.assert_close(torch.ones(4), torch.ones(4))          # passes
        >>> loupe.assert_close(out, ref, axes="T,H,D", along="T")     # AssertionError, localised
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not loupe's internals
    if (rtol is None) != (atol is None):
        raise UsageError("Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         "%s." % ("rtol" if rtol is None else "atol"))
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)) and not (
            isinstance(actual, bool) or isinstance(expected, bool)):
        _assert_scalars_close(actual, expected, rtol, atol, equal_nan, msg)
        return
    container = _is_container(actual) or _is_container(expected)
    named_a = _flatten(actual) if container else {"tensor": actual}
    named_b = _flatten(expected) if container else {"tensor": expected}
    if container and list(named_a) != list(named_b) and set(named_a) != set(named_b):
        _fail("The keys of the inputs do not match:\nonly in actual: %s\nonly in expected: %s" % (
            sorted(set(named_a) - set(named_b)), sorted(set(named_b) - set(named_a))), msg, None)
    named_o = (_flatten(oracle) if container else {"tensor": oracle}) if oracle is not None \
        else None

    operands = {}
    for name in named_a:
        a = _arrays.operand(named_a[name], "actual" + (_item(name) if container else ""))
        b = _arrays.operand(named_b[name], "expected" + (_item(name) if container else ""))
        where = "The failure occurred for item %s\n\n" % _item(name) if container else ""
        if a.shape != b.shape:
            torch_style = a.is_torch or b.is_torch
            _fail("%sThe values for attribute 'shape' do not match: %s != %s." % (
                where, _shape_text(a.shape, torch_style), _shape_text(b.shape, torch_style)),
                msg, None)
        if check_dtype and _short_dtype(a.dtype_label) != _short_dtype(b.dtype_label):
            _fail("%sThe values for attribute 'dtype' do not match: %s != %s." % (
                where, a.dtype_label, b.dtype_label), msg, None)
        if check_device and a.is_torch and b.is_torch and a.device != b.device:
            _fail("%sThe values for attribute 'device' do not match: %s != %s." % (
                where, a.device, b.device), msg, None)
        operands[name] = (a, b)

    _loupe = native()

    if rules is not None:
        if rtol is not None:
            raise UsageError("rules= with rtol=/atol=: expected one way of deciding",
                             "put the bounds in the rules (\"when\": [\"max_abs <= 1e-2\"])")
        _assert_by_rules(operands, named_o, container, rules, axes, along, equal_nan, msg)
        return

    pairs = []
    tolerances = {}
    for name, (a, b) in operands.items():
        dtype_a = a.dtype or a.array.dtype.name
        dtype_b = b.dtype or b.array.dtype.name
        pair_rtol, pair_atol = (rtol, atol) if rtol is not None else _default_tolerance(
            _short_dtype(a.dtype_label) if a.is_torch else dtype_a,
            _short_dtype(b.dtype_label) if b.is_torch else dtype_b)
        tolerances[name] = (pair_rtol, pair_atol)
        o = None
        if named_o is not None:
            o = _arrays.operand(named_o[name], "the oracle" + (_item(name) if container else ""))
        pairs.append((name, a, b, o))
    # One call compares every entry in order (the first divergence is the first failing key).
    # Entries of different dtypes get their own tolerance: one call per distinct tolerance
    # would lose the order, so compare per entry when they differ.
    groups: List[List[Any]] = []
    for pair in pairs:
        if groups and tolerances[groups[-1][0][0]] == tolerances[pair[0]]:
            groups[-1].append(pair)
        else:
            groups.append([pair])
    results: List[Tuple[DiffResult, List[Any]]] = []
    for group in groups:
        pair_rtol, pair_atol = tolerances[group[0][0]]
        options = _options(axes, along, None, pair_rtol, pair_atol,
                           "loupe.assert_close(actual, expected, rtol=%r, atol=%r%s%s%s)" % (
                               pair_rtol, pair_atol, ", axes=%r" % (axes,) if axes else "",
                               ", along=%r" % along if along else "",
                               ", equal_nan=True" if equal_nan else ""), equal_nan)
        if named_o is not None:
            options.label_oracle = "oracle"
        tuples = [(name, a.array, a.dtype, b.array, b.dtype,
                   o.array if o is not None else None, o.dtype if o is not None else None)
                  for name, a, b, o in group]
        envelope, summary, sentences = _loupe.diff_arrays(tuples, options)
        results.append((DiffResult(json.loads(envelope), summary, sentences), group))

    failures = []  # (DiffResult, TensorDiff, a, b, mismatches)
    for result, group in results:
        for tensor, (name, a, b, _) in zip(result.tensors, group):
            # The core applies torch's rule: equal infinities agree, NaN with NaN under equal_nan.
            mismatches = int(tensor.metrics.get("mismatch_count", 0))
            if mismatches:
                failures.append((result, tensor, a, b, mismatches))
    if not failures:
        return
    result, tensor, a, b, mismatches = failures[0]
    numel = int(np.prod(tensor.shape)) if tensor.shape else 1
    pair_rtol, pair_atol = tolerances[tensor.name]
    lines = []
    if container:
        lines.append("The failure occurred for item %s" % _item(tensor.name))
        lines.append("")
    lines.append("Tensor-likes are not close!")
    lines.append("")
    lines.append("Mismatched elements: %d / %d (%.1f%%)" % (mismatches, numel,
                                                             100.0 * mismatches / max(numel, 1)))
    worst_index = result._worst_index.get(tensor.name, -1)
    index = tuple(int(i) for i in np.unravel_index(worst_index, tensor.shape)) \
        if worst_index >= 0 and tensor.shape else ()
    lines.append("Greatest absolute difference: %s at index %s (up to %s allowed)" % (
        _torch_number(tensor.metrics["max_abs"]), index, pair_atol))
    relative, relative_index = _greatest_relative(a, b)
    lines.append("Greatest relative difference: %s at index %s (up to %s allowed)" % (
        _torch_number(relative), relative_index, pair_rtol))
    lines.append("")
    lines.extend(_localisation_lines(result, tensor, [f[1].name for f in failures], len(pairs)))
    _fail("\n".join(lines), msg, {"envelope": result.envelope, "summary": result.summary,
                                  "message": "\n".join(lines)})


def _assert_by_rules(operands: Dict[str, Any], named_o: Any, container: bool, rules: Rules,
                     axes: Axes, along: Optional[str], equal_nan: bool,
                     msg: Optional[str]) -> None:
    """assert_close(..., rules=...): one comparison of every entry, each decided by its rule."""
    __tracebackhide__ = True
    _loupe = native()
    options = _options(axes, along, None, None, None,
                       "loupe.assert_close(actual, expected, rules=%r)" % (rules,), equal_nan)
    _apply_rules(options, rules)
    tuples = []
    for name, (a, b) in operands.items():
        o = _arrays.operand(named_o[name], "the oracle") if named_o is not None else None
        tuples.append((name, a.array, a.dtype, b.array, b.dtype,
                       o.array if o is not None else None, o.dtype if o is not None else None))
    envelope, summary, sentences = _loupe.diff_arrays(tuples, options)
    result = DiffResult(json.loads(envelope), summary, sentences)
    failing = [tensor for tensor in result.tensors if tensor.diverged]
    if not failing:
        return
    lines = ["Tensor-likes are not close by their rules (%d of %d entries fail)!" % (
        len(failing), len(result.tensors)), ""]
    for tensor in failing[:8]:
        lines.append("%s: %s" % (_item(tensor.name) if container else "tensor",
                                 rule_sentence(tensor.raw)))
    if len(failing) > 8:
        lines.append("... %d more" % (len(failing) - 8))
    lines.append("")
    lines.extend(_localisation_lines(result, failing[0], [t.name for t in failing],
                                     len(result.tensors)))
    _fail("\n".join(lines), msg, {"envelope": result.envelope, "summary": result.summary,
                                  "message": "\n".join(lines)})


_FAILED_OP = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}


def rule_sentence(raw: Dict[str, Any]) -> str:
    """"rule 'attn' (rules.toml:3): rel 0.012 > 0.0085; max_abs 0.003 <= 0.01" from one tensor
    of a diff envelope's data.tensors."""
    rule = raw.get("rule")
    if rule is None:
        return ""
    parts = []
    for bound in raw.get("bounds", []):
        op = bound["op"] if bound["pass"] else _FAILED_OP[bound["op"]]
        parts.append("%s %.3g %s %.3g" % (bound["metric"], _number(bound["value"]), op,
                                          _number(bound["limit"])))
    return "rule '%s' (%s:%d): %s" % (rule["name"], rule["file"], rule["line"], "; ".join(parts))


def _assert_scalars_close(actual: float, expected: float, rtol: Optional[float],
                          atol: Optional[float], equal_nan: bool, msg: Optional[str]) -> None:
    """Python numbers, as torch compares them (float64 tolerances for floats, exact for ints)."""
    __tracebackhide__ = True
    if rtol is None:
        floating = isinstance(actual, float) or isinstance(expected, float)
        rtol, atol = DEFAULT_TOLERANCES["float64"] if floating else (0.0, 0.0)
    if math.isnan(actual) and math.isnan(expected) and equal_nan:
        return
    difference = abs(actual - expected)
    if actual == expected or difference <= atol + rtol * abs(expected):
        return
    relative = difference / abs(expected) if expected != 0 else math.inf
    # torch 2 names both values first ("Expected 2 but got 1."); torch 1.13 does not.
    values = ("Expected %s but got %s.\n" % (expected, actual)
              if _torch_names_scalar_values() else "")
    if rtol == 0 and atol == 0:  # torch's wording for an exact comparison
        _fail("Scalars are not equal!\n\n%sAbsolute difference: %r\nRelative difference: %r" % (
            values, difference, relative), msg, None)
    _fail("Scalars are not close!\n\n%sAbsolute difference: %r (up to %r allowed)\nRelative "
          "difference: %r (up to %r allowed)" % (values, difference, atol, relative, rtol), msg,
          None)


_SCALAR_VALUES_NAMED: Optional[bool] = None


def _torch_names_scalar_values() -> bool:
    """Whether the installed torch's scalar mismatch message names the two values (asked once, of
    torch itself, so the wording follows whichever torch is installed; without torch, the current
    wording)."""
    global _SCALAR_VALUES_NAMED
    if _SCALAR_VALUES_NAMED is None:
        try:
            import torch

            torch.testing.assert_close(1, 2)
            _SCALAR_VALUES_NAMED = True
        except AssertionError as error:
            _SCALAR_VALUES_NAMED = "Expected 2 but got 1." in str(error)
        except Exception:  # no torch, or one that cannot compare Python numbers
            _SCALAR_VALUES_NAMED = True
    return _SCALAR_VALUES_NAMED


def _torch_number(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else str(value)


def _localisation_lines(result: DiffResult, tensor: TensorDiff, failing: List[str],
                        compared: int) -> List[str]:
    """loupe's few lines: where the error is, its shape along an axis, the slice holding it."""
    lines = []
    worst = result.worst if result.worst is not None and result.worst.name == tensor.name \
        else None
    if worst is not None and worst.coords:
        where = ", ".join("%s=%d" % item for item in worst.coords.items())
        lines.append("loupe: worst at %s: actual %.6g, expected %.6g; rms_ratio %.3g, "
                     "max_abs %.3g" % (where, worst.actual, worst.expected,
                                       tensor.metrics.get("rms_ratio", math.nan),
                                       tensor.metrics.get("max_abs", math.nan)))
    else:
        lines.append("loupe: " + tensor.headline)
    if tensor.profile_sentence:
        lines.append("  error " + tensor.profile_sentence)
    if tensor.slice_sentence:
        lines.append("  " + tensor.slice_sentence)
    if compared > 1:
        others = [name for name in failing if name != tensor.name]
        line = "  first divergent entry: %s (%d of %d entries past tolerance)" % (
            tensor.name, len(failing), compared)
        if others:
            line += "; then " + ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
        lines.append(line)
    if not tensor.profile_sentence and tensor.shape and len(tensor.shape) > 1:
        lines.append("  (pass axes=... and along=AXIS for the error's profile along that axis)")
    return lines


def _fail(message: str, msg: Optional[str], report: Optional[Dict[str, Any]]) -> None:
    __tracebackhide__ = True
    report = dict(report or {"envelope": None, "summary": "", "message": message})
    for listener in list(_failure_listeners):
        listener(report)
    raise AssertionError(msg if msg is not None else message)
