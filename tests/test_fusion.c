/* Element-wise fusion (compile/fuse.c, backends/cpu/k_fused.c): the same
 * training steps and op chains run with fusion on and off give bitwise the
 * same values (the fused kernel runs the element-wise kernel's own row
 * functions), in fewer kernels, still one execution per step. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "compile/program.h"

#define MAX_OUT 16
#define STEPS 3

typedef struct run {
    int n;                       /* values recorded */
    float *vals[MAX_OUT * STEPS];
    int64_t numel[MAX_OUT * STEPS];
    int64_t kernels[STEPS], executions[STEPS];
    int64_t hardtanh_kernels;    /* forward and gradient, all steps (lz_profile) */
} run;

static void record(run *r, lz_tensor *t)
{
    CHECK(r->n < MAX_OUT * STEPS);
    if (r->n >= MAX_OUT * STEPS) return;
    r->numel[r->n] = lz_numel(t);
    r->vals[r->n++] = lz_test_read(t);
}

static void run_free(run *r)
{
    for (int i = 0; i < r->n; i++) free(r->vals[i]);
    memset(r, 0, sizeof *r);
}

static void compare(const run *on, const run *off, const char *what)
{
    CHECK_EQ_I(on->n, off->n);
    for (int i = 0; i < on->n && i < off->n; i++) {
        CHECK(on->vals[i] && off->vals[i]);
        if (!on->vals[i] || !off->vals[i]) continue;
        int same = on->numel[i] == off->numel[i] &&
                   memcmp(on->vals[i], off->vals[i], sizeof(float) * (size_t)on->numel[i]) == 0;
        if (!same) fprintf(stderr, "%s: value %d differs with fusion on and off\n", what, i);
        CHECK(same);
    }
    for (int s = 0; s < STEPS; s++) {
        CHECK_EQ_I(on->executions[s], 1);
        CHECK_EQ_I(off->executions[s], 1);
        CHECK(on->kernels[s] < off->kernels[s]);
    }
    fprintf(stderr, "%s: %lld kernels per step fused, %lld unfused\n", what,
            (long long)on->kernels[STEPS - 1], (long long)off->kernels[STEPS - 1]);
}

/* the barrier of step s, and its kernels and executions */
static void end_step(run *r, int s)
{
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics m = lz_metrics_get();
    r->kernels[s] = m.kernels;
    r->executions[s] = m.executions;
}

static lz_tensor *param(unsigned seed, float scale, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, -scale, scale, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

static void train(run *r, lz_tensor **params, int n, lz_tensor *(*loss_fn)(lz_tensor **))
{
    lz_sgd *opt = lz_sgd_new(params, n, (lz_sgd_opts){ .lr = 0.05f, .momentum = 0.9f,
                                                       .weight_decay = 1e-3f });
    CHECK(opt != NULL);
    lz_mark_step();
    lz_wait();
    for (int s = 0; s < STEPS && opt; s++) {
        lz_metrics_reset();
        lz_scope_begin();
        lz_sgd_zero_grad(opt);
        lz_tensor *loss = loss_fn(params);
        CHECK(loss && lz_backward(loss) == 0 && lz_sgd_step(opt) == 0);
        lz_keep(loss);
        lz_scope_end();
        end_step(r, s);
        record(r, loss);
        lz_free(loss);
        for (int i = 0; i < n; i++) record(r, params[i]);
    }
    lz_sgd_free(opt);
    for (int i = 0; i < n; i++) lz_free(params[i]);
}

/* ---- an MLP: bias adds, gelu and relu with their gradients, SGD --------- */

static lz_tensor *mlp_x, *mlp_y;

static lz_tensor *mlp_loss(lz_tensor **p)
{
    lz_tensor *h = lz_gelu(lz_add(lz_matmul(mlp_x, p[0]), p[1]));
    lz_tensor *h2 = lz_relu(lz_add(lz_matmul(h, p[2]), p[3]));
    return lz_cross_entropy(lz_add(lz_matmul(h2, p[4]), p[5]), mlp_y);
}

static void mlp_run(run *r)
{
    int64_t xs[2] = { 32, 64 }, ys[1] = { 32 };
    int64_t w1[2] = { 64, 128 }, b1[1] = { 128 }, w2[2] = { 128, 96 }, b2[1] = { 96 };
    int64_t w3[2] = { 96, 10 }, b3[1] = { 10 };
    mlp_x = lz_test_rand(1, -1, 1, 2, xs);
    int64_t labels[32];
    for (int i = 0; i < 32; i++) labels[i] = (i * 7) % 10;
    mlp_y = lz_from_host(labels, LZ_I64, 1, ys);
    lz_tensor *p[6] = { param(2, 0.2f, 2, w1), param(3, 0.1f, 1, b1), param(4, 0.2f, 2, w2),
                        param(5, 0.1f, 1, b2), param(6, 0.2f, 2, w3), param(7, 0.1f, 1, b3) };
    train(r, p, 6, mlp_loss);
    lz_free(mlp_x);
    lz_free(mlp_y);
}

/* ---- conv + batch norm + relu, then a per-channel scale ----------------- */

static lz_tensor *cnn_x, *cnn_rm, *cnn_rv;

static lz_tensor *cnn_loss(lz_tensor **p)
{
    lz_tensor *c = lz_conv2d(cnn_x, p[0], p[1], (lz_conv2d_opts){ .padding = { 1, 1 } });
    lz_tensor *b = lz_relu(lz_batch_norm(c, p[2], p[3], cnn_rm, cnn_rv, 1, 0.1f, 1e-5f));
    /* a per-channel scale [C, 1, 1] and a sigmoid: broadcast operands */
    lz_tensor *y = lz_sigmoid(lz_mul(b, p[4]));
    return lz_mean(lz_mul(y, y));
}

/* relu6 and its gradient fold into the batch norm's kernels
   (compile/fuse_bn_act.c); a batch norm whose output something besides its
   ReLU reads must not fold */
static lz_tensor *cnn6_loss(lz_tensor **p)
{
    lz_tensor *c = lz_conv2d(cnn_x, p[0], p[1], (lz_conv2d_opts){ .padding = { 1, 1 } });
    lz_tensor *b = lz_relu6(lz_batch_norm(c, p[2], p[3], cnn_rm, cnn_rv, 1, 0.1f, 1e-5f));
    lz_tensor *n2 = lz_batch_norm(lz_mul(b, p[4]), NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f);
    lz_tensor *y = lz_add(lz_relu(n2), n2);
    return lz_mean(lz_mul(y, y));
}

/* The ReLU's gradient reads the gradient of a mean over the image: a
   broadcast operand once the mean's expand is folded away
   (compile/fold_expand.c). It must stay out of the batch norm's kernels,
   which read their operands whole (mnasnet's last block). */
static lz_tensor *cnn_mean_loss(lz_tensor **p)
{
    lz_tensor *c = lz_conv2d(cnn_x, p[0], p[1], (lz_conv2d_opts){ .padding = { 1, 1 } });
    lz_tensor *b = lz_relu(lz_batch_norm(c, p[2], p[3], cnn_rm, cnn_rv, 1, 0.1f, 1e-5f));
    lz_tensor *m = lz_mean_axes(b, 2, (const int[]){ 2, 3 }, 0);
    lz_tensor *y = lz_mul(m, lz_reshape(p[4], 1, (const int64_t[]){ 8 }));
    return lz_mean(lz_mul(y, y));
}

static lz_tensor *(*cnn_loss_fn)(lz_tensor **) = cnn_loss;

static void cnn_run(run *r)
{
    int64_t xs[4] = { 4, 3, 12, 12 }, ws[4] = { 8, 3, 3, 3 }, cs[1] = { 8 }, ss[3] = { 8, 1, 1 };
    cnn_x = lz_test_rand(11, -1, 1, 4, xs);
    float zeros[8] = { 0 }, ones[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    cnn_rm = lz_from_host(zeros, LZ_F32, 1, cs);
    cnn_rv = lz_from_host(ones, LZ_F32, 1, cs);
    lz_tensor *p[5] = { param(12, 0.3f, 4, ws), param(13, 0.1f, 1, cs), param(14, 1.0f, 1, cs),
                        param(15, 0.1f, 1, cs), param(16, 1.0f, 3, ss) };
    lz_profile_reset();
    lz_profile_enable(1);
    train(r, p, 5, cnn_loss_fn);
    lz_profile_enable(0);
    r->hardtanh_kernels = lz_test_kernel_calls("hardtanh") + lz_test_kernel_calls("hardtanh_grad");
    record(r, cnn_rm);
    record(r, cnn_rv);
    lz_free(cnn_x);
    lz_free(cnn_rm);
    lz_free(cnn_rv);
}

/* ---- a chain with broadcasts on middle axes and a kept intermediate ----- */

static void chain_run(run *r, int big)
{
    int64_t xs[4] = { 3, 5, 7, 11 }, bs[3] = { 5, 1, 11 }, cs[2] = { 7, 1 };
    if (big) xs[0] = 120;   /* past the kernels' threshold for threads */
    lz_tensor *x = lz_test_rand(21, -2, 2, 4, xs), *b = lz_test_rand(22, 0.5f, 2, 3, bs);
    lz_tensor *c = lz_test_rand(23, -1, 1, 2, cs);
    float two = 2.5f;
    lz_tensor *k = lz_from_host(&two, LZ_F32, 0, NULL);
    for (int s = 0; s < STEPS; s++) {
        lz_metrics_reset();
        lz_scope_begin();
        lz_tensor *mid = lz_add(lz_mul(x, b), c);         /* kept: read by the host */
        lz_tensor *y = lz_tanh(lz_sub(lz_exp(lz_neg(lz_relu(mid))), lz_div(mid, k)));
        lz_tensor *z = lz_maximum(lz_sqrt(lz_mul(y, y)), lz_sigmoid(c));
        lz_keep(mid);
        lz_keep(z);
        lz_scope_end();
        end_step(r, s);
        record(r, mid);
        record(r, z);
        lz_free(mid);
        lz_free(z);
    }
    lz_free(x);
    lz_free(b);
    lz_free(c);
    lz_free(k);
}

/* ---- a chain ending in autocast's cast of its result to bf16 ----------- */

/* a bf16 result, widened exactly (its bits are the top half of a float's) */
static void record_bf16(run *r, lz_tensor *t)
{
    CHECK(r->n < MAX_OUT * STEPS);
    if (r->n >= MAX_OUT * STEPS) return;
    int64_t n = lz_numel(t);
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    float *f = malloc(sizeof *f * (size_t)n);
    CHECK(h && f && lz_to_host(t, h, sizeof *h * (size_t)n) == 0);
    for (int64_t i = 0; h && f && i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&f[i], &u, sizeof u);
    }
    free(h);
    r->numel[r->n] = n;
    r->vals[r->n++] = f;
}

static void chain_cast_run(run *r)
{
    int64_t xs[2] = { 130, 520 }, bs[1] = { 520 };   /* past the threads' threshold */
    lz_tensor *x = lz_test_rand(31, -4, 4, 2, xs), *b = lz_test_rand(32, -1, 1, 1, bs);
    for (int s = 0; s < STEPS; s++) {
        lz_metrics_reset();
        lz_scope_begin();
        lz_tensor *y = lz_cast(lz_gelu(lz_add(x, b)), LZ_BF16);
        lz_keep(y);
        lz_scope_end();
        end_step(r, s);
        record_bf16(r, y);
        lz_free(y);
    }
    lz_free(x);
    lz_free(b);
}

/* The backward pass's shape of it: a reduction reads the chain's result
   (a bias's gradient) before the product's cast of it in the step's
   order. The cut walks the newest live tensor first, so the sum, made
   last, comes first. */
static void chain_sum_cast_run(run *r)
{
    int64_t xs[2] = { 130, 520 }, bs[1] = { 520 };
    lz_tensor *x = lz_test_rand(33, -4, 4, 2, xs), *b = lz_test_rand(34, -1, 1, 1, bs);
    for (int s = 0; s < STEPS; s++) {
        lz_metrics_reset();
        lz_scope_begin();
        lz_tensor *y = lz_gelu(lz_add(x, b));
        int axes[1] = {0};
        lz_tensor *c = lz_cast(y, LZ_BF16);
        lz_tensor *total = lz_sum_axes(y, 1, axes, 0);
        lz_keep(total);
        lz_keep(c);
        lz_scope_end();
        end_step(r, s);
        record(r, total);
        record_bf16(r, c);
        lz_free(total);
        lz_free(c);
    }
    lz_free(x);
    lz_free(b);
}

/* Autocast's cast of a permute's result: the permute writes bf16
   (compile/fold_casts.c). Heads split as attention does (rows of 64 move
   whole), the last two axes swapped (tiles), and the contiguous axis
   moved to the front (tiles, the other axes their batch). */
static void permute_cast_run(run *r)
{
    int64_t xs[4] = { 4, 65, 6, 64 };
    static const int heads[4] = {0, 2, 1, 3}, flip[4] = {0, 1, 3, 2}, mix[4] = {3, 0, 2, 1};
    lz_tensor *x = lz_test_rand(35, -3, 3, 4, xs);
    for (int s = 0; s < STEPS; s++) {
        lz_metrics_reset();
        lz_scope_begin();
        lz_tensor *a = lz_cast(lz_permute(x, heads), LZ_BF16);
        lz_tensor *b = lz_cast(lz_permute(x, flip), LZ_BF16);
        lz_tensor *c = lz_cast(lz_permute(x, mix), LZ_BF16);
        /* heads merged back (a reshape between) for a product, which
           reads the bf16 values; here a widening stands for it */
        int64_t merged[3] = {4, 6, 65 * 64};
        lz_tensor *d = lz_cast(lz_cast(lz_reshape(lz_permute(x, heads), 3, merged), LZ_BF16),
                               LZ_F32);
        lz_keep(a); lz_keep(b); lz_keep(c); lz_keep(d);
        lz_scope_end();
        end_step(r, s);
        record_bf16(r, a); record_bf16(r, b); record_bf16(r, c); record(r, d);
        lz_free(a); lz_free(b); lz_free(c); lz_free(d);
    }
    lz_free(x);
}

static void chain_small(run *r) { chain_run(r, 0); }
static void chain_big(run *r) { chain_run(r, 1); }

/* hardtanh kernels of both()'s last runs: fusion on, fusion off */
static int64_t last_hardtanh_on, last_hardtanh_off;
/* kernels of the last step of both()'s last run with fusion on */
static int64_t last_kernels_on;

/* Runs body with fusion on and off: a fresh library each time, so no
   executable compiled under one setting serves the other. */
static void both(void (*body)(run *), const char *what)
{
    run on = {0}, off = {0};
    lz_fusion_set(1);
    body(&on);
    lz_shutdown();
    lz_fusion_set(0);
    body(&off);
    lz_shutdown();
    compare(&on, &off, what);
    last_hardtanh_on = on.hardtanh_kernels;
    last_hardtanh_off = off.hardtanh_kernels;
    last_kernels_on = on.kernels[STEPS - 1];
    run_free(&on);
    run_free(&off);
    lz_fusion_set(-1);
}

int main(void)
{
    both(mlp_run, "mlp sgd step");
    both(cnn_run, "conv+bn+relu sgd step");
    cnn_loss_fn = cnn6_loss;
    both(cnn_run, "conv+bn+relu6, bn read twice, sgd step");
    /* relu6 and its gradient ran inside the batch norm's kernels */
    CHECK_EQ_I(last_hardtanh_on, 0);
    CHECK_EQ_I(last_hardtanh_off, 2 * STEPS);
    cnn_loss_fn = cnn_mean_loss;
    both(cnn_run, "conv+bn+relu, mean over the image, sgd step");
    both(chain_small, "broadcast chain");
    both(chain_big, "broadcast chain (threaded)");
    /* the cast joins the chain: one kernel, the float32 gelu never stored */
    both(chain_cast_run, "bias, gelu and a cast to bf16");
    CHECK_EQ_I(last_kernels_on, 1);
    /* the cast moves up to the chain and joins it; the sum runs after:
       two kernels, where the cast alone would be a third */
    both(chain_sum_cast_run, "bias and gelu read by a sum, then cast to bf16");
    CHECK_EQ_I(last_kernels_on, 2);
    /* each cast written by its permute: three kernels, not six, and the
       merged heads' permute and widening, not those and the cast */
    both(permute_cast_run, "permutes cast to bf16");
    CHECK_EQ_I(last_kernels_on, 5);
    return lz_test_done();
}
