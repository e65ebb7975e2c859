#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/TARGET).

Tensors: a few valid files of several dtypes, versions and layouts, and a few near-valid ones
(truncated, a wrong length, a bad key), so libFuzzer starts next to the interesting branches.
Traces and objectives: the test fixtures (tests/golden/trace, tests/fixtures/kineto,
examples/kda), cut to size, gzipped or truncated. The two recorded binary traces
(serve_*.loupetrace) come from `kda serve --trace` (see fuzz/README.md) and are kept as they are.
Run from the repository root:
    python3 fuzz/make_seeds.py
"""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def npy(descr, shape, payload, version=1, fortran=False, pad_to=64):
    shape_text = "(" + "".join(f"{d}, " for d in shape)[:-2] + ("," if len(shape) == 1 else "") + ")"
    if not shape:
        shape_text = "()"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_text)
    length_size = 2 if version == 1 else 4
    total = 6 + 2 + length_size + len(header) + 1
    header += " " * ((pad_to - total % pad_to) % pad_to) + "\n"
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode("latin-1") + payload


def safetensors(entries, metadata=None, raw_header=None):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def write(folder, name, content):
    path = os.path.join(HERE, "corpus", folder)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(content)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def trace_and_objective_seeds():
    golden = "tests/golden/trace"
    chrome = {
        "corner_cases.json": read(f"{golden}/chrome_corner_cases/input.json"),
        "overlap_gaps.json": read(f"{golden}/kineto_overlap_gaps/input.json"),
        "diff_a.json": read(f"{golden}/diff_chrome/a.json"),
        "flows_counters.json": b'{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":5},'
                               b'{"ph":"s","id":3,"name":"f","pid":1,"tid":1,"ts":1},'
                               b'{"ph":"f","bp":"e","id":3,"name":"f","pid":1,"tid":2,"ts":7},'
                               b'{"ph":"X","name":"b","pid":1,"tid":2,"ts":6,"dur":4},'
                               b'{"ph":"C","name":"q","pid":1,"ts":2,"args":{"depth":3}},'
                               b'{"ph":"i","name":"mark","pid":1,"tid":1,"ts":3}]}',
        "truncated_tail.json": b'[{"ph":"B","name":"x","pid":1,"tid":1,"ts":1},{"ph":"E","pid":1,"tid":1,"ts":4},'
                               b'{"ph":"X","name":"\xff\x01bad","pid":1,"tid":1,"ts":5,"du',
    }
    kineto = gzip.decompress(read("tests/fixtures/kineto/gil_held.json.gz"))
    # The first events of a real Kineto trace; the cut tail is repaired by the importer.
    chrome["kineto_head.json"] = kineto[:6000]
    for name, content in chrome.items():
        write("chrome_json", name, content)

    write("chrome_gzip", "gil_held.json.gz", read("tests/fixtures/kineto/gil_held.json.gz"))
    write("chrome_gzip", "corner_cases.json.gz", gzip.compress(chrome["corner_cases.json"], mtime=0))
    two = gzip.compress(chrome["diff_a.json"][:200], mtime=0) + gzip.compress(b"", mtime=0)
    write("chrome_gzip", "two_members.json.gz", two)
    flows = gzip.compress(chrome["flows_counters.json"], mtime=0)
    write("chrome_gzip", "truncated.json.gz", flows[: len(flows) // 2])
    write("chrome_gzip", "locks.loupetrace.gz",
          gzip.compress(read(f"{golden}/locks_binary/input.loupetrace"), mtime=0))

    locks = read(f"{golden}/locks_binary/input.loupetrace")
    write("trace_binary", "locks.loupetrace", locks)
    write("trace_binary", "locks_truncated.loupetrace", locks[:400])
    write("trace_binary", "version2.loupetrace", locks[:8] + struct.pack("<I", 2) + locks[12:])

    for name in ("smoke.toml", "loupe.toml"):
        shutil.copyfile(os.path.join(ROOT, "examples/kda", name),
                        os.path.join(HERE, "corpus", "objective", name))
    write("objective", "bad_gate.toml",
          b'name = "x"\n[subject]\ncommand = "kda probe"\n[[check]]\nprobe = "p"\n'
          b'params = { T = [1, 2], mode = "a" }\n[[gate]]\nname = "g"\nexpr = "check.p.rms_ratio <= "\n')
    write("objective", "zip_and_bench.toml",
          b'name = "z"\ncascade = "all"\n[subject]\ncommand = ["s"]\ntimeout_s = 5\n'
          b'[[bench]]\nprobe = "b"\nvariants = ["x", "y"]\nzip = { n = [1, 2], m = [3, 4] }\n'
          b'threshold = 0.1\n[[gate]]\nname = "g"\nexpr = "b[configured] not SLOWER than b[any] where n >= 2"\n'
          b'[[deployment_key]]\nkey = "k"\nvalues = ["x", "y"]\nimplies = [{ probe = "b" }]\n'
          b'[[deployment]]\nname = "d"\nsettings = { k = "x" }\n')


def main():
    f32 = struct.pack("<6f", 1.0, -2.5, float("nan"), float("inf"), 0.0, -0.0)
    write("npy", "f32_2x3.npy", npy("<f4", [2, 3], f32))
    write("npy", "f64_be_fortran.npy", npy(">f8", [2, 2], struct.pack(">4d", 1, 2, 3, 4), fortran=True))
    write("npy", "i64_v2.npy", npy("<i8", [3], struct.pack("<3q", -1, 0, 2**62), version=2))
    write("npy", "u8_v3_scalar.npy", npy("|u1", [], b"\x07", version=3))
    write("npy", "bool_empty.npy", npy("|b1", [0, 4], b""))
    write("npy", "f16_4.npy", npy("<f2", [4], struct.pack("<4e", 1.0, 0.5, -65504.0, 6e-8)))
    write("npy", "i32_3d.npy", npy("<i4", [2, 1, 2], struct.pack("<4i", 1, -2, 3, -4)))
    write("npy", "truncated_data.npy", npy("<f4", [2, 3], f32[:10]))
    write("npy", "bad_key.npy", npy("<f4", [1], f32[:4]).replace(b"fortran_order", b"fortran_ordex"))
    write("npy", "header_past_end.npy", npy("<f4", [1], b"")[:20])

    write("safetensors", "f32_bf16.safetensors", safetensors([
        ("weight", "F32", [2, 3], f32),
        ("bias", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC000))]))
    write("safetensors", "metadata_fp8.safetensors", safetensors([
        ("scale", "F8_E4M3", [4], bytes([0x38, 0x7F, 0xB8, 0x00])),
        ("steps", "I64", [1, 1], struct.pack("<q", 12)),
        ("flags", "BOOL", [3], b"\x00\x01\x01")], metadata={"format": "pt", "seed": "7"}))
    write("safetensors", "scalar_and_empty.safetensors", safetensors([
        ("x", "F64", [], struct.pack("<d", 3.25)),
        ("none", "U16", [0, 2], b"")]))
    write("safetensors", "overlapping.safetensors",
          safetensors([], raw_header=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                     b'"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}')
          + f32[:12])
    write("safetensors", "wrong_size.safetensors",
          safetensors([], raw_header=b'{"a":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}}')
          + b"\x00" * 4)
    write("safetensors", "header_past_end.safetensors", struct.pack("<Q", 1000) + b"{}")
    trace_and_objective_seeds()


if __name__ == "__main__":
    main()
