// The multi-tensor optimizer updates on the CPU: each entry through the
// single-tensor update, so each gives the same bits, the 8-bit maps prepared
// once for the list. Large tensors one after another, each spread over the
// threads by its own loop; the small ones (whose loops run on one thread)
// spread over the threads one tensor each.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/optim/impls.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kOwnThreadsFrom = 1 << 15;  // the single updates' own OpenMP threshold

template <class Multi, class Update>
void update_all(const Multi& a, Update update) {
  std::vector<size_t> small;
  for (size_t i = 0; i < a.params.size(); ++i) {
    if (a.params[i].g.numel() >= kOwnThreadsFrom) {
      update(a.entry(i));
    } else {
      small.push_back(i);
    }
  }
  const auto count = static_cast<int64_t>(small.size());
#pragma omp parallel for schedule(dynamic) if (count > 1)
  for (int64_t k = 0; k < count; ++k) update(a.entry(small[static_cast<size_t>(k)]));
}

}  // namespace

void optimizer_update_32bit_multi(const OptimizerUpdate32bitMultiArgs& a, void* /*workspace*/, Stream stream) {
  update_all(a, [&](const OptimizerUpdate32bitArgs& e) { optimizer_update_32bit(e, nullptr, stream); });
}

void optimizer_update_8bit_blockwise_multi(const OptimizerUpdate8bitBlockwiseMultiArgs& a, void* /*workspace*/,
                                           Stream /*stream*/) {
  if (a.params.empty()) return;
  int64_t elements = 0;  // the list's: whether a bucket table pays is the list's question
  for (const OptimizerTensors8bitBlockwise& t : a.params) elements += t.g.numel();
  const BlockwiseMaps maps = blockwise_maps(a.optimizer, a.qmap1, a.qmap2, elements);
  update_all(a, [&](const OptimizerUpdate8bitBlockwiseArgs& e) { optimizer_update_8bit_blockwise(e, maps); });
}

}  // namespace lowbit::core::cpu
