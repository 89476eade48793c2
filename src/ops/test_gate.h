#ifndef LZ_OPS_TEST_GATE_H
#define LZ_OPS_TEST_GATE_H

#include "engine/tensor.h"

lz_tensor *lz_test_gate(lz_tensor *x);

#endif
