/* The C ABI on shapes whose element count or byte size does not fit in 64
 * bits: every op refuses them with LOWBIT_INVALID_ARGUMENT and a
 * message naming the op, the argument and the shape, before touching memory
 * (a wrapped count would pass the size checks and run over small buffers).
 * Prints "N passed, M failed"; exits non-zero on any failure. */
#include "harness.h"

/* 2^62 + 1 rows of 128: 2^69 + 128 elements, 128 once wrapped to 64 bits. */
#define HUGE_ROWS ((int64_t)1 << 62) + 1
#define HUGE_SHAPE "[4611686018427387905, 128]"

static float g_in[256], g_absmax[8], g_scale[8];
static uint8_t g_out[256];

static void test_wrapping_count(void) {
  int64_t in_shape[2] = {HUGE_ROWS, 128};
  int64_t out_shape[1] = {64}, absmax_shape[1] = {2};
  int64_t scale_shape[2] = {((int64_t)1 << 55) + 1, 1};
  DLTensor in = make_tensor(g_in, kDLFloat, 32, 2, in_shape);
  DLTensor out = make_tensor(g_out, kDLUInt, 8, 1, out_shape);
  DLTensor absmax = make_tensor(g_absmax, kDLFloat, 32, 1, absmax_shape);
  DLTensor qout = make_tensor(g_out, kDLUInt, 8, 2, in_shape);
  DLTensor scale = make_tensor(g_scale, kDLFloat, 32, 2, scale_shape);

  /* The wrapped count (128) matches out and absmax: was status OK. */
  CHECK_FAILS(lowbit_quantize_4bit(&in, &out, &absmax, 64, LOWBIT_QUANT4_NF4, NULL), LOWBIT_INVALID_ARGUMENT,
              "quantize_4bit", "input", HUGE_SHAPE, "too large");
  /* Was a segfault: the kernel walked 2^62 rows. */
  CHECK_FAILS(lowbit_weight_quant(&in, &qout, &scale, 128, NULL), LOWBIT_INVALID_ARGUMENT, "weight_quant", "input",
              HUGE_SHAPE);
  /* The same shape on an output argument is named as that argument. */
  {
    int64_t small_shape[2] = {2, 128};
    DLTensor small = make_tensor(g_in, kDLFloat, 32, 2, small_shape);
    CHECK_FAILS(lowbit_weight_quant(&small, &qout, &scale, 128, NULL), LOWBIT_INVALID_ARGUMENT, "weight_quant", "out",
                HUGE_SHAPE);
  }
}

static void test_wrapping_bytes(void) {
  /* 2^62 float32 elements: the count fits, its 2^64 bytes do not. */
  int64_t shape[2] = {(int64_t)1 << 61, 2}, mean_shape[1] = {1};
  DLTensor values = make_tensor(g_in, kDLFloat, 32, 2, shape);
  DLTensor mean = make_tensor(g_scale, kDLFloat, 32, 1, mean_shape);
  CHECK_FAILS(lowbit_absmax_center(&values, &mean, NULL), LOWBIT_INVALID_ARGUMENT, "absmax_center", "values",
              "[2305843009213693952, 2]", "float32");
}

static void test_wrapping_weight_size(void) {
  /* N comes as a number: 2^57 x K = 128 is 2^64, 0 once wrapped, which the
   * empty packed codes and absmax matched, and the kernel ran 2^57 rows. */
  const int64_t n = (int64_t)1 << 57;
  int64_t a_shape[2] = {1, 128}, out_shape[2] = {1, n}, none[1] = {0};
  DLTensor a = make_tensor(g_in, kDLFloat, 32, 2, a_shape);
  DLTensor out = make_tensor(g_in, kDLFloat, 16, 2, out_shape);
  DLTensor packed = make_tensor(g_out, kDLUInt, 8, 1, none);
  DLTensor absmax = make_tensor(g_absmax, kDLFloat, 32, 1, none);
  CHECK_FAILS(lowbit_matmul_4bit(&a, &packed, &absmax, NULL, NULL, &out, n, 64, LOWBIT_QUANT4_NF4, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "weight [N, K]", "[144115188075855872, 128]");
}

static void test_empty_still_fine(void) {
  int64_t in_shape[2] = {0, 128}, none[1] = {0};
  DLTensor in = make_tensor(g_in, kDLFloat, 32, 2, in_shape);
  DLTensor out = make_tensor(g_out, kDLUInt, 8, 1, none);
  DLTensor absmax = make_tensor(g_absmax, kDLFloat, 32, 1, none);
  CHECK_OK(lowbit_quantize_4bit(&in, &out, &absmax, 64, LOWBIT_QUANT4_NF4, NULL));
}

int main(void) {
  test_wrapping_count();
  test_wrapping_bytes();
  test_wrapping_weight_size();
  test_empty_still_fine();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
