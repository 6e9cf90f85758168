/* The CUDA allocator hook from C11: setting, reading back and restoring it,
 * refusing half an allocator, host ops never calling it, and on a CUDA
 * device a counting allocator that sees every allocation given back (by
 * count and bytes) once the weights are destroyed, even after the default
 * pool was restored in between. */
#include "harness.h"

#ifdef LOWBIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct counts {
  long long allocs, frees, live_bytes, wrong_device;
} counts;

static void* count_allocate(void* ctx, size_t bytes, int device, void* stream) {
  counts* c = (counts*)ctx;
  void* p = NULL;
  (void)stream;
  (void)device;
#ifdef LOWBIT_WITH_CUDA
  {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) ++c->wrong_device;
    if (cudaMallocAsync(&p, bytes, (cudaStream_t)stream) != cudaSuccess) return NULL;
  }
#else
  p = malloc(bytes); /* never reached: host memory does not come from here */
#endif
  ++c->allocs;
  c->live_bytes += (long long)bytes;
  return p;
}

static void count_deallocate(void* ctx, void* ptr, size_t bytes, int device, void* stream) {
  counts* c = (counts*)ctx;
  (void)device;
  (void)stream;
#ifdef LOWBIT_WITH_CUDA
  cudaFreeAsync(ptr, (cudaStream_t)stream);
#else
  free(ptr);
#endif
  ++c->frees;
  c->live_bytes -= (long long)bytes;
}

/* Half an allocator, reading back, restoring. */
static void test_setter(void) {
  static counts c;
  lowbit_cuda_allocator a, got;
  memset(&a, 0, sizeof a);
  CHECK_OK(lowbit_get_cuda_allocator(&got));
  CHECK(got.allocate == NULL && got.deallocate == NULL, "the default pool serves at start");
  a.allocate = count_allocate;
  CHECK_FAILS(lowbit_set_cuda_allocator(&a), LOWBIT_INVALID_ARGUMENT, "set_cuda_allocator", "deallocate", "NULL");
  a.deallocate = count_deallocate;
  a.ctx = &c;
  CHECK_OK(lowbit_set_cuda_allocator(&a));
  CHECK_OK(lowbit_get_cuda_allocator(&got));
  CHECK(got.allocate == count_allocate && got.deallocate == count_deallocate && got.ctx == &c, "read back");
  a.allocate = NULL;
  CHECK_FAILS(lowbit_set_cuda_allocator(&a), LOWBIT_INVALID_ARGUMENT, "allocate NULL", "deallocate set");
  CHECK_OK(lowbit_get_cuda_allocator(&got));
  CHECK(got.allocate == count_allocate, "a refused allocator leaves the one set");
  CHECK_FAILS(lowbit_get_cuda_allocator(NULL), LOWBIT_INVALID_ARGUMENT, "get_cuda_allocator", "NULL");
  a.allocate = NULL;
  a.deallocate = NULL;
  CHECK_OK(lowbit_set_cuda_allocator(&a));
  CHECK_OK(lowbit_get_cuda_allocator(&got));
  CHECK(got.allocate == NULL, "both functions NULL restore the default pool");
  CHECK_OK(lowbit_set_cuda_allocator(NULL));
  CHECK_FAILS(lowbit_empty_cuda_cache(-1), LOWBIT_INVALID_ARGUMENT, "empty_cuda_cache", "device", "-1");
  CHECK_OK(lowbit_empty_cuda_cache(0));
}

/* Host ops with a CUDA allocator set: it is never called. */
static void test_host_ops(void) {
  enum { N = 24, K = 128, M = 3 };
  static counts c;
  static float x[N * K], y[N * K], absmax[N * K / 64], A32[M * K], out32[M * N];
  static uint8_t packed[N * K / 2];
  static int8_t values[N * K];
  static float scale[N];
  static uint16_t A[M * K], out[M * N];
  int64_t n = N * K, np = N * K / 2, nb = N * K / 64, wshape[2] = {N, K}, sshape[2] = {N, 1};
  int64_t ashape[2] = {M, K}, oshape[2] = {M, N};
  DLTensor tx = make_tensor(x, kDLFloat, 32, 1, &n), ty = make_tensor(y, kDLFloat, 32, 1, &n);
  DLTensor tp = make_tensor(packed, kDLUInt, 8, 1, &np), tabs = make_tensor(absmax, kDLFloat, 32, 1, &nb);
  DLTensor tw = make_tensor(values, kDLInt, 8, 2, wshape), ts = make_tensor(scale, kDLFloat, 32, 2, sshape);
  DLTensor ta = make_tensor(A, kDLFloat, 16, 2, ashape), to = make_tensor(out, kDLFloat, 16, 2, oshape);
  DLTensor ta32 = make_tensor(A32, kDLFloat, 32, 2, ashape), to32 = make_tensor(out32, kDLFloat, 32, 2, oshape);
  lowbit_cuda_allocator a;
  lowbit_matmul_config cfg;
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  int64_t i;

  for (i = 0; i < N * K; ++i) x[i] = (float)rand_int(-100, 100) / 50.0f, values[i] = (int8_t)rand_int(-8, 7);
  for (i = 0; i < N; ++i) scale[i] = 0.01f;
  for (i = 0; i < M * K; ++i) A[i] = rand_f16(-2, 0, 1), A32[i] = (float)f16_value(A[i]);
  a.allocate = count_allocate;
  a.deallocate = count_deallocate;
  a.ctx = &c;
  CHECK_OK(lowbit_set_cuda_allocator(&a));
  CHECK_OK(lowbit_quantize_4bit(&tx, &tp, &tabs, 64, LOWBIT_QUANT4_NF4, NULL));
  CHECK_OK(lowbit_dequantize_4bit(&tp, &tabs, NULL, &ty, 64, LOWBIT_QUANT4_NF4, NULL));
  lowbit_matmul_config_init(&cfg);
  cfg.N = N;
  cfg.K = K;
  cfg.W_dtype = LOWBIT_WEIGHT_INT4;
  cfg.with_scaling = 1;
  CHECK_OK(lowbit_matmul_create(&cfg, cpu_device(), &mm));
  CHECK_OK(lowbit_matmul_transform_weight(mm, &tw, &ts, NULL, NULL, NULL, &w));
  CHECK_OK(lowbit_matmul_forward(mm, &ta, w, &to, NULL));
  CHECK_OK(lowbit_matmul_4bit(&ta32, &tp, &tabs, NULL, NULL, &to32, N, 64, LOWBIT_QUANT4_NF4, NULL));
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
  CHECK(c.allocs == 0 && c.frees == 0, "host ops called the CUDA allocator (%lld allocations, %lld frees)", c.allocs,
        c.frees);
  CHECK_OK(lowbit_set_cuda_allocator(NULL));
}

#ifdef LOWBIT_WITH_CUDA
/* Every CUDA allocation of a weight's life goes through the counting
 * allocator and comes back to it, the last ones after the default pool was
 * restored. */
static void test_cuda_counts(void) {
  enum { N = 200, K = 256, M = 37 };
  static counts c;
  static int8_t values[N * K];
  static uint16_t scale[N * 2], A[M * K];
  static uint8_t packed[N * K / 2];
  static float absmax[N * K / 64];
  int64_t wshape[2] = {N, K}, sshape[2] = {N, 2}, ashape[2] = {M, K}, oshape[2] = {M, N};
  int64_t np = N * K / 2, nb = N * K / 64;
  DLTensor tw = make_tensor(values, kDLInt, 8, 2, wshape), ts = make_tensor(scale, kDLFloat, 16, 2, sshape);
  DLTensor ta, to, tp, tabs;
  DLDevice dev = {kDLCUDA, 0};
  lowbit_cuda_allocator a;
  lowbit_matmul_config cfg;
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  void *dA = NULL, *dout = NULL, *dpacked = NULL, *dabsmax = NULL;
  cudaStream_t stream = NULL;
  long long weight_allocs;
  int64_t i;

  for (i = 0; i < N * K; ++i) values[i] = (int8_t)rand_int(-8, 7);
  for (i = 0; i < N * 2; ++i) scale[i] = rand_f16(-7, -5, 0);
  for (i = 0; i < M * K; ++i) A[i] = rand_f16(-2, 0, 1);
  for (i = 0; i < N * K / 2; ++i) packed[i] = (uint8_t)rand_int(0, 255);
  for (i = 0; i < N * K / 64; ++i) absmax[i] = 0.5f;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess && cudaMalloc(&dA, sizeof A) == cudaSuccess &&
            cudaMalloc(&dout, (size_t)(M * N) * 2) == cudaSuccess &&
            cudaMalloc(&dpacked, sizeof packed) == cudaSuccess && cudaMalloc(&dabsmax, sizeof absmax) == cudaSuccess &&
            cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(dpacked, packed, sizeof packed, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(dabsmax, absmax, sizeof absmax, cudaMemcpyHostToDevice) == cudaSuccess,
        "CUDA setup");
  ta = make_tensor(dA, kDLFloat, 16, 2, ashape);
  to = make_tensor(dout, kDLFloat, 16, 2, oshape);
  ta.device = to.device = dev;

  a.allocate = count_allocate;
  a.deallocate = count_deallocate;
  a.ctx = &c;
  CHECK_OK(lowbit_set_cuda_allocator(&a));
  lowbit_matmul_config_init(&cfg);
  cfg.N = N;
  cfg.K = K;
  cfg.W_dtype = LOWBIT_WEIGHT_INT4;
  cfg.with_scaling = 1;
  cfg.group_size = 128;
  CHECK_OK(lowbit_matmul_create(&cfg, dev, &mm));
  CHECK_OK(lowbit_matmul_transform_weight(mm, &tw, &ts, NULL, NULL, NULL, &w));
  weight_allocs = c.allocs - c.frees;
  CHECK(weight_allocs >= 2 && c.live_bytes >= N * K / 2, "the packed weight came from the allocator (%lld, %lld B)",
        c.allocs, c.live_bytes);
  CHECK_OK(lowbit_matmul_forward(mm, &ta, w, &to, stream));
  tp = make_tensor(dpacked, kDLUInt, 8, 1, &np);
  tabs = make_tensor(dabsmax, kDLFloat, 32, 1, &nb);
  tp.device = tabs.device = dev;
  CHECK_OK(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_NF4, stream));
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "stream");
  /* Scratch of the calls went back on their stream; the weight is still alive. */
  CHECK(c.allocs - c.frees == weight_allocs, "only the weight's memory is live (%lld allocations, %lld frees)",
        c.allocs, c.frees);
  CHECK_OK(lowbit_set_cuda_allocator(NULL));
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "device");
  CHECK(c.allocs == c.frees && c.live_bytes == 0 && c.wrong_device == 0,
        "after destroy: %lld allocations, %lld frees, %lld bytes live, %lld with another device current", c.allocs,
        c.frees, c.live_bytes, c.wrong_device);
  CHECK_OK(lowbit_empty_cuda_cache(0));
  cudaFree(dA), cudaFree(dout), cudaFree(dpacked), cudaFree(dabsmax);
  cudaStreamDestroy(stream);
}
#endif

int main(void) {
  seed_random();
  test_setter();
  test_host_ops();
#ifdef LOWBIT_WITH_CUDA
  if (lowbit_cuda_device_count() > 0) {
    test_cuda_counts();
  } else {
    printf("skipped: no CUDA device (the counting allocator's CUDA case)\n");
  }
#else
  printf("skipped: no CUDA device (built without CUDA)\n");
#endif
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
