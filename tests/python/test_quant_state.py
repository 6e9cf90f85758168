"""QuantState: bitsandbytes' dict (packed and unpacked), round trips, moves, errors."""

import json

import numpy as np
import pytest

import lowbit
import lowbit.functional as F
import reference as ref


def _weights(rng, shape=(64, 96)):
    return ref.to_dtype((rng.standard_normal(shape) * 0.02).astype(np.float32), "float32")


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_packed_dict_is_bitsandbytes_layout(backend, rng, nested, quant_type):
    w = _weights(rng)
    packed, state = F.quantize_4bit(backend.array(w), quant_type=quant_type, compress_statistics=nested)
    d = state.as_dict(packed=True)
    key = f"quant_state.bitsandbytes__{quant_type}"
    want_keys = {"absmax", "quant_map", key} | ({"nested_absmax", "nested_quant_map"} if nested else set())
    assert set(d) == want_keys
    assert all(backend.is_native(v) for v in d.values())
    blob = backend.numpy(d[key])
    assert blob.dtype == np.uint8
    meta = json.loads(bytes(blob.tolist()).decode("utf-8"))
    assert list(meta)[:4] == ["quant_type", "blocksize", "dtype", "shape"]
    assert meta["quant_type"] == quant_type and meta["blocksize"] == 64
    assert meta["dtype"] == "float32" and meta["shape"] == [64, 96]
    if nested:
        assert meta["nested_blocksize"] == 256 and meta["nested_dtype"] == "float32"
        assert meta["nested_offset"] == pytest.approx(float(backend.numpy(state.offset)), rel=1e-7)
        # json.dumps formatting, as bitsandbytes writes it
        assert bytes(blob.tolist()).decode() == json.dumps(meta)
    np.testing.assert_array_equal(backend.numpy(d["absmax"]), backend.numpy(state.absmax))

    back = lowbit.QuantState.from_dict(d, device=backend.array(np.zeros(1, np.float32)))
    assert back == state
    assert backend.is_native(back.absmax)
    np.testing.assert_array_equal(backend.numpy(F.dequantize_4bit(packed, back)),
                                  backend.numpy(F.dequantize_4bit(packed, state)))


@pytest.mark.parametrize("nested", [False, True])
def test_unpacked_dict_round_trip(rng, nested):
    w = _weights(rng, (10, 70))
    packed, state = F.quantize_nf4(w, compress_statistics=nested)
    d = state.as_dict()
    assert d["quant_type"] == "nf4" and d["blocksize"] == 64 and d["dtype"] == "float32"
    assert d["shape"] == (10, 70)
    if nested:
        assert isinstance(d["nested_offset"], float) and d["nested_blocksize"] == 256
        assert d["nested_dtype"] == "float32"
    back = F.QuantState.from_dict(d, device="cpu")
    assert back == state and back.nested == nested
    np.testing.assert_array_equal(F.dequantize_4bit(packed, back), F.dequantize_4bit(packed, state))


def test_from_dict_with_weight_prefix_and_checkpoint_values(rng):
    """A checkpoint's entries: '<weight>.'-prefixed keys, the codes alongside, numpy scalars."""
    w = _weights(rng)
    packed, state = F.quantize_nf4(w, compress_statistics=True)
    d = {f"model.layers.0.q_proj.weight.{k}": v for k, v in state.as_dict(packed=True).items()}
    d["model.layers.0.q_proj.weight"] = packed
    back = F.QuantState.from_dict(d, device="cpu")
    assert back == state
    unpacked = {k: (np.int64(v) if isinstance(v, int) else v) for k, v in state.as_dict().items()}
    unpacked["shape"] = list(unpacked["shape"])
    assert F.QuantState.from_dict(unpacked, "cpu") == state


def test_bfloat16_state(rng):
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    w = _weights(rng).astype(ml_dtypes.bfloat16)
    packed, state = F.quantize_nf4(w)
    d = state.as_dict(packed=True)
    assert json.loads(bytes(d["quant_state.bitsandbytes__nf4"]))["dtype"] == "bfloat16"
    back = F.QuantState.from_dict(d, "cpu")
    assert back.dtype == np.dtype(ml_dtypes.bfloat16)
    assert F.dequantize_4bit(packed, back).dtype == np.dtype(ml_dtypes.bfloat16)


def test_bfloat16_state_without_ml_dtypes(rng, no_ml_dtypes):
    w = ref.bf16_bits(_weights(rng))  # what a NumPy user without ml_dtypes can hold
    state = F.QuantState(absmax=np.ones(96, np.float32), shape=(64, 96), code=ref.NF4, blocksize=64,
                         quant_type="nf4", dtype="bfloat16")
    packed = np.zeros((3072, 1), np.uint8)
    d = state.as_dict(packed=True)
    back = F.QuantState.from_dict(d, "cpu")
    assert back.dtype == "bfloat16"
    y = F.dequantize_4bit(packed, back)
    assert y.dtype == np.uint16 and y.shape == (64, 96) and w.shape == y.shape  # bf16 bits


def test_state_fields_and_getitem(rng):
    w = _weights(rng)
    packed, state = F.quantize_4bit(w, compress_statistics=True)
    assert state[0] is state.absmax and state[1] == (64, 96) and state[3] == 64 and state[5] == "fp4"
    assert state[4][0] is state.offset and state[4][1] is state.state2
    assert "fp4" in repr(state)
    assert F.QuantState.valid_quant_types == ("fp4", "nf4")


def test_to_moves_arrays(backend, rng):
    w = _weights(rng)
    packed, state = F.quantize_nf4(w, compress_statistics=True)
    target = backend.array(np.zeros(1, np.float32))
    state.to(target)
    assert backend.is_native(state.absmax) and backend.is_native(state.state2.code)
    assert backend.is_native(state.offset)


def test_errors(rng):
    w = _weights(rng)
    _, state8 = F.quantize_blockwise(w)
    d8 = state8.as_dict()  # 8-bit states serialize as bitsandbytes' unpacked dict (bnb.md)
    assert d8["quant_type"] is None
    with pytest.raises(ValueError, match="an 8-bit state dict needs 'quant_map'"):
        F.QuantState.from_dict({k: v for k, v in d8.items() if k != "quant_map"}, "cpu")
    with pytest.raises(ValueError, match="unknown key 'bogus' in an 8-bit state dict"):
        F.QuantState.from_dict({**d8, "bogus": 1}, "cpu")
    _, state = F.quantize_nf4(w, compress_statistics=True)
    d = state.as_dict(packed=True)
    missing = dict(d)
    del missing["quant_map"]
    with pytest.raises(ValueError, match="missing key 'quant_map'"):
        F.QuantState.from_dict(missing, "cpu")
    bad = dict(d)
    bad["quant_state.bitsandbytes__nf4"] = np.frombuffer(b"{not json", np.uint8)
    with pytest.raises(ValueError, match="is not valid JSON"):
        F.QuantState.from_dict(bad, "cpu")
    wrong = state.as_dict()
    wrong["blocksize"] = 48
    with pytest.raises(ValueError, match="'blocksize' must be a power of two"):
        F.QuantState.from_dict(wrong, "cpu")
    wrong = state.as_dict()
    wrong["shape"] = ["a", 2]
    with pytest.raises(ValueError, match="'shape' must be a list of integers"):
        F.QuantState.from_dict(wrong, "cpu")
    with pytest.raises(TypeError, match=r"^QuantState.from_dict: qs_dict must be a dict .*\(got list\)$"):
        F.QuantState.from_dict(list(d.items()), "cpu")
    with pytest.raises(ValueError, match="device"):
        F.QuantState.from_dict(d, "gpu")
