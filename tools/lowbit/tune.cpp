// `lowbit tune --list [--db FILE] [--op OP]`: the tuned kernel parameters in
// use (lowbit's shipped entries, then the user's file over them) or in one
// database file, one entry a line in the database's own format
// (lowbit/tune.h, docs/tune.md).
#include "lowbit/tune.h"

#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "core/check.h"

namespace lowbit::cli {
namespace {

struct TuneArgs {
  bool list = false;
  std::string db, op;
};

void run_tune(const TuneArgs& a) {
  LOWBIT_REQUIRE(a.list, ErrorCode::invalid_argument,
                 "lowbit tune: give --list (measuring new entries needs the CUDA kernels that take parameters; "
                 "docs/tune.md says which do)");
  const TuneDb db = a.db.empty() ? tune_db() : TuneDb::load(a.db);
  std::printf("# %s\n",
              a.db.empty() ? ("shipped entries, then " + user_tune_db_path().string()).c_str() : a.db.c_str());
  TuneDb shown;
  for (const TuneEntry& e : db.entries()) {
    if (a.op.empty() || e.op == a.op) shown.set(e);
  }
  std::fputs(shown.dump().c_str(), stdout);
  std::printf("# %zu entr%s\n", shown.entries().size(), shown.entries().size() == 1 ? "y" : "ies");
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand("tune", "The tuned kernel parameters: list a database's entries");
  cmd->footer(
      "The database in use: lowbit's shipped entries, then LOWBIT_TUNE_DB (or ~/.cache/lowbit/tune.txt) "
      "over them. See docs/tune.md.");
  cmd->add_flag("--list", a->list, "Print the entries, one a line: op | device | version | key | parameters");
  cmd->add_option("--db", a->db, "A database file instead of the one in use");
  cmd->add_option("--op", a->op, "Only this op's entries");
  cmd->callback([a] { run_tune(*a); });
}

}  // namespace lowbit::cli
