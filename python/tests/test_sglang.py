"""SGLang's dumper layout (one torch.save file per value, every rank in one directory, meta with
the parallel info and dims) converted to loupe's sharded layout, then unsharded by loupe diff by
those dims: the planted fault is named with its tensor, step and TP rank."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import loupe  # noqa: E402
from loupe import sglang  # noqa: E402

T, H, D = 6, 4, 8


def write_sglang_dump(directory, fault=None):
    """Two TP ranks, two steps, two layers: `attn_out` (t h[tp] d, cut along h) and `mlp_out`
    (t d, replicated), in SGLang's dumper file names and {'value', 'meta'} files. `fault`:
    (step, layer, tp_rank) whose attn_out shard gets +0.5 at one element."""
    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(5)
    dump_index = {0: 0, 1: 0}
    for step in range(2):
        for layer in range(2):
            full = torch.randn(T, H, D, generator=generator)
            mlp = torch.randn(T, D, generator=generator)
            for rank in range(2):
                shard = full[:, rank * 2:(rank + 1) * 2, :].clone()
                if fault == (step, layer, rank):
                    shard[3, 1, 5] += 0.5
                for name, value, dims in (("attn_out", shard, "t h[tp] d"),
                                          ("mlp_out", mlp.clone(), "t d")):
                    dump_index[rank] += 1
                    tags = [("step", step), ("rank", rank), ("dump_index", dump_index[rank]),
                            ("name", name), ("recompute_status", "disabled"),
                            ("layer_id", layer)]
                    meta = dict(tags)
                    meta.update({"world_rank": rank, "world_size": 2, "dims": dims,
                                 "sglang_parallel_info": {"tp_rank": rank, "tp_size": 2,
                                                          "pp_rank": 0, "pp_size": 1}})
                    file_name = "___".join("%s=%s" % pair for pair in tags) + ".pt"
                    torch.save({"value": value, "meta": meta}, os.path.join(directory, file_name))


def test_dims_grammar_maps_to_loupes():
    assert sglang.loupe_dims("t h[tp] d", "f") == ("t h(tp) d", ["tp"])
    assert sglang.loupe_dims("t[cp:zigzag] d[tp:partial]", "f") == (
        "t(cp,zigzag) d(tp,partial)", ["cp", "tp"])
    assert sglang.loupe_dims("t[cp:zigzag+partial] d", "f")[0] == "t(cp,zigzag,partial) d"
    with pytest.raises(loupe.InputError, match=r"f: dims '\(a\*b\) d': axis '\(a\*b\)'"):
        sglang.loupe_dims("(a*b) d", "f")
    with pytest.raises(loupe.InputError, match="group 'pp'; loupe unshards tp, cp, ep, sp and dp"):
        sglang.loupe_dims("t[pp] d", "f")


def test_convert_writes_ranks_manifest_and_metadata(tmp_path):
    write_sglang_dump(tmp_path / "a")
    summary = sglang.convert(tmp_path / "a", tmp_path / "out")
    assert summary == {"ranks": 2, "tensors": 16, "steps": [0, 1]}
    assert sorted(os.listdir(tmp_path / "out")) == ["rank-0", "rank-1"]
    manifest = [line for line in (tmp_path / "out" / "rank-1" / "manifest.txt").read_text()
                .splitlines() if not line.startswith("#")]
    assert manifest[:2] == ["attn_out___layer_id=0.step0.safetensors:value",
                            "mlp_out___layer_id=0.step0.safetensors:value"]
    assert len(manifest) == 8
    with open(tmp_path / "out" / "rank-1" / "attn_out___layer_id=0.step0.safetensors", "rb") as f:
        import struct
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert header["__metadata__"] == {"loupe.rank": "1", "loupe.step": "0",
                                      "loupe.dims.value": "t h(tp) d", "loupe.parallel": "tp=2",
                                      "loupe.rank.tp": "1"}
    assert header["value"]["shape"] == [T, 2, D]


def test_loupe_diff_unshards_by_the_dumps_dims_and_names_the_rank(tmp_path, loupe_executable):
    write_sglang_dump(tmp_path / "a")
    write_sglang_dump(tmp_path / "b", fault=(1, 0, 1))
    for side in ("a", "b"):
        completed = subprocess.run([sys.executable, "-m", "loupe.sglang", str(tmp_path / side),
                                    str(tmp_path / ("out_" + side))],
                                   capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=os.path.dirname(
                                       os.path.dirname(loupe.__file__))))
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.startswith("16 tensors of 2 rank(s), steps [0, 1] -> ")
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "out_a"),
                          str(tmp_path / "out_b"), "--json"], capture_output=True, text=True)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    envelope = json.loads(cli.stdout)
    assert envelope["data"]["first_divergence"] == "attn_out___layer_id=0.step1.safetensors:value"
    first = [t for t in envelope["data"]["tensors"]
             if t["name"] == "attn_out___layer_id=0.step1.safetensors:value"][0]
    assert first["shape"] == [T, H, D]  # unsharded by the dims "t h[tp] d"
    # The worst element, in the logical tensor: TP rank 1 holds heads 2-3, so its local head 1
    # is head 3.
    assert first["worst_coords"] == {"t": 3, "h": 3, "d": 5}
    text = subprocess.run([loupe_executable, "diff", str(tmp_path / "out_a"),
                           str(tmp_path / "out_b")], capture_output=True, text=True).stdout
    assert ("A unsharded (tp=2, dims 't h(tp) d'): TP rank 1 holds 100% of the squared error "
            "(fair share 50%): h in [2, 4); global rank 1") in text, text
    # The raw SGLang directories are not compared as nothing: loupe says how to read them.
    raw = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert raw.returncode == 2
    assert raw.stderr.startswith("loupe: A (%s): holds 16 torch.save (.pt) files and no .npy or "
                                 ".safetensors tensor\nhint: an SGLang dumper directory: convert "
                                 "each run with PYTHONPATH=build/release/python python3 -m "
                                 "loupe.sglang DIR OUT" % (tmp_path / "a")), raw.stderr
    same = subprocess.run([loupe_executable, "diff", str(tmp_path / "out_a"),
                           str(tmp_path / "out_a")], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout


def test_not_an_sglang_dump_is_an_input_error(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(loupe.InputError, match="no .pt files"):
        sglang.convert(tmp_path / "x", tmp_path / "out")
    torch.save({"value": torch.ones(2)}, tmp_path / "x" / "step=0___rank=0.pt")
    with pytest.raises(loupe.InputError, match=r"expected \{'value': tensor, 'meta'"):
        sglang.convert(tmp_path / "x", tmp_path / "out")
    assert sglang.main([]) == 2
