// The report of `lowbit bench gemm`: a row per case as it finishes, the
// `summary:` lines that scripts/gpu-check reads, and the CSV.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm/args.h"

namespace lowbit::bench {

// One case: a shape, a weight type and a batch size M.
struct Row {
  std::string shape, type;
  int64_t N = 0, K = 0, M = 0;
  std::string status;  // ok, skipped, failed
  std::string reason;  // skipped / failed: why, in a word or two
  std::string message;
  double us = NAN, peer_us = NAN;  // lowbit's time and the dense peer's (Peer)
  double w_bytes = NAN, floor_bytes = NAN, floor_us = NAN;
  double read_us = NAN;  // a pure read of floor_bytes (read_floor.h)
  double check_err = NAN;
  std::string check = "-";

  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
  double tflops() const { return flops() / (us * 1e6); }
  double peer_tflops() const { return flops() / (peer_us * 1e6); }
  double speedup() const { return peer_us / us; }
  double of_floor() const { return floor_us / us; }
  double of_read() const { return read_us / us; }
};

// The dense GEMM timed beside lowbit on the same M, N, K: cuBLAS fp16 on the GPU, oneDNN on the CPU.
struct Peer {
  std::string name;  // in the table's column and the summary lines: "cuBLAS", "oneDNN"
  std::string csv;   // the CSV columns' prefix: "cublas", "onednn"
  std::string what;  // the summary's TFLOP/s line: "cuBLAS fp16", "oneDNN fp32"
};

// `v` printed with the printf format `f`; "-" when it is not finite.
std::string fmt(const char* f, double v);

// The width of the type column: the longest type's name, at least 17.
int type_column_width(const std::vector<TypeSpec>& types);

// The table's header and one row of it, flushed at once.
void print_header(int type_width, const Peer* peer);
void print_row(const Row& r, int type_width);

// Every case as a line of `path`; throws io_error when it cannot be written.
// The peer's columns are named by its csv prefix (cublas_us, ...; "peer" without one).
void write_csv(const std::string& path, const std::string& device, const std::vector<Row>& rows, const Peer* peer);

// The `summary:` lines: the peer's TFLOP/s and, per type, the speedup over it,
// of_floor and of_read per M; then the counts of cases and the check verdict.
// peer: null when none was timed.
void print_summary(const std::vector<Row>& rows, const std::vector<TypeSpec>& types, const std::vector<int64_t>& ms,
                   double copy, const Peer* peer, bool checked, double wall_s, double prep_s, int type_width);

}  // namespace lowbit::bench
