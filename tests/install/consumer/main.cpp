// Quantizes and dequantizes a small tensor through an installed lowbit and
// checks the round trip against the format's error bound.
#include <lowbit/ops/quant.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

// Largest |x - y| over the tensor, relative to max |x| (the one absmax).
double max_rel_error(const std::vector<float>& x, const lowbit::Tensor& y) {
  double amax = 0.0, err = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    amax = std::fmax(amax, std::fabs(x[i]));
    err = std::fmax(err, std::fabs(static_cast<double>(x[i]) - y.ptr<float>()[i]));
  }
  return err / amax;
}

}  // namespace

int main() {
  try {
    const int64_t n = 1000;  // one block of each blocksize below, partial
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    const lowbit::TensorRef input = lowbit::TensorRef::contiguous(x.data(), lowbit::DType::f32, {n});

    // 8-bit dynamic map: steps near 1 are < 2^-6, so half a step < 0.01.
    auto [q8, s8] = lowbit::quantize_blockwise(input, {}, 1024);
    const double e8 = max_rel_error(x, lowbit::dequantize_blockwise(q8, s8));
    // NF4: half the widest gap (-1.0 .. -0.696) bounds the error by 0.152.
    auto [q4, s4] = lowbit::quantize_4bit(input, 1024, lowbit::Quant4Type::nf4);
    const double e4 = max_rel_error(x, lowbit::dequantize_4bit(q4, s4));

    std::printf("lowbit consumer: 8-bit max error %.4f, nf4 max error %.4f\n", e8, e4);
    if (!(e8 < 0.01) || !(e4 < 0.152)) {
      std::fprintf(stderr, "lowbit consumer: round-trip error above bound\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit consumer: %s\n", e.what());
    return 1;
  }
}
