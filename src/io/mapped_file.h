// A file mapped read-only into memory (POSIX mmap), and kept open for
// read(). The mapping is private and read-only: nothing done through it can
// change the file. Touching a page past the end of a file that another
// process has since truncated raises SIGBUS, so the streaming commands read
// with read() instead, where that is an io_error naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

namespace lowbit::io::detail {

class MappedFile {
 public:
  // io_error naming the file when it cannot be opened, is not a regular
  // file, or cannot be mapped. An empty file maps to an empty span.
  explicit MappedFile(const std::filesystem::path& path);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Copies [offset, offset + out.size()) of the file into `out` (pread).
  // io_error naming the file when the file now ends before that range.
  void read(uint64_t offset, std::span<uint8_t> out) const;
  // Lets the kernel drop the pages of [offset, offset + size) now: a
  // streaming pass over a file larger than RAM then holds one tensor's pages
  // at a time. Later reads fault them in again from the file.
  void release(uint64_t offset, uint64_t size) const;
  uint64_t size() const { return size_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace lowbit::io::detail
