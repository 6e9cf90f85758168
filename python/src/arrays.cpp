#include "arrays.h"

#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string_view>

#include "core/check.h"
#include "core/dlpack.h"
#include "lowbit/c/lowbit.h"  // the fp8 type codes
#include "lowbit/managed.h"
#include "ops/quant/common.h"

namespace lowbit::python {
namespace {

using core::cat;

// --- tracing: which memory the ops read and wrote (tests check zero-copy) ---
// Touched only with the GIL held (argument conversion and export).
struct TraceRecord {
  std::string op, arg;
  uintptr_t ptr;
  std::string device;
};
bool g_tracing = false;
std::vector<TraceRecord> g_trace;

void trace(const char* op, const char* arg, const void* ptr, Device device) {
  if (g_tracing) g_trace.push_back({op, arg, reinterpret_cast<uintptr_t>(ptr), device.str()});
}

// DLPack codes of the lowbit dtypes a caller may name in `as`.
DLDataType dl_type_of(DType d) {
  switch (d) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::f8_e4m3: return {LOWBIT_DL_FLOAT8_E4M3FN, 8, 1};
    case DType::f8_e5m2: return {LOWBIT_DL_FLOAT8_E5M2, 8, 1};
    case DType::i8: return {kDLInt, 8, 1};
    case DType::u8: return {kDLUInt, 8, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    default: break;
  }
  core::fail(ErrorCode::unsupported_dtype, cat("lowbit: dtype ", dtype_name(d), " cannot cross the Python boundary"));
}

template <class Array>
bool row_major(const Array& a) {
  if (a.size() == 0) return true;  // any strides: no element is out of place
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

template <class Array>
TensorRef convert(const char* op, const char* arg, const Array& a, const std::string& as) {
  DLTensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));  // data() includes byte_offset
  t.device = DLDevice{static_cast<DLDeviceType>(a.device_type()), a.device_id()};
  t.ndim = static_cast<int>(a.ndim());
  t.dtype = DLDataType{a.dtype().code, a.dtype().bits, a.dtype().lanes};
  t.shape = const_cast<int64_t*>(a.shape_ptr());
  t.strides = const_cast<int64_t*>(a.stride_ptr());
  t.byte_offset = 0;

  TensorRef ref;
  if (as.empty()) {
    ref = core::to_ref(op, arg, &t);
  } else if (as == "bytes") {
    // Packed 4-bit codes stored in another dtype (bitsandbytes' quant_storage):
    // the memory as flat uint8, whatever the element type.
    // Counted here, not by nanobind's nbytes(), which wraps for a shape too large.
    const Shape shape(t.shape, static_cast<size_t>(t.ndim));
    const int64_t count = core::checked_numel(op, arg, shape, DType::u8);
    const int64_t item = (t.dtype.bits * t.dtype.lanes + 7) / 8;
    LOWBIT_REQUIRE(count <= std::numeric_limits<int64_t>::max() / std::max<int64_t>(item, 1),
                   ErrorCode::invalid_argument, op, ": ", arg, " shape ", core::shape_str(shape), " of ", item,
                   "-byte elements is too large: its size in bytes must fit in int64");
    LOWBIT_REQUIRE(row_major(a), ErrorCode::invalid_argument, op, ": ", arg, " must be contiguous");
    int64_t nbytes = count * item;
    t.dtype = DLDataType{kDLUInt, 8, 1};
    t.ndim = 1;
    t.shape = &nbytes;
    t.strides = nullptr;
    ref = core::to_ref(op, arg, &t);
  } else {
    const DType d = parse_dtype_arg(op, arg, as);
    const DLDataType want = dl_type_of(d);
    LOWBIT_REQUIRE(t.dtype.bits == want.bits && t.dtype.lanes == 1, ErrorCode::unsupported_dtype, op, ": ", arg,
                   " viewed as ", as, " must hold ", static_cast<int>(want.bits), "-bit elements (got ",
                   static_cast<int>(t.dtype.bits), "-bit DLPack type code ", static_cast<int>(t.dtype.code), ")");
    t.dtype = want;
    ref = core::to_ref(op, arg, &t);
  }
  trace(op, arg, ref.data, ref.device);
  return ref;
}

// The DLPack dtype a tensor is exported as (see to_py).
nb::dlpack::dtype export_type(DType d) {
  using nb::dlpack::dtype_code;
  auto dt = [](dtype_code c, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1};
  };
  switch (d) {
    case DType::f32: return dt(dtype_code::Float, 32);
    case DType::f16: return dt(dtype_code::Float, 16);
    case DType::bf16: return dt(dtype_code::Int, 16);
    case DType::f8_e4m3:
    case DType::f8_e5m2:
    case DType::u8: return dt(dtype_code::UInt, 8);
    case DType::i8: return dt(dtype_code::Int, 8);
    case DType::i32: return dt(dtype_code::Int, 32);
    case DType::i64: return dt(dtype_code::Int, 64);
    default: break;
  }
  core::fail(ErrorCode::internal, cat("lowbit: cannot export a ", dtype_name(d), " tensor to Python"));
}

// The reference a framework-allocated tensor holds on its array; dropped with
// the GIL, unless the interpreter is already gone (the framework freed it).
struct PyOwner {
  PyObject* array;
  TensorRef spec;  // the array's shape and dtype
  void operator()(void* /*data*/) const noexcept {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) return;
    const PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(array);
    PyGILState_Release(gil);
  }
};

// The fast form of alloc (see CallContext): factory(*sizes, dtype=, device=)
// called here, then its data_ptr() (no Python frame between; sizes as ints,
// which PyTorch parses faster than a tuple).
std::shared_ptr<void> factory_allocate(nb::handle alloc, const TensorRef& spec) {
  const nb::tuple form = nb::borrow<nb::tuple>(alloc);
  LOWBIT_REQUIRE(nb::cast<int>(form[3]) == spec.device.index, ErrorCode::internal,
                 "lowbit: a call's allocator got a request for device ", spec.device.index);
  const std::string name(dtype_name(spec.dtype));
  PyObject* dtype = PyDict_GetItemString(form[1].ptr(), name.c_str());  // borrowed
  LOWBIT_REQUIRE(dtype != nullptr, ErrorCode::internal, "lowbit: no framework dtype for ", name);
  static PyObject* const kwnames = Py_BuildValue("(ss)", "dtype", "device");  // kept for the process
  static PyObject* const data_ptr = PyUnicode_InternFromString("data_ptr");
  std::vector<nb::object> sizes;
  std::array<PyObject*, kMaxDims + 3> args{};  // args[0]: room for PY_VECTORCALL_ARGUMENTS_OFFSET
  size_t n = 0;
  if (spec.ndim == 0) {
    sizes.push_back(nb::steal(PyTuple_New(0)));
  } else {
    for (int i = 0; i < spec.ndim; ++i) sizes.push_back(nb::int_(spec.shape[static_cast<size_t>(i)]));
  }
  for (const nb::object& d : sizes) args[++n] = d.ptr();
  args[n + 1] = dtype;
  args[n + 2] = form[2].ptr();
  const nb::object t = nb::steal(
      PyObject_Vectorcall(form[0].ptr(), args.data() + 1, n | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames));
  if (!t.is_valid()) throw nb::python_error();
  PyObject* self[2] = {nullptr, t.ptr()};
  const nb::object ptr =
      nb::steal(PyObject_VectorcallMethod(data_ptr, self + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  if (!ptr.is_valid()) throw nb::python_error();
  void* data = reinterpret_cast<void*>(nb::cast<uintptr_t>(ptr));
  return std::shared_ptr<void>(data, PyOwner{t.inc_ref().ptr(), spec});
}

// core::AllocateFn over the call's Python alloc function. A framework error
// (its out-of-memory error too) propagates to the caller unchanged.
std::shared_ptr<void> framework_allocate(void* ctx, const TensorRef& spec, size_t /*bytes*/, Stream stream) {
  nb::gil_scoped_acquire gil;
  nb::handle alloc(static_cast<PyObject*>(ctx));
  if (PyTuple_Check(alloc.ptr())) return factory_allocate(alloc, spec);
  nb::tuple shape = nb::steal<nb::tuple>(PyTuple_New(spec.ndim));
  for (int i = 0; i < spec.ndim; ++i) {
    PyTuple_SET_ITEM(shape.ptr(), i, PyLong_FromLongLong(spec.shape[static_cast<size_t>(i)]));
  }
  const nb::object r = alloc(shape, std::string(dtype_name(spec.dtype)), spec.device.index,
                             reinterpret_cast<uintptr_t>(stream.handle));
  const nb::tuple pair = nb::borrow<nb::tuple>(r);
  void* data = reinterpret_cast<void*>(nb::cast<uintptr_t>(pair[1]));
  return std::shared_ptr<void>(data, PyOwner{pair[0].inc_ref().ptr(), spec});
}

}  // namespace

CallContext call_context(nb::handle stream) {
  if (PyTuple_Check(stream.ptr())) {
    const nb::tuple t = nb::borrow<nb::tuple>(stream);
    LOWBIT_REQUIRE(t.size() == 2, ErrorCode::internal, "lowbit: a call context is (stream, alloc)");
    return CallContext{to_stream(nb::cast<uintptr_t>(t[0])), nb::borrow(t[1])};
  }
  return CallContext{to_stream(nb::cast<uintptr_t>(stream)), nb::none()};
}

CallScope::CallScope(const CallContext& context) {
  if (!context.alloc.is_none()) scope_.emplace(&framework_allocate, context.alloc.ptr());
}

DType parse_dtype_arg(const char* op, const char* arg, const std::string& name) {
  DType d{};
  LOWBIT_REQUIRE(parse_dtype(name, &d), ErrorCode::unsupported_dtype, op, ": ", arg, " '", name,
                 "' is not a lowbit dtype (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, uint8, "
                 "int32, int64)");
  return d;
}

TensorRef to_ref(const char* op, const char* arg, const InArray& a) { return convert(op, arg, a.first, a.second); }
TensorRef to_ref(const char* op, const char* arg, const OutArray& a) { return convert(op, arg, a.first, a.second); }
TensorRef to_ref(const char* op, const char* arg, const std::optional<InArray>& a) {
  return a ? to_ref(op, arg, *a) : TensorRef{};
}

bool tracing() { return g_tracing; }

nb::tuple to_py(const Tensor& t, const char* what) {
  const int device_type = t.device().is_cuda() ? static_cast<int>(kDLCUDA) : static_cast<int>(kDLCPU);
  const PyOwner* framework = std::get_deleter<PyOwner>(t.storage());
  if (framework != nullptr && t.data() == t.storage().get() && t.dtype() == framework->spec.dtype) {
    trace("", what, t.data(), t.device());
    nb::object array = nb::borrow(framework->array);
    const Shape have = framework->spec.sizes();
    if (!std::equal(have.begin(), have.end(), t.sizes().begin(), t.sizes().end())) {
      array = array.attr("reshape")(nb::tuple(nb::cast(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()))));
    }
    return nb::make_tuple(array, std::string(dtype_name(t.dtype())), device_type, t.device().index);
  }
  const nb::dlpack::dtype dt = export_type(t.dtype());
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  auto* owned = new Tensor(t);
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  trace("", what, t.data(), t.device());
  // Host memory as a writable NumPy array (through the buffer protocol; a
  // NumPy array made from a DLPack capsule would be read-only), device memory
  // as a plain DLPack capsule, to which _arrays.py gives the __dlpack__ /
  // __dlpack_device__ methods the frameworks import from.
  nb::object array;
  if (t.device().is_cpu()) {
    array = nb::cast(nb::ndarray<nb::numpy>(t.data(), shape.size(), shape.data(), owner, nullptr, dt, device_type),
                     nb::rv_policy::reference);
  } else {
    array =
        nb::cast(nb::ndarray<>(t.data(), shape.size(), shape.data(), owner, nullptr, dt, device_type, t.device().index),
                 nb::rv_policy::reference);
  }
  return nb::make_tuple(array, std::string(dtype_name(t.dtype())), device_type, t.device().index);
}

Device to_device(const std::string& type, int index) {
  if (type == "cpu") return Device::cpu();
  LOWBIT_REQUIRE(type == "cuda", ErrorCode::invalid_argument, "lowbit: device type must be cpu or cuda (got '", type,
                 "')");
  LOWBIT_REQUIRE(index >= 0, ErrorCode::invalid_argument, "lowbit: cuda device index must be >= 0 (got ", index, ")");
  return Device::cuda(index);
}

TensorRef place(const TensorRef& t, Device device, Stream stream, std::vector<Tensor>& keep) {
  if (!t.present() || t.device == device) return t;
  keep.push_back(without_gil([&] { return Tensor::copy_of(t, device, stream); }));
  return keep.back().ref();
}

TensorRef code_arg(const char* op, const char* arg, const std::optional<InArray>& code, Device device, Stream stream,
                   std::vector<Tensor>& keep) {
  return code ? place(to_ref(op, arg, *code), device, stream, keep) : ops::code_map_on("dynamic", device).ref();
}

NestedAbsmax nested_arg(const char* op, const std::optional<NestedIn>& nested, Device device, Stream stream,
                        std::vector<Tensor>& keep) {
  if (!nested) return {};
  const auto& [code, absmax, offset, blocksize] = *nested;
  return NestedAbsmax{code_arg(op, "state2.code", code, device, stream, keep), to_ref(op, "state2.absmax", absmax),
                      place(to_ref(op, "offset", offset), device, stream, keep), blocksize};
}

Quant4Type quant4_type(const char* op, const std::string& name) {
  if (name == "nf4") return Quant4Type::nf4;
  if (name == "fp4") return Quant4Type::fp4;
  core::fail(ErrorCode::invalid_argument, cat(op, ": quant_type must be 'nf4' or 'fp4' (got '", name, "')"));
}

Tensor workspace(size_t bytes, Device device, Stream stream) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, device, stream);
}

void bind_arrays(nb::module_& m) {
  m.def(
      "to_device",
      [](const InArray& a, const std::string& type, int index, uintptr_t stream) {
        const TensorRef ref = to_ref("to_device", "array", a);
        const Device device = to_device(type, index);
        return to_py(without_gil([&] { return Tensor::copy_of(ref, device, to_stream(stream)); }));
      },
      nb::arg("array"), nb::arg("device_type"), nb::arg("device_index"), nb::arg("stream") = 0,
      "A contiguous copy of `array` on the device (device_type 'cpu' or 'cuda'), as exported tensors.");
  m.def(
      "synchronize", [](uintptr_t stream) { without_gil([&] { synchronize(to_stream(stream)); }); },
      nb::arg("stream") = 0, "Waits for the work enqueued on a CUDA stream (0: the default stream).");
  m.def(
      "empty_managed",
      [](const std::vector<int64_t>& shape, const std::string& dtype, int index) {
        const DType d = parse_dtype_arg("get_paged", "dtype", dtype);
        const Shape s(shape.data(), shape.size());
        return to_py(without_gil([&] { return empty_managed(s, d, Device::cuda(index)); }), "paged");
      },
      nb::arg("shape"), nb::arg("dtype"), nb::arg("device_index"),
      "An uninitialized tensor of CUDA managed memory preferring cuda:device_index, as an exported tensor.");
  m.def(
      "prefetch",
      [](const InArray& a, const std::string& type, int index, uintptr_t stream) {
        const TensorRef ref = to_ref("prefetch_tensor", "A", a);
        const Device target = to_device(type, index);
        without_gil([&] { prefetch(ref, target, to_stream(stream)); });
      },
      nb::arg("array"), nb::arg("device_type"), nb::arg("device_index"), nb::arg("stream") = 0,
      "Moves the pages of a managed-memory array to the device ('cpu': the host), ordered on the stream.");
  m.def("cuda_device_count", &cuda_device_count, "CUDA devices visible to lowbit (0 without the CUDA backend).");
#if defined(LOWBIT_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.def(
      "_trace",
      [](bool enable) {
        std::vector<std::tuple<std::string, std::string, uintptr_t, std::string>> out;
        for (const TraceRecord& r : g_trace) out.emplace_back(r.op, r.arg, r.ptr, r.device);
        g_trace.clear();
        g_tracing = enable;
        return out;
      },
      nb::arg("enable"),
      "Testing aid: returns the (op, argument, data pointer, device) records gathered since the last call, clears "
      "them and turns recording on or off. Arguments are recorded as the op sees them, outputs as handed out.");
}

}  // namespace lowbit::python
