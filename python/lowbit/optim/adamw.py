"""AdamW (bitsandbytes' ``AdamW``, ``AdamW8bit``, ``AdamW32bit`` and their ``Paged`` forms): Adam with
decoupled weight decay, 1e-2 by default (docs/optim.md)."""

from .adam import _fixed_bits, _no_amsgrad
from .optimizer import Optimizer2State


class AdamW(Optimizer2State):
    """AdamW with 32-bit states, or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class AdamW8bit(Optimizer2State):
    """AdamW with 8-bit states (tensors of at least ``min_8bit_size`` elements)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        _fixed_bits(type(self).__name__, optim_bits, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class AdamW32bit(Optimizer2State):
    """AdamW with 32-bit states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class PagedAdamW(AdamW):
    """``AdamW`` with its large states in CUDA managed memory (paged to the host under memory pressure)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)


class PagedAdamW8bit(AdamW8bit):
    """``AdamW8bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)


class PagedAdamW32bit(AdamW32bit):
    """``AdamW32bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)
