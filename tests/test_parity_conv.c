/* Parity with PyTorch 1.13 for conv2d, the pools and batch norm: every
 * fixture written by tests/reference/gen_conv.py gives inputs, the forward
 * value, the gradients of sum(out * w) and, for batch norm, the running
 * statistics after the call. Each case runs lazily (forward, backward and
 * the running-statistics update cut into one graph: one execution) and then
 * eagerly. Tolerances (relative to the reference's largest magnitude):
 * 1e-4 for conv and batch norm, which sum many products, 1e-5 for pools. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"

typedef struct op_info {
    const char *name;
    double tol;
    int cases[2];
    double worst;
} op_info;

static op_info OPS[] = {
    {"conv2d", 1e-4, {0, 0}, 0},
    {"max_pool2d", 1e-5, {0, 0}, 0},
    {"avg_pool2d", 1e-5, {0, 0}, 0},
    {"adaptive_avg_pool2d", 1e-5, {0, 0}, 0},
    {"batch_norm", 1e-4, {0, 0}, 0},
    {"convnet", 1e-4, {0, 0}, 0},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static void int2(const lzfx *fx, const char *key, int *v)
{
    const lzfx_attr *a = lzfx_attr_get(fx, key);
    v[0] = a && a->n > 0 ? (int)a->i[0] : 0;
    v[1] = a && a->n > 1 ? (int)a->i[1] : v[0];
}

static lz_pool2d_opts pool_opts(const lzfx *fx)
{
    lz_pool2d_opts o = {0};
    int2(fx, "kernel", o.kernel);
    int2(fx, "stride", o.stride);
    int2(fx, "padding", o.padding);
    o.ceil_mode = (int)lzfx_int(fx, "ceil_mode", 0);
    o.count_include_pad = (int)lzfx_int(fx, "count_include_pad", 1);
    return o;
}

/* The network of gen_conv.py's convnet case. */
static lz_tensor *convnet(lz_tensor **in, lz_tensor *rm, lz_tensor *rv)
{
    lz_conv2d_opts c1 = {.padding = {1, 1}};
    lz_tensor *h = lz_conv2d(in[0], in[1], NULL, c1);
    h = lz_relu(lz_batch_norm(h, in[2], in[3], rm, rv, 1, 0.1f, 1e-5f));
    h = lz_max_pool2d(h, (lz_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    lz_conv2d_opts c2 = {.padding = {1, 1}, .groups = 8};
    h = lz_conv2d(h, in[4], in[5], c2);
    h = lz_avg_pool2d(h, (lz_pool2d_opts){.kernel = {2, 2}, .count_include_pad = 1});
    return lz_adaptive_avg_pool2d(h, 1, 1);
}

static lz_tensor *run_op(const lzfx *fx, lz_tensor **in, int n, lz_tensor *rm, lz_tensor *rv)
{
    const char *op = fx->op;
    if (!strcmp(op, "conv2d")) {
        lz_conv2d_opts o = {0};
        int2(fx, "stride", o.stride);
        int2(fx, "padding", o.padding);
        int2(fx, "dilation", o.dilation);
        o.groups = (int)lzfx_int(fx, "groups", 1);
        return lz_conv2d(in[0], in[1], n > 2 ? in[2] : NULL, o);
    }
    if (!strcmp(op, "max_pool2d")) return lz_max_pool2d(in[0], pool_opts(fx));
    if (!strcmp(op, "avg_pool2d")) return lz_avg_pool2d(in[0], pool_opts(fx));
    if (!strcmp(op, "adaptive_avg_pool2d")) {
        int o[2];
        int2(fx, "out", o);
        return lz_adaptive_avg_pool2d(in[0], o[0], o[1]);
    }
    if (!strcmp(op, "batch_norm"))
        return lz_batch_norm(in[0], n > 1 ? in[1] : NULL, n > 2 ? in[2] : NULL, rm, rv,
                             (int)lzfx_int(fx, "training", 1), (float)lzfx_float(fx, "momentum", 0.1),
                             (float)lzfx_float(fx, "eps", 1e-5));
    if (!strcmp(op, "convnet")) return convnet(in, rm, rv);
    return NULL;
}

static double compare(lz_tensor *t, const lzfx_tensor *ref)
{
    if (!t || lz_ndim(t) != ref->ndim) return INFINITY;
    for (int d = 0; d < ref->ndim; d++)
        if (lz_dim(t, d) != ref->shape[d]) return INFINITY;
    float *v = lz_test_read(t);
    if (!v) return INFINITY;
    double e = lz_test_rel_err(v, (const float *)ref->data, ref->numel);
    free(v);
    return e;
}

static op_info *find_op(const char *name)
{
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(OPS[i].name, name)) return &OPS[i];
    return NULL;
}

/* Appends " name err" to the line; returns 1 if err is within tol. */
static int report(char *line, size_t len, size_t *o, const char *name, double e, op_info *info)
{
    *o += (size_t)snprintf(line + *o, len - *o, " %s %.2e", name, e);
    if (!(e <= info->worst)) info->worst = e;
    return e <= info->tol;
}

static int run_case(const char *dir, const char *file, int eager)
{
    char path[2200], err[2800];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lzfx fx;
    if (lzfx_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"fixture loads");
        return -1;
    }
    op_info *info = find_op(fx.op);
    if (!info) {
        fprintf(stderr, "%s: op %s has no runner in this test\n", file, fx.op);
        CHECK(!"fixture op known");
        lzfx_free(&fx);
        return -1;
    }
    info->cases[eager]++;
    const lzfx_tensor *xs[8], *gs[8];
    int n = 0;
    for (; n < 8; n++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", n);
        if (!(xs[n] = lzfx_get(&fx, name))) break;
        snprintf(name, sizeof name, "g%d", n);
        gs[n] = lzfx_get(&fx, name);
    }
    const lzfx_tensor *ref_rm = lzfx_get(&fx, "rm"), *ref_rv = lzfx_get(&fx, "rv");

    lz_clear_error();
    lz_scope_begin();
    lz_tensor *in[8], *rm = NULL, *rv = NULL;
    for (int i = 0; i < n; i++) {
        in[i] = lzfx_to_lz(xs[i]);
        lz_requires_grad(in[i], 1);
    }
    if (ref_rm) rm = lzfx_to_lz(ref_rm);
    if (ref_rv) rv = lzfx_to_lz(ref_rv);
    lz_metrics before = lz_metrics_get();
    lz_tensor *out = run_op(&fx, in, n, rm, rv);
    lz_tensor *w = lzfx_to_lz(lzfx_get(&fx, "w"));
    lz_tensor *loss = out ? lz_sum(lz_mul(out, w)) : NULL;
    int ok = loss && lz_backward(loss) == 0;
    lz_metrics recorded = lz_metrics_get();
    lz_mark_step();

    char line[1400];
    size_t o = (size_t)snprintf(line, sizeof line, "%-28s %-5s", file, eager ? "eager" : "lazy");
    int pass = ok;
    if (!ok) {
        info->worst = INFINITY;
        o += (size_t)snprintf(line + o, sizeof line - o, " ERROR %s",
                              lz_last_error() ? lz_last_error() : "(no message)");
    } else {
        pass &= report(line, sizeof line, &o, "out", compare(out, lzfx_get(&fx, "out")), info);
        for (int i = 0; i < n; i++) {
            char name[8];
            snprintf(name, sizeof name, "g%d", i);
            lz_tensor *g = lz_grad(in[i]);
            pass &= report(line, sizeof line, &o, name, g && gs[i] ? compare(g, gs[i]) : INFINITY,
                           info);
        }
        if (rm) {
            pass &= report(line, sizeof line, &o, "rm", compare(rm, lzfx_get(&fx, "rm_out")), info);
            pass &= report(line, sizeof line, &o, "rv", compare(rv, lzfx_get(&fx, "rv_out")), info);
        }
    }
    /* Lazy: recording ran nothing; forward, backward and the running
       statistics were one execution. */
    if (!eager && ok) {
        lz_metrics after = lz_metrics_get();
        int64_t rec = recorded.executions - before.executions;
        int64_t all = after.executions - before.executions;
        if (rec != 0 || all != 1) {
            o += (size_t)snprintf(line + o, sizeof line - o,
                                  " executions: %lld while recording, %lld in all (want 0, 1)",
                                  (long long)rec, (long long)all);
            pass = 0;
        }
    }
    snprintf(line + o, sizeof line - o, "  tol %.0e %s", info->tol, pass ? "ok" : "FAIL");
    printf("%s\n", line);
    CHECK(pass);
    lz_scope_end();
    lzfx_free(&fx);
    return pass ? 0 : -1;
}

int main(int argc, char **argv)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/conv", argc > 1 ? argv[1] : lzfx_dir());
    char *files[256];
    int nf = lzfx_index(dir, files, 256);
    if (nf <= 0) {
        fprintf(stderr, "no fixtures: cannot read %s/INDEX (run from tests/, or set LZ_FIXTURES)\n",
                dir);
        CHECK(!"fixtures present");
        return lz_test_done();
    }
    for (int eager = 0; eager <= 1; eager++) {
        lz_set_eager(eager);
        int failed = 0;
        for (int i = 0; i < nf; i++) failed += run_case(dir, files[i], eager) != 0;
        lz_wait();
        printf("== %s mode: %d fixture(s) failed\n", eager ? "eager" : "lazy", failed);
    }
    lz_set_eager(0);
    printf("== per op, worst relative error over its fixtures in both modes\n");
    for (int i = 0; i < N_OPS; i++) {
        printf("%-20s %2d case(s)  worst %.2e  tol %.0e %s\n", OPS[i].name, OPS[i].cases[0],
               OPS[i].worst, OPS[i].tol, OPS[i].worst <= OPS[i].tol ? "ok" : "FAIL");
        CHECK(OPS[i].cases[0] > 0 && OPS[i].cases[1] > 0);
    }
    for (int i = 0; i < nf; i++) free(files[i]);
    return lz_test_done();
}
