// optimizer_update_8bit on the CPU, each step against two models from the
// same inputs: bitsandbytes' tensor-wise kernels transcribed in float32
// (dQuantize's binary search and the sign correction included, with the
// departures docs/optim.md lists), whose codes, new_max, unorm and p must be
// the same bits; and a float64 model of the rules, which the dequantized
// states must match within half the map's largest gap times new_max. Every
// rule, fp32 / fp16 / bf16, ragged sizes, weight decay, gnorm_scale, the
// trust ratio; the bad arguments, named.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

const Optimizer kRules[] = {Optimizer::adam,    Optimizer::lamb, Optimizer::momentum,
                            Optimizer::lars,    Optimizer::rmsprop, Optimizer::lion};

bool two_states(Optimizer o) { return o == Optimizer::adam || o == Optimizer::lamb; }
bool has_unorm(Optimizer o) { return o != Optimizer::rmsprop && o != Optimizer::lion; }

// bitsandbytes' dQuantize: a 7-step binary search from code 127, then the
// midpoint on the side where it stopped.
uint8_t bnb_dquantize(const float* code, float x) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f, val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot, lower = val, pivot += i;
    } else {
      upper_pivot = pivot, upper = val, pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) return static_cast<uint8_t>(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return static_cast<uint8_t>(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

uint8_t bnb_state_code(const float* code, float v, float new_max, bool keep_sign) {
  uint8_t c = bnb_dquantize(code, v * (new_max > 0.0f ? 1.0f / new_max : 0.0f));
  if (keep_sign && std::signbit(code[c]) != std::signbit(v)) c = static_cast<uint8_t>(v > 0.0f ? c + 1 : c - 1);
  return c;
}

struct Hyper {
  float beta1 = 0.9f, beta2 = 0.995f, eps = 1e-6f, weight_decay = 0.0f, lr = 1e-2f, gnorm_scale = 1.0f;
  float max_unorm = 0.0f;
};

// One parameter's tensors on the host.
struct State {
  Tensor p, state1, state2, qmap1, qmap2, max1, max2, new_max1, new_max2, unorm;
};

Tensor scalar(float v) { return host_tensor({v}); }

State fresh_state(Optimizer o, DType dtype, int64_t n) {
  State s;
  s.p = random_floats({n}, dtype);
  s.qmap1 = map_tensor(create_dynamic_map(true));
  s.state1 = random_bytes({n}, DType::u8);
  if (o == Optimizer::rmsprop) {  // a sum of squares: the map's non-negative half
    for (int64_t i = 0; i < n; ++i) s.state1.ptr<uint8_t>()[i] = static_cast<uint8_t>(127 + s.state1.ptr<uint8_t>()[i] % 129);
  }
  s.max1 = scalar(0.3f), s.new_max1 = scalar(-1.0f), s.unorm = scalar(-1.0f);
  if (two_states(o)) {
    s.qmap2 = map_tensor(create_dynamic_map(false));
    s.state2 = random_bytes({n}, DType::u8);
    s.max2 = scalar(0.02f), s.new_max2 = scalar(-1.0f);
  }
  return s;
}

OptimizerUpdate8bitArgs make_args(Optimizer o, const Hyper& h, int64_t step, const TensorRef& g, const State& s,
                                  bool norms) {
  const bool two = two_states(o);
  OptimizerUpdate8bitArgs a;
  a.optimizer = o;
  a.g = g, a.p = s.p.ref(), a.state1 = s.state1.ref(), a.qmap1 = s.qmap1.ref();
  a.max1 = s.max1.ref(), a.new_max1 = s.new_max1.ref();
  if (two) {
    a.state2 = s.state2.ref(), a.qmap2 = s.qmap2.ref(), a.max2 = s.max2.ref(), a.new_max2 = s.new_max2.ref();
  }
  if (norms) a.unorm_vec = s.unorm.ref();
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr;
  a.gnorm_scale = h.gnorm_scale, a.max_unorm = h.max_unorm, a.step = step;
  return a;
}

float rnd(DType dtype, float v) { return static_cast<float>(round_to(dtype, v)); }

// The expected results of one step, in float32 as the kernels compute them.
struct Expected {
  std::vector<float> p;
  std::vector<uint8_t> c1, c2;
  float new_max1 = 0.0f, new_max2 = 0.0f, unorm = 0.0f;
};

Expected transcribe(Optimizer o, const Hyper& h, int64_t step, DType dtype, const std::vector<float>& g,
                    const State& s) {
  const int64_t n = static_cast<int64_t>(g.size());
  const bool two = two_states(o);
  const float* q1 = s.qmap1.ptr<const float>();
  const float* q2 = two ? s.qmap2.ptr<const float>() : nullptr;
  const float max1 = s.max1.ptr<const float>()[0], max2 = two ? s.max2.ptr<const float>()[0] : 0.0f;
  const std::vector<float> p0 = to_floats(s.p.ref());
  const float t = static_cast<float>(step);
  const float c1 = 1.0f - powf(h.beta1, t), bias2 = 1.0f - powf(h.beta2, t), c2 = sqrtf(bias2);
  const float step_size = -h.lr * c2 / c1;
  std::vector<float> s1(n), s2(n, 0.0f), p(p0);
  // The new states (they do not depend on the trust ratio) and the norms.
  std::vector<float> gs(n);
  double unorm = 0.0, pnorm = 0.0;
  Expected e;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * h.gnorm_scale;
    float a = q1[s.state1.ptr<const uint8_t>()[i]] * max1;
    if (two) {
      float b = q2[s.state2.ptr<const uint8_t>()[i]] * max2;
      a = a * h.beta1 + (1.0f - h.beta1) * gi;
      b = b * h.beta2 + (1.0f - h.beta2) * gi * gi;
      s2[i] = b;
      const float m = a * (1.0f / c1), v = b * (1.0f / bias2), u = m / (sqrtf(v) + h.eps);
      unorm += u * u;
    } else {
      if (h.weight_decay > 0.0f && o != Optimizer::lion) gi = gi + p0[i] * h.weight_decay;
      if (o == Optimizer::momentum || o == Optimizer::lars) {
        a = step == 1 ? gi : a * h.beta1 + gi;
        unorm += a * a;
      } else if (o == Optimizer::rmsprop) {
        a = a * h.beta1 + (1.0f - h.beta1) * (gi * gi);
      }  // lion: its new state after the parameter's step
    }
    s1[i] = a;
    gs[i] = gi;
    pnorm += static_cast<double>(p0[i]) * p0[i];
  }
  float us = 1.0f;
  if (h.max_unorm > 0.0f) {
    const float u = sqrtf(static_cast<float>(unorm)), bound = h.max_unorm * static_cast<float>(std::sqrt(pnorm));
    us = u > bound ? bound / u : 1.0f;
  }
  for (int64_t i = 0; i < n; ++i) {
    float pv = p0[i];
    if (two) {
      pv = rnd(dtype, pv + us * step_size * (s1[i] / (sqrtf(s2[i]) + c2 * h.eps)));
      if (h.weight_decay > 0.0f) pv = rnd(dtype, pv * (1.0f - h.lr * h.weight_decay));
    } else if (o == Optimizer::momentum || o == Optimizer::lars) {
      pv = rnd(dtype, pv + -h.lr * us * s1[i]);
    } else if (o == Optimizer::rmsprop) {
      pv = rnd(dtype, pv - h.lr * (gs[i] / (sqrtf(s1[i]) + h.eps)));
    } else {  // lion
      if (h.weight_decay > 0.0f) pv = rnd(dtype, pv * (1.0f - h.lr * h.weight_decay));
      const float m = s1[i], d = m * h.beta1 + (1.0f - h.beta1) * gs[i];
      pv = rnd(dtype, pv - h.lr * static_cast<float>((0.0f < d) - (d < 0.0f)));
      s1[i] = m * h.beta2 + (1.0f - h.beta2) * gs[i];
    }
    p[i] = pv;
  }
  for (int64_t i = 0; i < n; ++i) {
    e.new_max1 = std::max(e.new_max1, std::fabs(s1[i]));
    e.new_max2 = std::max(e.new_max2, std::fabs(s2[i]));
  }
  e.p = p;
  e.unorm = static_cast<float>(unorm);
  e.c1.resize(n);
  for (int64_t i = 0; i < n; ++i) e.c1[i] = bnb_state_code(q1, s1[i], e.new_max1, true);
  if (two) {
    e.c2.resize(n);
    for (int64_t i = 0; i < n; ++i) e.c2[i] = bnb_state_code(q2, s2[i], e.new_max2, false);
  }
  return e;
}

// The float64 rule on the same inputs: the new states, against which the
// stored ones (code * new_max) are within half the map's largest gap.
std::vector<double> model_state1(Optimizer o, const Hyper& h, int64_t step, const std::vector<float>& g,
                                 const State& s) {
  const int64_t n = static_cast<int64_t>(g.size());
  const std::vector<float> p0 = to_floats(s.p.ref());
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const double old = static_cast<double>(s.qmap1.ptr<const float>()[s.state1.ptr<const uint8_t>()[i]]) *
                       s.max1.ptr<const float>()[0];
    double gi = static_cast<double>(g[i]) * h.gnorm_scale;
    if (!two_states(o) && o != Optimizer::lion && h.weight_decay > 0.0f) gi += static_cast<double>(p0[i]) * h.weight_decay;
    switch (o) {
      case Optimizer::momentum:
      case Optimizer::lars: out[i] = step == 1 ? gi : old * h.beta1 + gi; break;
      case Optimizer::rmsprop: out[i] = old * h.beta1 + (1.0 - h.beta1) * gi * gi; break;
      case Optimizer::lion: out[i] = old * h.beta2 + (1.0 - h.beta2) * gi; break;
      default: out[i] = old * h.beta1 + (1.0 - h.beta1) * gi; break;
    }
  }
  return out;
}

double largest_gap(const float* code) {
  double gap = 0.0;
  for (int i = 0; i + 1 < 256; ++i) gap = std::max(gap, static_cast<double>(code[i + 1]) - code[i]);
  return gap;
}

void run_case(Optimizer o, DType dtype, const Hyper& h, int64_t n, int steps) {
  SCOPED_TRACE(std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
               " wd=" + std::to_string(h.weight_decay) + " gnorm_scale=" + std::to_string(h.gnorm_scale) +
               " max_unorm=" + std::to_string(h.max_unorm));
  const bool two = two_states(o), norms = has_unorm(o);
  State s = fresh_state(o, dtype, n);
  for (int64_t t = 1; t <= steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const Tensor g = random_floats({n}, dtype);
    const std::vector<float> gv = to_floats(g.ref());
    const Expected want = transcribe(o, h, t, dtype, gv, s);
    const std::vector<double> model = model_state1(o, h, t, gv, s);
    run(make_args(o, h, t, g.ref(), s, norms));
    EXPECT_EQ(s.new_max1.ptr<float>()[0], want.new_max1);
    if (two) {
      EXPECT_EQ(s.new_max2.ptr<float>()[0], want.new_max2);
    }
    if (norms) {
      EXPECT_EQ(s.unorm.ptr<float>()[0], want.unorm);
    }
    const std::vector<float> p = to_floats(s.p.ref());
    const double bound = 0.5 * largest_gap(s.qmap1.ptr<const float>()) * want.new_max1 * (1.0 + 1e-5);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; ++i) {
      const uint8_t c1 = s.state1.ptr<uint8_t>()[i];
      if (c1 != want.c1[i]) {
        ADD_FAILURE() << "state1[" << i << "] = " << int(c1) << ", want " << int(want.c1[i]);
        ++bad;
      }
      if (two && s.state2.ptr<uint8_t>()[i] != want.c2[i]) {
        ADD_FAILURE() << "state2[" << i << "] differs";
        ++bad;
      }
      if (p[i] != want.p[i]) {
        ADD_FAILURE() << "p[" << i << "] = " << p[i] << ", want " << want.p[i];
        ++bad;
      }
      const double stored = static_cast<double>(s.qmap1.ptr<const float>()[c1]) * want.new_max1;
      // The sign rule may move a state one code further: two gaps at most then.
      if (std::fabs(stored - model[i]) > 2 * bound + 1e-6 * std::fabs(model[i])) {
        ADD_FAILURE() << "state1[" << i << "] decodes to " << stored << ", the float64 rule gives " << model[i];
        ++bad;
      }
    }
    std::swap(s.max1, s.new_max1);  // as bitsandbytes' optimizer does
    if (two) std::swap(s.max2, s.new_max2);
  }
}

TEST(Optimizer8bit, EveryRuleAndDtypeMatchesTheKernelsAndTheRule) {
  const int64_t sizes[] = {1, 7, 255, 2049, 4097, 70001};
  int k = 0;
  for (Optimizer o : kRules) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper plain;
      run_case(o, dtype, plain, sizes[k++ % 6], 3);
      Hyper decay;
      decay.weight_decay = 0.05f;
      decay.gnorm_scale = 0.5f;
      run_case(o, dtype, decay, sizes[k++ % 6], 3);
      if (has_unorm(o)) {
        Hyper trust = decay;
        trust.max_unorm = 0.001f;  // small: the ratio scales the update
        run_case(o, dtype, trust, sizes[k++ % 6], 3);
      }
    }
  }
}

TEST(Optimizer8bit, EmptyTensorWritesZeroMaxima) {
  State s = fresh_state(Optimizer::adam, DType::f32, 0);
  const Tensor g = Tensor::empty({0}, DType::f32);
  run(make_args(Optimizer::adam, Hyper{}, 1, g.ref(), s, true));
  EXPECT_EQ(s.new_max1.ptr<float>()[0], 0.0f);
  EXPECT_EQ(s.new_max2.ptr<float>()[0], 0.0f);
  EXPECT_EQ(s.unorm.ptr<float>()[0], 0.0f);
}

TEST(Optimizer8bit, BadArgumentsSayWhatIsWrong) {
  const int64_t n = 10;
  const std::string op = "optimizer_update_8bit";
  State s = fresh_state(Optimizer::adam, DType::f32, n);
  const Tensor g = random_floats({n}, DType::f32), g16 = random_floats({n}, DType::f16);
  const Tensor two = Tensor::empty({2}, DType::f32), codes9 = Tensor::empty({9}, DType::u8);
  auto args = [&] { return make_args(Optimizer::adam, Hyper{}, 1, g.ref(), s, true); };
  auto expect = [&](const OptimizerUpdate8bitArgs& a, ErrorCode code, const std::vector<std::string>& parts) {
    expect_error([&] { run(a); }, code, parts);
  };
  auto a = args();
  a.optimizer = Optimizer::ademamix;
  expect(a, ErrorCode::invalid_argument, {op, "optimizer must be one of", "(got ademamix)"});
  a = args();
  a.optimizer = Optimizer::adagrad;
  expect(a, ErrorCode::invalid_argument, {op, "optimizer must be one of", "(got adagrad)"});
  a = args();
  a.p = g16.ref();
  expect(a, ErrorCode::invalid_argument, {op, "p must have g's dtype float32", "float16"});
  a = args();
  a.state1 = codes9.ref();
  expect(a, ErrorCode::invalid_argument, {op, "state1", "10", "9"});
  a = args();
  a.max1 = two.ref();
  expect(a, ErrorCode::invalid_argument, {op, "max1", "1", "2"});
  a = args();
  a.new_max2 = TensorRef{};
  expect(a, ErrorCode::invalid_argument, {op, "new_max2"});
  a = args();
  a.new_max1 = a.max1;
  expect(a, ErrorCode::invalid_argument, {op, "new_max1 must not share memory with max1"});
  a = args();
  a.optimizer = Optimizer::momentum;
  expect(a, ErrorCode::invalid_argument, {op, "momentum keeps one state: state2 must be absent"});
  a = args();
  a.unorm_vec = TensorRef{};
  a.max_unorm = 0.5f;
  expect(a, ErrorCode::invalid_argument, {op, "unorm_vec"});
  State one = fresh_state(Optimizer::lion, DType::f32, n);
  a = make_args(Optimizer::lion, Hyper{}, 1, g.ref(), one, false);
  a.max_unorm = 0.5f;
  expect(a, ErrorCode::invalid_argument, {op, "lion has no trust ratio", "max_unorm must be 0"});
  a = args();
  a.step = 0;
  expect(a, ErrorCode::invalid_argument, {op, "step must be at least 1 (got 0)"});
  std::vector<float> unsorted = create_dynamic_map(false);
  std::swap(unsorted[10], unsorted[11]);
  const Tensor bad_map = map_tensor(unsorted);
  a = args();
  a.qmap2 = bad_map.ref();
  expect(a, ErrorCode::invalid_argument, {op, "qmap2 must be sorted ascending"});
}

}  // namespace
