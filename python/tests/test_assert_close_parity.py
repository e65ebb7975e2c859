"""Issue 38: `loupe diff` (the CLI, on .npy/.safetensors files), `loupe.diff`, `loupe.assert_close`
and `torch.testing.assert_close` give the same pass/fail on the same tensors.

1,000 seeded random pairs over float64/32/16, bfloat16, float8_e4m3fn/e5m2 and integer dtypes,
with NaN and +-Inf sprinkled in (on one side, on both at the same positions, or opposite
infinities), values placed around the tolerance so that both verdicts occur, default tolerances
or explicit rtol/atol, equal_nan on or off. torch decides wherever the installed torch has the
dtype; torch 1.13 has no float8 dtypes, so for fp8 torch's own rule decides: _DTYPE_PRECISIONS
has no fp8 entry, so the defaults are (0, 0), applied by torch.testing.assert_close to the exactly
decoded values."""

import json
import os
import struct
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import loupe  # noqa: E402
from loupe._diff import fp8_values  # noqa: E402

PAIRS = 1000
SEED = 38
FLOAT_DTYPES = ["float64", "float32", "float16", "bfloat16"]
FP8_DTYPES = ["float8_e4m3fn", "float8_e5m2"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]
DTYPES = FLOAT_DTYPES + FP8_DTYPES + INT_DTYPES
SAFETENSORS_NAMES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
                     "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "int8": "I8",
                     "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8"}
# Explicit tolerances drawn for float pairs: (rtol, atol), both given as torch requires.
EXPLICIT = [(1e-3, 1e-5), (0.0, 0.0), (0.05, 0.0), (0.0, 0.1)]


class Pair:
    """One random pair: the bits as stored (`a_bits`, `b_bits`: numpy arrays; bf16 as uint16,
    fp8 as uint8) and the options all four comparators get."""

    def __init__(self, index, dtype, a_bits, b_bits, tolerance, equal_nan):
        self.index = index
        self.dtype = dtype
        self.a_bits = a_bits
        self.b_bits = b_bits
        self.tolerance = tolerance  # None: per-dtype defaults
        self.equal_nan = equal_nan

    @property
    def kwargs(self):
        out = {"equal_nan": self.equal_nan}
        if self.tolerance is not None:
            out["rtol"], out["atol"] = self.tolerance
        return out

    def __repr__(self):
        return "pair %d (%s, %s, equal_nan=%s): a=%r b=%r" % (
            self.index, self.dtype, self.tolerance, self.equal_nan, self.values(self.a_bits),
            self.values(self.b_bits))

    def values(self, bits):
        if self.dtype == "bfloat16":
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        if self.dtype in FP8_DTYPES:
            return fp8_values(self.dtype)[bits]
        return bits


def _bf16_bits(values):
    """float64 -> bfloat16 bits, rounded by torch itself."""
    return torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16).view(
        torch.int16).numpy().view(np.uint16)


def _sprinkle(rng, a, b, dtype):
    """NaN/Inf on one side, on both alike, or opposite infinities, at a few positions."""
    kind = rng.integers(0, 12)
    if kind >= 5 or a.size == 0:
        return
    positions = rng.choice(a.size, size=max(1, a.size // 8), replace=False)
    has_inf = dtype != "float8_e4m3fn"
    special = np.inf if has_inf and rng.random() < 0.6 else np.nan
    sign = -1.0 if rng.random() < 0.5 else 1.0
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    if kind <= 1:  # both sides alike: equal infinities agree, NaN only under equal_nan
        flat_a[positions] = flat_b[positions] = sign * special
    elif kind == 2:  # one side only
        (flat_a if rng.random() < 0.5 else flat_b)[positions] = sign * special
    elif kind == 3 and has_inf:  # opposite infinities
        flat_a[positions], flat_b[positions] = np.inf, -np.inf
    else:  # NaN against Inf
        flat_a[positions] = np.nan
        flat_b[positions] = np.inf if has_inf else 1.0


def _make_pair(rng, index, dtype):
    shape = tuple(int(n) for n in rng.integers(1, 9, size=rng.integers(1, 3)))
    equal_nan = bool(rng.random() < 0.35)
    if dtype in INT_DTYPES:
        info = np.iinfo(dtype)
        low, high = max(int(info.min), -(1 << 40)), min(int(info.max), 1 << 40)
        b = rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
        a = b.copy()
        if rng.random() < 0.5:
            flat = a.reshape(-1)
            spot = rng.integers(0, flat.size)
            flat[spot] = flat[spot] + 1 if flat[spot] < high else flat[spot] - 1
        return Pair(index, dtype, a, b, None, equal_nan)
    tolerance = EXPLICIT[rng.integers(0, len(EXPLICIT))] if rng.random() < 0.25 else None
    if dtype in FP8_DTYPES:
        table = fp8_values(dtype)
        finite_bits = np.flatnonzero(np.isfinite(table)).astype(np.uint8)
        b_bits = rng.choice(finite_bits, size=shape)
        a_bits = b_bits.copy()
        if rng.random() < 0.55:  # a few elements one or two steps away
            flat = a_bits.reshape(-1)
            spots = rng.choice(flat.size, size=rng.integers(1, flat.size + 1), replace=False)
            for spot in spots:
                moved = int(flat[spot]) + int(rng.choice([-2, -1, 1, 2]))
                if 0 <= moved < 256 and np.isfinite(table[moved]):
                    flat[spot] = moved
        a, b = table[a_bits].copy(), table[b_bits].copy()
        _sprinkle(rng, a, b, dtype)
        encode = {value: bits for bits, value in enumerate(table) if np.isfinite(value)}

        def to_bits(values):
            out = np.empty(values.shape, np.uint8)
            for position, value in np.ndenumerate(values):
                if np.isnan(value):
                    out[position] = 0x7F
                elif np.isinf(value):
                    out[position] = 0x7C if value > 0 else 0xFC
                else:
                    out[position] = encode[value]
            return out
        return Pair(index, dtype, to_bits(a), to_bits(b), tolerance, equal_nan)
    rtol, atol = tolerance if tolerance is not None else loupe.DEFAULT_TOLERANCES[dtype]
    b = rng.normal(0, 10 ** rng.uniform(-6, 2), size=shape)
    # Perturbations at a level of the allowed error: none, well inside, just inside, just
    # outside, well outside (before rounding to the dtype, which moves some across the edge).
    allowed = atol + rtol * np.abs(b) if rtol > 0 or atol > 0 else 1e-3 * np.abs(b)
    level = rng.choice([0.0, 0.5, 0.97, 1.03, 3.0])
    a = b + rng.choice([-1.0, 1.0], size=shape) * level * allowed * rng.uniform(0.9, 1.0,
                                                                                   size=shape)
    if dtype == "bfloat16":
        a_bits, b_bits = _bf16_bits(a), _bf16_bits(b)
        a = (a_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        b = (b_bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        _sprinkle(rng, a, b, dtype)
        return Pair(index, dtype, _bf16_bits(a), _bf16_bits(b), tolerance, equal_nan)
    a, b = a.astype(dtype), b.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        _sprinkle(rng, a, b, dtype)
    return Pair(index, dtype, a, b, tolerance, equal_nan)


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(SEED)
    return [_make_pair(rng, index, DTYPES[index % len(DTYPES)]) for index in range(PAIRS)]


def _torch_tensor(pair, bits):
    if pair.dtype == "bfloat16":
        return torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    if pair.dtype in FP8_DTYPES:
        if hasattr(torch, pair.dtype):
            return torch.from_numpy(bits.copy()).view(getattr(torch, pair.dtype))
        return torch.from_numpy(pair.values(bits))  # decoded exactly; see torch_passes
    return torch.from_numpy(bits.copy())


def torch_passes(pair):
    kwargs = pair.kwargs
    if pair.dtype in FP8_DTYPES and not hasattr(torch, pair.dtype):
        # torch's rule for a dtype missing from _DTYPE_PRECISIONS: rtol = atol = 0.
        kwargs.setdefault("rtol", 0.0)
        kwargs.setdefault("atol", 0.0)
    try:
        torch.testing.assert_close(_torch_tensor(pair, pair.a_bits),
                                   _torch_tensor(pair, pair.b_bits), **kwargs)
        return True
    except AssertionError:
        return False


def _operand(pair, bits):
    if pair.dtype == "bfloat16":
        return _torch_tensor(pair, bits)
    if pair.dtype in FP8_DTYPES:
        return loupe.Bits(bits, pair.dtype)
    return bits


def loupe_diff_passes(pair):
    return loupe.diff(_operand(pair, pair.a_bits), _operand(pair, pair.b_bits),
                      **pair.kwargs).passed


def loupe_assert_close_passes(pair):
    try:
        loupe.assert_close(_operand(pair, pair.a_bits), _operand(pair, pair.b_bits),
                           **pair.kwargs)
        return True
    except AssertionError:
        return False


def write_safetensors(path, name, dtype, bits):
    data = np.ascontiguousarray(bits).tobytes()
    header = json.dumps({name: {"dtype": SAFETENSORS_NAMES[dtype], "shape": list(bits.shape),
                                "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header)) + header + data)


def write_side(directory, pair, bits):
    """.npy where numpy holds the dtype (every other such pair as .safetensors), else
    .safetensors; returns the name `loupe diff` gives the tensor."""
    stem = "p%04d" % pair.index
    if pair.dtype in ("bfloat16",) + tuple(FP8_DTYPES) or pair.index % 2:
        write_safetensors(os.path.join(directory, stem + ".safetensors"), "t", pair.dtype, bits)
        return stem + ".safetensors:t"
    np.save(os.path.join(directory, stem + ".npy"), bits)
    return stem + ".npy"


def cli_flags(pair):
    flags = []
    if pair.tolerance is not None:
        flags += ["--rtol", repr(pair.tolerance[0]), "--atol", repr(pair.tolerance[1])]
    if pair.equal_nan:
        flags.append("--equal-nan")
    return flags


def cli_verdicts(loupe_executable, pairs, root):
    """Pairs grouped by their options, one `loupe diff DIR_A DIR_B --json` per group: each
    tensor's `diverged` is the CLI's pass/fail for that pair."""
    groups = {}
    for pair in pairs:
        groups.setdefault(tuple(cli_flags(pair)), []).append(pair)
    verdicts = {}
    for number, (flags, members) in enumerate(sorted(groups.items())):
        side_a = os.path.join(root, "g%d" % number, "a")
        side_b = os.path.join(root, "g%d" % number, "b")
        os.makedirs(side_a)
        os.makedirs(side_b)
        names = {}
        for pair in members:
            names[write_side(side_a, pair, pair.a_bits)] = pair
            write_side(side_b, pair, pair.b_bits)
        run = subprocess.run([loupe_executable, "diff", side_a, side_b, "--json"] + list(flags),
                             capture_output=True, text=True)
        assert run.returncode in (0, 1), run.stderr
        envelope = json.loads(run.stdout)
        tensors = envelope["data"]["tensors"]
        assert len(tensors) == len(members)
        for tensor in tensors:
            verdicts[names[tensor["name"]].index] = not tensor["diverged"]
        assert run.returncode == (0 if all(not t["diverged"] for t in tensors) else 1)
    return verdicts


def test_four_comparators_agree_on_1000_random_pairs(pairs, loupe_executable, tmp_path):
    cli = cli_verdicts(loupe_executable, pairs, str(tmp_path))
    disagreements = []
    outcomes = {dtype: set() for dtype in DTYPES}
    for pair in pairs:
        verdicts = {"torch": torch_passes(pair), "loupe diff": cli[pair.index],
                    "loupe.diff": loupe_diff_passes(pair),
                    "loupe.assert_close": loupe_assert_close_passes(pair)}
        outcomes[pair.dtype].add(verdicts["torch"])
        if len(set(verdicts.values())) != 1:
            disagreements.append("%r: %s" % (pair, verdicts))
    assert not disagreements, "%d disagreements, first: %s" % (len(disagreements),
                                                              disagreements[:3])
    # Both verdicts occur for every dtype, so agreement is not agreement on one answer.
    assert all(seen == {True, False} for seen in outcomes.values()), outcomes


def test_single_pair_exit_codes_match_torch(pairs, loupe_executable, tmp_path):
    """The exit code of `loupe diff A B` on two files, for every 25th pair."""
    for pair in pairs[::25]:
        directory = tmp_path / ("p%04d" % pair.index)
        directory.mkdir()
        files = []
        for side, bits in (("a", pair.a_bits), ("b", pair.b_bits)):
            os.makedirs(directory / side)
            name = write_side(str(directory / side), pair, bits)
            files.append(str(directory / side / name.split(":")[0]))
        run = subprocess.run([loupe_executable, "diff"] + files + cli_flags(pair),
                             capture_output=True, text=True)
        assert run.returncode == (0 if torch_passes(pair) else 1), (pair, run.stdout, run.stderr)


def test_identical_infinities_pass_and_nan_needs_equal_nan(loupe_executable, tmp_path):
    inf = np.array([1.0, np.inf, -np.inf], np.float32)
    np.save(tmp_path / "a.npy", inf)
    np.save(tmp_path / "b.npy", inf.copy())
    assert subprocess.run([loupe_executable, "diff", str(tmp_path / "a.npy"),
                           str(tmp_path / "b.npy")], capture_output=True).returncode == 0
    nan = np.array([1.0, np.nan], np.float32)
    np.save(tmp_path / "c.npy", nan)
    np.save(tmp_path / "d.npy", nan.copy())
    base = [loupe_executable, "diff", str(tmp_path / "c.npy"), str(tmp_path / "d.npy")]
    assert subprocess.run(base, capture_output=True).returncode == 1
    assert subprocess.run(base + ["--equal-nan"], capture_output=True).returncode == 0
    one = subprocess.run(base + ["--rtol", "1e-3"], capture_output=True, text=True)
    assert one.returncode == 2
    assert "--rtol given without --atol; expected both or neither" in one.stderr
