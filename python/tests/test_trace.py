"""loupe.trace.analyze and diff on files and on a torch profiler that just ran."""

import gzip
import os
import shutil

import pytest

import loupe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINETO = os.path.join(ROOT, "tests", "fixtures", "kineto")


def test_analyze_and_diff_of_kineto_fixtures_name_the_lock():
    held = os.path.join(KINETO, "gil_held.json.gz")
    released = os.path.join(KINETO, "gil_released.json.gz")
    analysis = loupe.trace.analyze(held)
    assert analysis.envelope["kind"] == "trace.analyze"
    assert analysis.findings
    compared = loupe.trace.diff(released, held)
    assert compared.envelope["kind"] == "trace.diff"
    assert compared.findings
    assert "trace." in repr(compared)


def test_missing_trace_is_an_input_error(tmp_path):
    with pytest.raises(loupe.InputError):
        loupe.trace.analyze(str(tmp_path / "missing.json"))


def test_bad_selector_is_a_usage_error():
    with pytest.raises(loupe.UsageError):
        loupe.trace.analyze(os.path.join(KINETO, "gil_held.json.gz"), overlap="only_one")


def test_torch_profiler_is_analysed_without_a_user_file():
    torch = pytest.importorskip("torch")
    with torch.profiler.profile() as profiler:
        x = torch.randn(64, 64)
        for _ in range(3):
            x = torch.matmul(x, x).tanh()
    result = loupe.trace.analyze(profiler, classes={"mm": "name:matmul|mm"})
    assert result.envelope["kind"] == "trace.analyze"
    assert result.data


def test_overlap_of_real_h200_profiles():
    """tests/fixtures/kineto: the same HtoD copies on a side stream (copy_overlap) and on the
    compute stream (copy_serial), recorded with torch.profiler on the H200."""
    classes = {"copy": "name:Memcpy", "kernel": "kind:gpu_stream&name:gemm"}
    overlapped = loupe.trace.analyze(os.path.join(KINETO, "copy_overlap.json.gz"),
                                     classes=classes, overlap="copy,kernel")
    serial = loupe.trace.analyze(os.path.join(KINETO, "copy_serial.json.gz"), classes=classes,
                                 overlap="copy,kernel")
    share = overlapped.data["overlap"]["overlap_ns"] / overlapped.data["overlap"]["a_ns"]
    assert 0.8 < share < 0.9  # 85 % of the copy time under a GEMM
    serial_share = serial.data["overlap"]["overlap_ns"] / serial.data["overlap"]["a_ns"]
    assert serial_share < 0.01
    assert overlapped.findings[0]["id"] == "trace.overlap.classes"
