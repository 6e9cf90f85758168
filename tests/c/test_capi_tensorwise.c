/* The C ABI of tensor-wise 8-bit quantization and optimizer_update_8bit:
 * bitsandbytes' quantize / dequantize round trip, quantize_no_absmax's known
 * answers, a momentum step whose state and new_max are known, and bad input
 * named in the error. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lowbit/c/lowbit.h"

enum { N = 1000 };

static void fill_uniform(float* x, int n, float scale) {
  int i;
  for (i = 0; i < n; ++i) x[i] = scale * (float)((double)(next_u64() % 2000001) / 1000000.0 - 1.0);
}

static float max_abs(const float* x, int n) {
  float m = 0.0f;
  int i;
  for (i = 0; i < n; ++i) m = absd(x[i]) > m ? (float)absd(x[i]) : m;
  return m;
}

static double widest_gap(const float* code) {
  double gap = 0.0;
  int i;
  for (i = 1; i < 256; ++i) gap = code[i] - code[i - 1] > gap ? code[i] - code[i - 1] : gap;
  return gap;
}

static void test_quantize_tensorwise(void) {
  static float x[N], y[N], code[256];
  static uint8_t q[N];
  float absmax = -1.0f;
  int64_t n = N, ncode = 256, one = 1;
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), tc = make_tensor(code, kDLFloat, 32, 1, &ncode);
  DLTensor tq = make_tensor(q, kDLUInt, 8, 1, &n), ta = make_tensor(&absmax, kDLFloat, 32, 1, &one);
  DLTensor ty = make_tensor(y, kDLFloat, 32, 1, &n);
  double worst = 0.0;
  int i, exact = 1;
  fill_uniform(x, N, 5.0f);
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, code, 256, NULL));
  CHECK_OK(lowbit_quantize_tensorwise(&tx, &tc, &tq, &ta, NULL));
  CHECK(absmax == max_abs(x, N), "absmax %g is max |x| %g", absmax, max_abs(x, N));
  CHECK_OK(lowbit_dequantize_tensorwise(&tq, &tc, &ta, &ty, NULL));
  for (i = 0; i < N; ++i) worst = absd(y[i] - x[i]) > worst ? absd(y[i] - x[i]) : worst;
  CHECK(worst <= (widest_gap(code) / 2 + 1e-6) * absmax, "round trip error %g", worst);

  /* No absmax: each map value encodes to its own index and decodes back. */
  for (i = 0; i < N; ++i) x[i] = code[i % 256];
  CHECK_OK(lowbit_quantize_no_absmax(&tx, &tc, &tq, NULL));
  CHECK_OK(lowbit_dequantize_no_absmax(&tq, &tc, &ty, NULL));
  for (i = 0; i < N; ++i) exact &= y[i] == x[i];
  CHECK(exact, "no-absmax round trip of the map's values is exact");

  CHECK_FAILS(lowbit_quantize_tensorwise(&tx, &tc, &tq, &tq, NULL), LOWBIT_UNSUPPORTED_DTYPE,
              "quantize_tensorwise: absmax dtype must be");
  CHECK_FAILS(lowbit_dequantize_no_absmax(&tx, &tc, &ty, NULL), LOWBIT_UNSUPPORTED_DTYPE,
              "dequantize_no_absmax: input dtype must be");
  CHECK_FAILS(lowbit_quantize_no_absmax(&tx, NULL, &tq, NULL), LOWBIT_INVALID_ARGUMENT, "code");
}

/* momentum at step 1: the state is g, p = p - lr * g, new_max1 = max |g|. */
static void test_optimizer_update_8bit(void) {
  static float g[N], p[N], qmap[256];
  static uint8_t s1[N];
  float max1 = 1.0f, new_max1 = -1.0f, unorm = -1.0f;
  int64_t n = N, nq = 256, one = 1;
  DLTensor tg = make_tensor(g, kDLFloat, 32, 1, &n), tp = make_tensor(p, kDLFloat, 32, 1, &n);
  DLTensor ts1 = make_tensor(s1, kDLUInt, 8, 1, &n), tq = make_tensor(qmap, kDLFloat, 32, 1, &nq);
  DLTensor tm = make_tensor(&max1, kDLFloat, 32, 1, &one), tnm = make_tensor(&new_max1, kDLFloat, 32, 1, &one);
  DLTensor tu = make_tensor(&unorm, kDLFloat, 32, 1, &one);
  lowbit_optimizer_hparams h;
  double worst = 0.0, sum = 0.0;
  int i, ok = 1;
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, qmap, 256, NULL));
  memset(&h, 0, sizeof h);
  h.beta1 = 0.9f;
  h.lr = 0.5f;
  h.gnorm_scale = 1.0f;
  h.step = 1;
  fill_uniform(g, N, 3.0f);
  for (i = 0; i < N; ++i) p[i] = 1.0f, s1[i] = 0, sum += (double)g[i] * g[i];
  CHECK_OK(lowbit_optimizer_update_8bit("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tnm, NULL, &tu, &h,
                                        NULL));
  CHECK(new_max1 == max_abs(g, N), "new_max1 %g is max |g| %g", new_max1, max_abs(g, N));
  CHECK(absd(unorm - sum) <= 1e-6 * sum, "unorm %g is |g|^2 %g", unorm, sum);
  for (i = 0; i < N; ++i) {
    const double e = absd((double)qmap[s1[i]] * new_max1 - g[i]) / new_max1;
    worst = e > worst ? e : worst;
    ok &= p[i] == 1.0f - 0.5f * g[i];
  }
  CHECK(ok, "momentum p (got p[0] = %g for g[0] = %g)", p[0], g[0]);
  CHECK(worst <= widest_gap(qmap) / 2 + 1e-6, "state error %g of new_max1", worst);
  CHECK_FAILS(lowbit_optimizer_update_8bit("ademamix", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tnm, NULL, NULL,
                                           &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "optimizer must be one of");
  CHECK_FAILS(lowbit_optimizer_update_8bit("adam", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tnm, NULL, NULL, &h,
                                           NULL),
              LOWBIT_INVALID_ARGUMENT, "state2");
  CHECK_FAILS(lowbit_optimizer_update_8bit("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tm, NULL, NULL,
                                           &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "new_max1 must not share memory with max1");
  h.skip_zeros = 1;
  CHECK_FAILS(lowbit_optimizer_update_8bit("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tnm, NULL, NULL,
                                           &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "skip_zeros");
  CHECK_FAILS(lowbit_optimizer_update_8bit("momentum", &tg, &tp, &ts1, NULL, &tq, NULL, &tm, NULL, &tnm, NULL, NULL,
                                           NULL, NULL),
              LOWBIT_INVALID_ARGUMENT, "hparams is NULL");
}

int main(void) {
  seed_random();
  test_quantize_tensorwise();
  test_optimizer_update_8bit();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
