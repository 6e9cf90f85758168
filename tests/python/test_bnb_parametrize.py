"""lowbit.bnb.nn.parametrize, bitsandbytes' 4-bit parametrization of any module parameter: the codes and the
dequantized tensor bit for bit against lowbit's functional calls, bitsandbytes' state-dict layout and a
prequantized round trip, one dequantization per parameter per forward (torch's parametrization cache, left off
after a forward that raised), torch.compile(fullgraph=True) of a module reading the parameter (no graph break;
output and input gradient against float64, compiled and eager), and the errors.

Needs PyTorch only (not bitsandbytes)."""

import pytest

torch = pytest.importorskip("torch", reason="lowbit.bnb is bitsandbytes' PyTorch API")

import torch.nn.utils.parametrize as P  # noqa: E402

import lowbit.functional as LF  # noqa: E402
import lowbit.ops  # noqa: E402
from lowbit.bnb import functional as F  # noqa: E402
from lowbit.bnb.nn import parametrize  # noqa: E402
from lowbit.bnb.nn.parametrize import (  # noqa: E402
    Bnb4bitParametrization,
    replace_parameter_4bit,
    replace_parameter_4bit_prequantized,
)


def _randn(seed, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


class _Experts(torch.nn.Module):
    """A MoE layer's expert stack [E, K, N] (the case the parametrization is for), a bias, and a plain tensor."""

    def __init__(self, seed=0, shape=(4, 40, 24), dtype=torch.float32):
        super().__init__()
        self.experts = torch.nn.Parameter(_randn(seed, *shape, dtype=dtype))
        self.bias = torch.nn.Parameter(_randn(seed + 1, shape[-1], dtype=dtype))
        self.plain = _randn(seed + 2, 3)

    def forward(self, x, i: int = 1):
        return x @ self.experts[i] + x @ self.experts[0] + self.bias


@pytest.fixture(autouse=True)
def _clean_cache():
    yield
    assert P._cache_enabled == 0 and P._cache == {}  # no test leaves torch's parametrization cache on


@pytest.mark.parametrize("shape", [(4, 40, 24), (33, 17), (101,)], ids=["3d", "ragged", "1d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("quant_type, nested, blocksize", [("nf4", False, None), ("fp4", True, 128)])
def test_codes_in_the_module_dequantized_on_read(shape, dtype, quant_type, nested, blocksize):
    m = _Experts(1, shape, dtype) if len(shape) == 3 else torch.nn.Module()
    if len(shape) != 3:
        m.experts = torch.nn.Parameter(_randn(1, *shape, dtype=dtype))  # requires grad, as a trained weight does
    original = m.experts.detach().clone()
    replace_parameter_4bit(m, "experts", compress_statistics=nested, quant_type=quant_type, blocksize=blocksize)
    codes, state = LF.quantize_4bit(original, quant_type=quant_type, compress_statistics=nested,
                                    blocksize=blocksize or 64)
    held = m.parametrizations.experts.original
    assert type(held) is torch.nn.Parameter and not held.requires_grad
    assert held.dtype == torch.uint8 and held.shape == ((original.numel() + 1) // 2, 1) and torch.equal(held, codes)
    got = m.experts
    assert got.shape == original.shape and got.dtype == dtype and not got.requires_grad
    assert torch.equal(got, LF.dequantize_4bit(codes, state))
    qs = m.parametrizations.experts[0].quant_state
    assert isinstance(qs, F.QuantState) and (qs.quant_type, qs.blocksize, qs.nested) == (quant_type, blocksize or 64,
                                                                                         nested)


@pytest.mark.parametrize("nested", [False, True])
def test_state_dict_is_bitsandbytes_layout_and_loads_prequantized(nested):
    m = _Experts(2)
    replace_parameter_4bit(m, "experts", compress_statistics=nested)
    sd = m.state_dict()
    stats = ["absmax", "quant_map"] + (["nested_absmax", "nested_quant_map"] if nested else [])
    want = {"bias", "experts", "experts.quant_state.bitsandbytes__nf4"} | {f"experts.{k}" for k in stats}
    assert set(sd) == want
    assert torch.equal(sd["experts"], m.parametrizations.experts.original)
    # a checkpoint's codes and state into a module of float parameters: the same tensor, the same state dict
    fresh = _Experts(3)
    fresh.experts = torch.nn.Parameter(sd["experts"].clone(), requires_grad=False)
    entries = {k[len("experts."):]: v for k, v in sd.items() if k.startswith("experts.")}
    replace_parameter_4bit_prequantized(fresh, "experts", entries, device=torch.device("cpu"))
    assert torch.equal(fresh.experts, m.experts)
    fresh.bias = m.bias
    again = fresh.state_dict()
    assert set(again) == want and all(torch.equal(again[k], sd[k]) for k in want)
    nested_model = torch.nn.Sequential(torch.nn.Linear(2, 2), m)  # a prefix: the hook writes under it
    assert {k for k in nested_model.state_dict() if k.startswith("1.")} == {f"1.{k}" for k in want}


def test_one_forward_dequantizes_each_parameter_once(monkeypatch):
    m = _Experts(4)
    replace_parameter_4bit(m, "experts")
    calls = []
    real = lowbit.ops.dequantize_4bit
    monkeypatch.setattr(lowbit.ops, "dequantize_4bit", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = _randn(5, 3, 40)
    m(x)  # reads m.experts twice
    assert len(calls) == 1 and P._cache_enabled == 0 and P._cache == {}
    m.experts, m.experts  # noqa: B018  (outside a forward the cache is off: each read dequantizes)
    assert len(calls) == 3
    with pytest.raises(RuntimeError):
        m(_randn(6, 3, 41))  # the forward raises: the closing hook still runs
    assert P._cache_enabled == 0 and P._cache == {}


def test_cache_hooks_balance():
    m = torch.nn.Linear(3, 3)
    parametrize._register_parametrization_hooks(m, "weight")
    P._cache[("k",)] = torch.zeros(1)
    parametrize._disable_parametrization_cache(m, (), None)  # closing a scope that never opened
    assert P._cache_enabled == 0 and P._cache == {}
    parametrize._enable_parametrization_cache(m, ())
    parametrize._enable_parametrization_cache(m, ())
    P._cache[("k",)] = torch.zeros(1)
    parametrize._disable_parametrization_cache(m, (), None)
    assert P._cache_enabled == 1 and ("k",) in P._cache  # an outer scope still open keeps the cache
    parametrize._disable_parametrization_cache(m, (), None)
    assert P._cache_enabled == 0 and P._cache == {}
    assert m.state_dict().keys() == {"weight", "bias"}  # not parametrized: the state-dict hook changes nothing


def test_compiles_without_graph_breaks_and_input_gradient_against_float64():
    torch._dynamo.reset()
    m = _Experts(7)
    replace_parameter_4bit(m, "experts", compress_statistics=True)
    x = _randn(8, 5, 40)
    explained = torch._dynamo.explain(m)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(m, fullgraph=True)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_e, out_c = m(xe), compiled(xc)
    w = m.experts.double()  # the dequantized stack: what the forward multiplies by
    want = x.double() @ w[1] + x.double() @ w[0] + m.bias.detach().double()
    for got in (out_e, out_c):  # inductor fuses the torch ops around the dequantization: float32 rounding apart
        torch.testing.assert_close(got.detach().double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    grad = _randn(9, 5, 24)
    out_e.backward(grad)
    out_c.backward(grad)
    want = grad.double() @ (w[1] + w[0]).t()
    for got in (xe.grad, xc.grad):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert m.parametrizations.experts.original.grad is None


def test_errors_name_the_function_and_the_parameter():
    m = _Experts(10)
    with pytest.raises(AttributeError, match="replace_parameter_4bit: Module does not have parameter 'nope'"):
        replace_parameter_4bit(m, "nope")
    with pytest.raises(TypeError, match=r"replace_parameter_4bit: Parameter 'plain' is not an instance of "
                                        r"nn\.Parameter \(got Tensor\)"):
        replace_parameter_4bit(m, "plain")
    with pytest.raises(AttributeError, match="replace_parameter_4bit_prequantized: Module does not have parameter"):
        replace_parameter_4bit_prequantized(m, "nope", {}, torch.device("cpu"))
    with pytest.raises(TypeError, match="replace_parameter_4bit_prequantized: Parameter 'plain'"):
        replace_parameter_4bit_prequantized(m, "plain", {}, torch.device("cpu"))
    with pytest.raises(TypeError, match=r"Bnb4bitParametrization: quant_state must be a QuantState \(got dict\)"):
        Bnb4bitParametrization({})
    with pytest.raises(ValueError, match="quant_type"):
        replace_parameter_4bit(m, "experts", quant_type="int4")
    replace_parameter_4bit(m, "experts")
    with pytest.raises(TypeError, match="Parameter 'experts' is not an instance of nn.Parameter"):
        replace_parameter_4bit(m, "experts")  # already parametrized: reading it gives the dequantized tensor
