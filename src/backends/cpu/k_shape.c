/* CPU kernels for data movement: reshape, permute, expand, slice, cat.
 *
 * Permute and expand are both a strided gather into a dense output: each
 * output axis reads the input with some stride (0 for a broadcast axis).
 * Adjacent axes that stay adjacent are merged first, so most real cases
 * (a head split, a bias broadcast) become row copies or row fills, and a
 * real transpose runs in cache-sized tiles. */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "base/bf16.h"

#define PAR_MIN 32768   /* below this many elements OpenMP costs more than it saves */
#define TILE 32

static size_t elsize(const lz_value *v)
{
    return (int)lz_dtype_size((lz_dtype)v->dtype);
}

/* Merges adjacent output axes whose input strides are contiguous with each
   other and drops unit axes. Returns the number of axes left. */
static int collapse(int nd, const int64_t *shape, const int64_t *stride, int64_t *sz, int64_t *st)
{
    int k = 0;
    for (int i = 0; i < nd; i++) {
        if (shape[i] == 1) continue;
        if (k > 0 && st[k - 1] == shape[i] * stride[i]) {
            sz[k - 1] *= shape[i];
            st[k - 1] = stride[i];
        } else {
            sz[k] = shape[i];
            st[k] = stride[i];
            k++;
        }
    }
    return k;
}

/* Input offset of row r of a gather whose rows are the last axis. */
static inline int64_t row_offset(int64_t r, int k, const int64_t *sz, const int64_t *st)
{
    int64_t off = 0;
    for (int d = k - 2; d >= 0; d--) {
        off += (r % sz[d]) * st[d];
        r /= sz[d];
    }
    return off;
}

/* Tiled 2-d transpose inside a gather: axis j is contiguous in the input,
   the last axis contiguous in the output. Other axes are the batch. */
#define DEFINE_TRANSPOSE(NAME, T, TO, CONV)                                               \
static void NAME(const T *src, TO *dst, int k, const int64_t *sz, const int64_t *st, int j,\
                 int64_t numel)                                                           \
{                                                                                         \
    int64_t ost[LZ_MAX_DIMS], osz[LZ_MAX_DIMS], ist[LZ_MAX_DIMS], oos[LZ_MAX_DIMS];       \
    int64_t s = 1;                                                                        \
    for (int d = k - 1; d >= 0; d--) { ost[d] = s; s *= sz[d]; }                          \
    int no = 0;                                                                           \
    for (int d = 0; d < k - 1; d++)                                                       \
        if (d != j) { osz[no] = sz[d]; ist[no] = st[d]; oos[no] = ost[d]; no++; }         \
    const int64_t A = sz[j], B = sz[k - 1], sB = st[k - 1], oA = ost[j];                  \
    const int64_t ta = (A + TILE - 1) / TILE, tb = (B + TILE - 1) / TILE;                 \
    const int64_t nouter = numel / (A * B), total = nouter * ta * tb;                     \
    _Pragma("omp parallel for schedule(static) if (numel > PAR_MIN)")                     \
    for (int64_t w = 0; w < total; w++) {                                                 \
        int64_t o = w / (ta * tb), t = w % (ta * tb);                                     \
        int64_t a0 = (t / tb) * TILE, b0 = (t % tb) * TILE;                               \
        int64_t si = 0, di = 0, r = o;                                                    \
        for (int d = no - 1; d >= 0; d--) {                                               \
            int64_t idx = r % osz[d];                                                     \
            r /= osz[d];                                                                  \
            si += idx * ist[d];                                                           \
            di += idx * oos[d];                                                           \
        }                                                                                 \
        int64_t a1 = a0 + TILE < A ? a0 + TILE : A, b1 = b0 + TILE < B ? b0 + TILE : B;   \
        for (int64_t a = a0; a < a1; a++) {                                               \
            const T *sp = src + si + a;                                                   \
            TO *dp = dst + di + a * oA;                                                   \
            for (int64_t b = b0; b < b1; b++) dp[b] = CONV(sp[b * sB]);                   \
        }                                                                                 \
    }                                                                                     \
}

#define SAME(x) (x)
DEFINE_TRANSPOSE(transpose2, uint16_t, uint16_t, SAME)
DEFINE_TRANSPOSE(transpose4, uint32_t, uint32_t, SAME)
DEFINE_TRANSPOSE(transpose8, uint64_t, uint64_t, SAME)
DEFINE_TRANSPOSE(transpose_to_bf16, float, uint16_t, lz_f32_to_bf16)

/* Any gather without a contiguous input axis (only broadcasts inside). */
#define DEFINE_GENERIC(NAME, T, TO, CONV)                                                 \
static void NAME(const T *src, TO *dst, int k, const int64_t *sz, const int64_t *st,      \
                 int64_t numel)                                                           \
{                                                                                         \
    const int64_t inner = sz[k - 1], sI = st[k - 1], rows = numel / inner;                \
    _Pragma("omp parallel for schedule(static) if (numel > PAR_MIN)")                     \
    for (int64_t r = 0; r < rows; r++) {                                                  \
        const T *sp = src + row_offset(r, k, sz, st);                                     \
        TO *dp = dst + r * inner;                                                         \
        for (int64_t i = 0; i < inner; i++) dp[i] = CONV(sp[i * sI]);                     \
    }                                                                                     \
}

DEFINE_GENERIC(generic2, uint16_t, uint16_t, SAME)
DEFINE_GENERIC(generic4, uint32_t, uint32_t, SAME)
DEFINE_GENERIC(generic8, uint64_t, uint64_t, SAME)
DEFINE_GENERIC(generic_to_bf16, float, uint16_t, lz_f32_to_bf16)

/* The gathers below with float32 in and bf16 out: autocast's cast of a
   permute's result, folded into the permute (compile/fold_casts.c). */
static void gather_to_bf16(const float *src, uint16_t *dst, int k, const int64_t *sz,
                           const int64_t *st, int64_t numel)
{
    if (k == 0) {
        dst[0] = lz_f32_to_bf16(src[0]);
        return;
    }
    const int64_t inner = sz[k - 1], rows = numel / inner;
    if (st[k - 1] == 1) {
        LZ_PAR_FOR(numel > PAR_MIN && rows > 1, r, rows, {
            const float *sp = src + row_offset(r, k, sz, st);
            uint16_t *dp = dst + r * inner;
            for (int64_t i = 0; i < inner; i++) dp[i] = lz_f32_to_bf16(sp[i]);
        });
        return;
    }
    int j = -1;
    for (int d = 0; d < k - 1; d++)
        if (st[d] == 1) j = d;
    if (j >= 0) transpose_to_bf16(src, dst, k, sz, st, j, numel);
    else generic_to_bf16(src, dst, k, sz, st, numel);
}

/* Dense out[...] = in[sum idx[d] * stride[d]] over out's shape, elements
   of es bytes; to_bf16: float32 in, bf16 out (es is the output's, 2). */
static void gather(const void *src, void *dst, size_t es, int to_bf16, int nd,
                   const int64_t *shape, const int64_t *stride)
{
    int64_t sz[LZ_MAX_DIMS], st[LZ_MAX_DIMS];
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) numel *= shape[d];
    if (numel == 0) return;
    int k = collapse(nd, shape, stride, sz, st);
    if (to_bf16) {
        gather_to_bf16(src, dst, k, sz, st, numel);
        return;
    }
    if (k == 0) {
        memcpy(dst, src, es);
        return;
    }
    if (st[k - 1] == 1) {
        if (k == 1) {
            memcpy(dst, src, (size_t)numel * es);
            return;
        }
        const int64_t inner = sz[k - 1], rows = numel / inner;
        const size_t rb = (size_t)inner * es;
        LZ_PAR_FOR(numel > PAR_MIN, r, rows,
                   { memcpy((char *)dst + r * rb, (const char *)src + row_offset(r, k, sz, st) * es, rb); });
        return;
    }
    int j = -1;
    for (int d = 0; d < k - 1; d++)
        if (st[d] == 1) j = d;
    if (j >= 0) {
        if (es == 8) transpose8(src, dst, k, sz, st, j, numel);
        else if (es == 2) transpose2(src, dst, k, sz, st, j, numel);
        else transpose4(src, dst, k, sz, st, j, numel);
    } else {
        if (es == 8) generic8(src, dst, k, sz, st, numel);
        else if (es == 2) generic2(src, dst, k, sz, st, numel);
        else generic4(src, dst, k, sz, st, numel);
    }
}

static const char *k_reshape(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vo = &p->values[s->out];
    if (ptrs[s->out] != ptrs[s->in[0]]) memcpy(ptrs[s->out], ptrs[s->in[0]], vo->nbytes);
    return NULL;
}

static const char *k_permute(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int64_t istr[LZ_MAX_DIMS], stride[LZ_MAX_DIMS];
    int64_t acc = 1;
    for (int d = vi->ndim - 1; d >= 0; d--) { istr[d] = acc; acc *= vi->shape[d]; }
    for (int d = 0; d < vo->ndim; d++) {
        int64_t pd = s->iattr[d];
        if (pd < 0 || pd >= vi->ndim) return "permute: bad axis in perm";
        stride[d] = istr[pd];
    }
    const int to_bf16 = vi->dtype == LZ_F32 && vo->dtype == LZ_BF16;
    if (vi->dtype != vo->dtype && !to_bf16) return "permute: no kernel for this dtype change";
    gather(ptrs[s->in[0]], ptrs[s->out], elsize(vo), to_bf16, vo->ndim, vo->shape, stride);
    return NULL;
}

static const char *k_expand(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int64_t stride[LZ_MAX_DIMS];
    lz_broadcast_strides(vi, vo, stride);
    gather(ptrs[s->in[0]], ptrs[s->out], elsize(vo), 0, vo->ndim, vo->shape, stride);
    return NULL;
}

/* v's elements as outer runs of v->shape[axis] runs of inner elements.
   Channels of a channels-last v (lz_value.block = C, [N, H, W, C]) are
   runs of one element in N*H*W pixels; a concatenation or slice of them
   (operand_layouts.c) is given its larger side, whose block is never its
   channel count in the other layouts (a channel block of b: whole blocks
   of b*H*W elements a sample, which the plain split copies). */
static void split_axis(const lz_value *v, int axis, int64_t *outer, int64_t *inner)
{
    if (axis == 1 && v->ndim == 4 && v->block && v->block == v->shape[1]) {
        *outer = v->shape[0] * v->shape[2] * v->shape[3];
        *inner = 1;
        return;
    }
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= v->shape[d];
    for (int d = axis + 1; d < v->ndim; d++) *inner *= v->shape[d];
}

/* Copies `outer` blocks of `n` bytes between arrays whose blocks lie
   `sstep` / `dstep` bytes apart. */
static void copy_blocks(const char *src, int64_t sstep, char *dst, int64_t dstep, int64_t outer,
                        int64_t n)
{
    LZ_PAR_FOR(outer * n > 4 * PAR_MIN && outer > 1, o, outer,
               { memcpy(dst + o * dstep, src + o * sstep, (size_t)n); });
}

static const char *k_slice(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int axis = (int)s->iattr[0];
    int64_t start = s->iattr[1], outer, inner;
    size_t es = elsize(vo);
    split_axis(vi, axis, &outer, &inner);
    int64_t lin = vi->shape[axis], lout = vo->shape[axis];
    copy_blocks((const char *)ptrs[s->in[0]] + start * inner * es, lin * inner * es,
                ptrs[s->out], lout * inner * es, outer, lout * inner * es);
    return NULL;
}

static const char *k_slice_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vi = &p->values[s->in[0]], *vo = &p->values[s->out];
    int axis = (int)s->iattr[0];
    int64_t start = s->iattr[1], outer, inner;
    size_t es = elsize(vo);
    split_axis(vo, axis, &outer, &inner);
    int64_t lin = vi->shape[axis], lout = vo->shape[axis];
    memset(ptrs[s->out], 0, vo->nbytes);
    copy_blocks(ptrs[s->in[0]], lin * inner * es,
                (char *)ptrs[s->out] + start * inner * es, lout * inner * es, outer, lin * inner * es);
    return NULL;
}

static const char *k_cat(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vo = &p->values[s->out];
    int axis = (int)s->iattr[0];
    int64_t outer, inner, off = 0;
    size_t es = elsize(vo);
    split_axis(vo, axis, &outer, &inner);
    int64_t lout = vo->shape[axis];
    for (int i = 0; i < s->n_in; i++) {
        int64_t li = p->values[s->in[i]].shape[axis];
        copy_blocks(ptrs[s->in[i]], li * inner * es, (char *)ptrs[s->out] + off * inner * es,
                    lout * inner * es, outer, li * inner * es);
        off += li;
    }
    return NULL;
}

lz_kernel lz_cpu_shape_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_RESHAPE:    return k_reshape;
    case LZ_OP_PERMUTE:    return k_permute;
    case LZ_OP_EXPAND:     return k_expand;
    case LZ_OP_SLICE:      return k_slice;
    case LZ_OP_SLICE_GRAD: return k_slice_grad;
    case LZ_OP_CAT:        return k_cat;
    default:               return NULL;
    }
}
