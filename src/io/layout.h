// A checkpoint layout: how one quantized weight is stored (which keys, their
// dtypes and shapes), how to produce those tensors from a float weight, and
// how to find, check and dequantize them again. One implementation per
// format family (layout_*.cpp); docs/checkpoints.md describes each.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lowbit/io.h"

namespace lowbit::io::detail {

struct LayoutParams {
  int64_t blocksize = 0;  // nf4/fp4 (64) and fp8-block (128); 0: the default
  bool double_quant = false;
  int64_t group_size = 128;  // int4; -1: one group per row
  bool symmetric = true;
  int bits = 4;          // GPTQ files read back (2, 4 or 8)
  bool gptq_v2 = false;  // GPTQ zeros stored without v1's "minus one"
  bool group_size_given = false;  // read from a quantization_config: g_idx must agree with it
};

// Tensors of one quantized weight, on the CPU.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Where a layout reads a stored weight from: a checkpoint, or the tensors a
// quantization just produced.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // dtype (safetensors name) and shape, or nullptr when absent.
  virtual const TensorInfo* find(std::string_view name) const = 0;
  // A contiguous, aligned tensor on the CPU; format_error when absent.
  virtual Tensor load(std::string_view name) const = 0;
  // Names the source in messages ("model.safetensors").
  virtual std::string where(std::string_view name) const = 0;
};

// The keys of one stored quantized weight.
struct Group {
  std::string weight;             // the original name, "<module>.weight"
  std::vector<std::string> keys;  // every key it is stored under, main one first
};

struct GroupDescription {
  Format format = Format::plain;
  std::vector<int64_t> shape;  // of the original weight
  std::string detail;          // "blocksize 64, double quant"
  std::optional<DType> dtype;  // the original dtype, where the layout records it
};

class Layout {
 public:
  virtual ~Layout() = default;
  // The format this layout writes (4-bit reading handles nf4 and fp4 both).
  virtual Format family() const = 0;

  // ---- writing (with the parameters the layout was made with)
  // Why a weight of this shape cannot be stored (empty: it can).
  virtual std::string cannot_store(const std::vector<int64_t>& shape) const;
  // The tensors `weight` becomes, known before any data is computed.
  virtual std::vector<TensorDecl> plan(const std::string& weight, const std::vector<int64_t>& shape,
                                       DType dtype) const = 0;
  // Quantizes `w` (f32/f16/bf16 [N, K]) with ops on w's device; the result
  // holds exactly the planned tensors, on the CPU.
  virtual NamedTensors quantize(const std::string& weight, const TensorRef& w) const = 0;

  // ---- reading
  // When `key` is the distinctive key of a weight stored in this layout: the
  // weight's keys present in `src`.
  virtual std::optional<Group> detect(const std::string& key, const TensorSource& src) const = 0;
  // Checks every key's dtype and shape and the quantization state; throws
  // format_error naming the key and what was expected.
  virtual GroupDescription describe(const Group& g, const TensorSource& src) const = 0;
  // The weight in `dtype`, on the CPU; the ops run on `device`.
  virtual Tensor dequantize(const Group& g, const TensorSource& src, DType dtype, Device device) const = 0;
};

std::unique_ptr<Layout> make_layout(Format format, const LayoutParams& params);
// One factory per family (layout_*.cpp).
std::unique_ptr<Layout> make_bnb4_layout(Format format, const LayoutParams& params);
std::unique_ptr<Layout> make_int8_layout(const LayoutParams& params);
std::unique_ptr<Layout> make_fp8_layout(const LayoutParams& params);
std::unique_ptr<Layout> make_gptq_layout(const LayoutParams& params);

// The layouts a reader tries on every key (nf4 stands for both 4-bit types).
std::vector<std::unique_ptr<Layout>> reading_layouts(const LayoutParams& params);

// Small shared helpers of the layouts.
std::string shape_text(const std::vector<int64_t>& shape);
std::vector<int64_t> shape_of(const TensorInfo& t);
bool ends_with(std::string_view s, std::string_view suffix);
// The module of "<module>.weight" ("" when `weight` has no ".weight" suffix).
std::string module_of(std::string_view weight);
// Checks a stored key's dtype and shape; format_error naming it otherwise.
const TensorInfo& require_key(const TensorSource& src, const std::string& weight, const std::string& key,
                              std::string_view dtype, const std::vector<int64_t>& shape, std::string_view why = {});
[[noreturn]] void group_error(const TensorSource& src, const std::string& key, const std::string& message);
// `t` on `device` (no copy when it is already there).
Tensor on_device(const Tensor& t, Device device);

}  // namespace lowbit::io::detail
