"""pytest plugin (entry point ``pytest11``: ``loupe``): ``--loupe-report DIR`` writes, for every
test whose ``loupe.assert_close`` failed, each failing assert's envelope (``<test>.<k>.json``,
the schema of ``loupe diff --json``) and one HTML page per test (``<test>.html``: the findings,
the error profile and, with ``along=``, the per-token chart with the onset and jump marked), with
``index.html`` listing them. Without ``--loupe-report`` the plugin does nothing at all.

From the build tree (no entry point there): ``python3 -m pytest -p loupe.pytest_plugin ...``.

Example::

    python3 -m pytest tests/ --loupe-report .loupe/pytest
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from typing import Any, Dict, List, Optional

import pytest

from . import _diff


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("loupe")
    group.addoption("--loupe-report", metavar="DIR", default=None,
                    help="write each failing loupe.assert_close's envelope and an HTML page per "
                         "failing test into DIR")


def pytest_configure(config: Any) -> None:
    directory = config.getoption("--loupe-report", default=None)
    if directory:
        config.pluginmanager.register(_Reporter(directory), "loupe-reporter")


class _Reporter:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.current: Optional[List[Dict[str, Any]]] = None
        self.pages: List[tuple] = []
        os.makedirs(directory, exist_ok=True)

    def _listen(self, report: Dict[str, Any]) -> None:
        if self.current is not None:
            self.current.append(report)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        self.current = []
        _diff._failure_listeners.append(self._listen)
        try:
            yield
        finally:
            _diff._failure_listeners.remove(self._listen)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        outcome = yield
        report = outcome.get_result()
        if report.when != "call":
            return
        asserts, self.current = self.current or [], None
        if not report.failed or not asserts:
            return
        stem = re.sub(r"[^A-Za-z0-9_.\-]+", "_", item.nodeid).strip("_")
        for index, entry in enumerate(asserts):
            with open(os.path.join(self.directory, "%s.%d.json" % (stem, index + 1)), "w") as out:
                json.dump({"test": item.nodeid, "message": entry["message"],
                           "envelope": entry["envelope"]}, out, indent=1)
                out.write("\n")
        page = stem + ".html"
        with open(os.path.join(self.directory, page), "w") as out:
            out.write(_page(item.nodeid, asserts))
        self.pages.append((item.nodeid, page, len(asserts)))

    def pytest_sessionfinish(self, session: Any) -> None:
        rows = "".join('<li><a href="%s">%s</a> (%d failing assert%s)</li>' % (
            html.escape(page), html.escape(test), count, "" if count == 1 else "s")
            for test, page, count in self.pages)
        with open(os.path.join(self.directory, "index.html"), "w") as out:
            out.write(_HEAD % "loupe: failing asserts" + "<h1>loupe: failing asserts</h1><ul>%s"
                      "</ul>%s</body></html>\n" % (rows, "" if rows else "<p>none</p>"))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.pages:
            terminalreporter.write_line("loupe: %d failing test page(s) in %s/index.html" % (
                len(self.pages), self.directory))


_HEAD = ("<!doctype html><html><head><meta charset='utf-8'><title>%s</title><style>"
         "body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}"
         "pre{background:#f6f6f6;padding:.8em;overflow-x:auto}"
         "td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #ddd}"
         ".fail{color:#b00}.warn{color:#a60}.info{color:#555}</style></head><body>")


def _profile_svg(profile: Dict[str, Any]) -> str:
    """Bars of the error profile along its axis (rms error per bucket)."""
    buckets = profile.get("buckets", [])
    values = [_diff._number(bucket["value"]) for bucket in buckets]
    finite = [value for value in values if math.isfinite(value)]
    top = max(finite) if finite else 0.0
    if not buckets or top <= 0:
        return ""
    width, height = 600, 120
    bar = width / len(buckets)
    rects = []
    for index, (bucket, value) in enumerate(zip(buckets, values)):
        share = 1.0 if not math.isfinite(value) else value / top
        rects.append("<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#c44'>"
                     "<title>%s [%d, %d): %s</title></rect>" % (
                         index * bar, height - share * height, max(bar - 1, 1), share * height,
                         html.escape(profile["axis"]), bucket["begin"], bucket["end"], value))
    return ("<p>error along %s (%s)</p><svg width='%d' height='%d' role='img'>%s</svg>" % (
        html.escape(profile["axis"]), html.escape(profile["shape"]), width, height,
        "".join(rects)))


def _per_token_svg(table: Dict[str, Any]) -> str:
    """The per-position table (``per_position``: the error of each position along ``along``)
    as a chart, one bar per position on a log scale, the onset ("starts at") and the jump
    marked. Every value is also in the bar's data attributes, so the page carries the table."""
    errors = [_diff._number(value) for value in table.get("error", [])]
    if not errors:
        return ""
    axis = html.escape(str(table.get("axis", "")))
    positive = [value for value in errors if math.isfinite(value) and value > 0]
    width, height, top_pad = 600, 140, 16
    bar = width / len(errors)
    high = math.log10(max(positive)) if positive else 0.0
    low = math.log10(min(positive)) if positive else 0.0
    low = min(low, high - 1.0)  # at least one decade, so one value does not fill the chart

    def bar_height(value: float) -> float:
        if not math.isfinite(value):
            return float(height - top_pad)
        if value <= 0:
            return 0.0
        return (math.log10(value) - low) / (high - low) * (height - top_pad)

    start, jump = table.get("start"), table.get("jump")
    mismatches = table.get("mismatches", [])
    parts = []
    for position, value in enumerate(errors):
        h = max(bar_height(value), 0.0)
        failing = position < len(mismatches) and mismatches[position] > 0
        parts.append("<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' "
                     "data-position='%d' data-error='%r'><title>%s=%d: error %r</title></rect>" % (
                         position * bar, height - h, max(bar - 0.5, 0.5), h,
                         "#c44" if failing else "#888", position, value, axis, position, value))
    for label, at, colour in (("starts", start, "#06c"), ("jumps", jump, "#a60")):
        if at is None:
            continue
        x = (at + 0.5) * bar
        parts.append("<line x1='%.1f' x2='%.1f' y1='0' y2='%d' stroke='%s' stroke-width='2'/>"
                     "<text x='%.1f' y='11' font-size='11' fill='%s'>%s at %s=%d</text>" % (
                         x, x, height, colour, x + 3, colour, label, axis, at))
    caption = "error per %s (log scale; red: positions past tolerance)" % axis
    if start is not None:
        caption += "; starts at %s=%d" % (axis, start)
    if jump is not None:
        caption += "; jumps x%s at %s=%d" % (_short(table.get("jump_factor")), axis, jump)
    return ("<p>%s</p><svg class='per-token' width='%d' height='%d' role='img' data-axis='%s' "
            "data-start='%s' data-jump='%s'>%s</svg>" % (
                caption, width, height, axis, "" if start is None else start,
                "" if jump is None else jump, "".join(parts)))


def _short(value: Any) -> str:
    number = _diff._number(value) if value is not None else float("nan")
    return "%.3g" % number


def _page(test: str, asserts: List[Dict[str, Any]]) -> str:
    parts = [_HEAD % html.escape(test), "<h1>%s</h1>" % html.escape(test)]
    for index, entry in enumerate(asserts):
        parts.append("<h2>failing assert %d</h2><pre>%s</pre>" % (index + 1,
                                                                  html.escape(entry["message"])))
        envelope = entry.get("envelope")
        if not envelope:
            continue
        rows = "".join("<tr><td class='%s'>%s</td><td>%s</td><td>%s</td></tr>" % (
            html.escape(f["severity"]), html.escape(f["severity"]), html.escape(f["id"]),
            html.escape(f["claim"])) for f in envelope.get("findings", []))
        parts.append("<table><tr><th>severity</th><th>finding</th><th>claim</th></tr>%s</table>"
                     % rows)
        for tensor in envelope.get("data", {}).get("tensors", []):
            if tensor.get("diverged") and tensor.get("profile"):
                parts.append(_profile_svg(tensor["profile"]))
            if tensor.get("diverged") and tensor.get("per_position"):
                parts.append(_per_token_svg(tensor["per_position"]))
        parts.append("<details><summary>loupe diff summary</summary><pre>%s</pre></details>"
                     % html.escape(entry.get("summary", "")))
    parts.append("</body></html>\n")
    return "".join(parts)
