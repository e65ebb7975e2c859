#!/usr/bin/env python3
"""Writes input.loupetrace, a loupe binary trace (docs/formats.md, version 1) with a known schedule."""
import struct, pathlib

names = ["prefill_layer", "moe_dispatch", "experts", "kv_transfer_layer", "kv", "interpreter",
         "prefill", "transfer"]
NO = 0xFFFFFFFF
BEGIN, END, INSTANT, COUNTER, FLOW_BEGIN, FLOW_END, LOCK = 1, 2, 3, 4, 5, 6, 7
WAIT, OBTAIN, RELEASE = 0, 1, 2
def ev(ts, kind, name=NO, sub=0, a=0):
    return struct.pack("<QIBBHQQ", ts, name, kind, sub, 0, a, 0)
prefill = [ev(1000, BEGIN, 0), ev(1100, LOCK, sub=OBTAIN, a=0), ev(1200, BEGIN, 1), ev(7200, END),
           ev(7200, BEGIN, 2), ev(9200, END), ev(9300, LOCK, sub=RELEASE, a=0),
           ev(9350, FLOW_BEGIN, 4, a=1), ev(9400, END)]
transfer = [ev(1500, BEGIN, 3), ev(1500, LOCK, sub=WAIT, a=0), ev(9300, LOCK, sub=OBTAIN, a=0),
            ev(9450, FLOW_END, 4, a=1), ev(9500, LOCK, sub=RELEASE, a=0), ev(9600, END)]
out = b"LOUPETRC" + struct.pack("<IIIIqqqIIIIQ", 1, 72, 1, 1, 1000, 9600, 0, 1234, 2, len(names), 1, 0)
for name in names:
    out += struct.pack("<I", len(name)) + name.encode()
out += struct.pack("<III", 0, 5, 0)
for tid, name_id, os_tid, events in [(1, 6, 101, prefill), (2, 7, 102, transfer)]:
    out += struct.pack("<IIQQQ", tid, name_id, os_tid, len(events), 0) + b"".join(events)
pathlib.Path(__file__).with_name("input.loupetrace").write_bytes(out)
