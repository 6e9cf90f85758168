// The CPU backend: host memory and the registration of every CPU op.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <memory>

#include "core/check.h"
#include "core/registry.h"
#include "cpu/isa.h"
#include "cpu/register.h"

namespace lowbit::core {
namespace {

std::shared_ptr<void> cpu_alloc(size_t bytes, int /*index*/, Stream /*stream*/) {
  // 64-byte alignment: whole cache lines, and aligned SIMD loads.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  LOWBIT_REQUIRE(p != nullptr, ErrorCode::out_of_memory, "cpu: could not allocate ", bytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

void cpu_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream /*stream*/) {
  LOWBIT_REQUIRE(dst_device.is_cpu() && src_device.is_cpu(), ErrorCode::internal,
                 "cpu copy asked to move memory of another device");
  std::memcpy(dst, src, bytes);
}

std::shared_ptr<void> cpu_constant(const void* src, size_t bytes, int index) {
  std::shared_ptr<void> p = cpu_alloc(std::max<size_t>(bytes, 1), index, Stream{});
  if (bytes > 0) std::memcpy(p.get(), src, bytes);
  return p;
}

void cpu_synchronize(Stream /*stream*/) {}

// /proc/cpuinfo's first "model name", else "cpu".
std::string cpu_name(int /*index*/) {
  static const std::string name = [] {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      size_t b = colon + 1;
      while (b < line.size() && line[b] == ' ') ++b;
      if (b < line.size()) return line.substr(b);
    }
    return std::string("cpu");
  }();
  return name;
}
int cpu_device_count() { return 1; }
void cpu_empty_cache(int /*index*/) {}

}  // namespace

void register_cpu_backend() {
  (void)cpu::isa_cap();  // an unknown LOWBIT_CPU_ISA: refused before anything registers
  register_device_backend(DeviceType::cpu, DeviceBackend{cpu_alloc, cpu_copy, cpu_synchronize, cpu_device_count,
                                                         cpu_empty_cache, cpu_constant, nullptr, nullptr,
                                                         cpu_name});
  cpu::register_quant_ops();
  cpu::register_gemm_ops();
  cpu::register_optim_ops();
  cpu::register_sparse_ops();
  cpu::register_attention_ops();
}

}  // namespace lowbit::core
