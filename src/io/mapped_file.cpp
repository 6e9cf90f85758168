#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace lowbit::io::detail {

namespace {
[[noreturn]] void io_fail(const std::filesystem::path& path, const char* what, int err) {
  core::fail(ErrorCode::io_error, core::cat(path.string(), ": ", what, " (", std::strerror(err), ")"));
}
}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // before the file type could be checked; reads of regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io_fail(path, "cannot open for reading", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_fail(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    core::fail(ErrorCode::io_error, core::cat(path.string(), ": not a regular file"));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  // Reads block again (O_NONBLOCK was only for the open).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      io_fail(path, "cannot map into memory", err);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  fd_ = fd;
}

void MappedFile::read(uint64_t offset, std::span<uint8_t> out) const {
  uint64_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_fail(path_, core::cat("cannot read ", out.size(), " bytes at offset ", offset).c_str(), errno);
    if (n == 0) {
      struct stat st {};
      const int64_t now = ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
      core::fail(ErrorCode::io_error,
                 core::cat(path_.string(), ": the file ends at byte ", offset + done, " but bytes [", offset, ", ",
                           offset + out.size(), ") were to be read; it was ", size_, " bytes when opened and is ",
                           now, " now (shortened by another process while being read?)"));
    }
    done += static_cast<uint64_t>(n);
  }
}

void MappedFile::release(uint64_t offset, uint64_t size) const {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (offset + page - 1) / page * page;  // whole pages inside the range only
  const uint64_t end = std::min(offset + size, size_) / page * page;
  if (data_ == nullptr || end <= begin) return;
  // Advice only: a failure changes nothing but memory use.
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace lowbit::io::detail
