"""LARS (bitsandbytes' ``LARS``, ``LARS8bit``, ``LARS32bit``): SGD with momentum whose update is scaled to
at most ``max_unorm`` times the parameter's norm. Its 8-bit states are tensor-wise (there is no blockwise
lars rule)."""

import torch as _torch

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


class PytorchLARS(_torch.optim.Optimizer):
    """bitsandbytes' ``PytorchLARS``: LARS in plain PyTorch (float32 parameters), a reference for ``LARS``.

    ``d = grad + weight_decay · p``; with momentum ``buf = momentum · buf + (1 - dampening) · d`` (``d`` itself
    on the first step) and the update ``d + momentum · buf`` (Nesterov) or ``buf``; without, the update is ``d``.
    The step is ``-lr · scale · update`` with ``scale = max_unorm · ‖p‖ / ‖update‖`` where that is below 1.
    """

    def __init__(self, params, lr: float = 0.01, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, max_unorm: float = 0.02):
        for name, value in (("learning rate", lr), ("momentum value", momentum), ("weight_decay value", weight_decay)):
            if value < 0.0:
                raise ValueError(f"PytorchLARS: invalid {name}: {value} (must be >= 0)")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("PytorchLARS: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, max_unorm=max_unorm))

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)

    @_torch.no_grad()
    def step(self, closure=None):
        """One LARS step over every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with _torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            momentum, max_unorm = group["momentum"], group["max_unorm"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad if group["weight_decay"] == 0 else p.grad.add(p, alpha=group["weight_decay"])
                update = d
                if momentum != 0:
                    buf = self.state[p].get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = _torch.clone(d).detach()
                    else:
                        buf.mul_(momentum).add_(d, alpha=1 - group["dampening"])
                    update = d + buf * momentum if group["nesterov"] else buf
                scale = 1.0
                if max_unorm > 0.0:
                    if p.dtype != _torch.float32:
                        raise TypeError(f"PytorchLARS: max_unorm needs float32 parameters (got {p.dtype})")
                    pnorm, unorm = _torch.norm(p.detach()), _torch.norm(update)
                    if unorm > max_unorm * pnorm:  # reads the norms back: this reference is not for speed
                        scale = max_unorm * pnorm / unorm
                p.add_(update, alpha=-group["lr"] * scale)
        return loss
