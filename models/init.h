/* Declared in the public header include/lazyc_nn.h (installed; the
 * sources of models/ include this name). */
#ifndef LZ_INIT_H
#define LZ_INIT_H

#include "lazyc_nn.h"

#endif
