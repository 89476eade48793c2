/* Kernels of the indexing ops added for models from PyTorch: the
 * triangular mask (tril/triu, causal attention), cumsum, gather and its
 * scatter-add gradient, and argmax. Indices are data: each kernel checks
 * them before touching memory and names the first bad one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/kernels.h"

/* below this many elements OpenMP's fork costs more than it saves */
#define PAR_MIN 32768

static int64_t idx_at(const void *idx, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* Splits shape around axis: outer (before), n (the axis), inner (after). */
static void split_axis(const lz_value *v, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
    *outer = 1, *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= v->shape[d];
    for (int d = axis + 1; d < v->ndim; d++) *inner *= v->shape[d];
    *n = v->shape[axis];
}

/* ---- tri mask ------------------------------------------------------------------ */

static const char *k_tri_mask(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *v = &p->values[s->out];
    const int64_t rows = v->shape[v->ndim - 2], cols = v->shape[v->ndim - 1];
    const int64_t mats = rows > 0 && cols > 0 ? v->numel / (rows * cols) : 0;
    const int64_t k = s->iattr[0];
    const int upper = (int)s->iattr[1];
    const size_t esz = lz_dtype_size((lz_dtype)v->dtype);
    const char *x = ptrs[s->in[0]];
    char *y = ptrs[s->out];
    const float fill = s->fattr[0];
    LZ_PAR_FOR(v->numel > PAR_MIN, m, mats * rows, {
        const int64_t i = m % rows, base = m * cols;
        memcpy(y + (size_t)base * esz, x + (size_t)base * esz, esz * (size_t)cols);
        for (int64_t j = 0; j < cols; j++) {
            const int masked = upper ? j - i < k : j - i > k;
            if (!masked) continue;
            if (v->dtype == LZ_F32) ((float *)y)[base + j] = fill;
            else if (v->dtype == LZ_I64) ((int64_t *)y)[base + j] = (int64_t)fill;
            else ((int32_t *)y)[base + j] = (int32_t)fill;
        }
    });
    return NULL;
}

/* ---- cumsum --------------------------------------------------------------------- */

/* f32 sums in double, as torch's CPU kernel does; integers wrap, as in torch */
static const char *k_cumsum(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *v = &p->values[s->out];
    int64_t outer, n, inner;
    split_axis(v, (int)s->iattr[0], &outer, &n, &inner);
    const int rev = (int)s->iattr[1];
    const void *x = ptrs[s->in[0]];
    void *y = ptrs[s->out];
    LZ_PAR_FOR(v->numel > PAR_MIN, r, outer * inner, {
        const int64_t o = r / inner, in = r % inner, base = o * n * inner + in;
        double accf = 0;
        uint64_t acci = 0;
        for (int64_t t = 0; t < n; t++) {
            const int64_t j = base + (rev ? n - 1 - t : t) * inner;
            if (v->dtype == LZ_F32) {
                accf += ((const float *)x)[j];
                ((float *)y)[j] = (float)accf;
            } else if (v->dtype == LZ_I64) {
                acci += (uint64_t)((const int64_t *)x)[j];
                ((int64_t *)y)[j] = (int64_t)acci;
            } else {
                acci += (uint64_t)(uint32_t)((const int32_t *)x)[j];
                ((int32_t *)y)[j] = (int32_t)(uint32_t)acci;
            }
        }
    });
    return NULL;
}

/* ---- gather and scatter-add ---------------------------------------------------- */

/* Offset in `full` (contiguous, shape full->shape) of element e of the
   index tensor (shape ix->shape), the axis coordinate replaced by k. */
static int64_t gather_offset(const lz_value *full, const lz_value *ix, int axis, int64_t e, int64_t k)
{
    int64_t off = 0, stride = 1;
    for (int d = ix->ndim - 1; d >= 0; d--) {
        const int64_t c = e % ix->shape[d];
        e /= ix->shape[d];
        off += (d == axis ? k : c) * stride;
        stride *= full->shape[d];
    }
    return off;
}

static const char *check_gather(const char *op, const void *idx, int is64, int64_t n, int64_t size)
{
    static _Thread_local char msg[200];
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = idx_at(idx, is64, i);
        if (k < 0 || k >= size) {
            snprintf(msg, sizeof msg, "%s: index %lld (element %lld of the indices) is out of range "
                     "for an axis of %lld", op, (long long)k, (long long)i, (long long)size);
            return msg;
        }
    }
    return NULL;
}

/* (x, idx) -> idx shape */
static const char *k_gather(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vx = &p->values[s->in[0]], *vi = &p->values[s->in[1]];
    const int axis = (int)s->iattr[0];
    const void *idx = ptrs[s->in[1]];
    const int is64 = vi->dtype == LZ_I64;
    const char *err = check_gather("lz_gather", idx, is64, vi->numel, vx->shape[axis]);
    if (err) return err;
    const size_t esz = lz_dtype_size((lz_dtype)vx->dtype);
    const char *x = ptrs[s->in[0]];
    char *y = ptrs[s->out];
    LZ_PAR_FOR(vi->numel > PAR_MIN, e, vi->numel, {
        const int64_t off = gather_offset(vx, vi, axis, e, idx_at(idx, is64, e));
        memcpy(y + (size_t)e * esz, x + (size_t)off * esz, esz);
    });
    return NULL;
}

/* (src, idx) -> node shape: zeros, then src[e] added at idx[e]. In index
   order on one thread: a slot several indices hit is summed in the same
   order on any machine. */
static const char *k_scatter_add(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vo = &p->values[s->out], *vi = &p->values[s->in[1]];
    const int axis = (int)s->iattr[0];
    const void *idx = ptrs[s->in[1]];
    const int is64 = vi->dtype == LZ_I64;
    const char *err = check_gather("lz_scatter_add", idx, is64, vi->numel, vo->shape[axis]);
    if (err) return err;
    const float *src = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    LZ_PAR_FOR(vo->numel > PAR_MIN, i, vo->numel, { y[i] = 0.0f; });
    for (int64_t e = 0; e < vi->numel; e++) y[gather_offset(vo, vi, axis, e, idx_at(idx, is64, e))] += src[e];
    return NULL;
}

/* ---- argmax --------------------------------------------------------------------- */

static const char *k_argmax(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vx = &p->values[s->in[0]];
    int64_t outer, n, inner;
    split_axis(vx, (int)s->iattr[0], &outer, &n, &inner);
    int64_t *y = ptrs[s->out];
    const void *x = ptrs[s->in[0]];
    LZ_PAR_FOR(vx->numel > PAR_MIN, r, outer * inner, {
        const int64_t o = r / inner, in = r % inner, base = o * n * inner + in;
        int64_t best = 0;
        if (vx->dtype == LZ_F32) {
            const float *xf = x;
            float bv = xf[base];
            for (int64_t t = 1; t < n && bv == bv; t++) {
                const float c = xf[base + t * inner];
                if (c > bv || c != c) bv = c, best = t;
            }
        } else if (vx->dtype == LZ_I64) {
            const int64_t *xi = x;
            for (int64_t t = 1; t < n; t++)
                if (xi[base + t * inner] > xi[base + best * inner]) best = t;
        } else {
            const int32_t *xi = x;
            for (int64_t t = 1; t < n; t++)
                if (xi[base + t * inner] > xi[base + best * inner]) best = t;
        }
        y[r] = best;
    });
    return NULL;
}

lz_kernel lz_cpu_index_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_TRI_MASK:    return k_tri_mask;
    case LZ_OP_CUMSUM:      return k_cumsum;
    case LZ_OP_GATHER:      return k_gather;
    case LZ_OP_SCATTER_ADD: return k_scatter_add;
    case LZ_OP_ARGMAX:      return k_argmax;
    default:                return NULL;
    }
}
