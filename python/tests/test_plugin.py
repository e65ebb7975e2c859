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
