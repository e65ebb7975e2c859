"""loupe.compare_generations: the first divergent position, each run's top-2 margin there and the
verdict tie-break or real (issue 37's near-tie triage)."""

import numpy as np
import pytest

import loupe

VOCAB = 6


def logits_with(rows):
    """[T, VOCAB] logits, 0 everywhere but `rows`: {position: {token: logit}}."""
    out = np.zeros((5, VOCAB))
    for position, values in rows.items():
        for token, value in values.items():
            out[position, token] = value
    return out


COMMON = {0: {1: 3.0}, 1: {2: 3.0}, 2: {0: 3.0}, 4: {5: 3.0}}


def test_a_flip_between_near_equal_top_two_is_a_tie_break():
    a = logits_with({**COMMON, 3: {2: 5.0004, 4: 5.0}})
    b = logits_with({**COMMON, 3: {4: 5.0003, 2: 5.0}})
    result = loupe.compare_generations(a, b)
    assert (result.position, result.token_a, result.token_b) == (3, 2, 4)
    assert (result.runner_up_a, result.runner_up_b) == (4, 2)
    assert result.margin_a == pytest.approx(4e-4, abs=1e-12)
    assert result.margin_b == pytest.approx(3e-4, abs=1e-12)
    assert result.verdict == "tie-break"
    assert bool(result)
    assert result.sentence == ("first divergent position 3: A picks 2 (runner-up 4, margin "
                               "0.0004), B picks 4 (runner-up 2, margin 0.0003): tie-break (both "
                               "margins below 0.001)")


def test_a_clear_margin_in_one_run_is_real():
    a = logits_with({**COMMON, 3: {2: 5.0004, 4: 5.0}})
    b = logits_with({**COMMON, 3: {4: 5.5, 2: 5.0}})
    result = loupe.compare_generations(a, b)
    assert result.verdict == "real"
    assert not result
    assert result.sentence.endswith("real (a margin is 0.001 or more)")
    # A looser bound makes the same flip a tie-break.
    assert loupe.compare_generations(a, b, bound=0.6).verdict == "tie-break"


def test_choices_that_are_not_each_others_runner_up_are_real():
    a = logits_with({**COMMON, 3: {2: 5.0004, 4: 5.0}})
    b = logits_with({**COMMON, 3: {5: 5.0003, 4: 5.0}})
    result = loupe.compare_generations(a, b)
    assert (result.token_b, result.runner_up_a) == (5, 4)
    assert result.verdict == "real"
    assert result.sentence.endswith("real (the runs' choices are not each other's runner-up)")


def test_top_k_logits_and_sampled_tokens():
    # Top-3 per position, in no particular order; B sampled its runner-up at position 1.
    ids = np.array([[7, 3, 9], [4, 8, 1]])
    a = {"topk_logits": np.array([[1.0, 2.0, 0.5], [2.0, 1.9995, 0.0]]), "topk_ids": ids}
    b = {"topk_logits": np.array([[1.0, 2.0, 0.5], [2.0, 1.9999, 0.0]]), "topk_ids": ids,
         "tokens": np.array([3, 8])}
    result = loupe.compare_generations(a, b)
    assert (result.position, result.token_a, result.token_b) == (1, 4, 8)
    assert result.runner_up_b == 4  # B sampled 8, so its runner-up is its top-1
    assert result.margin_a == pytest.approx(5e-4)
    assert result.verdict == "tie-break"


def test_identical_generations_are_the_same():
    a = logits_with(COMMON)
    result = loupe.compare_generations(a, a.copy())
    assert (result.verdict, result.position, result.length) == ("same", None, 5)


def test_a_real_divergence_names_the_first_divergent_tensor_upstream(tmp_path):
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        np.save(tmp_path / side / "layer_0.npy", np.ones(8, np.float32))
    np.save(tmp_path / "a" / "layer_1.npy", np.ones(8, np.float32))
    np.save(tmp_path / "b" / "layer_1.npy", np.full(8, 1.5, np.float32))  # the planted fault
    np.save(tmp_path / "a" / "layer_2.npy", np.ones(8, np.float32))
    np.save(tmp_path / "b" / "layer_2.npy", np.full(8, 2.0, np.float32))
    a = logits_with({**COMMON, 3: {2: 5.0, 4: 1.0}})
    b = logits_with({**COMMON, 3: {4: 5.0, 2: 1.0}})
    result = loupe.compare_generations(a, b, dumps=(str(tmp_path / "a"), str(tmp_path / "b")))
    assert result.verdict == "real"
    assert result.first_divergent_tensor == "layer_1.npy"
    assert result.sentence.endswith("; first divergent tensor upstream: layer_1.npy")
    # A tie-break does not search upstream.
    tie = logits_with({**COMMON, 3: {2: 5.0001, 4: 5.0}})
    tie_b = logits_with({**COMMON, 3: {4: 5.0001, 2: 5.0}})
    quiet = loupe.compare_generations(tie, tie_b, dumps=(str(tmp_path / "a"),
                                                         str(tmp_path / "b")))
    assert (quiet.verdict, quiet.first_divergent_tensor, quiet.upstream) == ("tie-break", None,
                                                                            None)


def test_bad_inputs_name_the_side_and_what_was_expected():
    with pytest.raises(loupe.InputError, match=r"B logits: shape \(5,\); expected \[T, V\]"):
        loupe.compare_generations(logits_with(COMMON), np.zeros(5))
    with pytest.raises(loupe.InputError, match="A: 3 tokens for 5 positions"):
        loupe.compare_generations({"logits": logits_with(COMMON), "tokens": [1, 2, 3]},
                                  logits_with(COMMON))
    with pytest.raises(loupe.UsageError, match="A: unknown keys"):
        loupe.compare_generations({"logit": 1}, logits_with(COMMON))
    with pytest.raises(loupe.UsageError, match="bound=-1"):
        loupe.compare_generations(logits_with(COMMON), logits_with(COMMON), bound=-1)
