"""lowbit.bnb, bitsandbytes' namespace: torch results, 8-bit state dicts, large blocks, the [K, N]
weight's warning, MatMul4Bit's gradient, matmul_4bit under torch.compile and torch.export, the CPU weight layout
and every public module's __all__.

Needs PyTorch only (not bitsandbytes); CUDA cases skip, saying why, where torch CUDA cannot run."""

import importlib
import json
import types
import warnings

import numpy as np
import pytest

import backends

torch = pytest.importorskip("torch", reason="lowbit.bnb is bitsandbytes' PyTorch API")
bnb = importlib.import_module("lowbit.bnb")
F = bnb.functional
import lowbit  # noqa: E402
import lowbit.functional as LF  # noqa: E402

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(backends.torch_cuda_reason() is not None,
                                                  reason=str(backends.torch_cuda_reason()))),
]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(4321)


def _randn(gen, *shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, generator=gen).to(dtype=dtype, device=device)


# ------------------------------------------------------------------ code maps


@pytest.mark.parametrize("name, args", [
    ("create_dynamic_map", (True, 7, 8)), ("create_dynamic_map", (False, 7, 8)),
    ("create_linear_map", (True, 5, True)), ("create_normal_map", (0.9677083, True)),
    ("create_fp8_map", (True, 3, 4, 8)),
])
def test_code_maps_are_torch_tensors_with_lowbits_values(name, args):
    code = getattr(F, name)(*args)
    assert isinstance(code, torch.Tensor) and code.dtype == torch.float32 and code.device.type == "cpu"
    np.testing.assert_array_equal(code.numpy(), getattr(LF, name)(*args))  # the same values as lowbit's NumPy map


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("typename", ["nf4", "fp4", "int4"])
def test_get_4bit_type_is_a_tensor_on_the_device(device, typename):
    t = F.get_4bit_type(typename, device=device)
    assert isinstance(t, torch.Tensor) and t.device.type == device and t.shape == (16,)
    np.testing.assert_array_equal(t.cpu().numpy(), LF.get_4bit_type(typename))
    default = F.get_4bit_type(typename)
    assert default.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------- 8-bit QuantState dicts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_8bit_state_dict_round_trip(gen, device, nested, dtype):
    A = _randn(gen, 77, 130, dtype=dtype, device=device)  # ragged: the last block is partial
    code = F.create_dynamic_map(signed=True)
    q, state = F.quantize_blockwise(A, code=code, blocksize=256, nested=nested)
    d = state.as_dict()
    assert d["quant_type"] is None and d["blocksize"] == 256 and d["shape"] == (77, 130)
    assert d["dtype"] == str(dtype).split(".")[-1]
    assert all(isinstance(v, torch.Tensor) and v.device.type == device
               for k, v in d.items() if k in ("absmax", "quant_map", "nested_absmax", "nested_quant_map"))
    assert ("nested_offset" in d) == nested
    if nested:
        assert isinstance(d["nested_offset"], float) and d["nested_quant_map"] is not state.state2.code
    assert state.as_dict(packed=True).keys() == d.keys()  # 8-bit: bitsandbytes never packs
    back = F.QuantState.from_dict(dict(d), device=torch.device(device))
    assert back == state and back.nested == nested and back.dtype == dtype
    assert back.absmax.device.type == device
    torch.testing.assert_close(F.dequantize_blockwise(q, back), F.dequantize_blockwise(q, state), rtol=0, atol=0)
    # prefixed keys, as in a state_dict, and a move to the CPU
    prefixed = {f"layer.weight.{k}": v for k, v in d.items()}
    moved = F.QuantState.from_dict(prefixed, device="cpu")
    assert moved.absmax.device.type == "cpu" and moved == back


def test_8bit_state_dict_errors(gen):
    _, state = F.quantize_blockwise(_randn(gen, 300), blocksize=64, nested=True)
    d = state.as_dict()
    with pytest.raises(ValueError, match="a nested 8-bit state dict needs 'nested_offset'"):
        F.QuantState.from_dict({k: v for k, v in d.items() if k != "nested_offset"}, "cpu")
    with pytest.raises(TypeError, match="QuantState.from_dict: absmax must be an array"):
        F.QuantState.from_dict({**d, "absmax": [1.0]}, "cpu")


# ------------------------------------------------------------------ blocksizes above 4096


def _blockwise_reference(x: np.ndarray, code: np.ndarray, blocksize: int):
    """float64-free reference of lowbit's rule: absmax per block, the nearest code of x·(1/absmax) in float32,
    the lower code at a midpoint; values code[q]·absmax in float32."""
    flat = x.reshape(-1).astype(np.float32)
    blocks = -(-flat.size // blocksize)
    absmax = np.array([np.abs(flat[b * blocksize:(b + 1) * blocksize]).max() for b in range(blocks)], np.float32)
    scale = np.repeat(absmax, blocksize)[:flat.size]
    recip = np.where(scale > 0, np.float32(1) / np.where(scale > 0, scale, 1), 0).astype(np.float32)
    y = flat * recip
    mid = ((code[1:].astype(np.float64) + code[:-1]) / 2).astype(np.float32)
    q = np.searchsorted(mid, y, side="left").astype(np.uint8)  # midpoints strictly below y
    return q.reshape(x.shape), absmax, (code[q] * scale).astype(np.float32).reshape(x.shape)


@pytest.mark.parametrize("blocksize", [8192, 16384])
@pytest.mark.parametrize("nested", [False, True])
def test_blocksizes_above_4096(gen, blocksize, nested):
    A = _randn(gen, 3, 11, 1013)  # 33429 values: two whole blocks of 16384 and a partial one
    q, state = F.quantize_blockwise(A, blocksize=blocksize, nested=nested)
    code = LF.create_dynamic_map()
    want_q, want_absmax, want = _blockwise_reference(A.numpy(), code, blocksize)
    assert q.dtype == torch.uint8 and q.shape == A.shape and state.blocksize == blocksize
    np.testing.assert_array_equal(q.numpy(), want_q)
    if not nested:
        np.testing.assert_array_equal(state.absmax.numpy(), want_absmax)
        np.testing.assert_array_equal(F.dequantize_blockwise(q, state).numpy(), want)
        np.testing.assert_array_equal(F.dequantize_blockwise(q, absmax=state.absmax, blocksize=blocksize).numpy(), want)
    out = F.dequantize_blockwise(q, state)
    assert out.dtype == torch.float32
    assert (out - A).abs().mean() < 0.011  # bitsandbytes' own bound for this blocksize
    back = F.QuantState.from_dict(state.as_dict(), "cpu")
    torch.testing.assert_close(F.dequantize_blockwise(q, back), out, rtol=0, atol=0)


def test_blocksize_above_16384_is_rejected(gen):
    with pytest.raises(ValueError, match="blocksize must be a power of two from 32 to 4096"):
        F.quantize_blockwise(_randn(gen, 100), blocksize=32768)


# ------------------------------------------------------------------ 4-bit


def test_dequantize_4bit_transposes_a_one_row_input_as_bitsandbytes(gen):
    w = _randn(gen, 8, 64)
    packed, state = F.quantize_4bit(w, quant_type="nf4")
    plain = F.dequantize_4bit(packed, state)
    assert plain.shape == (8, 64)
    torch.testing.assert_close(F.dequantize_4bit(packed.t(), state), plain.t(), rtol=0, atol=0)
    assert state.blocksize == 64  # blocksize=None means 64


@pytest.mark.parametrize("device", DEVICES)
def test_kn_weight_warns_and_still_multiplies(gen, device):
    N, K = 96, 160
    A = _randn(gen, 2, 5, K, device=device)
    W = _randn(gen, N, K, device=device)
    packed, state = F.quantize_4bit(W.t().contiguous(), quant_type="nf4", blocksize=64)  # [K, N]
    with pytest.warns(DeprecationWarning, match=r"quantized from a \[K, N\] tensor.*Re-quantize from the weight"):
        out = bnb.matmul_4bit(A, packed, state)
    want = A.double() @ F.dequantize_4bit(packed, state).double()  # the dequantized [K, N] weight
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    square, sstate = F.quantize_4bit(_randn(gen, K, K, device=device), quant_type="nf4")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a square weight is read as [N, K]: no warning
        bnb.matmul_4bit(A, square, sstate)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("nested", [False, True])
def test_matmul_4bit_orientations_and_bias(gen, device, nested):
    N, K = 72, 200  # K not a multiple of the blocksize: blocks cross rows
    A = _randn(gen, 3, K, device=device)
    packed, state = F.quantize_4bit(_randn(gen, N, K, device=device), quant_type="fp4", compress_statistics=nested)
    bias = _randn(gen, N, device=device)
    w = LF.dequantize_4bit(packed, state).double()
    want = A.double() @ w.t() + bias.double()
    for B in (packed, packed.t()):
        torch.testing.assert_close(bnb.matmul_4bit(A, B, state, bias=bias).double(), want, rtol=1e-5, atol=1e-5)
    out = torch.empty(3, N, device=device)
    assert bnb.matmul_4bit(A, packed, state, out=out) is out
    assert bnb.matmul_4bit(A[:0], packed, state).shape == (0, N)
    with pytest.raises(ValueError, match="matmul_4bit: quant_state is required"):
        bnb.matmul_4bit(A, packed, None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5, 136), (2, 3, 136)])
def test_matmul4bit_gradient_against_float64(gen, device, shape):
    N, K = 40, shape[-1]
    packed, state = F.quantize_4bit(_randn(gen, N, K, device=device), quant_type="nf4", compress_statistics=True)
    A = _randn(gen, *shape, device=device).requires_grad_()
    bias = _randn(gen, N, device=device).requires_grad_()
    grad = _randn(gen, *shape[:-1], N, device=device)
    out = bnb.matmul_4bit(A, packed.t(), state, bias=bias)
    assert "lowbit_matmul_4bit" in type(out.grad_fn).__name__  # the custom op's autograd, not a Function of its own
    out.backward(grad)
    w = LF.dequantize_4bit(packed, state).double()  # [N, K]
    torch.testing.assert_close(A.grad.double(), grad.double() @ w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bias.grad.double(), grad.double().reshape(-1, N).sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.detach().double(), A.detach().double() @ w.t() + bias.detach().double(),
                               rtol=1e-5, atol=1e-5)


def test_matmul4bit_apply_directly(gen):
    packed, state = F.quantize_4bit(_randn(gen, 24, 64), quant_type="nf4")
    A = _randn(gen, 4, 64).requires_grad_()
    bnb.MatMul4Bit.apply(A, packed, None, None, state).sum().backward()
    w = LF.dequantize_4bit(packed, state).double()
    torch.testing.assert_close(A.grad.double(), w.sum(0).expand(4, 64), rtol=1e-5, atol=1e-5)


class _Bnb4bitModel(torch.nn.Module):
    """Calls ``bnb.matmul_4bit`` as bitsandbytes' users do, on each of its paths: a double-quantized nf4 weight
    given as ``.t()`` with a trainable bias, a weight in bitsandbytes' CPU layout, an fp4 weight as packed, and a
    state quantized from a [K, N] weight (the deprecated orientation)."""

    def __init__(self, gen):
        super().__init__()
        self.p1, self.q1 = F.quantize_4bit(_randn(gen, 64, 136), quant_type="nf4", compress_statistics=True)
        self.b1 = torch.nn.Parameter(_randn(gen, 64))
        self.p2, self.q2 = F._convert_weight_packed_for_cpu(*F.quantize_4bit(_randn(gen, 64, 64), quant_type="nf4"))
        self.p3, self.q3 = F.quantize_4bit(_randn(gen, 40, 64), quant_type="fp4")
        self.p4, self.q4 = F.quantize_4bit(_randn(gen, 40, 24), quant_type="nf4")  # [K, N]

    def forward(self, x):
        h = torch.relu(bnb.matmul_4bit(x, self.p1.t(), self.q1, bias=self.b1))
        h = bnb.matmul_4bit(h, self.p2, self.q2)
        h = bnb.matmul_4bit(h, self.p3, self.q3)
        return bnb.matmul_4bit(h, self.p4, self.q4)

    def float64(self, x, b1):
        """The same model in float64 on the dequantized weights."""
        w1, w3, w4 = (LF.dequantize_4bit(p, q).double() for p, q in ((self.p1, self.q1), (self.p3, self.q3),
                                                                      (self.p4, self.q4)))
        w2 = F.dequantize_4bit(*F._unpack_cpu_format(self.p2, self.q2)).double()
        return torch.relu(x @ w1.t() + b1) @ w2.t() @ w3.t() @ w4


def test_matmul_4bit_compiles_without_graph_breaks(gen):
    """A model calling bnb.matmul_4bit (every path) under torch.compile(fullgraph=True): no graph break, eager's
    output and input gradient bit for bit, the bias's within float32 summation order, both against float64; and
    it exports (the ops lowbit::matmul_4bit and lowbit::dequantize_4bit in the graph), with eager's output."""
    torch._dynamo.reset()
    model = _Bnb4bitModel(gen)
    x = _randn(gen, 3, 5, 136)
    grad = _randn(gen, 3, 5, 24)
    explained = torch._dynamo.explain(model)(x)  # no DeprecationWarning while compiling (as bitsandbytes)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(model, fullgraph=True)
    runs = {}
    for name, fn in (("eager", model), ("compiled", compiled)):
        xg = x.clone().requires_grad_()
        model.b1.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the [K, N] layer, eager only
            out = fn(xg)
        out.backward(grad)
        runs[name] = (out.detach(), xg.grad, model.b1.grad.clone())
    (out_e, gx_e, gb_e), (out_c, gx_c, gb_c) = runs["eager"], runs["compiled"]
    assert torch.equal(out_c, out_e) and torch.equal(gx_c, gx_e)
    torch.testing.assert_close(gb_c, gb_e, rtol=1e-6, atol=1e-6)
    x64 = x.double().requires_grad_()
    b64 = model.b1.detach().double().requires_grad_()
    want = model.float64(x64, b64)
    want.backward(grad.double())
    for got, ref in ((out_c, want.detach()), (gx_c, x64.grad), (gb_c, b64.grad)):
        torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
        assert torch.equal(ep.module()(x), out_e)
    calls = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert calls.count("lowbit.matmul_4bit.default") == 3 and "lowbit.dequantize_4bit.default" in calls


@pytest.mark.parametrize("nested", [False, True])
def test_bitsandbytes_cpu_layout_round_trips_into_gemv(gen, nested):
    N, K = 64, 256
    W = _randn(gen, N, K)
    A = _randn(gen, 1, K)
    packed, state = F.quantize_4bit(W, quant_type="nf4", compress_statistics=nested)
    want = F.gemv_4bit(A, packed.t(), state=state)
    absmax = (LF.dequantize_blockwise(state.absmax, state.state2) + state.offset) if nested else state.absmax
    cpu_packed, cpu_state = F._convert_weight_packed_for_cpu(packed, state)
    assert cpu_packed.shape == (N, K // 2) and cpu_state.packing_format_for_cpu and not cpu_state.nested
    assert cpu_state.absmax.dtype == torch.bfloat16 and cpu_state.absmax.shape == (K // 64, N)
    got = F.gemv_4bit(A, cpu_packed, state=cpu_state)
    # the same codes, with the absmax rounded to bfloat16 as bitsandbytes' conversion does
    codes = F.get_4bit_type("nf4", device="cpu")
    nibbles = torch.stack((packed.reshape(-1) >> 4, packed.reshape(-1) & 0xF), 1).reshape(-1).long()
    w = (codes[nibbles].double() * absmax.to(torch.bfloat16).double().repeat_interleave(64)).reshape(N, K)
    torch.testing.assert_close(got.double(), A.double() @ w.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bnb.matmul_4bit(A, cpu_packed, cpu_state), got, rtol=0, atol=0)
    assert (got - want).abs().max() <= 1e-2 * want.abs().max()


def test_utils_pack_dict(gen):
    d = {"quant_type": "nf4", "blocksize": 64, "shape": [3, 4]}
    t = bnb.utils.pack_dict_to_tensor(d)
    assert t.dtype == torch.uint8 and bytes(t.tolist()).decode() == json.dumps(d)
    assert bnb.utils.unpack_tensor_to_dict(t) == d


# ------------------------------------------------------------------ namespace hygiene

_BNB_NN = ["lowbit.bnb.nn.parametrize"] if importlib.util.find_spec("lowbit.nn") is not None else []  # needs lowbit.nn
PUBLIC_MODULES = ["lowbit", "lowbit.functional", "lowbit.sparse", "lowbit.optim", "lowbit.bnb",
                  "lowbit.bnb.functional", "lowbit.bnb.utils"] + _BNB_NN
STRICT_MODULES = ["lowbit.bnb", "lowbit.bnb.functional", "lowbit.bnb.utils"] + _BNB_NN  # no other public names
LEAKS = {"np", "numpy", "torch", "Any", "Optional", "List", "Tuple", "Dict", "Sequence", "Union", "annotations",
         "json", "warnings", "importlib", "functools", "math", "sys", "os"}


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_names_the_api_only(name):
    mod = importlib.import_module(name)
    assert isinstance(mod.__all__, list) and len(set(mod.__all__)) == len(mod.__all__)
    assert not set(mod.__all__) & LEAKS
    for attr in mod.__all__:
        if attr == "nn" and name == "lowbit.bnb" and importlib.util.find_spec("lowbit.nn") is None:
            continue  # bnb.nn re-exports lowbit.nn, which this tree does not have
        assert hasattr(mod, attr), f"{name}.__all__ names {attr}, which it lacks"
    exported = {}
    exec(f"from {name} import *", exported)  # noqa: S102
    assert set(exported) - {"__builtins__"} <= set(mod.__all__)


@pytest.mark.parametrize("name", STRICT_MODULES)
def test_no_public_name_outside_all(name):
    mod = importlib.import_module(name)
    public = {a for a in vars(mod) if not a.startswith("_") and not isinstance(vars(mod)[a], types.ModuleType)}
    assert public <= set(mod.__all__), f"{name} has public names outside __all__: {sorted(public - set(mod.__all__))}"


def test_bnb_namespace_is_bitsandbytes_shaped():
    assert bnb.optim is lowbit.optim
    assert F.QuantState is LF.QuantState
    for attr in ("AdamW8bit", "PagedAdamW8bit", "Lion8bit", "GlobalOptimManager"):
        assert hasattr(bnb.optim, attr)
    for attr in ("quantize_blockwise", "dequantize_4bit", "gemv_4bit", "int8_vectorwise_quant", "int8_linear_matmul",
                 "int8_mm_dequant", "int8_double_quant", "has_avx512bf16", "optimizer_update_8bit_blockwise"):
        assert callable(getattr(F, attr))
    import inspect

    assert list(inspect.signature(bnb.matmul_4bit).parameters) == ["A", "B", "quant_state", "out", "bias"]
    assert list(inspect.signature(F.gemv_4bit).parameters) == ["A", "B", "out", "transposed_A", "transposed_B", "state"]
    assert inspect.signature(F.quantize_4bit).parameters["blocksize"].default is None


@pytest.mark.parametrize("threshold", [0.0, 2.5])
def test_int8_matmul_and_its_gradients(gen, threshold):
    N, K = 48, 72
    A = _randn(gen, 2, 5, K).requires_grad_()
    B = _randn(gen, N, K).requires_grad_()
    bias = _randn(gen, N).requires_grad_()
    grad = _randn(gen, 2, 5, N)
    state = bnb.MatmulLtState()
    out = bnb.matmul(A, B, state=state, threshold=threshold, bias=bias)
    assert state.threshold == threshold and state.CB.dtype == torch.int8 and state.CB.shape == (N, K)
    CB, SCB, _ = LF.int8_vectorwise_quant(B.detach().half())
    assert torch.equal(state.CB, CB) and torch.equal(state.SCB, SCB)
    torch.testing.assert_close(out, LF.int8_linear(A.detach(), CB, SCB, bias.detach(), threshold), rtol=0, atol=0)
    out.backward(grad)
    w = CB.double() * SCB.double()[:, None] / 127
    g = grad.double().reshape(-1, N)
    torch.testing.assert_close(A.grad.double(), (g @ w).reshape(2, 5, K), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(B.grad.double(), g.t() @ A.detach().double().reshape(-1, K), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bias.grad.double(), g.sum(0), rtol=1e-5, atol=1e-5)
    # an int8 weight kept in the state (has_fp16_weights=False) is used as it is
    frozen = bnb.MatmulLtState()
    frozen.has_fp16_weights, frozen.CB, frozen.SCB = False, CB, SCB
    torch.testing.assert_close(bnb.matmul(A.detach(), CB, state=frozen), LF.int8_linear(A.detach(), CB, SCB),
                               rtol=0, atol=0)


def test_pytorch_lars_against_float64(gen):
    p = _randn(gen, 33, 7).requires_grad_()
    p64 = p.detach().double().clone()
    opt = bnb.optim.PytorchLARS([p], lr=0.1, momentum=0.9, weight_decay=0.01, max_unorm=0.02)
    buf = None
    for _ in range(3):
        g = _randn(gen, 33, 7)
        p.grad = g.clone()
        opt.step()
        d = g.double() + 0.01 * p64
        buf = d.clone() if buf is None else 0.9 * buf + d
        scale = min(1.0, float(0.02 * p64.norm() / buf.norm()))
        p64 -= 0.1 * scale * buf
    torch.testing.assert_close(p.detach().double(), p64, rtol=1e-5, atol=1e-6)


def test_reference_ademamix_against_float64(gen):
    p = _randn(gen, 50).requires_grad_()
    w = p.detach().double().clone()
    opt = bnb.optim.ademamix._ReferenceAdEMAMix([p], lr=0.01, t_alpha=4, t_beta3=4)
    m1 = torch.zeros_like(w); m2 = torch.zeros_like(w); nu = torch.zeros_like(w)  # noqa: E702
    b1, b2, b3, alpha = 0.9, 0.999, 0.9999, 5.0
    import math

    for t in range(1, 4):
        g = _randn(gen, 50)
        p.grad = g.clone()
        opt.step()
        a = min(t * alpha / 4, alpha)
        ln1, ln3 = math.log(b1), math.log(b3)
        beta3 = min(math.exp(ln1 * ln3 / ((1 - t / 4) * ln3 + t / 4 * ln1)), b3)
        g = g.double()
        m1 = b1 * m1 + (1 - b1) * g
        m2 = beta3 * m2 + (1 - beta3) * g
        nu = b2 * nu + (1 - b2) * g * g
        update = (m1 / (1 - b1**t) + a * m2) / (nu.sqrt() / math.sqrt(1 - b2**t) + 1e-8) + 0.01 * w
        w = w - 0.01 * update
    torch.testing.assert_close(p.detach().double(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_packed_state_entry_as_attribute(gen, quant_type):
    _, state = F.quantize_4bit(_randn(gen, 16, 64), quant_type=quant_type, compress_statistics=True)
    blob = getattr(state, f"bitsandbytes__{quant_type}")  # FSDP reads state_dict keys' paths with getattr
    assert torch.equal(blob, state.as_dict(packed=True)[f"quant_state.bitsandbytes__{quant_type}"])
    other = "fp4" if quant_type == "nf4" else "nf4"
    assert not hasattr(state, f"bitsandbytes__{other}") and not hasattr(state, "no_such_field")


def test_adagrad_sized_classes_keep_bitsandbytes_optim_bits_slot():
    p = [torch.nn.Parameter(torch.zeros(4))]
    with pytest.raises(ValueError, match="Adagrad8bit: optim_bits must be 8 \\(got 32\\)"):
        bnb.optim.Adagrad8bit(p, optim_bits=32)
    with pytest.raises(ValueError, match="Adagrad32bit: optim_bits must be 32 \\(got 8\\)"):
        bnb.optim.Adagrad32bit(p, 1e-2, 0, 0, 0, 1e-10, 8)
    opt = bnb.optim.Adagrad8bit(p, 1e-2, 0, 0, 0, 1e-10, 8, None, 1)  # positional, as bitsandbytes orders them
    assert opt.defaults["lr"] == 1e-2
