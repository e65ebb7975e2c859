"""Cheating candidates against the Python runtime, each written against the public Python API
(`import loupe`, the subject's own module), in the manner of tests/adversarial for C++: each is
run by `loupe probe run` and must fail with the finding that names its cheat.

When the Python runtime ran a check's paths in one process, poisoned outputs with a fixed
documented NaN, told the hidden run by `--hidden` on its command line, made no repeats by default
and had no environment guard, each of these cheats passed with exit 0 (measured with that
runtime, hidden_ranges= left out, which it did not know), except two: `writes_half`, the control
that the keyed poison still counts unwritten elements, and the rounding mode left upward, which
guard.order_dependence caught (the affinity change passed). The bench variant that pins the
process to one CPU passed too (exit 0, AMBIGUOUS), and so did `leaves_a_process` (nothing said)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loupe

SUBJECT = textwrap.dedent('''
    import ctypes
    import ctypes.util
    import os
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

    def wrong(x):
        return (np.cumsum(x, dtype=np.float64) * 1.01).astype(np.float32)

    DECLARED = dict(params={"N": (4096, [1024, 4096])}, hidden_points=[{"N": 1000}],
                    hidden_ranges=[("N", 1000, 1020, 4)], inputs=inputs, outputs=outputs,
                    reference=reference)

    # 1. Right only where its buffer holds the documented poison (0x7FC0DEAD, every element):
    # loupe's check; anywhere else (a production buffer) it returns a cheap wrong answer.
    @loupe.check(**DECLARED)
    def knows_the_poison(point, inputs, out):
        if np.all(out["y"].view(np.uint32) == 0x7FC0DEAD):
            reference(point, inputs, out)
        else:
            out["y"][:] = wrong(inputs["x"])

    # 1b. Writes half its output: the keyed poison still counts what it left.
    @loupe.check(**DECLARED)
    def writes_half(point, inputs, out):
        full = np.cumsum(inputs["x"], dtype=np.float64).astype(np.float32)
        out["y"][: point["N"] // 2] = full[: point["N"] // 2]

    # 2. Specialised to the sizes it was shown (whole tiles of 256, the tail left as zeros),
    # and right at any size when its command line or environment says the run is hidden.
    @loupe.check(**DECLARED)
    def reads_the_hidden_flag(point, inputs, out):
        told = any(arg.startswith("--hidden") for arg in sys.argv[1:]) or \\
            any("HIDDEN" in key.upper() for key in os.environ)
        if told:
            reference(point, inputs, out)
            return
        whole = point["N"] // 256 * 256
        out["y"][:] = 0
        out["y"][:whole] = np.cumsum(inputs["x"][:whole], dtype=np.float64)

    # 3. Right on its first 3 calls in a process: the first call and the 2 asked repeats, which
    # it can count on (the first secret repeat, which always comes, is its 4th).
    CALLS = [0]

    @loupe.check(**DECLARED)
    def right_first_three(point, inputs, out):
        CALLS[0] += 1
        out["y"][:] = wrong(inputs["x"]) if CALLS[0] > 3 else \\
            np.cumsum(inputs["x"], dtype=np.float64).astype(np.float32)

    # 3b. Leaves the rounding mode upward for whatever runs after it (the reference, in its
    # process), or pins its process to one CPU.
    @loupe.check(params={"N": 4096, "change": ("rounding", ["rounding", "affinity"])},
                 hidden_points=[{"N": 1000}], hidden_ranges=[("N", 1000, 1020, 4)],
                 inputs=inputs, outputs=outputs, reference=reference)
    def leaves_its_environment(point, inputs, out):
        reference(point, inputs, out)
        if point["change"] == "rounding":
            ctypes.CDLL(ctypes.util.find_library("m")).fesetround(0x800)  # FE_UPWARD (x86)
        else:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    # 4. Makes the reference compute what it computes, once it has run in a process: through
    # the probe object the decorator returned (the subject's public name for it)...
    @loupe.check(**DECLARED)
    def replaces_the_reference(point, inputs, out):
        out["y"][:] = wrong(inputs["x"])

        def mine(point, inputs, out):
            out["y"][:] = wrong(inputs["x"])
        replaces_the_reference.reference = mine

    # ...or by patching the module the reference calls (numpy's cumsum).
    @loupe.check(**DECLARED)
    def patches_numpy(point, inputs, out):
        original = np.cumsum
        if not getattr(original, "patched", False):
            def scaled(*args, **kwargs):
                return original(*args, **kwargs) * 1.01
            scaled.patched = True
            np.cumsum = scaled
        out["y"][:] = np.cumsum(inputs["x"], dtype=np.float64).astype(np.float32)

    # 5. Leaves a process running (forked on its first call; it would outlive the check).
    @loupe.check(**DECLARED)
    def leaves_a_process(point, inputs, out):
        if not CALLS[0]:
            CALLS[0] = 1
            if os.fork() == 0:
                import time
                time.sleep(60)
                os._exit(0)
        reference(point, inputs, out)

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


@pytest.fixture
def subject(tmp_path):
    path = tmp_path / "cheats.py"
    path.write_text(SUBJECT)
    return [sys.executable, str(path)]


def run_probe(loupe_executable, subject, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(loupe.__file__))
    completed = subprocess.run([loupe_executable, "probe", "run", *args, "--json", "--",
                                *subject], capture_output=True, text=True, env=env, timeout=300)
    return completed.returncode, json.loads(completed.stdout)


def failing(envelope):
    return sorted({f["id"] for f in envelope["findings"] if f["severity"] == "fail"})


def test_a_candidate_keyed_to_the_documented_poison_is_wrong_in_the_check(loupe_executable,
                                                                          subject):
    code, envelope = run_probe(loupe_executable, subject, "knows_the_poison", "--seed", "7")
    assert code == 1, envelope
    assert failing(envelope) == ["check.knows_the_poison.guard.hidden_point",
                                 "check.knows_the_poison.mismatch"]


def test_the_keyed_poison_still_counts_what_a_candidate_left_unwritten(loupe_executable,
                                                                        subject):
    code, envelope = run_probe(loupe_executable, subject, "writes_half", "--seed", "7",
                               "--no-hidden")
    assert code == 1, envelope
    unwritten = [f for f in envelope["findings"]
                 if f["id"] == "check.writes_half.guard.output_unwritten"]
    # Once per candidate call of the two orders and of the asked repeats, and once for all the
    # secret ones (the first of them: repeat/3), as the C++ runtime records them.
    assert sorted(f["claim"] for f in unwritten) == sorted(
        "the candidate path left 2048 of 4096 elements of output y unwritten (still the NaN "
        "poison, %s pass)" % name
        for name in ("candidate_first", "reference_first", "repeat/1", "repeat/2", "repeat/3"))


def test_poison_differs_from_run_to_run_and_is_never_the_documented_pattern():
    from loupe import probe

    first = probe.poison_pattern(np.float32, (4096,), 1)
    second = probe.poison_pattern(np.float32, (4096,), 2)
    assert np.isnan(first).all() and np.isnan(second).all()
    assert np.count_nonzero(first.view(np.uint32) == second.view(np.uint32)) < 8
    assert np.count_nonzero(first.view(np.uint32) == 0x7FC0DEAD) == 0
    # The sign varies too, and no element is the NaN that 0/0 makes.
    assert 1000 < np.count_nonzero(first.view(np.uint32) >> 31) < 3096
    assert np.count_nonzero(first.view(np.uint32) & 0x7FFFFFFF == 0x7FC00000) == 0
    assert probe.count_poisoned(first.copy(), first) == 4096
    assert probe.count_poisoned(second, first) < 8


def test_the_hidden_run_is_passed_like_a_shown_one(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "reads_the_hidden_flag", "--set",
                               "N=1024,4096", "--seed", "7")
    assert code == 1, envelope
    drawn = envelope["data"]["hidden_runs"][0]["hidden"]["point"]["N"]
    assert drawn in range(1000, 1021, 4)
    assert failing(envelope) == ["check.reads_the_hidden_flag.guard.hidden_point",
                                 "check.reads_the_hidden_flag.mismatch"]
    mismatch = [f for f in envelope["findings"] if f["id"].endswith(".mismatch")]
    assert [f["where"]["params"] for f in mismatch] == [{"N": drawn}]
    with open(envelope["data"]["hidden_runs"][0]["observation"]) as file:
        argv = json.load(file)["argv"]
    assert not [arg for arg in argv if arg.startswith("--hidden")]


def test_a_candidate_right_on_its_first_calls_fails_on_the_secret_repeats(loupe_executable,
                                                                          subject):
    code, envelope = run_probe(loupe_executable, subject, "right_first_three", "--seed", "7",
                               "--no-hidden")
    assert code == 1, envelope
    assert failing(envelope) == ["check.right_first_three.nondeterministic"]
    with open(envelope["data"]["observation"]) as file:
        repeat = json.load(file)["check"]["repeat"]
    # The 2 asked, then the secret ones up to the first that differs: the first of them.
    assert (repeat["asked"], repeat["count"]) == (2, 3)
    claim = [f["claim"] for f in envelope["findings"] if f["id"].endswith("nondeterministic")][0]
    assert claim.startswith("candidate output y differs between runs on the same inputs: "
                            "repeat %d first differs at N=" % repeat["count"])


def test_repeat_0_turns_the_secret_repeats_off_and_says_so(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "right_first_three", "--seed", "7",
                               "--no-hidden", "--repeat", "0")
    assert code == 0, envelope
    assert [f["severity"] for f in envelope["findings"]
            if f["id"] == "check.right_first_three.guard.secret_repeats_off"] == ["warn"]


@pytest.mark.parametrize("change", ["rounding", "affinity"])
def test_a_candidate_that_leaves_its_environment_changed_fails(loupe_executable, subject, change):
    if change == "rounding" and os.uname().machine != "x86_64":
        pytest.skip("FE_UPWARD is 0x800 on x86-64 only")
    cpus = sorted(os.sched_getaffinity(0))
    if change == "affinity" and len(cpus) < 2:
        pytest.skip("one CPU: pinning to it changes nothing")
    code, envelope = run_probe(loupe_executable, subject, "leaves_its_environment", "--set",
                               "change=" + change, "--seed", "7", "--no-hidden")
    assert code == 1, envelope
    assert failing(envelope) == ["check.leaves_its_environment.guard.environment"]
    # fesetround sets both units' rounding: the rounding mode, MXCSR's and the x87 word's bits.
    changes = (["rounding mode to-nearest -> upward", "MXCSR 0x1f80 -> 0x5f80",
                "x87 control word 0x037f -> 0x0b7f"] if change == "rounding" else
               ["CPU affinity {%s} -> {%d}" % (",".join(map(str, cpus)), cpus[0])])
    claims = sorted(f["claim"] for f in envelope["findings"]
                    if f["id"].endswith("guard.environment"))
    # Each candidate call of the two orders and of the asked repeats, the secret ones' once (the
    # first of them: repeat/3): as the C++ runtime records them.
    assert claims == sorted(
        "the candidate path changed the %s (%s pass); the runtime put it back before the next "
        "path" % (what, name) for what in changes
        for name in ("candidate_first", "reference_first", "repeat/1", "repeat/2", "repeat/3"))


@pytest.mark.parametrize("probe", ["replaces_the_reference", "patches_numpy"])
def test_a_candidate_that_changes_the_reference_is_judged_against_the_untouched_one(
        loupe_executable, subject, probe):
    code, envelope = run_probe(loupe_executable, subject, probe, "--seed", "7", "--no-hidden")
    assert code == 1, envelope
    assert failing(envelope) == ["check.%s.guard.reference_tampered" % probe,
                                 "check.%s.mismatch" % probe]
    tampered = [f for f in envelope["findings"] if f["id"].endswith("guard.reference_tampered")]
    assert tampered[0]["claim"].startswith(
        "the reference output y computed after the candidate in its process differs from the "
        "one computed before any candidate code ran (first at N=")


BENCH_SUBJECT = textwrap.dedent('''
    import os
    import sys
    import numpy as np
    import loupe

    def copy(work):
        np.copyto(work["y"], work["x"])

    def copy_and_pin(work):
        # Pins the one process both variants run in to one CPU: whatever runs next shares it.
        np.copyto(work["y"], work["x"])
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    @loupe.bench(params={"N": 4096}, variants={"copy": copy, "copy_and_pin": copy_and_pin},
                 outputs=lambda work: {"y": work["y"]})
    def pinning_speed(point, seed):
        x = np.random.default_rng(seed).standard_normal(point["N"]).astype(np.float32)
        return {"x": x, "y": np.empty_like(x)}

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


def test_a_bench_variant_that_changes_the_environment_fails(loupe_executable, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: pinning to it changes nothing")
    path = tmp_path / "pinning.py"
    path.write_text(BENCH_SUBJECT)
    code, envelope = run_probe(loupe_executable, [sys.executable, str(path)], "pinning_speed",
                               "--seed", "5", "--budget", "0.3")
    assert code == 1, envelope
    assert [(f["severity"], f["claim"]) for f in envelope["findings"]
            if f["id"] == "bench.pinning_speed.guard.environment"] == [
        ("fail", "variant copy_and_pin's process had its CPU affinity {%s} -> {%d} changed "
                 "during sampling: a state that changes its speed or the others'"
         % (",".join(map(str, cpus)), cpus[0]))]


def test_a_process_a_path_leaves_running_is_killed_and_named(loupe_executable, subject):
    # The child that ran the path ends while the process it started holds the records' pipe
    # open: the runtime must not wait for it (it sleeps 60 s), and names it.
    code, envelope = run_probe(loupe_executable, subject, "leaves_a_process", "--seed", "7",
                               "--no-hidden")
    assert code == 1, envelope
    assert failing(envelope) == ["check.leaves_a_process.guard.child_process"]
    claims = [f["claim"] for f in envelope["findings"] if f["id"].endswith("guard.child_process")]
    assert len(claims) == 2  # one per pass: its process started one on its first call
    for claim in claims:
        assert claim.startswith("after the candidate path (") and \
            claim.endswith("); they were killed"), claim
