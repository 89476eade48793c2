/* lazyc: the command-line entry point. Dispatches to a subcommand. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const lz_cli_cmd commands[] = {
    { "demo", "train a small MLP in lazy mode; print its loss curve and metrics", lz_cmd_demo },
    { "bench", "time every model's training step: eager, lazy, captured and PyTorch", lz_cmd_bench },
    { "models", "list the model zoo: parameter counts and input shapes at both sizes", lz_cmd_models },
    { "train", "train a model on Fashion-MNIST in captured mode, with checkpoints and resume", lz_cmd_train },
    { "grads", "one forward+backward from given weights and batch; write loss and gradients", lz_cmd_grads },
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f)
{
    fprintf(f, "usage: lazyc <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`lazyc <command> --help` describes a command's options.\n");
}

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return LZ_CLI_USAGE_ERROR;
    }
    /* --help is asked for, so it prints to stdout; the exit status stays 2
       because no command ran. */
    if (lz_cli_is_help(argv[1])) {
        usage(stdout);
        return LZ_CLI_USAGE_ERROR;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lazyc: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return LZ_CLI_USAGE_ERROR;
}
