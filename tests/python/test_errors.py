"""Bad arguments get an error naming the op, the argument, what was expected and
what was given: never a crash, a wrapped size or the binding's signature."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import lowbit.functional as F

# ------------------------------------------------- shapes too large to count


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.c_void_p),
]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _ClaimedShape:
    """A DLPack producer claiming any shape over a small float32 buffer (as a
    careless or hostile producer may: no real array is that large)."""

    def __init__(self, shape):
        self.buffer = np.zeros(1024, dtype=np.float32)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.managed = _DLManagedTensor()
        t = self.managed.dl_tensor
        t.data = self.buffer.ctypes.data
        t.device = _DLDevice(1, 0)
        t.ndim = len(shape)
        t.dtype = _DLDataType(2, 32, 1)  # kDLFloat, 32 bits
        t.shape = self.shape
        t.strides = None

    def __dlpack__(self, **kwargs):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0)


HUGE = (2**62 + 1, 128)  # 2**69 + 128 elements: 128 once wrapped to 64 bits
HUGE_STR = r"\[4611686018427387905, 128\]"


def test_a_shape_whose_count_wraps_is_refused():
    # Was: the count wrapped to 128, matching the buffers lowbit allocated; "success".
    with pytest.raises(ValueError, match=rf"quantize_4bit: A shape {HUGE_STR} is too large"):
        F.quantize_4bit(_ClaimedShape(HUGE))
    with pytest.raises(ValueError, match=rf"weight_quant: x shape {HUGE_STR} is too large"):
        F.weight_quant(_ClaimedShape(HUGE))
    # Packed codes are read as bytes: their byte count is checked the same way.
    _, state = F.quantize_4bit(np.ones(256, dtype=np.float32))
    with pytest.raises(ValueError, match=rf"dequantize_4bit: A shape {HUGE_STR} is too large"):
        F.dequantize_4bit(_ClaimedShape(HUGE), state)


def test_a_shape_whose_bytes_wrap_is_refused():
    with pytest.raises(ValueError, match=r"int8_vectorwise_quant: A shape \[2305843009213693952, 2\] .*float32"):
        F.int8_vectorwise_quant(_ClaimedShape((2**61, 2)))


# ---------------------------------------------------- the argument at fault


def test_an_out_of_the_wrong_size_is_named():
    packed, state = F.quantize_4bit(np.ones(64, dtype=np.float32))
    # Was: "input must have 50 elements" (sized from out, blaming the codes).
    with pytest.raises(ValueError, match=r"dequantize_4bit: out must have 64 elements.*\[64\] \(got 100, shape \[100\]\)"):
        F.dequantize_4bit(packed, state, out=np.empty(100, dtype=np.float32))
    # Was: "dtype 'float64' is not a lowbit dtype".
    with pytest.raises(TypeError, match=r"dequantize_4bit: out dtype must be one of float32, float16, bfloat16 "
                                        r"\(got float64\)"):
        F.dequantize_4bit(packed, state, out=np.empty(64))
    q, bstate = F.quantize_blockwise(np.ones(64, dtype=np.float32), blocksize=64)
    with pytest.raises(TypeError, match=r"dequantize_blockwise: out dtype .* \(got int32\)"):
        F.dequantize_blockwise(q, bstate, out=np.empty(64, dtype=np.int32))


@pytest.mark.parametrize("shape", [(0,), (0, 128), (4, 0), (2, 0, 128)])
def test_empty_arrays_are_contiguous(shape):
    # NumPy gives empty arrays zero strides: was "must be contiguous (got a strided view ...)".
    x = np.empty(shape, dtype=np.float32)
    packed, state = F.quantize_4bit(x)
    assert packed.size == 0 and state.absmax.size == 0
    q, bstate = F.quantize_blockwise(x)
    assert q.shape == shape
    assert F.dequantize_blockwise(q, bstate).shape == shape
    if shape[-1] == 128:
        y, s = F.act_quant(x)
        assert y.shape == shape and s.shape == shape[:-1] + (1,)
    out = np.empty(shape, dtype=np.float32)
    assert F.dequantize_4bit(packed, state, out=out) is out
