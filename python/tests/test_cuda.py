"""The CUDA paths of the package, on a machine with a GPU (skipped where torch sees none):
CUDA tensors into diff/assert_close (every float dtype, the same answer as their CPU copies), and a
bench whose variants are CUDA kernels timed with CUDA events (timer="cuda") through `loupe probe
run`, with its verdict, the timer recorded and the device's copy rate next to the samples; and a
check whose candidate first touches CUDA in the child process its pass is forked for."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import loupe

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_tensors_diff_like_their_cpu_copies(dtype):
    generator = torch.Generator().manual_seed(3)
    expected = torch.randn(4, 256, 64, generator=generator).to(getattr(torch, dtype))
    actual = expected.clone()
    actual[2, 100:, 5] += 0.5  # one head-like column drifts after T=100
    on_gpu = loupe.diff(actual.cuda(), expected.cuda(), axes=["B", "T", "D"], along="T")
    on_cpu = loupe.diff(actual, expected, axes=["B", "T", "D"], along="T")
    assert not on_gpu.passed
    assert on_gpu.worst == on_cpu.worst
    assert on_gpu.worst.coords["B"] == 2 and on_gpu.worst.coords["D"] == 5
    assert on_gpu.worst.coords["T"] >= 100
    assert [f["id"] for f in on_gpu.findings] == [f["id"] for f in on_cpu.findings]


def test_assert_close_on_cuda_says_where():
    expected = torch.zeros(8, 128, device="cuda")
    actual = expected.clone()
    actual[3, 77] = 1.0
    with pytest.raises(AssertionError) as raised:
        loupe.assert_close(actual, expected, axes=["H", "T"])
    message = str(raised.value)
    assert "H=3" in message and "T=77" in message, message
    loupe.assert_close(expected.clone(), expected)


SUBJECT = textwrap.dedent('''
    import sys
    import torch
    import loupe

    def copy_once(work):
        work["y"].copy_(work["x"])
        return work["y"]

    def copy_twice(work):
        work["y"].copy_(work["x"])
        work["y"].copy_(work["x"])
        return work["y"]

    @loupe.bench(params={"N": 1 << 24}, variants={"once": copy_once, "twice": copy_twice},
                 outputs=lambda work: {"y": work["y"].cpu().numpy()},
                 bytes_per_call=lambda point: 8.0 * point["N"], timer="cuda")
    def device_copy(point, seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(point["N"], device="cuda", generator=generator)
        return {"x": x, "y": torch.empty_like(x)}

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


def test_cuda_event_bench_through_loupe_probe_run(tmp_path, loupe_executable):
    path = tmp_path / "cuda_subject.py"
    path.write_text(SUBJECT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    completed = subprocess.run([loupe_executable, "probe", "run", "device_copy", "--seed", "5",
                                "--home", str(tmp_path / "home"), "--json", "--",
                                sys.executable, str(path)],
                               capture_output=True, text=True, env=env, timeout=300)
    envelope = json.loads(completed.stdout)
    assert completed.returncode in (0, 1), completed.stderr
    ratio = envelope["data"]["comparisons"][0]
    # "twice" does two copies for one: B/A near 2, SLOWER whatever the threshold.
    assert ratio["verdict"] == "SLOWER", json.dumps(ratio)[:2000]
    assert 1.5 < ratio["ratio"] < 2.5, json.dumps(ratio)[:2000]
    with open(envelope["data"]["observation"]) as handle:
        observation = json.load(handle)
    assert observation["bench"]["timer"] == "cuda_events"
    sys.stdout.write(json.dumps(ratio)[:1500] + "\n")


CHECK_SUBJECT = textwrap.dedent('''
    import sys
    import numpy as np
    import torch
    import loupe

    def inputs(point, rng):
        return {"x": (rng.standard_normal(point["N"]).astype(np.float32), ["N"])}

    def outputs(point):
        return [loupe.Output("y", np.float32, (point["N"],), ["N"],
                             tolerances=[("rms_ratio", 1e-5)])]

    def reference(point, inputs, out):
        out["y"][:] = np.cumsum(inputs["x"], dtype=np.float64).astype(np.float32)

    # CUDA is first touched in the path, inside the child forked for its pass (a CUDA context
    # does not survive fork: a subject must not create one at import).
    @loupe.check(params={"N": 1 << 16}, hidden_points=[{"N": 1000}],
                 hidden_ranges=[("N", 1000, 5000)], inputs=inputs, outputs=outputs,
                 reference=reference)
    def device_cumsum(point, inputs, out):
        x = torch.from_numpy(inputs["x"]).cuda().double()
        out["y"][:] = torch.cumsum(x, 0).float().cpu().numpy()

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


def test_a_check_whose_candidate_runs_on_the_gpu_in_its_forked_child(tmp_path, loupe_executable):
    path = tmp_path / "cuda_check.py"
    path.write_text(CHECK_SUBJECT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    completed = subprocess.run([loupe_executable, "probe", "run", "device_cumsum", "--seed", "5",
                                "--home", str(tmp_path / "home"), "--json", "--",
                                sys.executable, str(path)],
                               capture_output=True, text=True, env=env, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    envelope = json.loads(completed.stdout)
    assert not [f for f in envelope["findings"] if f["severity"] == "fail"]


# --- loupe.dump under CUDA graphs (issue 37) ----------------------------------------------------

class _BakedScale(torch.nn.Module):
    """Multiplies by a Python float read at call time: a captured graph bakes the value it saw at
    capture, so changing it afterwards changes eager mode and not graph mode (the kind of bug a
    capture-time constant or address causes)."""

    def __init__(self):
        super().__init__()
        self.factor = 1.0

    def forward(self, x):
        return x * self.factor


class _GraphNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(16, 16)
        self.scale = _BakedScale()
        self.act = torch.nn.GELU()
        self.last = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.last(self.act(self.scale(self.first(x))))


def _graph_setup():
    torch.manual_seed(0)
    net = _GraphNet().cuda()
    x = torch.randn(2, 8, 16, device="cuda")
    return net, x


def _eager_dump(net, x, directory):
    with torch.no_grad(), loupe.dump(net, directory):
        net(x)


def _graph_dump(net, x, directory):
    static_in = torch.zeros_like(x)
    with torch.no_grad(), loupe.dump(net, directory, cuda_graph=True) as recorder:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture, as torch's docs ask
            for _ in range(2):
                net(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            net(static_in)
        net.scale.factor = 2.0  # eager mode sees this from now on; the graph keeps 1.0
        static_in.copy_(x)
        graph.replay()
        return recorder.after_replay(0)


def test_graph_mode_against_eager_names_the_op_baked_at_capture(tmp_path):
    net, x = _graph_setup()
    replay = _graph_dump(net, x, tmp_path / "graph")
    assert sorted(os.listdir(replay)) == ["act.call0.safetensors", "first.call0.safetensors",
                                          "last.call0.safetensors", "manifest.txt",
                                          "model.call0.safetensors", "scale.call0.safetensors"]
    _eager_dump(net, x, tmp_path / "eager")  # factor 2.0
    result = loupe.diff(str(tmp_path / "eager"), replay)
    assert not result.passed
    assert result.first_divergence == "scale.call0.safetensors:output"
    # The op before it agrees exactly: graph mode recorded the same values.
    first = [t for t in result.tensors if t.name == "first.call0.safetensors:output"][0]
    assert first.metrics["max_abs"] == 0


def test_eager_against_eager_gives_no_finding(tmp_path):
    net, x = _graph_setup()
    net.scale.factor = 2.0
    _eager_dump(net, x, tmp_path / "a")
    _eager_dump(net, x, tmp_path / "b")
    result = loupe.diff(str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.passed and result.first_divergence is None
