#include "cpu/quant/code_encoder.h"

#include <array>
#include <cstring>
#include <mutex>
#include <utility>

namespace lowbit::core::cpu {

std::shared_ptr<const CodeEncoder> code_encoder_for(const float* code, int64_t n, int64_t build_from) {
  constexpr size_t kKept = 8;  // maps kept; the oldest goes first
  constexpr size_t kBytes = sizeof(float) * 256;
  static std::mutex mutex;
  static std::vector<std::pair<std::array<float, 256>, std::shared_ptr<const CodeEncoder>>> kept;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [k, e] : kept) {
      if (std::memcmp(k.data(), code, kBytes) == 0) return e;
    }
  }
  if (n < build_from) return nullptr;
  std::array<float, 256> key;
  std::memcpy(key.data(), code, kBytes);
  auto made = std::make_shared<const CodeEncoder>(code);  // built outside the lock: ~1 ms
  const std::lock_guard<std::mutex> lock(mutex);
  if (kept.size() == kKept) kept.erase(kept.begin());
  kept.emplace_back(key, made);
  return made;
}

}  // namespace lowbit::core::cpu
