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
#include "parity_case.h"

#define TOL_ELEMENTWISE 1e-5
#define TOL_REDUCTION 1e-4

/* Element-wise ops (and the pure data-movement shape ops) at 1e-5;
   anything that sums many terms (reductions, matmul, softmax, losses, and
   expand whose gradient is a sum) at 1e-4. */
#define EW(name) {name, TOL_ELEMENTWISE, {0, 0}, 0, 0}
#define RED(name) {name, TOL_REDUCTION, {0, 0}, 0, 0}
static lz_test_pc_op OPS[] = {
    EW("add"), EW("sub"), EW("mul"), EW("div"), EW("maximum"),
    EW("neg"), EW("exp"), EW("log"), EW("sqrt"), EW("rsqrt"), EW("pow"),
    EW("tanh"), EW("sigmoid"), EW("relu"), EW("gelu"),
    EW("gt"), EW("lt"), EW("ge"), EW("le"), EW("eq"), EW("where"), EW("cast"),
    RED("sum"), RED("mean"), RED("sum_axes"), RED("mean_axes"), RED("max_axes"),
    EW("reshape"), EW("permute"), EW("transpose"), RED("expand"), EW("slice"), EW("cat"),
    RED("matmul"), RED("softmax"), RED("log_softmax"), RED("cross_entropy"),
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static int int_attr(const lz_test_fx *fx, const char *key, int *out, int max)
{
    const lz_test_fx_attr *a = lz_test_fx_attr_get(fx, key);
    if (!a || a->n > max) return -1;
    for (int i = 0; i < a->n; i++) out[i] = (int)a->i[i];
    return a->n;
}

static int shape_attr(const lz_test_fx *fx, const char *key, int64_t *out)
{
    const lz_test_fx_attr *a = lz_test_fx_attr_get(fx, key);
    if (!a || a->n > LZ_MAX_DIMS) return -1;
    for (int i = 0; i < a->n; i++) out[i] = a->i[i];
    return a->n;
}

/* Runs the fixture's op on in[0..n); NULL + lz_last_error on failure. */
static lz_tensor *run_op(lz_test_pc_case *c)
{
    const lz_test_fx *fx = c->fx;
    const lz_test_fx_tensor *ref_out = c->ref_out;
    lz_tensor **in = c->in;
    int n = c->n;
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
    if (!strcmp(op, "pow")) return lz_pow(a, (float)lz_test_fx_float(fx, "exponent", NAN));
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
        int axis = (int)lz_test_fx_int(fx, "axis", 0);
        return op[0] == 's' ? lz_softmax(a, axis) : lz_log_softmax(a, axis);
    }
    if (!strcmp(op, "sum_axes") || !strcmp(op, "mean_axes") || !strcmp(op, "max_axes")) {
        int axes[LZ_MAX_DIMS];
        int na = int_attr(fx, "axes", axes, LZ_MAX_DIMS);
        int keep = (int)lz_test_fx_int(fx, "keepdim", 0);
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
        return lz_slice(a, (int)lz_test_fx_int(fx, "axis", 0), lz_test_fx_int(fx, "start", 0),
                        lz_test_fx_int(fx, "end", 0));
    if (!strcmp(op, "cat")) return lz_cat(in, n, (int)lz_test_fx_int(fx, "axis", 0));
    if (!strcmp(op, "matmul")) return lz_matmul(a, b);
    if (!strcmp(op, "cross_entropy")) return lz_cross_entropy(a, b);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : lz_test_fx_dir();
    const lz_test_pc_hooks h = {
        .ops = OPS, .n_ops = N_OPS, .file_width = 26,
        .skip_op = "mlp",   /* test_parity_mlp's */
        .check_out_shape = 1, .run = run_op,
    };
    if (lz_test_pc_run_all(dir, &h) != 0) return lz_test_done();
    lz_test_pc_summary(OPS, N_OPS, 14);
    return lz_test_done();
}
