/* What the C ABI tests of the matmul and the allocator share: checks,
 * DLTensor views of host buffers, a seeded random source and the 16-bit
 * float encodings, in plain C11 (no libm: the programs link lowbit only). */
#ifndef LOWBIT_TESTS_C_HARNESS_H_
#define LOWBIT_TESTS_C_HARNESS_H_

#include <lowbit/c/lowbit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_passed, g_failed;

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (cond) {                                                        \
      ++g_passed;                                                      \
    } else {                                                           \
      ++g_failed;                                                      \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, " (last error: \"%s\")\n", lowbit_last_error()); \
    }                                                                  \
  } while (0)

#define CHECK_OK(call) CHECK((call) == LOWBIT_OK, "%s", #call)

/* A call that must fail with `status` and a message holding every part. */
#define CHECK_FAILS(call, status, ...)                                                                                 \
  do {                                                                                                                 \
    const char* parts_[] = {__VA_ARGS__};                                                                              \
    const lowbit_status got_ = (call);                                                                                 \
    size_t i_;                                                                                                         \
    int all_ = 1;                                                                                                      \
    for (i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; ++i_) all_ &= strstr(lowbit_last_error(), parts_[i_]) != NULL; \
    CHECK(got_ == (status) && all_, "%s gave %s", #call, lowbit_status_name(got_));                                    \
  } while (0)

static inline double absd(double v) { return v < 0 ? -v : v; }

static inline DLTensor make_tensor(void* data, uint8_t code, uint8_t bits, int ndim, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static inline DLDataType dl_type(uint8_t code, uint8_t bits) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}

static inline DLDevice cpu_device(void) {
  DLDevice d;
  d.device_type = kDLCPU;
  d.device_id = 0;
  return d;
}

/* ------------------------------------------------------------- random */

/* splitmix64: fresh data per run from the clock, or LOWBIT_TEST_SEED. */
static uint64_t g_rng;

static inline uint64_t seed_random(void) {
  const char* env = getenv("LOWBIT_TEST_SEED");
  const uint64_t seed = env ? (uint64_t)strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock() << 20;
  g_rng = seed;
  printf("seed %llu (set LOWBIT_TEST_SEED to repeat)\n", (unsigned long long)seed);
  return seed;
}

static inline uint64_t next_u64(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline int64_t rand_int(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }

/* A random permutation of 0 .. n-1 (Fisher-Yates). */
static inline void rand_perm(int64_t* p, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) p[i] = i;
  for (i = n - 1; i > 0; --i) {
    const int64_t j = rand_int(0, i), t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

/* ---------------------------------------------------- float encodings */

static inline double pow2(int e) {
  double v = 1.0;
  for (; e > 0; --e) v *= 2.0;
  for (; e < 0; ++e) v *= 0.5;
  return v;
}

static inline double f16_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double v = exp == 0 ? mant * pow2(-24) : (1024 + mant) * pow2(exp - 25);
  return (h & 0x8000) ? -v : v;
}

static inline double bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Random normal fp16 / bf16 bits with |v| in [2^lo, 2^(hi+1)). */
static inline uint16_t rand_f16(int lo, int hi, int allow_negative) {
  const uint16_t sign = allow_negative && (next_u64() & 1) ? 0x8000 : 0;
  return (uint16_t)(sign | (uint16_t)(rand_int(lo + 15, hi + 15) << 10) | (uint16_t)rand_int(0, 0x3ff));
}

static inline uint16_t rand_bf16(int lo, int hi, int allow_negative) {
  const uint16_t sign = allow_negative && (next_u64() & 1) ? 0x8000 : 0;
  return (uint16_t)(sign | (uint16_t)(rand_int(lo + 127, hi + 127) << 7) | (uint16_t)rand_int(0, 0x7f));
}

/* A float element of any of the three float dtypes as a double; `set`
 * writes a random value of that dtype and returns it. */
typedef enum elem_type { ELEM_F32, ELEM_F16, ELEM_BF16 } elem_type;

static inline DLDataType elem_dl(elem_type t) {
  return t == ELEM_F32 ? dl_type(kDLFloat, 32) : t == ELEM_F16 ? dl_type(kDLFloat, 16) : dl_type(kDLBfloat, 16);
}

static inline size_t elem_size(elem_type t) { return t == ELEM_F32 ? 4 : 2; }

static inline double elem_get(const void* buf, elem_type t, int64_t i) {
  if (t == ELEM_F32) return ((const float*)buf)[i];
  return t == ELEM_F16 ? f16_value(((const uint16_t*)buf)[i]) : bf16_value(((const uint16_t*)buf)[i]);
}

static inline double elem_rand(void* buf, elem_type t, int64_t i, int lo, int hi, int allow_negative) {
  if (t == ELEM_F32) {
    /* An fp16 value is exact in fp32 too. */
    ((float*)buf)[i] = (float)f16_value(rand_f16(lo, hi, allow_negative));
  } else if (t == ELEM_F16) {
    ((uint16_t*)buf)[i] = rand_f16(lo, hi, allow_negative);
  } else {
    ((uint16_t*)buf)[i] = rand_bf16(lo, hi, allow_negative);
  }
  return elem_get(buf, t, i);
}

/* Unit roundoff of an output dtype. */
static inline double elem_unit(elem_type t) { return t == ELEM_F32 ? pow2(-24) : t == ELEM_F16 ? pow2(-11) : pow2(-8); }

static inline int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

#endif /* LOWBIT_TESTS_C_HARNESS_H_ */
