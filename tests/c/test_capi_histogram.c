/* lowbit_histogram_scatter_add_2d from C: the sums, and the errors of bad
 * dtypes, shapes, counts and indices (nothing added then).
 * Prints "N passed, M failed"; exits non-zero on any failure. */
#include "harness.h"

static void test_histogram(void) {
  enum { ROWS = 2, COLS = 3, N = 5 };
  static float hist[ROWS * COLS], src[N] = {1.0f, 2.0f, 4.0f, 8.0f, 16.0f};
  static int32_t i1[N] = {0, 1, 1, 0, 1}, i2[N] = {2, 0, 0, 2, 1}, bad[N] = {0, 1, 2, 0, 1};
  static double wide[N];
  int64_t hshape[2] = {ROWS, COLS}, flat[1] = {ROWS * COLS}, n = N, fewer = N - 1;
  DLTensor th = make_tensor(hist, kDLFloat, 32, 2, hshape), tflat = make_tensor(hist, kDLFloat, 32, 1, flat);
  DLTensor t1 = make_tensor(i1, kDLInt, 32, 1, &n), t2 = make_tensor(i2, kDLInt, 32, 1, &n);
  DLTensor ts = make_tensor(src, kDLFloat, 32, 1, &n), tshort = make_tensor(src, kDLFloat, 32, 1, &fewer);
  DLTensor tbad = make_tensor(bad, kDLInt, 32, 1, &n), twide = make_tensor(wide, kDLFloat, 64, 1, &n);
  const float want[ROWS * COLS] = {0.0f, 0.0f, 9.0f, 6.0f, 16.0f, 0.0f};
  int i, ok = 1;
  CHECK_OK(lowbit_histogram_scatter_add_2d(&th, &t1, &t2, &ts, NULL));
  for (i = 0; i < ROWS * COLS; ++i) ok &= hist[i] == want[i];
  CHECK(ok, "histogram_scatter_add_2d: sums (got %g %g %g / %g %g %g)", hist[0], hist[1], hist[2], hist[3], hist[4],
        hist[5]);
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&tflat, &t1, &t2, &ts, NULL), LOWBIT_INVALID_ARGUMENT,
              "histogram_scatter_add_2d", "histogram must be 2-D");
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&th, &ts, &t2, &ts, NULL), LOWBIT_UNSUPPORTED_DTYPE, "index1 dtype");
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&th, &t1, &t2, &twide, NULL), LOWBIT_UNSUPPORTED_DTYPE,
              "source dtype");
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&th, &t1, &t2, &tshort, NULL), LOWBIT_INVALID_ARGUMENT, "index1");
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&th, &tbad, &t2, &ts, NULL), LOWBIT_INVALID_ARGUMENT,
              "index1[2] must be in [0, 2)");
  CHECK_FAILS(lowbit_histogram_scatter_add_2d(&th, NULL, &t2, &ts, NULL), LOWBIT_INVALID_ARGUMENT, "index1");
  ok = 1;
  for (i = 0; i < ROWS * COLS; ++i) ok &= hist[i] == want[i];
  CHECK(ok, "a failed call added nothing");
}

int main(void) {
  test_histogram();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
