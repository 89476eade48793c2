#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Per thread, so a failure on the executor thread never clobbers the
   recording thread's message. */
static _Thread_local char last_error[512];
static _Thread_local int has_error;

static void set_error(const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    has_error = 1;
}

void *lz_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return NULL;
}

int lz_errorf_int(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return -1;
}

void lz_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
}

const char *lz_last_error(void) { return has_error ? last_error : NULL; }
void lz_clear_error(void) { has_error = 0; last_error[0] = 0; }

void lz_error_rename(const char *from, const char *to)
{
    size_t n = strlen(from);
    if (!has_error || strncmp(last_error, from, n) != 0 || last_error[n] != ':')
        return;
    char rest[sizeof last_error];
    snprintf(rest, sizeof rest, "%s", last_error + n);
    snprintf(last_error, sizeof last_error, "%s%s", to, rest);
}

const char *lz_shape_str(char *buf, int ndim, const int64_t *shape)
{
    int n = snprintf(buf, 96, "[");
    for (int i = 0; i < ndim && n < 80; i++)
        n += snprintf(buf + n, (size_t)(96 - n), "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + n, (size_t)(96 - n), "]");
    return buf;
}

const char *lz_dtype_name(lz_dtype dtype)
{
    switch (dtype) {
    case LZ_F32: return "f32";
    case LZ_I64: return "i64";
    case LZ_I32: return "i32";
    case LZ_BF16: return "bf16";
    }
    return "unknown";
}

/* Here, next to lz_dtype_name, because kernels (backends/cpu) size buffers
   with it and must not call up into the engine. */
size_t lz_dtype_size(lz_dtype dtype) { return dtype == LZ_I64 ? 8 : dtype == LZ_BF16 ? 2 : 4; }

/* One write a line, so lines from two threads do not interleave. */
static void say(const char *kind, const char *fmt, va_list ap)
{
    char line[2048];
    int n = snprintf(line, sizeof line, "lazyc: %s: ", kind);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    size_t len = strlen(line);
    line[len] = '\n';
    fwrite(line, 1, len + 1, stderr);
}

void lz_notice(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("notice", fmt, ap);
    va_end(ap);
}

void lz_warning(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say("warning", fmt, ap);
    va_end(ap);
}
