// The CPU int8 GEMMs: "cpu-reference" (int64 sums of the products, row by
// row) and "cpu" (AVX-512 VNNI where the CPU has it: up to 16 rows of a,
// 4 x 4 tiles of row-pair dot products along K; more, b packed once into
// panels for 6 x 32 register tiles; else a loop the compiler vectorizes per
// instruction set; OpenMP over blocks of M and N). int8_mm_dequant's
// formula is one function both use, and int8_scaled_mm runs it on the exact
// int32 block, so the three agree bit for bit.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/hd.h"
#include "core/quant_math.h"
#include "cpu/gemm/impls.h"
#include "cpu/quant/impls.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/quant/spans.h"
#include "cpu/isa.h"
#include "cpu/simd_clones.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOWBIT_INT8_VNNI 1
#else
#define LOWBIT_INT8_VNNI 0
#endif

namespace lowbit::core::cpu {
namespace {

constexpr int kTile = 4;         // rows of a and of b a tile takes
constexpr int64_t kBlockM = 64;  // rows of a a task takes
constexpr int64_t kBlockN = 64;  // rows of b a task takes (kept in L2 across its rows of a); panels divide it

// The operands of one call: a [rows, K], b [N, K], int8, row-major.
struct Operands {
  const int8_t* a;
  const int8_t* b;
  int64_t rows, N, K;
};

// c[i * ldc + j] = sum_k a_i[k] * b_j[k] for ma rows of a and nb of b
// (each at most kTile): a loop the compiler vectorizes (widening multiply-adds).
LOWBIT_SIMD_CLONES void tile_generic(const int8_t* const* a, int ma, const int8_t* const* b, int nb, int64_t K,
                                     int32_t* c, int64_t ldc) {
  for (int i = 0; i < ma; ++i) {
    for (int j = 0; j < nb; ++j) {
      int32_t s = 0;
      const int8_t* x = a[i];
      const int8_t* y = b[j];
      for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(x[k]) * static_cast<int32_t>(y[k]);
      c[i * ldc + j] = s;
    }
  }
}

#if LOWBIT_INT8_VNNI
// vpdpbusd multiplies u8 by s8 (4 products a 32-bit lane): b + 128 (its
// byte's top bit flipped) is the u8 operand, a the s8 one, and each sum is
// sum a (b + 128) - 128 sum a, with a's row sums taken once a call. The
// lanes wrap (vpdpbusd does not saturate) and so do the corrections, in
// uint32: the true result fits int32, so it comes out exact.
#define LOWBIT_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

bool has_vnni() {
  static const bool yes = supports(Feature::avx512f) && supports(Feature::avx512bw) &&
                          supports(Feature::avx512vnni);
  return yes;
}

// The sum of v's 16 lanes, wrapping (GCC 12's _mm512_reduce_add_epi32 trips -Wmaybe-uninitialized).
LOWBIT_VNNI uint32_t lane_sum(__m512i v) {
  alignas(64) uint32_t t[16];
  _mm512_store_si512(t, v);
  uint32_t s = 0;
  for (uint32_t x : t) s += x;
  return s;
}

// Few rows of a (decode): MA rows against 4 rows of b at a time, each
// output a dot product along K in 64-byte chunks (masked past K), b read
// once for all MA rows.
template <int MA>
LOWBIT_VNNI void rows_vnni(const int8_t* const* a, const uint32_t* corr, const int8_t* const* b, int nb, int64_t K,
                           int32_t* c, int64_t ldc) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* bp[kTile];
  for (int j = 0; j < kTile; ++j) bp[j] = b[std::min(j, nb - 1)];
  __m512i acc[MA][kTile];
  for (int i = 0; i < MA; ++i) {
    for (int j = 0; j < kTile; ++j) acc[i][j] = _mm512_setzero_si512();
  }
  for (int64_t k = 0; k < K; k += 64) {
    const __mmask64 m = K - k >= 64 ? ~__mmask64{0} : (__mmask64{1} << (K - k)) - 1;  // zeros past K
    __m512i bv[kTile];
    for (int j = 0; j < kTile; ++j) bv[j] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, bp[j] + k), flip);
    for (int i = 0; i < MA; ++i) {
      const __m512i av = _mm512_maskz_loadu_epi8(m, a[i] + k);
      for (int j = 0; j < kTile; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], bv[j], av);
    }
  }
  for (int i = 0; i < MA; ++i) {
    for (int j = 0; j < nb; ++j) c[i * ldc + j] = static_cast<int32_t>(lane_sum(acc[i][j]) - corr[i]);
  }
}

// Many rows: b packed once a call as u8 (b + 128) in panels of 32 columns,
// each K group of 4 bytes of its 32 columns 128 bytes in a row; a padded
// to K4 (a multiple of 4) with zeros where K is not. A 6 x 32 tile holds 12
// accumulators of 16 outputs each: per K group two loads of b, six 4-byte
// broadcasts of a, twelve vpdpbusd; no horizontal sums.
constexpr int kPanel = 32, kRowsTile = 6;

// out[g] = word g of each of 16 rows: a 16 x 16 transposition of 32-bit words.
// GCC 12's unpack and shuffle intrinsics pass an undefined vector as the
// unused merge source, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
LOWBIT_VNNI void transpose16(const __m512i (&r)[16], __m512i (&out)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: pairs of rows interleaved by word
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // lane L of u[4i + j]: word 4L + j of rows 4i .. 4i + 3
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // word 4L + j: lane L of u[j], u[4 + j], u[8 + j], u[12 + j]
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    out[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    out[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    out[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    out[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}
#pragma GCC diagnostic pop

LOWBIT_VNNI void pack_b(const int8_t* b, int64_t N, int64_t K, int64_t K4, int64_t panel, uint8_t* out) {
  const int64_t full = K / 4, n0 = panel * kPanel;
  const int rows = static_cast<int>(std::min<int64_t>(kPanel, N - n0));
  int64_t g0 = 0;
  if (rows == kPanel) {
    // 16 groups of all 32 rows at a time: 64 bytes of each row, transposed by words in registers.
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (; g0 + 16 <= full; g0 += 16) {
      for (int h = 0; h < 2; ++h) {
        __m512i r[16], w[16];
        for (int j = 0; j < 16; ++j) {
          r[j] = _mm512_xor_si512(_mm512_loadu_si512(b + (n0 + 16 * h + j) * K + 4 * g0), flip);
        }
        transpose16(r, w);
        for (int g = 0; g < 16; ++g) _mm512_store_si512(out + (g0 + g) * 4 * kPanel + 64 * h, w[g]);
      }
    }
  }
  // The rest word by word, in row order; rows past N and bytes past K: 0x80 (b = 0).
  for (int j = 0; j < kPanel; ++j) {
    uint8_t* col = out + 4 * j;
    for (int64_t g = g0; g < K4 / 4; ++g) {
      uint32_t w = 0;
      if (j < rows && g < full) {
        std::memcpy(&w, b + (n0 + j) * K + 4 * g, 4);
      } else if (j < rows) {
        for (int t = 0; t < 4; ++t) {
          const int64_t k = 4 * g + t;
          if (k < K) w |= static_cast<uint32_t>(static_cast<uint8_t>(b[(n0 + j) * K + k])) << (8 * t);
        }
      }
      w ^= 0x80808080u;
      std::memcpy(col + g * 4 * kPanel, &w, 4);
    }
  }
}

LOWBIT_VNNI void tile_packed(const int8_t* const* a, const uint32_t* corr, int ma, const uint8_t* panel, int64_t K4,
                             int ncols, int32_t* c, int64_t ldc) {
  const int8_t* ap[kRowsTile];
  for (int i = 0; i < kRowsTile; ++i) ap[i] = a[std::min(i, ma - 1)];
  __m512i acc[kRowsTile][2];
  for (int i = 0; i < kRowsTile; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < K4 / 4; ++g) {
    const __m512i b0 = _mm512_load_si512(panel + g * 128), b1 = _mm512_load_si512(panel + g * 128 + 64);
    for (int i = 0; i < kRowsTile; ++i) {
      int32_t word;
      std::memcpy(&word, ap[i] + 4 * g, 4);
      const __m512i av = _mm512_set1_epi32(word);
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], b0, av);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], b1, av);
    }
  }
  const __mmask16 m0 = ncols >= 16 ? 0xffff : static_cast<__mmask16>((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= 32 ? 0xffff : ncols <= 16 ? 0 : static_cast<__mmask16>((1u << (ncols - 16)) - 1);
  for (int i = 0; i < ma; ++i) {
    const __m512i k = _mm512_set1_epi32(static_cast<int32_t>(corr[i]));
    _mm512_mask_storeu_epi32(c + i * ldc, m0, _mm512_sub_epi32(acc[i][0], k));
    _mm512_mask_storeu_epi32(c + i * ldc + 16, m1, _mm512_sub_epi32(acc[i][1], k));
  }
}
#endif

// One call's products by the fastest kernels the CPU has: a's row
// corrections (and, for many rows, b packed and a padded) prepared once,
// then products(m0, mrows, n0, nrows, c, ldc) for any block, from any thread.
class Products {
 public:
  explicit Products(const Operands& o) : o_(o) {
#if LOWBIT_INT8_VNNI
    vnni_ = has_vnni();
    if (!vnni_) return;
    corr_.resize(static_cast<size_t>(o.rows));
    parallel_for(o.rows, o.rows * o.K, [&](int64_t m) {
      int32_t s = 0;
      for (int64_t k = 0; k < o.K; ++k) s += o.a[m * o.K + k];
      corr_[static_cast<size_t>(m)] = static_cast<uint32_t>(s) << 7;
    });
    packed_ = o.rows > kSmallRows;
    if (!packed_) return;
    K4_ = (o.K + 3) / 4 * 4;
    const int64_t panels = ceil_div(o.N, kPanel);
    // Kept by the calling thread across calls: a fresh buffer would be faulted in and zeroed each time.
    thread_local std::vector<uint8_t, Aligned64> b_buf, a_buf;
    b_buf.resize(static_cast<size_t>(panels * kPanel * K4_));
    uint8_t* const packed = b_buf.data();  // the caller's buffer: other threads' thread_locals are theirs
    parallel_for(panels, o.N * o.K, [&](int64_t p) { pack_b(o.b, o.N, o.K, K4_, p, packed + p * kPanel * K4_); });
    b_ = packed;
    a_ = o.a;
    lda_ = o.K;
    if (K4_ != o.K) {
      a_buf.assign(static_cast<size_t>(o.rows * K4_), 0);
      for (int64_t m = 0; m < o.rows; ++m) std::memcpy(a_buf.data() + m * K4_, o.a + m * o.K, static_cast<size_t>(o.K));
      a_ = reinterpret_cast<const int8_t*>(a_buf.data());
      lda_ = K4_;
    }
#endif
  }

  // Rows of a a block should take (the packed kernel's tiles are 6 rows).
  int64_t block_m() const { return packed_ ? 8 * 6 : kBlockM; }

  void operator()(int64_t m0, int mrows, int64_t n0, int nrows, int32_t* c, int64_t ldc) const {
#if LOWBIT_INT8_VNNI
    if (vnni_ && packed_) {
      for (int j0 = 0; j0 < nrows; j0 += kPanel) {  // n0 is a multiple of the panel
        const uint8_t* panel = b_ + ((n0 + j0) / kPanel) * kPanel * K4_;
        for (int i0 = 0; i0 < mrows; i0 += kRowsTile) {
          const int ma = std::min(kRowsTile, mrows - i0);
          const int8_t* a[kRowsTile];
          for (int i = 0; i < ma; ++i) a[i] = a_ + (m0 + i0 + i) * lda_;
          tile_packed(a, corr_.data() + m0 + i0, ma, panel, K4_, std::min(kPanel, nrows - j0), c + i0 * ldc + j0, ldc);
        }
      }
      return;
    }
    if (vnni_) {
      four_by_four(m0, mrows, n0, nrows, [&](const int8_t* const* a, int ma, const int8_t* const* b, int nb, int i0,
                                             int j0) {
        const uint32_t* corr = corr_.data() + m0 + i0;
        int32_t* ct = c + i0 * ldc + j0;
        switch (ma) {
          case 1: rows_vnni<1>(a, corr, b, nb, o_.K, ct, ldc); break;
          case 2: rows_vnni<2>(a, corr, b, nb, o_.K, ct, ldc); break;
          case 3: rows_vnni<3>(a, corr, b, nb, o_.K, ct, ldc); break;
          default: rows_vnni<4>(a, corr, b, nb, o_.K, ct, ldc); break;
        }
      });
      return;
    }
#endif
    four_by_four(m0, mrows, n0, nrows, [&](const int8_t* const* a, int ma, const int8_t* const* b, int nb, int i0,
                                           int j0) { tile_generic(a, ma, b, nb, o_.K, c + i0 * ldc + j0, ldc); });
  }

 private:
  // fn(a rows, ma, b rows, nb, i0, j0) over the block's tiles of up to kTile rows of a and of b.
  template <class Fn>
  void four_by_four(int64_t m0, int mrows, int64_t n0, int nrows, Fn&& fn) const {
    for (int j0 = 0; j0 < nrows; j0 += kTile) {
      const int nb = std::min(kTile, nrows - j0);
      const int8_t* b[kTile];
      for (int j = 0; j < nb; ++j) b[j] = o_.b + (n0 + j0 + j) * o_.K;
      for (int i0 = 0; i0 < mrows; i0 += kTile) {
        const int ma = std::min(kTile, mrows - i0);
        const int8_t* a[kTile];
        for (int i = 0; i < ma; ++i) a[i] = o_.a + (m0 + i0 + i) * o_.K;
        fn(a, ma, b, nb, i0, j0);
      }
    }
  }

  // 64-byte aligned storage: the packed panels are read by aligned loads.
  template <class T>
  struct Aligned64Alloc {
    using value_type = T;
    Aligned64Alloc() = default;
    template <class U>
    explicit Aligned64Alloc(const Aligned64Alloc<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
    bool operator==(const Aligned64Alloc&) const { return true; }
  };
  using Aligned64 = Aligned64Alloc<uint8_t>;

  static constexpr int64_t kSmallRows = 16;  // up to this many rows of a: the unpacked dot products
  Operands o_;
  bool vnni_ = false, packed_ = false;
  std::vector<uint32_t> corr_;
  int64_t K4_ = 0, lda_ = 0;
  const uint8_t* b_ = nullptr;
  const int8_t* a_ = nullptr;
};

// Runs body(m0, mrows, n0, nrows) over blocks of the output, in parallel.
template <class Body>
void for_blocks(const Operands& o, int64_t block_m, Body&& body) {
  const int64_t bm = ceil_div(o.rows, block_m), bn = ceil_div(o.N, kBlockN);
  parallel_for(bm * bn, o.rows * o.N * o.K, [&](int64_t task) {
    const int64_t m0 = (task % bm) * block_m, n0 = (task / bm) * kBlockN;
    body(m0, static_cast<int>(std::min(block_m, o.rows - m0)), n0, static_cast<int>(std::min(kBlockN, o.N - n0)));
  });
}

// int8_mm_dequant's formula for `len` columns from n0 of one row: out[j] =
// float(c[j]) * (row * col[n0 + j]) * (1 / 127^2) + bias[n0 + j].
template <class Bias>
void dequant_row(const int32_t* c, float row, const float* col, const Bias* bias, int64_t n0, int64_t len,
                 float* out) {
  for (int64_t j = 0; j < len; ++j) {
    float v = int8_mm_dequant_value(c[j], row, col[n0 + j]);
    if (bias != nullptr) v = add_rn(v, to_f32(bias[n0 + j]));
    out[j] = v;
  }
}

// The dequantization of an int32 block into out's dtype (rows ldc apart in c).
struct Dequant {
  const float* row_stats;
  const float* col_stats;
  TensorRef bias;
  void* out;
  DType out_dtype;
  int64_t N;

  void block(const int32_t* c, int64_t ldc, int64_t m0, int mrows, int64_t n0, int len, const char* op) const {
    std::vector<float> v(static_cast<size_t>(len));
    for (int i = 0; i < mrows; ++i) {
      const int64_t m = m0 + i;
      const int32_t* ci = c + i * ldc;
      if (!bias.present()) {
        dequant_row<float>(ci, row_stats[m], col_stats, nullptr, n0, len, v.data());
      } else {
        with_float_type(bias.dtype, op, [&](auto t) {
          using T = decltype(t);
          dequant_row(ci, row_stats[m], col_stats, bias.ptr<const T>(), n0, len, v.data());
        });
      }
      with_float_type(out_dtype, op, [&](auto t) {
        using T = decltype(t);
        from_f32_span(v.data(), len, static_cast<T*>(out) + m * N + n0);
      });
    }
  }
};

// Row m of a times b's rows, summed in int64 (the reference).
void reference_row(const Operands& o, int64_t m, int32_t* out) {
  for (int64_t n = 0; n < o.N; ++n) {
    int64_t s = 0;
    for (int64_t k = 0; k < o.K; ++k) s += int64_t{o.a[m * o.K + k]} * int64_t{o.b[n * o.K + k]};
    out[n] = static_cast<int32_t>(s);
  }
}

Operands operands(const TensorRef& a, const TensorRef& b) {
  const int64_t K = a.size(-1);
  return Operands{a.ptr<const int8_t>(), b.ptr<const int8_t>(), a.numel() / K, b.shape[0], K};
}

}  // namespace

void int8_linear_matmul_reference(const Int8LinearMatmulArgs& a, void*, Stream) {
  require_cpu_config(Int8LinearMatmulArgs::kName, a.config);
  const Operands o = operands(a.a, a.b);
  int32_t* out = a.out.ptr<int32_t>();
  parallel_for(o.rows, o.rows * o.N * o.K, [&](int64_t m) { reference_row(o, m, out + m * o.N); });
}

void int8_linear_matmul_fast(const Int8LinearMatmulArgs& a, void*, Stream) {
  require_cpu_config(Int8LinearMatmulArgs::kName, a.config);
  const Operands o = operands(a.a, a.b);
  if (o.rows == 0 || o.N == 0) return;
  int32_t* out = a.out.ptr<int32_t>();
  const Products products(o);
  for_blocks(o, products.block_m(), [&](int64_t m0, int mrows, int64_t n0, int nrows) {
    products(m0, mrows, n0, nrows, out + m0 * o.N + n0, o.N);
  });
}

void int8_mm_dequant_cpu(const Int8MmDequantArgs& a, void*, Stream) {
  const int64_t N = a.a.size(-1), rows = a.a.numel() / N;
  const Dequant d{a.row_stats.ptr<const float>(), a.col_stats.ptr<const float>(), a.bias, a.out.data, a.out.dtype, N};
  const int32_t* c = a.a.ptr<const int32_t>();
  parallel_for(rows, rows * N, [&](int64_t m) {
    d.block(c + m * N, N, m, 1, 0, static_cast<int>(N), Int8MmDequantArgs::kName);
  });
}

void int8_scaled_mm_reference(const Int8ScaledMmArgs& a, void*, Stream) {
  require_cpu_config(Int8ScaledMmArgs::kName, a.config);
  const Operands o = operands(a.a, a.b);
  const Dequant d{a.row_stats.ptr<const float>(), a.col_stats.ptr<const float>(), a.bias, a.out.data, a.out.dtype, o.N};
  parallel_for(o.rows, o.rows * o.N * o.K, [&](int64_t m) {
    std::vector<int32_t> row(static_cast<size_t>(o.N));
    reference_row(o, m, row.data());
    d.block(row.data(), o.N, m, 1, 0, static_cast<int>(o.N), Int8ScaledMmArgs::kName);
  });
}

void int8_scaled_mm_fast(const Int8ScaledMmArgs& a, void*, Stream) {
  require_cpu_config(Int8ScaledMmArgs::kName, a.config);
  const Operands o = operands(a.a, a.b);
  if (o.rows == 0 || o.N == 0) return;
  const Dequant d{a.row_stats.ptr<const float>(), a.col_stats.ptr<const float>(), a.bias, a.out.data, a.out.dtype, o.N};
  const Products products(o);
  for_blocks(o, products.block_m(), [&](int64_t m0, int mrows, int64_t n0, int nrows) {
    thread_local std::vector<int32_t> c(static_cast<size_t>(kBlockM * kBlockN));
    products(m0, mrows, n0, nrows, c.data(), kBlockN);
    d.block(c.data(), kBlockN, m0, mrows, n0, nrows, Int8ScaledMmArgs::kName);
  });
}

void int8_linear_outliers_cpu(const Int8LinearOutliersArgs& a, void*, Stream) {
  const char* op = Int8LinearOutliersArgs::kName;
  const int64_t K = a.a.size(-1), rows = a.a.numel() / K, N = a.b.shape[0];
  const uint8_t* mask = a.outlier_mask.ptr<const uint8_t>();
  std::vector<int64_t> cols;
  for (int64_t k = 0; k < K; ++k) {
    if (mask[k] != 0) cols.push_back(k);
  }
  const int64_t C = static_cast<int64_t>(cols.size());
  if (C == 0 || rows == 0 || N == 0) return;
  // The marked columns of b dequantized, column-major ([C][N]): the inner loop runs over n, contiguous.
  std::vector<float> w(static_cast<size_t>(C * N));
  const int8_t* b = a.b.ptr<const int8_t>();
  const float* bs = a.b_stats.ptr<const float>();
  for (int64_t j = 0; j < C; ++j) {
    for (int64_t n = 0; n < N; ++n) w[static_cast<size_t>(j * N + n)] = int8_decode(b[n * K + cols[j]], bs[n]);
  }
  with_float_type(a.a.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* x = a.a.ptr<const T>();
    T* out = a.out.ptr<T>();
    parallel_for(rows, rows * N * C, [&](int64_t m) {
      std::vector<float> acc(static_cast<size_t>(N), 0.0f);
      for (int64_t j = 0; j < C; ++j) {
        const float av = to_f32(x[m * K + cols[j]]);
        const float* wj = w.data() + j * N;
        for (int64_t n = 0; n < N; ++n) acc[n] = int8_fp32_step(acc[n], av, wj[n]);
      }
      T* o = out + m * N;
      for (int64_t n = 0; n < N; ++n) o[n] = from_f32<T>(add_rn(to_f32(o[n]), acc[n]));
    });
  });
}

void int8_linear_grad_input_cpu(const Int8LinearGradInputArgs& a, void*, Stream) {
  const char* op = Int8LinearGradInputArgs::kName;
  // Rows from grad_a: N may be 0 (grad_a is then zeros).
  const int64_t N = a.b.shape[0], K = a.b.shape[1], rows = K == 0 ? 0 : a.grad_a.numel() / K;
  if (rows == 0) return;
  const int8_t* b = a.b.ptr<const int8_t>();
  const float* bs = a.b_stats.ptr<const float>();
  constexpr int64_t kRows = 4;  // rows of grad_out a decoded row of b serves
  with_float_type(a.grad_out.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* g = a.grad_out.ptr<const T>();
    T* out = a.grad_a.ptr<T>();
    parallel_for(ceil_div(rows, kRows), rows * N * K, [&](int64_t blk) {
      const int64_t m0 = blk * kRows, mr = std::min(kRows, rows - m0);
      std::vector<float> acc(static_cast<size_t>(kRows * K), 0.0f), w(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) w[k] = int8_decode(b[n * K + k], bs[n]);
        for (int64_t i = 0; i < mr; ++i) {
          const float gv = to_f32(g[(m0 + i) * N + n]);
          float* ai = acc.data() + i * K;
          for (int64_t k = 0; k < K; ++k) ai[k] = int8_fp32_step(ai[k], gv, w[k]);
        }
      }
      for (int64_t i = 0; i < mr; ++i) {
        for (int64_t k = 0; k < K; ++k) out[(m0 + i) * K + k] = from_f32<T>(acc[static_cast<size_t>(i * K + k)]);
      }
    });
  });
}

// The three steps of int8_linear (lowbit/ops/int8_gemm.h), temporaries on the heap.
void int8_linear_cpu(const Int8LinearArgs& a, void*, Stream stream) {
  require_cpu_config(Int8LinearArgs::kName, a.config);
  const int64_t K = a.a.size(-1), rows = a.a.numel() / K;
  std::vector<int8_t> q(static_cast<size_t>(rows * K));
  std::vector<float> row_stats(static_cast<size_t>(rows));
  std::vector<uint8_t> mask(static_cast<size_t>(a.threshold > 0.0f ? K : 0));
  const TensorRef q_ref = TensorRef::contiguous(q.data(), DType::i8, a.a.sizes());
  const TensorRef stats_ref = TensorRef::contiguous(row_stats.data(), DType::f32, {rows});
  const TensorRef mask_ref = mask.empty() ? TensorRef{} : TensorRef::contiguous(mask.data(), DType::u8, {K});
  int8_vectorwise_quant_fast(Int8VectorwiseQuantArgs{a.a, q_ref, stats_ref, mask_ref, a.threshold}, nullptr, stream);
  int8_scaled_mm_fast(Int8ScaledMmArgs{q_ref, a.b, stats_ref, a.b_stats, a.bias, a.out, {}}, nullptr, stream);
  if (!mask.empty()) {
    int8_linear_outliers_cpu(Int8LinearOutliersArgs{a.a, mask_ref, a.b, a.b_stats, a.out}, nullptr, stream);
  }
}

}  // namespace lowbit::core::cpu
