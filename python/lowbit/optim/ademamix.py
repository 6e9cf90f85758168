"""AdEMAMix (bitsandbytes' ``AdEMAMix``, ``AdEMAMix8bit``, ``AdEMAMix32bit`` and their ``Paged`` forms):
two first moments (``beta1`` fast, ``beta3`` slow, mixed by ``alpha``) and Adam's second moment, with the
optional warm-ups of ``alpha`` over ``t_alpha`` steps and of ``beta3`` over ``t_beta3`` steps."""

from .optimizer import Optimizer2State


class AdEMAMix(Optimizer2State):
    """AdEMAMix with 32-bit states, or 8-bit blockwise ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, optim_bits=32, min_8bit_size=4096, is_paged=False):
        if len(tuple(betas)) != 3:
            raise ValueError(f"{type(self).__name__}: betas must be (beta1, beta2, beta3) (got {betas})")
        super().__init__("ademamix", params, lr, betas, eps, weight_decay, optim_bits, None, min_8bit_size,
                         is_paged=is_paged, alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3)


class AdEMAMix8bit(AdEMAMix):
    """AdEMAMix with 8-bit blockwise states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, min_8bit_size=4096, is_paged=False):
        super().__init__(params, lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay, 8, min_8bit_size, is_paged)


class AdEMAMix32bit(AdEMAMix):
    """AdEMAMix with 32-bit states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, min_8bit_size=4096, is_paged=False):
        super().__init__(params, lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay, 32, min_8bit_size, is_paged)


class PagedAdEMAMix(AdEMAMix):
    """``AdEMAMix`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, optim_bits=32, min_8bit_size=4096):
        super().__init__(params, lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay, optim_bits, min_8bit_size,
                         is_paged=True)


class PagedAdEMAMix8bit(AdEMAMix8bit):
    """``AdEMAMix8bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, min_8bit_size=4096):
        super().__init__(params, lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay, min_8bit_size, is_paged=True)


class PagedAdEMAMix32bit(AdEMAMix32bit):
    """``AdEMAMix32bit`` with paged states."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, t_alpha=None, t_beta3=None, eps=1e-8,
                 weight_decay=1e-2, min_8bit_size=4096):
        super().__init__(params, lr, betas, alpha, t_alpha, t_beta3, eps, weight_decay, min_8bit_size, is_paged=True)
