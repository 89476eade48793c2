/* Parity with PyTorch 1.13 for the nn ops: every fixture written by
 * tests/reference/gen_nn.py (into fixtures/nn) gives inputs, the forward
 * value and the gradients of sum(out * w); this runs the same op lazily
 * (forward and backward in one execution) and then eagerly, and compares
 * within 1e-5 relative for element-wise ops and 1e-4 for ops that sum
 * (layer norm's statistics, attention's products and softmax, the
 * embedding gradient's scatter-add).
 *
 * Dropout has no fixture: torch's generator is not lazyc's, so the same
 * seed draws different masks by design; tests/test_dropout.c checks its
 * distribution and determinism instead. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"

#define TOL_ELEMENTWISE 1e-5
#define TOL_REDUCTION 1e-4

typedef struct op_info {
    const char *name;
    double tol;
    int cases[2];                  /* fixtures run, per mode */
    double worst_out, worst_grad;  /* over all cases and both modes */
} op_info;

static op_info OPS[] = {
    {"embedding", TOL_REDUCTION, {0, 0}, 0, 0},
    {"layer_norm", TOL_REDUCTION, {0, 0}, 0, 0},
    {"hardtanh", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"relu6", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"flatten", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"attention", TOL_REDUCTION, {0, 0}, 0, 0},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static op_info *find_op(const char *name)
{
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(OPS[i].name, name)) return &OPS[i];
    return NULL;
}

static lz_tensor *run_op(const lzfx *fx, lz_tensor **in, int n)
{
    const char *op = fx->op;
    if (!strcmp(op, "embedding")) return lz_embedding(in[0], in[1]);
    if (!strcmp(op, "hardtanh"))
        return lz_hardtanh(in[0], (float)lzfx_float(fx, "min", NAN), (float)lzfx_float(fx, "max", NAN));
    if (!strcmp(op, "relu6")) return lz_relu6(in[0]);
    if (!strcmp(op, "flatten")) return lz_flatten(in[0], (int)lzfx_int(fx, "start", 0));
    if (!strcmp(op, "layer_norm")) {
        int k = 1;
        lz_tensor *w = lzfx_int(fx, "has_weight", 0) && k < n ? in[k++] : NULL;
        lz_tensor *b = lzfx_int(fx, "has_bias", 0) && k < n ? in[k++] : NULL;
        return lz_layer_norm(in[0], (int)lzfx_int(fx, "n_axes", 1), w, b,
                             (float)lzfx_float(fx, "eps", NAN));
    }
    if (!strcmp(op, "attention"))
        return lz_attention(in[0], in[1], in[2], lzfx_int(fx, "has_mask", 0) && n > 3 ? in[3] : NULL,
                            (float)lzfx_float(fx, "scale", NAN));
    return NULL;
}

static int same_shape(lz_tensor *t, const lzfx_tensor *ref)
{
    if (!t || lz_ndim(t) != ref->ndim) return 0;
    for (int d = 0; d < ref->ndim; d++)
        if (lz_dim(t, d) != ref->shape[d]) return 0;
    return 1;
}

static double compare(lz_tensor *t, const lzfx_tensor *ref)
{
    if (!same_shape(t, ref) || lz_tensor_dtype(t) != ref->dtype || ref->dtype != LZ_F32) return INFINITY;
    float *v = lz_test_read(t);
    if (!v) return INFINITY;
    double e = ref->numel ? lz_test_rel_err(v, (const float *)ref->data, ref->numel) : 0;
    free(v);
    return e;
}

static int run_case(const char *dir, const char *file, int eager)
{
    char path[2304], err[2816];
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
    const lzfx_tensor *ref_out = lzfx_get(&fx, "out"), *ref_w = lzfx_get(&fx, "w");
    const lzfx_tensor *xs[8], *gs[8];
    int n = 0;
    for (; n < 8; n++) {
        char name[8];
        snprintf(name, sizeof name, "x%d", n);
        if (!(xs[n] = lzfx_get(&fx, name))) break;
        snprintf(name, sizeof name, "g%d", n);
        gs[n] = lzfx_get(&fx, name);
    }

    lz_clear_error();
    lz_scope_begin();
    lz_tensor *in[8];
    for (int i = 0; i < n; i++) {
        in[i] = lzfx_to_lz(xs[i]);
        if (gs[i]) lz_requires_grad(in[i], 1);
    }
    lz_metrics before = lz_metrics_get();
    lz_tensor *out = run_op(&fx, in, n);
    int ok = out != NULL && ref_out && ref_w;
    if (ok) {
        lz_tensor *loss = lz_sum(lz_mul(out, lzfx_to_lz(ref_w)));
        ok = loss && lz_backward(loss) == 0;
    }
    lz_metrics recorded = lz_metrics_get();
    lz_mark_step();

    char line[1024];
    size_t o = (size_t)snprintf(line, sizeof line, "%-26s %-5s", file, eager ? "eager" : "lazy");
    int pass = ok;
    if (!ok) {
        info->worst_out = INFINITY;
        o += (size_t)snprintf(line + o, sizeof line - o, " ERROR %s",
                              lz_last_error() ? lz_last_error() : "(no message)");
    } else {
        double e = compare(out, ref_out);
        o += (size_t)snprintf(line + o, sizeof line - o, " out %.2e", e);
        if (!(e <= info->tol)) pass = 0;
        if (!(e <= info->worst_out)) info->worst_out = e;
        for (int i = 0; i < n; i++) {
            if (!gs[i]) continue;
            lz_tensor *g = lz_grad(in[i]);
            double ge = g ? compare(g, gs[i]) : INFINITY;
            o += (size_t)snprintf(line + o, sizeof line - o, " g%d %.2e%s", i, ge, g ? "" : "(no grad)");
            if (!(ge <= info->tol)) pass = 0;
            if (!(ge <= info->worst_grad)) info->worst_grad = ge;
        }
    }
    /* lazy: recording ran nothing, and forward + backward were one execution */
    if (!eager && ok) {
        lz_metrics after = lz_metrics_get();
        int64_t rec = recorded.executions - before.executions, all = after.executions - before.executions;
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
    if (argc > 1) snprintf(dir, sizeof dir, "%s", argv[1]);
    else snprintf(dir, sizeof dir, "%s/nn", lzfx_dir());
    char *files[256];
    int nf = lzfx_index(dir, files, 256);
    if (nf <= 0) {
        fprintf(stderr, "no fixtures: cannot read %s/INDEX (run from tests/, or set LZ_FIXTURES)\n", dir);
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
        printf("%-11s %2d case(s)  out %.2e  grad %.2e  tol %.0e %s\n", OPS[i].name, OPS[i].cases[0],
               OPS[i].worst_out, OPS[i].worst_grad, OPS[i].tol,
               OPS[i].worst_out <= OPS[i].tol && OPS[i].worst_grad <= OPS[i].tol ? "ok" : "FAIL");
        if (OPS[i].cases[0] == 0 || OPS[i].cases[1] == 0) fprintf(stderr, "op %s has no fixture\n", OPS[i].name);
        CHECK(OPS[i].cases[0] > 0 && OPS[i].cases[1] > 0);
    }
    for (int i = 0; i < nf; i++) free(files[i]);
    return lz_test_done();
}
