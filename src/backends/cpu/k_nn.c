/* Kernels of the neural-network ops without convolution: hardtanh and its
 * gradient, embedding lookup and its scatter-add gradient, the dropout
 * mask, random tensors and the generator's counter. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/cpu/activation.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/vec_math.h"
#include "base/rng.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* below this many elements OpenMP's fork costs more than it saves */
#define PAR_MIN 32768

/* ---- hardtanh ----------------------------------------------------------------- */

static const char *k_hardtanh(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t n = p->values[s->out].numel;
    const float *x = ptrs[s->in[0]];
    float *y = ptrs[s->out];
    const float lo = s->fattr[0], hi = s->fattr[1];
    LZ_PAR_FOR(n > PAR_MIN, i, n, { y[i] = hardtanh_1(x[i], lo, hi); });
    return NULL;
}

static const char *k_hardtanh_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t n = p->values[s->out].numel;
    const float *x = ptrs[s->in[0]], *g = ptrs[s->in[1]];
    float *dx = ptrs[s->out];
    const float lo = s->fattr[0], hi = s->fattr[1];
    /* branch-free (activation.h): a branch on the data mispredicts, and
       this loop is a large share of mobilenet_v2's step */
    LZ_PAR_FOR(n > PAR_MIN, i, n, { dx[i] = hardtanh_grad_1(x[i], g[i], lo, hi); });
    return NULL;
}

/* ---- embedding ---------------------------------------------------------------- */

static int64_t index_at(const void *idx, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* Indices are data: check them all before touching memory, and name the
   first bad one. The message lives in thread storage because the kernel
   contract returns a string, not an allocation. */
static const char *check_indices(const char *op, const void *idx, int is64, int64_t n, int64_t rows)
{
    static _Thread_local char msg[200];
    for (int64_t i = 0; i < n; i++) {
        int64_t k = index_at(idx, is64, i);
        if (k < 0 || k >= rows) {
            snprintf(msg, sizeof msg, "%s: index %lld (element %lld of the indices) is out of range "
                     "for a weight of %lld rows", op, (long long)k, (long long)i, (long long)rows);
            return msg;
        }
    }
    return NULL;
}

/* (weight [V, D], idx) -> [..., D] */
static const char *k_embedding(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vw = &p->values[s->in[0]], *vi = &p->values[s->in[1]];
    const float *w = ptrs[s->in[0]];
    const void *idx = ptrs[s->in[1]];
    float *y = ptrs[s->out];
    const int is64 = vi->dtype == LZ_I64;
    const int64_t n = vi->numel, rows = vw->shape[0], d = vw->shape[1];
    const char *err = check_indices("lz_embedding", idx, is64, n, rows);
    if (err) return err;
    LZ_PAR_FOR(n * d > PAR_MIN, i, n,
               { memcpy(y + i * d, w + index_at(idx, is64, i) * d, sizeof(float) * (size_t)d); });
    return NULL;
}

/* (g [..., D], idx) -> [V, D]: zeros, then each g row added into its
   index's row. Threads split the D columns, never the indices, so a row
   that several indices hit is summed by one thread in index order: no
   races and the same bits on any number of threads. */
static const char *k_embedding_grad(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *vo = &p->values[s->out], *vi = &p->values[s->in[1]];
    const float *g = ptrs[s->in[0]];
    const void *idx = ptrs[s->in[1]];
    float *dw = ptrs[s->out];
    const int is64 = vi->dtype == LZ_I64;
    const int64_t n = vi->numel, rows = vo->shape[0], d = vo->shape[1];
    const char *err = check_indices("lz_embedding (backward)", idx, is64, n, rows);
    if (err) return err;
    const int64_t total = rows * d;
    LZ_PAR_FOR(total > PAR_MIN, i, total, { dw[i] = 0.0f; });
    #pragma omp parallel if (n * d > PAR_MIN)
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        const int64_t c0 = d * t / nt, c1 = d * (t + 1) / nt;
        for (int64_t i = 0; i < n; i++) {
            float *dst = dw + index_at(idx, is64, i) * d;
            const float *src = g + i * d;
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
    return NULL;
}

/* ---- random numbers ----------------------------------------------------------- */

/* A random step's stream: its (seed, counter) inputs, the seed mixed into
   a key. */
typedef struct rng_stream { uint64_t key, counter; } rng_stream;

static rng_stream stream_of(const lz_instr *s, void *const *ptrs)
{
    uint64_t seed, counter;
    memcpy(&seed, ptrs[s->in[0]], sizeof seed);
    memcpy(&counter, ptrs[s->in[1]], sizeof counter);
    return (rng_stream){lz_rng_key(seed), counter};
}

static inline uint64_t stream_bits(rng_stream r, int64_t i) { return lz_rng_bits(r.key, r.counter, i); }

#define MASK_CHUNK 65536   /* elements of a mask per work item */

/* Elements [i0, i1) of a dropout mask: three 64-bit multiplies an element,
   which AVX2 (the build's) makes of 32-bit ones four lanes at a time and
   the AVX-512 copy eight. Integer arithmetic alone, so every copy gives
   the same bits. */
static LZ_MATH_CLONES void mask_range(float *m, int64_t i0, int64_t i1, rng_stream rs,
                                      uint64_t thresh, float keep)
{
    for (int64_t i = i0; i < i1; i++) {
        uint64_t r = stream_bits(rs, i);
        m[i] = lz_rng_dropout_element(r, thresh, keep);
    }
}

/* (seed, counter) -> element i is 0 with probability p (to 2^-32) and
   1/(1-p) otherwise, drawn from (seed, counter + i) alone. */
static const char *k_dropout_mask(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t n = p->values[s->out].numel;
    const rng_stream rs = stream_of(s, ptrs);
    float *m = ptrs[s->out];
    const float prob = s->fattr[0];
    const uint64_t thresh = lz_rng_dropout_threshold(prob);
    const float keep = lz_rng_dropout_keep(prob);
    const int64_t chunks = (n + MASK_CHUNK - 1) / MASK_CHUNK;
    LZ_PAR_FOR(n > PAR_MIN, c, chunks, {
        mask_range(m, c * MASK_CHUNK, c + 1 < chunks ? (c + 1) * MASK_CHUNK : n, rs, thresh, keep);
    });
    return NULL;
}

/* (seed, counter) -> element i from (seed, counter + i) on dropout's
   stream: uniform [0, 1) from the top 24 bits (exact in f32), or normal(0, 1)
   by Box-Muller from the two 32-bit halves (u1 in (0, 1], so log is finite;
   |x| <= 6.67). */
static const char *k_rand(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const int64_t n = p->values[s->out].numel;
    const rng_stream rs = stream_of(s, ptrs);
    float *out = ptrs[s->out];
    const int normal = s->iattr[0] == 1;
    #pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = stream_bits(rs, i);
        out[i] = normal ? lz_rng_rand_normal(r) : lz_rng_rand_uniform(r);
    }
    return NULL;
}

static const char *k_rng_advance(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    (void)p;
    uint64_t c;
    memcpy(&c, ptrs[s->in[0]], sizeof c);
    c += (uint64_t)s->iattr[0];
    memcpy(ptrs[s->out], &c, sizeof c);
    return NULL;
}

lz_kernel lz_cpu_nn_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_HARDTANH:       return k_hardtanh;
    case LZ_OP_HARDTANH_GRAD:  return k_hardtanh_grad;
    case LZ_OP_EMBEDDING:      return k_embedding;
    case LZ_OP_EMBEDDING_GRAD: return k_embedding_grad;
    case LZ_OP_DROPOUT_MASK:   return k_dropout_mask;
    case LZ_OP_RNG_ADVANCE:    return k_rng_advance;
    case LZ_OP_RAND:           return k_rand;
    default:                   return NULL;
    }
}
