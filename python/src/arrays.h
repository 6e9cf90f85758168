// Arrays across the Python boundary: DLPack in (nb::ndarray, zero-copy), owned
// lowbit::Tensors out (zero-copy, the array keeps the tensor alive), streams,
// and the helper that runs an op with the GIL released. The Python layer
// (lowbit/_arrays.py) turns framework objects into these and back.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/allocation.h"
#include "core/check.h"
#include "lowbit/ops/quant.h"
#include "lowbit/tensor.h"

namespace lowbit::python {

namespace nb = nanobind;

// An array argument as lowbit/_arrays.py passes it: (array, as) where `as` is
//   ""       the dtype DLPack gives,
//   a name   a lowbit dtype of the same width that the elements really hold
//            (NumPy shows bfloat16 as uint16, fp8 as uint8; see _arrays.py),
//   "bytes"  the array's memory as flat uint8 (4-bit codes in any storage dtype).
using InArray = std::pair<nb::ndarray<nb::ro>, std::string>;
// The same for outputs the caller provides (out=, absmax=): must be writable.
using OutArray = std::pair<nb::ndarray<>, std::string>;

// A TensorRef over the array's memory. Throws lowbit::Error naming op and arg.
TensorRef to_ref(const char* op, const char* arg, const InArray& a);
TensorRef to_ref(const char* op, const char* arg, const OutArray& a);
// Absent (a default TensorRef) when not given.
TensorRef to_ref(const char* op, const char* arg, const std::optional<InArray>& a);

// Whether _trace records the arrays converted (tests: zero-copy checks).
bool tracing();

// Entry i of list argument `list` as to_ref converts it, named "list[i]":
// the name is built only for an error or a trace (lists of hundreds).
template <class Array>
TensorRef entry_ref(const char* op, const char* list, size_t i, const Array& a) {
  if (!tracing()) {
    try {
      return to_ref(op, list, a);
    } catch (const Error&) {  // again, for the message with the entry's name
    }
  }
  return to_ref(op, core::cat(list, "[", i, "]").c_str(), a);
}

// (array, dtype name, DLPack device type, device index): `t` handed to
// Python without a copy. Memory a framework allocated for the call (see
// CallContext) goes back as that framework's own array; other host memory as
// a NumPy array and other device memory as a DLPack capsule, owning a
// reference to the tensor (bfloat16 travels as int16 and fp8 as uint8, what
// every framework can import; the name says what the bits are).
nb::tuple to_py(const Tensor& t, const char* what = "out");

// A cudaStream_t handle from Python (0: the legacy default stream).
inline Stream to_stream(uintptr_t handle) { return Stream{reinterpret_cast<void*>(handle)}; }

// What lowbit/_arrays.py passes as an op's `stream`: an int (the stream), or
// (stream, alloc) for frameworks that own their GPU memory (PyTorch, CuPy),
// where alloc allocates with the framework, so that its memory statistics,
// out-of-memory handling and CUDA-graph pools see lowbit's results and
// scratch like its own ops'. alloc is either a callable
// alloc(shape, dtype name, device index, stream) -> (array, data pointer),
// or the fast form (factory, {dtype name: dtype}, device, device index) for
// factory(*sizes, dtype=, device=) on the framework's current stream, whose
// result has data_ptr() (torch.empty).
struct CallContext {
  Stream stream;
  nb::object alloc;  // none: lowbit's own stream-ordered allocator
};
CallContext call_context(nb::handle stream);

// While alive, the CUDA results and scratch of this thread's op come from the
// call's framework (nothing without alloc). Open it with the GIL held.
class CallScope {
 public:
  explicit CallScope(const CallContext& context);

 private:
  std::optional<core::AllocationScope> scope_;
};

Device to_device(const std::string& type, int index);

// `t` where it is, or a copy on `device` kept alive in `keep` (for small
// auxiliary tensors such as code maps, as bitsandbytes moves `code`).
TensorRef place(const TensorRef& t, Device device, Stream stream, std::vector<Tensor>& keep);

// A code map argument on `device`: the shared dynamic map (ops::code_map_on:
// no allocation or copy per call) for None, else the
// array where it is or a copy kept alive in `keep` (place).
TensorRef code_arg(const char* op, const char* arg, const std::optional<InArray>& code, Device device, Stream stream,
                   std::vector<Tensor>& keep);

// (code or None for the dynamic map, absmax, offset, blocksize) of a
// double-quantized absmax, as lowbit/functional.py's _nested_arg passes it.
using NestedIn = std::tuple<std::optional<InArray>, InArray, InArray, int64_t>;
// The NestedAbsmax view of it (absent for None); the code map and offset are
// moved to `device` when elsewhere, kept alive in `keep`.
NestedAbsmax nested_arg(const char* op, const std::optional<NestedIn>& nested, Device device, Stream stream,
                        std::vector<Tensor>& keep);

// "nf4" / "fp4"; throws invalid_argument naming `op` otherwise.
Quant4Type quant4_type(const char* op, const std::string& name);

// Scratch of `bytes` on `device` for `stream` (undefined when 0).
Tensor workspace(size_t bytes, Device device, Stream stream);

// check + workspace + run with the GIL released (CPU ops run OpenMP threads).
template <class Args>
void run_op(const Args& args, Device device, Stream stream) {
  nb::gil_scoped_release release;
  check(args);
  const Tensor ws = workspace(workspace_size(args), device, stream);
  run(args, ws.data(), stream);
}

// Calls f() with the GIL released.
template <class F>
auto without_gil(F&& f) {
  nb::gil_scoped_release release;
  return f();
}

// Parses a lowbit dtype name ("float32", "bfloat16", ...); throws
// unsupported_dtype naming `op` and `arg` otherwise.
DType parse_dtype_arg(const char* op, const char* arg, const std::string& name);

void bind_arrays(nb::module_& m);
void bind_quant(nb::module_& m);
void bind_tensorwise(nb::module_& m);
void bind_quant_state(nb::module_& m);
void bind_gemm(nb::module_& m);
void bind_fp8_gemm(nb::module_& m);
void bind_int8_gemm(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_sparse(nb::module_& m);
void bind_attention(nb::module_& m);

}  // namespace lowbit::python
