/* Kernels of cross-entropy with torch's options (ops/loss_ext.c): per-row
 * losses with ignore_index, class weights and label smoothing, their
 * gradient, and each row's weight in a mean. One pass for the row's max
 * and log-sum-exp, as lz_cross_entropy's kernel does. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"

#define PAR_MIN 32768

typedef struct ce_args {
    const float *x, *w;      /* logits [n, c]; class weights [c] or NULL */
    const void *t;
    int is64, use_ignore;
    int64_t n, c, ignore;
    float eps;
} ce_args;

static int64_t target_at(const ce_args *a, int64_t i)
{
    return a->is64 ? ((const int64_t *)a->t)[i] : ((const int32_t *)a->t)[i];
}

static int ignored(const ce_args *a, int64_t i)
{
    return a->use_ignore && target_at(a, i) == a->ignore;
}

/* target and weight are the inputs after the logits (CE_ROW_WEIGHT has none) */
static ce_args args_of(const lz_program *p, const lz_instr *s, void *const *ptrs, int first)
{
    const lz_value *vt = &p->values[s->in[first]];
    ce_args a = {0};
    a.t = ptrs[s->in[first]];
    a.is64 = vt->dtype == LZ_I64;
    a.n = vt->numel;
    a.ignore = s->iattr[0];
    a.use_ignore = (int)s->iattr[1];
    a.eps = s->fattr[0];
    if (first == 1) {
        a.x = ptrs[s->in[0]];
        a.c = p->values[s->in[0]].shape[1];
    }
    return a;
}

static const char *check_targets(const ce_args *a, int64_t classes)
{
    static _Thread_local char msg[200];
    for (int64_t i = 0; i < a->n; i++) {
        const int64_t k = target_at(a, i);
        if (ignored(a, i) || (k >= 0 && k < classes)) continue;
        snprintf(msg, sizeof msg, "lz_cross_entropy_ex: target[%lld] = %lld is out of range for %lld "
                 "classes%s", (long long)i, (long long)k, (long long)classes,
                 a->use_ignore ? " and is not ignore_index" : "");
        return msg;
    }
    return NULL;
}

static float row_max(const float *x, int64_t c)
{
    float m = x[0];
    for (int64_t j = 1; j < c; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* sum exp(x - mx), each term stored in e when e is not NULL */
static float row_sum_exp(const float *x, float mx, float *e, int64_t c)
{
    float s = 0;
    for (int64_t j = 0; j < c; j++) {
        const float v = vexp_f32(x[j] - mx);
        if (e) e[j] = v;
        s += v;
    }
    return s;
}

static const char *k_ce_rows(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    ce_args a = args_of(p, s, ptrs, 1);
    a.w = s->iattr[2] ? ptrs[s->in[2]] : NULL;
    const char *err = check_targets(&a, a.c);
    if (err) return err;
    float *y = ptrs[s->out];
    LZ_PAR_FOR(a.n * a.c > PAR_MIN, i, a.n, {
        const float *xr = a.x + i * a.c;
        if (ignored(&a, i)) {
            y[i] = 0.0f;
        } else {
            const int64_t t = target_at(&a, i);
            const float mx = row_max(xr, a.c);
            const float lse = logf(row_sum_exp(xr, mx, NULL, a.c));
            /* (mx - x) + lse: large logits keep their precision */
            const float wt = a.w ? a.w[t] : 1.0f;
            float loss = wt * ((mx - xr[t]) + lse);
            if (a.eps != 0.0f) {
                double sm = 0;
                for (int64_t j = 0; j < a.c; j++) sm += (double)(a.w ? a.w[j] : 1.0f) * ((mx - xr[j]) + lse);
                loss = (1.0f - a.eps) * loss + a.eps / (float)a.c * (float)sm;
            }
            y[i] = loss;
        }
    });
    return NULL;
}

/* dx_j = g_i ((1 - eps) w_t (p_j - [j == t]) + eps / C (W p_j - w_j)), W = sum w */
static const char *k_ce_rows_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    ce_args a = args_of(p, s, ptrs, 1);
    const float *g = ptrs[s->in[2]];
    a.w = s->iattr[2] ? ptrs[s->in[3]] : NULL;
    const char *err = check_targets(&a, a.c);
    if (err) return err;
    float wsum = (float)a.c;
    if (a.w) {
        double ws = 0;
        for (int64_t j = 0; j < a.c; j++) ws += a.w[j];
        wsum = (float)ws;
    }
    float *dx = ptrs[s->out];
    LZ_PAR_FOR(a.n * a.c > PAR_MIN, i, a.n, {
        const float *xr = a.x + i * a.c;
        float *dr = dx + i * a.c;
        if (ignored(&a, i)) {
            for (int64_t j = 0; j < a.c; j++) dr[j] = 0.0f;
        } else {
            const int64_t t = target_at(&a, i);
            const float inv = 1.0f / row_sum_exp(xr, row_max(xr, a.c), dr, a.c);
            const float wt = a.w ? a.w[t] : 1.0f;
            const float ct = g[i] * (1.0f - a.eps) * wt, cs = g[i] * a.eps / (float)a.c;
            for (int64_t j = 0; j < a.c; j++) {
                const float pj = dr[j] * inv;
                dr[j] = ct * pj + (a.eps != 0.0f ? cs * (wsum * pj - (a.w ? a.w[j] : 1.0f)) : 0.0f);
            }
            dr[t] -= ct;
        }
    });
    return NULL;
}

static const char *k_ce_row_weight(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    ce_args a = args_of(p, s, ptrs, 0);
    a.w = s->iattr[2] ? ptrs[s->in[1]] : NULL;
    const char *err = check_targets(&a, s->iattr[3]);
    if (err) return err;
    float *y = ptrs[s->out];
    for (int64_t i = 0; i < a.n; i++)
        y[i] = ignored(&a, i) ? 0.0f : a.w ? a.w[target_at(&a, i)] : 1.0f;
    return NULL;
}

lz_kernel lz_cpu_loss_ext_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_CE_ROWS:       return k_ce_rows;
    case LZ_OP_CE_ROWS_GRAD:  return k_ce_rows_grad;
    case LZ_OP_CE_ROW_WEIGHT: return k_ce_row_weight;
    default:                  return NULL;
    }
}
