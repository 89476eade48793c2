/* Durable replacement of a file: the new contents go to a temporary file
 * beside the target (named "<target>.tmp<pid>"), which is flushed, fsync'd,
 * renamed over the target, and the directory fsync'd; so after a crash or a
 * power cut the target holds the old contents or the new, never a mix, and
 * a failed write (full disk) leaves the old file untouched. Opening removes
 * the temporary files of the same target left by processes that no longer
 * exist (a kill -9 during a write); a live process's are left alone. A
 * target that exists and is not a regular file (/dev/full, a FIFO,
 * /dev/stdout) is written in place, since renaming over it would replace
 * the device. On the ground floor (it needs only the error module), so
 * the kernels' on-disk caches use it as well as the file writers. */
#ifndef LZ_DURABLE_H
#define LZ_DURABLE_H

#include <stdio.h>

typedef struct lz_durable {
    FILE *f;
    char *target;   /* the file replaced: path with a symbolic link resolved */
    char *tmp;      /* NULL when writing a non-regular file in place */
} lz_durable;

/* Opens the temporary file; fn and path name the caller in messages.
   0, or -1 with an error "fn: path: what failed: strerror". */
int  lz_durable_open(lz_durable *d, const char *fn, const char *path);
/* Flushes, fsyncs, closes and renames over the target, then fsyncs the
   directory. On failure the temporary file is removed and the target is
   as it was; -1 with an error naming the failing step. */
int  lz_durable_commit(lz_durable *d, const char *fn, const char *path);
/* Closes and removes the temporary file (after a failed write). */
void lz_durable_abort(lz_durable *d);
/* After a write to d->f failed (errno still its): aborts, and returns -1
   with the error "fn: path: write failed: strerror", saying the target is
   as it was where it was being replaced. */
int  lz_durable_write_failed(lz_durable *d, const char *fn, const char *path);
/* Removes "<path>.tmp<pid>" files whose process is gone; returns how many. */
int  lz_durable_remove_stale(const char *path);

#endif
