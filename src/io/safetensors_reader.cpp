// SafetensorsFile: a validated header over a read-only memory map. Tensor
// data is never copied unless asked (load()); views point into the mapping.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "io/mapped_file.h"
#include "lowbit/io.h"

namespace lowbit::io {

using core::cat;

struct SafetensorsFile::Impl {
  std::filesystem::path path;
  detail::MappedFile map;
  SafetensorsHeader header;
  std::map<std::string, size_t, std::less<>> by_name;

  explicit Impl(const std::filesystem::path& p) : path(p), map(p) {
    header = parse_safetensors_header(header_bytes(), map.size(), path.string());
    for (size_t i = 0; i < header.tensors.size(); ++i) by_name.emplace(header.tensors[i].name, i);
  }

  // The length field and the header it gives (as much of it as the file
  // holds), read from the file: the parser reports what is missing.
  std::vector<uint8_t> header_bytes() const {
    std::vector<uint8_t> b(std::min<uint64_t>(map.size(), 8));
    map.read(0, b);
    if (b.size() < 8) return b;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b[static_cast<size_t>(i)];
    if (n > kMaxHeaderBytes) return b;
    b.resize(std::min<uint64_t>(map.size(), 8 + n));
    map.read(8, std::span<uint8_t>(b).subspan(8));
    return b;
  }
};

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.impl_ = std::make_shared<const Impl>(path);
  return f;
}

const std::filesystem::path& SafetensorsFile::path() const { return impl_->path; }
uint64_t SafetensorsFile::file_size() const { return impl_->map.size(); }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return impl_->header.tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->header.metadata; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->header.tensors[it->second];
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const TensorInfo* t = find(name);
  LOWBIT_REQUIRE(t != nullptr, ErrorCode::format_error, impl_->path.string(), ": no tensor '", name, "'");
  return *t;
}

std::span<const uint8_t> SafetensorsFile::bytes(std::string_view name) const {
  const TensorInfo& t = info(name);
  return impl_->map.bytes().subspan(impl_->header.data_offset + t.begin, t.nbytes());
}

void SafetensorsFile::release(std::string_view name) const {
  const TensorInfo& t = info(name);
  impl_->map.release(impl_->header.data_offset + t.begin, t.nbytes());
}

std::vector<uint8_t> SafetensorsFile::read(std::string_view name) const {
  const TensorInfo& t = info(name);
  std::vector<uint8_t> data(t.nbytes());
  impl_->map.read(impl_->header.data_offset + t.begin, data);
  return data;
}

namespace {

DType lowbit_dtype(const std::filesystem::path& path, const TensorInfo& t) {
  const auto d = dtype_from_safetensors(t.dtype);
  LOWBIT_REQUIRE(d.has_value(), ErrorCode::unsupported_dtype, path.string(), ": tensor '", t.name, "' is ", t.dtype,
                 ", which lowbit has no element type for (its bytes can still be copied)");
  LOWBIT_REQUIRE(t.shape.size() <= static_cast<size_t>(kMaxDims), ErrorCode::unsupported_dtype, path.string(),
                 ": tensor '", t.name, "' has ", t.shape.size(), " dimensions (lowbit tensors have at most ", kMaxDims,
                 ")");
  return *d;
}

}  // namespace

TensorRef SafetensorsFile::view(std::string_view name) const {
  const TensorInfo& t = info(name);
  const DType d = lowbit_dtype(impl_->path, t);
  const auto data = bytes(name);
  const size_t align = std::max<size_t>(1, static_cast<size_t>(dtype_bits(d) / 8));
  LOWBIT_REQUIRE(reinterpret_cast<uintptr_t>(data.data()) % align == 0, ErrorCode::format_error, impl_->path.string(),
                 ": tensor '", t.name, "' starts at file offset ", impl_->header.data_offset + t.begin,
                 ", not aligned to its ", align,
                 "-byte elements (safetensors writers align them; load() copies instead)");
  // The mapping is read-only: ops take `const TensorRef&` inputs and never
  // write them, so the const_cast does not open a way to modify the file.
  return TensorRef::contiguous(const_cast<uint8_t*>(data.data()), d, Shape(t.shape.data(), t.shape.size()));
}

Tensor SafetensorsFile::load(std::string_view name, Device device) const {
  const TensorInfo& t = info(name);
  const DType d = lowbit_dtype(impl_->path, t);
  Tensor host = Tensor::empty(Shape(t.shape.data(), t.shape.size()), d);
  impl_->map.read(impl_->header.data_offset + t.begin, {static_cast<uint8_t*>(host.data()), t.nbytes()});
  return device.is_cpu() ? host : host.to(device);
}

}  // namespace lowbit::io
