/* The option parsers every subcommand shares (cli.h): -h or --help, and
 * an integer or a float within bounds, refused with a message naming the
 * option. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int lz_cli_is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int lz_cli_int(const char *opt, const char *val, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || end == val || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "lazyc: %s needs an integer in [%ld, %ld], got '%s'\n",
                opt, lo, hi, val ? val : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}

int lz_cli_float(const char *opt, const char *val, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || end == val || *end != '\0' || errno != 0 || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "lazyc: %s needs a number in [%g, %g], got '%s'\n",
                opt, lo, hi, val ? val : "(nothing)");
        return -1;
    }
    *out = v;
    return 0;
}
