"""pytest setup for the lowbit Python package.

Which lowbit is tested: $LOWBIT_PYTHON_DIR when set (ctest sets it to the
build tree's python/ folder); else the newest <repo>/build*/python holding an
extension for this interpreter (so a plain `python3 -m pytest tests/python`
after a build finds it); else an installed lowbit. The header of the run says
which, and what frameworks and devices the cases run on.
"""

from __future__ import annotations

import glob
import importlib.machinery
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # reference.py, backends.py


def _build_tree() -> str | None:
    explicit = os.environ.get("LOWBIT_PYTHON_DIR")
    if explicit:
        return explicit
    found = []
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        found += glob.glob(os.path.join(ROOT, "build*", "python", "lowbit", "_lowbit" + suffix))
    if not found:
        return None
    return os.path.dirname(os.path.dirname(max(found, key=os.path.getmtime)))


_tree = _build_tree()
if _tree:
    sys.path.insert(0, _tree)

import lowbit  # noqa: E402

import backends  # noqa: E402


def pytest_report_header(config):
    lines = [
        f"lowbit {lowbit.__version__} from {os.path.dirname(lowbit.__file__)}",
        f"lowbit CUDA backend: {'built' if lowbit._lowbit.built_with_cuda else 'not built'}, "
        f"{lowbit.cuda_device_count()} device(s)",
    ]
    for name in ("numpy", "ml_dtypes", "torch", "cupy", "jax"):
        mod = backends._module(name)
        lines.append(f"  {name}: {getattr(mod, '__version__', 'installed') if mod else 'not installed'}")
    reason = backends.torch_cuda_reason()
    lines.append(f"torch CUDA cases: {'run' if reason is None else 'skipped: ' + reason}")
    return lines


@pytest.fixture(params=backends.ALL, ids=lambda b: b.name)
def backend(request):
    """Each array backend; skipped (saying why) where it cannot run."""
    b = request.param
    reason = b.skip_reason()
    if reason:
        pytest.skip(f"{b.name}: {reason}")
    return b


@pytest.fixture
def rng():
    return __import__("numpy").random.default_rng(1234)


@pytest.fixture
def no_ml_dtypes(monkeypatch):
    """lowbit as it behaves without ml_dtypes installed."""
    from lowbit import _arrays

    monkeypatch.setattr(_arrays, "_use_ml_dtypes", False)

