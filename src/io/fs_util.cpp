#include "io/fs_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>  // renameat2
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/json_limits.h"

namespace lowbit::io::detail {

using core::cat;
namespace fs = std::filesystem;

namespace {

// Extensions of weight files in formats other than safetensors: copying
// them would carry the unconverted weights along.
constexpr std::string_view kOtherWeights[] = {".bin",       ".pt",   ".pth",  ".ckpt",       ".h5",
                                              ".msgpack",   ".onnx", ".gguf", ".tflite",     ".ot",
                                              ".onnx_data", ".npz",  ".pkl",  ".safetensors"};

bool is_other_weights(const fs::path& p) {
  const std::string ext = p.extension().string();
  return std::find(std::begin(kOtherWeights), std::end(kOtherWeights), ext) != std::end(kOtherWeights);
}

// `child` equals `parent` or lies inside it (both absolute and normalized).
bool is_within(const fs::path& child, const fs::path& parent) {
  auto c = child.begin();
  for (auto p = parent.begin(); p != parent.end(); ++p, ++c) {
    if (p->empty()) continue;  // a trailing separator
    if (c == child.end() || *c != *p) return false;
  }
  return true;
}

fs::path normalized(const fs::path& p) {
  std::error_code ec;
  fs::path n = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : n;
}

const char* type_name(fs::file_type t) {
  switch (t) {
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    default: return "neither a regular file nor a folder";
  }
}

// Only what lowbit could have written may be replaced: --force onto
// /dev/null or a FIFO must not swap the node for a regular file.
void require_replaceable(const char* op, const fs::path& path) {
  const fs::file_status st = status_of(path);
  if (!fs::exists(st) || fs::is_regular_file(st) || fs::is_directory(st)) return;
  core::fail(ErrorCode::io_error, cat(op, ": the output ", path.string(), " exists and is ", type_name(st.type()),
                                      "; lowbit replaces only a regular file or a folder (even with --force)"));
}

// Hidden files and folders that a killed run (SIGKILL, a crash) left beside
// `destination`: their names carry the writing process's id, and one whose
// process is gone can never be finished. Only lowbit's own name patterns
// are touched: .<name>.tmp-<pid>-<n>, .<name>.old-<pid>-<n> and the
// writer's ..<name>.tmp-<pid>-<n>.tmp-<pid>-<n>.
void remove_dead_leftovers(const fs::path& destination) {
  const std::string name = destination.filename().string();
  std::error_code ec;
  fs::directory_iterator it(destination.parent_path(), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    for (const std::string_view dots : {"..", "."}) {
      std::string_view rest(entry);
      if (!rest.starts_with(dots)) continue;
      rest.remove_prefix(dots.size());
      if (!rest.starts_with(name)) continue;
      rest.remove_prefix(name.size());
      if (!rest.starts_with(".tmp-") && !rest.starts_with(".old-")) continue;
      rest.remove_prefix(5);
      long pid = 0;
      const auto [next, err] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
      if (err != std::errc() || next == rest.data() + rest.size() || *next != '-' || pid <= 0) continue;
      // ESRCH only: a process of another user (EPERM) is alive.
      if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) break;
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      break;
    }
  }
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return cat(::getpid(), "-", counter.fetch_add(1));
}

// Why a path could not be looked at, in words (an errno text alone says
// "Too many levels of symbolic links" without saying it is a loop).
std::string why(const std::error_code& ec) {
  if (ec == std::errc::too_many_symbolic_link_levels) return cat(ec.message(), ": a symbolic link loop");
  return ec.message();
}

}  // namespace

fs::file_status status_of(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    core::fail(ErrorCode::io_error, cat(path.string(), ": cannot be read (", why(ec), ")"));
  }
  return st;
}

std::string read_text(const fs::path& path) {
  // O_NONBLOCK and the type check first: a FIFO would block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LOWBIT_REQUIRE(fd >= 0, ErrorCode::io_error, path.string(), ": cannot open for reading (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    core::fail(ErrorCode::io_error, cat(path.string(), ": not a regular file"));
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      core::fail(ErrorCode::io_error, cat(path.string(), ": read failed (", std::strerror(err), ")"));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

void check_json_bounds(std::string_view text, const std::string& label) {
  LOWBIT_REQUIRE(text.size() <= core::kMaxJsonBytes, ErrorCode::format_error, label, ": ", text.size(),
                 " bytes of JSON, more than the ", core::kMaxJsonBytes, " lowbit reads");
  const size_t depth = core::json_depth(text);
  LOWBIT_REQUIRE(depth <= core::kMaxJsonDepth, ErrorCode::format_error, label, ": JSON nested more than ",
                 core::kMaxJsonDepth, " levels deep (real configs nest a few levels; not read)");
}

std::string read_json_text(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  LOWBIT_REQUIRE(ec || size <= core::kMaxJsonBytes, ErrorCode::format_error, path.string(), ": ", size,
                 " bytes, more than the ", core::kMaxJsonBytes, " lowbit reads from a JSON file");
  std::string text = read_text(path);
  check_json_bounds(text, path.string());
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  const fs::path temp = path.parent_path() / cat(".", path.filename().string(), ".tmp-", unique_suffix());
  {
    std::ofstream f(temp, std::ios::binary | std::ios::trunc);
    LOWBIT_REQUIRE(f.good(), ErrorCode::io_error, temp.string(), ": cannot create (", std::strerror(errno), ")");
    f << text;
    f.flush();
    if (!f.good()) {
      std::error_code ec;
      fs::remove(temp, ec);
      core::fail(ErrorCode::io_error, cat(path.string(), ": write failed"));
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    core::fail(ErrorCode::io_error,
               cat(path.string(), ": cannot rename the temporary file to it (", ec.message(), ")"));
  }
}

OutputTarget::OutputTarget(const char* op, const fs::path& in, const fs::path& out, bool in_is_folder, bool overwrite)
    : op_(op), folder_(in_is_folder), overwrite_(overwrite), destination_(out) {
  LOWBIT_REQUIRE(!out.empty(), ErrorCode::invalid_argument, op, ": the output path is empty");
  if (!folder_ && fs::is_directory(status_of(out))) destination_ = out / in.filename();
  destination_ = normalized(destination_);
  const fs::path src = normalized(in);
  LOWBIT_REQUIRE(destination_ != src, ErrorCode::invalid_argument, op, ": the output ", destination_.string(),
                 " is the input; the input is never modified, so choose another output");
  if (folder_) {
    LOWBIT_REQUIRE(!is_within(destination_, src), ErrorCode::invalid_argument, op, ": the output ",
                   destination_.string(), " lies inside the input folder, which is never modified");
    LOWBIT_REQUIRE(!is_within(src, destination_), ErrorCode::invalid_argument, op, ": the output ",
                   destination_.string(), " holds the input; replacing it would delete the input");
  } else {
    LOWBIT_REQUIRE(!fs::is_directory(status_of(destination_)), ErrorCode::invalid_argument, op, ": the output ",
                   destination_.string(), " is a folder");
  }
  require_replaceable(op, destination_);
  std::error_code ec;
  LOWBIT_REQUIRE(overwrite || !fs::exists(destination_, ec), ErrorCode::io_error, op, ": the output ",
                 destination_.string(), " exists (--force replaces it)");
  // Missing parent folders are made, and noted so that a failed run removes them again.
  for (fs::path p = destination_.parent_path(); !p.empty() && !fs::exists(status_of(p)); p = p.parent_path()) {
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(destination_.parent_path(), ec);
  if (ec) remove_created();
  LOWBIT_REQUIRE(!ec, ErrorCode::io_error, op, ": cannot create the folder ", destination_.parent_path().string(), " (",
                 ec.message(), ")");
  remove_dead_leftovers(destination_);
  // A file's staging name is where its writer's finished temporary file is
  // renamed to, so that commit() alone decides whether an output is replaced.
  staging_ = destination_.parent_path() / cat(".", destination_.filename().string(), ".tmp-", unique_suffix());
  if (folder_) {
    fs::create_directory(staging_, ec);
    if (ec) remove_created();
    LOWBIT_REQUIRE(!ec, ErrorCode::io_error, op, ": cannot create the staging folder ", staging_.string(), " (",
                   ec.message(), ")");
  }
}

OutputTarget::~OutputTarget() {
  if (committed_) return;
  std::error_code ec;
  if (!staging_.empty()) fs::remove_all(staging_, ec);
  remove_created();
}

void OutputTarget::remove_created() noexcept {
  // Only while empty: another process may have put something there meanwhile.
  for (const fs::path& p : created_) {
    std::error_code ec;
    if (!fs::remove(p, ec)) break;
  }
  created_.clear();
}

fs::path OutputTarget::file(const std::string& name) const { return folder_ ? staging_ / name : staging_; }

void OutputTarget::commit() {
  std::error_code ec;
  if (!overwrite_) {
    // One atomic step: of two runs to one new output, the second to finish
    // fails here instead of replacing the first one's result.
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, destination_.c_str(), RENAME_NOREPLACE) == 0) {
      committed_ = true;
      return;
    }
    const int err = errno;
    LOWBIT_REQUIRE(err != EEXIST && err != ENOTEMPTY, ErrorCode::io_error, op_, ": the output ", destination_.string(),
                   " appeared while writing (another run?); the result is left out (--force replaces it)");
    LOWBIT_REQUIRE(err == EINVAL || err == ENOSYS, ErrorCode::io_error, op_, ": cannot rename ", staging_.string(),
                   " to ", destination_.string(), " (", std::strerror(err), ")");
    // This file system cannot refuse to replace: check, then rename.
  }
  fs::path old;
  if (!folder_) {
    require_replaceable(op_, destination_);
    LOWBIT_REQUIRE(overwrite_ || !fs::exists(destination_, ec), ErrorCode::io_error, op_, ": the output ",
                   destination_.string(), " appeared while writing; the result is left out (--force replaces it)");
  } else if (fs::exists(destination_, ec)) {
    require_replaceable(op_, destination_);
    LOWBIT_REQUIRE(overwrite_, ErrorCode::io_error, op_, ": the output ", destination_.string(),
                   " appeared while writing; the result is left out (--force replaces it)");
    old = destination_.parent_path() / cat(".", destination_.filename().string(), ".old-", unique_suffix());
    fs::rename(destination_, old, ec);
    LOWBIT_REQUIRE(!ec, ErrorCode::io_error, op_, ": cannot move the old ", destination_.string(), " aside (",
                   ec.message(), ")");
  }
  fs::rename(staging_, destination_, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, destination_, ec);  // put the old output back
    core::fail(ErrorCode::io_error, cat(op_, ": cannot rename ", staging_.string(), " to ", destination_.string()));
  }
  committed_ = true;
  if (!old.empty()) fs::remove_all(old, ec);
}

CopiedFiles copy_side_files(const fs::path& in, const fs::path& out) {
  CopiedFiles r;
  std::error_code ec;
  // Folders on the way down (resolved): a link to one of them is a loop.
  std::vector<fs::path> open_folders{fs::canonical(in, ec)};
  LOWBIT_REQUIRE(!ec, ErrorCode::io_error, in.string(), ": cannot be read (", why(ec), ")");
  const auto options = fs::directory_options::follow_directory_symlink;
  fs::recursive_directory_iterator it(in, options, ec), end;
  LOWBIT_REQUIRE(!ec, ErrorCode::io_error, in.string(), ": cannot list (", why(ec), ")");
  for (; it != end; it.increment(ec)) {
    LOWBIT_REQUIRE(!ec, ErrorCode::io_error, in.string(), ": cannot list (", why(ec), ")");
    open_folders.resize(static_cast<size_t>(it.depth()) + 1);
    const fs::path rel = it->path().lexically_relative(in);
    const std::string name = it->path().filename().string();
    const fs::file_status st = status_of(it->path());
    if (name.starts_with(".") && (fs::is_directory(st) || name.find(".tmp-") != std::string::npos)) {
      if (fs::is_directory(st)) it.disable_recursion_pending();  // .git, .cache, staging folders
      continue;
    }
    if (fs::is_directory(st)) {
      const fs::path real = fs::canonical(it->path(), ec);
      LOWBIT_REQUIRE(!ec, ErrorCode::io_error, it->path().string(), ": cannot be read (", why(ec), ")");
      const auto loop = std::find(open_folders.begin(), open_folders.end(), real);
      LOWBIT_REQUIRE(loop == open_folders.end(), ErrorCode::io_error, it->path().string(), ": leads back to ",
                     loop->string(), " (a symbolic link loop; copying would never end)");
      open_folders.push_back(real);
      fs::create_directories(out / rel);
      continue;
    }
    // A FIFO, socket or device cannot be copied; leaving it out unseen would drop part of the checkpoint.
    LOWBIT_REQUIRE(!fs::exists(st) || fs::is_regular_file(st), ErrorCode::io_error, it->path().string(), " is ",
                   type_name(st.type()), ": only regular files and folders are copied (remove it or move it away)");
    if (!fs::is_regular_file(st)) continue;
    if (rel == "config.json" || name.ends_with(".safetensors.index.json")) continue;
    if (is_other_weights(it->path())) {
      if (!name.ends_with(".safetensors") || rel.has_parent_path()) r.skipped.push_back(rel.string());
      continue;
    }
    fs::create_directories((out / rel).parent_path(), ec);
    fs::copy_file(it->path(), out / rel, fs::copy_options::overwrite_existing, ec);
    LOWBIT_REQUIRE(!ec, ErrorCode::io_error, it->path().string(), ": cannot copy to ", (out / rel).string(), " (",
                   ec.message(), ")");
    r.copied.push_back(rel.string());
  }
  std::sort(r.copied.begin(), r.copied.end());
  std::sort(r.skipped.begin(), r.skipped.end());
  return r;
}

}  // namespace lowbit::io::detail
