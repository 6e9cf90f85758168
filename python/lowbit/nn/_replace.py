"""``replace_linear``: swap a model's ``torch.nn.Linear`` layers for quantized lowbit modules."""

from __future__ import annotations

import fnmatch
from typing import Any, Callable, Iterable, Optional, Union

import torch

from ._4bit import Linear4bit, Params4bit
from ._fp8 import LinearFP8
from ._int8 import Int8Params, Linear8bitLt

__all__ = ["replace_linear"]

Skip = Union[Iterable[str], Callable[[str, torch.nn.Linear], bool], None]
Factory = Callable[[str, torch.nn.Linear], torch.nn.Module]
KINDS = ("nf4", "fp4", "int8", "fp8")


def _skipper(skip: Skip) -> Callable[[str, torch.nn.Linear], bool]:
    """A predicate from names / globs (a layer is skipped when its name, or its name's tail, matches one)."""
    if skip is None:
        return lambda name, module: False
    if callable(skip):
        return skip
    if isinstance(skip, str):
        skip = (skip,)
    patterns = tuple(skip)
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"replace_linear: skip must hold module names or globs (got {p!r})")

    def match(name: str, module: torch.nn.Linear) -> bool:
        return any(name == p or name.endswith("." + p) or fnmatch.fnmatchcase(name, p) for p in patterns)

    return match


def _empty(linear: torch.nn.Linear, kind: str, compute_dtype: Optional[torch.dtype], compress_statistics: bool,
           quant_storage: torch.dtype, blocksize: int, threshold: float) -> torch.nn.Module:
    """The module for ``kind`` on the meta device, its weights to come from a state dict."""
    n, k, has_bias = linear.out_features, linear.in_features, linear.bias is not None
    if kind in ("nf4", "fp4"):
        return Linear4bit(k, n, has_bias, compute_dtype, compress_statistics, kind, quant_storage, device="meta",
                          blocksize=blocksize)
    if kind == "int8":
        return Linear8bitLt(k, n, has_bias, has_fp16_weights=False, threshold=threshold, device="meta")
    return LinearFP8(k, n, has_bias, device="meta", dtype=None if linear.bias is None else linear.bias.dtype)


def _convert(linear: torch.nn.Linear, kind: str, device: torch.device, **options: Any) -> torch.nn.Module:
    """One layer quantized to ``kind`` on ``device``, its bias kept (as a copy of the same dtype)."""
    w = linear.weight.detach()
    m = _empty(linear, kind, **options)
    if kind in ("nf4", "fp4"):
        m.weight = Params4bit(w, False, blocksize=options["blocksize"], quant_type=kind, module=m,
                              compress_statistics=options["compress_statistics"],
                              quant_storage=options["quant_storage"])._quantize(device)
    elif kind == "int8":
        m.weight = Int8Params(w, requires_grad=False, has_fp16_weights=False)._quantize(device)
    else:
        m.quantize_(w.to(device))
    if linear.bias is not None:
        m.bias = torch.nn.Parameter(linear.bias.detach().to(device, copy=True), linear.bias.requires_grad)
    return m


def replace_linear(
    model: torch.nn.Module,
    kind: Union[str, Factory] = "nf4",
    *,
    skip: Skip = ("lm_head",),
    device: Any = None,
    compute_dtype: Optional[torch.dtype] = None,
    compress_statistics: bool = True,
    quant_storage: torch.dtype = torch.uint8,
    blocksize: int = 64,
    threshold: float = 0.0,
    quantize: bool = True,
) -> torch.nn.Module:
    """Replaces every ``torch.nn.Linear`` of ``model`` (in place) by a quantized lowbit module; returns the model.

    ``kind``: ``"nf4"`` / ``"fp4"`` (:class:`Linear4bit` with ``compute_dtype``,
    ``compress_statistics``, ``quant_storage``, ``blocksize``), ``"int8"``
    (:class:`Linear8bitLt` with ``threshold``), ``"fp8"`` (:class:`LinearFP8`),
    or a callable ``(name, linear) -> module`` that builds the replacement.
    ``skip``: module names (a name matches itself and any name ending in
    ``"." + name``) or globs to leave as they are — by default ``lm_head``, as
    transformers does — or a callable ``(name, linear) -> bool``. ``device``:
    where the quantized weights go (default: each layer's own device). Only
    exact ``torch.nn.Linear`` instances are replaced (not subclasses such as
    lowbit's own modules). A model that is itself a Linear comes back replaced.
    ``quantize=False`` leaves the float weights unread: the new modules are
    empty, on the meta device, for ``model.load_state_dict(quantized, assign=True)``
    of a checkpoint already in their layout (bitsandbytes', ``lowbit quantize``'s).
    """
    if isinstance(kind, str) and kind not in KINDS:
        raise ValueError(f"replace_linear: kind must be one of {', '.join(KINDS)} or a callable (got {kind!r})")
    if not isinstance(kind, str) and not callable(kind):
        raise TypeError(f"replace_linear: kind must be a string or a callable (got {type(kind).__name__})")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"replace_linear: model must be a torch.nn.Module (got {type(model).__name__})")
    skipped = _skipper(skip)
    targets = [(name, m) for name, m in model.named_modules() if type(m) is torch.nn.Linear and not skipped(name, m)]
    with torch.no_grad():
        for name, linear in targets:
            if callable(kind):
                new = kind(name, linear)
            else:
                options = dict(compute_dtype=compute_dtype, compress_statistics=compress_statistics,
                               quant_storage=quant_storage, blocksize=blocksize, threshold=threshold)
                if not quantize:
                    new = _empty(linear, kind, **options)
                else:
                    where = torch.device(device) if device is not None else linear.weight.device
                    new = _convert(linear, kind, where, **options)
            if name == "":
                return new
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
    return model
