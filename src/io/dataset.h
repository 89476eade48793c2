#ifndef LZ_DATASET_H
#define LZ_DATASET_H

#include "lazyc.h"

struct lz_dataset {
    int64_t n, h, w;
    uint8_t *images;         /* n * h * w */
    uint8_t *labels;         /* n */
};

#endif
