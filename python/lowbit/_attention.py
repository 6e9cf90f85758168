"""Attention: ``flash_attention`` and BitBLAS' ``FlashAttenConfig`` / ``FlashAtten`` (docs/attention.md).

CPU: the reference (float64 sums) and a float32 path; CUDA: tensor-core kernels for float16 and bfloat16 and a slow
path for the rest (docs/attention.md, "On CUDA").
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple, Union

from . import _arrays, _lowbit

Array = Any

__all__ = ["FlashAtten", "FlashAttenConfig", "flash_attention", "flash_attention_kvcache", "flash_attention_varlen"]


def _scale(call: _arrays.Call, scale: Optional[float]) -> float:
    """The op's scale argument: 0.0 for the default 1 / sqrt(D); an explicit 0 is refused."""
    sc = 0.0 if scale is None else _arrays.real(scale, call.op, "scale")
    if sc == 0.0 and scale is not None:
        raise ValueError(f"{call.op}: scale must be nonzero (None: 1 / sqrt(D); got 0)")
    return sc


def _run(call: _arrays.Call, fn: Any, args: tuple, out: Optional[Array], lse: Optional[Array],
         return_lse: bool) -> Union[Array, Tuple[Array, Array]]:
    """fn(*args, return_lse, out, lse, ctx) into the caller's buffers, or into new arrays of q's framework."""
    if lse is not None and out is None:
        raise ValueError(f"{call.op}: lse= needs out= (without out, return_lse=True returns a new one)")
    if out is not None:
        if return_lse and lse is None:
            raise ValueError(f"{call.op}: return_lse with out= needs lse= (a float32 [B, H, Sq] buffer)")
        fn(*args, bool(return_lse), call.out(out, "out"), call.out(lse, "lse"), call.ctx)
        call.done()
        return (out, lse) if return_lse else out
    raw_out, raw_lse = fn(*args, bool(return_lse), None, None, call.ctx)
    result = call.result(raw_out)
    lse_result = call.result(raw_lse) if return_lse else None
    call.done()
    return (result, lse_result) if return_lse else result


def flash_attention(q: Array, k: Array, v: Array, is_causal: bool = False, scale: Optional[float] = None,
                    out: Optional[Array] = None, return_lse: bool = False, *, k_layout: str = "bshd",
                    lse: Optional[Array] = None, stream: Any = None) -> Union[Array, Tuple[Array, Array]]:
    """``softmax(scale · q · kᵀ) · v`` per batch and head.

    Parameters
    ----------
    q : array
        float16/bfloat16/float32 [B, Sq, H, D], contiguous.
    k, v : array
        q's dtype, [B, Skv, Hkv, D] and [B, Skv, Hkv, Dv]; ``H`` a multiple of ``Hkv`` (grouped-query attention;
        multi-query when ``Hkv`` is 1): head ``h`` reads kv head ``h // (H // Hkv)``.
    is_causal : bool
        Query ``i`` sees the keys ``j <= i + Skv - Sq`` (aligned bottom-right, as flash-attn does;
        ``torch.nn.functional.scaled_dot_product_attention`` aligns top-left, ``j <= i``: the same when
        ``Sq == Skv``). A query that sees no key gives zeros (and a log-sum-exp of -inf).
    scale : float, optional
        Default ``1 / sqrt(D)``.
    out : array, optional
        [B, Sq, H, Dv] of q's dtype, written in place.
    return_lse : bool
        Also return the log-sum-exp of each query's scores, float32 [B, H, Sq] (natural log), so partial
        attentions can be merged.
    k_layout : str
        ``"bshd"`` (k as above) or ``"bdhs"`` (k as [B, D, Hkv, Skv], FlashAtten's ``ntn``).
    lse : array, optional
        With ``out``: a float32 [B, H, Sq] buffer for the log-sum-exp.

    Returns
    -------
    out, or ``(out, lse)`` with ``return_lse``, in q's framework and on its device.
    """
    call = _arrays.Call("flash_attention", q, "q", stream)
    args = (call.arg(q, "q"), call.arg(k, "k"), call.arg(v, "v"), bool(is_causal), _scale(call, scale), k_layout)
    return _run(call, _lowbit.flash_attention, args, out, lse, return_lse)


def flash_attention_kvcache(q: Array, k_cache: Array, v_cache: Array, cache_seqlens: Array,
                            block_table: Optional[Array] = None, is_causal: bool = False,
                            scale: Optional[float] = None, out: Optional[Array] = None, return_lse: bool = False, *,
                            lse: Optional[Array] = None, stream: Any = None) -> Union[Array, Tuple[Array, Array]]:
    """Attention of q against a KV cache (decode, chunked prefill), as :func:`flash_attention` otherwise.

    Parameters
    ----------
    q : array
        [B, Sq, H, D].
    k_cache, v_cache : array
        Contiguous: [B, S_max, Hkv, D] and [B, S_max, Hkv, Dv]. Paged (with ``block_table``, as vLLM lays it
        out): [pages, P, Hkv, D] and [pages, P, Hkv, Dv], token ``j`` of sequence ``b`` at row ``j % P`` of page
        ``block_table[b, j // P]``.
    cache_seqlens : array
        int32 [B]: the cache tokens sequence ``b``'s queries see (the first ``cache_seqlens[b]``); causal masks
        align bottom-right against that length. On a GPU it stays there: no host synchronization.
    block_table : array, optional
        int32 [B, max_pages].
    """
    call = _arrays.Call("flash_attention_kvcache", q, "q", stream)
    args = (call.arg(q, "q"), call.arg(k_cache, "k_cache"), call.arg(v_cache, "v_cache"),
            call.arg(cache_seqlens, "cache_seqlens"), call.opt(block_table, "block_table"), bool(is_causal),
            _scale(call, scale))
    return _run(call, _lowbit.flash_attention_kvcache, args, out, lse, return_lse)


def flash_attention_varlen(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                           is_causal: bool = False, scale: Optional[float] = None, out: Optional[Array] = None,
                           return_lse: bool = False, *, lse: Optional[Array] = None,
                           stream: Any = None) -> Union[Array, Tuple[Array, Array]]:
    """Attention over a batch of sequences of their own lengths, packed along the token axis.

    Parameters
    ----------
    q : array
        [total_q, H, D].
    k, v : array
        [total_k, Hkv, D] and [total_k, Hkv, Dv].
    cu_seqlens_q, cu_seqlens_k : array
        int32 [B + 1]: 0, then each sequence's end row (sequence ``b``'s queries are rows
        ``cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1``, its keys likewise), ending at the totals. The causal mask
        aligns bottom-right within each sequence.

    Returns
    -------
    out [total_q, H, Dv], or ``(out, lse)`` with the log-sum-exp float32 [H, total_q] (flash-attn's varlen layout).
    """
    call = _arrays.Call("flash_attention_varlen", q, "q", stream)
    args = (call.arg(q, "q"), call.arg(k, "k"), call.arg(v, "v"), call.arg(cu_seqlens_q, "cu_seqlens_q"),
            call.arg(cu_seqlens_k, "cu_seqlens_k"), bool(is_causal), _scale(call, scale))
    return _run(call, _lowbit.flash_attention_varlen, args, out, lse, return_lse)


_DTYPES = ("float16", "bfloat16", "float32")


class FlashAttenConfig:
    """BitBLAS' FlashAttenConfig: Q, K, V [batch, seq_len, heads, dim] (``layout="ntn"``: K as
    [batch, dim, heads, seq_len]), the same heads for all three, accumulation in float32.

    lowbit takes float16 (BitBLAS' one choice), bfloat16 and float32, one dtype for Q, K, V and the output;
    the other dtypes BitBLAS names no kernel for are refused here, by name.
    """

    def __init__(self, batch: int, heads: int, seq_len: int, dim: int, Q_dtype: str = "float16",
                 K_dtype: str = "float16", V_dtype: str = "float16", Accu_dtype: str = "float32",
                 Out_dtype: str = "float16", layout: str = "nnn", is_causal: bool = False):
        for name, value in (("batch", batch), ("heads", heads), ("seq_len", seq_len), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"FlashAttenConfig: {name} must be a positive int (got {value!r})")
        for name, value in (("Q_dtype", Q_dtype), ("K_dtype", K_dtype), ("V_dtype", V_dtype),
                            ("Out_dtype", Out_dtype)):
            if value not in _DTYPES:
                raise ValueError(f"FlashAttenConfig: {name} must be one of {', '.join(_DTYPES)} (got {value!r})")
        if len({Q_dtype, K_dtype, V_dtype, Out_dtype}) != 1:
            raise ValueError(f"FlashAttenConfig: Q_dtype, K_dtype, V_dtype and Out_dtype must be one dtype (got "
                             f"{Q_dtype}, {K_dtype}, {V_dtype}, {Out_dtype})")
        if Accu_dtype != "float32":
            raise ValueError(f"FlashAttenConfig: Accu_dtype must be 'float32' (got {Accu_dtype!r})")
        if layout not in ("nnn", "ntn"):
            raise ValueError(f"FlashAttenConfig: layout must be 'nnn' or 'ntn' (got {layout!r})")
        self.batch, self.heads, self.seq_len, self.dim = batch, heads, seq_len, dim
        self.Q_dtype, self.K_dtype, self.V_dtype = Q_dtype, K_dtype, V_dtype
        self.Accu_dtype, self.Out_dtype, self.layout, self.is_causal = Accu_dtype, Out_dtype, layout, bool(is_causal)

    def __repr__(self) -> str:
        return (f"FlashAttenConfig(batch={self.batch}, heads={self.heads}, seq_len={self.seq_len}, dim={self.dim}, "
                f"Q_dtype={self.Q_dtype!r}, K_dtype={self.K_dtype!r}, V_dtype={self.V_dtype!r}, "
                f"Accu_dtype={self.Accu_dtype!r}, Out_dtype={self.Out_dtype!r}, layout={self.layout!r}, "
                f"is_causal={self.is_causal})")


class FlashAtten:
    """BitBLAS' FlashAtten: ``forward(Q, K, V, output=None)`` = softmax(Q Kᵀ / sqrt(dim)) V for the config's
    shapes, on any DLPack framework's arrays (flash_attention underneath)."""

    def __init__(self, config: FlashAttenConfig):
        if not isinstance(config, FlashAttenConfig):
            raise TypeError(f"FlashAtten: config must be a lowbit.FlashAttenConfig (got {type(config).__name__})")
        self.config = config

    def __getattr__(self, name: str) -> Any:
        # The config's fields as properties (batch, heads, ..., is_causal), as BitBLAS' FlashAtten has them.
        if name != "config" and "config" in self.__dict__ and name in vars(self.config):
            return getattr(self.config, name)
        raise AttributeError(name)

    def forward(self, Q: Array, K: Array, V: Array, output: Optional[Array] = None) -> Array:
        c = self.config
        qkv = (c.batch, c.seq_len, c.heads, c.dim)
        want = {"Q": qkv, "K": (c.batch, c.dim, c.heads, c.seq_len) if c.layout == "ntn" else qkv, "V": qkv}
        for name, x in (("Q", Q), ("K", K), ("V", V)):
            shape = tuple(int(s) for s in getattr(x, "shape", ()))
            if shape != want[name]:
                raise ValueError(f"FlashAtten.forward: {name} must be {list(want[name])} for this config "
                                 f"({c.layout}; got {list(shape)})")
        return flash_attention(Q, K, V, is_causal=c.is_causal, scale=1.0 / math.sqrt(c.dim), out=output,
                               k_layout="bdhs" if c.layout == "ntn" else "bshd")

    __call__ = forward
