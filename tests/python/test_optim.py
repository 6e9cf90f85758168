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
