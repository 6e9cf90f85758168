// The variants a vectorizable CPU loop is built in (AVX-512, AVX2, the
// baseline), one picked at load time by the CPU's features (GCC function
// multiversioning); -ffp-contract=off keeps their results identical.
#pragma once

#define LOWBIT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
