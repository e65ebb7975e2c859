"""Threshold rules through the Python package (loupe.diff and loupe.assert_close, rules=...) and
the statistics of issue 37 in loupe.diff's metrics."""

import numpy as np
import pytest

import loupe

RULES = [{"name": "logits", "match": "^logits", "when": ["rel <= 1e-3"]},
         {"name": "layers", "match": r"layers\.\d+", "when": ["max_abs <= 0.1",
                                                              "mean_abs < 1"]}]


def dumps():
    actual = {"layers.0": np.array([1, 2, 3], np.float32),
              "layers.1": np.array([1, 2, 3.5], np.float32),
              "logits": np.array([1.001, 2], np.float32)}
    expected = {"layers.0": np.array([1, 2, 3], np.float32),
                "layers.1": np.array([1, 2, 3], np.float32),
                "logits": np.array([1, 2], np.float32)}
    return actual, expected


def test_diff_decides_each_tensor_by_its_first_matching_rule():
    actual, expected = dumps()
    result = loupe.diff(actual, expected, rules=RULES)
    assert not result.passed
    assert [t.diverged for t in result.tensors] == [False, True, False]
    assert [t.raw["rule"]["name"] for t in result.tensors] == ["layers", "layers", "logits"]
    assert result.first_divergence == "layers.1"
    assert "rule 'layers' (rules=:5) decided: max_abs 0.5 > 0.1; mean_abs 0.167 < 1" in \
        result.summary


def test_rules_from_a_file(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text("[[rule]]\nmatch = '.*'\nwhen = [\"max_abs <= 1\"]\n")
    actual, expected = dumps()
    result = loupe.diff(actual, expected, rules=str(path))
    assert result.passed
    assert result.tensors[0].raw["rule"]["file"] == str(path)


def test_a_tensor_no_rule_matches_is_a_config_error():
    actual, expected = dumps()
    with pytest.raises(loupe.ConfigError, match="tensor 'logits' matches no rule in rules= "
                                                 r"\(1 rules\)"):
        loupe.diff(actual, expected, rules=RULES[1:])
    with pytest.raises(loupe.ConfigError, match="predicate 'rms <= 1'"):
        loupe.diff(actual, expected, rules=[{"match": ".*", "when": ["rms <= 1"]}])
    with pytest.raises(loupe.UsageError, match="expected one way of deciding"):
        loupe.diff(actual, expected, rules=RULES, tol={"max_abs": 1})


def test_assert_close_with_rules_names_the_rule_that_failed():
    actual, expected = dumps()
    with pytest.raises(AssertionError) as raised:
        loupe.assert_close(actual, expected, rules=RULES)
    message = str(raised.value)
    assert message.startswith("Tensor-likes are not close by their rules (1 of 3 entries fail)!")
    assert "['layers', 1]: rule 'layers' (rules=:5): max_abs 0.5 > 0.1; mean_abs 0.167 < 1" in \
        message
    loupe.assert_close(actual, expected, rules=[{"match": ".*", "when": "max_abs <= 0.5"}])


def test_statistics_and_aliases_in_the_metrics():
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([1, 2, 3, 5], np.float32)
    assert "mean_abs" not in loupe.diff(a, b).tensors[0].metrics  # a second pass, on request
    metrics = loupe.diff(a, b, statistics=True).tensors[0].metrics
    assert metrics["mean_abs"] == 0.25
    assert metrics["abs_p50"] == 0.0
    assert metrics["abs_p999"] == 1.0
    assert metrics["a_mean"] == 2.5
    assert metrics["b_max"] == 5.0
    assert metrics["cosine"] == pytest.approx(34 / np.sqrt(30 * 39))
    assert metrics["downcast_max_abs"] == 1.0
    # rel is DeepGEMM's 1 - 2<x,y>/(|x|^2+|y|^2): loupe's cos_dist.
    assert loupe.diff(a, b, tol={"rel": 0.02}).passed
    assert not loupe.diff(a, b, tol={"rel": 0.01}).passed


def test_bits_wrap_fp8_without_an_fp8_dtype():
    bits = np.array([0x38, 0x40, 0x7F], np.uint8)  # e4m3fn 1.0, 2.0, NaN
    result = loupe.diff(loupe.Bits(bits, "float8_e4m3fn"), loupe.Bits(bits.copy(),
                                                                      "float8_e4m3fn"))
    assert result.tensors[0].dtype_a == "float8_e4m3fn"
    assert not result.passed  # NaN against NaN
    assert loupe.diff(loupe.Bits(bits, "float8_e4m3fn"), loupe.Bits(bits.copy(), "float8_e4m3fn"),
                      equal_nan=True).passed
    with pytest.raises(loupe.InputError, match="expected 1-byte integers"):
        loupe.Bits(bits.astype(np.int32), "float8_e5m2")
