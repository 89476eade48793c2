/* Internal element-wise helpers that other op files' backward rules use. */
#ifndef LZ_OPS_ELEMENTWISE_H
#define LZ_OPS_ELEMENTWISE_H

#include "engine/tensor.h"

/* x * factor as an LZ_OP_SCALE node. Only for factors fixed by shapes or by
   the op itself (1/n, 0.5), never for values that change between steps:
   the factor is part of the graph hash. */
lz_tensor *lz_scale_const(lz_tensor *x, float factor);

#endif
