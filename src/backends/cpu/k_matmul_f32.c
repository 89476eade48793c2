/* MATMUL on float32 operands: oneDNN's sgemm, one product or a batch of
 * them. k_linalg.c's kernel runs it, and the bf16 kernel falls back on it
 * with its operands widened (k_matmul_bf16.c). */
#include <dnnl.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"

/* Products this small (M*N*K), or batches this many, run one per thread:
   splitting each small product across the team costs more in fork/join than
   it gains. Inside the parallel loop sgemm sees it is nested and runs on the
   calling thread alone. */
#define SMALL_GEMM_MNK (1 << 20)
#define MANY_GEMMS 8

/* dnnl_sgemm with beta 0 and ldc N; 0 or -1. (Plain loops in C for tiny
   products took more instructions than its ~5000 per call: its JIT kernels
   make up for its checks.) */
static int sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C)
{
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N) ==
                   dnnl_success ? 0 : -1;
}

/* oneDNN generates all its sgemm kernels on the first product of the
   process bigger than a few elements (tens of ms), wherever
   that falls: in the first step's execution, unless this ran before. */
void lz_cpu_sgemm_make_kernels(void)
{
    float a[64] = {0}, c[64];
    (void)sgemm(0, 0, 8, 8, 8, a, 8, a, 8, c);
}

/* Per-batch-axis strides, in matrices, of v's batch dims aligned to out's
   (0 where v is broadcast). */
static void batch_strides(const lz_value *v, const lz_value *out, int64_t *st)
{
    int nbo = out->ndim - 2, nbv = v->ndim - 2, off = nbo - nbv;
    int64_t s = 1;
    for (int d = nbo - 1; d >= 0; d--) {
        int vd = d - off;
        if (vd < 0) { st[d] = 0; continue; }
        st[d] = v->shape[vd] == 1 && out->shape[d] != 1 ? 0 : s;
        s *= v->shape[vd];
    }
}

static int64_t batch_numel(const lz_value *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim - 2; d++) n *= v->shape[d];
    return n;
}

const char *lz_cpu_matmul_f32(const lz_program *p, const lz_instr *s, const float *A,
                              const float *B, float *C)
{
    const lz_value *va = &p->values[s->in[0]], *vb = &p->values[s->in[1]];
    const lz_value *vo = &p->values[s->out];
    const int ta = s->iattr[0] != 0, tb = s->iattr[1] != 0;
    const int64_t M = vo->shape[vo->ndim - 2], N = vo->shape[vo->ndim - 1];
    const int64_t K = ta ? va->shape[va->ndim - 2] : va->shape[va->ndim - 1];
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const int64_t nbatch = batch_numel(vo);
    if (vo->numel == 0) return NULL;
    if (K == 0) {
        memset(C, 0, vo->nbytes);
        return NULL;
    }
    /* A batch of row-major a against one shared b is one tall product. */
    if (!ta && batch_numel(vb) == 1 && batch_numel(va) == nbatch)
        return sgemm(0, tb, nbatch * M, N, K, A, lda, B, ldb, C) ? "lz_matmul: dnnl_sgemm failed" : NULL;
    /* one product: no parallel region around it (entering one, even for a
       team of one, costs a team allocation in libgomp) */
    if (nbatch == 1)
        return sgemm(ta, tb, M, N, K, A, lda, B, ldb, C) ? "lz_matmul: dnnl_sgemm failed" : NULL;
    int nbd = vo->ndim - 2;
    int64_t sa[LZ_MAX_DIMS], sb[LZ_MAX_DIMS];
    batch_strides(va, vo, sa);
    batch_strides(vb, vo, sb);
    int failed = 0;
    const int per_thread = nbatch > 1 && ((double)M * N * K <= SMALL_GEMM_MNK || nbatch >= MANY_GEMMS);
    #pragma omp parallel for schedule(static) if (per_thread) reduction(|:failed)
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t oa = 0, ob = 0, r = bi;
        for (int d = nbd - 1; d >= 0; d--) {
            int64_t idx = r % vo->shape[d];
            r /= vo->shape[d];
            oa += idx * sa[d];
            ob += idx * sb[d];
        }
        if (sgemm(ta, tb, M, N, K, A + oa * M * K, lda, B + ob * K * N, ldb, C + bi * M * N))
            failed = 1;
    }
    return failed ? "lz_matmul: dnnl_sgemm failed" : NULL;
}
