"""CUDA graphs and PyTorch's allocator: every lowbit CUDA op, called as users
call it (no out=, results allocated for them), can be captured with
torch.cuda.graph and replays with the right results; results are torch's own
tensors from its caching allocator, so torch's memory statistics count them.
A capture fails on any synchronizing call or raw cudaMalloc, so these tests
are also the proof that no op waits for the device. Skipped, saying why,
without torch, a GPU or lowbit's CUDA backend."""

import pytest

import lowbit
import lowbit.functional as F
from backends import torch_cuda_reason

_reason = torch_cuda_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"torch CUDA: {_reason}")


@pytest.fixture
def torch():
    import torch

    return torch


def _flat(result):
    """The tensors of an op's result (QuantStates opened into their arrays)."""
    out = []
    for r in result if isinstance(result, (tuple, list)) else (result,):
        if r is None:
            continue
        if isinstance(r, F.QuantState):
            out += [t for t in (r.absmax, r.code, r.offset) if t is not None]
            if r.state2 is not None:
                out += [r.state2.absmax, r.state2.code]
        else:
            out.append(r)
    return out


def _as_bits(torch, t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _check_capture(torch, name, fn, make_inputs):
    """Captures fn(*static) on a side stream, refills the inputs, replays and
    compares each output with an eager call on the same inputs, bit for bit."""
    static = make_inputs(0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the capture: kernels load, handles are made
        for _ in range(2):
            fn(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _flat(fn(*static))
    for seed in (1, 2):
        fresh = make_inputs(seed)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        want = _flat(fn(*fresh))
        torch.cuda.synchronize()
        assert len(captured) == len(want), name
        for i, (g, w) in enumerate(zip(captured, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: output {i}"
            assert torch.equal(_as_bits(torch, g), _as_bits(torch, w)), f"{name}: output {i} of the replay differs"


def _randn(torch, seed, *shape, dtype=None, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(1000 + seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype or torch.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_quantization_ops_capture_and_replay(torch, dtype):
    dt = getattr(torch, dtype)
    x = lambda seed: (_randn(torch, seed, 300, 517, dtype=dt, scale=3.0),)  # noqa: E731
    cases = {
        "quantize_blockwise": lambda a: F.quantize_blockwise(a, blocksize=256),
        "quantize_blockwise nested": lambda a: F.quantize_blockwise(a, blocksize=256, nested=True),
        "dequantize_blockwise": lambda a: F.dequantize_blockwise(*F.quantize_blockwise(a, blocksize=64, nested=True)),
        "quantize_4bit nf4": lambda a: F.quantize_4bit(a, quant_type="nf4", compress_statistics=True),
        "dequantize_4bit fp4": lambda a: F.dequantize_4bit(*F.quantize_4bit(a, quant_type="fp4", blocksize=128)),
        "weight_quant / weight_dequant": lambda a: F.weight_dequant(*F.weight_quant(a)),
        "int8_vectorwise_quant": lambda a: F.int8_vectorwise_quant(a)[:2],
        "int8_vectorwise_dequant": lambda a: F.int8_vectorwise_dequant(*F.int8_vectorwise_quant(a)[:2]),
        "estimate_quantiles": lambda a: F.estimate_quantiles(a),
        "estimate_quantiles 15": lambda a: F.estimate_quantiles(a, num_quantiles=15),
    }
    for name, fn in cases.items():
        _check_capture(torch, name, fn, x)
    act = lambda seed: (_randn(torch, seed, 64, 7168, dtype=dt),)  # noqa: E731
    _check_capture(torch, "act_quant", lambda a: F.act_quant(a), act)
    _check_capture(torch, "act_quant ue8m0", lambda a: F.act_quant(a, scale_fmt="ue8m0"), act)


@pytest.mark.parametrize("m", [1, 16, 300])
def test_matmul_ops_capture_and_replay(torch, m):
    w = _randn(torch, 50, 512, 1024, dtype=torch.float16) * 0.05
    packed, state = F.quantize_4bit(w, quant_type="nf4", compress_statistics=True)
    a = lambda seed: (_randn(torch, seed, m, 1024, dtype=torch.float16),)  # noqa: E731
    _check_capture(torch, f"matmul_4bit M={m}", lambda x: F.matmul_4bit(x, packed.t(), quant_state=state), a)

    config = lowbit.MatmulConfig(M=[1, 16, 256], N=512, K=1024, A_dtype="float16", W_dtype="int4",
                                 out_dtype="float16", group_size=128, with_scaling=True)
    mm = lowbit.Matmul(config, device="cuda")
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(-8, 8, (512, 1024), generator=g, dtype=torch.int8)
    scale = (torch.rand(512, 8, generator=g) * 0.02 + 0.001).to(torch.float16)
    packed_w = mm.transform_weight(codes, scale)
    _check_capture(torch, f"Matmul M={m}", lambda x: mm(x, packed_w), a)


def test_results_come_from_torchs_allocator(torch):
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    packed, state = F.quantize_4bit(x, quant_type="nf4")
    y, s = F.act_quant(x)
    grown = torch.cuda.memory_allocated() - before
    results = packed.nbytes + state.absmax.nbytes + y.nbytes + s.nbytes
    # Each result is a torch tensor owning its storage (not a DLPack import
    # of foreign memory), counted by memory_allocated; scratch was returned.
    # (The 4-bit table is one array per device that every state shares: no result.)
    assert results <= grown <= results + 4 * 512 * 5, (grown, results)
    assert all(isinstance(t, torch.Tensor) and t.is_cuda for t in (packed, state.absmax, state.code, y, s))
    del packed, state, y, s
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


def test_out_of_memory_is_torchs_error(torch):
    free, _ = torch.cuda.mem_get_info()
    n = (free // 3) // 64 * 64  # the float32 result (4n bytes) cannot fit; the input (n/2) can
    packed = torch.zeros(n // 2, dtype=torch.uint8, device="cuda")
    state = F.QuantState(absmax=torch.ones(n // 64, device="cuda"), shape=(n,), blocksize=64, quant_type="nf4",
                         dtype=torch.float32)
    with pytest.raises(torch.OutOfMemoryError):
        F.dequantize_4bit(packed, state)
    del packed, state
    torch.cuda.empty_cache()
