"""``loupe.dump``: record what every module of a torch.nn.Module produced, per forward call, in
safetensors files that ``loupe diff`` reads, to find where two configurations part ways.

Layout of a dump directory (rank-<r>/ inside it when torch.distributed is initialised)::

    DIR/manifest.txt                       one tensor name per line, in execution order
    DIR/<module path>.call<k>.safetensors  the module's outputs of its k-th forward call

Tensors inside a file: ``output`` for a single tensor, ``output.0``, ``output.1`` ... for a tuple
or list, ``output.<key>`` for a dict (non-tensor outputs are skipped and counted in
``dump.skipped``). Forward hooks fire when a module returns, so the execution order is the order
of completion: a block's children come before the block. ``loupe diff A B`` pairs the files by
name and reports the first divergent one in A's manifest order.

Metadata (safetensors ``__metadata__``, strings): ``loupe.module``, ``loupe.call``,
``loupe.step``, ``loupe.rank`` (when torch.distributed is initialised), ``loupe.parallel`` and
``loupe.rank.<group>`` (when given), and ``loupe.dims.<tensor>`` when ``dims`` names the module's
axes (the spec ``loupe diff`` reads: axis names separated by spaces, "B T H D").

Stats-only dumps (``stats_only=True``, for runs too large to write out): no tensor files; instead
``DIR/loupe-stats.jsonl``, a header line ``{"loupe_stats": 1, "quantiles": [...]}`` then one line
per tensor, written as it is produced, with the name the full dump would give it
("<module path>.call<k>.safetensors:output"), ``module``, ``call``, ``step``, ``dtype``,
``shape``, ``sha256`` (of the raw little-endian bytes in C order, as safetensors stores them),
``norm`` (the L2 norm of the finite values, in float64), ``mean``, ``finite``, ``nan_count``,
``inf_count`` and ``quantiles`` (of the finite values at the header's levels, numpy's linear
interpolation). ``loupe diff`` reads it against another stats-only dump or a full one
(docs/formats.md, "Stats-only dumps").
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import struct
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._errors import InputError, UsageError

Filter = Union[None, str, Sequence[str], Callable[[str], bool]]
Dims = Union[None, str, Mapping[str, str]]

_SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}


# The quantile levels of a stats-only dump: min, 1 %, median, 99 %, max.
STATS_QUANTILES = (0.0, 0.01, 0.5, 0.99, 1.0)
STATS_FILE = "loupe-stats.jsonl"


def _float(value: float) -> Any:
    # JSON has no NaN or infinity: write them as strings loupe reads back.
    value = float(value)
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


def tensor_stats(value: Any) -> Dict[str, Any]:
    """The stats a stats-only dump records of one tensor (torch tensor or numpy array).

    Example::

        loupe.dump.tensor_stats(torch.arange(4.0))["norm"]  # 3.7416573867739413
    """
    from . import _arrays

    operand = _arrays.operand(value, "tensor")
    dtype = operand.dtype or operand.array.dtype.name
    digest = hashlib.sha256(operand.array.tobytes()).hexdigest()
    try:
        import torch

        if isinstance(value, torch.Tensor):
            values = value.detach().to("cpu").to(torch.float64).reshape(-1).numpy()
        else:
            values = np.asarray(value, dtype=np.float64).reshape(-1)
    except ImportError:
        values = np.asarray(value, dtype=np.float64).reshape(-1)
    finite_mask = np.isfinite(values)
    finite = values[finite_mask]
    nan_count = int(np.isnan(values).sum())
    inf_count = int(values.size - finite.size - nan_count)
    norm = float(np.sqrt(np.dot(finite, finite))) if finite.size else 0.0
    mean = float(finite.mean()) if finite.size else 0.0
    quantiles = ([_float(q) for q in np.quantile(finite, STATS_QUANTILES)]
                 if finite.size else [])
    return {"dtype": dtype, "shape": list(operand.shape), "sha256": digest, "norm": _float(norm),
            "mean": _float(mean), "finite": int(finite.size), "nan_count": nan_count,
            "inf_count": inf_count, "quantiles": quantiles}


def write_safetensors(path: str, tensors: Mapping[str, Any],
                      metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes ``{name: array or tensor}`` as one .safetensors file (bf16 and fp8 kept as they are).

    Example::

        loupe.dump.write_safetensors("x.safetensors", {"x": torch.ones(2, 3)}, {"loupe.step": "0"})
    """
    from . import _arrays

    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(key): str(value) for key, value in metadata.items()}
    blobs = []
    offset = 0
    for name, value in tensors.items():
        operand = _arrays.operand(value, "tensor '%s'" % name)
        dtype = operand.dtype or operand.array.dtype.name
        if dtype not in _SAFETENSORS_DTYPES:
            raise InputError("tensor '%s': dtype %s has no safetensors name" % (name, dtype))
        data = operand.array.tobytes()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[dtype], "shape": list(operand.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    temporary = path + ".partial"
    with open(temporary, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)
    os.replace(temporary, path)  # a reader never sees half a file


class dump:
    """A context manager that records every selected module's outputs per forward call.

    ``module``: the torch.nn.Module; ``directory``: where to write (created; existing dump files
    of the same names are replaced). ``modules``: which submodules (by path, as
    ``named_modules()`` names them): None for all, a glob ("layers.*.attn"), a list of globs, or a
    callable ``path -> bool``; the root module's path is "model". ``dims``: axis names for the
    outputs, one string for all ("B T D") or ``{glob: spec}`` (first match wins); a spec whose
    number of names differs from a tensor's rank is not written for it. ``step``: recorded as
    ``loupe.step`` (set ``d.step`` between decode steps). ``parallel``/``ranks``: e.g.
    ``"tp=2,cp=4"`` and ``{"tp": 1, "cp": 3}``, recorded for sharded comparisons.
    ``max_calls``: keep at most this many calls per module (None: all). ``cuda_graph``: record
    the outputs of modules that run inside a region captured by ``torch.cuda.graph``: during
    capture each output is copied into a static buffer (the copy is captured with the graph), and
    ``d.after_replay(step)`` writes the buffers of the last replay to
    ``DIR/replay-<step>/<module>.call<k>.safetensors`` (with ``manifest.txt``; calls counted from
    0 in each capture, as an eager dump of one forward counts them), so
    ``loupe diff EAGER_DIR DIR/replay-<step>`` compares graph mode with eager mode. Forward calls
    outside a capture (warm-up) are not recorded in this mode. ``stats_only``: write
    no tensors, only each tensor's stats (norm, sha256, quantiles, shape, dtype) to
    ``loupe-stats.jsonl``, for runs too large to dump whole; ``loupe diff`` of two such dumps (or
    of one and a full dump) names the first divergent tensor, the one to dump in full next.

    Example::

        with loupe.dump(model, "dumps/a", dims={"*.attn.heads": "B H T D", "*": "B T D"}):
            model(tokens)
        # then: loupe diff dumps/a dumps/b --along T
    """

    def __init__(self, module: Any, directory: Union[str, os.PathLike], *,
                 modules: Filter = None, dims: Dims = None, step: int = 0,
                 parallel: Optional[str] = None, ranks: Optional[Mapping[str, int]] = None,
                 max_calls: Optional[int] = None, stats_only: bool = False,
                 cuda_graph: bool = False) -> None:
        import torch

        if not isinstance(module, torch.nn.Module):
            raise UsageError("loupe.dump: expected a torch.nn.Module, got %s"
                             % type(module).__name__, "pass the model (or any submodule)")
        self.module = module
        self.root = os.fspath(directory)
        self.step = int(step)
        self.parallel = parallel
        self.ranks = dict(ranks or {})
        self.max_calls = max_calls
        self.stats_only = bool(stats_only)
        if cuda_graph and stats_only:
            raise UsageError("loupe.dump: cuda_graph and stats_only together",
                             "dump a graph's outputs in full (cuda_graph=True) or stats of an "
                             "eager run (stats_only=True)")
        self.cuda_graph = bool(cuda_graph)
        # Captured outputs: (file name, {tensor name: static buffer}, metadata) per call, in
        # completion order; filled while a graph is captured, written by after_replay.
        self._captured: List[Any] = []
        self._capturing = False
        self._stats_file: Any = None
        self.skipped = 0  # outputs that are not tensors
        self.written: List[str] = []  # tensor names in execution order
        self._select = _selector(modules)
        self._dims = dims
        self._calls: Dict[str, int] = {}
        self._handles: List[Any] = []
        self.rank: Optional[int] = None
        self.directory = self.root

    def __enter__(self) -> "dump":
        import torch

        distributed = getattr(torch, "distributed", None)
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            self.rank = int(distributed.get_rank())
            self.directory = os.path.join(self.root, "rank-%d" % self.rank)
        os.makedirs(self.directory, exist_ok=True)
        if self.stats_only:
            self._stats_file = open(os.path.join(self.directory, STATS_FILE), "w")
            self._stats_file.write(json.dumps({"loupe_stats": 1,
                                               "quantiles": list(STATS_QUANTILES)}) + "\n")
        for path, submodule in self.module.named_modules():
            path = path or "model"
            if self._select(path):
                self._handles.append(submodule.register_forward_hook(self._hook(path)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._stats_file is not None:
            self._stats_file.close()
            self._stats_file = None
        with open(os.path.join(self.directory, "manifest.txt"), "w") as out:
            out.write("# loupe.dump: tensor names in execution order (forward-hook completion)\n")
            for name in self.written:
                out.write(name + "\n")

    def after_replay(self, step: Optional[int] = None) -> str:
        """Writes what the captured graph's last replay left in the static buffers (cuda_graph
        mode) to ``DIR/replay-<step>/`` and returns that directory; ``step`` defaults to
        ``d.step``. Call it after ``graph.replay()``; it synchronises the device first.

        Example::

            with loupe.dump(model, "dumps/graph", cuda_graph=True) as d:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = model(static_in)
                for step in range(3):
                    static_in.copy_(inputs[step]); graph.replay(); d.after_replay(step)
        """
        import torch

        if not self.cuda_graph:
            raise UsageError("loupe.dump.after_replay: this dump was not made with "
                             "cuda_graph=True", "pass cuda_graph=True to loupe.dump")
        if not self._captured:
            raise UsageError("loupe.dump.after_replay: no module ran inside a captured region",
                             "capture the model's forward with torch.cuda.graph inside the "
                             "dump's with-block, then replay it")
        step = self.step if step is None else int(step)
        directory = os.path.join(self.directory, "replay-%d" % step)
        os.makedirs(directory, exist_ok=True)
        torch.cuda.synchronize()
        names: List[str] = []
        for file_name, buffers, metadata in self._captured:
            tensors = {name: buffer.detach().to("cpu") for name, buffer in buffers.items()}
            written = dict(metadata)
            written["loupe.step"] = str(step)
            written["loupe.cuda_graph"] = "replay"
            write_safetensors(os.path.join(directory, file_name), tensors, written)
            names.extend("%s:%s" % (file_name, name) for name in tensors)
        with open(os.path.join(directory, "manifest.txt"), "w") as out:
            out.write("# loupe.dump: tensors of a captured graph's replay, in capture order\n")
            for name in names:
                out.write(name + "\n")
        return directory

    def _hook(self, path: str) -> Callable[..., None]:
        def record(_module: Any, _inputs: Any, output: Any) -> None:
            if self.cuda_graph:
                self._record_captured(path, output)
                return
            call = self._calls.get(path, 0)
            self._calls[path] = call + 1
            if self.max_calls is not None and call >= self.max_calls:
                return
            self._write(path, call, output)
        return record

    def _record_captured(self, path: str, output: Any) -> None:
        import torch

        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if not capturing:
            self._capturing = False  # a warm-up or eager call: not recorded in this mode
            return
        if not self._capturing:
            # A new capture: its calls count from 0, as one eager forward's do.
            self._capturing = True
            self._captured = []
            self._calls = {}
        call = self._calls.get(path, 0)
        self._calls[path] = call + 1
        if self.max_calls is not None and call >= self.max_calls:
            return
        tensors, metadata, file_name = self._collect(path, call, output)
        if not tensors:
            return
        # The buffer is allocated from the graph's private pool and the copy is captured: every
        # replay refreshes it, and nothing outside the graph's own work runs at replay time.
        buffers = {}
        for name, tensor in tensors.items():
            buffer = torch.empty_like(tensor)
            buffer.copy_(tensor)
            buffers[name] = buffer
        self._captured.append((file_name, buffers, metadata))

    def _collect(self, path: str, call: int, output: Any) -> Any:
        import torch

        tensors: Dict[str, Any] = {}

        def collect(value: Any, name: str) -> None:
            if isinstance(value, torch.Tensor):
                tensors[name] = value
            elif isinstance(value, (tuple, list)):
                for index, item in enumerate(value):
                    collect(item, "%s.%d" % (name, index))
            elif isinstance(value, Mapping):
                for key, item in value.items():
                    collect(item, "%s.%s" % (name, key))
            else:
                self.skipped += 1

        collect(output, "output")
        metadata = {"loupe.module": path, "loupe.call": str(call), "loupe.step": str(self.step)}
        if self.rank is not None:
            metadata["loupe.rank"] = str(self.rank)
        if self.parallel:
            metadata["loupe.parallel"] = self.parallel
        for group, rank in self.ranks.items():
            metadata["loupe.rank.%s" % group] = str(rank)
        spec = _dims_for(self._dims, path)
        if spec:
            names = spec.split()
            for name, tensor in tensors.items():
                if len(names) == tensor.dim():
                    metadata["loupe.dims.%s" % name] = spec
        return tensors, metadata, "%s.call%d.safetensors" % (_safe(path), call)

    def _write(self, path: str, call: int, output: Any) -> None:
        tensors, metadata, file_name = self._collect(path, call, output)
        if not tensors:
            return
        if self._stats_file is not None:
            for name, tensor in tensors.items():
                record = {"name": "%s:%s" % (file_name, name), "module": path, "call": call,
                          "step": self.step}
                record.update(tensor_stats(tensor))
                if "loupe.dims.%s" % name in metadata:
                    record["dims"] = metadata["loupe.dims.%s" % name]
                self._stats_file.write(json.dumps(record, separators=(",", ":")) + "\n")
                self._stats_file.flush()  # a crashed run keeps what it recorded
                self.written.append(record["name"])
            return
        write_safetensors(os.path.join(self.directory, file_name), tensors, metadata)
        for name in tensors:
            self.written.append("%s:%s" % (file_name, name))


def _safe(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", path)


def _selector(modules: Filter) -> Callable[[str], bool]:
    if modules is None:
        return lambda path: True
    if callable(modules):
        return modules
    patterns = [modules] if isinstance(modules, str) else list(modules)
    return lambda path: any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def _dims_for(dims: Dims, path: str) -> Optional[str]:
    if dims is None or isinstance(dims, str):
        return dims
    for pattern, spec in dims.items():
        if fnmatch.fnmatchcase(path, pattern):
            return spec
    return None


dump.write_safetensors = staticmethod(write_safetensors)  # type: ignore[attr-defined]
dump.tensor_stats = staticmethod(tensor_stats)  # type: ignore[attr-defined]
