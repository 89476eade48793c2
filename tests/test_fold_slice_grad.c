/* Slice gradients that tile an axis (src/compile/fold_slice_grad.c): the
 * gradient of x cut into q, k, v along its last axis is one cat of their
 * gradients, with no slice-gradient kernel; slices that leave a gap or
 * overlap keep their kernels. Gradients are checked element by element
 * against the definition: each slice's gradient is its weight. */
#include <stdlib.h>

#include "testlib.h"

static const int64_t xs[3] = {2, 3, 6};

/* grad of sum_i sum(slice_i(x) * w_i) for slices [lo[i], hi[i]) of axis 2;
   returns how many elements differ from the definition */
static int check(int n, const int64_t *lo, const int64_t *hi, int64_t want_slice_grads,
                 const char *what)
{
    lz_tensor *x = lz_test_rand(21, -1, 1, 3, xs);
    lz_requires_grad(x, 1);
    lz_tensor *w[4] = {NULL}, *loss = NULL;
    float *hw[4] = {NULL};
    for (int i = 0; i < n; i++) {
        const int64_t ws[3] = {2, 3, hi[i] - lo[i]};
        w[i] = lz_test_rand(30 + (unsigned)i, -1, 1, 3, ws);
        hw[i] = lz_test_read(w[i]);
    }
    /* every temporary, forward and backward, goes before the barrier */
    lz_scope_begin();
    for (int i = 0; i < n; i++) {
        lz_tensor *part = lz_sum(lz_mul(lz_slice(x, 2, lo[i], hi[i]), w[i]));
        loss = loss ? lz_add(loss, part) : part;
    }
    CHECK(lz_backward(loss) == 0);
    lz_keep(loss);
    lz_scope_end();
    lz_profile_reset();
    lz_mark_step();
    lz_wait();
    const int64_t sg = lz_test_kernel_calls("slice_grad");
    printf("%-34s slice_grad kernels %lld, cat kernels %lld\n", what, (long long)sg,
           (long long)lz_test_kernel_calls("cat"));
    CHECK_EQ_I(sg, want_slice_grads);
    float *g = lz_test_read(lz_grad(x));
    int bad = g == NULL;
    for (int64_t e = 0; g && e < 36; e++) {
        const int64_t row = e / 6, col = e % 6;
        float want = 0;
        for (int i = 0; i < n; i++)
            if (col >= lo[i] && col < hi[i]) want += hw[i][row * (hi[i] - lo[i]) + col - lo[i]];
        bad += g[e] != want;
    }
    CHECK_EQ_I(bad, 0);
    free(g);
    for (int i = 0; i < n; i++) {
        free(hw[i]);
        lz_free(w[i]);
    }
    lz_free(loss);
    lz_free(x);
    return bad;
}

int main(void)
{
    lz_profile_enable(1);
    check(3, (const int64_t[]){0, 2, 4}, (const int64_t[]){2, 4, 6}, 0, "q, k, v tiling the axis");
    check(3, (const int64_t[]){4, 0, 1}, (const int64_t[]){6, 1, 4}, 0, "uneven, recorded out of order");
    check(2, (const int64_t[]){0, 4}, (const int64_t[]){2, 6}, 2, "a gap: kept");
    check(2, (const int64_t[]){0, 2}, (const int64_t[]){4, 6}, 2, "overlapping: kept");
    lz_profile_enable(0);
    lz_shutdown();
    return lz_test_done();
}
