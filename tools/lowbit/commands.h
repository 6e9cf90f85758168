// Subcommands of the lowbit tool; each lives in its own file and adds itself
// to the CLI11 app. A subcommand's callback throws on failure; main() turns
// exceptions into messages and exit codes (docs/cli.md).
#pragma once

#include <CLI/CLI.hpp>

namespace lowbit::cli {

void add_demo_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_dequantize_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_tune_command(CLI::App& app);

}  // namespace lowbit::cli
