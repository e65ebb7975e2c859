"""loupe.dump writes each module's outputs per call with metadata; loupe diff on two dumps finds
the first divergent module in execution order."""

import json
import os
import struct
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import loupe  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.act = torch.nn.GELU()

    def forward(self, x):
        return self.act(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(depth))
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x), {"hidden": x}


def metadata_of(path):
    with open(path, "rb") as handle:
        length = struct.unpack("<Q", handle.read(8))[0]
        return json.loads(handle.read(length))


def make_dumps(tmp_path, fault_block=None):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 5, 8)
    with loupe.dump(net, tmp_path / "a", dims={"*": "B T D"}, step=3):
        net(x)
    if fault_block is not None:
        with torch.no_grad():
            net.blocks[fault_block].linear.bias[4] += 0.5
    with loupe.dump(net, tmp_path / "b", dims={"*": "B T D"}, step=3):
        net(x)
    return net


def test_files_manifest_and_metadata(tmp_path):
    make_dumps(tmp_path)
    manifest = [line for line in (tmp_path / "a" / "manifest.txt").read_text().splitlines()
                if not line.startswith("#")]
    # Completion order: a block's children before the block; the root last.
    assert manifest[:3] == ["blocks.0.linear.call0.safetensors:output",
                            "blocks.0.act.call0.safetensors:output",
                            "blocks.0.call0.safetensors:output"]
    assert manifest[-2:] == ["model.call0.safetensors:output.0",
                             "model.call0.safetensors:output.1.hidden"]
    header = metadata_of(tmp_path / "a" / "blocks.2.linear.call0.safetensors")
    assert header["__metadata__"] == {"loupe.module": "blocks.2.linear", "loupe.call": "0",
                                      "loupe.step": "3", "loupe.dims.output": "B T D"}
    assert header["output"]["dtype"] == "F32" and header["output"]["shape"] == [2, 5, 8]


def test_loupe_diff_names_the_first_divergent_module(tmp_path, loupe_executable):
    make_dumps(tmp_path, fault_block=2)
    result = loupe.diff(tmp_path / "a", tmp_path / "b")
    assert result.first_divergence == "blocks.2.linear.call0.safetensors:output"
    assert result.worst.coords["D"] == 4  # named by the dump's loupe.dims ("B T D")
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b"),
                          "--json"], capture_output=True, text=True)
    envelope = json.loads(cli.stdout)
    assert envelope["data"]["first_divergence"] == "blocks.2.linear.call0.safetensors:output"
    assert envelope["data"]["order"] == "manifest.txt"


def test_identical_runs_pass(tmp_path):
    make_dumps(tmp_path)
    assert loupe.diff(str(tmp_path / "a"), str(tmp_path / "b")).passed


def test_filter_calls_and_bfloat16(tmp_path):
    torch.manual_seed(0)
    net = Net().to(torch.bfloat16)
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    with loupe.dump(net, tmp_path / "d", modules="blocks.*.linear", max_calls=2) as recorder:
        for _ in range(3):
            net(x)
    names = sorted(os.listdir(tmp_path / "d"))
    assert names == ["blocks.%d.linear.call%d.safetensors" % (b, c)
                     for b in range(4) for c in range(2)] + ["manifest.txt"]
    assert recorder.written[0] == "blocks.0.linear.call0.safetensors:output"
    header = metadata_of(tmp_path / "d" / "blocks.1.linear.call1.safetensors")
    assert header["output"]["dtype"] == "BF16"
    # Hooks are removed on exit: a later forward writes nothing.
    net(x)
    assert sorted(os.listdir(tmp_path / "d")) == names


def test_a_non_module_is_a_usage_error(tmp_path):
    with pytest.raises(loupe.UsageError):
        loupe.dump(object(), tmp_path)


def test_distributed_rank_goes_into_its_own_directory(tmp_path):
    """One gloo process group of size 1: the dump lands in rank-0/ with loupe.rank and the
    parallel layout given."""
    import torch.distributed as distributed

    if not distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    distributed.init_process_group("gloo", init_method="file://%s" % (tmp_path / "rendezvous"),
                                   rank=0, world_size=1)
    try:
        net = Net(depth=1)
        with loupe.dump(net, tmp_path / "dump", modules="head", parallel="tp=1",
                        ranks={"tp": 0}) as recorder:
            net(torch.randn(1, 2, 8))
        assert recorder.directory == str(tmp_path / "dump" / "rank-0")
        header = metadata_of(tmp_path / "dump" / "rank-0" / "head.call0.safetensors")
        assert header["__metadata__"]["loupe.rank"] == "0"
        assert header["__metadata__"]["loupe.parallel"] == "tp=1"
        assert header["__metadata__"]["loupe.rank.tp"] == "0"
    finally:
        distributed.destroy_process_group()
