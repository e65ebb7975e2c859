#!/usr/bin/env python3
"""kda/gpu/side_by_side.py — kda's chunked prefill, FLA's Triton chunk_kda and FlashKDA timed in one
process on one GPU by one rule, each checked against an fp64 token recurrence on the same inputs.

Inputs are drawn once per shape in FlashKDA's raw form (bf16 q, k, v, raw gate g, β logits; fp32
A_log (H) and dt_bias (H, K); lower bound −5). The effective gate and β are derived from them in fp32,
    g_eff = lower_bound · sigmoid(exp(A_log) · (g + dt_bias)),   β = sigmoid(β logits),
and given to FLA (g as log decay, β post-sigmoid, q and k normalised in its kernel), to kda (q and k
L2-normalised in fp32 and rounded to bf16, as its kernels take them) and to the fp64 reference
(q and k normalised in fp64 from the raw bf16 values; α = exp(g_eff), β in fp64). FlashKDA computes
the gate, β and the normalisation itself from the raw inputs; FLA is also run that way ("raw gate":
use_gate_in_kernel, safe_gate, the same lower bound).

Timing rule, the same for every kernel: before every timed call a buffer of 2× the L2 size is written
(the flush, outside the events); CUDA events around the call alone; inputs rotate over two sets;
the kernels are interleaved call by call behind a GPU hold so the host queues ahead; median and a
bootstrap 95 % interval of the median over the samples. Timed on the gate regimes of --time-gates
(default bench; kda's intra-chunk pass takes a slower path when a chunk's cumulative decay exceeds
30, which bench gates do and slow gates do not, so its time depends on the regime).

Errors: o and the final state of each kernel against the fp64 recurrence: rms(Δ)/rms(ref) and the
cosine, for two gate regimes: "bench" (FlashKDA's benchmark draws: g ~ N(0,1), dt_bias ~ U(0,1),
A_log ~ U(0,1), i.e. fast forgetting) and "slow" (dt_bias ~ U(−9,−3), A_log = 0: per-token decay
rates from ~1e-4 to ~1, the long-memory regime where the state's precision shows). --floors prints,
from the CPU, the part of these errors that the formats alone cause: kda's bf16 normalised q and k,
and a bf16 o.

Where the libraries come from (none of their files are in this repository):
  --fla DIR        a directory holding FLA's `fla` package (a checkout of fla-org/flash-linear-attention);
                   env KDA_FLA. It needs torch, triton, einops and transformers.
  --flashkda DIR   a directory holding FlashKDA's `flash_kda` package and its built `flash_kda_C`
                   extension (a checkout of MoonshotAI/FlashKDA after `pip install -e .` or
                   `python setup.py build_ext --inplace`); env KDA_FLASHKDA. An installed package
                   is used when no directory is given.
A library that is not given or fails to import is reported "not available" and the rest still runs.
kda's extension (torch_prefill.cpp with kda/kernels/cuda/chunk_{intra,state,cp}.cu) is built at start
into --kda-build (default OUT/kda_ext_build), or taken prebuilt from --kda-module FILE.so. kda runs
three ways: the TF32 and the 3×TF32 state pass, and the TF32 pass with intra-card context
parallelism ("kda TF32, CP": the shard count the extension picks for the shape, or --kda-shards P;
a row where it picks 1 shard, or a batch of several sequences, reads "no CP"). A batch of several
sequences goes to kda packed, with sequence descriptors (cu_seqlens), as to FLA and FlashKDA.

Writes under --out (default $OUT, else build/side-by-side): side_by_side.json (every figure and raw
sample), side_by_side.md (the tables), side_by_side.log (everything printed).
Exit: 0 ran (a kernel's failure is reported in its row), 2 bad usage, 4 no GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIM = 128  # K = V
LOWER_BOUND = -5.0
L2_EPS = 1e-6

# (name, sequence lengths, heads, initial state); one length: a plain B = 1 call, several: a varlen
# batch; initial state: every sequence starts from a random fp32 state instead of zero.
FULL_SHAPES = [
    ("T=8192 H=32", [8192], 32, False),
    ("T=8192 H=64", [8192], 64, False),
    ("T=65536 H=64", [65536], 64, False),
    ("T=65536 H=4", [65536], 4, False),
    ("varlen mix H=64", [1300, 547, 2048, 963, 271, 3063], 64, False),
    ("varlen 8x1024 H=64", [1024] * 8, 64, False),
    ("T=8192 H=32, initial state", [8192], 32, True),
    ("T=8100 H=32", [8100], 32, False),
]
QUICK_SHAPES = [
    ("T=2048 H=8", [2048], 8, False),
    ("varlen mix H=8", [300, 57, 512, 171], 8, False),
    ("varlen 4x256 H=8", [256] * 4, 8, False),
    ("T=2048 H=8, initial state", [2048], 8, True),  # 32 chunks: CP in 2 shards from h0
    ("T=1000 H=8", [1000], 8, False),
]
KERNELS = ["fla", "fla_raw_gate", "flashkda", "kda_tf32", "kda_tf32x3", "kda_cp"]
COLUMNS = {"fla": "FLA, g given", "fla_raw_gate": "FLA, raw gate", "flashkda": "FlashKDA",
           "kda_tf32": "kda TF32", "kda_tf32x3": "kda 3×TF32", "kda_cp": "kda TF32, CP"}
TITLES = {
    "fla": "FLA Triton chunk_kda (g, β given)",
    "fla_raw_gate": "FLA Triton chunk_kda (raw gate in kernel, safe_gate)",
    "flashkda": "FlashKDA (fp32 state buffers)",
    "kda_tf32": "kda, TF32 state pass",
    "kda_tf32x3": "kda, 3×TF32 state pass",
    "kda_cp": "kda, TF32 state pass, intra-card context parallelism (M chain and scan in 3×TF32)",
}


class Log:
    def __init__(self, path):
        self.file = open(path, "w", encoding="utf-8")

    def __call__(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


# ---------------------------------------------------------------------------------------------
# Inputs: the raw (FlashKDA) form and what the others derive from it in fp32.


def gate_from_raw(g_raw, a_log, dt_bias, lower_bound=LOWER_BOUND):
    """g_eff (…, T, H, K) fp32 = lower_bound · sigmoid(exp(A_log[h]) · (g_raw + dt_bias[h, :]))."""
    x = g_raw.float() + dt_bias.float()
    return (lower_bound * torch.sigmoid(torch.exp(a_log.float())[:, None] * x)).float()


def l2_normalise(x, eps=L2_EPS):
    """x / sqrt(Σx² + eps) over the last axis, in x's dtype."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def draw_raw(total, heads, generator, device, regime, starts=0):
    """One input set in FlashKDA's raw form, (1, T, H, ·); with `starts` > 0 also h0, that many
    fp32 start states (N, H, K, V) of unit variance."""

    def randn(*shape):
        return torch.randn(*shape, generator=generator, device=device, dtype=torch.float32)

    def rand(*shape):
        return torch.rand(*shape, generator=generator, device=device, dtype=torch.float32)

    raw = {
        "q": randn(1, total, heads, DIM).to(torch.bfloat16),
        "k": randn(1, total, heads, DIM).to(torch.bfloat16),
        "v": randn(1, total, heads, DIM).to(torch.bfloat16),
        "g": randn(1, total, heads, DIM).to(torch.bfloat16),
        "beta": randn(1, total, heads).to(torch.bfloat16),
    }
    raw.update(gate_params(heads, generator, device, regime))
    raw["h0"] = randn(starts, heads, DIM, DIM) if starts else None
    return raw


def gate_params(heads, generator, device, regime):
    rand = lambda *s: torch.rand(*s, generator=generator, device=device, dtype=torch.float32)
    if regime == "bench":  # FlashKDA's benchmark: A_log, dt_bias ~ U(0, 1)
        return {"A_log": rand(heads), "dt_bias": rand(heads, DIM)}
    if regime == "slow":
        return {"A_log": torch.zeros(heads, device=device), "dt_bias": rand(heads, DIM) * 6 - 9}
    raise ValueError(f"unknown gate regime {regime}")


def derive(raw):
    """The fp32 effective gate and β, and kda's bf16 normalised q and k."""
    return {
        "g_eff": gate_from_raw(raw["g"], raw["A_log"], raw["dt_bias"]).contiguous(),
        "beta_eff": torch.sigmoid(raw["beta"].float()).contiguous(),
        "q_norm": l2_normalise(raw["q"].float()).to(torch.bfloat16).contiguous(),
        "k_norm": l2_normalise(raw["k"].float()).to(torch.bfloat16).contiguous(),
    }


# ---------------------------------------------------------------------------------------------
# The fp64 reference: S ← Diag(α_t) S; S ← S + k_t (β_t (v_t − Sᵀk_t))ᵀ; o_t = Sᵀ (scale · q_t).


class Recurrence64:
    """The token recurrence in fp64 on one device, all heads at once, in blocks of `block` tokens
    (each block's steps replayed from a CUDA graph on a GPU, run eagerly on the CPU)."""

    def __init__(self, heads, device, block=64):
        self.heads, self.device, self.block = heads, device, block
        f64 = dict(dtype=torch.float64, device=device)
        self.state = torch.zeros(heads, DIM, DIM, **f64)
        self.q = torch.zeros(block, heads, DIM, **f64)
        self.k = torch.zeros(block, heads, DIM, **f64)
        self.v = torch.zeros(block, heads, DIM, **f64)
        self.alpha = torch.ones(block, heads, DIM, **f64)
        self.beta = torch.zeros(block, heads, **f64)
        self.o = torch.zeros(block, heads, DIM, **f64)
        self.graphs = {}

    def _steps(self, count):
        s = self.state
        for i in range(count):
            s.mul_(self.alpha[i].unsqueeze(-1))
            kv = torch.bmm(self.k[i].unsqueeze(1), s).squeeze(1)  # Sᵀ k, (H, V)
            u = (self.v[i] - kv) * self.beta[i].unsqueeze(-1)
            s.baddbmm_(self.k[i].unsqueeze(2), u.unsqueeze(1))
            self.o[i].copy_(torch.bmm(self.q[i].unsqueeze(1), s).squeeze(1))

    def _replay(self, count):
        if self.device.type != "cuda":
            self._steps(count)
            return
        graph = self.graphs.get(count)
        if graph is None:
            saved = self.state.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._steps(count)  # warm-up outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._steps(count)
            self.graphs[count] = graph
            self.state.copy_(saved)
        graph.replay()

    def run(self, q, k, v, g_eff, beta_eff, scale, h0=None, normalise=True):
        """One sequence: q, k (T, H, K) raw (normalised here in fp64), v (T, H, V), g_eff (T, H, K),
        beta_eff (T, H), the start state h0 (H, K, V) or None for zero. Returns o (T, H, V) and the
        final state (H, K, V), fp64. normalise=False: q and k are taken as they are."""
        unit = l2_normalise if normalise else (lambda x: x)
        tokens = q.shape[0]
        if h0 is None:
            self.state.zero_()
        else:
            self.state.copy_(h0)
        out = torch.empty(tokens, self.heads, DIM, dtype=torch.float64, device=self.device)
        for t0 in range(0, tokens, self.block):
            n = min(self.block, tokens - t0)
            self.q[:n].copy_(unit(q[t0 : t0 + n].double()) * scale)
            self.k[:n].copy_(unit(k[t0 : t0 + n].double()))
            self.v[:n].copy_(v[t0 : t0 + n])
            self.alpha[:n].copy_(g_eff[t0 : t0 + n]).exp_()
            self.beta[:n].copy_(beta_eff[t0 : t0 + n])
            self._replay(n)
            out[t0 : t0 + n].copy_(self.o[:n])
        return out, self.state.clone()


def reference(raw, derived, lengths, scale, device, normalised_qk=False):
    """fp64 o (T_total, H, V) and final states (N, H, K, V) for every sequence, from raw["h0"] or
    zero states. normalised_qk: the recurrence on kda's inputs (derived q_norm, k_norm) instead of
    the raw q and k normalised in fp64."""
    q_in, k_in = (derived["q_norm"], derived["k_norm"]) if normalised_qk else (raw["q"], raw["k"])
    heads = raw["q"].shape[2]
    rec = Recurrence64(heads, device)
    outs, states = [], []
    start = 0
    for n, length in enumerate(lengths):
        sl = slice(start, start + length)
        h0 = None if raw["h0"] is None else raw["h0"][n]
        o, s = rec.run(q_in[0, sl], k_in[0, sl], raw["v"][0, sl], derived["g_eff"][0, sl],
                       derived["beta_eff"][0, sl], scale, h0, normalise=not normalised_qk)
        outs.append(o)
        states.append(s)
        start += length
    return torch.cat(outs, 0), torch.stack(states, 0)


def compare(x, ref, rows=4096):
    """rms(x − ref)/rms(ref) and cos(x, ref), in fp64, over dim-0 slices; x any dtype, same shape;
    NaN when x holds a non-finite value."""
    assert x.shape == ref.shape, (tuple(x.shape), tuple(ref.shape))
    x2 = x.reshape(x.shape[0], -1)
    r2 = ref.reshape(ref.shape[0], -1)
    d2 = r2sum = x2sum = dot = 0.0
    finite = True
    for i in range(0, x2.shape[0], rows):
        a = x2[i : i + rows].double()
        b = r2[i : i + rows].double()
        finite = finite and bool(torch.isfinite(a).all())
        d2 += float(((a - b) ** 2).sum())
        r2sum += float((b * b).sum())
        x2sum += float((a * a).sum())
        dot += float((a * b).sum())
    if not finite:
        return {"rel_rms": float("nan"), "cos": float("nan"), "finite": False}
    return {"rel_rms": math.sqrt(d2 / r2sum) if r2sum > 0 else float("nan"),
            "cos": dot / math.sqrt(r2sum * x2sum) if r2sum > 0 and x2sum > 0 else float("nan"),
            "finite": True}


# ---------------------------------------------------------------------------------------------
# The kernels. Each runner: prepare(raw, derived, lengths) -> call(), returning (o, state (N,H,K,V))
# after call() completes on the current stream.


class Unavailable(Exception):
    pass


def load_kda(build_dir, log):
    from torch.utils.cpp_extension import load

    os.makedirs(build_dir, exist_ok=True)
    cuda_dir = os.path.join(REPO, "kda", "kernels", "cuda")
    started = time.time()
    module = load(
        name="kda_prefill_torch",
        sources=[os.path.join(REPO, "kda", "gpu", "torch_prefill.cpp"),
                 os.path.join(cuda_dir, "chunk_intra.cu"), os.path.join(cuda_dir, "chunk_state.cu"),
                 os.path.join(cuda_dir, "chunk_cp.cu")],
        extra_include_paths=[REPO],
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-Wall"],
        build_directory=build_dir,
        verbose=False,
    )
    log(f"kda: extension built in {time.time() - started:.1f} s ({build_dir})")
    return module


class KdaRunner:
    """One configuration of kda's prefill: the chain precision, and `shards` (1: one pass; 0: the
    shard count the extension picks for the shape; P: P shards).
    Output and workspace buffers are shared by the runners given the same `buffers` dict (one set
    per shape: release() drops them). A varlen batch (several lengths) goes in packed, with
    sequence descriptors (cu_seqlens)."""

    def __init__(self, module, tf32x3, buffers, shards=1):
        self.module, self.tf32x3, self.buffers, self.shards = module, tf32x3, buffers, shards

    def shards_for(self, lengths, heads):
        if self.shards != 0:
            return self.shards
        return self.module.cp_shards(1, lengths[0], heads, heads)

    def supports(self, lengths, heads):
        if self.shards == 1:
            return None
        if len(lengths) > 1:
            return "no CP (a batch of sequences)"
        shards = self.shards_for(lengths, heads)
        if shards == 1:
            return "no CP (1 shard at this shape)"
        if lengths[0] % (64 * shards):
            return f"no CP ({shards} shards need T a multiple of {64 * shards})"
        return None

    def release(self):
        self.buffers.clear()

    def prepare(self, raw, derived, lengths, scale):
        heads = raw["q"].shape[2]
        total = sum(lengths)
        q, k, v = derived["q_norm"], derived["k_norm"], raw["v"]
        g, beta = derived["g_eff"], derived["beta_eff"]
        dev = q.device
        packed = len(lengths) > 1
        shards = 1 if packed else self.shards_for(lengths, heads)
        key = (tuple(lengths), heads)
        if key not in self.buffers:
            self.buffers.clear()
            descriptors = (self.module.sequence_descriptors(lengths, dev) if packed
                           else (None, None, 0))
            self.buffers[key] = (
                torch.empty((1, total, heads, DIM), dtype=torch.float32, device=dev),
                torch.empty((len(lengths), heads, DIM, DIM), dtype=torch.float32, device=dev),
                [torch.empty(e, dtype=torch.float32, device=dev)
                 for e in self.module.workspace_elements(1, total, heads, heads, descriptors[2])],
                descriptors)
        o, state, ws, (cu_seqlens, cu_chunks, chunks) = self.buffers[key]
        o.fill_(float("nan"))  # poisoned: an unwritten output cannot pass the check
        state.fill_(float("nan"))
        module, tf32x3, h0 = self.module, self.tf32x3, raw["h0"]

        def call():
            module.prefill(q, k, v, g, beta, o, state, ws, scale, tf32x3,
                           torch.cuda.current_stream().cuda_stream, h0, cu_seqlens, cu_chunks,
                           chunks, shards)
            return o, state

        return call


class FlaRunner:
    def __init__(self, chunk_kda, raw_gate):
        self.chunk_kda, self.raw_gate = chunk_kda, raw_gate

    def supports(self, lengths, heads):
        return None

    def prepare(self, raw, derived, lengths, scale):
        cu = None
        if len(lengths) > 1:
            cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.long, device=raw["q"].device)
        fn = self.chunk_kda
        if self.raw_gate:
            args = dict(q=raw["q"], k=raw["k"], v=raw["v"], g=raw["g"], beta=raw["beta"],
                        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
                        lower_bound=LOWER_BOUND, A_log=raw["A_log"], dt_bias=raw["dt_bias"].reshape(-1))
        else:
            args = dict(q=raw["q"], k=raw["k"], v=raw["v"], g=derived["g_eff"], beta=derived["beta_eff"])

        def call():
            o, state = fn(**args, scale=scale, initial_state=raw["h0"], output_final_state=True,
                          use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
            return o, state

        return call


class FlashKdaRunner:
    def __init__(self, module):
        self.module = module

    def supports(self, lengths, heads):
        return None

    def prepare(self, raw, derived, lengths, scale):
        dev = raw["q"].device
        cu = None
        if len(lengths) > 1:
            cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.long, device=dev)
        heads = raw["q"].shape[2]
        out = torch.full_like(raw["v"], float("nan"))
        final = torch.full((len(lengths), heads, DIM, DIM), float("nan"), dtype=torch.float32, device=dev)
        fwd = self.module.fwd
        # its states are (N, H, V, K); fp32 at the interface, bf16 inside the kernel
        h0 = None if raw["h0"] is None else raw["h0"].transpose(-1, -2).contiguous()

        def call():
            fwd(raw["q"], raw["k"], raw["v"], raw["g"], raw["beta"], scale, out, A_log=raw["A_log"],
                dt_bias=raw["dt_bias"], lower_bound=LOWER_BOUND, initial_state=h0, final_state=final,
                cu_seqlens=cu)
            return out, final.transpose(-1, -2)

        return call


def import_chunk_kda(path):
    """FLA's chunk_kda from the checkout at `path`. fla/__init__.py also imports FLA's layers and
    models (transformers); when that fails, the kernels are imported without it."""
    try:
        from fla.ops.kda import chunk_kda

        return chunk_kda, "package import"
    except Exception as first:
        import types

        for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
            del sys.modules[name]
        package = types.ModuleType("fla")
        package.__path__ = [os.path.join(os.path.abspath(path), "fla")]
        sys.modules["fla"] = package
        from fla.ops.kda import chunk_kda

        return chunk_kda, f"kernels only; the package import failed: {type(first).__name__}: {first}"


def load_libraries(args, log):
    runners, missing = {}, {}
    try:
        if args.kda_module:  # an extension built earlier by load_kda
            import importlib.util

            spec = importlib.util.spec_from_file_location("kda_prefill_torch", args.kda_module)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            log(f"kda: prebuilt extension {args.kda_module}")
        else:
            module = load_kda(args.kda_build, log)
        buffers = {}
        runners["kda_tf32"] = KdaRunner(module, False, buffers)
        runners["kda_tf32x3"] = KdaRunner(module, True, buffers)
        for name, count in args.cp_kernels.items():
            runners[name] = KdaRunner(module, False, buffers, shards=count)
    except Exception as exc:  # a build failure is reported in the table, the rest still runs
        log("kda: extension build failed:\n" + traceback.format_exc())
        for name in ["kda_tf32", "kda_tf32x3", *args.cp_kernels]:
            missing[name] = f"not available (build failed: {type(exc).__name__})"

    os.environ["FLA_FLASH_KDA"] = "0"  # the Triton path, never FLA's dispatch to FlashKDA
    os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
    if args.fla:
        sys.path.insert(0, os.path.abspath(args.fla))
    try:
        if not args.fla:
            raise Unavailable("no --fla DIR / KDA_FLA given")
        chunk_kda, how = import_chunk_kda(args.fla)
        log(f"fla: chunk_kda from {os.path.abspath(args.fla)} ({how})")
        runners["fla"] = FlaRunner(chunk_kda, False)
        if not args.no_fla_raw_gate:
            runners["fla_raw_gate"] = FlaRunner(chunk_kda, True)
    except Exception as exc:
        log(f"fla: not available: {exc}")
        missing["fla"] = missing["fla_raw_gate"] = f"not available ({exc})"
    if args.no_fla_raw_gate:
        missing.setdefault("fla_raw_gate", "not run (--no-fla-raw-gate)")

    if args.flashkda:
        sys.path.insert(0, os.path.abspath(args.flashkda))
    try:
        import flash_kda

        log(f"flashkda: from {os.path.dirname(flash_kda.__file__)}")
        runners["flashkda"] = FlashKdaRunner(flash_kda)
    except Exception as exc:
        log(f"flashkda: not available: {exc}")
        missing["flashkda"] = f"not available ({exc})"
    return runners, missing


# ---------------------------------------------------------------------------------------------
# Timing.


def bootstrap_median(samples, rng, rounds=2000):
    xs = np.asarray(samples, dtype=np.float64)
    idx = rng.integers(0, len(xs), size=(rounds, len(xs)))
    medians = np.median(xs[idx], axis=1)
    return float(np.median(xs)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def time_interleaved(calls, samples, flush, warmup=3):
    """calls: name -> [call per input set]. Each sample: for every kernel in turn, the flush, then
    events around one call on the next input set. Returns name -> list of ms."""
    for name, per_set in calls.items():
        for i in range(warmup):
            per_set[i % len(per_set)]()
    torch.cuda.synchronize()
    events = {name: [] for name in calls}
    torch.cuda._sleep(200_000_000)  # ~0.1 s hold: the host queues ahead of the GPU
    for i in range(samples):
        for name, per_set in calls.items():
            flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            per_set[i % len(per_set)]()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}


# ---------------------------------------------------------------------------------------------


def run_shape(name, lengths, heads, with_h0, runners, missing, args, log, rng_np):
    device = torch.device("cuda")
    total = sum(lengths)
    scale = DIM ** -0.5
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed * 1000003 + total * 131 + heads)
    row = {"shape": name, "lengths": lengths, "heads": heads, "initial_state": with_h0, "kernels": {}}
    starts = len(lengths) if with_h0 else 0
    order = [k for k in KERNELS if k in runners]
    for kname in KERNELS:
        entry = row["kernels"].setdefault(kname, {})
        if kname in missing:
            entry["status"] = missing[kname]
        elif kname in runners and runners[kname].supports(lengths, heads):
            entry["status"] = runners[kname].supports(lengths, heads)
    active = [k for k in order if "status" not in row["kernels"][k]]

    # Checks: each kernel once per gate regime against the fp64 recurrence.
    for regime in ("bench", "slow"):
        raw = draw_raw(total, heads, gen, device, regime, starts)
        derived = derive(raw)
        t0 = time.time()
        ref_o, ref_s = reference(raw, derived, lengths, scale, device)
        torch.cuda.synchronize()
        row.setdefault("reference_s", {})[regime] = time.time() - t0
        log(f"[{name}] {regime}: fp64 reference in {time.time() - t0:.1f} s")
        for kname in active:
            entry = row["kernels"][kname]
            try:
                o, s = runners[kname].prepare(raw, derived, lengths, scale)()
                torch.cuda.synchronize()
                eo = compare(o.reshape(total, heads, DIM), ref_o)
                es = compare(s, ref_s)
                entry.setdefault("errors", {})[regime] = {"o": eo, "state": es}
                log(f"[{name}] {regime} {kname}: o rel_rms {eo['rel_rms']:.3e} cos {eo['cos']:.9f}; "
                    f"state rel_rms {es['rel_rms']:.3e} cos {es['cos']:.9f}")
                del o, s
            except Exception as exc:
                entry["status"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                log(f"[{name}] {regime} {kname} FAILED:\n{traceback.format_exc()}")
        del raw, derived, ref_o, ref_s
        torch.cuda.empty_cache()
    active = [k for k in active if "status" not in row["kernels"][k]]

    # Timing, per regime of --time-gates: two input sets rotated.
    props = torch.cuda.get_device_properties(device)
    flush_buf = torch.empty(2 * props.L2_cache_size, dtype=torch.uint8, device=device)
    samples = args.samples or (30 if total * heads > 8192 * 64 else 100)
    for regime in args.time_gates:
        key = "time_ms" if regime == "bench" else f"time_ms_{regime}"
        sets = [draw_raw(total, heads, gen, device, regime, starts) for _ in range(2)]
        sets = [(raw, derive(raw)) for raw in sets]
        calls = {}
        for kname in active:
            if "status" in row["kernels"][kname]:
                continue
            try:
                calls[kname] = [runners[kname].prepare(raw, d, lengths, scale) for raw, d in sets]
            except Exception as exc:
                row["kernels"][kname]["status"] = f"failed: {type(exc).__name__}: {exc}"
        try:
            times = time_interleaved(calls, samples, flush_buf.zero_) if calls else {}
        except Exception as exc:
            log(f"[{name}] timing FAILED:\n{traceback.format_exc()}")
            times = {}
            for kname in calls:
                row["kernels"][kname]["status"] = f"timing failed: {type(exc).__name__}"
        for kname, ms in times.items():
            med, lo, hi = bootstrap_median(ms, rng_np)
            row["kernels"][kname][key] = {"median": med, "ci95": [lo, hi], "samples": ms}
            log(f"[{name}] {regime} gates {kname}: median {med:.4f} ms [{lo:.4f}, {hi:.4f}] "
                f"over {len(ms)}")
        del calls, sets
        torch.cuda.empty_cache()
    row["samples"] = samples
    del flush_buf
    for runner in runners.values():
        if hasattr(runner, "release"):
            runner.release()
    torch.cuda.empty_cache()
    return row


def fmt_time(entry, key="time_ms"):
    t = entry.get(key)
    if not t:
        return entry.get("status", "–")
    return f"{t['median']:.3f} [{t['ci95'][0]:.3f}, {t['ci95'][1]:.3f}]"


def fmt_err(entry, regime, what):
    e = entry.get("errors", {}).get(regime)
    if not e:
        return "–"
    m = e[what]
    if not m["finite"]:
        return "non-finite"
    return f"{m['rel_rms']:.2e} / {m['cos']:.6f}"


def cp_kernels(shard_counts):
    """The kda CP runners' names for --kda-shards: one count, "kda_cp"; several (a sweep), one
    "kda_cp_p<P>" each ("kda_cp_auto" for 0), in KERNELS, COLUMNS and TITLES."""
    if len(shard_counts) == 1:
        return {"kda_cp": shard_counts[0]}
    names = {(f"kda_cp_p{count}" if count else "kda_cp_auto"): count for count in shard_counts}
    KERNELS.remove("kda_cp")
    for name, count in names.items():
        KERNELS.append(name)
        COLUMNS[name] = f"kda TF32, CP P={count}" if count else "kda TF32, CP (P automatic)"
        TITLES[name] = ("kda, TF32 state pass, intra-card context parallelism in "
                        + (f"{count} shards" if count else "the extension's shard count"))
    return names


def tables(rows, env):
    lines = [f"GPU: {env['gpu']}; torch {env['torch']}; triton {env.get('triton', '?')}; "
             f"L2 {env['l2_mb']:.0f} MB; flush buffer 2× L2; {env['date']}", ""]
    for regime in env.get("time_gates", ["bench"]):
        key = "time_ms" if regime == "bench" else f"time_ms_{regime}"
        lines.append(f"Time, ms, {regime} gates: median [bootstrap 95 % interval of the median]; "
                     "ratio = the faster kda TF32 row / FlashKDA (medians)")
        lines.append("")
        lines.append("| shape | " + " | ".join(COLUMNS[n] for n in KERNELS) +
                     " | best kda TF32 / FlashKDA | samples |")
        lines.append("|---" * (len(KERNELS) + 3) + "|")
        for r in rows:
            k = r["kernels"]
            ratio = "–"
            kda_best = [k[n][key]["median"] for n in KERNELS
                        if (n == "kda_tf32" or n.startswith("kda_cp")) and k[n].get(key)]
            if kda_best and k["flashkda"].get(key):
                ratio = f"{min(kda_best) / k['flashkda'][key]['median']:.2f}×"
            lines.append(f"| {r['shape']} | " + " | ".join(fmt_time(k[n], key) for n in KERNELS) +
                         f" | {ratio} | {r.get('samples', '–')} |")
        lines.append("")
    lines.append("Error against the fp64 recurrence: rms(Δ)/rms(ref) / cosine, o and final state, "
                 "bench gates and slow gates")
    lines.append("")
    lines.append("| shape | kernel | o, bench | state, bench | o, slow | state, slow |")
    lines.append("|---|---|---|---|---|---|")
    for r in rows:
        for n in KERNELS:
            e = r["kernels"][n]
            if "errors" not in e:
                lines.append(f"| {r['shape']} | {n} | {e.get('status', '–')} | | | |")
                continue
            lines.append(f"| {r['shape']} | {n} | {fmt_err(e, 'bench', 'o')} | "
                         f"{fmt_err(e, 'bench', 'state')} | {fmt_err(e, 'slow', 'o')} | "
                         f"{fmt_err(e, 'slow', 'state')} |")
    return "\n".join(lines) + "\n"


def environment():
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sm_count": props.multi_processor_count,
           "l2_mb": props.L2_cache_size / 1e6, "torch": torch.__version__,
           "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        pass
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,"
             "power.draw", "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:
        env["nvidia_smi"] = f"unavailable: {exc}"
    return env


def self_test():
    """CPU checks of the parts that need no GPU: the fp64 recurrence against a direct numpy loop of
    the token step (reference/kda.md), per sequence of a varlen batch; the gate and β derivation
    against the formulas in float64. Returns 0 when all hold, 1 otherwise."""
    cpu = torch.device("cpu")
    gen = torch.Generator(device=cpu)
    gen.manual_seed(7)
    lengths, heads, scale = [70, 5, 64], 3, DIM ** -0.5
    failures = 0
    for regime in ("bench", "slow"):
        raw = draw_raw(sum(lengths), heads, gen, cpu, regime, len(lengths) if regime == "slow" else 0)
        derived = derive(raw)
        ref_o, ref_s = reference(raw, derived, lengths, scale, cpu)
        q = raw["q"][0].double().numpy()
        k = raw["k"][0].double().numpy()
        v = raw["v"][0].double().numpy()
        g = derived["g_eff"][0].double().numpy()
        b = derived["beta_eff"][0].double().numpy()
        start = 0
        for n, length in enumerate(lengths):
            s = np.zeros((heads, DIM, DIM)) if raw["h0"] is None else raw["h0"][n].double().numpy().copy()
            for t in range(start, start + length):
                for h in range(heads):
                    qt = q[t, h] / np.sqrt((q[t, h] ** 2).sum() + L2_EPS) * scale
                    kt = k[t, h] / np.sqrt((k[t, h] ** 2).sum() + L2_EPS)
                    s[h] = np.exp(g[t, h])[:, None] * s[h]
                    s[h] += np.outer(kt, b[t, h] * (v[t, h] - s[h].T @ kt))
                    err = np.abs(ref_o[t, h].numpy() - s[h].T @ qt).max()
                    if err > 1e-12:
                        failures += 1
                        print(f"self-test: o[{t}, {h}] off by {err:.2e} ({regime})")
            err = np.abs(ref_s[n].numpy() - s).max()
            if err > 1e-12:
                failures += 1
                print(f"self-test: state of sequence {n} off by {err:.2e} ({regime})")
            start += length
        x = raw["g"].double() + raw["dt_bias"].double()
        want = LOWER_BOUND / (1 + torch.exp(-torch.exp(raw["A_log"].double())[:, None] * x))
        err = float(((derived["g_eff"].double() - want).abs() / want.abs()).max())
        if err > 1e-6:
            failures += 1
            print(f"self-test: g_eff off by {err:.2e} relative ({regime})")
        want_b = 1 / (1 + torch.exp(-raw["beta"].double()))
        err = float((derived["beta_eff"].double() - want_b).abs().max())
        if err > 1e-6:
            failures += 1
            print(f"self-test: beta_eff off by {err:.2e} ({regime})")
        decay = -derived["g_eff"]
        print(f"self-test: {regime} gates: per-token decay rate -g from {float(decay.min()):.2e} "
              f"to {float(decay.max()):.2e}, median {float(decay.median()):.2e}")
    qn = derived["q_norm"].float()
    err = float(((qn * qn).sum(-1) - 1).abs().max())
    if err > 2e-2:
        failures += 1
        print(f"self-test: kda's q is not unit length after bf16 rounding ({err:.2e})")
    print(f"self-test: {'passed' if failures == 0 else f'{failures} failures'}")
    return 0 if failures == 0 else 1


def floors(tokens=2048, heads=4):
    """On the CPU: the error the inputs and outputs' formats alone put between a kernel and the
    fp64 recurrence, for the same input draws as the GPU run, in fp64 arithmetic throughout:
    kda's inputs (q and k normalised in fp32 and rounded to bf16), and a bf16 output (FLA and
    FlashKDA write o in bf16). Prints one line per gate regime; returns 0."""
    cpu = torch.device("cpu")
    gen = torch.Generator(device=cpu)
    gen.manual_seed(11)
    scale = DIM ** -0.5
    print(f"floors at T={tokens}, H={heads} (fp64 arithmetic; rms(Δ)/rms(ref) against the fp64 "
          f"recurrence on the raw inputs)")
    for regime in ("bench", "slow"):
        raw = draw_raw(tokens, heads, gen, cpu, regime)
        derived = derive(raw)
        ref_o, ref_s = reference(raw, derived, [tokens], scale, cpu)
        kda_o, kda_s = reference(raw, derived, [tokens], scale, cpu, normalised_qk=True)
        ko, ks = compare(kda_o, ref_o), compare(kda_s, ref_s)
        bo = compare(ref_o.to(torch.bfloat16), ref_o)
        print(f"floors {regime}: kda's bf16 normalised q, k: o {ko['rel_rms']:.2e}, state "
              f"{ks['rel_rms']:.2e}; o rounded to bf16: {bo['rel_rms']:.2e}")
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fla", default=os.environ.get("KDA_FLA"), help="directory holding the fla package")
    p.add_argument("--flashkda", default=os.environ.get("KDA_FLASHKDA"),
                   help="directory holding flash_kda and its built flash_kda_C")
    out = os.environ.get("OUT") or os.path.join(REPO, "build", "side-by-side")
    p.add_argument("--out", default=out)
    p.add_argument("--kda-build", default=None, help="kda extension build directory (default OUT/kda_ext_build)")
    p.add_argument("--kda-module", default=None, help="a kda_prefill_torch extension built earlier "
                   "(the .so in a --kda-build directory): no build at start")
    p.add_argument("--quick", action="store_true", help="three small shapes (every code path)")
    p.add_argument("--shapes", default=None,
                   help="comma-separated subset of the shape names' indices in the full list, e.g. 0,1")
    p.add_argument("--samples", type=int, default=0, help="timed calls per kernel (default 100, 30 above "
                   "T·H = 8192·64); at least 30")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-gates", default="bench", help="gate regimes to time, comma-separated: bench "
                   "(FlashKDA's benchmark draws, fast forgetting) and/or slow")
    p.add_argument("--no-fla-raw-gate", action="store_true", help="skip FLA's raw-gate configuration")
    p.add_argument("--kda-shards", default="0", help="shards of the kda CP column (default 0: the "
                   "extension's choice for the shape; P >= 2 forces P); comma-separated counts "
                   "give one column each (a sweep, timed in the same interleaved calls)")
    p.add_argument("--self-test", action="store_true", help="CPU checks of the reference and the "
                   "input derivation, no GPU needed")
    p.add_argument("--floors", action="store_true", help="CPU: the error kda's bf16 normalised q, k "
                   "and a bf16 o alone cause, no GPU needed")
    args = p.parse_args(argv)
    if args.samples and args.samples < 30:
        p.error(f"--samples {args.samples}: expected at least 30")
    try:
        counts = [int(c) for c in args.kda_shards.split(",")]
    except ValueError:
        p.error(f"--kda-shards {args.kda_shards!r}: expected comma-separated integers")
    bad = [c for c in counts if c == 1 or c < 0]
    if bad or len(set(counts)) != len(counts):
        p.error(f"--kda-shards {args.kda_shards!r}: expected distinct counts, each 0 (automatic) "
                "or at least 2")
    args.cp_kernels = cp_kernels(counts)
    args.time_gates = args.time_gates.split(",")
    bad = [g for g in args.time_gates if g not in ("bench", "slow")]
    if bad:
        p.error(f"--time-gates: {bad[0]!r} is not a regime (expected bench, slow)")
    args.kda_build = args.kda_build or os.path.join(args.out, "kda_ext_build")
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    if args.shapes:
        try:
            picks = [int(s) for s in args.shapes.split(",")]
        except ValueError:
            p.error(f"--shapes {args.shapes!r}: expected comma-separated integers")
        bad = [i for i in picks if not 0 <= i < len(shapes)]
        if bad:
            p.error(f"--shapes: index {bad[0]} out of range 0..{len(shapes) - 1}")
        shapes = [shapes[i] for i in picks]
    args.shape_list = shapes
    return args


def main(argv):
    args = parse_args(argv)
    if args.self_test:
        return self_test()
    if args.floors:
        return floors()
    if not torch.cuda.is_available():
        print("side_by_side.py: no CUDA device", file=sys.stderr)
        return 4
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "side_by_side.log"))
    env = environment()
    env["time_gates"] = args.time_gates
    log(json.dumps(env))
    log("command: " + " ".join([os.path.basename(sys.argv[0])] + argv))
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp64 reference and the checks use no TF32
    torch.set_grad_enabled(False)  # forward only, for every library alike
    runners, missing = load_libraries(args, log)
    rng_np = np.random.default_rng(args.seed)
    rows = []
    result = {"environment": env, "argv": argv, "missing": missing, "rows": rows}
    for name, lengths, heads, with_h0 in args.shape_list:
        log(f"=== {name}: lengths {lengths}, H {heads}, initial state {with_h0}")
        rows.append(run_shape(name, lengths, heads, with_h0, runners, missing, args, log, rng_np))
        with open(os.path.join(args.out, "side_by_side.json"), "w") as f:
            json.dump(result, f)
    text = tables(rows, env)
    with open(os.path.join(args.out, "side_by_side.md"), "w") as f:
        f.write(text)
    log(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
