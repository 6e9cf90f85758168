// LOWBIT_SM90A: 1 in device code compiled for sm_90a, whose arch-specific
// instructions (wgmma, setmaxnreg) exist nowhere else; 0 otherwise.
#pragma once

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LOWBIT_SM90A 1
#else
#define LOWBIT_SM90A 0
#endif
