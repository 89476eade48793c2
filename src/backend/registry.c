/* The backend registry: device memory (memory.c), the compiler and the
 * executor reach the backend through this one table of function pointers,
 * never by calling an implementation in backends/cpu/, which sits floors
 * above them (it reads compiled programs). The engine, above both,
 * registers the CPU backend (engine/tensor_api.c). */
#include <stdatomic.h>

#include "backend/backend.h"

static const lz_backend *_Atomic current;

void lz_backend_register(const lz_backend *b) { atomic_store(&current, b); }

const lz_backend *lz_backend_current(void) { return atomic_load(&current); }
