// lowbit._lowbit: the nanobind extension under the lowbit Python package.
// lowbit::Error becomes the Python exception its code calls for, carrying the
// C++ message unchanged.
#include <Python.h>

#include <exception>

#include "arrays.h"
#include "lowbit/error.h"

namespace {

PyObject* exception_type(lowbit::ErrorCode code) {
  using lowbit::ErrorCode;
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::device_mismatch:
    case ErrorCode::format_error: return PyExc_ValueError;
    case ErrorCode::unsupported_dtype: return PyExc_TypeError;
    case ErrorCode::out_of_memory: return PyExc_MemoryError;
    case ErrorCode::io_error: return PyExc_OSError;
    case ErrorCode::no_backend:
    case ErrorCode::device_error:
    case ErrorCode::internal:
    default: return PyExc_RuntimeError;
  }
}

}  // namespace

NB_MODULE(_lowbit, m) {
  namespace nb = nanobind;
  m.doc() = "lowbit's C++ ops (internal; use the lowbit package)";
  m.attr("__version__") = LOWBIT_PY_VERSION;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const lowbit::Error& e) {
      PyErr_SetString(exception_type(e.code()), e.what());
    }
  });
  lowbit::python::bind_arrays(m);
  lowbit::python::bind_quant(m);
  lowbit::python::bind_tensorwise(m);
  lowbit::python::bind_quant_state(m);
  lowbit::python::bind_gemm(m);
  lowbit::python::bind_fp8_gemm(m);
  lowbit::python::bind_int8_gemm(m);
  lowbit::python::bind_optim(m);
  lowbit::python::bind_sparse(m);
  lowbit::python::bind_attention(m);
}
