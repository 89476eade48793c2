/* The library's start: registers the built-in CPU backend with the backend
 * registry (backend/registry.c) when the library is loaded, before any
 * allocation or compile can ask for it. Only this floor, the top, knows
 * which backends exist; the floors below reach one through the registry.
 *
 * A static link keeps this object only because the link asks for
 * lz_library_start (CMakeLists.txt, lazyc.pc's Libs.private). */
#include "backend/backend.h"
#include "backend/cpu/kernels.h"

__attribute__((constructor)) void lz_library_start(void);

void lz_library_start(void)
{
    if (!lz_backend_current()) lz_backend_register(lz_backend_cpu());
}
