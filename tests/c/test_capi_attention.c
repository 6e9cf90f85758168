/* lowbit_flash_attention from C: one query over two keys against the
 * softmax written out here (and its log-sum-exp), the causal mask aligned
 * bottom-right, and the errors of bad shapes and layouts.
 * Prints "N passed, M failed"; exits non-zero on any failure. */
#include <math.h>

#include "harness.h"

static void test_attention(void) {
  /* B = 1, Sq = 1, Skv = 2, H = Hkv = 1, D = Dv = 2. */
  static float q[2] = {1.0f, 0.0f}, k[4] = {1.0f, 0.0f, 0.0f, 1.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  static float out[2], lse[1], q2[4] = {1.0f, 0.0f, 0.0f, 1.0f}, out2[4];
  int64_t qs[4] = {1, 1, 1, 2}, ks[4] = {1, 2, 1, 2}, ls[3] = {1, 1, 1}, q2s[4] = {1, 2, 1, 2}, bad[3] = {1, 2, 2};
  DLTensor tq = make_tensor(q, kDLFloat, 32, 4, qs), tk = make_tensor(k, kDLFloat, 32, 4, ks);
  DLTensor tv = make_tensor(v, kDLFloat, 32, 4, ks), tout = make_tensor(out, kDLFloat, 32, 4, qs);
  DLTensor tlse = make_tensor(lse, kDLFloat, 32, 3, ls), tq2 = make_tensor(q2, kDLFloat, 32, 4, q2s);
  DLTensor tout2 = make_tensor(out2, kDLFloat, 32, 4, q2s), tbad = make_tensor(k, kDLFloat, 32, 3, bad);
  /* scale 1: scores 1 and 0; weights e / (e + 1) and 1 / (e + 1). */
  const double e = exp(1.0), w0 = e / (e + 1.0), w1 = 1.0 / (e + 1.0);
  CHECK_OK(lowbit_flash_attention(&tq, &tk, &tv, 0, 1.0, 0, &tout, &tlse, NULL));
  CHECK(absd(out[0] - (w0 * 1.0 + w1 * 3.0)) < 1e-6 && absd(out[1] - (w0 * 2.0 + w1 * 4.0)) < 1e-6,
        "flash_attention: out (got %g %g)", out[0], out[1]);
  CHECK(absd(lse[0] - log(e + 1.0)) < 1e-6, "flash_attention: lse (got %g)", lse[0]);
  /* Causal, Sq = Skv = 2: query 0 sees key 0 only, so its output is v[0]. */
  CHECK_OK(lowbit_flash_attention(&tq2, &tk, &tv, 1, 0.0, 0, &tout2, NULL, NULL));
  CHECK(out2[0] == 1.0f && out2[1] == 2.0f, "flash_attention: causal row 0 (got %g %g)", out2[0], out2[1]);
  CHECK_FAILS(lowbit_flash_attention(&tq, &tbad, &tv, 0, 1.0, 0, &tout, NULL, NULL), LOWBIT_INVALID_ARGUMENT,
              "flash_attention: k must be 4-D");
  CHECK_FAILS(lowbit_flash_attention(&tq, &tk, &tv, 0, 1.0, 7, &tout, NULL, NULL), LOWBIT_INVALID_ARGUMENT,
              "k_layout must be bshd or bdhs");
  CHECK_FAILS(lowbit_flash_attention(&tq, &tk, &tv, 0, 1.0, 0, NULL, NULL, NULL), LOWBIT_INVALID_ARGUMENT, "out");
}

/* The cache form: the two keys above as a one-sequence cache of length 2 give the same output; a length of 1
 * gives v[0]; a length past the cache is refused by name. */
static void test_kvcache(void) {
  static float q[2] = {1.0f, 0.0f}, k[4] = {1.0f, 0.0f, 0.0f, 1.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  static float out[2], want[2];
  static int32_t two[1] = {2}, one[1] = {1}, three[1] = {3};
  int64_t qs[4] = {1, 1, 1, 2}, ks[4] = {1, 2, 1, 2}, ns[1] = {1};
  DLTensor tq = make_tensor(q, kDLFloat, 32, 4, qs), tk = make_tensor(k, kDLFloat, 32, 4, ks);
  DLTensor tv = make_tensor(v, kDLFloat, 32, 4, ks), tout = make_tensor(out, kDLFloat, 32, 4, qs);
  DLTensor twant = make_tensor(want, kDLFloat, 32, 4, qs);
  DLTensor t2 = make_tensor(two, kDLInt, 32, 1, ns), t1 = make_tensor(one, kDLInt, 32, 1, ns);
  DLTensor t3 = make_tensor(three, kDLInt, 32, 1, ns);
  CHECK_OK(lowbit_flash_attention(&tq, &tk, &tv, 0, 1.0, 0, &twant, NULL, NULL));
  CHECK_OK(lowbit_flash_attention_kvcache(&tq, &tk, &tv, &t2, NULL, 0, 1.0, &tout, NULL, NULL));
  CHECK(out[0] == want[0] && out[1] == want[1], "kvcache: the dense result (got %g %g, want %g %g)", out[0], out[1],
        want[0], want[1]);
  CHECK_OK(lowbit_flash_attention_kvcache(&tq, &tk, &tv, &t1, NULL, 0, 1.0, &tout, NULL, NULL));
  CHECK(out[0] == 1.0f && out[1] == 2.0f, "kvcache: one token (got %g %g)", out[0], out[1]);
  CHECK_FAILS(lowbit_flash_attention_kvcache(&tq, &tk, &tv, &t3, NULL, 0, 1.0, &tout, NULL, NULL),
              LOWBIT_INVALID_ARGUMENT, "cache_seqlens[0] must be in [0, 2] (got 3)");
}

/* The varlen form: the same one query and two keys as a packed batch of one sequence give the dense result. */
static void test_varlen(void) {
  static float q[2] = {1.0f, 0.0f}, k[4] = {1.0f, 0.0f, 0.0f, 1.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  static float out[2], want[2];
  static int32_t cq[2] = {0, 1}, ck[2] = {0, 2}, bad[2] = {0, 3};
  int64_t q4[4] = {1, 1, 1, 2}, k4[4] = {1, 2, 1, 2}, q3[3] = {1, 1, 2}, k3[3] = {2, 1, 2}, n2[1] = {2};
  DLTensor tq4 = make_tensor(q, kDLFloat, 32, 4, q4), tk4 = make_tensor(k, kDLFloat, 32, 4, k4);
  DLTensor tv4 = make_tensor(v, kDLFloat, 32, 4, k4), twant = make_tensor(want, kDLFloat, 32, 4, q4);
  DLTensor tq = make_tensor(q, kDLFloat, 32, 3, q3), tk = make_tensor(k, kDLFloat, 32, 3, k3);
  DLTensor tv = make_tensor(v, kDLFloat, 32, 3, k3), tout = make_tensor(out, kDLFloat, 32, 3, q3);
  DLTensor tcq = make_tensor(cq, kDLInt, 32, 1, n2), tck = make_tensor(ck, kDLInt, 32, 1, n2);
  DLTensor tbad = make_tensor(bad, kDLInt, 32, 1, n2);
  CHECK_OK(lowbit_flash_attention(&tq4, &tk4, &tv4, 0, 1.0, 0, &twant, NULL, NULL));
  CHECK_OK(lowbit_flash_attention_varlen(&tq, &tk, &tv, &tcq, &tck, 0, 1.0, &tout, NULL, NULL));
  CHECK(out[0] == want[0] && out[1] == want[1], "varlen: the dense result (got %g %g, want %g %g)", out[0], out[1],
        want[0], want[1]);
  CHECK_FAILS(lowbit_flash_attention_varlen(&tq, &tk, &tv, &tcq, &tbad, 0, 1.0, &tout, NULL, NULL),
              LOWBIT_INVALID_ARGUMENT, "cu_seqlens_k[1] must be the tokens' total 2 (got 3)");
}

int main(void) {
  test_attention();
  test_kvcache();
  test_varlen();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
