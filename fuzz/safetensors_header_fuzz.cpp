// libFuzzer target: the input is a whole safetensors file. The parser must
// either accept it (and then every tensor's range lies inside the data
// section, in order, without overlap) or throw lowbit::Error; anything else
// (a crash, a sanitizer report, another exception, a huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "lowbit/error.h"
#include "lowbit/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto h = lowbit::io::parse_safetensors_header({data, size}, size, "fuzz-input");
    uint64_t cursor = 0;
    for (const auto& t : h.tensors) {
      if (t.begin != cursor || t.end < t.begin || h.data_offset + t.end > size) std::abort();
      cursor = t.end;
    }
    if (h.data_offset + cursor != size) std::abort();
  } catch (const lowbit::Error& e) {
    if (e.code() != lowbit::ErrorCode::format_error) std::abort();
  }
  return 0;
}
