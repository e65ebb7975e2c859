"""loupe.diff on arrays, tensors, dicts and paths: exact metrics, localisation, errors."""

import json
import math
import os
import subprocess

import numpy as np
import pytest

import loupe


def growing_pair():
    rng = np.random.default_rng(7)
    expected = rng.standard_normal((64, 4, 16)).astype(np.float32)  # (T, H, D)
    actual = expected.copy()
    # Head 1 drifts, more and more along T: the error a wrong RoPE angle gives.
    actual[:, 1, :] += (np.arange(64, dtype=np.float32) * 1e-3)[:, None]
    return actual, expected


def test_identical_arrays_pass_with_no_worst_position():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = loupe.diff(a, a.copy())
    assert result.passed
    assert bool(result) is True
    assert result.worst is None
    assert result.first_divergence is None
    assert result.tensors[0].metrics["max_abs"] == 0.0
    assert result.tensors[0].metrics["mismatch_count"] == 0
    assert "PASS" in repr(result)


def test_single_element_error_is_located_exactly():
    expected = np.zeros((4, 5), dtype=np.float32)
    actual = expected.copy()
    actual[2, 3] = 0.5
    result = loupe.diff(actual, expected, axes="T,D")
    assert not result.passed
    assert result.worst.coords == {"T": 2, "D": 3}
    assert result.worst.index == (2, 3)
    assert result.worst.actual == 0.5 and result.worst.expected == 0.0
    assert result.worst.abs_error == 0.5
    metrics = result.tensors[0].metrics
    assert metrics["max_abs"] == 0.5
    assert metrics["mismatch_count"] == 1
    assert result.first_divergence == "tensor"
    finding = result.findings[0]
    assert finding["id"] == "check.diff.mismatch"
    assert finding["where"]["coords"] == {"T": 2, "D": 3}
    assert finding["reproduce"].startswith("loupe.diff(actual, expected")


def test_profile_and_slice_name_the_head_and_the_growth():
    actual, expected = growing_pair()
    result = loupe.diff(actual, expected, axes=("T", "H", "D"), along="T")
    assert not result.passed
    assert result.worst.coords["H"] == 1
    assert result.worst.coords["T"] == 63
    assert result.profile.axis == "T"
    assert result.profile.shape == "growing"
    assert result.tensors[0].slice_sentence.startswith("H=1 holds 99.99%")
    top = result.tensors[0].raw["top_slices"][0]
    assert (top["axis"], top["index"]) == ("H", 1) and top["share"] > 0.9999
    assert "growing along T" in repr(result)


def test_metrics_match_numpy():
    rng = np.random.default_rng(3)
    expected = rng.standard_normal(10000).astype(np.float32)
    actual = expected + rng.standard_normal(10000).astype(np.float32) * 1e-3
    metrics = loupe.diff(actual, expected).tensors[0].metrics
    difference = actual.astype(np.float64) - expected.astype(np.float64)
    assert metrics["max_abs"] == pytest.approx(np.abs(difference).max(), rel=1e-12)
    rms_ratio = np.sqrt(np.mean(difference ** 2)) / (np.sqrt(np.mean(
        expected.astype(np.float64) ** 2)) + 1e-8)
    assert metrics["rms_ratio"] == pytest.approx(rms_ratio, rel=1e-9)


def test_tol_bounds_decide_passed():
    actual, expected = growing_pair()
    assert loupe.diff(actual, expected, tol={"rms_ratio": 0.1}).passed
    failing = loupe.diff(actual, expected, tol="rms_ratio=1e-4")
    assert not failing.passed
    assert failing.envelope["verdict"] == "fail"


def test_dicts_report_the_first_divergent_entry_in_order():
    rng = np.random.default_rng(1)
    expected = {name: rng.standard_normal((8, 8)).astype(np.float32)
                for name in ("embed", "layers.0", "layers.1", "layers.2", "head")}
    actual = {name: value.copy() for name, value in expected.items()}
    actual["layers.1"][3, 4] += 1.0
    actual["head"] += 5.0  # worse, but later
    result = loupe.diff(actual, expected)
    assert result.first_divergence == "layers.1"
    assert result.worst.name == "head"
    assert [t.name for t in result.tensors if t.diverged] == ["layers.1", "head"]
    assert "first divergence layers.1" in repr(result)


def test_dict_with_missing_keys_fails_and_names_them():
    a = {"x": np.zeros(3, np.float32), "y": np.zeros(3, np.float32)}
    b = {"x": np.zeros(3, np.float32), "z": np.zeros(3, np.float32)}
    result = loupe.diff(a, b)
    assert not result.passed
    assert result.only_in_actual == ["y"] and result.only_in_expected == ["z"]


def test_oracle_ratio():
    rng = np.random.default_rng(5)
    oracle = rng.standard_normal(4096)
    expected = (oracle + rng.standard_normal(4096) * 1e-6).astype(np.float32)
    actual = (oracle + rng.standard_normal(4096) * 1e-3).astype(np.float32)
    result = loupe.diff(actual, expected, oracle=oracle)
    assert result.tensors[0].metrics["oracle_ratio"] > 100


def test_shape_mismatch_is_an_input_error_naming_both_shapes():
    with pytest.raises(loupe.InputError) as caught:
        loupe.diff(np.zeros((3, 4), np.float32), np.zeros((4, 3), np.float32))
    assert "shapes differ" in caught.value.message
    assert isinstance(caught.value, ValueError)


def test_unknown_metric_is_a_usage_error_listing_the_names():
    with pytest.raises(loupe.UsageError) as caught:
        loupe.diff(np.zeros(3), np.zeros(3), tol={"rms": 1.0})
    assert "rms_ratio" in str(caught.value)


def test_unknown_axis_for_along_is_a_usage_error():
    with pytest.raises(loupe.UsageError):
        loupe.diff(np.zeros((2, 3)), np.zeros((2, 3)), axes="T,D", along="H")


def test_unsupported_inputs_raise_loupe_errors_not_crashes():
    with pytest.raises(loupe.InputError):
        loupe.diff(np.array(["a", "b"]), np.array(["a", "b"]))
    with pytest.raises(loupe.InputError):
        loupe.diff(object(), np.zeros(3))
    with pytest.raises(loupe.InputError):
        loupe.diff(np.zeros(3, np.complex64), np.zeros(3, np.complex64))
    with pytest.raises(loupe.InputError):
        loupe.diff(np.zeros(3, bool), np.zeros(3, np.float32))  # bool against a number
    with pytest.raises(loupe.InputError):
        loupe.diff("/nonexistent/a.npy", "/nonexistent/b.npy")
    with pytest.raises(loupe.UsageError):
        loupe.diff("a.npy", np.zeros(3))


def test_non_contiguous_and_big_endian_arrays_compare_by_value():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided = base[:, ::2]
    swapped = np.ascontiguousarray(strided).astype(">f8")
    result = loupe.diff(strided, swapped)
    assert result.passed
    assert result.tensors[0].shape == (4, 3)


def test_paths_match_the_cli_envelope(tmp_path, loupe_executable):
    actual, expected = growing_pair()
    np.save(tmp_path / "a.npy", actual)
    np.save(tmp_path / "b.npy", expected)
    # --json lists the statistics too: statistics=True asks loupe.diff for them.
    result = loupe.diff(str(tmp_path / "a.npy"), tmp_path / "b.npy", axes="T,H,D", along="T",
                        statistics=True)
    cli = subprocess.run([loupe_executable, "diff", str(tmp_path / "a.npy"),
                          str(tmp_path / "b.npy"), "--axes", "T,H,D", "--along", "T", "--json"],
                         capture_output=True, text=True)
    assert cli.returncode == 1, cli.stderr  # past the default tolerances: the CLI fails (issue 19)
    envelope = json.loads(cli.stdout)
    assert result.envelope["findings"] == envelope["findings"]
    assert result.envelope["data"]["tensors"] == envelope["data"]["tensors"]
    assert result.profile.shape == "growing"


def test_nan_positions_that_disagree_fail():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    result = loupe.diff(a, b)
    assert not result.passed
    assert result.tensors[0].metrics["nonfinite_mismatch"] == 1
    assert result.worst.index == (1,)
    assert math.isnan(result.worst.actual)


def write_sharded(root, full, fault_rank=None):
    """`full` (T, H) cut over tp=2 (H, natural) and cp=2 (T, zigzag) into rank-<r>/o.npy, tp
    varying fastest: global rank r = tp_rank + 2 * cp_rank; cp rank c holds zigzag chunks c and
    3 - c of T."""
    chunks = np.split(full, 4, axis=0)
    for cp_rank in range(2):
        t_part = np.concatenate([chunks[cp_rank], chunks[3 - cp_rank]], axis=0)
        for tp_rank, part in enumerate(np.split(t_part, 2, axis=1)):
            rank = tp_rank + 2 * cp_rank
            part = part.copy()
            if rank == fault_rank:
                part[5, 0] += 1.0  # the second zigzag chunk of this CP rank
            (root / ("rank-%d" % rank)).mkdir(parents=True)
            np.save(root / ("rank-%d" % rank) / "o.npy", part)


def test_sharded_directories_are_unsharded_by_dims_and_parallel(tmp_path):
    full = np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32)
    (tmp_path / "ref").mkdir()
    np.save(tmp_path / "ref" / "o.npy", full)
    write_sharded(tmp_path / "good", full)
    write_sharded(tmp_path / "bad", full, fault_rank=2)
    spec = "t(cp,zigzag) h(tp)"

    good = loupe.diff(str(tmp_path / "good"), str(tmp_path / "ref"), dims=spec,
                      parallel="tp=2,cp=2")
    assert good.passed, good.summary
    assert good.tensors[0].shape == (16, 4)
    assert good.tensors[0].metrics["max_abs"] == 0.0

    bad = loupe.diff(str(tmp_path / "bad"), str(tmp_path / "ref"), dims={"o.npy": spec},
                     parallel="tp=2,cp=2")
    assert not bad.passed
    ranks = [f for f in bad.findings if f["id"].endswith(".rank")]
    assert len(ranks) == 1, bad.findings
    assert ranks[0]["where"]["params"] == {"tp_rank": 0, "cp_rank": 1}
    # Rank 2 = (tp 0, cp 1); its row 5 is the 2nd row of zigzag chunk 2, so global t = 8 + 1.
    assert bad.worst.coords == {"t": 9, "h": 0}
    assert "--dims" in ranks[0]["reproduce"] and "--parallel tp=2,cp=2" in ranks[0]["reproduce"]


def test_dims_on_arrays_is_a_usage_error():
    a = np.zeros((4, 2), np.float32)
    with pytest.raises(loupe.UsageError, match="must be paths"):
        loupe.diff(a, a, dims="t(cp) h")
    with pytest.raises(loupe.UsageError, match="dims=3"):
        loupe.diff("x", "y", dims=3)
