"""SGD with momentum (bitsandbytes' ``SGD``, ``SGD8bit``, ``SGD32bit``): the ``momentum`` rule,
``m = momentum m + g`` (``m = g`` at the first step), weight decay added to the gradient."""

from .optimizer import Optimizer1State


def _check_momentum(name, momentum, dampening, nesterov):
    if momentum == 0:
        raise NotImplementedError(f"{name} without momentum is not supported (use torch.optim.SGD: it keeps no state)")
    if dampening != 0:
        raise ValueError(f"{name}: dampening={dampening} is not supported (the rule adds the whole gradient)")
    if nesterov:
        raise ValueError(f"{name}: nesterov=True is not supported")


class SGD(Optimizer1State):
    """SGD with momentum, 32-bit states or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        _check_momentum(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("momentum", params, lr, (momentum, dampening), 0.0, weight_decay, optim_bits, args,
                         min_8bit_size, percentile_clipping, block_wise)


class SGD8bit(SGD):
    """SGD with momentum and 8-bit states."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, 8, args, min_8bit_size,
                         percentile_clipping, block_wise)


class SGD32bit(SGD):
    """SGD with momentum and 32-bit states."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, 32, args, min_8bit_size,
                         percentile_clipping, block_wise)
