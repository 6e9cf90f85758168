"""Float64 references and error bounds for the lowbit.nn tests (the modules' outputs against them)."""

from __future__ import annotations

import torch

UNIT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
# Half the largest gap between neighbouring table values, as a fraction of the block's absmax.
HALF_GAP = {"nf4": 0.1519, "fp4": 0.1667}


def linear64(x: torch.Tensor, w: torch.Tensor, bias) -> torch.Tensor:
    """x · wᵀ + bias in float64."""
    y = x.double() @ w.double().T
    return y if bias is None else y + bias.double()


def magnitude(x: torch.Tensor, w: torch.Tensor, bias) -> torch.Tensor:
    """Σ|x·w| + |b| per output: what the rounding of the sums scales with."""
    s = x.double().abs() @ w.double().abs().T
    return s if bias is None else s + bias.double().abs()


def assert_rounding(y: torch.Tensor, ref: torch.Tensor, S: torch.Tensor, K: int, in_dtype: torch.dtype) -> None:
    """y within the kernels' bound: the output's rounding, float32 sums and a rounding of the weights to the
    input's dtype (docs/gemm.md): ``2·u_out·|ref| + (u_in + (K+2)·2⁻²⁴)·S``."""
    bound = 2 * UNIT[y.dtype] * ref.abs() + (UNIT[in_dtype] + (K + 2) * 2.0**-24) * S + 1e-30
    err = (y.double() - ref).abs()
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"error {worst:.3g} times the bound (max error {err.max().item():.3g})"


def assert_within(y: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    err = (y.double() - ref.double()).abs()
    worst = (err / (bound + 1e-30)).max().item()
    assert worst <= 1.0, f"{what}: error {worst:.3g} times the format's bound (max error {err.max().item():.3g})"


def block_absmax(w: torch.Tensor, blocksize: int) -> torch.Tensor:
    """Each element's 4-bit block absmax (blocks over the flattened weight), shaped like w."""
    flat = w.detach().double().reshape(-1)
    pad = -flat.numel() % blocksize
    blocks = torch.nn.functional.pad(flat, (0, pad)).reshape(-1, blocksize).abs().amax(1)
    return blocks.repeat_interleave(blocksize)[: flat.numel()].reshape(w.shape)


def fp4bit_error(w: torch.Tensor, quant_type: str, blocksize: int, nested: bool) -> torch.Tensor:
    """A bound on |w − dequant(quant(w))| per element: half a table gap of the block's absmax (and 2% more for
    an absmax stored in 8 bits)."""
    return (HALF_GAP[quant_type] + (0.02 if nested else 0.0)) * block_absmax(w, blocksize) * 1.0001


def fp8_tile_scale(w: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Each element's block scale max(amax, 1e-4)/448 over rows x cols tiles, shaped like w."""
    N, K = w.shape
    out = torch.empty(N, K, dtype=torch.float64)
    wd = w.detach().double().abs()
    for i in range(0, N, rows):
        for j in range(0, K, cols):
            out[i:i + rows, j:j + cols] = max(wd[i:i + rows, j:j + cols].max().item(), 1e-4) / 448
    return out


def fp8_error(v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """|v − e4m3 round trip| ≤ 2⁻⁴·|v| (3 mantissa bits) + half e4m3's subnormal step (2⁻¹⁰) times the scale."""
    return 2.0**-4 * v.double().abs() + 2.0**-10 * scale
