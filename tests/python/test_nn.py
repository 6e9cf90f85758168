"""lowbit.nn's modules: forward against float64 references through the dequantized weight and against
torch.nn.Linear within the format's error, state-dict round trips, moves between devices, bad arguments."""

import copy
import io
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import backends  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402
from nn_reference import (  # noqa: E402
    UNIT,
    assert_rounding,
    assert_within,
    fp4bit_error,
    fp8_error,
    fp8_tile_scale,
    linear64,
    magnitude,
)

CUDA_REASON = backends.torch_cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON)))]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["fp32", "bf16", "fp16"]


def _linear(K, N, bias, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Linear(K, N, bias=bias).to(dtype)


def _input(shape, dtype, device, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(device)


def _roundtrip(sd):
    """The state dict through torch.save / torch.load, as a checkpoint file would carry it."""
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_import_lowbit_does_not_import_torch():
    import subprocess

    code = "import sys, lowbit; assert 'torch' not in sys.modules, 'lowbit imported torch'"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# ---------------------------------------------------------------- Linear4bit


def _make4(lin, device, quant_type="nf4", nested=True, blocksize=64, **kw):
    m = lnn.Linear4bit(lin.in_features, lin.out_features, lin.bias is not None, quant_type=quant_type,
                       compress_statistics=nested, blocksize=blocksize, **kw)
    m.load_state_dict(lin.state_dict())
    return m.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [False, True], ids=["plain", "double"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("K,N,batch", [(70, 37, (5,)), (256, 64, (2, 3)), (33, 3, (1,))])
def test_linear4bit_forward(device, dtype, quant_type, nested, bias, K, N, batch):
    lin = _linear(K, N, bias, seed=K + N)
    m = _make4(lin, device, quant_type, nested)
    assert m.weight.bnb_quantized and m.weight.dtype == torch.uint8 and m.weight.shape == ((N * K + 1) // 2, 1)
    x = _input((*batch, K), dtype, device, seed=N)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == dtype and y.shape == (*batch, N) and y.device.type == device
    y, x = y.cpu(), x.cpu()
    w = F.dequantize_4bit(m.weight, m.weight.quant_state).cpu()
    b = None if lin.bias is None else lin.bias.detach()
    assert_rounding(y, linear64(x, w, b), magnitude(x, w, b), K, dtype)
    # against the float layer: each weight within half a table gap of its block's absmax
    E = fp4bit_error(lin.weight, quant_type, 64, nested)
    assert ((w.double() - lin.weight.detach().double()).abs() <= E).all()
    ref = linear64(x, lin.weight.detach(), b)
    bound = x.double().abs() @ E.T + 2 * UNIT[dtype] * ref.abs() + 2 * UNIT[dtype] * magnitude(x, w, b)
    assert_within(y, ref, bound, "Linear4bit vs torch.nn.Linear")


@pytest.mark.parametrize("blocksize", [32, 128, 4096])
def test_linear4bit_blocksize(blocksize):
    lin = _linear(96, 40, True, seed=3)
    m = _make4(lin, "cpu", "fp4", True, blocksize=blocksize)
    assert m.weight.quant_state.blocksize == blocksize and m.weight.blocksize == blocksize
    x = _input((4, 96), torch.float32, "cpu", seed=4)
    with torch.no_grad():
        y = m(x)
    w = F.dequantize_4bit(m.weight, m.weight.quant_state)
    assert_rounding(y, linear64(x, w, lin.bias.detach()), magnitude(x, w, lin.bias.detach()), 96, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_linear4bit_compute_dtype(device):
    lin = _linear(128, 48, True, seed=5)
    follows = _make4(lin, device)
    fixed = _make4(lin, device, compute_dtype=torch.bfloat16)
    x = _input((3, 128), torch.float32, device, seed=6)
    with torch.no_grad():
        y = fixed(x)
        assert y.dtype == torch.float32
        assert torch.equal(y, follows(x.to(torch.bfloat16)).float())  # computed in bf16, returned as fp32
        assert follows(x).dtype == torch.float32 and not torch.equal(follows(x), y)


@pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON))
def test_linear4bit_float32_on_cuda_warns_once():
    from lowbit.nn import _4bit

    _4bit._slow_warned.clear()
    m = _make4(_linear(64, 32, False, seed=7), "cuda", compute_dtype=torch.float32)
    x = _input((2, 64), torch.bfloat16, "cuda", seed=8)
    with torch.no_grad(), pytest.warns(UserWarning, match="float32 on CUDA"):
        m(x)
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)  # once
        _make4(_linear(64, 32, False, seed=7), "cuda")(x)  # bf16 compute: the fused kernel, no warning


def test_linear4bit_no_warning_on_cpu():
    import warnings

    m = _make4(_linear(64, 32, False, seed=9), "cpu", compute_dtype=torch.float32)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        m(_input((2, 64), torch.bfloat16, "cpu", seed=10))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nested", [False, True], ids=["plain", "double"])
@pytest.mark.parametrize("quant_storage", [torch.uint8, torch.bfloat16, torch.float32], ids=["u8", "bf16", "f32"])
def test_linear4bit_state_dict_roundtrip(device, nested, quant_storage):
    lin = _linear(96, 40, True, seed=11)
    m = _make4(lin, device, "nf4", nested, quant_storage=quant_storage)
    assert m.weight.dtype == quant_storage
    sd = m.state_dict()
    keys = {"weight", "bias", "weight.absmax", "weight.quant_map", "weight.quant_state.bitsandbytes__nf4"}
    if nested:
        keys |= {"weight.nested_absmax", "weight.nested_quant_map"}
    assert set(sd) == keys
    blob = json.loads(bytes(sd["weight.quant_state.bitsandbytes__nf4"].cpu().tolist()).decode())
    assert blob["quant_type"] == "nf4" and blob["blocksize"] == 64 and blob["shape"] == [40, 96]
    assert blob["dtype"] == "float32" and ("nested_offset" in blob) == nested
    fresh = lnn.Linear4bit(96, 40, quant_type="fp4", compress_statistics=not nested, device=device)
    fresh.load_state_dict(_roundtrip(sd))
    assert fresh.weight.quant_type == "nf4" and fresh.weight.compress_statistics == nested
    assert fresh.weight.dtype == quant_storage and fresh.quant_state is fresh.weight.quant_state
    x = _input((2, 3, 96), torch.bfloat16, device, seed=12)
    with torch.no_grad():
        assert torch.equal(fresh(x), m(x))
    assert fresh.weight.quant_state == m.weight.quant_state


@pytest.mark.parametrize("assign", [False, True])
def test_state_dicts_load_with_assign(assign):
    """transformers builds models on the meta device and loads with assign=True (the tensors themselves become the
    parameters): every module keeps its weight's class and state either way."""
    lin = _linear(64, 32, True, seed=23)
    x = _input((3, 64), torch.float32, "cpu", seed=24)
    made = (_make4(lin, "cpu"), _make8(lin, "cpu", threshold=2.0), lnn.LinearFP8.from_linear(lin))
    where = "meta" if assign else "cpu"
    fresh = (lnn.Linear4bit(64, 32, device=where), lnn.Linear8bitLt(64, 32, threshold=2.0, device=where),
             lnn.LinearFP8(64, 32, bias=True, device=where))
    for m, f in zip(made, fresh):
        f.load_state_dict(m.state_dict(), assign=assign)
        assert f.weight.device.type == "cpu" and isinstance(f.weight, type(m.weight)), type(m).__name__
        with torch.no_grad():
            assert torch.equal(f(x), m(x)), type(m).__name__


def test_whole_models_pickle():
    """torch.save(model): the parameters keep their class and state (torch.nn.Parameter's pickling would not)."""
    torch.manual_seed(25)
    x = _input((3, 64), torch.float32, "cpu", seed=26)
    for kind, cls in (("nf4", lnn.Params4bit), ("int8", lnn.Int8Params), ("fp8", torch.nn.Parameter)):
        q = lnn.replace_linear(torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 32)), kind, skip=())
        buf = io.BytesIO()
        torch.save(q, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False)
        assert type(back[0].weight) is cls and not back[0].weight.requires_grad, kind
        if kind == "nf4":
            assert back[0].weight.module is back[0] and back[0].weight.quant_state is back[0].quant_state
        with torch.no_grad():
            assert torch.equal(back(x), q(x)), kind


def test_linear4bit_storage_survives_casts():
    lin = _linear(64, 48, False, seed=13)  # no bias: .half() rounds a bias, as it should
    m = _make4(lin, "cpu", quant_storage=torch.bfloat16)
    bits = m.weight.detach().view(torch.uint8).clone()
    x = _input((3, 64), torch.float32, "cpu", seed=14)
    with torch.no_grad():
        y = m(x)
        for cast in (lambda mod: mod.half(), lambda mod: mod.to(torch.float16), lambda mod: mod.float()):
            cast(m)
            assert m.weight.dtype == torch.bfloat16 and torch.equal(m.weight.detach().view(torch.uint8), bits)
        assert torch.equal(m(x), y)


def test_linear4bit_quantizes_on_to_device_only():
    lin = _linear(64, 32, False, seed=15)
    m = lnn.Linear4bit(64, 32, bias=False)
    m.load_state_dict(lin.state_dict())
    m.to(torch.bfloat16)  # a dtype alone does not quantize
    assert not m.weight.bnb_quantized and m.weight.dtype == torch.bfloat16 and m.weight.shape == (32, 64)
    with pytest.raises(RuntimeError, match="not quantized yet"):
        m(_input((1, 64), torch.bfloat16, "cpu", seed=16))
    m.cpu()
    assert m.weight.bnb_quantized and m.quant_state is m.weight.quant_state
    assert m.weight.quant_state.dtype == torch.bfloat16  # the weight's dtype when quantized
    p = lnn.Params4bit(lin.weight.detach().clone(), quant_type="nf4")
    q = p.to("cpu")
    assert q is p and p.bnb_quantized


def test_linear4bit_nf4_fp4_classes_and_deepcopy():
    lin = _linear(64, 32, True, seed=17)
    for cls, qt in ((lnn.LinearNF4, "nf4"), (lnn.LinearFP4, "fp4")):
        m = cls(64, 32)
        m.load_state_dict(lin.state_dict())
        m = m.to("cpu")
        assert m.weight.quant_type == qt and m.weight.quant_state.quant_type == qt
        c = copy.deepcopy(m)
        assert c.weight.module is c and c.weight.quant_state is not m.weight.quant_state
        x = _input((2, 64), torch.float32, "cpu", seed=18)
        with torch.no_grad():
            assert torch.equal(c(x), m(x))


def test_linear4bit_state_recovered_after_a_wrapper_drops_it():
    """FSDP's flat parameters lose the Params4bit class: the module keeps the state and restores it."""
    m = _make4(_linear(64, 32, True, seed=19), "cpu")
    x = _input((2, 64), torch.float32, "cpu", seed=20)
    with torch.no_grad():
        y = m(x)
        plain = torch.nn.Parameter(m.weight.data.clone(), requires_grad=False)
        m.weight = plain
        assert torch.equal(m(x), y)
    assert m.weight is plain  # the forward reads the module's state, it does not replace the parameter


def test_params4bit_state_properties():
    m = _make4(_linear(64, 32, False, seed=21), "cpu", nested=True)
    w, qs = m.weight, m.weight.quant_state
    assert w.absmax is qs.absmax and w.quant_map is qs.code and w.nested_absmax is qs.state2.absmax
    assert w.nested_blocksize == 256 and w.offset is qs.offset
    with pytest.raises(AttributeError, match="absmax"):
        lnn.Params4bit(torch.zeros(2, 2)).absmax


# ---------------------------------------------------------------- Linear8bitLt


def _make8(lin, device, threshold=0.0):
    m = lnn.Linear8bitLt(lin.in_features, lin.out_features, lin.bias is not None, has_fp16_weights=False,
                         threshold=threshold)
    m.load_state_dict(lin.state_dict())
    return m.to(device)


def _int8_reference(x, CB, SCB, bias, threshold):
    """LLM.int8 in float64: the int8 product of x's row codes and CB, scaled; outlier columns in float."""
    x2 = x.reshape(-1, x.shape[-1])
    CA, SA, cols = F.int8_vectorwise_quant(x2, threshold)
    w = CB.double() * SCB.double()[:, None] / 127
    xq = CA.double() * SA.double()[:, None] / 127  # what the int8 part multiplies by
    if cols is not None and cols.numel():
        xq[:, cols] = x2[:, cols].double()
    y = xq @ w.T
    y = y if bias is None else y + bias.double()
    return y, xq, w, SA


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("threshold", [0.0, 2.5])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("K,N,batch", [(70, 37, (5,)), (256, 64, (2, 3)), (33, 3, (1,))])
def test_linear8bitlt_forward(device, dtype, threshold, bias, K, N, batch):
    lin = _linear(K, N, bias, seed=K * N)
    m = _make8(lin, device, threshold)
    assert m.weight.dtype == torch.int8 and m.weight.CB is not None and m.weight.SCB.shape == (N,)
    x = _input((*batch, K), dtype, device, seed=K)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == dtype and y.shape == (*batch, N)
    y, x = y.cpu().reshape(-1, N), x.cpu()
    CB, SCB = m.weight.data.cpu(), m.weight.SCB.cpu()
    w16 = lin.weight.detach().half().double()
    assert torch.equal(SCB.double(), w16.abs().amax(1))  # bitsandbytes' SCB: the fp16 weight's row absmax
    b = None if lin.bias is None else lin.bias.detach()
    ref, xq, w, SA = _int8_reference(x, CB, SCB, b, threshold)
    # with outliers the int8 part is rounded to the output's dtype before the float columns are added: one more
    # rounding of a partial sum (≤ S)
    assert_rounding(y, ref, magnitude(xq, w, b), K, dtype if threshold else torch.float32)
    # against the float layer: weight and activation codes each within half a step
    ew = SCB.double()[:, None] / 254 + 2.0**-11 * lin.weight.detach().double().abs()
    x2 = x.reshape(-1, K).double()
    ex = (xq - x2).abs()
    assert (ex <= SA.double()[:, None] / 254 * 1.0001).all()
    flin = linear64(x2, lin.weight.detach(), b)
    bound = ex @ lin.weight.detach().double().abs().T + x2.abs() @ ew.T + ex @ ew.T
    bound += 2 * UNIT[dtype] * flin.abs() + 3 * UNIT[dtype] * magnitude(xq, w, b)
    assert_within(y, flin, bound, "Linear8bitLt vs torch.nn.Linear")


def test_linear8bitlt_outliers_change_the_result():
    """A threshold puts the large columns in float: the result differs from (and is closer than) pure int8."""
    lin = _linear(64, 16, False, seed=31)
    x = _input((4, 64), torch.float32, "cpu", seed=32)
    x[:, 5] *= 40
    with torch.no_grad():
        plain, mixed, exact = _make8(lin, "cpu", 0.0)(x), _make8(lin, "cpu", 6.0)(x), lin(x)
    assert (mixed - exact).abs().max() < (plain - exact).abs().max()


@pytest.mark.parametrize("device", DEVICES)
def test_linear8bitlt_state_dict_roundtrip(device):
    lin = _linear(96, 40, True, seed=33)
    m = _make8(lin, device, threshold=3.0)
    sd = m.state_dict()
    assert set(sd) == {"weight", "bias", "SCB", "weight_format"}
    assert sd["weight"].dtype == torch.int8 and sd["SCB"].dtype == torch.float32
    assert sd["weight_format"].dtype == torch.uint8 and sd["weight_format"].shape == () and int(sd["weight_format"]) == 0
    fresh = lnn.Linear8bitLt(96, 40, threshold=3.0, device=device)  # has_fp16_weights=True by default
    fresh.load_state_dict(_roundtrip(sd))
    assert not fresh.has_fp16_weights and fresh.weight.dtype == torch.int8 and not fresh.weight.requires_grad
    x = _input((2, 3, 96), torch.float16, device, seed=34)
    with torch.no_grad():
        assert torch.equal(fresh(x), m(x))
    assert torch.equal(fresh.state.SCB, m.weight.SCB)


def test_linear8bitlt_fp16_weights():
    lin = _linear(64, 24, True, seed=35)
    m = lnn.Linear8bitLt(64, 24, has_fp16_weights=True)
    m.load_state_dict(lin.state_dict())
    m = m.to("cpu")
    assert m.weight.dtype == torch.float32 and m.weight.requires_grad
    x = _input((3, 64), torch.bfloat16, "cpu", seed=36)
    with pytest.raises(NotImplementedError, match="has_fp16_weights"):
        m(x)
    with torch.no_grad():
        assert torch.equal(m(x), _make8(lin, "cpu")(x))  # quantized at each forward, the same codes
    assert set(m.state_dict()) == {"weight", "bias"}


def test_linear8bitlt_deepcopy_and_moves():
    m = _make8(_linear(64, 24, False, seed=37), "cpu")
    c = copy.deepcopy(m)
    assert c.weight.SCB is not m.weight.SCB and torch.equal(c.weight.SCB, m.weight.SCB)
    assert c.SCB is c.weight.SCB  # the copy's buffer is its weight's SCB, as the original's is
    m.to(torch.float16)  # int8 codes are not converted, nor is SCB
    assert m.weight.dtype == torch.int8 and m.weight.SCB.dtype == torch.float32
    x = _input((2, 64), torch.float16, "cpu", seed=38)
    with torch.no_grad():
        assert torch.equal(c(x), m(x))


def test_linear8bitlt_scb_buffer_follows_the_weight():
    """The module's non-persistent buffer SCB is the weight's SCB after quantization, moves, .half(), loading an
    int8 state dict, assigning a weight and replacing weight.SCB; the state dict still holds SCB once."""
    lin = _linear(64, 24, True, seed=39)
    m = lnn.Linear8bitLt(64, 24, has_fp16_weights=False)
    assert m.SCB is None and list(dict(m.named_buffers())) == []
    m.load_state_dict(lin.state_dict())
    m = m.to("cpu")
    assert m.SCB is m.weight.SCB and m.SCB.shape == (24,) and list(dict(m.named_buffers())) == ["SCB"]
    m.half()  # the buffer's float16 copy gives way to the weight's float32 SCB
    assert m.SCB is m.weight.SCB and m.SCB.dtype == torch.float32
    sd = m.state_dict()
    assert list(sd) == ["weight", "bias", "SCB", "weight_format"] and torch.equal(sd["SCB"], m.weight.SCB)
    fresh = lnn.Linear8bitLt(64, 24)
    fresh.load_state_dict(sd)
    assert fresh.SCB is fresh.weight.SCB and torch.equal(fresh.SCB, m.SCB)
    other = lnn.Int8Params(lin.weight.detach() * 2, requires_grad=False).cpu()
    fresh.weight = other
    assert fresh.SCB is other.SCB
    other.SCB = other.SCB * 1  # replaced in place on the parameter: the next eager forward catches up
    with torch.no_grad():
        fresh(_input((2, 64), torch.float32, "cpu", seed=40))
    assert fresh.SCB is other.SCB


@pytest.mark.parametrize("threshold", [0.0, 2.5])
def test_linear8bitlt_exports(threshold):
    """torch.export of an int8 Linear8bitLt (has_fp16_weights=False): one lowbit::int8_linear of the weight, the
    bias and the SCB buffer (the fake weight export traces with carries no SCB), no data-dependent size (the op's
    outputs have fixed shapes; outlier columns are found inside it); the exported program gives the module's
    bits, at another batch size too, and so does one of a module loaded from an int8 state dict."""
    lin = _linear(96, 40, True, seed=41)
    m = _make8(lin, "cpu", threshold)
    x = _input((6, 96), torch.float32, "cpu", seed=42, scale=2.0)
    x2 = _input((9, 96), torch.float32, "cpu", seed=43, scale=2.0)
    assert threshold == 0 or bool((x.abs() >= threshold).any())  # outlier columns present
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(m, (x,), dynamic_shapes=({0: batch},))
    assert [str(n.target) for n in ep.graph.nodes if n.op == "call_function"] == ["lowbit.int8_linear.default"]
    assert [(spec.kind.name, spec.target) for spec in ep.graph_signature.input_specs] == [
        ("PARAMETER", "weight"), ("PARAMETER", "bias"), ("BUFFER", "SCB"), ("USER_INPUT", None)]
    assert all(not str(sym).startswith("u") for sym in ep.range_constraints)  # no unbacked (data-dependent) size
    with torch.no_grad():
        for xi in (x, x2):
            assert torch.equal(ep.module()(xi), m(xi))
    loaded = lnn.Linear8bitLt(96, 40, threshold=threshold)
    loaded.load_state_dict(_roundtrip(m.state_dict()))
    with torch.no_grad():
        assert torch.equal(torch.export.export(loaded, (x,)).module()(x2[:6]), m(x2[:6]))


def test_linear8bitlt_fp16_weights_exports():
    """With has_fp16_weights (a frozen float weight) the forward quantizes the weight through the op: it exports
    too, and gives the int8 module's bits."""
    lin = _linear(64, 24, True, seed=44)
    m = lnn.Linear8bitLt(64, 24, has_fp16_weights=True)
    m.load_state_dict(lin.state_dict())
    m.weight.requires_grad_(False)
    x = _input((3, 64), torch.float32, "cpu", seed=45)
    ep = torch.export.export(m, (x,))
    assert "lowbit.int8_vectorwise_quant.default" in {str(n.target) for n in ep.graph.nodes}
    with torch.no_grad():
        assert torch.equal(ep.module()(x), _make8(lin, "cpu")(x))


# ---------------------------------------------------------------- LinearFP8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("K,N,batch", [(256, 200, (5,)), (80, 37, (2, 3)), (144, 3, (1,))])
def test_linearfp8_forward(device, dtype, bias, K, N, batch):
    lin = _linear(K, N, bias, seed=K + 2 * N)
    m = lnn.LinearFP8.from_linear(lin).to(device)
    assert m.weight.dtype == torch.float8_e4m3fn and m.weight.shape == (N, K)
    assert m.weight_scale_inv.shape == (-(-N // 128), -(-K // 128)) and not m.weight.requires_grad
    x = _input((*batch, K), dtype, device, seed=N)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == dtype and y.shape == (*batch, N)
    y, x = y.cpu().reshape(-1, N), x.cpu().reshape(-1, K)
    pad = -K % 128
    a, a_s = F.act_quant(torch.nn.functional.pad(x, (0, pad)))
    xq = (a.double() * a_s.double().repeat_interleave(128, -1))[:, :K]
    w = m.weight.cpu().double() * m.weight_scale_inv.cpu().double().repeat_interleave(128, 0)[:N].repeat_interleave(
        128, 1)[:, :K]
    assert torch.equal(w.float(), m.dequantize().cpu())
    b = None if lin.bias is None else lin.bias.detach()
    ref, S = linear64(xq, w, b), magnitude(xq, w, b)
    if device == "cpu":
        assert_rounding(y, ref, S, K, torch.float32)
    else:  # the FP8 tensor cores' accumulation: 1/512 of the terms' magnitudes (docs/fp8_gemm.md)
        assert_within(y, ref, 2 * UNIT[dtype] * ref.abs() + S / 512, "LinearFP8 on CUDA")
    # against the float layer: e4m3 codes of x (1x128 blocks) and w (128x128 tiles)
    ex = fp8_error(x, fp8_tile_scale(x, 1, 128))
    ew = fp8_error(lin.weight.detach(), fp8_tile_scale(lin.weight, 128, 128))
    assert ((xq - x.double()).abs() <= ex).all() and ((w - lin.weight.detach().double()).abs() <= ew).all()
    flin = linear64(x, lin.weight.detach(), b)
    bound = ex @ lin.weight.detach().double().abs().T + x.double().abs() @ ew.T + ex @ ew.T
    bound += 2 * UNIT[dtype] * flin.abs() + 2 * UNIT[dtype] * magnitude(xq, w, b)
    assert_within(y, flin, bound, "LinearFP8 vs torch.nn.Linear")


@pytest.mark.parametrize("device", DEVICES)
def test_linearfp8_state_dict(device):
    lin = _linear(256, 130, True, seed=41)
    m = lnn.LinearFP8.from_linear(lin).to(device)
    sd = m.state_dict()
    assert set(sd) == {"weight", "weight_scale_inv", "bias"}
    x = _input((3, 256), torch.bfloat16, device, seed=42)
    fresh = lnn.LinearFP8(256, 130, bias=True, device=device)
    fresh.load_state_dict(_roundtrip(sd))
    deepseek = {"weight": sd["weight"], "scale": sd["weight_scale_inv"], "bias": sd["bias"]}  # inference code's name
    other = lnn.LinearFP8(256, 130, bias=True, device=device)
    other.load_state_dict(deepseek)
    with torch.no_grad():
        assert torch.equal(fresh(x), m(x)) and torch.equal(other(x), m(x))


# ---------------------------------------------------------------- Linear (BitBLAS)


def _gptq_pack(q, z, bits=4):
    """AutoGPTQ v1 tensors from codes q [N, K] and zeros z [G, N]: qweight [K·bits/32, N], qzeros stored as z − 1."""
    per = 32 // bits
    N, K = q.shape
    qw = torch.zeros(K // per, N, dtype=torch.int64)
    for j in range(per):
        qw |= q.T[j::per].long() << (bits * j)
    zs = (z.long() - 1) & (2**bits - 1)
    qz = torch.zeros(z.shape[0], N // per, dtype=torch.int64)
    for j in range(per):
        qz |= zs[:, j::per] << (bits * j)
    as32 = lambda t: ((t + 2**31) % 2**32 - 2**31).to(torch.int32)  # noqa: E731
    return as32(qw), as32(qz)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("a_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fmt", ["uint4-quantized", "int4-scale", "nf4-scale", "uint2-original", "float16"])
@pytest.mark.parametrize("K,N", [(96, 37), (256, 64)])
def test_bitblas_linear_forward(device, a_dtype, fmt, K, N):
    w_dtype, _, mode = fmt.partition("-")
    g = torch.Generator().manual_seed(K + N)
    group = 32
    bias = torch.randn(N, generator=g).to(getattr(torch, a_dtype))
    kw = dict(bias=True, A_dtype=a_dtype, W_dtype=w_dtype, out_dtype=a_dtype, device=device)
    if w_dtype == "float16":
        m = lnn.Linear(K, N, **kw)
        wf = torch.randn(N, K, generator=g).half()
        m.load_and_transform_weight(wf, bias=bias)
        w = wf.double()
    else:
        lo, hi = {"uint4": (0, 16), "int4": (-8, 8), "nf4": (0, 16), "uint2": (0, 4)}[w_dtype]
        v = torch.randint(lo, hi, (N, K), generator=g, dtype=torch.int8 if lo < 0 else torch.uint8)
        s = (torch.rand(N, K // group, generator=g) * 0.1 + 0.01).half()
        zeros = None
        if mode == "quantized":
            zeros = torch.randint(lo, hi, (N, K // group), generator=g, dtype=torch.uint8)
        elif mode == "original":
            zeros = (torch.rand(N, K // group, generator=g) * 3).half()
        m = lnn.Linear(K, N, group_size=group, with_scaling=True, with_zeros=zeros is not None,
                       zeros_mode=mode if zeros is not None else None, **kw)
        m.load_and_transform_weight(v, s, zeros, bias)
        val = v.double()
        if w_dtype == "nf4":
            val = torch.from_numpy(F.get_4bit_type("nf4")).double()[v.long()]
        z = 0 if zeros is None else zeros.double().repeat_interleave(group, 1)
        w = (val - z) * s.double().repeat_interleave(group, 1)
    x = _input((2, 3, K), torch.float32, device, seed=K)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == getattr(torch, a_dtype) and y.shape == (2, 3, N)
    xa = x.to(getattr(torch, a_dtype)).cpu()  # the module casts the input to A_dtype
    assert_rounding(y.cpu(), linear64(xa, w, bias), magnitude(xa, w, bias), K, xa.dtype)
    fresh = lnn.Linear(K, N, **{**kw, **({} if w_dtype == "float16" else dict(
        group_size=group, with_scaling=True, with_zeros=zeros is not None,
        zeros_mode=mode if zeros is not None else None))})
    sd = m.state_dict()
    assert set(sd) == ({"weight", "bias"} if w_dtype == "float16" else
                       {"qweight", "scales", "bias"} | ({"zeros"} if zeros is not None else set()))
    fresh.load_state_dict(_roundtrip(sd))
    with torch.no_grad():
        assert torch.equal(fresh(x), y)


@pytest.mark.parametrize("zeros_mode", ["quantized", "original"])
def test_bitblas_repack_from_gptq(zeros_mode):
    from types import SimpleNamespace

    K, N, group = 128, 48, 32
    g = torch.Generator().manual_seed(51)
    q = torch.randint(0, 16, (N, K), generator=g, dtype=torch.uint8)
    z = torch.randint(1, 16, (K // group, N), generator=g, dtype=torch.uint8)
    scales = (torch.rand(K // group, N, generator=g) * 0.1 + 0.01).half()
    qweight, qzeros = _gptq_pack(q, z)
    bias = torch.randn(N, generator=g).half()
    gptq = SimpleNamespace(qweight=qweight, qzeros=qzeros, scales=scales, bias=bias,
                           g_idx=torch.arange(K, dtype=torch.int32) // group)
    m = lnn.Linear(K, N, bias=True, W_dtype="uint4", group_size=group, with_scaling=True, with_zeros=True,
                   zeros_mode=zeros_mode)
    m.repack_from_gptq(gptq)
    w = (q.double() - z.T.double().repeat_interleave(group, 1)) * scales.T.double().repeat_interleave(group, 1)
    x = _input((5, K), torch.float16, "cpu", seed=52)
    with torch.no_grad():
        y = m(x)
    assert_rounding(y, linear64(x, w, bias), magnitude(x, w, bias), K, torch.float16)
    fresh = lnn.Linear(K, N, bias=True, W_dtype="uint4", group_size=group, with_scaling=True, with_zeros=True,
                       zeros_mode=zeros_mode)
    fresh.load_state_dict(m.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(x), y)


@pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON))
def test_bitblas_linear_moves_to_cuda():
    m = lnn.Linear(128, 64, W_dtype="uint4", group_size=32, with_scaling=True)
    g = torch.Generator().manual_seed(53)
    m.load_and_transform_weight(torch.randint(0, 16, (64, 128), generator=g, dtype=torch.uint8),
                                (torch.rand(64, 4, generator=g) * 0.1).half())
    x = _input((4, 128), torch.float16, "cpu", seed=54)
    with torch.no_grad():
        y = m(x)
        m.cuda()
        assert m.packed_weight.device == "cuda:0"
        yc = m(x.cuda())
    S = magnitude(x, torch.from_numpy(__import__("lowbit").dequantize_weight(m.packed_weight).numpy()), None)
    assert ((yc.cpu().double() - y.double()).abs() <= 4 * UNIT[torch.float16] * (y.double().abs() + S)).all()


# ---------------------------------------------------------------- errors


def test_bad_arguments():
    with pytest.raises(ValueError, match="quant_type must be 'fp4' or 'nf4'"):
        lnn.Linear4bit(8, 8, quant_type="int4")
    with pytest.raises(ValueError, match="blocksize must be a power of two"):
        lnn.Linear4bit(8, 8, blocksize=48)
    with pytest.raises(TypeError, match="compute_dtype must be"):
        lnn.Linear4bit(8, 8, compute_dtype=torch.float64)
    with pytest.raises(TypeError, match="quant_storage must be a torch.dtype"):
        lnn.Linear4bit(8, 8, quant_storage="uint8")
    with pytest.raises(ValueError, match="in_features must be positive"):
        lnn.Linear4bit(0, 8)
    with pytest.raises(TypeError, match="out_features must be an int"):
        lnn.Linear8bitLt(8, 2.5)
    with pytest.raises(ValueError, match="threshold must be a number >= 0"):
        lnn.Linear8bitLt(8, 8, threshold=-1.0)
    with pytest.raises(ValueError, match="in_features must be a multiple of 16"):
        lnn.LinearFP8(70, 8)
    with pytest.raises(ValueError, match="group_size"):
        lnn.Linear(64, 16, W_dtype="uint4", group_size=48, with_scaling=True)
    m = lnn.Linear(64, 16, W_dtype="uint4", group_size=32, with_scaling=True)
    with pytest.raises(RuntimeError, match="no weight yet"):
        m(torch.zeros(1, 64))
    with pytest.raises(ValueError, match="scales missing but the module was made with with_scaling=True"):
        m.load_and_transform_weight(torch.zeros(16, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match="needs W_dtype uint2/uint4/uint8"):
        m.repack_from_gptq(None)


def test_bad_inputs():
    m4 = _make4(_linear(64, 16, False, seed=61), "cpu")
    with pytest.raises(TypeError, match="Linear4bit: the input must be float32, float16 or bfloat16"):
        m4(torch.zeros(1, 64, dtype=torch.float64))
    m8 = lnn.Linear8bitLt(64, 16, has_fp16_weights=False)
    with pytest.raises(RuntimeError, match="not quantized yet"):
        m8(torch.zeros(1, 64))
    m8 = m8.cpu()
    with pytest.raises(TypeError, match="Linear8bitLt: the input must be"):
        m8(torch.zeros(1, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="A's last dimension must equal the weight's K = 64"):
        m4(torch.zeros(1, 63))


def test_bad_state_dicts():
    m4 = _make4(_linear(64, 16, True, seed=62), "cpu")
    sd = m4.state_dict()
    with pytest.raises(RuntimeError, match=r"holds a weight of shape \[16, 64\], this module's is \[16, 32\]"):
        lnn.Linear4bit(32, 16).load_state_dict(sd)
    bare = {"weight": sd["weight"], "bias": sd["bias"]}
    with pytest.raises(RuntimeError, match="no weight.quant_state.bitsandbytes__nf4"):
        lnn.Linear4bit(64, 16).load_state_dict(bare)
    broken = dict(sd)
    del broken["weight.absmax"]
    with pytest.raises(RuntimeError, match="the quant state of weight does not load: .*absmax"):
        lnn.Linear4bit(64, 16).load_state_dict(broken)
    sd8 = _make8(_linear(64, 16, True, seed=63), "cpu").state_dict()
    with pytest.raises(RuntimeError, match="weight_format must be 0"):
        lnn.Linear8bitLt(64, 16).load_state_dict({**sd8, "weight_format": torch.tensor(1, dtype=torch.uint8)})
    with pytest.raises(RuntimeError, match=r"SCB must have shape \[16\]"):
        lnn.Linear8bitLt(64, 16).load_state_dict({**sd8, "SCB": torch.ones(8)})
    with pytest.raises(RuntimeError, match="SCB needs an int8 weight"):
        lnn.Linear8bitLt(64, 16).load_state_dict({**sd8, "weight": torch.zeros(16, 64)})
    with pytest.raises(RuntimeError, match="Missing key.*qweight"):
        lnn.Linear(64, 16, W_dtype="uint4", group_size=32, with_scaling=True).load_state_dict({})


# ---------------------------------------------------------------- gradients


def _dequantized(m):
    """The float64 weight a module multiplies by (its forward's weight)."""
    if isinstance(m, lnn.Linear4bit):
        return F.dequantize_4bit(m.weight, m.weight.quant_state).double()
    if isinstance(m, lnn.Linear8bitLt):
        return m.weight.double() * m.weight.SCB.double()[:, None] / 127
    return F.weight_dequant(m.weight, m.weight_scale_inv, 128, dtype=torch.float32).double()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["nf4", "int8", "fp8"])
def test_input_and_bias_get_gradients_through_the_dequantized_weight(device, kind):
    """QLoRA's case: the weight frozen, the input's and a trainable bias's gradients through the modules' custom
    ops, against float64 through the dequantized weight."""
    lin = _linear(256, 48, True, seed=71)
    m = {"nf4": lambda: _make4(lin, device), "int8": lambda: _make8(lin, device),
         "fp8": lambda: lnn.LinearFP8.from_linear(lin).to(device)}[kind]()
    m.bias.requires_grad_(True)
    x = _input((3, 5, 256), torch.float32, device, seed=72).requires_grad_(True)
    grad_out = _input((3, 5, 48), torch.float32, device, seed=73)
    m(x).backward(grad_out)
    assert not m.weight.requires_grad and m.weight.grad is None
    want_x = (grad_out.double().reshape(-1, 48) @ _dequantized(m).to(device)).reshape(3, 5, 256)
    scale = grad_out.double().abs().reshape(-1, 48) @ _dequantized(m).abs().to(device)
    err = (x.grad.double() - want_x).abs().reshape(-1, 256)
    assert bool((err <= 1e-5 * scale + 1e-6).all()), f"{kind}: input gradient off by {float(err.max())}"
    torch.testing.assert_close(m.bias.grad.double(), grad_out.double().sum((0, 1)), rtol=1e-6, atol=1e-6)


def test_a_model_of_the_modules_compiles_without_graph_breaks_and_exports():
    """nf4, int8 and FP8 layers in one model: torch.compile(fullgraph=True) and torch.export give eager's bits (the
    layers' custom ops have fake implementations), and the compiled backward gives the input its gradient."""
    torch.manual_seed(74)
    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Linear(128, 64), torch.nn.Linear(64, 32))
    model[0] = _make4(model[0], "cpu")
    model[1] = _make8(model[1], "cpu", threshold=2.5)
    model[2] = lnn.LinearFP8.from_linear(model[2])
    x = _input((4, 256), torch.float32, "cpu", seed=75, scale=2.0)
    with torch.no_grad():
        want = model(x)
        assert torch.equal(torch.compile(model, fullgraph=True)(x), want)
        assert torch.equal(torch.export.export(model, (x,)).module()(x), want)
    xg = x.clone().requires_grad_(True)
    torch.compile(model, fullgraph=True)(xg).sum().backward()
    xe = x.clone().requires_grad_(True)
    model(xe).sum().backward()
    assert torch.equal(xg.grad, xe.grad)


def test_params4bit_chunk_and_split_keep_the_class_and_fields():
    """torch.chunk / torch.split of a Params4bit give Params4bit pieces with its fields (bitsandbytes' behaviour);
    other ops give plain tensors, as a Parameter's do."""
    p = lnn.Params4bit(_input((8, 6), torch.float16, "cpu", seed=76), quant_type="nf4", blocksize=128)
    for pieces in (torch.chunk(p, 2, dim=0), torch.split(p, [3, 5], dim=0)):
        assert isinstance(pieces, tuple)
        for piece in pieces:
            assert type(piece) is lnn.Params4bit
            assert (piece.quant_type, piece.blocksize) == ("nf4", 128)
        assert torch.equal(torch.cat([x.data for x in pieces]), p.data)
    assert type(p * 2) is torch.Tensor and type(p.t()) is torch.Tensor
