/* Adam / AdamW: parity with torch.optim.Adam and torch.optim.AdamW 1.13
 * (fixtures from tests/reference/gen_optim.py), values worked out by hand,
 * the accuracy of the in-graph bias corrections over many steps, the
 * learning-rate schedules, the counters of a lazy loop, the errors of bad
 * options, and the state handles that restore an optimizer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"

/* Max relative error (max |a-b| / max |b|) against torch's f64 reference
   from the same f32 inputs; lazyc computes in f32 (torch's own f32 run is
   within 3e-7 of that reference on these cases). */
#define TOL 1e-5

static lz_adamw_opts fixture_opts(const lz_test_fx *fx)
{
    return (lz_adamw_opts){
        .lr = (float)lz_test_fx_float(fx, "lr", NAN),
        .beta1 = (float)lz_test_fx_float(fx, "beta1", NAN),
        .beta2 = (float)lz_test_fx_float(fx, "beta2", NAN),
        .eps = (float)lz_test_fx_float(fx, "eps", NAN),
        .weight_decay = (float)lz_test_fx_float(fx, "weight_decay", NAN),
        .decoupled = (int)lz_test_fx_int(fx, "decoupled", -1),
    };
}

static double param_err(lz_tensor *t, const lz_test_fx_tensor *ref, int64_t off, int64_t n)
{
    if (!ref || lz_numel(t) != n) return INFINITY;
    float *v = lz_test_read(t);
    double e = v ? lz_test_rel_err(v, (const float *)ref->data + off, n) : INFINITY;
    free(v);
    return e;
}

/* ---- op mlp_adam: a 2-layer MLP, 5 steps ------------------------------- */

#define N_PARAMS 4
static const char *PARAM_NAMES[N_PARAMS] = {"W1", "b1", "W2", "b2"};

static lz_tensor *linear(lz_tensor *x, lz_tensor *w, lz_tensor *b)
{
    return lz_add(lz_matmul(x, lz_transpose(w, 0, 1)), b);
}

static void run_mlp(const char *file, const lz_test_fx *fx, int eager)
{
    const char *mode = eager ? "eager" : "lazy";
    const lz_test_fx_tensor *x = lz_test_fx_get(fx, "x"), *y = lz_test_fx_get(fx, "y");
    const lz_test_fx_tensor *ref_losses = lz_test_fx_get(fx, "losses");
    int steps = (int)lz_test_fx_int(fx, "steps", 0);
    int shapes_ok = x && y && ref_losses && x->ndim == 3 && y->ndim == 2 &&
                    y->dtype == LZ_I64 && steps > 0 && steps <= 64 &&
                    steps == ref_losses->numel && steps == x->shape[0];
    CHECK(shapes_ok);
    if (!shapes_ok) return;

    lz_clear_error();
    lz_set_eager(eager);
    lz_tensor *params[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) {
        const lz_test_fx_tensor *p = lz_test_fx_get(fx, PARAM_NAMES[i]);
        params[i] = p ? lz_test_fx_to_lz(p) : NULL;
        CHECK(params[i] != NULL);
        if (!params[i]) return;
        lz_requires_grad(params[i], 1);
    }
    lz_adamw *opt = lz_adamw_new(params, N_PARAMS, fixture_opts(fx));
    CHECK(opt != NULL);

    float losses[64];
    int64_t batch = x->shape[1], n_in = x->shape[2];
    int64_t xshape[2] = {batch, n_in}, yshape[1] = {batch};
    int ok = opt != NULL;
    lz_metrics m0 = lz_metrics_get();
    for (int s = 0; ok && s < steps; s++) {
        if (s == 1) m0 = lz_metrics_get();
        lz_scope_begin();
        lz_tensor *xt = lz_from_host(lz_test_fx_data_at(x, (int64_t)s * batch * n_in), LZ_F32, 2, xshape);
        lz_tensor *yt = lz_from_host(lz_test_fx_data_at(y, (int64_t)s * batch), LZ_I64, 1, yshape);
        lz_adamw_zero_grad(opt);
        lz_tensor *h = lz_relu(linear(xt, params[0], params[1]));
        lz_tensor *loss = lz_keep(lz_cross_entropy(linear(h, params[2], params[3]), yt));
        ok = loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0;
        lz_scope_end();
        lz_mark_step();
        losses[s] = ok ? lz_item(loss) : NAN;
        ok = ok && !isnan(losses[s]);
        lz_free(loss);
    }
    if (!ok)
        fprintf(stderr, "%s %s: step failed: %s\n", file, mode,
                lz_last_error() ? lz_last_error() : "(no message)");
    CHECK(ok);
    CHECK_EQ_I(lz_wait(), 0);
    if (!eager) {
        /* Step 1 records the same graph as every later step (the state
           starts as data zeros, the step count is data): one execution per
           step, no compile after the first. */
        lz_metrics m1 = lz_metrics_get();
        CHECK_EQ_I(m1.compiles - m0.compiles, 0);
        CHECK_EQ_I(m1.executions - m0.executions, steps - 1);
    }

    double le = ok ? lz_test_rel_err(losses, (const float *)ref_losses->data, steps) : INFINITY;
    printf("%-20s %-5s losses rel %.2e\n", file, mode, le);
    CHECK(le <= TOL);
    for (int i = 0; i < N_PARAMS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s_final", PARAM_NAMES[i]);
        const lz_test_fx_tensor *ref = lz_test_fx_get(fx, name);
        double e = ok && ref ? param_err(params[i], ref, 0, ref->numel) : INFINITY;
        printf("%-20s %-5s %-8s rel %.2e %s\n", file, mode, name, e, e <= TOL ? "ok" : "FAIL");
        CHECK(e <= TOL);
    }
    lz_adamw_free(opt);
    for (int i = 0; i < N_PARAMS; i++) lz_free(params[i]);
    lz_set_eager(0);
}

/* ---- op skip_adam: parameters that sit some steps out ------------------ */

static void run_skip(const char *file, const lz_test_fx *fx)
{
    const lz_test_fx_tensor *p0 = lz_test_fx_get(fx, "p"), *q0 = lz_test_fx_get(fx, "q");
    const lz_test_fx_tensor *a = lz_test_fx_get(fx, "a"), *b = lz_test_fx_get(fx, "b"), *uses = lz_test_fx_get(fx, "uses");
    const lz_test_fx_tensor *ph = lz_test_fx_get(fx, "p_hist"), *qh = lz_test_fx_get(fx, "q_hist");
    int steps = (int)lz_test_fx_int(fx, "steps", 0);
    int shapes_ok = p0 && q0 && a && b && uses && ph && qh && uses->dtype == LZ_I64 &&
                    steps > 0 && uses->numel == 2 * steps && ph->numel == steps * p0->numel &&
                    qh->numel == steps * q0->numel && a->numel == ph->numel &&
                    b->numel == qh->numel;
    CHECK(shapes_ok);
    if (!shapes_ok) return;

    lz_clear_error();
    lz_tensor *p = lz_test_fx_to_lz(p0), *q = lz_test_fx_to_lz(q0);
    lz_requires_grad(p, 1);
    lz_requires_grad(q, 1);
    lz_tensor *params[2] = {p, q};
    lz_adamw *opt = lz_adamw_new(params, 2, fixture_opts(fx));
    CHECK(opt != NULL);
    const int64_t *use = uses->data;
    int ok = opt != NULL;
    for (int s = 0; ok && s < steps; s++) {
        lz_scope_begin();
        lz_adamw_zero_grad(opt);
        lz_tensor *loss = NULL;
        if (use[2 * s]) {
            lz_tensor *as = lz_from_host(lz_test_fx_data_at(a, s * p0->numel), LZ_F32, 1, p0->shape);
            loss = lz_sum(lz_mul(as, lz_mul(p, p)));
        }
        if (use[2 * s + 1]) {
            lz_tensor *bs = lz_from_host(lz_test_fx_data_at(b, s * q0->numel), LZ_F32, 1, q0->shape);
            lz_tensor *lq = lz_sum(lz_mul(bs, lz_mul(lz_mul(q, q), q)));
            loss = loss ? lz_add(loss, lq) : lq;
        }
        ok = loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0;
        lz_scope_end();
        lz_mark_step();
        double ep = ok ? param_err(p, ph, s * p0->numel, p0->numel) : INFINITY;
        double eq = ok ? param_err(q, qh, s * q0->numel, q0->numel) : INFINITY;
        printf("%-20s step %d uses p %d q %d: p rel %.2e, q rel %.2e\n", file, s,
               (int)use[2 * s], (int)use[2 * s + 1], ep, eq);
        CHECK(ep <= TOL && eq <= TOL);
    }
    CHECK(ok);
    lz_adamw_free(opt);
    lz_free(p);
    lz_free(q);
}

static void test_fixtures(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/optim", lz_test_fx_dir());
    char *files[64];
    int nf = lz_test_fx_index(dir, files, 64);
    if (nf <= 0) {
        fprintf(stderr, "no fixtures: cannot read %s/INDEX (run from tests/, or set LZ_FIXTURES)\n", dir);
        CHECK(!"optim fixtures present");
        return;
    }
    int n_mlp = 0, n_skip = 0;
    for (int i = 0; i < nf; i++) {
        char path[2048], err[2560];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        lz_test_fx fx;
        if (lz_test_fx_load(path, &fx, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            CHECK(!"fixture loads");
        } else if (!strcmp(fx.op, "mlp_adam")) {
            n_mlp++;
            run_mlp(files[i], &fx, 0);
            run_mlp(files[i], &fx, 1);
            lz_test_fx_free(&fx);
        } else if (!strcmp(fx.op, "skip_adam")) {
            n_skip++;
            run_skip(files[i], &fx);
            lz_test_fx_free(&fx);
        } else {
            fprintf(stderr, "%s: unknown op %s\n", files[i], fx.op);
            CHECK(!"known fixture op");
            lz_test_fx_free(&fx);
        }
        free(files[i]);
    }
    CHECK(n_mlp >= 3 && n_skip >= 2);
}

/* ---- values by hand ------------------------------------------------------ */

/* loss = sum(p * p), so grad = 2 p. Runs `steps` steps from p = 1. */
static void run_square(lz_adamw_opts o, int steps, float *after)
{
    const int64_t shape[1] = {1};
    float one = 1.0f;
    lz_tensor *p = lz_from_host(&one, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_adamw *opt = lz_adamw_new(&p, 1, o);
    CHECK(opt != NULL);
    for (int s = 0; s < steps && opt; s++) {
        lz_scope_begin();
        lz_adamw_zero_grad(opt);
        lz_tensor *loss = lz_sum(lz_mul(p, p));
        CHECK(loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0);
        lz_scope_end();
        lz_mark_step();
        after[s] = lz_item(p);
    }
    lz_adamw_free(opt);
    lz_free(p);
}

static void test_by_hand(void)
{
    float after[2];
    /* Adam, lr 0.1, betas 0.9 0.999, eps 0.5 (large, so that it shows), p = 1:
       step 1: g = 2, m = 0.1 * 2 = 0.2, v = 0.001 * 4 = 0.004
               bias corrections 1 - 0.9 = 0.1 and 1 - 0.999 = 0.001
               denom = sqrt(0.004) / sqrt(0.001) + 0.5 = 2 + 0.5 = 2.5
               p = 1 - (0.1 / 0.1) * 0.2 / 2.5 = 1 - 0.08 = 0.92 */
    run_square((lz_adamw_opts){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 0.5f}, 1, after);
    CHECK_NEAR(after[0], 0.92, 1e-6);

    /* Adam with weight decay 0.5 (L2: added to the grad), same otherwise:
       step 1: g = 2 + 0.5 * 1 = 2.5, m = 0.25, v = 0.00625
               denom = sqrt(0.00625 / 0.001) + 0.5 = 2.5 + 0.5 = 3
               p = 1 - (0.1 / 0.1) * 0.25 / 3 = 1 - 0.08333333 = 0.91666667 */
    run_square((lz_adamw_opts){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 0.5f,
                               .weight_decay = 0.5f}, 1, after);
    CHECK_NEAR(after[0], 0.9166666667, 1e-6);

    /* AdamW with weight decay 0.5 (decoupled): the decay comes first and the
       grad is the one of p = 1:
       step 1: p = 1 * (1 - 0.1 * 0.5) = 0.95
               g = 2, m = 0.2, v = 0.004, denom = 2 + 0.5 = 2.5
               p = 0.95 - 1 * 0.2 / 2.5 = 0.95 - 0.08 = 0.87 */
    run_square((lz_adamw_opts){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 0.5f,
                               .weight_decay = 0.5f, .decoupled = 1}, 1, after);
    CHECK_NEAR(after[0], 0.87, 1e-6);

    /* Adam, lr 0.1, betas 0.9 0.999, eps 1e-8: two steps, so that the bias
       corrections of step 2 show.
       step 1: g = 2, m = 0.2, v = 0.004, p = 1 - 1 * 0.2 / (2 + 1e-8) = 0.9 (to f32)
       step 2: g = 1.8, m = 0.9 * 0.2 + 0.1 * 1.8 = 0.36
               v = 0.999 * 0.004 + 0.001 * 3.24 = 0.007236
               bias corrections 1 - 0.81 = 0.19 and 1 - 0.998001 = 0.001999
               m / 0.19 = 1.894736842, sqrt(v / 0.001999) = 1.902579803
               p = 0.9 - 0.1 * 1.894736842 / 1.902579803 = 0.8004122287
       (torch.optim.Adam in f64 gives 0.80041222869.) */
    run_square((lz_adamw_opts){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}, 2, after);
    CHECK_NEAR(after[0], 0.9, 1e-6);
    CHECK_NEAR(after[1], 0.8004122287, 1e-6);
}

/* A constant gradient c makes every Adam step exactly lr * c / (|c| + eps)
   when the bias corrections are exact (m / (1 - beta1^t) = c and
   v / (1 - beta2^t) = c^2 at every t), so p after t steps from 0 is
   -t lr c / (|c| + eps). Computing 1 - beta2^t as 1 - exp(t log beta2) in
   f32 would be off by up to 6e-5 relative at small t (caught by the 1e-6
   below), and 0.9^t underflows in f32 near t = 990 (caught by
   the steps read past 1000). */
static void test_bias_correction_accuracy(void)
{
    const int64_t shape[1] = {3};
    const float c[3] = {1.0f, -3.0f, 0.01f}, zero[3] = {0, 0, 0};
    const float lr = 1.0f, eps = 1e-8f;
    lz_tensor *p = lz_from_host(zero, LZ_F32, 1, shape), *ct = lz_from_host(c, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_adamw *opt = lz_adamw_new(&p, 1, (lz_adamw_opts){.lr = lr, .beta1 = 0.9f,
                                                        .beta2 = 0.999f, .eps = eps});
    CHECK(opt != NULL);
    float prev[3] = {0, 0, 0}, now[3];
    double worst_early = 0;
    int bad_late = 0;
    for (int t = 1; t <= 1200 && opt; t++) {
        lz_scope_begin();
        lz_adamw_zero_grad(opt);
        CHECK_EQ_I(lz_backward(lz_sum(lz_mul(p, ct))), 0);
        CHECK_EQ_I(lz_adamw_step(opt), 0);
        lz_scope_end();
        lz_mark_step();
        int early = t <= 20, read_late = t % 100 == 99 || t % 100 == 0;
        if (!early && !read_late) continue;
        CHECK_EQ_I(lz_to_host(p, now, sizeof now), 0);
        for (int j = 0; j < 3; j++) {
            double step = (double)lr * c[j] / (fabs(c[j]) + eps);
            if (early) {
                double e = fabs(now[j] + t * step) / (t * fabs(step));
                if (e > worst_early) worst_early = e;
            } else if (t % 100 == 0) {
                /* |p| ~ t: one f32 ulp of p is up to 1.2e-4 here */
                double d = (double)prev[j] - now[j];
                if (!(fabs(d - step) <= 2.5e-4)) {
                    if (!bad_late)
                        fprintf(stderr, "step %d, element %d: p moved by %.9g, expected %.9g\n",
                                t, j, d, step);
                    bad_late++;
                }
            }
        }
        memcpy(prev, now, sizeof prev);
    }
    printf("constant gradient: worst relative error of p over steps 1..20: %.2e\n", worst_early);
    CHECK(worst_early <= 1e-6);
    CHECK_EQ_I(bad_late, 0);
    lz_adamw_free(opt);
    lz_free(p);
    lz_free(ct);
}

/* ---- schedules ---------------------------------------------------------- */

static void test_schedules(void)
{
    /* StepLR(step_size 3, gamma 0.5) from 0.1: 0.1 * 0.5^(step // 3) */
    CHECK_NEAR(lz_lr_step(0.1f, 0, 3, 0.5f), 0.1, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 2, 3, 0.5f), 0.1, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 3, 3, 0.5f), 0.05, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 5, 3, 0.5f), 0.05, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 6, 3, 0.5f), 0.025, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 10, 3, 0.5f), 0.0125, 1e-8);
    CHECK_NEAR(lz_lr_step(0.1f, 7, 1, 0.9f), 0.1 * 0.4782969, 1e-8);   /* 0.9^7 */

    /* CosineAnnealingLR(T_max 10, eta_min 0.001) from 0.1:
       0.001 + 0.099 * (1 + cos(pi * step / 10)) / 2
       step 0: cos 0 = 1          -> 0.1
       step 2: cos(0.2 pi) = 0.8090169944 -> 0.001 + 0.099 * 0.9045084972 = 0.0905463412
       step 5: cos(pi / 2) = 0    -> 0.001 + 0.0495 = 0.0505
       step 10: cos(pi) = -1      -> 0.001
       step 15: cos(1.5 pi) = 0   -> 0.0505 (rising again past T_max, as torch's form)
       step 20: cos(2 pi) = 1     -> 0.1 */
    CHECK_NEAR(lz_lr_cosine(0.1f, 0, 10, 0.001f), 0.1, 1e-8);
    CHECK_NEAR(lz_lr_cosine(0.1f, 2, 10, 0.001f), 0.0905463412, 1e-8);
    CHECK_NEAR(lz_lr_cosine(0.1f, 5, 10, 0.001f), 0.0505, 1e-8);
    CHECK_NEAR(lz_lr_cosine(0.1f, 10, 10, 0.001f), 0.001, 1e-8);
    CHECK_NEAR(lz_lr_cosine(0.1f, 15, 10, 0.001f), 0.0505, 1e-8);
    CHECK_NEAR(lz_lr_cosine(0.1f, 20, 10, 0.001f), 0.1, 1e-8);

    lz_clear_error();
    CHECK(isnan(lz_lr_step(0.1f, 1, 0, 0.5f)));
    CHECK(lz_last_error() && strstr(lz_last_error(), "step_size"));
    lz_clear_error();
    CHECK(isnan(lz_lr_step(0.1f, -1, 3, 0.5f)));
    CHECK(lz_last_error() && strstr(lz_last_error(), "negative"));
    lz_clear_error();
    CHECK(isnan(lz_lr_cosine(0.1f, 1, 0, 0.0f)));
    CHECK(lz_last_error() && strstr(lz_last_error(), "t_max"));
    lz_clear_error();
    CHECK(isnan(lz_lr_cosine(-0.1f, 1, 10, 0.0f)));
    CHECK(lz_last_error() && strstr(lz_last_error(), "learning rate"));
    lz_clear_error();
}

/* ---- a schedule in a lazy loop: new data, never a new graph -------------- */

static void test_schedule_no_recompile(void)
{
    const int64_t shape[2] = {4, 3};
    lz_tensor *p = lz_test_rand(7, -1, 1, 2, shape), *q = lz_test_rand(8, -1, 1, 2, shape);
    lz_requires_grad(p, 1);
    lz_requires_grad(q, 1);
    lz_tensor *ps[2] = {p, q};
    lz_adamw *opt = lz_adamw_new(ps, 2, (lz_adamw_opts){.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.999f,
                                                        .eps = 1e-8f, .weight_decay = 0.01f,
                                                        .decoupled = 1});
    CHECK(opt != NULL);
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    for (int s = 0; s < 20 && opt; s++) {
        lz_adamw_set_lr(opt, lz_lr_cosine(0.05f, s, 20, 0.0f));
        lz_scope_begin();
        lz_adamw_zero_grad(opt);
        lz_tensor *loss = lz_sum(lz_mul(lz_mul(p, q), lz_tanh(p)));
        CHECK(loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0);
        lz_scope_end();
        lz_mark_step();
    }
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.compiles, 1);
    CHECK_EQ_I(m.executions, 20);
    CHECK_EQ_I(m.graphs, 20);
    lz_adamw_free(opt);
    lz_free(p);
    lz_free(q);
}

/* ---- bad options ------------------------------------------------------- */

static void expect_bad(lz_tensor *const *ps, int n, lz_adamw_opts o, const char *words)
{
    lz_clear_error();
    lz_adamw *opt = lz_adamw_new(ps, n, o);
    CHECK(opt == NULL);
    const char *e = lz_last_error();
    CHECK(e && strstr(e, "lz_adamw_new") && strstr(e, words));
    if (!e || !strstr(e, words)) fprintf(stderr, "  expected an error naming \"%s\"\n", words);
    lz_adamw_free(opt);
}

static void test_bad_options(void)
{
    const int64_t shape[1] = {2};
    const float v[2] = {1, 2};
    const int64_t iv[2] = {1, 2};
    lz_tensor *p = lz_from_host(v, LZ_F32, 1, shape), *ip = lz_from_host(iv, LZ_I64, 1, shape);
    lz_requires_grad(p, 1);
    lz_adamw_opts good = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    lz_adamw_opts o;
    o = good; o.lr = -1.0f;          expect_bad(&p, 1, o, "learning rate");
    o = good; o.lr = NAN;            expect_bad(&p, 1, o, "learning rate");
    o = good; o.beta1 = 1.0f;        expect_bad(&p, 1, o, "beta1");
    o = good; o.beta2 = -0.1f;       expect_bad(&p, 1, o, "beta2");
    o = good; o.eps = -1e-8f;        expect_bad(&p, 1, o, "epsilon");
    o = good; o.weight_decay = -1;   expect_bad(&p, 1, o, "weight_decay");
    o = good; o.decoupled = 2;       expect_bad(&p, 1, o, "decoupled");
    lz_tensor *none[1] = {NULL}, *twice[2] = {p, p};
    expect_bad(none, 1, good, "parameter 0 is NULL");
    expect_bad(&ip, 1, good, "i64");
    expect_bad(twice, 2, good, "parameter 1 is parameter 0");
    expect_bad(NULL, 2, good, "NULL array");

    /* beta1 = 0 is allowed (torch allows it): 1 - 0^t is 1 */
    lz_clear_error();
    o = good; o.beta1 = LZ_OPT_ZERO;
    lz_adamw *opt = lz_adamw_new(&p, 1, o);
    CHECK(opt != NULL);
    /* a bad rate is refused with an error, and the rate stays */
    lz_adamw_set_lr(opt, -0.5f);
    CHECK(lz_last_error() && strstr(lz_last_error(), "learning rate"));
    lz_clear_error();
    CHECK_EQ_I(lz_adamw_step(NULL), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "NULL"));
    lz_clear_error();
    /* a parameter without a grad is skipped: nothing changes */
    CHECK_EQ_I(lz_adamw_step(opt), 0);
    float now[2];
    CHECK_EQ_I(lz_to_host(p, now, sizeof now), 0);
    CHECK_NEAR(now[0], 1, 0);
    CHECK_NEAR(now[1], 2, 0);
    lz_adamw_free(opt);
    lz_free(p);
    lz_free(ip);
    lz_clear_error();
}

/* beta1 = 0 (RMSProp-like) against a hand value: loss = sum(p * p), p = 1,
   lr 0.1, beta2 0.999, eps 0.5:
   step 1: g = 2, m = g = 2, v = 0.004, bc1 = 1, bc2 = 0.001
           p = 1 - 0.1 * 2 / (2 + 0.5) = 0.92
   step 2: g = 1.84, m = 1.84, v = 0.999 * 0.004 + 0.001 * 3.3856 = 0.0073816
           bc2 = 0.001999, sqrt(v / bc2) = sqrt(3.692646323) = 1.921625958
           p = 0.92 - 0.1 * 1.84 / (1.921625958 + 0.5) = 0.92 - 0.075982007 = 0.844017993 */
static void test_beta1_zero(void)
{
    float after[2];
    run_square((lz_adamw_opts){.lr = 0.1f, .beta1 = LZ_OPT_ZERO, .beta2 = 0.999f, .eps = 0.5f}, 2, after);
    CHECK_NEAR(after[0], 0.92, 1e-6);
    CHECK_NEAR(after[1], 0.844017993, 1e-6);
}

/* ---- state for checkpoints ----------------------------------------------- */

/* loss = sum(p * p * tanh(p)) + sum(q * q): both parameters step. */
static void two_param_step(lz_adamw *opt, lz_tensor *p, lz_tensor *q)
{
    lz_scope_begin();
    lz_adamw_zero_grad(opt);
    lz_tensor *loss = lz_add(lz_sum(lz_mul(lz_mul(p, p), lz_tanh(p))), lz_sum(lz_mul(q, q)));
    CHECK(loss && lz_backward(loss) == 0 && lz_adamw_step(opt) == 0);
    lz_scope_end();
    lz_mark_step();
}

/* The state handles (moments and step counts, torch's names) restore an
   optimizer: a fresh one given a copy of another's state and parameters
   takes the same steps from there on. */
static void test_state_restores(void)
{
    const int64_t sp[2] = {2, 3}, sq[1] = {3};
    lz_adamw_opts o = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                       .weight_decay = 0.01f, .decoupled = 1};
    lz_tensor *pa = lz_test_rand(21, -1, 1, 2, sp), *qa = lz_test_rand(22, -1, 1, 1, sq);
    lz_requires_grad(pa, 1);
    lz_requires_grad(qa, 1);
    lz_tensor *psa[2] = {pa, qa};
    lz_adamw *a = lz_adamw_new(psa, 2, o);
    CHECK(a != NULL);
    if (!a) return;
    for (int s = 0; s < 3; s++) two_param_step(a, pa, qa);

    lz_params *sa = lz_params_new();
    CHECK_EQ_I(lz_adamw_state(a, sa, "opt"), 0);
    CHECK_EQ_I(lz_params_count(sa), 6);
    CHECK(lz_params_find(sa, "opt.exp_avg.0") && lz_params_find(sa, "opt.exp_avg_sq.1"));
    lz_tensor *step1 = lz_params_find(sa, "opt.step.1");
    CHECK(step1 && lz_numel(step1) == 1 && lz_item(step1) == 3.0f);

    float *vp = lz_test_read(pa), *vq = lz_test_read(qa);
    lz_tensor *pb = lz_from_host(vp, LZ_F32, 2, sp), *qb = lz_from_host(vq, LZ_F32, 1, sq);
    free(vp); free(vq);
    lz_requires_grad(pb, 1);
    lz_requires_grad(qb, 1);
    lz_tensor *psb[2] = {pb, qb};
    lz_adamw *b = lz_adamw_new(psb, 2, o);
    lz_params *sb = lz_params_new();
    CHECK(b && lz_adamw_state(b, sb, "opt") == 0 && lz_params_count(sb) == 6);
    for (int i = 0; i < lz_params_count(sa); i++) {
        lz_tensor *from = lz_params_at(sa, i), *to = lz_params_find(sb, lz_params_name(sa, i));
        float *v = lz_test_read(from);
        CHECK(v && to && lz_copy_from_host(to, v, sizeof(float) * (size_t)lz_numel(from)) == 0);
        free(v);
    }
    for (int s = 0; s < 3; s++) {
        two_param_step(a, pa, qa);
        two_param_step(b, pb, qb);
    }
    lz_tensor *x[2] = {pa, qa}, *y[2] = {pb, qb};
    for (int i = 0; i < 2; i++) {
        float *va = lz_test_read(x[i]), *vb = lz_test_read(y[i]);
        CHECK(va && vb && lz_test_rel_err(vb, va, lz_numel(x[i])) <= 1e-6);
        free(va); free(vb);
    }
    CHECK(lz_item(lz_params_find(sb, "opt.step.0")) == 6.0f);
    lz_clear_error();
    CHECK_EQ_I(lz_adamw_state(a, NULL, "opt"), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_adamw_state"));
    lz_clear_error();
    lz_params_free(sa);
    lz_params_free(sb);
    lz_adamw_free(a);
    lz_adamw_free(b);
    lz_free(pa); lz_free(qa); lz_free(pb); lz_free(qb);
}

int main(void)
{
    test_fixtures();
    test_by_hand();
    test_beta1_zero();
    test_bias_correction_accuracy();
    test_schedules();
    test_schedule_no_recompile();
    test_bad_options();
    test_state_restores();
    return lz_test_done();
}
