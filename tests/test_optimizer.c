/* One optimizer interface (lazyc_optim.h): SGD and AdamW made through it
 * step to the bit as their own calls do, lazily and captured; a new rate
 * through it is new data, never a new graph; its state goes through a
 * safetensors file and back; every call names itself in its errors. Lion,
 * below, is a third optimizer written against nn/optimizer.h in a few
 * dozen lines, as a new optimizer is one file. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "lazyc_optim.h"
#include "nn/optimizer.h"

/* ---- Lion (Chen et al., 2023), no weight decay:
 *   c = beta1 * m + (1 - beta1) * g
 *   p = p - lr * sign(c)
 *   m = beta2 * m + (1 - beta2) * g                                      */

typedef struct lion {
    lz_optimizer base;
    lz_tensor **m;               /* state: the moment, per parameter */
    lz_tensor *beta1, *c1, *beta2, *c2, *zero;
} lion;

static int lion_step(lz_optimizer *base, const char *fn)
{
    (void)fn;
    lion *o = (lion *)base;
    for (int i = 0; i < base->n; i++) {
        lz_tensor *p = base->params[i], *g = lz_grad(p);
        if (!g)
            continue;
        lz_tensor *c = lz_add(lz_mul(o->beta1, o->m[i]), lz_mul(o->c1, g));
        lz_tensor *sign = lz_sub(lz_gt(c, o->zero), lz_lt(c, o->zero));
        lz_tensor *np = lz_sub(p, lz_mul(base->lr, sign));
        lz_tensor *m = lz_add(lz_mul(o->beta2, o->m[i]), lz_mul(o->c2, g));
        if (!np || !m || lz_assign(p, np) != 0 || lz_assign(o->m[i], m) != 0)
            return -1;
    }
    return 0;
}

static void lion_free(lz_optimizer *base)
{
    free(((lion *)base)->m);
}

static const lz_optimizer_vt lion_vt = {.name = "lion", .step = lion_step, .free = lion_free};

static lz_optimizer *lion_new(lz_tensor *const *params, int n, float lr, float beta1, float beta2)
{
    lion *o = (lion *)lz_optim_new(sizeof *o, &lion_vt, "lion_new", params, n, lr);
    if (!o)
        return NULL;
    lz_optimizer *b = &o->base;
    int failed = !(o->beta1 = lz_optim_scalar(b, beta1)) | !(o->c1 = lz_optim_scalar(b, 1 - beta1)) |
                 !(o->beta2 = lz_optim_scalar(b, beta2)) | !(o->c2 = lz_optim_scalar(b, 1 - beta2)) |
                 !(o->zero = lz_optim_scalar(b, 0)) | !(o->m = calloc((size_t)n + 1, sizeof *o->m));
    for (int i = 0; !failed && i < n; i++)
        failed = !(o->m[i] = lz_optim_zeros_like(b, i, "exp_avg.%d", i));
    if (failed) {
        lz_optim_free(b);
        return NULL;
    }
    return b;
}

/* ---- a small MLP, stepped by one of three paths ---- */

enum { IN = 8, HID = 16, OUT = 4, B = 8, NP = 4 };
enum { DIRECT_SGD, DIRECT_ADAMW, INTERFACE };

typedef struct net {
    lz_tensor *p[NP];            /* w1, b1, w2, b2 */
    int path;
    lz_sgd *sgd;
    lz_adamw *adamw;
    lz_optimizer *opt;
} net;

static void net_init(net *n, int path)
{
    const int64_t shapes[NP][2] = {{HID, IN}, {HID, 0}, {OUT, HID}, {OUT, 0}};
    for (int i = 0; i < NP; i++) {
        n->p[i] = lz_test_rand(10 + i, -0.3f, 0.3f, shapes[i][1] ? 2 : 1, shapes[i]);
        lz_requires_grad(n->p[i], 1);
    }
    n->path = path;
    n->sgd = NULL, n->adamw = NULL, n->opt = NULL;
}

static void net_free(net *n)
{
    lz_sgd_free(n->sgd);
    lz_adamw_free(n->adamw);
    lz_optimizer_free(n->opt);
    for (int i = 0; i < NP; i++) lz_free(n->p[i]);
}

static void net_set_lr(net *n, float lr)
{
    if (n->path == DIRECT_SGD) lz_sgd_set_lr(n->sgd, lr);
    else if (n->path == DIRECT_ADAMW) lz_adamw_set_lr(n->adamw, lr);
    else CHECK_EQ_I(lz_optimizer_set_lr(n->opt, lr), 0);
}

/* in: x [B, IN], y [B] i64; out: the loss */
static int net_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    net *n = ctx;
    if (n->path == DIRECT_SGD) lz_sgd_zero_grad(n->sgd);
    else if (n->path == DIRECT_ADAMW) lz_adamw_zero_grad(n->adamw);
    else lz_optimizer_zero_grad(n->opt);
    lz_tensor *h = lz_relu(lz_linear(in[0], n->p[0], n->p[1]));
    lz_tensor *loss = lz_cross_entropy(lz_linear(h, n->p[2], n->p[3]), in[1]);
    if (!loss || lz_backward(loss) != 0) return -1;
    int rc = n->path == DIRECT_SGD ? lz_sgd_step(n->sgd)
           : n->path == DIRECT_ADAMW ? lz_adamw_step(n->adamw) : lz_optimizer_step(n->opt);
    out[0] = loss;
    return rc;
}

static float rate(int step)
{
    return lz_lr_cosine(0.05f, step, 12, 0.001f);
}

/* Every element of a equals b's, bit for bit. */
static int same_bits(lz_tensor *a, lz_tensor *b)
{
    float *va = lz_test_read(a), *vb = lz_test_read(b);
    int same = va && vb && lz_numel(a) == lz_numel(b) &&
               memcmp(va, vb, sizeof(float) * (size_t)lz_numel(a)) == 0;
    free(va);
    free(vb);
    return same;
}

/* Both sets hold the same names in the same order and the same values. */
static void check_same_sets(lz_params *a, lz_params *b)
{
    CHECK_EQ_I(lz_params_count(a), lz_params_count(b));
    for (int i = 0; i < lz_params_count(a) && i < lz_params_count(b); i++) {
        CHECK(strcmp(lz_params_name(a, i), lz_params_name(b, i)) == 0);
        CHECK(same_bits(lz_params_at(a, i), lz_params_at(b, i)));
    }
}

/* 4 lazy steps, then 8 captured calls, a new rate before each: the
   interface's parameters and state equal the direct calls' to the bit,
   and after the capture's warm-up no call compiles. */
static void test_parity(int kind, lz_sgd_opts so, lz_adamw_opts ao, const char *name)
{
    enum { LAZY = 4, CAPTURED = 8 };
    net d, f;
    net_init(&d, kind);
    net_init(&f, INTERFACE);
    if (kind == DIRECT_SGD) {
        d.sgd = lz_sgd_new(d.p, NP, so);
        f.opt = lz_optimizer_sgd(f.p, NP, so);
    } else {
        d.adamw = lz_adamw_new(d.p, NP, ao);
        f.opt = lz_optimizer_adamw(f.p, NP, ao);
    }
    CHECK((d.sgd || d.adamw) && f.opt);
    CHECK(f.opt && strcmp(lz_optimizer_name(f.opt), name) == 0);
    for (int s = 0; s < LAZY; s++) {
        net_set_lr(&d, rate(s));
        net_set_lr(&f, rate(s));
        CHECK(!isnan(lz_test_lazy_step(net_step, &d, s, B, IN, OUT)));
        CHECK(!isnan(lz_test_lazy_step(net_step, &f, s, B, IN, OUT)));
    }
    lz_fn *fd = lz_capture(net_step, &d, 2, 1), *ff = lz_capture(net_step, &f, 2, 1);
    for (int s = LAZY; s < LAZY + CAPTURED; s++) {
        if (s == LAZY + 2) {   /* the warm-up trace and the capture are done */
            CHECK_EQ_I(lz_wait(), 0);
            lz_metrics_reset();
        }
        lz_tensor *x, *y;
        lz_test_mlp_batch(s, B, IN, OUT, &x, &y);
        lz_tensor *in[2] = {x, y}, *od[1] = {NULL}, *of[1] = {NULL};
        net_set_lr(&d, rate(s));
        net_set_lr(&f, rate(s));
        CHECK_EQ_I(lz_call(fd, in, od), 0);
        CHECK_EQ_I(lz_call(ff, in, of), 0);
        CHECK(od[0] && of[0] && lz_item(od[0]) == lz_item(of[0]));
        lz_free(od[0]), lz_free(of[0]), lz_free(x), lz_free(y);
    }
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.capture_replays, 2 * (CAPTURED - 2));
    CHECK(f.opt && lz_optimizer_lr(f.opt) == rate(LAZY + CAPTURED - 1));
    for (int i = 0; i < NP; i++) CHECK(same_bits(d.p[i], f.p[i]));
    /* the same state, under the same names */
    lz_params *sd = lz_params_new(), *sf = lz_params_new();
    CHECK_EQ_I(kind == DIRECT_SGD ? lz_sgd_state(d.sgd, sd, "opt") : lz_adamw_state(d.adamw, sd, "opt"), 0);
    CHECK_EQ_I(lz_optimizer_state(f.opt, sf, "opt"), 0);
    CHECK(lz_params_count(sf) > 0);
    check_same_sets(sd, sf);
    lz_params_free(sd), lz_params_free(sf);
    lz_fn_free(fd), lz_fn_free(ff);
    net_free(&d), net_free(&f);
}

/* ---- loss = sum(w * x): the gradient of w is x, the update known ---- */

enum { N = 6 };
static const float X[N] = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f};
static const float W0[N] = {0.1f, 0.2f, -0.3f, 0.4f, -0.5f, 0.6f};

static lz_tensor *make_w(const float *v)
{
    lz_tensor *w = lz_from_host(v, LZ_F32, 1, (const int64_t[]){N});
    lz_requires_grad(w, 1);
    return w;
}

static int linear_step(lz_optimizer *opt, lz_tensor *w, lz_tensor *x)
{
    lz_scope_begin();
    lz_optimizer_zero_grad(opt);
    lz_tensor *loss = lz_sum(lz_mul(w, x));
    int rc = loss ? lz_backward(loss) : -1;
    if (rc == 0) rc = lz_optimizer_step(opt);
    lz_scope_end();
    lz_mark_step();
    return rc;
}

/* Plain SGD through the interface: w - lr * x at every rate set, 0
   included, with no compile after the first steps. */
static void test_set_lr_no_recompile(void)
{
    lz_tensor *w = make_w(W0), *x = lz_from_host(X, LZ_F32, 1, (const int64_t[]){N});
    lz_optimizer *opt = lz_optimizer_sgd(&w, 1, (lz_sgd_opts){.lr = 0.5f});
    CHECK(opt && lz_optimizer_lr(opt) == 0.5f);
    float want[N];
    memcpy(want, W0, sizeof want);
    for (int s = 0; s < 2; s++) {
        CHECK_EQ_I(linear_step(opt, w, x), 0);
        for (int i = 0; i < N; i++) want[i] -= 0.5f * X[i];
    }
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();
    const float rates[] = {0.25f, 0.0f, 1.5f};
    for (int s = 0; s < 3; s++) {
        CHECK_EQ_I(lz_optimizer_set_lr(opt, rates[s]), 0);
        CHECK(lz_optimizer_lr(opt) == rates[s]);
        CHECK_EQ_I(linear_step(opt, w, x), 0);
        for (int i = 0; i < N; i++) want[i] -= rates[s] * X[i];
    }
    float got[N];
    CHECK_EQ_I(lz_to_host(w, got, sizeof got), 0);
    for (int i = 0; i < N; i++) CHECK_NEAR(got[i], want[i], 1e-6);
    lz_metrics mt = lz_metrics_get();
    CHECK_EQ_I(mt.compiles, 0);
    CHECK_EQ_I(mt.executions, 3);
    /* a refused rate leaves the rate and the values as they were */
    lz_clear_error();
    CHECK_EQ_I(lz_optimizer_set_lr(opt, -1.0f), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(),
          "lz_optimizer_set_lr: invalid learning rate -1 (the rate stays 1.5)"));
    CHECK_EQ_I(lz_optimizer_set_lr(opt, NAN), -1);
    CHECK(lz_optimizer_lr(opt) == 1.5f);
    lz_optimizer_free(opt);
    lz_free(w), lz_free(x);
}

/* Lion's values against the formula computed on the host, lazily and
   then captured (one compile, then replays). */
static int lion_fn_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    lz_optimizer *opt = ctx;
    lz_optimizer_zero_grad(opt);
    lz_tensor *loss = lz_sum(lz_mul(opt->params[0], in[0]));
    if (!loss || lz_backward(loss) != 0 || lz_optimizer_step(opt) != 0) return -1;
    out[0] = loss;
    return 0;
}

static void test_lion(void)
{
    enum { STEPS = 8 };
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.99f;
    lz_tensor *w = make_w(W0), *x = lz_from_host(X, LZ_F32, 1, (const int64_t[]){N});
    lz_optimizer *opt = lion_new(&w, 1, lr, b1, b2);
    CHECK(opt && strcmp(lz_optimizer_name(opt), "lion") == 0);
    if (!opt) return;
    float want[N], m[N] = {0};
    memcpy(want, W0, sizeof want);
    lz_fn *f = lz_capture(lion_fn_step, opt, 1, 1);
    for (int s = 0; s < STEPS; s++) {
        if (s == 2) {
            CHECK_EQ_I(lz_wait(), 0);
            lz_metrics_reset();
        }
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(lz_call(f, &x, out), 0);
        lz_free(out[0]);
        for (int i = 0; i < N; i++) {
            float c = b1 * m[i] + (1 - b1) * X[i];
            want[i] -= lr * (float)((c > 0) - (c < 0));
            m[i] = b2 * m[i] + (1 - b2) * X[i];
        }
    }
    CHECK_EQ_I(lz_metrics_get().compiles, 0);
    float got[N], got_m[N];
    CHECK_EQ_I(lz_to_host(w, got, sizeof got), 0);
    lz_params *st = lz_params_new();
    CHECK_EQ_I(lz_optimizer_state(opt, st, "lion"), 0);
    lz_tensor *mt = lz_params_find(st, "lion.exp_avg.0");
    CHECK(mt && lz_to_host(mt, got_m, sizeof got_m) == 0);
    for (int i = 0; i < N; i++) {
        CHECK_NEAR(got[i], want[i], 1e-6);
        CHECK_NEAR(got_m[i], m[i], 1e-6);
    }
    lz_params_free(st);
    lz_fn_free(f);
    lz_optimizer_free(opt);
    lz_free(w), lz_free(x);
}

/* ---- state through a safetensors file ---- */

typedef lz_optimizer *(*make_fn)(lz_tensor *w);
static lz_optimizer *make_sgd(lz_tensor *w)
{
    return lz_optimizer_sgd(&w, 1, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f});
}
static lz_optimizer *make_adamw(lz_tensor *w)
{
    return lz_optimizer_adamw(&w, 1, (lz_adamw_opts){.lr = 0.01f, .weight_decay = 0.1f, .decoupled = 1});
}
static lz_optimizer *make_lion(lz_tensor *w)
{
    return lion_new(&w, 1, 0.01f, 0.9f, 0.99f);
}

/* A trains 3 steps and is saved; B, made afresh from other values, loads
   the file; 3 more steps of each give the same values to the bit. */
static void test_state_round_trip(make_fn make, const char *what)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/lz_test_optimizer_%d.safetensors", (int)getpid());
    const float other[N] = {9, 9, 9, 9, 9, 9};
    lz_tensor *x = lz_from_host(X, LZ_F32, 1, (const int64_t[]){N});
    lz_tensor *wa = make_w(W0), *wb = make_w(other);
    lz_optimizer *a = make(wa), *b = make(wb);
    CHECK(a && b);
    if (!a || !b) return;
    for (int s = 0; s < 3; s++) CHECK_EQ_I(linear_step(a, wa, x), 0);
    lz_params *sa = lz_params_new(), *sb = lz_params_new();
    CHECK(lz_params_add(sa, "w", lz_retain(wa), 1) && lz_params_add(sb, "w", lz_retain(wb), 1));
    CHECK_EQ_I(lz_optimizer_state(a, sa, "optimizer"), 0);
    CHECK_EQ_I(lz_optimizer_state(b, sb, "optimizer"), 0);
    CHECK_EQ_I(lz_safetensors_save(path, sa), 0);
    CHECK_EQ_I(lz_safetensors_load(path, sb, 1), 0);
    for (int s = 0; s < 3; s++) {
        CHECK_EQ_I(linear_step(a, wa, x), 0);
        CHECK_EQ_I(linear_step(b, wb, x), 0);
    }
    check_same_sets(sa, sb);
    if (!same_bits(wa, wb)) fprintf(stderr, "%s: the restored run differs\n", what);
    CHECK(same_bits(wa, wb));
    unlink(path);
    lz_params_free(sa), lz_params_free(sb);
    lz_optimizer_free(a), lz_optimizer_free(b);
    lz_free(wa), lz_free(wb), lz_free(x);
}

/* ---- all or nothing, errors, threads ---- */

/* Changes the parameter, then fails: the base must put the value back. */
static int failing_step(lz_optimizer *base, const char *fn)
{
    lz_tensor *p = base->params[0], *np = lz_add(p, p);
    if (!np || lz_assign(p, np) != 0) return -1;
    lz_set_error("%s: failed on purpose", fn);
    return -1;
}

static const lz_optimizer_vt failing_vt = {.name = "failing", .step = failing_step};

static void test_step_all_or_nothing(void)
{
    lz_tensor *w = make_w(W0);
    lz_optimizer *opt = lz_optim_new(sizeof(lz_optimizer), &failing_vt, "failing", &w, 1, 0.1f);
    CHECK(opt != NULL);
    CHECK_EQ_I(lz_optimizer_step(opt), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_optimizer_step: failed on purpose"));
    float got[N];
    CHECK_EQ_I(lz_to_host(w, got, sizeof got), 0);
    CHECK(memcmp(got, W0, sizeof got) == 0);
    lz_optimizer_free(opt);
    lz_free(w);
}

static void expect_error(const char *what, int failed, const char *text)
{
    const char *e = lz_last_error();
    int ok = failed && e && strstr(e, text);
    if (!ok) fprintf(stderr, "%s: expected \"%s\", got %s\n", what, text, e ? e : "no error");
    CHECK(ok);
    lz_clear_error();
}

static void test_errors(void)
{
    lz_clear_error();
    expect_error("step", lz_optimizer_step(NULL) == -1, "lz_optimizer_step: optimizer is NULL");
    lz_optimizer_zero_grad(NULL);
    expect_error("zero_grad", 1, "lz_optimizer_zero_grad: optimizer is NULL");
    expect_error("set_lr", lz_optimizer_set_lr(NULL, 0.1f) == -1, "lz_optimizer_set_lr: optimizer is NULL");
    expect_error("lr", isnan(lz_optimizer_lr(NULL)), "lz_optimizer_lr: optimizer is NULL");
    expect_error("name", lz_optimizer_name(NULL) == NULL, "lz_optimizer_name: optimizer is NULL");
    expect_error("state", lz_optimizer_state(NULL, NULL, "x") == -1, "lz_optimizer_state: NULL argument");
    lz_optimizer_free(NULL);

    lz_tensor *w = make_w(W0), *frozen = lz_from_host(W0, LZ_F32, 1, (const int64_t[]){N});
    expect_error("sgd frozen", lz_optimizer_sgd(&frozen, 1, (lz_sgd_opts){0}) == NULL,
                 "lz_optimizer_sgd: parameter 0 does not require grad");
    expect_error("sgd lr", lz_optimizer_sgd(&w, 1, (lz_sgd_opts){.lr = -1}) == NULL,
                 "lz_optimizer_sgd: invalid learning rate (lr) -1");
    expect_error("sgd nesterov", lz_optimizer_sgd(&w, 1, (lz_sgd_opts){.nesterov = 1}) == NULL,
                 "lz_optimizer_sgd: nesterov momentum requires a momentum");
    expect_error("adamw beta", lz_optimizer_adamw(&w, 1, (lz_adamw_opts){.beta1 = 1}) == NULL,
                 "lz_optimizer_adamw: invalid beta1 1");
    expect_error("adamw count", lz_optimizer_adamw(&w, -1, (lz_adamw_opts){0}) == NULL,
                 "lz_optimizer_adamw: negative parameter count -1");
    lz_optimizer *adam = lz_optimizer_adamw(&w, 1, (lz_adamw_opts){.decoupled = 0});
    CHECK(adam && strcmp(lz_optimizer_name(adam), "adam") == 0 && lz_optimizer_lr(adam) == 1e-3f);
    lz_optimizer_free(adam);
    lz_free(w), lz_free(frozen);
}

static lz_optimizer *shared;
static const char *thread_errors[3];

static void *other_thread(void *arg)
{
    (void)arg;
    static char msgs[3][256];
    lz_clear_error();
    int rc = lz_optimizer_step(shared);
    snprintf(msgs[0], sizeof msgs[0], "%d %s", rc, lz_last_error() ? lz_last_error() : "");
    lz_clear_error();
    rc = lz_optimizer_set_lr(shared, 0.5f);
    snprintf(msgs[1], sizeof msgs[1], "%d %s", rc, lz_last_error() ? lz_last_error() : "");
    lz_clear_error();
    lz_optimizer_zero_grad(shared);
    snprintf(msgs[2], sizeof msgs[2], "%s", lz_last_error() ? lz_last_error() : "");
    for (int i = 0; i < 3; i++) thread_errors[i] = msgs[i];
    return NULL;
}

static void test_other_thread(void)
{
    lz_tensor *w = make_w(W0);
    shared = lz_optimizer_sgd(&w, 1, (lz_sgd_opts){.lr = 0.1f});
    pthread_t t;
    CHECK_EQ_I(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    CHECK(thread_errors[0] && strstr(thread_errors[0], "-1 lz_optimizer_step: called from thread"));
    CHECK(thread_errors[1] && strstr(thread_errors[1], "-1 lz_optimizer_set_lr: called from thread"));
    CHECK(thread_errors[2] && strstr(thread_errors[2], "lz_optimizer_zero_grad: called from thread"));
    CHECK(lz_optimizer_lr(shared) == 0.1f);
    lz_optimizer_free(shared);
    lz_free(w);
}

int main(void)
{
    lz_sgd_opts sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = 1};
    lz_adamw_opts adamw = {.lr = 0.01f, .weight_decay = 0.01f, .decoupled = 1};
    lz_adamw_opts adam = {.lr = 0.01f, .weight_decay = 0.01f, .decoupled = 0};
    test_parity(DIRECT_SGD, sgd, adamw, "sgd");
    test_parity(DIRECT_ADAMW, sgd, adamw, "adamw");
    test_parity(DIRECT_ADAMW, sgd, adam, "adam");
    test_set_lr_no_recompile();
    test_lion();
    test_state_round_trip(make_sgd, "sgd");
    test_state_round_trip(make_adamw, "adamw");
    test_state_round_trip(make_lion, "lion");
    test_step_all_or_nothing();
    test_errors();
    test_other_thread();
    return lz_test_done();
}
