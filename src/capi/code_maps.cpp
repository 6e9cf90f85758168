// C entry points of the code-map generators: the C++ generators, copied into
// a caller-owned float buffer.
#include "lowbit/code_maps.h"

#include <algorithm>
#include <vector>

#include "capi/capi.h"
#include "core/check.h"

namespace lowbit::capi {
namespace {

// Sets *count first so that a caller whose buffer is too small learns the
// size it needs from the failing call too.
template <class Make>
lowbit_status write_map(const char* op, float* out, size_t capacity, size_t* count, Make&& make) {
  return guarded(op, [&] {
    const std::vector<float> values = make();
    if (count) *count = values.size();
    if (out == nullptr && capacity == 0) return;  // a size query
    LOWBIT_REQUIRE(out != nullptr, ErrorCode::invalid_argument, op, ": out must not be NULL for capacity ", capacity);
    LOWBIT_REQUIRE(capacity >= values.size(), ErrorCode::invalid_argument, op, ": capacity must be at least ",
                   values.size(), " (got ", capacity, ")");
    std::copy(values.begin(), values.end(), out);
  });
}

}  // namespace
}  // namespace lowbit::capi

using lowbit::capi::write_map;

extern "C" {

lowbit_status lowbit_create_dynamic_map(int is_signed, int max_exponent_bits, int total_bits, float* out,
                                        size_t capacity, size_t* count) {
  return write_map("create_dynamic_map", out, capacity, count,
                   [&] { return lowbit::create_dynamic_map(is_signed != 0, max_exponent_bits, total_bits); });
}

lowbit_status lowbit_create_linear_map(int is_signed, int total_bits, int add_zero, float* out, size_t capacity,
                                       size_t* count) {
  return write_map("create_linear_map", out, capacity, count,
                   [&] { return lowbit::create_linear_map(is_signed != 0, total_bits, add_zero != 0); });
}

lowbit_status lowbit_create_normal_map(double offset, int use_extra_value, float* out, size_t capacity, size_t* count) {
  return write_map("create_normal_map", out, capacity, count,
                   [&] { return lowbit::create_normal_map(offset, use_extra_value != 0); });
}

lowbit_status lowbit_create_fp8_map(int is_signed, int exponent_bits, int precision_bits, int total_bits, float* out,
                                    size_t capacity, size_t* count) {
  return write_map("create_fp8_map", out, capacity, count,
                   [&] { return lowbit::create_fp8_map(is_signed != 0, exponent_bits, precision_bits, total_bits); });
}

lowbit_status lowbit_quantile_map_from_quantiles(const float* quantiles, size_t num_quantiles, float* out,
                                                 size_t capacity, size_t* count) {
  constexpr const char* op = "quantile_map_from_quantiles";
  return write_map(op, out, capacity, count, [&] {
    LOWBIT_REQUIRE(quantiles != nullptr || num_quantiles == 0, lowbit::ErrorCode::invalid_argument, op,
                   ": quantiles must not be NULL for ", num_quantiles, " values");
    const std::vector<float> q(quantiles, quantiles + num_quantiles);
    return lowbit::quantile_map_from_quantiles(q);
  });
}

lowbit_status lowbit_get_4bit_type(const char* name, int blocksize, float* out, size_t capacity, size_t* count) {
  constexpr const char* op = "get_4bit_type";
  return write_map(op, out, capacity, count, [&] {
    LOWBIT_REQUIRE(name != nullptr, lowbit::ErrorCode::invalid_argument, op,
                   ": name must be one of nf4, fp4, int4, af4, fp4_e2m1 (got NULL)");
    const auto table = lowbit::get_4bit_type(name, blocksize);
    return std::vector<float>(table.begin(), table.end());
  });
}

}  // extern "C"
