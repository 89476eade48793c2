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
 * with a decay of momentum * started and a coefficient of 1 - dampening *
 * started, where `started` is a 0-d data tensor, 0 until the first step and
 * then the `one` scalar: 0 * 0 + 1 * d_p is exactly d_p, and step 1 records
 * the same graph as every later step, so a training loop compiles once.
 * No flag lives on the host, so a captured step (which reads `started`
 * through the tensor on every replay) is right whichever step it traced.
 * One flag serves all parameters: a parameter whose first gradient comes
 * after the optimizer's first step starts with (1 - dampening) * d_p,
 * where torch takes d_p; the two differ only with dampening.
 * The buffers start as zeros made when the optimizer is made, not at the
 * first step: a handle made inside lz_sgd_step would belong to the caller's
 * scope, and a loop that wraps each step in a scope would free them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "lazyc.h"
#include "base/error.h"
#include "base/thread.h"
#include "nn/optim_opts.h"
#include "ops/ops_util.h"

struct lz_sgd {
    int n;
    lz_tensor **params;          /* held (lz_optim_hold_params) */
    lz_tensor **bufs;            /* owned; NULL when momentum == 0 */
    lz_sgd_opts opts;
    lz_tensor *lr, *wd;          /* wd: NULL when weight_decay == 0 */
    lz_tensor *mom, *damp;       /* damp: NULL when dampening == 0 */
    lz_tensor *one, *started;    /* started: 0, then 1 once a step is recorded */
    lz_tensor *on;               /* 1, read by nothing but `started`: a buffer the graph
                                    shares with no other input, so step 1 and step 2
                                    bind the same slots and compile once */
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
    lz_tensor *scalars[] = { opt->lr, opt->wd, opt->mom, opt->damp, opt->one, opt->started, opt->on };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++)
        lz_free(scalars[i]);
    lz_optim_drop_params(opt->params, opt->n);
    free(opt->params);
    free(opt->bufs);
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
    if (lz_optim_check_params("lz_sgd_new", params, n))
        return NULL;
    /* zero fields: torch's defaults (lr 1e-3 as torch >= 2.0; the rest are 0) */
    o.lr = lz_opt_or(o.lr, 1e-3f);
    o.momentum = lz_opt_or(o.momentum, 0.0f);
    o.dampening = lz_opt_or(o.dampening, 0.0f);
    o.weight_decay = lz_opt_or(o.weight_decay, 0.0f);
    /* The same checks as torch.optim.SGD's constructor. */
    if (!(o.lr >= 0.0f) || isinf(o.lr))
        return lz_errorf("lz_sgd_new: invalid learning rate (lr) %g: must be finite and >= 0",
                         (double)o.lr);
    if (!(o.momentum >= 0.0f) || isinf(o.momentum))
        return lz_errorf("lz_sgd_new: invalid momentum %g: must be finite and >= 0",
                         (double)o.momentum);
    if (!(o.weight_decay >= 0.0f) || isinf(o.weight_decay))
        return lz_errorf("lz_sgd_new: invalid weight_decay %g: must be finite and >= 0",
                         (double)o.weight_decay);
    if (isnan(o.dampening) || isinf(o.dampening))
        return lz_errorf("lz_sgd_new: invalid dampening %g: must be finite", (double)o.dampening);
    if (o.nesterov != 0 && o.nesterov != 1)
        return lz_errorf("lz_sgd_new: nesterov is %d, expected 0 or 1", o.nesterov);
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
    if (!opt->params) {
        lz_sgd_free(opt);
        return lz_errorf("lz_sgd_new: out of memory");
    }
    if (lz_optim_hold_params("lz_sgd_new", opt->params, params, n) != 0) {
        free(opt->params);
        opt->params = NULL;
        lz_sgd_free(opt);
        return NULL;
    }

    int failed = !(opt->lr = lz_scalar(o.lr));
    if (o.weight_decay != 0.0f)
        failed |= !(opt->wd = lz_scalar(o.weight_decay));
    if (o.momentum != 0.0f) {
        failed |= !(opt->mom = lz_scalar(o.momentum));
        failed |= !(opt->one = lz_scalar(1.0f));
        failed |= !(opt->started = lz_scalar(0.0f));
        failed |= !(opt->on = lz_scalar(1.0f));
        if (o.dampening != 0.0f)
            failed |= !(opt->damp = lz_scalar(o.dampening));
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
    if (!opt) {
        lz_errorf("lz_sgd_set_lr: optimizer is NULL");
        return;
    }
    if (lz_owner_check("lz_sgd_set_lr")) return;
    if (!(lr >= 0.0f) || isinf(lr)) {
        lz_errorf("lz_sgd_set_lr: invalid learning rate %g (the rate stays %g)", (double)lr,
                  (double)opt->opts.lr);
        return;
    }
    opt->opts.lr = lr;
    lz_copy_from_host(opt->lr, &lr, sizeof lr);
}

void lz_sgd_zero_grad(lz_sgd *opt)
{
    if (!opt) {
        lz_errorf("lz_sgd_zero_grad: optimizer is NULL");
        return;
    }
    if (lz_owner_check("lz_sgd_zero_grad")) return;
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
        lz_tensor *decay = lz_mul(opt->mom, opt->started);
        lz_tensor *fresh = d_p;
        if (opt->damp)
            fresh = lz_mul(lz_sub(opt->one, lz_mul(opt->damp, opt->started)), d_p);
        lz_tensor *buf = lz_add(lz_mul(decay, opt->bufs[i]), fresh);
        if (!buf || lz_assign(opt->bufs[i], buf) != 0)
            return -1;
        d_p = opt->opts.nesterov ? lz_add(d_p, lz_mul(opt->mom, buf)) : buf;
    }
    lz_tensor *np = lz_sub(p, lz_mul(opt->lr, d_p));
    if (!np || lz_assign(p, np) != 0)
        return -1;
    return lz_autocast_refresh(p);   /* the next step's bf16 copy, if autocast reads p */
}

int lz_sgd_step(lz_sgd *opt)
{
    if (!opt)
        return lz_errorf_int("lz_sgd_step: optimizer is NULL");
    if (lz_owner_check("lz_sgd_step"))
        return -1;
    lz_optim_undo undo;
    lz_tensor **const touched[2] = {opt->params, opt->bufs};
    if (lz_optim_undo_begin(&undo, "lz_sgd_step", touched, 2, opt->n, opt->started) != 0)
        return -1;
    int rc = 0;
    lz_no_grad_begin();
    lz_scope_begin();
    for (int i = 0; i < opt->n && rc == 0; i++)
        rc = step_one(opt, i);
    /* a data leaf, not an op: `started` now reads the `on` buffer */
    if (rc == 0 && opt->started)
        rc = lz_assign(opt->started, opt->on);
    lz_scope_end();
    lz_no_grad_end();
    return lz_optim_undo_end(&undo, rc);
}

int lz_sgd_state(lz_sgd *opt, lz_params *into, const char *prefix)
{
    if (!opt || !into || !prefix)
        return lz_errorf_int("lz_sgd_state: NULL argument");
    char name[512];
    for (int i = 0; opt->bufs && i < opt->n; i++) {
        snprintf(name, sizeof name, "%s.momentum_buffer.%d", prefix, i);
        if (!lz_params_add(into, name, lz_retain(opt->bufs[i]), 0))
            return -1;
    }
    if (opt->started) {
        snprintf(name, sizeof name, "%s.started", prefix);
        if (!lz_params_add(into, name, lz_retain(opt->started), 0))
            return -1;
    }
    return 0;
}
