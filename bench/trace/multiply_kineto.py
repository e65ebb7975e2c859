#!/usr/bin/env python3
"""Writes a large Kineto trace by repeating a recorded one end to end.

Usage: multiply_kineto.py SOURCE.json[.gz] OUT.json --mb SIZE

Each copy of SOURCE's events is shifted in time past the one before (its span plus 1 ms), and its
ids (flow ids, `correlation`, `External id`) and ProfilerStep numbers are moved past the previous
copy's, so the result reads as one long recording: flows stay matched within their copy and steps
stay distinct. Metadata events (`ph` "M") are written once. Copies are written until the file
reaches SIZE MB (10^6 bytes); the top-level keys (distributedInfo, baseTimeNanoseconds, ...) are
SOURCE's. Standard library only, so HTA's Python and loupe read the same file.
"""
import argparse
import gzip
import json
import re
import sys

ID_ARGS = ("correlation", "External id")


def template(event):
    """The event's JSON with its time, ids and step number as %-format fields, and their values."""
    original = event
    event = dict(event)
    event["ts"] = "@@ts@@"
    fields = {}
    if "id" in event and isinstance(event["id"], int):
        event["id"] = "@@id@@"
        fields["id"] = True
    args = event.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int):
                args[key] = "@@%s@@" % key
        event["args"] = args
    name = event.get("name")
    step = re.fullmatch(r"ProfilerStep#(\d+)", name) if isinstance(name, str) else None
    if step:
        event["name"] = "@@step@@"
    text = json.dumps(event, separators=(",", ":")).replace("%", "%%")
    text = text.replace('"@@ts@@"', "%(ts).3f")
    text = text.replace('"@@id@@"', "%(id)d")
    for key in ID_ARGS:
        text = text.replace('"@@%s@@"' % key, "%%(%s)d" % key.replace(" ", "_"))
    text = text.replace('"@@step@@"', '"ProfilerStep#%(step)d"')
    args = original.get("args") if isinstance(original.get("args"), dict) else {}
    values = {
        "ts": float(original["ts"]),
        "id": original["id"] if fields else 0,
        "correlation": args.get("correlation", 0) if "%(correlation)d" in text else 0,
        "External_id": args.get("External id", 0) if "%(External_id)d" in text else 0,
        "step": int(step.group(1)) if step else 0,
    }
    return text, values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--mb", type=float, required=True, help="size of OUT in MB (10^6 bytes)")
    options = parser.parse_args()
    opener = gzip.open if options.source.endswith(".gz") else open
    with opener(options.source, "rt") as handle:
        document = json.load(handle)
    events = document.pop("traceEvents")
    metadata = [event for event in events if event.get("ph") == "M"]
    timed = [event for event in events if event.get("ph") != "M" and "ts" in event]
    start = min(float(event["ts"]) for event in timed)
    end = max(float(event["ts"]) + float(event.get("dur", 0)) for event in timed)
    shift_us = end - start + 1000.0
    id_span = 1
    step_span = 1
    for event in timed:
        if isinstance(event.get("id"), int):
            id_span = max(id_span, event["id"] + 1)
        for key in ID_ARGS:
            value = (event.get("args") or {}).get(key)
            if isinstance(value, int):
                id_span = max(id_span, value + 1)
        step = re.fullmatch(r"ProfilerStep#(\d+)", str(event.get("name", "")))
        if step:
            step_span = max(step_span, int(step.group(1)) + 1)
    templates = [template(event) for event in timed]
    limit = int(options.mb * 1e6)
    head = json.dumps(document, separators=(",", ":"))[:-1]
    with open(options.out, "w") as out:
        out.write(head + (',' if document else '') + '"traceEvents":[\n')
        written = out.tell()
        for event in metadata:
            line = json.dumps(event, separators=(",", ":")) + ",\n"
            out.write(line)
            written += len(line)
        copy = 0
        while written < limit:
            values = {}
            chunk = []
            for text, fields in templates:
                values["ts"] = fields["ts"] + copy * shift_us
                values["id"] = fields["id"] + copy * id_span
                values["correlation"] = fields["correlation"] + copy * id_span
                values["External_id"] = fields["External_id"] + copy * id_span
                values["step"] = fields["step"] + copy * step_span
                chunk.append(text % values)
            block = ",\n".join(chunk)
            out.write(("" if copy == 0 else ",\n") + block)
            written += len(block) + 2
            copy += 1
        out.write("\n]}\n")
    print("%s: %d copies of %d events, %.1f MB" % (options.out, copy, len(templates), written / 1e6),
          file=sys.stderr)


if __name__ == "__main__":
    main()
