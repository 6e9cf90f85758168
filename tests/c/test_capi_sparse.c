/* lowbit_bsr_dense_addmm, lowbit_sampled_addmm, lowbit_bsr_softmax and lowbit_scatter_mm from C;
 * lowbit_bsr_dense_addmm: a 4 x 4 BSR of 2 x 2 blocks times a 4 x 3
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

/* The same BSR: SDDMM with mat1 = I (4 x 4) gives mat2's entries at the stored blocks; softmax of a block row
 * holding one block of equal values is uniform over its 2 columns. */
static void test_sddmm_and_softmax(void) {
  enum { NNZ = 3 };
  static int32_t crow[3] = {0, 2, 3}, col[NNZ] = {0, 1, 1};
  static float values[NNZ * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 2, 2, 2, 2}, eye[16], mat2[16], out[NNZ * 4];
  int64_t crow_shape[1] = {3}, col_shape[1] = {NNZ}, val_shape[3] = {NNZ, 2, 2}, sq[2] = {4, 4};
  DLTensor tcrow = make_tensor(crow, kDLInt, 32, 1, crow_shape), tcol = make_tensor(col, kDLInt, 32, 1, col_shape);
  DLTensor tval = make_tensor(values, kDLFloat, 32, 3, val_shape), tout = make_tensor(out, kDLFloat, 32, 3, val_shape);
  DLTensor t1 = make_tensor(eye, kDLFloat, 32, 2, sq), t2 = make_tensor(mat2, kDLFloat, 32, 2, sq);
  int i, ok = 1;
  for (i = 0; i < 16; ++i) {
    eye[i] = i % 5 == 0 ? 1.0f : 0.0f;
    mat2[i] = (float)i;
  }
  CHECK_OK(lowbit_sampled_addmm(&tcrow, &tcol, &tval, 4, 4, &t1, &t2, 0.0, 1.0, &tout, NULL));
  /* block j at block row i, block column c holds mat2[2i + r][2c + q] */
  ok &= out[0] == 0 && out[1] == 1 && out[2] == 4 && out[3] == 5;
  ok &= out[4] == 2 && out[5] == 3 && out[6] == 6 && out[7] == 7;
  ok &= out[8] == 10 && out[9] == 11 && out[10] == 14 && out[11] == 15;
  CHECK(ok, "sampled_addmm: mat2 at the stored blocks (got %g %g %g %g ...)", out[0], out[1], out[2], out[3]);
  CHECK_OK(lowbit_bsr_softmax(&tcrow, &tcol, &tval, 4, 4, &tout, NULL));
  CHECK(out[8] == 0.5f && out[9] == 0.5f && out[10] == 0.5f && out[11] == 0.5f, "bsr_softmax: uniform row (got %g)",
        out[8]);
  CHECK_FAILS(lowbit_sampled_addmm(&tcrow, &tcol, &tval, 4, 4, &t1, &t2, 1.0, 1.0, &t1, NULL),
              LOWBIT_INVALID_ARGUMENT, "sampled_addmm", "out_values");
}

/* scatter_mm's own format: accumulator 0 takes blocks[0] @ others[0] (the identity: blocks[0] itself) and
 * accumulator 1 nothing; an index out of range fails and writes nothing. */
static void test_scatter_mm(void) {
  static float blocks[4] = {1, 2, 3, 4}, others[4] = {1, 0, 0, 1}, acc[8] = {10, 10, 10, 10, 5, 6, 7, 8};
  static int32_t c[3] = {0, 1, 1}, pq[2] = {0, 0}, bad[2] = {0, 3};
  int64_t b_shape[3] = {1, 2, 2}, a_shape[3] = {2, 2, 2}, c_shape[1] = {3}, pq_shape[2] = {1, 2};
  DLTensor tb = make_tensor(blocks, kDLFloat, 32, 3, b_shape), to = make_tensor(others, kDLFloat, 32, 3, b_shape);
  DLTensor ta = make_tensor(acc, kDLFloat, 32, 3, a_shape), tc = make_tensor(c, kDLInt, 32, 1, c_shape);
  DLTensor tpq = make_tensor(pq, kDLInt, 32, 2, pq_shape), tbad = make_tensor(bad, kDLInt, 32, 2, pq_shape);
  CHECK_OK(lowbit_scatter_mm(0, &tb, &to, &tc, &tpq, NULL, NULL, NULL, 1, &ta, NULL));
  CHECK(acc[0] == 11 && acc[1] == 12 && acc[2] == 13 && acc[3] == 14 && acc[4] == 5 && acc[7] == 8,
        "scatter_mm: 10 + blocks[0] into accumulator 0, accumulator 1 kept (got %g %g %g %g, %g)", acc[0], acc[1],
        acc[2], acc[3], acc[4]);
  CHECK_FAILS(lowbit_scatter_mm(0, &tb, &to, &tc, &tbad, NULL, NULL, NULL, 1, &ta, NULL), LOWBIT_INVALID_ARGUMENT,
              "scatter_mm", "pq[:, 1][0] = 3");
  CHECK_FAILS(lowbit_scatter_mm(5, &tb, &to, &tc, &tpq, NULL, NULL, NULL, 1, &ta, NULL), LOWBIT_INVALID_ARGUMENT,
              "scatter_mm", "format");
  CHECK(acc[0] == 11, "a failed call wrote nothing (got %g)", acc[0]);
}

int main(void) {
  test_bsr();
  test_sddmm_and_softmax();
  test_scatter_mm();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
