// QuantState <-> the bitsandbytes / HF transformers dict (docs/formats.md, "QuantState serialization").
//
// The packed JSON blob is written byte for byte as bitsandbytes writes it
// (Python json.dumps of {quant_type, blocksize, dtype, shape[, nested_*]}, in
// that order, ", " and ": " separators, floats as Python's repr), so a file
// saved by lowbit is indistinguishable from one saved by bitsandbytes.
#include "lowbit/quant_state.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/hd.h"
#include "core/json_limits.h"

namespace lowbit {
namespace {

using core::ceil_div;

using core::cat;

constexpr const char* kAsDict = "quant_state_as_dict";
constexpr const char* kFromDict = "quant_state_from_dict";
constexpr std::string_view kQuantStateKey = "quant_state.";
constexpr std::string_view kPackedTypePrefix = "bitsandbytes__";

// Every field name bitsandbytes' QuantState.as_dict writes.
constexpr std::string_view kFields[] = {"absmax",           "quant_map",    "nested_absmax", "nested_quant_map",
                                        "quant_type",       "blocksize",    "dtype",         "shape",
                                        "nested_blocksize", "nested_dtype", "nested_offset"};

bool is_field(std::string_view name) {
  return std::any_of(std::begin(kFields), std::end(kFields), [&](std::string_view f) { return f == name; });
}

bool is_quant4_type(std::string_view t) { return t == "nf4" || t == "fp4"; }

// A view of `t` on `device`, copying only when it lives elsewhere.
Tensor on_device(const Tensor& t, Device device) { return t.device() == device ? t : t.to(device); }

// ------------------------------------------------------------ JSON writing

// Python's repr(float): the shortest digits that round-trip, in fixed
// notation for 1e-4 <= |v| < 1e16 (always with a fractional part), else
// d[.ddd]e±XX. json.dumps writes floats this way.
std::string python_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-1.2345e-02"
  const size_t e = sci.find('e');
  std::string sign, digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] == '-')
      sign = "-";
    else if (sci[i] != '.')
      digits += sci[i];
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // v = 0.DIGITS * 10^decpt
  if (decpt <= -4 || decpt > 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    const int a = std::abs(exp10);
    return cat(sign, m, "e", exp10 < 0 ? "-" : "+", a < 10 ? "0" : "", a);
  }
  if (decpt <= 0) return cat(sign, "0.", std::string(static_cast<size_t>(-decpt), '0'), digits);
  const auto point = static_cast<size_t>(decpt);
  if (digits.size() <= point) return cat(sign, digits, std::string(point - digits.size(), '0'), ".0");
  return cat(sign, digits.substr(0, point), ".", digits.substr(point));
}

std::string json_string(std::string_view s) { return nlohmann::json(std::string(s)).dump(-1, ' ', true); }

std::string json_ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

Tensor bytes_tensor(const std::string& s) {
  Tensor t = Tensor::empty({static_cast<int64_t>(s.size())}, DType::u8);
  if (!s.empty()) std::memcpy(t.data(), s.data(), s.size());
  return t;
}

float offset_value(const QuantState& s) {
  LOWBIT_REQUIRE(s.offset.defined() && s.offset.dtype() == DType::f32 && s.offset.numel() == 1,
                 ErrorCode::invalid_argument, kAsDict, ": offset of a nested state must be a float32 [1] tensor (got ",
                 s.offset.defined() ? s.offset.ref().str() : std::string("none"), ")");
  return on_device(s.offset, Device::cpu()).ptr<float>()[0];
}

// ------------------------------------------------------------ dict reading

const char* kind_of(const QuantStateValue& v) {
  switch (v.index()) {
    case 0: return "a tensor";
    case 1: return "an integer";
    case 2: return "a float";
    case 3: return "a string";
    default: return "a list of integers";
  }
}

// One field of the state, from an unpacked key or from the packed JSON.
struct Entry {
  std::optional<QuantStateValue> value;  // empty: a JSON value with no variant (null, bool, ...)
  std::string got;                       // what that JSON value was, for messages
  std::string where;                     // "'W.blocksize'" or "'W.quant_state...' field 'blocksize'"
};

// Python's json writes NaN, Infinity and -Infinity for non-finite floats (a
// double-quantized state of weights holding Inf has nested_offset Infinity;
// lowbit writes it so too) and reads them back; nlohmann-json rejects them.
// Outside strings they become these strings, which from_json reads as the
// floats (U+0001 cannot start a real field's text).
constexpr std::string_view kPythonConstants[] = {"-Infinity", "Infinity", "NaN"};
constexpr std::string_view kMarker = "\\u0001";

std::string quote_python_constants(std::string_view text) {
  std::string out(text);
  // Replaced from the end, so the indices found stay valid.
  std::vector<std::pair<size_t, std::string_view>> found;
  core::for_each_outside_strings(text, [&](size_t i) {
    for (std::string_view name : kPythonConstants) {
      if (text.substr(i, name.size()) == name && (found.empty() || found.back().first + found.back().second.size() <= i)) {
        found.emplace_back(i, name);
        break;
      }
    }
    return true;
  });
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    out.replace(it->first, it->second.size(), cat('"', kMarker, it->second, '"'));
  }
  return out;
}

std::optional<double> python_constant(const std::string& s) {
  if (s.size() < 2 || s[0] != '\x01') return std::nullopt;
  const std::string_view name = std::string_view(s).substr(1);
  if (name == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (name == "Infinity") return std::numeric_limits<double>::infinity();
  if (name == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

std::optional<QuantStateValue> from_json(const nlohmann::json& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (const std::optional<double> v = python_constant(s)) return QuantStateValue(*v);
    return QuantStateValue(s);
  }
  if (j.is_number_integer()) return QuantStateValue(j.get<int64_t>());
  if (j.is_number_float()) return QuantStateValue(j.get<double>());
  if (j.is_array()) {
    std::vector<int64_t> v;
    for (const auto& e : j) {
      if (!e.is_number_integer()) return std::nullopt;
      v.push_back(e.get<int64_t>());
    }
    return QuantStateValue(std::move(v));
  }
  return std::nullopt;
}

// The dict with its common "<weight>." prefix taken off and the packed blob
// (if any) unpacked, each field remembering where it came from.
class Fields {
 public:
  explicit Fields(const QuantStateDict& dict);

  bool has(std::string_view name) const { return entries_.count(std::string(name)) != 0; }
  // Missing or of another type: format_error naming the key.
  template <class T>
  const T& get(std::string_view name) const;
  // An integer or a float, as a double (Python writes 0.0 but also 0 for ints).
  double number(std::string_view name) const;
  [[noreturn]] void fail(std::string_view name, const std::string& problem) const;
  std::string key(std::string_view name) const { return cat("'", prefix_, name, "'"); }

  std::string prefix_;
  std::string packed_key_;   // empty in the unpacked form
  std::string packed_type_;  // nf4 / fp4 from the packed key's name

 private:
  void split_keys(const QuantStateDict& dict);
  void unpack(const Tensor& blob);
  std::map<std::string, Entry> entries_;
};

[[noreturn]] void format_error(const std::string& message) {
  core::fail(ErrorCode::format_error, cat(kFromDict, ": ", message));
}

void Fields::fail(std::string_view name, const std::string& problem) const {
  const auto it = entries_.find(std::string(name));
  format_error(cat(it == entries_.end() ? key(name) : it->second.where, " ", problem));
}

template <class T>
const T& Fields::get(std::string_view name) const {
  const auto it = entries_.find(std::string(name));
  if (it == entries_.end()) {
    const bool tensor = std::is_same_v<T, Tensor>;
    if (packed_key_.empty() || tensor) format_error(cat("missing key ", key(name)));
    format_error(cat("missing field '", name, "' in ", key(packed_key_)));
  }
  const Entry& e = it->second;
  const T* v = e.value ? std::get_if<T>(&*e.value) : nullptr;
  if (v == nullptr) {
    const QuantStateValue expected{T{}};
    format_error(cat(e.where, " must be ", kind_of(expected), " (got ", e.value ? kind_of(*e.value) : e.got, ")"));
  }
  return *v;
}

double Fields::number(std::string_view name) const {
  const auto it = entries_.find(std::string(name));
  if (it != entries_.end() && it->second.value) {
    if (const auto* i = std::get_if<int64_t>(&*it->second.value)) return static_cast<double>(*i);
  }
  return get<double>(name);
}

Fields::Fields(const QuantStateDict& dict) {
  split_keys(dict);
  if (!packed_key_.empty()) {
    const Tensor* blob = std::get_if<Tensor>(&dict.at(prefix_ + packed_key_));
    if (blob == nullptr)
      format_error(cat(key(packed_key_), " must be a uint8 tensor of UTF-8 JSON (got ",
                       kind_of(dict.at(prefix_ + packed_key_)), ")"));
    unpack(on_device(*blob, Device::cpu()));
  }
}

// Finds the common prefix and sorts keys into fields and the packed blob.
void Fields::split_keys(const QuantStateDict& dict) {
  std::optional<std::string> prefix;
  std::string prefix_source;
  std::vector<std::string> others;
  auto agree = [&](const std::string& p, const std::string& k) {
    if (!prefix) {
      prefix = p;
      prefix_source = k;
    } else if (*prefix != p) {
      format_error(
          cat("keys must share one prefix: '", k, "' has '", p, "' but '", prefix_source, "' has '", *prefix, "'"));
    }
  };
  for (const auto& [k, v] : dict) {
    const size_t qs = k.rfind(kQuantStateKey);
    if (qs != std::string::npos && (qs == 0 || k[qs - 1] == '.') &&
        k.find('.', qs + kQuantStateKey.size()) == std::string::npos) {
      const std::string rest = k.substr(qs + kQuantStateKey.size());
      if (rest.rfind(kPackedTypePrefix, 0) != 0) {
        format_error(cat("unexpected key '", k, "' (a packed state is 'quant_state.bitsandbytes__<nf4|fp4>')"));
      }
      const std::string type = rest.substr(kPackedTypePrefix.size());
      if (!is_quant4_type(type)) format_error(cat("key '", k, "' names quant_type '", type, "' (expected nf4 or fp4)"));
      if (!packed_key_.empty()) {
        format_error(cat("more than one packed state: '", prefix_ + packed_key_, "' and '", k, "'"));
      }
      agree(k.substr(0, qs), k);
      prefix_ = *prefix;
      packed_key_ = k.substr(qs);
      packed_type_ = type;
      continue;
    }
    const size_t dot = k.rfind('.');
    const std::string name = dot == std::string::npos ? k : k.substr(dot + 1);
    if (!is_field(name)) {
      others.push_back(k);
      continue;
    }
    agree(dot == std::string::npos ? "" : k.substr(0, dot + 1), k);
    entries_[name] = Entry{v, "", cat("'", k, "'")};
  }
  if (!prefix) {
    format_error(
        cat("found neither the packed key '<weight>.quant_state.bitsandbytes__<nf4|fp4>' nor unpacked keys "
            "(quant_type, absmax, ...) among ",
            dict.size(), " keys"));
  }
  prefix_ = *prefix;
  for (const std::string& k : others) {
    // The packed weight itself ("W" beside "W.absmax") may come along.
    if (!prefix_.empty() && k + "." == prefix_) continue;
    format_error(cat("unexpected key '", k, "'"));
  }
}

void Fields::unpack(const Tensor& blob) {
  const std::string where = key(packed_key_);
  if (blob.dtype() != DType::u8) {
    format_error(cat(where, " dtype must be uint8 (got ", dtype_name(blob.dtype()), ")"));
  }
  const std::string text(blob.ptr<const char>(), blob.nbytes());
  // Bounded before parsing: error excerpts serialize values by recursion.
  if (core::json_depth(text) > core::kMaxJsonDepth) {
    format_error(cat(where, " nests JSON more than ", core::kMaxJsonDepth, " levels deep (a quant_state nests 2)"));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(quote_python_constants(text));
  } catch (const nlohmann::json::exception& e) {
    format_error(cat(where, " is not valid JSON (", e.what(), ")"));
  }
  if (!j.is_object()) format_error(cat(where, " must hold a JSON object (got ", j.type_name(), ")"));
  for (const auto& [name, value] : j.items()) {
    if (!is_field(name)) format_error(cat(where, " has unexpected field '", name, "'"));
    const auto it = entries_.find(name);
    if (it != entries_.end())
      format_error(cat("field '", name, "' is given twice: as ", it->second.where, " and in ", where));
    entries_[name] = Entry{from_json(value), value.type_name(), cat(where, " field '", name, "'")};
  }
}

// ------------------------------------------------------ field validation

DType float_dtype(const Fields& f, std::string_view name) {
  const std::string& s = f.get<std::string>(name);
  DType d{};
  if (!parse_dtype(s, &d) || (d != DType::f32 && d != DType::f16 && d != DType::bf16)) {
    f.fail(name, cat("must be one of float32, float16, bfloat16 (got '", s, "')"));
  }
  return d;
}

int64_t blocksize_field(const Fields& f, std::string_view name) {
  const int64_t b = f.get<int64_t>(name);
  if (b < 32 || b > 4096 || (b & (b - 1)) != 0)
    f.fail(name, cat("must be a power of two from 32 to 4096 (got ", b, ")"));
  return b;
}

// The shape of a tensor of `dtype`: its elements' bytes must fit in int64_t,
// as for any tensor (a file that claims more is malformed).
std::vector<int64_t> shape_field(const Fields& f, DType dtype) {
  const auto& shape = f.get<std::vector<int64_t>>("shape");
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    f.fail("shape", cat("must have at most ", kMaxDims, " dimensions (got ", shape.size(), ")"));
  }
  for (int64_t d : shape) {
    if (d < 0) f.fail("shape", cat("extents must be >= 0 (got ", json_ints(shape), ")"));
  }
  try {
    core::checked_numel(kFromDict, "quant state", Shape(shape), dtype);
  } catch (const Error& e) {
    f.fail("shape", cat("is too large: ", e.what()));
  }
  return shape;
}

// The tensor `name`, checked for dtype and element count, on `device`. The
// `why`s say which rule the expectation comes from.
Tensor tensor_field(const Fields& f, std::string_view name, DType dtype, std::string_view dtype_why, int64_t numel,
                    std::string_view numel_why, Device device) {
  const Tensor& t = f.get<Tensor>(name);
  if (t.dtype() != dtype) {
    f.fail(name, cat("dtype must be ", dtype_name(dtype), dtype_why, " (got ", dtype_name(t.dtype()), ")"));
  }
  if (t.numel() != numel) {
    f.fail(name,
           cat("must have ", numel, " elements", numel_why, " (got ", t.numel(), ", shape ", core::shape_str(t), ")"));
  }
  return on_device(t, device);
}

}  // namespace

int64_t QuantState::numel() const { return core::checked_numel("QuantState", "state", Shape(shape), dtype); }

QuantStateDict quant_state_as_dict(const QuantState& s, bool packed) {
  LOWBIT_REQUIRE(is_quant4_type(s.quant_type), ErrorCode::invalid_argument, kAsDict,
                 ": quant_type must be nf4 or fp4 (got '", s.quant_type, "'): only 4-bit states serialize");
  LOWBIT_REQUIRE(s.absmax.defined(), ErrorCode::invalid_argument, kAsDict, ": absmax is required (got none)");
  LOWBIT_REQUIRE(s.code.defined(), ErrorCode::invalid_argument, kAsDict, ": code is required (got none)");
  if (s.nested()) {
    LOWBIT_REQUIRE(s.state2->absmax.defined() && s.state2->code.defined(), ErrorCode::invalid_argument, kAsDict,
                   ": state2 of a nested state needs absmax and code (got ",
                   s.state2->absmax.defined() ? "no code" : "no absmax", ")");
  }

  const Device cpu = Device::cpu();
  QuantStateDict d;
  d["absmax"] = on_device(s.absmax, cpu);
  d["quant_map"] = on_device(s.code, cpu);
  if (s.nested()) {
    d["nested_absmax"] = on_device(s.state2->absmax, cpu);
    d["nested_quant_map"] = on_device(s.state2->code, cpu);
  }
  const std::string dtype(dtype_name(s.dtype));
  if (!packed) {
    d["quant_type"] = s.quant_type;
    d["blocksize"] = s.blocksize;
    d["dtype"] = dtype;
    d["shape"] = s.shape;
    if (s.nested()) {
      d["nested_blocksize"] = s.state2->blocksize;
      d["nested_dtype"] = std::string(dtype_name(s.state2->dtype));
      d["nested_offset"] = static_cast<double>(offset_value(s));
    }
    return d;
  }
  // bitsandbytes' field order and separators (pack_dict_to_tensor = json.dumps).
  std::string json = cat("{\"quant_type\": ", json_string(s.quant_type), ", \"blocksize\": ", s.blocksize,
                         ", \"dtype\": ", json_string(dtype), ", \"shape\": ", json_ints(s.shape));
  if (s.nested()) {
    json += cat(", \"nested_blocksize\": ", s.state2->blocksize,
                ", \"nested_dtype\": ", json_string(dtype_name(s.state2->dtype)),
                ", \"nested_offset\": ", python_float(static_cast<double>(offset_value(s))));
  }
  json += "}";
  d[std::string(kQuantStateKey) + std::string(kPackedTypePrefix) + s.quant_type] = bytes_tensor(json);
  return d;
}

QuantState quant_state_from_dict(const QuantStateDict& dict, Device device) {
  const Fields f(dict);
  QuantState s;
  s.quant_type = f.get<std::string>("quant_type");
  if (!is_quant4_type(s.quant_type)) f.fail("quant_type", cat("must be nf4 or fp4 (got '", s.quant_type, "')"));
  if (!f.packed_type_.empty() && s.quant_type != f.packed_type_) {
    f.fail("quant_type", cat("is '", s.quant_type, "' but the packed key names ", f.packed_type_));
  }
  s.blocksize = blocksize_field(f, "blocksize");
  s.dtype = float_dtype(f, "dtype");
  s.shape = shape_field(f, s.dtype);
  const int64_t nblocks = ceil_div(core::checked_numel(kFromDict, "quant state", Shape(s.shape), s.dtype), s.blocksize);
  const std::string blocks_why = cat(" (one per block of ", s.blocksize, " in shape ", json_ints(s.shape), ")");

  const bool nested = f.has("nested_absmax");
  if (!nested) {
    for (std::string_view name : {"nested_quant_map", "nested_blocksize", "nested_dtype", "nested_offset"}) {
      if (f.has(name)) f.fail(name, cat("is given but ", f.key("nested_absmax"), " is missing"));
    }
  }
  s.absmax =
      tensor_field(f, "absmax", nested ? DType::u8 : DType::f32,
                   nested ? " (nested_absmax is given)" : " (nested_absmax is not given)", nblocks, blocks_why, device);
  s.code = tensor_field(f, "quant_map", DType::f32, "", 16, " (a 4-bit code table)", device);
  if (!nested) return s;

  auto s2 = std::make_shared<QuantState>();
  s2->blocksize = blocksize_field(f, "nested_blocksize");
  s2->dtype = float_dtype(f, "nested_dtype");
  s2->shape = {nblocks};  // state2 quantizes the absmax vector
  const std::string nested_why = cat(" (one per block of ", s2->blocksize, " absmax values)");
  s2->absmax = tensor_field(f, "nested_absmax", DType::f32, "", ceil_div(nblocks, s2->blocksize), nested_why, device);
  s2->code = tensor_field(f, "nested_quant_map", DType::f32, "", 256, " (an 8-bit code map)", device);
  Tensor offset = Tensor::empty({1}, DType::f32);
  offset.ptr<float>()[0] = static_cast<float>(f.number("nested_offset"));
  s.offset = on_device(offset, device);
  s.state2 = std::move(s2);
  return s;
}

}  // namespace lowbit
