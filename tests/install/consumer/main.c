/* The C ABI through an installed lowbit: version, a code map, and an 8-bit
 * blockwise round trip on CPU DLTensors. */
#include <lowbit/c/lowbit.h>
#include <stdio.h>
#include <string.h>

static DLTensor cpu_tensor(void* data, DLDataTypeCode code, int bits, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

int main(void) {
  enum { N = 300, BLOCK = 64, NBLOCKS = (N + BLOCK - 1) / BLOCK };
  float x[N], y[N], code[256], absmax[NBLOCKS];
  uint8_t q[N];
  int64_t n = N, ncode = 256, nblocks = NBLOCKS;
  size_t count = 0;
  double err = 0.0;
  int i;

  if (strcmp(lowbit_version(), LOWBIT_EXPECTED_VERSION) != 0 || strcmp(LOWBIT_VERSION_STRING, lowbit_version()) != 0) {
    fprintf(stderr, "consumer_c: version %s, header %s, expected %s\n", lowbit_version(), LOWBIT_VERSION_STRING,
            LOWBIT_EXPECTED_VERSION);
    return 1;
  }
  if (lowbit_create_dynamic_map(1, 7, 8, code, 256, &count) != LOWBIT_OK || count != 256) {
    fprintf(stderr, "consumer_c: create_dynamic_map: %s\n", lowbit_last_error());
    return 1;
  }
  /* No libm: a C program linking only lowbit must not need -lm. */
  for (i = 0; i < N; ++i) x[i] = (float)((i * 37) % 101 - 50) / 25.0f * (float)(1 + i % 7);
  {
    DLTensor tx = cpu_tensor(x, kDLFloat, 32, &n), tc = cpu_tensor(code, kDLFloat, 32, &ncode);
    DLTensor tq = cpu_tensor(q, kDLUInt, 8, &n), ta = cpu_tensor(absmax, kDLFloat, 32, &nblocks);
    DLTensor ty = cpu_tensor(y, kDLFloat, 32, &n);
    if (lowbit_quantize_blockwise(&tx, &tc, &tq, &ta, BLOCK, NULL) != LOWBIT_OK ||
        lowbit_dequantize_blockwise(&tq, &tc, &ta, NULL, &ty, BLOCK, NULL) != LOWBIT_OK) {
      fprintf(stderr, "consumer_c: %s\n", lowbit_last_error());
      return 1;
    }
  }
  for (i = 0; i < N; ++i) {
    const double d = (double)x[i] - y[i];
    const double e = (d < 0 ? -d : d) / absmax[i / BLOCK];
    if (e > err) err = e;
  }
  printf("consumer_c: lowbit %s, 8-bit max error %.4f (relative to block absmax)\n", lowbit_version(), err);
  return err < 0.01 ? 0 : 1;
}
