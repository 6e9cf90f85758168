// The tuned-parameter database's keys of the ops that take a KernelConfig.
#include "ops/tune_keys.h"

#include "core/check.h"

namespace lowbit::ops {
namespace {

std::vector<std::string> mnk(int64_t M, int64_t N, int64_t K) {
  return {std::to_string(M), std::to_string(N), std::to_string(K)};
}

int64_t rows_of(const TensorRef& t) { return t.size(-1) == 0 ? 0 : t.numel() / t.size(-1); }

}  // namespace

TuneKey tune_key(const Fp8GemmArgs& a) {
  return TuneKey{std::string(dtype_name(a.out.dtype)), mnk(rows_of(a.a), a.b.size(-2), a.a.size(-1))};
}

TuneKey tune_key(const Matmul4bitArgs& a) {
  std::string version = core::cat(dtype_name(a.A.dtype), ' ', (a.type == Quant4Type::fp4 ? "fp4" : "nf4"), ' ', a.blocksize);
  if (a.nested.present()) version += " nested";
  return TuneKey{version, mnk(rows_of(a.A), a.N, a.A.size(-1))};
}

TuneKey tune_key(const MatmulArgs& a) {
  const WeightFormat& f = a.weight.format;
  const std::string groups = !f.with_scaling ? "noscale" : f.group_size > 0 ? core::cat('g', f.group_size) : "row";
  std::string version = core::cat(dtype_name(a.A.dtype), ' ', weight_type_name(f.type), ' ', groups);
  if (f.with_zeros) version += core::cat(' ', zeros_mode_name(f.zeros_mode));
  return TuneKey{version, mnk(rows_of(a.A), f.N, f.K)};
}

}  // namespace lowbit::ops
