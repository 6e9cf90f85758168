/* lowbit_bsr_dense_addmm from C: a 4 x 4 BSR of 2 x 2 blocks times a 4 x 3
 * dense, plain and with a broadcast input, and the errors of unsorted
 * column indices and of a missing input (nothing written then).
 * Prints "N passed, M failed"; exits non-zero on any failure. */
#include "harness.h"

static void test_bsr(void) {
  enum { M = 4, K = 4, N = 3, NNZ = 3 };
  /* Block row 0 holds block columns 0 and 1, block row 1 holds block column 1. */
  static int32_t crow[3] = {0, 2, 3}, col[NNZ] = {0, 1, 1}, unsorted[NNZ] = {1, 0, 1};
  static float values[NNZ * 4] = {1, 2, 3, 4, 5, 6, 7, 8, -1, 0.5f, 2, -3};
  static float dense[K * N], bias[N] = {10, 20, 30}, out[M * N], want[M * N];
  int64_t crow_shape[1] = {3}, col_shape[1] = {NNZ}, val_shape[3] = {NNZ, 2, 2}, d_shape[2] = {K, N};
  int64_t o_shape[2] = {M, N}, b_shape[1] = {N};
  DLTensor tcrow = make_tensor(crow, kDLInt, 32, 1, crow_shape), tcol = make_tensor(col, kDLInt, 32, 1, col_shape);
  DLTensor tuns = make_tensor(unsorted, kDLInt, 32, 1, col_shape);
  DLTensor tval = make_tensor(values, kDLFloat, 32, 3, val_shape), td = make_tensor(dense, kDLFloat, 32, 2, d_shape);
  DLTensor tout = make_tensor(out, kDLFloat, 32, 2, o_shape), tbias = make_tensor(bias, kDLFloat, 32, 1, b_shape);
  float a[M * K];
  int i, j, k, ok = 1;
  for (i = 0; i < K * N; ++i) dense[i] = (float)(i % 5) - 2.0f;
  /* The dense copy of the BSR, then the product by hand. */
  memset(a, 0, sizeof a);
  for (i = 0; i < 2; ++i) {
    for (j = crow[i]; j < crow[i + 1]; ++j) {
      for (k = 0; k < 4; ++k) a[(2 * i + k / 2) * K + 2 * col[j] + k % 2] = values[4 * j + k];
    }
  }
  for (i = 0; i < M; ++i) {
    for (j = 0; j < N; ++j) {
      float s = 0.0f;
      for (k = 0; k < K; ++k) s += a[i * K + k] * dense[k * N + j];
      want[i * N + j] = s;
    }
  }
  CHECK_OK(lowbit_bsr_dense_addmm(NULL, &tcrow, &tcol, &tval, M, K, &td, 0.0, 1.0, &tout, NULL));
  for (i = 0; i < M * N; ++i) ok &= out[i] == want[i];
  CHECK(ok, "bsr_dense_addmm: the product (got %g %g %g ...)", out[0], out[1], out[2]);
  CHECK_OK(lowbit_bsr_dense_addmm(&tbias, &tcrow, &tcol, &tval, M, K, &td, 0.5, 2.0, &tout, NULL));
  ok = 1;
  for (i = 0; i < M * N; ++i) ok &= out[i] == 2.0f * want[i] + 0.5f * bias[i % N];
  CHECK(ok, "bsr_dense_addmm: 0.5 * bias + 2 * product (got %g %g %g ...)", out[0], out[1], out[2]);
  CHECK_FAILS(lowbit_bsr_dense_addmm(NULL, &tcrow, &tuns, &tval, M, K, &td, 0.0, 1.0, &tout, NULL),
              LOWBIT_INVALID_ARGUMENT, "bsr_dense_addmm", "ascending without repeats", "1 then 0");
  CHECK_FAILS(lowbit_bsr_dense_addmm(NULL, &tcrow, &tcol, &tval, M, K, &td, 1.0, 1.0, &tout, NULL),
              LOWBIT_INVALID_ARGUMENT, "bsr_dense_addmm", "input is needed when beta is not 0");
  ok = 1;
  for (i = 0; i < M * N; ++i) ok &= out[i] == 2.0f * want[i] + 0.5f * bias[i % N];
  CHECK(ok, "a failed call wrote nothing");
}

int main(void) {
  test_bsr();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
