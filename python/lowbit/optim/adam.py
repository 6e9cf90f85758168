"""Adam (bitsandbytes' ``Adam``, ``Adam8bit``, ``Adam32bit`` and their ``Paged`` forms): the ``adam`` rule,
whose weight decay (0 by default) is decoupled as AdamW's, as in bitsandbytes' one adam kernel (docs/optim.md)."""

from .optimizer import Optimizer2State


def _no_amsgrad(name, amsgrad):
    if amsgrad:
        raise ValueError(f"{name} does not support amsgrad=True")


def _fixed_bits(name, optim_bits, bits):
    if optim_bits not in (32, bits):  # 32 is the signature's default, kept for bitsandbytes' callers
        raise ValueError(f"{name} keeps {bits}-bit states; optim_bits={optim_bits} is not accepted")


class Adam(Optimizer2State):
    """Adam with 32-bit states, or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class Adam8bit(Optimizer2State):
    """Adam with 8-bit states (tensors of at least ``min_8bit_size`` elements)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        _fixed_bits(type(self).__name__, optim_bits, 8)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 8, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class Adam32bit(Optimizer2State):
    """Adam with 32-bit states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        _no_amsgrad(type(self).__name__, amsgrad)
        super().__init__("adam", params, lr, betas, eps, weight_decay, 32, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class PagedAdam(Adam):
    """``Adam`` with its large states in CUDA managed memory (paged to the host under memory pressure)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)


class PagedAdam8bit(Adam8bit):
    """``Adam8bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)


class PagedAdam32bit(Adam32bit):
    """``Adam32bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
                 args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=True):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=True)
