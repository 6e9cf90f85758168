// The tuned-parameter database: the text round trip, lookups (exact, "*",
// the device-family fallback, none), merging a user file over the shipped
// entries, and malformed lines named by file and line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "harness/harness.h"
#include "lowbit/tune.h"

namespace lowbit::test {
namespace {

constexpr const char* kText = R"(# a comment line
bsr_dense_addmm | NVIDIA A100-SXM4-80GB | float16 0.5 | 4096 4096 4096 32 32 | 4 2 3 4
bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5 | 4096 4096 4096 32 32 | 8 1 4 8   # measured
bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5 | 4096 4096 4096 64 64 | 2 2 3 8
scatter_mm | NVIDIA H100 80GB HBM3 | float16 0.5 | 256 256 256 16 16 | 1 2 16 32 3 4
)";

TEST(TuneDb, ParsesDumpsAndParsesBackTheSame) {
  const TuneDb db = TuneDb::parse(kText, "test");
  ASSERT_EQ(db.entries().size(), 4u);
  const TuneDb again = TuneDb::parse(db.dump(), "dump");
  EXPECT_EQ(again.dump(), db.dump());
  EXPECT_EQ(db.entries()[0].device, "NVIDIA A100-SXM4-80GB");  // sorted by op, device, version, key
}

TEST(TuneDb, LooksUpExactWildcardAndTheDeviceFamily) {
  const TuneDb db = TuneDb::parse(kText, "test");
  const std::vector<std::string> key = {"4096", "4096", "4096", "32", "32"};
  EXPECT_EQ(db.get("bsr_dense_addmm", "NVIDIA H100 80GB HBM3", "float16 0.5", key), (std::vector<int64_t>{8, 1, 4, 8}));
  // Another H100 variant falls back to the family's entry, unless exact.
  EXPECT_EQ(db.get("bsr_dense_addmm", "NVIDIA H100 PCIe", "float16 0.5", key), (std::vector<int64_t>{8, 1, 4, 8}));
  EXPECT_FALSE(db.get("bsr_dense_addmm", "NVIDIA H100 PCIe", "float16 0.5", key, /*exact=*/true));
  EXPECT_EQ(db.get("bsr_dense_addmm", "NVIDIA A100-PCIE-40GB", "float16 0.5", key), (std::vector<int64_t>{4, 2, 3, 4}));
  // Unknown device, version or key: nothing (the caller's heuristic).
  EXPECT_FALSE(db.get("bsr_dense_addmm", "NVIDIA L4", "float16 0.5", key));
  EXPECT_FALSE(db.get("bsr_dense_addmm", "NVIDIA H100 80GB HBM3", "bfloat16 0.5", key));
  EXPECT_FALSE(db.get("bsr_dense_addmm", "NVIDIA H100 80GB HBM3", "float16 0.5", {"1", "2", "3", "4", "5"}));
  const auto both =
      db.match("bsr_dense_addmm", "NVIDIA H100 80GB HBM3", "float16 0.5", {"4096", "4096", "4096", "*", "*"});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].key[3], "64");
  EXPECT_EQ(device_family("NVIDIA H100 80GB HBM3"), "NVIDIA H100");
  EXPECT_EQ(device_family("NVIDIA A100-SXM4-80GB"), "NVIDIA A100");
}

TEST(TuneDb, AUserFileOverridesAndAddsEntries) {
  TuneDb db = TuneDb::parse(kText, "shipped");
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_tune_" + std::to_string(seed()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "tune.txt";
  {
    std::ofstream f(path);
    f << "bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5 | 4096 4096 4096 32 32 | 16 1 2 4\n"
      << "bsr_dense_addmm | NVIDIA H200 | float16 0.5 | 4096 4096 4096 32 32 | 5 5 5 5\n";
  }
  db.merge(TuneDb::load(path));
  const std::vector<std::string> key = {"4096", "4096", "4096", "32", "32"};
  EXPECT_EQ(db.get("bsr_dense_addmm", "NVIDIA H100 80GB HBM3", "float16 0.5", key),
            (std::vector<int64_t>{16, 1, 2, 4}));
  EXPECT_EQ(db.get("bsr_dense_addmm", "NVIDIA H200", "float16 0.5", key), (std::vector<int64_t>{5, 5, 5, 5}));
  EXPECT_EQ(db.entries().size(), 5u);
  EXPECT_TRUE(TuneDb::load(dir / "absent.txt").entries().empty());  // no file: an empty database
  std::filesystem::remove_all(dir);
}

TEST(TuneDb, MalformedLinesNameTheFileAndLine) {
  expect_error([] { TuneDb::parse("op | dev | v | 1 2\n", "db.txt"); }, ErrorCode::invalid_argument,
               {"db.txt:1", "op | device | version | key | parameters"});
  expect_error([] { TuneDb::parse("# c\nop | dev | v | 1 2 | 3 x\n", "db.txt"); }, ErrorCode::invalid_argument,
               {"db.txt:2", "parameters must be integers", "'x'"});
  expect_error([] { TuneDb::parse("op | dev | v | 1 |\n", "db.txt"); }, ErrorCode::invalid_argument,
               {"db.txt:1", "no parameters"});
}

// The form `lowbit tune` writes: one kernel config name ("default": the backend's choice).
TEST(TuneDb, ConfigEntriesParseLookUpAndDump) {
  const TuneDb db = TuneDb::parse(
      "fp8_gemm | NVIDIA H200 | bfloat16 | 128 24576 1536 | wgmma_e4m3_m64_n128_k128_s8\n"
      "fp8_gemm | NVIDIA H200 | bfloat16 | 64 2112 7168 | default\n",
      "test");
  const std::vector<std::string> key = {"128", "24576", "1536"};
  EXPECT_EQ(db.get_config("fp8_gemm", "NVIDIA H200", "bfloat16", key), "wgmma_e4m3_m64_n128_k128_s8");
  EXPECT_FALSE(db.get("fp8_gemm", "NVIDIA H200", "bfloat16", key));  // not an integer entry
  EXPECT_EQ(db.get_config("fp8_gemm", "NVIDIA H200", "bfloat16", {"64", "2112", "7168"}), "default");
  EXPECT_FALSE(db.get_config("fp8_gemm", "NVIDIA H100 80GB HBM3", "bfloat16", key));  // another family
  EXPECT_TRUE(db.has_op("fp8_gemm"));
  EXPECT_FALSE(db.has_op("matmul_4bit"));
  EXPECT_EQ(TuneDb::parse(db.dump(), "dump").dump(), db.dump());
  expect_error([] { TuneDb::parse("op | dev | v | 1 | Wgmma_m64\n", "db.txt"); }, ErrorCode::invalid_argument,
               {"db.txt:1", "Wgmma"});
}

// save_tune_db writes through a temporary file: the file holds the old entries or the new ones.
TEST(TuneDb, SavesAndLoadsBack) {
  const auto dir = std::filesystem::temp_directory_path() / ("lowbit_tune_save_" + std::to_string(seed()));
  const auto path = dir / "sub" / "tune.txt";
  TuneDb db = TuneDb::parse(kText, "test");
  db.set(TuneEntry{"fp8_gemm", "NVIDIA H200", "bfloat16", {"1", "2", "3"}, {}, "default"});
  save_tune_db(db, path);
  EXPECT_EQ(TuneDb::load(path).dump(), db.dump());
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(TuneDb, TheDatabaseInUseReadsTheShippedEntries) {
  // The shipped text parses (it is read on first use of tune_db(); a user file may add to it).
  EXPECT_NO_THROW((void)tune_db());
}

}  // namespace
}  // namespace lowbit::test
