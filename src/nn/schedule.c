/* Learning-rate schedules in the closed forms of torch's StepLR and
 * CosineAnnealingLR (_get_closed_form_lr), computed on the host in double.
 * They return a number for *_set_lr between steps: the rate tensor is data,
 * so a new rate every step never records or compiles anything. */
#include <math.h>

#include "lazyc.h"
#include "base/error.h"
#include "nn/optim_opts.h"

static int bad_rate(float x)
{
    return isnan(x) || isinf(x) || x < 0.0f;
}

/* base_lr * gamma^(step / step_size), integer division as torch's //;
   gamma 0 is torch's default 0.1. */
float lz_lr_step(float base_lr, int step, int step_size, float gamma)
{
    if (bad_rate(base_lr)) {
        lz_errorf("lz_lr_step: invalid base learning rate %g", (double)base_lr);
        return NAN;
    }
    if (step < 0) {
        lz_errorf("lz_lr_step: step %d is negative", step);
        return NAN;
    }
    if (step_size <= 0) {
        lz_errorf("lz_lr_step: step_size %d must be positive", step_size);
        return NAN;
    }
    gamma = lz_opt_or(gamma, 0.1f);   /* torch's StepLR default */
    if (isnan(gamma) || isinf(gamma) || gamma < 0.0f) {
        lz_errorf("lz_lr_step: invalid gamma %g", (double)gamma);
        return NAN;
    }
    return (float)((double)base_lr * pow((double)gamma, (double)(step / step_size)));
}

/* eta_min + (base_lr - eta_min) * (1 + cos(pi * step / t_max)) / 2; past
   t_max the closed form rises again, as torch's does. */
float lz_lr_cosine(float base_lr, int step, int t_max, float eta_min)
{
    if (bad_rate(base_lr)) {
        lz_errorf("lz_lr_cosine: invalid base learning rate %g", (double)base_lr);
        return NAN;
    }
    if (step < 0) {
        lz_errorf("lz_lr_cosine: step %d is negative", step);
        return NAN;
    }
    if (t_max <= 0) {
        lz_errorf("lz_lr_cosine: t_max %d must be positive", t_max);
        return NAN;
    }
    eta_min = lz_opt_or(eta_min, 0.0f);
    if (bad_rate(eta_min)) {
        lz_errorf("lz_lr_cosine: invalid eta_min %g", (double)eta_min);
        return NAN;
    }
    double base = base_lr, lo = eta_min;
    return (float)(lo + (base - lo) * (1.0 + cos(M_PI * (double)step / (double)t_max)) / 2.0);
}
