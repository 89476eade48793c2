/* The version of the library actually loaded, for programs that may run
 * against another liblazyc.so than the header they were built with. */
#include "lazyc.h"

const char *lz_version(void) { return LZ_VERSION_STRING; }
