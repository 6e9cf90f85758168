/* The C ABI used from C11 on CPU DLTensors: round trips with error bounds,
 * the DLPack conversion rules (dtypes, fp8 as uint8, byte_offset, strides,
 * lanes, devices), bad input reported by status and message, and the
 * library-level calls. Prints "N passed, M failed"; exits non-zero on any
 * failure. No libm: the program links lowbit and nothing else. */
#include "harness.h"

/* ------------------------------------------------------------- helpers */

/* Deterministic values in [-scale, scale) (an LCG: no libc rand state). */
static void fill(float* x, int n, unsigned seed, float scale) {
  unsigned s = seed * 2654435761u + 1u;
  int i;
  for (i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
  }
}

static float block_absmax(const float* x, int begin, int end) {
  float m = 0.0f;
  int i;
  for (i = begin; i < end; ++i) m = (float)absd(x[i]) > m ? (float)absd(x[i]) : m;
  return m;
}

/* Largest |x - y| / absmax of x's block. */
static double max_block_error(const float* x, const float* y, int n, int block) {
  double worst = 0.0;
  int i;
  for (i = 0; i < n; ++i) {
    const int b = i / block;
    const float a = block_absmax(x, b * block, (b + 1) * block < n ? (b + 1) * block : n);
    const double e = a > 0 ? absd((double)x[i] - y[i]) / a : absd(y[i]);
    worst = e > worst ? e : worst;
  }
  return worst;
}


/* bfloat16 bits -> float: the upper half of a float32. */
static float bf16_to_float(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* OCP E4M3FN byte -> float (no infinities; 0x7f / 0xff are NaN). */
static float e4m3_to_float(uint8_t b) {
  const int exp = (b >> 3) & 0xf, mant = b & 7;
  float v = exp == 0 ? (float)mant / 8.0f : 1.0f + (float)mant / 8.0f;
  int e = exp == 0 ? -6 : exp - 7;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return (b & 0x80) ? -v : v;
}

/* --------------------------------------------------------------- tests */

static void test_library(void) {
  CHECK(strcmp(lowbit_version(), LOWBIT_VERSION_STRING) == 0, "version %s", lowbit_version());
  CHECK(strcmp(lowbit_status_name(LOWBIT_OK), "ok") == 0, "%s", lowbit_status_name(LOWBIT_OK));
  CHECK(strcmp(lowbit_status_name(LOWBIT_INVALID_ARGUMENT), "invalid_argument") == 0, "name");
  CHECK(strcmp(lowbit_status_name(LOWBIT_FORMAT_ERROR), "format_error") == 0, "name");
  CHECK(strcmp(lowbit_status_name(LOWBIT_INTERNAL), "internal") == 0, "name");
  CHECK(strcmp(lowbit_status_name((lowbit_status)42), "unknown") == 0, "%s", lowbit_status_name((lowbit_status)42));
  CHECK(lowbit_cuda_device_count() >= 0, "count %d", lowbit_cuda_device_count());
}

static void test_code_maps(void) {
  float map[256], nf4[16];
  size_t count = 0;
  int i, sorted = 1;
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, NULL, 0, &count));
  CHECK(count == 256, "size query gave %zu", count);
  count = 0;
  CHECK(lowbit_create_dynamic_map(1, 7, 8, map, 16, &count) == LOWBIT_INVALID_ARGUMENT, "small buffer");
  CHECK(count == 256, "count %zu after a too-small buffer", count);
  CHECK(contains(lowbit_last_error(), "create_dynamic_map") && contains(lowbit_last_error(), "capacity"), "message");
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, map, 256, &count));
  CHECK(strcmp(lowbit_last_error(), "") == 0, "a success clears the message");
  for (i = 1; i < 256; ++i) sorted = sorted && map[i - 1] <= map[i];
  CHECK(sorted && map[255] == 1.0f && map[0] == -map[254], "dynamic map %g .. %g", map[0], map[255]);
  CHECK_OK(lowbit_get_4bit_type("nf4", 64, nf4, 16, &count));
  CHECK(count == 16 && nf4[0] == -1.0f && nf4[7] == 0.0f && nf4[15] == 1.0f, "nf4 ends");
  CHECK(absd(nf4[1] - -0.6961928009986877) < 1e-7 && absd(nf4[8] - 0.07958029955625534) < 1e-7, "nf4 values");
  CHECK(lowbit_get_4bit_type("nf5", 64, nf4, 16, &count) != LOWBIT_OK, "unknown table");
  CHECK(lowbit_get_4bit_type(NULL, 64, nf4, 16, &count) == LOWBIT_INVALID_ARGUMENT, "NULL name");
}

enum { N8 = 1000, B8 = 256, NB8 = (N8 + B8 - 1) / B8 };

static void test_blockwise(void) {
  static float x[N8], y[N8], code[256], absmax[NB8];
  static uint8_t q[N8];
  static uint16_t ybf[N8];
  int64_t n = N8, ncode = 256, nblocks = NB8;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), tc = make_tensor(code, kDLFloat, 32, 1, &ncode);
  DLTensor tq = make_tensor(q, kDLUInt, 8, 1, &n), ta = make_tensor(absmax, kDLFloat, 32, 1, &nblocks);
  DLTensor ty = make_tensor(y, kDLFloat, 32, 1, &n), tybf = make_tensor(ybf, kDLBfloat, 16, 1, &n);
  int i, b, absmax_exact = 1;
  double err;

  fill(x, N8, 1, 3.0f);
  x[7] = 0.0f;
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, code, 256, NULL));
  CHECK_OK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, B8, NULL));
  for (b = 0; b < NB8; ++b) {
    absmax_exact = absmax_exact && absmax[b] == block_absmax(x, b * B8, (b + 1) * B8 < N8 ? (b + 1) * B8 : N8);
  }
  CHECK(absmax_exact, "absmax is max |x| of each block");
  CHECK_OK(lowbit_dequantize_blockwise(&tq, &tc, &ta, NULL, &ty, B8, NULL));
  /* The dynamic map's widest step near 1 is 0.9/64: half of it bounds the error. */
  err = max_block_error(x, y, N8, B8);
  CHECK(err <= 0.9 / 128 + 1e-6, "8-bit error %g", err);
  CHECK(y[7] == 0.0f, "zero stays zero (got %g)", y[7]);

  /* bfloat16 output: the float32 result rounded to bf16. */
  CHECK_OK(lowbit_dequantize_blockwise(&tq, &tc, &ta, NULL, &tybf, B8, NULL));
  for (i = 0, err = 0.0; i < N8; ++i) {
    const double e = absd(bf16_to_float(ybf[i]) - y[i]) / (absd(y[i]) + 1e-30);
    err = y[i] != 0.0f && e > err ? e : err;
  }
  CHECK(err <= 1.0 / 256, "bf16 output differs from f32 by %g relative", err);
}

/* Nested absmax from C: center absmax, quantize it with the same map, then
 * dequantize through lowbit_nested_absmax. */
static void test_blockwise_nested(void) {
  static float x[N8], y[N8], code[256], absmax[NB8], absmax2[1], offset[1], centered[NB8];
  static uint8_t q[N8], qabsmax[NB8];
  int64_t n = N8, ncode = 256, nblocks = NB8, one = 1;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), tc = make_tensor(code, kDLFloat, 32, 1, &ncode);
  DLTensor tq = make_tensor(q, kDLUInt, 8, 1, &n), ta = make_tensor(absmax, kDLFloat, 32, 1, &nblocks);
  DLTensor tcent = make_tensor(centered, kDLFloat, 32, 1, &nblocks), toff = make_tensor(offset, kDLFloat, 32, 1, &one);
  DLTensor tqa = make_tensor(qabsmax, kDLUInt, 8, 1, &nblocks), ta2 = make_tensor(absmax2, kDLFloat, 32, 1, &one);
  DLTensor ty = make_tensor(y, kDLFloat, 32, 1, &n);
  lowbit_nested_absmax nested;
  double mean = 0.0, err;
  int b;

  fill(x, N8, 2, 5.0f);
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, code, 256, NULL));
  CHECK_OK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, B8, NULL));
  memcpy(centered, absmax, sizeof absmax);
  CHECK_OK(lowbit_absmax_center(&tcent, &toff, NULL));
  for (b = 0; b < NB8; ++b) mean += absmax[b] / NB8;
  CHECK(absd(offset[0] - mean) <= 1e-5 * mean, "offset %g, mean %g", offset[0], mean);
  CHECK(absd(centered[0] - (absmax[0] - offset[0])) <= 1e-6, "centered in place");
  CHECK_OK(lowbit_quantize_blockwise(&tcent, &tc, &tqa, &ta2, 256, NULL));

  nested.code = &tc;
  nested.absmax = &ta2;
  nested.offset = &toff;
  nested.blocksize = 256;
  CHECK_OK(lowbit_dequantize_blockwise(&tq, &tc, &tqa, &nested, &ty, B8, NULL));
  /* The absmax itself is now off by up to half a step of its own map. */
  err = max_block_error(x, y, N8, B8);
  CHECK(err <= 0.9 / 128 + 0.9 / 128 * 2 + 1e-6, "nested 8-bit error %g", err);

  nested.offset = NULL;
  CHECK(lowbit_dequantize_blockwise(&tq, &tc, &tqa, &nested, &ty, B8, NULL) == LOWBIT_INVALID_ARGUMENT, "no offset");
  CHECK(contains(lowbit_last_error(), "dequantize_blockwise") && contains(lowbit_last_error(), "nested->offset"),
        "message names the nested argument");
}

enum { N4 = 777, B4 = 64, NB4 = (N4 + B4 - 1) / B4, P4 = (N4 + 1) / 2 };

static void test_4bit(lowbit_quant4_type type, double bound) {
  static float x[N4], y[N4], absmax[NB4];
  static uint8_t q[P4];
  int64_t n = N4, packed = P4, nblocks = NB4;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), tq = make_tensor(q, kDLUInt, 8, 1, &packed);
  DLTensor ta = make_tensor(absmax, kDLFloat, 32, 1, &nblocks), ty = make_tensor(y, kDLFloat, 32, 1, &n);
  double err;

  fill(x, N4, 3 + (unsigned)type, 2.0f);
  CHECK_OK(lowbit_quantize_4bit(&tx, &tq, &ta, B4, type, NULL));
  CHECK((q[P4 - 1] & 0x0f) == 0, "odd tail leaves the low nibble 0 (byte %#x)", q[P4 - 1]);
  CHECK_OK(lowbit_dequantize_4bit(&tq, &ta, NULL, &ty, B4, type, NULL));
  err = max_block_error(x, y, N4, B4);
  CHECK(err <= bound, "4-bit type %d error %g > %g", (int)type, err, bound);
  CHECK(lowbit_quantize_4bit(&tx, &tq, &ta, B4, (lowbit_quant4_type)7, NULL) == LOWBIT_INVALID_ARGUMENT, "type 7");
  CHECK(contains(lowbit_last_error(), "quantize_4bit") && contains(lowbit_last_error(), "type"), "message");
}

/* DeepSeek act_quant, with out as fp8 (code 10) and as uint8. */
static void test_act_quant(uint8_t out_code) {
  enum { ROWS = 2, K = 256, NS = K / 128 };
  static float x[ROWS * K], scale[ROWS * NS];
  static uint8_t q[ROWS * K];
  int64_t shape[2] = {ROWS, K}, sshape[2] = {ROWS, NS};
  DLTensor tx = make_tensor(x, kDLFloat, 32, 2, shape), tq = make_tensor(q, out_code, 8, 2, shape);
  DLTensor ts = make_tensor(scale, kDLFloat, 32, 2, sshape);
  double worst = 0.0, scale_err = 0.0;
  int i;

  fill(x, ROWS * K, 5, 30.0f);
  CHECK_OK(lowbit_act_quant(&tx, &tq, &ts, 128, 0, NULL));
  for (i = 0; i < ROWS * NS; ++i) {
    const double want = block_absmax(x, i * 128, i * 128 + 128) / 448.0;
    scale_err = absd(scale[i] - want) / want > scale_err ? absd(scale[i] - want) / want : scale_err;
  }
  CHECK(scale_err <= 1e-6, "scale = amax / 448 (relative error %g)", scale_err);
  for (i = 0; i < ROWS * K; ++i) {
    const double s = scale[i / 128];
    /* E4M3: 3 mantissa bits, so half an ulp is 2^-4 relative; subnormals step 2^-9. */
    const double e = absd(x[i] - e4m3_to_float(q[i]) * s) / (absd(x[i]) / 16 + s / 512 + 1e-30);
    worst = e > worst ? e : worst;
  }
  CHECK(worst <= 1.0 + 1e-6, "fp8 error %g of its bound (out code %d)", worst, out_code);
}

static void test_weight_fp8(void) {
  enum { ROWS = 130, COLS = 200, SR = 2, SC = 2 };
  static float w[ROWS * COLS], back[ROWS * COLS], scale[SR * SC];
  static uint8_t q[ROWS * COLS];
  int64_t shape[2] = {ROWS, COLS}, sshape[2] = {SR, SC};
  DLTensor tw = make_tensor(w, kDLFloat, 32, 2, shape), tq = make_tensor(q, kDLUInt, 8, 2, shape);
  DLTensor ts = make_tensor(scale, kDLFloat, 32, 2, sshape), tb = make_tensor(back, kDLFloat, 32, 2, shape);
  double worst = 0.0;
  int i;

  fill(w, ROWS * COLS, 6, 0.2f);
  CHECK_OK(lowbit_weight_quant(&tw, &tq, &ts, 128, NULL));
  CHECK_OK(lowbit_weight_dequant(&tq, &ts, &tb, 128, NULL));
  for (i = 0; i < ROWS * COLS; ++i) {
    const double s = scale[(i / COLS / 128) * SC + (i % COLS) / 128];
    const double e = absd(w[i] - back[i]) / (absd(w[i]) / 16 + s / 512 + 1e-30);
    worst = e > worst ? e : worst;
  }
  CHECK(worst <= 1.0 + 1e-6, "weight fp8 round trip at %g of its bound", worst);
}

/* Exact sums: a = 1.0 (code 0x38), b[0] = 2.0 (0x40), b[1] = 0.5 (0x30); every
 * product and scale a power of two. */
static void test_int8_gemm(void) {
  enum { M = 2, N = 3, K = 5 };
  static int8_t a[M * K], b[N * K];
  static int32_t c[M * N];
  static float rs[M] = {127.0f, 254.0f}, cs[N] = {1.0f, 2.0f, 4.0f}, bias[N] = {0.5f, 0.0f, -1.0f}, out[M * N],
               fused[M * N];
  int64_t a_shape[2] = {M, K}, b_shape[2] = {N, K}, c_shape[2] = {M, N}, m = M, n = N;
  DLTensor ta = make_tensor(a, kDLInt, 8, 2, a_shape), tb = make_tensor(b, kDLInt, 8, 2, b_shape);
  DLTensor tc = make_tensor(c, kDLInt, 32, 2, c_shape), trs = make_tensor(rs, kDLFloat, 32, 1, &m);
  DLTensor tcs = make_tensor(cs, kDLFloat, 32, 1, &n), tbias = make_tensor(bias, kDLFloat, 32, 1, &n);
  DLTensor tout = make_tensor(out, kDLFloat, 32, 2, c_shape), tfused = make_tensor(fused, kDLFloat, 32, 2, c_shape);
  int i, j, k, ok = 1;

  for (i = 0; i < M * K; ++i) a[i] = (int8_t)(i % 2 ? -128 : 127);
  for (i = 0; i < N * K; ++i) b[i] = (int8_t)(i - 7);
  CHECK_OK(lowbit_int8_linear_matmul(&ta, &tb, &tc, NULL));
  for (i = 0; i < M; ++i) {
    for (j = 0; j < N; ++j) {
      int32_t s = 0;
      for (k = 0; k < K; ++k) s += a[i * K + k] * b[j * K + k];
      ok &= c[i * N + j] == s;
    }
  }
  CHECK(ok, "int8_linear_matmul: c[0] = %d", c[0]);
  CHECK_OK(lowbit_int8_mm_dequant(&tc, &trs, &tcs, &tbias, &tout, NULL));
  CHECK_OK(lowbit_int8_scaled_mm(&ta, &tb, &trs, &tcs, &tbias, &tfused, NULL));
  ok = 1;
  for (i = 0; i < M * N; ++i) {
    /* the formula's bits are the C++ tests'; here, the plumbing (a compiler may contract the C into an fma) */
    const double want = (double)c[i] * rs[i / N] * cs[i % N] / (127.0 * 127.0) + bias[i % N];
    const double err = out[i] - want, mag = want < 0 ? -want : want;
    ok &= (err < 0 ? -err : err) <= 1e-5 * mag + 1e-6 && out[i] == fused[i];
  }
  CHECK(ok, "int8_mm_dequant / int8_scaled_mm: out[0] = %g, fused[0] = %g", out[0], fused[0]);
  CHECK(lowbit_int8_linear_matmul(&ta, &ta, &tc, NULL) == LOWBIT_INVALID_ARGUMENT,
        "int8_linear_matmul: b of the wrong shape is refused");
}

/* The LLM.int8 linear: one outlier column (|a| >= 6) taken in float32, the rest through int8; the result
 * near the float product with the dequantized weight, and the outlier part alone on zeros. */
static void test_int8_linear(void) {
  enum { M = 2, N = 3, K = 8 };
  static float a[M * K], out[M * N], part[M * N];
  static int8_t b[N * K];
  static uint8_t mask[K];
  static float bs[N] = {127.0f, 63.5f, 254.0f};
  int64_t a_shape[2] = {M, K}, b_shape[2] = {N, K}, o_shape[2] = {M, N}, n = N, k = K;
  DLTensor ta = make_tensor(a, kDLFloat, 32, 2, a_shape), tb = make_tensor(b, kDLInt, 8, 2, b_shape);
  DLTensor tbs = make_tensor(bs, kDLFloat, 32, 1, &n), tout = make_tensor(out, kDLFloat, 32, 2, o_shape);
  DLTensor tmask = make_tensor(mask, kDLUInt, 8, 1, &k), tpart = make_tensor(part, kDLFloat, 32, 2, o_shape);
  int i, j, kk, ok = 1;
  for (i = 0; i < M * K; ++i) a[i] = (float)((i % 5) - 2) * 0.5f;
  a[3] = 40.0f;  /* row 0, column 3: an outlier */
  for (i = 0; i < N * K; ++i) b[i] = (int8_t)((i * 37) % 255 - 127);
  CHECK_OK(lowbit_int8_linear(&ta, &tb, &tbs, NULL, 6.0f, &tout, NULL));
  for (i = 0; i < M; ++i) {
    for (j = 0; j < N; ++j) {
      double want = 0.0, mag = 0.0;
      for (kk = 0; kk < K; ++kk) {
        const double t = a[i * K + kk] * (b[j * K + kk] * bs[j] / 127.0);
        want += t;
        mag += t < 0 ? -t : t;
      }
      const double err = out[i * N + j] - want;
      ok &= (err < 0 ? -err : err) <= 0.02 * mag + 1e-6;
    }
  }
  CHECK(ok, "int8_linear: out[0] = %g", out[0]);
  mask[3] = 1;
  CHECK_OK(lowbit_int8_linear_outliers(&ta, &tmask, &tb, &tbs, &tpart, NULL));
  for (i = 0; i < M; ++i) {
    for (j = 0; j < N; ++j) {
      const double want = a[i * K + 3] * (b[j * K + 3] * bs[j] / 127.0), err = part[i * N + j] - want;
      ok &= (err < 0 ? -err : err) <= 1e-5 * (want < 0 ? -want : want) + 1e-6;
    }
  }
  CHECK(ok, "int8_linear_outliers: part[0] = %g", part[0]);
  CHECK(lowbit_int8_linear(&ta, &tb, &tbs, NULL, -1.0f, &tout, NULL) == LOWBIT_INVALID_ARGUMENT,
        "int8_linear: a negative threshold is refused");
  {
    /* the input gradient: part (as grad_out [M, N]) times the dequantized weight -> [M, K] */
    static float ga[M * K];
    DLTensor tga = make_tensor(ga, kDLFloat, 32, 2, a_shape);
    CHECK_OK(lowbit_int8_linear_grad_input(&tpart, &tb, &tbs, &tga, NULL));
    for (i = 0; i < M; ++i) {
      for (kk = 0; kk < K; ++kk) {
        double want = 0.0, mag = 0.0;
        for (j = 0; j < N; ++j) {
          const double t = part[i * N + j] * (b[j * K + kk] * bs[j] / 127.0);
          want += t;
          mag += t < 0 ? -t : t;
        }
        const double err = ga[i * K + kk] - want;
        ok &= (err < 0 ? -err : err) <= 1e-5 * mag + 1e-6;
      }
    }
    CHECK(ok, "int8_linear_grad_input: ga[0] = %g", ga[0]);
  }
}

static void test_fp8_gemm(void) {
  enum { M = 2, N = 3, K = 160, KB = 2, E = 2 };
  static uint8_t a[M * K], b[E * N * K];
  static float a_s[M * KB], b_s[E * KB], bias[N], out[M * N], grouped[M * N], masked[E * M * N];
  static int32_t ids[M] = {1, -1}, counts[E] = {1, 0};
  int64_t a_shape[2] = {M, K}, as_shape[2] = {M, KB}, b_shape[2] = {N, K}, bs_shape[2] = {1, KB}, n = N;
  int64_t out_shape[2] = {M, N}, m = M, e = E;
  int64_t gb_shape[3] = {E, N, K}, gbs_shape[3] = {E, 1, KB}, ma_shape[3] = {E, 1, K}, mas_shape[3] = {E, 1, KB};
  int64_t mo_shape[3] = {E, 1, N};
  DLTensor ta = make_tensor(a, kDLUInt, 8, 2, a_shape), tas = make_tensor(a_s, kDLFloat, 32, 2, as_shape);
  DLTensor tb = make_tensor(b, kDLUInt, 8, 2, b_shape), tbs = make_tensor(b_s, kDLFloat, 32, 2, bs_shape);
  DLTensor tbias = make_tensor(bias, kDLFloat, 32, 1, &n), tout = make_tensor(out, kDLFloat, 32, 2, out_shape);
  DLTensor tids = make_tensor(ids, kDLInt, 32, 1, &m), tcounts = make_tensor(counts, kDLInt, 32, 1, &e);
  DLTensor tgb = make_tensor(b, kDLUInt, 8, 3, gb_shape), tgbs = make_tensor(b_s, kDLFloat, 32, 3, gbs_shape);
  DLTensor tgo = make_tensor(grouped, kDLFloat, 32, 2, out_shape);
  DLTensor tma = make_tensor(a, kDLUInt, 8, 3, ma_shape), tmas = make_tensor(a_s, kDLFloat, 32, 3, mas_shape);
  DLTensor tmo = make_tensor(masked, kDLFloat, 32, 3, mo_shape);
  int i, ok = 1;

  for (i = 0; i < M * K; ++i) a[i] = 0x38;
  for (i = 0; i < E * N * K; ++i) b[i] = i < N * K ? 0x40 : 0x30;
  for (i = 0; i < M * KB; ++i) a_s[i] = 0.5f;
  for (i = 0; i < E * KB; ++i) b_s[i] = 0.25f;
  for (i = 0; i < N; ++i) bias[i] = (float)i;
  CHECK_OK(lowbit_fp8_gemm(&ta, &tas, &tb, &tbs, &tbias, &tout, NULL));
  for (i = 0; i < M * N; ++i) ok &= out[i] == K * 2.0f * 0.125f + (float)(i % N);
  CHECK(ok, "fp8_gemm: out[0] = %g, want %g", out[0], K * 2.0 * 0.125);

  CHECK_OK(lowbit_fp8_grouped_gemm_contiguous(&ta, &tas, &tgb, &tgbs, &tids, &tgo, NULL));
  ok = 1;
  for (i = 0; i < N; ++i) ok &= grouped[i] == K * 0.5f * 0.125f && grouped[N + i] == 0.0f;
  CHECK(ok, "fp8_grouped_gemm_contiguous: expert 1 for row 0, zeros for the padding row (got %g, %g)", grouped[0],
        grouped[N]);

  /* a as [E = 2, max_m = 1, K]: expert 0 has its row, expert 1 none. */
  CHECK_OK(lowbit_fp8_grouped_gemm_masked(&tma, &tmas, &tgb, &tgbs, &tcounts, &tmo, NULL));
  ok = 1;
  for (i = 0; i < N; ++i) ok &= masked[i] == K * 2.0f * 0.125f && masked[N + i] == 0.0f;
  CHECK(ok, "fp8_grouped_gemm_masked: expert 0's row, zeros past expert 1's count (got %g, %g)", masked[0],
        masked[N]);

  ids[0] = 7;
  CHECK(lowbit_fp8_grouped_gemm_contiguous(&ta, &tas, &tgb, &tgbs, &tids, &tgo, NULL) == LOWBIT_INVALID_ARGUMENT,
        "an expert id out of range is invalid_argument");
  ids[0] = 1;
}

static void test_optimizer(void) {
  enum { N = 5 };
  static float g[N] = {1.0f, -2.0f, 0.5f, 0.0f, 4.0f}, p[N], s1[N];
  int64_t n = N;
  DLTensor tg = make_tensor(g, kDLFloat, 32, 1, &n), tp = make_tensor(p, kDLFloat, 32, 1, &n);
  DLTensor ts1 = make_tensor(s1, kDLFloat, 32, 1, &n);
  lowbit_optimizer_hparams h;
  int i, ok = 1;
  memset(&h, 0, sizeof h);
  h.beta1 = 0.9f;
  h.lr = 0.5f;
  h.gnorm_scale = 1.0f;
  h.step = 1;
  for (i = 0; i < N; ++i) p[i] = 1.0f, s1[i] = 7.0f;
  /* momentum, step 1: the state takes g, p moves by -lr * g. */
  CHECK_OK(lowbit_optimizer_update_32bit("momentum", &tg, &tp, &ts1, NULL, NULL, &h, NULL));
  for (i = 0; i < N; ++i) ok &= s1[i] == g[i] && p[i] == 1.0f - 0.5f * g[i];
  CHECK(ok, "optimizer_update_32bit: momentum step 1 (got p[0] = %g, s1[0] = %g)", p[0], s1[0]);
  CHECK(lowbit_optimizer_update_32bit("adamw", &tg, &tp, &ts1, NULL, NULL, &h, NULL) == LOWBIT_INVALID_ARGUMENT,
        "an unknown optimizer name is invalid_argument");
  CHECK(contains(lowbit_last_error(), "optimizer_name"), "the message names optimizer_name (got %s)",
        lowbit_last_error());
  CHECK(lowbit_optimizer_update_32bit("adam", &tg, &tp, &ts1, NULL, NULL, &h, NULL) == LOWBIT_INVALID_ARGUMENT,
        "adam without state2 is invalid_argument");
  CHECK(lowbit_optimizer_update_32bit("momentum", &tg, &tp, &ts1, NULL, NULL, NULL, NULL) == LOWBIT_INVALID_ARGUMENT,
        "NULL hparams is invalid_argument");
}

/* momentum at step 1 with 8-bit blockwise states: m = g, so each block's
 * absmax is max|g| and the codes decode to g within the map's largest gap;
 * p moves by -lr * g exactly (fp32, lr a power of two). */
static void test_optimizer_8bit_blockwise(void) {
  enum { N = 300, BLOCKS = 2 };
  static float g[N], p[N], qmap[256], absmax[BLOCKS];
  static uint8_t s1[N];
  int64_t n = N, nq = 256, nb = BLOCKS;
  DLTensor tg = make_tensor(g, kDLFloat, 32, 1, &n), tp = make_tensor(p, kDLFloat, 32, 1, &n);
  DLTensor ts1 = make_tensor(s1, kDLUInt, 8, 1, &n), tq = make_tensor(qmap, kDLFloat, 32, 1, &nq);
  DLTensor ta = make_tensor(absmax, kDLFloat, 32, 1, &nb);
  lowbit_optimizer_hparams h;
  double worst = 0.0, gap = 0.0;
  int i, ok = 1;
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, qmap, 256, NULL));
  for (i = 1; i < 256; ++i) gap = qmap[i] - qmap[i - 1] > gap ? qmap[i] - qmap[i - 1] : gap;
  memset(&h, 0, sizeof h);
  h.beta1 = 0.9f;
  h.lr = 0.5f;
  h.gnorm_scale = 1.0f;
  h.step = 1;
  fill(g, N, 11, 3.0f);
  for (i = 0; i < N; ++i) p[i] = 1.0f, s1[i] = 0;
  absmax[0] = absmax[1] = 0.0f;
  CHECK_OK(lowbit_optimizer_update_8bit_blockwise("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &ta, NULL, &h, NULL));
  for (i = 0; i < N; ++i) {
    const float a = absmax[i / 256];
    const double e = absd((double)qmap[s1[i]] * a - g[i]) / a;
    worst = e > worst ? e : worst;
    ok &= p[i] == 1.0f - 0.5f * g[i];
  }
  CHECK(ok, "optimizer_update_8bit_blockwise: momentum p (got p[0] = %g for g[0] = %g)", p[0], g[0]);
  CHECK(absmax[0] == block_absmax(g, 0, 256) && absmax[1] == block_absmax(g, 256, N), "absmax %g %g", absmax[0],
        absmax[1]);
  CHECK(worst <= gap / 2 + 1e-6, "state error %g of absmax (half gap %g)", worst, gap / 2);
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise("lamb", &tg, &tp, &ts1, NULL, &tq, NULL, &ta, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "optimizer must be one of");
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise("adam", &tg, &tp, &ts1, NULL, &tq, NULL, &ta, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "state2");
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise("momentum", &tg, &tp, &tp, NULL, &tq, NULL, &ta, NULL, &h, NULL),
              LOWBIT_UNSUPPORTED_DTYPE, "state1 dtype must be uint8");
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &ta, NULL, NULL,
                                                     NULL),
              LOWBIT_INVALID_ARGUMENT, "hparams is NULL");
  h.max_unorm = 1.0f;
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &ta, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "max_unorm must be 0");
}

/* percentile clipping's device step: |g|^2 in every slot at step 1, in slot
 * step % 100 after. */
static void test_percentile_clipping(void) {
  static float g[2] = {3.0f, 4.0f}, g2[2] = {1.0f, 0.0f}, vec[100];
  int64_t n = 2, nv = 100, short_n = 99;
  DLTensor tg = make_tensor(g, kDLFloat, 32, 1, &n), tg2 = make_tensor(g2, kDLFloat, 32, 1, &n);
  DLTensor tv = make_tensor(vec, kDLFloat, 32, 1, &nv), tshort = make_tensor(vec, kDLFloat, 32, 1, &short_n);
  int i, ok = 1;
  CHECK_OK(lowbit_percentile_clipping(&tg, &tv, 1, NULL));
  for (i = 0; i < 100; ++i) ok &= vec[i] == 25.0f;
  CHECK(ok, "percentile_clipping: step 1 fills every slot (got %g)", vec[0]);
  CHECK_OK(lowbit_percentile_clipping(&tg2, &tv, 102, NULL));
  CHECK(vec[2] == 1.0f && vec[1] == 25.0f && vec[3] == 25.0f, "step 102 writes slot 2 only (got %g %g %g)", vec[1],
        vec[2], vec[3]);
  CHECK_FAILS(lowbit_percentile_clipping(&tg, &tshort, 2, NULL), LOWBIT_INVALID_ARGUMENT, "percentile_clipping",
              "gnorm_vec");
  CHECK_FAILS(lowbit_percentile_clipping(&tg, &tv, 0, NULL), LOWBIT_INVALID_ARGUMENT, "step must be at least 1");
}

static void test_int8(void) {
  enum { ROWS = 3, K = 50 };
  static float a[ROWS * K], back[ROWS * K], stats[ROWS];
  static int8_t q[ROWS * K];
  int64_t shape[2] = {ROWS, K}, rows = ROWS;
  DLTensor ta = make_tensor(a, kDLFloat, 32, 2, shape), tq = make_tensor(q, kDLInt, 8, 2, shape);
  DLTensor ts = make_tensor(stats, kDLFloat, 32, 1, &rows), tb = make_tensor(back, kDLFloat, 32, 2, shape);
  double worst = 0.0;
  int i;

  fill(a, ROWS * K, 7, 4.0f);
  CHECK_OK(lowbit_int8_vectorwise_quant(&ta, &tq, &ts, NULL, 0.0f, NULL));
  CHECK_OK(lowbit_int8_vectorwise_dequant(&tq, &ts, &tb, NULL));
  for (i = 0; i < ROWS * K; ++i) {
    const double e = absd(a[i] - back[i]) / (stats[i / K] / 127.0);
    worst = e > worst ? e : worst;
  }
  CHECK(stats[0] == block_absmax(a, 0, K), "row_stats is the row absmax");
  CHECK(worst <= 0.5 + 1e-4, "int8 error %g steps", worst);
}

static void test_estimate_quantiles(void) {
  enum { N = 1000 };
  static float x[N], out[256];
  int64_t n = N, nq = 256;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), to = make_tensor(out, kDLFloat, 32, 1, &nq);
  int i, sorted = 1;
  fill(x, N, 8, 1.0f);
  CHECK_OK(lowbit_estimate_quantiles(&tx, &to, 1.0f / 512.0f, NULL));
  for (i = 1; i < 256; ++i) sorted = sorted && out[i - 1] <= out[i];
  CHECK(sorted && out[0] >= -1.0f && out[255] <= 1.0f && out[0] < -0.9f && out[255] > 0.9f, "quantiles %g .. %g",
        out[0], out[255]);
}

/* byte_offset, explicit strides and fp8-as-code-10 go through the one
 * converter; results must equal the plain call's. */
static void test_layouts(void) {
  enum { N = 300 };
  static float buf[N + 4], code[256], absmax[2], absmax2[2];
  static uint8_t q[N], q2[N];
  int64_t n = N, ncode = 256, nb = 2, stride1 = 1;
  DLTensor tx = make_tensor(buf + 4, kDLFloat, 32, 1, &n), tc = make_tensor(code, kDLFloat, 32, 1, &ncode);
  DLTensor tq = make_tensor(q, kDLUInt, 8, 1, &n), ta = make_tensor(absmax, kDLFloat, 32, 1, &nb);
  DLTensor toff = make_tensor(buf, kDLFloat, 32, 1, &n), tq2 = make_tensor(q2, kDLUInt, 8, 1, &n);
  DLTensor ta2 = make_tensor(absmax2, kDLFloat, 32, 1, &nb);
  fill(buf, N + 4, 9, 1.0f);
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, code, 256, NULL));
  CHECK_OK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 256, NULL));
  toff.byte_offset = 4 * sizeof(float);
  toff.strides = &stride1;
  CHECK_OK(lowbit_quantize_blockwise(&toff, &tc, &tq2, &ta2, 256, NULL));
  CHECK(memcmp(q, q2, N) == 0 && memcmp(absmax, absmax2, sizeof absmax) == 0, "byte_offset + strides");
}

static void test_bad_input(void) {
  static float x[128], code[256], absmax[2];
  static uint8_t q[64];
  int64_t n = 64, ncode = 256, nb = 2, stride2 = 2;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), tc = make_tensor(code, kDLFloat, 32, 1, &ncode);
  DLTensor tq = make_tensor(q, kDLUInt, 8, 1, &n), ta = make_tensor(absmax, kDLFloat, 32, 1, &nb);
  const char* msg;
  fill(x, 128, 10, 1.0f);
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, code, 256, NULL));

  /* An op rule: blocksize. */
  CHECK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 48, NULL) == LOWBIT_INVALID_ARGUMENT, "blocksize 48");
  msg = lowbit_last_error();
  CHECK(contains(msg, "quantize_blockwise") && contains(msg, "blocksize") && contains(msg, "48"), "%s", msg);

  /* A DLPack rule: dtype (float64), lanes, device, NULL argument. */
  tx.dtype.bits = 64;
  CHECK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 32, NULL) == LOWBIT_UNSUPPORTED_DTYPE, "float64");
  msg = lowbit_last_error();
  CHECK(contains(msg, "quantize_blockwise") && contains(msg, "input") && contains(msg, "float64"), "%s", msg);
  tx.dtype.bits = 32;
  tx.dtype.lanes = 4;
  CHECK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 32, NULL) == LOWBIT_UNSUPPORTED_DTYPE, "lanes 4");
  CHECK(contains(lowbit_last_error(), "lanes"), "lanes message");
  tx.dtype.lanes = 1;
  tq.device.device_type = kDLOpenCL;
  CHECK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 32, NULL) == LOWBIT_NO_BACKEND, "OpenCL tensor");
  CHECK(contains(lowbit_last_error(), "out") && contains(lowbit_last_error(), "device"), "device message");
  tq.device.device_type = kDLCPU;
  CHECK(lowbit_quantize_blockwise(&tx, NULL, &tq, &ta, 32, NULL) != LOWBIT_OK, "code left out");
  CHECK(contains(lowbit_last_error(), "quantize_blockwise") && contains(lowbit_last_error(), "code"), "NULL message");

  /* A strided input (every other float of 128) where the op wants contiguous memory. */
  tx.strides = &stride2;
  CHECK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 32, NULL) != LOWBIT_OK, "strided input");
  CHECK(contains(lowbit_last_error(), "input") && contains(lowbit_last_error(), "contiguous"), "strided message");
  tx.strides = NULL;

  /* Everything right again: status OK and the message cleared. */
  CHECK_OK(lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, 32, NULL));
  CHECK(strcmp(lowbit_last_error(), "") == 0, "message after success: \"%s\"", lowbit_last_error());
}

int main(void) {
  test_library();
  test_code_maps();
  test_blockwise();
  test_blockwise_nested();
  /* Half the widest gap of each table: NF4 between -1 and -0.696, FP4 between 2/3 and 1. */
  test_4bit(LOWBIT_QUANT4_NF4, (1.0 - 0.6961928009986877) / 2 + 1e-6);
  test_4bit(LOWBIT_QUANT4_FP4, (1.0 - 8.0 / 12.0) / 2 + 1e-6);
  test_act_quant(LOWBIT_DL_FLOAT8_E4M3FN);
  test_act_quant(kDLUInt);
  test_weight_fp8();
  test_fp8_gemm();
  test_int8_gemm();
  test_int8_linear();
  test_optimizer();
  test_optimizer_8bit_blockwise();
  test_percentile_clipping();
  test_int8();
  test_estimate_quantiles();
  test_layouts();
  test_bad_input();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
