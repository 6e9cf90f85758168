// optimizer_update_32bit on every backend against a float64 oracle of each
// rule (docs/optim.md) over several steps with fresh gradients, each step
// from the backend's values after the last: fp32, fp16
// and bf16 parameters, ragged sizes, weight decay, gnorm_scale, the trust
// ratio of lamb / lars, skip_zeros; and the bad arguments, named.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/optim_rules.h"
#include "core/registry.h"
#include "harness/harness.h"
#include "lowbit/ops/optim.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

struct Hyper {
  float beta1 = 0.9f, beta2 = 0.99f, beta3 = 0.999f, alpha = 5.0f, eps = 1e-6f, weight_decay = 0.0f, lr = 1e-2f;
  float gnorm_scale = 1.0f, max_unorm = 0.0f;
  bool skip_zeros = false;
};

// The float64 model of one step over all elements: p, s1, s2, s3 updated; returns the update's squared norm.
struct Model {
  std::vector<double> p, s1, s2, s3;
};
double oracle_step(Optimizer o, const Hyper& h, int64_t step, DType dtype, const std::vector<double>& g_in, Model& m) {
  const size_t n = g_in.size();
  const double t = static_cast<double>(step);
  const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), t);
  const double b2 = 1.0 - std::pow(static_cast<double>(h.beta2), t);
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = round_to(dtype, h.gnorm_scale * g_in[i]);
  const bool two = o == Optimizer::adam || o == Optimizer::lamb || o == Optimizer::ademamix;
  // The update norm of the rule, from the states before the step (no weight decay).
  double unorm = 0.0, pnorm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    pnorm += m.p[i] * m.p[i];
    double u = 0.0;
    switch (o) {
      case Optimizer::adam:
      case Optimizer::lamb: {
        const double mm = (m.s1[i] * h.beta1 + (1 - h.beta1) * g[i]) / c1;
        const double vv = (m.s2[i] * h.beta2 + (1 - h.beta2) * g[i] * g[i]) / b2;
        u = mm / (std::sqrt(vv) + h.eps);
        u *= u;
        break;
      }
      case Optimizer::momentum:
      case Optimizer::lars: {
        const double mm = step == 1 ? g[i] : m.s1[i] * h.beta1 + g[i];
        u = mm * mm;
        break;
      }
      case Optimizer::lion: u = m.s1[i] * h.beta2 + (1 - h.beta2) * g[i]; break;
      case Optimizer::rmsprop: {
        const double x = g[i] / (std::sqrt(m.s1[i] * h.beta1 + (1 - h.beta1) * g[i] * g[i]) + h.eps);
        u = x * x;
        break;
      }
      case Optimizer::adagrad: {
        const double x = g[i] / (std::sqrt(m.s1[i] + g[i] * g[i]) + h.eps);
        u = x * x;
        break;
      }
      default: break;
    }
    unorm += u;
  }
  double scale = 1.0;
  if (h.max_unorm > 0 && o != Optimizer::ademamix) {
    const double bound = h.max_unorm * std::sqrt(pnorm) + (two ? 0.0 : h.eps);
    if (std::sqrt(unorm) > bound) scale = bound / std::sqrt(unorm);
  }
  const double wd = h.weight_decay, lr = h.lr;
  for (size_t i = 0; i < n; ++i) {
    double gi = g[i], p = m.p[i];
    if (o == Optimizer::ademamix) {
      m.s1[i] = m.s1[i] * h.beta1 + (1 - h.beta1) * gi;
      m.s3[i] = m.s3[i] * h.beta3 + (1 - h.beta3) * gi;
      m.s2[i] = m.s2[i] * h.beta2 + (1 - h.beta2) * gi * gi;
      p = round_to(dtype, p - lr * ((m.s1[i] / c1 + h.alpha * m.s3[i]) / (std::sqrt(m.s2[i]) / std::sqrt(b2) + h.eps)));
      if (wd > 0) p = round_to(dtype, p * (1 - lr * wd));
    } else if (two) {
      if (h.skip_zeros && gi == 0) continue;
      m.s1[i] = m.s1[i] * h.beta1 + (1 - h.beta1) * gi;
      m.s2[i] = m.s2[i] * h.beta2 + (1 - h.beta2) * gi * gi;
      // Adam with the bias corrections: lr * sqrt(b2) / c1 * m / (sqrt(v) + eps * sqrt(b2)).
      p = round_to(dtype, p - scale * lr * std::sqrt(b2) / c1 * (m.s1[i] / (std::sqrt(m.s2[i]) + h.eps * std::sqrt(b2))));
      if (wd > 0) p = round_to(dtype, p * (1 - lr * wd));
    } else {
      // Folded in float32 arithmetic: where g and p * wd cancel, the rule's float
      // rounding decides the (sign of the) update, so the model takes it too.
      if (wd > 0 && o != Optimizer::lion) {
        gi = round_to(dtype, static_cast<float>(gi) + static_cast<float>(p) * h.weight_decay);
      }
      if (h.skip_zeros && gi == 0) continue;
      switch (o) {
        case Optimizer::momentum:
        case Optimizer::lars:
          m.s1[i] = step == 1 ? gi : m.s1[i] * h.beta1 + gi;
          p = round_to(dtype, p - scale * lr * m.s1[i]);
          break;
        case Optimizer::lion: {
          if (wd > 0) p = round_to(dtype, p * (1 - lr * wd));
          const double c = m.s1[i] * h.beta1 + (1 - h.beta1) * gi;
          p = round_to(dtype, p - scale * lr * ((c > 0) - (c < 0)));
          m.s1[i] = m.s1[i] * h.beta2 + (1 - h.beta2) * gi;
          break;
        }
        case Optimizer::rmsprop:
          m.s1[i] = m.s1[i] * h.beta1 + (1 - h.beta1) * gi * gi;
          p = round_to(dtype, p - scale * lr * gi / (std::sqrt(m.s1[i]) + h.eps));
          break;
        case Optimizer::adagrad:
          m.s1[i] = m.s1[i] + gi * gi;
          p = round_to(dtype, p - lr * gi / (std::sqrt(m.s1[i]) + h.eps));
          break;
        default: break;
      }
    }
    m.p[i] = p;
  }
  return unorm;
}

std::vector<double> doubles(const TensorRef& t) {
  const std::vector<float> f = to_floats(t);
  return std::vector<double>(f.begin(), f.end());
}

// got within rel of want, relative to want plus `scale`, the size of the
// terms it sums (a momentum sums up to 1 / (1 - beta1) = 10 gradients near 1,
// whose float32 rounding stays when they cancel).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const std::string& what,
                  double scale = 10.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = rel * (std::fabs(want[i]) + scale);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " = " << got[i] << ", want " << want[i] << " (tolerance " << tol
                    << ")";
      ++bad;
    }
  }
}

const Optimizer kAll[] = {Optimizer::adam,    Optimizer::momentum, Optimizer::rmsprop, Optimizer::lion,
                          Optimizer::adagrad, Optimizer::lamb,     Optimizer::lars,    Optimizer::ademamix};

void run_case(Optimizer o, DType dtype, const Hyper& h, int64_t n, int steps, bool zeros_in_g) {
  const std::string what = std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " n=" +
                           std::to_string(n) + " wd=" + std::to_string(h.weight_decay) +
                           " max_unorm=" + std::to_string(h.max_unorm) + (h.skip_zeros ? " skip_zeros" : "");
  SCOPED_TRACE(what);
  const bool two = optimizer_has_state2(o);
  Tensor p = random_floats({n}, dtype);
  Tensor s1 = Tensor::empty({o == Optimizer::ademamix ? 2 * n : n}, DType::f32);
  Tensor s2 = two ? Tensor::empty({n}, DType::f32) : Tensor();
  std::fill_n(s1.ptr<float>(), s1.numel(), 0.0f);
  if (two) std::fill_n(s2.ptr<float>(), n, 0.0f);
  Tensor unorm = Tensor::empty({1}, DType::f32);
  Model m;
  m.p = doubles(p.ref());
  m.s1.assign(static_cast<size_t>(n), 0.0);
  m.s2.assign(static_cast<size_t>(n), 0.0);
  m.s3.assign(static_cast<size_t>(n), 0.0);
  // f32: float32 arithmetic over a few steps; f16 / bf16: one unit of the last place besides.
  const double rel_p = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 2.0 / 1024 : 2.0 / 128;
  for (int t = 1; t <= steps; ++t) {
    Tensor g = random_floats({n}, dtype);
    if (zeros_in_g) {
      for (int64_t i = 0; i < n; i += 3) {
        if (dtype == DType::f32) g.ptr<float>()[i] = 0.0f;
        else static_cast<uint16_t*>(g.data())[i] = 0;
      }
    }
    const std::vector<double> gd = doubles(g.ref());
    const double want_unorm = oracle_step(o, h, t, dtype, gd, m);
    OptimizerUpdate32bitArgs a;
    a.optimizer = o;
    a.g = g.ref();
    a.p = p.ref();
    a.state1 = s1.ref();
    if (two) a.state2 = s2.ref();
    if (h.max_unorm > 0) a.unorm_vec = unorm.ref();
    a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha;
    a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale;
    a.max_unorm = h.max_unorm, a.step = t, a.skip_zeros = h.skip_zeros;
    run(a);
    // p moves by about lr a step: its scale is its own (near 1), not the states'.
    expect_close(to_floats(p.ref()), m.p, rel_p, "p after step " + std::to_string(t), 1.0);
    std::vector<float> s1f = to_floats(s1.ref());
    expect_close(std::vector<float>(s1f.begin(), s1f.begin() + n), m.s1, 1e-6, "state1 after step " + std::to_string(t));
    if (o == Optimizer::ademamix) {
      expect_close(std::vector<float>(s1f.begin() + n, s1f.end()), m.s3, 1e-6, "state1[n:] after step " + std::to_string(t));
    }
    if (two) expect_close(to_floats(s2.ref()), m.s2, 1e-6, "state2 after step " + std::to_string(t));
    if (h.max_unorm > 0 && o != Optimizer::lion) {
      expect_close(to_floats(unorm.ref()), {want_unorm}, 1e-5, "unorm_vec after step " + std::to_string(t), 0.0);
    }
    // The next step starts from the backend's values: each step is judged on
    // its own arithmetic (a 16-bit p rounded the other way stays one step's).
    m.p = doubles(p.ref());
    s1f = to_floats(s1.ref());
    for (int64_t i = 0; i < n; ++i) {
      m.s1[static_cast<size_t>(i)] = s1f[static_cast<size_t>(i)];
      if (o == Optimizer::ademamix) m.s3[static_cast<size_t>(i)] = s1f[static_cast<size_t>(n + i)];
    }
    if (two) m.s2 = doubles(s2.ref());
  }
}

TEST(Optimizer32bit, EveryRuleMatchesFloat64) {
  SCOPED_TRACE("impls: " + impl_names<OptimizerUpdate32bitArgs>());
  for (Optimizer o : kAll) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper h;
      run_case(o, dtype, h, 1037, 4, false);
      h.weight_decay = 0.05f;
      h.gnorm_scale = 0.5f;
      run_case(o, dtype, h, 70001, 3, false);
    }
  }
}

TEST(Optimizer32bit, TrustRatioAndSkipZeros) {
  for (Optimizer o : kAll) {
    Hyper h;
    h.max_unorm = 0.01f;  // small: the update is scaled down
    run_case(o, DType::f32, h, 515, 3, false);
    Hyper z;
    z.skip_zeros = true;
    z.weight_decay = 0.01f;
    run_case(o, DType::f32, z, 300, 3, true);
  }
}

// The CPU's span loop for adam and lamb on fp32 (vectorized by its target
// clones) gives the bits of the one-element rule every backend shares, over
// several spans and a ragged end, with weight decay, gnorm_scale and skip_zeros.
TEST(Optimizer32bit, CpuSpanLoopHasTheElementRulesBits) {
  const int64_t n = 70001;
  for (Optimizer o : {Optimizer::adam, Optimizer::lamb}) {
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(std::string(optimizer_name(o)) + " variant " + std::to_string(variant));
      OptimizerUpdate32bitArgs a;
      a.optimizer = o;
      a.beta1 = 0.9f, a.beta2 = 0.999f, a.eps = 1e-8f, a.lr = 1e-3f;
      a.weight_decay = variant == 0 ? 0.0f : 0.01f;
      a.gnorm_scale = variant == 2 ? 0.75f : 1.0f;
      a.skip_zeros = variant == 2;
      a.step = 3;
      Tensor g = random_floats({n}, DType::f32), p = random_floats({n}, DType::f32);
      if (a.skip_zeros) {
        for (int64_t i = 0; i < n; i += 5) g.ptr<float>()[i] = 0.0f;
      }
      Tensor s1 = random_floats({n}, DType::f32), s2 = random_floats({n}, DType::f32);
      for (int64_t i = 0; i < n; ++i) s2.ptr<float>()[i] = std::fabs(s2.ptr<float>()[i]);
      std::vector<float> want_p(p.ptr<float>(), p.ptr<float>() + n), want_s1(s1.ptr<float>(), s1.ptr<float>() + n),
          want_s2(s2.ptr<float>(), s2.ptr<float>() + n);
      a.g = g.ref(), a.p = p.ref(), a.state1 = s1.ref(), a.state2 = s2.ref();
      run(a);
      const core::optim::Step step = core::optim::make_step(a);
      for (int64_t i = 0; i < n; ++i) {
        float unused = 0.0f;
        const auto k = static_cast<size_t>(i);
        core::optim::update_two(step, core::optim::scaled_grad(g.ptr<float>()[i], a.gnorm_scale), want_p[k],
                                want_s1[k], want_s2[k], unused);
      }
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        ASSERT_EQ(core::float_bits(p.ptr<float>()[i]), core::float_bits(want_p[k])) << "p[" << i << "]";
        ASSERT_EQ(core::float_bits(s1.ptr<float>()[i]), core::float_bits(want_s1[k])) << "state1[" << i << "]";
        ASSERT_EQ(core::float_bits(s2.ptr<float>()[i]), core::float_bits(want_s2[k])) << "state2[" << i << "]";
      }
    }
  }
}

TEST(Optimizer32bit, NamesRoundTrip) {
  for (Optimizer o : kAll) EXPECT_EQ(optimizer_from_name(optimizer_name(o), "test"), o);
  expect_error([] { optimizer_from_name("adamw", "optimizer_update_32bit"); }, ErrorCode::invalid_argument,
               {"optimizer_update_32bit", "optimizer_name", "adam, momentum", "'adamw'"});
}

TEST(Optimizer32bit, BadArgumentsSayWhatIsWrong) {
  const int64_t n = 10;
  Tensor g = random_floats({n}, DType::f32), p = random_floats({n}, DType::f32);
  Tensor s1 = Tensor::empty({n}, DType::f32), s2 = Tensor::empty({n}, DType::f32);
  Tensor p16 = random_floats({n}, DType::f16), short_state = Tensor::empty({n - 1}, DType::f32);
  auto args = [&] {
    OptimizerUpdate32bitArgs a;
    a.optimizer = Optimizer::adam;
    a.g = g.ref();
    a.p = p.ref();
    a.state1 = s1.ref();
    a.state2 = s2.ref();
    a.lr = 1e-3f;
    return a;
  };
  const std::string op = "optimizer_update_32bit";
  {
    auto a = args();
    a.p = p16.ref();
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "p must have g's dtype float32", "float16"});
  }
  {
    auto a = args();
    a.state2 = {};
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "state2"});
  }
  {
    auto a = args();
    a.optimizer = Optimizer::momentum;
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "momentum keeps one state", "state2 must be absent"});
  }
  {
    auto a = args();
    a.state1 = short_state.ref();
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "state1"});
  }
  {
    auto a = args();
    a.optimizer = Optimizer::ademamix;  // state1 holds two moments: 2n
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "state1"});
  }
  {
    auto a = args();
    a.max_unorm = 1.0f;
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "unorm_vec"});
  }
  {
    auto a = args();
    a.step = 0;
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "step must be at least 1", "got 0"});
  }
  {
    Tensor gi = Tensor::empty({n}, DType::i32);
    auto a = args();
    a.g = gi.ref();
    expect_error([&] { run(a); }, ErrorCode::unsupported_dtype, {op, "g dtype must be one of", "int32"});
  }
}

}  // namespace
