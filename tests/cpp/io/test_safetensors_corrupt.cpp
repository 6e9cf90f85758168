// Every kind of malformed safetensors file gives a format_error that names
// the file and the problem (never a crash, never a huge allocation).
#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.h"
#include "lowbit/io.h"

namespace lowbit {
namespace {

using test::ScratchDir;

struct Corruption {
  const char* name;
  std::string bytes;  // the whole file
  std::vector<std::string> message;
};

std::string raw(const std::string& header, const std::string& data, uint64_t length_field = 0) {
  const uint64_t n = length_field ? length_field : header.size();
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return b + header + data;
}

const std::string kF32x2 = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

std::vector<Corruption> corruptions() {
  return {
      {"empty", "", {"is empty (0 bytes)"}},
      {"shorter than the length field", std::string("\x10\x00\x00", 3), {"truncated", "3 bytes"}},
      {"huge header length", raw("{}", "", uint64_t{1} << 62), {"exceeds safetensors' limit"}},
      {"header length past the end", raw(kF32x2, std::string(8, '\0'), 4096), {"truncated", "4096 bytes"}},
      {"truncated data", raw(kF32x2, std::string(5, '\0')), {"'w'", "end past the data section", "truncated"}},
      {"not JSON", raw("{\"w\": [1, 2", ""), {"not valid JSON"}},
      {"not starting with {", raw("[1, 2, 3]", ""), {"does not start with '{'"}},
      {"invalid UTF-8", raw("{\"\xff\xfe\": 1}", ""), {"not valid JSON"}},
      {"unknown dtype",
       raw(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, '\0')),
       {"'w'", "unknown dtype 'F128'"}},
      {"negative extent",
       raw(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"'w'", "integers >= 0"}},
      {"dtype and shape do not match the byte range",
       raw(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       {"'w'", "needs 12 bytes", "span 8"}},
      {"offsets out of range",
       raw(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})", std::string(4, '\0')),
       {"'w'", "end past the data section"}},
      {"overlapping tensors",
       raw(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
           std::string(6, '\0')),
       {"'a'", "'b'", "overlap"}},
      {"a hole between tensors",
       raw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
           std::string(6, '\0')),
       {"bytes [2, 4)", "belong to no tensor"}},
      {"trailing bytes", raw(kF32x2, std::string(12, '\0')), {"holds 12 bytes", "end at byte 8"}},
      {"a name given twice",
       raw(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
           std::string(1, '\0')),
       {"'w' more than once"}},
      {"metadata not strings", raw(R"({"__metadata__":{"format":1}})", ""), {"__metadata__ 'format'", "string"}},
      {"unexpected field",
       raw(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":0}})", std::string(1, '\0')),
       {"'w'", "unexpected field 'x'"}},
      {"offsets backwards",
       raw(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", std::string(4, '\0')),
       {"'w'", "end before they begin"}},
      {"JSON nested too deep", raw("{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}", ""),
       {"nests JSON more than 128 levels"}},
      {"metadata nested too deep",
       raw("{\"__metadata__\":" + std::string(100000, '{') + std::string(100000, '}') + "}", ""),
       {"nests JSON more than 128 levels"}},
      {"overflowing shape",
       raw(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""),
       {"'w'", "overflow"}},
  };
}

TEST(SafetensorsCorrupt, EachKindGivesItsOwnErrorNamingTheFile) {
  ScratchDir dir;
  for (const Corruption& c : corruptions()) {
    SCOPED_TRACE(c.name);
    const auto path = dir / "bad.safetensors";
    test::write_bytes(path, c.bytes);
    std::vector<std::string> parts = c.message;
    parts.push_back("bad.safetensors");
    test::expect_error([&] { io::SafetensorsFile::open(path); }, ErrorCode::format_error, parts);
    // The parser alone (what the fuzzer drives) says the same.
    const auto* p = reinterpret_cast<const uint8_t*>(c.bytes.data());
    test::expect_error(
        [&] {
          io::parse_safetensors_header({p, c.bytes.size()}, c.bytes.size(), "bad.safetensors");
        },
        ErrorCode::format_error, parts);
  }
}

TEST(SafetensorsCorrupt, AFolderReportsTheBrokenShard) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "c", 2);
  const auto shard = dir / "c" / "model-00002-of-00002.safetensors";
  std::string bytes = test::read_bytes(shard);
  bytes.resize(bytes.size() - 3);
  test::write_bytes(shard, bytes);
  test::expect_error([&] { io::Checkpoint::open(dir / "c"); }, ErrorCode::format_error,
                     {"model-00002-of-00002.safetensors", "truncated"});
}

TEST(SafetensorsCorrupt, UnreadableFilesAreIoErrors) {
  ScratchDir dir;
  test::expect_error([&] { io::SafetensorsFile::open(dir / "absent.safetensors"); }, ErrorCode::io_error,
                     {"absent.safetensors", "cannot open"});
  test::expect_error([&] { io::SafetensorsFile::open(dir.path()); }, ErrorCode::io_error, {"not a regular file"});
}

}  // namespace
}  // namespace lowbit
