/* The ops added for models from PyTorch (silu, sin, cos, ne, minimum,
 * tri_mask, cumsum, gather, scatter_add, index_select, argmax,
 * cross-entropy with options, attention with options, gradient clipping):
 * values against hand computations in double, every gradient against
 * finite differences, and the kernels' index checks. Parity with torch
 * itself is python/tests/test_bridge.py's (test_c_ops_vs_torch). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define GRAD_TOL 2e-2

static lz_tensor *grad_rand(unsigned seed, float lo, float hi, int nd, const int64_t *s)
{
    lz_tensor *t = lz_test_rand(seed, lo, hi, nd, s);
    lz_requires_grad(t, 1);
    return t;
}

static void check_grad(const char *what, lz_test_fn f, void *ctx, int n, lz_tensor *const *in)
{
    double e = lz_test_gradcheck(f, ctx, n, in);
    if (!(e < GRAD_TOL)) fprintf(stderr, "%s: gradient rel err %g\n", what, e);
    CHECK(e < GRAD_TOL);
}

static lz_tensor *i64_tensor(const int64_t *v, int nd, const int64_t *s)
{
    return lz_from_host(v, LZ_I64, nd, s);
}

/* ---- element-wise ---------------------------------------------------------- */

static lz_tensor *f_silu(void *c, lz_tensor *const *in) { (void)c; return lz_silu(in[0]); }
static lz_tensor *f_sincos(void *c, lz_tensor *const *in)
{
    (void)c;
    return lz_add(lz_sin(in[0]), lz_mul(lz_cos(in[0]), in[1]));
}
static lz_tensor *f_minimum(void *c, lz_tensor *const *in) { (void)c; return lz_minimum(in[0], in[1]); }

static void test_elementwise(void)
{
    const int64_t s[2] = {4, 5};
    lz_tensor *x = grad_rand(1, -4, 4, 2, s), *y = grad_rand(2, -2, 2, 2, s);
    float *xv = lz_test_read(x), *yv = lz_test_read(y);
    float *sv = lz_test_read(lz_silu(x)), *cv = lz_test_read(lz_cos(x)), *nv = lz_test_read(lz_ne(x, x));
    float *mv = lz_test_read(lz_minimum(x, y));
    for (int i = 0; i < 20; i++) {
        CHECK_NEAR(sv[i], xv[i] / (1 + exp(-(double)xv[i])), 1e-6 * (1 + fabs(xv[i])));
        CHECK_NEAR(cv[i], cos((double)xv[i]), 1e-6);
        CHECK_NEAR(nv[i], 0, 0);
        CHECK_NEAR(mv[i], fmin(xv[i], yv[i]), 0);
    }
    free(xv), free(yv), free(sv), free(cv), free(nv), free(mv);
    lz_tensor *in[2] = {x, y};
    check_grad("silu", f_silu, NULL, 1, in);
    check_grad("sin cos", f_sincos, NULL, 2, in);
    check_grad("minimum", f_minimum, NULL, 2, in);
    /* minimum of integers keeps the extremes (no negation inside) */
    const int64_t one[1] = {2};
    const int64_t a[2] = {INT64_MIN, 5}, b[2] = {0, -3};
    lz_tensor *ia = i64_tensor(a, 1, one), *ib = i64_tensor(b, 1, one), *m = lz_minimum(ia, ib);
    int64_t got[2] = {0};
    CHECK(m && lz_to_host(m, got, sizeof got) == 0);
    CHECK(got[0] == INT64_MIN && got[1] == -3);
    float ne[2];
    lz_tensor *n = lz_ne(ia, ib);
    CHECK(n && lz_to_host(n, ne, sizeof ne) == 0 && ne[0] == 1.0f && ne[1] == 1.0f);
    lz_free(ia), lz_free(ib), lz_free(m), lz_free(n), lz_free(x), lz_free(y);
}

/* ---- indexing ------------------------------------------------------------------ */

static lz_tensor *f_tril(void *c, lz_tensor *const *in) { (void)c; return lz_tri_mask(in[0], -1, 0, 0.0f); }
static lz_tensor *f_triu(void *c, lz_tensor *const *in) { (void)c; return lz_tri_mask(in[0], 1, 1, 0.0f); }
static lz_tensor *f_cumsum(void *c, lz_tensor *const *in) { return lz_cumsum(in[0], *(int *)c); }
static lz_tensor *f_gather(void *c, lz_tensor *const *in) { return lz_gather(in[0], 1, (lz_tensor *)c); }
static lz_tensor *f_scatter(void *c, lz_tensor *const *in) { return lz_scatter_add(in[0], 1, (lz_tensor *)c, in[1]); }
static lz_tensor *f_index_select(void *c, lz_tensor *const *in) { return lz_index_select(in[0], 0, (lz_tensor *)c); }

static void test_indexing(void)
{
    const int64_t s[3] = {2, 3, 4};
    lz_tensor *x = grad_rand(3, -1, 1, 3, s);
    float *xv = lz_test_read(x), *tl = lz_test_read(lz_tri_mask(x, 0, 0, -5.0f));
    float *tu = lz_test_read(lz_tri_mask(x, 1, 1, 0.0f)), *cs = lz_test_read(lz_cumsum(x, 1));
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                int e = (b * 3 + i) * 4 + j;
                CHECK_NEAR(tl[e], j <= i ? xv[e] : -5.0f, 0);
                CHECK_NEAR(tu[e], j >= i + 1 ? xv[e] : 0.0f, 0);
                double acc = 0;
                for (int k = 0; k <= i; k++) acc += xv[(b * 3 + k) * 4 + j];
                CHECK_NEAR(cs[e], acc, 1e-6);
            }
    free(tl), free(tu), free(cs);
    lz_tensor *in[2] = {x, NULL};
    check_grad("tril", f_tril, NULL, 1, in);
    check_grad("triu", f_triu, NULL, 1, in);
    int ax = 2;
    check_grad("cumsum", f_cumsum, &ax, 1, in);
    ax = 0;
    check_grad("cumsum axis 0", f_cumsum, &ax, 1, in);

    /* gather along axis 1 with repeated indices: out[b][i][j] = x[b][idx][j] */
    const int64_t is[3] = {2, 2, 3};
    const int64_t iv[12] = {0, 2, 1, 2, 2, 2, 1, 0, 0, 0, 1, 2};
    lz_tensor *idx = i64_tensor(iv, 3, is);
    float *gv = lz_test_read(lz_gather(x, 1, idx));
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                CHECK_NEAR(gv[(b * 2 + i) * 3 + j], xv[(b * 3 + iv[(b * 2 + i) * 3 + j]) * 4 + j], 0);
    free(gv);
    check_grad("gather", f_gather, idx, 1, in);
    lz_tensor *src = grad_rand(4, -1, 1, 3, is);
    lz_tensor *in2[2] = {x, src};
    check_grad("scatter_add", f_scatter, idx, 2, in2);
    const int64_t sel_s[1] = {4};
    const int64_t sel[4] = {1, 1, 0, 1};
    lz_tensor *sidx = i64_tensor(sel, 1, sel_s);
    lz_tensor *sv = lz_index_select(x, 0, sidx);
    CHECK(sv && lz_dim(sv, 0) == 4 && lz_dim(sv, 2) == 4);
    float *svv = lz_test_read(sv);
    for (int r = 0; r < 4; r++)
        for (int e = 0; e < 12; e++) CHECK_NEAR(svv[r * 12 + e], xv[sel[r] * 12 + e], 0);
    free(svv);
    check_grad("index_select", f_index_select, sidx, 1, in);

    /* argmax: first maximum, NaN wins */
    const int64_t as[2] = {2, 3};
    const float av[6] = {1, 3, 3, 2, NAN, 5};
    lz_tensor *a = lz_from_host(av, LZ_F32, 2, as), *am = lz_argmax(a, 1, 0);
    int64_t got[2] = {0};
    CHECK(am && lz_ndim(am) == 1 && lz_to_host(am, got, sizeof got) == 0);
    CHECK_EQ_I(got[0], 1);
    CHECK_EQ_I(got[1], 1);

    /* an index out of range fails the execution, naming it */
    const int64_t bad[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
    lz_tensor *bidx = i64_tensor(bad, 3, is), *bg = lz_gather(x, 1, bidx);
    float tmp[12];
    CHECK(bg && lz_to_host(bg, tmp, sizeof tmp) != 0);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_gather") && strstr(lz_last_error(), "index 3"));
    lz_clear_error();
    free(xv);
    lz_free(bg), lz_free(bidx), lz_free(a), lz_free(am), lz_free(sidx), lz_free(sv), lz_free(src);
    lz_free(idx), lz_free(x);
}

/* ---- cross-entropy with options ------------------------------------------------- */

typedef struct ce_ctx { lz_tensor *target; lz_cross_entropy_opts o; } ce_ctx;

static lz_tensor *f_ce(void *c, lz_tensor *const *in)
{
    ce_ctx *cx = c;
    return lz_cross_entropy_ex(in[0], cx->target, &cx->o);
}

/* torch's formula in double: per row (1-e) w_t (lse - x_t) + e/C sum_c w_c (lse - x_c) */
static double ce_ref(const float *x, const int64_t *t, const float *w, int n, int c, int64_t ignore,
                     float eps, int reduction, double *rows)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        rows[i] = 0;
        if (t[i] == ignore) continue;
        double mx = x[i * c], s = 0, sm = 0;
        for (int j = 1; j < c; j++) mx = fmax(mx, x[i * c + j]);
        for (int j = 0; j < c; j++) s += exp(x[i * c + j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < c; j++) sm += (w ? w[j] : 1) * (lse - x[i * c + j]);
        double wt = w ? w[t[i]] : 1;
        rows[i] = (1 - eps) * wt * (lse - x[i * c + t[i]]) + eps / c * sm;
        num += rows[i];
        den += wt;
    }
    return reduction == LZ_REDUCTION_MEAN ? num / den : num;
}

static void test_cross_entropy(void)
{
    const int n = 5, c = 4;
    const int64_t ls[2] = {n, c}, ts[1] = {n}, ws[1] = {c};
    lz_tensor *x = grad_rand(5, -3, 3, 2, ls);
    lz_tensor *w = lz_test_rand(6, 0.5f, 2.0f, 1, ws);
    const int64_t tv[5] = {1, -100, 3, 0, -100};
    lz_tensor *t = i64_tensor(tv, 1, ts);
    float *xv = lz_test_read(x), *wv = lz_test_read(w);
    const float epss[2] = {0.0f, 0.1f};
    for (int e = 0; e < 2; e++)
        for (int hw = 0; hw < 2; hw++)
            for (int red = 0; red < 3; red++) {
                ce_ctx cx = {t, {hw ? w : NULL, -100, 1, epss[e], (lz_reduction)red}};
                double rows[5];
                double want = ce_ref(xv, tv, hw ? wv : NULL, n, c, -100, epss[e], red, rows);
                lz_tensor *l = f_ce(&cx, &x);
                float *lv = lz_test_read(l);
                CHECK(lv != NULL);
                if (!lv) continue;
                if (red == LZ_REDUCTION_NONE)
                    for (int i = 0; i < n; i++) CHECK_NEAR(lv[i], rows[i], 1e-5 * (1 + fabs(rows[i])));
                else
                    CHECK_NEAR(lv[0], want, 1e-5 * (1 + fabs(want)));
                free(lv);
                lz_free(l);
                lz_tensor *in[1] = {x};
                check_grad("cross_entropy_ex", f_ce, &cx, 1, in);
            }
    /* without options it equals lz_cross_entropy on valid targets */
    const int64_t tv2[5] = {1, 2, 3, 0, 0};
    lz_tensor *t2 = i64_tensor(tv2, 1, ts);
    float a = lz_item(lz_cross_entropy_ex(x, t2, NULL)), b = lz_item(lz_cross_entropy(x, t2));
    CHECK_NEAR(a, b, 1e-6);
    /* every target ignored: 0/0, NaN as in torch */
    const int64_t tv3[5] = {-100, -100, -100, -100, -100};
    lz_tensor *t3 = i64_tensor(tv3, 1, ts);
    lz_cross_entropy_opts o = {NULL, -100, 1, 0.0f, LZ_REDUCTION_MEAN};
    CHECK(isnan(lz_item(lz_cross_entropy_ex(x, t3, &o))));
    /* a target out of range that is not ignore_index is an error naming it */
    o.ignore_index = 0;
    lz_tensor *bad = lz_cross_entropy_ex(x, t, &o);
    float v;
    CHECK(bad && lz_to_host(bad, &v, sizeof v) != 0);
    CHECK(lz_last_error() && strstr(lz_last_error(), "out of range"));
    lz_clear_error();
    o.label_smoothing = 2.0f;
    CHECK(lz_cross_entropy_ex(x, t, &o) == NULL && strstr(lz_last_error(), "label_smoothing"));
    lz_clear_error();
    free(xv), free(wv);
    lz_free(bad), lz_free(t3), lz_free(t2), lz_free(t), lz_free(w), lz_free(x);
}

/* ---- attention with options ---------------------------------------------------- */

static lz_tensor *f_attn(void *c, lz_tensor *const *in)
{
    return lz_attention_ex(in[0], in[1], in[2], (const lz_attention_opts *)c);
}

static void test_attention(void)
{
    const int64_t qs[4] = {1, 4, 3, 5}, ks[4] = {1, 2, 3, 5};
    lz_tensor *q = grad_rand(7, -1, 1, 4, qs), *k = grad_rand(8, -1, 1, 4, ks), *v = grad_rand(9, -1, 1, 4, ks);
    lz_attention_opts o = {NULL, 0.0f, 1, 0.0f, 1};
    lz_tensor *y = f_attn(&o, (lz_tensor *[]){q, k, v});
    /* query 0 sees key 0 alone: its output is v's row 0 of its group's head */
    float *yv = lz_test_read(y), *vv = lz_test_read(v);
    CHECK(yv && vv);
    if (yv && vv)
        for (int h = 0; h < 4; h++)
            for (int d = 0; d < 5; d++) CHECK_NEAR(yv[h * 15 + d], vv[(h / 2) * 15 + d], 1e-6);
    free(yv), free(vv);
    lz_tensor *in[3] = {q, k, v};
    check_grad("attention causal gqa", f_attn, &o, 3, in);
    o.scale = 0.3f;
    check_grad("attention causal gqa scale", f_attn, &o, 3, in);
    o.mask = q;
    CHECK(f_attn(&o, in) == NULL && strstr(lz_last_error(), "causal"));
    lz_clear_error();
    lz_free(y), lz_free(q), lz_free(k), lz_free(v);
}

/* ---- gradient clipping ---------------------------------------------------------- */

static void test_clip(void)
{
    const int64_t s1[1] = {3}, s2[2] = {2, 2};
    lz_tensor *a = grad_rand(10, -1, 1, 1, s1), *b = grad_rand(11, -1, 1, 2, s2);
    for (int round = 0; round < 2; round++) {
        const float max_norm = round ? 100.0f : 0.5f;
        lz_zero_grad(a), lz_zero_grad(b);
        lz_tensor *loss = lz_add(lz_sum(lz_mul(a, a)), lz_sum(lz_mul(lz_scale(b, 3.0f), b)));
        CHECK(lz_backward(loss) == 0);
        float *ga = lz_test_read(lz_grad(a)), *gb = lz_test_read(lz_grad(b));
        double sq = 0;
        for (int i = 0; i < 3; i++) sq += (double)ga[i] * ga[i];
        for (int i = 0; i < 4; i++) sq += (double)gb[i] * gb[i];
        double norm = sqrt(sq), coef = fmin(max_norm / (norm + 1e-6), 1.0);
        lz_tensor *ps[3] = {a, NULL, b};
        lz_tensor *nt = lz_clip_grad_norm(ps, 3, max_norm);
        CHECK(nt != NULL);
        CHECK_NEAR(lz_item(nt), norm, 1e-5 * norm);
        float *ca = lz_test_read(lz_grad(a)), *cb = lz_test_read(lz_grad(b));
        for (int i = 0; i < 3; i++) CHECK_NEAR(ca[i], ga[i] * coef, 1e-6);
        for (int i = 0; i < 4; i++) CHECK_NEAR(cb[i], gb[i] * coef, 1e-6);
        free(ga), free(gb), free(ca), free(cb);
        lz_free(nt), lz_free(loss);
    }
    lz_tensor *c = lz_test_rand(12, -1, 1, 1, s1);
    CHECK(lz_clip_grad_norm(&c, 1, 1.0f) == NULL && strstr(lz_last_error(), "gradient"));
    lz_clear_error();
    CHECK(lz_clip_grad_norm(&a, 1, 0.0f) == NULL && strstr(lz_last_error(), "max_norm"));
    lz_clear_error();
    lz_free(a), lz_free(b), lz_free(c);
}

/* ---- norms and element-wise losses ---------------------------------------------- */

static lz_tensor *f_rms(void *c, lz_tensor *const *in) { (void)c; return lz_rms_norm(in[0], 1, in[1], 1e-5f); }
static lz_tensor *f_gn(void *c, lz_tensor *const *in) { (void)c; return lz_group_norm(in[0], 2, in[1], in[2], 1e-5f); }
static lz_tensor *f_losses(void *c, lz_tensor *const *in)
{
    int r = *(int *)c;
    lz_tensor *t = in[1];
    lz_tensor *a = lz_add(lz_mse_loss(in[0], t, (lz_reduction)r), lz_l1_loss(in[0], t, (lz_reduction)r));
    lz_tensor *b = lz_add(lz_smooth_l1_loss(in[0], t, (lz_reduction)r, 0.5f),
                          lz_bce_with_logits(in[0], lz_sigmoid(t), NULL, in[2], (lz_reduction)r));
    return lz_add(a, b);
}

static void test_norms_losses(void)
{
    const int64_t xs[3] = {2, 3, 6}, ws[1] = {6};
    lz_tensor *x = grad_rand(20, -2, 2, 3, xs), *w = grad_rand(21, 0.5f, 1.5f, 1, ws);
    float *xv = lz_test_read(x), *wv = lz_test_read(w), *yv = lz_test_read(lz_rms_norm(x, 1, w, 1e-5f));
    for (int r = 0; r < 6; r++) {
        double ms = 0;
        for (int j = 0; j < 6; j++) ms += (double)xv[r * 6 + j] * xv[r * 6 + j] / 6;
        for (int j = 0; j < 6; j++) CHECK_NEAR(yv[r * 6 + j], xv[r * 6 + j] / sqrt(ms + 1e-5) * wv[j], 1e-5);
    }
    free(xv), free(wv), free(yv);
    lz_tensor *in[3] = {x, w, NULL};
    check_grad("rms_norm", f_rms, NULL, 2, in);
    const int64_t gs[4] = {2, 4, 3, 3}, cs[1] = {4};
    lz_tensor *gx = grad_rand(22, -2, 2, 4, gs), *gw = grad_rand(23, 0.5f, 1.5f, 1, cs), *gb = grad_rand(24, -1, 1, 1, cs);
    float *gv = lz_test_read(gx), *go = lz_test_read(lz_group_norm(gx, 2, NULL, NULL, 1e-5f));
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 2; g++) {
            const float *p = gv + (n * 4 + g * 2) * 9;
            double m = 0, v = 0;
            for (int i = 0; i < 18; i++) m += p[i] / 18.0;
            for (int i = 0; i < 18; i++) v += (p[i] - m) * (p[i] - m) / 18.0;
            for (int i = 0; i < 18; i++) CHECK_NEAR(go[(n * 4 + g * 2) * 9 + i], (p[i] - m) / sqrt(v + 1e-5), 1e-4);
        }
    free(gv), free(go);
    lz_tensor *gin[3] = {gx, gw, gb};
    check_grad("group_norm", f_gn, NULL, 3, gin);
    const int64_t ls[2] = {3, 4};
    lz_tensor *a = grad_rand(25, -2, 2, 2, ls), *t = grad_rand(26, -2, 2, 2, ls);
    const int64_t pws[1] = {4};
    lz_tensor *pw = lz_test_rand(27, 0.5f, 2.0f, 1, pws);
    for (int r = 0; r < 3; r++) {
        lz_tensor *lin[3] = {a, t, pw};
        check_grad("losses", f_losses, &r, 2, lin);
    }
    /* BCE with logits against its definition at one point */
    const int64_t one[1] = {1};
    const float xv1 = 0.7f, tv1 = 0.25f;
    lz_tensor *x1 = lz_from_host(&xv1, LZ_F32, 1, one), *t1 = lz_from_host(&tv1, LZ_F32, 1, one);
    double s = 1 / (1 + exp(-0.7));
    CHECK_NEAR(lz_item(lz_bce_with_logits(x1, t1, NULL, NULL, LZ_REDUCTION_MEAN)),
               -(0.25 * log(s) + 0.75 * log(1 - s)), 1e-6);
    lz_free(x1), lz_free(t1), lz_free(a), lz_free(t), lz_free(pw), lz_free(gx), lz_free(gw), lz_free(gb);
    lz_free(x), lz_free(w);
}

int main(void)
{
    test_norms_losses();
    test_elementwise();
    test_indexing();
    test_cross_entropy();
    test_attention();
    test_clip();
    return lz_test_done();
}
