/* conv2d on oneDNN primitives (k_dnnl_conv.c) against the im2col kernels:
 * forward and both gradients agree with the oneDNN path on and off, the
 * values read back are plain NCHW / OIHW whatever layout the primitive
 * used inside, a training step is still one execution, steps oneDNN
 * is not used for (1x1) make no primitive, the tuned choice is timed
 * once per step shape, oneDNN's buffers are the step's scratch in the
 * executable's arena, steps on small blocked planes run on k_conv.c's
 * rows with the values of plain layouts, tune mode times the rows
 * against oneDNN once per step shape, and large enough 3x3 steps run by
 * Winograd's algorithm within rounding of the direct sum. */
#include <dnnl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "compile/executable.h"
#include "compile/program.h"
#include "engine/cache.h"
#include "testlib.h"
#include "testlib_compile.h"

#define TOL 1e-5

/* Whether oneDNN runs at AVX-512 here: the ISA it runs at, which
   DNNL_MAX_CPU_ISA can lower below the CPU's, decides which of its
   kernels exist (Winograd's, the dilated weight gradient's). */
static int avx512(void)
{
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

typedef struct result {
    float *y, *gx, *gw;
    int64_t ny, nx, nw, primitives, winograd, executions;
} result;

/* One training step of sum(conv(x, w) * r), compiled afresh with the
   oneDNN path on or off. */
static result run_case(int dnnl, const int64_t *xs, const int64_t *ws, lz_conv2d_opts o)
{
    result res = {0};
    lz_dnnl_conv_set(dnnl);
    lz_cache_clear();   /* an executable keeps the choice it was compiled with */
    lz_tensor *x = lz_test_rand(41, -1, 1, 4, xs), *w = lz_test_rand(42, -0.5f, 0.5f, 4, ws);
    lz_requires_grad(x, 1);
    lz_requires_grad(w, 1);
    int64_t p0 = lz_dnnl_conv_created(), w0 = lz_dnnl_conv_winograd();
    lz_metrics m0 = lz_metrics_get();
    lz_tensor *y = lz_conv2d(x, w, NULL, o);
    CHECK(y != NULL);
    if (!y) return res;
    int64_t ys[4];
    for (int d = 0; d < 4; d++) ys[d] = lz_dim(y, d);
    lz_tensor *r = lz_test_rand(43, -1, 1, 4, ys);
    lz_tensor *yr = lz_mul(y, r), *loss = lz_sum(yr);
    CHECK(lz_backward(loss) == 0);
    lz_mark_step();
    res.y = lz_test_read(y);
    res.gx = lz_test_read(lz_grad(x));
    res.gw = lz_test_read(lz_grad(w));
    lz_metrics m1 = lz_metrics_get();
    res.executions = m1.executions - m0.executions;
    res.primitives = lz_dnnl_conv_created() - p0;
    res.winograd = lz_dnnl_conv_winograd() - w0;
    res.ny = ys[0] * ys[1] * ys[2] * ys[3];
    res.nx = xs[0] * xs[1] * xs[2] * xs[3];
    res.nw = ws[0] * ws[1] * ws[2] * ws[3];
    lz_free(loss);
    lz_free(yr);
    lz_free(r);
    lz_free(y);
    lz_free(w);
    lz_free(x);
    return res;
}

static void free_result(result *r)
{
    free(r->y);
    free(r->gx);
    free(r->gw);
}

/* The plain-layout forward and weight gradient, straight from the
   definition: the larger relative error of y and gw against them. */
static double naive_err(const float *y, const float *gw, const int64_t *xs, const int64_t *ws,
                        const int64_t *ys, lz_conv2d_opts o)
{
    int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3];
    int64_t ny = ys[0] * ys[1] * ys[2] * ys[3];
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *ref = malloc(sizeof(float) * (size_t)ny), *r = malloc(sizeof(float) * (size_t)ny);
    double *gref = calloc((size_t)nw, sizeof(double));
    lz_test_fill_uniform(x, nx, 41, -1, 1);
    lz_test_fill_uniform(w, nw, 42, -0.5f, 0.5f);
    lz_test_fill_uniform(r, ny, 43, -1, 1);
    int64_t G = o.groups ? o.groups : 1, Cg = xs[1] / G, Og = ws[0] / G;
    int64_t sh = o.stride[0] ? o.stride[0] : 1, sw = o.stride[1] ? o.stride[1] : 1;
    int64_t dh = o.dilation[0] ? o.dilation[0] : 1, dw = o.dilation[1] ? o.dilation[1] : 1;
    for (int64_t n = 0; n < ys[0]; n++)
        for (int64_t oc = 0; oc < ys[1]; oc++)
            for (int64_t oh = 0; oh < ys[2]; oh++)
                for (int64_t ow = 0; ow < ys[3]; ow++) {
                    double acc = 0;
                    int64_t g = oc / Og;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < ws[2]; kh++)
                            for (int64_t kw = 0; kw < ws[3]; kw++) {
                                int64_t ih = oh * sh - o.padding[0] + kh * dh;
                                int64_t iw = ow * sw - o.padding[1] + kw * dw;
                                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                                int64_t xi = ((n * xs[1] + g * Cg + c) * xs[2] + ih) * xs[3] + iw;
                                int64_t wi = ((oc * Cg + c) * ws[2] + kh) * ws[3] + kw;
                                acc += (double)x[xi] * w[wi];
                                gref[wi] += (double)x[xi] * r[((n * ys[1] + oc) * ys[2] + oh) * ys[3] + ow];
                            }
                    ref[((n * ys[1] + oc) * ys[2] + oh) * ys[3] + ow] = (float)acc;
                }
    double e = lz_test_rel_err(y, ref, ny);
    for (int64_t i = 0; i < nw; i++) w[i] = (float)gref[i];
    double eg = lz_test_rel_err(gw, w, nw);
    if (eg > e) e = eg;
    free(r);
    free(gref);
    free(x);
    free(w);
    free(ref);
    return e;
}

/* mode: lz_dnnl_conv_set's (2: every step oneDNN can run, whatever its
   size, 1: the steps measured faster); min_prims: how many of the three
   steps must run on oneDNN (-1: none). */
static void check_case(int mode, const int64_t *xs, const int64_t *ws, lz_conv2d_opts o,
                       int min_prims, const char *what)
{
    result on = run_case(mode, xs, ws, o), off = run_case(0, xs, ws, o);
    CHECK(on.y && on.gx && on.gw && off.y && off.gx && off.gw);
    if (!(on.y && on.gx && on.gw && off.y && off.gx && off.gw)) {
        free_result(&on);
        free_result(&off);
        return;
    }
    double ey = lz_test_rel_err(on.y, off.y, on.ny), ex = lz_test_rel_err(on.gx, off.gx, on.nx);
    double ew = lz_test_rel_err(on.gw, off.gw, on.nw);
    int64_t ys[4] = {xs[0], ws[0], 0, 0};
    int64_t G = o.groups ? o.groups : 1;
    (void)G;
    for (int d = 0; d < 2; d++) {
        int64_t s = o.stride[d] ? o.stride[d] : 1, dl = o.dilation[d] ? o.dilation[d] : 1;
        ys[2 + d] = (xs[2 + d] + 2 * o.padding[d] - dl * (ws[2 + d] - 1) - 1) / s + 1;
    }
    double en = naive_err(on.y, on.gw, xs, ws, ys, o);
    printf("%-28s primitives %lld  rel err y %.1e gx %.1e gw %.1e  naive %.1e\n", what,
           (long long)on.primitives, ey, ex, ew, en);
    CHECK(ey <= TOL);
    CHECK(ex <= TOL);
    CHECK(ew <= TOL);
    CHECK(en <= 1e-5);
    CHECK_EQ_I(on.executions, 1);
    CHECK_EQ_I(off.executions, 1);
    CHECK_EQ_I(off.primitives, 0);
    if (min_prims < 0) CHECK_EQ_I(on.primitives, 0);
    else CHECK(on.primitives >= min_prims);
    free_result(&on);
    free_result(&off);
}

/* A 3x3 stride-1 step with enough output tiles over the batch runs by
   Winograd's algorithm in all three directions, and LZ_WINOGRAD=0 keeps
   it direct; Winograd's values differ from the direct sum by rounding
   only: y and gw against the definition in double, gx against the direct
   primitive's (2e-6 measured, as the direct primitive's own). oneDNN has
   Winograd on AVX-512 only: below it (another CPU, or DNNL_MAX_CPU_ISA)
   the same step runs the direct primitive in all three directions, with
   the very values of LZ_WINOGRAD=0. */
static void check_winograd(void)
{
    const int64_t xs[4] = {2, 64, 32, 32}, ws[4] = {64, 64, 3, 3}, ys[4] = {2, 64, 32, 32};
    const lz_conv2d_opts o = {.padding = {1, 1}};
    const int has_winograd = avx512();
    lz_winograd_set(1);
    result wino = run_case(1, xs, ws, o);
    lz_winograd_set(0);
    result direct = run_case(1, xs, ws, o);
    lz_winograd_set(-1);
    CHECK(wino.y && wino.gx && wino.gw && direct.y && direct.gx && direct.gw);
    if (wino.y && wino.gx && wino.gw && direct.y && direct.gx && direct.gw) {
        const double en = naive_err(wino.y, wino.gw, xs, ws, ys, o);
        const double ex = lz_test_rel_err(wino.gx, direct.gx, wino.nx);
        const double ed = naive_err(direct.y, direct.gw, xs, ws, ys, o);
        printf("winograd (%s)        primitives %lld (%lld Winograd), direct %lld (%lld)  "
               "naive %.1e (direct %.1e)  gx vs direct %.1e\n",
               has_winograd ? "AVX-512" : "no AVX-512", (long long)wino.primitives,
               (long long)wino.winograd, (long long)direct.primitives, (long long)direct.winograd,
               en, ed, ex);
        CHECK(en <= TOL);
        CHECK(ex <= TOL);
        CHECK(ed <= TOL);
        if (!has_winograd) {
            CHECK(!memcmp(wino.y, direct.y, sizeof(float) * (size_t)wino.ny));
            CHECK(!memcmp(wino.gx, direct.gx, sizeof(float) * (size_t)wino.nx));
            CHECK(!memcmp(wino.gw, direct.gw, sizeof(float) * (size_t)wino.nw));
        }
    }
    CHECK_EQ_I(wino.winograd, has_winograd ? 3 : 0);
    CHECK_EQ_I(wino.primitives, 3);
    CHECK_EQ_I(direct.primitives, 3);
    CHECK_EQ_I(direct.winograd, 0);
    CHECK_EQ_I(wino.executions, 1);
    free_result(&wino);
    free_result(&direct);
}

/* LZ_DNNL_CONV=tune: a step shape is timed once per process, every way it
   can run; a second executable with the same steps makes the same choice
   without timing again (so the same values, bit for bit), and whichever
   way won agrees with the im2col kernels. A 1x1 never takes oneDNN. */
static void check_tuned(const int64_t *xs, const int64_t *ws, lz_conv2d_opts o, int one_by_one,
                        const char *what)
{
    const int64_t t0 = lz_dnnl_conv_timed();
    result a = run_case(LZ_DNNL_CONV_TUNE, xs, ws, o);
    const int64_t t1 = lz_dnnl_conv_timed();
    result b = run_case(LZ_DNNL_CONV_TUNE, xs, ws, o);
    const int64_t t2 = lz_dnnl_conv_timed();
    result off = run_case(0, xs, ws, o);
    printf("%-28s primitives %lld, steps timed %lld then %lld\n", what, (long long)a.primitives,
           (long long)(t1 - t0), (long long)(t2 - t1));
    CHECK_EQ_I(t1 - t0, 3);   /* forward and both gradients */
    CHECK_EQ_I(t2 - t1, 0);
    CHECK_EQ_I(a.primitives, b.primitives);
    CHECK_EQ_I(a.executions, 1);
    if (one_by_one) CHECK_EQ_I(a.primitives, 0);
    CHECK(a.y && b.y && off.y && a.gx && b.gx && off.gx && a.gw && b.gw && off.gw);
    if (a.y && b.y && off.y && a.gx && b.gx && off.gx && a.gw && b.gw && off.gw) {
        CHECK(!memcmp(a.y, b.y, sizeof(float) * (size_t)a.ny));
        CHECK(!memcmp(a.gx, b.gx, sizeof(float) * (size_t)a.nx));
        CHECK(!memcmp(a.gw, b.gw, sizeof(float) * (size_t)a.nw));
        CHECK(lz_test_rel_err(a.y, off.y, a.ny) <= TOL);
        CHECK(lz_test_rel_err(a.gx, off.gx, a.nx) <= TOL);
        CHECK(lz_test_rel_err(a.gw, off.gw, a.nw) <= TOL);
    }
    free_result(&a);
    free_result(&b);
    free_result(&off);
}

/* Whether step i's scratch overlaps the memory of a value live while it
   runs (written at or before i, read at or after i). */
static int scratch_overlaps_live(const lz_program *p, int i)
{
    const lz_instr *s = &p->instrs[i];
    const size_t lo = s->scratch_offset, hi = lo + s->scratch_bytes;
    for (int v = 0; v < p->n_values; v++) {
        if (p->values[v].kind != LZ_VALUE_TEMP) continue;
        int first = -1, last = -1;
        for (int j = 0; j < p->n_instrs; j++) {
            const lz_instr *t = &p->instrs[j];
            int touches = t->out == v;
            for (int k = 0; t->fused && k < t->fused->n_extra; k++) touches |= t->fused->extra[k] == v;
            if (touches && first < 0) first = j;
            for (int k = 0; k < t->n_in; k++) touches |= lz_memory_of(p, t->in[k]) == v;
            if (touches) last = j;
        }
        const lz_value *val = &p->values[v];
        if (first <= i && i <= last && val->offset < hi && lo < val->offset + val->nbytes) return 1;
    }
    return 0;
}

/* Two 3x3 convolutions' training step, x of shape xs to c1 channels to
   c2: loss and both weights' gradients. inspect: compile it here first,
   check each step's scratch, and have the barrier run that executable (a
   cache hit). */
static void two_convs(int mode, int inspect, const int64_t *xs, int64_t c1, int64_t c2,
                      float *out[3])
{
    lz_dnnl_conv_set(mode);
    lz_cache_clear();
    const int64_t w1s[4] = {c1, xs[1], 3, 3}, w2s[4] = {c2, c1, 3, 3};
    const lz_conv2d_opts pad = {.padding = {1, 1}};
    lz_tensor *x = lz_test_rand(51, -1, 1, 4, xs);
    lz_tensor *w1 = lz_test_rand(52, -0.3f, 0.3f, 4, w1s), *w2 = lz_test_rand(53, -0.3f, 0.3f, 4, w2s);
    lz_requires_grad(w1, 1);
    lz_requires_grad(w2, 1);
    lz_scope_begin();
    lz_tensor *h = lz_conv2d(lz_relu(lz_conv2d(x, w1, NULL, pad)), w2, NULL, pad);
    lz_tensor *loss = lz_keep(lz_sum(lz_mul(h, h)));
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    lz_tensor *read[3] = {loss, lz_grad(w1), lz_grad(w2)};
    if (inspect) {
        lz_executable *e = lz_test_compile_step(read, 3);
        CHECK(e != NULL);
        int with_scratch = 0;
        for (int i = 0; e && i < e->prog.n_instrs; i++) {
            const lz_instr *s = &e->prog.instrs[i];
            if (!s->scratch_bytes) continue;
            with_scratch++;
            CHECK(s->scratch_offset + s->scratch_bytes <= e->prog.arena_bytes);
            CHECK(!scratch_overlaps_live(&e->prog, i));
        }
        /* forward, both gradients of the second conv, the first's weight
           gradient: all reorder plain operands */
        CHECK(with_scratch >= 4);
        lz_executable_unref(e);
    }
    lz_metrics m0 = lz_metrics_get();
    CHECK(lz_sync(read, 3, 1) == 0);
    lz_metrics m1 = lz_metrics_get();
    CHECK_EQ_I(m1.executions - m0.executions, 1);
    if (inspect) CHECK_EQ_I(m1.compiles - m0.compiles, 0);
    for (int k = 0; k < 3; k++) out[k] = lz_test_read(read[k]);
    lz_free(loss);
    lz_free(w2);
    lz_free(w1);
    lz_free(x);
}

static void check_scratch_in_arena(void)
{
    float *on[3], *off[3];
    const int64_t xs[4] = {2, 16, 12, 12};
    two_convs(2, 1, xs, 16, 16, on);
    two_convs(0, 0, xs, 16, 16, off);
    const int64_t n[3] = {1, 16 * 16 * 9, 16 * 16 * 9};
    for (int k = 0; k < 3; k++) {
        CHECK(on[k] && off[k]);
        if (on[k] && off[k]) CHECK(lz_test_rel_err(on[k], off[k], n[k]) <= TOL);
        free(on[k]);
        free(off[k]);
    }
}

/* Four convolutions whose activations go channel-blocked: 3x3 at 12x12
   (288 output pixels over the batch: oneDNN's), then at 6x6 (72 pixels:
   k_conv.c's rows for weight gradients) a strided 1x1 (columns gathered),
   a 3x3 (im2col) and a 1x1 (the rows are the columns; its forward on rows
   and its grad input on pixels too). Loss and weight gradients against the
   plain-layout executable's; blocked: how many weight-gradient steps had
   a blocked operand; the profile's calls on lazyc's kernels and oneDNN. */
typedef struct rows_run {
    float *v[5];
    int blocked;
    int64_t fwd, grad_input, grad_weight, onednn_grad_weight, executions;
} rows_run;

static void rows_step(int blocked, rows_run *r)
{
    memset(r, 0, sizeof *r);
    lz_dnnl_conv_set(1);
    lz_blocked_layouts_set(blocked);
    lz_cache_clear();
    const int64_t xs[4] = {2, 16, 12, 12}, w1s[4] = {32, 16, 3, 3}, w2s[4] = {32, 32, 1, 1},
                  w3s[4] = {32, 32, 3, 3}, w4s[4] = {16, 32, 1, 1};
    lz_tensor *x = lz_test_rand(61, -1, 1, 4, xs);
    lz_tensor *w[4] = {lz_test_rand(62, -0.3f, 0.3f, 4, w1s), lz_test_rand(63, -0.3f, 0.3f, 4, w2s),
                       lz_test_rand(64, -0.2f, 0.2f, 4, w3s), lz_test_rand(65, -0.3f, 0.3f, 4, w4s)};
    for (int k = 0; k < 4; k++) lz_requires_grad(w[k], 1);
    const lz_conv2d_opts pad = {.padding = {1, 1}}, s2 = {.stride = {2, 2}}, none = {0};
    lz_scope_begin();
    lz_tensor *h = lz_relu(lz_conv2d(x, w[0], NULL, pad));
    h = lz_relu(lz_conv2d(h, w[1], NULL, s2));
    h = lz_relu(lz_conv2d(h, w[2], NULL, pad));
    h = lz_conv2d(h, w[3], NULL, none);
    lz_tensor *loss = lz_keep(lz_sum(lz_mul(h, h)));
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    lz_tensor *read[5] = {loss, lz_grad(w[0]), lz_grad(w[1]), lz_grad(w[2]), lz_grad(w[3])};
    lz_executable *e = lz_test_compile_step(read, 5);
    CHECK(e != NULL);
    for (int i = 0; e && i < e->prog.n_instrs; i++) {
        const lz_instr *st = &e->prog.instrs[i];
        if (st->op == LZ_OP_CONV2D_GRAD_WEIGHT)
            r->blocked += e->prog.values[st->in[0]].block || e->prog.values[st->in[1]].block;
    }
    lz_executable_unref(e);
    lz_metrics m0 = lz_metrics_get();
    lz_profile_reset();
    lz_profile_enable(1);
    CHECK(lz_sync(read, 5, 1) == 0);
    lz_profile_enable(0);
    r->executions = lz_metrics_get().executions - m0.executions;
    r->fwd = lz_test_kernel_calls_by("conv2d", 0);
    r->grad_input = lz_test_kernel_calls_by("conv2d_grad_input", 0);
    r->grad_weight = lz_test_kernel_calls_by("conv2d_grad_weight", 0);
    r->onednn_grad_weight = lz_test_kernel_calls_by("conv2d_grad_weight", 1);
    for (int k = 0; k < 5; k++) r->v[k] = lz_test_read(read[k]);
    lz_free(loss);
    for (int k = 0; k < 4; k++) lz_free(w[k]);
    lz_free(x);
    lz_blocked_layouts_set(-1);
}

static void check_blocked_rows(void)
{
    lz_dnnl_conv_set(1);   /* blocked layouts are oneDNN's */
    if (!lz_cpu_layout_block()) {
        fprintf(stderr, "test_conv_dnnl: NOT CHECKED: rows of blocked activations (this CPU "
                        "has no blocked layout for oneDNN)\n");
        return;
    }
    rows_run b, p;
    rows_step(1, &b);
    rows_step(0, &p);
    CHECK_EQ_I(b.blocked, 4);
    CHECK_EQ_I(b.fwd, 1);
    CHECK_EQ_I(b.grad_input, 1);
    CHECK_EQ_I(b.grad_weight, 3);
    CHECK_EQ_I(b.onednn_grad_weight, 1);
    CHECK_EQ_I(b.executions, 1);
    CHECK_EQ_I(p.blocked, 0);
    const int64_t n[5] = {1, 32 * 16 * 9, 32 * 32, 32 * 32 * 9, 16 * 32};
    for (int k = 0; k < 5; k++) {
        CHECK(b.v[k] && p.v[k]);
        if (b.v[k] && p.v[k]) {
            const double err = lz_test_rel_err(b.v[k], p.v[k], n[k]);
            if (err > TOL) fprintf(stderr, "blocked rows, result %d: rel err %g\n", k, err);
            CHECK(err <= TOL);
        }
        free(b.v[k]);
        free(p.v[k]);
    }
}

/* tune mode on blocked activations: two_convs at 8x8 over 4 images (256
   output pixels: rows by the rule), large enough to be timed, chooses
   between oneDNN and the rows for both weight gradients. */
static void check_tuned_blocked(void)
{
    lz_dnnl_conv_set(1);
    if (!lz_cpu_layout_block()) {
        fprintf(stderr, "test_conv_dnnl: NOT CHECKED: tuning on blocked activations (this CPU "
                        "has no blocked layout for oneDNN)\n");
        return;
    }
    float *a[3], *b[3], *plain[3];
    const int64_t xs[4] = {4, 64, 8, 8};
    const int64_t t0 = lz_dnnl_conv_timed();
    two_convs(LZ_DNNL_CONV_TUNE, 0, xs, 128, 128, a);
    const int64_t t1 = lz_dnnl_conv_timed();
    two_convs(LZ_DNNL_CONV_TUNE, 0, xs, 128, 128, b);
    const int64_t t2 = lz_dnnl_conv_timed();
    two_convs(0, 0, xs, 128, 128, plain);
    /* the two weight gradients: every other step has a blocked operand
       (the first conv's output) and is a 3x3 forward or grad input, which
       only oneDNN runs on blocked layouts */
    printf("tuned blocked                steps timed %lld then %lld\n", (long long)(t1 - t0),
           (long long)(t2 - t1));
    CHECK_EQ_I(t1 - t0, 2);
    CHECK_EQ_I(t2 - t1, 0);
    const int64_t n[3] = {1, 128 * 64 * 9, 128 * 128 * 9};
    for (int k = 0; k < 3; k++) {
        CHECK(a[k] && b[k] && plain[k]);
        if (a[k] && b[k] && plain[k]) {
            CHECK(!memcmp(a[k], b[k], sizeof(float) * (size_t)n[k]));
            CHECK(lz_test_rel_err(a[k], plain[k], n[k]) <= TOL);
        }
        free(a[k]);
        free(b[k]);
        free(plain[k]);
    }
}

int main(void)
{
    /* tune mode's choices for this process only: a file from an earlier run
       would answer without timing (test_conv_choices tests the file) */
    setenv("LZ_CONV_CACHE", "0", 1);
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){16, 16, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, 3, "3x3 pad 1");
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){24, 16, 3, 3},
               (lz_conv2d_opts){.stride = {2, 2}}, 1, "stride 2, rows dropped");
    check_case(2, (int64_t[]){2, 16, 13, 11}, (int64_t[]){16, 16, 3, 3},
               (lz_conv2d_opts){.stride = {2, 2}, .padding = {1, 1}}, 1, "stride 2 pad 1 odd");
    /* oneDNN's jit weight gradient of a dilated convolution is AVX-512's
       (below it oneDNN offers gemm, which lazyc refuses): 2 steps there */
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){16, 16, 3, 3},
               (lz_conv2d_opts){.padding = {2, 2}, .dilation = {2, 2}}, avx512() ? 3 : 2,
               "dilation 2");
    check_case(2, (int64_t[]){2, 32, 10, 10}, (int64_t[]){32, 16, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}, .groups = 2}, 1, "groups 2");
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){16, 1, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}, .groups = 16}, 3, "depthwise");
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){16, 1, 3, 3},
               (lz_conv2d_opts){.stride = {2, 2}, .padding = {1, 1}, .groups = 16}, 1,
               "depthwise stride 2");
    check_case(2, (int64_t[]){2, 16, 12, 12}, (int64_t[]){32, 16, 1, 1},
               (lz_conv2d_opts){0}, 3, "1x1");
    /* the choice made for real steps: resnet18's layer1 conv at batch 2,
       64x64 runs on oneDNN, a 1x1 and a small conv do not */
    check_case(1, (int64_t[]){2, 64, 16, 16}, (int64_t[]){64, 64, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, 3, "resnet18 layer1 (measured)");
    check_case(1, (int64_t[]){2, 64, 16, 16}, (int64_t[]){128, 64, 1, 1},
               (lz_conv2d_opts){0}, -1, "1x1 (measured: im2col)");
    check_case(1, (int64_t[]){2, 16, 12, 12}, (int64_t[]){16, 16, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, -1, "small (measured: im2col)");
    check_case(1, (int64_t[]){2, 512, 4, 4}, (int64_t[]){512, 512, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, 1, "vgg16 4x4 (measured)");
    check_case(1, (int64_t[]){2, 256, 8, 8}, (int64_t[]){512, 256, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, 1, "vgg16 8x8 (measured)");
    check_case(1, (int64_t[]){2, 128, 16, 16}, (int64_t[]){256, 128, 3, 3},
               (lz_conv2d_opts){.padding = {1, 1}}, 3, "vgg16 16x16 (measured)");
    check_case(2, (int64_t[]){2, 3, 32, 32}, (int64_t[]){16, 3, 7, 7},
               (lz_conv2d_opts){.stride = {2, 2}, .padding = {3, 3}}, 1, "stem 7x7 s2");
    check_case(2, (int64_t[]){2, 16, 11, 9}, (int64_t[]){16, 16, 3, 2},
               (lz_conv2d_opts){.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}}, 1,
               "rectangular");
    check_tuned((int64_t[]){2, 128, 16, 16}, (int64_t[]){128, 128, 3, 3},
                (lz_conv2d_opts){.padding = {1, 1}}, 0, "tuned 3x3");
    check_tuned((int64_t[]){2, 256, 8, 8}, (int64_t[]){512, 256, 1, 1}, (lz_conv2d_opts){0}, 1,
                "tuned 1x1");
    check_winograd();
    check_scratch_in_arena();
    check_blocked_rows();
    check_tuned_blocked();
    lz_dnnl_conv_set(-1);
    lz_shutdown();
    return lz_test_done();
}
