"""Probes declared with @loupe.check / @loupe.bench / @loupe.scenario, run by `loupe probe run`
in a child process: the same guards and verdicts as a C++ subject."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import loupe

SUBJECT = textwrap.dedent('''
    import sys
    import numpy as np
    import loupe

    def inputs(point, rng):
        return {"x": (rng.standard_normal(point["N"]).astype(np.float32), ["N"])}

    def outputs(point):
        return [loupe.Output("y", np.float32, (point["N"],), ["N"], along="N",
                             tolerances=[("rms_ratio", 1e-6)])]

    def reference(point, inputs, out):
        out["y"][:] = np.cumsum(inputs["x"], dtype=np.float64).astype(np.float32)

    @loupe.check(params={"N": 4096, "mode": ("honest", ["honest", "fp16", "mutate"])},
                 inputs=inputs, outputs=outputs, reference=reference)
    def prefix_sum(point, inputs, out):
        """a running sum: float64 accumulation (honest), float16 (drifts), or one that
        overwrites its input"""
        if point["mode"] == "fp16":
            out["y"][:] = np.cumsum(inputs["x"].astype(np.float16), dtype=np.float16)
        elif point["mode"] == "mutate":
            reference(point, inputs, out)
            inputs["x"][0] = 0
        else:
            reference(point, inputs, out)

    @loupe.scenario(params={"n": 3})
    def count(point, seed, out_dir):
        return {"items": float(point["n"])}, []

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


@pytest.fixture
def subject(tmp_path):
    path = tmp_path / "prefix_subject.py"
    path.write_text(SUBJECT)
    return [sys.executable, str(path)]


def probe_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    return env


def run_probe(loupe_executable, subject, *args):
    completed = subprocess.run([loupe_executable, "probe", "run", *args, "--json", "--",
                                *subject], capture_output=True, text=True, env=probe_env(),
                               timeout=120)
    return completed.returncode, json.loads(completed.stdout)


def test_list_describes_the_declared_probes(loupe_executable, subject):
    completed = subprocess.run([*subject, "list", "--json"], capture_output=True, text=True,
                               env=probe_env(), check=True)
    listing = json.loads(completed.stdout)
    assert [(p["name"], p["kind"]) for p in listing["probes"]] == [("prefix_sum", "check"),
                                                                    ("count", "scenario")]
    params = listing["probes"][0]["params"]
    assert params[1] == {"name": "mode", "type": "string", "default": "honest",
                         "allowed": ["honest", "fp16", "mutate"]}
    assert listing["probes"][0]["description"].startswith("a running sum")


def test_honest_check_passes(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum", "--seed", "7")
    assert code == 0, envelope
    assert envelope["verdict"] == "pass"


def test_drifting_candidate_fails_with_growth_along_n(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum", "--set", "mode=fp16",
                               "--seed", "7")
    assert code == 1
    assert envelope["verdict"] == "fail"
    claims = " ".join(f["claim"] for f in envelope["findings"])
    assert "along N" in claims


def test_input_mutation_is_caught_by_the_guard(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum", "--set", "mode=mutate",
                               "--seed", "7")
    assert code == 1
    assert any(f["id"].endswith("guard.input_mutation") for f in envelope["findings"])


def test_bad_parameter_is_exit_2(loupe_executable, subject):
    completed = subprocess.run([loupe_executable, "probe", "run", "prefix_sum", "--set",
                                "mode=bogus", "--", *subject], capture_output=True, text=True,
                               env=probe_env())
    assert completed.returncode == 2
    assert "allowed values are" in completed.stderr


def test_duplicate_probe_names_are_refused():
    from loupe import probe

    before = list(probe._REGISTRY)
    try:
        @loupe.scenario(name="twice_declared")
        def first(point, seed, out_dir):
            return {}, []

        with pytest.raises(loupe.UsageError):
            @loupe.scenario(name="twice_declared")
            def second(point, seed, out_dir):
                return {}, []
    finally:
        probe._REGISTRY[:] = before
