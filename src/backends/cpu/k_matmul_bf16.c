/* MATMUL on bf16 operands (autocast): oneDNN's matmul primitive, bf16
 * source and weights, float32 accumulation and float32 result. One
 * primitive per product shape, made on first use and kept for the process
 * (a training step repeats the same few shapes). A large outer product
 * (at most 8 rows of b) runs k_outer.c's streaming loops instead.
 *
 * Without AVX512_BF16 (bf16_isa.c), the operands are widened to float32
 * (exactly) and the float32 kernel runs: the same values up to the order
 * of the float32 sums, no speed-up (oneDNN's emulation is slower than
 * float32);
 * a notice says so once per process. */
#include <dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/k_outer.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/scratch.h"
#include "base/bf16.h"

#define N_PRIMS 512

typedef struct prim {
    int64_t key[7];              /* batch of a, of b, M, N, K, ta, tb */
    dnnl_primitive_t p;          /* NULL: oneDNN has none worth running */
    dnnl_memory_t a, b, c;
} prim;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static prim prims[N_PRIMS];
static int n_prims;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int64_t by_library, widened;

int64_t lz_cpu_bf16_matmul_count(int library)
{
    pthread_mutex_lock(&lock);
    int64_t n = library ? by_library : widened;
    pthread_mutex_unlock(&lock);
    return n;
}

static int64_t batch_numel(const lz_value *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim - 2; d++) n *= v->shape[d];
    return n;
}

static int make_prim(prim *q)
{
    const int64_t Ba = q->key[0], Bb = q->key[1], M = q->key[2], N = q->key[3], K = q->key[4];
    const int ta = (int)q->key[5], tb = (int)q->key[6];
    const int64_t B = Ba > Bb ? Ba : Bb;
    dnnl_dims_t da = {Ba, M, K}, db = {Bb, K, N}, dc = {B, M, N};
    dnnl_dims_t sa = {M * K, ta ? 1 : K, ta ? M : 1}, sb = {K * N, tb ? 1 : N, tb ? K : 1};
    dnnl_dims_t sc = {M * N, N, 1};
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
    if (engine && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        stream = NULL;
    if (!stream ||
        dnnl_memory_desc_init_by_strides(&ma, 3, da, dnnl_bf16, sa) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&mb, 3, db, dnnl_bf16, sb) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&mc, 3, dc, dnnl_f32, sc) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &ma, &mb, NULL, &mc) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) != dnnl_success)
        return -1;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    int ok = impl && strncmp(impl, "ref", 3) != 0 &&   /* reference loops: slower than widening */
             dnnl_primitive_create(&q->p, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    if (!ok) { q->p = NULL; return -1; }
    if (dnnl_memory_create(&q->a, &ma, engine, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&q->b, &mb, engine, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&q->c, &mc, engine, DNNL_MEMORY_NONE) != dnnl_success) {
        dnnl_primitive_destroy(q->p);
        q->p = NULL;
        return -1;
    }
    return 0;
}

dnnl_primitive_desc_t lz_cpu_bf16_matmul_pd(dnnl_engine_t engine, const dnnl_memory_desc_t *src,
                                            const dnnl_memory_desc_t *wei,
                                            const dnnl_memory_desc_t *dst)
{
    dnnl_matmul_desc_t mm;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int bad = dnnl_matmul_desc_init(&mm, src, wei, NULL, dst) != dnnl_success ||
              dnnl_primitive_attr_create(&attr) != dnnl_success ||
              dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success ||
              dnnl_primitive_desc_create(&pd, &mm, attr, engine, NULL) != dnnl_success;
    if (attr) dnnl_primitive_attr_destroy(attr);
    const char *impl = NULL;
    bad = bad || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
          !impl || strncmp(impl, "brg", 3) != 0;
    if (bad && pd) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    return pd;
}

/* The primitive for key (NULL: none), made on first use; under lock. */
static prim *find(const int64_t *key)
{
    for (int i = 0; i < n_prims; i++)
        if (!memcmp(prims[i].key, key, sizeof prims[i].key)) return &prims[i];
    if (n_prims == N_PRIMS) return NULL;
    prim *q = &prims[n_prims++];
    memcpy(q->key, key, sizeof q->key);
    make_prim(q);
    return q;
}

/* The operands widened into the executor thread's scratch (kept between
   steps: a fresh block per call faulted its pages in on every step), in
   parallel, then the float32 kernel. */
static const char *widen_and_run(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *va = &p->values[s->in[0]], *vb = &p->values[s->in[1]];
    float *A = lz_cpu_scratch(LZ_SCRATCH_COLUMNS, sizeof(float) * (size_t)(va->numel ? va->numel : 1));
    float *B = lz_cpu_scratch(LZ_SCRATCH_PARTIALS, sizeof(float) * (size_t)(vb->numel ? vb->numel : 1));
    if (!A || !B) return "lz_matmul: out of memory widening bf16 operands to float32";
    const uint16_t *ha = ptrs[s->in[0]], *hb = ptrs[s->in[1]];
    LZ_PAR_FOR(va->numel > 65536, i, va->numel, { A[i] = lz_bf16_to_f32(ha[i]); });
    LZ_PAR_FOR(vb->numel > 65536, i, vb->numel, { B[i] = lz_bf16_to_f32(hb[i]); });
    const char *err = lz_cpu_matmul_f32(p, s, A, B, ptrs[s->out]);
    pthread_mutex_lock(&lock);
    widened++;
    pthread_mutex_unlock(&lock);
    return err;
}

const char *lz_cpu_matmul_bf16(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *va = &p->values[s->in[0]], *vb = &p->values[s->in[1]];
    const lz_value *vo = &p->values[s->out];
    if (va->dtype != LZ_BF16 || vb->dtype != LZ_BF16)
        return "lz_matmul: operands of mixed dtypes (bf16 and f32)";
    const int ta = s->iattr[0] != 0, tb = s->iattr[1] != 0;
    const int64_t M = vo->shape[vo->ndim - 2], N = vo->shape[vo->ndim - 1];
    const int64_t K = ta ? va->shape[va->ndim - 2] : va->shape[va->ndim - 1];
    const int64_t nbatch = batch_numel(vo), Ba = batch_numel(va), Bb = batch_numel(vb);
    if (vo->numel == 0) return NULL;
    if (K == 0) {
        memset(ptrs[s->out], 0, vo->nbytes);
        return NULL;
    }
    if (lz_cpu_bf16_way() != LZ_BF16_NATIVE) {
        lz_cpu_bf16_notice();
        return widen_and_run(p, s, ptrs);
    }
    if (nbatch == 1 && Ba == 1 && Bb == 1 && lz_cpu_outer_fits(M, N, K, tb)) {
        lz_cpu_outer_bf16(ptrs[s->in[0]], ta, ptrs[s->in[1]], ptrs[s->out], M, N, K);
        pthread_mutex_lock(&lock);
        by_library++;
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    int64_t key[7];
    if (!ta && Bb == 1 && Ba == nbatch) {            /* one tall product */
        int64_t k[7] = {1, 1, nbatch * M, N, K, 0, tb};
        memcpy(key, k, sizeof key);
    } else if ((Ba == nbatch || Ba == 1) && (Bb == nbatch || Bb == 1)) {
        int64_t k[7] = {Ba, Bb, M, N, K, ta, tb};   /* oneDNN broadcasts a batch of 1 */
        memcpy(key, k, sizeof key);
    } else {
        return widen_and_run(p, s, ptrs);            /* broadcast over several batch axes */
    }
    pthread_mutex_lock(&lock);
    prim *q = find(key);
    int bad = !q || !q->p;
    if (!bad) {
        bad = dnnl_memory_set_data_handle(q->a, ptrs[s->in[0]]) != dnnl_success ||
              dnnl_memory_set_data_handle(q->b, ptrs[s->in[1]]) != dnnl_success ||
              dnnl_memory_set_data_handle(q->c, ptrs[s->out]) != dnnl_success;
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, q->a}, {DNNL_ARG_WEIGHTS, q->b}, {DNNL_ARG_DST, q->c}};
        if (!bad) bad = dnnl_primitive_execute(q->p, stream, 3, args) != dnnl_success ||
                        dnnl_stream_wait(stream) != dnnl_success;
        if (!bad) by_library++;
        pthread_mutex_unlock(&lock);
        return bad ? "lz_matmul: oneDNN's bf16 matmul failed" : NULL;
    }
    pthread_mutex_unlock(&lock);
    return widen_and_run(p, s, ptrs);
}
