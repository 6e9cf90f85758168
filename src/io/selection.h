// Which tensors a quantization converts. By default the 2-D float weights
// of linear layers ("<module>.weight"); embeddings, norms and lm_head stay as
// they are. --include patterns add tensors, --exclude patterns (which win)
// remove them.
#pragma once

#include <string>
#include <vector>

#include "lowbit/io.h"

namespace lowbit::io::detail {

struct Choice {
  bool quantize = false;
  std::string reason;  // why it is kept, when it is
};

class Selection {
 public:
  Selection(std::vector<std::string> include, std::vector<std::string> exclude);
  // Whether a tensor is a candidate at all (float, 2-D, "<module>.weight"),
  // and whether the rules pick it. Records which patterns matched.
  Choice choose(const TensorInfo& t);
  // Patterns that matched no tensor so far.
  std::vector<std::string> unused() const;

 private:
  struct Pattern {
    std::string glob;
    bool used = false;
  };
  std::vector<Pattern> include_, exclude_;
};

// "<module>.weight" tensors that look like embeddings, norms or the output
// head: what the default rule keeps ("" when none).
std::string default_keep_reason(const std::string& name);

bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace lowbit::io::detail
