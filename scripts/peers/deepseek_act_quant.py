# The measured peer of lowbit.functional.act_quant, not library code: the
# Triton act_quant kernel of DeepSeek-V3's inference/kernel.py
# (https://github.com/deepseek-ai/DeepSeek-V3, MIT License, Copyright (c) 2023
# DeepSeek), as quoted in the project's seed deepseek-v3-fp8-kernels.md, kept
# as written there (no amax floor: an all-zero block gives s = 0 and NaN codes).
from typing import Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def act_quant_kernel(x_ptr, y_ptr, s_ptr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs).to(tl.float32)
    s = tl.max(tl.abs(x)) / 448.
    y = x / s
    y = y.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y)
    tl.store(s_ptr + pid, s)


def act_quant(x: torch.Tensor, block_size: int = 128) -> Tuple[torch.Tensor, torch.Tensor]:
    assert x.is_contiguous(), 'Input tensor must be contiguous'
    assert x.size(-1) % block_size == 0, f'Last dimension size must be divisible by block_size (block_size={block_size})'
    y = torch.empty_like(x, dtype=torch.float8_e4m3fn)
    s = x.new_empty(*x.size()[:-1], x.size(-1) // block_size, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(x.numel(), meta['BLOCK_SIZE']), )  # noqa: E731
    act_quant_kernel[grid](x, y, s, BLOCK_SIZE=block_size)
    return y, s
