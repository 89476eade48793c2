/* Parity with PyTorch 1.13, op by op: every fixture written by
 * tests/reference/gen_fixtures.py gives inputs, the forward value and the
 * gradients of sum(out * w); this runs the same op in lazyc, first lazily
 * (forward + backward cut into one graph by lz_mark_step), then eagerly,
 * and compares within the tolerance of the op's family. Every public op
 * must be covered by at least one fixture. */
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
    int cases[2];            /* fixtures run, per mode */
    double worst_out, worst_grad;   /* over all cases and both modes */
} op_info;

/* Element-wise ops (and the pure data-movement shape ops) at 1e-5;
   anything that sums many terms (reductions, matmul, softmax, losses, and
   expand whose gradient is a sum) at 1e-4. */
#define EW(name) {name, TOL_ELEMENTWISE, {0, 0}, 0, 0}
#define RED(name) {name, TOL_REDUCTION, {0, 0}, 0, 0}
static op_info OPS[] = {
    EW("add"), EW("sub"), EW("mul"), EW("div"), EW("maximum"),
    EW("neg"), EW("exp"), EW("log"), EW("sqrt"), EW("rsqrt"), EW("pow"),
    EW("tanh"), EW("sigmoid"), EW("relu"), EW("gelu"),
    EW("gt"), EW("lt"), EW("ge"), EW("le"), EW("eq"), EW("where"), EW("cast"),
    RED("sum"), RED("mean"), RED("sum_axes"), RED("mean_axes"), RED("max_axes"),
    EW("reshape"), EW("permute"), EW("transpose"), RED("expand"), EW("slice"), EW("cat"),
    RED("matmul"), RED("softmax"), RED("log_softmax"), RED("cross_entropy"),
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static op_info *find_op(const char *name)
{
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(OPS[i].name, name)) return &OPS[i];
    return NULL;
}

static int int_attr(const lzfx *fx, const char *key, int *out, int max)
{
    const lzfx_attr *a = lzfx_attr_get(fx, key);
    if (!a || a->n > max) return -1;
    for (int i = 0; i < a->n; i++) out[i] = (int)a->i[i];
    return a->n;
}

static int shape_attr(const lzfx *fx, const char *key, int64_t *out)
{
    const lzfx_attr *a = lzfx_attr_get(fx, key);
    if (!a || a->n > LZ_MAX_DIMS) return -1;
    for (int i = 0; i < a->n; i++) out[i] = a->i[i];
    return a->n;
}

/* Runs the fixture's op on in[0..n); NULL + lz_last_error on failure. */
static lz_tensor *run_op(const lzfx *fx, const lzfx_tensor *ref_out, lz_tensor **in, int n)
{
    const char *op = fx->op;
    lz_tensor *a = in[0], *b = n > 1 ? in[1] : NULL;
    if (!strcmp(op, "add")) return lz_add(a, b);
    if (!strcmp(op, "sub")) return lz_sub(a, b);
    if (!strcmp(op, "mul")) return lz_mul(a, b);
    if (!strcmp(op, "div")) return lz_div(a, b);
    if (!strcmp(op, "maximum")) return lz_maximum(a, b);
    if (!strcmp(op, "neg")) return lz_neg(a);
    if (!strcmp(op, "exp")) return lz_exp(a);
    if (!strcmp(op, "log")) return lz_log(a);
    if (!strcmp(op, "sqrt")) return lz_sqrt(a);
    if (!strcmp(op, "rsqrt")) return lz_rsqrt(a);
    if (!strcmp(op, "pow")) return lz_pow(a, (float)lzfx_float(fx, "exponent", NAN));
    if (!strcmp(op, "tanh")) return lz_tanh(a);
    if (!strcmp(op, "sigmoid")) return lz_sigmoid(a);
    if (!strcmp(op, "relu")) return lz_relu(a);
    if (!strcmp(op, "gelu")) return lz_gelu(a);
    if (!strcmp(op, "gt")) return lz_gt(a, b);
    if (!strcmp(op, "lt")) return lz_lt(a, b);
    if (!strcmp(op, "ge")) return lz_ge(a, b);
    if (!strcmp(op, "le")) return lz_le(a, b);
    if (!strcmp(op, "eq")) return lz_eq(a, b);
    if (!strcmp(op, "where")) return lz_where(a, b, in[2]);
    if (!strcmp(op, "cast")) return lz_cast(a, ref_out->dtype);
    if (!strcmp(op, "sum")) return lz_sum(a);
    if (!strcmp(op, "mean")) return lz_mean(a);
    if (!strcmp(op, "softmax") || !strcmp(op, "log_softmax")) {
        int axis = (int)lzfx_int(fx, "axis", 0);
        return op[0] == 's' ? lz_softmax(a, axis) : lz_log_softmax(a, axis);
    }
    if (!strcmp(op, "sum_axes") || !strcmp(op, "mean_axes") || !strcmp(op, "max_axes")) {
        int axes[LZ_MAX_DIMS];
        int na = int_attr(fx, "axes", axes, LZ_MAX_DIMS);
        int keep = (int)lzfx_int(fx, "keepdim", 0);
        if (na < 0) return NULL;
        if (op[1] == 'u') return lz_sum_axes(a, na, axes, keep);
        if (op[1] == 'e') return lz_mean_axes(a, na, axes, keep);
        return lz_max_axes(a, na, axes, keep);
    }
    if (!strcmp(op, "reshape") || !strcmp(op, "expand")) {
        int64_t shape[LZ_MAX_DIMS];
        int nd = shape_attr(fx, "shape", shape);
        if (nd < 0) return NULL;
        return op[0] == 'r' ? lz_reshape(a, nd, shape) : lz_expand(a, nd, shape);
    }
    if (!strcmp(op, "permute")) {
        int perm[LZ_MAX_DIMS];
        if (int_attr(fx, "perm", perm, LZ_MAX_DIMS) < 0) return NULL;
        return lz_permute(a, perm);
    }
    if (!strcmp(op, "transpose")) {
        int ax[2];
        if (int_attr(fx, "axes", ax, 2) != 2) return NULL;
        return lz_transpose(a, ax[0], ax[1]);
    }
    if (!strcmp(op, "slice"))
        return lz_slice(a, (int)lzfx_int(fx, "axis", 0), lzfx_int(fx, "start", 0),
                        lzfx_int(fx, "end", 0));
    if (!strcmp(op, "cat")) return lz_cat(in, n, (int)lzfx_int(fx, "axis", 0));
    if (!strcmp(op, "matmul")) return lz_matmul(a, b);
    if (!strcmp(op, "cross_entropy")) return lz_cross_entropy(a, b);
    return NULL;
}

static const char *dtype_str(lz_dtype d)
{
    return d == LZ_F32 ? "f32" : d == LZ_I64 ? "i64" : d == LZ_I32 ? "i32" : "?";
}

static int same_shape(lz_tensor *t, const lzfx_tensor *ref)
{
    if (!t || lz_ndim(t) != ref->ndim) return 0;
    for (int d = 0; d < ref->ndim; d++)
        if (lz_dim(t, d) != ref->shape[d]) return 0;
    return 1;
}

static void shape_str(lz_tensor *t, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int d = 0; t && d < lz_ndim(t) && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, d ? ", %lld" : "%lld", (long long)lz_dim(t, d));
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Relative error of t against the fixture tensor; INFINITY if unreadable.
   Integer tensors must match exactly (0 or INFINITY). */
static double compare(lz_tensor *t, const lzfx_tensor *ref)
{
    if (!same_shape(t, ref) || lz_tensor_dtype(t) != ref->dtype) return INFINITY;
    if (ref->dtype == LZ_F32) {
        float *v = lz_test_read(t);
        if (!v) return INFINITY;
        double e = ref->numel ? lz_test_rel_err(v, (const float *)ref->data, ref->numel) : 0;
        free(v);
        return e;
    }
    size_t nb = (size_t)ref->numel * lzfx_dtype_size(ref->dtype);
    void *v = malloc(nb ? nb : 1);
    double e = lz_to_host(t, v, nb) == 0 && memcmp(v, ref->data, nb) == 0 ? 0 : INFINITY;
    free(v);
    return e;
}

static int run_case(const char *dir, const char *file, int eager)
{
    char path[1024], err[1536];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lzfx fx;
    if (lzfx_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"fixture loads");
        return -1;
    }
    if (!strcmp(fx.op, "mlp")) { lzfx_free(&fx); return 0; }   /* test_parity_mlp's */
    op_info *info = find_op(fx.op);
    if (!info) {
        fprintf(stderr, "%s: op %s has no runner in this test\n", file, fx.op);
        CHECK(!"fixture op known");
        lzfx_free(&fx);
        return -1;
    }
    const char *mode = eager ? "eager" : "lazy";
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
    lz_tensor *out = run_op(&fx, ref_out, in, n);
    int ok = out != NULL;
    if (ok && ref_w) {
        lz_tensor *w = lzfx_to_lz(ref_w);
        lz_tensor *loss = lz_sum(lz_mul(out, w));
        ok = loss && lz_backward(loss) == 0;
    }
    lz_metrics recorded = lz_metrics_get();
    lz_mark_step();

    char line[1024];
    size_t o = (size_t)snprintf(line, sizeof line, "%-26s %-5s", file, mode);
    int pass = ok;
    if (!ok) {
        info->worst_out = INFINITY;
        o += (size_t)snprintf(line + o, sizeof line - o, " ERROR %s",
                              lz_last_error() ? lz_last_error() : "(no message)");
    } else {
        if (!same_shape(out, ref_out) || lz_tensor_dtype(out) != ref_out->dtype) {
            char got[128];
            shape_str(out, got, sizeof got);
            o += (size_t)snprintf(line + o, sizeof line - o, " out shape/dtype %s %s",
                                  got, dtype_str(lz_tensor_dtype(out)));
            pass = 0;
        }
        double e = compare(out, ref_out);
        o += (size_t)snprintf(line + o, sizeof line - o, " out %.2e", e);
        if (!(e <= info->tol)) pass = 0;
        if (!(e <= info->worst_out)) info->worst_out = e;
        for (int i = 0; i < n; i++) {
            if (!gs[i]) continue;
            lz_tensor *g = lz_grad(in[i]);
            double ge = g ? compare(g, gs[i]) : INFINITY;
            o += (size_t)snprintf(line + o, sizeof line - o, " g%d %.2e%s", i, ge,
                                  g ? "" : "(no grad)");
            if (!(ge <= info->tol)) pass = 0;
            if (!(ge <= info->worst_grad)) info->worst_grad = ge;
        }
    }
    /* Lazy mode: recording forward and backward ran nothing, and the whole
       step was one execution. */
    if (!eager && ok) {
        lz_metrics after = lz_metrics_get();
        int64_t rec_exec = recorded.executions - before.executions;
        int64_t all_exec = after.executions - before.executions;
        if (rec_exec != 0 || all_exec != 1) {
            o += (size_t)snprintf(line + o, sizeof line - o,
                                  " executions: %lld while recording, %lld in all (want 0, 1)",
                                  (long long)rec_exec, (long long)all_exec);
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
    const char *dir = argc > 1 ? argv[1] : lzfx_dir();
    char *files[1024];
    int nf = lzfx_index(dir, files, 1024);
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
    for (int i = 0; i < N_OPS; i++)
        printf("%-14s %2d case(s)  out %.2e  grad %.2e  tol %.0e %s\n", OPS[i].name,
               OPS[i].cases[0], OPS[i].worst_out, OPS[i].worst_grad, OPS[i].tol,
               OPS[i].worst_out <= OPS[i].tol && OPS[i].worst_grad <= OPS[i].tol ? "ok" : "FAIL");
    for (int i = 0; i < N_OPS; i++) {
        if (OPS[i].cases[0] == 0 || OPS[i].cases[1] == 0)
            fprintf(stderr, "op %s has no fixture\n", OPS[i].name);
        CHECK(OPS[i].cases[0] > 0 && OPS[i].cases[1] > 0);
    }
    for (int i = 0; i < nf; i++) free(files[i]);
    return lz_test_done();
}
