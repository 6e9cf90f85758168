// What the checkpoint subcommands (quantize, dequantize, inspect) share: the
// --device option, a progress bar, interruption by Ctrl-C, number formats.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "lowbit/error.h"
#include "lowbit/io.h"

namespace lowbit::cli {

// "auto" (a GPU when one is present), "cpu" or "cuda".
Device pick_io_device(const std::string& name, const char* command);

std::string human_bytes(double bytes);                        // "45.1 MB"
std::string shape_string(const std::vector<int64_t>& shape);  // "384x1536"
std::string fit(const std::string& s, size_t width);          // "…" + the tail when longer

// Redrawn on stderr when stderr is a terminal, at most ten times a second.
class ProgressBar {
 public:
  explicit ProgressBar(const char* verb);
  void update(const io::Progress& p);
  void finish();  // clears the line

 private:
  const char* verb_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// While alive, SIGINT and SIGTERM only raise a flag the operation polls
// between tensors (so it can remove its partial output); a second signal
// ends the process at once.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  bool requested() const;
  // Ends the process by the signal received, as a shell expects (status
  // 128 + signal), after the operation has cleaned up.
  [[noreturn]] void reraise() const;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace lowbit::cli
