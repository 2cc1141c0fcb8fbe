// The launchers' argument checks (every extension's host code includes this; roseinfer/cuda_ext/__init__.py hashes
// it into every build).
//
// ROSEINFER_CHECK(cond, printf-format, ...): TORCH_CHECK with a message formatted here into one C string. A
// TORCH_CHECK whose message has more than one string in it (a number, say) hands libc10 a std::string built in
// this module, and on the GPU machine (torch 2.11.0+cu130, nvcc 13.0) that killed the process with a segfault
// instead of raising; a single C string goes through torch's `const char*` path and raises a RuntimeError
// (docs/BENCHMARKS.md, session 47).
#pragma once
#include <cstdio>

#include <torch/extension.h>

#define ROSEINFER_CHECK(cond, ...)                                                      \
  do {                                                                                  \
    if (C10_UNLIKELY(!(cond))) {                                                        \
      char roseinfer_check_msg_[320];                                                   \
      std::snprintf(roseinfer_check_msg_, sizeof(roseinfer_check_msg_), __VA_ARGS__);   \
      TORCH_CHECK(false, static_cast<const char*>(roseinfer_check_msg_));               \
    }                                                                                   \
  } while (0)
