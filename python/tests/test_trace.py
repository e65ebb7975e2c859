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
