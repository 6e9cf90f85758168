// The CPU backend: host memory and the registration of every CPU op.
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/registry.h"
#include "cpu/register.h"

namespace lowbit::core {
namespace {

void* cpu_alloc(size_t bytes, int /*index*/) {
  // 64-byte alignment: whole cache lines, and aligned SIMD loads.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  LOWBIT_REQUIRE(p != nullptr, ErrorCode::out_of_memory, "cpu: could not allocate ", bytes, " bytes");
  return p;
}

void cpu_free(void* p, int /*index*/) { std::free(p); }

void cpu_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream /*stream*/) {
  LOWBIT_REQUIRE(dst_device.is_cpu() && src_device.is_cpu(), ErrorCode::internal,
                 "cpu copy asked to move memory of another device");
  std::memcpy(dst, src, bytes);
}

void cpu_synchronize(Stream /*stream*/) {}
int cpu_device_count() { return 1; }

}  // namespace

void register_cpu_backend() {
  register_device_backend(DeviceType::cpu, DeviceBackend{cpu_alloc, cpu_free, cpu_copy, cpu_synchronize,
                                                         cpu_device_count});
  cpu::register_quant_ops();
  cpu::register_gemm_ops();
}

}  // namespace lowbit::core
