/* Error state of the calling thread: ops return NULL/-1 and set it. */
#ifndef LZ_ERROR_H
#define LZ_ERROR_H

#include "lazyc.h"

/* Sets the error message (printf-style). Always returns NULL so an op can
   `return lz_errorf(...)`. */
void *lz_errorf(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);
/* Like lz_errorf but returns -1, for int-returning calls. */
int   lz_errorf_int(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);
/* When the error names the call `from` ("from: ..."), makes it name `to`
   instead: a call built on another reports under its own name. */
void  lz_error_rename(const char *from, const char *to);
/* Formats a shape as "[2, 3]" into buf (at least 96 bytes); returns buf. */
const char *lz_shape_str(char *buf, int ndim, const int64_t *shape);
const char *lz_dtype_name(lz_dtype dtype);
/* The runtime's messages to the user that are not errors, one line each on
   stderr: "lazyc: notice: ..." says what lazyc chose in the user's place
   (once), "lazyc: warning: ..." what the user may want to change. */
void lz_notice(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);
void lz_warning(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);

#endif
