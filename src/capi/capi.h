// Shared machinery of the C ABI: the DLPack conversion (core/dlpack.h), the
// thread-local last-error message, and the guard that turns every exception
// into a lowbit_status.
#pragma once

#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>

#include "core/dlpack.h"
#include "lowbit/c/lowbit.h"
#include "lowbit/error.h"
#include "lowbit/ops/quant.h"
#include "lowbit/tensor.h"

namespace lowbit::capi {

// Records the concatenated parts as this thread's last error. Never throws:
// when even that allocation fails, a fixed message is kept instead.
void set_last_error(std::initializer_list<const char*> parts) noexcept;
void clear_last_error() noexcept;
const char* last_error() noexcept;

// The int a C caller passed for an enum argument, read from its bytes: C
// allows any int there, and loading an out-of-range value as the C++ enum
// type is undefined behaviour.
template <class E>
int c_enum_value(const E& e) noexcept {
  static_assert(sizeof(E) == sizeof(int), "C enums of the ABI are int-sized");
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// LOWBIT_QUANT4_NF4 / _FP4 as Quant4Type; invalid_argument naming `op` otherwise
// (by reference: the value is read from its bytes, see c_enum_value).
Quant4Type quant4_type(const char* op, const lowbit_quant4_type& t);

// DLPack tensors, devices and dtypes, both ways (core/dlpack.h).
using core::to_device;
using core::to_dl;
using core::to_dtype;
using core::to_ref;

// check, then run with scratch allocated on `device` when the op needs any.
template <class Args>
void run_op(const Args& args, Device device, void* stream) {
  check(args);
  const Stream s{stream};
  const size_t bytes = workspace_size(args);
  if (bytes == 0) {
    run(args, nullptr, s);
    return;
  }
  // Stream-ordered: given back on `s` after the op's work, without waiting.
  const Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, device, s);
  run(args, scratch.data(), s);
}

// Throws invalid_argument "<op>: <arg> must not be NULL" when p is null.
void require_not_null(const char* op, const char* arg, const void* p);

// The nested-absmax arguments of the dequantize ops (absent when `n` is NULL;
// when given, all three tensors are required).
NestedAbsmax to_nested(const char* op, const lowbit_nested_absmax* n);

// Runs `body` (returning void); maps whatever it throws to a status and the
// thread's message, so that no exception crosses the C ABI.
template <class F>
lowbit_status guarded(const char* op, F&& body) noexcept {
  try {
    body();
    clear_last_error();
    return LOWBIT_OK;
  } catch (const Error& e) {
    set_last_error({e.what()});
    return static_cast<lowbit_status>(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error({op, ": out of host memory"});
    return LOWBIT_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error({op, ": internal error: ", e.what()});
    return LOWBIT_INTERNAL;
  } catch (...) {
    set_last_error({op, ": internal error: an exception that is not a std::exception"});
    return LOWBIT_INTERNAL;
  }
}

}  // namespace lowbit::capi
