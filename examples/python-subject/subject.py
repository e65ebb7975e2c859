#!/usr/bin/env python3
"""A small numpy inference engine as a loupe subject: RMSNorm and a batched prefill loop.

Probes (run `subject.py list`):
  check    rmsnorm        the engine's RMSNorm against a careful float32 reference and a float64
                          oracle; `accumulate = fp16` is the numerically careless variant: it sums
                          squares in float16, which overflows on the massive activations of the
                          first token (and of one more) and zeroes those rows
  bench    rmsnorm_speed  a row-at-a-time RMSNorm against the vectorised one, over T
  scenario generate       prefill of requests of mixed lengths, batched in arrival order or by
                          length; metrics wall_s, tokens_per_s, padding_fraction and a Chrome
                          JSON trace with one event per batch
The probes are declared with loupe's decorators (python/loupe/probe.py speaks the protocol: list,
run, observation files); `import loupe` finds the package installed, or in the build tree through
PYTHONPATH=build/release/python (loupe.toml sets it).
"""

import json
import os
import sys
import time

import numpy as np

import loupe

EPS = 1e-6


# --- the engine ----------------------------------------------------------------------------


def rmsnorm_reference(x, weight, out):
    """float32 throughout: mean of squares, then scale."""
    mean_square = np.mean(np.square(x), axis=1, dtype=np.float32)
    np.multiply(x / np.sqrt(mean_square + np.float32(EPS))[:, None], weight, out=out)


def rmsnorm_engine(x, weight, out, accumulate):
    """The engine's kernel: a dot per row for the sum of squares, in `accumulate` precision."""
    if accumulate == "fp16":
        half = x.astype(np.float16)
        with np.errstate(over="ignore"):
            sum_squares = np.einsum("td,td->t", half, half).astype(np.float32)
    else:
        sum_squares = np.einsum("td,td->t", x, x)
    inverse = np.float32(1) / np.sqrt(sum_squares / np.float32(x.shape[1]) + np.float32(EPS))
    np.multiply(x * inverse[:, None], weight, out=out)


def rmsnorm_rowwise(x, weight, out):
    """One row at a time, as a first port of a per-token loop would do it."""
    width = np.float32(x.shape[1])
    for row in range(x.shape[0]):
        values = x[row]
        out[row] = values / np.sqrt(np.dot(values, values) / width + np.float32(EPS)) * weight


def activations(rng, tokens, width):
    """Hidden states with the massive activations of attention sinks: the first token and one
    other carry a few channels of magnitude 300-600 (LLMs show such outliers at fixed tokens)."""
    x = rng.standard_normal((tokens, width)).astype(np.float32)
    channels = rng.choice(width, size=4, replace=False)
    for row in (0, int(rng.integers(1, tokens))):
        x[row, channels] = (rng.uniform(300, 600, size=4) * rng.choice([-1, 1], size=4)).astype(
            np.float32)
    weight = (1 + 0.1 * rng.standard_normal(width)).astype(np.float32)
    return x, weight


# --- probes --------------------------------------------------------------------------------


def rmsnorm_inputs(point, rng):
    x, weight = activations(rng, point["T"], point["D"])
    return {"x": (x, ["T", "D"]), "weight": (weight, ["D"])}


def rmsnorm_outputs(point):
    return [loupe.Output("y", np.float32, (point["T"], point["D"]), ["T", "D"], along="T",
                         tolerances=[("rms_ratio", 1e-5)])]


def rmsnorm_oracle(point, inputs):
    x = inputs["x"].astype(np.float64)
    mean_square = np.mean(x * x, axis=1)
    return {"y": x / np.sqrt(mean_square + EPS)[:, None] * inputs["weight"].astype(np.float64)}


def rmsnorm_reference_path(point, inputs, out):
    rmsnorm_reference(inputs["x"], inputs["weight"], out["y"])


@loupe.check(
    description="the engine's RMSNorm (sum of squares in `accumulate` precision) against a "
    "float32 reference, anchored to a float64 oracle",
    params=[loupe.Param("T", 256, description="tokens"),
            loupe.Param("D", 256, description="hidden width"),
            loupe.Param("accumulate", "fp32", ["fp32", "fp16"], "precision of the sum of squares")],
    inputs=rmsnorm_inputs, outputs=rmsnorm_outputs, reference=rmsnorm_reference_path,
    oracle=rmsnorm_oracle)
def rmsnorm(point, inputs, out):
    rmsnorm_engine(inputs["x"], inputs["weight"], out["y"], point["accumulate"])


@loupe.bench(
    description="RMSNorm one row at a time against the vectorised kernel",
    params=[loupe.Param("T", 256, description="tokens"),
            loupe.Param("D", 256, description="hidden width")],
    variants={"vectorised": lambda work: rmsnorm_reference(work["x"], work["weight"], work["y"]),
              "rowwise": lambda work: rmsnorm_rowwise(work["x"], work["weight"], work["y"])},
    outputs=lambda work: {"y": work["y"]},
    bytes_per_call=lambda point: 2 * 4 * point["T"] * point["D"])
def rmsnorm_speed(point, seed):
    x, weight = activations(np.random.default_rng(seed), point["T"], point["D"])
    return {"x": x, "weight": weight, "y": np.empty_like(x)}


@loupe.scenario(
    description="prefill of prompts of mixed lengths in padded batches; padding_fraction is the "
    "share of computed tokens that are padding",
    params=[loupe.Param("requests", 32, description="prompts"),
            loupe.Param("batch", 4, description="prompts per batch"),
            loupe.Param("D", 64, description="hidden width"),
            loupe.Param("batching", "arrival", ["arrival", "by_length"],
                        "batch prompts in arrival order, or sorted by length")])
def generate(point, seed, out_dir):
    """Prefill of `requests` prompts of mixed lengths in batches of `batch`, each padded to its
    longest prompt: single-head softmax attention over the padded block, then RMSNorm."""
    rng = np.random.default_rng(seed)
    width = point["D"]
    lengths = np.clip(rng.lognormal(mean=4.0, sigma=0.9, size=point["requests"]), 8, 512)
    lengths = lengths.astype(np.int64)
    order = np.arange(len(lengths))
    if point["batching"] == "by_length":
        order = np.argsort(lengths, kind="stable")
    weight = np.ones(width, dtype=np.float32)
    events = []
    real_tokens = 0
    padded_tokens = 0
    start = time.perf_counter()
    for first in range(0, len(order), point["batch"]):
        members = order[first:first + point["batch"]]
        longest = int(lengths[members].max())
        batch_start = time.perf_counter()
        hidden = rng.standard_normal((len(members), longest, width)).astype(np.float32)
        scores = np.einsum("bqd,bkd->bqk", hidden, hidden) / np.float32(np.sqrt(width))
        scores -= scores.max(axis=2, keepdims=True)
        probabilities = np.exp(scores)
        probabilities /= probabilities.sum(axis=2, keepdims=True)
        attended = np.einsum("bqk,bkd->bqd", probabilities, hidden).reshape(-1, width)
        normed = np.empty_like(attended)
        rmsnorm_reference(attended, weight, normed)
        batch_end = time.perf_counter()
        real_tokens += int(lengths[members].sum())
        padded_tokens += longest * len(members)
        events.append({"name": "prefill_batch", "ph": "X", "pid": 1, "tid": 1,
                       "ts": (batch_start - start) * 1e6, "dur": (batch_end - batch_start) * 1e6,
                       "args": {"requests": len(members), "longest": longest}})
    wall = time.perf_counter() - start
    with open(os.path.join(out_dir, "trace.json"), "w") as out:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, out)
    metrics = {"wall_s": wall, "tokens_per_s": real_tokens / wall,
               "padding_fraction": 1 - real_tokens / padded_tokens}
    return metrics, [("trace.json", "trace")]


if __name__ == "__main__":
    sys.exit(loupe.subject_main())
