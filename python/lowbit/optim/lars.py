"""LARS (bitsandbytes' ``LARS``, ``LARS8bit``, ``LARS32bit``): SGD with momentum whose update is scaled to
at most ``max_unorm`` times the parameter's norm. Its 8-bit states are tensor-wise (there is no blockwise
lars rule)."""

from .optimizer import Optimizer1State
from .sgd import _check_momentum


class LARS(Optimizer1State):
    """LARS with 32-bit states, or 8-bit tensor-wise ones with ``optim_bits=8``."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, optim_bits=32, args=None,
                 min_8bit_size=4096, percentile_clipping=100, max_unorm=0.02):
        _check_momentum(type(self).__name__, momentum, dampening, nesterov)
        super().__init__("lars", params, lr, (momentum, dampening), 0.0, weight_decay, optim_bits, args,
                         min_8bit_size, percentile_clipping, block_wise=False, max_unorm=max_unorm)


class LARS8bit(LARS):
    """LARS with 8-bit tensor-wise states."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, max_unorm=0.02):
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, 8, args, min_8bit_size,
                         percentile_clipping, max_unorm)


class LARS32bit(LARS):
    """LARS with 32-bit states."""

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, args=None,
                 min_8bit_size=4096, percentile_clipping=100, max_unorm=0.02):
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, 32, args, min_8bit_size,
                         percentile_clipping, max_unorm)
