"""``lowbit.optim``: bitsandbytes' optimizers for PyTorch under its class names and arguments.

``import lowbit.optim as optim`` in place of ``import bitsandbytes.optim as optim`` (or
``bnb.optim.AdamW8bit`` → ``lowbit.optim.AdamW8bit``): each class is a ``torch.optim.Optimizer`` over
lowbit's update ops, with 32-bit or 8-bit (blockwise or tensor-wise) states, paged states
(``Paged…``), percentile clipping, and per-parameter overrides through ``GlobalOptimManager``; CUDA
and CPU parameters. State dicts move between bitsandbytes and lowbit (docs/optim.md).
"""

from .adagrad import Adagrad, Adagrad8bit, Adagrad32bit
from .adam import Adam, Adam8bit, Adam32bit, PagedAdam, PagedAdam8bit, PagedAdam32bit
from .adamw import AdamW, AdamW8bit, AdamW32bit, PagedAdamW, PagedAdamW8bit, PagedAdamW32bit
from .ademamix import AdEMAMix, AdEMAMix8bit, AdEMAMix32bit, PagedAdEMAMix, PagedAdEMAMix8bit, PagedAdEMAMix32bit
from .lamb import LAMB, LAMB8bit, LAMB32bit
from .lars import LARS, LARS8bit, LARS32bit, PytorchLARS
from .lion import Lion, Lion8bit, Lion32bit, PagedLion, PagedLion8bit, PagedLion32bit
from .optimizer import GlobalOptimManager, Optimizer1State, Optimizer2State, Optimizer8bit
from .rmsprop import RMSprop, RMSprop8bit, RMSprop32bit
from .sgd import SGD, SGD8bit, SGD32bit

__all__ = [
    "Adagrad", "Adagrad8bit", "Adagrad32bit",
    "Adam", "Adam8bit", "Adam32bit", "PagedAdam", "PagedAdam8bit", "PagedAdam32bit",
    "AdamW", "AdamW8bit", "AdamW32bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit",
    "AdEMAMix", "AdEMAMix8bit", "AdEMAMix32bit", "PagedAdEMAMix", "PagedAdEMAMix8bit", "PagedAdEMAMix32bit",
    "LAMB", "LAMB8bit", "LAMB32bit",
    "LARS", "LARS8bit", "LARS32bit", "PytorchLARS",
    "Lion", "Lion8bit", "Lion32bit", "PagedLion", "PagedLion8bit", "PagedLion32bit",
    "RMSprop", "RMSprop8bit", "RMSprop32bit",
    "SGD", "SGD8bit", "SGD32bit",
    "GlobalOptimManager", "Optimizer8bit", "Optimizer1State", "Optimizer2State",
]
