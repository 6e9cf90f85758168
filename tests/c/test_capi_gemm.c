/* The C ABI's matmul from C11: GPTQ / AWQ / bitsandbytes import, transform
 * and forward, a weight packed from values, and matmul_4bit / gemv_4bit,
 * each against a float64 matmul computed here from the checkpoint's own
 * definition, on ragged sizes and fresh random data (the seed is printed);
 * bad arguments reported by status and message. CUDA cases run when a
 * device is present and say they skipped otherwise. */
#include "harness.h"

#ifdef LOWBIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static int g_cuda; /* a CUDA device is present and the test can reach it */

/* ------------------------------------------------------------- problem */

/* out[M, N] = A[M, K] . W[N, K]^T + bias: W holds the values the weight
 * stands for, in A's column order, as the checkpoint format defines them. */
typedef struct problem {
  int64_t M, N, K;
  elem_type a_type, out_type;
  void* A;      /* [M, K] of a_type */
  double* W;    /* [N, K] */
  double* bias; /* [N] or NULL */
} problem;

static void problem_init(problem* p, int64_t M, int64_t N, int64_t K, elem_type a_type, elem_type out_type) {
  int64_t i;
  p->M = M;
  p->N = N;
  p->K = K;
  p->a_type = a_type;
  p->out_type = out_type;
  p->A = malloc((size_t)(M * K) * elem_size(a_type));
  p->W = calloc((size_t)(N * K), sizeof(double));
  p->bias = NULL;
  for (i = 0; i < M * K; ++i) elem_rand(p->A, a_type, i, -3, 0, 1);
}

static void problem_free(problem* p) {
  free(p->A);
  free(p->W);
  free(p->bias);
}

/* Within docs/gemm.md's bound: |got - ref| <= u_out |ref| + ((K + 2) 2^-24
 * + extra) sum |a w| (+ |bias|), extra covering W rounded to A's dtype on
 * CUDA. Returns the worst error as a fraction of its bound. */
static double compare(const problem* p, const void* out, double extra) {
  double worst = 0.0;
  int64_t m, n, k;
  for (m = 0; m < p->M; ++m) {
    for (n = 0; n < p->N; ++n) {
      double ref = p->bias ? p->bias[n] : 0.0, sum = p->bias ? absd(p->bias[n]) : 0.0, bound, err;
      for (k = 0; k < p->K; ++k) {
        const double t = elem_get(p->A, p->a_type, m * p->K + k) * p->W[n * p->K + k];
        ref += t;
        sum += absd(t);
      }
      bound = elem_unit(p->out_type) * absd(ref) + ((double)(p->K + 2) * pow2(-24) + extra) * sum + 1e-30;
      err = absd(elem_get(out, p->out_type, m * p->N + n) - ref) / bound;
      if (err != err) err = 1e300; /* NaN: an element left unwritten (the outputs start as NaN) */
      worst = err > worst ? err : worst;
    }
  }
  return worst;
}

/* The bound's extra term on the host: the fast path on bf16 A multiplies
 * weights rounded to bf16 (the few-rows kernel's 4-bit table, the large-M
 * path's panels; docs/gemm.md). */
static double cpu_extra(int a_is_bf16) { return a_is_bf16 ? pow2(-8) : 0.0; }

/* forward on the host; A [M, K] (or [2, M/2, K] when `split` and M is even). */
static void check_forward_cpu(const lowbit_matmul* mm, const lowbit_packed_weight* w, const problem* p, int split,
                              double extra, const char* what) {
  void* out = malloc((size_t)(p->M * p->N) * elem_size(p->out_type));
  int64_t ashape[3], oshape[3];
  const int three = split && p->M % 2 == 0;
  DLTensor ta, to;
  double worst;
  ashape[0] = oshape[0] = three ? 2 : p->M;
  ashape[1] = oshape[1] = three ? p->M / 2 : p->K;
  ashape[2] = p->K;
  if (three)
    oshape[2] = p->N;
  else
    oshape[1] = p->N;
  ta = make_tensor(p->A, elem_dl(p->a_type).code, elem_dl(p->a_type).bits, three ? 3 : 2, ashape);
  to = make_tensor(out, elem_dl(p->out_type).code, elem_dl(p->out_type).bits, three ? 3 : 2, oshape);
  memset(out, 0xff, (size_t)(p->M * p->N) * elem_size(p->out_type)); /* NaN: every element must be written */
  CHECK_OK(lowbit_matmul_forward(mm, &ta, w, &to, NULL));
  worst = compare(p, out, extra);
  CHECK(worst <= 1.0, "%s: M %lld N %lld K %lld: error at %g of the bound", what, (long long)p->M, (long long)p->N,
        (long long)p->K, worst);
  free(out);
}

#ifdef LOWBIT_WITH_CUDA
/* The same on cuda:0 with A and out in device memory, on a stream of the
 * test's own, read back after the stream's work: the matmul prepared from
 * `config`, the weight packed from `qw` or from `values` (weight, scale,
 * zeros, bias, perm as for lowbit_matmul_transform_weight). */
static void check_forward_cuda(const lowbit_matmul_config* config, const lowbit_quantized_weight* qw, const problem* p,
                               const char* what) {
  const size_t abytes = (size_t)(p->M * p->K) * elem_size(p->a_type);
  const size_t obytes = (size_t)(p->M * p->N) * elem_size(p->out_type);
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  DLDevice dev = {kDLCUDA, 0}, where = {kDLCPU, 0};
  int64_t ashape[2] = {p->M, p->K}, oshape[2] = {p->M, p->N};
  void *dA = NULL, *dout = NULL, *out = malloc(obytes);
  cudaStream_t stream = NULL;
  DLTensor ta, to;
  double worst;
  if (!g_cuda) return;
  CHECK_OK(lowbit_matmul_create(config, dev, &mm));
  CHECK_OK(lowbit_matmul_transform_quantized(mm, qw, &w));
  CHECK_OK(lowbit_packed_weight_device(w, &where));
  CHECK(where.device_type == kDLCUDA && where.device_id == 0, "%s: weight on device type %d", what,
        (int)where.device_type);
  CHECK(cudaStreamCreate(&stream) == cudaSuccess && cudaMalloc(&dA, abytes) == cudaSuccess &&
            cudaMalloc(&dout, obytes) == cudaSuccess &&
            cudaMemcpy(dA, p->A, abytes, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemset(dout, 0xff, obytes) == cudaSuccess,
        "%s: CUDA setup", what);
  ta = make_tensor(dA, elem_dl(p->a_type).code, elem_dl(p->a_type).bits, 2, ashape);
  to = make_tensor(dout, elem_dl(p->out_type).code, elem_dl(p->out_type).bits, 2, oshape);
  ta.device = to.device = dev;
  CHECK_OK(lowbit_matmul_forward(mm, &ta, w, &to, stream));
  CHECK(cudaMemcpyAsync(out, dout, obytes, cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
            cudaStreamSynchronize(stream) == cudaSuccess,
        "%s: read back", what);
  /* Tensor cores multiply W rounded to A's dtype (three roundings at most). */
  worst = compare(p, out, 3.0 * elem_unit(p->a_type));
  CHECK(worst <= 1.0, "%s on cuda:0: M %lld N %lld K %lld: error at %g of the bound", what, (long long)p->M,
        (long long)p->N, (long long)p->K, worst);

  /* A in host memory with a CUDA weight: refused before anything runs. */
  ta.data = p->A;
  ta.device = cpu_device();
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, stream), LOWBIT_DEVICE_MISMATCH, "matmul_forward", "A", "cuda:0",
              "cpu");
  cudaFree(dA);
  cudaFree(dout);
  cudaStreamDestroy(stream);
  free(out);
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
}
#else
static void check_forward_cuda(const lowbit_matmul_config* config, const lowbit_quantized_weight* qw, const problem* p,
                               const char* what) {
  (void)config, (void)qw, (void)p, (void)what;
}
#endif

/* Import done: check the config it reports, run it on the host (and on
 * CUDA), with the quantized weight destroyed before the forward. */
static void run_imported(lowbit_quantized_weight* qw, const problem* p, const char* what) {
  lowbit_matmul_config cfg;
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  DLDevice where = {kDLCUDA, 7};
  CHECK_OK(lowbit_quantized_weight_config(qw, &cfg));
  cfg.out_dtype = elem_dl(p->out_type);
  CHECK_OK(lowbit_matmul_create(&cfg, cpu_device(), &mm));
  CHECK_OK(lowbit_matmul_transform_quantized(mm, qw, &w));
  check_forward_cuda(&cfg, qw, p, what);
  lowbit_quantized_weight_destroy(qw);
  CHECK_OK(lowbit_packed_weight_device(w, &where));
  CHECK(where.device_type == kDLCPU, "%s: weight on device type %d", what, (int)where.device_type);
  check_forward_cpu(mm, w, p, 1, cpu_extra(cfg.A_dtype.code == kDLBfloat), what);
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
}

/* ---------------------------------------------------------------- GPTQ */

static void test_gptq(int bits, int act_order, int v1, lowbit_zeros_mode zeros_mode, elem_type out_type) {
  const int pack = 32 / bits, maxq = (1 << bits) - 1;
  const int64_t gs = (int64_t)32 << rand_int(0, 2), G = rand_int(1, 3), K = gs * G;
  const int64_t N = rand_int(1, 70), M = rand_int(1, 9), zcols = (N + pack - 1) / pack;
  const int has_bias = (int)rand_int(0, 1);
  uint32_t* qweight = calloc((size_t)(K / pack * N), 4);
  uint32_t* qzeros = calloc((size_t)(G * zcols), 4);
  uint16_t* scales = malloc((size_t)(G * N) * 2);
  uint16_t* bias = malloc((size_t)N * 2);
  int32_t* g_idx = malloc((size_t)K * 4);
  int64_t* order = malloc((size_t)K * 8);
  int* zero = malloc((size_t)(G * N) * sizeof(int));
  int64_t qshape[2] = {K / pack, N}, zshape[2] = {G, zcols}, sshape[2] = {G, N}, kshape = K, nshape = N;
  DLTensor tq = make_tensor(qweight, kDLInt, 32, 2, qshape), tz = make_tensor(qzeros, kDLInt, 32, 2, zshape);
  DLTensor ts = make_tensor(scales, kDLFloat, 16, 2, sshape), tg = make_tensor(g_idx, kDLInt, 32, 1, &kshape);
  DLTensor tb = make_tensor(bias, kDLFloat, 16, 1, &nshape);
  lowbit_quantized_weight* qw = NULL;
  lowbit_matmul_config cfg;
  problem p;
  int64_t n, k, g;
  char what[96];

  snprintf(what, sizeof what, "gptq %d-bit%s%s zeros %d", bits, act_order ? " act-order" : "", v1 ? " v1" : " v2",
           (int)zeros_mode);
  problem_init(&p, M, N, K, ELEM_F16, out_type);
  /* Act-order: column k belongs to group g_idx[k], each group gs columns. */
  rand_perm(order, K);
  for (k = 0; k < K; ++k) g_idx[act_order ? order[k] : k] = (int32_t)(k / gs);
  for (g = 0; g < G; ++g) {
    for (n = 0; n < N; ++n) {
      const int z = (int)rand_int(v1 ? 1 : 0, maxq);
      zero[g * N + n] = z;
      qzeros[g * zcols + n / pack] |= (uint32_t)(z - (v1 ? 1 : 0)) << (n % pack * bits);
      elem_rand(scales, ELEM_F16, g * N + n, -7, -4, 0);
    }
  }
  for (n = 0; n < N; ++n) {
    for (k = 0; k < K; ++k) {
      const int q = (int)rand_int(0, maxq);
      const int64_t gk = g_idx[k];
      qweight[k / pack * N + n] |= (uint32_t)q << (k % pack * bits);
      p.W[n * K + k] = (q - zero[gk * N + n]) * f16_value(scales[gk * N + n]);
    }
  }
  if (has_bias) {
    p.bias = malloc((size_t)N * sizeof(double));
    for (n = 0; n < N; ++n) p.bias[n] = elem_rand(bias, ELEM_F16, n, -4, -1, 1);
  }
  CHECK_OK(
      lowbit_import_gptq(&tq, &tz, &ts, act_order ? &tg : NULL, has_bias ? &tb : NULL, bits, gs, v1, zeros_mode, &qw));
  if (qw) {
    CHECK_OK(lowbit_quantized_weight_config(qw, &cfg));
    CHECK(cfg.W_dtype == (bits == 2   ? LOWBIT_WEIGHT_UINT2
                          : bits == 4 ? LOWBIT_WEIGHT_UINT4
                                      : LOWBIT_WEIGHT_UINT8) &&
              cfg.N == N && cfg.K == K && cfg.group_size == (G == 1 ? -1 : gs) && cfg.with_scaling && cfg.with_zeros &&
              cfg.zeros_mode == zeros_mode && cfg.with_bias == has_bias && cfg.A_dtype.code == kDLFloat &&
              cfg.A_dtype.bits == 16 && cfg.M == NULL && cfg.num_M == 0,
          "%s: imported config W %s N %lld K %lld group %lld", what, lowbit_weight_type_name(cfg.W_dtype),
          (long long)cfg.N, (long long)cfg.K, (long long)cfg.group_size);
    run_imported(qw, &p, what);
  }
  problem_free(&p);
  free(qweight), free(qzeros), free(scales), free(bias), free(g_idx), free(order), free(zero);
}

/* ----------------------------------------------------------------- AWQ */

static void test_awq(elem_type scale_type) {
  static const int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7}; /* nibble i holds column 8j + kOrder[i] */
  const int64_t gs = (int64_t)32 << rand_int(0, 2), G = rand_int(1, 3), K = gs * G;
  const int64_t N = 8 * rand_int(1, 9), M = rand_int(1, 9);
  uint32_t* qweight = calloc((size_t)(K * N / 8), 4);
  uint32_t* qzeros = calloc((size_t)(G * N / 8), 4);
  void* scales = malloc((size_t)(G * N) * elem_size(scale_type));
  float* bias = malloc((size_t)N * 4);
  int* zero = malloc((size_t)(G * N) * sizeof(int));
  int nibble_of[8];
  int64_t qshape[2] = {K, N / 8}, zshape[2] = {G, N / 8}, sshape[2] = {G, N}, nshape = N;
  DLTensor tq = make_tensor(qweight, kDLInt, 32, 2, qshape), tz = make_tensor(qzeros, kDLInt, 32, 2, zshape);
  DLTensor ts = make_tensor(scales, elem_dl(scale_type).code, elem_dl(scale_type).bits, 2, sshape);
  DLTensor tb = make_tensor(bias, kDLFloat, 32, 1, &nshape);
  lowbit_quantized_weight* qw = NULL;
  lowbit_matmul_config cfg;
  problem p;
  int64_t n, k, g;
  int i;
  char what[64];

  snprintf(what, sizeof what, "awq %s scales", scale_type == ELEM_F16 ? "float16" : "bfloat16");
  for (i = 0; i < 8; ++i) nibble_of[kOrder[i]] = i;
  problem_init(&p, M, N, K, scale_type, ELEM_F32); /* A's dtype follows the scales' */
  p.bias = malloc((size_t)N * sizeof(double));
  for (n = 0; n < N; ++n) p.bias[n] = elem_rand(bias, ELEM_F32, n, -4, -1, 1);
  for (g = 0; g < G; ++g) {
    for (n = 0; n < N; ++n) {
      const int z = (int)rand_int(0, 15);
      zero[g * N + n] = z;
      qzeros[g * (N / 8) + n / 8] |= (uint32_t)z << (4 * nibble_of[n % 8]);
      elem_rand(scales, scale_type, g * N + n, -7, -4, 0);
    }
  }
  for (k = 0; k < K; ++k) {
    for (n = 0; n < N; ++n) {
      const int q = (int)rand_int(0, 15);
      qweight[k * (N / 8) + n / 8] |= (uint32_t)q << (4 * nibble_of[n % 8]);
      p.W[n * K + k] = (q - zero[k / gs * N + n]) * elem_get(scales, scale_type, k / gs * N + n);
    }
  }
  CHECK_OK(lowbit_import_awq(&tq, &tz, &ts, &tb, gs, &qw));
  if (qw) {
    CHECK_OK(lowbit_quantized_weight_config(qw, &cfg));
    CHECK(cfg.W_dtype == LOWBIT_WEIGHT_UINT4 && cfg.N == N && cfg.K == K && cfg.with_zeros &&
              cfg.zeros_mode == LOWBIT_ZEROS_QUANTIZED && cfg.with_bias && cfg.A_dtype.code == elem_dl(scale_type).code,
          "%s: imported config", what);
    run_imported(qw, &p, what);
  }
  problem_free(&p);
  free(qweight), free(qzeros), free(scales), free(bias), free(zero);
}

/* -------------------------------------------------------- bitsandbytes */

/* A random 4-bit weight of N * K codes in bitsandbytes' packing and its
 * absmax, double-quantized when `nested` (through the C ABI's own ops, as
 * bitsandbytes does it); `absmax` receives the values the state stands for. */
typedef struct bnb_state {
  uint8_t* packed;
  int64_t npacked, nblocks, nblocks2;
  float absmax[4096];     /* restored absmax, per block */
  float absmax_f32[4096]; /* the plain state's absmax */
  uint8_t absmax_q[4096]; /* nested: the codes of absmax - offset */
  float absmax2[16], offset[1], code[256], table[16];
  int64_t shape_packed, shape_blocks, shape_blocks2, shape_code, shape_one;
  DLTensor t_packed, t_absmax, t_absmax_q, t_absmax2, t_offset, t_code;
  lowbit_nested_absmax nested;
} bnb_state;

static void bnb_make(bnb_state* s, int64_t N, int64_t K, int64_t bs, lowbit_quant4_type type, int nested) {
  const int64_t total = N * K;
  int64_t e, b;
  s->npacked = (total + 1) / 2;
  s->nblocks = (total + bs - 1) / bs;
  s->nblocks2 = (s->nblocks + 255) / 256;
  s->packed = calloc((size_t)s->npacked, 1);
  for (e = 0; e < total; ++e) s->packed[e / 2] |= (uint8_t)(rand_int(0, 15) << (e % 2 == 0 ? 4 : 0));
  for (b = 0; b < s->nblocks; ++b) s->absmax_f32[b] = (float)f16_value(rand_f16(-3, 1, 0));
  CHECK_OK(lowbit_get_4bit_type(type == LOWBIT_QUANT4_NF4 ? "nf4" : "fp4", (int)bs, s->table, 16, NULL));
  s->shape_packed = s->npacked;
  s->shape_blocks = s->nblocks;
  s->shape_blocks2 = s->nblocks2;
  s->shape_code = 256;
  s->shape_one = 1;
  s->t_packed = make_tensor(s->packed, kDLUInt, 8, 1, &s->shape_packed);
  s->t_absmax = make_tensor(s->absmax_f32, kDLFloat, 32, 1, &s->shape_blocks);
  s->t_absmax_q = make_tensor(s->absmax_q, kDLUInt, 8, 1, &s->shape_blocks);
  s->t_absmax2 = make_tensor(s->absmax2, kDLFloat, 32, 1, &s->shape_blocks2);
  s->t_offset = make_tensor(s->offset, kDLFloat, 32, 1, &s->shape_one);
  s->t_code = make_tensor(s->code, kDLFloat, 32, 1, &s->shape_code);
  s->nested.code = &s->t_code;
  s->nested.absmax = &s->t_absmax2;
  s->nested.offset = &s->t_offset;
  s->nested.blocksize = 256;
  memcpy(s->absmax, s->absmax_f32, sizeof s->absmax);
  if (!nested) return;
  {
    static float centered[4096];
    DLTensor tc = make_tensor(centered, kDLFloat, 32, 1, &s->shape_blocks);
    memcpy(centered, s->absmax_f32, (size_t)s->nblocks * 4);
    CHECK_OK(lowbit_create_dynamic_map(1, 7, 8, s->code, 256, NULL));
    CHECK_OK(lowbit_absmax_center(&tc, &s->t_offset, NULL));
    CHECK_OK(lowbit_quantize_blockwise(&tc, &s->t_code, &s->t_absmax_q, &s->t_absmax2, 256, NULL));
    /* bitsandbytes restores in fp32: code[q] * absmax2, then + offset. */
    for (b = 0; b < s->nblocks; ++b) {
      const float scaled = s->code[s->absmax_q[b]] * s->absmax2[b / 256];
      s->absmax[b] = scaled + s->offset[0];
    }
  }
}

static void bnb_weights(const bnb_state* s, problem* p, int64_t bs) {
  int64_t e;
  for (e = 0; e < p->N * p->K; ++e) {
    const int c = e % 2 == 0 ? s->packed[e / 2] >> 4 : s->packed[e / 2] & 0xf;
    p->W[e] = (double)s->table[c] * s->absmax[e / bs];
  }
}

static void test_bnb_import(lowbit_quant4_type type, int nested, elem_type dtype) {
  const int64_t bs = (int64_t)64 << rand_int(0, 2), K = bs * rand_int(1, 3), N = rand_int(1, 40);
  const int64_t M = rand_int(1, 6);
  static bnb_state s;
  float* bias = malloc((size_t)N * 4);
  int64_t nshape = N;
  DLTensor tb = make_tensor(bias, kDLFloat, 32, 1, &nshape);
  lowbit_quantized_weight* qw = NULL;
  lowbit_matmul_config cfg;
  problem p;
  int64_t n;
  char what[64];

  snprintf(what, sizeof what, "bnb %s%s import", type == LOWBIT_QUANT4_NF4 ? "nf4" : "fp4", nested ? " nested" : "");
  memset(&s, 0, sizeof s);
  bnb_make(&s, N, K, bs, type, nested);
  problem_init(&p, M, N, K, dtype == ELEM_BF16 ? ELEM_BF16 : ELEM_F16, ELEM_F32);
  bnb_weights(&s, &p, bs);
  p.bias = malloc((size_t)N * sizeof(double));
  for (n = 0; n < N; ++n) p.bias[n] = elem_rand(bias, ELEM_F32, n, -4, -1, 1);
  CHECK_OK(lowbit_import_bnb_4bit(&s.t_packed, nested ? &s.t_absmax_q : &s.t_absmax, nested ? &s.nested : NULL, &tb, N,
                                  K, bs, type, elem_dl(dtype), &qw));
  if (qw) {
    CHECK_OK(lowbit_quantized_weight_config(qw, &cfg));
    CHECK(cfg.W_dtype == (type == LOWBIT_QUANT4_NF4 ? LOWBIT_WEIGHT_NF4 : LOWBIT_WEIGHT_FP4) && cfg.N == N &&
              cfg.K == K && cfg.group_size == bs && cfg.with_scaling && !cfg.with_zeros && cfg.with_bias &&
              cfg.A_dtype.code == elem_dl(p.a_type).code,
          "%s: imported config W %s group %lld", what, lowbit_weight_type_name(cfg.W_dtype), (long long)cfg.group_size);
    run_imported(qw, &p, what);
  }
  problem_free(&p);
  free(s.packed);
  free(bias);
}

/* matmul_4bit / gemv_4bit straight on the state: any K, blocks crossing
 * rows, an odd count of codes. */
static void test_matmul_4bit(lowbit_quant4_type type, int nested, elem_type a_type, int gemv) {
  const int64_t bs = (int64_t)32 << rand_int(0, 2), N = 2 * rand_int(1, 20) + 1, K = 2 * rand_int(1, 100) + 1;
  const int64_t M = gemv ? 1 : rand_int(1, 6);
  const int has_bias = (int)rand_int(0, 1);
  static bnb_state s;
  void* bias = malloc((size_t)N * 4);
  void* out = malloc((size_t)(M * N) * 4);
  int64_t nshape = N, ashape[2] = {M, K}, oshape[2] = {M, N};
  DLTensor tb = make_tensor(bias, elem_dl(a_type).code, elem_dl(a_type).bits, 1, &nshape);
  DLTensor ta, to;
  problem p;
  int64_t n;
  double worst;
  char what[80];

  snprintf(what, sizeof what, "%s %s%s A %d-bit code %d", gemv ? "gemv_4bit" : "matmul_4bit",
           type == LOWBIT_QUANT4_NF4 ? "nf4" : "fp4", nested ? " nested" : "", elem_dl(a_type).bits,
           elem_dl(a_type).code);
  memset(&s, 0, sizeof s);
  bnb_make(&s, N, K, bs, type, nested);
  problem_init(&p, M, N, K, a_type, a_type);
  bnb_weights(&s, &p, bs);
  if (has_bias) {
    p.bias = malloc((size_t)N * sizeof(double));
    for (n = 0; n < N; ++n) p.bias[n] = elem_rand(bias, a_type, n, -4, -1, 1);
  }
  /* gemv: A [K] and out [N]; matmul: [M, K] and [M, N]. */
  ta = make_tensor(p.A, elem_dl(a_type).code, elem_dl(a_type).bits, gemv ? 1 : 2, gemv ? ashape + 1 : ashape);
  to = make_tensor(out, elem_dl(a_type).code, elem_dl(a_type).bits, gemv ? 1 : 2, gemv ? oshape + 1 : oshape);
  memset(out, 0xff, (size_t)(M * N) * elem_size(a_type));
  if (gemv) {
    CHECK_OK(lowbit_gemv_4bit(&ta, &s.t_packed, nested ? &s.t_absmax_q : &s.t_absmax, nested ? &s.nested : NULL,
                              has_bias ? &tb : NULL, &to, N, bs, type, NULL));
  } else {
    CHECK_OK(lowbit_matmul_4bit(&ta, &s.t_packed, nested ? &s.t_absmax_q : &s.t_absmax, nested ? &s.nested : NULL,
                                has_bias ? &tb : NULL, &to, N, bs, type, NULL));
  }
  worst = compare(&p, out, cpu_extra(a_type == ELEM_BF16));
  CHECK(worst <= 1.0, "%s: M %lld N %lld K %lld blocksize %lld: error at %g of the bound", what, (long long)M,
        (long long)N, (long long)K, (long long)bs, worst);
  problem_free(&p);
  free(s.packed);
  free(bias);
  free(out);
}

#ifdef LOWBIT_WITH_CUDA
/* matmul_4bit with every tensor in device memory, on a stream. */
static void test_matmul_4bit_cuda(void) {
  const int64_t bs = 64, N = 2 * rand_int(1, 40) + 1, K = 2 * rand_int(1, 200) + 1, M = rand_int(1, 40);
  static bnb_state s;
  void *dA = NULL, *dout = NULL, *dpacked = NULL, *dabsmax = NULL;
  uint16_t* out = malloc((size_t)(M * N) * 2);
  int64_t ashape[2] = {M, K}, oshape[2] = {M, N};
  DLDevice dev = {kDLCUDA, 0};
  DLTensor ta, to, tp, tabs;
  cudaStream_t stream = NULL;
  problem p;
  double worst;
  if (!g_cuda) return;
  memset(&s, 0, sizeof s);
  bnb_make(&s, N, K, bs, LOWBIT_QUANT4_NF4, 0);
  problem_init(&p, M, N, K, ELEM_F16, ELEM_F16);
  bnb_weights(&s, &p, bs);
  CHECK(cudaStreamCreate(&stream) == cudaSuccess && cudaMalloc(&dA, (size_t)(M * K) * 2) == cudaSuccess &&
            cudaMalloc(&dout, (size_t)(M * N) * 2) == cudaSuccess &&
            cudaMalloc(&dpacked, (size_t)s.npacked) == cudaSuccess &&
            cudaMalloc(&dabsmax, (size_t)s.nblocks * 4) == cudaSuccess &&
            cudaMemcpy(dA, p.A, (size_t)(M * K) * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(dpacked, s.packed, (size_t)s.npacked, cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(dabsmax, s.absmax_f32, (size_t)s.nblocks * 4, cudaMemcpyHostToDevice) == cudaSuccess,
        "matmul_4bit CUDA setup");
  ta = make_tensor(dA, kDLFloat, 16, 2, ashape);
  to = make_tensor(dout, kDLFloat, 16, 2, oshape);
  tp = s.t_packed;
  tabs = s.t_absmax;
  tp.data = dpacked;
  tabs.data = dabsmax;
  ta.device = to.device = tp.device = tabs.device = dev;
  CHECK_OK(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, bs, LOWBIT_QUANT4_NF4, stream));
  CHECK(cudaMemcpyAsync(out, dout, (size_t)(M * N) * 2, cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
            cudaStreamSynchronize(stream) == cudaSuccess,
        "matmul_4bit read back");
  worst = compare(&p, out, 3.0 * elem_unit(ELEM_F16));
  CHECK(worst <= 1.0, "matmul_4bit on cuda:0: M %lld N %lld K %lld: error at %g of the bound", (long long)M,
        (long long)N, (long long)K, worst);
  /* absmax left on the host: a device mismatch, found before anything runs. */
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &s.t_absmax, NULL, NULL, &to, N, bs, LOWBIT_QUANT4_NF4, stream),
              LOWBIT_DEVICE_MISMATCH, "matmul_4bit", "absmax");
  cudaFree(dA), cudaFree(dout), cudaFree(dpacked), cudaFree(dabsmax);
  cudaStreamDestroy(stream);
  problem_free(&p);
  free(s.packed);
  free(out);
}
#endif

/* ---------------------------------------------- a weight from values */

/* int4 values with float zeros (original), per-group scales, bias and an
 * act-order permutation, packed by lowbit_matmul_transform_weight; the
 * dequantized weight read back. */
static void test_transform_values(void) {
  const int64_t gs = 64, G = rand_int(1, 4), K = gs * G, N = rand_int(1, 50), M = 2 * rand_int(1, 5);
  int8_t* values = malloc((size_t)(N * K));
  float* scale = malloc((size_t)(N * G) * 4);
  float* zeros = malloc((size_t)(N * G) * 4);
  float* bias = malloc((size_t)N * 4);
  float* back = malloc((size_t)(N * K) * 4);
  int32_t* perm = malloc((size_t)K * 4);
  int64_t* p64 = malloc((size_t)K * 8);
  int64_t wshape[2] = {N, K}, sshape[2] = {N, G}, nshape = N, kshape = K;
  DLTensor tw = make_tensor(values, kDLInt, 8, 2, wshape), ts = make_tensor(scale, kDLFloat, 32, 2, sshape);
  DLTensor tz = make_tensor(zeros, kDLFloat, 32, 2, sshape), tb = make_tensor(bias, kDLFloat, 32, 1, &nshape);
  DLTensor tp = make_tensor(perm, kDLInt, 32, 1, &kshape), tback = make_tensor(back, kDLFloat, 32, 2, wshape);
  const int64_t prepared[2] = {4, 1};
  lowbit_matmul_config cfg;
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  DLDevice where;
  size_t nbytes = 0;
  problem p;
  int64_t n, k, g, exact = 1;

  problem_init(&p, M, N, K, ELEM_BF16, ELEM_BF16);
  rand_perm(p64, K);
  for (k = 0; k < K; ++k) perm[k] = (int32_t)p64[k];
  for (n = 0; n < N; ++n) {
    for (g = 0; g < G; ++g) {
      elem_rand(scale, ELEM_F32, n * G + g, -7, -3, 0);
      zeros[n * G + g] = (float)rand_int(-3, 3);
    }
  }
  p.bias = malloc((size_t)N * sizeof(double));
  for (n = 0; n < N; ++n) p.bias[n] = elem_rand(bias, ELEM_F32, n, -4, -1, 1);
  for (n = 0; n < N; ++n) {
    for (k = 0; k < K; ++k) {
      const int v = (int)rand_int(-8, 7);
      values[n * K + k] = (int8_t)v;
      /* Column k of W multiplies A[:, perm[k]]. */
      p.W[n * K + perm[k]] = (v - zeros[n * G + k / gs]) * (double)scale[n * G + k / gs];
    }
  }

  lowbit_matmul_config_init(&cfg);
  cfg.M = prepared;
  cfg.num_M = 2;
  cfg.N = N;
  cfg.K = K;
  cfg.A_dtype = dl_type(kDLBfloat, 16);
  cfg.out_dtype = dl_type(kDLBfloat, 16);
  cfg.W_dtype = LOWBIT_WEIGHT_INT4;
  cfg.group_size = gs;
  cfg.with_scaling = 1;
  cfg.with_zeros = 1;
  cfg.zeros_mode = LOWBIT_ZEROS_ORIGINAL;
  cfg.with_bias = 1;
  CHECK_OK(lowbit_matmul_create(&cfg, cpu_device(), &mm));
  CHECK_OK(lowbit_matmul_transform_weight(mm, &tw, &ts, &tz, &tb, &tp, &w));
  if (w) {
    CHECK_OK(lowbit_packed_weight_device(w, &where));
    CHECK_OK(lowbit_packed_weight_nbytes(w, &nbytes));
    CHECK(where.device_type == kDLCPU && nbytes >= (size_t)(N * K / 2 + N * G * 8 + N * 4 + K * 4),
          "packed weight on type %d, %zu bytes", (int)where.device_type, nbytes);
    check_forward_cpu(mm, w, &p, 1, 0.0, "int4 from values");
    /* Exact: (v - z) * s is one fp32 rounding of an exact product. */
    CHECK_OK(lowbit_packed_weight_dequantize(w, &tback));
    for (k = 0; k < N * K; ++k) exact &= back[k] == (float)p.W[k];
    CHECK(exact, "dequantized weight equals (v - z) * s in A's column order");
  }
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
  problem_free(&p);
  free(values), free(scale), free(zeros), free(bias), free(back), free(perm), free(p64);
}

/* ---------------------------------------------------------- bad input */

static void base_config(lowbit_matmul_config* c) {
  lowbit_matmul_config_init(c);
  c->N = 24;
  c->K = 64;
  c->W_dtype = LOWBIT_WEIGHT_INT4;
  c->with_scaling = 1;
  c->group_size = 32;
}

static void test_config_errors(void) {
  lowbit_matmul_config c;
  lowbit_matmul* mm = NULL;
  DLDevice cuda = {kDLCUDA, 0}, opencl = {kDLOpenCL, 0};
  const int64_t bad_m[1] = {0};

  lowbit_matmul_config_init(&c);
  CHECK(c.M == NULL && c.num_M == 0 && c.A_dtype.code == kDLFloat && c.A_dtype.bits == 16 && c.accum_dtype.bits == 32 &&
            c.W_dtype == LOWBIT_WEIGHT_FLOAT16 && c.group_size == -1 && strcmp(c.layout, "nt") == 0,
        "config defaults");
  CHECK(strcmp(lowbit_weight_type_name(LOWBIT_WEIGHT_NF4), "nf4") == 0 &&
            strcmp(lowbit_weight_type_name(LOWBIT_WEIGHT_BFLOAT16), "bfloat16") == 0 &&
            strcmp(lowbit_weight_type_name((lowbit_weight_type)99), "unknown") == 0,
        "weight type names");

  CHECK_FAILS(lowbit_matmul_create(NULL, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "matmul_create", "config",
              "NULL");
  base_config(&c);
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), NULL), LOWBIT_INVALID_ARGUMENT, "matmul_create", "out", "NULL");
  c.N = 0;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "N must be positive", "got 0");
  base_config(&c);
  c.group_size = 100;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "group_size", "multiple of 32",
              "100");
  base_config(&c);
  c.group_size = 128;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "group_size 128", "divide K", "64");
  base_config(&c);
  c.W_dtype = (lowbit_weight_type)99;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_UNSUPPORTED_DTYPE, "matmul_create", "config->W_dtype",
              "99");
  base_config(&c);
  c.A_dtype = dl_type(kDLFloat, 64);
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_UNSUPPORTED_DTYPE, "config->A_dtype", "float64");
  c.A_dtype = dl_type(kDLFloat, 32);
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_UNSUPPORTED_DTYPE, "A_dtype", "float16", "float32");
  base_config(&c);
  c.out_dtype = dl_type(kDLInt, 8);
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_UNSUPPORTED_DTYPE, "out_dtype", "int8");
  base_config(&c);
  c.layout = "tn";
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "layout", "\"nt\"", "tn");
  base_config(&c);
  c.W_dtype = LOWBIT_WEIGHT_NF4;
  c.with_zeros = 1;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "with_zeros", "integer W_dtype",
              "nf4");
  base_config(&c);
  c.with_zeros = 1;
  c.zeros_mode = (lowbit_zeros_mode)7;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "config->zeros_mode", "got 7");
  base_config(&c);
  c.num_M = 3;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "config->M", "NULL", "num_M 3");
  c.M = bad_m;
  c.num_M = 1;
  CHECK_FAILS(lowbit_matmul_create(&c, cpu_device(), &mm), LOWBIT_INVALID_ARGUMENT, "prepared M", "positive", "got 0");
  base_config(&c);
  CHECK_FAILS(lowbit_matmul_create(&c, opencl, &mm), LOWBIT_NO_BACKEND, "matmul_create", "device", "kDLCPU");
  if (lowbit_cuda_device_count() == 0) {
    CHECK_FAILS(lowbit_matmul_create(&c, cuda, &mm), LOWBIT_NO_BACKEND, "matmul_create", "cuda:0", "not available");
  } else {
    cuda.device_id = 99;
    CHECK_FAILS(lowbit_matmul_create(&c, cuda, &mm), LOWBIT_INVALID_ARGUMENT, "device_id", "got 99");
  }
  CHECK(mm == NULL, "no handle after failures");
  lowbit_matmul_destroy(NULL);
  lowbit_packed_weight_destroy(NULL);
  lowbit_quantized_weight_destroy(NULL);
}

static void test_matmul_errors(void) {
  enum { N = 24, K = 64, G = 2, M = 3 };
  static int8_t values[N * K];
  static float scale[N * G], wide[N * (K + 1)];
  static uint16_t A[M * (K + 1)], out[M * N];
  static float A32[M * K];
  int64_t wshape[2] = {N, K}, sshape[2] = {N, G}, ashape[2] = {M, K}, oshape[2] = {M, N}, wide_shape[2] = {N, K + 1};
  DLTensor tw = make_tensor(values, kDLInt, 8, 2, wshape), ts = make_tensor(scale, kDLFloat, 32, 2, sshape);
  DLTensor ta = make_tensor(A, kDLFloat, 16, 2, ashape), to = make_tensor(out, kDLFloat, 16, 2, oshape);
  DLTensor twide = make_tensor(wide, kDLFloat, 32, 2, wide_shape);
  lowbit_matmul_config c;
  lowbit_matmul *mm = NULL, *other = NULL;
  lowbit_packed_weight *w = NULL, *w2 = NULL;
  lowbit_quantized_weight* qw = NULL;
  int i;

  for (i = 0; i < N * G; ++i) scale[i] = 0.01f;
  for (i = 0; i < M * K; ++i) A[i] = 0x3c00; /* 1.0 */
  base_config(&c);
  CHECK_OK(lowbit_matmul_create(&c, cpu_device(), &mm));
  c.N = 32;
  CHECK_OK(lowbit_matmul_create(&c, cpu_device(), &other));

  /* transform_weight */
  CHECK_FAILS(lowbit_matmul_transform_weight(NULL, &tw, &ts, NULL, NULL, NULL, &w), LOWBIT_INVALID_ARGUMENT,
              "matmul_transform_weight", "matmul", "NULL");
  CHECK_FAILS(lowbit_matmul_transform_weight(mm, &tw, &ts, NULL, NULL, NULL, NULL), LOWBIT_INVALID_ARGUMENT,
              "matmul_transform_weight", "out", "NULL");
  CHECK_FAILS(lowbit_matmul_transform_weight(mm, NULL, &ts, NULL, NULL, NULL, &w), LOWBIT_INVALID_ARGUMENT, "weight",
              "required");
  wide_shape[1] = K;
  CHECK_FAILS(lowbit_matmul_transform_weight(mm, &twide, &ts, NULL, NULL, NULL, &w), LOWBIT_UNSUPPORTED_DTYPE, "weight",
              "float32");
  wide_shape[1] = K + 1;
  twide.dtype = dl_type(kDLInt, 8);
  CHECK_FAILS(lowbit_matmul_transform_weight(mm, &twide, &ts, NULL, NULL, NULL, &w), LOWBIT_INVALID_ARGUMENT, "weight",
              "65");
  values[5] = 9; /* outside int4's [-8, 7] */
  CHECK(lowbit_matmul_transform_weight(mm, &tw, &ts, NULL, NULL, NULL, &w) != LOWBIT_OK &&
            contains(lowbit_last_error(), "9"),
        "an int4 value of 9");
  values[5] = 0;
  CHECK(w == NULL, "no weight after failures");
  CHECK_OK(lowbit_matmul_transform_weight(mm, &tw, &ts, NULL, NULL, NULL, &w));
  CHECK(strcmp(lowbit_last_error(), "") == 0, "a success clears the message");

  /* forward */
  CHECK_FAILS(lowbit_matmul_forward(NULL, &ta, w, &to, NULL), LOWBIT_INVALID_ARGUMENT, "matmul_forward", "matmul",
              "NULL");
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, NULL, &to, NULL), LOWBIT_INVALID_ARGUMENT, "matmul_forward", "weight",
              "NULL");
  CHECK_FAILS(lowbit_matmul_forward(mm, NULL, w, &to, NULL), LOWBIT_INVALID_ARGUMENT, "A", "required");
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, NULL, NULL), LOWBIT_INVALID_ARGUMENT, "out", "required");
  ashape[1] = K + 1;
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_INVALID_ARGUMENT, "A's last dimension", "K = 64",
              "65");
  ashape[1] = K;
  oshape[1] = N + 1;
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_INVALID_ARGUMENT, "out must have shape [3, 24]",
              "[3, 25]");
  oshape[1] = N;
  ta.data = A32;
  ta.dtype = dl_type(kDLFloat, 32);
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_UNSUPPORTED_DTYPE, "A", "float32");
  ta.data = A;
  ta.dtype = dl_type(kDLBfloat, 16);
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_UNSUPPORTED_DTYPE, "A_dtype", "bfloat16");
  ta.dtype = dl_type(kDLFloat, 16);
  to.dtype = dl_type(kDLFloat, 32);
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_UNSUPPORTED_DTYPE, "out_dtype", "float32");
  to.dtype = dl_type(kDLFloat, 16);
  /* A (or out) claiming another device: refused before any memory is read. */
  ta.device.device_type = kDLCUDA;
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_DEVICE_MISMATCH, "matmul_forward", "A", "cpu",
              "cuda:0");
  ta.device.device_type = kDLCPU;
  to.device.device_type = kDLCUDA;
  to.device.device_id = 1;
  CHECK_FAILS(lowbit_matmul_forward(mm, &ta, w, &to, NULL), LOWBIT_DEVICE_MISMATCH, "out", "cuda:1");
  to.device.device_type = kDLCPU;
  to.device.device_id = 0;
  /* A weight packed for another config. */
  CHECK_FAILS(lowbit_matmul_forward(other, &ta, w, &to, NULL), LOWBIT_INVALID_ARGUMENT, "N", "24", "32");
  CHECK_OK(lowbit_matmul_forward(mm, &ta, w, &to, NULL));
  CHECK(f16_value(out[0]) == 0.0 && strcmp(lowbit_last_error(), "") == 0, "zero weights give 0 (got %g)",
        f16_value(out[0]));

  /* queries */
  CHECK_FAILS(lowbit_packed_weight_device(NULL, NULL), LOWBIT_INVALID_ARGUMENT, "packed_weight_device", "weight",
              "NULL");
  CHECK_FAILS(lowbit_packed_weight_nbytes(w, NULL), LOWBIT_INVALID_ARGUMENT, "packed_weight_nbytes", "nbytes", "NULL");
  CHECK_FAILS(lowbit_packed_weight_dequantize(w, &ta), LOWBIT_UNSUPPORTED_DTYPE, "packed_weight_dequantize", "out",
              "float16");
  CHECK_FAILS(lowbit_quantized_weight_config(NULL, &c), LOWBIT_INVALID_ARGUMENT, "quantized_weight_config", "weight",
              "NULL");
  CHECK_FAILS(lowbit_matmul_transform_quantized(mm, NULL, &w2), LOWBIT_INVALID_ARGUMENT, "matmul_transform_quantized",
              "weight", "NULL");
  CHECK(qw == NULL && w2 == NULL, "no handles after failures");
  lowbit_packed_weight_destroy(w);
  lowbit_matmul_destroy(mm);
  lowbit_matmul_destroy(other);
}

static void test_import_errors(void) {
  enum { K = 64, N = 16, G = 1 };
  static uint32_t qweight[K / 8 * N], qzeros[G * N / 8], awq_w[K * N / 8];
  static uint16_t scales[G * N];
  static float scales32[G * N];
  static uint8_t packed[N * K / 2];
  static float absmax[N * K / 64];
  int64_t qshape[2] = {K / 8, N}, zshape[2] = {G, N / 8}, sshape[2] = {G, N}, awshape[2] = {K, N / 8};
  int64_t pshape = N * K / 2, ashape = N * K / 64;
  DLTensor tq = make_tensor(qweight, kDLInt, 32, 2, qshape), tz = make_tensor(qzeros, kDLInt, 32, 2, zshape);
  DLTensor ts = make_tensor(scales, kDLFloat, 16, 2, sshape), taw = make_tensor(awq_w, kDLInt, 32, 2, awshape);
  DLTensor tp = make_tensor(packed, kDLUInt, 8, 1, &pshape), tabs = make_tensor(absmax, kDLFloat, 32, 1, &ashape);
  DLTensor ts32 = make_tensor(scales32, kDLFloat, 32, 2, sshape);
  lowbit_quantized_weight* qw = NULL;
  lowbit_matmul_config c;
  lowbit_matmul* mm = NULL;
  lowbit_packed_weight* w = NULL;
  int i;
  for (i = 0; i < N; ++i) scales[i] = 0x2000, scales32[i] = 0.01f;

  CHECK_FAILS(lowbit_import_gptq(&tq, &tz, &ts, NULL, NULL, 3, 64, 1, LOWBIT_ZEROS_QUANTIZED, &qw),
              LOWBIT_INVALID_ARGUMENT, "import_gptq", "bits", "3");
  CHECK_FAILS(lowbit_import_gptq(&tq, &tz, &ts, NULL, NULL, 4, 64, 1, LOWBIT_ZEROS_QUANTIZED, NULL),
              LOWBIT_INVALID_ARGUMENT, "import_gptq", "out", "NULL");
  CHECK_FAILS(lowbit_import_gptq(&ts, &tz, &ts, NULL, NULL, 4, 64, 1, LOWBIT_ZEROS_QUANTIZED, &qw),
              LOWBIT_UNSUPPORTED_DTYPE, "import_gptq", "qweight", "int32", "float16");
  CHECK_FAILS(lowbit_import_gptq(&tq, &tz, &ts, NULL, NULL, 4, 64, 1, LOWBIT_ZEROS_RESCALE, &qw),
              LOWBIT_INVALID_ARGUMENT, "import_gptq", "zeros_mode", "rescale");
  CHECK_FAILS(lowbit_import_gptq(&tq, &tz, &ts, NULL, NULL, 4, 64, 1, (lowbit_zeros_mode)5, &qw),
              LOWBIT_INVALID_ARGUMENT, "import_gptq", "zeros_mode", "got 5");
  CHECK_FAILS(lowbit_import_gptq(&tq, &tz, &ts, NULL, NULL, 4, 32, 1, LOWBIT_ZEROS_QUANTIZED, &qw),
              LOWBIT_INVALID_ARGUMENT, "import_gptq", "scales", "[2, 16]");
  CHECK_FAILS(lowbit_import_awq(&taw, &tz, &ts, NULL, 32, &qw), LOWBIT_INVALID_ARGUMENT, "import_awq", "scales",
              "[2, 16]");
  CHECK_FAILS(lowbit_import_bnb_4bit(&tp, &tabs, NULL, NULL, N, K, 48, LOWBIT_QUANT4_NF4, dl_type(kDLFloat, 16), &qw),
              LOWBIT_INVALID_ARGUMENT, "import_bnb_4bit", "blocksize", "48");
  CHECK_FAILS(lowbit_import_bnb_4bit(&tp, &tabs, NULL, NULL, N / 2, 2 * K - 32, 64, LOWBIT_QUANT4_NF4,
                                     dl_type(kDLFloat, 16), &qw),
              LOWBIT_INVALID_ARGUMENT, "import_bnb_4bit", "blocksize 64", "divide K", "96");
  CHECK_FAILS(
      lowbit_import_bnb_4bit(&tp, &tabs, NULL, NULL, N, K, 64, (lowbit_quant4_type)3, dl_type(kDLFloat, 16), &qw),
      LOWBIT_INVALID_ARGUMENT, "import_bnb_4bit", "type", "got 3");
  CHECK_FAILS(lowbit_import_bnb_4bit(&tp, &tabs, NULL, NULL, N, K, 64, LOWBIT_QUANT4_NF4, dl_type(kDLInt, 8), &qw),
              LOWBIT_UNSUPPORTED_DTYPE, "import_bnb_4bit", "dtype", "int8");
  CHECK_FAILS(lowbit_import_bnb_4bit(&tp, NULL, NULL, NULL, N, K, 64, LOWBIT_QUANT4_NF4, dl_type(kDLFloat, 16), &qw),
              LOWBIT_INVALID_ARGUMENT, "import_bnb_4bit", "absmax", "required");
  ashape -= 1;
  CHECK_FAILS(lowbit_import_bnb_4bit(&tp, &tabs, NULL, NULL, N, K, 64, LOWBIT_QUANT4_NF4, dl_type(kDLFloat, 16), &qw),
              LOWBIT_INVALID_ARGUMENT, "import_bnb_4bit", "absmax", "16", "15");
  ashape += 1;
  CHECK(qw == NULL, "no handle after failures");

  /* A quantized weight whose format differs from the matmul's config. */
  CHECK_OK(lowbit_import_gptq(&tq, &tz, &ts32, NULL, NULL, 4, 64, 0, LOWBIT_ZEROS_QUANTIZED, &qw));
  CHECK_OK(lowbit_quantized_weight_config(qw, &c));
  CHECK(c.A_dtype.code == kDLFloat && c.A_dtype.bits == 16 && c.group_size == -1,
        "float32 scales suggest float16 activations; one group over K is -1");
  c.group_size = 32;
  CHECK_OK(lowbit_matmul_create(&c, cpu_device(), &mm));
  CHECK_FAILS(lowbit_matmul_transform_quantized(mm, qw, &w), LOWBIT_INVALID_ARGUMENT, "group_size", "differs", "(-1)",
              "(32)");
  CHECK(w == NULL, "no weight after a failure");
  lowbit_matmul_destroy(mm);
  lowbit_quantized_weight_destroy(qw);
}

static void test_matmul_4bit_errors(void) {
  enum { N = 8, K = 64, M = 2 };
  static uint8_t packed[N * K / 2];
  static float absmax[N * K / 64], A[M * K], out[M * N];
  static int8_t A8[M * K];
  int64_t pshape = N * K / 2, bshape = N * K / 64, ashape[2] = {M, K}, oshape[2] = {M, N};
  DLTensor tp = make_tensor(packed, kDLUInt, 8, 1, &pshape), tabs = make_tensor(absmax, kDLFloat, 32, 1, &bshape);
  DLTensor ta = make_tensor(A, kDLFloat, 32, 2, ashape), to = make_tensor(out, kDLFloat, 32, 2, oshape);
  DLTensor ta8 = make_tensor(A8, kDLInt, 8, 2, ashape);

  CHECK_OK(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL));
  pshape -= 1;
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "packed", "256", "255");
  pshape += 1;
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 48, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "blocksize", "48");
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, 0, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "N must be positive", "got 0");
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, (lowbit_quant4_type)2, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "type", "got 2");
  CHECK_FAILS(lowbit_matmul_4bit(&ta8, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_UNSUPPORTED_DTYPE, "matmul_4bit", "A", "int8");
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, NULL, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_INVALID_ARGUMENT, "matmul_4bit", "absmax");
  tabs.device.device_type = kDLCUDA;
  CHECK_FAILS(lowbit_matmul_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_DEVICE_MISMATCH, "matmul_4bit", "absmax");
  tabs.device.device_type = kDLCPU;
  CHECK_FAILS(lowbit_gemv_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL),
              LOWBIT_INVALID_ARGUMENT, "gemv_4bit", "one row", "[2, 64]");
  ashape[0] = oshape[0] = 1;
  CHECK_OK(lowbit_gemv_4bit(&ta, &tp, &tabs, NULL, NULL, &to, N, 64, LOWBIT_QUANT4_FP4, NULL));
}

int main(void) {
  int rep;
  const int count = lowbit_cuda_device_count();
  seed_random();
#ifdef LOWBIT_WITH_CUDA
  g_cuda = count > 0;
#endif
  if (!g_cuda) printf("skipped: no CUDA device (the CUDA cases of this test)\n");
  (void)count;

  test_config_errors();
  test_matmul_errors();
  test_import_errors();
  test_matmul_4bit_errors();
  for (rep = 0; rep < 2; ++rep) {
    test_gptq(4, 0, 1, LOWBIT_ZEROS_QUANTIZED, ELEM_F16);
    test_gptq(4, 1, 1, LOWBIT_ZEROS_QUANTIZED, ELEM_F32);
    test_gptq(8, 1, 0, LOWBIT_ZEROS_QUANTIZED, ELEM_F16);
    test_gptq(2, 0, 0, LOWBIT_ZEROS_ORIGINAL, ELEM_BF16);
    test_awq(ELEM_F16);
    test_awq(ELEM_BF16);
    test_bnb_import(LOWBIT_QUANT4_NF4, 0, ELEM_F16);
    test_bnb_import(LOWBIT_QUANT4_FP4, 1, ELEM_BF16);
    test_bnb_import(LOWBIT_QUANT4_NF4, 1, ELEM_F32);
    test_matmul_4bit(LOWBIT_QUANT4_NF4, 0, ELEM_F16, 0);
    test_matmul_4bit(LOWBIT_QUANT4_FP4, 1, ELEM_BF16, 0);
    test_matmul_4bit(LOWBIT_QUANT4_NF4, 1, ELEM_F32, 0);
    test_matmul_4bit(LOWBIT_QUANT4_NF4, 1, ELEM_F16, 1);
    test_matmul_4bit(LOWBIT_QUANT4_FP4, 0, ELEM_F32, 1);
    test_transform_values();
  }
#ifdef LOWBIT_WITH_CUDA
  test_matmul_4bit_cuda();
#endif
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
