/* Adam and AdamW as in torch.optim.Adam / torch.optim.AdamW (1.13; not
 * amsgrad, not maximize):
 *
 *   step = step + 1
 *   g    = grad + weight_decay * p                (Adam, weight_decay != 0)
 *   p    = p * (1 - lr * weight_decay)            (AdamW, weight_decay != 0)
 *   m    = beta1 * m + (1 - beta1) * g
 *   v    = beta2 * v + (1 - beta2) * g * g
 *   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
 *   p    = p - (lr / (1 - beta1^step)) * m / denom
 *
 * The update is recorded as ops, in torch's order of operations, so it lands
 * in the step's graph. Every hyper-parameter is 0-d data, and so is the step
 * count: it is advanced by an op (step + one) and the bias corrections are
 * computed from it by ops. Host code runs once when a step is captured and
 * never on its replays, so a count kept on the host would freeze the bias
 * corrections at their traced values; a count in the graph advances on
 * every replay, and a new count is new data, never a new graph.
 *
 * The bias correction 1 - beta^t loses most of its digits when computed as
 * 1 - exp(t log beta) in f32 (beta2 = 0.999 at t = 1: 1 - 0.999 keeps about
 * 4 significant digits of the 7). It is computed as -expm1(t log beta) by
 * Kahan's formula, expm1(y) = (u - 1) y / log(u) with u = exp(y), which is
 * accurate to a few ulps with any correctly rounded exp and log: u - 1 is
 * exact (Sterbenz) near 1 and the rounding error of u cancels in the
 * quotient. y is floored at -80 so that u never underflows to 0 (0.9^t does
 * at t ~ 990 in f32); 1 - exp(-80) is 1 in f32, as 1 - beta^t is there.
 * log beta is computed on the host in double when the optimizer is made.
 *
 * torch keeps one step count per parameter and skips a parameter that has
 * no grad, so counts can differ. Each parameter has a step tensor; the
 * parameters whose counts (as recorded so far) agree form a group that
 * shares one count update and one set of bias corrections, so a model whose
 * parameters all step together pays for them once. The grouping relies on
 * the host's view of the counts: a captured step that skips some parameters
 * replays with the same parameters skipped, which keeps equal counts equal.
 *
 * State (moments, step counts) starts as zeros made when the optimizer is
 * made, never at the first step: a handle made inside lz_adamw_step would
 * belong to the caller's scope, and step 1 records the same graph as every
 * later step, so a training loop compiles once.
 * The parameters, rate, state and the calls every optimizer shares are the
 * base's (nn/optimizer.h); this file is the options and the update.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "nn/optim_opts.h"
#include "nn/optimizer.h"
#include "ops/ops_util.h"

/* Lowest t log(beta): exp(-80) ~ 1.8e-35 is a normal f32, and
   1 - exp(-80) rounds to 1. */
#define LOG_POW_FLOOR -80.0

struct lz_adamw {
    lz_optimizer base;
    lz_tensor **m, **v;          /* state: first and second moments */
    lz_tensor **steps;           /* state: per parameter, 0-d step count */
    int64_t *taken;              /* per parameter: steps recorded for it */
    int64_t *taken_before;       /* scratch: taken before a step, put back if it fails */
    unsigned char *grouped;      /* scratch for the step */
    int decoupled;
    lz_tensor *one;
    lz_tensor *beta1, *c1;       /* beta1, 1 - beta1 */
    lz_tensor *beta2, *c2;       /* beta2, 1 - beta2 */
    lz_tensor *log_b1, *log_b2;  /* log beta, floored */
    lz_tensor *floor_y;          /* LOG_POW_FLOOR */
    lz_tensor *eps;
    lz_tensor *wd;               /* NULL when weight_decay == 0 */
};

static lz_optimizer *base_of(lz_adamw *opt)
{
    return opt ? &opt->base : NULL;
}

static int bad_value(float x)
{
    return isnan(x) || isinf(x);
}

/* The same checks as torch.optim.Adam's and AdamW's constructors (lr:
   lz_optim_new). */
static int check_opts(const char *fn, lz_adamw_opts o)
{
    if (bad_value(o.eps) || o.eps < 0.0f)
        return lz_errorf_int("%s: invalid epsilon value (eps) %g: must be finite and >= 0", fn,
                             (double)o.eps);
    if (isnan(o.beta1) || o.beta1 < 0.0f || o.beta1 >= 1.0f)
        return lz_errorf_int("%s: invalid beta1 %g: must be in [0, 1)", fn, (double)o.beta1);
    if (isnan(o.beta2) || o.beta2 < 0.0f || o.beta2 >= 1.0f)
        return lz_errorf_int("%s: invalid beta2 %g: must be in [0, 1)", fn, (double)o.beta2);
    if (bad_value(o.weight_decay) || o.weight_decay < 0.0f)
        return lz_errorf_int("%s: invalid weight_decay %g: must be finite and >= 0", fn,
                             (double)o.weight_decay);
    if (o.decoupled != 0 && o.decoupled != 1)
        return lz_errorf_int("%s: decoupled is %d, expected 0 (Adam) or 1 (AdamW)", fn,
                             o.decoupled);
    return 0;
}

static float floored_log(float beta)
{
    double l = beta > 0.0f ? log((double)beta) : LOG_POW_FLOOR;
    return (float)(l < LOG_POW_FLOOR ? LOG_POW_FLOOR : l);
}

/* 1 - beta^t as -expm1(t log beta), by Kahan's formula (see the top). */
static lz_tensor *bias_correction(lz_adamw *opt, lz_tensor *t, lz_tensor *log_beta)
{
    lz_tensor *y = lz_maximum(lz_mul(t, log_beta), opt->floor_y);
    lz_tensor *u = lz_exp(y);
    return lz_div(lz_mul(lz_sub(opt->one, u), y), lz_log(u));
}

/* What one group's parameters share at this step. */
typedef struct group_step {
    lz_tensor *step_size;        /* lr / (1 - beta1^t) */
    lz_tensor *bc2_sqrt;         /* sqrt(1 - beta2^t) */
} group_step;

/* Records the update of parameter i. Temporaries belong to the step's scope. */
static int step_one(lz_adamw *opt, int i, const group_step *gs, lz_tensor *decay)
{
    lz_tensor *p = opt->base.params[i];
    lz_tensor *g = lz_grad(p);
    if (opt->wd && !opt->decoupled)
        g = lz_add(g, lz_mul(opt->wd, p));
    if (decay)
        p = lz_mul(p, decay);
    lz_tensor *m = lz_add(lz_mul(opt->m[i], opt->beta1), lz_mul(opt->c1, g));
    lz_tensor *v = lz_add(lz_mul(opt->v[i], opt->beta2), lz_mul(lz_mul(opt->c2, g), g));
    lz_tensor *denom = lz_add(lz_div(lz_sqrt(v), gs->bc2_sqrt), opt->eps);
    lz_tensor *np = lz_sub(p, lz_div(lz_mul(gs->step_size, m), denom));
    if (!np || lz_assign(opt->m[i], m) != 0 || lz_assign(opt->v[i], v) != 0 ||
        lz_assign(opt->base.params[i], np) != 0)
        return -1;
    return lz_autocast_refresh(opt->base.params[i]);   /* the next step's bf16 copy, if autocast reads it */
}

/* Steps every parameter that has a grad and has taken as many steps as
   parameter lead: one count update and one set of bias corrections. */
static int step_group(lz_adamw *opt, int lead, lz_tensor *decay)
{
    lz_tensor *t = lz_add(opt->steps[lead], opt->one);
    group_step gs = {
        .step_size = lz_div(opt->base.lr, bias_correction(opt, t, opt->log_b1)),
        .bc2_sqrt = lz_sqrt(bias_correction(opt, t, opt->log_b2)),
    };
    if (!gs.step_size || !gs.bc2_sqrt)
        return -1;
    int64_t taken = opt->taken[lead];
    for (int i = lead; i < opt->base.n; i++) {
        if (opt->grouped[i] || opt->taken[i] != taken || !lz_grad(opt->base.params[i]))
            continue;
        opt->grouped[i] = 1;
        if (step_one(opt, i, &gs, decay) != 0 || lz_assign(opt->steps[i], t) != 0)
            return -1;
        opt->taken[i]++;
    }
    return 0;
}

static int adamw_step(lz_optimizer *base, const char *fn)
{
    (void)fn;
    lz_adamw *opt = (lz_adamw *)base;
    int n = base->n;
    memcpy(opt->taken_before, opt->taken, sizeof *opt->taken * (size_t)n);
    int rc = 0;
    lz_tensor *decay = NULL;
    if (opt->decoupled && opt->wd) {
        decay = lz_sub(opt->one, lz_mul(base->lr, opt->wd));
        rc = decay ? 0 : -1;
    }
    memset(opt->grouped, 0, (size_t)n);
    /* torch skips a parameter without a gradient: its count stays behind */
    for (int i = 0; i < n && rc == 0; i++)
        if (!opt->grouped[i] && lz_grad(base->params[i]))
            rc = step_group(opt, i, decay);
    if (rc != 0)   /* the counts go back with the tensors */
        memcpy(opt->taken, opt->taken_before, sizeof *opt->taken * (size_t)n);
    return rc;
}

static void adamw_free(lz_optimizer *base)
{
    lz_adamw *opt = (lz_adamw *)base;   /* the tensors are the base's */
    free(opt->m);
    free(opt->v);
    free(opt->steps);
    free(opt->taken);
    free(opt->taken_before);
    free(opt->grouped);
}

static const lz_optimizer_vt adamw_vt = {.name = "adamw", .step = adamw_step, .free = adamw_free};
static const lz_optimizer_vt adam_vt = {.name = "adam", .step = adamw_step, .free = adamw_free};

/* torch's state names: exp_avg, exp_avg_sq and step, per parameter. The
   grouping above knows the counts only as recorded by this optimizer: a
   restored state whose parameters have different counts (some skipped
   steps) is stepped as if every count equalled the first one's. */
static int make_state(lz_adamw *opt)
{
    lz_optimizer *b = &opt->base;
    size_t cnt = (size_t)(b->n > 0 ? b->n : 1);
    opt->m = calloc(cnt, sizeof *opt->m);
    opt->v = calloc(cnt, sizeof *opt->v);
    opt->steps = calloc(cnt, sizeof *opt->steps);
    opt->taken = calloc(cnt, sizeof *opt->taken);
    opt->taken_before = calloc(cnt, sizeof *opt->taken_before);
    opt->grouped = calloc(cnt, 1);
    if (!opt->m || !opt->v || !opt->steps || !opt->taken || !opt->taken_before || !opt->grouped)
        return lz_errorf_int("%s: out of memory", b->made_by);
    for (int i = 0; i < b->n; i++)
        if (!(opt->m[i] = lz_optim_zeros_like(b, i, "exp_avg.%d", i)) ||
            !(opt->v[i] = lz_optim_zeros_like(b, i, "exp_avg_sq.%d", i)) ||
            !(opt->steps[i] = lz_optim_add_state(b, lz_scalar(0.0f), "step.%d", i)))
            return -1;
    return 0;
}

/* 1 - beta in double, as torch computes its alpha and value arguments
   before they are rounded to the parameters' f32 */
static int make_scalars(lz_adamw *opt, lz_adamw_opts o)
{
    lz_optimizer *b = &opt->base;
    int failed = !(opt->one = lz_optim_scalar(b, 1.0f));
    failed |= !(opt->beta1 = lz_optim_scalar(b, o.beta1));
    failed |= !(opt->c1 = lz_optim_scalar(b, (float)(1.0 - (double)o.beta1)));
    failed |= !(opt->beta2 = lz_optim_scalar(b, o.beta2));
    failed |= !(opt->c2 = lz_optim_scalar(b, (float)(1.0 - (double)o.beta2)));
    failed |= !(opt->log_b1 = lz_optim_scalar(b, floored_log(o.beta1)));
    failed |= !(opt->log_b2 = lz_optim_scalar(b, floored_log(o.beta2)));
    failed |= !(opt->floor_y = lz_optim_scalar(b, (float)LOG_POW_FLOOR));
    failed |= !(opt->eps = lz_optim_scalar(b, o.eps));
    if (o.weight_decay != 0.0f)
        failed |= !(opt->wd = lz_optim_scalar(b, o.weight_decay));
    return failed ? -1 : 0;
}

static lz_optimizer *adamw_new(const char *fn, lz_tensor *const *params, int n, lz_adamw_opts o)
{
    /* zero fields: torch's defaults; weight_decay 0 stays none (see lazyc.h) */
    o.lr = lz_opt_or(o.lr, 1e-3f);
    o.beta1 = lz_opt_or(o.beta1, 0.9f);
    o.beta2 = lz_opt_or(o.beta2, 0.999f);
    o.eps = lz_opt_or(o.eps, 1e-8f);
    o.weight_decay = lz_opt_or(o.weight_decay, 0.0f);
    const lz_optimizer_vt *vt = o.decoupled ? &adamw_vt : &adam_vt;
    lz_adamw *opt = (lz_adamw *)lz_optim_new(sizeof *opt, vt, fn, params, n, o.lr);
    if (!opt)
        return NULL;
    opt->decoupled = o.decoupled;
    if (check_opts(fn, o) != 0 || make_scalars(opt, o) != 0 || make_state(opt) != 0) {
        lz_optim_free(&opt->base);
        return NULL;
    }
    return &opt->base;
}

lz_optimizer *lz_optimizer_adamw(lz_tensor *const *params, int n, lz_adamw_opts opts)
{
    return adamw_new("lz_optimizer_adamw", params, n, opts);
}

/* ---- lazyc.h's lz_adamw_* calls: the interface under their own names ---- */

lz_adamw *lz_adamw_new(lz_tensor *const *params, int n, lz_adamw_opts opts)
{
    return (lz_adamw *)adamw_new("lz_adamw_new", params, n, opts);
}

void lz_adamw_set_lr(lz_adamw *opt, float lr)
{
    lz_optim_set_lr(base_of(opt), lr, "lz_adamw_set_lr");
}

int lz_adamw_step(lz_adamw *opt)
{
    return lz_optim_step(base_of(opt), "lz_adamw_step");
}

void lz_adamw_zero_grad(lz_adamw *opt)
{
    lz_optim_zero_grad(base_of(opt), "lz_adamw_zero_grad");
}

void lz_adamw_free(lz_adamw *opt)
{
    lz_optim_free(base_of(opt));
}

int lz_adamw_state(lz_adamw *opt, lz_params *into, const char *prefix)
{
    return lz_optim_state(base_of(opt), into, prefix, "lz_adamw_state");
}
