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
#include "parity_case.h"

/* worst_out holds the worst error of any kind (value, gradients, running
   statistics); worst_grad is unused. */
static lz_test_pc_op OPS[] = {
    {"conv2d", 1e-4, {0, 0}, 0, 0},
    {"max_pool2d", 1e-5, {0, 0}, 0, 0},
    {"avg_pool2d", 1e-5, {0, 0}, 0, 0},
    {"adaptive_avg_pool2d", 1e-5, {0, 0}, 0, 0},
    {"batch_norm", 1e-4, {0, 0}, 0, 0},
    {"convnet", 1e-4, {0, 0}, 0, 0},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static void int2(const lz_test_fx *fx, const char *key, int *v)
{
    const lz_test_fx_attr *a = lz_test_fx_attr_get(fx, key);
    v[0] = a && a->n > 0 ? (int)a->i[0] : 0;
    v[1] = a && a->n > 1 ? (int)a->i[1] : v[0];
}

static lz_pool2d_opts pool_opts(const lz_test_fx *fx)
{
    lz_pool2d_opts o = {0};
    int2(fx, "kernel", o.kernel);
    int2(fx, "stride", o.stride);
    int2(fx, "padding", o.padding);
    o.ceil_mode = (int)lz_test_fx_int(fx, "ceil_mode", 0);
    o.count_include_pad = (int)lz_test_fx_int(fx, "count_include_pad", 1);
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

/* Batch norm's running statistics: c->state[0] (mean), c->state[1] (var). */
static void make_running_stats(lz_test_pc_case *c)
{
    const lz_test_fx_tensor *ref_rm = lz_test_fx_get(c->fx, "rm"), *ref_rv = lz_test_fx_get(c->fx, "rv");
    if (ref_rm) c->state[0] = lz_test_fx_to_lz(ref_rm);
    if (ref_rv) c->state[1] = lz_test_fx_to_lz(ref_rv);
}

static lz_tensor *run_op(lz_test_pc_case *c)
{
    const lz_test_fx *fx = c->fx;
    lz_tensor **in = c->in, *rm = c->state[0], *rv = c->state[1];
    int n = c->n;
    const char *op = fx->op;
    if (!strcmp(op, "conv2d")) {
        lz_conv2d_opts o = {0};
        int2(fx, "stride", o.stride);
        int2(fx, "padding", o.padding);
        int2(fx, "dilation", o.dilation);
        o.groups = (int)lz_test_fx_int(fx, "groups", 1);
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
                             (int)lz_test_fx_int(fx, "training", 1), (float)lz_test_fx_float(fx, "momentum", 0.1),
                             (float)lz_test_fx_float(fx, "eps", 1e-5));
    if (!strcmp(op, "convnet")) return convnet(in, rm, rv);
    return NULL;
}

/* The running statistics after the call. */
static int check_running_stats(lz_test_pc_case *c)
{
    int pass = 1;
    if (c->state[0]) {
        double *worst = &c->info->worst_out;
        pass &= lz_test_pc_report(c, "rm", lz_test_pc_compare(c->state[0], lz_test_fx_get(c->fx, "rm_out")), "", worst);
        pass &= lz_test_pc_report(c, "rv", lz_test_pc_compare(c->state[1], lz_test_fx_get(c->fx, "rv_out")), "", worst);
    }
    return pass;
}

int main(int argc, char **argv)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/conv", argc > 1 ? argv[1] : lz_test_fx_dir());
    const lz_test_pc_hooks h = {
        .ops = OPS, .n_ops = N_OPS, .file_width = 28, .need_refs = 1,
        .grads_all = 1, .one_worst = 1,
        .prepare = make_running_stats, .run = run_op, .extra = check_running_stats,
    };
    if (lz_test_pc_run_all(dir, &h) != 0) return lz_test_done();
    printf("== per op, worst relative error over its fixtures in both modes\n");
    for (int i = 0; i < N_OPS; i++) {
        printf("%-20s %2d case(s)  worst %.2e  tol %.0e %s\n", OPS[i].name, OPS[i].cases[0],
               OPS[i].worst_out, OPS[i].tol, OPS[i].worst_out <= OPS[i].tol ? "ok" : "FAIL");
        CHECK(OPS[i].cases[0] > 0 && OPS[i].cases[1] > 0);
    }
    return lz_test_done();
}
