/* The multi-tensor optimizer updates from C: two parameters in one call give
 * the bits of two single calls (32-bit momentum, 8-bit blockwise momentum),
 * and the errors of a bad entry, a dtype that differs over the list and
 * missing arrays. Prints "N passed, M failed"; exits non-zero on any failure. */
#include "harness.h"

enum { N0 = 5, N1 = 300 };

static void fill_values(float* x, int n, int seed) {
  int i;
  for (i = 0; i < n; ++i) x[i] = (float)((i * 37 + seed * 11) % 23) / 8.0f - 1.25f;
}

static int same(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void test_32bit_multi(void) {
  static float g0[N0], g1[N1], p0[N0], p1[N1], s0[N0], s1[N1], q0[N0], q1[N1], r0[N0], r1[N1];
  static uint16_t half[N1];
  int64_t n0 = N0, n1 = N1, short1 = N1 - 1;
  DLTensor tg0 = make_tensor(g0, kDLFloat, 32, 1, &n0), tg1 = make_tensor(g1, kDLFloat, 32, 1, &n1);
  DLTensor tp0 = make_tensor(p0, kDLFloat, 32, 1, &n0), tp1 = make_tensor(p1, kDLFloat, 32, 1, &n1);
  DLTensor ts0 = make_tensor(s0, kDLFloat, 32, 1, &n0), ts1 = make_tensor(s1, kDLFloat, 32, 1, &n1);
  DLTensor tq0 = make_tensor(q0, kDLFloat, 32, 1, &n0), tq1 = make_tensor(q1, kDLFloat, 32, 1, &n1);
  DLTensor tr0 = make_tensor(r0, kDLFloat, 32, 1, &n0), tr1 = make_tensor(r1, kDLFloat, 32, 1, &n1);
  DLTensor tshort = make_tensor(s1, kDLFloat, 32, 1, &short1), thalf = make_tensor(half, kDLFloat, 16, 1, &n1);
  const DLTensor* g[2] = {&tg0, &tg1};
  DLTensor* p[2] = {&tp0, &tp1};
  DLTensor* s[2] = {&ts0, &ts1};
  DLTensor* bad_s[2] = {&ts0, &tshort};
  DLTensor* bad_p[2] = {&tp0, &thalf};
  lowbit_optimizer_hparams h;
  memset(&h, 0, sizeof h);
  h.beta1 = 0.9f;
  h.lr = 0.25f;
  h.gnorm_scale = 1.0f;
  h.weight_decay = 0.01f;
  h.step = 2;
  fill_values(g0, N0, 1), fill_values(g1, N1, 2), fill_values(p0, N0, 3), fill_values(p1, N1, 4);
  fill_values(s0, N0, 5), fill_values(s1, N1, 6);
  memcpy(q0, p0, sizeof q0), memcpy(q1, p1, sizeof q1), memcpy(r0, s0, sizeof r0), memcpy(r1, s1, sizeof r1);
  CHECK_OK(lowbit_optimizer_update_32bit_multi("momentum", 2, g, p, s, NULL, NULL, &h, NULL));
  CHECK_OK(lowbit_optimizer_update_32bit("momentum", &tg0, &tq0, &tr0, NULL, NULL, &h, NULL));
  CHECK_OK(lowbit_optimizer_update_32bit("momentum", &tg1, &tq1, &tr1, NULL, NULL, &h, NULL));
  CHECK(same(p0, q0, sizeof p0) && same(p1, q1, sizeof p1) && same(s0, r0, sizeof s0) && same(s1, r1, sizeof s1),
        "optimizer_update_32bit_multi: the bits of the single calls");
  CHECK_OK(lowbit_optimizer_update_32bit_multi("momentum", 0, NULL, NULL, NULL, NULL, NULL, &h, NULL));
  CHECK_FAILS(lowbit_optimizer_update_32bit_multi("momentum", 2, g, p, bad_s, NULL, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "optimizer_update_32bit_multi: params[1]: state1");
  CHECK_FAILS(lowbit_optimizer_update_32bit_multi("momentum", 2, g, bad_p, s, NULL, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "params[1]: p must have g's dtype");
  CHECK_FAILS(lowbit_optimizer_update_32bit_multi("momentum", 2, g, p, NULL, NULL, NULL, &h, NULL),
              LOWBIT_INVALID_ARGUMENT, "state1");
  CHECK_FAILS(lowbit_optimizer_update_32bit_multi("adam", 2, g, p, s, NULL, NULL, &h, NULL), LOWBIT_INVALID_ARGUMENT,
              "params[0]: state2");
  CHECK_FAILS(lowbit_optimizer_update_32bit_multi("adamw", 2, g, p, s, NULL, NULL, &h, NULL), LOWBIT_INVALID_ARGUMENT,
              "optimizer_update_32bit_multi: optimizer_name");
}

static void test_8bit_blockwise_multi(void) {
  static float g0[N0], g1[N1], p0[N0], p1[N1], q0[N0], q1[N1], qmap[256], a0[1], a1[2], b0[1], b1[2];
  static uint8_t c0[N0], c1[N1], d0[N0], d1[N1];
  int64_t n0 = N0, n1 = N1, nq = 256, k0 = 1, k1 = 2;
  DLTensor tg0 = make_tensor(g0, kDLFloat, 32, 1, &n0), tg1 = make_tensor(g1, kDLFloat, 32, 1, &n1);
  DLTensor tp0 = make_tensor(p0, kDLFloat, 32, 1, &n0), tp1 = make_tensor(p1, kDLFloat, 32, 1, &n1);
  DLTensor tq0 = make_tensor(q0, kDLFloat, 32, 1, &n0), tq1 = make_tensor(q1, kDLFloat, 32, 1, &n1);
  DLTensor tc0 = make_tensor(c0, kDLUInt, 8, 1, &n0), tc1 = make_tensor(c1, kDLUInt, 8, 1, &n1);
  DLTensor td0 = make_tensor(d0, kDLUInt, 8, 1, &n0), td1 = make_tensor(d1, kDLUInt, 8, 1, &n1);
  DLTensor ta0 = make_tensor(a0, kDLFloat, 32, 1, &k0), ta1 = make_tensor(a1, kDLFloat, 32, 1, &k1);
  DLTensor tb0 = make_tensor(b0, kDLFloat, 32, 1, &k0), tb1 = make_tensor(b1, kDLFloat, 32, 1, &k1);
  DLTensor tmap = make_tensor(qmap, kDLFloat, 32, 1, &nq);
  const DLTensor* g[2] = {&tg0, &tg1};
  DLTensor* p[2] = {&tp0, &tp1};
  DLTensor* c[2] = {&tc0, &tc1};
  DLTensor* a[2] = {&ta0, &ta1};
  DLTensor* bad_a[2] = {&ta1, &ta1};
  lowbit_optimizer_hparams h;
  int i;
  CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, qmap, 256, NULL));
  memset(&h, 0, sizeof h);
  h.beta1 = 0.9f;
  h.lr = 0.25f;
  h.gnorm_scale = 1.0f;
  h.step = 2;
  fill_values(g0, N0, 1), fill_values(g1, N1, 2), fill_values(p0, N0, 3), fill_values(p1, N1, 4);
  for (i = 0; i < N0; ++i) c0[i] = (uint8_t)(i * 53), d0[i] = c0[i];
  for (i = 0; i < N1; ++i) c1[i] = (uint8_t)(i * 29), d1[i] = c1[i];
  a0[0] = b0[0] = 0.5f, a1[0] = b1[0] = 0.25f, a1[1] = b1[1] = 0.125f;
  memcpy(q0, p0, sizeof q0), memcpy(q1, p1, sizeof q1);
  CHECK_OK(lowbit_optimizer_update_8bit_blockwise_multi("momentum", 2, g, p, c, NULL, &tmap, NULL, a, NULL, &h, NULL));
  CHECK_OK(lowbit_optimizer_update_8bit_blockwise("momentum", &tg0, &tq0, &td0, NULL, &tmap, NULL, &tb0, NULL, &h,
                                                  NULL));
  CHECK_OK(lowbit_optimizer_update_8bit_blockwise("momentum", &tg1, &tq1, &td1, NULL, &tmap, NULL, &tb1, NULL, &h,
                                                  NULL));
  CHECK(same(p0, q0, sizeof p0) && same(p1, q1, sizeof p1) && same(c0, d0, sizeof c0) && same(c1, d1, sizeof c1) &&
            same(a0, b0, sizeof a0) && same(a1, b1, sizeof a1),
        "optimizer_update_8bit_blockwise_multi: the bits of the single calls");
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise_multi("momentum", 2, g, p, c, NULL, &tmap, NULL, bad_a, NULL, &h,
                                                           NULL),
              LOWBIT_INVALID_ARGUMENT, "optimizer_update_8bit_blockwise_multi: params[0]: absmax1");
  h.max_unorm = 1.0f;
  CHECK_FAILS(lowbit_optimizer_update_8bit_blockwise_multi("momentum", 2, g, p, c, NULL, &tmap, NULL, a, NULL, &h,
                                                           NULL),
              LOWBIT_INVALID_ARGUMENT, "max_unorm must be 0");
}

int main(void) {
  test_32bit_multi();
  test_8bit_blockwise_multi();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
