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
                 hidden_points=[{"N": 1000}], hidden_ranges=[("N", 1000, 1020, 4)],
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

    # A candidate of its own (the hidden run takes the defaults, not the asked --set values).
    @loupe.check(params={"N": (4096, [1024, 4096])}, hidden_points=[{"N": 1000}],
                 hidden_ranges=[("N", 1000, 1020, 4)], inputs=inputs, outputs=outputs,
                 reference=reference)
    def prefix_sum_tiled(point, inputs, out):
        """right only when N is a multiple of 256: specialised to the shapes it was shown"""
        whole = point["N"] // 256 * 256  # whole tiles of 256; any tail is left as zeros
        out["y"][:] = 0
        out["y"][:whole] = np.cumsum(inputs["x"][:whole], dtype=np.float64)

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
    assert [(p["name"], p["kind"]) for p in listing["probes"]] == [
        ("prefix_sum", "check"), ("prefix_sum_tiled", "check"), ("count", "scenario")]
    params = listing["probes"][0]["params"]
    assert params[1] == {"name": "mode", "type": "string", "default": "honest",
                         "allowed": ["honest", "fp16", "mutate"]}
    assert listing["probes"][0]["description"].startswith("a running sum")
    # Hidden points and ranges are listed (they are in the source): loupe passes the hidden run
    # exactly like a shown one, so the subject's command line cannot tell them apart.
    assert [p["hidden_points"] for p in listing["probes"]] == [1, 1, 0]
    assert [p["hidden_point_values"] for p in listing["probes"]] == [[{"N": 1000}], [{"N": 1000}],
                                                                     []]
    assert [p["hidden_ranges"] for p in listing["probes"]] == [
        [{"name": "N", "low": 1000, "high": 1020, "step": 4}]] * 2 + [[]]


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


def hidden_point_finding(envelope, probe="prefix_sum"):
    found = [f for f in envelope["findings"] if f["id"] == "check.%s.guard.hidden_point" % probe]
    assert len(found) == 1, envelope["findings"]
    return found[0]


def test_honest_check_also_passes_at_the_hidden_point(loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum", "--seed", "7")
    assert code == 0, envelope
    assert envelope["verdict"] == "pass"
    hidden = hidden_point_finding(envelope)
    assert hidden["severity"] == "info"
    runs = envelope["data"]["hidden_runs"]
    assert len(runs) == 1
    drawn = runs[0]["hidden"]["point"]["N"]
    assert drawn in range(1000, 1021, 4)
    assert hidden["where"]["params"] == {"N": drawn, "mode": "honest"}
    assert hidden["claim"] == (
        "the candidate also passes at the hidden point N=%d,mode=honest (hidden point 0 of 1, "
        "sizes drawn from the probe's hidden ranges), seed %d, drawn in secret"
        % (drawn, runs[0]["hidden"]["seed"]))
    assert runs[0]["hidden"]["index"] == 0 and runs[0]["hidden"]["of"] == 1
    assert runs[0]["params"] == {"N": drawn, "mode": "honest"}


def test_candidate_right_only_at_the_shown_points_is_caught_by_the_hidden_point(
        loupe_executable, subject):
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum_tiled", "--set",
                               "N=1024,4096", "--seed", "7")
    assert code == 1
    assert envelope["verdict"] == "fail"
    # Right at the points it was shown, wrong only at the hidden one (its tail left as zeros)...
    drawn = envelope["data"]["hidden_runs"][0]["hidden"]["point"]["N"]
    assert drawn in range(1000, 1021, 4)
    assert [(f["id"], f["severity"], f["where"]["params"]["N"])
            for f in envelope["findings"]
            if f["severity"] != "warn" and f["id"] != "check.prefix_sum_tiled.deterministic"] == [
        ("check.prefix_sum_tiled.match", "info", 1024),
        ("check.prefix_sum_tiled.match", "info", 4096),
        ("check.prefix_sum_tiled.mismatch", "fail", drawn),
        ("check.prefix_sum_tiled.guard.hidden_point", "fail", drawn)]
    # ...and the guard says so.
    hidden = hidden_point_finding(envelope, "prefix_sum_tiled")
    assert hidden["severity"] == "fail"
    assert hidden["where"]["params"] == {"N": drawn}
    assert hidden["claim"].startswith(
        "the candidate passes at the point(s) it was shown (N=1024; N=4096) but fails at the "
        "hidden point N=%d (hidden point 0 of 1, sizes drawn from the probe's hidden ranges), "
        "seed " % drawn)
    # Passed as a shown point is: --set and --seed, never --hidden.
    assert "--set N=%d" % drawn in hidden["reproduce"]
    assert "--hidden" not in hidden["reproduce"]


def test_without_the_hidden_point_the_specialised_candidate_passes(loupe_executable, subject):
    # What the hidden point is for: the visible points alone cannot tell.
    code, envelope = run_probe(loupe_executable, subject, "prefix_sum_tiled", "--seed", "7",
                               "--no-hidden")
    assert code == 0, envelope
    assert envelope["verdict"] == "pass"
    assert not [f for f in envelope["findings"] if f["id"].endswith("guard.hidden_point")]


def run_subject(subject, *args):
    return subprocess.run([*subject, *args], capture_output=True, text=True, env=probe_env(),
                          timeout=120)


def test_subject_reveals_the_hidden_point_in_the_observation(subject, tmp_path):
    completed = run_subject(subject, "run", "prefix_sum", "--hidden-point", "0", "--set",
                            "mode=fp16", "--set", "N=64", "--out", str(tmp_path / "obs"), "--json")
    assert completed.returncode == 0, completed.stderr
    with open(json.loads(completed.stdout)["observation"]) as file:
        observation = json.load(file)
    assert observation["hidden"] == {"index": 0, "of": 1, "point": {"N": 1000}}
    # The hidden values override --set (and may leave the allowed sets); the others are kept.
    assert observation["params"] == {"N": 1000, "mode": "fp16"}
    assert observation["check"]["outputs"][0]["shape"] == [1000]
    assert observation["seed_source"] == "drawn"


def test_hidden_draws_one_of_the_points_and_probes_without_any_run_plainly(subject, tmp_path):
    completed = run_subject(subject, "run", "prefix_sum", "--hidden", "--seed", "3", "--out",
                            str(tmp_path / "a"))
    assert completed.returncode == 0, completed.stderr
    with open(tmp_path / "a" / "observation.json") as file:
        observation = json.load(file)
    assert observation["hidden"]["point"] == {"N": 1000}
    assert observation["seed"] == 3
    completed = run_subject(subject, "run", "count", "--hidden", "--out", str(tmp_path / "b"))
    assert completed.returncode == 0, completed.stderr
    with open(tmp_path / "b" / "observation.json") as file:
        assert json.load(file)["hidden"] is None


@pytest.mark.parametrize("index", ["1", "-1", "x"])
def test_hidden_point_out_of_range_is_exit_2(subject, tmp_path, index):
    completed = run_subject(subject, "run", "prefix_sum", "--hidden-point", index, "--out",
                            str(tmp_path / "obs"))
    assert completed.returncode == 2
    expected = ("--hidden-point 1: probe 'prefix_sum' has 1 hidden points" if index == "1"
                else "--hidden-point '%s': expected a non-negative integer" % index)
    assert expected in completed.stderr
    assert not (tmp_path / "obs" / "observation.json").exists()


@pytest.mark.parametrize("points, message", [
    ([{"M": 3}], "probe 'bad_hidden': hidden point 0 sets 'M', which is not a parameter; its "
                 "parameters are N"),
    ([{"N": 3}, {"N": 2.5}], "probe 'bad_hidden': hidden point 1 sets 'N' to 2.5, a float; the "
                             "parameter is int"),
    ([{"N": True}], "probe 'bad_hidden': hidden point 0 sets 'N' to True, a bool; the parameter "
                    "is int"),
    ([{}], "probe 'bad_hidden': hidden point 0 is {}; expected a non-empty dict"),
])
def test_bad_hidden_points_are_refused_at_declaration(points, message):
    from loupe import probe

    before = list(probe._REGISTRY)
    try:
        with pytest.raises(loupe.UsageError) as raised:
            @loupe.scenario(name="bad_hidden", params={"N": 4}, hidden_points=points)
            def body(point, seed, out_dir):
                return {}, []
        assert str(raised.value).startswith(message)
    finally:
        probe._REGISTRY[:] = before


@pytest.mark.parametrize("ranges, message", [
    ([("M", 1, 9)], "probe 'bad_range': hidden range 0 names 'M', which is not an int parameter; "
                    "its parameters are N, name"),
    ([("name", 1, 9)], "probe 'bad_range': hidden range 0 names 'name', which is not an int "
                       "parameter"),
    ([("N", 9, 1)], "probe 'bad_range': hidden range 0 (9, 1, 1): expected integers with LOW <= "
                    "HIGH and STEP >= 1"),
    ([("N", 1, 9, 0)], "probe 'bad_range': hidden range 0 (1, 9, 0): expected integers"),
    (["N"], "probe 'bad_range': hidden range 0 is 'N'; expected (NAME, LOW, HIGH[, STEP])"),
])
def test_bad_hidden_ranges_are_refused_at_declaration(ranges, message):
    from loupe import probe

    before = list(probe._REGISTRY)
    try:
        with pytest.raises(loupe.UsageError) as raised:
            @loupe.scenario(name="bad_range", params={"N": 4, "name": "a"}, hidden_ranges=ranges)
            def body(point, seed, out_dir):
                return {}, []
        assert str(raised.value).startswith(message)
    finally:
        probe._REGISTRY[:] = before


def test_a_hidden_value_is_accepted_where_the_allowed_set_would_refuse_it():
    from loupe import probe

    check = probe.Check("sized", "", [probe.Param("N", 4, [4, 8])], None, None, None, None,
                        hidden_points=[{"N": 5}], hidden_ranges=[("N", 100, 120, 10)])
    assert probe.resolve_point(check, ["N=5"]) == {"N": 5}
    assert probe.resolve_point(check, ["N=110"]) == {"N": 110}
    for refused in ("N=6", "N=105", "N=130"):
        with pytest.raises(probe.ProbeRequestError):
            probe.resolve_point(check, [refused])


BENCH_SUBJECT = textwrap.dedent('''
    import sys
    import numpy as np
    import loupe

    def make(point, seed):
        x = np.random.default_rng(seed).standard_normal(point["N"]).astype(np.float32)
        return {"x": x, "y": np.empty_like(x)}

    def copy(work):
        np.copyto(work["y"], work["x"])

    def claimed(point):
        # "honest": what a copy moves (read x, write y); "inflated": 64 MiB claimed for 16 KiB.
        return 8 * point["N"] if point["claim"] == "honest" else 64 << 20

    @loupe.bench(params={"N": 4096, "claim": ("honest", ["honest", "inflated"])},
                 variants={"copy": copy}, outputs=lambda work: {"y": work["y"]},
                 bytes_per_call=claimed)
    def copy_speed(point, seed):
        return make(point, seed)

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


@pytest.mark.parametrize("claim", ["honest", "inflated"])
def test_cpu_bench_records_a_roofline_and_an_inflated_claim_fails_it(loupe_executable, tmp_path,
                                                                      claim):
    path = tmp_path / "copy_subject.py"
    path.write_text(BENCH_SUBJECT)
    code, envelope = run_probe(loupe_executable, [sys.executable, str(path)], "copy_speed",
                               "--set", "claim=" + claim, "--seed", "5", "--budget", "0.3")
    with open(envelope["data"]["observation"]) as file:
        roofline = json.load(file)["bench"]["roofline"]
    assert roofline["read_bytes_per_s"] > 0
    assert roofline["hardware_threads"] == os.cpu_count()
    assert roofline["read_working_set_bytes"] == (8 * 4096 if claim == "honest" else 64 << 20)
    rooflines = [f for f in envelope["findings"] if f["id"].endswith("guard.roofline")]
    if claim == "honest":
        assert code == 0, envelope["findings"]
        assert rooflines == []
    else:
        assert code == 1
        assert [f["severity"] for f in rooflines] == ["fail"]
        assert rooflines[0]["claim"].startswith("variant copy claims 67108864 bytes per call in")


PAIR_SUBJECT = textwrap.dedent('''
    import sys
    import numpy as np
    import loupe

    def make(point, seed):
        x = np.random.default_rng(seed).standard_normal(point["N"]).astype(np.float32)
        return {"x": x, "y": np.empty_like(x)}

    def copy(work):
        np.copyto(work["y"], work["x"])

    def negated_twice(work):
        np.negative(work["x"], out=work["y"])
        np.negative(work["y"], out=work["y"])

    @loupe.bench(params={"N": 4096}, variants={"copy": copy, "negated_twice": negated_twice},
                 outputs=lambda work: {"y": work["y"]})
    def pair_speed(point, seed):
        return make(point, seed)

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


def test_a_two_variant_bench_is_timed_in_rounds_and_compared_paired(loupe_executable, tmp_path):
    """As the C++ runtime: one batch of each variant per round, the order drawn once and
    reversed every round, each sample carrying its round; loupe then compares paired by round
    (the comparison's `pairs` metric counts the rounds)."""
    path = tmp_path / "pair_subject.py"
    path.write_text(PAIR_SUBJECT)
    code, envelope = run_probe(loupe_executable, [sys.executable, str(path)], "pair_speed",
                               "--seed", "5", "--budget", "0.3")
    assert code in (0, 1), envelope
    with open(os.path.join(os.path.dirname(envelope["data"]["observation"]),
                           "samples.json")) as file:
        samples = json.load(file)
    copy, negated = samples["variants"]
    count = len(copy["samples"])
    assert count >= 2
    assert copy["rounds"] == list(range(count))
    assert negated["rounds"] == list(range(count))
    orders = samples["block_orders"]
    assert len(orders) == count
    assert sorted(orders[0]) == [0, 1]
    for index, order in enumerate(orders):
        assert order == (orders[0] if index % 2 == 0 else orders[0][::-1])
    comparisons = [f for f in envelope["findings"] if f["id"].startswith("bench.pair_speed.")
                   and "pairs" in f["evidence"]["metrics"]]
    assert [f["evidence"]["metrics"]["pairs"] for f in comparisons] == [count], \
        envelope["findings"]


def test_variants_runs_only_the_named_variants_in_their_order(loupe_executable, tmp_path):
    """--variants B,A, as the C++ runtime takes it: only those, the first the baseline; a name
    the bench does not declare exits 2 naming the bench, the name and its variants."""
    path = tmp_path / "pair_subject.py"
    path.write_text(PAIR_SUBJECT)
    subject = [sys.executable, str(path)]
    code, envelope = run_probe(loupe_executable, subject, "pair_speed", "--seed", "5",
                               "--budget", "0.3", "--variants", "negated_twice,copy")
    assert code in (0, 1), envelope
    with open(envelope["data"]["observation"]) as file:
        assert json.load(file)["bench"]["variants"] == ["negated_twice", "copy"]
    assert [(c["baseline"], c["candidate"]) for c in envelope["data"]["comparisons"]] == [
        ("negated_twice", "copy")]
    code, envelope = run_probe(loupe_executable, subject, "pair_speed", "--seed", "5",
                               "--budget", "0.3", "--variants", "copy,fused")
    assert code == 2, envelope
    assert ("--variants: bench 'pair_speed' has no variant 'fused'; its variants are: copy, "
            "negated_twice") in envelope["error"]["message"], envelope["error"]


SLEEPY_SUBJECT = textwrap.dedent('''
    import sys
    import time
    import numpy as np
    import loupe

    def slow(work):
        time.sleep(0.03)
        work["y"][:] = work["x"]

    @loupe.bench(params={"N": 16}, variants={"a": slow, "b": slow},
                 outputs=lambda work: {"y": work["y"]})
    def sleepy_speed(point, seed):
        x = np.full(point["N"], float(seed % 7), dtype=np.float32)
        return {"x": x, "y": np.empty_like(x)}

    if __name__ == "__main__":
        sys.exit(loupe.subject_main())
''')


def test_a_budget_spent_after_one_round_writes_an_undefined_width_as_null(loupe_executable,
                                                                           tmp_path):
    """One round of 30 ms calls spends a 50 ms budget: one ratio defines no interval. The width
    was written as inf, which the observation (strict JSON) refused: the subject failed."""
    path = tmp_path / "sleepy_subject.py"
    path.write_text(SLEEPY_SUBJECT)
    code, envelope = run_probe(loupe_executable, [sys.executable, str(path)], "sleepy_speed",
                               "--seed", "5", "--budget", "0.05")
    assert code in (0, 1), envelope
    with open(envelope["data"]["observation"]) as file:
        bench = json.load(file)["bench"]
    assert bench["stop_reason"] == "budget_spent"
    assert bench["stop_relative_half_width"] == [None]
    assert bench["stop_minimum_detectable_effect"] == [None]
