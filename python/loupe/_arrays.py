"""Turning what a user holds (numpy arrays, torch tensors, scalars, anything with
``__dlpack__`` or ``__array_interface__``) into buffers the compiled module views without copying.

A C-contiguous CPU array in native byte order is passed as it is: no copy. A CUDA tensor is
copied to host once (loupe compares on the CPU); a non-contiguous array or tensor is made
contiguous (one copy). bfloat16 and fp8 have no buffer-protocol format, so their bits travel as
int16 / uint8 with the dtype name beside them: the user converts nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ._errors import InputError

# numpy dtype names (ml_dtypes and friends) and torch dtype names that loupe reads as raw bits.
_BITS_DTYPES = {
    "bfloat16": ("bfloat16", np.int16),
    "float8_e4m3fn": ("float8_e4m3fn", np.uint8),
    "float8_e5m2": ("float8_e5m2", np.uint8),
}


class Bits:
    """Raw bits of a dtype the installed numpy or torch cannot hold (bfloat16, fp8), with its
    name: ``loupe.Bits(uint8_array, "float8_e4m3fn")``. loupe decodes them exactly.

    Example::

        raw = np.frombuffer(open("x.bin", "rb").read(), np.uint8).reshape(4, 8)
        loupe.diff(loupe.Bits(raw, "float8_e5m2"), reference)
    """

    def __init__(self, array: Any, dtype: str) -> None:
        if dtype not in _BITS_DTYPES:
            raise InputError("Bits(..., %r): expected one of %s" % (dtype, ", ".join(
                sorted(_BITS_DTYPES))), "pass the dtype name the bits encode")
        carrier = _BITS_DTYPES[dtype][1]
        array = np.asarray(array)
        if array.dtype.itemsize != np.dtype(carrier).itemsize or array.dtype.kind not in "iu":
            raise InputError("Bits(..., %r): the bits are %s; expected %d-byte integers" % (
                dtype, array.dtype.name, np.dtype(carrier).itemsize),
                "view the raw buffer as uint8 (fp8) or uint16/int16 (bfloat16)")
        self.array = np.ascontiguousarray(array).view(carrier)
        self.dtype = dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.array.shape)


@dataclass
class Operand:
    """One side of a comparison, ready for the compiled module."""

    array: np.ndarray  # C-contiguous, native byte order; holds the memory alive
    dtype: Optional[str]  # loupe dtype name when the buffer's own format cannot say it
    dtype_label: str  # how the user's library names the dtype: "torch.bfloat16", "float32"
    shape: Tuple[int, ...]
    device: str  # "cpu", "cuda:0", ...
    is_torch: bool


def _torch():
    # Only when the user already imported torch: never pay torch's import for numpy inputs.
    return sys.modules.get("torch")


def is_tensor_like(value: Any) -> bool:
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (Bits, np.ndarray, np.generic, int, float, bool)) or hasattr(
        value, "__array_interface__") or hasattr(value, "__dlpack__")


def operand(value: Any, side: str) -> Operand:
    """The Operand for ``value``; raises InputError naming ``side`` for what loupe cannot read."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return _from_torch(torch, value, side)
    if isinstance(value, Bits):
        return Operand(value.array, value.dtype, value.dtype, value.shape, "cpu", False)
    if isinstance(value, np.ndarray):
        array = value
    elif hasattr(value, "__array_interface__") or hasattr(value, "__array__"):
        array = np.asarray(value)
    elif hasattr(value, "__dlpack__"):
        try:
            array = np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError) as error:
            raise InputError("%s: cannot read it through DLPack on the CPU: %s" % (side, error),
                             "move it to host memory first") from None
    elif isinstance(value, (bool, int, float, list, tuple, np.generic)):
        array = np.asarray(value)
    else:
        raise InputError(
            "%s: a %s is not an array; expected a numpy array, a torch tensor, a number, a "
            "dict of those or a dump path" % (side, type(value).__name__),
            "pass arrays or tensors")
    return _from_numpy(array, side, array.dtype.name, False, "cpu")


def _from_numpy(array: np.ndarray, side: str, label: str, is_torch: bool,
                device: str) -> Operand:
    name = array.dtype.name
    if name in _BITS_DTYPES:
        loupe_name, carrier = _BITS_DTYPES[name]
        array = np.ascontiguousarray(array).view(carrier)
        return Operand(array, loupe_name, label, tuple(array.shape), device, is_torch)
    if array.dtype.kind not in "biuf":
        raise InputError(
            "%s: dtype %s is not one loupe compares (booleans, integers, float16/32/64, "
            "bfloat16, fp8)" % (side, label), "convert it to a real floating dtype")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    array = np.ascontiguousarray(array)  # no copy when already C-contiguous
    return Operand(array, None, label, tuple(array.shape), device, is_torch)


def _from_torch(torch: Any, tensor: Any, side: str) -> Operand:
    label = str(tensor.dtype)
    device = str(tensor.device)
    tensor = tensor.detach()
    try:
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()  # loupe compares on the host: one copy
        if tensor.is_sparse:
            tensor = tensor.to_dense()
    except (RuntimeError, NotImplementedError) as error:
        raise InputError("%s: a %s tensor on %s cannot be read on the host: %s" % (
            side, label, device, str(error).splitlines()[0]),
            "pass a tensor that holds data (not on the meta device)") from None
    if getattr(tensor, "is_conj", lambda: False)():
        tensor = tensor.resolve_conj()
    if getattr(tensor, "is_neg", lambda: False)():
        tensor = tensor.resolve_neg()
    tensor = tensor.contiguous()  # no copy when already contiguous
    short = label.replace("torch.", "")
    if short in _BITS_DTYPES:
        loupe_name, carrier = _BITS_DTYPES[short]
        bits = tensor.view(torch.int16 if carrier is np.int16 else torch.uint8).numpy()
        return Operand(bits, loupe_name, label, tuple(tensor.shape), device, True)
    if tensor.is_complex():
        raise InputError("%s: dtype %s is complex; loupe compares real tensors" % (side, label),
                         "compare torch.view_as_real(t) on both sides")
    try:
        array = tensor.numpy()
    except (TypeError, RuntimeError) as error:
        raise InputError("%s: dtype %s cannot be read: %s" % (side, label, error),
                         "convert it to a real floating dtype") from None
    return _from_numpy(array, side, label, True, device)
