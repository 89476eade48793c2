/* Expands read only by element-wise steps (src/compile/fold_expand.c):
 * the readers broadcast the expand's source themselves, so the gradient of
 * a sum runs no expand kernel; an expand that a matmul reads, or that the
 * caller holds, still runs and gives the expanded values. Kernels are
 * counted by name with the kernel profile, fusion on and off. */
#include <stdlib.h>
#include <string.h>

#include "compile/program.h"
#include "testlib.h"

/* grad of sum(x * w) with respect to x is expand(1) * w = w */
static void check_sum_gradient(int fusion)
{
    const int64_t shape[2] = {4, 5};
    lz_fusion_set(fusion);
    lz_tensor *x = lz_test_rand(11, -1, 1, 2, shape), *w = lz_test_rand(12, -1, 1, 2, shape);
    lz_requires_grad(x, 1);
    lz_tensor *xw = lz_mul(x, w), *loss = lz_sum(xw);
    CHECK(lz_backward(loss) == 0);
    lz_free(xw);
    lz_profile_reset();
    lz_mark_step();
    lz_wait();
    float *gx = lz_test_read(lz_grad(x)), *hw = lz_test_read(w);
    CHECK(gx && hw);
    CHECK(gx && hw && !memcmp(gx, hw, sizeof(float) * 20));
    printf("fusion %d: expand kernels in sum's gradient: %lld\n", fusion, (long long)lz_test_kernel_calls("expand"));
    CHECK_EQ_I(lz_test_kernel_calls("expand"), 0);
    free(gx);
    free(hw);
    lz_free(loss);
    lz_free(w);
    lz_free(x);
}

/* an expand a matmul reads, and one the caller holds, keep their kernel */
static void check_kept_expands(void)
{
    const int64_t row[2] = {1, 3}, wide[2] = {4, 3}, ws[2] = {3, 2};
    lz_tensor *b = lz_test_rand(13, -1, 1, 2, row), *m = lz_test_rand(14, -1, 1, 2, ws);
    float *hb = lz_test_read(b), *hm = lz_test_read(m);
    lz_tensor *held = lz_expand(b, 2, wide);       /* returned to the caller */
    lz_tensor *e = lz_expand(b, 2, wide), *y = lz_matmul(e, m);
    lz_free(e);
    lz_profile_reset();
    lz_mark_step();
    lz_wait();
    CHECK_EQ_I(lz_test_kernel_calls("expand"), 2);
    float *hh = lz_test_read(held), *hy = lz_test_read(y);
    CHECK(hb && hm && hh && hy);
    int ok = hb && hm && hh && hy;
    for (int r = 0; ok && r < 4; r++) {
        for (int c = 0; c < 3; c++) ok = ok && hh[r * 3 + c] == hb[c];
        for (int j = 0; j < 2; j++) {
            float want = 0;
            for (int c = 0; c < 3; c++) want += hb[c] * hm[c * 2 + j];
            ok = ok && hy[r * 2 + j] > want - 1e-5f && hy[r * 2 + j] < want + 1e-5f;
        }
    }
    CHECK(ok);
    free(hb);
    free(hm);
    free(hh);
    free(hy);
    lz_free(y);
    lz_free(held);
    lz_free(m);
    lz_free(b);
}

int main(void)
{
    lz_profile_enable(1);
    check_sum_gradient(1);
    check_sum_gradient(0);
    lz_fusion_set(-1);
    check_kept_expands();
    lz_profile_enable(0);
    lz_shutdown();
    return lz_test_done();
}
