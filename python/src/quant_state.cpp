// QuantState <-> the bitsandbytes dict (include/lowbit/quant_state.h): the
// Python QuantState's fields in, a dict out, and back. The JSON, key names and
// validation all live in the C++ library; here values only change form.
#include "lowbit/quant_state.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "core/check.h"

namespace lowbit::python {
namespace {

using core::cat;

constexpr const char* kAsDict = "QuantState.as_dict";
constexpr const char* kFromDict = "QuantState.from_dict";

// (absmax, code, blocksize, dtype, offset) of state2.
using NestedFields = std::tuple<InArray, InArray, int64_t, std::string, double>;

Tensor host_copy(const char* op, const char* arg, const InArray& a) {
  const TensorRef ref = to_ref(op, arg, a);
  return without_gil([&] { return Tensor::copy_of(ref, Device::cpu()); });
}

nb::dict as_dict(const InArray& absmax, const InArray& code, int64_t blocksize, const std::vector<int64_t>& shape,
                 const std::string& dtype, const std::string& quant_type, const std::optional<NestedFields>& nested,
                 bool packed) {
  QuantState s;
  s.absmax = host_copy(kAsDict, "absmax", absmax);
  s.code = host_copy(kAsDict, "code", code);
  s.blocksize = blocksize;
  s.shape = shape;
  s.dtype = parse_dtype_arg(kAsDict, "dtype", dtype);
  s.quant_type = quant_type;
  if (nested) {
    const auto& [absmax2, code2, blocksize2, dtype2, offset] = *nested;
    auto s2 = std::make_shared<QuantState>();
    s2->absmax = host_copy(kAsDict, "state2.absmax", absmax2);
    s2->code = host_copy(kAsDict, "state2.code", code2);
    s2->blocksize = blocksize2;
    s2->dtype = parse_dtype_arg(kAsDict, "state2.dtype", dtype2);
    s2->shape = {s.absmax.numel()};
    s.state2 = std::move(s2);
    s.offset = Tensor::empty({1}, DType::f32);
    s.offset.ptr<float>()[0] = static_cast<float>(offset);
  }
  const QuantStateDict d = quant_state_as_dict(s, packed);
  nb::dict out;
  for (const auto& [key, value] : d) {
    const nb::str k(key.c_str());
    if (const auto* t = std::get_if<Tensor>(&value)) {
      out[k] = to_py(*t, key.c_str());
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      out[k] = *i;
    } else if (const auto* f = std::get_if<double>(&value)) {
      out[k] = *f;
    } else if (const auto* str = std::get_if<std::string>(&value)) {
      out[k] = *str;
    } else {
      const auto& v = std::get<std::vector<int64_t>>(value);
      nb::list l;
      for (int64_t e : v) l.append(e);
      out[k] = nb::tuple(l);  // bitsandbytes: tuple(self.shape)
    }
  }
  return out;
}

// A non-tensor value of the unpacked form: int, float, str, or a list/tuple of ints.
QuantStateValue value_of(const std::string& key, nb::handle v) {
  if (nb::isinstance<nb::bool_>(v)) {
    core::fail(ErrorCode::format_error, cat(kFromDict, ": '", key, "' must not be a bool"));
  }
  if (nb::isinstance<nb::int_>(v)) return nb::cast<int64_t>(v);
  if (nb::isinstance<nb::float_>(v)) return nb::cast<double>(v);
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) {
    std::vector<int64_t> out;
    for (nb::handle e : v) {
      if (!nb::isinstance<nb::int_>(e) || nb::isinstance<nb::bool_>(e)) {
        core::fail(ErrorCode::format_error,
                   cat(kFromDict, ": '", key, "' must be a list of integers (got an element of type ",
                       nb::cast<std::string>(nb::str(e.type().attr("__name__"))), ")"));
      }
      out.push_back(nb::cast<int64_t>(e));
    }
    return out;
  }
  core::fail(ErrorCode::format_error, cat(kFromDict, ": '", key, "' must be a tensor, int, float, str or list (got ",
                                          nb::cast<std::string>(nb::str(v.type().attr("__name__"))), ")"));
}

nb::dict from_dict(const std::vector<std::pair<std::string, InArray>>& tensors, const nb::dict& values,
                   const std::string& device_type, int device_index) {
  QuantStateDict d;
  for (const auto& [key, a] : tensors) d[key] = host_copy(kFromDict, key.c_str(), a);
  for (auto [k, v] : values) {
    const std::string key = nb::cast<std::string>(nb::str(k));
    d[key] = value_of(key, v);
  }
  const Device device = to_device(device_type, device_index);
  const QuantState s = without_gil([&] { return quant_state_from_dict(d, device); });
  nb::dict out;
  out["absmax"] = to_py(s.absmax, "absmax");
  out["code"] = to_py(s.code, "code");
  out["blocksize"] = s.blocksize;
  out["shape"] = nb::tuple(nb::cast(s.shape));
  out["dtype"] = std::string(dtype_name(s.dtype));
  out["quant_type"] = s.quant_type;
  if (s.nested()) {
    out["offset"] = to_py(s.offset.reshaped(Shape{}), "offset");
    out["absmax2"] = to_py(s.state2->absmax, "absmax2");
    out["code2"] = to_py(s.state2->code, "code2");
    out["blocksize2"] = s.state2->blocksize;
    out["dtype2"] = std::string(dtype_name(s.state2->dtype));
  }
  return out;
}

}  // namespace

void bind_quant_state(nb::module_& m) {
  using nb::arg;
  m.def("quant_state_as_dict", &as_dict, arg("absmax"), arg("code"), arg("blocksize"), arg("shape"), arg("dtype"),
        arg("quant_type"), arg("nested").none(), arg("packed"),
        "bitsandbytes QuantState.as_dict; tensors come back on the CPU as exported tensors.");
  m.def("quant_state_from_dict", &from_dict, arg("tensors"), arg("values"), arg("device_type"), arg("device_index"),
        "bitsandbytes QuantState.from_dict: the state's fields, tensors on the device as exported tensors.");
}

}  // namespace lowbit::python
