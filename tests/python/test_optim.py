"""optimizer_update_32bit through Python (docs/optim.md): in place, NumPy arrays (and PyTorch's where present),
against a float64 model of the rules."""

import numpy as np
import pytest

import lowbit.functional as F
from backends import require_writable


def _model_adam(p, m, v, g, lr, b1, b2, eps, step, wd):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    c1, c2 = 1 - b1 ** step, np.sqrt(1 - b2 ** step)
    p = p - lr * c2 / c1 * m / (np.sqrt(v) + eps * c2)
    return p * (1 - lr * wd), m, v


def test_adam_steps_match_float64(rng):
    n = 1001
    p = rng.standard_normal(n).astype(np.float32)
    s1, s2 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mp, mm, mv = p.astype(np.float64), np.zeros(n), np.zeros(n)
    for step in range(1, 5):
        g = rng.standard_normal(n).astype(np.float32)
        F.optimizer_update_32bit("adam", g, p, s1, 0.9, 1e-8, step, 1e-2, s2, 0.999, weight_decay=0.01)
        mp, mm, mv = _model_adam(mp, mm, mv, g.astype(np.float64), 1e-2, np.float32(0.9), np.float32(0.999),
                                 np.float32(1e-8), step, np.float32(0.01))
        np.testing.assert_allclose(p, mp, rtol=0, atol=2e-6)
        np.testing.assert_allclose(s1, mm, rtol=0, atol=2e-6)
        np.testing.assert_allclose(s2, mv, rtol=0, atol=2e-6)


def test_momentum_takes_the_gradient_at_step_one(rng):
    g = rng.standard_normal(64).astype(np.float32)
    p = np.zeros(64, np.float32)
    s1 = np.full(64, 123.0, np.float32)  # ignored at step 1
    F.optimizer_update_32bit("momentum", g, p, s1, 0.9, 0.0, 1, 0.5)
    np.testing.assert_array_equal(s1, g)
    np.testing.assert_allclose(p, -0.5 * g, rtol=1e-7)


def test_ademamix_keeps_two_moments_in_state1(rng):
    n = 33
    g = rng.standard_normal(n).astype(np.float32)
    p = np.zeros(n, np.float32)
    s1, s2 = np.zeros(2 * n, np.float32), np.zeros(n, np.float32)
    F.optimizer_update_32bit("ademamix", g, p, s1, 0.9, 1e-8, 1, 1e-3, s2, 0.999, beta3=0.9999, alpha=5.0)
    np.testing.assert_allclose(s1[:n], np.float32(1 - np.float32(0.9)) * g, rtol=1e-6)
    np.testing.assert_allclose(s1[n:], np.float32(1 - np.float32(0.9999)) * g, rtol=1e-5)


def test_lamb_writes_the_update_norm_and_scales_the_update(rng):
    n = 257
    g = rng.standard_normal(n).astype(np.float32)
    p = rng.standard_normal(n).astype(np.float32)
    p0 = p.copy()
    s1, s2, unorm = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(1, np.float32)
    F.optimizer_update_32bit("lamb", g, p, s1, 0.9, 1e-8, 1, 1e-1, s2, 0.999, unorm_vec=unorm, max_unorm=0.01)
    # Step 1: the bias-corrected update is sign(g) (|g| >> eps), so its squared norm is n.
    assert unorm[0] == pytest.approx(n, rel=1e-5)
    # Scaled to 0.01 * |p0| / sqrt(n) per element.
    scale = 0.01 * np.linalg.norm(p0.astype(np.float64)) / np.sqrt(n)
    np.testing.assert_allclose(p0 - p, 1e-1 * scale * np.sign(g), rtol=1e-4)


def test_bf16_bits_as_uint16_stay_in_place(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n = 40
    g = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    p = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    p0 = p.astype(np.float32)
    s1 = np.zeros(n, np.float32)
    F.optimizer_update_32bit("lion", g, p, s1, 0.9, 0.0, 1, 1e-2, beta2=0.99)
    moved = p0 - p.astype(np.float32)
    assert np.all(np.abs(np.abs(moved) - 1e-2) <= np.abs(p0) * 2.0 ** -7 + 1e-3)


def test_errors_name_the_argument(rng):
    g = np.ones(8, np.float32)
    p = np.ones(8, np.float32)
    s1 = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="optimizer_update_32bit: optimizer_name must be one of adam, momentum"):
        F.optimizer_update_32bit("adamw", g, p, s1, 0.9, 1e-8, 1, 1e-3)
    with pytest.raises(ValueError, match="optimizer_update_32bit: state2"):
        F.optimizer_update_32bit("adam", g, p, s1, 0.9, 1e-8, 1, 1e-3)
    with pytest.raises(ValueError, match="momentum keeps one state"):
        F.optimizer_update_32bit("momentum", g, p, s1, 0.9, 0.0, 1, 1e-3, state2=np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="step must be at least 1"):
        F.optimizer_update_32bit("momentum", g, p, s1, 0.9, 0.0, 0, 1e-3)
    with pytest.raises(ValueError, match="p must have g's dtype float32"):
        F.optimizer_update_32bit("momentum", g, p.astype(np.float16), s1, 0.9, 0.0, 1, 1e-3)


@pytest.mark.parametrize("name", ["adam", "lamb", "lion", "ademamix"])
def test_every_backend_matches_numpy(backend, rng, name):
    """The same step on each array backend (CUDA on torch-cuda / CuPy) as on NumPy's CPU arrays."""
    require_writable(backend)
    n = 3001
    two = name in ("adam", "lamb", "ademamix")
    arrays = {
        "g": rng.standard_normal(n).astype(np.float32),
        "p": rng.standard_normal(n).astype(np.float32),
        "state1": (0.1 * rng.standard_normal(2 * n if name == "ademamix" else n)).astype(np.float32),
        "state2": np.abs(0.1 * rng.standard_normal(n)).astype(np.float32) if two else None,
        "unorm_vec": np.zeros(1, np.float32),
    }
    kwargs = dict(beta2=0.99, weight_decay=0.01, max_unorm=0.01, beta3=0.999, alpha=5.0)

    def step(a):
        F.optimizer_update_32bit(name, a["g"], a["p"], a["state1"], 0.9, 1e-6, 3, 1e-2, state2=a["state2"],
                                 unorm_vec=a["unorm_vec"], **kwargs)

    want = {k: None if v is None else v.copy() for k, v in arrays.items()}
    step(want)
    got = {k: None if v is None else backend.array(v) for k, v in arrays.items()}
    step(got)
    for k in ("p", "state1", "state2", "unorm_vec"):
        if want[k] is not None:
            np.testing.assert_allclose(backend.numpy(got[k]), want[k], rtol=1e-6, atol=1e-7, err_msg=k)


# ------------------------------------------------- 8-bit blockwise states


def _blockwise_arrays(rng, name, n):
    """Inputs of one 8-bit blockwise step: states quantized from random moments with the dynamic maps."""
    blocks = -(-n // 256)
    two = name in ("adam", "ademamix")
    n1 = 2 * n if name == "ademamix" else n
    return {
        "g": rng.standard_normal(n).astype(np.float32),
        "p": rng.standard_normal(n).astype(np.float32),
        "state1": rng.integers(0, 256, n1).astype(np.uint8),
        "state2": rng.integers(128, 256, n).astype(np.uint8) if two else None,
        "qmap1": F.create_dynamic_map(True),
        "qmap2": F.create_dynamic_map(False) if two else None,
        "absmax1": np.abs(0.1 * rng.standard_normal(n1 // n * blocks)).astype(np.float32),
        "absmax2": np.abs(0.1 * rng.standard_normal(blocks)).astype(np.float32) if two else None,
    }


def _blockwise_step(name, a, step=3, **kwargs):
    F.optimizer_update_8bit_blockwise(name, a["g"], a["p"], a["state1"], a["state2"], 0.9, 0.99, 0.999, 5.0, 1e-6,
                                      step, 1e-2, a["qmap1"], a["qmap2"], a["absmax1"], a["absmax2"], **kwargs)


def test_8bit_blockwise_momentum_step_one(rng):
    """Step 1: m = g, so each block's absmax is max |g| and p moves by -lr * g."""
    n = 600
    a = _blockwise_arrays(rng, "momentum", n)
    p0 = a["p"].copy()
    _blockwise_step("momentum", a, step=1)
    np.testing.assert_array_equal(a["p"], p0 - np.float32(1e-2) * a["g"])
    want = [np.abs(a["g"][b * 256:(b + 1) * 256]).max() for b in range(3)]
    np.testing.assert_array_equal(a["absmax1"], np.array(want, np.float32))
    m = a["qmap1"][a["state1"]] * np.repeat(a["absmax1"], 256)[:n]
    gap = np.diff(a["qmap1"]).max()
    assert np.all(np.abs(m - a["g"]) <= np.repeat(a["absmax1"], 256)[:n] * gap / 2 * (1 + 1e-6))


def test_8bit_blockwise_keyword_arguments_are_bitsandbytes(rng):
    a = _blockwise_arrays(rng, "rmsprop", 300)
    b = {k: None if v is None else v.copy() for k, v in a.items()}
    _blockwise_step("rmsprop", a, weight_decay=0.01, gnorm_scale=0.5, skip_zeros=True)
    F.optimizer_update_8bit_blockwise(optimizer_name="rmsprop", g=b["g"], p=b["p"], state1=b["state1"], state2=None,
                                      beta1=0.9, beta2=0.99, beta3=0.999, alpha=5.0, eps=1e-6, step=3, lr=1e-2,
                                      qmap1=b["qmap1"], qmap2=None, absmax1=b["absmax1"], absmax2=None,
                                      weight_decay=0.01, gnorm_scale=0.5, skip_zeros=True)
    for k in ("p", "state1", "absmax1"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_8bit_blockwise_errors_name_the_argument(rng):
    a = _blockwise_arrays(rng, "adam", 300)
    with pytest.raises(ValueError, match="optimizer_update_8bit_blockwise: optimizer must be one of adam, momentum"):
        _blockwise_step("lamb", a)
    with pytest.raises(ValueError, match="optimizer_update_8bit_blockwise: optimizer_name must be one of"):
        _blockwise_step("adamw", a)
    with pytest.raises(ValueError, match="momentum keeps one state: state2 must be absent"):
        _blockwise_step("momentum", a)
    with pytest.raises(ValueError, match="optimizer_update_8bit_blockwise: absmax1"):
        _blockwise_step("adam", dict(a, absmax1=np.zeros(1, np.float32)))
    with pytest.raises(TypeError, match="optimizer_update_8bit_blockwise: state1"):
        _blockwise_step("adam", dict(a, state1=np.zeros(300, np.float32)))
    with pytest.raises(ValueError, match="step must be at least 1"):
        _blockwise_step("adam", a, step=0)
    with pytest.raises(TypeError, match="optimizer_update_8bit_blockwise: optimizer_name must be a string"):
        _blockwise_step(3, a)
    with pytest.raises(TypeError, match="optimizer_update_8bit_blockwise: skip_zeros must be True or False"):
        _blockwise_step("adam", a, skip_zeros="yes")


@pytest.mark.parametrize("name", ["adam", "momentum", "lion", "adagrad", "ademamix"])
def test_8bit_blockwise_every_backend_matches_numpy(backend, rng, name):
    """The same step on each array backend (CUDA on torch-cuda / CuPy) as on NumPy's CPU arrays: the codes and
    absmax bit for bit, p to the last bit of fp32 (the CUDA kernel's arithmetic is the CPU's)."""
    require_writable(backend)
    arrays = _blockwise_arrays(rng, name, 3001)
    want = {k: None if v is None else v.copy() for k, v in arrays.items()}
    _blockwise_step(name, want, weight_decay=0.01)
    got = {k: None if v is None else backend.array(v) for k, v in arrays.items()}
    _blockwise_step(name, got, weight_decay=0.01)
    for k in ("p", "state1", "state2", "absmax1", "absmax2"):
        if want[k] is not None:
            np.testing.assert_array_equal(backend.numpy(got[k]), want[k], err_msg=k)


# ----------------------------------------------------- percentile clipping


def _model_percentile(grads, percentile):
    """bitsandbytes' percentile_clipping over a run of steps, in float64 with the history stored as float32."""
    vec = np.zeros(100, np.float32)
    out = []
    for step, g in enumerate(grads, start=1):
        norm2 = np.float32(np.sum(g.astype(np.float64) ** 2))
        if step == 1:
            vec[:] = norm2
        else:
            vec[step % 100] = norm2
        current = np.sqrt(vec[step % 100])
        clip = np.sqrt(np.sort(vec)[percentile])
        out.append((vec.copy(), current, clip, clip / current if current > clip else 1.0))
    return out


def test_percentile_clipping_matches_the_model(rng):
    grads = [(rng.standard_normal(500) * (1 + 9 * (i % 5 == 4))).astype(np.float32) for i in range(30)]
    vec = np.zeros(100, np.float32)
    for step, (g, (want_vec, current, clip, scale)) in enumerate(zip(grads, _model_percentile(grads, 5)), start=1):
        got = F.percentile_clipping(g, vec, step, percentile=5)
        np.testing.assert_allclose(vec, want_vec, rtol=1.2e-7, err_msg=f"step {step}")
        np.testing.assert_allclose(got, (current, clip, scale), rtol=3e-7, err_msg=f"step {step}")
        assert all(isinstance(v, np.float32) for v in got)
    assert any(s < 1.0 for *_, s in _model_percentile(grads, 5)), "no step clipped: the test would miss the scale"


def test_percentile_clipping_takes_half_and_bfloat16(rng):
    g = rng.standard_normal((16, 16)).astype(np.float16)
    vec = np.zeros(100, np.float32)
    current, clip, scale = F.percentile_clipping(g, vec, 1)
    want = np.float32(np.sum(g.astype(np.float64) ** 2))
    np.testing.assert_allclose(vec, np.full(100, want), rtol=1.2e-7)
    assert scale == 1.0 and current == clip
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b = rng.standard_normal(33).astype(ml_dtypes.bfloat16)
    F.percentile_clipping(b, vec, 2)
    np.testing.assert_allclose(vec[2], np.sum(b.astype(np.float64) ** 2), rtol=1.2e-7)


def test_percentile_clipping_errors_name_the_argument():
    g = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="percentile_clipping: gnorm_vec"):
        F.percentile_clipping(g, np.zeros(99, np.float32), 1)
    with pytest.raises(TypeError, match="percentile_clipping: gnorm_vec dtype must be float32"):
        F.percentile_clipping(g, np.zeros(100, np.float16), 1)
    with pytest.raises(TypeError, match="percentile_clipping: grad dtype must be one of"):
        F.percentile_clipping(np.ones(8, np.int32), np.zeros(100, np.float32), 1)
    with pytest.raises(ValueError, match="step must be at least 1"):
        F.percentile_clipping(g, np.zeros(100, np.float32), 0)
    with pytest.raises(ValueError, match="percentile_clipping: percentile must be from 0 to 99"):
        F.percentile_clipping(g, np.zeros(100, np.float32), 1, percentile=100)
    with pytest.raises(TypeError, match="percentile_clipping: step must be an integer"):
        F.percentile_clipping(g, np.zeros(100, np.float32), 1.5)


def test_percentile_clipping_every_backend_matches_numpy(backend, rng):
    """The same steps on each array backend (CUDA on torch-cuda / CuPy) as on NumPy's CPU arrays."""
    require_writable(backend)
    want_vec, got_vec = np.zeros(100, np.float32), backend.array(np.zeros(100, np.float32))
    for step in (1, 2, 3, 101):
        g = rng.standard_normal(5001).astype(np.float32)
        want = F.percentile_clipping(g, want_vec, step, 3)
        got = F.percentile_clipping(backend.array(g), got_vec, step, 3)
        np.testing.assert_allclose(backend.numpy(got_vec), want_vec, rtol=1.2e-7, err_msg=f"step {step}")
        np.testing.assert_allclose(got, want, rtol=3e-7, err_msg=f"step {step}")



def test_percentile_clipping_scale_stays_on_the_device(backend, rng):
    """With ``scale=`` the step's gnorm_scale is written on the device: the host path's value, bit for bit, over
    steps that clip and steps that do not; nothing comes back but ``scale`` itself."""
    require_writable(backend)
    grads = [(rng.standard_normal(700) * (1 + 30 * (i % 4 == 3))).astype(np.float32) for i in range(12)]
    want_vec, got_vec = np.zeros(100, np.float32), backend.array(np.zeros(100, np.float32))
    scale = backend.array(np.zeros(1, np.float32))
    clipped = 0
    for step, g in enumerate(grads, start=1):
        want = F.percentile_clipping(g, want_vec, step, 7)[2]
        assert F.percentile_clipping(backend.array(g), got_vec, step, 7, scale=scale) is scale
        got = backend.numpy(scale)[0]
        assert got == np.float32(want), f"step {step}: {got} != {want}"
        clipped += want < 1.0
    assert clipped > 0, "no step clipped: the test would miss the scale"


def test_updates_take_the_gradient_scale_as_a_device_array(backend, rng):
    """gnorm_scale as a one-element float32 array (read by the kernel) gives the bytes of the same number on the
    host, for the single updates and for a list with per-parameter scales (None: none)."""
    require_writable(backend)
    n, scale = 3001, np.float32(0.40625)
    g = rng.standard_normal(n).astype(np.float32)
    p0 = rng.standard_normal(n).astype(np.float32)
    s1 = (rng.standard_normal(n) * 0.1).astype(np.float32)
    s2 = np.abs(rng.standard_normal(n) * 0.1).astype(np.float32)

    def run32(gnorm_scale, arrays):
        F.optimizer_update_32bit("adam", arrays[0], arrays[1], arrays[2], 0.9, 1e-6, 3, 1e-2, arrays[3], 0.99,
                                 0.01, gnorm_scale)
    def fresh():
        return [backend.array(x.copy()) for x in (g, p0, s1, s2)]

    want = [g, p0.copy(), s1.copy(), s2.copy()]
    run32(0.75 * scale, want)
    got = fresh()
    run32(backend.array(np.array([0.75 * scale], np.float32)), got)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(backend.numpy(got[k]), want[k])
    # the multi op: entry 0 with a device scale, entry 1 without
    lists = [fresh(), fresh()]
    F.optimizer_update_32bit_multi("adam", [e[0] for e in lists], [e[1] for e in lists], [e[2] for e in lists],
                                   0.9, 1e-6, 3, 1e-2, [e[3] for e in lists], 0.99, 0.01,
                                   [backend.array(np.array([0.75 * scale], np.float32)), None])
    plain = [g, p0.copy(), s1.copy(), s2.copy()]
    run32(1.0, plain)
    for k in (1, 2, 3):
        np.testing.assert_array_equal(backend.numpy(lists[0][k]), want[k])
        np.testing.assert_array_equal(backend.numpy(lists[1][k]), plain[k])
    assert not np.array_equal(want[1], plain[1])
    with pytest.raises(ValueError, match="optimizer_update_32bit: clip_scale"):
        run32(backend.array(np.ones(2, np.float32)), fresh())


# ----------------------------------------------------- 8-bit tensor-wise states


def _tensorwise_arrays(rng, name, n):
    two = name in ("adam", "lamb")
    qmap1 = F.create_dynamic_map(True)
    return dict(
        g=rng.standard_normal(n).astype(np.float32),
        p=rng.standard_normal(n).astype(np.float32),
        state1=rng.integers(127 if name == "rmsprop" else 0, 256, n).astype(np.uint8),
        state2=rng.integers(0, 256, n).astype(np.uint8) if two else None,
        qmap1=qmap1,
        qmap2=F.create_dynamic_map(False) if two else None,
        max1=np.array([0.3], np.float32),
        max2=np.array([0.02], np.float32) if two else None,
        new_max1=np.zeros(1, np.float32),
        new_max2=np.zeros(1, np.float32) if two else None,
        unorm_vec=np.zeros(1, np.float32) if name not in ("rmsprop", "lion") else None,
    )


def _tensorwise_step(name, a, step=1, **kw):
    F.optimizer_update_8bit(name, a["g"], a["p"], a["state1"], a["state2"], 0.9, 0.995, 1e-6, step, 1e-2,
                            a["qmap1"], a["qmap2"], a["max1"], a["max2"], a["new_max1"], a["new_max2"],
                            unorm_vec=a["unorm_vec"], **kw)


def test_8bit_momentum_step_one_stores_the_gradient(rng):
    n = 1001
    a = _tensorwise_arrays(rng, "momentum", n)
    p0, g = a["p"].copy(), a["g"]
    _tensorwise_step("momentum", a)
    new_max = np.abs(g).max()
    assert a["new_max1"][0] == new_max
    assert a["unorm_vec"][0] == pytest.approx(float((g.astype(np.float64) ** 2).sum()), rel=1e-6)
    np.testing.assert_array_equal(a["p"], p0 + np.float32(-1e-2) * g)
    gap = np.diff(a["qmap1"]).max()
    assert np.abs(a["qmap1"][a["state1"]] * new_max - g).max() <= gap / 2 * new_max * (1 + 1e-6)


def test_8bit_adam_steps_track_float64(rng):
    """Several steps, the caller swapping max and new_max as bitsandbytes does: the stored states follow the rule."""
    n = 2049
    a = _tensorwise_arrays(rng, "adam", n)
    a["state1"][:] = 127  # small first moments
    a["state2"][:] = 0
    m, v = a["qmap1"][a["state1"]] * a["max1"][0], a["qmap2"][a["state2"]] * a["max2"][0]
    m, v = m.astype(np.float64), v.astype(np.float64)
    for step in range(1, 5):
        a["g"] = rng.standard_normal(n).astype(np.float32)
        _tensorwise_step("adam", a, step, weight_decay=0.01)
        m = 0.9 * m + 0.1 * a["g"]
        v = 0.995 * v + 0.005 * a["g"].astype(np.float64) ** 2
        assert a["new_max1"][0] == pytest.approx(np.abs(m).max(), rel=1e-5)
        stored_m = a["qmap1"][a["state1"]] * a["new_max1"][0]
        assert np.abs(stored_m - m).max() <= np.diff(a["qmap1"]).max() * a["new_max1"][0]
        m, v = stored_m.astype(np.float64), (a["qmap2"][a["state2"]] * a["new_max2"][0]).astype(np.float64)
        a["max1"], a["new_max1"] = a["new_max1"], a["max1"]
        a["max2"], a["new_max2"] = a["new_max2"], a["max2"]


def test_8bit_errors_name_the_argument(rng):
    a = _tensorwise_arrays(rng, "adam", 300)
    with pytest.raises(ValueError, match="optimizer_update_8bit: optimizer must be one of"):
        _tensorwise_step("ademamix", a)
    with pytest.raises(ValueError, match="momentum keeps one state: state2 must be absent"):
        _tensorwise_step("momentum", a)
    with pytest.raises(ValueError, match="optimizer_update_8bit: max1 must have 1 element"):
        _tensorwise_step("adam", dict(a, max1=np.zeros(2, np.float32)))
    with pytest.raises(ValueError, match="lion has no trust ratio"):
        _tensorwise_step("lion", dict(_tensorwise_arrays(rng, "lion", 300)), max_unorm=1.0)


@pytest.mark.parametrize("name", ["adam", "lamb", "momentum", "lars", "rmsprop", "lion"])
def test_8bit_every_backend_matches_numpy(backend, rng, name):
    """The same step on each array backend (CUDA on torch-cuda / CuPy) as on NumPy's CPU arrays: the codes, new
    maxima and p bit for bit (the CUDA kernels' arithmetic is the CPU's)."""
    require_writable(backend)
    arrays = _tensorwise_arrays(rng, name, 3001)
    kw = dict(weight_decay=0.01, max_unorm=0.001 if name in ("lamb", "lars") else 0.0)
    want = {k: None if v is None else v.copy() for k, v in arrays.items()}
    _tensorwise_step(name, want, 2, **kw)
    got = {k: None if v is None else backend.array(v) for k, v in arrays.items()}
    _tensorwise_step(name, got, 2, **kw)
    for k in ("state1", "state2", "new_max1", "new_max2"):
        if want[k] is not None:
            np.testing.assert_array_equal(backend.numpy(got[k]), want[k], err_msg=k)
    if kw["max_unorm"] > 0:  # the trust ratio's float64 norms add in another order on CUDA
        np.testing.assert_array_max_ulp(backend.numpy(got["p"]), want["p"], maxulp=1)
    else:
        np.testing.assert_array_equal(backend.numpy(got["p"]), want["p"], err_msg="p")


def _mixed(rng, sizes, two, n_state1=None):
    g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    p = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    s1 = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in sizes]
    s2 = [np.abs(0.1 * rng.standard_normal(n)).astype(np.float32) for n in sizes] if two else None
    return g, p, s1, s2


@pytest.mark.parametrize("name", ["adam", "lamb", "momentum", "lion"])
def test_multi_32bit_matches_single_calls(rng, name):
    sizes = [1, 0, 7, 1037, 40000, 300]
    two = name in ("adam", "lamb")
    g, p, s1, s2 = _mixed(rng, sizes, two)
    norms = name == "lamb"
    unorm = [np.zeros(1, np.float32) for _ in sizes] if norms else None
    copies = [a.copy() for a in p], [a.copy() for a in s1], None if s2 is None else [a.copy() for a in s2]
    kw = dict(beta2=0.99, weight_decay=0.01, max_unorm=0.01 if norms else 0.0)
    F.optimizer_update_32bit_multi(name, g, p, s1, 0.9, 1e-6, 3, 1e-2, state2=s2, unorm_vec=unorm, **kw)
    for i in range(len(sizes)):
        u = np.zeros(1, np.float32) if norms else None
        F.optimizer_update_32bit(name, g[i], copies[0][i], copies[1][i], 0.9, 1e-6, 3, 1e-2,
                                 state2=None if s2 is None else copies[2][i], unorm_vec=u, **kw)
        np.testing.assert_array_equal(p[i], copies[0][i])
        np.testing.assert_array_equal(s1[i], copies[1][i])
        if s2 is not None:
            np.testing.assert_array_equal(s2[i], copies[2][i])
        if norms:
            np.testing.assert_array_equal(unorm[i], u)


@pytest.mark.parametrize("name", ["adam", "momentum"])
def test_multi_8bit_blockwise_matches_single_calls(rng, name):
    sizes = [5, 300, 1000]
    two = name == "adam"
    qmap1 = F.create_dynamic_map(True)
    qmap2 = F.create_dynamic_map(False) if two else None
    g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    p = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    s1 = [rng.integers(0, 256, n).astype(np.uint8) for n in sizes]
    s2 = [rng.integers(128, 256, n).astype(np.uint8) for n in sizes] if two else None
    a1 = [np.full((n + 255) // 256, 0.25, np.float32) for n in sizes]
    a2 = [np.full((n + 255) // 256, 0.01, np.float32) for n in sizes] if two else None
    cp = [[a.copy() for a in xs] if xs is not None else None for xs in (p, s1, s2, a1, a2)]
    F.optimizer_update_8bit_blockwise_multi(name, g, p, s1, s2, 0.9, 0.99, 0.0, 0.0, 1e-8, 2, 1e-3, qmap1, qmap2,
                                            a1, a2, weight_decay=0.01)
    for i in range(len(sizes)):
        F.optimizer_update_8bit_blockwise(name, g[i], cp[0][i], cp[1][i], cp[2][i] if two else None, 0.9, 0.99, 0.0,
                                          0.0, 1e-8, 2, 1e-3, qmap1, qmap2, cp[3][i], cp[4][i] if two else None,
                                          weight_decay=0.01)
        for k, got in enumerate((p, s1, s2, a1, a2)):
            if got is not None:
                np.testing.assert_array_equal(got[i], cp[k][i])


def test_multi_reads_each_entry_in_place(rng):
    """The lists' arrays are passed without a copy; a trace names each by its list and index."""
    from lowbit import _lowbit

    g, p, s1, _ = _mixed(rng, [8, 9], False)
    _lowbit._trace(True)
    try:
        F.optimizer_update_32bit_multi("momentum", g, p, s1, 0.9, 0.0, 1, 1e-3)
    finally:
        records = {r[1]: r[2] for r in _lowbit._trace(False) if r[0] == "optimizer_update_32bit_multi"}
    for name, arrays in (("g", g), ("p", p), ("state1", s1)):
        for i, a in enumerate(arrays):
            assert records[f"{name}[{i}]"] == a.ctypes.data


def test_multi_errors_name_the_entry(rng):
    g, p, s1, _ = _mixed(rng, [8, 9], False)
    with pytest.raises(ValueError, match=r"optimizer_update_32bit_multi: params\[1\]: state1"):
        F.optimizer_update_32bit_multi("momentum", g, p, [s1[0], s1[0]], 0.9, 0.0, 1, 1e-3)
    with pytest.raises(ValueError, match="state1 must have g's length 2"):
        F.optimizer_update_32bit_multi("momentum", g, p, s1[:1], 0.9, 0.0, 1, 1e-3)
    with pytest.raises(ValueError, match=r"params\[1\].g must have params\[0\].g's dtype float32"):
        F.optimizer_update_32bit_multi("momentum", [g[0], g[1].astype(np.float16)], [p[0], p[1].astype(np.float16)],
                                       s1, 0.9, 0.0, 1, 1e-3)
    with pytest.raises(ValueError, match=r"optimizer_update_32bit_multi: g\[1\] ndim must be 0 to 8 \(got 9\)"):
        F.optimizer_update_32bit_multi("momentum", [g[0], g[1].reshape((1,) * 8 + (-1,))], p, s1, 0.9, 0.0, 1, 1e-3)
    F.optimizer_update_32bit_multi("momentum", [], [], [], 0.9, 0.0, 1, 1e-3)  # an empty list: nothing to do
