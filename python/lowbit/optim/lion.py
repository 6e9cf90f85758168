"""Lion (bitsandbytes' ``Lion``, ``Lion8bit``, ``Lion32bit`` and their ``Paged`` forms): the sign of an
interpolation of the momentum and the gradient, decoupled weight decay."""

from .optimizer import Optimizer1State


class Lion(Optimizer1State):
    """Lion with 32-bit states, or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, optim_bits=32, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False):
        super().__init__("lion", params, lr, betas, 0.0, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged=is_paged)


class Lion8bit(Lion):
    """Lion with 8-bit states."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, args=None, min_8bit_size=4096,
                 percentile_clipping=100, block_wise=True, is_paged=False):
        super().__init__(params, lr, betas, weight_decay, 8, args, min_8bit_size, percentile_clipping, block_wise,
                         is_paged)


class Lion32bit(Lion):
    """Lion with 32-bit states."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, args=None, min_8bit_size=4096,
                 percentile_clipping=100, block_wise=True, is_paged=False):
        super().__init__(params, lr, betas, weight_decay, 32, args, min_8bit_size, percentile_clipping, block_wise,
                         is_paged)


class PagedLion(Lion):
    """``Lion`` with paged states."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, optim_bits=32, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, betas, weight_decay, optim_bits, args, min_8bit_size, percentile_clipping,
                         block_wise, is_paged=True)


class PagedLion8bit(Lion8bit):
    """``Lion8bit`` with paged states."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, args=None, min_8bit_size=4096,
                 percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, betas, weight_decay, args, min_8bit_size, percentile_clipping, block_wise,
                         is_paged=True)


class PagedLion32bit(Lion32bit):
    """``Lion32bit`` with paged states."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, args=None, min_8bit_size=4096,
                 percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, betas, weight_decay, args, min_8bit_size, percentile_clipping, block_wise,
                         is_paged=True)
