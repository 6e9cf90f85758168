// optimizer_update_8bit_blockwise on the CPU, each step against two models
// from the same inputs: bitsandbytes' blockwise kernels transcribed in
// float32 (its quantize_2D binary search and sign correction included),
// whose codes, absmax and p must be the same bits; and a float64 model of the
// rules, which the dequantized states must match within half the map's
// largest gap and p within its dtype's rounding. Every rule, fp32 / fp16 /
// bf16, ragged sizes, weight decay, gnorm_scale, skip_zeros, non-finite
// gradients; the tie rule of the codes; the bad arguments, named.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/optim_blockwise.h"
#include "harness/harness.h"
#include "optim/optim_test_util.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

constexpr int64_t kBlock = OptimizerUpdate8bitBlockwiseArgs::kBlocksize;

// bitsandbytes' quantize_2D: its binary search over a sorted 256-entry code,
// ending with the midpoint comparisons (its first levels read registers that
// hold the same values).
uint32_t bnb_quantize_2d(const float* code, float x, bool is_signed) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = is_signed ? -1.0f : 0.0f, upper = 1.0f, val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot, lower = val, pivot += i;
    } else {
      upper_pivot = pivot, upper = val, pivot -= i;
    }
    val = code[pivot];
  }
  if (x > val) return static_cast<uint32_t>(x > (upper + val) * 0.5f ? upper_pivot : pivot);
  return static_cast<uint32_t>(x < (lower + val) * 0.5f ? lower_pivot : pivot);
}

// bitsandbytes' stored code of state v in a block of absmax m.
uint8_t bnb_code(const float* code, float v, float m, bool is_signed) {
  const float y = v * (m > 0.0f ? 1.0f / m : 0.0f);
  uint8_t c = static_cast<uint8_t>(bnb_quantize_2d(code, y, is_signed));
  if (is_signed && std::signbit(code[c]) != std::signbit(v)) c = static_cast<uint8_t>(v > 0.0f ? c + 1 : c - 1);
  return c;
}

// One element's step in F (float: the kernels' order of operations; double:
// the rules' exact values from the same inputs), p rounded to its dtype.
template <class F>
struct Model {
  Optimizer o;
  Hyper8 h;
  DType dtype;
  F c1, c2, step_size;
  bool first;

  Model(Optimizer rule, const Hyper8& hyper, DType d, int64_t step) : o(rule), h(hyper), dtype(d) {
    const F t = static_cast<F>(step);
    c1 = F(1) - std::pow(F(h.beta1), t);
    c2 = std::sqrt(F(1) - std::pow(F(h.beta2), t));
    step_size = -F(h.lr) * c2 / c1;
    first = step == 1;
  }
  F rnd(F v) const { return static_cast<F>(round_to(dtype, static_cast<double>(v))); }

  // Returns the magnitude of the update's terms (where they cancel, the
  // scale of its float32 rounding); infinite where the update's sign is
  // undecided at float32 precision (lion near a tie).
  F element(float g_raw, F& p, F& s1, F& s2, F& s3) const {
    const F b1 = h.beta1, b2 = h.beta2, b3 = h.beta3, lr = h.lr, wd = h.weight_decay, eps = h.eps;
    if (optimizer_has_state2(o)) {
      if (!std::isfinite(g_raw)) {
        s1 = 0, s2 = 0, s3 = 0;
        return 0;
      }
      const F g = F(g_raw) * F(h.gnorm_scale);
      const F s1m = std::fabs(s1 * b1) + std::fabs((F(1) - b1) * g),
              s3m = std::fabs(s3 * b3) + std::fabs((F(1) - b3) * g);
      s2 = s2 * b2 + (F(1) - b2) * g * g;
      s1 = s1 * b1 + (F(1) - b1) * g;
      F terms = 0;
      if (o == Optimizer::ademamix) {
        s3 = s3 * b3 + (F(1) - b3) * g;
        const F den = std::sqrt(s2) / c2 + eps;
        p = rnd(p - lr * ((s1 / c1 + F(h.alpha) * s3) / den));
        terms = lr * (s1m / c1 + std::fabs(F(h.alpha)) * s3m) / den;
      } else {
        const F den = std::sqrt(s2) + c2 * eps;
        p = rnd(p + step_size * (s1 / den));
        terms = std::fabs(step_size) * s1m / den;
      }
      if (wd > 0) p = rnd(p * (F(1) - lr * wd));
      return terms;
    }
    if (h.skip_zeros && g_raw == 0.0f) return 0;
    F g = F(g_raw) * F(h.gnorm_scale);
    const F gm = std::fabs(g) + (wd > 0 && o != Optimizer::lion ? std::fabs(p * wd) : F(0));
    if (wd > 0 && o == Optimizer::lion) p = rnd(p * (F(1) - lr * wd));
    if (wd > 0 && o != Optimizer::lion) g = g + p * wd;
    switch (o) {
      case Optimizer::momentum: {
        const F s1m = first ? gm : std::fabs(s1 * b1) + gm;
        s1 = first ? g : s1 * b1 + g;
        p = rnd(p - lr * s1);
        return lr * s1m;
      }
      case Optimizer::lion: {
        const F c = s1 * b1 + (F(1) - b1) * g;
        const F cm = std::fabs(s1 * b1) + std::fabs((F(1) - b1) * g);
        const F step = rnd(lr * F((c > 0) - (c < 0)));
        s1 = s1 * b2 + (F(1) - b2) * g;
        p = rnd(p - step);
        return std::fabs(c) <= F(1e-5) * cm ? F(INFINITY) : F(0);
      }
      case Optimizer::rmsprop:
      case Optimizer::adagrad: {
        // The update scales as 1 / sqrt(s1): s1's error where g cancels, relative to s1.
        const F keep = o == Optimizer::rmsprop ? b1 : F(1), add = o == Optimizer::rmsprop ? F(1) - b1 : F(1);
        const F s1m = std::fabs(s1 * keep) + add * gm * gm;
        s1 = s1 * keep + add * (g * g);
        const F update = lr * (F(g_raw) / (std::sqrt(s1) + eps));
        p = rnd(p - update);
        return s1 > 0 ? std::fabs(update) * s1m / s1 : F(INFINITY);
      }
      default: return 0;
    }
  }
};

double max_gap(const std::vector<float>& code) {
  double gap = 0;
  for (size_t i = 0; i + 1 < code.size(); ++i) gap = std::max(gap, double{code[i + 1]} - code[i]);
  return gap;
}

// A unit in the last place of dtype at v.
double ulp_at(DType dtype, double v) {
  const int mant = dtype == DType::f32 ? 23 : dtype == DType::f16 ? 10 : 7;
  const int emin = dtype == DType::f16 ? -14 : -126;
  const int e = v == 0 ? emin : std::max(emin, std::ilogb(v));
  return std::ldexp(1.0, e - mant);
}

// One quantized state of the step: its codes, map and absmax.
struct StateRefs {
  std::string name;
  const uint8_t* codes_in;
  const uint8_t* codes_out;
  const float* absmax_in;
  const float* absmax_out;
  const std::vector<float>* code;
  bool is_signed;
};

// Runs step t of rule o on s (host tensors, updated) and checks it against both models.
void check_step(Optimizer o, DType dtype, const Hyper8& h, int64_t t, State8& s, const std::string& what) {
  const int64_t n = s.p.numel(), blocks = blocks8(n);
  const bool two = optimizer_has_state2(o), mix = o == Optimizer::ademamix;
  const Tensor g = random_grad8(h, dtype, n);
  const State8 in{Tensor::copy_of(s.p.ref(), Device::cpu()),
                  Tensor::copy_of(s.state1.ref(), Device::cpu()),
                  two ? Tensor::copy_of(s.state2.ref(), Device::cpu()) : Tensor(),
                  s.qmap1,
                  s.qmap2,
                  Tensor::copy_of(s.absmax1.ref(), Device::cpu()),
                  two ? Tensor::copy_of(s.absmax2.ref(), Device::cpu()) : Tensor()};
  run(make_args8(o, h, t, g.ref(), s.p.ref(), s.state1.ref(), two ? s.state2.ref() : TensorRef{}, s.qmap1.ref(),
                 two ? s.qmap2.ref() : TensorRef{}, s.absmax1.ref(), two ? s.absmax2.ref() : TensorRef{}));

  const std::vector<float> code1 = to_floats(s.qmap1.ref());
  const std::vector<float> code2 = two ? to_floats(s.qmap2.ref()) : std::vector<float>{};
  // The states of one element: m1, v (state2), m2 (ademamix's state1[n:]).
  std::vector<StateRefs> refs = {{"state1", in.state1.ptr<uint8_t>(), s.state1.ptr<uint8_t>(), in.absmax1.ptr<float>(),
                                  s.absmax1.ptr<float>(), &code1, true}};
  if (two) {
    refs.push_back({"state2", in.state2.ptr<uint8_t>(), s.state2.ptr<uint8_t>(), in.absmax2.ptr<float>(),
                    s.absmax2.ptr<float>(), &code2, false});
  }
  if (mix) {
    refs.push_back({"state1[n:]", in.state1.ptr<uint8_t>() + n, s.state1.ptr<uint8_t>() + n,
                    in.absmax1.ptr<float>() + blocks, s.absmax1.ptr<float>() + blocks, &code1, true});
  }
  const std::vector<float> gv = to_floats(g.ref()), p_in = to_floats(in.p.ref()), p_out = to_floats(s.p.ref());
  const Model<float> m32(o, h, dtype, t);
  const Model<double> m64(o, h, dtype, t);
  int bad = 0;
  auto fail = [&](const std::string& msg) {
    if (bad++ < 8) ADD_FAILURE() << what << " step " << t << ": " << msg;
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    std::vector<std::vector<float>> v32(3, std::vector<float>(count, 0.0f));
    std::vector<std::vector<double>> v64(3, std::vector<double>(count, 0.0));
    for (size_t k = 0; k < refs.size(); ++k) {
      for (int64_t i = 0; i < count; ++i) {
        v32[k][i] = (*refs[k].code)[refs[k].codes_in[begin + i]] * refs[k].absmax_in[b];
        v64[k][i] = double{(*refs[k].code)[refs[k].codes_in[begin + i]]} * refs[k].absmax_in[b];
      }
    }
    // refs order is m1, v, m2; the models take (s1, s2, s3) = (m1, v, m2).
    for (int64_t i = 0; i < count; ++i) {
      float p32 = p_in[begin + i];
      double p64 = p_in[begin + i];
      m32.element(gv[begin + i], p32, v32[0][i], v32[1][i], v32[2][i]);
      const double terms = m64.element(gv[begin + i], p64, v64[0][i], v64[1][i], v64[2][i]);
      const float got = p_out[begin + i];
      const std::string at = "p[" + std::to_string(begin + i) + "] = " + std::to_string(got);
      if (ordered_bits(dtype, got) != ordered_bits(dtype, p32)) fail(at + ", model " + std::to_string(p32));
      const double moved = std::fabs(p64 - p_in[begin + i]);
      if (!(got == p64 || std::fabs(got - p64) <= 3 * ulp_at(dtype, p64) + 1e-5 * (moved + terms))) {
        fail(at + ", float64 " + std::to_string(p64));
      }
    }
    for (size_t k = 0; k < refs.size(); ++k) {
      const StateRefs& r = refs[k];
      // slack: how far float32 arithmetic took the states from float64 (where
      // a state's terms cancel, far in relative terms).
      float m = 0.0f;
      double m64 = 0.0, slack = 0.0;
      for (int64_t i = 0; i < count; ++i) {
        m = std::max(m, std::fabs(v32[k][i]));
        m64 = std::max(m64, std::fabs(v64[k][i]));
        slack = std::max(slack, std::fabs(v32[k][i] - v64[k][i]));
      }
      const std::string& which = r.name;
      if (r.absmax_out[b] != m) {
        fail(which + " absmax[" + std::to_string(b) + "] = " + std::to_string(r.absmax_out[b]) + ", model " +
             std::to_string(m));
      }
      if (!(std::fabs(r.absmax_out[b] - m64) <= 1e-6 * m64 + slack)) fail(which + " absmax off the float64 model");
      // The nearest code is at most half the map's largest gap away.
      const double tol = 0.5 * max_gap(*r.code) * m64 * (1 + 1e-5) + 2 * slack;
      for (int64_t i = 0; i < count; ++i) {
        const uint8_t want = bnb_code(r.code->data(), v32[k][i], m, r.is_signed), got = r.codes_out[begin + i];
        if (got != want) {
          fail(which + "[" + std::to_string(begin + i) + "] code " + std::to_string(got) + ", model " +
               std::to_string(want) + " (state " + std::to_string(v32[k][i]) + ", absmax " + std::to_string(m) + ")");
        }
        const double back = double{(*r.code)[got]} * r.absmax_out[b];
        if (!(std::fabs(back - v64[k][i]) <= tol)) {
          fail(which + "[" + std::to_string(begin + i) + "] decodes to " + std::to_string(back) + ", float64 " +
               std::to_string(v64[k][i]));
        }
      }
    }
  }
}

void run_case(Optimizer o, DType dtype, const Hyper8& h, int64_t n, int steps) {
  const std::string what = std::string(optimizer_name(o)) + " " + std::string(dtype_name(dtype)) +
                           " n=" + std::to_string(n) + " wd=" + std::to_string(h.weight_decay) +
                           " gnorm_scale=" + std::to_string(h.gnorm_scale) + (h.skip_zeros ? " skip_zeros" : "") +
                           (h.specials_in_g ? " inf/nan in g" : "");
  SCOPED_TRACE(what);
  State8 s = random_state8(o, dtype, n);
  for (int t = 1; t <= steps; ++t) check_step(o, dtype, h, t, s, what);
}

TEST(Optimizer8bitBlockwise, EveryRuleMatchesTheKernelModel) {
  SCOPED_TRACE("impls: " + impl_names<OptimizerUpdate8bitBlockwiseArgs>());
  const int64_t sizes[] = {1, 255, 256, 257, 1000, 70001};
  int k = 0;
  for (Optimizer o : kRules8) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      Hyper8 plain;
      run_case(o, dtype, plain, sizes[k++ % 6], 3);
      Hyper8 decay;
      decay.weight_decay = 0.05f;
      decay.gnorm_scale = 0.5f;
      run_case(o, dtype, decay, sizes[k++ % 6], 3);
      Hyper8 odd = decay;  // skip_zeros (one-state rules; the two-state kernel has none) and Inf / NaN in g
      odd.skip_zeros = odd.zeros_in_g = true;
      odd.specials_in_g = optimizer_has_state2(o);
      run_case(o, dtype, odd, sizes[k++ % 6], 3);
    }
  }
}

TEST(Optimizer8bitBlockwise, CodesAreBitsandbytesQuantize2D) {
  // Every code, every midpoint (the ties), their neighbours, random values.
  for (bool is_signed : {true, false}) {
    const std::vector<float> code = create_dynamic_map(is_signed);
    float mid[255];
    core::table_midpoints(code.data(), 256, mid);
    std::vector<float> ys = {0.0f, -0.0f, 1.0f, -1.0f};
    for (int i = 0; i < 256; ++i) ys.push_back(code[i]);
    for (int i = 0; i < 255; ++i) {
      ys.push_back(mid[i]);
      ys.push_back(std::nextafter(mid[i], 2.0f));
      ys.push_back(std::nextafter(mid[i], -2.0f));
    }
    std::uniform_real_distribution<float> u(is_signed ? -1.0f : 0.0f, 1.0f);
    for (int i = 0; i < 100000; ++i) ys.push_back(u(rng()));
    int bad = 0;
    for (float y : ys) {
      const uint32_t below = core::encode_by_midpoints<8>(y, mid);
      const uint32_t got = core::optim::state_code(y, y, below, code.data(), mid, false);
      const uint32_t want = bnb_quantize_2d(code.data(), y, is_signed);
      // And with the sign rule, as a signed state is stored.
      const uint32_t got_signed = core::optim::state_code(y, y, below, code.data(), mid, true);
      const uint32_t want_signed = is_signed ? bnb_code(code.data(), y, 1.0f, true) : got_signed;
      if ((got != want || got_signed != want_signed) && bad++ < 5) {
        ADD_FAILURE() << (is_signed ? "signed" : "unsigned") << " map, y = " << y << ": code " << got << " / "
                      << got_signed << " with the sign rule, quantize_2D " << want << " / " << want_signed;
      }
    }
  }
}

TEST(Optimizer8bitBlockwise, EmptyTensorDoesNothing) {
  for (Optimizer o : kRules8) {
    State8 s = random_state8(o, DType::f32, 0);
    const Tensor g = Tensor::empty({0}, DType::f32);
    const bool two = optimizer_has_state2(o);
    run(make_args8(o, Hyper8{}, 1, g.ref(), s.p.ref(), s.state1.ref(), two ? s.state2.ref() : TensorRef{},
                   s.qmap1.ref(), two ? s.qmap2.ref() : TensorRef{}, s.absmax1.ref(),
                   two ? s.absmax2.ref() : TensorRef{}));
  }
}

TEST(Optimizer8bitBlockwise, BadArgumentsSayWhatIsWrong) {
  const int64_t n = 300;  // two blocks
  State8 s = random_state8(Optimizer::adam, DType::f32, n);
  const Tensor g = random_floats({n}, DType::f32), p16 = random_floats({n}, DType::f16);
  const Tensor f32_state = Tensor::empty({n}, DType::f32), short_absmax = Tensor::empty({1}, DType::f32);
  Tensor unsorted = map_tensor(create_dynamic_map(true));
  std::swap(unsorted.ptr<float>()[10], unsorted.ptr<float>()[11]);
  auto args = [&] {
    return make_args8(Optimizer::adam, Hyper8{}, 1, g.ref(), s.p.ref(), s.state1.ref(), s.state2.ref(), s.qmap1.ref(),
                      s.qmap2.ref(), s.absmax1.ref(), s.absmax2.ref());
  };
  const std::string op = "optimizer_update_8bit_blockwise";
  auto expect = [&](OptimizerUpdate8bitBlockwiseArgs a, ErrorCode code, const std::vector<std::string>& parts) {
    expect_error([&] { run(a); }, code, parts);
  };
  auto a = args();
  a.optimizer = Optimizer::lamb;
  expect(a, ErrorCode::invalid_argument, {op, "optimizer must be one of adam, momentum", "ademamix", "(got lamb)"});
  a = args();
  a.optimizer = Optimizer::momentum;
  expect(a, ErrorCode::invalid_argument, {op, "momentum keeps one state: state2 must be absent"});
  a = args();
  a.p = p16.ref();
  expect(a, ErrorCode::invalid_argument, {op, "p must have g's dtype float32", "float16"});
  a = args();
  a.state1 = f32_state.ref();
  expect(a, ErrorCode::unsupported_dtype, {op, "state1", "uint8", "float32"});
  a = args();
  a.absmax2 = short_absmax.ref();
  expect(a, ErrorCode::invalid_argument, {op, "absmax2"});
  a = args();
  a.optimizer = Optimizer::ademamix;  // state1 holds m1 and m2: 2n codes, 2 x blocks absmax
  expect(a, ErrorCode::invalid_argument, {op, "state1"});
  a = args();
  a.qmap1 = unsorted.ref();
  expect(a, ErrorCode::invalid_argument, {op, "qmap1 must be sorted ascending", "qmap1[10]"});
  a = args();
  a.qmap2 = {};
  expect(a, ErrorCode::invalid_argument, {op, "qmap2"});
  a = args();
  a.step = 0;
  expect(a, ErrorCode::invalid_argument, {op, "step must be at least 1", "got 0"});
}

}  // namespace
