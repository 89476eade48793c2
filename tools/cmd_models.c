/* `lazyc models`: the model zoo with its parameter counts and the batch
 * each size takes. Each model is built at each size (and freed again), so
 * the counts are the real ones, not a table that could drift. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lazyc.h"
#include "zoo.h"

static void models_usage(FILE *f)
{
    fprintf(f, "usage: lazyc models [--size smoke|bench|gpu]\n\n"
               "Lists every model of the zoo with its number of parameters (trainable\n"
               "tensors; buffers such as batch-norm running statistics apart) and the\n"
               "input and target each size takes. Both sizes unless --size is given.\n"
               "Then the models `lazyc train --model` takes, for Fashion-MNIST.\n");
}

/* 25557032 -> "25,557,032" */
static const char *grouped(int64_t v, char *buf, size_t cap)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%" PRId64, v < 0 ? -v : v);
    size_t k = 0;
    if (v < 0 && k + 1 < cap) buf[k++] = '-';
    for (int i = 0; i < n && k + 2 < cap; i++) {
        if (i && (n - i) % 3 == 0) buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

static const char *shape_str(lz_dtype dt, int ndim, const int64_t *shape, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s [", dt == LZ_F32 ? "f32" : dt == LZ_I64 ? "i64" : dt == LZ_BF16 ? "bf16" : "i32");
    for (int i = 0; i < ndim && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
    return buf;
}

/* One row: the zoo's model name built at size, shown as label and size_label. */
static int print_model(const char *name, const char *label, const char *size, const char *size_label)
{
    lz_model *m = lz_model_new(name, size, 0);
    if (!m) {
        printf("%-24s %-6s error: %s\n", label, size_label, lz_last_error() ? lz_last_error() : "unknown");
        lz_clear_error();
        return 1;
    }
    lz_params *p = lz_model_params(m);
    const lz_model_spec *sp = lz_model_get_spec(m);
    int64_t params = lz_params_numel(p, 1), all = lz_params_numel(p, 0);
    char a[32], b[32], in[64], tg[64];
    printf("%-24s %-6s %14s %10s  %-22s %s\n", label, size_label, grouped(params, a, sizeof a),
           grouped(all - params, b, sizeof b),
           shape_str(sp->input_dtype, sp->input_ndim, sp->input_shape, in, sizeof in),
           shape_str(LZ_I64, sp->target_ndim, sp->target_shape, tg, sizeof tg));
    fflush(stdout);
    lz_model_free(m);
    return 0;
}

int lz_cmd_models(int argc, char **argv)
{
    const char *sizes[2] = {"smoke", "bench"};
    int n_sizes = 2;
    for (int i = 1; i < argc; i++) {
        if (lz_cli_is_help(argv[i])) {
            models_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc
                   && (strcmp(argv[i + 1], "smoke") == 0 || strcmp(argv[i + 1], "bench") == 0 ||
                       strcmp(argv[i + 1], "gpu") == 0)) {
            sizes[0] = argv[++i];
            n_sizes = 1;
        } else {
            if (strcmp(argv[i], "--size") == 0)
                fprintf(stderr, "lazyc models: --size needs smoke, bench or gpu, got '%s'\n\n",
                        i + 1 < argc ? argv[i + 1] : "(nothing)");
            else
                fprintf(stderr, "lazyc models: unknown option '%s'\n\n", argv[i]);
            models_usage(stderr);
            return LZ_CLI_USAGE_ERROR;
        }
    }
    int status = 0;
    printf("%-24s %-6s %14s %10s  %-22s %s\n", "model", "size", "parameters", "buffers", "input",
           "target");
    for (const char *const *name = lz_model_names(); *name; name++)
        for (int s = 0; s < n_sizes; s++)
            status |= print_model(*name, s == 0 ? *name : "", sizes[s], sizes[s]);
    printf("\n`lazyc train --model` (Fashion-MNIST, 1x28x28 images; the batch is --batch):\n");
    const char *zoo;
    for (int i = 0; lz_cli_train_model(i, &zoo); i++)
        status |= print_model(zoo, lz_cli_train_model(i, NULL), "smoke", "train");
    return status;
}
