"""RMSprop (bitsandbytes' ``RMSprop``, ``RMSprop8bit``, ``RMSprop32bit``): ``v = alpha v + (1 - alpha) g²``,
the step ``lr g / (sqrt(v) + eps)``, weight decay added to the gradient."""

from .optimizer import Optimizer1State


def _check(name, alpha, momentum, centered):
    if alpha == 0:
        raise NotImplementedError(f"{name} with alpha=0 is not supported")
    if momentum != 0:
        raise ValueError(f"{name}: momentum={momentum} is not supported (the rule keeps no momentum)")
    if centered:
        raise NotImplementedError(f"{name}: centered=True is not supported")


class RMSprop(Optimizer1State):
    """RMSprop with 32-bit states, or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        _check(type(self).__name__, alpha, momentum, centered)
        super().__init__("rmsprop", params, lr, (alpha, momentum), eps, weight_decay, optim_bits, args,
                         min_8bit_size, percentile_clipping, block_wise)


class RMSprop8bit(RMSprop):
    """RMSprop with 8-bit states."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, alpha, eps, weight_decay, momentum, centered, 8, args, min_8bit_size,
                         percentile_clipping, block_wise)


class RMSprop32bit(RMSprop):
    """RMSprop with 32-bit states."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, alpha, eps, weight_decay, momentum, centered, 32, args, min_8bit_size,
                         percentile_clipping, block_wise)
