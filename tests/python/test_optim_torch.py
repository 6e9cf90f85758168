"""lowbit.optim (docs/optim.md): bitsandbytes' optimizer classes for PyTorch, on the CPU and, where present,
a GPU; against torch.optim where the rules agree and against the functional ops they call."""

import copy
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lowbit  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.optim as optim  # noqa: E402


def _devices():
    out = ["cpu"]
    if torch.cuda.is_available() and lowbit._lowbit.built_with_cuda and lowbit.cuda_device_count() > 0:
        out.append("cuda")
    return out


DEVICES = _devices()


@pytest.fixture(autouse=True)
def _fresh_manager():
    optim.GlobalOptimManager.get_instance().initialize()
    yield


def _params(device, shapes=((67, 129), (300,), (5,)), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device=device, dtype=dtype)) for s in shapes]


def _grads(params, step, seed=1):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device=p.device, dtype=p.dtype)


def _run(opt, params, steps, seed=1):
    for step in range(steps):
        _grads(params, step, seed)
        opt.step()


# torch.optim classes whose rule is lowbit's (AdamW: torch decays before the update, lowbit after: O(lr² wd)).
TORCH_TWINS = [
    (optim.Adam, torch.optim.Adam, dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8)),
    (optim.AdamW, torch.optim.AdamW, dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=1e-2)),
    (optim.SGD, torch.optim.SGD, dict(lr=1e-2, momentum=0.9, weight_decay=1e-3)),
    (optim.RMSprop, torch.optim.RMSprop, dict(lr=1e-3, alpha=0.95, eps=1e-8, weight_decay=1e-3)),
    (optim.Adagrad, torch.optim.Adagrad, dict(lr=1e-2, eps=1e-10, weight_decay=1e-3)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ours,theirs,kw", TORCH_TWINS, ids=[t[0].__name__ for t in TORCH_TWINS])
def test_32bit_matches_torch_optim(device, ours, theirs, kw):
    a, b = _params(device), _params(device)
    _run(ours(a, **kw), a, 10)
    _run(theirs(b, **kw), b, 10)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def _lion_reference(p, m, g, lr, b1, b2, wd):
    p = p * (1 - lr * wd)
    p = p - lr * torch.sign(b1 * m + (1 - b1) * g)
    return p, b2 * m + (1 - b2) * g


def test_lion_matches_its_rule():
    a = _params("cpu", shapes=((1000,),))
    ref, m = a[0].detach().double().clone(), torch.zeros(1000, dtype=torch.float64)
    opt = optim.Lion(a, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    for step in range(5):
        _grads(a, step)
        ref, m = _lion_reference(ref, m, a[0].grad.double(), 1e-3, 0.9, 0.99, 0.1)
        opt.step()
    torch.testing.assert_close(a[0].detach().double(), ref, rtol=0, atol=1e-6)


def test_ademamix_matches_its_rule_with_warmups():
    a = _params("cpu", shapes=((500,),))
    p = a[0].detach().double().clone()
    m1, m2, nu = (torch.zeros(500, dtype=torch.float64) for _ in range(3))
    b1, b2, b3, alpha, lr, wd, eps = 0.9, 0.999, 0.9999, 5.0, 1e-3, 1e-2, 1e-8
    opt = optim.AdEMAMix(a, lr=lr, betas=(b1, b2, b3), alpha=alpha, t_alpha=4, t_beta3=4, weight_decay=wd, eps=eps)
    for step in range(1, 7):
        _grads(a, step)
        g = a[0].grad.double()
        alpha_t = min(step * alpha / 4, alpha)
        s = step / 4
        ln1, ln3 = math.log(b1), math.log(b3)
        beta3_t = min(math.exp(ln1 * ln3 / ((1 - s) * ln3 + s * ln1)), b3)
        m1 = b1 * m1 + (1 - b1) * g
        m2 = beta3_t * m2 + (1 - beta3_t) * g
        nu = b2 * nu + (1 - b2) * g * g
        c1, c2 = 1 - b1 ** step, 1 - b2 ** step
        p = p - lr * ((m1 / c1 + alpha_t * m2) / (nu.sqrt() / math.sqrt(c2) + eps))
        p = p * (1 - lr * wd)
        opt.step()
    torch.testing.assert_close(a[0].detach().double(), p, rtol=0, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_8bit_step_is_the_blockwise_op(device):
    """AdamW8bit's step is optimizer_update_8bit_blockwise on bitsandbytes' states, bit for bit."""
    a = _params(device, shapes=((64, 130),))
    opt = optim.AdamW8bit(a, lr=1e-3, weight_decay=1e-2)
    p = a[0].detach().clone()
    n = p.numel()
    blocks = (n + 255) // 256
    s1, s2 = torch.zeros(p.shape, dtype=torch.uint8, device=device), torch.zeros(p.shape, dtype=torch.uint8,
                                                                               device=device)
    q1 = torch.from_numpy(F.create_dynamic_map(True)).to(device)
    q2 = torch.from_numpy(F.create_dynamic_map(False)).to(device)
    m1, m2 = torch.zeros(blocks, device=device), torch.zeros(blocks, device=device)
    for step in range(1, 4):
        _grads(a, step)
        F.optimizer_update_8bit_blockwise("adam", a[0].grad, p, s1, s2, 0.9, 0.999, 0.0, 0.0, 1e-8, step, 1e-3, q1,
                                          q2, m1, m2, 1e-2)
        opt.step()
        st = opt.state[a[0]]
        assert st["step"] == step
        torch.testing.assert_close(a[0].detach(), p, rtol=0, atol=0)
        assert torch.equal(st["state1"], s1) and torch.equal(st["state2"], s2)
        assert torch.equal(st["absmax1"], m1) and torch.equal(st["absmax2"], m2)


EIGHT_AND_32 = [(optim.Adam8bit, optim.Adam32bit), (optim.AdamW8bit, optim.AdamW32bit), (optim.SGD8bit, optim.SGD32bit),
                 (optim.RMSprop8bit, optim.RMSprop32bit), (optim.Lion8bit, optim.Lion32bit),
                 (optim.Adagrad8bit, optim.Adagrad32bit), (optim.AdEMAMix8bit, optim.AdEMAMix32bit)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("eight,thirty_two", EIGHT_AND_32, ids=[t[0].__name__ for t in EIGHT_AND_32])
def test_8bit_tracks_32bit(device, eight, thirty_two):
    kw = {"lr": 1e-3, **({"momentum": 0.9} if eight is optim.SGD8bit else {})}
    shape = ((128, 96),)
    a, b, start = _params(device, shapes=shape), _params(device, shapes=shape), _params(device, shapes=shape)[0]
    opt8, opt32 = eight(a, **kw), thirty_two(b, **kw)
    _run(opt8, a, 8)
    _run(opt32, b, 8)
    assert opt8.state[a[0]]["state1"].dtype == torch.uint8
    assert opt32.state[b[0]]["state1"].dtype == torch.float32
    moved = (b[0] - start).abs().mean()
    assert (a[0] - b[0]).abs().mean() < 0.2 * moved  # the 8-bit states change the trajectory only a little


TENSORWISE = [(optim.LAMB8bit, optim.LAMB32bit, {}), (optim.LARS8bit, optim.LARS32bit, {"momentum": 0.9}),
              (optim.Adam8bit, optim.Adam32bit, {"block_wise": False}),
              (optim.SGD8bit, optim.SGD32bit, {"momentum": 0.9, "block_wise": False})]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("eight,thirty_two,kw", TENSORWISE, ids=[t[0].__name__ + str(t[2]) for t in TENSORWISE])
def test_tensorwise_8bit_tracks_32bit(device, eight, thirty_two, kw):
    shape = ((128, 96),)
    a, b, start = _params(device, shapes=shape), _params(device, shapes=shape), _params(device, shapes=shape)[0]
    opt8 = eight(a, lr=1e-3, **kw)
    opt32 = thirty_two(b, lr=1e-3, **{k: v for k, v in kw.items() if k != "block_wise"})
    _run(opt8, a, 8)
    _run(opt32, b, 8)
    st = opt8.state[a[0]]
    assert st["state1"].dtype == torch.uint8 and "max1" in st and "absmax1" not in st
    assert float(st["max1"]) > 0  # the maxima swap after each step: max1 holds the last step's
    moved = (b[0] - start).abs().mean()
    assert (a[0] - b[0]).abs().mean() < 0.25 * moved


@pytest.mark.parametrize("device", DEVICES)
def test_tensorwise_step_is_the_op_with_the_maxima_swapped(device):
    a = _params(device, shapes=((50, 100),))
    opt = optim.Adam8bit(a, lr=1e-3, block_wise=False)
    p = a[0].detach().clone()
    s1, s2 = (torch.zeros(p.shape, dtype=torch.uint8, device=device) for _ in range(2))
    q1 = torch.from_numpy(F.create_dynamic_map(True)).to(device)
    q2 = torch.from_numpy(F.create_dynamic_map(False)).to(device)
    mx = [torch.zeros(1, device=device) for _ in range(4)]
    for step in range(1, 4):
        _grads(a, step)
        F.optimizer_update_8bit("adam", a[0].grad, p, s1, s2, 0.9, 0.999, 1e-8, step, 1e-3, q1, q2, mx[0], mx[1],
                                mx[2], mx[3])
        mx = [mx[2], mx[3], mx[0], mx[1]]
        opt.step()
        st = opt.state[a[0]]
        assert torch.equal(a[0].detach(), p) and torch.equal(st["state1"], s1) and torch.equal(st["state2"], s2)
        assert torch.equal(st["max1"], mx[0]) and torch.equal(st["max2"], mx[1])


def test_small_tensors_keep_32bit_states_and_overrides_apply():
    params = _params("cpu", shapes=((100, 100), (100,), (64, 64)))
    mng = optim.GlobalOptimManager.get_instance()
    mng.register_parameters(params)
    mng.override_config(params[2], "optim_bits", 32)
    opt = optim.Adam8bit(params, lr=1e-3, min_8bit_size=4096)
    _run(opt, params, 1)
    assert opt.state[params[0]]["state1"].dtype == torch.uint8
    assert opt.state[params[1]]["state1"].dtype == torch.float32  # 100 < min_8bit_size
    assert opt.state[params[2]]["state1"].dtype == torch.float32  # overridden
    assert "absmax1" in opt.state[params[0]] and "qmap2" in opt.state[params[0]]


@pytest.mark.parametrize("cls", [optim.AdamW8bit, optim.AdamW, optim.Lion8bit, optim.AdEMAMix8bit])
def test_state_dict_round_trip_continues_identically(cls):
    a = _params("cpu", shapes=((80, 70), (33,)))
    opt = cls(a, lr=1e-3)
    _run(opt, a, 3)
    saved = copy.deepcopy(opt.state_dict())
    if cls in (optim.AdamW8bit, optim.Lion8bit, optim.AdEMAMix8bit):
        quant = saved["state"][0][optim.Optimizer8bit._FSDP_WRAPPED_QUANT_STATE_KEY]
        assert {"state1", "qmap1", "absmax1"} <= set(quant)
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    opt2 = cls(b, lr=1e-3)
    opt2.load_state_dict(saved)
    for step in range(3, 6):
        _grads(a, step)
        _grads(b, step)
        opt.step()
        opt2.step()
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("cls", [optim.AdamW8bit, optim.AdamW32bit])
def test_distributed_checkpoint_round_trip_continues_identically(cls, tmp_path):
    """torch.distributed.checkpoint (one process) saves and loads the optimizer through torch's state-dict helpers."""
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    helpers = pytest.importorskip("torch.distributed.checkpoint.state_dict")

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.ReLU(), torch.nn.Linear(300, 8))
        return model, cls(model.parameters(), lr=1e-3, min_8bit_size=1000)

    def step(model, opt, x):
        model(x).square().sum().backward()
        opt.step()
        opt.zero_grad()

    gen = torch.Generator().manual_seed(1)
    inputs = [torch.randn(4, 64, generator=gen) for _ in range(5)]
    model, opt = make()
    for x in inputs[:3]:
        step(model, opt, x)
    saved = {"model": helpers.get_model_state_dict(model), "optim": helpers.get_optimizer_state_dict(model, opt)}
    with warnings.catch_warnings():  # torch says it assumes one process, as asked
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(saved, checkpoint_id=str(tmp_path), no_dist=True)
    model2, opt2 = make()
    step(model2, opt2, inputs[0])  # states exist to be loaded into, as DCP loads in place
    target = {"model": helpers.get_model_state_dict(model2), "optim": helpers.get_optimizer_state_dict(model2, opt2)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(target, checkpoint_id=str(tmp_path), no_dist=True)
    helpers.set_model_state_dict(model2, target["model"])
    helpers.set_optimizer_state_dict(model2, opt2, target["optim"])
    for x in inputs[3:]:
        step(model, opt, x)
        step(model2, opt2, x)
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_percentile_clipping_scales_outlier_gradients(device):
    a = _params(device, shapes=((300,),))
    opt = optim.Adam(a, lr=1e-3, percentile_clipping=5)
    _run(opt, a, 3)
    hist = opt.state[a[0]]["gnorm_vec"]
    assert hist.shape == (100,) and bool((hist > 0).all())


@pytest.mark.parametrize("kw,message", [
    (dict(lr=-1.0), "Invalid learning rate"),
    (dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0"),
    (dict(eps=-1e-8), "Invalid epsilon"),
    (dict(weight_decay=-0.1), "Invalid weight_decay"),
    (dict(amsgrad=True), "amsgrad"),
    (dict(percentile_clipping=0), "percentile_clipping"),
])
def test_bad_arguments_are_clear_errors(kw, message):
    with pytest.raises(ValueError, match=message):
        optim.AdamW8bit(_params("cpu"), **kw)


def test_unsupported_variants_say_so():
    with pytest.raises(NotImplementedError, match="without momentum"):
        optim.SGD(_params("cpu"), lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD(_params("cpu"), lr=0.1, momentum=0.9, nesterov=True)
    with pytest.raises(NotImplementedError, match="centered"):
        optim.RMSprop(_params("cpu"), centered=True)
    with pytest.raises(ValueError, match="betas must be"):
        optim.AdEMAMix(_params("cpu"), betas=(0.9, 0.999))


def test_a_state_of_the_wrong_size_is_a_clear_error():
    p = torch.nn.Parameter(torch.randn(64, 64))
    opt = optim.Adam8bit([p], lr=1e-3)
    _run(opt, [p], 1)
    opt.state[p]["state1"] = torch.zeros(10, dtype=torch.uint8)  # as a mismatched checkpoint would leave it
    with pytest.raises(ValueError, match="optimizer_update_8bit_blockwise.*state1"):
        _run(opt, [p], 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_parameters_update_with_float32_states(dtype):
    a = _params("cpu", shapes=((64, 80),), dtype=dtype)
    opt = optim.AdamW8bit(a, lr=1e-2)
    before = a[0].detach().clone()
    _run(opt, a, 2)
    assert a[0].dtype == dtype and not torch.equal(a[0], before)
    assert opt.state[a[0]]["absmax1"].dtype == torch.float32


def _mlp(seed, width=64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                               torch.nn.GELU(), torch.nn.Linear(width, 1))


def _regression_data(n, g):
    x = torch.randn(n, 32, generator=g)
    return x, torch.sin(x[:, :4].sum(dim=1, keepdim=True)) + 0.1 * x[:, 4:5] + 0.1 * torch.randn(n, 1, generator=g)


def _train(make_opt, steps=500, seed=0):
    """The final training loss and the loss on fresh data of the same law. The model (6.4k weights) cannot
    memorize its 4096 noisy samples, so both losses stay above a floor every optimizer approaches alike (a
    model that memorizes drives plain AdamW's training loss towards 0, where a relative bound means nothing)."""
    model = _mlp(seed)
    g = torch.Generator().manual_seed(123)
    x, y = _regression_data(4096, g)
    x_new, y_new = _regression_data(4096, g)
    opt = make_opt(model.parameters())
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    with torch.no_grad():
        mse = torch.nn.functional.mse_loss
        return mse(model(x), y).item(), mse(model(x_new), y_new).item()


def test_adamw8bit_trains_an_mlp_as_well_as_torch_adamw():
    ours = _train(lambda ps: optim.AdamW8bit(ps, lr=2e-3, min_8bit_size=4096))
    ref = _train(lambda ps: torch.optim.AdamW(ps, lr=2e-3))
    assert ours[0] <= ref[0] * 1.02, ("training loss", ours, ref)
    assert ours[1] <= ref[1] * 1.02, ("loss on fresh data", ours, ref)


class _OneByOne(optim.AdamW8bit):
    def _batch_key(self, group, p, gindex, pindex):
        return None


class _OneByOne32(optim.AdamW):
    def _batch_key(self, group, p, gindex, pindex):
        return None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batched,single", [(optim.AdamW8bit, _OneByOne), (optim.AdamW, _OneByOne32)])
def test_batched_step_equals_one_parameter_at_a_time(device, batched, single):
    shapes = ((70, 90), (4096 + 300,), (33,), (128, 64), (5000,))
    a, b = _params(device, shapes=shapes), _params(device, shapes=shapes)
    opt_a, opt_b = batched(a, lr=1e-3), single(b, lr=1e-3)
    _run(opt_a, a, 4)
    _run(opt_b, b, 4)
    assert opt_a._batch_key(opt_a.param_groups[0], a[0], 0, 0) == opt_a._batch_key(opt_a.param_groups[0], a[3], 0, 3)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    saved = opt_a.state_dict()
    c = [torch.nn.Parameter(x.detach().clone()) for x in a]
    opt_c = batched(c, lr=1e-3)
    opt_c.load_state_dict(saved)
    if batched is optim.AdamW8bit:  # the loaded maps are shared again, so the loaded state batches too
        assert opt_c.state[c[0]]["qmap1"] is opt_c.state[c[3]]["qmap1"]
    _run(opt_c, c, 2, seed=7)
    _run(opt_a, a, 2, seed=7)
    for x, y in zip(a, c):
        assert torch.equal(x, y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", [optim.AdamW, optim.AdamW8bit])
def test_percentile_clipping_step_equals_the_functional_calls(device, cls):
    """The clipped step (every scale on the device, then batched updates) gives each parameter what
    percentile_clipping's host read-back followed by its own update gives."""
    shapes = ((64, 80), (5000,), (300,), (5000,))
    a, b = _params(device, shapes=shapes), _params(device, shapes=shapes)
    opt_a = cls(a, lr=1e-3, percentile_clipping=5)

    class Reference(cls):  # an update_step of its own: one parameter at a time, clipped through the host read-back
        def update_step(self, group, p, gindex, pindex):
            state = self.state[p]
            scale = F.percentile_clipping(p.grad, state["gnorm_vec"], state["step"] + 1, 5)[2]
            self._clip_scales = {id(p): float(scale)}
            return super().update_step(group, p, gindex, pindex)

    opt_b = Reference(b, lr=1e-3, percentile_clipping=5)
    for step in range(6):
        _grads(a, step)
        _grads(b, step)
        if step >= 4:  # outlier gradients, which the clipping scales down
            a[1].grad.mul_(100.0)
            b[1].grad.mul_(100.0)
        for ps in (a, b):  # the last parameter's gradients are the second's: one scale, so they share a call
            ps[3].grad = ps[1].grad.clone()
        opt_a.step()
        opt_b.step()
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    for x, y in zip(a, b):
        assert torch.equal(opt_a.state[x]["gnorm_vec"], opt_b.state[y]["gnorm_vec"])



@pytest.mark.skipif(not torch.cuda.is_available() or not lowbit.cuda_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", [optim.AdamW, optim.AdamW8bit, optim.Adam8bit])
def test_a_clipped_step_never_waits_for_the_device(cls):
    """percentile clipping keeps its scale on the device: torch's sync debug mode raises on any wait."""
    a = _params("cuda", shapes=((64, 80), (5000,), (300,)))
    opt = cls(a, lr=1e-3, percentile_clipping=5, block_wise=cls is not optim.Adam8bit)
    _run(opt, a, 1)  # the states' first allocation
    _grads(a, 7)
    torch.cuda.set_sync_debug_mode("error")
    try:
        opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()



def test_a_module_override_stays_with_its_parameter():
    """register_module_override (StableEmbedding's 32-bit states) applies to that module's parameter only: a later
    optimizer whose first parameter sits where the overridden one sat keeps its 8-bit states."""
    emb = torch.nn.Embedding(300, 64)
    optim.GlobalOptimManager.get_instance().register_module_override(emb, "weight", {"optim_bits": 32})
    opt = optim.Adam8bit([emb.weight], lr=1e-3)
    emb.weight.grad = torch.ones_like(emb.weight)
    opt.step()
    assert opt.state[emb.weight]["state1"].dtype == torch.float32
    other = _params("cpu", shapes=((300, 64),))
    opt2 = optim.Adam8bit(other, lr=1e-3)
    _grads(other, 0)
    opt2.step()
    assert opt2.state[other[0]]["state1"].dtype == torch.uint8


def test_multi_lists_of_any_torch_tensors_give_the_single_calls_values():
    """The list export: parameters that require grad as they are, a strided gradient copied (the rest of its list
    exported directly), each parameter what its single call gives; a strided buffer is an error naming its entry."""
    gen = torch.Generator().manual_seed(5)
    p = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (300, 40)]
    g = [torch.randn(300, generator=gen), torch.randn(80, generator=gen)[::2]]
    s1, s2 = [torch.zeros(n) for n in (300, 40)], [torch.zeros(n) for n in (300, 40)]
    ref = [(x.detach().clone(), torch.zeros(x.numel()), torch.zeros(x.numel())) for x in p]
    for (rp, r1, r2), grad in zip(ref, g):
        F.optimizer_update_32bit("adam", grad.contiguous(), rp, r1, 0.9, 1e-8, 1, 1e-3, r2, 0.999)
    F.optimizer_update_32bit_multi("adam", g, p, s1, 0.9, 1e-8, 1, 1e-3, s2, 0.999)
    for (rp, r1, r2), x, a, b in zip(ref, p, s1, s2):
        assert torch.equal(x.detach(), rp) and torch.equal(a, r1) and torch.equal(b, r2)
    with pytest.raises(ValueError, match=r"optimizer_update_32bit_multi: p\[1\] must be contiguous"):
        F.optimizer_update_32bit_multi("adam", g, [p[0], torch.zeros(80)[::2]], s1, 0.9, 1e-8, 1, 1e-3, s2, 0.999)
