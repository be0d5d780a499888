// What emulate_depthwise2d.cpp includes before the kernels: torch's scalar types, the standard
// library, the emulated GPU. No kernel header: tests/test_emulator.py compiles this once (a GCC
// precompiled header) for its planted-bug builds, each of which parses the kernels anew.
#ifndef DWCONV_EMULATE_DEPTHWISE2D_PRELUDE_H
#define DWCONV_EMULATE_DEPTHWISE2D_PRELUDE_H

#include <ATen/AccumulateType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_emulation.h"
#include "dense_layout.h"

#endif  // DWCONV_EMULATE_DEPTHWISE2D_PRELUDE_H
