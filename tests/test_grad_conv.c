/* conv2d, the pools and batch norm: gradients against finite differences,
 * the running-statistics update (lazy, eager and captured), and the errors
 * a bad shape gives. Values against PyTorch are test_parity_conv's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define GRAD_TOL 1e-2

static lz_tensor *rand_grad(unsigned seed, float lo, float hi, int nd, const int64_t *s)
{
    lz_tensor *t = lz_test_rand(seed, lo, hi, nd, s);
    lz_requires_grad(t, 1);
    return t;
}

static void check_grad(lz_test_fn f, void *ctx, int n, lz_tensor **in, const char *what)
{
    double e = lz_test_gradcheck(f, ctx, n, in);
    printf("%-36s rel err %.2e\n", what, e);
    if (!(e < GRAD_TOL)) fprintf(stderr, "%s: rel err %g (%s)\n", what, e,
                                 lz_last_error() ? lz_last_error() : "no error");
    CHECK(e < GRAD_TOL);
    for (int i = 0; i < n; i++) {
        lz_tensor *g = lz_grad(in[i]);
        CHECK(g != NULL);
        CHECK(g && lz_ndim(g) == lz_ndim(in[i]));
        for (int d = 0; g && d < lz_ndim(g); d++) CHECK_EQ_I(lz_dim(g, d), lz_dim(in[i], d));
    }
}

static void free_all(lz_tensor **t, int n)
{
    for (int i = 0; i < n; i++) lz_free(t[i]);
}

/* ---- conv2d --------------------------------------------------------------- */

static lz_tensor *f_conv(void *ctx, lz_tensor *const *in)
{
    const lz_conv2d_opts *o = ctx;
    return lz_conv2d(in[0], in[1], in[2], *o);
}

static void grad_conv(const int64_t *xs, const int64_t *ws, int bias, lz_conv2d_opts o,
                      const char *what)
{
    int64_t bs[1] = {ws[0]};
    lz_tensor *in[3] = {rand_grad(21, -1, 1, 4, xs), rand_grad(22, -0.5f, 0.5f, 4, ws),
                        bias ? rand_grad(23, -0.5f, 0.5f, 1, bs) : NULL};
    check_grad(f_conv, &o, bias ? 3 : 2, in, what);
    free_all(in, 3);
}

static void conv_grads(void)
{
    grad_conv((int64_t[]){2, 3, 6, 6}, (int64_t[]){4, 3, 3, 3}, 1,
              (lz_conv2d_opts){.padding = {1, 1}}, "conv pad 1 + bias");
    grad_conv((int64_t[]){2, 2, 7, 6}, (int64_t[]){3, 2, 3, 3}, 0,
              (lz_conv2d_opts){.stride = {2, 2}, .padding = {1, 1}}, "conv stride 2");
    grad_conv((int64_t[]){1, 2, 8, 7}, (int64_t[]){2, 2, 3, 3}, 1,
              (lz_conv2d_opts){.padding = {2, 1}, .dilation = {2, 2}}, "conv dilation 2");
    grad_conv((int64_t[]){2, 4, 5, 5}, (int64_t[]){6, 2, 3, 3}, 1,
              (lz_conv2d_opts){.padding = {1, 1}, .groups = 2}, "conv groups 2");
    grad_conv((int64_t[]){2, 3, 6, 6}, (int64_t[]){3, 1, 3, 3}, 1,
              (lz_conv2d_opts){.stride = {2, 2}, .padding = {1, 1}, .groups = 3}, "conv depthwise");
    grad_conv((int64_t[]){1, 2, 5, 5}, (int64_t[]){4, 1, 3, 3}, 0,
              (lz_conv2d_opts){.padding = {1, 1}, .groups = 2}, "conv depthwise x2");
    grad_conv((int64_t[]){2, 4, 4, 4}, (int64_t[]){3, 4, 1, 1}, 1,
              (lz_conv2d_opts){0}, "conv 1x1");
    grad_conv((int64_t[]){2, 3, 7, 5}, (int64_t[]){2, 3, 3, 2}, 0,
              (lz_conv2d_opts){.stride = {2, 1}, .padding = {0, 1}, .dilation = {1, 2}},
              "conv rectangular");
    /* enough images and work for the threaded path */
    grad_conv((int64_t[]){4, 4, 6, 6}, (int64_t[]){4, 4, 3, 3}, 0,
              (lz_conv2d_opts){.padding = {1, 1}}, "conv batch of 4");
}

/* ---- pools ----------------------------------------------------------------- */

/* Values distinct inside any window (a stride-37 walk modulo 101 over the
   flat index), at least 2/101 apart: a finite-difference step (0.01 here)
   never changes which element is a window's max. */
static lz_tensor *no_ties(int64_t n0, int64_t n1, int64_t h, int64_t w)
{
    int64_t s[4] = {n0, n1, h, w}, n = n0 * n1 * h * w;
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = -1.0f + 2.0f * ((float)((i * 37) % 101) + 0.5f) / 101.0f;
    lz_tensor *t = lz_from_host(v, LZ_F32, 4, s);
    free(v);
    lz_requires_grad(t, 1);
    return t;
}

typedef struct pool_case {
    int kind;                /* 0 max, 1 avg, 2 adaptive */
    lz_pool2d_opts o;
    int oh, ow;
} pool_case;

static lz_tensor *f_pool(void *ctx, lz_tensor *const *in)
{
    const pool_case *c = ctx;
    if (c->kind == 0) return lz_max_pool2d(in[0], c->o);
    if (c->kind == 1) return lz_avg_pool2d(in[0], c->o);
    return lz_adaptive_avg_pool2d(in[0], c->oh, c->ow);
}

static void grad_pool(pool_case c, int64_t h, int64_t w, const char *what)
{
    int64_t s[4] = {2, 2, h, w};
    lz_tensor *x = c.kind == 0 ? no_ties(2, 2, h, w) : rand_grad(31, -1, 1, 4, s);
    check_grad(f_pool, &c, 1, &x, what);
    lz_free(x);
}

/* torch's choices in a max-pool window: the gradient goes to the first of
   tied maxima (row-major), a NaN wins the value, an all -inf window gives
   -inf with the gradient at its first element. */
static void max_pool_rules(void)
{
    const float inf = INFINITY;
    float v[12] = {1, 3, -inf, -inf,
                   3, 2, -inf, -inf,
                   0, NAN, 5, 5};
    int64_t s[4] = {1, 1, 3, 4};
    lz_tensor *x = lz_from_host(v, LZ_F32, 4, s);
    lz_requires_grad(x, 1);
    lz_tensor *y = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {2, 2}, .stride = {1, 2}});
    CHECK(y && lz_dim(y, 2) == 2 && lz_dim(y, 3) == 2);
    CHECK(y && lz_backward(lz_sum(y)) == 0);
    float *out = y ? lz_test_read(y) : NULL, *g = lz_grad(x) ? lz_test_read(lz_grad(x)) : NULL;
    CHECK(out && g);
    if (out && g) {
        CHECK(out[0] == 3 && isinf(out[1]) && out[1] < 0);
        CHECK(isnan(out[2]) && out[3] == 5);
        /* window (0,0): tie 3 at [0][1] and [1][0]: the first */
        CHECK(g[1] == 1 && g[4] == 0);
        /* window (0,1): all -inf: its first element */
        CHECK(g[2] == 1 && g[3] == 0 && g[6] == 0 && g[7] == 0);
        /* window (1,0): the NaN; window (1,1): the first 5 of a tie */
        CHECK(g[9] == 1 && g[8] == 0 && g[5] == 0);
        CHECK(g[10] == 1 && g[11] == 0);
    }
    free(out);
    free(g);
    lz_free(y);
    lz_free(x);
}

static void pool_grads(void)
{
    max_pool_rules();
    grad_pool((pool_case){0, {.kernel = {2, 2}}, 0, 0}, 6, 6, "max pool 2");
    grad_pool((pool_case){0, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, 0, 0},
              7, 7, "max pool 3/2 pad 1");
    grad_pool((pool_case){0, {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = 1}, 0, 0},
              6, 6, "max pool ceil_mode");
    grad_pool((pool_case){0, {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}, .ceil_mode = 1},
              0, 0}, 6, 5, "max pool rect ceil_mode pad");
    grad_pool((pool_case){1, {.kernel = {2, 2}, .count_include_pad = 1}, 0, 0}, 6, 6, "avg pool 2");
    grad_pool((pool_case){1, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
              .count_include_pad = 1}, 0, 0}, 7, 7, "avg pool pad count_include_pad 1");
    grad_pool((pool_case){1, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
              .count_include_pad = 0}, 0, 0}, 7, 7, "avg pool pad count_include_pad 0");
    grad_pool((pool_case){1, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
              .ceil_mode = 1, .count_include_pad = 1}, 0, 0}, 6, 6, "avg pool ceil cip 1");
    grad_pool((pool_case){1, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
              .ceil_mode = 1, .count_include_pad = 0}, 0, 0}, 6, 6, "avg pool ceil cip 0");
    grad_pool((pool_case){.kind = 2, .oh = 1, .ow = 1}, 5, 5, "adaptive to 1x1");
    grad_pool((pool_case){.kind = 2, .oh = 3, .ow = 2}, 7, 5, "adaptive down, uneven");
    grad_pool((pool_case){.kind = 2, .oh = 7, .ow = 7}, 4, 4, "adaptive up 4x4 -> 7x7");
}

/* ---- batch norm ------------------------------------------------------------ */

typedef struct bn_case {
    int training;
    lz_tensor *rm, *rv;
} bn_case;

static lz_tensor *f_bn(void *ctx, lz_tensor *const *in)
{
    const bn_case *c = ctx;
    return lz_batch_norm(in[0], in[1], in[2], c->rm, c->rv, c->training, 0.1f, 1e-5f);
}

static void grad_bn(int nd, const int64_t *xs, int training, const char *what)
{
    int64_t cs[1] = {xs[1]};
    lz_tensor *in[3] = {rand_grad(41, -2, 2, nd, xs), rand_grad(42, 0.5f, 1.5f, 1, cs),
                        rand_grad(43, -0.5f, 0.5f, 1, cs)};
    /* training: batch statistics only (the gradient check calls the op many
       times; running statistics are checked by value below) */
    bn_case c = {training, NULL, NULL};
    if (!training) {
        c.rm = lz_test_rand(44, -0.5f, 0.5f, 1, cs);
        c.rv = lz_test_rand(45, 0.5f, 2.0f, 1, cs);
    }
    check_grad(f_bn, &c, 3, in, what);
    free_all(in, 3);
    lz_free(c.rm);
    lz_free(c.rv);
}

static void bn_grads(void)
{
    grad_bn(4, (int64_t[]){3, 2, 3, 3}, 1, "batch norm train 4-d");
    grad_bn(2, (int64_t[]){5, 3}, 1, "batch norm train 2-d");
    grad_bn(4, (int64_t[]){2, 3, 2, 2}, 0, "batch norm eval 4-d");
    grad_bn(2, (int64_t[]){4, 3}, 0, "batch norm eval 2-d");
}

/* Host reference of one training call's running statistics. */
static void bn_running_ref(const float *x, int64_t n, int64_t c, int64_t hw, float m,
                           float *rm, float *rv)
{
    for (int64_t k = 0; k < c; k++) {
        double s = 0, ss = 0, cnt = (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) s += x[(i * c + k) * hw + j];
        double mean = s / cnt;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double d = x[(i * c + k) * hw + j] - mean;
                ss += d * d;
            }
        rm[k] = (float)((1 - m) * rm[k] + m * mean);
        rv[k] = (float)((1 - m) * rv[k] + m * ss / (cnt - 1));
    }
}

/* Running statistics after two training calls, lazily then eagerly: in
   lazy mode each call (forward, backward and update) is one execution. */
static void bn_running(void)
{
    const int64_t N = 4, C = 3, HW = 6, xs[4] = {4, 3, 2, 3}, cs[1] = {3};
    for (int eager = 0; eager <= 1; eager++) {
        lz_set_eager(eager);
        float rm_ref[3] = {0.1f, -0.2f, 0.3f}, rv_ref[3] = {1.0f, 0.5f, 2.0f};
        lz_tensor *rm = lz_from_host(rm_ref, LZ_F32, 1, cs), *rv = lz_from_host(rv_ref, LZ_F32, 1, cs);
        lz_tensor *w = rand_grad(51, 0.5f, 1.5f, 1, cs);
        for (int step = 0; step < 2; step++) {
            lz_scope_begin();
            lz_tensor *x = lz_test_rand(60 + (unsigned)step, -2, 3, 4, xs);
            float *xv = lz_test_read(x);
            bn_running_ref(xv, N, C, HW, 0.2f, rm_ref, rv_ref);
            free(xv);
            lz_metrics m0 = lz_metrics_get();
            lz_tensor *y = lz_batch_norm(x, w, NULL, rm, rv, 1, 0.2f, 1e-5f);
            CHECK(y != NULL);
            CHECK(lz_backward(lz_sum(lz_mul(y, y))) == 0);
            if (!eager) CHECK(lz_is_pending(rm) && lz_is_pending(rv));
            lz_mark_step();
            lz_metrics m1 = lz_metrics_get();
            if (!eager) CHECK_EQ_I(m1.executions - m0.executions, 1);
            lz_scope_end();
        }
        float *got_m = lz_test_read(rm), *got_v = lz_test_read(rv);
        CHECK(got_m && got_v);
        for (int k = 0; got_m && got_v && k < 3; k++) {
            CHECK_NEAR(got_m[k], rm_ref[k], 1e-5);
            CHECK_NEAR(got_v[k], rv_ref[k], 1e-5);
        }
        free(got_m);
        free(got_v);
        lz_free(rm); lz_free(rv); lz_free(w);
    }
    lz_set_eager(0);
}

/* ---- capture: a conv + batch-norm step replays as one execution --------- */

typedef struct net {
    lz_tensor *w, *g, *b, *rm, *rv;
    lz_sgd *opt;
} net;

static int net_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    net *n = ctx;
    lz_sgd_zero_grad(n->opt);
    lz_tensor *h = lz_conv2d(in[0], n->w, NULL, (lz_conv2d_opts){.padding = {1, 1}});
    h = lz_relu(lz_batch_norm(h, n->g, n->b, n->rm, n->rv, 1, 0.1f, 1e-5f));
    h = lz_max_pool2d(h, (lz_pool2d_opts){.kernel = {2, 2}});
    lz_tensor *loss = lz_mean(lz_adaptive_avg_pool2d(h, 1, 1));
    if (!loss || lz_backward(loss) || lz_sgd_step(n->opt)) return -1;
    out[0] = loss;
    return 0;
}

static void net_init(net *n)
{
    const int64_t ws[4] = {4, 2, 3, 3}, cs[1] = {4};
    n->w = rand_grad(71, -0.5f, 0.5f, 4, ws);
    n->g = rand_grad(72, 0.5f, 1.5f, 1, cs);
    n->b = rand_grad(73, -0.5f, 0.5f, 1, cs);
    n->rm = lz_zeros(LZ_F32, 1, cs);
    n->rv = lz_full(LZ_F32, 1, cs, 1.0);
    lz_tensor *ps[3] = {n->w, n->g, n->b};
    n->opt = lz_sgd_new(ps, 3, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
}

static void net_free(net *n)
{
    lz_sgd_free(n->opt);
    lz_free(n->w); lz_free(n->g); lz_free(n->b); lz_free(n->rm); lz_free(n->rv);
}

static void capture_step(void)
{
    enum { STEPS = 4 };
    const int64_t xs[4] = {2, 2, 6, 6};
    float lazy_loss[STEPS], cap_loss[STEPS], lazy_rv[4], cap_rv[4];
    net a, b;
    net_init(&a);
    for (int s = 0; s < STEPS; s++) {
        lz_tensor *x = lz_test_rand(80 + (unsigned)s, -1, 1, 4, xs), *out[1];
        lz_scope_begin();
        CHECK_EQ_I(net_step(&a, &x, out), 0);
        lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
        lazy_loss[s] = lz_item(out[0]);
        lz_free(out[0]);
        lz_free(x);
    }
    CHECK(lz_to_host(a.rv, lazy_rv, sizeof lazy_rv) == 0);

    net_init(&b);
    lz_fn *f = lz_capture(net_step, &b, 1, 1);
    CHECK(f != NULL);
    lz_metrics m0 = lz_metrics_get();
    for (int s = 0; f && s < STEPS; s++) {
        lz_tensor *x = lz_test_rand(80 + (unsigned)s, -1, 1, 4, xs), *out[1] = {NULL};
        CHECK_EQ_I(lz_call(f, &x, out), 0);
        cap_loss[s] = out[0] ? lz_item(out[0]) : NAN;
        lz_free(out[0]);
        lz_free(x);
    }
    lz_metrics m1 = lz_metrics_get();
    CHECK(lz_to_host(b.rv, cap_rv, sizeof cap_rv) == 0);
    /* every call is one execution and only the first compiles */
    CHECK_EQ_I(m1.executions - m0.executions, STEPS);
    CHECK(m1.compiles - m0.compiles <= 1);
    CHECK_EQ_I(m1.capture_fallbacks - m0.capture_fallbacks, 0);
    for (int s = 0; s < STEPS; s++) CHECK_NEAR(cap_loss[s], lazy_loss[s], 1e-5);
    for (int k = 0; k < 4; k++) CHECK_NEAR(cap_rv[k], lazy_rv[k], 1e-5);
    lz_fn_free(f);
    net_free(&a);
    net_free(&b);
}

/* ---- errors ----------------------------------------------------------------- */

static int error_has(const char *a, const char *b)
{
    const char *e = lz_last_error();
    int ok = e && strstr(e, a) && (!b || strstr(e, b));
    if (!ok) fprintf(stderr, "error message lacks \"%s\"%s%s: %s\n", a, b ? " / " : "",
                     b ? b : "", e ? e : "(none)");
    return ok;
}

static void errors(void)
{
    const int64_t xs[4] = {2, 3, 5, 5}, wbad[4] = {4, 2, 3, 3}, wbig[4] = {4, 3, 9, 9};
    const int64_t wok[4] = {4, 3, 3, 3}, bbad[1] = {3}, c4[1] = {4};
    lz_tensor *x = lz_test_rand(1, -1, 1, 4, xs), *w = lz_test_rand(2, -1, 1, 4, wbad);
    lz_tensor *wb = lz_test_rand(3, -1, 1, 4, wbig), *wo = lz_test_rand(4, -1, 1, 4, wok);
    lz_tensor *bb = lz_test_rand(5, -1, 1, 1, bbad), *v4 = lz_test_rand(6, 0.5f, 1, 1, c4);
    lz_metrics m0 = lz_metrics_get();

    lz_clear_error();
    CHECK(lz_conv2d(x, w, NULL, (lz_conv2d_opts){0}) == NULL);
    CHECK(error_has("[2, 3, 5, 5]", "[4, 2, 3, 3]"));
    CHECK(error_has("channel", NULL));
    lz_clear_error();
    CHECK(lz_conv2d(x, wb, NULL, (lz_conv2d_opts){.padding = {1, 1}}) == NULL);
    CHECK(error_has("larger than the padded input", "[4, 3, 9, 9]"));
    lz_clear_error();
    CHECK(lz_conv2d(x, wo, NULL, (lz_conv2d_opts){.dilation = {4, 4}}) == NULL);
    CHECK(error_has("larger than the padded input", NULL));
    lz_clear_error();
    CHECK(lz_conv2d(x, wo, bb, (lz_conv2d_opts){0}) == NULL);
    CHECK(error_has("bias [3]", NULL));
    lz_clear_error();
    CHECK(lz_conv2d(x, wo, NULL, (lz_conv2d_opts){.groups = 2}) == NULL);
    CHECK(error_has("groups", NULL));
    lz_clear_error();
    CHECK(lz_conv2d(NULL, wo, NULL, (lz_conv2d_opts){0}) == NULL);
    CHECK(lz_last_error() != NULL);
    lz_clear_error();
    CHECK(lz_conv2d(v4, wo, NULL, (lz_conv2d_opts){0}) == NULL);
    CHECK(error_has("4-d", NULL));

    lz_clear_error();
    CHECK(lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {7, 7}}) == NULL);
    CHECK(error_has("larger than the padded input", "[2, 3, 5, 5]"));
    lz_clear_error();
    CHECK(lz_avg_pool2d(x, (lz_pool2d_opts){.kernel = {3, 3}, .padding = {2, 2}}) == NULL);
    CHECK(error_has("half the kernel", NULL));
    lz_clear_error();
    CHECK(lz_max_pool2d(x, (lz_pool2d_opts){0}) == NULL);
    CHECK(error_has("kernel", NULL));
    lz_clear_error();
    CHECK(lz_adaptive_avg_pool2d(x, 0, 3) == NULL);
    CHECK(error_has("output size", NULL));
    lz_clear_error();
    CHECK(lz_max_pool2d(v4, (lz_pool2d_opts){.kernel = {2, 2}}) == NULL);
    CHECK(error_has("4-d", NULL));

    lz_clear_error();
    CHECK(lz_batch_norm(x, v4, NULL, NULL, NULL, 1, 0.1f, 1e-5f) == NULL);
    CHECK(error_has("[2, 3, 5, 5]", "weight is [4]"));
    lz_clear_error();
    CHECK(lz_batch_norm(x, NULL, NULL, NULL, NULL, 0, 0.1f, 1e-5f) == NULL);
    CHECK(error_has("eval mode", NULL));
    lz_clear_error();
    const int64_t one[2] = {1, 3};
    lz_tensor *x1 = lz_test_rand(7, -1, 1, 2, one);
    CHECK(lz_batch_norm(x1, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f) == NULL);
    CHECK(error_has("more than 1 value per channel", NULL));
    lz_clear_error();

    /* errors are caught when recording: nothing ran */
    lz_metrics m1 = lz_metrics_get();
    CHECK_EQ_I(m1.executions - m0.executions, 0);
    lz_tensor *all[] = {x, w, wb, wo, bb, v4, x1};
    free_all(all, 7);
}

/* Recording a conv, a pool and a batch norm runs nothing. */
static void lazy_recording(void)
{
    const int64_t xs[4] = {2, 3, 6, 6}, ws[4] = {4, 3, 3, 3};
    lz_tensor *x = lz_test_rand(1, -1, 1, 4, xs), *w = lz_test_rand(2, -1, 1, 4, ws);
    lz_metrics m0 = lz_metrics_get();
    lz_scope_begin();
    lz_tensor *y = lz_conv2d(x, w, NULL, (lz_conv2d_opts){.padding = {1, 1}});
    y = lz_batch_norm(y, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f);
    y = lz_adaptive_avg_pool2d(lz_avg_pool2d(lz_max_pool2d(y, (lz_pool2d_opts){.kernel = {2, 2}}),
                                             (lz_pool2d_opts){.kernel = {3, 3}}), 2, 2);
    CHECK(y && lz_is_pending(y));
    CHECK_EQ_I(lz_metrics_get().executions - m0.executions, 0);
    CHECK(y && lz_ndim(y) == 4 && lz_dim(y, 0) == 2 && lz_dim(y, 1) == 4 && lz_dim(y, 2) == 2);
    lz_scope_end();
    lz_free(x);
    lz_free(w);
}

int main(void)
{
    lazy_recording();
    conv_grads();
    pool_grads();
    bn_grads();
    bn_running();
    capture_step();
    errors();
    return lz_test_done();
}
