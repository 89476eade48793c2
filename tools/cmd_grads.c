/* `lazyc grads`: one forward and backward pass of a zoo model from given
 * weights and batch, written as a safetensors file, so that a user checks
 * parity with PyTorch by comparing two files. Train mode (batch-norm batch
 * statistics) with dropout off, as the parity runs of the reference do. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lazyc.h"
#include "zoo.h"

static void grads_usage(FILE *f)
{
    fprintf(f, "usage: lazyc grads --model NAME [--size smoke|bench|gpu] [--weights W.safetensors]\n"
               "                   --inputs I.safetensors --out G.safetensors [--seed N]\n"
               "                   [--dtype f32|bf16] [--eval] [--device NAME]\n\n"
               "Loads the weights (every parameter and buffer by its PyTorch state_dict\n"
               "name; without --weights the model keeps its initialisation from --seed),\n"
               "reads the batch x and y from the inputs file, runs one forward and backward\n"
               "pass in train mode with dropout disabled, and writes `loss` (0-d) and the\n"
               "gradient of every parameter, under the parameter's own name, to --out.\n"
               "A parameter the loss does not reach gets a zero gradient (PyTorch: None).\n"
               "--dtype bf16: the forward and loss under lz_autocast_begin(LZ_BF16), as\n"
               "PyTorch's torch.autocast(\"cpu\", bfloat16); gradients are f32 either way.\n"
               "--eval: the pass in eval mode instead (batch norm on the running statistics\n"
               "of the weights file, as PyTorch's model.eval()).\n"
               "--device NAME: the device the pass runs on (default LZ_DEVICE, else cpu).\n\n"
               "Exit status: 0 on success, 2 on a bad argument or file, 1 if the run failed.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "lazyc grads: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    grads_usage(stderr);
    return LZ_CLI_USAGE_ERROR;
}

static int known_model(const char *name)
{
    for (const char *const *n = lz_model_names(); *n; n++)
        if (strcmp(*n, name) == 0) return 1;
    return 0;
}

static void list_models(FILE *f)
{
    fprintf(f, "models:");
    for (const char *const *n = lz_model_names(); *n; n++) fprintf(f, " %s", *n);
    fprintf(f, "\n");
}

static const char *dt_name(lz_dtype d) { return d == LZ_F32 ? "f32" : d == LZ_I64 ? "i64" : d == LZ_BF16 ? "bf16" : "i32"; }

/* x or y of the inputs file, checked against what the model takes; an
   integer x of the other width is cast (PyTorch writes i64 tokens, a
   hand-made file may hold i32). Returns a new handle or NULL. */
static lz_tensor *batch_tensor(lz_params *in, const char *path, const char *name, lz_dtype want,
                               int ndim, const char *model)
{
    lz_tensor *t = lz_params_find(in, name);
    if (!t) {
        fprintf(stderr, "lazyc grads: %s: no tensor '%s' (the inputs file needs x and y; it has", path,
                name);
        for (int i = 0; i < lz_params_count(in); i++)
            fprintf(stderr, "%s '%s'", i ? "," : "", lz_params_name(in, i));
        fprintf(stderr, "%s)\n", lz_params_count(in) ? "" : " none");
        return NULL;
    }
    lz_dtype have = lz_tensor_dtype(t);
    int int_ok = want != LZ_F32 && have != LZ_F32;
    if (have != want && !int_ok) {
        fprintf(stderr, "lazyc grads: %s: '%s' is %s, but %s takes %s\n", path, name, dt_name(have),
                model, dt_name(want));
        return NULL;
    }
    if (lz_ndim(t) != ndim) {
        fprintf(stderr, "lazyc grads: %s: '%s' has %d dimensions, but %s takes %d\n", path, name,
                lz_ndim(t), model, ndim);
        return NULL;
    }
    return have == want ? lz_retain(t) : lz_cast(t, want);
}

int lz_cmd_grads(int argc, char **argv)
{
    const char *model = NULL, *size = "smoke", *weights = NULL, *inputs = NULL, *out = NULL;
    const char *dtype = "f32", *device = NULL;
    long seed = 0;
    int training = 1;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (lz_cli_is_help(opt)) {
            grads_usage(stdout);
            return 0;
        }
        const char **dst = strcmp(opt, "--model") == 0     ? &model
                           : strcmp(opt, "--size") == 0    ? &size
                           : strcmp(opt, "--weights") == 0 ? &weights
                           : strcmp(opt, "--inputs") == 0  ? &inputs
                           : strcmp(opt, "--out") == 0     ? &out
                           : strcmp(opt, "--dtype") == 0   ? &dtype
                           : strcmp(opt, "--device") == 0  ? &device
                                                           : NULL;
        if (strcmp(opt, "--eval") == 0) {
            training = 0;
            continue;
        }
        if (strcmp(opt, "--seed") == 0) {
            if (lz_cli_int("--seed", i + 1 < argc ? argv[++i] : NULL, 0, 2147483647L, &seed) != 0)
                return LZ_CLI_USAGE_ERROR;
            continue;
        }
        if (!dst) return usage_error("unknown option '%s'", opt);
        if (i + 1 >= argc) return usage_error("%s needs a value", opt);
        *dst = argv[++i];
    }
    if (!model) return usage_error("%s is required", "--model");
    if (!inputs) return usage_error("%s is required", "--inputs");
    if (!out) return usage_error("%s is required", "--out");
    if (strcmp(dtype, "f32") != 0 && strcmp(dtype, "bf16") != 0)
        return usage_error("--dtype is f32 or bf16, not '%s'", dtype);
    const int bf16 = strcmp(dtype, "bf16") == 0;
    if (strcmp(size, "smoke") != 0 && strcmp(size, "bench") != 0 && strcmp(size, "gpu") != 0)
        return usage_error("--size needs smoke, bench or gpu, got '%s'", size);
    if (!known_model(model)) {
        fprintf(stderr, "lazyc grads: unknown model '%s'\n", model);
        list_models(stderr);
        return LZ_CLI_USAGE_ERROR;
    }
    if (lz_cli_device("grads", device) != 0) return LZ_CLI_USAGE_ERROR;

    int status = 1;
    lz_params *in = NULL, *grads = NULL;
    lz_tensor *x = NULL, *y = NULL, *loss = NULL;
    lz_model *m = lz_model_new(model, size, (uint64_t)seed);
    if (!m) {
        fprintf(stderr, "lazyc grads: building %s (%s): %s\n", model, size, lz_last_error());
        goto done;
    }
    lz_params *p = lz_model_params(m);
    const lz_model_spec *spec = lz_model_get_spec(m);
    if (weights && lz_safetensors_load(weights, p, 1) != 0) {
        fprintf(stderr, "lazyc grads: %s\n", lz_last_error());
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    in = lz_safetensors_read(inputs);
    if (!in) {
        fprintf(stderr, "lazyc grads: %s\n", lz_last_error());
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    x = batch_tensor(in, inputs, "x", spec->input_dtype, spec->input_ndim, model);
    y = x ? batch_tensor(in, inputs, "y", LZ_I64, spec->target_ndim, model) : NULL;
    if (!x || !y) {
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }

    lz_model_set_dropout(m, 0);
    if (bf16) lz_autocast_begin(LZ_BF16);
    loss = lz_model_loss(m, x, y, training);
    if (bf16) lz_autocast_end();
    if (!loss) {
        /* shapes are checked when ops are recorded: a batch the model
           cannot take fails here, before anything runs */
        fprintf(stderr, "lazyc grads: %s: the batch does not fit %s (%s): %s\n", inputs, model, size,
                lz_last_error());
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    if (lz_backward(loss) != 0) {
        fprintf(stderr, "lazyc grads: backward failed: %s\n", lz_last_error());
        goto done;
    }

    grads = lz_params_new();
    if (!grads || !lz_params_add(grads, "loss", lz_retain(loss), 0)) {
        fprintf(stderr, "lazyc grads: %s\n", lz_last_error());
        goto done;
    }
    int unreached = 0;
    for (int i = 0; i < lz_params_count(p); i++) {
        if (!lz_params_trainable(p, i)) continue;
        lz_tensor *t = lz_params_at(p, i), *g = lz_grad(t);
        if (!g) {
            int64_t shape[LZ_MAX_DIMS];
            for (int d = 0; d < lz_ndim(t); d++) shape[d] = lz_dim(t, d);
            g = lz_zeros(LZ_F32, lz_ndim(t), shape);
            if (!unreached++)
                fprintf(stderr, "lazyc grads: note: the loss does not depend on '%s'; its gradient "
                                "is written as zeros\n", lz_params_name(p, i));
        } else {
            g = lz_retain(g);
        }
        if (!lz_params_add(grads, lz_params_name(p, i), g, 0)) {
            fprintf(stderr, "lazyc grads: %s\n", lz_last_error());
            goto done;
        }
    }
    /* Compute everything as one graph first: a failure there is the run's,
       a failure to write afterwards is the output file's. */
    int n = lz_params_count(grads);
    lz_tensor **all = malloc(sizeof *all * (size_t)n);
    for (int i = 0; all && i < n; i++) all[i] = lz_params_at(grads, i);
    int rc = all ? lz_sync(all, n, 1) : -1;
    free(all);
    if (rc != 0) {
        fprintf(stderr, "lazyc grads: computing the gradients failed: %s\n",
                lz_last_error() ? lz_last_error() : "out of memory");
        goto done;
    }
    if (lz_safetensors_save(out, grads) != 0) {
        fprintf(stderr, "lazyc grads: %s\n", lz_last_error());
        status = LZ_CLI_USAGE_ERROR;
        goto done;
    }
    printf("%s (%s): loss %.9g; wrote loss and %d gradients to %s\n", model, size, lz_item(loss),
           n - 1, out);
    if (unreached > 1)
        fprintf(stderr, "lazyc grads: note: %d parameters have zero gradients (not reached)\n", unreached);
    status = 0;
done:
    lz_params_free(grads);
    lz_free(loss);
    lz_free(x);
    lz_free(y);
    lz_params_free(in);
    lz_model_free(m);
    return status;
}
