/* The CUDA backend's checks that need a GPU (issue 46, item 5), run by
 * tests/cuda/gpu_suite.sh (scripts/device_check.sh) on a machine with one.
 *
 *   gpu_suite ops FILE        every op family forward and backward on the
 *                             device LZ_DEVICE names, results saved to FILE
 *   gpu_suite compare CPU GPU the two files: rng draws bitwise, float32
 *                             within 1e-4 relative, bf16 (autocast) 3e-2
 *   gpu_suite capture         captured steps equal lazy steps (resnet18 and
 *                             BERT at smoke size, the same start); counters
 *   gpu_suite launches        a captured step is 1 execution and 1 graph
 *                             launch with no kernel launched one by one
 *   gpu_suite replay          the host's time per captured replay
 *   gpu_suite memory          lz_shutdown gives the device memory back
 *   gpu_suite oom             out of device memory is an error, not a crash
 *
 * Each prints what it measured and "N passed, N failed". */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testlib.h"

/* ---- ops ------------------------------------------------------------------ */

static lz_params *out_set;
static int n_out;

/* keeps t (and its gradient when asked) under prefix:name */
static void keep(const char *prefix, const char *name, lz_tensor *t)
{
    char full[128];
    snprintf(full, sizeof full, "%s:%s", prefix, name);
    CHECK(t != NULL);
    if (!t) {
        fprintf(stderr, "%s: %s\n", full, lz_last_error());
        return;
    }
    lz_tensor *f = lz_tensor_dtype(t) == LZ_BF16 ? lz_cast(t, LZ_F32) : lz_retain(t);
    CHECK(lz_params_add(out_set, full, f, 0) != NULL);
    n_out++;
}

static lz_tensor *param(unsigned seed, float lo, float hi, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, lo, hi, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

/* loss = sum(y * w) for a fixed random w: every element's gradient differs */
static void backward_of(lz_tensor *y, unsigned seed)
{
    int64_t shape[8];
    const int nd = lz_ndim(y);
    for (int d = 0; d < nd; d++) shape[d] = lz_dim(y, d);
    lz_tensor *w = lz_test_rand(seed, -1, 1, nd, shape);
    lz_tensor *loss = lz_sum(lz_mul(lz_cast(y, LZ_F32), w));
    CHECK(loss && lz_backward(loss) == 0);
}

static void grads(const char *prefix, lz_tensor *const *xs, const char *const *names, int n)
{
    for (int k = 0; k < n; k++) {
        char g[64];
        snprintf(g, sizeof g, "grad_%s", names[k]);
        keep(prefix, g, lz_grad(xs[k]));
    }
}

static void ops_elementwise(void)
{
    const int64_t s[3] = {7, 33, 65}, row[1] = {65}, col[3] = {7, 1, 1};
    lz_tensor *a = param(1, -2, 2, 3, s), *b = param(2, 0.5f, 2, 1, row), *c = param(3, -1, 1, 3, col);
    /* a fused chain with broadcasts, every unary formula, integers */
    lz_tensor *y = lz_gelu(lz_add(lz_mul(a, b), c));
    y = lz_add(y, lz_tanh(lz_sigmoid(lz_exp(lz_scale(a, 0.25f)))));
    y = lz_add(y, lz_mul(lz_log(lz_add(lz_mul(a, a), b)), lz_rsqrt(lz_add(b, lz_mul(c, c)))));
    y = lz_add(y, lz_pow(lz_relu(a), 1.5f));
    y = lz_maximum(y, lz_neg(lz_sqrt(lz_relu(a))));
    y = lz_where(lz_gt(a, c), y, lz_div(a, b));
    keep("ew", "chain", y);
    backward_of(y, 4);
    lz_tensor *xs[3] = {a, b, c};
    const char *names[3] = {"a", "b", "c"};
    grads("ew", xs, names, 3);
    lz_tensor *i = lz_cast(lz_scale(a, 10.0f), LZ_I64), *j = lz_cast(lz_scale(c, 7.0f), LZ_I32);
    keep("ew", "int_add", lz_cast(lz_add(i, lz_cast(j, LZ_I64)), LZ_F32));
    keep("ew", "int_max", lz_cast(lz_maximum(j, lz_neg(j)), LZ_F32));
    keep("ew", "bf16_round", lz_cast(a, LZ_BF16));
}

static void ops_reduce(void)
{
    const int64_t s[4] = {3, 40, 17, 50}, big[1] = {1 << 21}, tall[2] = {8192, 96};
    lz_tensor *x = param(5, -1, 1, 4, s);
    const int a13[2] = {1, 3}, a0[1] = {0}, a2[1] = {2}, all[4] = {0, 1, 2, 3};
    keep("red", "sum13", lz_sum_axes(x, 2, a13, 0));
    keep("red", "mean0", lz_mean_axes(x, 1, a0, 1));
    keep("red", "max2", lz_max_axes(x, 1, a2, 0));
    keep("red", "sum_all", lz_sum_axes(x, 4, all, 0));
    lz_tensor *m = lz_mean_axes(x, 2, a13, 1);
    backward_of(m, 6);
    keep("red", "grad_x", lz_grad(x));
    lz_tensor *b = lz_test_rand(7, -1, 1, 1, big), *t = lz_test_rand(8, -1, 1, 2, tall);
    keep("red", "big_sum", lz_sum(b));                 /* the split path */
    keep("red", "col_sum", lz_sum_axes(t, 1, a0, 0));  /* a bias gradient's shape */
    keep("red", "int_sum", lz_cast(lz_sum(lz_cast(lz_scale(t, 100.0f), LZ_I64)), LZ_F32));
}

static void ops_softmax(void)
{
    const int64_t s[3] = {5, 7, 300}, wide[2] = {3, 5000}, cls[2] = {64, 1000};
    lz_tensor *x = param(9, -4, 4, 3, s), *w = param(10, -4, 4, 2, wide), *l = param(11, -3, 3, 2, cls);
    lz_tensor *y1 = lz_softmax(x, 2), *y2 = lz_log_softmax(x, 1), *y3 = lz_softmax(w, 1);
    keep("sm", "softmax_last", y1);
    keep("sm", "log_softmax_mid", y2);
    keep("sm", "softmax_long", y3);
    backward_of(lz_add(lz_sum_axes(y1, 1, (int[]){1}, 0), lz_sum_axes(y2, 1, (int[]){1}, 0)), 12);
    keep("sm", "grad_x", lz_grad(x));
    int64_t *t = malloc(sizeof *t * 64);
    for (int i = 0; i < 64; i++) t[i] = (i * 37) % 1000;
    lz_tensor *target = lz_from_host(t, LZ_I64, 1, (int64_t[]){64});
    free(t);
    lz_tensor *loss = lz_cross_entropy(l, target);
    keep("sm", "xent", loss);
    CHECK(lz_backward(loss) == 0);
    keep("sm", "grad_logits", lz_grad(l));
}

static void ops_linalg(void)
{
    const int64_t sa[3] = {4, 37, 53}, sb[2] = {53, 29}, qa[4] = {2, 3, 17, 24}, qb[4] = {2, 1, 24, 19};
    const int64_t xs[2] = {96, 130}, ws[2] = {70, 130}, bs[1] = {70};
    lz_tensor *a = param(13, -1, 1, 3, sa), *b = param(14, -1, 1, 2, sb);
    lz_tensor *p = param(15, -1, 1, 4, qa), *q = param(16, -1, 1, 4, qb);
    lz_tensor *x = param(17, -1, 1, 2, xs), *w = param(18, -1, 1, 2, ws), *bias = param(19, -1, 1, 1, bs);
    lz_tensor *y1 = lz_matmul(a, b), *y2 = lz_matmul(p, q), *y3 = lz_linear(x, w, bias);
    keep("mm", "tall", y1);
    keep("mm", "bcast_batch", y2);
    keep("mm", "linear", y3);
    backward_of(y1, 20);
    backward_of(y2, 21);
    backward_of(y3, 22);
    lz_tensor *all[7] = {a, b, p, q, x, w, bias};
    const char *names[7] = {"a", "b", "p", "q", "x", "w", "bias"};
    grads("mm", all, names, 7);
}

static void ops_conv(void)
{
    const int64_t xs[4] = {2, 8, 19, 23}, w1[4] = {12, 8, 3, 3}, w2[4] = {8, 1, 3, 3}, w3[4] = {16, 4, 1, 1};
    lz_tensor *x = param(23, -1, 1, 4, xs), *a = param(24, -0.3f, 0.3f, 4, w1);
    lz_tensor *d = param(25, -0.3f, 0.3f, 4, w2), *g = param(26, -0.3f, 0.3f, 4, w3);
    lz_tensor *b = param(27, -0.1f, 0.1f, 1, (int64_t[]){12});
    lz_tensor *y1 = lz_conv2d(x, a, b, (lz_conv2d_opts){.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}});
    lz_tensor *y2 = lz_conv2d(x, d, NULL, (lz_conv2d_opts){.padding = {1, 1}, .groups = 8});   /* depthwise */
    lz_tensor *y3 = lz_conv2d(x, g, NULL, (lz_conv2d_opts){.groups = 2});
    keep("conv", "strided", y1);
    keep("conv", "depthwise", y2);
    keep("conv", "grouped", y3);
    backward_of(y1, 28);
    backward_of(y2, 29);
    backward_of(y3, 30);
    lz_tensor *all[5] = {x, a, d, g, b};
    const char *names[5] = {"x", "w", "dw", "gw", "b"};
    grads("conv", all, names, 5);
}

static void ops_pool_norm(void)
{
    const int64_t xs[4] = {2, 6, 21, 17}, cs[1] = {6}, ls[3] = {4, 9, 200};
    lz_tensor *x = param(31, -1, 1, 4, xs), *gw = param(32, 0.5f, 1.5f, 1, cs), *gb = param(33, -0.5f, 0.5f, 1, cs);
    lz_tensor *y1 = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = 1});
    lz_tensor *y2 = lz_avg_pool2d(x, (lz_pool2d_opts){.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0},
                                                      .ceil_mode = 1, .count_include_pad = 0});
    lz_tensor *y3 = lz_adaptive_avg_pool2d(x, 5, 3);
    lz_tensor *rm = lz_zeros(LZ_F32, 1, cs), *rv = lz_full(LZ_F32, 1, cs, 1.0);
    lz_tensor *y4 = lz_relu(lz_batch_norm(x, gw, gb, rm, rv, 1, 0.1f, 1e-5f));
    lz_tensor *t = param(34, -2, 2, 3, ls), *lw = param(35, 0.5f, 1.5f, 1, (int64_t[]){200});
    lz_tensor *y5 = lz_layer_norm(t, 1, lw, NULL, 1e-5f);
    lz_tensor *y6 = lz_hardtanh(x, -0.5f, 0.25f);
    keep("pn", "max_pool", y1);
    keep("pn", "avg_pool", y2);
    keep("pn", "adaptive", y3);
    keep("pn", "batch_norm_relu", y4);
    keep("pn", "layer_norm", y5);
    keep("pn", "hardtanh", y6);
    lz_tensor *s = lz_add(lz_add(lz_sum(y1), lz_sum(lz_mul(y2, y2))), lz_sum(lz_mul(y3, y3)));
    s = lz_add(lz_add(s, lz_sum(lz_mul(y4, y4))), lz_add(lz_sum(lz_mul(y5, y5)), lz_sum(lz_mul(y6, x))));
    CHECK(lz_backward(s) == 0);
    lz_tensor *all[5] = {x, gw, gb, t, lw};
    const char *names[5] = {"x", "gamma", "beta", "t", "ln_w"};
    grads("pn", all, names, 5);
    keep("pn", "running_mean", rm);
    keep("pn", "running_var", rv);
}

static void ops_shape_embed(void)
{
    const int64_t xs[4] = {3, 4, 5, 6}, ws[2] = {50, 24}, e3[3] = {7, 3, 10};
    lz_tensor *x = param(36, -1, 1, 4, xs), *w = param(37, -1, 1, 2, ws);
    const int perm[4] = {2, 0, 3, 1};
    lz_tensor *p = lz_permute(x, perm), *s = lz_slice(x, 2, 1, 4);
    lz_tensor *parts[3] = {x, lz_scale(x, 2.0f), x};
    lz_tensor *c = lz_cat(parts, 3, 1);
    lz_tensor *e = lz_expand(lz_slice(lz_reshape(x, 2, (int64_t[]){3, 120}), 1, 0, 10), 3, e3);
    int64_t idx[60];
    for (int i = 0; i < 60; i++) idx[i] = (i * 7) % 50;   /* repeats: the gradient sums them */
    lz_tensor *ids = lz_from_host(idx, LZ_I64, 2, (int64_t[]){6, 10});
    lz_tensor *emb = lz_embedding(w, ids);
    keep("sh", "permute", p);
    keep("sh", "slice", s);
    keep("sh", "cat", c);
    keep("sh", "expand", e);
    keep("sh", "embedding", emb);
    keep("sh", "permute_bf16", lz_cast(p, LZ_BF16));
    lz_tensor *l = lz_add(lz_add(lz_sum(lz_mul(p, p)), lz_sum(lz_mul(s, s))), lz_sum(lz_mul(c, c)));
    l = lz_add(l, lz_sum(lz_mul(e, e)));
    l = lz_add(l, lz_sum(lz_mul(emb, emb)));
    CHECK(lz_backward(l) == 0);
    lz_tensor *all[2] = {x, w};
    const char *names[2] = {"x", "w"};
    grads("sh", all, names, 2);
}

/* the ops added for models from PyTorch */
static void ops_ext(void)
{
    const int64_t s2[2] = {48, 70}, x3[3] = {6, 9, 11};
    lz_tensor *a = param(60, -2, 2, 2, s2), *x = param(61, -1, 1, 3, x3);
    lz_tensor *y = lz_add(lz_silu(a), lz_mul(lz_sin(a), lz_cos(lz_scale(a, 3.0f))));
    y = lz_minimum(y, lz_add(a, lz_ne(a, lz_relu(a))));
    keep("ext", "silu_sin_cos_min", y);
    keep("ext", "tri_mask", lz_tri_mask(a, 2, 1, -5.0f));
    keep("ext", "cumsum", lz_cumsum(x, 1));
    int64_t gi[48 * 70];
    for (int i = 0; i < 48 * 70; i++) gi[i] = (i * 7) % 70;
    lz_tensor *idx = lz_from_host(gi, LZ_I64, 2, s2);
    lz_tensor *g = lz_gather(a, 1, idx);
    keep("ext", "gather", g);
    keep("ext", "argmax", lz_cast(lz_argmax(x, 2, 0), LZ_F32));
    int64_t tg[48];
    for (int i = 0; i < 48; i++) tg[i] = i % 5 == 0 ? -100 : (i * 13) % 70;
    lz_tensor *target = lz_from_host(tg, LZ_I64, 1, (int64_t[]){48});
    lz_cross_entropy_opts ce = {.weight = lz_test_rand(62, 0.5f, 1.5f, 1, (int64_t[]){70}), .ignore_index = -100,
                                .use_ignore_index = 1, .label_smoothing = 0.1f};
    lz_tensor *l = lz_cross_entropy_ex(a, target, &ce);
    keep("ext", "ce_ex", l);
    lz_tensor *s = lz_add(lz_add(l, lz_sum(lz_mul(y, y))), lz_sum(lz_mul(g, g)));
    CHECK(lz_backward(lz_add(s, lz_sum(lz_mul(lz_cumsum(x, 1), x)))) == 0);
    lz_tensor *all[2] = {a, x};
    const char *names[2] = {"a", "x"};
    grads("ext", all, names, 2);
}

/* the generator: bitwise the same on every device */
static void ops_random(void)
{
    const int64_t s[2] = {333, 1001};
    keep("exact", "fill_uniform", lz_from_random(42, 0, -0.5f, 2.0f, 2, s));
    keep("exact", "fill_normal", lz_from_random(43, 1, 0.1f, 0.02f, 2, s));
    lz_manual_seed(7);
    keep("exact", "rand", lz_rand(2, s));
    lz_tensor *ones = lz_full(LZ_F32, 2, s, 1.0);
    keep("exact", "dropout_mask", lz_dropout(ones, 0.3f, 1));
    keep("near", "randn", lz_randn(2, s));   /* double log/cos: each device's libm */
}

static void ops_autocast(void)
{
    const int64_t xs[4] = {4, 16, 14, 14}, ws[4] = {32, 16, 3, 3}, as[2] = {64, 96}, bs[2] = {96, 80};
    lz_tensor *x = param(44, -1, 1, 4, xs), *w = param(45, -0.2f, 0.2f, 4, ws);
    lz_tensor *a = param(46, -1, 1, 2, as), *b = param(47, -1, 1, 2, bs);
    CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *y = lz_conv2d(x, w, NULL, (lz_conv2d_opts){.padding = {1, 1}});
    lz_tensor *z = lz_matmul(a, b);
    lz_autocast_end();
    keep("bf16", "conv", y);
    keep("bf16", "matmul", z);
    backward_of(y, 48);
    backward_of(z, 49);
    lz_tensor *all[4] = {x, w, a, b};
    const char *names[4] = {"x", "w", "a", "b"};
    grads("bf16", all, names, 4);
}

static int cmd_ops(const char *file)
{
    out_set = lz_params_new();
    void (*const groups[])(void) = {ops_elementwise, ops_reduce, ops_softmax, ops_linalg, ops_conv,
                                    ops_pool_norm, ops_shape_embed, ops_ext, ops_random, ops_autocast};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        lz_scope_begin();
        groups[g]();
        lz_mark_step();
        lz_scope_end();
    }
    CHECK(lz_safetensors_save(file, out_set) == 0);
    printf("ops: %d results on %s written to %s\n", n_out, lz_device_name(), file);
    lz_params_free(out_set);
    return lz_test_done();
}

/* ---- compare --------------------------------------------------------------- */

static float *read_all(lz_tensor *t, int64_t *n)
{
    *n = lz_numel(t);
    return lz_test_read(t);
}

static int cmd_compare(const char *cpu_file, const char *gpu_file)
{
    lz_params *cpu = lz_safetensors_read(cpu_file), *gpu = lz_safetensors_read(gpu_file);
    CHECK(cpu && gpu);
    if (!cpu || !gpu) return lz_test_done();
    CHECK_EQ_I(lz_params_count(cpu), lz_params_count(gpu));
    int worst_i = -1;
    double worst = 0;
    for (int i = 0; i < lz_params_count(cpu); i++) {
        const char *name = lz_params_name(cpu, i);
        lz_tensor *g = lz_params_find(gpu, name);
        CHECK(g != NULL);
        if (!g) continue;
        int64_t n, m;
        float *a = read_all(lz_params_at(cpu, i), &n), *b = read_all(g, &m);
        CHECK(a && b && n == m);
        if (!a || !b || n != m) {
            free(a);
            free(b);
            continue;
        }
        const int exact = !strncmp(name, "exact:", 6), bf16 = !strncmp(name, "bf16:", 5);
        const double tol = exact ? 0 : bf16 ? 3e-2 : !strncmp(name, "near:", 5) ? 1e-6 : 1e-4;
        int64_t differ = 0;
        for (int64_t k = 0; k < n; k++) differ += memcmp(&a[k], &b[k], 4) != 0;
        const double err = lz_test_rel_err(b, a, n);
        const int ok = exact ? differ == 0 : err <= tol;
        CHECK(ok);
        printf("%-28s %8lld elements  rel err %.2e (tolerance %.0e)  %lld differ in bits%s\n", name, (long long)n,
               err, tol, (long long)differ, ok ? "" : "  FAILED");
        if (!exact && err / (tol > 0 ? tol : 1) > worst) {
            worst = err / tol;
            worst_i = i;
        }
        free(a);
        free(b);
    }
    if (worst_i >= 0) printf("nearest its tolerance: %s (%.2f of it)\n", lz_params_name(cpu, worst_i), worst);
    lz_params_free(cpu);
    lz_params_free(gpu);
    return lz_test_done();
}

/* ---- capture and launches -------------------------------------------------- */

enum { STEPS = 5 };

/* the parameters' values after STEPS steps, lazy or captured */
static float *train(const char *name, int captured, float *losses, int64_t *n_values)
{
    lz_model *m = lz_model_new(name, "smoke", 3);
    CHECK(m != NULL);
    if (!m) return NULL;
    lz_model_set_dropout(m, 0);
    lz_test_trainer t = {m, lz_test_model_sgd(m, 0.01f)};
    lz_tensor *x, *y;
    lz_test_model_batch(lz_model_get_spec(m), 1, &x, &y);
    lz_fn *f = captured ? lz_capture(lz_test_sgd_step, &t, 2, 1) : NULL;
    for (int s = 0; s < STEPS; s++) {
        lz_tensor *in[2] = {x, y}, *out[1] = {NULL};
        if (captured) {
            CHECK_EQ_I(lz_call(f, in, out), 0);
        } else {
            lz_scope_begin();
            CHECK_EQ_I(lz_test_sgd_step(&t, in, out), 0);
            lz_keep(out[0]);
            lz_scope_end();
            lz_mark_step();
        }
        losses[s] = out[0] ? lz_item(out[0]) : NAN;
        lz_free(out[0]);
    }
    lz_params *p = lz_model_params(m);
    int64_t total = 0, at = 0;
    for (int i = 0; i < lz_params_count(p); i++)
        if (lz_tensor_dtype(lz_params_at(p, i)) == LZ_F32) total += lz_numel(lz_params_at(p, i));
    float *all = malloc(sizeof *all * (size_t)total);
    for (int i = 0; all && i < lz_params_count(p); i++) {
        if (lz_tensor_dtype(lz_params_at(p, i)) != LZ_F32) continue;   /* a batch counter */
        int64_t k;
        float *v = read_all(lz_params_at(p, i), &k);
        if (v) memcpy(all + at, v, sizeof *v * (size_t)k);
        at += k;
        free(v);
    }
    *n_values = total;
    if (f) lz_fn_free(f);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(t.opt);
    lz_model_free(m);
    return all;
}

static int cmd_capture(void)
{
    const char *models[] = {"resnet18", "BERT_pytorch", "mobilenet_v2"};
    for (size_t k = 0; k < sizeof models / sizeof *models; k++) {
        float lazy_loss[STEPS], cap_loss[STEPS];
        int64_t n1 = 0, n2 = 0;
        float *a = train(models[k], 0, lazy_loss, &n1), *b = train(models[k], 1, cap_loss, &n2);
        CHECK(a && b && n1 == n2);
        if (a && b && n1 == n2) {
            /* the same kernels in the same order: equal but for the order
               of atomic sums (scatter gradients, cuDNN's weight gradients) */
            const double err = lz_test_rel_err(b, a, n1);
            int64_t same = 0;
            for (int64_t i = 0; i < n1; i++) same += !memcmp(&a[i], &b[i], 4);
            printf("%-16s lazy loss %.6f -> %.6f, captured %.6f -> %.6f; parameters after %d steps: rel err %.2e, "
                   "%.1f%% bitwise equal\n", models[k], lazy_loss[0], lazy_loss[STEPS - 1], cap_loss[0],
                   cap_loss[STEPS - 1], STEPS, err, 100.0 * (double)same / (double)n1);
            CHECK(err <= 1e-5);
            for (int s = 0; s < STEPS; s++) CHECK(fabsf(lazy_loss[s] - cap_loss[s]) <= 1e-5f * fabsf(lazy_loss[s]) + 1e-6f);
        }
        free(a);
        free(b);
    }
    return lz_test_done();
}

typedef struct mlp { lz_tensor *w1, *w2; lz_sgd *opt; } mlp;

static int mlp_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    mlp *m = ctx;
    lz_sgd_zero_grad(m->opt);
    lz_tensor *h = lz_relu(lz_matmul(in[0], m->w1));
    lz_tensor *loss = lz_cross_entropy(lz_matmul(h, m->w2), in[1]);
    if (!loss || lz_backward(loss) || lz_sgd_step(m->opt)) return -1;
    out[0] = loss;
    return 0;
}

static mlp make_mlp(void)
{
    const int64_t s1[2] = {256, 512}, s2[2] = {512, 10};
    mlp m = {lz_test_rand(50, -0.05f, 0.05f, 2, s1), lz_test_rand(51, -0.05f, 0.05f, 2, s2), NULL};
    lz_requires_grad(m.w1, 1);
    lz_requires_grad(m.w2, 1);
    lz_tensor *ps[2] = {m.w1, m.w2};
    m.opt = lz_sgd_new(ps, 2, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
    return m;
}

static void mlp_batch(int step, lz_tensor **x, lz_tensor **y)
{
    lz_test_mlp_batch(step, 64, 256, 10, x, y);
}

static int cmd_launches(void)
{
    mlp m = make_mlp();
    lz_fn *f = lz_capture(mlp_step, &m, 2, 1);
    int bad = 0;
    for (int s = 0; s < 8; s++) {
        lz_tensor *x, *y, *out[1] = {NULL};
        mlp_batch(s, &x, &y);   /* new input buffers every call */
        lz_tensor *in[2] = {x, y};
        CHECK(lz_wait() == 0);
        lz_metrics_reset();
        CHECK_EQ_I(lz_call(f, in, out), 0);
        CHECK(lz_wait() == 0);
        lz_metrics mt = lz_metrics_get();
        printf("call %d: executions %lld, graph launches %lld, kernel launches %lld (program steps %lld)\n", s,
               (long long)mt.executions, (long long)mt.graph_launches, (long long)mt.kernel_launches,
               (long long)mt.kernels);
        if (s >= 2) {   /* the trace and the first replay go kernel by kernel */
            bad += mt.executions != 1 || mt.graph_launches != 1 || mt.kernel_launches != 0;
        }
        lz_free(out[0]);
        lz_free(x);
        lz_free(y);
    }
    CHECK_EQ_I(bad, 0);
    /* lazy steps: one execution each, a graph from the executable's second run */
    lz_metrics_reset();
    for (int s = 0; s < 4; s++) {
        lz_tensor *x, *y, *out[1] = {NULL};
        mlp_batch(s, &x, &y);
        lz_tensor *in[2] = {x, y};
        lz_scope_begin();
        CHECK_EQ_I(mlp_step(&m, in, out), 0);
        lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
        CHECK(isfinite(lz_item(out[0])));
        lz_free(out[0]);
        lz_free(x);
        lz_free(y);
    }
    CHECK(lz_wait() == 0);
    lz_metrics mt = lz_metrics_get();
    printf("4 lazy steps: executions %lld, graph launches %lld, kernel launches %lld\n", (long long)mt.executions,
           (long long)mt.graph_launches, (long long)mt.kernel_launches);
    CHECK_EQ_I(mt.executions, 4);
    CHECK(mt.graph_launches >= 2);
    lz_fn_free(f);
    lz_sgd_free(m.opt);
    return lz_test_done();
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the host's time in lz_call for a replay (the device's runs overlap) */
static int cmd_replay(void)
{
    mlp m = make_mlp();
    lz_fn *f = lz_capture(mlp_step, &m, 2, 1);
    lz_tensor *x, *y;
    mlp_batch(0, &x, &y);
    lz_tensor *in[2] = {x, y};
    enum { N = 400 };
    static double us[N];
    for (int s = 0; s < N + 10; s++) {
        lz_tensor *out[1] = {NULL};
        const double t0 = now_us();
        CHECK_EQ_I(lz_call(f, in, out), 0);
        if (s >= 10) us[s - 10] = now_us() - t0;
        lz_free(out[0]);
        if (s % 50 == 49) CHECK(lz_wait() == 0);   /* keep the queue short */
    }
    CHECK(lz_wait() == 0);
    qsort(us, N, sizeof *us, cmp_double);
    printf("host time per captured replay (lz_call): median %.1f us, p10 %.1f, p90 %.1f (target: under 20)\n",
           us[N / 2], us[N / 10], us[N * 9 / 10]);
    lz_free(x);
    lz_free(y);
    lz_fn_free(f);
    lz_sgd_free(m.opt);
    return lz_test_done();
}

/* ---- memory ---------------------------------------------------------------- */

static size_t device_free(void)
{
    size_t free_b = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_b, &total) == cudaSuccess);
    return free_b;
}

/* bytes the device's stream-ordered pool (the backend's) holds */
static size_t pool_reserved(void)
{
    cudaMemPool_t pool;
    uint64_t bytes = 0;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess &&
          cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes) == cudaSuccess);
    return (size_t)bytes;
}

static int cmd_memory(void)
{
    CHECK_EQ_I(lz_device_use("cuda"), 0);
    lz_tensor *warm = lz_zeros(LZ_F32, 1, (int64_t[]){16});   /* the backend starts: its context, modules */
    CHECK(lz_sync(&warm, 1, 1) == 0);
    lz_free(warm);
    CHECK(lz_wait() == 0);
    const size_t before = device_free();
    float losses[STEPS];
    int64_t n = 0;
    float *v = train("resnet50", 1, losses, &n);
    free(v);
    const size_t during = device_free(), pool_during = pool_reserved();
    lz_shutdown();
    const size_t after = device_free(), pool_after = pool_reserved();
    printf("device memory free: %zu MiB before training, %zu MiB after resnet50's steps, %zu MiB after "
           "lz_shutdown; the pool held %zu MiB, then %zu bytes\n", before >> 20, during >> 20, after >> 20,
           pool_during >> 20, pool_after);
    CHECK(during < before);
    CHECK(pool_during > 0);
    CHECK_EQ_I(pool_after, 0);   /* every buffer and arena back to the device */
    /* the libraries' code loaded since (cuDNN's, cuBLASLt's kernels) stays */
    CHECK(after + (512u << 20) >= before);
    return lz_test_done();
}

static int cmd_oom(void)
{
    /* more than any lent GPU holds, in pieces of 16 GiB */
    lz_tensor *held[32];
    int n = 0;
    const int64_t big[1] = {(int64_t)4 << 30};   /* 16 GiB of f32 */
    const char *msg = NULL;
    for (; n < 32; n++) {
        held[n] = lz_zeros(LZ_F32, 1, big);
        if (!held[n]) {
            msg = lz_last_error();
            break;
        }
        CHECK(lz_wait() == 0);
    }
    printf("%d pieces of 16 GiB held; then: %s\n", n, msg ? msg : "(no failure)");
    CHECK(msg && strstr(msg, "out of device memory") && strstr(msg, "17179869184"));
    /* an executable whose result cannot fit fails its step, named */
    lz_tensor *a = lz_zeros(LZ_F32, 2, (int64_t[]){200000, 1}), *b = lz_zeros(LZ_F32, 2, (int64_t[]){1, 200000});
    lz_tensor *c = lz_matmul(a, b);   /* 160 GB */
    const int rc = lz_sync(&c, 1, 1);
    printf("a 160 GB product: %s\n", rc ? lz_last_error() : "ran");
    CHECK(rc != 0 && strstr(lz_last_error(), "out of device memory"));
    lz_free(c);
    for (int k = 0; k < n; k++) lz_free(held[k]);
    /* and the device works on */
    lz_tensor *x = lz_full(LZ_F32, 1, (int64_t[]){1000}, 2.0);
    lz_tensor *s = lz_sum(x);
    CHECK(s && fabsf(lz_item(s) - 2000.0f) < 1e-3f);
    printf("after freeing: sum of 1000 twos = %.1f\n", s ? lz_item(s) : -1.0f);
    return lz_test_done();
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "ops") && argc == 3) return cmd_ops(argv[2]);
    if (!strcmp(cmd, "compare") && argc == 4) return cmd_compare(argv[2], argv[3]);
    if (!strcmp(cmd, "capture")) return cmd_capture();
    if (!strcmp(cmd, "launches")) return cmd_launches();
    if (!strcmp(cmd, "replay")) return cmd_replay();
    if (!strcmp(cmd, "memory")) return cmd_memory();
    if (!strcmp(cmd, "oom")) return cmd_oom();
    fprintf(stderr, "usage: gpu_suite ops FILE | compare CPU_FILE GPU_FILE | capture | launches | replay | memory | oom\n");
    return 2;
}
