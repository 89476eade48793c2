/* bf16 outer products (k_outer.c): the products it takes (at most 8 rows
 * of b, b not transposed, a result of 32 MiB or more, AVX-512), its values
 * bit for bit a float32 sum in k order of the exact bf16 products, with a
 * transposed a or not, a row of whole 64-byte lines or not (plain stores
 * around the streamed columns), a result that does not start on a line;
 * and through the public API: a linear layer's weight gradient over 8
 * rows under autocast, which takes this path where bf16 is native (the
 * same bits as that sum) and the widened float32 product elsewhere (to
 * 1e-6). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/k_outer.h"
#include "base/bf16.h"
#include "testlib.h"

static uint16_t *bf16_rand(int64_t n, unsigned seed)
{
    float *f = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    lz_test_fill_uniform(f, n, seed, -1, 1);
    for (int64_t i = 0; i < n; i++) h[i] = lz_f32_to_bf16(f[i]);
    free(f);
    return h;
}

/* c[m, n] as the kernel defines it: in k order, each exact product added
   with one rounding */
static float reference(const uint16_t *a, int ta, const uint16_t *b, int64_t M, int64_t N,
                       int64_t K, int64_t m, int64_t n)
{
    float acc = 0;
    for (int64_t k = 0; k < K; k++)
        acc += lz_bf16_to_f32(a[ta ? k * M + m : m * K + k]) * lz_bf16_to_f32(b[k * N + n]);
    return acc;
}

static void direct(int64_t M, int64_t N, int64_t K, int ta, int offset, const char *what)
{
    uint16_t *a = bf16_rand(M * K, 1), *b = bf16_rand(K * N, 2);
    float *block = aligned_alloc(64, (sizeof(float) * (size_t)(M * N + 16) + 63) / 64 * 64);
    float *c = block + offset;
    lz_cpu_outer_bf16(a, ta, b, c, M, N, K);
    int64_t differ = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float r = reference(a, ta, b, M, N, K, m, n);
            differ += memcmp(&r, &c[m * N + n], sizeof r) != 0;
        }
    printf("%-44s %lld of %lld values differ from the sum in k order\n", what, (long long)differ,
           (long long)(M * N));
    CHECK_EQ_I(differ, 0);
    free(block);
    free(a);
    free(b);
}

/* y = x w^T over 8 rows, loss sum(y * r): dw = bf16(r)^T bf16(x), [O, I] */
static void through_api(void)
{
    const int64_t B = 8, I = 4096, O = 2048;
    const int64_t xs[2] = {B, I}, ws[2] = {O, I}, ys[2] = {B, O};
    lz_tensor *x = lz_test_rand(11, -1, 1, 2, xs), *w = lz_test_rand(12, -0.1f, 0.1f, 2, ws);
    lz_tensor *r = lz_test_rand(13, -1, 1, 2, ys);
    lz_requires_grad(w, 1);
    lz_scope_begin();
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *y = lz_linear(x, w, NULL);
    CHECK(lz_autocast_end() == 0);
    lz_tensor *loss = lz_keep(lz_sum(lz_mul(y, r)));
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    float *got = lz_test_read(lz_grad(w)), *xv = lz_test_read(x), *rv = lz_test_read(r);
    CHECK(got && xv && rv);
    const int native = lz_cpu_bf16_way() == LZ_BF16_NATIVE;
    int64_t differ = 0;
    double worst = 0;
    for (int64_t o = 0; got && xv && rv && o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            float acc = 0;
            for (int64_t n = 0; n < B; n++)
                acc += lz_bf16_to_f32(lz_f32_to_bf16(rv[n * O + o])) *
                       lz_bf16_to_f32(lz_f32_to_bf16(xv[n * I + i]));
            const float g = got[o * I + i];
            differ += memcmp(&acc, &g, sizeof g) != 0;
            const double e = fabs((double)g - acc) / (fabs(acc) + 1e-3);
            if (e > worst) worst = e;
        }
    printf("linear's weight gradient under autocast    %s: %lld values differ from the sum in "
           "k order, worst %.1e\n", native ? "native bf16" : "widened", (long long)differ, worst);
    if (native) CHECK_EQ_I(differ, 0);
    CHECK(worst <= 1e-6);
    free(got);
    free(xv);
    free(rv);
    lz_free(loss);
    lz_free(r);
    lz_free(w);
    lz_free(x);
}

int main(void)
{
    /* the bf16 machinery itself: every product bf16, whatever this CPU runs
       faster (which products autocast keeps float32: test_product_choice) */
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);
    /* the products it takes */
    const int avx512 = __builtin_cpu_supports("avx512f") != 0;
    CHECK_EQ_I(lz_cpu_outer_fits(4096, 9216, 8, 0), avx512);
    CHECK_EQ_I(lz_cpu_outer_fits(4096, 9216, 9, 0), 0);     /* oneDNN as fast from 16 */
    CHECK_EQ_I(lz_cpu_outer_fits(4096, 9216, 8, 1), 0);     /* b transposed */
    CHECK_EQ_I(lz_cpu_outer_fits(1000, 4096, 8, 0), 0);     /* 16 MB: stays in cache */
    if (!avx512) {
        fprintf(stderr, "test_outer: NOT CHECKED: the kernel's values (no AVX-512 here)\n");
    } else {
        direct(1024, 8192, 8, 1, 0, "[1024, 8192] over 8, a transposed");
        direct(1000, 8200, 5, 0, 0, "[1000, 8200] over 5 (rows not whole lines)");
        direct(513, 4096, 3, 1, 4, "[513, 4096] over 3, c not on a line");
        direct(16, 64, 1, 0, 0, "[16, 64] over 1");
    }
    through_api();
    lz_shutdown();
    return lz_test_done();
}
