/* Autocast's bf16 copies of parameters (engine/autocast.c): once an
 * optimizer update has written a parameter's bf16 copy, the next step's
 * products read it instead of casting the parameter. Checked:
 * - a steady step casts no parameter (the profile by step shape has no
 *   cast of a weight's shape), lazily and in a captured replay;
 * - the values are those of the cast: a run whose parameters are set
 *   anew from the host before every step (so no copy ever holds) gives
 *   the same losses and parameters, bit for bit, with SGD and AdamW;
 * - a parameter assigned between steps (lz_assign, lz_copy_from_host)
 *   makes its copy stale: the next step casts again, and a captured
 *   function traces again instead of replaying with the old copy;
 * - steps without autocast drop the copies;
 * - a parameter the program updates with its own lz_assign keeps no copy
 *   and a captured step of it still replays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "engine/autocast.h"

enum { B = 8, IN = 16, HID = 32, OUT = 4, STEPS = 6, N_P = 2 };

typedef struct run {
    lz_tensor *w[N_P];
    lz_tensor *x, *y;
    lz_sgd *sgd;
    lz_adamw *adamw;
    int autocast;            /* steps under lz_autocast_begin(LZ_BF16) */
    lz_tensor *lr;           /* own_update's step size */
} run;

static int64_t wshape[N_P][2] = {{HID, IN}, {OUT, HID}};

static void run_init(run *r, int adamw)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < N_P; i++) {
        r->w[i] = lz_test_rand(40 + (unsigned)i, -0.4f, 0.4f, 2, wshape[i]);
        lz_requires_grad(r->w[i], 1);
    }
    r->x = lz_test_rand(50, -1, 1, 2, (int64_t[]){B, IN});
    int64_t ys[B];
    for (int i = 0; i < B; i++) ys[i] = i % OUT;
    r->y = lz_from_host(ys, LZ_I64, 1, (int64_t[]){B});
    if (adamw) r->adamw = lz_adamw_new(r->w, N_P, (lz_adamw_opts){.lr = 0.01f, .weight_decay = 0.01f,
                                                                   .decoupled = 1});
    else r->sgd = lz_sgd_new(r->w, N_P, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
    r->autocast = 1;
}

static void run_free(run *r)
{
    lz_sgd_free(r->sgd);
    lz_adamw_free(r->adamw);
    for (int i = 0; i < N_P; i++) lz_free(r->w[i]);
    lz_free(r->x);
    lz_free(r->y);
}

/* forward, loss, backward, update; out[0] = the loss */
static int step_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)in;
    run *r = ctx;
    for (int i = 0; i < N_P; i++) lz_zero_grad(r->w[i]);
    if (r->autocast) lz_autocast_begin(LZ_BF16);
    lz_tensor *h = lz_relu(lz_linear(r->x, r->w[0], NULL));
    lz_tensor *loss = lz_cross_entropy(lz_linear(h, r->w[1], NULL), r->y);
    if (r->autocast) lz_autocast_end();
    if (!loss || lz_backward(loss) != 0) return -1;
    if ((r->sgd ? lz_sgd_step(r->sgd) : lz_adamw_step(r->adamw)) != 0) return -1;
    out[0] = loss;
    return 0;
}

/* Casts of a tensor shaped as a weight in the profile by step shape. */
static int64_t weight_casts(void)
{
    lz_profile_step_entry e[256];
    const int n = lz_profile_read_steps(e, 256);
    int64_t calls = 0;
    for (int i = 0; i < n && i < 256; i++)
        if (!strcmp(e[i].op, "cast") &&
            (strstr(e[i].operands, "f32[32, 16] ->") || strstr(e[i].operands, "f32[4, 32] ->")))
            calls += e[i].calls;
    return calls;
}

/* Each parameter set anew from its own value: no copy holds after it. */
static void reset_from_host(run *r)
{
    for (int i = 0; i < N_P; i++) {
        float *v = lz_test_read(r->w[i]);
        CHECK(v && lz_copy_from_host(r->w[i], v, sizeof(float) * (size_t)lz_numel(r->w[i])) == 0);
        free(v);
    }
}

/* STEPS steps; losses into loss[], the parameters after into params.
   captured: through lz_call; fresh: reset_from_host before every step;
   poke: at step 3, w[0] halved by lz_assign (both runs of a comparison do).
   Returns the weight casts counted in the steps after the second. */
static int64_t train(int adamw, int captured, int fresh, int poke, float *loss, float *params)
{
    run r;
    run_init(&r, adamw);
    lz_fn *f = captured ? lz_capture(step_fn, &r, 0, 1) : NULL;
    int64_t casts = 0;
    for (int s = 0; s < STEPS; s++) {
        if (fresh) reset_from_host(&r);
        if (poke && s == 3) {   /* halved on the host: data, so its cast is a kernel of its own */
            float *v = lz_test_read(r.w[0]);
            CHECK(v != NULL);
            for (int64_t k = 0; v && k < lz_numel(r.w[0]); k++) v[k] *= 0.5f;
            lz_tensor *half = v ? lz_from_host(v, LZ_F32, 2, wshape[0]) : NULL;
            CHECK(half && lz_assign(r.w[0], half) == 0);
            lz_free(half);
            free(v);
        }
        if (s == 2) {
            lz_profile_enable(2);
            lz_profile_reset();
        }
        lz_tensor *out[1] = {NULL};
        CHECK((f ? lz_call(f, NULL, out) : step_fn(&r, NULL, out)) == 0);
        lz_mark_step();
        loss[s] = lz_item(out[0]);
        lz_free(out[0]);
    }
    casts = weight_casts();
    lz_profile_enable(0);
    int64_t at = 0;
    for (int i = 0; i < N_P; i++) {
        CHECK(lz_to_host(r.w[i], params + at, sizeof(float) * (size_t)lz_numel(r.w[i])) == 0);
        at += lz_numel(r.w[i]);
    }
    lz_fn_free(f);
    run_free(&r);
    lz_shutdown();
    return casts;
}

enum { N_PARAMS = HID * IN + OUT * HID };

static void compare(const char *what, int adamw, int captured, int poke)
{
    float la[STEPS], lb[STEPS], pa[N_PARAMS], pb[N_PARAMS];
    const int64_t casts = train(adamw, captured, 0, poke, la, pa);
    const int64_t casts_fresh = train(adamw, captured, 1, poke, lb, pb);
    fprintf(stderr, "%s: weight casts in steps 3-%d: %lld with copies, %lld set anew; loss %g -> %g\n",
            what, STEPS, (long long)casts, (long long)casts_fresh, la[0], la[STEPS - 1]);
    CHECK(memcmp(la, lb, sizeof la) == 0);
    CHECK(memcmp(pa, pb, sizeof pa) == 0);
    CHECK(isfinite(la[STEPS - 1]) && la[STEPS - 1] < la[0]);
    /* every step casts both weights when set anew; with copies only the
       step after the poke does (the copy of w[0] is stale there) */
    CHECK_EQ_I(casts_fresh, 2 * (STEPS - 2));
    CHECK_EQ_I(casts, poke ? 1 : 0);
}

/* A parameter updated by the program's own lz_assign (no SGD or AdamW to
   refresh its copy): cast every step, as without copies, and a captured
   step still replays (a copy left stale would make every call trace). */
static int own_update_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)in;
    run *r = ctx;
    lz_zero_grad(r->w[0]);
    lz_zero_grad(r->w[1]);
    lz_autocast_begin(LZ_BF16);
    lz_tensor *h = lz_relu(lz_linear(r->x, r->w[0], NULL));
    lz_tensor *loss = lz_cross_entropy(lz_linear(h, r->w[1], NULL), r->y);
    lz_autocast_end();
    if (!loss || lz_backward(loss) != 0) return -1;
    lz_no_grad_begin();
    for (int i = 0; i < N_P; i++) {
        lz_tensor *nw = lz_sub(r->w[i], lz_mul(lz_grad(r->w[i]), r->lr));
        if (!nw || lz_assign(r->w[i], nw) != 0) return -1;
        lz_free(nw);
    }
    lz_no_grad_end();
    out[0] = loss;
    return 0;
}

static void own_update(void)
{
    float l[2][STEPS];
    int64_t replays = 0;
    for (int captured = 0; captured < 2; captured++) {
        run r;
        run_init(&r, 0);
        r.lr = lz_scalar(0.1f);
        lz_fn *f = captured ? lz_capture(own_update_fn, &r, 0, 1) : NULL;
        const int64_t r0 = lz_metrics_get().capture_replays;
        for (int s = 0; s < STEPS; s++) {
            lz_tensor *out[1] = {NULL};
            CHECK((f ? lz_call(f, NULL, out) : own_update_fn(&r, NULL, out)) == 0);
            lz_mark_step();
            l[captured][s] = lz_item(out[0]);
            lz_free(out[0]);
        }
        if (captured) replays = lz_metrics_get().capture_replays - r0;
        CHECK_EQ_I(lz_autocast_copy_count(), 0);
        lz_fn_free(f);
        lz_free(r.lr);
        run_free(&r);
        lz_shutdown();
    }
    fprintf(stderr, "own update: %lld of %d captured calls replayed; loss %g -> %g\n",
            (long long)replays, STEPS, l[0][0], l[0][STEPS - 1]);
    CHECK(memcmp(l[0], l[1], sizeof l[0]) == 0);
    CHECK(l[0][STEPS - 1] < l[0][0]);
    CHECK(replays >= STEPS - 3);
}

/* Steps without autocast drop the copies; steps with it make them again. */
static void copies_follow_autocast(void)
{
    run r;
    run_init(&r, 0);
    for (int s = 0; s < 6; s++) {
        r.autocast = s < 2 || s >= 4;
        lz_tensor *out[1] = {NULL};
        CHECK(step_fn(&r, NULL, out) == 0);
        lz_mark_step();
        CHECK(isfinite(lz_item(out[0])));
        lz_free(out[0]);
        CHECK_EQ_I(lz_autocast_copy_count(), r.autocast ? N_P : 0);
    }
    run_free(&r);
    /* the model freed: the next region's end forgets its copies */
    lz_autocast_begin(LZ_BF16);
    lz_autocast_end();
    CHECK_EQ_I(lz_autocast_copy_count(), 0);
    lz_shutdown();
}

int main(void)
{
    /* the bf16 machinery itself: every product bf16, whatever this CPU runs
       faster (which products autocast keeps float32: test_product_choice) */
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);
    /* the counts are those of the default pipeline (values hold in every
       mode: with LZ_EAGER=1, LZ_FUSION=0 or LZ_CAPTURE_CHECK=1 the copies'
       refresh casts run as kernels of their own, or calls trace again) */
    setenv("LZ_EAGER", "0", 1);
    setenv("LZ_FUSION", "1", 1);
    setenv("LZ_CAPTURE_CHECK", "0", 1);
    compare("lazy, SGD", 0, 0, 0);
    compare("captured, SGD", 0, 1, 0);
    compare("captured, AdamW", 1, 1, 0);
    compare("lazy, SGD, w[0] assigned at step 4", 0, 0, 1);
    compare("captured, SGD, w[0] assigned at step 4", 0, 1, 1);
    copies_follow_autocast();
    own_update();
    return lz_test_done();
}
