// SafetensorsWriter: header first (from declared sizes), tensors streamed in
// any order with positional writes, all into a temporary file that commit()
// renames over the destination.
//
// Layout as the safetensors reference writer makes it: tensors sorted by
// element size (largest first), then by name, so with the header padded to
// 8 bytes every tensor starts aligned for its type. Tensors of unknown size
// (max_bytes) go last in the order they arrive; the header reserves room for
// the largest numbers they could need and is rewritten, padded with spaces
// to the same length, by commit().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "lowbit/io.h"

namespace lowbit::io {

using core::cat;

namespace {

constexpr const char* kOp = "SafetensorsWriter";

[[noreturn]] void io_fail(const std::filesystem::path& path, const std::string& what, int err) {
  core::fail(ErrorCode::io_error, cat(path.string(), ": ", what, " (", std::strerror(err), ")"));
}

void write_all(int fd, const std::filesystem::path& path, const uint8_t* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30));
    const ssize_t n = ::pwrite(fd, data, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      io_fail(path, cat("write of ", size, " bytes at offset ", offset, " failed"), errno);
    }
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

struct Slot {
  TensorDecl decl;
  uint64_t nbytes = 0;  // exact, or the bound for a variable tensor
  uint64_t begin = 0;
  bool written = false;
  int bits = 0;
};

uint64_t decl_bytes(const TensorDecl& d, int bits) {
  uint64_t numel = 1;
  for (int64_t e : d.shape) {
    LOWBIT_REQUIRE(e >= 0, ErrorCode::invalid_argument, kOp, ": tensor '", d.name, "' has a negative extent");
    LOWBIT_REQUIRE(!__builtin_mul_overflow(numel, static_cast<uint64_t>(e), &numel), ErrorCode::invalid_argument, kOp,
                   ": tensor '", d.name, "' has too many elements");
  }
  const uint64_t total_bits = numel * static_cast<uint64_t>(bits);
  LOWBIT_REQUIRE(total_bits % 8 == 0, ErrorCode::invalid_argument, kOp, ": tensor '", d.name, "' of ", d.dtype,
                 " does not fill a whole number of bytes");
  return total_bits / 8;
}

}  // namespace

struct SafetensorsWriter::Impl {
  std::filesystem::path path, temp;
  int fd = -1;
  bool committed = false;
  std::vector<Slot> slots;  // fixed tensors in file order, then variable ones
  std::map<std::string, size_t, std::less<>> by_name;
  std::map<std::string, std::string> metadata;
  uint64_t header_len = 0;        // N, padded to 8
  uint64_t fixed_end = 0;         // data bytes of fixed tensors
  uint64_t var_end = 0;           // data bytes so far, variable tensors included
  std::vector<size_t> var_order;  // variable slots in arrival order
  bool has_variable = false;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  // Also runs when the constructor throws after creating the temporary file.
  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (!committed && !temp.empty()) ::unlink(temp.c_str());
  }

  std::string header(bool reserve) const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (!metadata.empty()) j["__metadata__"] = metadata;
    uint64_t var_bound = fixed_end;
    for (const Slot& s : slots) var_bound += s.decl.max_bytes ? s.nbytes : 0;
    auto entry = [&](const Slot& s, const std::vector<int64_t>& shape, uint64_t b, uint64_t e) {
      j[s.decl.name] = {{"dtype", s.decl.dtype}, {"shape", shape}, {"data_offsets", {b, e}}};
    };
    for (const Slot& s : slots) {
      if (s.decl.max_bytes) continue;
      entry(s, s.decl.shape, s.begin, s.begin + s.nbytes);
    }
    if (reserve) {
      // Numbers at least as long as the real ones will be.
      for (const Slot& s : slots) {
        if (s.decl.max_bytes) entry(s, {static_cast<int64_t>(s.nbytes)}, var_bound, var_bound);
      }
    } else {
      for (size_t i : var_order) {
        const Slot& s = slots[i];
        entry(s, {static_cast<int64_t>(s.nbytes)}, s.begin, s.begin + s.nbytes);
      }
    }
    return j.dump();
  }

  void open_temp() {
    static std::atomic<uint64_t> counter{0};
    const auto stamp = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (int attempt = 0; attempt < 100; ++attempt) {
      temp = path.parent_path() /
             cat(".", path.filename().string(), ".tmp-", ::getpid(), "-", (stamp ^ counter.fetch_add(1)) % 1000000007);
      fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return;
      if (errno != EEXIST) io_fail(path, "cannot create a temporary file beside it", errno);
    }
    io_fail(path, "cannot find a free temporary file name beside it", EEXIST);
  }
};

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::vector<TensorDecl> tensors,
                                     std::map<std::string, std::string> metadata)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = std::move(path);
  m.metadata = std::move(metadata);
  for (TensorDecl& d : tensors) {
    const int bits = safetensors_dtype_bits(d.dtype);
    LOWBIT_REQUIRE(bits > 0, ErrorCode::invalid_argument, kOp, ": tensor '", d.name, "' has unknown dtype '", d.dtype,
                   "'");
    LOWBIT_REQUIRE(d.name != "__metadata__", ErrorCode::invalid_argument, kOp,
                   ": '__metadata__' is reserved and cannot name a tensor");
    Slot s;
    s.bits = bits;
    if (d.max_bytes) {
      LOWBIT_REQUIRE(d.dtype == "U8", ErrorCode::invalid_argument, kOp, ": tensor '", d.name,
                     "' of unknown size must be U8 (got ", d.dtype, ")");
      s.nbytes = *d.max_bytes;
      m.has_variable = true;
    } else {
      s.nbytes = decl_bytes(d, bits);
    }
    s.decl = std::move(d);
    m.slots.push_back(std::move(s));
  }
  std::stable_sort(m.slots.begin(), m.slots.end(), [](const Slot& a, const Slot& b) {
    if (a.decl.max_bytes.has_value() != b.decl.max_bytes.has_value()) return !a.decl.max_bytes.has_value();
    if (a.decl.max_bytes) return false;  // variable ones: declaration order
    return a.bits != b.bits ? a.bits > b.bits : a.decl.name < b.decl.name;
  });
  for (size_t i = 0; i < m.slots.size(); ++i) {
    Slot& s = m.slots[i];
    LOWBIT_REQUIRE(m.by_name.emplace(s.decl.name, i).second, ErrorCode::invalid_argument, kOp, ": tensor '",
                   s.decl.name, "' is declared twice");
    if (!s.decl.max_bytes) {
      s.begin = m.fixed_end;
      m.fixed_end += s.nbytes;
    }
  }
  m.var_end = m.fixed_end;
  const std::string h = m.header(/*reserve=*/m.has_variable);
  m.header_len = (h.size() + 7) / 8 * 8;
  LOWBIT_REQUIRE(m.header_len <= kMaxHeaderBytes, ErrorCode::invalid_argument, kOp, ": the header of ", m.path.string(),
                 " would take ", m.header_len, " bytes, over safetensors' limit of ", kMaxHeaderBytes);

  m.open_temp();
  std::string padded = h;
  padded.resize(m.header_len, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(m.header_len >> (8 * i));
  // Sized up front: a full disk shows at the first write, not at the end.
  if (::ftruncate(m.fd, static_cast<off_t>(8 + m.header_len + m.fixed_end)) != 0) {
    io_fail(m.temp, "cannot size the temporary file", errno);
  }
  write_all(m.fd, m.temp, len, 8, 0);
  write_all(m.fd, m.temp, reinterpret_cast<const uint8_t*>(padded.data()), padded.size(), 8);
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&&) noexcept = default;

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(std::string_view name, std::span<const uint8_t> data) {
  Impl& m = *impl_;
  LOWBIT_REQUIRE(!m.committed, ErrorCode::invalid_argument, kOp, ": ", m.path.string(), " is already committed");
  const auto it = m.by_name.find(name);
  LOWBIT_REQUIRE(it != m.by_name.end(), ErrorCode::invalid_argument, kOp, ": tensor '", name, "' was not declared for ",
                 m.path.string());
  Slot& s = m.slots[it->second];
  LOWBIT_REQUIRE(!s.written, ErrorCode::invalid_argument, kOp, ": tensor '", name, "' is written twice");
  if (s.decl.max_bytes) {
    LOWBIT_REQUIRE(data.size() <= *s.decl.max_bytes, ErrorCode::invalid_argument, kOp, ": tensor '", name,
                   "' must take at most ", *s.decl.max_bytes, " bytes (got ", data.size(), ")");
    s.nbytes = data.size();
    s.begin = m.var_end;
    m.var_end += data.size();
    m.var_order.push_back(it->second);
  } else {
    LOWBIT_REQUIRE(data.size() == s.nbytes, ErrorCode::invalid_argument, kOp, ": tensor '", name, "' must take ",
                   s.nbytes, " bytes as declared (got ", data.size(), ")");
  }
  write_all(m.fd, m.temp, data.data(), data.size(), 8 + m.header_len + s.begin);
  s.written = true;
}

void SafetensorsWriter::write(std::string_view name, const TensorRef& t) {
  const auto it = impl_->by_name.find(name);
  LOWBIT_REQUIRE(it != impl_->by_name.end(), ErrorCode::invalid_argument, kOp, ": tensor '", name,
                 "' was not declared for ", impl_->path.string());
  const TensorDecl& d = impl_->slots[it->second].decl;
  LOWBIT_REQUIRE(safetensors_dtype_name(t.dtype) == d.dtype, ErrorCode::invalid_argument, kOp, ": tensor '", name,
                 "' was declared ", d.dtype, " (got ", dtype_name(t.dtype), ")");
  if (!d.max_bytes) {
    const bool same =
        t.sizes().size() == d.shape.size() && std::equal(d.shape.begin(), d.shape.end(), t.sizes().begin());
    LOWBIT_REQUIRE(same, ErrorCode::invalid_argument, kOp, ": tensor '", name,
                   "' was declared with another shape (got ", core::shape_str(t), ")");
  }
  core::require_contiguous(kOp, "tensor", t);
  if (t.device.is_cpu()) {
    write(name, std::span<const uint8_t>(static_cast<const uint8_t*>(t.data), t.nbytes()));
    return;
  }
  const Tensor host = Tensor::copy_of(t, Device::cpu());
  write(name, std::span<const uint8_t>(host.ptr<const uint8_t>(), host.nbytes()));
}

uint64_t SafetensorsWriter::commit() {
  Impl& m = *impl_;
  LOWBIT_REQUIRE(!m.committed, ErrorCode::invalid_argument, kOp, ": ", m.path.string(), " is already committed");
  for (const Slot& s : m.slots) {
    LOWBIT_REQUIRE(s.written, ErrorCode::invalid_argument, kOp, ": tensor '", s.decl.name,
                   "' was declared but never written to ", m.path.string());
  }
  if (m.has_variable) {
    std::string h = m.header(/*reserve=*/false);
    LOWBIT_REQUIRE(h.size() <= m.header_len, ErrorCode::internal, kOp, ": the final header (", h.size(),
                   " bytes) outgrew the reserved ", m.header_len);
    h.resize(m.header_len, ' ');
    write_all(m.fd, m.temp, reinterpret_cast<const uint8_t*>(h.data()), h.size(), 8);
  }
  const uint64_t size = 8 + m.header_len + m.var_end;
  if (::ftruncate(m.fd, static_cast<off_t>(size)) != 0) io_fail(m.temp, "cannot size the file", errno);
  if (::fsync(m.fd) != 0) io_fail(m.temp, "cannot flush to disk", errno);
  const int fd = m.fd;
  m.fd = -1;
  if (::close(fd) != 0) io_fail(m.temp, "cannot close", errno);
  if (::rename(m.temp.c_str(), m.path.c_str()) != 0) {
    io_fail(m.path, cat("cannot rename the finished temporary file ", m.temp.filename().string(), " to it"), errno);
  }
  m.committed = true;
  return size;
}

void save_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, TensorRef>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    decls.push_back({name, std::string(safetensors_dtype_name(t.dtype)), {t.sizes().begin(), t.sizes().end()}, {}});
  }
  SafetensorsWriter w(path, std::move(decls), metadata);
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.commit();
}

}  // namespace lowbit::io
