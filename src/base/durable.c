/* Durable file replacement (see durable.h). */
#include "base/durable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

/* The directory part of path ("." when none), as a new string. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return dup_str(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* pid when name is exactly base ".tmp" digits, else 0 */
static long temp_pid(const char *name, const char *base)
{
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp", 4) != 0) return 0;
    const char *d = name + bl + 4;
    if (!*d) return 0;
    long pid = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || pid > (long)INT_MAX / 10) return 0;
        pid = pid * 10 + (*d - '0');
    }
    return pid;
}

int lz_durable_remove_stale(const char *path)
{
    char *dir = dir_of(path);
    if (!dir) return 0;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    DIR *dp = opendir(dir);
    int removed = 0;
    if (dp) {
        size_t dl = strlen(dir);
        struct dirent *e;
        while ((e = readdir(dp)) != NULL) {
            long pid = temp_pid(e->d_name, base);
            /* kill(pid, 0) fails with ESRCH only when no such process exists
               (EPERM: it exists but is another user's) */
            if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
            char *full = malloc(dl + strlen(e->d_name) + 2);
            if (!full) break;
            snprintf(full, dl + strlen(e->d_name) + 2, "%s/%s", dir, e->d_name);
            if (unlink(full) == 0) removed++;
            free(full);
        }
        closedir(dp);
    }
    free(dir);
    return removed;
}

int lz_durable_open(lz_durable *d, const char *fn, const char *path)
{
    memset(d, 0, sizeof *d);
    struct stat st;
    int exists = lstat(path, &st) == 0;
    if (exists && S_ISLNK(st.st_mode)) {
        /* replace the file the link points to, not the link */
        char *real = realpath(path, NULL);
        d->target = real ? real : dup_str(path);
        exists = stat(d->target, &st) == 0;
    } else {
        d->target = dup_str(path);
    }
    if (!d->target) return lz_errorf_int("%s: %s: out of memory", fn, path);
    if (exists && S_ISDIR(st.st_mode)) {
        lz_durable_abort(d);
        return lz_errorf_int("%s: %s: is a directory", fn, path);
    }
    if (exists && !S_ISREG(st.st_mode)) {
        d->f = fopen(d->target, "wb");
        if (!d->f) {
            int err = errno;
            lz_durable_abort(d);
            return lz_errorf_int("%s: %s: cannot open for writing: %s", fn, path, strerror(err));
        }
        return 0;
    }
    lz_durable_remove_stale(d->target);
    size_t n = strlen(d->target) + 32;
    d->tmp = malloc(n);
    if (!d->tmp) { lz_durable_abort(d); return lz_errorf_int("%s: %s: out of memory", fn, path); }
    snprintf(d->tmp, n, "%s.tmp%ld", d->target, (long)getpid());
    /* keep an existing file's permissions; a new one gets 0666 & ~umask */
    int fd = open(d->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, exists ? st.st_mode & 07777 : 0666);
    if (fd < 0) {
        int err = errno;
        free(d->tmp);
        d->tmp = NULL;
        lz_durable_abort(d);
        return lz_errorf_int("%s: %s: cannot create a file beside it: %s", fn, path, strerror(err));
    }
    d->f = fdopen(fd, "wb");
    if (!d->f) {
        int err = errno;
        close(fd);
        lz_durable_abort(d);
        return lz_errorf_int("%s: %s: %s", fn, path, strerror(err));
    }
    return 0;
}

void lz_durable_abort(lz_durable *d)
{
    if (d->f) fclose(d->f);
    if (d->tmp) unlink(d->tmp);
    free(d->tmp);
    free(d->target);
    memset(d, 0, sizeof *d);
}

/* fsync of the directory makes the rename itself durable. Some file
   systems cannot sync a directory (EINVAL); nothing more can be done. */
static int sync_dir(const char *target)
{
    char *dir = dir_of(target);
    if (!dir) return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    free(dir);
    if (fd < 0) return -1;
    if (fsync(fd) != 0 && errno != EINVAL) rc = -1;
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int lz_durable_commit(lz_durable *d, const char *fn, const char *path)
{
    const char *step = "write failed";
    int replacing = d->tmp != NULL, renamed = 0;
    int ok = fflush(d->f) == 0;
    /* fsync of a device or FIFO written in place is EINVAL: not an error */
    if (ok && fsync(fileno(d->f)) != 0 && (replacing || errno != EINVAL)) { ok = 0; step = "fsync failed"; }
    int err = errno;
    if (fclose(d->f) != 0 && ok) { ok = 0; err = errno; step = "close failed"; }
    d->f = NULL;
    if (ok && replacing) {
        if (rename(d->tmp, d->target) != 0) { ok = 0; err = errno; step = "rename failed"; }
        else { renamed = 1; free(d->tmp); d->tmp = NULL; }
    }
    if (ok && renamed && sync_dir(d->target) != 0) { ok = 0; err = errno; step = "fsync of its directory failed"; }
    lz_durable_abort(d);
    if (ok) return 0;
    return lz_errorf_int("%s: %s: %s: %s%s", fn, path, step, strerror(err),
                         replacing && !renamed ? " (the file is as it was)" : "");
}

int lz_durable_write_failed(lz_durable *d, const char *fn, const char *path)
{
    const int err = errno, replacing = d->tmp != NULL;
    lz_durable_abort(d);
    return lz_errorf_int("%s: %s: write failed: %s%s", fn, path, strerror(err),
                         replacing ? " (the file is as it was)" : "");
}
