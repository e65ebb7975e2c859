"""The pytest plugin: --loupe-report DIR writes envelopes and pages for failing asserts only;
without it nothing is written."""

import json
import os
import subprocess
import sys
import textwrap

import loupe

TESTS = textwrap.dedent('''
    import numpy as np
    import loupe

    def test_fails():
        expected = np.zeros((32, 4), np.float32)
        actual = expected.copy()
        actual[:, 3] += np.arange(32, dtype=np.float32) * 1e-3
        loupe.assert_close(actual, expected, axes="T,H", along="T")

    def test_passes():
        loupe.assert_close(np.ones(3), np.ones(3))
''')


def run_pytest(tmp_path, *extra):
    (tmp_path / "test_sample.py").write_text(TESTS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "loupe.pytest_plugin",
                           "-p", "no:cacheprovider", str(tmp_path / "test_sample.py"), *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_report_written_for_the_failing_test_only(tmp_path):
    report = tmp_path / "report"
    completed = run_pytest(tmp_path, "--loupe-report", str(report))
    assert completed.returncode == 1, completed.stdout
    assert "1 failed, 1 passed" in completed.stdout
    files = sorted(os.listdir(report))
    assert files == ["index.html", "test_sample.py_test_fails.1.json",
                     "test_sample.py_test_fails.html"]
    entry = json.loads((report / "test_sample.py_test_fails.1.json").read_text())
    assert entry["test"] == "test_sample.py::test_fails"
    assert entry["envelope"]["kind"] == "diff"
    assert entry["envelope"]["findings"][0]["where"]["coords"] == {"T": 31, "H": 3}
    page = (report / "test_sample.py_test_fails.html").read_text()
    assert "growing along T" in page and "<svg" in page


def test_nothing_written_without_the_option(tmp_path):
    completed = run_pytest(tmp_path)
    assert "1 failed, 1 passed" in completed.stdout
    # Hidden folders belong to other pytest plugins (pytest-benchmark's .benchmarks), not to loupe.
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == ["test_sample.py"]


ONSET_TESTS = textwrap.dedent('''
    import numpy as np
    import loupe

    def test_onset():
        expected = np.zeros((32, 4), np.float32)
        actual = expected.copy()
        actual[20:, 1] += 1e-3
        actual[26:, 1] += 5e-2
        loupe.assert_close(actual, expected, axes="T,H", along="T")
''')


def test_page_draws_the_per_token_chart_with_onset_and_jump(tmp_path):
    """Issue 37: the per-position table of --json is drawn in the page (inline SVG, no script),
    its values in the bars' data attributes, the start and the jump marked."""
    (tmp_path / "test_sample.py").write_text(ONSET_TESTS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    report = tmp_path / "report"
    completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "loupe.pytest_plugin",
                                "-p", "no:cacheprovider", str(tmp_path / "test_sample.py"),
                                "--loupe-report", str(report)],
                               capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert completed.returncode == 1, completed.stdout
    page = (report / "test_sample.py_test_onset.html").read_text()
    assert ("<p>error per T (log scale; red: positions past tolerance); starts at T=20; "
            "jumps x51 at T=26</p>") in page
    assert "<svg class='per-token' width='600' height='140' role='img' data-axis='T' " \
           "data-start='20' data-jump='26'>" in page
    entry = json.loads((report / "test_sample.py_test_onset.1.json").read_text())
    table = entry["envelope"]["data"]["tensors"][0]["per_position"]
    assert table["start"] == 20 and table["jump"] == 26
    # Every position's error is in the page, as the table has it.
    for position, value in enumerate(table["error"]):
        assert "data-position='%d' data-error='%r'" % (position, float(value)) in page
    assert "data-position='19' data-error='0.0'" in page
    assert "<script" not in page and "http" not in page.split("</title>", 1)[1]
