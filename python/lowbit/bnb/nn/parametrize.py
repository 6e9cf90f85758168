"""``bitsandbytes.nn.parametrize`` for ``lowbit.bnb``: any parameter of a module held in 4 bits.

``replace_parameter_4bit(module, "experts")`` quantizes the parameter (nf4 / fp4, any shape: MoE expert
stacks are the case it is for) and registers a ``torch.nn.utils.parametrize`` parametrization on it: the module
then holds the packed codes (``module.parametrizations.experts.original``) and reading ``module.experts``
dequantizes them (``lowbit::dequantize_4bit``, so it traces under ``torch.compile``), in the parameter's dtype,
without gradient. ``replace_parameter_4bit_prequantized`` does the same for codes already in the parameter and
their state dict. Hooks on the module let one forward dequantize each parameter once (torch's parametrization
cache, on for the forward) and make its state dict bitsandbytes' layout: the codes under the parameter's own
name and the quant state's entries beside them (``experts.absmax``, ``experts.quant_map``,
``experts.quant_state.bitsandbytes__nf4``, ...). See docs/bnb.md.
"""

import functools as _functools
from typing import Any as _Any, Dict as _Dict, Optional as _Optional, Tuple as _Tuple

import torch as _torch
import torch.nn.utils.parametrize as _P

from ... import ops as _ops
from ..._quant_state import QuantState as _QuantState
from .. import functional as _F

__all__ = ["Bnb4bitParametrization", "replace_parameter_4bit", "replace_parameter_4bit_prequantized"]

_STATE_DICT_POST_HOOKS = _torch.__version__ >= (2, 5)  # bitsandbytes' requirement for the state-dict hook


class Bnb4bitParametrization(_torch.nn.Module):
    """The parametrization of a 4-bit parameter: ``forward(codes)`` is the dequantized tensor (the state's
    shape and dtype, the codes' device), computed without gradient.

    ``quant_state`` is the :class:`lowbit.bnb.functional.QuantState` of the codes. It stays where it was
    made: ``module.to(device)`` moves the codes, not the state (as in bitsandbytes).
    """

    def __init__(self, quant_state: _QuantState):
        super().__init__()
        if not isinstance(quant_state, _QuantState):
            raise TypeError(f"Bnb4bitParametrization: quant_state must be a QuantState "
                            f"(got {type(quant_state).__name__})")
        self.quant_state = quant_state

    @_torch.no_grad()
    def forward(self, quantized_param: _torch.Tensor) -> _torch.Tensor:
        return _ops.dequantize_4bit(quantized_param, self.quant_state)


def _checked_parameter(op: str, module: _torch.nn.Module, param_name: str) -> _torch.nn.Parameter:
    """module's parameter ``param_name``, or bitsandbytes' AttributeError / TypeError (named by op)."""
    if not hasattr(module, param_name):
        raise AttributeError(f"{op}: Module does not have parameter '{param_name}' "
                             f"(got a {type(module).__name__} without it)")
    param = getattr(module, param_name)
    if not isinstance(param, _torch.nn.Parameter):
        raise TypeError(f"{op}: Parameter '{param_name}' is not an instance of nn.Parameter "
                        f"(got {type(param).__name__})")
    return param


def replace_parameter_4bit(module: _torch.nn.Module, param_name: str, compress_statistics: bool = False,
                           quant_type: str = "nf4", blocksize: _Optional[int] = None) -> None:
    """Quantizes ``module.<param_name>`` to 4 bits in place and makes reading it dequantize (bitsandbytes').

    The parameter becomes its packed codes (``[(n + 1) // 2, 1]`` uint8, ``requires_grad=False``) under
    ``module.parametrizations.<param_name>.original``; ``module.<param_name>`` gives the dequantized tensor of
    the original shape, dtype and device, which needs no gradient. ``quant_type`` ``"nf4"`` or ``"fp4"``,
    ``compress_statistics`` double quantization of the absmax, ``blocksize`` None for 64. Raises
    AttributeError when the module has no such attribute, TypeError when it is not an ``nn.Parameter``.
    """
    param = _checked_parameter("replace_parameter_4bit", module, param_name)
    codes, quant_state = _F.quantize_4bit(param.data, blocksize=blocksize, compress_statistics=compress_statistics,
                                          quant_type=quant_type)
    setattr(module, param_name, _torch.nn.Parameter(codes, requires_grad=False))
    _parametrize(module, param_name, quant_state)


def replace_parameter_4bit_prequantized(module: _torch.nn.Module, param_name: str, qs_dict: _Dict[str, _Any],
                                        device: _Any) -> None:
    """Makes reading ``module.<param_name>``, which holds packed 4-bit codes already, dequantize them with the
    state of ``qs_dict`` (a quant state's dict, as ``QuantState.as_dict`` or a checkpoint gives it; its tensors
    go to ``device``). Raises as :func:`replace_parameter_4bit` does for a missing or non-parameter attribute.
    """
    _checked_parameter("replace_parameter_4bit_prequantized", module, param_name)
    _parametrize(module, param_name, _QuantState.from_dict(qs_dict, device=device))


def _parametrize(module: _torch.nn.Module, param_name: str, quant_state: _QuantState) -> None:
    # unsafe: the parametrization changes the tensor's shape and dtype (codes in, the weight out)
    _P.register_parametrization(module, param_name, Bnb4bitParametrization(quant_state), unsafe=True)
    _register_parametrization_hooks(module, param_name)


def _register_parametrization_hooks(module: _torch.nn.Module, param_name: str) -> None:
    """The state-dict hook (bitsandbytes' layout) and the pair of forward hooks that turn torch's
    parametrization cache on for the module's forward, so that a parameter read twice there is dequantized once.

    The closing hook runs even when the forward stops early (``always_call``): non-reentrant activation
    checkpointing stops its recomputation by raising once it has what backward needs, and a skipped hook would
    leave the cache on (every dequantized parameter kept) for good.
    """
    if _STATE_DICT_POST_HOOKS:
        module.register_state_dict_post_hook(_functools.partial(_parametrized_state_dict_post_hook,
                                                                param_name=param_name))
    module.register_forward_pre_hook(_enable_parametrization_cache)
    module.register_forward_hook(_disable_parametrization_cache, always_call=True)


def _enable_parametrization_cache(module: _torch.nn.Module, inputs: _Tuple[_Any, ...]) -> None:
    _P._cache_enabled += 1


def _disable_parametrization_cache(module: _torch.nn.Module, inputs: _Tuple[_Any, ...], output: _Any) -> None:
    """Closes one forward's cache scope: the count never goes below 0 (the hook also runs after a forward whose
    opening hook did not), and the cache is emptied when the last scope closes."""
    _P._cache_enabled = max(_P._cache_enabled - 1, 0)
    if _P._cache_enabled == 0:
        _P._cache = {}


def _parametrized_state_dict_post_hook(module: _torch.nn.Module, state_dict: _Dict[str, _Any], prefix: str,
                                       local_metadata: _Any, *, param_name: str = "weight", **kwargs: _Any) -> None:
    """``<prefix>parametrizations.<name>.original`` saved as ``<prefix><name>``, with the quant state's packed
    entries ``<prefix><name>.<key>`` beside it."""
    original = f"{prefix}parametrizations.{param_name}.original"
    if original not in state_dict:
        return
    state_dict[f"{prefix}{param_name}"] = state_dict.pop(original)
    chain = module.parametrizations[param_name]
    found = [p for p in chain if isinstance(p, Bnb4bitParametrization)]
    if not found:
        raise RuntimeError(f"_parametrized_state_dict_post_hook: {prefix}{param_name} has no Bnb4bitParametrization "
                           f"(got {[type(p).__name__ for p in chain]})")
    for key, value in found[0].quant_state.as_dict(packed=True).items():
        state_dict[f"{prefix}{param_name}.{key}"] = value
