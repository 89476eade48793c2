/* Batch norm over axis 1 of x [N, C, ...], as torch.nn.functional.batch_norm.
 * Composed from existing ops, so autograd differentiates it through the
 * batch statistics (as torch does) with no rule of its own, and the
 * compiler sees ordinary reductions and element-wise ops it may fuse.
 *
 * eps and the momentum coefficients are 0-d data, not attributes: two
 * layers with different settings then share one graph structure, and a
 * changed setting never recompiles. The running statistics are updated with
 * lz_assign under no-grad, so the update lands in the same graph as the
 * forward and stays out of the backward. */
#include "autograd/autograd.h"
#include "core/error.h"
#include "ops/elementwise.h"
#include "ops/ops_util.h"

#define N_TEMPS 32

/* Temporaries made while composing: every handle here is dropped at the
   end, whatever failed, so the op leaks nothing into the caller's scope. */
typedef struct temps {
    int n;
    lz_tensor *t[N_TEMPS];
} temps;

static lz_tensor *keep_tmp(temps *tp, lz_tensor *t)
{
    if (t) tp->t[tp->n++] = t;
    return t;
}

static void drop_temps(temps *tp)
{
    for (int i = 0; i < tp->n; i++) lz_free(tp->t[i]);
    tp->n = 0;
}

static int check_vec(const char *what, lz_tensor *v, int64_t C, const char *sx)
{
    if (!v) return 0;
    if (!lz_require_f32("lz_batch_norm", v)) return -1;
    if (lz_t_ndim(v) != 1 || lz_t_shape(v)[0] != C) {
        char sv[96];
        return lz_errorf_int("lz_batch_norm: input %s has %lld channels but %s is %s "
                             "(expected [%lld])", sx, (long long)C, what,
                             lz_shape_str(sv, lz_t_ndim(v), lz_t_shape(v)), (long long)C);
    }
    return 0;
}

/* running = (1 - m) * running + m * batch, batch given as [1, C, 1...]. */
static int update_running(temps *tp, lz_tensor *running, lz_tensor *batch,
                          lz_tensor *one_minus_m, lz_tensor *m)
{
    int64_t c = lz_t_shape(running)[0];
    lz_tensor *b = keep_tmp(tp, lz_reshape(batch, 1, &c));
    lz_tensor *r = keep_tmp(tp, lz_add(keep_tmp(tp, lz_mul(running, one_minus_m)),
                                       keep_tmp(tp, lz_mul(b, m))));
    return r ? lz_assign(running, r) : -1;
}

lz_tensor *lz_batch_norm(lz_tensor *x, lz_tensor *weight, lz_tensor *bias,
                         lz_tensor *running_mean, lz_tensor *running_var,
                         int training, float momentum, float eps)
{
    if (lz_check_operands("lz_batch_norm", 1, &x)) return NULL;
    if (!lz_require_f32("lz_batch_norm", x)) return NULL;
    int nd = lz_t_ndim(x);
    const int64_t *xs = lz_t_shape(x);
    char sx[96];
    lz_shape_str(sx, nd, xs);
    if (nd < 2)
        return lz_errorf("lz_batch_norm: input %s must have at least 2 dimensions [N, C, ...]", sx);
    int64_t C = xs[1];
    if (check_vec("weight", weight, C, sx) || check_vec("bias", bias, C, sx) ||
        check_vec("running_mean", running_mean, C, sx) || check_vec("running_var", running_var, C, sx))
        return NULL;
    if (!running_mean != !running_var)
        return lz_errorf("lz_batch_norm: give both running_mean and running_var, or neither");
    if (!training && !running_mean)
        return lz_errorf("lz_batch_norm: input %s: eval mode needs running_mean and running_var", sx);
    int64_t count = xs[0];
    for (int d = 2; d < nd; d++) count *= xs[d];
    if (training && count <= 1)
        return lz_errorf("lz_batch_norm: input %s: expected more than 1 value per channel "
                         "when training", sx);

    int axes[LZ_MAX_DIMS], na = 0;
    int64_t bshape[LZ_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        bshape[d] = d == 1 ? C : 1;
        if (d != 1) axes[na++] = d;
    }
    temps tp = {0};
    lz_tensor *eps_t = keep_tmp(&tp, lz_scalar(eps));
    lz_tensor *mean, *var, *xc;
    if (training) {
        mean = keep_tmp(&tp, lz_mean_axes(x, na, axes, 1));
        xc = keep_tmp(&tp, lz_sub(x, mean));
        /* biased variance normalises, as in torch */
        var = keep_tmp(&tp, lz_mean_axes(keep_tmp(&tp, lz_mul(xc, xc)), na, axes, 1));
    } else {
        mean = keep_tmp(&tp, lz_reshape(running_mean, nd, bshape));
        var = keep_tmp(&tp, lz_reshape(running_var, nd, bshape));
        xc = keep_tmp(&tp, lz_sub(x, mean));
    }
    lz_tensor *y = keep_tmp(&tp, lz_mul(xc, keep_tmp(&tp, lz_rsqrt(keep_tmp(&tp, lz_add(var, eps_t))))));
    if (weight) y = keep_tmp(&tp, lz_mul(y, keep_tmp(&tp, lz_reshape(weight, nd, bshape))));
    if (bias) y = keep_tmp(&tp, lz_add(y, keep_tmp(&tp, lz_reshape(bias, nd, bshape))));

    if (y && training && running_mean) {
        lz_no_grad_begin();
        lz_tensor *m = keep_tmp(&tp, lz_scalar(momentum));
        lz_tensor *one_minus_m = keep_tmp(&tp, lz_scalar(1.0f - momentum));
        /* the running variance is the unbiased one; n / (n - 1) is fixed by
           the shape, so it may be a constant */
        lz_tensor *uvar = keep_tmp(&tp, lz_scale_const(var, (float)((double)count / (double)(count - 1))));
        int rc = uvar ? update_running(&tp, running_mean, mean, one_minus_m, m) : -1;
        if (rc == 0) rc = update_running(&tp, running_var, uvar, one_minus_m, m);
        lz_no_grad_end();
        if (rc != 0) y = NULL;   /* still in the list: dropped below */
    }
    /* y's creation handle goes to the caller (and its scope), not the list */
    for (int i = 0; y && i < tp.n; i++)
        if (tp.t[i] == y) tp.t[i] = NULL;
    drop_temps(&tp);
    return y;
}
