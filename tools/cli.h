/* The lazyc command-line program: each subcommand lives in its own
 * cmd_*.c file and is listed in the table of lazyc.c. A subcommand gets
 * argv starting at its own name and returns the process exit status:
 * 0 on success, 1 when the run failed, 2 on a usage error. */
#ifndef LZ_CLI_H
#define LZ_CLI_H

#include <stdio.h>

#define LZ_CLI_USAGE_ERROR 2

typedef struct lz_cli_cmd {
    const char *name;
    const char *summary;                  /* one line, for `lazyc --help` */
    int (*run)(int argc, char **argv);
} lz_cli_cmd;

int lz_cmd_demo(int argc, char **argv);
int lz_cmd_bench(int argc, char **argv);
int lz_cmd_models(int argc, char **argv);
int lz_cmd_grads(int argc, char **argv);
int lz_cmd_train(int argc, char **argv);
int lz_cmd_env(int argc, char **argv);

/* Parses an integer option value within [lo, hi]; prints a message naming
   the option and returns -1 when the value is not one. */
int lz_cli_int(const char *opt, const char *val, long lo, long hi, long *out);
/* Same for a finite float within [lo, hi]. */
int lz_cli_float(const char *opt, const char *val, double lo, double hi, double *out);
/* 1 if arg is -h or --help. */
int lz_cli_is_help(const char *arg);

#endif
