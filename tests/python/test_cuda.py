"""PyTorch CUDA tensors: zero-copy in and out, stream ordering, and the same
bits as the CPU. Skipped, saying why, without torch, a GPU or lowbit's CUDA
backend (the op-by-op reference cases also run on torch-cuda through the
`backend` fixture of the other files)."""

import numpy as np
import pytest

import lowbit.functional as F
import reference as ref
from backends import torch_cuda_reason
from lowbit import _lowbit

_reason = torch_cuda_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"torch CUDA: {_reason}")


@pytest.fixture
def torch():
    import torch

    return torch


def _trace(fn):
    _lowbit._trace(True)
    try:
        result = fn()
    finally:
        records = _lowbit._trace(False)
    return result, records


def _ptrs(records, arg):
    return [r[2] for r in records if r[1] == arg]


def test_zero_copy_inputs_and_outputs(torch):
    x = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16)
    (packed, state), records = _trace(lambda: F.quantize_4bit(x, quant_type="nf4", compress_statistics=True))
    assert _ptrs(records, "A")[0] == x.data_ptr()  # the op read the caller's memory
    assert packed.data_ptr() in _ptrs(records, "out")  # the result is the memory the op wrote
    assert state.absmax.data_ptr() in _ptrs(records, "absmax")
    assert state.state2.absmax.data_ptr() in _ptrs(records, "absmax2")
    for t in (packed, state.absmax, state.code, state.offset, state.state2.absmax):
        assert t.is_cuda and t.device == x.device
    y, records = _trace(lambda: F.dequantize_4bit(packed, state))
    assert _ptrs(records, "A")[0] == packed.data_ptr()
    assert y.data_ptr() in _ptrs(records, "out") and y.dtype == torch.bfloat16 and y.is_cuda


def test_out_buffers_written_in_place(torch):
    x = torch.randn(3, 1000, device="cuda")
    out = torch.empty(3, 1000, dtype=torch.uint8, device="cuda")
    absmax = torch.empty(12, device="cuda")
    q, state = F.quantize_blockwise(x, absmax=absmax, out=out, blocksize=256)
    assert q is out and state.absmax is absmax
    want_q, want_absmax = ref.quantize_blockwise(x.cpu().numpy(), ref.dynamic_map(), 256)
    np.testing.assert_array_equal(out.cpu().numpy().reshape(-1), want_q)
    np.testing.assert_array_equal(absmax.cpu().numpy(), want_absmax)
    y = torch.empty(3, 1000, device="cuda", dtype=torch.float16)
    assert F.dequantize_blockwise(q, state, out=y) is y


def _cpu_and_cuda(torch, fn, *arrays):
    """fn on CPU tensors and on CUDA copies; results as CPU tensors."""
    cpu = fn(*arrays)
    gpu = fn(*[a.cuda() for a in arrays])
    torch.cuda.synchronize()
    flat = lambda r: r if isinstance(r, (tuple, list)) else (r,)  # noqa: E731
    return flat(cpu), [t.cpu() if hasattr(t, "cpu") else t for t in flat(gpu)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_matches_cpu_bit_for_bit(torch, dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(257, 300, generator=g) * 3).to(getattr(torch, dtype))
    cases = [
        lambda a: F.quantize_blockwise(a, blocksize=128)[0],
        lambda a: F.quantize_4bit(a, quant_type="nf4", blocksize=64)[0],
        lambda a: F.quantize_4bit(a, quant_type="fp4", blocksize=256)[0],
        lambda a: F.dequantize_4bit(*F.quantize_4bit(a, quant_type="nf4", compress_statistics=True)),
        lambda a: F.dequantize_blockwise(*F.quantize_blockwise(a, blocksize=64, nested=True)),
        lambda a: F.act_quant(a[:, :256].contiguous()),
        lambda a: F.weight_quant(a),
        lambda a: F.int8_vectorwise_quant(a, threshold=6.0),
    ]
    for i, case in enumerate(cases):
        cpu, gpu = _cpu_and_cuda(torch, case, x)
        for c, d in zip(cpu, gpu):
            if c is None:
                assert d is None
                continue
            assert c.dtype == d.dtype and c.shape == d.shape, f"case {i}"
            assert torch.equal(c.view(torch.uint8) if c.element_size() == 1 else c,
                               d.view(torch.uint8) if d.element_size() == 1 else d), f"case {i}"


def test_estimate_quantiles_on_cuda(torch):
    x = torch.randn(100000)
    np.testing.assert_allclose(F.estimate_quantiles(x.cuda()).cpu().numpy(), ref.estimate_quantiles(x.numpy()),
                               rtol=1e-3, atol=1e-3)


def _delayed_copy(torch, src):
    """A tensor filled with `src` on the current stream behind ~0.1 s of GPU
    sleep: anything reading it on another stream sees zeros instead.
    (The ops checked here make no host-side copies, which would wait for the
    stream and hide a wrong-stream launch.)"""
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)
    x.copy_(src)
    return x


def _cpu_results(torch, src, packed, state):
    y, s = F.act_quant(src.cpu())
    w = F.weight_dequant(*F.weight_quant(src.cpu()))
    d = F.dequantize_4bit(packed.cpu(), F.QuantState.from_dict(state.as_dict(), "cpu"))
    return y.view(torch.uint8), s, w, d


def test_ops_run_on_the_current_torch_stream(torch):
    src = torch.randn(512, 1024, device="cuda")
    packed, state = F.quantize_nf4(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()  # non-blocking: no implicit sync with the default stream
    with torch.cuda.stream(s):
        x = _delayed_copy(torch, src)
        y, sc = F.act_quant(x)
        w = F.weight_dequant(*F.weight_quant(x))
        p = _delayed_copy(torch, packed)
        d = F.dequantize_4bit(p, state)
        d2 = d * 2  # torch reads lowbit's output on s
    s.synchronize()
    want = _cpu_results(torch, src, packed, state)
    got = (y.view(torch.uint8).cpu(), sc.cpu(), w.cpu(), d.cpu())
    for i, (g, e) in enumerate(zip(got, want)):
        assert torch.equal(g, e), f"result {i} differs from the CPU: not run in stream order (or a CPU/CUDA mismatch)"
    assert torch.equal(d2.cpu(), want[3] * 2)


def test_explicit_stream_argument(torch):
    src = torch.randn(512, 1024, device="cuda")
    packed, state = F.quantize_nf4(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = _delayed_copy(torch, src)
        p = _delayed_copy(torch, packed)
    # The current stream is the default one here; stream= puts the work behind the copies.
    y, sc = F.act_quant(x, stream=s)
    w = F.weight_dequant(*F.weight_quant(x, stream=s.cuda_stream), stream=s.cuda_stream)
    d = F.dequantize_4bit(p, state, stream=s)
    s.synchronize()
    want = _cpu_results(torch, src, packed, state)
    got = (y.view(torch.uint8).cpu(), sc.cpu(), w.cpu(), d.cpu())
    for i, (g, e) in enumerate(zip(got, want)):
        assert torch.equal(g, e), f"result {i} differs from the CPU: not run on stream= (or a CPU/CUDA mismatch)"


def test_second_device_when_present(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("one CUDA device: the cuda:1 case needs two")
    x = torch.randn(10000, device="cuda:1")
    q, state = F.quantize_nf4(x)
    assert q.device == x.device and state.absmax.device == x.device
    assert torch.equal(F.dequantize_nf4(q, state).cpu(), F.dequantize_nf4(*F.quantize_nf4(x.cpu())))


def test_quant_state_on_cuda_round_trip(torch):
    x = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    packed, state = F.quantize_nf4(x, compress_statistics=True)
    d = state.as_dict(packed=True)
    assert all(v.is_cuda for v in d.values())
    back = F.QuantState.from_dict({k: v.cpu() for k, v in d.items()}, device=torch.device("cuda"))
    assert back.absmax.is_cuda and back.dtype == torch.float16
    assert torch.equal(F.dequantize_nf4(packed, back), F.dequantize_nf4(packed, state))
    state.to("cpu")
    assert not state.absmax.is_cuda
    assert F.get_4bit_type("nf4", device="cuda").is_cuda


def test_device_mismatch_is_a_value_error(torch):
    x = torch.randn(1000, device="cuda")
    q, state = F.quantize_blockwise(x, blocksize=256)
    state.absmax = state.absmax.cpu()
    with pytest.raises(ValueError, match="must be on"):
        F.dequantize_blockwise(q, state)
