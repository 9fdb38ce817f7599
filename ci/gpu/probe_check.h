// CK(call): for the stand-alone CUDA probes in ci/gpu (main() returns 1 on a
// failed runtime call, after printing it).
#pragma once
#include <cstdio>

#include <cuda_runtime.h>

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      printf("%s: %s\n", #x, cudaGetErrorString(e_));                          \
      return 1;                                                                \
    }                                                                          \
  } while (0)
