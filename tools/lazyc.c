/* lazyc: the command-line entry point. Dispatches to a subcommand. */
#include <errno.h>
#include <string.h>

#include "cli.h"

static const lz_cli_cmd commands[] = {
    { "demo", "train a small MLP in lazy mode; print its loss curve and metrics", lz_cmd_demo },
    { "bench", "time every model's training step: eager, lazy, captured and PyTorch", lz_cmd_bench },
    { "models", "list the model zoo: parameter counts and input shapes at both sizes", lz_cmd_models },
    { "train", "train a model on Fashion-MNIST in captured mode, with checkpoints and resume", lz_cmd_train },
    { "grads", "one forward+backward from given weights and batch; write loss and gradients", lz_cmd_grads },
    { "env", "list the LZ_* environment variables: value, default, accepted values, meaning", lz_cmd_env },
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f)
{
    fprintf(f, "usage: lazyc <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`lazyc <command> --help` describes a command's options; `lazyc --version`\n"
               "prints the version.\n\n"
               "Exit status: 0 success; %d the run failed (a write error such as a full disk,\n"
               "an execution error); %d usage (a bad command or option, unreadable input, an\n"
               "output path that cannot be written); %d lazyc train stopped at a NaN or Inf.\n",
            LZ_CLI_FAILED, LZ_CLI_USAGE_ERROR, LZ_CLI_NONFINITE);
}

/* Output lost to a full disk or a closed pipe is a failure, as coreutils
   treat it: a message and a non-zero status, never a silent 0. */
static int finish(int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "lazyc: write error on standard output%s%s\n", errno ? ": " : "",
            errno ? strerror(errno) : "");
    return rc ? rc : LZ_CLI_FAILED;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return LZ_CLI_USAGE_ERROR;
    }
    /* asked for: stdout and success, as every Unix tool */
    if (lz_cli_is_help(argv[1])) {
        usage(stdout);
        return finish(0);
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
        printf("lazyc %s\n", LZ_VERSION);
        return finish(0);
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return finish(commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "lazyc: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return LZ_CLI_USAGE_ERROR;
}
