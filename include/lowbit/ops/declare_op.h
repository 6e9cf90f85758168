// The three calls every op's Args has: check (throws lowbit::Error naming
// the op, the argument, what it expects and what it got), workspace_size (the
// scratch bytes the backend of the arguments' device needs) and run.
#pragma once

#include <cstddef>

#include "lowbit/stream.h"

#define LOWBIT_DECLARE_OP(Args)            \
  void check(const Args& args);            \
  size_t workspace_size(const Args& args); \
  void run(const Args& args, void* workspace = nullptr, Stream stream = {});
