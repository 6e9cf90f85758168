// safetensors writing and reading: round trips of every dtype, the header's
// exact bytes, alignment, zero-copy views, streaming order, variable-size
// tensors, atomic output, sharded folders.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "harness/harness.h"
#include "io/io_test_util.h"
#include "lowbit/io.h"

namespace lowbit {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

TEST(Safetensors, HeaderBytesAsTheReferenceWriterMakesThem) {
  ScratchDir dir;
  Tensor a = test::host_tensor({1.0f, 2.0f});
  Tensor b = Tensor::empty({3}, DType::u8);
  std::memset(b.data(), 7, 3);
  io::save_safetensors(dir / "x.safetensors", {{"b", b}, {"a", a}}, {{"format", "pt"}});
  const std::string bytes = test::read_bytes(dir / "x.safetensors");
  const std::string json = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  const size_t n = (json.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + n + 11);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len, n);
  EXPECT_EQ(bytes.substr(8, json.size()), json);
  EXPECT_EQ(bytes.substr(8 + json.size(), n - json.size()), std::string(n - json.size(), ' '));
  float f[2];
  std::memcpy(f, bytes.data() + 8 + n, 8);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 2.0f);
  EXPECT_EQ(bytes.substr(8 + n + 8), std::string(3, '\7'));
}

TEST(Safetensors, RoundTripOfEveryLowbitDtypeWithAlignedZeroCopyViews) {
  ScratchDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::i8, DType::u8, DType::i32,
                  DType::i64}) {
    // Odd sizes so a careless layout would misalign the next tensor.
    tensors.emplace_back(std::string(dtype_name(d)), test::random_bytes({3, 5}, d));
  }
  tensors.emplace_back("scalar", test::random_bytes({}, DType::f32));
  tensors.emplace_back("empty", Tensor::empty({0, 4}, DType::bf16));
  std::vector<std::pair<std::string, TensorRef>> refs;
  for (const auto& [n, t] : tensors) refs.emplace_back(n, t.ref());
  io::save_safetensors(dir / "all.safetensors", refs);

  const auto f = io::SafetensorsFile::open(dir / "all.safetensors");
  EXPECT_TRUE(f.metadata().empty());
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const TensorRef v = f.view(name);
    EXPECT_EQ(v.dtype, t.dtype());
    EXPECT_EQ(std::vector<int64_t>(v.sizes().begin(), v.sizes().end()),
              std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
    EXPECT_EQ(v.data, static_cast<const void*>(f.bytes(name).data())) << "view() must not copy";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % std::max<size_t>(1, dtype_bits(t.dtype()) / 8), 0u);
    EXPECT_EQ(std::memcmp(v.data, t.data(), t.nbytes()), 0);
    const Tensor loaded = f.load(name);
    EXPECT_EQ(std::memcmp(loaded.data(), t.data(), t.nbytes()), 0);
    f.release(name);  // pages may go; the view reads them again from the file
    EXPECT_EQ(std::memcmp(v.data, t.data(), t.nbytes()), 0);
  }
}

TEST(Safetensors, TypesWithoutALowbitDtypeAreCopiedAsBytes) {
  ScratchDir dir;
  test::write_raw(
      dir / "f64.safetensors",
      R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"BOOL","shape":[1],"data_offsets":[16,17]}})",
      std::string(16, '\1') + std::string(1, '\0'));
  const auto f = io::SafetensorsFile::open(dir / "f64.safetensors");
  EXPECT_EQ(f.bytes("d").size(), 16u);
  test::expect_error([&] { f.view("d"); }, ErrorCode::unsupported_dtype, {"'d'", "F64", "bytes can still be copied"});
  io::SafetensorsWriter w(dir / "copy.safetensors", {{"d", "F64", {2}, {}}, {"b", "BOOL", {1}, {}}});
  w.write("b", f.bytes("b"));
  w.write("d", f.bytes("d"));
  w.commit();
  const auto g = io::SafetensorsFile::open(dir / "copy.safetensors");
  EXPECT_EQ(g.info("d").dtype, "F64");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(g.bytes("d").data()), 16), std::string(16, '\1'));
}

TEST(Safetensors, MisalignedDataIsLoadedNotViewed) {
  ScratchDir dir;
  // A 1-byte tensor first puts the F32 one at an odd offset; the header is
  // left unpadded on purpose (other writers do that).
  test::write_raw(
      dir / "odd.safetensors",
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
      std::string("\x05\x00\x00\x80\x3f", 5), /*pad=*/false);
  const auto f = io::SafetensorsFile::open(dir / "odd.safetensors");
  test::expect_error([&] { f.view("b"); }, ErrorCode::format_error, {"odd.safetensors", "'b'", "not aligned"});
  EXPECT_EQ(f.load("b").ptr<float>()[0], 1.0f);
}

TEST(Safetensors, StreamingWriterTakesTensorsInAnyOrderAndVariableSizesLast) {
  ScratchDir dir;
  io::SafetensorsWriter w(dir / "s.safetensors",
                          {{"big", "F32", {4}, {}}, {"blob", "U8", {}, 100}, {"small", "U8", {3}, {}}}, {{"k", "v"}});
  const std::string blob = "{\"quant_type\": \"nf4\"}";
  w.write("small", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("abc"), 3));
  w.write("blob", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size()));
  Tensor big = test::host_tensor({1, 2, 3, 4});
  w.write("big", big.ref());
  test::expect_error([&] { w.write("big", big.ref()); }, ErrorCode::invalid_argument, {"'big'", "written twice"});
  w.commit();
  const auto f = io::SafetensorsFile::open(dir / "s.safetensors");
  EXPECT_EQ(f.metadata().at("k"), "v");
  EXPECT_EQ(f.info("blob").shape, std::vector<int64_t>{static_cast<int64_t>(blob.size())});
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.bytes("blob").data()), blob.size()), blob);
  EXPECT_EQ(f.tensors().back().name, "blob") << "variable-size tensors go last";
  EXPECT_EQ(f.view("big").ptr<float>()[3], 4.0f);
}

TEST(Safetensors, AnUncommittedWriterLeavesNothing) {
  ScratchDir dir;
  {
    io::SafetensorsWriter w(dir / "x.safetensors", {{"a", "F32", {1}, {}}});
    EXPECT_EQ(dir.listing().size(), 1u) << "a temporary file while writing";
  }
  EXPECT_TRUE(dir.listing().empty());
  io::SafetensorsWriter w(dir / "y.safetensors", {{"a", "F32", {1}, {}}, {"b", "F32", {1}, {}}});
  Tensor one = test::host_tensor({1.0f});
  w.write("a", one.ref());
  test::expect_error([&] { w.commit(); }, ErrorCode::invalid_argument, {"'b'", "never written"});
  test::expect_error([&] { w.write("c", one.ref()); }, ErrorCode::invalid_argument, {"'c'", "not declared"});
  test::expect_error([&] { w.write("b", std::span<const uint8_t>()); }, ErrorCode::invalid_argument,
                     {"'b'", "4 bytes", "got 0"});
}

TEST(Safetensors, CommitReplacesAnExistingFileAtomically) {
  ScratchDir dir;
  test::write_bytes(dir / "x.safetensors", "old");
  Tensor one = test::host_tensor({1.0f});
  io::save_safetensors(dir / "x.safetensors", {{"a", one.ref()}});
  EXPECT_EQ(io::SafetensorsFile::open(dir / "x.safetensors").view("a").ptr<float>()[0], 1.0f);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"x.safetensors"});
}

TEST(Checkpoint, OpensAFileAFolderAndShardsThroughTheIndex) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "one");
  test::write_tiny_checkpoint(dir / "three", 3);
  const auto one = io::Checkpoint::open(dir / "one");
  const auto three = io::Checkpoint::open(dir / "three");
  const auto file = io::Checkpoint::open(dir / "one" / "model.safetensors");
  EXPECT_TRUE(one.is_folder());
  EXPECT_FALSE(file.is_folder());
  EXPECT_EQ(three.files().size(), 3u);
  EXPECT_TRUE(three.has_index());
  EXPECT_EQ(one.names(), three.names());
  EXPECT_EQ(one.names(), file.names());
  const auto* where = three.file_of("lm_head.weight");
  ASSERT_NE(where, nullptr);
  EXPECT_NE(where->find("lm_head.weight"), nullptr);
  EXPECT_NE(one.config_text().find("llama"), std::string::npos);
}

TEST(Checkpoint, IndexAndShardsMustAgree) {
  ScratchDir dir;
  test::write_tiny_checkpoint(dir / "c", 2);
  const fs::path index = dir / "c" / "model.safetensors.index.json";
  auto j = nlohmann::json::parse(test::read_bytes(index));
  const auto original = j;
  j["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors";
  test::write_bytes(index, j.dump());
  test::expect_error([&] { io::Checkpoint::open(dir / "c"); }, ErrorCode::format_error,
                     {"'ghost.weight'", "does not hold it"});
  j["weight_map"].erase("ghost.weight");
  j["weight_map"]["lm_head.weight"] = "../../etc/passwd";
  test::write_bytes(index, j.dump());
  test::expect_error([&] { io::Checkpoint::open(dir / "c"); }, ErrorCode::format_error, {"same folder"});
  // A NUL ends the name the system opens: every shard renamed past it
  // would still open the real shards.
  auto nul = original;
  for (auto& [name, file] : nul["weight_map"].items()) file = file.get<std::string>() + std::string("\0.x", 3);
  test::write_bytes(index, nul.dump());
  test::expect_error([&] { io::Checkpoint::open(dir / "c"); }, ErrorCode::format_error,
                     {"lm_head.weight", "\\u0000.x\" must name a file in the same folder"});
  test::write_bytes(index, "{not json");
  test::expect_error([&] { io::Checkpoint::open(dir / "c"); }, ErrorCode::format_error,
                     {"model.safetensors.index.json", "not valid JSON"});
  test::expect_error([&] { io::Checkpoint::open(dir / "missing"); }, ErrorCode::io_error, {"no such file"});
  fs::create_directories(dir / "empty");
  test::expect_error([&] { io::Checkpoint::open(dir / "empty"); }, ErrorCode::format_error, {"no .safetensors"});
}

}  // namespace
}  // namespace lowbit
