// lowbit: command-line tool. Exit codes: 0 success, 1 a lowbit error (bad
// input, unsupported format, device failure), 2 bad command line.
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "commands.h"
#include "lowbit/error.h"

int main(int argc, char** argv) {
  // Past a file size limit a write then fails with EFBIG, an io_error that
  // cleans up, instead of SIGXFSZ ending the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"lowbit: low-precision and sparse matrix kernels"};
  app.require_subcommand(1);
  lowbit::cli::add_demo_command(app);
  lowbit::cli::add_bench_command(app);
  lowbit::cli::add_quantize_command(app);
  lowbit::cli::add_dequantize_command(app);
  lowbit::cli::add_inspect_command(app);
  lowbit::cli::add_tune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const lowbit::Error& e) {
    std::fprintf(stderr, "lowbit: error (%s): %s\n", lowbit::error_code_name(e.code()), e.what());
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A safety net: the commands turn these into io_errors themselves.
    const std::string path = e.path1().empty() ? std::string() : e.path1().string() + ": ";
    std::fprintf(stderr, "lowbit: error (io_error): %s%s\n", path.c_str(), e.code().message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lowbit: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
