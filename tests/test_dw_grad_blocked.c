/* The depthwise weight gradient on blocked activations (k_conv.c's direct
 * loops, lz_cpu_conv_dw_grad_weight_blocked): called directly on each
 * layout the compiler gives activations (channel blocks of 16 and 8,
 * channels-last, and one operand blocked, the other plain), it gives the
 * plain kernel's values bit for bit, for 3x3 and 5x5 kernels, strides,
 * dilation, a channel count that is no multiple of the lanes, and two
 * outputs a channel. Then through the compiler: in a step under
 * channels-last (LZ_BLOCKED=nhwc), a 5x5 depthwise weight gradient reads
 * its two blocked activations with lazyc's loops, not oneDNN's kernel
 * (which has none for 5x5 and ran them as 16x16-blocked groups), and the
 * step's gradients agree with the plain program's. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "base/switches.h"
#include "testlib.h"
#include "testlib_compile.h"

#define TOL 1e-5

typedef struct dw_case {
    const char *what;
    int64_t N, C, H, W, mult, K;
    int stride, pad, dil;
} dw_case;

static void set4(lz_value *v, const int64_t *shape, int block)
{
    memset(v, 0, sizeof *v);
    v->dtype = LZ_F32;
    v->ndim = 4;
    v->kind = LZ_VALUE_TEMP;
    v->numel = shape[0] * shape[1] * shape[2] * shape[3];
    memcpy(v->shape, shape, sizeof(int64_t) * 4);
    v->nbytes = sizeof(float) * (size_t)v->numel;
    v->block = (uint16_t)block;
}

/* dw of case c with x in block xb and gy in block gb (0 plain, -1 all its
   channels: channels-last), from the plain data x and gy; NULL on error. */
static float *grad_weight(const dw_case *c, const int64_t *ys, const float *x, int xb,
                          const float *gy, int gb)
{
    const int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->C * c->mult, 1, c->K, c->K};
    if (xb < 0) xb = (int)c->C;
    if (gb < 0) gb = (int)ys[1];
    lz_value vals[3];
    set4(&vals[0], xs, xb);
    set4(&vals[1], ys, gb);
    set4(&vals[2], ws, 0);
    float *bx = malloc(vals[0].nbytes), *bg = malloc(vals[1].nbytes), *dw = malloc(vals[2].nbytes);
    int in[2] = {0, 1};
    lz_instr s;
    memset(&s, 0, sizeof s);
    s.op = LZ_OP_CONV2D_GRAD_WEIGHT;
    s.in = in;
    s.n_in = 2;
    s.out = 2;
    s.iattr[0] = s.iattr[1] = c->stride;
    s.iattr[2] = s.iattr[3] = c->pad;
    s.iattr[4] = s.iattr[5] = c->dil;
    s.iattr[6] = c->C;
    lz_program p;
    memset(&p, 0, sizeof p);
    p.n_values = 3;
    p.values = vals;
    const char *err = "out of memory";
    if (bx && bg && dw) {
        if (xb) lz_test_reblock(x, bx, xs, xb, 1);
        else memcpy(bx, x, vals[0].nbytes);
        if (gb) lz_test_reblock(gy, bg, ys, gb, 1);
        else memcpy(bg, gy, vals[1].nbytes);
        void *ptrs[3] = {bx, bg, dw};
        CHECK(lz_cpu_conv_dw_grad_weight_blocked(&p, &s));
        err = lz_cpu_conv_run(&p, &s, ptrs, LZ_CONV_BY_RULE);
    }
    if (err) fprintf(stderr, "%s (x block %d, gy block %d): %s\n", c->what, xb, gb, err);
    CHECK(err == NULL);
    free(bx);
    free(bg);
    if (err) {
        free(dw);
        return NULL;
    }
    return dw;
}

static void check_layouts(const dw_case *c)
{
    const int64_t OH = (c->H + 2 * c->pad - c->dil * (c->K - 1) - 1) / c->stride + 1;
    const int64_t OW = (c->W + 2 * c->pad - c->dil * (c->K - 1) - 1) / c->stride + 1;
    const int64_t ys[4] = {c->N, c->C * c->mult, OH, OW};
    const int64_t nx = c->N * c->C * c->H * c->W, ny = ys[0] * ys[1] * OH * OW;
    const int64_t nw = ys[1] * c->K * c->K;
    float *x = malloc(sizeof(float) * (size_t)nx), *gy = malloc(sizeof(float) * (size_t)ny);
    lz_test_fill_uniform(x, nx, 31, -1, 1);
    lz_test_fill_uniform(gy, ny, 32, -1, 1);
    float *plain = grad_weight(c, ys, x, 0, gy, 0);
    /* blocks the compiler gives (a block divides the channels) */
    const int layouts[][2] = {{16, 16}, {8, 8}, {-1, -1}, {-1, 0}, {0, -1}, {8, 0}};
    int same = 0, tried = 0;
    for (size_t k = 0; plain && k < sizeof layouts / sizeof layouts[0]; k++) {
        const int xb = layouts[k][0], gb = layouts[k][1];
        if ((xb > 0 && c->C % xb) || (gb > 0 && ys[1] % gb)) continue;
        float *got = grad_weight(c, ys, x, xb, gy, gb);
        tried++;
        if (got && !memcmp(got, plain, sizeof(float) * (size_t)nw)) same++;
        else if (got) fprintf(stderr, "%s: x block %d, gy block %d differ from plain\n", c->what, xb, gb);
        free(got);
    }
    printf("%-34s %d of %d layouts bit for bit the plain kernel's\n", c->what, same, tried);
    CHECK(plain != NULL);
    CHECK(tried >= 3);
    CHECK_EQ_I(same, tried);
    free(plain);
    free(x);
    free(gy);
}

/* x -> 1x1 conv -> 5x5 depthwise -> 1x1 conv -> sum of squares: the
   depthwise step's activations are temporaries, blocked where the plan
   blocks them. The weights' gradients, and into r the blocks of the
   depthwise weight gradient's operands and which kernels ran it. */
typedef struct dw_run {
    float *g[3];
    int blocks;
    int64_t by_lazyc, by_library, executions;
} dw_run;

static void step(int mode, dw_run *r)
{
    memset(r, 0, sizeof *r);
    lz_blocked_layouts_set(mode);
    lz_cache_clear();
    const int64_t xs[4] = {2, 16, 8, 8}, w1s[4] = {32, 16, 1, 1}, w2s[4] = {32, 1, 5, 5},
                  w3s[4] = {16, 32, 1, 1};
    lz_tensor *x = lz_test_rand(51, -1, 1, 4, xs);
    lz_tensor *w[3] = {lz_test_rand(52, -0.3f, 0.3f, 4, w1s), lz_test_rand(53, -0.3f, 0.3f, 4, w2s),
                       lz_test_rand(54, -0.3f, 0.3f, 4, w3s)};
    for (int k = 0; k < 3; k++) lz_requires_grad(w[k], 1);
    lz_scope_begin();
    lz_tensor *h = lz_relu(lz_conv2d(x, w[0], NULL, (lz_conv2d_opts){0}));
    h = lz_relu(lz_conv2d(h, w[1], NULL, (lz_conv2d_opts){.padding = {2, 2}, .groups = 32}));
    h = lz_conv2d(h, w[2], NULL, (lz_conv2d_opts){0});
    lz_tensor *loss = lz_keep(lz_sum(lz_mul(h, h)));
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    lz_tensor *read[3] = {lz_grad(w[0]), lz_grad(w[1]), lz_grad(w[2])};
    lz_executable *e = lz_test_compile_step(read, 3);
    CHECK(e != NULL);
    for (int i = 0; e && i < e->prog.n_instrs; i++) {
        const lz_instr *st = &e->prog.instrs[i];
        if (st->op == LZ_OP_CONV2D_GRAD_WEIGHT && st->iattr[6] > 1)
            r->blocks = (e->prog.values[st->in[0]].block != 0) + (e->prog.values[st->in[1]].block != 0);
    }
    lz_executable_unref(e);
    const lz_metrics m0 = lz_metrics_get();
    lz_profile_reset();
    lz_profile_enable(1);
    CHECK(lz_sync(read, 3, 1) == 0);
    lz_profile_enable(0);
    r->executions = lz_metrics_get().executions - m0.executions;
    r->by_lazyc = lz_test_kernel_calls_by("conv2d_grad_weight", 0);
    r->by_library = lz_test_kernel_calls_by("conv2d_grad_weight", 1);
    for (int k = 0; k < 3; k++) r->g[k] = lz_test_read(read[k]);
    lz_free(loss);
    for (int k = 0; k < 3; k++) lz_free(w[k]);
    lz_free(x);
    lz_blocked_layouts_set(-1);
}

static void check_compiled(void)
{
    lz_dnnl_conv_set(1);
    if (!lz_cpu_layout_block()) {
        fprintf(stderr, "test_dw_grad_blocked: NOT CHECKED: a compiled step (this CPU has no "
                        "blocked layout for oneDNN)\n");
        return;
    }
    dw_run cl, plain;
    step(LZ_BLOCKED_NHWC, &cl);
    step(0, &plain);
    printf("compiled, channels-last: depthwise operands blocked %d, weight gradients by lazyc %lld, "
           "by oneDNN %lld\n", cl.blocks, (long long)cl.by_lazyc, (long long)cl.by_library);
    CHECK_EQ_I(cl.blocks, 2);
    /* the 1x1 ones on the rows (4x4 over 2 images), the depthwise one by the loops */
    CHECK_EQ_I(cl.by_lazyc, 3);
    CHECK_EQ_I(cl.by_library, 0);
    CHECK_EQ_I(cl.executions, 1);
    CHECK_EQ_I(plain.blocks, 0);
    const int64_t n[3] = {32 * 16, 32 * 25, 16 * 32};
    for (int k = 0; k < 3; k++) {
        CHECK(cl.g[k] && plain.g[k]);
        if (cl.g[k] && plain.g[k]) {
            const double err = lz_test_rel_err(cl.g[k], plain.g[k], n[k]);
            if (err > TOL) fprintf(stderr, "channels-last step, gradient %d: rel err %g\n", k, err);
            CHECK(err <= TOL);
        }
        free(cl.g[k]);
        free(plain.g[k]);
    }
    lz_dnnl_conv_set(-1);
}

int main(void)
{
    const dw_case cases[] = {
        {"5x5, 4x4 planes (mnasnet1_0's last)", 2, 48, 4, 4, 1, 5, 1, 2, 1},
        {"5x5 stride 2", 2, 32, 9, 7, 1, 5, 2, 2, 1},
        {"3x3", 3, 16, 6, 6, 1, 3, 1, 1, 1},
        {"3x3 dilation 2, no padding", 2, 16, 9, 9, 1, 3, 1, 0, 2},
        {"12 channels (no multiple of 8)", 2, 12, 5, 5, 1, 5, 1, 2, 1},
        {"two outputs a channel", 2, 8, 6, 6, 2, 3, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_layouts(&cases[k]);
    check_compiled();
    lz_shutdown();
    return lz_test_done();
}
