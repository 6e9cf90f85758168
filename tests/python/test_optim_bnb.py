"""lowbit.optim against bitsandbytes.optim itself (where bitsandbytes and a GPU are present): a state saved by
one library loads into the other and training continues as it would have in the first."""

import copy

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)
bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed")

import lowbit  # noqa: E402
import lowbit.optim as optim  # noqa: E402

if not lowbit._lowbit.built_with_cuda or lowbit.cuda_device_count() == 0:
    pytest.skip("lowbit was built without CUDA or sees no device", allow_module_level=True)


def _params(seed=0, ragged=True):
    g = torch.Generator().manual_seed(seed)
    shapes = ((256, 300), (4096 + 77,), (64,)) if ragged else ((256, 300), (4096 + 256,), (64,))
    return [torch.nn.Parameter(torch.randn(s, generator=g).cuda()) for s in shapes]


def _step(opt, params, step):
    g = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).cuda()
    opt.step()


PAIRS = [("AdamW8bit", dict(lr=1e-3, weight_decay=1e-2)), ("Adam8bit", dict(lr=1e-3)),
         ("Lion8bit", dict(lr=1e-4)), ("AdamW", dict(lr=1e-3)), ("AdEMAMix8bit", dict(lr=1e-3))]


@pytest.mark.parametrize("name,kw", PAIRS, ids=[p[0] for p in PAIRS])
@pytest.mark.parametrize("direction", ["bnb_to_lowbit", "lowbit_to_bnb"])
def test_state_dict_moves_between_libraries(name, kw, direction):
    if not hasattr(bnb.optim, name):
        pytest.skip(f"bitsandbytes {bnb.__version__} has no optim.{name}")
    first, second = (bnb.optim, optim) if direction == "bnb_to_lowbit" else (optim, bnb.optim)
    # bitsandbytes' ademamix reads m2's scales from the wrong block unless 256 divides n (docs/optim.md)
    a = _params(ragged=name != "AdEMAMix8bit")
    opt_a = getattr(first, name)(a, **kw)
    for step in range(3):
        _step(opt_a, a, step)
    saved = copy.deepcopy(opt_a.state_dict())
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    opt_b = getattr(second, name)(b, **kw)
    opt_b.load_state_dict(saved)
    for key, value in opt_a.state[a[0]].items():
        other = opt_b.state[b[0]][key]
        if isinstance(value, torch.Tensor):
            assert other.dtype == value.dtype and other.shape == value.shape and torch.equal(other, value), key
        else:
            assert other == value, key
    for step in range(3, 8):
        _step(opt_a, a, step)
        _step(opt_b, b, step)
    for x, y in zip(a, b):
        # the libraries' kernels differ in the last bits (bitsandbytes' fast division); the states stay in step
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    s_a, s_b = opt_a.state[a[0]]["state1"], opt_b.state[b[0]]["state1"]
    if s_a.dtype == torch.uint8:  # a code or two moves where an element's value sits near a code boundary
        far = ((s_a.int() - s_b.int()).abs() > 1).float().mean().item()
        assert far < 1e-3, f"{far:.2%} of state1's codes are more than one code apart"
