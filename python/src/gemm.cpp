// Bindings of the mixed-precision matmul (include/lowbit/ops/gemm.h, docs/gemm.md):
// MatmulConfig as a Python class of its own (BitBLAS' fields, dtypes as
// names), and the C++ Matmul, PackedWeight and QuantizedWeight as internal
// classes that lowbit/_matmul.py wraps with the caller's framework. Arrays
// arrive as (array, as) pairs and leave as exported tensors (arrays.h);
// packed and imported weights stay C++ objects, so forward passes them to
// the op without converting anything.
#include "lowbit/ops/gemm.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "ops/quant/common.h"
#include "core/check.h"

namespace lowbit::python {
namespace {

using core::cat;

constexpr const char* kConfig = "MatmulConfig";

// ------------------------------------------------------------ names

std::string weight_type_list() {
  std::string s;
  for (int i = 0; i < kNumWeightTypes; ++i) {
    if (i) s += ", ";
    s += weight_type_name(static_cast<WeightType>(i));
  }
  return s;
}

// A dtype given as a name or as a framework's dtype object: "float16",
// torch.float16 ("torch.float16"), numpy.dtype("float16"), numpy.float16.
std::string name_of(nb::handle v) {
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  if (PyType_Check(v.ptr()) && nb::hasattr(v, "__name__")) return nb::cast<std::string>(v.attr("__name__"));
  std::string s = nb::cast<std::string>(nb::str(v));
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  return s;
}

WeightType weight_type_arg(const char* op, nb::handle v) {
  const std::string name = name_of(v);
  WeightType t{};
  // BitBLAS spells fp8 "e4m3_float8".
  const bool ok = parse_weight_type(name == "e4m3_float8" ? std::string("fp8_e4m3") : name, &t);
  LOWBIT_REQUIRE(ok, ErrorCode::unsupported_dtype, op, ": W_dtype '", name, "' is not a weight type (",
                 weight_type_list(), ")");
  return t;
}

DType dtype_field(const char* op, const char* field, nb::handle v) {
  const std::string name = name_of(v);
  DType d{};
  LOWBIT_REQUIRE(parse_dtype(name, &d), ErrorCode::unsupported_dtype, op, ": ", field, " '", name,
                 "' is not a dtype name (float16, bfloat16, float32)");
  return d;
}

ZerosMode zeros_mode_arg(const char* op, const std::string& name) {
  ZerosMode z{};
  LOWBIT_REQUIRE(parse_zeros_mode(name, &z), ErrorCode::invalid_argument, op,
                 ": zeros_mode must be 'original', 'rescale' or 'quantized' (got '", name, "')");
  return z;
}

std::string py_type_name(nb::handle v) { return nb::cast<std::string>(nb::str(v.type().attr("__name__"))); }

int64_t int_arg(const char* op, const char* field, nb::handle v) {
  LOWBIT_REQUIRE(PyIndex_Check(v.ptr()) && !PyBool_Check(v.ptr()), ErrorCode::invalid_argument, op, ": ", field,
                 " must be an int (got ", py_type_name(v), ")");
  const nb::int_ i(v);
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  LOWBIT_REQUIRE(overflow == 0, ErrorCode::invalid_argument, op, ": ", field, " must be a 64-bit integer (got ",
                 nb::cast<std::string>(nb::str(i)), ")");
  return value;
}

// True or False (NumPy booleans, 0 and 1 too), as lowbit/_arrays.py's flag();
// checked here so that errors name the field.
bool bool_arg(const char* op, const char* field, nb::handle v) {
  const std::string type = py_type_name(v);
  bool ok = PyBool_Check(v.ptr()) || type == "bool_" || type == "bool";
  if (!ok && PyIndex_Check(v.ptr())) {
    const nb::int_ i(v);
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    ok = overflow == 0 && (value == 0 || value == 1);
  }
  LOWBIT_REQUIRE(ok, ErrorCode::invalid_argument, op, ": ", field, " must be True or False (got ", type, " ",
                 nb::cast<std::string>(nb::repr(v)), ")");
  return PyObject_IsTrue(v.ptr()) == 1;
}

std::string str_arg(const char* op, const char* field, nb::handle v) {
  LOWBIT_REQUIRE(nb::isinstance<nb::str>(v), ErrorCode::invalid_argument, op, ": ", field, " must be a str (got ",
                 py_type_name(v), ")");
  return nb::cast<std::string>(v);
}

// None (the default list), an int, or a sequence of ints.
std::vector<int64_t> m_arg(nb::handle v) {
  if (v.is_none()) return MatmulConfig{}.M;
  if (PyIndex_Check(v.ptr()) && !PyBool_Check(v.ptr())) return {int_arg(kConfig, "M", v)};
  LOWBIT_REQUIRE(PySequence_Check(v.ptr()) && !nb::isinstance<nb::str>(v), ErrorCode::invalid_argument, kConfig,
                 ": M must be None, an int or a list of ints (got ", py_type_name(v), ")");
  std::vector<int64_t> out;
  for (nb::handle e : v) out.push_back(int_arg(kConfig, "M", e));
  return out;
}

int64_t required_dim(const char* field, nb::handle v) {
  LOWBIT_REQUIRE(!v.is_none(), ErrorCode::invalid_argument, kConfig, ": ", field, " is required (got None)");
  return int_arg(kConfig, field, v);
}

std::string py_bool(bool b) { return b ? "True" : "False"; }

std::string repr(const MatmulConfig& c) {
  std::string m = "[";
  for (size_t i = 0; i < c.M.size(); ++i) m += cat(i ? ", " : "", c.M[i]);
  m += "]";
  return cat(kConfig, "(M=", m, ", N=", c.N, ", K=", c.K, ", A_dtype='", dtype_name(c.A_dtype), "', W_dtype='",
             weight_type_name(c.W_dtype), "', accum_dtype='", dtype_name(c.accum_dtype), "', out_dtype='",
             dtype_name(c.out_dtype), "', layout='", c.layout, "', with_bias=", py_bool(c.with_bias),
             ", group_size=", c.group_size, ", with_scaling=", py_bool(c.with_scaling),
             ", with_zeros=", py_bool(c.with_zeros), ", zeros_mode='", zeros_mode_name(c.zeros_mode), "')");
}

bool same_config(const MatmulConfig& a, const MatmulConfig& b) {
  return a.M == b.M && a.N == b.N && a.K == b.K && a.A_dtype == b.A_dtype && a.W_dtype == b.W_dtype &&
         a.accum_dtype == b.accum_dtype && a.out_dtype == b.out_dtype && a.layout == b.layout &&
         a.with_bias == b.with_bias && a.group_size == b.group_size && a.with_scaling == b.with_scaling &&
         a.with_zeros == b.with_zeros && a.zeros_mode == b.zeros_mode;
}

// ----------------------------------------------------------- tensors out

nb::object py_or_none(const Tensor& t, const char* what) {
  return t.defined() ? nb::object(to_py(t, what)) : nb::none();
}

nb::tuple device_tuple(Device d) { return nb::make_tuple(d.is_cuda() ? "cuda" : "cpu", d.index); }

// ------------------------------------------------------------------- Matmul

PackedWeight transform_weight_py(const Matmul& mm, const InArray& weight, const std::optional<InArray>& scale,
                                 const std::optional<InArray>& zeros, const std::optional<InArray>& bias,
                                 const std::optional<InArray>& perm) {
  const char* op = "transform_weight";
  const TensorRef w = to_ref(op, "weight", weight);
  const TensorRef s = to_ref(op, "scale", scale);
  const TensorRef z = to_ref(op, "zeros", zeros);
  const TensorRef b = to_ref(op, "bias", bias);
  const TensorRef p = to_ref(op, "perm", perm);
  return without_gil([&] { return mm.transform_weight(w, s, z, b, p); });
}

nb::object forward_py(const Matmul& mm, const InArray& A, const PackedWeight& W, const std::optional<OutArray>& out,
                      nb::handle stream_arg) {
  const char* op = "matmul";
  const TensorRef a = to_ref(op, "A", A);
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  if (out) {
    const TensorRef o = to_ref(op, "out", *out);
    without_gil([&] { mm.forward(a, W, o, stream); });
    return nb::none();
  }
  return to_py(without_gil([&] { return mm.forward(a, W, stream); }), "out");
}

// ---------------------------------------------------------------- importers

QuantizedWeight import_gptq_py(const InArray& qweight, const InArray& qzeros, const InArray& scales,
                               const std::optional<InArray>& g_idx, const std::optional<InArray>& bias, int bits,
                               int64_t group_size, bool zero_plus_one, const std::string& zeros_mode) {
  const char* op = "import_gptq";
  GptqTensors t;
  t.qweight = to_ref(op, "qweight", qweight);
  t.qzeros = to_ref(op, "qzeros", qzeros);
  t.scales = to_ref(op, "scales", scales);
  t.g_idx = to_ref(op, "g_idx", g_idx);
  t.bias = to_ref(op, "bias", bias);
  GptqOptions o;
  o.bits = bits;
  o.group_size = group_size;
  o.zero_plus_one = zero_plus_one;
  o.zeros_mode = zeros_mode_arg(op, zeros_mode);
  return without_gil([&] { return import_gptq(t, o); });
}

QuantizedWeight import_awq_py(const InArray& qweight, const InArray& qzeros, const InArray& scales,
                              const std::optional<InArray>& bias, int64_t group_size) {
  const char* op = "import_awq";
  AwqTensors t;
  t.qweight = to_ref(op, "qweight", qweight);
  t.qzeros = to_ref(op, "qzeros", qzeros);
  t.scales = to_ref(op, "scales", scales);
  t.bias = to_ref(op, "bias", bias);
  return without_gil([&] { return import_awq(t, group_size); });
}

Tensor host_copy(const TensorRef& t) {
  return without_gil([&] { return Tensor::copy_of(t, Device::cpu()); });
}

QuantizedWeight import_bnb_4bit_py(const InArray& packed, const InArray& absmax, const std::string& quant_type,
                                   int64_t blocksize, const std::vector<int64_t>& shape, const std::string& dtype,
                                   const std::optional<NestedIn>& nested, const std::optional<InArray>& bias) {
  const char* op = "import_bnb_4bit";
  const TensorRef p = to_ref(op, "packed", packed);
  const TensorRef b = to_ref(op, "bias", bias);
  // The importer reads the state on the host; its own copies of the arrays.
  QuantState s;
  s.absmax = host_copy(to_ref(op, "absmax", absmax));
  s.blocksize = blocksize;
  s.shape = shape;
  s.dtype = parse_dtype_arg(op, "quant_state.dtype", dtype);
  s.quant_type = quant_type;
  if (nested) {
    const auto& [code2, absmax2, offset, blocksize2] = *nested;
    auto s2 = std::make_shared<QuantState>();
    s2->code = host_copy(code2 ? to_ref(op, "state2.code", *code2) : ops::code_map_on("dynamic", Device::cpu()).ref());
    s2->absmax = host_copy(to_ref(op, "state2.absmax", absmax2));
    s2->blocksize = blocksize2;
    s2->shape = {s.absmax.numel()};
    s.state2 = std::move(s2);
    const Tensor off = host_copy(to_ref(op, "offset", offset));
    const int64_t one[1] = {1};
    s.offset = off.reshaped(Shape(one, 1));
  }
  return without_gil([&] { return import_bnb_4bit(p, s, b); });
}

// ---------------------------------------------------- bitsandbytes 4-bit

// matmul_4bit / gemv_4bit on a QuantState's arrays through the primitive
// (zero-copy; out= written in place).
nb::object matmul_4bit_py(const std::string& op_name, const InArray& A, const InArray& packed, const InArray& absmax,
                          const std::optional<NestedIn>& nested, const std::string& quant_type, int64_t blocksize,
                          const std::vector<int64_t>& shape, const std::optional<InArray>& bias,
                          const std::optional<OutArray>& out, nb::handle stream_arg) {
  const char* op = op_name == "gemv_4bit" ? "gemv_4bit" : "matmul_4bit";
  const TensorRef a = to_ref(op, "A", A);
  const Device device = a.device;
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const Stream stream = ctx.stream;
  LOWBIT_REQUIRE(shape.size() == 2 && shape[0] >= 1 && shape[1] >= 1, ErrorCode::invalid_argument, op,
                 ": quant state shape must be a weight's [N, K] (got ", shape.size(), " dims)");
  core::checked_numel(op, "quant_state", Shape(shape), a.dtype);
  const int64_t N = shape[0], K = shape[1];
  LOWBIT_REQUIRE(a.ndim >= 1 && a.size(-1) == K, ErrorCode::invalid_argument, op,
                 ": A's last dimension must equal the weight's K = ", K, " (got A ", core::shape_str(a), ")");
  if (op_name == "gemv_4bit") {
    LOWBIT_REQUIRE(a.numel() == a.size(-1), ErrorCode::invalid_argument, op, ": A must hold one row (got ",
                   core::shape_str(a), "; matmul_4bit takes any rows)");
  }
  std::vector<Tensor> keep;
  Matmul4bitArgs args;
  args.A = a;
  args.packed = to_ref(op, "B", packed);
  args.absmax = to_ref(op, "absmax", absmax);
  args.nested = nested_arg(op, nested, device, stream, keep);
  args.bias = to_ref(op, "bias", bias);
  args.N = N;
  args.blocksize = blocksize;
  args.type = quant4_type(op, quant_type);
  Tensor out_t;
  if (out) {
    args.out = to_ref(op, "out", *out);
  } else {
    std::vector<int64_t> out_shape(a.sizes().begin(), a.sizes().end());
    out_shape.back() = N;
    out_t = Tensor::empty(Shape(out_shape), a.dtype, device, stream);
    args.out = out_t.ref();
  }
  run_op(args, device, stream);
  return py_or_none(out_t, "out");
}

// The tensors of a packed weight by name.
const Tensor& packed_tensor(const PackedWeight& w, const std::string& name) {
  if (name == "qweight") return w.qweight;
  if (name == "scale") return w.scale;
  if (name == "zeros") return w.zeros;
  if (name == "bias") return w.bias;
  if (name == "perm") return w.perm;
  core::fail(ErrorCode::invalid_argument,
             cat("PackedWeight: no tensor named '", name, "' (qweight, scale, zeros, bias, perm)"));
}

const Tensor& quantized_tensor(const QuantizedWeight& w, const std::string& name) {
  if (name == "weight") return w.weight;
  if (name == "scale") return w.scale;
  if (name == "zeros") return w.zeros;
  if (name == "bias") return w.bias;
  if (name == "perm") return w.perm;
  core::fail(ErrorCode::invalid_argument,
             cat("QuantizedWeight: no tensor named '", name, "' (weight, scale, zeros, bias, perm)"));
}

}  // namespace

void bind_gemm(nb::module_& m) {
  using nb::arg;

  // ----------------------------------------------------------- MatmulConfig
  auto config = nb::class_<MatmulConfig>(
      m, "MatmulConfig",
      "BitBLAS' MatmulConfig: out[M, N] = A[M, K] . dequant(W)[N, K]^T (+ bias). Dtypes are names "
      "('float16', 'int4', 'nf4', ...) or framework dtypes; attributes read back as names. Fields are checked "
      "as a whole when a Matmul is made (docs/gemm.md).");
  config
      .def(
          "__init__",
          [](MatmulConfig* self, nb::handle M, nb::handle N, nb::handle K, nb::handle A_dtype, nb::handle W_dtype,
             nb::handle accum_dtype, nb::handle out_dtype, nb::handle layout, nb::handle with_bias,
             nb::handle group_size, nb::handle with_scaling, nb::handle with_zeros, nb::handle zeros_mode) {
            MatmulConfig c;
            c.M = m_arg(M);
            c.N = required_dim("N", N);
            c.K = required_dim("K", K);
            c.A_dtype = dtype_field(kConfig, "A_dtype", A_dtype);
            // BitBLAS: W_dtype defaults to A_dtype (unquantized weights).
            c.W_dtype = W_dtype.is_none() ? (c.A_dtype == DType::bf16  ? WeightType::bf16
                                             : c.A_dtype == DType::i8 ? WeightType::int8
                                                                      : WeightType::f16)
                                          : weight_type_arg(kConfig, W_dtype);
            c.accum_dtype = dtype_field(kConfig, "accum_dtype", accum_dtype);
            c.out_dtype = dtype_field(kConfig, "out_dtype", out_dtype);
            c.layout = str_arg(kConfig, "layout", layout);
            c.with_bias = bool_arg(kConfig, "with_bias", with_bias);
            c.group_size = int_arg(kConfig, "group_size", group_size);
            c.with_scaling = bool_arg(kConfig, "with_scaling", with_scaling);
            c.with_zeros = bool_arg(kConfig, "with_zeros", with_zeros);
            c.zeros_mode = zeros_mode_arg(kConfig, str_arg(kConfig, "zeros_mode", zeros_mode));
            new (self) MatmulConfig(std::move(c));
          },
          arg("M").none() = nb::none(), arg("N").none() = nb::none(), arg("K").none() = nb::none(), nb::kw_only(),
          arg("A_dtype") = "float16", arg("W_dtype").none() = nb::none(), arg("accum_dtype") = "float32",
          arg("out_dtype") = "float16", arg("layout").none() = "nt", arg("with_bias").none() = false,
          arg("group_size").none() = -1, arg("with_scaling").none() = false, arg("with_zeros").none() = false,
          arg("zeros_mode").none() = "original")
      .def_prop_rw(
          "M", [](const MatmulConfig& c) { return c.M; }, [](MatmulConfig& c, nb::handle v) { c.M = m_arg(v); },
          "The prepared batch sizes (a list; any M runs).")
      .def_prop_rw(
          "N", [](const MatmulConfig& c) { return c.N; },
          [](MatmulConfig& c, nb::handle v) { c.N = required_dim("N", v); })
      .def_prop_rw(
          "K", [](const MatmulConfig& c) { return c.K; },
          [](MatmulConfig& c, nb::handle v) { c.K = required_dim("K", v); })
      .def_prop_rw(
          "A_dtype", [](const MatmulConfig& c) { return std::string(dtype_name(c.A_dtype)); },
          [](MatmulConfig& c, nb::handle v) { c.A_dtype = dtype_field(kConfig, "A_dtype", v); })
      .def_prop_rw(
          "W_dtype", [](const MatmulConfig& c) { return std::string(weight_type_name(c.W_dtype)); },
          [](MatmulConfig& c, nb::handle v) { c.W_dtype = weight_type_arg(kConfig, v); })
      .def_prop_rw(
          "accum_dtype", [](const MatmulConfig& c) { return std::string(dtype_name(c.accum_dtype)); },
          [](MatmulConfig& c, nb::handle v) { c.accum_dtype = dtype_field(kConfig, "accum_dtype", v); })
      .def_prop_rw(
          "out_dtype", [](const MatmulConfig& c) { return std::string(dtype_name(c.out_dtype)); },
          [](MatmulConfig& c, nb::handle v) { c.out_dtype = dtype_field(kConfig, "out_dtype", v); })
      .def_prop_rw(
          "layout", [](const MatmulConfig& c) { return c.layout; },
          [](MatmulConfig& c, nb::handle v) { c.layout = str_arg(kConfig, "layout", v); })
      .def_prop_rw(
          "with_bias", [](const MatmulConfig& c) { return c.with_bias; },
          [](MatmulConfig& c, nb::handle v) { c.with_bias = bool_arg(kConfig, "with_bias", v); })
      .def_prop_rw(
          "group_size", [](const MatmulConfig& c) { return c.group_size; },
          [](MatmulConfig& c, nb::handle v) { c.group_size = int_arg(kConfig, "group_size", v); })
      .def_prop_rw(
          "with_scaling", [](const MatmulConfig& c) { return c.with_scaling; },
          [](MatmulConfig& c, nb::handle v) { c.with_scaling = bool_arg(kConfig, "with_scaling", v); })
      .def_prop_rw(
          "with_zeros", [](const MatmulConfig& c) { return c.with_zeros; },
          [](MatmulConfig& c, nb::handle v) { c.with_zeros = bool_arg(kConfig, "with_zeros", v); })
      .def_prop_rw(
          "zeros_mode", [](const MatmulConfig& c) { return std::string(zeros_mode_name(c.zeros_mode)); },
          [](MatmulConfig& c, nb::handle v) {
            c.zeros_mode = zeros_mode_arg(kConfig, str_arg(kConfig, "zeros_mode", v));
          })
      .def(
          "check", [](const MatmulConfig& c) { check(c); },
          "Raises ValueError/TypeError when the fields do not make a valid matmul (as Matmul(config) does).")
      .def("groups", &MatmulConfig::groups, "Scale groups along K: K // group_size, or 1 for group_size = -1.")
      .def("__repr__", &repr)
      .def(
          "__eq__",
          [](const MatmulConfig& a, nb::handle b) {
            return nb::isinstance<MatmulConfig>(b) && same_config(a, nb::cast<const MatmulConfig&>(b));
          },
          arg("other").none())
      .def("__copy__", [](const MatmulConfig& c) { return MatmulConfig(c); })
      .def(
          "__deepcopy__", [](const MatmulConfig& c, nb::handle) { return MatmulConfig(c); }, arg("memo").none());
  config.attr("__hash__") = nb::none();

  // --------------------------------------------------- QuantizedWeight (C++)
  nb::class_<QuantizedWeight>(m, "QuantizedWeight", "The unpacked weight (internal; lowbit.QuantizedWeight wraps it).")
      .def_rw("config", &QuantizedWeight::config)
      .def(
          "tensor", [](const QuantizedWeight& w, const std::string& name) { return py_or_none(quantized_tensor(w, name), name.c_str()); },
          arg("name"), "A tensor (weight, scale, zeros, bias, perm) as an exported host tensor, or None.");

  // ------------------------------------------------------ PackedWeight (C++)
  nb::class_<PackedWeight>(m, "PackedWeight", "A packed weight (internal; lowbit.PackedWeight wraps it).")
      .def_prop_ro("W_dtype", [](const PackedWeight& w) { return std::string(weight_type_name(w.format.type)); })
      .def_prop_ro("N", [](const PackedWeight& w) { return w.format.N; })
      .def_prop_ro("K", [](const PackedWeight& w) { return w.format.K; })
      .def_prop_ro("group_size", [](const PackedWeight& w) { return w.format.group_size; })
      .def_prop_ro("with_scaling", [](const PackedWeight& w) { return w.format.with_scaling; })
      .def_prop_ro("with_zeros", [](const PackedWeight& w) { return w.format.with_zeros; })
      .def_prop_ro("zeros_mode", [](const PackedWeight& w) { return std::string(zeros_mode_name(w.format.zeros_mode)); })
      .def_prop_ro("with_bias", [](const PackedWeight& w) { return w.format.with_bias; })
      .def_prop_ro("layout", [](const PackedWeight& w) { return std::string(weight_layout_name(w.format.layout)); })
      .def_prop_ro("device", [](const PackedWeight& w) { return device_tuple(w.device()); })
      .def_prop_ro("nbytes",
                   [](const PackedWeight& w) {
                     size_t n = 0;
                     for (const Tensor* t : {&w.qweight, &w.scale, &w.zeros, &w.bias, &w.perm}) {
                       if (t->defined()) n += t->nbytes();
                     }
                     return n;
                   })
      .def(
          "tensor", [](const PackedWeight& w, const std::string& name) { return py_or_none(packed_tensor(w, name), name.c_str()); },
          arg("name"), "A tensor (qweight, scale, zeros, bias, perm) as an exported tensor, or None.")
      .def(
          "dequantize", [](const PackedWeight& w) { return to_py(without_gil([&] { return dequantize_weight(w); })); },
          "dequantize_weight: fp32 [N, K] on the host, columns in A's order.")
      .def(
          "unpack", [](const PackedWeight& w) { return without_gil([&] { return unpack_weight(w); }); },
          "unpack_weight: the unpacked form, on the host.");

  // ------------------------------------------------------------ Matmul (C++)
  nb::class_<Matmul>(m, "Matmul", "The C++ Matmul (internal; lowbit.Matmul wraps it).")
      .def(
          "__init__",
          [](Matmul* self, const MatmulConfig& c, const std::string& device_type, int device_index) {
            new (self) Matmul(c, to_device(device_type, device_index));
          },
          arg("config"), arg("device_type"), arg("device_index"))
      .def_prop_ro("config", [](const Matmul& mm) { return mm.config(); })
      .def_prop_ro("device", [](const Matmul& mm) { return device_tuple(mm.device()); })
      .def_prop_ro("layout", [](const Matmul& mm) { return std::string(weight_layout_name(mm.layout())); })
      .def("prepared_m", &Matmul::prepared_m, arg("m"))
      .def("transform_weight", &transform_weight_py, arg("weight"), arg("scale").none(), arg("zeros").none(),
           arg("bias").none(), arg("perm").none())
      .def(
          "transform_quantized",
          [](const Matmul& mm, const QuantizedWeight& w) { return without_gil([&] { return mm.transform_weight(w); }); },
          arg("weight"))
      .def("forward", &forward_py, arg("A"), arg("W"), arg("out").none(), arg("stream") = 0,
           "out = A . dequant(W)^T (+ bias); returns the output (None when out was given).");

  m.def("import_gptq", &import_gptq_py, arg("qweight"), arg("qzeros"), arg("scales"), arg("g_idx").none(),
        arg("bias").none(), arg("bits"), arg("group_size"), arg("zero_plus_one"), arg("zeros_mode"));
  m.def("import_awq", &import_awq_py, arg("qweight"), arg("qzeros"), arg("scales"), arg("bias").none(),
        arg("group_size"));
  m.def("import_bnb_4bit", &import_bnb_4bit_py, arg("packed"), arg("absmax"), arg("quant_type"), arg("blocksize"),
        arg("shape"), arg("dtype"), arg("nested").none(), arg("bias").none());
  m.def("matmul_4bit", &matmul_4bit_py, arg("op"), arg("A"), arg("B"), arg("absmax"), arg("nested").none(),
        arg("quant_type"), arg("blocksize"), arg("shape"), arg("bias").none(), arg("out").none(), arg("stream") = 0,
        "bitsandbytes matmul_4bit / gemv_4bit (op) on a 4-bit state; returns the output (None when out was given).");
}

}  // namespace lowbit::python
