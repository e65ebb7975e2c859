"""``loupe.trace``: trace analyses (breakdown, overlap, locks, gaps) and trace diffs, in-process.

Reads loupe binary traces and Chrome/Kineto JSON (.gz too), or a ``torch.profiler.profile``
that just ran: it is exported once to a temporary Chrome JSON file (torch's profiler offers no
in-memory export) and analysed from there. Findings have the schema of ``loupe trace analyze
--json``.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union

from ._errors import UsageError, native

Source = Union[str, os.PathLike, Any]


class TraceResult:
    """An analysis: ``findings`` (finding dicts), ``data`` (the tables), ``stats`` (counts of
    repaired or dropped input) and ``envelope`` (all of it).

    Example::

        result = loupe.trace.analyze("trace.json")
        for finding in result.findings:
            print(finding["severity"], finding["claim"])
    """

    def __init__(self, envelope: Dict[str, Any]) -> None:
        self.envelope = envelope
        self.findings: List[Dict[str, Any]] = envelope.get("findings", [])
        self.data: Dict[str, Any] = envelope.get("data", {})
        self.stats: Dict[str, Any] = envelope.get("stats", {})
        self.truncated: bool = bool(envelope.get("truncated", False))

    def __repr__(self) -> str:
        counts: Dict[str, int] = {}
        for finding in self.findings:
            counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
        head = ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items())) or "no findings"
        lines = ["<loupe.trace %s: %s>" % (self.envelope.get("kind", "trace"), head)]
        for finding in self.findings[:6]:
            lines.append("  [%s] %s: %s" % (finding["severity"], finding["id"], finding["claim"]))
        return "\n".join(lines)


class _Materialised:
    """A path for ``source``: itself, or a temporary export of a torch profiler."""

    def __init__(self, source: Source) -> None:
        self.temporary: Optional[str] = None
        if isinstance(source, (str, os.PathLike)):
            self.path = os.fspath(source)
        elif hasattr(source, "export_chrome_trace"):
            handle, self.temporary = tempfile.mkstemp(prefix="loupe-profile-", suffix=".json")
            os.close(handle)
            try:
                source.export_chrome_trace(self.temporary)
            except Exception as error:  # the profiler has not run, or ran without events
                os.unlink(self.temporary)
                raise UsageError("cannot export the profiler's trace: %s" % error,
                                 "analyse after the `with torch.profiler.profile(...)` block "
                                 "has exited") from None
            self.path = self.temporary
        else:
            raise UsageError("expected a trace path or a torch.profiler.profile, got %s"
                             % type(source).__name__)

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: Any) -> None:
        if self.temporary is not None:
            os.unlink(self.temporary)


def _classes(classes: Optional[Dict[str, str]]) -> List[str]:
    return ["%s=%s" % (name, selector) for name, selector in (classes or {}).items()]


def analyze(source: Union[Source, Sequence[Source]], *, classes: Optional[Dict[str, str]] = None,
            overlap: Optional[str] = None, window: str = "", gap_threshold: str = "100us",
            detail: bool = False) -> TraceResult:
    """Breakdown, overlap, lock holders and waiters, and idle gaps of one workload's trace(s),
    as ``loupe trace analyze``. ``classes``: ``{name: selector}`` (docs/formats.md: ``name:REGEX``,
    ``cat:C``, ``thread:X``, ``stream:X``, ``kind:gpu_stream``); ``overlap``: "A,B" of two
    classes; ``window``: a class to analyse per instance.

    Example::

        with torch.profiler.profile() as prof:
            model(x)
        print(loupe.trace.analyze(prof, classes={"mm": "name:matmul"}))
    """
    _loupe = native()

    sources = list(source) if isinstance(source, (list, tuple)) else [source]
    opened = [_Materialised(item) for item in sources]
    try:
        text = _loupe.trace_analyze([item.path for item in opened], _classes(classes), overlap,
                                    window, gap_threshold, detail)
    finally:
        for item in opened:
            item.__exit__()
    return TraceResult(json.loads(text))


def diff(a: Source, b: Source, *, classes: Optional[Dict[str, str]] = None,
         overlap: Optional[str] = None, window: str = "", gap_threshold: str = "100us",
         detail: bool = False) -> TraceResult:
    """Compare two traces of one workload (A before, B after) as findings, as
    ``loupe trace diff A B``: zones that got slower or faster, waits that appeared.

    Example::

        print(loupe.trace.diff("before.json", "after.json").findings[0]["claim"])
    """
    _loupe = native()

    with _Materialised(a) as path_a, _Materialised(b) as path_b:
        text = _loupe.trace_diff(path_a, path_b, _classes(classes), overlap, window,
                                 gap_threshold, detail)
    return TraceResult(json.loads(text))
