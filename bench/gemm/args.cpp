#include "gemm/args.h"

#include <charconv>

#include "internals.h"
#include "lowbit/error.h"

namespace lowbit::bench {
namespace {

const std::vector<std::string> kGpuShapes = {"4096x4096", "14336x4096", "4096x14336",
                                             "8192x8192", "28672x8192", "8192x28672"};
const std::vector<std::string> kCpuShapes = {"4096x4096"};
const std::vector<int64_t> kGpuM = {1, 16, 32, 64, 128, 256, 4096};
const std::vector<int64_t> kCpuM = {1, 16};
// int4 with groups of 128 as GPTQ stores it (uint4, quantized zeros) and as
// plain symmetric int4; NF4 (bitsandbytes codes, absmax per group); int2.
const std::vector<std::string> kDefaultTypes = {"uint4:g128:zeros", "int4:g128", "nf4:g128", "int2:g128"};

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return parts;
}

}  // namespace

void fill_defaults(GemmOptions& o, bool gpu) {
  if (o.shapes.empty()) o.shapes = gpu ? kGpuShapes : kCpuShapes;
  if (o.m.empty()) o.m = gpu ? kGpuM : kCpuM;
  if (o.types.empty()) o.types = kDefaultTypes;
  if (o.reps <= 0) o.reps = gpu ? 20 : 3;
  if (o.warmup < 0) o.warmup = gpu ? 3 : 1;
}

std::string WeightShape::name() const { return cat(N, "x", K); }

std::optional<WeightShape> parse_shape(std::string_view s) {
  const size_t x = s.find_first_of("xX");
  if (x == std::string_view::npos) return std::nullopt;
  WeightShape sh;
  if (!parse_int(s.substr(0, x), &sh.N) || !parse_int(s.substr(x + 1), &sh.K) || sh.N < 1 || sh.K < 1)
    return std::nullopt;
  return sh;
}

MatmulConfig config_for(const TypeSpec& t, int64_t N, int64_t K, const std::vector<int64_t>& m) {
  MatmulConfig c;
  c.M = m;
  c.N = N;
  c.K = K;
  c.A_dtype = DType::f16;
  c.out_dtype = DType::f16;
  c.accum_dtype = DType::f32;
  c.W_dtype = t.type;
  c.with_scaling = t.scaling;
  c.group_size = t.scaling ? t.group : -1;
  c.with_zeros = t.zeros;
  c.zeros_mode = t.zeros_mode;
  return c;
}

TypeSpec parse_type_spec(std::string_view spec) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, cat("bench gemm: --types '", spec, "': ", why));
  };
  const std::vector<std::string_view> parts = split(spec, ':');
  TypeSpec t;
  if (!parse_weight_type(parts[0], &t.type)) {
    throw bad(cat("unknown weight type '", parts[0],
                  "' (int8, int4, int2, int1, uint8, uint4, uint2, uint1, nf4, fp4, fp4_e2m1, fp8_e4m3, f16, "
                  "bf16)"));
  }
  const bool unquantized = t.type == WeightType::f16 || t.type == WeightType::bf16;
  t.scaling = !unquantized;
  t.group = unquantized ? -1 : 128;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    int64_t g = 0;
    if (p.size() > 1 && p[0] == 'g' && parse_int(p.substr(1), &g)) {
      t.scaling = true;
      t.group = g;
    } else if (p == "row") {
      t.scaling = true;
      t.group = -1;
    } else if (p == "noscale") {
      t.scaling = false;
      t.group = -1;
    } else if (p == "zeros") {
      t.zeros = true;
      t.zeros_mode = ZerosMode::quantized;
    } else if (p.substr(0, 6) == "zeros=") {
      t.zeros = true;
      if (!parse_zeros_mode(p.substr(6), &t.zeros_mode))
        throw bad(cat("unknown zeros mode '", p.substr(6), "' (original, rescale, quantized)"));
    } else {
      throw bad(cat("unknown part '", p, "' (gN, row, noscale, zeros, zeros=MODE)"));
    }
  }
  // The config's own rules (group size a multiple of 32, zeros need an
  // integer type and scaling, ...), on a shape every valid group divides.
  const int64_t K = t.scaling && t.group > 0 ? t.group : 128;
  try {
    check(config_for(t, 128, K, {1}));
  } catch (const Error& e) {
    throw bad(e.what());
  }
  t.name = std::string(weight_type_name(t.type));
  if (t.scaling) {
    t.name += t.group > 0 ? cat(":g", t.group) : std::string(":row");
  } else if (!unquantized) {
    t.name += ":noscale";
  }
  if (t.zeros)
    t.name += t.zeros_mode == ZerosMode::quantized ? ":zeros" : cat(":zeros=", zeros_mode_name(t.zeros_mode));
  return t;
}

std::string shape_error(const std::string& s) {
  return parse_shape(s) ? std::string() : "expected NxK with N, K >= 1, got '" + s + "'";
}

std::string type_spec_error(const std::string& s) {
  try {
    parse_type_spec(s);
    return std::string();
  } catch (const Error& e) {
    return std::string(e.what());
  }
}

}  // namespace lowbit::bench
