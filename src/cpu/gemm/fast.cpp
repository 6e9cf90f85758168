// The CPU fast path of matmul and matmul_4bit: A converted once to fp32,
// then the tile engine (tiles.h) with a decoder for each weight storage.
// Dequantization here must give the reference's bits: no FMA contraction.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/quant_math.h"
#include "core/weight_format.h"
#include "cpu/gemm/impls.h"
#include "cpu/gemm/kernels.h"
#include "cpu/gemm/onednn.h"
#include "cpu/gemm/tiles.h"
#include "cpu/isa.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/quant/spans.h"

namespace lowbit::core::cpu {
namespace gemm {

namespace {

// Measured here (AVX-512), decoding a weight costs about as much as
// multiplying it with 6-8 rows of A: up to 8 rows the tile is shared by them
// all with long K chunks; above, the M block grows so decoding stays a small
// fraction of the work.
int heuristic_index(int64_t m) {
  if (m <= 8) return 0;
  if (m <= 64) return 1;
  return 2;
}

}  // namespace

KernelConfig kernel_config_of(const TileConfig& c) { return {"cpu", c.mb, c.nt, c.kc, 0}; }

std::vector<KernelConfig> tile_configs(int64_t rows, int64_t prepared_m) {
  const int first = heuristic_index(prepared_m > 0 ? prepared_m : rows);
  std::vector<KernelConfig> out{kernel_config_of(kTileConfigs[first])};
  for (int i = 0; i < kNumTileConfigs; ++i) {
    if (i != first) out.push_back(kernel_config_of(kTileConfigs[i]));
  }
  return out;
}

const TileConfig& pick_tile_config(const char* op, const KernelConfig& config, int64_t rows, int64_t prepared_m) {
  if (config.empty()) return kTileConfigs[heuristic_index(prepared_m > 0 ? prepared_m : rows)];
  std::string known;
  for (const TileConfig& c : kTileConfigs) {
    if (kernel_config_of(c) == config) return c;
    known += (known.empty() ? "" : ", ") + kernel_config_of(c).name();
  }
  core::fail(ErrorCode::invalid_argument, core::cat(op, ": config '", config.name(),
                                                    "' is not a cpu kernel config (the cpu backend runs ", known, ")"));
}

void prepare_a(const TensorRef& A, const int32_t* perm, int64_t M, int64_t K, int64_t lda, float* a32) {
  with_float_type(A.dtype, "matmul", [&](auto t) {
    using T = decltype(t);
    const T* a = A.ptr<const T>();
    parallel_for(M, M * K, [&](int64_t m) {
      float* dst = a32 + m * lda;
      if (perm) {
        for (int64_t k = 0; k < K; ++k) dst[k] = to_f32(a[m * K + perm[k]]);
      } else {
        to_f32_span(a + m * K, K, dst);
      }
      std::memset(dst + K, 0, static_cast<size_t>(lda - K) * sizeof(float));
    });
  });
}

}  // namespace gemm

namespace {

using gemm::kVec;

int64_t rows_of(const TensorRef& A) { return A.numel() / A.size(-1); }

// Workspace: A in fp32 [M, lda], then N floats (bias), 64-byte aligned.
struct Scratch {
  float* a32;
  float* bias;
  static size_t bytes(int64_t M, int64_t K, int64_t N) {
    return static_cast<size_t>(M * gemm::round_up(K, kVec) + gemm::round_up(N, kVec)) * sizeof(float) + 64;
  }
  Scratch(void* ws, int64_t M, int64_t K) {
    auto p = (reinterpret_cast<uintptr_t>(ws) + 63) / 64 * 64;
    a32 = reinterpret_cast<float*>(p);
    bias = a32 + M * gemm::round_up(K, kVec);
  }
};

// Writes fp32 accumulators (+ bias) as the output dtype.
template <class Fn>
void with_store(const TensorRef& out, int64_t N, const float* bias, const char* op, Fn&& fn) {
  with_float_type(out.dtype, op, [&](auto t) {
    using T = decltype(t);
    T* o = out.ptr<T>();
    fn([o, N, bias](int64_t m, int64_t n0, int nr, const float* acc) {
      for (int j = 0; j < nr; ++j) o[m * N + n0 + j] = from_f32<T>(bias ? acc[j] + bias[n0 + j] : acc[j]);
    });
  });
}

// Dequantizes tiles of a rows-layout weight, one group's run of a row at a
// time. Codes of <= 4 bits go through a 16-entry table of that group's
// finished weights (the scale and zero folded in: 2^bits dequant steps per
// run instead of one per element); 8- and 16-bit codes are converted, then
// the group's scale and zero are applied over the run.
struct RowsDecoder {
  float vtab[256];  // value of every code (bits <= 8); 0 past 2^bits
  const WeightFormat& f;
  int bits;
  WeightKind kind;
  const uint8_t* q;
  int64_t row_bytes;
  const float* scale;
  const float* zeros_f32;  // original / rescale
  const uint8_t* zeros_q;  // quantized: per group a stream of N codes
  int64_t zeros_bytes;
  DequantRule rule;

  explicit RowsDecoder(const PackedWeightRef& w)
      : f(w.format),
        bits(weight_bits(w.format.type)),
        kind(weight_type_info(w.format.type).kind),
        q(w.qweight.ptr<const uint8_t>()),
        row_bytes(w.qweight.size(1)),
        scale(w.format.with_scaling ? w.scale.ptr<const float>() : nullptr),
        zeros_f32(w.format.with_zeros && w.format.zeros_mode != ZerosMode::quantized ? w.zeros.ptr<const float>()
                                                                                     : nullptr),
        zeros_q(w.format.with_zeros && w.format.zeros_mode == ZerosMode::quantized ? w.zeros.ptr<const uint8_t>()
                                                                                   : nullptr),
        zeros_bytes(packed_zeros_words(w.format.N, weight_bits(w.format.type)) * 4),
        rule(dequant_rule(w.format)) {
    const float* table = weight_table16(f.type);
    std::memset(vtab, 0, sizeof(vtab));
    for (uint32_t c = 0; bits <= 8 && c < (1u << bits); ++c) vtab[c] = weight_code_value(f.type, c, table);
  }

  // Group g's quantized zero point of row n as its code (zeros_q only).
  uint8_t zero_code(int64_t n, int64_t g) const {
    return static_cast<uint8_t>(stream_read(zeros_q + g * zeros_bytes, n, bits));
  }
  float zero(int64_t n, int64_t g) const {
    if (zeros_q) return vtab[zero_code(n, g)];
    return zeros_f32 ? zeros_f32[n * f.groups() + g] : 0.0f;
  }

  // Columns [k, end) of row n, one group, into t.
  void run(const uint8_t* row, int64_t n, int64_t g, int64_t k, int64_t end, float* t) const {
    const float s = scale ? scale[n * f.groups() + g] : 1.0f;
    const float z = zero(n, g);
    if (bits <= 4) {
      // apply_rule computes exactly dequant(rule, v, s, z), here over the 16 values at once.
      alignas(64) float folded[16];
      std::memcpy(folded, vtab, sizeof(folded));
      gemm::apply_rule(rule, folded, 16, s, z);
      gemm::decode_small(row, bits, k, end - k, folded, t);
      return;
    }
    if (bits == 8) {
      gemm::decode_bytes(row, kind, k, end - k, vtab, t);
    } else {
      gemm::decode_halves(row, kind == WeightKind::bf16, k, end - k, t);
    }
    gemm::apply_rule(rule, t, end - k, s, z);
  }

  // Rows n0 .. n0 + nr - 1 of 4-bit codes, whole, as bf16 (each group's finished table rounded once, then
  // looked up): the large-M path's panels. Only when bits == 4.
  void bf16_rows(int64_t n0, int nr, uint16_t* out) const {
    const int64_t groups = f.groups();
    thread_local std::vector<float> zs;
    for (int r = 0; r < nr; ++r) {
      const int64_t n = n0 + r;
      const float* zp = nullptr;
      if (zeros_q) {
        zs.resize(static_cast<size_t>(groups));
        for (int64_t g = 0; g < groups; ++g) zs[static_cast<size_t>(g)] = zero(n, g);
        zp = zs.data();
      } else if (zeros_f32) {
        zp = zeros_f32 + n * groups;
      }
      gemm::decode4_row_bf16(q + n * row_bytes, f.K, f.group_length(), vtab, rule, scale ? scale + n * groups : nullptr,
                             zp, out + r * f.K);
    }
  }

  void operator()(int64_t n0, int nr, int64_t k0, int64_t kc, int64_t kp, float* tile) const {
    const int64_t gl = f.group_length();
    for (int r = 0; r < nr; ++r) {
      const int64_t n = n0 + r;
      float* t = tile + r * kp;
      for (int64_t k = k0; k < k0 + kc;) {
        const int64_t g = k / gl;
        const int64_t end = std::min(k0 + kc, (g + 1) * gl);
        run(q + n * row_bytes, n, g, k, end, t + (k - k0));
        k = end;
      }
      std::memset(t + kc, 0, static_cast<size_t>(kp - kc) * sizeof(float));
    }
  }
};

// Dequantizes tiles of a bitsandbytes 4-bit weight (flattened [N, K], two
// codes a byte, high nibble first, absmax per block of the flat index):
// table[code] * absmax, as dequantize_4bit computes it, a block's run of a
// row at a time (decode_bnb4: 16 codes a vector lookup).
struct Bnb4Decoder {
  const Matmul4bitArgs& a;
  int64_t K;
  const uint8_t* packed;
  const float* table;

  float absmax(int64_t b) const {
    if (!a.nested.present()) return a.absmax.ptr<const float>()[b];
    return nested_absmax_decode(a.nested.code.ptr<const float>()[a.absmax.ptr<const uint8_t>()[b]],
                                a.nested.absmax.ptr<const float>()[b / a.nested.blocksize],
                                a.nested.offset.ptr<const float>()[0]);
  }

  void operator()(int64_t n0, int nr, int64_t k0, int64_t kc, int64_t kp, float* tile) const {
    for (int r = 0; r < nr; ++r) {
      float* t = tile + r * kp;
      const int64_t e0 = (n0 + r) * K + k0, e1 = e0 + kc;
      for (int64_t e = e0; e < e1;) {
        const int64_t end = std::min(e1, (e / a.blocksize + 1) * a.blocksize);
        gemm::decode_bnb4(packed, e, end - e, table, absmax(e / a.blocksize), t + (e - e0));
        e = end;
      }
      std::memset(t + kc, 0, static_cast<size_t>(kp - kc) * sizeof(float));
    }
  }
};

// The absmax of row n's `blocks` blocks (whole blocks a row): the state's
// own row of them, or decoded from the nested state into buf.
const float* row_absmax(const Bnb4Decoder& d, int64_t n, int64_t blocks, float* buf) {
  if (!d.a.nested.present()) return d.a.absmax.ptr<const float>() + n * blocks;  // buf unused
  for (int64_t b = 0; b < blocks; ++b) buf[b] = d.absmax(n * blocks + b);
  return buf;
}

// The most rows of A any fp32 few-rows kernel takes (gemm::bnb4_gemv_max_rows: this CPU's).
constexpr int64_t kFewRowsF32 = 64;

// The few-rows fp32 path (M <= gemm::bnb4_gemv_max_rows()) of a weight of 4-bit codes in `order`: A's rows
// (in the rows of a32: lda >= K floats each) split for gemm::bnb4_gemv_row, then rows of W 16 at a time a
// task, A's rows 4 at a time a call. row(n) is row n's K / 2 code bytes, scales(n, buf) its blocks' scales
// (`blocks` of them, in buf where they need decoding).
template <class RowFn, class ScalesFn, class Store>
void gemv4_f32(int64_t M, int64_t N, int64_t K, const float* a32, int64_t lda, gemm::Nibbles order,
               const float* values16, int64_t blocksize, int64_t blocks, const RowFn& row, const ScalesFn& scales_of,
               const Store& store) {
  std::vector<float> ax(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) gemm::bnb4_split_a(a32 + m * lda, K, order, ax.data() + m * K);
  const gemm::Gemv4Table table = gemm::gemv4_table(values16, false);
  const int64_t rows_per_task = 16;
  parallel_for((N + rows_per_task - 1) / rows_per_task, M * N * K, [&](int64_t task) {
    const int64_t n0 = task * rows_per_task;
    const int nr = static_cast<int>(std::min(rows_per_task, N - n0));
    std::vector<float> buf(static_cast<size_t>(blocks));
    float out[kFewRowsF32][16], sums[kFewRowsF32];
    for (int j = 0; j < nr; ++j) {
      const int64_t n = n0 + j;
      const float* scales = scales_of(n, buf.data());
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        gemm::bnb4_gemv_row(row(n), K, blocksize, scales, table, ax.data() + m0 * K, K,
                            static_cast<int>(std::min<int64_t>(4, M - m0)), sums + m0);
      }
      for (int64_t m = 0; m < M; ++m) out[m][j] = sums[m];
    }
    for (int64_t m = 0; m < M; ++m) store(m, n0, nr, out[m]);
  });
}

// matmul_4bit's: bitsandbytes' codes (the high nibble first), each block's absmax.
template <class Store>
void bnb4_gemv(const Bnb4Decoder& d, int64_t M, int64_t N, int64_t K, float* a32, int64_t lda, const Store& store) {
  const int64_t blocks = K / d.a.blocksize;
  gemv4_f32(
      M, N, K, a32, lda, gemm::Nibbles::high_first, d.table, d.a.blocksize, blocks,
      [&](int64_t n) { return d.packed + n * K / 2; },
      [&](int64_t n, float* buf) { return row_absmax(d, n, blocks, buf); }, store);
}

// The few-rows product on A (bf16, else fp32; M <= gemm::gemv4_bf16_max_rows(bits, a_bf16)) of a weight of `bits`-bit
// codes whose rows (row(n): K · bits / 8 bytes) the kernel takes (gemm::gemv4_bf16_fits), A already permuted into ap (M
// rows of K elements): scales(n, buf) gives row n's scales of `blocksize` columns each, zeros(n, buf) its blocks'
// zero-point codes (when with_zeros: the table's indices) in buf. Rows of W 16 at a time a task, two at a time
// and A's rows 4 at a time a kernel call (a W row pair stays in L1 for the next group of 4). Splitting K into
// panels whose slice of A stays in L1 measured slower: the weight's prefetch then runs into the next panel
// instead of the next row. kFewRowsBf16 bounds every kernel's row count.
constexpr int64_t kFewRowsBf16 = 64;

template <class RowFn, class ScalesFn, class ZerosFn, class Store>
void gemv4_bf16(int64_t M, int64_t N, int64_t K, int bits, bool a_bf16, const uint8_t* ap,
                const gemm::Gemv4Table& table, int64_t blocksize, bool buffered, bool with_zeros, const RowFn& row,
                const ScalesFn& scales_of, const ZerosFn& zeros_of, const Store& store) {
  const int64_t blocks = K / blocksize, rows_per_task = 16, a_row_bytes = K * gemm::gemv4_a_bytes(bits, a_bf16);
  parallel_for((N + rows_per_task - 1) / rows_per_task, M * N * K, [&](int64_t task) {
    const int64_t n0 = task * rows_per_task;
    const int nr = static_cast<int>(std::min(rows_per_task, N - n0));
    // Decoded scales (nested absmax) and zero-point codes need room; other scales are read in place.
    std::vector<float> buf(buffered ? static_cast<size_t>(nr * blocks) : 0);
    std::vector<uint8_t> zbuf(with_zeros ? static_cast<size_t>(nr * blocks) : 0);
    const float* scales[16];
    const uint8_t* zeros[16];
    for (int j = 0; j < nr; ++j) {
      scales[j] = scales_of(n0 + j, buffered ? buf.data() + j * blocks : nullptr);
      zeros[j] = with_zeros ? zeros_of(n0 + j, zbuf.data() + j * blocks) : nullptr;
    }
    float out[kFewRowsBf16][16];  // [row of A][row of W]
    for (int j = 0; j < nr; j += 2) {
      const int count = std::min(2, nr - j), last = j + count - 1;
      const gemm::Gemv4Rows w{{row(n0 + j), row(n0 + last)}, {scales[j], scales[last]}, {zeros[j], zeros[last]}, count};
      for (int64_t m0 = 0; m0 < M; m0 += 4) {
        const int a_rows = static_cast<int>(std::min<int64_t>(4, M - m0));
        alignas(64) float acc[2][4][16];  // [row of W][row of A][lane]
        gemm::gemv4_rows_bf16(w, K, blocksize, bits, table, ap + m0 * a_row_bytes, K, a_rows, &acc[0][0][0], a_bf16);
        for (int r = 0; r < count; ++r) {
          for (int m = 0; m < a_rows; ++m) {
            const float* lanes = &acc[0][0][0] + 16 * (r * a_rows + m);
            float sum = 0.0f;
            for (int l = 0; l < 16; ++l) sum += lanes[l];
            out[m0 + m][j + r] = sum;
          }
        }
      }
    }
    for (int64_t m = 0; m < M; ++m) store(m, n0, nr, out[m]);
  });
}

// matmul_4bit's few-rows path on bf16 A: bitsandbytes' codes (the high nibble first).
template <class Store>
void bnb4_gemv_bf16(const Bnb4Decoder& d, int64_t M, int64_t N, int64_t K, uint8_t* ap, const Store& store) {
  const uint16_t* a = d.a.A.ptr<const uint16_t>();
  for (int64_t m = 0; m < M; ++m) {
    gemm::permute_a_bf16(a + m * K, nullptr, nullptr, K, 4, gemm::Nibbles::high_first,
                         ap + m * K * gemm::gemv4_a_bytes(4, true));
  }
  const int64_t blocks = K / d.a.blocksize;
  gemv4_bf16(
      M, N, K, 4, true, ap, gemm::gemv4_table(d.table, false), d.a.blocksize, d.a.nested.present(), false,
      [&](int64_t n) { return d.packed + n * K / 2; },
      [&](int64_t n, float* buf) { return row_absmax(d, n, blocks, buf); },
      [](int64_t, uint8_t*) { return static_cast<const uint8_t*>(nullptr); }, store);
}

// The large-M path: A of at least kLargeRows rows, no config forced, a build with oneDNN. W goes kPanelRows rows
// at a time (cache-sized) to bf16 for bf16 A (each weight rounded once), else to fp32 with A in fp32 (no rounding
// beyond the tile path's), and each panel times A goes to oneDNN's matmul of that type, into fp32 sums.
constexpr int64_t kLargeRows = 32;
constexpr int64_t kPanelRows = 512;

// Whether the large-M path runs in bf16 (bf16 A where oneDNN has bf16 kernels), else in fp32.
bool bf16_panels(DType a_dtype) { return a_dtype == DType::bf16 && gemm::onednn_bf16_available(); }

// fp32 panels take A from 64 rows on AVX-512 (the tiles and few-rows kernels hold up to there), from 32 without
// it (the AVX2 few-rows kernel's time grows past oneDNN's from there).
bool large_m(const KernelConfig& config, int64_t M, DType a_dtype) {
  const int64_t rows = bf16_panels(a_dtype) || !supports(Feature::avx512f) ? kLargeRows : 2 * kLargeRows;
  return config.empty() && M >= rows && gemm::onednn_available();
}

// The large-M path's workspace after Scratch's (whose a32 holds A, gathered in bf16 or prepared in fp32): a panel
// of W (room for fp32), and the fp32 sums [M, N].
struct LargeScratch {
  void* panel;
  float* sums;
  static size_t bytes(int64_t M, int64_t K, int64_t N) {
    return static_cast<size_t>(kPanelRows * K * 4 + M * N * 4) + 128;
  }
  LargeScratch(void* ws, int64_t K) {
    const auto align = [](uintptr_t p) { return (p + 63) / 64 * 64; };
    const uintptr_t p = align(reinterpret_cast<uintptr_t>(ws));
    panel = reinterpret_cast<void*>(p);
    sums = reinterpret_cast<float*>(align(p + static_cast<uintptr_t>(kPanelRows * K * 4)));
  }
};

// out = a · W^T (+ bias) through oneDNN: decode(n0, nr, 0, K, K, tile) gives rows of W in fp32 (4-bit formats
// have direct bf16 decoders). a: [M, K] rows lda apart, bf16 where `bf16`, else fp32.
template <class Decode>
void large_m_matmul(int64_t M, int64_t N, int64_t K, const void* a, int64_t lda, bool bf16, const Decode& decode,
                    void* panel_mem, float* sums, const TensorRef& out, const float* bias, const char* op) {
  constexpr int64_t kRows = 8;  // W rows a decoding task
  auto* panel = static_cast<uint16_t*>(panel_mem);
  auto* panel32 = static_cast<float*>(panel_mem);
  for (int64_t n0 = 0; n0 < N; n0 += kPanelRows) {
    const int64_t nr = std::min(kPanelRows, N - n0);
    const int64_t tasks = (nr + kRows - 1) / kRows;
    parallel_for(tasks, nr * K, [&](int64_t t) {
      const int64_t r0 = t * kRows, rows = std::min(kRows, nr - r0);
      if (!bf16) {
        decode(n0 + r0, static_cast<int>(rows), 0, K, K, panel32 + r0 * K);
        return;
      }
      if constexpr (std::is_same_v<Decode, RowsDecoder>) {
        const int64_t gl = decode.f.group_length();
        if (decode.bits == 4 && (gl % 2 == 0 || gl >= K)) {  // straight to bf16: the finished table rounded once
          decode.bf16_rows(n0 + r0, static_cast<int>(rows), panel + r0 * K);
          return;
        }
      }
      if constexpr (std::is_same_v<Decode, Bnb4Decoder>) {
        const int64_t bs = decode.a.blocksize;
        if (K % bs == 0) {  // whole blocks a row: the fused block decoder writes bf16 straight
          thread_local std::vector<float> scales;
          const int64_t b0 = (n0 + r0) * K / bs, nb = rows * K / bs;
          scales.resize(static_cast<size_t>(nb));
          for (int64_t b = 0; b < nb; ++b) scales[static_cast<size_t>(b)] = decode.absmax(b0 + b);
          if (decode4_blocks_span(decode.packed + b0 * bs / 2, rows * K, bs, scales.data(), decode.table,
                                  reinterpret_cast<BFloat16*>(panel + r0 * K))) {
            return;
          }
        }
      }
      thread_local std::vector<float> tile;
      tile.resize(static_cast<size_t>(rows * K));
      decode(n0 + r0, static_cast<int>(rows), 0, K, K, tile.data());
      from_f32_span(tile.data(), rows * K, reinterpret_cast<BFloat16*>(panel + r0 * K));
    });
    if (bf16) {
      gemm::onednn_bf16_matmul(M, nr, K, static_cast<const uint16_t*>(a), lda, panel, sums + n0, N);
    } else {
      gemm::onednn_f32_matmul(M, nr, K, static_cast<const float*>(a), lda, panel32, sums + n0, N);
    }
  }
  with_store(out, N, bias, op, [&](const auto& store) {
    parallel_for(M, M * N, [&](int64_t m) { store(m, 0, static_cast<int>(N), sums + m * N); });
  });
}

// Whether the table kernels' bf16 values hold a weight of codes of <= 4 bits exactly: every code's value and,
// with zero points, every difference of two values (small integers and fp4's values do; nf4's do not).
bool table_exact_in_bf16(const WeightFormat& f) {
  const int bits = weight_bits(f.type);
  const float* table = weight_table16(f.type);
  float v[16];
  for (uint32_t c = 0; c < (1u << bits); ++c) v[c] = weight_code_value(f.type, c, table);
  const auto exact = [](float x) { return bf16_to_f32(f32_to_bf16(x)) == x; };
  for (uint32_t i = 0; i < (1u << bits); ++i) {
    if (!exact(v[i])) return false;
    for (uint32_t z = 0; f.with_zeros && z < (1u << bits); ++z) {
      if (!exact(v[i] - v[z])) return false;
    }
  }
  return true;
}

// Whether the few-rows kernels take a call (the run and its workspace ask the same): A of up to
// gemv4_bf16_max_rows rows, codes of 1, 2 or 4 bits or int8 / uint8 / fp8, K, groups and zeros (quantized ones
// only) the kernel takes (gemm::gemv4_bf16_fits), no config forced. bf16 A as it is; fp16 A (as fp32) where the
// weights stay exact (8-bit codes, or a table exact in bf16), so the products are the tiles' fp32 ones.
bool few_rows(const MatmulArgs& a, int64_t M) {
  const WeightFormat& f = a.weight.format;
  const int64_t gl = f.group_length(), blocksize = f.with_scaling ? gl : f.K;
  const int bits = weight_bits(f.type);
  const bool zeros_fit = !f.with_zeros || f.zeros_mode == ZerosMode::quantized;
  const WeightKind kind = weight_type_info(f.type).kind;
  const bool codes_fit = bits != 8 || kind == WeightKind::sint || kind == WeightKind::uint || kind == WeightKind::fp8;
  const bool a_bf16 = a.A.dtype == DType::bf16;
  const bool a_fits = a_bf16 || (a.A.dtype == DType::f16 && (bits == 8 || (bits <= 4 && table_exact_in_bf16(f))));
  return a.config.empty() && a_fits && M <= gemm::gemv4_bf16_max_rows(bits, a_bf16) && zeros_fit && codes_fit &&
         gemm::gemv4_bf16_fits(f.K, blocksize, bits, f.with_zeros, a_bf16);
}
// Whether fp16 A (as fp32) with 4-bit codes the bf16 table would round (nf4, fp4; no zero points) takes the fp32
// table kernel of matmul_4bit's fp32 path instead (the run and its workspace ask the same): its weights are the
// table's fp32 values times each group's scale, the products the tiles' fp32 ones.
bool few_rows_f32_table(const MatmulArgs& a, int64_t M) {
  const WeightFormat& f = a.weight.format;
  const int64_t blocksize = f.with_scaling ? f.group_length() : f.K;
  return a.config.empty() && a.A.dtype == DType::f16 && weight_bits(f.type) == 4 && !f.with_zeros &&
         M <= gemm::bnb4_gemv_max_rows() && !table_exact_in_bf16(f) && gemm::bnb4_gemv_fits(f.K, blocksize);
}

// matmul_4bit's: bf16 A, whole blocks of 32-multiples a row too.
bool few_rows_bf16(const Matmul4bitArgs& a, int64_t M, int64_t K) {
  return a.config.empty() && K % a.blocksize == 0 && a.blocksize % 32 == 0 && M <= gemm::gemv4_bf16_max_rows(4, true) &&
         a.A.dtype == DType::bf16 && gemm::gemv4_bf16_fits(K, a.blocksize, 4, false, true);
}

}  // namespace

size_t matmul_fast_workspace(const MatmulArgs& a) {
  const int64_t M = rows_of(a.A), K = a.weight.format.K, N = a.weight.format.N;
  const bool large = !few_rows(a, M) && !few_rows_f32_table(a, M) && large_m(a.config, M, a.A.dtype);
  return Scratch::bytes(M, K, N) + (large ? LargeScratch::bytes(M, K, N) : 0);
}

void matmul_fast(const MatmulArgs& a, void* workspace, Stream) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  LOWBIT_REQUIRE(f.layout == WeightLayout::rows, ErrorCode::invalid_argument, a.kName,
                 ": the cpu kernels read the rows layout (got layout ", weight_layout_name(f.layout), ")");
  const int64_t M = rows_of(a.A), N = f.N, K = f.K;
  const gemm::TileConfig& cfg = gemm::pick_tile_config(a.kName, a.config, M, a.prepared_m);
  const int32_t* perm = w.perm.present() ? w.perm.ptr<const int32_t>() : nullptr;
  for (int64_t k = 0; perm && k < K; ++k) {
    LOWBIT_REQUIRE(perm[k] >= 0 && perm[k] < K, ErrorCode::invalid_argument, a.kName,
                   ": weight.perm values must be in [0, ", K, ") (got ", perm[k], " at [", k, "])");
  }
  if (M == 0) return;
  const Scratch s(workspace, M, K);
  const int64_t lda = gemm::round_up(K, kVec);
  const RowsDecoder decode(w);
  const float* bias = f.with_bias ? w.bias.ptr<const float>() : nullptr;
  // The few-rows kernel: each weight row streamed once per 4 rows of A.
  if (few_rows(a, M)) {
    const int64_t blocksize = f.with_scaling ? f.group_length() : K;
    const int bits = weight_bits(f.type);
    const bool a_bf16 = a.A.dtype == DType::bf16;
    auto* ap = reinterpret_cast<uint8_t*>(s.a32);  // M x K floats fit in a32
    const int64_t ap_row = K * gemm::gemv4_a_bytes(bits, a_bf16);
    std::vector<float> row32(a_bf16 ? 0 : static_cast<size_t>(K));  // an fp16 row, as fp32
    for (int64_t m = 0; m < M; ++m) {
      const uint16_t* a16 = a.A.ptr<const uint16_t>() + m * K;
      for (int64_t k = 0; !a_bf16 && k < K; ++k) row32[k] = f16_to_f32(a16[k]);
      gemm::permute_a_bf16(a_bf16 ? a16 : nullptr, row32.data(), perm, K, bits, gemm::Nibbles::low_first,
                           ap + m * ap_row);
    }
    const float one = 1.0f;
    const int64_t groups = f.groups();
    with_store(a.out, N, bias, a.kName, [&](const auto& store) {
      gemv4_bf16(
          M, N, K, bits, a_bf16, ap,
          bits == 8 ? gemm::gemv8_table(decode.kind, decode.vtab) : gemm::gemv4_table(decode.vtab, f.with_zeros),
          blocksize, false, f.with_zeros, [&](int64_t n) { return decode.q + n * decode.row_bytes; },
          [&](int64_t n, float*) { return f.with_scaling ? decode.scale + n * groups : &one; },
          [&](int64_t n, uint8_t* buf) -> const uint8_t* {
            for (int64_t g = 0; g < groups; ++g) buf[g] = decode.zero_code(n, g);
            return buf;
          },
          store);
    });
    return;
  }
  if (few_rows_f32_table(a, M)) {
    const int64_t blocksize = f.with_scaling ? f.group_length() : K, groups = f.groups();
    const float one = 1.0f;
    gemm::prepare_a(a.A, perm, M, K, lda, s.a32);
    with_store(a.out, N, bias, a.kName, [&](const auto& store) {
      gemv4_f32(
          M, N, K, s.a32, lda, gemm::Nibbles::low_first, decode.vtab, blocksize, 0,
          [&](int64_t n) { return decode.q + n * decode.row_bytes; },
          [&](int64_t n, float*) { return f.with_scaling ? decode.scale + n * groups : &one; }, store);
    });
    return;
  }
  if (large_m(a.config, M, a.A.dtype)) {
    const LargeScratch l(reinterpret_cast<uint8_t*>(workspace) + Scratch::bytes(M, K, N), K);
    if (!bf16_panels(a.A.dtype)) {  // fp32 A (prepared as for the tiles) and fp32 panels
      gemm::prepare_a(a.A, perm, M, K, lda, s.a32);
      large_m_matmul(M, N, K, s.a32, lda, false, decode, l.panel, l.sums, a.out, bias, a.kName);
      return;
    }
    const uint16_t* A = a.A.ptr<const uint16_t>();
    if (perm) {  // A's columns gathered into the bf16 buffer a32 holds room for
      auto* ap = reinterpret_cast<uint16_t*>(s.a32);
      parallel_for(M, M * K, [&](int64_t m) {
        for (int64_t k = 0; k < K; ++k) ap[m * K + k] = A[m * K + perm[k]];
      });
      A = ap;
    }
    large_m_matmul(M, N, K, A, K, true, decode, l.panel, l.sums, a.out, bias, a.kName);
    return;
  }
  gemm::prepare_a(a.A, perm, M, K, lda, s.a32);
  with_store(a.out, N, bias, a.kName,
             [&](const auto& store) { gemm::run_tiles(M, N, K, s.a32, lda, cfg, decode, store); });
}

std::vector<KernelConfig> matmul_fast_configs(const MatmulArgs& a) {
  return gemm::tile_configs(rows_of(a.A), a.prepared_m);
}
std::vector<KernelConfig> matmul_4bit_fast_configs(const Matmul4bitArgs& a) {
  return gemm::tile_configs(rows_of(a.A), 0);
}

size_t matmul_4bit_fast_workspace(const Matmul4bitArgs& a) {
  const int64_t M = rows_of(a.A), K = a.A.size(-1), N = a.N;
  const bool large = !few_rows_bf16(a, M, K) && large_m(a.config, M, a.A.dtype);
  return Scratch::bytes(M, K, N) + (large ? LargeScratch::bytes(M, K, N) : 0);
}

void matmul_4bit_fast(const Matmul4bitArgs& a, void* workspace, Stream) {
  const int64_t M = rows_of(a.A), N = a.N, K = a.A.size(-1);
  const gemm::TileConfig& cfg = gemm::pick_tile_config(a.kName, a.config, M, 0);
  if (M == 0) return;
  const Scratch s(workspace, M, K);
  const int64_t lda = gemm::round_up(K, kVec);
  // A few rows where the kernel takes K and the blocks, no config forced: each weight row streamed once;
  // bf16 A as it is, up to gemv4_bf16_max_rows rows, where its kernel takes K and the blocks.
  const bool gemv_bf16 = few_rows_bf16(a, M, K);
  const bool gemv_f32 =
      a.config.empty() && M <= gemm::bnb4_gemv_max_rows() && !gemv_bf16 && gemm::bnb4_gemv_fits(K, a.blocksize);
  const bool large = !gemv_bf16 && large_m(a.config, M, a.A.dtype), large_bf16 = large && bf16_panels(a.A.dtype);
  if (!gemv_bf16 && !large_bf16) gemm::prepare_a(a.A, nullptr, M, K, lda, s.a32);
  if (a.bias.present()) {
    with_float_type(a.bias.dtype, a.kName, [&](auto t) {
      using T = decltype(t);
      for (int64_t n = 0; n < N; ++n) s.bias[n] = to_f32(a.bias.ptr<const T>()[n]);
    });
  }
  const Bnb4Decoder decode{a, K, a.packed.ptr<const uint8_t>(), a.type == Quant4Type::nf4 ? kNf4Table : kFp4Table};
  if (large) {
    const LargeScratch l(reinterpret_cast<uint8_t*>(workspace) + Scratch::bytes(M, K, N), K);
    if (large_bf16) {
      large_m_matmul(M, N, K, a.A.data, K, true, decode, l.panel, l.sums, a.out, a.bias.present() ? s.bias : nullptr,
                     a.kName);
    } else {
      large_m_matmul(M, N, K, s.a32, lda, false, decode, l.panel, l.sums, a.out, a.bias.present() ? s.bias : nullptr,
                     a.kName);
    }
    return;
  }
  with_store(a.out, N, a.bias.present() ? s.bias : nullptr, a.kName, [&](const auto& store) {
    if (gemv_bf16) {
      bnb4_gemv_bf16(decode, M, N, K, reinterpret_cast<uint8_t*>(s.a32), store);  // M x K floats fit in a32
    } else if (gemv_f32) {
      bnb4_gemv(decode, M, N, K, s.a32, lda, store);
    } else {
      gemm::run_tiles(M, N, K, s.a32, lda, cfg, decode, store);
    }
  });
}

}  // namespace lowbit::core::cpu
