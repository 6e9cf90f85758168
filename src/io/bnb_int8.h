// bitsandbytes' LLM.int8 weight quantization as transformers runs it on every
// linear weight it loads with load_in_8bit (Int8Params._quantize): the
// weight is cast to fp16, then bitsandbytes' int8_vectorwise_quant:
//
//   SCB[n]   = max |w16[n, :]|                        (fp32; NaN ignored)
//   factor   = 127 * (1 / SCB[n])                     (two fp32 roundings)
//   q[n, k]  = round-half-even(w16[n, k] * factor)    (NaN -> 0)
//
// A checkpoint whose codes differ from these in even a few places gives
// logits visibly different from transformers' own quantization, since
// LLM.int8's activation quantization amplifies any weight difference
// (docs/checkpoints.md). lowbit's int8_vectorwise_quant op divides once
// (127 / absmax, correctly rounded) and reads the weight in its own dtype,
// so the checkpoint writer uses this rule instead. bitsandbytes' GPU kernel
// (built with --use_fast_math) computes 1 / SCB approximately and so still
// differs from it in a few codes per million (docs/formats.md, "Agreement
// with bitsandbytes").
#pragma once

#include "lowbit/tensor.h"

namespace lowbit::io::detail {

struct BnbInt8 {
  Tensor codes;  // I8 [N, K]
  Tensor scb;    // F32 [N]
};

// w: f32/f16/bf16 [N, K], contiguous, on the CPU.
BnbInt8 bnb_int8_quantize(const TensorRef& w);

}  // namespace lowbit::io::detail
