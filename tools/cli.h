/* The lazyc command-line program: each subcommand lives in its own
 * cmd_*.c file and is listed in the table of lazyc.c. A subcommand gets
 * argv starting at its own name and returns the process exit status:
 * 0 on success, else one of the LZ_CLI_* codes below. */
#ifndef LZ_CLI_H
#define LZ_CLI_H

#include <stdio.h>

/* Exit statuses every subcommand shares; `lazyc --help` lists them. */
#define LZ_CLI_FAILED 1          /* the run failed: a write error, an execution error */
#define LZ_CLI_USAGE_ERROR 2     /* a bad option, unreadable input, an unusable output path */
#define LZ_CLI_NONFINITE 3       /* lazyc train: a NaN or Inf stopped training */

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
/* --device NAME: makes name the device (lz_device_use) before the first
   tensor; NULL leaves LZ_DEVICE's choice. Prints "lazyc CMD: --device
   NAME: why" and returns -1 when it cannot be used. */
int lz_cli_device(const char *cmd, const char *name);
/* 1 if arg is -h or --help. */
int lz_cli_is_help(const char *arg);
/* Makes the missing parent directories of path and checks that the file can
   be written: not a directory, and a file can be created beside it (for
   the temporary file it is replaced through). Prints "lazyc CMD: OPT PATH:
   why" and returns -1 when not. Run before the work, so that an unusable
   path costs nothing. */
int lz_cli_prepare_output(const char *cmd, const char *opt, const char *path);
/* The i-th model `lazyc train` accepts (NULL past the last); *zoo gets the
   name lz_model_new builds it by. */
const char *lz_cli_train_model(int i, const char **zoo);

#endif
