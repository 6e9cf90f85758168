"""AdEMAMix (bitsandbytes' ``AdEMAMix``, ``AdEMAMix8bit``, ``AdEMAMix32bit`` and their ``Paged`` forms):
two first moments (``beta1`` fast, ``beta3`` slow, mixed by ``alpha``) and Adam's second moment, with the
optional warm-ups of ``alpha`` over ``t_alpha`` steps and of ``beta3`` over ``t_beta3`` steps."""

import math as _math

import torch as _torch

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


class _ReferenceAdEMAMix(_torch.optim.Optimizer):
    """AdEMAMix in plain PyTorch (the paper's update, https://hf.co/papers/2409.03137): the reference
    bitsandbytes' tests check ``AdEMAMix`` against. States ``m1_m2`` (the two first moments, stacked, as
    bitsandbytes keeps them) and ``nu``."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999, 0.9999), alpha: float = 5.0,
                 eps: float = 1e-8, weight_decay: float = 1e-2, t_beta3=None, t_alpha=None):
        super().__init__(params, dict(lr=lr, betas=betas, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      t_beta3=t_beta3, t_alpha=t_alpha))

    @_torch.no_grad()
    def step(self, closure=None):
        """One AdEMAMix step over every parameter with a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with _torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            t = group["step"]
            beta1, beta2, beta3 = group["betas"]
            alpha = group["alpha"]
            if group["t_alpha"] is not None:  # linear warm-up of alpha
                alpha = min(t * alpha / group["t_alpha"], alpha)
            if group["t_beta3"] is not None:  # beta3's warm-up, in log space between beta1 and beta3
                ln1, ln3, frac = _math.log(beta1), _math.log(beta3), t / group["t_beta3"]
                beta3 = min(_math.exp(ln1 * ln3 / ((1 - frac) * ln3 + frac * ln1)), beta3)
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad, state = p.grad, self.state[p]
                if not state:
                    state["m1_m2"] = p.new_zeros((2, *p.size()))
                    state["nu"] = _torch.zeros_like(p)
                m1, m2, nu = state["m1_m2"][0], state["m1_m2"][1], state["nu"]
                m1.mul_(beta1).add_(grad, alpha=1 - beta1)
                m2.mul_(beta3).add_(grad, alpha=1 - beta3)
                nu.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (nu.sqrt() / ((1 - beta2**t) ** 0.5)).add(group["eps"])
                update = (m1.div(1 - beta1**t) + alpha * m2) / denom
                update.add_(p, alpha=group["weight_decay"])
                p.add_(-group["lr"] * update)
        return loss
