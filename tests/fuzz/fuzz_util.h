/* Shared by the file-format harnesses: the readers take paths, so an input
 * is written to an in-memory file (memfd) and read back through
 * /proc/self/fd/N; no disk I/O and nothing to clean up. */
#ifndef LZ_FUZZ_UTIL_H
#define LZ_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lazyc.h"

typedef struct fuzz_file { int fd; char path[64]; } fuzz_file;

static inline void fuzz_file_open(fuzz_file *f, const char *name)
{
    f->fd = memfd_create(name, 0);
    if (f->fd < 0) { perror("memfd_create"); abort(); }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* Replaces the file's contents with data[0..n). */
static inline void fuzz_file_set(fuzz_file *f, const void *data, size_t n)
{
    if (ftruncate(f->fd, 0) != 0 || (n && pwrite(f->fd, data, n, 0) != (ssize_t)n)) {
        perror("fuzz_file_set");
        abort();
    }
}

/* A failed call must say why. */
static inline void fuzz_expect_error(const char *call)
{
    const char *e = lz_last_error();
    if (e && *e) return;
    fprintf(stderr, "%s failed without setting lz_last_error()\n", call);
    abort();
}

#endif
