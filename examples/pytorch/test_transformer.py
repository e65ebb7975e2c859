"""Where do configurations A and B of transformer.py part ways? loupe.dump + loupe diff name the
layer, the head and the growth along T; loupe.assert_close says the same in its AssertionError.

Run: PYTHONPATH=build/release/python /usr/bin/python3 -m pytest examples/pytorch
(`--runxfail` shows test_show_the_assert_close_message's failure as a user would see it).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer  # noqa: E402

import loupe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dumps")
    transformer.dump_both(str(directory))
    return directory


def test_loupe_diff_names_layer_head_and_growth(dumps):
    executable = os.environ.get("LOUPE_EXECUTABLE", os.path.join(ROOT, "build", "bin", "loupe"))
    completed = subprocess.run([executable, "diff", str(dumps / "a"), str(dumps / "b"),
                                "--axes", "B,H,T,D", "--along", "T", "--json"],
                               capture_output=True, text=True)
    assert completed.returncode == 1, completed.stderr  # config B's fault fails the diff
    envelope = json.loads(completed.stdout)
    first = envelope["data"]["first_divergence"]
    assert first == "layers.2.attn.rope.call0.safetensors:output.0"  # q of layer 2
    finding = envelope["findings"][0]
    assert finding["claim"].startswith("first divergence (#")
    assert finding["where"]["coords"]["H"] == transformer.FAULT_HEAD
    tensor = next(t for t in envelope["data"]["tensors"] if t["name"] == first)
    assert tensor["profile"]["shape"] == "growing"
    head = next(s for s in tensor["top_slices"] if s["axis"] == "H")
    assert head["index"] == transformer.FAULT_HEAD and head["share"] > 0.9999
    assert "H=1 holds 99.99% of squared error" in finding["claim"]
    assert "growing along T" in finding["claim"]
    # Layers 0 and 1 agree exactly: the fault is where it was planted.
    for t in envelope["data"]["tensors"]:
        if t["name"].startswith(("layers.0.", "layers.1.", "embed.")):
            assert t["metrics"]["max_abs"] == 0.0, t["name"]


def test_python_diff_of_the_dumps_says_the_same(dumps):
    result = loupe.diff(dumps / "a", dumps / "b", axes="B,H,T,D", along="T")
    assert not result.passed
    assert result.first_divergence == "layers.2.attn.rope.call0.safetensors:output.0"
    assert result.profile.axis == "T"
    first = next(t for t in result.tensors if t.name == result.first_divergence)
    assert "growing along T" in first.profile_sentence
    assert first.slice_sentence.startswith("H=1 holds 99.99%")


def hidden_states(config):
    hidden = {}
    with torch.no_grad():
        transformer.build(config)(transformer.tokens(), hidden)
    return hidden


def test_assert_close_names_the_first_divergent_layer():
    expected, actual = hidden_states("A"), hidden_states("B")
    with pytest.raises(AssertionError) as caught:
        loupe.assert_close(actual, expected, axes="B,T,D", along="T")
    message = str(caught.value)
    assert message.startswith("The failure occurred for item ['layers', 2]")
    assert "first divergent entry: layers.2 (2 of 5 entries past tolerance); then layers.3" \
        in message
    assert "error growing along T" in message


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="shows loupe.assert_close's message on the faulty head (--runxfail)")
def test_show_the_assert_close_message():
    captured = {}

    def keep(module, inputs, output):
        captured.setdefault(module.config, output)

    contexts = {}
    for config in ("A", "B"):
        model = transformer.build(config)
        head_point = model.layers[transformer.FAULT_LAYER].attn.heads
        head_point.config = config
        handle = head_point.register_forward_hook(keep)
        with torch.no_grad():
            model(transformer.tokens())
        handle.remove()
        contexts[config] = captured[config]
    # AssertionError: Tensor-likes are not close! ... loupe: worst at B=.., H=1, T=..;
    # error growing along T ...; H=1 holds 99.99% of squared error
    loupe.assert_close(contexts["B"], contexts["A"], axes="B,H,T,D", along="T")
