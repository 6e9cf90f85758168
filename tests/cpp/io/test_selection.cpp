// Which tensors a quantization picks: the default rule and glob patterns.
#include <gtest/gtest.h>

#include "io/selection.h"

namespace lowbit::io::detail {
namespace {

TEST(Selection, GlobMatchesStarsAndQuestionMarksAcrossDots) {
  EXPECT_TRUE(glob_match("*", "model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("*.mlp.*", "model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("model.layers.?.mlp.*_proj.weight", "model.layers.7.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp.*", "model.layers.10.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("*.attn.*", "model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("lm_head.weight", "lm_head.weight"));
  EXPECT_FALSE(glob_match("lm_head", "lm_head.weight"));
  EXPECT_TRUE(glob_match(std::string(40, '*') + "x", std::string(5000, 'a') + "x")) << "no blow-up on many stars";
}

TEST(Selection, DefaultKeepsEmbeddingsNormsAndTheHead) {
  EXPECT_EQ(default_keep_reason("model.embed_tokens.weight"), "embedding");
  EXPECT_EQ(default_keep_reason("embeddings.word_embeddings.weight"), "embedding");
  EXPECT_EQ(default_keep_reason("transformer.wte.weight"), "embedding");
  EXPECT_EQ(default_keep_reason("shared.weight"), "embedding");
  EXPECT_EQ(default_keep_reason("lm_head.weight"), "output head");
  EXPECT_EQ(default_keep_reason("output.weight"), "output head");
  EXPECT_EQ(default_keep_reason("gpt_neox.embed_out.weight"), "output head");
  EXPECT_EQ(default_keep_reason("model.norm.weight"), "norm");
  EXPECT_EQ(default_keep_reason("transformer.h.0.ln_1.weight"), "norm");
  EXPECT_EQ(default_keep_reason("model.layers.0.self_attn.o_proj.weight"), "");
  EXPECT_EQ(default_keep_reason("layers.0.attention.output.weight"), "") << "only a top-level 'output' is the head";
}

TEST(Selection, CandidatesAndPatterns) {
  Selection s({"lm_head.*", "*.never.*"}, {"*.mlp.*"});
  auto info = [](std::string name, std::string dtype, std::vector<int64_t> shape) {
    TensorInfo t;
    t.name = std::move(name);
    t.dtype = std::move(dtype);
    t.shape = std::move(shape);
    return t;
  };
  EXPECT_TRUE(s.choose(info("a.q_proj.weight", "BF16", {8, 8})).quantize);
  EXPECT_TRUE(s.choose(info("lm_head.weight", "F16", {8, 8})).quantize) << "--include overrides the default";
  EXPECT_EQ(s.choose(info("l.mlp.up.weight", "F32", {8, 8})).reason, "--exclude *.mlp.*");
  EXPECT_EQ(s.choose(info("a.q_proj.bias", "BF16", {8})).reason, "1-D");
  EXPECT_EQ(s.choose(info("a.q_proj.weight", "I8", {8, 8})).reason, "dtype I8");
  EXPECT_EQ(s.choose(info("a.scale", "F32", {8, 8})).reason, "not a '<module>.weight'");
  EXPECT_EQ(s.choose(info("a.q_proj.weight", "F32", {0, 8})).reason, "empty");
  EXPECT_EQ(s.unused(), std::vector<std::string>{"*.never.*"});
}

}  // namespace
}  // namespace lowbit::io::detail
