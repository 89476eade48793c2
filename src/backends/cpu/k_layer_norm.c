/* CPU kernels for layer norm without its affine part (ops/layer_norm.c
 * adds weight and bias as element-wise steps, which fuse with what
 * follows). One pass of the team over the rows; a row's mean and biased
 * variance take two passes over it while it sits in L1 (the variance of
 * the centred values, as torch), and the gradient recomputes them from x
 * rather than keeping them from the forward. */
#include <math.h>

#include "backends/cpu/kernels.h"

/* below this many elements OpenMP's fork costs more than it saves */
#define PAR_MIN 32768
/* partial sums per row: the loops vectorise without reassociation, and a
   row's value depends on its length alone, not on the vector width */
#define LANES 16

/* sum over i < n of (a[i] - ma) * (b[i] - mb), or of a[i] - ma when b is
   NULL, in LANES partial sums added in a fixed order */
static float lane_sum(const float *a, float ma, const float *b, float mb, int64_t n)
{
    float acc[LANES] = {0}, s = 0.0f;
    int64_t i = 0;
    if (b) {
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += (a[i + l] - ma) * (b[i + l] - mb);
        for (; i < n; i++) s += (a[i] - ma) * (b[i] - mb);
    } else {
        for (; i + LANES <= n; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += a[i + l] - ma;
        for (; i < n; i++) s += a[i] - ma;
    }
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

static void moments(const float *x, int64_t d, float eps, float *mean, float *rstd)
{
    const float m = lane_sum(x, 0.0f, NULL, 0.0f, d) / (float)d;
    *mean = m;
    *rstd = 1.0f / sqrtf(lane_sum(x, m, x, m, d) / (float)d + eps);
}

static const char *k_layer_norm(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t d = s->iattr[0], numel = p->values[s->out].numel;
    if (d < 1 || numel % d) return "layer norm kernel: row length does not divide the elements";
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    const float eps = s->fattr[0];
    LZ_PAR_FOR(numel > PAR_MIN, r, numel / d, {
        const float *xr = x + r * d;
        float *yr = y + r * d, mean, rstd;
        moments(xr, d, eps, &mean, &rstd);
        for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] - mean) * rstd;
    });
    return NULL;
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), xhat = (x - mean) * rstd */
static const char *k_layer_norm_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t d = s->iattr[0], numel = p->values[s->out].numel;
    if (d < 1 || numel % d) return "layer norm kernel: row length does not divide the elements";
    const float *x = ptrs[s->in[0]], *g = ptrs[s->in[1]];
    float *dx = ptrs[s->out];
    const float eps = s->fattr[0];
    LZ_PAR_FOR(numel > PAR_MIN, r, numel / d, {
        const float *xr = x + r * d, *gr = g + r * d;
        float *dr = dx + r * d, mean, rstd;
        moments(xr, d, eps, &mean, &rstd);
        const float a = lane_sum(gr, 0.0f, NULL, 0.0f, d) / (float)d;
        const float b = rstd * lane_sum(gr, 0.0f, xr, mean, d) / (float)d;
        for (int64_t i = 0; i < d; i++) dr[i] = rstd * (gr[i] - a - (xr[i] - mean) * rstd * b);
    });
    return NULL;
}

lz_kernel lz_cpu_layer_norm_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_LAYER_NORM:      return k_layer_norm;
    case LZ_OP_LAYER_NORM_GRAD: return k_layer_norm_grad;
    default:                    return NULL;
    }
}
