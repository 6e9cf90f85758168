"""Paged tensors (docs/optim.md, "Paged states"): CUDA managed memory through lowbit.functional.get_paged and
prefetch_tensor, and the Paged… optimizers, including states larger than the GPU's free memory."""

import pytest

torch = pytest.importorskip("torch")

import lowbit  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.optim as optim  # noqa: E402


def _gpu_reason():
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if not lowbit._lowbit.built_with_cuda or lowbit.cuda_device_count() == 0:
        return "lowbit was built without CUDA or sees no device"
    return None


needs_gpu = pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))


@pytest.mark.skipif(_gpu_reason() is None, reason="a GPU is present: the paged tests below run instead")
def test_get_paged_without_a_gpu_is_a_clear_error():
    with pytest.raises((RuntimeError, ValueError), match="empty_managed|CUDA|cuda"):
        F.get_paged(16, dtype=torch.float32)


@needs_gpu
def test_paged_tensor_is_a_cuda_tensor_that_pages():
    t = F.get_paged(3, 1000, dtype=torch.float32, device=torch.device("cuda", 0))
    assert t.is_cuda and t.is_paged and t.page_deviceid == 0 and t.shape == (3, 1000)
    F.fill(t, 2.5)
    assert bool((t == 2.5).all())
    F.arange(t)
    assert torch.equal(t.reshape(-1), torch.arange(3000, dtype=torch.float32, device="cuda"))
    other = F.get_paged(3, 1000, dtype=torch.float32)
    F.fill(other, 2.0)
    F._mul(t, other)
    F.prefetch_tensor(t, to_cpu=True)
    assert torch.equal(t.reshape(-1), 2 * torch.arange(3000, dtype=torch.float32, device="cuda"))
    F.prefetch_tensor(t)
    u8 = F.get_paged(7, dtype=torch.uint8)
    F.fill(u8, 3)
    assert u8.dtype == torch.uint8 and bool((u8 == 3).all())


@needs_gpu
def test_prefetch_of_ordinary_memory_is_refused():
    with pytest.raises(ValueError, match="managed memory"):
        F.prefetch_tensor(torch.zeros(10, device="cuda"))
    with pytest.raises(ValueError, match="paged tensor"):
        F.prefetch_tensor(torch.zeros(10))


def _big_params(seed=0, n=300_000):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n, generator=g).cuda()),
            torch.nn.Parameter(torch.randn(77, generator=g).cuda())]


def _train(opt, params, steps=4):
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).cuda()
        opt.step()


@needs_gpu
@pytest.mark.parametrize("paged,plain", [(optim.PagedAdamW8bit, optim.AdamW8bit), (optim.PagedAdamW, optim.AdamW),
                                         (optim.PagedLion8bit, optim.Lion8bit),
                                         (optim.PagedAdEMAMix8bit, optim.AdEMAMix8bit)])
def test_paged_optimizer_equals_the_plain_one(paged, plain):
    a, b = _big_params(), _big_params()
    opt_a, opt_b = paged(a, lr=1e-3), plain(b, lr=1e-3)
    _train(opt_a, a)
    _train(opt_b, b)
    assert getattr(opt_a.state[a[0]]["state1"], "is_paged", False)
    assert not getattr(opt_a.state[a[1]]["state1"], "is_paged", False)  # small: not worth paging
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@needs_gpu
def test_paged_states_larger_than_free_gpu_memory_still_train():
    torch.cuda.empty_cache()
    n = 64 * 1024 * 1024  # 256 MB of fp32 parameter; PagedAdamW32bit's two states take 512 MB
    params = [torch.nn.Parameter(torch.randn(n, device="cuda"))]
    params[0].grad = torch.randn(n, device="cuda")
    reference = [torch.nn.Parameter(params[0].detach().clone())]
    reference[0].grad = params[0].grad.clone()
    free, _ = torch.cuda.mem_get_info()
    blocker = torch.empty(max(free - 256 * 1024 * 1024, 0), dtype=torch.uint8, device="cuda")  # leave 256 MB
    try:
        opt = optim.PagedAdamW32bit(params, lr=1e-3)
        for _ in range(3):
            opt.step()
        torch.cuda.synchronize()
        assert torch.cuda.mem_get_info()[0] < 512 * 1024 * 1024  # the states could not all have been resident
    finally:
        del blocker
        torch.cuda.empty_cache()
    plain = optim.AdamW32bit(reference, lr=1e-3)
    for _ in range(3):
        plain.step()
    assert torch.equal(params[0], reference[0])
