// The argument checks the optimizer updates' front ends share.
#pragma once

#include <cstdint>
#include <span>

#include "lowbit/ops/optim.h"

namespace lowbit::ops::optim {

// A present, contiguous tensor of `dtype` and `numel` elements.
void require_buffer(const char* op, const char* name, const TensorRef& t, DType dtype, int64_t numel);
// `name` absent, as the one-state rule `o` takes no second state.
void require_absent(const char* op, const char* name, const TensorRef& t, Optimizer o);
// `o` one of `rules`, else invalid_argument listing them.
void require_rule(const char* op, Optimizer o, std::span<const Optimizer> rules);
// g float, contiguous; p present, of g's dtype, contiguous, of g's size. Returns that size.
int64_t require_gradient_and_parameter(const char* op, const TensorRef& g, const TensorRef& p);

// The single updates' checks (what check() runs); without list_wide, those of
// what a multi update's entries share (the rule, the code maps, the step) are
// left out: the multi update runs them once, on its first entry.
void check_update(const OptimizerUpdate32bitArgs& a, bool list_wide);
void check_update(const OptimizerUpdate8bitBlockwiseArgs& a, bool list_wide);

}  // namespace lowbit::ops::optim
