#include "io_cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/check.h"

namespace lowbit::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_signal(int sig) {
  if (g_signal != 0) {
    // A second Ctrl-C: the user does not want to wait for the cleanup.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_signal = sig;
}

int terminal_width() {
  winsize w{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40) return w.ws_col;
  return 100;
}

}  // namespace

Device pick_io_device(const std::string& name, const char* command) {
  if (name == "cpu") return Device::cpu();
  int gpus = 0;
  try {
    gpus = cuda_device_count();
  } catch (const Error&) {
    gpus = 0;  // a CUDA build on a machine without a usable driver
  }
  if (name == "cuda") {
#if defined(LOWBIT_WITH_CUDA)
    constexpr const char* why = "none is visible to this process";
#else
    constexpr const char* why = "this lowbit was built without CUDA";
#endif
    LOWBIT_REQUIRE(gpus > 0, ErrorCode::no_backend, command, ": --device cuda needs a CUDA device (", why, ")");
    return Device::cuda(0);
  }
  return gpus > 0 ? Device::cuda(0) : Device::cpu();
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000.0 && u < 4) {
    b /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

std::string fit(const std::string& s, size_t width) {
  if (s.size() <= width || width < 4) return s;
  std::string r("...");
  r.append(s, s.size() - (width - 3), std::string::npos);
  return r;
}

ProgressBar::ProgressBar(const char* verb) : verb_(verb), enabled_(::isatty(STDERR_FILENO) != 0) {}

void ProgressBar::update(const io::Progress& p) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = p.tensors_done == p.tensors_total;
  if (drawn_ && !last && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kBar = 24;
  const double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  const int filled = static_cast<int>(frac * kBar);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBar, '.');
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) / p.seconds : 0.0;
  std::string line = core::cat(verb_, " [", bar, "] ", p.tensors_done, "/", p.tensors_total, " tensors  ",
                               human_bytes(static_cast<double>(p.bytes_done)), "/",
                               human_bytes(static_cast<double>(p.bytes_total)), "  ", human_bytes(rate), "/s  ");
  const int width = terminal_width() - 1;
  if (static_cast<int>(line.size()) < width)
    line += fit(std::string(p.current), static_cast<size_t>(width) - line.size());
  std::fprintf(stderr, "\r\033[K%s", line.substr(0, static_cast<size_t>(width)).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

bool InterruptGuard::requested() const { return g_signal != 0; }

void InterruptGuard::reraise() const {
  const int sig = g_signal;
  std::fprintf(stderr, "lowbit: interrupted; no output was left behind\n");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(128 + sig);  // not reached: the default action ends the process
}

}  // namespace lowbit::cli
