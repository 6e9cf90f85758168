"""lowbit.nn against bitsandbytes.nn itself: a state dict saved by bitsandbytes' Linear4bit / Linear8bitLt loads
into lowbit's module and gives bitsandbytes' output (to the output's rounding), and the reverse."""

import pytest

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")

import backends  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402
from nn_reference import UNIT, assert_within, magnitude  # noqa: E402

CUDA_REASON = backends.torch_cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON)))]
K, N = 192, 72


def _float(bias, seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(K, N, bias=bias)


def _x(dtype, device, seed):
    return torch.randn(3, 5, K, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)


def _close(y, y_other, x, w, bias, in_dtype):
    """Two libraries' outputs from the same weights: each within the kernels' rounding of the exact value, so
    within twice that of each other (bitsandbytes rounds the weights to the input's dtype first)."""
    y, y_other, x = y.cpu(), y_other.cpu(), x.cpu()
    S = magnitude(x.reshape(-1, K), w.cpu(), None if bias is None else bias.detach().cpu()).reshape(y.shape)
    u = UNIT[y.dtype]
    bound = 2 * u * (y.double().abs() + y_other.double().abs()) + 2 * (UNIT[in_dtype] + (K + 2) * 2.0**-24) * S
    assert_within(y, y_other, bound, "lowbit vs bitsandbytes")


def _zero_as_plus(packed, quant_type):
    """The codes with fp4's −0 (code 8) read as +0 (code 0): bitsandbytes' CPU backend gives a negative value
    that rounds to zero code 0, lowbit and bitsandbytes' CUDA kernel code 8 (sign = y < 0). Equal values."""
    codes = torch.stack([packed.cpu().view(torch.uint8) >> 4, packed.cpu().view(torch.uint8) & 15])
    return torch.where(codes == 8, 0, codes) if quant_type == "fp4" else codes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [False, True], ids=["plain", "double"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_linear4bit_bitsandbytes_to_lowbit(device, quant_type, nested, dtype):
    lin = _float(True, seed=1)
    theirs = bnb.nn.Linear4bit(K, N, quant_type=quant_type, compress_statistics=nested)
    theirs.load_state_dict(lin.state_dict())
    theirs = theirs.to(device)
    sd = theirs.state_dict()
    ours = lnn.Linear4bit(K, N, device=device)  # fp4 / double quant by default: the state dict decides
    ours.load_state_dict(sd)
    assert ours.weight.quant_type == quant_type and ours.weight.compress_statistics == nested
    own = lnn.Linear4bit(K, N, quant_type=quant_type, compress_statistics=nested)
    own.load_state_dict(lin.state_dict())
    own = own.to(device)
    # lowbit quantizes to bitsandbytes' codes. With double quant the offset (the absmax's mean) may differ by an
    # ulp (torch's float32 reduction; lowbit's is taken in double: docs/formats.md), and with it the nested state.
    mine = own.state_dict()
    assert torch.equal(_zero_as_plus(mine["weight"], quant_type), _zero_as_plus(sd["weight"], quant_type))
    exact = ["bias", "weight.quant_map"] + (["weight.nested_quant_map"] if nested else
                                            ["weight.absmax", f"weight.quant_state.bitsandbytes__{quant_type}"])
    for key in exact:
        assert torch.equal(mine[key].cpu(), sd[key].cpu()), key
    if nested:  # the decoded absmax within a step of the 8-bit dynamic map (under 1% near its top)
        a, b = (F.dequantize_blockwise(m.weight.quant_state.absmax, m.weight.quant_state.state2).cpu().double()
                + m.weight.quant_state.offset.cpu().double() for m in (own, ours))
        assert ((a - b).abs() <= 0.01 * b.abs().max()).all()
    x = _x(dtype, device, seed=2)
    with torch.no_grad():
        y = ours(x)
        if not nested:
            assert torch.equal(y, own(x))  # by value: ±0 weights give the same sums
        w = F.dequantize_4bit(ours.weight, ours.weight.quant_state)
        _close(y, theirs.eval()(x), x, w, lin.bias, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("nested", [False, True], ids=["plain", "double"])
def test_linear4bit_lowbit_to_bitsandbytes(device, quant_type, nested):
    lin = _float(True, seed=3)
    ours = lnn.Linear4bit(K, N, quant_type=quant_type, compress_statistics=nested)
    ours.load_state_dict(lin.state_dict())
    ours = ours.to(device)
    sd = ours.state_dict()
    stats = {k[len("weight."):]: v for k, v in sd.items() if k.startswith("weight.")}
    theirs = bnb.nn.Linear4bit(K, N, quant_type=quant_type, compress_statistics=nested, device=device)
    theirs.weight = bnb.nn.Params4bit.from_prequantized(data=sd["weight"], quantized_stats=stats, device=device,
                                                        module=theirs)
    theirs.bias = torch.nn.Parameter(sd["bias"].to(device))
    w_theirs = bnb.functional.dequantize_4bit(theirs.weight, theirs.weight.quant_state)
    w_ours = F.dequantize_4bit(ours.weight, ours.weight.quant_state)
    assert torch.equal(w_theirs, w_ours)
    x = _x(torch.bfloat16, device, seed=4)
    with torch.no_grad():
        _close(ours(x), theirs.eval()(x), x, w_ours, lin.bias, torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("threshold", [0.0, 2.5])
def test_linear8bitlt_bitsandbytes_to_lowbit(device, threshold):
    lin = _float(True, seed=5)
    theirs = bnb.nn.Linear8bitLt(K, N, has_fp16_weights=False, threshold=threshold)
    theirs.load_state_dict(lin.state_dict())
    theirs = theirs.to(device).eval()
    sd = theirs.state_dict()
    assert set(sd) == {"weight", "bias", "SCB", "weight_format"}
    ours = lnn.Linear8bitLt(K, N, threshold=threshold, device=device)
    ours.load_state_dict(sd)
    assert torch.equal(ours.weight.data, theirs.weight.data) and torch.equal(ours.weight.SCB, sd["SCB"])
    x = _x(torch.float16, device, seed=6)
    with torch.no_grad():
        w = ours.weight.data.double() * ours.weight.SCB.double()[:, None] / 127
        _close(ours(x), theirs(x), x, w, lin.bias, torch.float16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("threshold", [0.0, 2.5])
def test_linear8bitlt_lowbit_to_bitsandbytes(device, threshold):
    lin = _float(True, seed=7)
    ours = lnn.Linear8bitLt(K, N, has_fp16_weights=False, threshold=threshold)
    ours.load_state_dict(lin.state_dict())
    ours = ours.to(device)
    sd = ours.state_dict()
    theirs = bnb.nn.Linear8bitLt(K, N, has_fp16_weights=False, threshold=threshold)
    theirs = theirs.to(device).eval()  # bitsandbytes loads int8 weights only into a quantized module
    theirs.load_state_dict(sd)
    assert torch.equal(theirs.weight.data, ours.weight.data) and torch.equal(theirs.weight.SCB, ours.weight.SCB)
    x = _x(torch.float16, device, seed=8)
    with torch.no_grad():
        w = ours.weight.data.double() * ours.weight.SCB.double()[:, None] / 127
        _close(ours(x), theirs(x), x, w, lin.bias, torch.float16)


def test_linear8bitlt_codes_match_bitsandbytes_but_for_ties():
    """Both quantize the fp16 weight by its row absmax; bitsandbytes multiplies by 127 · (1 / absmax) (two
    roundings), lowbit divides once: codes agree but for rare ties, by one step."""
    lin = _float(False, seed=9)
    theirs = bnb.nn.Linear8bitLt(K, N, bias=False, has_fp16_weights=False)
    theirs.load_state_dict(lin.state_dict())
    theirs = theirs.to("cpu")
    ours = lnn.Linear8bitLt(K, N, bias=False, has_fp16_weights=False)
    ours.load_state_dict(lin.state_dict())
    ours = ours.to("cpu")
    assert torch.equal(ours.weight.SCB, theirs.weight.SCB)
    diff = (ours.weight.data.int() - theirs.weight.data.int()).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.01
