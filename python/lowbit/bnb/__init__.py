"""``lowbit.bnb``: bitsandbytes' Python API on lowbit's kernels, for PyTorch.

``import lowbit.bnb as bnb`` in place of ``import bitsandbytes as bnb``:

- ``bnb.functional``: bitsandbytes' functional API (torch tensors throughout, code maps included);
- ``bnb.optim``: bitsandbytes' optimizers (:mod:`lowbit.optim`);
- ``bnb.nn``: bitsandbytes' modules (:mod:`lowbit.nn`, imported on first use) and ``bnb.nn.parametrize``;
- ``bnb.utils``: the state-dict helpers;
- ``bnb.matmul_4bit`` / ``bnb.MatMul4Bit``: the 4-bit matmul with autograd;
- ``bnb.matmul`` / ``bnb.MatmulLtState``: LLM.int8's matmul with autograd.

What differs from bitsandbytes, and which of bitsandbytes' own tests pass: docs/bnb.md.
"""

import importlib as _importlib
import importlib.util as _importlib_util
from typing import Any as _Any

from .. import optim
from . import functional, utils
from ._autograd import MatMul4Bit, matmul_4bit
from ._matmul8bit import MatMul8bitLt, MatmulLtState, matmul

__all__ = ["MatMul4Bit", "MatMul8bitLt", "MatmulLtState", "functional", "matmul", "matmul_4bit", "optim", "utils"]
if _importlib_util.find_spec("lowbit.nn") is not None:  # bnb.nn is lowbit.nn: exported where it exists
    __all__.append("nn")


def __getattr__(name: str) -> _Any:
    """``bnb.nn`` on first use, so that ``import lowbit.bnb`` does not need lowbit.nn's modules loaded."""
    if name == "nn":
        return _importlib.import_module(".nn", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
