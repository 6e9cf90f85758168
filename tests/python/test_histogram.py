"""histogram_scatter_add_2d through Python (docs/formats.md, "2-D histograms"): in place, against NumPy's
np.add.at, on every array backend; bad inputs raise with the argument named."""

import numpy as np
import pytest

import lowbit.functional as F
from backends import require_writable


def _inputs(rng, rows, cols, n):
    hist = np.round(4 * rng.standard_normal((rows, cols))).astype(np.float32)
    i1 = rng.integers(0, rows, n).astype(np.int32)
    i2 = rng.integers(0, cols, n).astype(np.int32)
    src = np.round(8 * rng.standard_normal(n)).astype(np.float32)  # integers, as hist: every order sums exactly
    return hist, i1, i2, src


def test_numpy_matches_add_at(rng):
    hist, i1, i2, src = _inputs(rng, 5, 7, 3000)  # not square: rows strided by the second extent
    want = hist.copy()
    np.add.at(want, (i1, i2), src)
    F.histogram_scatter_add_2d(hist, i1, i2, src)
    np.testing.assert_array_equal(hist, want)


def test_every_backend_matches_numpy(backend, rng):
    require_writable(backend)
    hist, i1, i2, src = _inputs(rng, 16, 9, 5001)
    want = hist.copy()
    F.histogram_scatter_add_2d(want, i1, i2, src)
    got = backend.array(hist)
    F.histogram_scatter_add_2d(got, backend.array(i1), backend.array(i2), backend.array(src))
    np.testing.assert_array_equal(backend.numpy(got), want)


def test_errors_name_the_argument(rng):
    hist, i1, i2, src = _inputs(rng, 4, 3, 10)
    before = hist.copy()
    with pytest.raises(ValueError, match="histogram must be 2-D"):
        F.histogram_scatter_add_2d(hist.reshape(-1), i1, i2, src)
    with pytest.raises(TypeError, match="index1 dtype must be"):
        F.histogram_scatter_add_2d(hist, i1.astype(np.int64), i2, src)
    with pytest.raises(TypeError, match="source dtype must be"):
        F.histogram_scatter_add_2d(hist, i1, i2, src.astype(np.float64))
    with pytest.raises(TypeError, match="histogram dtype must be"):
        F.histogram_scatter_add_2d(hist.astype(np.float16), i1, i2, src)
    with pytest.raises(ValueError, match="index2"):
        F.histogram_scatter_add_2d(hist, i1, i2[:9], src)
    bad = i2.copy()
    bad[3] = 3
    with pytest.raises(ValueError, match=r"index2\[3\] must be in \[0, 3\)"):
        F.histogram_scatter_add_2d(hist, i1, bad, src)
    np.testing.assert_array_equal(hist, before)
