#include "io/io_test_util.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "core/float_convert.h"
#include "harness/harness.h"

namespace lowbit::test {

namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("lowbit-io-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> ScratchDir::listing() const {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(path_))
    v.push_back(e.path().lexically_relative(path_).string());
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::pair<std::string, Tensor>> tiny_model(DType dtype) {
  std::vector<std::pair<std::string, Tensor>> m;
  const int64_t hidden = 128, inter = 256, vocab = 96;
  m.emplace_back("model.embed_tokens.weight", random_floats({vocab, hidden}, dtype, 0.02f));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.emplace_back(p + "self_attn.q_proj.weight", random_floats({hidden, hidden}, dtype, 0.02f));
    m.emplace_back(p + "self_attn.k_proj.weight", random_floats({64, hidden}, dtype, 0.02f));
    m.emplace_back(p + "self_attn.v_proj.weight", random_floats({64, hidden}, dtype, 0.02f));
    m.emplace_back(p + "self_attn.o_proj.weight", random_floats({hidden, hidden}, dtype, 0.02f));
    m.emplace_back(p + "self_attn.q_proj.bias", random_floats({hidden}, dtype, 0.02f));
    m.emplace_back(p + "mlp.gate_proj.weight", random_floats({inter, hidden}, dtype, 0.02f));
    m.emplace_back(p + "mlp.up_proj.weight", random_floats({inter, hidden}, dtype, 0.02f));
    m.emplace_back(p + "mlp.down_proj.weight", random_floats({hidden, inter}, dtype, 0.02f));
    m.emplace_back(p + "input_layernorm.weight", random_floats({hidden}, DType::f32, 1.0f));
  }
  m.emplace_back("model.norm.weight", random_floats({hidden}, DType::f32, 1.0f));
  m.emplace_back("lm_head.weight", random_floats({vocab, hidden}, dtype, 0.02f));
  Tensor ids = Tensor::empty({1, 16}, DType::i64);
  for (int i = 0; i < 16; ++i) ids.ptr<int64_t>()[i] = i;
  m.emplace_back("model.position_ids", ids);
  return m;
}

void write_tiny_checkpoint(const fs::path& dir, int shards, DType dtype) {
  fs::create_directories(dir / "extra");
  write_bytes(dir / "config.json",
              "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 128,\n  \"model_type\": \"llama\",\n"
              "  \"torch_dtype\": \"" +
                  std::string(dtype_name(dtype)) + "\"\n}\n");
  write_bytes(dir / "tokenizer.json", "{\"version\": \"1.0\"}");
  write_bytes(dir / "README.md", "# tiny\n");
  write_bytes(dir / "extra" / "notes.txt", "side file in a subfolder\n");
  const auto model = tiny_model(dtype);
  if (shards == 1) {
    std::vector<std::pair<std::string, TensorRef>> refs;
    for (const auto& [n, t] : model) refs.emplace_back(n, t.ref());
    io::save_safetensors(dir / "model.safetensors", refs, {{"format", "pt"}});
    return;
  }
  std::string index = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<std::pair<std::string, TensorRef>> refs;
    for (size_t i = static_cast<size_t>(s); i < model.size(); i += static_cast<size_t>(shards)) {
      refs.emplace_back(model[i].first, model[i].second.ref());
      index += (index.back() == '{' ? "\"" : ", \"") + model[i].first + "\": \"" + name + "\"";
    }
    io::save_safetensors(dir / name, refs, {{"format", "pt"}});
  }
  write_bytes(dir / "model.safetensors.index.json", index + "}}");
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_raw(const fs::path& path, const std::string& header, const std::string& data, bool pad) {
  std::string h = header;
  if (pad) h.resize((h.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  write_bytes(path, bytes + h + data);
}

std::string fingerprint(const fs::path& path) {
  std::string s;
  if (fs::is_regular_file(path)) return std::to_string(std::hash<std::string>{}(read_bytes(path)));
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(path)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    s += f.lexically_relative(path).string() + ":";
    if (fs::is_regular_file(f)) s += std::to_string(std::hash<std::string>{}(read_bytes(f)));
    s += "\n";
  }
  return s;
}

std::vector<float> floats_of(const TensorRef& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype) {
      case DType::f32: v[i] = t.ptr<const float>()[i]; break;
      case DType::f16: v[i] = core::f16_to_f32(t.ptr<const uint16_t>()[i]); break;
      case DType::bf16: v[i] = core::bf16_to_f32(t.ptr<const uint16_t>()[i]); break;
      case DType::f8_e4m3: v[i] = core::e4m3_to_f32(t.ptr<const uint8_t>()[i]); break;
      default: ADD_FAILURE() << "floats_of: not a float dtype"; return v;
    }
  }
  return v;
}

}  // namespace lowbit::test
