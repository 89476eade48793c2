#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

int lz_test_passed, lz_test_failed;

int lz_test_done(void)
{
    printf("%d passed, %d failed\n", lz_test_passed, lz_test_failed);
    return lz_test_failed != 0 || lz_test_passed == 0;
}

void lz_test_fill_uniform(float *x, int64_t n, unsigned seed, float lo, float hi)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = lo + (hi - lo) * (float)((s >> 40) / (double)(1ull << 24));
    }
}

/* library -1: either */
static int64_t kernel_calls(const char *op, int library)
{
    lz_profile_entry e[256];
    int n = lz_profile_read(e, 256);
    int64_t calls = 0;
    for (int i = 0; i < n && i < 256; i++)
        if (strcmp(e[i].op, op) == 0 && (library < 0 || e[i].library == library))
            calls += e[i].calls;
    return calls;
}

int64_t lz_test_kernel_calls(const char *op) { return kernel_calls(op, -1); }
int64_t lz_test_kernel_calls_by(const char *op, int library) { return kernel_calls(op, library); }

double lz_test_rel_err(const float *a, const float *b, int64_t n)
{
    double maxb = 1e-12, maxd = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > maxb) maxb = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
    }
    return maxd / maxb;
}

lz_tensor *lz_test_rand(unsigned seed, float lo, float hi, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    lz_test_fill_uniform(x, n, seed, lo, hi);
    lz_tensor *t = lz_from_host(x, LZ_F32, ndim, shape);
    free(x);
    return t;
}

void lz_test_mlp_batch(int step, int64_t b, int64_t in, int64_t classes, lz_tensor **x,
                       lz_tensor **y)
{
    const int64_t sx[2] = {b, in}, sy[1] = {b};
    *x = lz_test_rand(100 + (unsigned)step, -1, 1, 2, sx);
    int64_t *lab = malloc(sizeof *lab * (size_t)(b ? b : 1));
    for (int64_t i = 0; lab && i < b; i++) lab[i] = (step * 7 + i * 3) % classes;
    *y = lab ? lz_from_host(lab, LZ_I64, 1, sy) : NULL;
    free(lab);
}

float lz_test_lazy_step(lz_step_fn fn, void *ctx, int step, int64_t b, int64_t in,
                        int64_t classes)
{
    lz_tensor *x, *y, *out[1] = {NULL};
    lz_test_mlp_batch(step, b, in, classes, &x, &y);
    lz_tensor *args[2] = {x, y};
    lz_scope_begin();
    CHECK_EQ_I(fn(ctx, args, out), 0);
    lz_keep(out[0]);
    lz_scope_end();
    lz_mark_step();
    float loss = out[0] ? lz_item(out[0]) : NAN;
    lz_free(out[0]);
    lz_free(x);
    lz_free(y);
    return loss;
}

float *lz_test_read(lz_tensor *t)
{
    int64_t n = lz_numel(t);
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (lz_to_host(t, x, sizeof(float) * (size_t)n) != 0) { free(x); return NULL; }
    return x;
}

static double weighted_sum(lz_test_fn f, void *ctx, lz_tensor *const *in, const float *w)
{
    lz_tensor *y = f(ctx, in);
    if (!y) return NAN;
    int64_t n = lz_numel(y);
    float *v = lz_test_read(y);
    lz_free(y);
    if (!v) return NAN;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * w[i];
    free(v);
    return s;
}

double lz_test_gradcheck(lz_test_fn f, void *ctx, int n_in, lz_tensor *const *in)
{
    lz_tensor *y = f(ctx, in);
    if (!y) return INFINITY;
    int64_t ny = lz_numel(y);
    int64_t shape[LZ_MAX_DIMS];
    for (int d = 0; d < lz_ndim(y); d++) shape[d] = lz_dim(y, d);
    lz_tensor *w = lz_test_rand(4242, 0.5f, 1.5f, lz_ndim(y), shape);
    float *wv = lz_test_read(w);
    lz_tensor *loss = lz_sum(lz_mul(y, w));
    for (int i = 0; i < n_in; i++) lz_zero_grad(in[i]);
    if (!loss || lz_backward(loss) != 0) return INFINITY;
    double worst = 0;
    for (int i = 0; i < n_in; i++) {
        lz_tensor *g = lz_grad(in[i]);
        if (!g) continue;
        int64_t n = lz_numel(in[i]);
        float *x = lz_test_read(in[i]), *gv = lz_test_read(g);
        float *xp = malloc(sizeof(float) * (size_t)n);
        double maxg = 1e-6, maxd = 0;
        for (int64_t k = 0; k < n; k++) {
            const float eps = 1e-2f * (fabsf(x[k]) > 1 ? fabsf(x[k]) : 1);
            double num[2];
            for (int side = 0; side < 2; side++) {
                for (int64_t j = 0; j < n; j++) xp[j] = x[j];
                xp[k] = x[k] + (side ? -eps : eps);
                lz_copy_from_host(in[i], xp, sizeof(float) * (size_t)n);
                num[side] = weighted_sum(f, ctx, in, wv);
            }
            double numeric = (num[0] - num[1]) / (2.0 * eps);
            if (fabs(numeric) > maxg) maxg = fabs(numeric);
            double d = fabs(numeric - gv[k]);
            if (d > maxd || isnan(d)) maxd = isnan(d) ? INFINITY : d;
        }
        lz_copy_from_host(in[i], x, sizeof(float) * (size_t)n);
        if (maxd / maxg > worst) worst = maxd / maxg;
        free(x); free(gv); free(xp);
    }
    (void)ny;
    free(wv);
    lz_free(w); lz_free(loss); lz_free(y);
    return worst;
}

void lz_test_reblock(const float *from, float *to, const int64_t *shape, int b, int to_blocked)
{
    const int64_t N = shape[0], C = shape[1], S = shape[2] * shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < S; i++) {
                const int64_t plain = (n * C + c) * S + i;
                const int64_t blocked = ((n * (C / b) + c / b) * S + i) * b + c % b;
                if (to_blocked) to[blocked] = from[plain];
                else to[plain] = from[blocked];
            }
}

int lz_test_sgd_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lz_test_trainer *t = ctx;
    lz_sgd_zero_grad(t->opt);
    lz_tensor *loss = lz_model_loss(t->m, in[0], in[1], 1);
    if (!loss || lz_backward(loss) || lz_sgd_step(t->opt)) return -1;
    out[0] = loss;
    return 0;
}

int lz_test_case_in_child(const char *name, void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        fn();   /* the library's first call is fn's: settings are read there */
        int rc = lz_test_done();
        lz_shutdown();
        fflush(stdout);
        _exit(rc);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 1;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("%s: %s\n", name, ok ? "ok" : "FAILED");
    return !ok;
}

lz_sgd *lz_test_model_sgd(lz_model *m, float lr)
{
    lz_params *p = lz_model_params(m);
    const int n = lz_params_trainable_list(p, NULL, 0);
    lz_tensor **list = malloc(sizeof *list * (size_t)(n ? n : 1));
    if (!list) return NULL;
    lz_params_trainable_list(p, list, n);
    lz_sgd *opt = lz_sgd_new(list, n, (lz_sgd_opts){.lr = lr, .momentum = 0.9f});
    free(list);
    return opt;
}

static lz_tensor *ids(int64_t mul, int64_t add, int64_t classes, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    int64_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = (int64_t)(((uint64_t)i * (uint64_t)mul + (uint64_t)add) % (uint64_t)classes);
    lz_tensor *t = lz_from_host(v, LZ_I64, ndim, shape);
    free(v);
    return t;
}

void lz_test_model_batch(const lz_model_spec *s, unsigned seed, lz_tensor **x, lz_tensor **y)
{
    *x = s->input_dtype == LZ_F32 ? lz_test_rand(seed, -1, 1, s->input_ndim, s->input_shape)
                                  : ids(7919, seed * 104729u, s->num_classes, s->input_ndim, s->input_shape);
    *y = ids(31, seed * 17u, s->num_classes, s->target_ndim, s->target_shape);
}

void lz_test_vm_flags(const void *p, char *flags, size_t cap)
{
    flags[0] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return;
    char line[512];
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && !strncmp(line, "VmFlags:", 8)) {
            snprintf(flags, cap, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

int lz_test_thp_kernel(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) fclose(f);
    return f != NULL;
}
