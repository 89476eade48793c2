/* Autocast (lz_autocast_begin(LZ_BF16)): which ops see bf16 (the products
 * forward and backward, counted by the bf16 kernels; their results equal
 * the float32 product of bf16-rounded operands), which stay float32 (bit
 * for bit what they give outside a region), a parameter cast once however
 * often used, gradients float32, the region kept by a captured step and
 * part of its key, and errors. Under autocast's rule with peaks that favour
 * bf16 (which products the measurement keeps float32: test_product_choice).
 * Runs under DNNL_MAX_CPU_ISA=AVX2 too (test_autocast_avx2), where every
 * product stays float32 and an explicit bf16 operand is widened. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/product_choice.h"
#include "base/switches.h"
#include "testlib.h"
#include "engine/autocast.h"

static int64_t products(void) { return lz_cpu_bf16_matmul_count(0) + lz_cpu_bf16_matmul_count(1) +
                                       lz_cpu_bf16_conv_count(0) + lz_cpu_bf16_conv_count(1); }

static lz_tensor *rounded(lz_tensor *x)   /* x through bf16 and back, no gradient */
{
    lz_tensor *h = lz_cast(x, LZ_BF16), *f = lz_cast(h, LZ_F32);
    lz_free(h);
    return f;
}

typedef lz_tensor *(*prod_fn)(lz_tensor *x, lz_tensor *w);
static lz_tensor *p_matmul(lz_tensor *x, lz_tensor *w) { return lz_matmul(x, w); }
static lz_tensor *p_linear(lz_tensor *x, lz_tensor *w) { return lz_linear(x, w, NULL); }
static lz_tensor *p_conv(lz_tensor *x, lz_tensor *w)
{
    lz_conv2d_opts o = {.padding = {1, 1}};
    return lz_conv2d(x, w, NULL, o);
}
static lz_tensor *p_attention(lz_tensor *x, lz_tensor *w)
{
    return lz_attention(x, w, w, NULL, 0.25f);
}

/* One product in and out of a region: forward and both backward products
   run on bf16 (n_products counted), the result is f32 and equals the f32
   product of the rounded operands; gradients are f32 and near f32's. With
   n_products 0 the product stays float32 (a convolution without native
   bf16): the f32 result itself. */
static void product(const char *name, prod_fn f, int nx, const int64_t *sx, int nw,
                    const int64_t *sw, int n_products)
{
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(1, -1, 1, nx, sx), *w = lz_test_rand(2, -1, 1, nw, sw);
    lz_requires_grad(x, 1);
    lz_requires_grad(w, 1);
    int64_t p0 = products();
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *y = f(x, w);
    CHECK(y && lz_tensor_dtype(y) == LZ_F32);
    lz_tensor *loss = lz_sum(lz_mul(y, y));
    CHECK(lz_autocast_end() == 0);
    CHECK(lz_backward(loss) == 0);
    lz_mark_step();   /* one graph: each product once */
    float *yv = lz_test_read(y);
    lz_tensor *gx = lz_grad(x), *gw = lz_grad(w);
    CHECK(gx && gw && lz_tensor_dtype(gx) == LZ_F32 && lz_tensor_dtype(gw) == LZ_F32);
    float *gxv = lz_test_read(gx), *gwv = lz_test_read(gw);
    int64_t used = products() - p0;
    if (used != n_products) fprintf(stderr, "%s: %lld bf16 products, want %d\n", name, (long long)used, n_products);
    CHECK_EQ_I(used, n_products);
    /* reference: f32 on rounded operands, and plain f32 */
    lz_tensor *xr = rounded(x), *wr = rounded(w);
    lz_tensor *yr = f(xr, wr);
    float *yrv = lz_test_read(yr);
    lz_zero_grad(x);
    lz_zero_grad(w);
    lz_tensor *y32 = f(x, w);
    lz_tensor *l32 = lz_sum(lz_mul(y32, y32));
    CHECK(lz_backward(l32) == 0);
    float *y32v = lz_test_read(y32), *gx32 = lz_test_read(lz_grad(x)), *gw32 = lz_test_read(lz_grad(w));
    int64_t ny = lz_numel(y);
    double e_r = lz_test_rel_err(yv, yrv, ny), e_32 = lz_test_rel_err(yv, y32v, ny);
    fprintf(stderr, "%s: vs rounded f32 %.2e, vs f32 %.2e\n", name, e_r, e_32);
    if (n_products == 0) {
        CHECK(e_32 == 0);
    } else {
        /* bf16 operands, f32 accumulation (attention also rounds the
           probabilities it multiplies by v) */
        CHECK(n_products == 6 || e_r < 1e-5);
        CHECK(e_32 > 1e-5);    /* and not f32 operands */
        CHECK(e_32 < 3e-2);
    }
    CHECK(lz_test_rel_err(gxv, gx32, lz_numel(x)) < 5e-2);
    CHECK(lz_test_rel_err(gwv, gw32, lz_numel(w)) < 5e-2);
    free(yv); free(gxv); free(gwv); free(yrv); free(y32v); free(gx32); free(gw32);
    lz_scope_end();
}

/* ops off the list give the same bits in a region as outside */
static void float32_list(void)
{
    lz_scope_begin();
    int64_t s[2] = {6, 10}, s4[4] = {2, 3, 4, 4};
    lz_tensor *x = lz_test_rand(3, -2, 2, 2, s), *x4 = lz_test_rand(4, -2, 2, 4, s4);
    int64_t ts[1] = {6};
    int64_t tv[6] = {1, 0, 3, 9, 2, 5};
    lz_tensor *t = lz_from_host(tv, LZ_I64, 1, ts);
    lz_tensor *out[2][7];
    int64_t p0 = products();
    for (int r = 0; r < 2; r++) {
        if (r) lz_autocast_begin(LZ_BF16);
        out[r][0] = lz_softmax(x, 1);
        out[r][1] = lz_log_softmax(x, 1);
        out[r][2] = lz_layer_norm(x, 1, NULL, NULL, 1e-5f);
        out[r][3] = lz_cross_entropy(x, t);
        out[r][4] = lz_sum(x);
        out[r][5] = lz_batch_norm(x4, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f);
        out[r][6] = lz_add(lz_exp(x), x);
        if (r) lz_autocast_end();
    }
    for (int k = 0; k < 7; k++) {
        CHECK(lz_tensor_dtype(out[1][k]) == LZ_F32);
        float *a = lz_test_read(out[0][k]), *b = lz_test_read(out[1][k]);
        CHECK(a && b && memcmp(a, b, sizeof(float) * (size_t)lz_numel(out[0][k])) == 0);
        free(a);
        free(b);
    }
    CHECK_EQ_I(products() - p0, 0);
    lz_scope_end();
}

/* A parameter used twice is cast once (and its cast shared by the
   backward products): one cast fewer than two separate parameters. A
   parameter that is data is not cast by a kernel but copied when first
   read (engine/autocast.c): casts and copies count alike. */
static int64_t casts_of(int shared)
{
    lz_autocast_begin(LZ_BF16);   /* a region's end forgets the copies of freed parameters */
    lz_autocast_end();
    const int copies = lz_autocast_copy_count();
    lz_scope_begin();
    int64_t sx[2] = {4, 8}, sw[2] = {5, 8};
    lz_tensor *x = lz_test_rand(5, -1, 1, 2, sx);
    lz_tensor *w1 = lz_test_rand(6, -1, 1, 2, sw), *w2 = shared ? w1 : lz_test_rand(6, -1, 1, 2, sw);
    lz_requires_grad(w1, 1);
    lz_requires_grad(w2, 1);
    lz_mark_step();
    lz_profile_reset();
    lz_autocast_begin(LZ_BF16);
    lz_tensor *loss = lz_sum(lz_mul(lz_linear(x, w1, NULL), lz_linear(x, w2, NULL)));
    lz_autocast_end();
    lz_backward(loss);
    lz_mark_step();
    lz_sync(&loss, 1, 1);
    int64_t n = lz_test_kernel_calls("cast") + lz_autocast_copy_count() - copies;
    lz_scope_end();
    return n;
}

typedef struct mlp { lz_tensor *w; } mlp;

/* in[0]: x; the region is opened inside when ctx says so */
static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    mlp *m = ctx;
    lz_tensor *y = lz_linear(in[0], m->w, NULL);
    out[0] = lz_sum(lz_mul(y, y));
    return out[0] ? 0 : -1;
}

static int step_region(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lz_autocast_begin(LZ_BF16);
    int rc = step(ctx, in, out);
    lz_autocast_end();
    return rc;
}

static int native_bf16(void) { return lz_cpu_bf16_way() == LZ_BF16_NATIVE; }

static void capture(void)
{
    lz_scope_begin();
    int64_t sx[2] = {4, 8}, sw[2] = {5, 8};
    mlp m = {lz_test_rand(7, -1, 1, 2, sw)};
    lz_tensor *x = lz_test_rand(8, -1, 1, 2, sx);
    lz_tensor *xr = rounded(x), *wr = rounded(m.w);
    float want16, want32;
    {
        lz_tensor *y = lz_linear(xr, wr, NULL);
        want16 = lz_item(lz_sum(lz_mul(y, y)));
        y = lz_linear(x, m.w, NULL);
        want32 = lz_item(lz_sum(lz_mul(y, y)));
    }
    CHECK(want16 != want32);
    /* region inside the step: every replay keeps it */
    lz_fn *f = lz_capture(step_region, &m, 1, 1);
    lz_metrics_reset();
    for (int i = 0; i < 3; i++) {
        lz_tensor *o = NULL;
        CHECK(lz_call(f, &x, &o) == 0);
        CHECK_NEAR(lz_item(o), native_bf16() ? want16 : want32, 1e-4 * fabs(want16));
    }
    CHECK(lz_metrics_get().capture_replays >= 1);
    lz_fn_free(f);
    /* region around the call: part of the key (a trace per state) */
    f = lz_capture(step, &m, 1, 1);
    for (int i = 0; i < 6; i++) {
        int on = i % 2;
        if (on) lz_autocast_begin(LZ_BF16);
        lz_tensor *o = NULL;
        CHECK(lz_call(f, &x, &o) == 0);
        if (on) lz_autocast_end();
        float v = lz_item(o);
        CHECK_NEAR(v, on && native_bf16() ? want16 : want32, 1e-4 * fabs(want32));
    }
    lz_fn_free(f);
    lz_scope_end();
}

/* Convolutions autocast keeps float32 where that is faster
   (k_dnnl_conv.c, lz_cpu_conv_f32_faster; without native bf16, every
   one): no bf16 product, the float32 result bit for bit. Where it does
   not, one bf16 product, within bf16's rounding of the float32 result. */
static void conv_under_autocast(const int64_t *sx, const int64_t *sw, int pad, int groups,
                                int stays_f32)
{
    lz_tensor *x = lz_test_rand(21, -1, 1, 4, sx), *w = lz_test_rand(22, -0.2f, 0.2f, 4, sw);
    lz_conv2d_opts o = {.padding = {pad, pad}, .groups = groups};
    lz_tensor *plain = lz_conv2d(x, w, NULL, o);
    float *want = lz_test_read(plain);
    const int64_t p0 = products();
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *y = lz_conv2d(x, w, NULL, o);
    CHECK(lz_autocast_end() == 0);
    CHECK(y && lz_tensor_dtype(y) == LZ_F32);
    float *got = lz_test_read(y);
    const int64_t n = lz_numel(y);
    CHECK_EQ_I(products() - p0, stays_f32 ? 0 : 1);
    if (stays_f32) CHECK(want && got && memcmp(want, got, sizeof(float) * (size_t)n) == 0);
    double worst = 0, scale = 0;
    for (int64_t i = 0; want && got && i < n; i++) {
        worst = fmax(worst, fabs((double)want[i] - got[i]));
        scale = fmax(scale, fabs((double)want[i]));
    }
    CHECK(worst <= 0.02 * scale);
    free(want);
    free(got);
    lz_free(x);
    lz_free(w);
    lz_free(y);
    lz_free(plain);
}

/* A 3x3 convolution that runs by Winograd's algorithm in float32 on a
   plane of 16x16 or more, and a 1x1 one neither of whose channel counts
   fills whole blocks, stay float32; a 1x1 one with one side in whole
   blocks takes bf16 where it is native. Without oneDNN's convolutions
   (LZ_DNNL_CONV=0), or for the 3x3 one without Winograd (LZ_WINOGRAD=0),
   float32 is not the faster way and both take bf16 where it is native.
   With AMX tiles (on channels-last activations) the 3x3 and both 1x1
   ones take bf16, and a depthwise one stays float32 (k_dnnl_conv.c);
   without, the depthwise one takes bf16. */
static void convs_kept_f32(int native)
{
    const int onednn = lz_dnnl_conv_enabled(), amx = lz_cpu_bf16_amx();
    const int64_t wx[4] = {2, 32, 32, 32}, ww[4] = {32, 32, 3, 3};
    conv_under_autocast(wx, ww, 1, 1, !native || (onednn && lz_winograd_enabled() && !amx));
    const int64_t px[4] = {2, 24, 8, 8}, pw[4] = {40, 24, 1, 1};
    conv_under_autocast(px, pw, 0, 1, !native || (onednn && !amx));
    const int64_t bx[4] = {2, 24, 8, 8}, bw[4] = {32, 24, 1, 1};
    conv_under_autocast(bx, bw, 0, 1, !native);
    const int64_t dx[4] = {2, 32, 8, 8}, dw[4] = {32, 1, 3, 3};   /* depthwise */
    conv_under_autocast(dx, dw, 1, 32, !native || (onednn && amx));
}

/* conv -> batch norm -> relu -> conv under autocast: the batch norm
   writes the second convolution's bf16 operand itself, and its gradient
   the first convolution's bf16 incoming gradient (compile/fuse_bn_act.c):
   those casts go with fusion on, and the loss and gradients are bitwise
   those with fusion off, on plain and on channel-blocked layouts. */
typedef struct bn_run { float loss, *gw1, *gbn; int64_t casts; } bn_run;

static bn_run bn_between_convs(int fusion)
{
    lz_fusion_set(fusion);
    int64_t sx[4] = {4, 16, 8, 8}, sw[4] = {16, 16, 3, 3}, sc[1] = {16};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(31, -1, 1, 4, sx), *mix = lz_test_rand(32, -1, 1, 4, sx);
    lz_tensor *w1 = lz_test_rand(33, -0.2f, 0.2f, 4, sw), *w2 = lz_test_rand(34, -0.2f, 0.2f, 4, sw);
    lz_tensor *g = lz_test_rand(35, 0.5f, 1.5f, 1, sc), *b = lz_test_rand(36, -0.5f, 0.5f, 1, sc);
    lz_requires_grad(w1, 1);
    lz_requires_grad(g, 1);
    lz_mark_step();
    lz_wait();
    lz_profile_enable(1);   /* lz_shutdown turns it off */
    lz_profile_reset();
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *h = lz_relu(lz_batch_norm(p_conv(x, w1), g, b, NULL, NULL, 1, 0.1f, 1e-5f));
    lz_tensor *loss = lz_sum(lz_mul(p_conv(h, w2), mix));
    CHECK(lz_autocast_end() == 0);
    CHECK(loss && lz_backward(loss) == 0);
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    bn_run r = {lz_item(loss), lz_test_read(lz_grad(w1)), lz_test_read(lz_grad(g)),
                lz_test_kernel_calls("cast")};
    lz_scope_end();
    lz_shutdown();   /* no executable compiled under one setting serves the other */
    lz_fusion_set(-1);
    return r;
}

static void batch_norm_writes_bf16(void)
{
    for (int blocked = 0; blocked < 2; blocked++) {
        lz_blocked_layouts_set(blocked);
        bn_run on = bn_between_convs(1), off = bn_between_convs(0);
        fprintf(stderr, "batch norm between convs (%s): %lld casts fused, %lld unfused\n",
                blocked ? "blocked" : "plain", (long long)on.casts, (long long)off.casts);
        /* the two in the batch norm's kernels, and the loss gradient's
           into its element-wise chain (compile/fuse.c) */
        CHECK_EQ_I(on.casts, off.casts - 3);
        CHECK(on.loss == off.loss);
        CHECK(on.gw1 && off.gw1 && memcmp(on.gw1, off.gw1, sizeof(float) * 16 * 16 * 9) == 0);
        CHECK(on.gbn && off.gbn && memcmp(on.gbn, off.gbn, sizeof(float) * 16) == 0);
        free(on.gw1); free(on.gbn); free(off.gw1); free(off.gbn);
    }
    lz_blocked_layouts_set(-1);
}

static void errors(void)
{
    CHECK(lz_autocast_end() == -1 && strstr(lz_last_error(), "no autocast region"));
    lz_clear_error();
    CHECK(lz_autocast_begin(LZ_I64) == -1 && strstr(lz_last_error(), "i64"));
    lz_clear_error();
    /* an explicit bf16 operand makes a bf16 product outside a region */
    int64_t s[2] = {3, 3};
    lz_tensor *a = lz_test_rand(9, -1, 1, 2, s), *b = lz_cast(a, LZ_BF16);
    int64_t p0 = products();
    lz_tensor *c = lz_matmul(a, b);
    CHECK(c && lz_tensor_dtype(c) == LZ_F32);
    lz_item(lz_sum(c));
    CHECK_EQ_I(products() - p0, 1);
    /* integer operands are still refused */
    lz_tensor *i = lz_zeros(LZ_I32, 2, s);
    lz_autocast_begin(LZ_BF16);
    CHECK(lz_matmul(i, a) == NULL && strstr(lz_last_error(), "i32"));
    lz_autocast_end();
    lz_clear_error();
}

int main(void)
{
    /* the counts of products, casts and replays are the default
       pipeline's: with LZ_EAGER=1 every op runs alone and captures never
       replay, with LZ_CAPTURE_CHECK=1 every call traces again */
    setenv("LZ_EAGER", "0", 1);
    setenv("LZ_CAPTURE_CHECK", "0", 1);
    lz_profile_enable(1);
    lz_autocast_products_set(LZ_PRODUCTS_RULE);
    lz_cpu_product_peaks_set(100, 200);
    const int native = native_bf16();
    int64_t sx[2] = {16, 24}, sw[2] = {24, 12}, sl[2] = {12, 24};
    product("matmul", p_matmul, 2, sx, 2, sw, native ? 3 : 0);
    product("linear", p_linear, 2, sx, 2, sl, native ? 3 : 0);
    int64_t cx[4] = {2, 16, 8, 8}, cw[4] = {16, 16, 3, 3};
    fprintf(stderr, "bf16 products: %s\n",
            !native ? "widened" : lz_cpu_bf16_amx() ? "native, AMX tiles" : "native");
    product("conv2d", p_conv, 4, cx, 4, cw, native ? 3 : 0);
    int64_t q[4] = {2, 2, 8, 16};
    product("attention", p_attention, 4, q, 4, q, native ? 6 : 0);
    float32_list();
    int64_t one = casts_of(1), two = casts_of(0);
    fprintf(stderr, "casts: shared weight %lld, two weights %lld\n", (long long)one, (long long)two);
    if (native) CHECK_EQ_I(one, two - 1);
    else CHECK(one == 0 && two == 0);   /* float32 products: nothing cast */
    capture();
    convs_kept_f32(native);
    errors();
    if (!native) CHECK_EQ_I(lz_cpu_bf16_matmul_count(1) + lz_cpu_bf16_conv_count(1), 0);
    else {   /* every product on oneDNN's bf16 kernels: none widened */
        CHECK(lz_cpu_bf16_matmul_count(1) > 0 && lz_cpu_bf16_conv_count(1) > 0);
        CHECK_EQ_I(lz_cpu_bf16_matmul_count(0), 0);
        /* but the 3x3 weight gradient on plain layouts (its x is an input of
           the backward's graph; k_dnnl_conv.c: oneDNN's is slow there) */
        CHECK_EQ_I(lz_cpu_bf16_conv_count(0), 1);
        batch_norm_writes_bf16();
    }
    return lz_test_done();
}
