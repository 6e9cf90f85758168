// Failures of the checkpoint commands: each gives its specific error, the
// input is never modified, and nothing is left behind (no output, no
// staging folder, no temporary file).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "lowbit/io.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

io::QuantizeOptions nf4() { return {}; }

// Rewrites `file` without the keys `drop` and with `replace` instead of
// some others (name -> dtype, shape, bytes).
struct Replacement {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void rewrite(const fs::path& file, const std::vector<std::string>& drop,
             const std::map<std::string, Replacement>& replace = {}) {
  const fs::path tmp = file.string() + ".new";
  {
    const auto f = io::SafetensorsFile::open(file);
    std::vector<io::TensorDecl> decls;
    for (const auto& t : f.tensors()) {
      if (std::find(drop.begin(), drop.end(), t.name) != drop.end()) continue;
      const auto r = replace.find(t.name);
      decls.push_back(r == replace.end() ? io::TensorDecl{t.name, t.dtype, t.shape, {}}
                                         : io::TensorDecl{t.name, r->second.dtype, r->second.shape, {}});
    }
    io::SafetensorsWriter w(tmp, decls, f.metadata());
    for (const auto& d : decls) {
      const auto r = replace.find(d.name);
      if (r == replace.end()) {
        w.write(d.name, f.bytes(d.name));
      } else {
        w.write(d.name, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(r->second.bytes.data()),
                                                 r->second.bytes.size()));
      }
    }
    w.commit();
  }
  fs::rename(tmp, file);
}

TEST(CheckpointFailures, ACorruptedInputFailsBeforeWritingAnything) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in", 2);
  const auto shard = dir / "in" / "model-00002-of-00002.safetensors";
  std::string bytes = test::read_bytes(shard);
  bytes[8 + 1] = '#';  // {#__metadata__": not JSON any more
  test::write_bytes(shard, bytes);
  const std::string before = test::fingerprint(dir / "in");
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "out", nf4()); }, ErrorCode::format_error,
                     {"model-00002-of-00002.safetensors", "not valid JSON"});
  EXPECT_EQ(test::fingerprint(dir / "in"), before);
  for (const auto& e : dir.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
}

TEST(CheckpointFailures, AnInterruptionRemovesThePartialOutput) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in", 2);
  const std::string before = test::fingerprint(dir / "in");
  for (const char* out : {"out", "file.safetensors"}) {
    SCOPED_TRACE(out);
    io::QuantizeOptions o;
    int calls = 0;
    o.cancelled = [&calls] { return ++calls > 5; };
    const fs::path in = std::string(out) == "out" ? dir / "in" : dir / "in" / "model-00001-of-00002.safetensors";
    test::expect_error([&] { io::quantize_checkpoint(in, dir / out, o); }, ErrorCode::io_error,
                       {"interrupted", "nothing was written"});
    EXPECT_EQ(test::fingerprint(dir / "in"), before);
    for (const auto& e : dir.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
  }
}

// Parent folders of the output that a run made are gone again when it fails;
// folders that were there before stay.
TEST(CheckpointFailures, AFailedRunRemovesTheParentFoldersItMade) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in", 2);
  fs::create_directories(dir / "kept");
  for (const char* out : {"new/deeper/out", "new/deeper/file.safetensors", "kept/new/out"}) {
    SCOPED_TRACE(out);
    io::QuantizeOptions o;
    int calls = 0;
    o.cancelled = [&calls] { return ++calls > 5; };
    const bool folder = std::string(out).ends_with("out");
    const fs::path in = folder ? dir / "in" : dir / "in" / "model-00001-of-00002.safetensors";
    test::expect_error([&] { io::quantize_checkpoint(in, dir / out, o); }, ErrorCode::io_error, {"interrupted"});
    EXPECT_FALSE(fs::exists(dir / "new"));
    EXPECT_FALSE(fs::exists(dir / "kept" / "new"));
    EXPECT_TRUE(fs::is_directory(dir / "kept"));
  }
}

// A config.json or index that is there but cannot be read as a file (a FIFO,
// a folder, nothing at all in it) is an error naming it, not a checkpoint
// quietly written without it.
TEST(CheckpointFailures, AConfigOrIndexThatIsNotAJsonFileIsNamed) {
  struct Case {
    const char* file;
    const char* make;  // "fifo", "folder", "empty"
    const char* says;
  };
  for (const Case c : {Case{"config.json", "fifo", "not a regular file"}, Case{"config.json", "folder", "not a regular file"},
                       Case{"config.json", "empty", "empty"},
                       Case{"model.safetensors.index.json", "fifo", "not a regular file"}}) {
    SCOPED_TRACE(std::string(c.file) + " " + c.make);
    ScratchDir dir;
    test::write_tiny_checkpoint(dir / "in", 2);
    const fs::path f = dir / "in" / c.file;
    fs::remove(f);
    if (std::string(c.make) == "fifo") {
      ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    }
    if (std::string(c.make) == "folder") fs::create_directory(f);
    if (std::string(c.make) == "empty") test::write_bytes(f, "");
    try {
      io::quantize_checkpoint(dir / "in", dir / "out", nf4());
      ADD_FAILURE() << "quantized without reading " << c.file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(f.string() + ": " + c.says), std::string::npos) << e.what();
    }
    for (const auto& e : dir.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
  }
}

// A side file that is a FIFO cannot be copied: an error naming it, not an
// output folder quietly missing it.
TEST(CheckpointFailures, ASideFileThatIsNotARegularFileIsNamed) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in", 2);
  const fs::path fifo = dir / "in" / "vocab.pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "out", nf4()); }, ErrorCode::io_error,
                     {fifo.string() + " is a FIFO", "only regular files and folders are copied"});
  for (const auto& e : dir.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
}

TEST(CheckpointFailures, OutputsThatWouldTouchTheInputOrAnExistingOutputAreRefused) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "in" / "q", nf4()); }, ErrorCode::invalid_argument,
                     {"inside the input folder"});
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "in", nf4()); }, ErrorCode::invalid_argument,
                     {"is the input"});
  test::expect_error(
      [&] { io::quantize_checkpoint(dir / "in" / "model.safetensors", dir / "in" / "model.safetensors", nf4()); },
      ErrorCode::invalid_argument, {"is the input"});
  fs::create_directories(dir / "out");
  test::write_bytes(dir / "out" / "old.txt", "old");
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "out", nf4()); }, ErrorCode::io_error,
                     {"exists", "--force"});
  io::QuantizeOptions o;
  o.overwrite = true;
  io::quantize_checkpoint(dir / "in", dir / "out", o);
  EXPECT_FALSE(fs::exists(dir / "out" / "old.txt"));
  EXPECT_TRUE(fs::exists(dir / "out" / "model.safetensors"));
  for (const auto& e : dir.listing()) EXPECT_EQ(e.find(".tmp-"), std::string::npos) << e;
}

// --force replaces what lowbit could have written, never a device node or a
// FIFO (a FIFO stands in for /dev/null here: the test runs as any user).
TEST(CheckpointFailures, ForceReplacesOnlyARegularFileOrAFolder) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.overwrite = true;
  for (const char* out : {"out.safetensors", "out"}) {
    SCOPED_TRACE(out);
    ASSERT_EQ(::mkfifo((dir / out).c_str(), 0600), 0);
    const fs::path in = std::string(out) == "out" ? dir / "in" : dir / "in" / "model.safetensors";
    test::expect_error([&] { io::quantize_checkpoint(in, dir / out, o); }, ErrorCode::io_error,
                       {out, "is a FIFO", "replaces only a regular file or a folder"});
    EXPECT_TRUE(fs::is_fifo(dir / out));
    fs::remove(dir / out);
  }
  for (const auto& e : dir.listing()) EXPECT_EQ(e.rfind("in", 0), 0u) << "left behind: " << e;
}

// Cuts `file` after its header, as another process might while it is read.
void truncate_after_header(const fs::path& file) {
  const std::string head = test::read_bytes(file).substr(0, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(head[static_cast<size_t>(i)]);
  fs::resize_file(file, 8 + n);
}

// Reads of the mapping past the new end would raise SIGBUS (or EFAULT in a
// write from it): the commands read with pread, so a file shortened
// meanwhile is an error naming it, whichever tensor comes next.
TEST(CheckpointFailures, AnInputShortenedWhileReadIsAnErrorNamingIt) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::quantize_checkpoint(dir / "in", dir / "q", nf4());
  for (const char* in : {"in", "in/model.safetensors", "q"}) {
    const fs::path model = fs::is_directory(dir / in) ? dir / in / "model.safetensors" : dir / in;
    const fs::path out = dir / (fs::is_directory(dir / in) ? "out" : "out.safetensors");
    const std::string bytes = test::read_bytes(model);
    for (int when = 1; when < 1000; ++when) {
      SCOPED_TRACE(testing::Message() << in << ", shortened before step " << when);
      int calls = 0;
      const auto shorten = [&] {
        if (++calls == when) truncate_after_header(model);
        return false;
      };
      bool failed = false;
      try {
        if (std::string(in) == "q") {
          io::DequantizeOptions o;
          o.cancelled = shorten;
          io::dequantize_checkpoint(dir / in, out, o);
        } else {
          io::QuantizeOptions o;
          o.cancelled = shorten;
          io::quantize_checkpoint(dir / in, out, o);
        }
      } catch (const Error& e) {
        failed = true;
        EXPECT_GE(calls, when) << "failed before the file was cut: " << e.what();
        EXPECT_EQ(e.code(), ErrorCode::io_error) << e.what();
        EXPECT_NE(std::string(e.what()).find(model.string() + ": the file ends at byte"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("shortened by another process"), std::string::npos) << e.what();
      }
      test::write_bytes(model, bytes);
      if (!failed) {
        fs::remove_all(out);
        break;  // cut after the last read (or not at all): every step was tried
      }
      for (const auto& e : dir.listing()) {
        EXPECT_TRUE(e.rfind("in", 0) == 0 || e.rfind("q", 0) == 0) << "left behind: " << e;
      }
      if (calls < when) break;  // a failure unrelated to the cut: reported above
    }
  }
}

// Of two runs to one new output, the one that finishes second fails
// (without --force) instead of replacing the first one's result.
TEST(CheckpointFailures, AnOutputThatAppearsWhileWritingIsNotReplaced) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  for (const char* out : {"out.safetensors", "out"}) {
    SCOPED_TRACE(out);
    const bool folder = std::string(out) == "out";
    const fs::path other = folder ? dir / out / "model.safetensors" : dir / out;
    io::QuantizeOptions o;
    int calls = 0;
    o.cancelled = [&] {
      if (++calls == 2) {
        fs::create_directories(other.parent_path());
        test::write_bytes(other, "the other run's output");
      }
      return false;
    };
    test::expect_error(
        [&] { io::quantize_checkpoint(folder ? dir / "in" : dir / "in" / "model.safetensors", dir / out, o); },
        ErrorCode::io_error, {out, "appeared while writing", "--force"});
    EXPECT_EQ(test::read_bytes(other), "the other run's output");
    for (const auto& e : dir.listing()) EXPECT_EQ(e.find(".tmp-"), std::string::npos) << "left behind: " << e;
    fs::remove_all(dir / out);
  }
}

// A run killed with SIGKILL leaves its staging folder or temporary file;
// the next run to the same output removes those whose process is gone.
TEST(CheckpointFailures, LeftoversOfDeadRunsBesideTheOutputAreRemoved) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child);
  const std::vector<std::string> gone = {".out.tmp-" + dead + "-0/", ".out.old-" + dead + "-3/",
                                         ".out.safetensors.tmp-" + dead + "-1",
                                         "..out.safetensors.tmp-" + dead + "-2.tmp-" + dead + "-77"};
  const std::vector<std::string> kept = {".out.tmp-1-0/",  // pid 1 is alive
                                         ".other.tmp-" + dead + "-0", "out.tmp-" + dead + "-0",
                                         ".out.safetensors.tmp-" + dead};
  for (const auto& e : gone) test::write_bytes(dir / (e.ends_with("/") ? e + "x" : e), "left");
  for (const auto& e : kept) {
    if (e.ends_with("/")) fs::create_directories(dir / e);
    test::write_bytes(dir / (e.ends_with("/") ? e + "x" : e), "keep");
  }
  io::quantize_checkpoint(dir / "in", dir / "out", nf4());
  io::quantize_checkpoint(dir / "in" / "model.safetensors", dir / "out.safetensors", nf4());
  for (const auto& e : gone) EXPECT_FALSE(fs::exists(dir / e.substr(0, e.find('/')))) << e;
  for (const auto& e : kept) EXPECT_TRUE(fs::exists(dir / e.substr(0, e.find('/')))) << e;
}

TEST(CheckpointFailures, BadOptionsAreInvalidArguments) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.blocksize = 48;
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "out", o); }, ErrorCode::invalid_argument,
                     {"blocksize", "48"});
  o = {};
  o.format = io::Format::int8;
  o.double_quant = true;
  test::expect_error([&] { io::quantize_checkpoint(dir / "in", dir / "out", o); }, ErrorCode::invalid_argument,
                     {"double quant", "int8"});
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(CheckpointFailures, AQuantizedInputIsNotQuantizedAgain) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::quantize_checkpoint(dir / "in", dir / "q", nf4());
  test::expect_error([&] { io::quantize_checkpoint(dir / "q", dir / "qq", nf4()); }, ErrorCode::invalid_argument,
                     {"already quantized", "bitsandbytes"});
  test::expect_error([&] { io::quantize_checkpoint(dir / "q" / "model.safetensors", dir / "qq.safetensors", nf4()); },
                     ErrorCode::invalid_argument, {"already quantized"});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "in", dir / "d", {}); }, ErrorCode::invalid_argument,
                     {"no quantized weights"});
}

TEST(CheckpointFailures, AMissingQuantStateIsNamed) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::quantize_checkpoint(dir / "in", dir / "q", nf4());
  const std::string w = "model.layers.0.mlp.up_proj.weight";
  rewrite(dir / "q" / "model.safetensors", {w + ".quant_state.bitsandbytes__nf4"});
  const auto s = io::inspect_checkpoint(dir / "q");
  EXPECT_EQ(s.problems, 1u);
  const auto it = std::find_if(s.weights.begin(), s.weights.end(), [&](const auto& x) { return x.name == w; });
  ASSERT_NE(it, s.weights.end());
  EXPECT_NE(it->problem.find("quant_state is missing"), std::string::npos) << it->problem;
  test::expect_error([&] { io::dequantize_checkpoint(dir / "q", dir / "d", {}); }, ErrorCode::format_error,
                     {"model.safetensors", w, "quant_state is missing"});
  EXPECT_FALSE(fs::exists(dir / "d"));
}

TEST(CheckpointFailures, DtypeAndShapeMismatchesInAQuantizedFileAreNamed) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.format = io::Format::int8;
  io::quantize_checkpoint(dir / "in", dir / "q", o);
  const std::string m = "model.layers.1.self_attn.k_proj";  // [64, 128]
  rewrite(dir / "q" / "model.safetensors", {}, {{m + ".SCB", {"F32", {32}, std::string(128, '\0')}}});
  auto s = io::inspect_checkpoint(dir / "q");
  EXPECT_EQ(s.problems, 1u);
  test::expect_error([&] { io::dequantize_checkpoint(dir / "q", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".SCB", "must be F32 [64]", "got F32 [32]"});

  o.format = io::Format::fp8_block;
  io::quantize_checkpoint(dir / "in", dir / "f", o);
  rewrite(dir / "f" / "model.safetensors", {}, {{m + ".weight", {"I8", {64, 128}, std::string(64 * 128, '\0')}}});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "f", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".weight", "must be F8_E4M3", "got I8"});

  o.format = io::Format::gptq;
  io::quantize_checkpoint(dir / "in", dir / "g", o);
  rewrite(dir / "g" / "model.safetensors", {m + ".g_idx"}, {{m + ".qzeros", {"I32", {2, 8}, std::string(64, '\0')}}});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "g", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".qzeros", "must be I32 [1, 8]", "got I32 [2, 8]"});
  EXPECT_FALSE(fs::exists(dir / "d"));
}

// The problem inspect reports for `name` ("" when none).
std::string problem_of(const io::CheckpointSummary& s, const std::string& name) {
  const auto it = std::find_if(s.weights.begin(), s.weights.end(), [&](const auto& x) { return x.name == name; });
  return it == s.weights.end() ? std::string("(no such weight)") : it->problem;
}

TEST(CheckpointFailures, MissingCompanionsAreNamed) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  const std::string m = "model.layers.1.self_attn.k_proj";  // [64, 128]
  const auto contains = [](const std::string& text, const std::vector<std::string>& parts) {
    for (const auto& p : parts) EXPECT_NE(text.find(p), std::string::npos) << "'" << p << "' not in: " << text;
  };

  io::QuantizeOptions o;
  o.format = io::Format::int8;
  io::quantize_checkpoint(dir / "in", dir / "i8", o);
  rewrite(dir / "i8" / "model.safetensors", {m + ".SCB"});
  auto s = io::inspect_checkpoint(dir / "i8");
  EXPECT_EQ(s.problems, 2u);  // the codes and weight_format
  contains(problem_of(s, m + ".weight"), {"model.safetensors", "I8 [64, 128]", m + ".SCB' (F32 [64]", "missing"});
  contains(problem_of(s, m + ".weight_format"), {m + ".SCB", "missing"});
  // The codes are listed as int8 (failing), the checkpoint as int8, not plain.
  EXPECT_EQ(std::find_if(s.weights.begin(), s.weights.end(), [&](const auto& x) { return x.name == m + ".weight"; })
                ->format,
            io::Format::int8);
  EXPECT_TRUE(s.detected.starts_with("int8")) << s.detected;
  test::expect_error([&] { io::dequantize_checkpoint(dir / "i8", dir / "d", {}); }, ErrorCode::format_error,
                     {"model.safetensors", m + ".weight", m + ".SCB", "is missing"});

  // Every SCB gone: still quantized codes, not a checkpoint with nothing to do.
  io::quantize_checkpoint(dir / "in" / "model.safetensors", dir / "i8.safetensors", o);
  std::vector<std::string> scb;
  {
    const auto f = io::SafetensorsFile::open(dir / "i8.safetensors");
    for (const auto& t : f.tensors()) {
      if (t.name.ends_with(".SCB")) scb.push_back(t.name);
    }
  }
  rewrite(dir / "i8.safetensors", scb);
  EXPECT_GE(io::inspect_checkpoint(dir / "i8.safetensors").problems, scb.size());
  test::expect_error([&] { io::dequantize_checkpoint(dir / "i8.safetensors", dir / "d.safetensors", {}); },
                     ErrorCode::format_error, {".SCB", "is missing"});

  o.format = io::Format::fp8_block;
  io::quantize_checkpoint(dir / "in", dir / "f8", o);
  rewrite(dir / "f8" / "model.safetensors", {m + ".weight_scale_inv"});
  s = io::inspect_checkpoint(dir / "f8");
  EXPECT_EQ(s.problems, 1u);
  contains(problem_of(s, m + ".weight"), {"F8_E4M3 [64, 128]", m + ".weight_scale_inv' (F32 [1, 1]", "missing"});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "f8", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".weight_scale_inv", "is missing"});

  o.format = io::Format::gptq;
  io::quantize_checkpoint(dir / "in", dir / "g", o);
  rewrite(dir / "g" / "model.safetensors", {m + ".qweight"});
  s = io::inspect_checkpoint(dir / "g");
  EXPECT_EQ(s.problems, 3u);  // qzeros, scales, g_idx
  contains(problem_of(s, m + ".scales"), {m + ".qweight", "missing"});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "g", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".qweight", "missing"});

  io::quantize_checkpoint(dir / "in", dir / "n", nf4());
  rewrite(dir / "n" / "model.safetensors", {m + ".weight.absmax", m + ".weight.quant_state.bitsandbytes__nf4"});
  s = io::inspect_checkpoint(dir / "n");
  EXPECT_EQ(s.problems, 2u);  // the codes and quant_map
  contains(problem_of(s, m + ".weight"), {"U8", m + ".weight.absmax", "quant_state", "missing"});
  test::expect_error([&] { io::dequantize_checkpoint(dir / "n", dir / "d", {}); }, ErrorCode::format_error,
                     {m + ".weight", "absmax", "missing"});
  EXPECT_FALSE(fs::exists(dir / "d"));
  EXPECT_FALSE(fs::exists(dir / "d.safetensors"));
}

TEST(CheckpointFailures, AConfigForAnotherFormatIsAProblem) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::quantize_checkpoint(dir / "in", dir / "q", nf4());
  auto config = nlohmann::json::parse(test::read_bytes(dir / "q" / "config.json"));
  config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  test::write_bytes(dir / "q" / "config.json", config.dump());
  auto s = io::inspect_checkpoint(dir / "q");
  EXPECT_GE(s.problems, 1u);
  EXPECT_NE(s.detected.find("quantization_config says fp8"), std::string::npos) << s.detected;
  const std::string w = "model.layers.0.mlp.up_proj.weight";
  EXPECT_NE(problem_of(s, w).find("quantization_config says fp8"), std::string::npos) << problem_of(s, w);
  test::expect_error([&] { io::dequantize_checkpoint(dir / "q", dir / "d", {}); }, ErrorCode::format_error,
                     {"quantization_config says fp8", "is stored as nf4"});
  config["quantization_config"] = {{"quant_method", "awq"}};
  test::write_bytes(dir / "q" / "config.json", config.dump());
  s = io::inspect_checkpoint(dir / "q");
  EXPECT_NE(s.detected.find("'awq'"), std::string::npos) << s.detected;
  test::expect_error([&] { io::dequantize_checkpoint(dir / "q", dir / "d", {}); }, ErrorCode::format_error,
                     {"quant_method 'awq'", "does not read"});
  EXPECT_FALSE(fs::exists(dir / "d"));
}

TEST(CheckpointFailures, AGptqGroupSizeThatDisagreesWithGIdxIsAProblem) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "in");
  io::QuantizeOptions o;
  o.format = io::Format::gptq;
  o.group_size = 64;
  io::quantize_checkpoint(dir / "in", dir / "g", o);
  EXPECT_EQ(io::inspect_checkpoint(dir / "g").problems, 0u);
  const std::string m = "model.layers.1.self_attn.k_proj";  // K = 128: two groups of 64
  auto config = nlohmann::json::parse(test::read_bytes(dir / "g" / "config.json"));
  const auto with_group_size = [&](int64_t g) {
    config["quantization_config"]["group_size"] = g;
    test::write_bytes(dir / "g" / "config.json", config.dump());
  };

  with_group_size(7);
  auto s = io::inspect_checkpoint(dir / "g");
  EXPECT_GE(s.problems, 1u);
  const std::string p = problem_of(s, m + ".weight");
  EXPECT_NE(p.find("quantization_config.group_size = 7 needs 19 groups for K = 128 but '" + m +
                   ".scales' holds 2"),
            std::string::npos)
      << p;
  test::expect_error([&] { io::dequantize_checkpoint(dir / "g", dir / "d", {}); }, ErrorCode::format_error,
                     {"model.safetensors", "quantization_config.group_size = 7 needs", ".scales' holds"});
  for (int64_t g : {int64_t{128}, int64_t{-1}}) {
    with_group_size(g);
    EXPECT_GE(io::inspect_checkpoint(dir / "g").problems, 1u) << g;
  }
  with_group_size(0);
  test::expect_error([&] { io::inspect_checkpoint(dir / "g"); }, ErrorCode::format_error,
                     {"config.json", "group_size must be -1 (one group per row) or positive (got 0)"});
  // Integers beyond int64 (or int, for bits) are refused, not wrapped:
  // 2^64 - 1 is not -1 and 2^32 + 4 is not 4.
  config["quantization_config"]["group_size"] = std::numeric_limits<uint64_t>::max();
  test::write_bytes(dir / "g" / "config.json", config.dump());
  test::expect_error([&] { io::inspect_checkpoint(dir / "g"); }, ErrorCode::format_error,
                     {"config.json", "quantization_config.group_size has the wrong type (got 18446744073709551615)"});
  config["quantization_config"]["group_size"] = 64;
  config["quantization_config"]["bits"] = (int64_t{1} << 32) + 4;
  test::write_bytes(dir / "g" / "config.json", config.dump());
  test::expect_error([&] { io::inspect_checkpoint(dir / "g"); }, ErrorCode::format_error,
                     {"config.json", "quantization_config.bits = 4294967300"});
  config["quantization_config"]["bits"] = 4;
  with_group_size(0);
  test::expect_error([&] { io::dequantize_checkpoint(dir / "g", dir / "d", {}); }, ErrorCode::format_error,
                     {"group_size must be -1"});

  // act-order: any order, but 64 columns per group.
  with_group_size(64);
  std::string g_idx(128 * 4, '\0');
  const auto set = [&](const std::vector<int32_t>& v) {
    std::memcpy(g_idx.data(), v.data(), g_idx.size());
    rewrite(dir / "g" / "model.safetensors", {}, {{m + ".g_idx", {"I32", {128}, g_idx}}});
  };
  std::vector<int32_t> v(128);
  for (int k = 0; k < 128; ++k) v[static_cast<size_t>(k)] = k % 2;
  set(v);
  EXPECT_EQ(problem_of(io::inspect_checkpoint(dir / "g"), m + ".weight"), "");
  for (int k = 0; k < 128; ++k) v[static_cast<size_t>(k)] = k < 100 ? 0 : 1;
  set(v);
  EXPECT_NE(problem_of(io::inspect_checkpoint(dir / "g"), m + ".weight")
                .find("quantization_config.group_size = 64 but '" + m + ".g_idx' puts 100 columns in group 0 "
                      "(expected 64)"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "d"));
}

}  // namespace
}  // namespace lowbit
