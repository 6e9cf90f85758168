// The lowbit CLI's checkpoint subcommands, run as a user would: exit codes
// (0 ok, 1 lowbit error, 2 bad command line), messages, --help, and no
// partial output after a failure. Needs LOWBIT_CLI_PATH (tests/cli/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>

#include "io/io_test_util.h"
#include "lowbit/io.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

struct CliRun {
  int status = -1;
  std::string output;  // stdout and stderr
};

// `prefix` goes before the command (`timeout 20 ` where a hang is the fault).
CliRun lowbit_cli(const std::string& args, const ScratchDir& dir, const std::string& prefix = "") {
#ifndef LOWBIT_CLI_PATH
  (void)args;
  (void)dir;
  (void)prefix;
  return {};
#else
  const fs::path log = dir / "cli.log";
  const std::string cmd = prefix + "'" + LOWBIT_CLI_PATH + "' " + args + " > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  CliRun r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  r.output = test::read_bytes(log);
  fs::remove(log);
  return r;
#endif
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef LOWBIT_CLI_PATH
    GTEST_SKIP() << "LOWBIT_CLI_PATH is not set: the lowbit CLI is not built in this configuration";
#endif
    test::write_tiny_checkpoint(dir_ / "in");
  }
  std::string p(const std::string& name) const { return "'" + (dir_ / name).string() + "'"; }
  ScratchDir dir_;
};

TEST_F(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"quantize", "dequantize", "inspect"}) {
    const CliRun r = lowbit_cli(std::string(sub) + " --help", dir_);
    EXPECT_EQ(r.status, 0) << sub << ": " << r.output;
    EXPECT_NE(r.output.find("Exit codes"), std::string::npos) << sub;
  }
}

// `lowbit tune --list`: a database file's entries (one op's), the database in use with LOWBIT_TUNE_DB over the
// shipped entries, a malformed file named with its line, and no --list refused.
TEST_F(Cli, TuneListsADatabase) {
  {
    std::ofstream f(dir_ / "tune.txt");
    f << "bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5 | 4096 4096 4096 32 32 | 8 1 4 8\n"
      << "scatter_mm | NVIDIA H100 80GB HBM3 | float16 0.5 | 256 256 256 16 16 | 1 2 16 32 3 4\n";
  }
  CliRun r = lowbit_cli("tune --list --db " + p("tune.txt") + " --op scatter_mm", dir_);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("scatter_mm | NVIDIA H100 80GB HBM3 | float16 0.5 | 256 256 256 16 16 | 1 2 16 32 3 4"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("bsr_dense_addmm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# 1 entry"), std::string::npos) << r.output;
  r = lowbit_cli("tune --list", dir_, "LOWBIT_TUNE_DB=" + p("tune.txt") + " ");
  EXPECT_EQ(r.status, 0) << r.output;  // the shipped entries, and both of the user's
  EXPECT_NE(r.output.find("shipped entries, then"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scatter_mm | NVIDIA H100 80GB HBM3 | float16 0.5"), std::string::npos) << r.output;
  {
    std::ofstream f(dir_ / "bad.txt");
    f << "# fine\nbsr_dense_addmm | dev | v | 1 2 | 3 x\n";
  }
  r = lowbit_cli("tune --list --db " + p("bad.txt"), dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("bad.txt:2: parameters must be integers"), std::string::npos) << r.output;
  r = lowbit_cli("tune", dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("give an op to measure"), std::string::npos) << r.output;
}

// `lowbit tune OP`: every config of a shape measured and the fastest written; a second run keeps or replaces
// that entry (one entry a key); bad ops and shapes are refused.
TEST_F(Cli, TuneMeasuresAndWritesEntries) {
  const std::string db = p("user_tune.txt");
  CliRun r = lowbit_cli("tune matmul_4bit --device cpu --shapes 2x64x128,1x32x64 --reps 1 --db " + db, dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2x64x128 -> "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("new entry"), std::string::npos) << r.output;
  r = lowbit_cli("tune --list --db " + db, dir_);
  EXPECT_NE(r.output.find("| bfloat16 nf4 64 | 2 64 128 | "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# 2 entries"), std::string::npos) << r.output;
  r = lowbit_cli("tune matmul_4bit --device cpu --shapes 2x64x128 --reps 1 --db " + db, dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(r.output.find("entry kept") != std::string::npos || r.output.find("replaces") != std::string::npos)
      << r.output;
  r = lowbit_cli("tune --list --db " + db, dir_);
  EXPECT_NE(r.output.find("# 2 entries"), std::string::npos) << r.output;
  r = lowbit_cli("tune matmul --device cpu --shapes 3x64x128 --type uint4:g32:zeros --reps 1 --db " + db, dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  r = lowbit_cli("tune --list --db " + db + " --op matmul", dir_);
  EXPECT_NE(r.output.find("| float16 uint4 g32 quantized | 3 64 128 | "), std::string::npos) << r.output;
  r = lowbit_cli("tune matmul --device cpu --shapes 3x64x128 --type int5 --db " + db, dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  r = lowbit_cli("tune matmul_8bit --shapes 1x2x3 --db " + db, dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("no measured op 'matmul_8bit'"), std::string::npos) << r.output;
  r = lowbit_cli("tune matmul_4bit --device cpu --shapes 2x64 --db " + db, dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("MxNxK"), std::string::npos) << r.output;
}

TEST_F(Cli, QuantizeInspectDequantize) {
  for (const char* fmt : {"nf4 --double-quant", "fp4 --blocksize 128", "int8", "fp8-block", "int4-g64 --asym"}) {
    SCOPED_TRACE(fmt);
    CliRun r = lowbit_cli("quantize " + p("in") + " " + p("q") + " --format " + fmt + " --device cpu", dir_);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("RMSE"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("kept: output head"), std::string::npos) << r.output;
    r = lowbit_cli("inspect " + p("q"), dir_);
    EXPECT_EQ(r.status, 0) << r.output;
    r = lowbit_cli("inspect --json " + p("q"), dir_);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("\"problems\": 0"), std::string::npos) << r.output;
    r = lowbit_cli("dequantize " + p("q") + " " + p("d"), dir_);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(io::Checkpoint::open(dir_ / "d").names(), io::Checkpoint::open(dir_ / "in").names());
    fs::remove_all(dir_ / "q");
    fs::remove_all(dir_ / "d");
  }
}

TEST_F(Cli, BadCommandLinesExitWith2) {
  const std::vector<std::string> cases = {"quantize " + p("in") + " " + p("q"),                    // no --format
                                          "quantize " + p("in") + " " + p("q") + " --format nf5",  // unknown format
                                          "quantize " + p("in") + " " + p("q") + " --format int8 --double-quant",
                                          "quantize " + p("in") + " " + p("q") + " --format nf4 --group-size 64",
                                          "quantize " + p("in") + " " + p("q") + " --format int4 --sym --asym",
                                          "quantize " + p("in") + " " + p("q") + " --format fp8-block --blocksize 3",
                                          "quantize " + p("absent") + " " + p("q") + " --format nf4",
                                          "dequantize " + p("in") + " " + p("q") + " --dtype int8",
                                          "inspect"};
  for (const std::string& args : cases) {
    const CliRun r = lowbit_cli(args, dir_);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "q"));
  }
}

TEST_F(Cli, CorruptedInputsExitWith1AndLeaveNothing) {
  test::write_bytes(dir_ / "empty.safetensors", "");
  CliRun r = lowbit_cli("quantize " + p("empty.safetensors") + " " + p("q.safetensors") + " --format nf4", dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("format_error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("empty.safetensors: the file is empty"), std::string::npos) << r.output;
  r = lowbit_cli("inspect " + p("empty.safetensors"), dir_);
  EXPECT_EQ(r.status, 1) << r.output;

  const auto model = dir_ / "in" / "model.safetensors";
  std::string bytes = test::read_bytes(model);
  bytes.resize(bytes.size() / 2);
  test::write_bytes(model, bytes);
  const std::string before = test::fingerprint(dir_ / "in");
  r = lowbit_cli("quantize " + p("in") + " " + p("q") + " --format int8", dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  EXPECT_EQ(test::fingerprint(dir_ / "in"), before);
  for (const auto& e : dir_.listing()) {
    EXPECT_TRUE(e.rfind("in", 0) == 0 || e == "empty.safetensors") << "left behind: " << e;
  }
}

// Serializing deeply nested JSON (an error excerpt, the rewritten config.json)
// recurses once per level: such JSON is refused before it is parsed.
TEST_F(Cli, DeeplyNestedJsonIsRefusedNamingTheFile) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  test::write_raw(dir_ / "header.safetensors", "{\"w\":" + deep + "}", "");
  test::write_raw(dir_ / "metadata.safetensors", "{\"__metadata__\":{\"x\":" + deep + "}}", "");
  for (const char* name : {"header.safetensors", "metadata.safetensors"}) {
    SCOPED_TRACE(name);
    CliRun r = lowbit_cli("inspect " + p(name), dir_);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(std::string(name) + ": the header nests JSON more than 128 levels"), std::string::npos)
        << r.output;
    r = lowbit_cli("quantize " + p(name) + " " + p("q.safetensors") + " --format nf4", dir_);
    EXPECT_EQ(r.status, 1) << r.output;
  }
  test::write_bytes(dir_ / "in" / "config.json", "{\"model_type\": \"llama\", \"x\": " + deep + "}");
  for (const char* cmd : {"inspect ", "quantize --format nf4 "}) {
    SCOPED_TRACE(cmd);
    const std::string out = std::string(cmd) == "inspect " ? "" : " " + p("q");
    const CliRun r = lowbit_cli(cmd + p("in") + out, dir_);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("config.json: JSON nested more than 128 levels deep"), std::string::npos) << r.output;
  }
  for (const auto& e : dir_.listing()) {
    EXPECT_TRUE(e.rfind("in", 0) == 0 || e == "header.safetensors" || e == "metadata.safetensors")
        << "left behind: " << e;
  }
}

// Opening a FIFO for reading waits for a writer: the type is checked first.
TEST_F(Cli, AFifoIsRefusedWithoutWaiting) {
  ASSERT_EQ(::mkfifo((dir_ / "pipe.safetensors").c_str(), 0600), 0);
  CliRun r = lowbit_cli("inspect " + p("pipe.safetensors"), dir_, "timeout 20 ");
  EXPECT_EQ(r.status, 1) << r.output;  // 124: timed out in open()
  EXPECT_NE(r.output.find("pipe.safetensors: not a regular file"), std::string::npos) << r.output;
  r = lowbit_cli("quantize " + p("pipe.safetensors") + " " + p("q.safetensors") + " --format nf4", dir_, "timeout 20 ");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("pipe.safetensors: not a regular file"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "q.safetensors"));
}

// A file size limit (`ulimit -f`) stands in for a full disk: the write fails
// with an io_error and the run cleans up, where SIGXFSZ would kill it and
// leave its temporary file.
TEST_F(Cli, AFileSizeLimitIsAnErrorThatLeavesNothing) {
  for (const char* out : {"q.safetensors", "q"}) {
    SCOPED_TRACE(out);
    const std::string in = std::string(out) == "q" ? p("in") : p("in/model.safetensors");
    const CliRun r = lowbit_cli("quantize " + in + " " + p(out) + " --format nf4", dir_, "ulimit -f 1; ");
    EXPECT_EQ(r.status, 1) << r.output;  // 153: killed by SIGXFSZ
    EXPECT_NE(r.output.find("io_error"), std::string::npos) << r.output;
    for (const auto& e : dir_.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
  }
}

// A link loop anywhere the commands look is an io_error naming it, never
// std::filesystem's raw message (nor a copy that recurses 40 levels deep).
TEST_F(Cli, SymbolicLinkLoopsAreNamed) {
  const auto in = dir_ / "in";
  struct Case {
    const char* link;    // created in `in`
    const char* target;  // what it points at
    const char* args;    // the command, {in} and {out} replaced
    const char* message;
  };
  const Case cases[] = {
      {"self", "self", "quantize {in} {out} --format nf4",
       "in/self: cannot be read (Too many levels of symbolic links: "
       "a symbolic link loop)"},
      {"sub", ".", "quantize {in} {out} --format nf4", "in/sub: leads back to "},
      {"x.safetensors", "x.safetensors", "inspect {in}", "in/x.safetensors: cannot be read ("},
      {"config.json", "config.json", "inspect {in}", "in/config.json: cannot be read ("},
      {"config.json", "config.json", "quantize {in} {out} --format nf4", "in/config.json: cannot be read ("},
  };
  const std::string config = test::read_bytes(in / "config.json");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.link);
    fs::remove(in / c.link);
    fs::create_symlink(c.target, in / c.link);
    std::string args = c.args;
    args.replace(args.find("{in}"), 4, p("in"));
    if (args.find("{out}") != std::string::npos) args.replace(args.find("{out}"), 5, p("q"));
    const CliRun r = lowbit_cli(args, dir_);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
    fs::remove(in / c.link);
    if (std::string(c.link) == "config.json") test::write_bytes(in / "config.json", config);
  }
  // An output that is a link loop is not replaced by a file.
  fs::create_symlink("loop", dir_ / "loop");
  const CliRun r =
      lowbit_cli("quantize --force " + p("in/model.safetensors") + " " + p("loop") + " --format nf4", dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("loop: cannot be read (Too many levels of symbolic links"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir_ / "loop"));
  for (const auto& e : dir_.listing()) EXPECT_TRUE(e.rfind("in", 0) == 0 || e == "loop") << "left behind: " << e;
}

TEST_F(Cli, InspectFailsAChecklessCheckpoint) {
  CliRun r = lowbit_cli(
      "quantize " + p("in/model.safetensors") + " " + p("q.safetensors") + " --format nf4 --no-report", dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("RMSE"), std::string::npos) << "--no-report";
  // Drop one quant_state by rewriting the file without it.
  const auto f = io::SafetensorsFile::open(dir_ / "q.safetensors");
  std::vector<io::TensorDecl> decls;
  for (const auto& t : f.tensors()) {
    if (t.name.find("up_proj.weight.quant_state") == std::string::npos) decls.push_back({t.name, t.dtype, t.shape, {}});
  }
  io::SafetensorsWriter w(dir_ / "broken.safetensors", decls, f.metadata());
  for (const auto& d : decls) w.write(d.name, f.bytes(d.name));
  w.commit();
  r = lowbit_cli("inspect " + p("broken.safetensors"), dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("quant_state is missing"), std::string::npos) << r.output;
  r = lowbit_cli("dequantize " + p("broken.safetensors") + " " + p("d.safetensors"), dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "d.safetensors"));
}

// One F32 [64, 128] weight per entry, with NaN at the given positions and
// +Inf at the others listed.
void write_weights(const fs::path& path, const std::map<std::string, std::pair<std::vector<int>, std::vector<int>>>& w) {
  std::vector<io::TensorDecl> decls;
  for (const auto& [name, _] : w) decls.push_back({name, "F32", {64, 128}, {}});
  io::SafetensorsWriter out(path, decls);
  for (const auto& [name, special] : w) {
    Tensor t = test::random_floats({64, 128}, DType::f32);
    float* v = t.ptr<float>();
    for (int i : special.first) v[i] = std::numeric_limits<float>::quiet_NaN();
    for (int i : special.second) v[i] = std::numeric_limits<float>::infinity();
    out.write(name, t.ref());
  }
  out.commit();
}

TEST_F(Cli, TheReportCountsNonFiniteWeights) {
  write_weights(dir_ / "w.safetensors", {{"a.mlp.up_proj.weight", {{5}, {300}}}, {"b.mlp.up_proj.weight", {{}, {}}}});
  const CliRun r =
      lowbit_cli("quantize " + p("w.safetensors") + " " + p("q.safetensors") + " --format int8 --device cpu", dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  // The Inf takes its row's 127 finite values with it (its absmax is Inf).
  EXPECT_NE(r.output.find("2 weights are NaN or Inf, 127 finite ones were restored as NaN or Inf (1 tensor, first "
                          "'a.mlp.up_proj.weight')"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("over all finite quantized weights"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("2.000000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 NaN/Inf in the input  127 finite restored as NaN/Inf"), std::string::npos) << r.output;

  // Nothing finite at all: no figures, and no error line.
  std::vector<int> all(64 * 128);
  for (int i = 0; i < 64 * 128; ++i) all[static_cast<size_t>(i)] = i;
  write_weights(dir_ / "n.safetensors", {{"a.mlp.up_proj.weight", {all, {}}}});
  const CliRun n =
      lowbit_cli("quantize " + p("n.safetensors") + " " + p("qn.safetensors") + " --format int8 --device cpu", dir_);
  ASSERT_EQ(n.status, 0) << n.output;
  EXPECT_NE(n.output.find("(nothing finite to compare)"), std::string::npos) << n.output;
  EXPECT_EQ(n.output.find("error:"), std::string::npos) << n.output;
  EXPECT_NE(n.output.find("8192 weights are NaN or Inf"), std::string::npos) << n.output;
}

TEST_F(Cli, Int4RefusesNonFiniteWeights) {
  write_weights(dir_ / "w.safetensors", {{"a.mlp.up_proj.weight", {{5}, {300, 301}}}, {"b.mlp.up_proj.weight", {{}, {}}}});
  CliRun r = lowbit_cli("quantize " + p("w.safetensors") + " " + p("q.safetensors") + " --format int4 --device cpu", dir_);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("'a.mlp.up_proj.weight' holds 3 non-finite values (1 NaN, 2 Inf; the first at [0, 5])"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "q.safetensors"));
  r = lowbit_cli("quantize " + p("w.safetensors") + " " + p("q.safetensors") +
                     " --format int4 --device cpu --exclude 'a.*'",
                 dir_);
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(Cli, Nf4DoubleQuantWithInfReadsBack) {
  // An Inf makes its block's absmax Inf and so the nested offset (their mean):
  // written as Python's json writes it (Infinity), read back by inspect and dequantize.
  write_weights(dir_ / "w.safetensors", {{"a.mlp.up_proj.weight", {{}, {300}}}, {"b.mlp.up_proj.weight", {{}, {}}}});
  CliRun r = lowbit_cli("quantize " + p("w.safetensors") + " " + p("q.safetensors") +
                            " --format nf4 --double-quant --device cpu",
                        dir_);
  ASSERT_EQ(r.status, 0) << r.output;
  r = lowbit_cli("inspect " + p("q.safetensors"), dir_);
  EXPECT_EQ(r.status, 0) << r.output;
  r = lowbit_cli("dequantize " + p("q.safetensors") + " " + p("d.safetensors") + " --device cpu", dir_);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "d.safetensors"));
}

}  // namespace
}  // namespace lowbit
