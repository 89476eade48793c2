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
 * The parameters, rate, state and the calls every optimizer shares are the
 * base's (nn/optimizer.h); this file is the options and the update.
 */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "nn/optim_opts.h"
#include "nn/optimizer.h"
#include "ops/ops_util.h"

struct lz_sgd {
    lz_optimizer base;
    lz_tensor **bufs;            /* state; NULL when momentum == 0 */
    int nesterov;
    lz_tensor *wd;               /* NULL when weight_decay == 0 */
    lz_tensor *mom, *damp;       /* damp: NULL when dampening == 0 */
    lz_tensor *one, *started;    /* started: 0, then 1 once a step is recorded */
    lz_tensor *on;               /* 1, read by nothing but `started`: a buffer the graph
                                    shares with no other input, so step 1 and step 2
                                    bind the same slots and compile once */
};

static lz_optimizer *base_of(lz_sgd *opt)
{
    return opt ? &opt->base : NULL;
}

/* The same checks as torch.optim.SGD's constructor (lr: lz_optim_new). */
static int check_opts(const char *fn, lz_sgd_opts o)
{
    if (!(o.momentum >= 0.0f) || isinf(o.momentum))
        return lz_errorf_int("%s: invalid momentum %g: must be finite and >= 0", fn,
                             (double)o.momentum);
    if (!(o.weight_decay >= 0.0f) || isinf(o.weight_decay))
        return lz_errorf_int("%s: invalid weight_decay %g: must be finite and >= 0", fn,
                             (double)o.weight_decay);
    if (isnan(o.dampening) || isinf(o.dampening))
        return lz_errorf_int("%s: invalid dampening %g: must be finite", fn, (double)o.dampening);
    if (o.nesterov != 0 && o.nesterov != 1)
        return lz_errorf_int("%s: nesterov is %d, expected 0 or 1", fn, o.nesterov);
    if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f))
        return lz_errorf_int("%s: nesterov momentum requires a momentum and zero "
                             "dampening (momentum %g, dampening %g)",
                             fn, (double)o.momentum, (double)o.dampening);
    return 0;
}

/* Records the update of parameter i. Temporaries belong to the step's scope. */
static int step_one(lz_sgd *opt, int i)
{
    lz_tensor *p = opt->base.params[i];
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
        d_p = opt->nesterov ? lz_add(d_p, lz_mul(opt->mom, buf)) : buf;
    }
    lz_tensor *np = lz_sub(p, lz_mul(opt->base.lr, d_p));
    if (!np || lz_assign(p, np) != 0)
        return -1;
    return lz_autocast_refresh(p);   /* the next step's bf16 copy, if autocast reads p */
}

static int sgd_step(lz_optimizer *base, const char *fn)
{
    (void)fn;
    lz_sgd *opt = (lz_sgd *)base;
    int rc = 0;
    for (int i = 0; i < base->n && rc == 0; i++)
        rc = step_one(opt, i);
    /* a data leaf, not an op: `started` now reads the `on` buffer */
    if (rc == 0 && opt->started)
        rc = lz_assign(opt->started, opt->on);
    return rc;
}

static void sgd_free(lz_optimizer *base)
{
    free(((lz_sgd *)base)->bufs);   /* the tensors are the base's state */
}

static const lz_optimizer_vt sgd_vt = {.name = "sgd", .step = sgd_step, .free = sgd_free};

/* Momentum's state: a buffer per parameter, then the `started` flag. */
static int make_momentum(lz_sgd *opt, float momentum, float dampening)
{
    lz_optimizer *b = &opt->base;
    int failed = !(opt->mom = lz_optim_scalar(b, momentum));
    failed |= !(opt->one = lz_optim_scalar(b, 1.0f));
    failed |= !(opt->on = lz_optim_scalar(b, 1.0f));
    if (dampening != 0.0f)
        failed |= !(opt->damp = lz_optim_scalar(b, dampening));
    if (failed || !(opt->bufs = calloc((size_t)(b->n > 0 ? b->n : 1), sizeof *opt->bufs)))
        return failed ? -1 : lz_errorf_int("%s: out of memory", b->made_by);
    for (int i = 0; i < b->n; i++)
        if (!(opt->bufs[i] = lz_optim_zeros_like(b, i, "momentum_buffer.%d", i)))
            return -1;
    opt->started = lz_optim_add_state(b, lz_scalar(0.0f), "started");
    return opt->started ? 0 : -1;
}

static lz_optimizer *sgd_new(const char *fn, lz_tensor *const *params, int n, lz_sgd_opts o)
{
    /* zero fields: torch's defaults (lr 1e-3 as torch >= 2.0; the rest are 0) */
    o.lr = lz_opt_or(o.lr, 1e-3f);
    o.momentum = lz_opt_or(o.momentum, 0.0f);
    o.dampening = lz_opt_or(o.dampening, 0.0f);
    o.weight_decay = lz_opt_or(o.weight_decay, 0.0f);
    lz_sgd *opt = (lz_sgd *)lz_optim_new(sizeof *opt, &sgd_vt, fn, params, n, o.lr);
    if (!opt)
        return NULL;
    int failed = check_opts(fn, o) != 0;
    opt->nesterov = o.nesterov;
    if (!failed && o.weight_decay != 0.0f)
        failed = !(opt->wd = lz_optim_scalar(&opt->base, o.weight_decay));
    if (!failed && o.momentum != 0.0f)
        failed = make_momentum(opt, o.momentum, o.dampening) != 0;
    if (failed) {
        lz_optim_free(&opt->base);
        return NULL;
    }
    return &opt->base;
}

lz_optimizer *lz_optimizer_sgd(lz_tensor *const *params, int n, lz_sgd_opts opts)
{
    return sgd_new("lz_optimizer_sgd", params, n, opts);
}

/* ---- lazyc.h's lz_sgd_* calls: the interface under their own names ---- */

lz_sgd *lz_sgd_new(lz_tensor *const *params, int n, lz_sgd_opts opts)
{
    return (lz_sgd *)sgd_new("lz_sgd_new", params, n, opts);
}

void lz_sgd_set_lr(lz_sgd *opt, float lr)
{
    lz_optim_set_lr(base_of(opt), lr, "lz_sgd_set_lr");
}

int lz_sgd_step(lz_sgd *opt)
{
    return lz_optim_step(base_of(opt), "lz_sgd_step");
}

void lz_sgd_zero_grad(lz_sgd *opt)
{
    lz_optim_zero_grad(base_of(opt), "lz_sgd_zero_grad");
}

void lz_sgd_free(lz_sgd *opt)
{
    lz_optim_free(base_of(opt));
}

int lz_sgd_state(lz_sgd *opt, lz_params *into, const char *prefix)
{
    return lz_optim_state(base_of(opt), into, prefix, "lz_sgd_state");
}
