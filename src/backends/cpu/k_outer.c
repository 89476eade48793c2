/* bf16 products with a small inner dimension and a large result: the
 * weight gradient of a linear layer over a small batch (alexnet's and
 * vgg16's classifier: [4096, 9216] and [4096, 25088] over 8 rows). They
 * are outer products, whose cost is writing the result, and oneDNN's AMX
 * matmul writes them slowly (K = 8 fills a quarter of a tile's depth).
 * Here: rows of the result in blocks, b's 16 columns of its K rows
 * widened once per block, and streaming stores, which skip reading each
 * line before writing it (the optimizer's update reads the result back
 * from memory whatever the stores). Figures: docs/performance.md, "Outer
 * products".
 *
 * c[m, n] = sum over k of a(m, k) b[k, n], the sum in k order (fused
 * multiply-adds of exact bf16 products), the same on any number of
 * threads. AVX-512 only: every CPU with native bf16 products has it. */
#include <immintrin.h>

#include "backends/cpu/k_outer.h"
#include "base/bf16.h"

/* up to 8 rows of b: from 16 on oneDNN is as fast (docs/performance.md,
   "Outer products") */
#define OUTER_MAX_K 8
#define OUTER_MIN_BYTES ((int64_t)32 << 20)
#define ROWS 8   /* rows of c that share b's widened columns */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

int lz_cpu_outer_fits(int64_t M, int64_t N, int64_t K, int tb)
{
    return __builtin_cpu_supports("avx512f") && !tb && K >= 1 && K <= OUTER_MAX_K &&
           M * N * (int64_t)sizeof(float) >= OUTER_MIN_BYTES;
}

#define AVX512 __attribute__((target("avx512f")))

/* 16 bf16 values widened (exactly) */
static inline AVX512 __m512 load_bf16(const uint16_t *p)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* c[m, n] with plain stores */
static float element(const float *am, int64_t K, const uint16_t *b, int64_t N, int64_t n)
{
    float acc = 0;
    for (int64_t k = 0; k < K; k++) acc = __builtin_fmaf(am[k], lz_bf16_to_f32(b[k * N + n]), acc);
    return acc;
}

/* Rows [0, nr) of c from c0; am: each row's K factors, OUTER_MAX_K apart.
   Where a row is whole 64-byte lines, all rows stream the same columns
   (from the first line boundary on); else every store is plain. */
static AVX512 void outer_rows(const float *am, int64_t nr, int64_t K, const uint16_t *b,
                              int64_t N, float *c0)
{
    int64_t head = 0;
    while (head < N && ((uintptr_t)(c0 + head) & 63)) head++;
    const int streams = ((N * (int64_t)sizeof(float)) & 63) == 0;
    const int64_t body = streams ? head + (N - head) / 16 * 16 : head;
    for (int64_t r = 0; r < nr; r++) {
        float *row = c0 + r * N;
        for (int64_t n = 0; n < (streams ? head : N); n++) row[n] = element(am + r * OUTER_MAX_K, K, b, N, n);
        for (int64_t n = body; streams && n < N; n++) row[n] = element(am + r * OUTER_MAX_K, K, b, N, n);
    }
    __m512 bv[OUTER_MAX_K];
    for (int64_t n = head; n < body; n += 16) {
        for (int64_t k = 0; k < K; k++) bv[k] = load_bf16(b + k * N + n);
        for (int64_t r = 0; r < nr; r++) {
            const float *a = am + r * OUTER_MAX_K;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k++) acc = _mm512_fmadd_ps(_mm512_set1_ps(a[k]), bv[k], acc);
            _mm512_stream_ps(c0 + r * N + n, acc);
        }
    }
}

static AVX512 void outer(const uint16_t *a, int ta, const uint16_t *b, float *c, int64_t M,
                         int64_t N, int64_t K)
{
    const int64_t blocks = (M + ROWS - 1) / ROWS;
    #pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        const int64_t m0 = blk * ROWS, nr = M - m0 < ROWS ? M - m0 : ROWS;
        float am[ROWS * OUTER_MAX_K];
        for (int64_t r = 0; r < nr; r++)
            for (int64_t k = 0; k < K; k++)
                am[r * OUTER_MAX_K + k] = lz_bf16_to_f32(a[ta ? k * M + m0 + r : (m0 + r) * K + k]);
        outer_rows(am, nr, K, b, N, c + m0 * N);
    }
    _mm_sfence();   /* the streamed lines are visible before the result is read */
}

void lz_cpu_outer_bf16(const uint16_t *a, int ta, const uint16_t *b, float *c, int64_t M,
                       int64_t N, int64_t K)
{
    outer(a, ta, b, c, M, N, K);
}

#else

int lz_cpu_outer_fits(int64_t M, int64_t N, int64_t K, int tb)
{
    (void)M; (void)N; (void)K; (void)tb;
    return 0;
}

void lz_cpu_outer_bf16(const uint16_t *a, int ta, const uint16_t *b, float *c, int64_t M,
                       int64_t N, int64_t K)
{
    (void)a; (void)ta; (void)b; (void)c; (void)M; (void)N; (void)K;
}

#endif
