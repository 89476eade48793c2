/* Declared in the public header include/lazyc_nn.h (installed; tools/
 * include it by this name). */
#ifndef LZ_ZOO_H
#define LZ_ZOO_H

#include "lazyc_nn.h"

#endif
