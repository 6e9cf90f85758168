#include "gemm/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "internals.h"
#include "lowbit/error.h"

namespace lowbit::bench {
namespace {

std::string csv_num(double v) { return std::isfinite(v) ? fmt("%.6g", v) : std::string(); }

std::string csv_text(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0.0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

}  // namespace

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

int type_column_width(const std::vector<TypeSpec>& types) {
  int width = 17;
  for (const TypeSpec& t : types) width = std::max(width, static_cast<int>(t.name.size()));
  return width;
}

void print_header(int type_width, const Peer* peer) {
  const std::string peer_us = cat(peer ? peer->name : std::string("peer"), "_us");
  std::printf("  %-11s %-*s %5s %6s %9s %8s %9s %8s %8s %8s %8s %7s  %s\n", "N x K", type_width, "type", "M", "W_MB",
              "us", "TFLOP/s", peer_us.c_str(), "speedup", "floor_us", "of_floor", "read_us", "of_read", "check");
}

void print_row(const Row& r, int type_width) {
  std::string tail = r.status == "ok" ? r.check : r.message;
  std::printf("  %-11s %-*s %5lld %6s %9s %8s %9s %8s %8s %8s %8s %7s  %s\n", r.shape.c_str(), type_width,
              r.type.c_str(), static_cast<long long>(r.M), fmt("%.2f", r.w_bytes / 1e6).c_str(),
              fmt("%.2f", r.us).c_str(), fmt("%.2f", r.tflops()).c_str(), fmt("%.2f", r.peer_us).c_str(),
              fmt("%.2fx", r.speedup()).c_str(), fmt("%.2f", r.floor_us).c_str(), fmt("%.3f", r.of_floor()).c_str(),
              fmt("%.2f", r.read_us).c_str(), fmt("%.3f", r.of_read()).c_str(), tail.c_str());
  std::fflush(stdout);
}

void write_csv(const std::string& path, const std::string& device, const std::vector<Row>& rows, const Peer* peer) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw Error(ErrorCode::io_error, cat("bench gemm: cannot write --csv ", path));
  const std::string p = peer ? peer->csv : std::string("peer");
  std::fprintf(f, "%s\n",
               cat("device,N,K,M,type,status,lowbit_us,lowbit_tflops,", p, "_us,", p, "_tflops,speedup_vs_", p,
                   ",packed_w_bytes,floor_bytes,floor_us,of_floor,read_us,of_read,check_rel_err,message")
                   .c_str());
  for (const Row& r : rows) {
    std::fprintf(f, "%s,%lld,%lld,%lld,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", csv_text(device).c_str(),
                 static_cast<long long>(r.N), static_cast<long long>(r.K), static_cast<long long>(r.M), r.type.c_str(),
                 r.status.c_str(), csv_num(r.us).c_str(), csv_num(r.tflops()).c_str(), csv_num(r.peer_us).c_str(),
                 csv_num(r.peer_tflops()).c_str(), csv_num(r.speedup()).c_str(), csv_num(r.w_bytes).c_str(),
                 csv_num(r.floor_bytes).c_str(), csv_num(r.floor_us).c_str(), csv_num(r.of_floor()).c_str(),
                 csv_num(r.read_us).c_str(), csv_num(r.of_read()).c_str(), csv_num(r.check_err).c_str(),
                 csv_text(r.message).c_str());
  }
  if (std::fclose(f) != 0) throw Error(ErrorCode::io_error, cat("bench gemm: cannot write --csv ", path));
}

void print_summary(const std::vector<Row>& rows, const std::vector<TypeSpec>& types, const std::vector<int64_t>& ms,
                   double copy, const Peer* peer, bool checked, double wall_s, double prep_s, int type_width) {
  int timed = 0, failed = 0;
  std::map<std::string, int> skipped, failures;  // reason -> count
  bool no_backend = false;
  for (const Row& r : rows) {
    if (r.status == "ok") ++timed;
    if (r.status == "failed") ++failures[r.reason];
    if (r.status == "skipped") ++skipped[r.reason];
    no_backend = no_backend || r.reason == "no CUDA matmul backend";
  }
  for (const auto& [why, n] : failures) failed += n;
  if (peer) {
    std::string line;
    for (int64_t M : ms) {
      std::vector<double> tf;
      std::map<std::string, bool> seen;
      for (const Row& r : rows) {
        if (r.M == M && std::isfinite(r.peer_us) && !seen[r.shape]) {
          seen[r.shape] = true;
          tf.push_back(r.peer_tflops());
        }
      }
      if (!tf.empty()) line += cat(" M=", M, " ", fmt(geomean(tf) < 10.0 ? "%.3f" : "%.1f", geomean(tf)));
    }
    std::printf("summary: %s TFLOP/s (geomean over shapes):%s\n", peer->what.c_str(), line.c_str());
  }
  for (const TypeSpec& t : types) {
    std::string sp, fl, rd, ceil;
    auto range = [](const std::vector<double>& v) {
      return cat(fmt("%.2f", *std::min_element(v.begin(), v.end())), "-",
                 fmt("%.2f", *std::max_element(v.begin(), v.end())));
    };
    for (int64_t M : ms) {
      std::vector<double> s, f, rf, c;
      for (const Row& r : rows) {
        if (r.type != t.name || r.M != M || r.status != "ok") continue;
        if (std::isfinite(r.speedup())) s.push_back(r.speedup());
        f.push_back(r.of_floor());
        if (std::isfinite(r.of_read())) rf.push_back(r.of_read());
        if (std::isfinite(r.read_us) && std::isfinite(r.peer_us)) c.push_back(r.peer_us / r.read_us);
      }
      if (!s.empty()) sp += cat(" M=", M, " ", fmt("%.2fx", geomean(s)));
      if (!f.empty()) fl += cat(" M=", M, " ", range(f));
      if (!rf.empty()) rd += cat(" M=", M, " ", range(rf));
      if (!c.empty()) ceil += cat(" M=", M, " ", fmt("%.2fx", geomean(c)));
    }
    if (!sp.empty()) {
      std::printf("summary: %-*s speedup over %s (geomean over shapes):%s\n", type_width, t.name.c_str(),
                  peer ? peer->name.c_str() : "the peer", sp.c_str());
    }
    if (!fl.empty())
      std::printf("summary: %-*s of_floor (min-max over shapes):%s\n", type_width, t.name.c_str(), fl.c_str());
    if (!rd.empty())
      std::printf("summary: %-*s of_read (min-max over shapes):%s\n", type_width, t.name.c_str(), rd.c_str());
    if (!ceil.empty()) {
      std::printf("summary: %-*s speedup of a pure read of the same bytes over %s (geomean):%s\n", type_width,
                  t.name.c_str(), peer ? peer->name.c_str() : "the peer", ceil.c_str());
    }
  }
  if (no_backend) {
    std::printf("summary: no CUDA matmul backend is registered in this build: lowbit cases skipped%s\n",
                peer ? cat(" (", peer->name, " timed alone)").c_str() : "");
  }
  auto counts = [](const std::map<std::string, int>& m) {
    std::string t;
    for (const auto& [why, n] : m) t += cat(t.empty() ? " (" : ", ", why, ": ", n);
    return t.empty() ? t : t + ")";
  };
  const bool check_failed = failures.count("check") > 0;
  std::printf(
      "summary: copy %.1f GB/s; %zu cases: %d timed, %d skipped%s, %d failed%s; checks %s; %.1f s (%.1f s "
      "preparing weights and references)\n",
      copy, rows.size(), timed, static_cast<int>(rows.size()) - timed - failed, counts(skipped).c_str(), failed,
      counts(failures).c_str(),
      !checked       ? "off (--no-check)"
      : check_failed ? "FAILED"
                     : "ok",
      wall_s, prep_s);
}

}  // namespace lowbit::bench
