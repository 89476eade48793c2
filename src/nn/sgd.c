/* SGD with momentum, dampening, weight decay and nesterov, as in
 * torch.optim.SGD (1.13):
 *
 *   d_p = grad + weight_decay * p                       (weight_decay != 0)
 *   buf = d_p                                           (first step)
 *   buf = momentum * buf + (1 - dampening) * d_p        (later steps)
 *   d_p = nesterov ? d_p + momentum * buf : buf         (momentum != 0)
 *   p   = p - lr * d_p
 *
 * The update is recorded as ops, so it lands in the same graph as the
 * forward and backward. Every hyper-parameter is a 0-d data tensor: a new
 * learning rate is new data, never a new graph.
 *
 * The first step of torch (buf = d_p) is written as the later-step formula
 * with a decay of 0 and a coefficient of 1, read from two more data scalars:
 * 0 * 0 + 1 * d_p is exactly d_p, and step 1 records the same graph as
 * every later step, so a training loop compiles once, not twice. The
 * buffers start as zeros made when the optimizer is made, not at the first
 * step: a handle made inside lz_sgd_step would belong to the caller's scope
 * (lz_keep only lifts a handle one scope up), and a training loop that wraps
 * each step in a scope would then free the momentum buffers after step 1.
 */
#include <math.h>
#include <stdlib.h>

#include "lazyc.h"
#include "core/error.h"

struct lz_sgd {
    int n;
    lz_tensor **params;          /* borrowed: they must outlive the optimizer */
    lz_tensor **bufs;            /* owned; NULL when momentum == 0 */
    unsigned char *started;      /* per param: its buffer holds a real value */
    lz_sgd_opts opts;
    lz_tensor *lr, *wd;          /* wd: NULL when weight_decay == 0 */
    lz_tensor *mom, *dampc;      /* momentum, 1 - dampening (NULL when 0 is 1) */
    lz_tensor *nest_mom;         /* momentum again, for the nesterov term */
    lz_tensor *first_decay, *first_coef;   /* 0 and 1: the first step */
};

static int64_t zero_fill_elems(lz_tensor *const *params, int n)
{
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        if (lz_numel(params[i]) > most)
            most = lz_numel(params[i]);
    return most;
}

void lz_sgd_free(lz_sgd *opt)
{
    if (!opt)
        return;
    if (opt->bufs)
        for (int i = 0; i < opt->n; i++)
            lz_free(opt->bufs[i]);
    lz_tensor *scalars[] = { opt->lr, opt->wd, opt->mom, opt->dampc, opt->nest_mom,
                             opt->first_decay, opt->first_coef };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++)
        lz_free(scalars[i]);
    free(opt->params);
    free(opt->bufs);
    free(opt->started);
    free(opt);
}

/* Makes the momentum buffers: zeros as data (from the host), so that the
   first step reads a data leaf like every later step does. */
static int make_buffers(lz_sgd *opt)
{
    opt->bufs = calloc((size_t)opt->n, sizeof *opt->bufs);
    float *zeros = calloc((size_t)zero_fill_elems(opt->params, opt->n), sizeof *zeros);
    if (!opt->bufs || !zeros) {
        free(zeros);
        return lz_errorf_int("lz_sgd_new: out of memory");
    }
    for (int i = 0; i < opt->n; i++) {
        lz_tensor *p = opt->params[i];
        int64_t shape[LZ_MAX_DIMS];
        for (int d = 0; d < lz_ndim(p); d++)
            shape[d] = lz_dim(p, d);
        opt->bufs[i] = lz_from_host(zeros, LZ_F32, lz_ndim(p), shape);
        if (!opt->bufs[i]) {
            free(zeros);
            return -1;
        }
    }
    free(zeros);
    return 0;
}

lz_sgd *lz_sgd_new(lz_tensor *const *params, int n, lz_sgd_opts o)
{
    if (n < 0 || (n > 0 && !params))
        return lz_errorf("lz_sgd_new: %d parameters given with a NULL array", n);
    for (int i = 0; i < n; i++) {
        if (!params[i])
            return lz_errorf("lz_sgd_new: parameter %d is NULL", i);
        if (lz_tensor_dtype(params[i]) != LZ_F32)
            return lz_errorf("lz_sgd_new: parameter %d is %s, expected f32", i,
                             lz_dtype_name(lz_tensor_dtype(params[i])));
    }
    /* The same checks as torch.optim.SGD's constructor. */
    if (!(o.lr >= 0.0f) || isinf(o.lr))
        return lz_errorf("lz_sgd_new: invalid learning rate %g", (double)o.lr);
    if (!(o.momentum >= 0.0f) || isinf(o.momentum))
        return lz_errorf("lz_sgd_new: invalid momentum %g", (double)o.momentum);
    if (!(o.weight_decay >= 0.0f) || isinf(o.weight_decay))
        return lz_errorf("lz_sgd_new: invalid weight_decay %g", (double)o.weight_decay);
    if (isnan(o.dampening) || isinf(o.dampening))
        return lz_errorf("lz_sgd_new: invalid dampening %g", (double)o.dampening);
    if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f))
        return lz_errorf("lz_sgd_new: nesterov momentum requires a momentum and zero "
                         "dampening (momentum %g, dampening %g)",
                         (double)o.momentum, (double)o.dampening);

    lz_sgd *opt = calloc(1, sizeof *opt);
    if (!opt)
        return lz_errorf("lz_sgd_new: out of memory");
    opt->n = n;
    opt->opts = o;
    opt->params = calloc((size_t)(n > 0 ? n : 1), sizeof *opt->params);
    opt->started = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!opt->params || !opt->started) {
        lz_sgd_free(opt);
        return lz_errorf("lz_sgd_new: out of memory");
    }
    for (int i = 0; i < n; i++)
        opt->params[i] = params[i];

    int failed = !(opt->lr = lz_scalar(o.lr));
    if (o.weight_decay != 0.0f)
        failed |= !(opt->wd = lz_scalar(o.weight_decay));
    if (o.momentum != 0.0f) {
        failed |= !(opt->mom = lz_scalar(o.momentum));
        failed |= !(opt->first_decay = lz_scalar(0.0f));
        if (o.dampening != 0.0f) {
            failed |= !(opt->dampc = lz_scalar(1.0f - o.dampening));
            failed |= !(opt->first_coef = lz_scalar(1.0f));
        }
        /* A leaf of its own: at the first step the decay slot holds the 0
           scalar, later the momentum; if the nesterov term shared the
           momentum's buffer, the two steps' graphs would differ in which
           slots share a buffer, and step 2 would compile again. */
        if (o.nesterov)
            failed |= !(opt->nest_mom = lz_scalar(o.momentum));
        if (!failed)
            failed = make_buffers(opt) != 0;
    }
    if (failed) {
        lz_sgd_free(opt);
        return NULL;
    }
    return opt;
}

void lz_sgd_set_lr(lz_sgd *opt, float lr)
{
    if (!opt)
        return;
    opt->opts.lr = lr;
    lz_copy_from_host(opt->lr, &lr, sizeof lr);
}

void lz_sgd_zero_grad(lz_sgd *opt)
{
    if (!opt)
        return;
    for (int i = 0; i < opt->n; i++)
        lz_zero_grad(opt->params[i]);
}

/* Records the update of parameter i. Temporaries belong to the step's scope. */
static int step_one(lz_sgd *opt, int i)
{
    lz_tensor *p = opt->params[i];
    lz_tensor *d_p = lz_grad(p);
    if (!d_p)
        return 0;   /* torch skips a parameter without a gradient */
    if (opt->wd)
        d_p = lz_add(d_p, lz_mul(opt->wd, p));
    if (opt->mom) {
        int first = !opt->started[i];
        lz_tensor *decay = first ? opt->first_decay : opt->mom;
        lz_tensor *fresh = d_p;
        if (opt->dampc)
            fresh = lz_mul(first ? opt->first_coef : opt->dampc, d_p);
        lz_tensor *buf = lz_add(lz_mul(decay, opt->bufs[i]), fresh);
        if (!buf || lz_assign(opt->bufs[i], buf) != 0)
            return -1;
        opt->started[i] = 1;
        d_p = opt->nest_mom ? lz_add(d_p, lz_mul(opt->nest_mom, buf)) : buf;
    }
    lz_tensor *np = lz_sub(p, lz_mul(opt->lr, d_p));
    if (!np)
        return -1;
    return lz_assign(p, np);
}

int lz_sgd_step(lz_sgd *opt)
{
    if (!opt)
        return lz_errorf_int("lz_sgd_step: optimizer is NULL");
    int rc = 0;
    lz_no_grad_begin();
    lz_scope_begin();
    for (int i = 0; i < opt->n && rc == 0; i++)
        rc = step_one(opt, i);
    lz_scope_end();
    lz_no_grad_end();
    return rc;
}
