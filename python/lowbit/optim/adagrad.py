"""Adagrad (bitsandbytes' ``Adagrad``, ``Adagrad8bit``, ``Adagrad32bit``): ``v = v + g²``, the step
``lr g / (sqrt(v) + eps)``, weight decay added to the gradient."""

from .optimizer import Optimizer1State


def _check(name, lr_decay, initial_accumulator_value):
    if initial_accumulator_value != 0.0:
        raise ValueError(f"{name}: initial_accumulator_value={initial_accumulator_value} is not supported (must be 0)")
    if lr_decay != 0.0:
        raise ValueError(f"{name}: lr_decay={lr_decay} is not supported (must be 0)")


class Adagrad(Optimizer1State):
    """Adagrad with 32-bit states, or 8-bit ones with ``optim_bits=8``."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        _check(type(self).__name__, lr_decay, initial_accumulator_value)
        super().__init__("adagrad", params, lr, (0.0, 0.0), eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise)


class Adagrad8bit(Adagrad):
    """Adagrad with 8-bit states."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=8, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        if optim_bits != 8:  # bitsandbytes' positional slot, kept so that positional calls line up
            raise ValueError(f"{type(self).__name__}: optim_bits must be 8 (got {optim_bits})")
        super().__init__(params, lr, lr_decay, weight_decay, initial_accumulator_value, eps, 8, args, min_8bit_size,
                         percentile_clipping, block_wise)


class Adagrad32bit(Adagrad):
    """Adagrad with 32-bit states."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True):
        if optim_bits != 32:  # bitsandbytes' positional slot, kept so that positional calls line up
            raise ValueError(f"{type(self).__name__}: optim_bits must be 32 (got {optim_bits})")
        super().__init__(params, lr, lr_decay, weight_decay, initial_accumulator_value, eps, 32, args, min_8bit_size,
                         percentile_clipping, block_wise)
