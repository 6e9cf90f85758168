"""Bad arguments get an error naming the op, the argument, what was expected and
what was given: never a crash, a wrapped size or the binding's signature."""

from __future__ import annotations

import ctypes
import re

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


# ---------------------------------------------- no binding signatures shown


def _no_signature(excinfo):
    text = str(excinfo.value)
    assert "incompatible function arguments" not in text and "Invoked with" not in text, text


def test_byte_order_and_dtypes_are_checked_before_the_binding():
    with pytest.raises(TypeError, match=r"quantize_4bit: A must be in the machine's byte order "
                                        r"\(got big-endian float32\)") as e:
        F.quantize_4bit(np.ones(64, dtype=">f4"))
    _no_signature(e)
    with pytest.raises(TypeError, match=r"quantize_4bit: absmax must be in the machine's byte order") as e:
        F.quantize_4bit(np.ones(64, dtype=np.float32), absmax=np.empty(1, dtype=">f4"))
    _no_signature(e)
    for bad in (np.array(["a"] * 64), np.ones(64, dtype=object), np.zeros(64, dtype="datetime64[s]"),
                np.zeros(64, dtype=[("a", "f4")])):
        with pytest.raises(TypeError, match=rf"quantize_blockwise: A dtype must be one of float32, .* "
                                            rf"\(got {re.escape(str(bad.dtype))}\)") as e:
            F.quantize_blockwise(bad)
        _no_signature(e)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: F.quantize_4bit(x, blocksize=2**63), ValueError,
         r"quantize_4bit: blocksize must be a 64-bit integer, from .* \(got 9223372036854775808\)"),
        (lambda x: F.quantize_4bit(x, blocksize="64"), TypeError, r"quantize_4bit: blocksize must be an integer \(got str"),
        (lambda x: F.quantize_4bit(x, blocksize=64.0), TypeError, r"quantize_4bit: blocksize must be an integer"),
        (lambda x: F.quantize_4bit(x, quant_type=None), TypeError, r"quantize_4bit: quant_type must be a string"),
        (lambda x: F.quantize_4bit(x, compress_statistics="yes"), TypeError,
         r"quantize_4bit: compress_statistics must be True or False \(got str"),
        (lambda x: F.quantize_blockwise(x, blocksize=-2**64), ValueError, r"quantize_blockwise: blocksize must be a 64-bit"),
        (lambda x: F.estimate_quantiles(x, num_quantiles=2**40), ValueError,
         r"estimate_quantiles: num_quantiles must be a 32-bit integer"),
        (lambda x: F.estimate_quantiles(x, offset="a"), TypeError, r"estimate_quantiles: offset must be a real number"),
        (lambda x: F.int8_vectorwise_quant(x.reshape(4, 64), threshold="x"), TypeError,
         r"int8_vectorwise_quant: threshold must be a real number \(got str 'x'\)"),
        (lambda x: F.act_quant(x, block_size=2**64), ValueError, r"act_quant: block_size must be a 64-bit integer"),
        (lambda x: F.weight_quant(x.reshape(2, 128), block_size=[128]), TypeError,
         r"weight_quant: block_size must be an integer \(got list"),
        (lambda x: F.create_quantile_map(x, total_bits=2**31), ValueError, r"create_quantile_map: total_bits must be a 32-bit"),
        (lambda x: F.get_4bit_type(4), TypeError, r"get_4bit_type: typename must be a string \(got int 4\)"),
        (lambda x: F.create_dynamic_map(total_bits=2**70), ValueError, r"create_dynamic_map: total_bits must be a 32-bit"),
        (lambda x: F.quantize_4bit(x, stream=-1), ValueError, r"stream must be a cudaStream_t handle.*\(got -1\)"),
        (lambda x: F.quantize_4bit(x, stream=2**64), ValueError, r"stream must be a cudaStream_t handle"),
    ],
)
def test_scalars_are_checked_before_the_binding(call, error, message):
    x = np.ones(256, dtype=np.float32)
    with pytest.raises(error, match=message) as e:
        call(x)
    _no_signature(e)


def test_state_fields_are_checked_before_the_binding():
    packed, state = F.quantize_4bit(np.ones(64, dtype=np.float32))
    state.blocksize = 2**63
    with pytest.raises(ValueError, match=r"dequantize_4bit: quant_state.blocksize must be a 64-bit integer") as e:
        F.dequantize_4bit(packed, state)
    _no_signature(e)
    state.blocksize = 64
    state.shape = (8, "8")
    with pytest.raises(TypeError, match=r"dequantize_4bit: quant_state.shape\[1\] must be an integer \(got str") as e:
        F.dequantize_4bit(packed, state)
    _no_signature(e)
    state.shape = (8, 8)
    with pytest.raises(TypeError, match=r"matmul_4bit: quant_state.blocksize must be an integer") as e:
        state.blocksize = "64"
        F.matmul_4bit(np.ones((1, 8), dtype=np.float32), packed, state)
    _no_signature(e)


def test_python_numbers_of_other_types_still_work():
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    packed, state = F.quantize_4bit(x, blocksize=np.int64(64), compress_statistics=np.bool_(True))
    np.testing.assert_allclose(F.dequantize_4bit(packed, state), x, atol=0.2)
    q, _, _ = F.int8_vectorwise_quant(x.reshape(4, 64), threshold=np.float32(0.0))
    assert q.shape == (4, 64)
    assert F.estimate_quantiles(x, num_quantiles=np.int32(256)).shape == (256,)


def test_the_argument_the_caller_gave_is_named():
    # Without a quant state, blocksize is the caller's argument, not a state field.
    with pytest.raises(ValueError, match=r"dequantize_blockwise: blocksize must be a 64-bit integer") as e:
        F.dequantize_blockwise(np.zeros(8, dtype=np.uint8), absmax=np.ones(1, dtype=np.float32), blocksize=2**63)
    _no_signature(e)
    with pytest.raises(TypeError, match=r"dequantize_4bit: blocksize must be an integer \(got str") as e:
        F.dequantize_4bit(np.zeros(4, dtype=np.uint8), absmax=np.ones(1, dtype=np.float32),
                          out=np.empty(8, dtype=np.float32), blocksize="64")
    _no_signature(e)
    _, state = F.quantize_4bit(np.ones(64, dtype=np.float32), compress_statistics=True)
    with pytest.raises(TypeError, match=r"QuantState.as_dict: packed must be True or False \(got str") as e:
        state.as_dict(packed="x")
    _no_signature(e)
    state.state2.blocksize = 2**64
    with pytest.raises(ValueError, match=r"QuantState.as_dict: state2.blocksize must be a 64-bit integer") as e:
        state.as_dict()
    _no_signature(e)


def test_matmul_config_fields_are_checked_by_name():
    import lowbit

    for kwargs, message in [
        ({"with_bias": "yes"}, r"MatmulConfig: with_bias must be True or False \(got str 'yes'\)"),
        ({"with_zeros": None}, r"MatmulConfig: with_zeros must be True or False \(got NoneType"),
        ({"group_size": 2**63}, r"MatmulConfig: group_size must be a 64-bit integer \(got 9223372036854775808\)"),
        ({"N": 2**64}, r"MatmulConfig: N must be a 64-bit integer"),
        ({"layout": 1}, r"MatmulConfig: layout must be a str \(got int\)"),
        ({"zeros_mode": None}, r"MatmulConfig: zeros_mode must be a str \(got NoneType\)"),
    ]:
        args = {"M": 1, "N": 16, "K": 64, **kwargs}
        with pytest.raises(ValueError, match=message) as e:
            lowbit.MatmulConfig(**args)
        _no_signature(e)
    c = lowbit.MatmulConfig(1, 16, 64, with_bias=np.bool_(True), group_size=np.int64(32), with_scaling=1)
    assert (c.with_bias, c.group_size, c.with_scaling) == (True, 32, True)
    with pytest.raises(ValueError, match=r"MatmulConfig: group_size must be a 64-bit integer") as e:
        c.group_size = 2**64
    _no_signature(e)
    with pytest.raises(ValueError, match=r"MatmulConfig: with_zeros must be True or False") as e:
        c.with_zeros = "no"
    _no_signature(e)


def test_matmul_scalars_are_checked_by_name():
    import lowbit

    mm = lowbit.Matmul(lowbit.MatmulConfig(1, 16, 64))
    with pytest.raises(ValueError, match=r"Matmul.prepared_m: m must be a 64-bit integer") as e:
        mm.prepared_m(2**64)
    _no_signature(e)
    with pytest.raises(TypeError, match=r"Matmul.prepared_m: m must be an integer \(got str") as e:
        mm.prepared_m("4")
    _no_signature(e)
    w = lowbit.import_awq(np.zeros((64, 2), dtype=np.int32), np.zeros((1, 2), dtype=np.int32),
                          np.ones((1, 16), dtype=np.float16), group_size=64)
    with pytest.raises(TypeError, match=r"QuantizedWeight: config must be a lowbit.MatmulConfig \(got dict\)") as e:
        w.config = {"N": 16}
    _no_signature(e)


def test_a_state_shape_whose_count_wraps_is_refused():
    # 128 values quantized, then a state shape claiming 2**69 + 128 (128 once wrapped).
    packed, state = F.quantize_4bit(np.ones(128, dtype=np.float32))
    state.shape = HUGE
    for call, op in [
        (lambda: F.dequantize_4bit(packed, state), "dequantize_4bit"),
        (lambda: F.matmul_4bit(np.ones((1, 128), dtype=np.float32), packed, state), "matmul_4bit"),
    ]:
        with pytest.raises(ValueError, match=rf"{op}: quant_state shape {HUGE_STR} is too large"):
            call()
    import lowbit

    with pytest.raises(ValueError, match=rf"import_bnb_4bit: quant state shape {HUGE_STR} is too large"):
        lowbit.import_bnb_4bit(packed, state)
