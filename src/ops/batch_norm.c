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
#include "ops/batch_norm.h"

#include "autograd/autograd.h"
#include <math.h>

#include "base/error.h"
#include "base/opt_or.h"
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

static int fused_on = 1;

int lz_batch_norm_set_fused(int on)
{
    int was = fused_on;
    fused_on = on != 0;
    return was;
}

/* Row r of a [2, C] statistics tensor, as [C]. */
static lz_tensor *stats_row(temps *tp, lz_tensor *stats, int r)
{
    int64_t c = lz_t_shape(stats)[1];
    return keep_tmp(tp, lz_reshape(keep_tmp(tp, lz_slice(stats, 0, r, r + 1)), 1, &c));
}

/* ag->in: x, stats, eps, then weight and bias when present (attrs say). */
static int fused_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    const int has_w = ag->attrs.iattr[0] != 0, has_b = ag->attrs.iattr[1] != 0;
    lz_tensor *x = ag->in[0];
    lz_tensor *w = has_w ? ag->in[3] : NULL, *b = has_b ? ag->in[3 + has_w] : NULL;
    int64_t gshape[2] = {2, lz_t_shape(x)[1]};
    lz_tensor *in[6] = {x, ag->in[1], ag->in[2], g, NULL, w};
    /* the backward rule runs inside a scope: temporaries need no freeing */
    lz_tensor *gstats = lz_record(LZ_OP_BATCH_NORM_GRAD_STATS, LZ_F32, 2, gshape, 4, in, NULL);
    if (!gstats) return -1;
    if (lz_needs_grad(x)) {
        in[4] = gstats;
        lz_attrs at = {.n_iattr = 1, .iattr = {has_w}};
        gin[0] = lz_record(LZ_OP_BATCH_NORM_GRAD, LZ_F32, lz_t_ndim(x), lz_t_shape(x),
                           has_w ? 6 : 5, in, &at);
        if (!gin[0]) return -1;
    }
    temps tp = {0};
    lz_tensor *gw = w && lz_needs_grad(w) ? stats_row(&tp, gstats, 1) : NULL;
    lz_tensor *gb = b && lz_needs_grad(b) ? stats_row(&tp, gstats, 0) : NULL;
    int rc = (w && lz_needs_grad(w) && !gw) || (b && lz_needs_grad(b) && !gb) ? -1 : 0;
    /* the gradients' handles go to the caller, the rest is dropped */
    for (int i = 0; rc == 0 && i < tp.n; i++)
        if (tp.t[i] == gw || tp.t[i] == gb) tp.t[i] = NULL;
    drop_temps(&tp);
    if (rc == 0 && has_w) gin[3] = gw;
    if (rc == 0 && has_b) gin[3 + has_w] = gb;
    return rc;
}

/* Training mode in two kernels forward (statistics, then normalise) and
   two backward. The statistics are made under no-grad: the normalise op's
   gradient rule covers the path through them, as torch's
   batch_norm_backward does. */
static lz_tensor *fused_train(lz_tensor *x, lz_tensor *weight, lz_tensor *bias,
                              lz_tensor *running_mean, lz_tensor *running_var,
                              float momentum, float eps, int64_t count)
{
    temps tp = {0};
    int64_t sshape[2] = {2, lz_t_shape(x)[1]};
    lz_no_grad_begin();
    lz_tensor *stats = keep_tmp(&tp, lz_record(LZ_OP_BATCH_NORM_STATS, LZ_F32, 2, sshape, 1, &x, NULL));
    lz_no_grad_end();
    lz_tensor *eps_t = keep_tmp(&tp, lz_internal_scalar(eps));
    lz_tensor *in[5] = {x, stats, eps_t, NULL, NULL};
    int n = 3;
    if (weight) in[n++] = weight;
    if (bias) in[n++] = bias;
    lz_attrs at = {.n_iattr = 2, .iattr = {weight != NULL, bias != NULL}};
    lz_tensor *y = stats && eps_t ? lz_record(LZ_OP_BATCH_NORM, LZ_F32, lz_t_ndim(x), lz_t_shape(x), n, in, &at) : NULL;
    lz_ag_attach(y, "lz_batch_norm", fused_backward, n, in, &at);

    if (y && running_mean) {
        lz_no_grad_begin();
        lz_tensor *m = keep_tmp(&tp, lz_internal_scalar(momentum));
        lz_tensor *one_minus_m = keep_tmp(&tp, lz_internal_scalar(1.0f - momentum));
        lz_tensor *mean = stats_row(&tp, stats, 0);
        /* the running variance is the unbiased one */
        lz_tensor *uvar = keep_tmp(&tp, lz_scale(stats_row(&tp, stats, 1),
                                                       (float)((double)count / (double)(count - 1))));
        int rc = mean && uvar ? update_running(&tp, running_mean, mean, one_minus_m, m) : -1;
        if (rc == 0) rc = update_running(&tp, running_var, uvar, one_minus_m, m);
        lz_no_grad_end();
        if (rc != 0) { lz_free(y); y = NULL; }
    }
    drop_temps(&tp);
    return y;
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
    /* Fused whatever the count: with few values per channel the fused
       kernel's error stays within PyTorch's own f32 error over perturbed
       runs (docs/performance.md, "Batch norm over few values per channel"). */
    if (training && fused_on)
        return fused_train(x, weight, bias, running_mean, running_var, momentum, eps, count);
    temps tp = {0};
    lz_tensor *eps_t = keep_tmp(&tp, lz_internal_scalar(eps));
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
        lz_tensor *m = keep_tmp(&tp, lz_internal_scalar(momentum));
        lz_tensor *one_minus_m = keep_tmp(&tp, lz_internal_scalar(1.0f - momentum));
        /* the running variance is the unbiased one; n / (n - 1) is fixed by
           the shape, so it may be a constant */
        lz_tensor *uvar = keep_tmp(&tp, lz_scale(var, (float)((double)count / (double)(count - 1))));
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

/* 0, or -1 with an error naming fn: the options lz_batch_norm_opt refuses. */
static int check_opts(const char *fn, lz_batch_norm_opts o, float momentum, float eps)
{
    if (o.training != 0 && o.training != 1)
        return lz_errorf_int("%s: training is %d, expected 0 (eval) or 1", fn, o.training);
    if (!(momentum >= 0.0f && momentum <= 1.0f))
        return lz_errorf_int("%s: invalid momentum %g: must be in [0, 1]", fn, (double)momentum);
    if (!(eps >= 0.0f) || isinf(eps))
        return lz_errorf_int("%s: invalid eps %g: must be finite and >= 0", fn, (double)eps);
    return 0;
}

lz_tensor *lz_batch_norm_opt(lz_tensor *x, lz_tensor *weight, lz_tensor *bias,
                             lz_tensor *running_mean, lz_tensor *running_var, lz_batch_norm_opts o)
{
    const char *fn = "lz_batch_norm_opt";
    /* zero fields: nn.BatchNorm2d's defaults */
    float momentum = lz_opt_or(o.momentum, 0.1f), eps = lz_opt_or(o.eps, 1e-5f);
    /* a NULL x keeps the error of the op that made it */
    if (x && check_opts(fn, o, momentum, eps) != 0)
        return NULL;
    lz_tensor *y = lz_batch_norm(x, weight, bias, running_mean, running_var, o.training, momentum, eps);
    if (!y)
        lz_error_rename("lz_batch_norm", fn);
    return y;
}
