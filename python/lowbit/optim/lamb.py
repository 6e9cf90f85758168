"""LAMB (bitsandbytes' ``LAMB``, ``LAMB8bit``, ``LAMB32bit``): Adam whose update is scaled to at most
``max_unorm`` times the parameter's norm (the trust ratio). Its 8-bit states are tensor-wise (there is no
blockwise lamb rule), so ``block_wise`` defaults to False."""

from .adam import _no_amsgrad
from .optimizer import Optimizer2State


def _check(name, bias_correction, adam_w_mode):
    if not bias_correction:
        raise ValueError(f"{name}: bias_correction=False is not supported (the rule always corrects the moments)")
    if not adam_w_mode:
        raise ValueError(f"{name}: adam_w_mode=False is not supported (weight decay is decoupled)")


class LAMB(Optimizer2State):
    """LAMB with 32-bit states, or 8-bit tensor-wise ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, optim_bits=32, args=None, min_8bit_size=4096,
                 percentile_clipping=100, block_wise=False, max_unorm=1.0):
        _no_amsgrad(type(self).__name__, amsgrad)
        _check(type(self).__name__, bias_correction, adam_w_mode)
        super().__init__("lamb", params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, max_unorm=max_unorm)


class LAMB8bit(LAMB):
    """LAMB with 8-bit tensor-wise states."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, percentile_clipping=100,
                 block_wise=False, max_unorm=1.0):
        super().__init__(params, lr, bias_correction, betas, eps, weight_decay, amsgrad, adam_w_mode, 8, args,
                         min_8bit_size, percentile_clipping, block_wise, max_unorm)


class LAMB32bit(LAMB):
    """LAMB with 32-bit states."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adam_w_mode=True, args=None, min_8bit_size=4096, percentile_clipping=100,
                 block_wise=False, max_unorm=1.0):
        super().__init__(params, lr, bias_correction, betas, eps, weight_decay, amsgrad, adam_w_mode, 32, args,
                         min_8bit_size, percentile_clipping, block_wise, max_unorm)
