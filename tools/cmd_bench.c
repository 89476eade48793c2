/* `lazyc bench`: trains each model of the zoo for a few steps in eager,
 * lazy and captured mode, and in PyTorch eager when Debian's python3-torch
 * is there (bench/torch_reference.py, same run), then prints the table of
 * median step times with the speedups, executions per step, compiles,
 * achieved GFLOP/s and % of the fp32 peak measured in the same run (at the
 * start, and again at the end: the higher of the two).
 * It writes the same as CSV, markdown, JSON and an SVG bar chart into
 * --out. Progress goes to stderr; with --json, stdout holds only the JSON
 * object (issue 5's format).
 *
 * Exit status: 0; 1 when a model could not be built or a lazyc mode failed
 * (the rest still runs and is written); 2 on a usage error. A missing
 * PyTorch is not an error: its column says n/a. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench.h"
#include "cli.h"

enum { MAX_MODELS = 64 };

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: lazyc bench [--size smoke|bench|gpu] [--models a,b,...]\n"
            "                   [--modes eager,lazy,captured,torch] [--steps N] [--warmup N]\n"
            "                   [--out DIR] [--json] [--profile[-steps]] [--dtype f32|bf16]\n"
            "                   [--device NAME]\n\n"
            "Times one training step (forward, cross-entropy, backward, SGD lr 0.01\n"
            "momentum 0.9) of each model in lazyc's eager, lazy and captured modes and\n"
            "in PyTorch eager (when /usr/bin/python3 has torch and torchvision), in the\n"
            "same run: warm-up steps, then repetitions interleaved between the modes;\n"
            "the median is reported.\n\n"
            "  --size S     smoke (default: small inputs, done in a few minutes) or bench\n"
            "               (batch 8 at 128x128; BERT batch 4, sequence 128) or gpu\n"
            "               (batch 64 at 224x224; BERT batch 16, sequence 128: for --device cuda)\n"
            "  --models L   comma-separated model names (default: all ten)\n"
            "  --modes L    comma-separated among eager, lazy, captured, torch (default: all)\n"
            "  --steps N    timed repetitions per mode (default 3 smoke, 5 bench)\n"
            "  --warmup N   warm-up steps per mode (default 2; captured always does >= 2,\n"
            "               the calls that trace)\n"
            "  --out DIR    where bench.csv, bench.md, bench.json and bench.svg go\n"
            "               (default bench-out)\n"
            "  --dtype D    f32 (default) or bf16: every step's forward and loss under\n"
            "               lz_autocast_begin(LZ_BF16), PyTorch's under torch.autocast(\"cpu\",\n"
            "               bfloat16); %% peak is then of a bf16 GEMM measured in this run\n"
            "  --device NAME  the device lazyc's modes run on (default LZ_DEVICE, else cpu)\n"
            "  --profile    after each model, the captured mode's kernel time by op\n"
            "               (lz_profile_read) on stderr\n"
            "  --profile-steps  --profile, then the 25 slowest step shapes: ms a step,\n"
            "               GFLOP/s of a product, op and operands (lz_profile_read_steps)\n"
            "  --json       print the results as one JSON object on stdout (the table\n"
            "               then goes to stderr)\n\n"
            "models:");
    for (const char *const *n = lz_model_names(); n && *n; n++)
        fprintf(f, " %s", *n);
    fprintf(f, "\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "lazyc bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    bench_usage(stderr);
    return LZ_CLI_USAGE_ERROR;
}

static int known_model(const char *name)
{
    for (const char *const *n = lz_model_names(); n && *n; n++)
        if (strcmp(*n, name) == 0)
            return 1;
    return 0;
}

/* Splits a comma-separated list in place into items (at most cap). */
static int split_list(char *s, char **items, int cap)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap)
            return -1;
        items[n++] = tok;
    }
    return n;
}

static int mkdir_p(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int write_outputs(const bench_table *t, const char *dir)
{
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "lazyc bench: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char path[4200];
    int rc = 0;
    snprintf(path, sizeof path, "%s/bench.csv", dir);
    rc |= bench_write_csv(path, t);
    snprintf(path, sizeof path, "%s/bench.md", dir);
    rc |= bench_write_markdown(path, t);
    snprintf(path, sizeof path, "%s/bench.svg", dir);
    rc |= bench_write_svg(path, t);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        bench_print_json(f, t);
        rc |= fclose(f);
    } else {
        rc = -1;
    }
    if (rc != 0)
        fprintf(stderr, "lazyc bench: could not write every file into %s\n", dir);
    else
        fprintf(stderr, "lazyc bench: wrote %s/bench.{csv,md,json,svg}\n", dir);
    return rc != 0 ? -1 : 0;
}

/* The model's spec without timing it (--modes torch alone). */
static int spec_only(const char *name, const char *size, lz_model_spec *spec, int64_t *params)
{
    lz_model *m = lz_model_new(name, size, 1);
    if (!m)
        return -1;
    *spec = *lz_model_get_spec(m);
    *params = lz_params_numel(lz_model_params(m), 1);
    lz_model_free(m);
    return 0;
}

int lz_cmd_bench(int argc, char **argv)
{
    bench_opts o = { .size = "smoke", .steps = -1, .warmup = -1, .out_dir = "bench-out" };
    char *model_list = NULL, *mode_list = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (lz_cli_is_help(a)) {
            bench_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o.json = 1;
            continue;
        } else if (strcmp(a, "--profile") == 0 || strcmp(a, "--profile-steps") == 0) {
            const int level = strcmp(a, "--profile") == 0 ? 1 : 2;
            o.profile = level > o.profile ? level : o.profile;
            continue;
        }
        if (strcmp(a, "--size") && strcmp(a, "--models") && strcmp(a, "--modes") &&
            strcmp(a, "--steps") && strcmp(a, "--warmup") && strcmp(a, "--out") &&
            strcmp(a, "--dtype") && strcmp(a, "--device"))
            return usage_error("unknown option '%s'", a);
        if (!val)
            return usage_error("%s needs a value", a);
        i++;
        if (strcmp(a, "--size") == 0) {
            if (strcmp(val, "smoke") && strcmp(val, "bench") && strcmp(val, "gpu"))
                return usage_error("--size is smoke, bench or gpu, not '%s'", val);
            o.size = val;
        } else if (strcmp(a, "--dtype") == 0) {
            if (bench_parse_dtype(val, &o.bf16) != 0)
                return usage_error("--dtype is f32 or bf16, not '%s'", val);
        } else if (strcmp(a, "--device") == 0) {
            if (lz_cli_device("bench", val) != 0)
                return LZ_CLI_USAGE_ERROR;
        } else if (strcmp(a, "--models") == 0) {
            model_list = argv[i];
        } else if (strcmp(a, "--modes") == 0) {
            mode_list = argv[i];
        } else if (strcmp(a, "--out") == 0) {
            if (!*val)
                return usage_error("--out needs a folder%s", "");
            o.out_dir = val;
        } else {
            long v;
            int steps = strcmp(a, "--steps") == 0;
            if (lz_cli_int(a, val, steps ? 1 : 0, 1000000, &v) != 0)
                return LZ_CLI_USAGE_ERROR;
            *(steps ? &o.steps : &o.warmup) = v;
        }
    }
    int bench_size = strcmp(o.size, "smoke") != 0;
    if (o.steps < 0)
        o.steps = bench_size ? 5 : 3;
    if (o.warmup < 0)
        o.warmup = 2;

    char *model_items[MAX_MODELS + 1];
    const char *models[MAX_MODELS + 1];
    int n_models = 0;
    if (model_list) {
        n_models = split_list(model_list, model_items, MAX_MODELS);
        if (n_models <= 0)
            return usage_error("--models needs a comma-separated list of models%s", "");
        for (int k = 0; k < n_models; k++) {
            if (!known_model(model_items[k]))
                return usage_error("unknown model '%s'", model_items[k]);
            models[k] = model_items[k];
        }
    } else {
        for (const char *const *n = lz_model_names(); n && *n && n_models < MAX_MODELS; n++)
            models[n_models++] = *n;
    }
    models[n_models] = NULL;
    o.models = models;

    if (mode_list) {
        char *items[BENCH_MODES + 1];
        int n = split_list(mode_list, items, BENCH_MODES);
        if (n <= 0)
            return usage_error("--modes needs a comma-separated list of modes%s", "");
        for (int k = 0; k < n; k++) {
            int md = 0;
            while (md < BENCH_MODES && strcmp(items[k], bench_mode_names[md]))
                md++;
            if (md == BENCH_MODES)
                return usage_error("unknown mode '%s' (eager, lazy, captured, torch)", items[k]);
            o.mode_on[md] = 1;
        }
    } else {
        for (int md = 0; md < BENCH_MODES; md++)
            o.mode_on[md] = 1;
    }

    double t_start = now_s();
    bench_table t = { .size = o.size, .steps = o.steps, .warmup = o.warmup };
    memcpy(t.mode_on, o.mode_on, sizeof t.mode_on);
    t.rows = calloc((size_t)(n_models ? n_models : 1), sizeof *t.rows);
    if (!t.rows) {
        fprintf(stderr, "lazyc bench: out of memory\n");
        return 1;
    }
    fprintf(stderr, "lazyc bench --size %s: %d models on %s, median of %ld steps after %ld warm-up\n",
            o.size, n_models, lz_device_name(), o.steps, o.warmup);
    fprintf(stderr, "measuring the fp32 peak (sgemm 2048^3)...\n");
    t.peak_gflops = bench_peak_gflops();
    fprintf(stderr, "fp32 peak: %.1f GFLOP/s\n", t.peak_gflops);
    t.bf16 = o.bf16;
    if (o.bf16)
        bench_measure_bf16_peak(&t);

    int status = 0, torch_available = 1;
    int lazyc_modes = o.mode_on[BENCH_EAGER] || o.mode_on[BENCH_LAZY] || o.mode_on[BENCH_CAPTURED];
    for (int k = 0; k < n_models; k++) {
        bench_row *r = &t.rows[t.n];
        memset(r, 0, sizeof *r);
        snprintf(r->model, sizeof r->model, "%s", models[k]);
        for (int md = 0; md < 3; md++)
            r->mode[md].ms = -1;
        r->torch_ms = -1;
        r->torch_peak_bytes = -1;
        fprintf(stderr, "[%d/%d] %s (%.0f s so far)\n", k + 1, n_models, models[k],
                now_s() - t_start);
        lz_model_spec spec;
        int rc = lazyc_modes ? bench_time_model(models[k], &o, r, &spec)
                             : spec_only(models[k], o.size, &spec, &r->params);
        /* the next model starts as in a fresh process: the buffers this one
           freed, cached for reuse in sizes the next seldom asks for, would
           stay mapped beside its fresh ones, and its build and first step
           took 2-4x longer after BERT's (docs/performance.md) */
        lz_shutdown();
        if (rc < 0) {
            fprintf(stderr, "lazyc bench: skipping %s: %s\n", models[k],
                    r->note[0] ? r->note : (lz_last_error() ? lz_last_error() : "cannot build it"));
            lz_clear_error();
            status = 1;
            continue;
        }
        if (rc > 0)
            status = 1;
        spec.name = r->model;
        if (o.mode_on[BENCH_TORCH])
            bench_torch_model(&spec, &o, r, &torch_available);
        t.n++;
    }

    /* A second reading: on a shared machine the first can fall in a loaded
       second and understate the peak, which would overstate "% peak". */
    const double again = bench_peak_gflops();
    fprintf(stderr, "fp32 peak again at the end: %.1f GFLOP/s (the table uses %.1f, the higher)\n",
            again, again > t.peak_gflops ? again : t.peak_gflops);
    if (again > t.peak_gflops)
        t.peak_gflops = again;
    if (o.bf16)
        bench_measure_bf16_peak(&t);

    FILE *table_out = o.json ? stderr : stdout;
    fprintf(table_out, "\nlazyc bench --size %s: median step ms of %ld interleaved repetitions "
                       "after %ld warm-up (%.0f s)\n\n",
            o.size, o.steps, o.warmup, now_s() - t_start);
    bench_print_table(table_out, &t);
    if (o.json)
        bench_print_json(stdout, &t);
    fflush(stdout);
    if (write_outputs(&t, o.out_dir) != 0)
        status = 1;
    free(t.rows);
    return status;
}
