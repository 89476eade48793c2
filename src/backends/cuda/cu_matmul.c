/* Products through cuBLASLt (the plan: f_matmul.c).
 *
 * lazyc's operands are row-major; cuBLASLt's are column-major, and a
 * row-major [R, C] is a column-major [C, R]: C = A B row-major is
 * C^T = B^T A^T column-major, so cuBLASLt gets B as its first operand and
 * A as its second, m = N, n = M. A transposed-stored operand (iattr) is
 * cuBLASLt's transpose flag. float32 is float32: CUBLAS_COMPUTE_32F, with
 * TF32 only when LZ_CUDA_TF32=1 allows it; bf16 operands (autocast) run on
 * the tensor cores with float32 accumulation and a float32 result. The
 * algorithm is cuBLASLt's first heuristic choice within a workspace of
 * WORKSPACE bytes, which joins the step's scratch in the arena. */
#include <cublasLt.h>
#include <stdlib.h>

#include "backends/cuda/cu_runtime.h"

/* cuBLASLt's recommendation for Hopper */
#define WORKSPACE (32u << 20)

typedef struct loaded {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;   /* cuBLASLt's A (lazyc's b), B (lazyc's a), C */
    cublasLtMatmulAlgo_t algo;
} loaded;

static const char *status_text(cublasStatus_t st)
{
    switch (st) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

static const char *lt_fail(const char *what, cublasStatus_t st)
{
    return lz_cu_msg("cuda: cuBLASLt %s: %s (status %d)", what, status_text(st), (int)st);
}

/* a column-major rows x cols layout of dtype t, batched */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType t, int64_t rows, int64_t cols,
                             int64_t count, int64_t stride)
{
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, rows);
    if (st == CUBLAS_STATUS_SUCCESS && count > 1) {
        int32_t n = (int32_t)count;
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof stride);
    }
    return st;
}

/* The alignment cuBLASLt may assume of an operand's matrices: the memory
   plan's 64 bytes, less where a batch or loop offset (elements * es) is
   a smaller power of two. Its heuristics otherwise assume 256. */
static uint32_t alignment(int64_t count, int64_t stride, int64_t outer, int64_t outer_stride, size_t es)
{
    uint32_t a = 64;
    const int64_t offs[2] = {count > 1 ? stride * (int64_t)es : 0, outer > 1 ? outer_stride * (int64_t)es : 0};
    for (int k = 0; k < 2; k++)
        while (offs[k] && offs[k] % a) a /= 2;
    return a;
}

void lz_cu_matmul_unload(lz_cu_matmul *m)
{
    loaded *d = m->loaded;
    if (!d) return;
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    free(d);
    m->loaded = NULL;
}

const char *lz_cu_matmul_load(lz_cu_matmul *m, lz_cu_instr *st)
{
    if (m->count > INT32_MAX) return "cuda: a matmul batch of more than 2^31 products";
    loaded *d = calloc(1, sizeof *d);
    if (!d) return "cuda: out of host memory";
    m->loaded = d;
    const cudaDataType in = m->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        !m->bf16 && lz_cu.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = cublasLtMatmulDescCreate(&d->op, compute, CUDA_R_32F);
    const cublasOperation_t ta = m->tb ? CUBLAS_OP_T : CUBLAS_OP_N, tb = m->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    /* cuBLASLt's A: lazyc's b, stored [K, N] row-major = [N, K] column-major (or [N, K] row-major when tb) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(&d->a, in, m->tb ? m->K : m->N, m->tb ? m->N : m->K, m->count, m->stride_b);
    /* cuBLASLt's B: lazyc's a, stored [M, K] row-major = [K, M] column-major (or [K, M] when ta) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = layout(&d->b, in, m->ta ? m->M : m->K, m->ta ? m->K : m->M, m->count, m->stride_a);
    if (s == CUBLAS_STATUS_SUCCESS) s = layout(&d->c, CUDA_R_32F, m->N, m->M, m->count, m->stride_c);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail("descriptors", s);
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = WORKSPACE;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    s = cublasLtMatmulPreferenceCreate(&pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const size_t es = m->bf16 ? 2 : 4;
    const uint32_t align[4] = {alignment(m->count, m->stride_b, m->outer, m->outer_b, es),
                               alignment(m->count, m->stride_a, m->outer, m->outer_a, es),
                               alignment(m->count, m->stride_c, m->outer, m->outer_c, 4),
                               alignment(m->count, m->stride_c, m->outer, m->outer_c, 4)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int k = 0; k < 4 && s == CUBLAS_STATUS_SUCCESS; k++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, which[k], &align[k], sizeof align[k]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)lz_cu.lt, d->op, d->a, d->b, d->c, d->c, pref, 1,
                                           &result, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || !found)
        return lz_cu_msg("cuda: cuBLASLt has no algorithm for a %s product M %lld N %lld K %lld (batch %lld)%s%s",
                         m->bf16 ? "bf16" : "float32", (long long)m->M, (long long)m->N, (long long)m->K,
                         (long long)m->count, s != CUBLAS_STATUS_SUCCESS ? ": " : "",
                         s != CUBLAS_STATUS_SUCCESS ? status_text(s) : "");
    d->algo = result.algo;
    m->workspace_bytes = result.workspaceSize;
    m->workspace = (lz_cu_ref){LZ_CU_REF_SCRATCH, m->workspace_bytes ? lz_cu_step_take(st, m->workspace_bytes) : 0};
    return NULL;
}

const char *lz_cu_matmul_run(const lz_cu_matmul *m, void *const *ptrs, void *scratch, cudaStream_t s)
{
    const loaded *d = m->loaded;
    const float one = 1.0f, zero = 0.0f;
    const size_t es = m->bf16 ? 2 : 4;
    const char *a = lz_cu_addr(m->a, ptrs, scratch), *b = lz_cu_addr(m->b, ptrs, scratch);
    char *c = lz_cu_addr(m->c, ptrs, scratch);
    void *ws = m->workspace_bytes ? lz_cu_addr(m->workspace, ptrs, scratch) : NULL;
    for (int64_t o = 0; o < m->outer; o++) {
        const char *ao = a + (size_t)(o * m->outer_a) * es, *bo = b + (size_t)(o * m->outer_b) * es;
        char *co = c + (size_t)(o * m->outer_c) * 4;
        cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)lz_cu.lt, d->op, &one, bo, d->a, ao, d->b, &zero, co,
                                           d->c, co, d->c, &d->algo, ws, m->workspace_bytes, s);
        if (st != CUBLAS_STATUS_SUCCESS) return lt_fail("matmul", st);
    }
    return NULL;
}
