/* lz_cli_prepare_output: an output path is made and checked before a
 * command starts its work, not found unusable after an epoch. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static int bad(const char *cmd, const char *opt, const char *path, const char *why)
{
    fprintf(stderr, "lazyc %s: %s %s: %s\n", cmd, opt, path, why);
    return -1;
}

int lz_cli_prepare_output(const char *cmd, const char *opt, const char *path)
{
    char dir[4096], why[4200];
    if (!*path) return bad(cmd, opt, "''", "is empty");
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return bad(cmd, opt, path, "path too long");
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        for (char *p = dir + 1; ; p++) {
            if (*p != '/' && *p) continue;
            char c = *p;
            *p = 0;
            if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
                snprintf(why, sizeof why, "cannot create the directory %s: %s", dir, strerror(errno));
                return bad(cmd, opt, path, why);
            }
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return bad(cmd, opt, path, "is a directory");
        if (!S_ISREG(st.st_mode)) {
            /* a device or FIFO is written in place: it must open for writing */
            int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) {
                snprintf(why, sizeof why, "cannot open for writing: %s", strerror(errno));
                return bad(cmd, opt, path, why);
            }
            close(fd);
            return 0;
        }
    } else if (errno != ENOENT) {
        snprintf(why, sizeof why, "%s", strerror(errno));
        return bad(cmd, opt, path, why);
    }
    /* the name of the temporary file the real write will use */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s.tmp%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot create a file beside it: %s", strerror(errno));
        return bad(cmd, opt, path, why);
    }
    close(fd);
    unlink(probe);
    return 0;
}
