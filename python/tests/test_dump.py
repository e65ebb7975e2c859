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


# --- stats-only dumps (issue 37): stats per tensor, the first divergent one named -------------

def make_stats_dumps(tmp_path, fault_block=None, stats_b=True):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 5, 8)
    with loupe.dump(net, tmp_path / "a", stats_only=True):
        net(x)
    if fault_block is not None:
        with torch.no_grad():
            net.blocks[fault_block].linear.bias[4] += 0.5
    with loupe.dump(net, tmp_path / "b", stats_only=stats_b):
        net(x)


def stats_lines(directory):
    with open(os.path.join(directory, "loupe-stats.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def test_stats_only_writes_stats_and_no_tensors(tmp_path):
    make_stats_dumps(tmp_path)
    assert sorted(os.listdir(tmp_path / "a")) == ["loupe-stats.jsonl", "manifest.txt"]
    lines = stats_lines(tmp_path / "a")
    assert lines[0] == {"loupe_stats": 1, "quantiles": [0.0, 0.01, 0.5, 0.99, 1.0]}
    assert [line["name"] for line in lines[1:4]] == [
        "blocks.0.linear.call0.safetensors:output", "blocks.0.act.call0.safetensors:output",
        "blocks.0.call0.safetensors:output"]
    first = lines[1]
    assert first["module"] == "blocks.0.linear" and first["call"] == 0 and first["step"] == 0
    assert first["dtype"] == "float32" and first["shape"] == [2, 5, 8]
    assert first["finite"] == 80 and first["nan_count"] == 0 and first["inf_count"] == 0
    assert len(first["quantiles"]) == 5 and len(first["sha256"]) == 64


def test_tensor_stats_exact_values():
    stats = loupe.dump.tensor_stats(torch.tensor([3.0, float("nan"), 4.0, float("inf"), 0.0]))
    assert stats["norm"] == 5.0
    assert stats["mean"] == 7.0 / 3.0
    assert (stats["finite"], stats["nan_count"], stats["inf_count"]) == (3, 1, 1)
    # numpy's linear quantiles of [0, 3, 4]: positions 0, 0.02, 1, 1.98, 2.
    assert stats["quantiles"] == [0.0, 0.06, 3.0, 3.98, 4.0]
    import hashlib
    assert stats["sha256"] == hashlib.sha256(
        np.array([3.0, np.nan, 4.0, np.inf, 0.0], dtype=np.float32).tobytes()).hexdigest()


def test_two_stats_only_runs_name_the_first_divergent_tensor(tmp_path, loupe_executable):
    make_stats_dumps(tmp_path, fault_block=2)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b"),
                          "--json"], capture_output=True, text=True)
    assert cli.returncode == 1, cli.stderr
    envelope = json.loads(cli.stdout)
    data = envelope["data"]
    assert data["mode"] == "stats" and data["sides"] == {"a": "stats", "b": "stats"}
    assert data["first_divergence"] == "blocks.2.linear.call0.safetensors:output"
    verdicts = [tensor["verdict"] for tensor in data["tensors"]]
    # Blocks 0 and 1 (linear, act, block: 6 tensors) are the same bytes; block 2's linear is not.
    assert verdicts[:6] == ["identical"] * 6 and verdicts[6] == "diverged"
    finding = envelope["findings"][0]
    assert finding["id"] == "check.diff.stats_divergence"
    assert finding["next"] == (
        'dump blocks.2.linear.call0.safetensors:output in full on both runs (loupe.dump(model, '
        'DIR, modules="blocks.2.linear")), then loupe diff DIR_A DIR_B --name '
        'blocks.2.linear.call0.safetensors:output')
    text = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True).stdout
    assert text.splitlines()[1].startswith(
        "first divergence (#7 of 15): blocks.2.linear.call0.safetensors:output: norm_rel ")


def test_identical_stats_only_runs_pass(tmp_path, loupe_executable):
    make_stats_dumps(tmp_path)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout.splitlines() == [
        "stats-only comparison (A: stats, B: stats): 15 tensors, 15 identical, 0 agree in their "
        "stats, 0 diverged", "no tensor diverged in its stats"]


def test_stats_only_against_a_full_dump(tmp_path, loupe_executable):
    """The full side's stats are computed by loupe the same way: the same run is identical
    tensor by tensor (same bytes), a planted fault is found at the same tensor."""
    make_stats_dumps(tmp_path, stats_b=False)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b"),
                          "--json"], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    data = json.loads(cli.stdout)["data"]
    assert data["sides"] == {"a": "stats", "b": "full"}
    assert [tensor["verdict"] for tensor in data["tensors"]] == ["identical"] * 15
    # loupe's stats of the full side equal Python's of the same tensor.
    first = data["tensors"][0]
    assert first["a"]["norm"] == pytest.approx(first["b"]["norm"], rel=1e-15)
    assert first["a"]["quantiles"] == pytest.approx(first["b"]["quantiles"], rel=1e-12)
    make_stats_dumps(tmp_path, fault_block=1, stats_b=False)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "b"), str(tmp_path / "a"),
                          "--json"], capture_output=True, text=True)
    assert cli.returncode == 1
    data = json.loads(cli.stdout)["data"]
    assert data["sides"] == {"a": "full", "b": "stats"}
    assert data["first_divergence"] == "blocks.1.linear.call0.safetensors:output"


def test_stats_only_refuses_options_that_need_values(tmp_path, loupe_executable):
    make_stats_dumps(tmp_path)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b"),
                          "--along", "T"], capture_output=True, text=True)
    assert cli.returncode == 2
    assert "--along needs full values on both sides" in cli.stderr + cli.stdout
    (tmp_path / "a" / "loupe-stats.jsonl").write_text('{"loupe_stats": 1, "quantiles": '
                                                      '[0.0, 0.01, 0.5, 0.99, 1.0]}\n{"name": 3}\n')
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a"), str(tmp_path / "b")],
                         capture_output=True, text=True)
    assert cli.returncode == 2
    assert "loupe-stats.jsonl:2)" in cli.stderr + cli.stdout


def test_cuda_graph_mode_outside_a_capture_records_nothing_and_says_so(tmp_path):
    """Without a captured region (here: no CUDA at all, or an eager call), cuda_graph mode
    records nothing, and after_replay says why instead of writing an empty replay."""
    net = Net(depth=1)
    with loupe.dump(net, tmp_path / "g", cuda_graph=True) as recorder:
        net(torch.randn(1, 2, 8))
        with pytest.raises(loupe.UsageError, match="no module ran inside a captured region"):
            recorder.after_replay(0)
    assert sorted(os.listdir(tmp_path / "g")) == ["manifest.txt"]
    with pytest.raises(loupe.UsageError, match="cuda_graph and stats_only together"):
        loupe.dump(net, tmp_path / "h", cuda_graph=True, stats_only=True)
    with loupe.dump(net, tmp_path / "e") as eager:
        with pytest.raises(loupe.UsageError, match="was not made with cuda_graph=True"):
            eager.after_replay(0)
