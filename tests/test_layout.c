/* Blocked layouts (compile/layout_plan.c, lz_value.block).
 *
 * The pass on hand-made programs with a made-up backend: which values go
 * blocked (temporaries every step takes so), how a step that needs one
 * layout for all its values spreads plain layouts, that a value of one
 * pixel a channel does not, and that inputs, outputs and views' sources
 * stay plain.
 *
 * Then a small residual CNN's training step (net_loss: every op with a
 * blocked kernel) on the CPU backend, with fusion on and off: its
 * activations go blocked, what the user reads back (loss, gradients)
 * equals the plain-layout executable's, and a step is still one
 * execution. Under autocast (bf16), the convolutions' bf16 operands go
 * blocked too where oneDNN has bf16 kernels (none where it widens them:
 * k_conv.c reads plain layouts), with the same results as plain ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"
#include "compile/executable.h"
#include "engine/cache.h"
#include "testlib.h"
#include "testlib_compile.h"

/* ---- the pass, on hand-made programs ------------------------------------ */

enum { OP_EITHER = 1, OP_STEP = 2, OP_PLAIN = 3 };   /* a made-up backend's ops */

static int fake_block(const lz_program *p)
{
    (void)p;
    return 8;
}

static void fake_layouts(const lz_program *p, const lz_instr *s, int b, uint8_t *how)
{
    (void)p;
    (void)b;
    const int h = s->op == OP_EITHER ? LZ_TAKES_EITHER : s->op == OP_STEP ? LZ_TAKES_STEP_LAYOUT
                                                                         : LZ_TAKES_PLAIN;
    for (int k = 0; k <= s->n_in; k++) how[k] = (uint8_t)h;
}

static const lz_backend fake = {.name = "fake", .layout_block = fake_block,
                                .operand_layouts = fake_layouts};

typedef struct hand { lz_program p; lz_value v[8]; lz_instr s[8]; int in[8][2]; } hand;

static void value(hand *h, int v, int kind, int64_t c, int64_t hw)
{
    lz_value *x = &h->v[v];
    memset(x, 0, sizeof *x);
    x->dtype = LZ_F32;
    x->ndim = 4;
    x->kind = (uint8_t)kind;
    const int64_t shape[4] = {2, c, hw, 1};
    memcpy(x->shape, shape, sizeof shape);
    x->numel = 2 * c * hw;
    x->nbytes = (size_t)x->numel * 4;
    h->p.n_values = v + 1 > h->p.n_values ? v + 1 : h->p.n_values;
}

static void step(hand *h, int op, int out, int a, int b)
{
    lz_instr *s = &h->s[h->p.n_instrs];
    memset(s, 0, sizeof *s);
    s->op = (uint16_t)op;
    s->out = out;
    s->in = h->in[h->p.n_instrs];
    s->in[0] = a;
    s->in[1] = b;
    s->n_in = b < 0 ? 1 : 2;
    h->p.n_instrs++;
}

static void hand_init(hand *h)
{
    memset(h, 0, sizeof *h);
    h->p.values = h->v;
    h->p.instrs = h->s;
}

static void check_pass_rules(void)
{
    hand h;
    /* x(input) -conv-> t1 -step-> t2 -conv-> t3(output): t1, t2 blocked */
    hand_init(&h);
    value(&h, 0, LZ_VALUE_INPUT, 16, 9);
    value(&h, 1, LZ_VALUE_TEMP, 16, 9);
    value(&h, 2, LZ_VALUE_TEMP, 16, 9);
    value(&h, 3, LZ_VALUE_OUTPUT, 16, 9);
    step(&h, OP_EITHER, 1, 0, -1);
    step(&h, OP_STEP, 2, 1, -1);
    step(&h, OP_EITHER, 3, 2, -1);
    lz_plan_layouts(&h.p, &fake);
    CHECK_EQ_I(h.v[0].block, 0);
    CHECK_EQ_I(h.v[1].block, 8);
    CHECK_EQ_I(h.v[2].block, 8);
    CHECK_EQ_I(h.v[3].block, 0);

    /* switched off: nothing */
    lz_blocked_layouts_set(0);
    h.v[1].block = h.v[2].block = 0;
    lz_plan_layouts(&h.p, &fake);
    CHECK_EQ_I(h.v[1].block + h.v[2].block, 0);
    lz_blocked_layouts_set(-1);

    /* a plain-only reader of t2 makes the step writing it plain, and so
       its input t1, two steps away */
    hand_init(&h);
    value(&h, 0, LZ_VALUE_INPUT, 16, 9);
    value(&h, 1, LZ_VALUE_TEMP, 16, 9);
    value(&h, 2, LZ_VALUE_TEMP, 16, 9);
    value(&h, 3, LZ_VALUE_TEMP, 16, 9);
    value(&h, 4, LZ_VALUE_OUTPUT, 16, 9);
    step(&h, OP_EITHER, 1, 0, -1);
    step(&h, OP_STEP, 2, 1, 1);
    step(&h, OP_STEP, 3, 2, -1);
    step(&h, OP_PLAIN, 4, 3, -1);
    lz_plan_layouts(&h.p, &fake);
    CHECK_EQ_I(h.v[1].block + h.v[2].block + h.v[3].block, 0);

    /* channels that are not a multiple of the block, and one-pixel values
       (same bytes either way: they neither go blocked nor stop a step) */
    hand_init(&h);
    value(&h, 0, LZ_VALUE_INPUT, 16, 9);
    value(&h, 1, LZ_VALUE_TEMP, 12, 9);
    value(&h, 2, LZ_VALUE_TEMP, 16, 9);
    value(&h, 3, LZ_VALUE_TEMP, 16, 1);
    value(&h, 4, LZ_VALUE_OUTPUT, 16, 1);
    step(&h, OP_EITHER, 1, 0, -1);
    step(&h, OP_EITHER, 2, 0, -1);
    step(&h, OP_STEP, 3, 2, -1);   /* a global pool: t2 -> [N, C, 1, 1] */
    step(&h, OP_EITHER, 4, 3, -1);
    lz_plan_layouts(&h.p, &fake);
    CHECK_EQ_I(h.v[1].block, 0);
    CHECK_EQ_I(h.v[2].block, 8);
    CHECK_EQ_I(h.v[3].block, 0);

    /* a view's source stays plain (the view reads it as plain memory) */
    hand_init(&h);
    value(&h, 0, LZ_VALUE_INPUT, 16, 9);
    value(&h, 1, LZ_VALUE_TEMP, 16, 9);
    value(&h, 2, LZ_VALUE_VIEW, 16, 9);
    h.v[2].view_of = 1;
    value(&h, 3, LZ_VALUE_OUTPUT, 16, 9);
    step(&h, OP_EITHER, 1, 0, -1);
    step(&h, OP_EITHER, 3, 2, -1);
    lz_plan_layouts(&h.p, &fake);
    CHECK_EQ_I(h.v[1].block, 0);
}

/* ---- a small residual CNN on the CPU backend --------------------------- */

typedef struct net {
    lz_tensor *x, *y, *w1, *c1, *g1, *b1, *w2, *g2, *b2, *sc, *sh, *w3, *w4, *fc, *fcb;
} net;

static lz_tensor *param(unsigned seed, float scale, int ndim, const int64_t *shape)
{
    lz_tensor *t = lz_test_rand(seed, -scale, scale, ndim, shape);
    lz_requires_grad(t, 1);
    return t;
}

static void net_init(net *n)
{
    const int64_t xs[4] = {4, 16, 12, 12}, w1[4] = {32, 16, 3, 3}, w2[4] = {32, 32, 3, 3};
    const int64_t c[1] = {32}, fc[2] = {5, 64}, fcb[1] = {5}, ys[1] = {4};
    n->x = lz_test_rand(1, -1, 1, 4, xs);
    const int64_t labels[4] = {0, 3, 1, 4};
    n->y = lz_from_host(labels, LZ_I64, 1, ys);
    n->w1 = param(2, 0.1f, 4, w1);
    n->w2 = param(3, 0.07f, 4, w2);
    n->c1 = param(10, 0.2f, 1, c);
    const int64_t per_channel[4] = {1, 64, 1, 1};
    n->sc = param(11, 1, 4, per_channel);
    n->sh = param(12, 0.5f, 4, per_channel);
    const int64_t w3[4] = {64, 64, 1, 1};
    n->w3 = param(13, 0.12f, 4, w3);
    n->w4 = param(14, 0.12f, 4, w3);
    n->g1 = param(4, 1, 1, c);
    n->b1 = param(5, 0.2f, 1, c);
    n->g2 = param(6, 1, 1, c);
    n->b2 = param(7, 0.2f, 1, c);
    n->fc = param(8, 0.3f, 2, fc);
    n->fcb = param(9, 0.3f, 1, fcb);
}

static void net_free(net *n)
{
    lz_tensor **t = &n->x;
    for (size_t i = 0; i < sizeof *n / sizeof *t; i++) lz_free(t[i]);
}

/* conv (with a bias: a broadcast add forward, a sum over N, H, W back)
   -bn-relu, max pool, conv-bn + the pooled input, relu, that and the
   pooled input side by side (a concatenation of channels; slices back),
   a per-channel scale and shift with a ReLU (one fused step reading two
   broadcast operands), a 1x1 conv, a 1x1 conv of stride 2 (resnet's
   downsampling), global pool, linear, cross entropy */
static lz_tensor *net_loss(net *n)
{
    const lz_conv2d_opts pad1 = {.padding = {1, 1}};
    const lz_pool2d_opts pool = {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
    lz_tensor *h = lz_relu(lz_batch_norm(lz_conv2d(n->x, n->w1, n->c1, pad1), n->g1, n->b1, NULL,
                                         NULL, 1, 0.1f, 1e-5f));
    h = lz_max_pool2d(h, pool);
    lz_tensor *r = lz_batch_norm(lz_conv2d(h, n->w2, NULL, pad1), n->g2, n->b2, NULL, NULL, 1,
                                 0.1f, 1e-5f);
    lz_tensor *both[2] = {lz_relu(lz_add(r, h)), h};
    h = lz_relu(lz_add(lz_mul(lz_cat(both, 2, 1), n->sc), n->sh));
    h = lz_conv2d(h, n->w3, NULL, (lz_conv2d_opts){0});
    h = lz_conv2d(h, n->w4, NULL, (lz_conv2d_opts){.stride = {2, 2}});
    const int64_t flat[2] = {4, 64};
    h = lz_reshape(lz_adaptive_avg_pool2d(h, 1, 1), 2, flat);
    return lz_cross_entropy(lz_linear(h, n->fc, n->fcb), n->y);
}

#define NRES 14   /* the loss and 13 gradients */

typedef struct outcome {
    float v[NRES][9216];
    int64_t n[NRES];
    int blocked, blocked_bf16, blocked_nhwc, cat_nhwc, boundary_ok, execs, compiles;
} outcome;

/* One training step's loss and gradients, compiled afresh, blocked
   layouts and fusion on or off. The step's intermediates die before the
   barrier (a live handle would make its value an output, plain), and the
   executable the barrier runs is compiled here first, to look inside. */
static void run_step(int blocked, int fusion, int bf16, outcome *o)
{
    memset(o, 0, sizeof *o);
    lz_blocked_layouts_set(blocked);
    lz_fusion_set(fusion);
    lz_cache_clear();
    lz_scope_begin();
    net n;
    net_init(&n);
    lz_scope_begin();
    if (bf16) CHECK(lz_autocast_begin(LZ_BF16) == 0);
    lz_tensor *loss = lz_keep(net_loss(&n));
    if (bf16) CHECK(lz_autocast_end() == 0);
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    lz_tensor *read[NRES] = {loss,          lz_grad(n.w1), lz_grad(n.c1), lz_grad(n.g1),
                             lz_grad(n.b1), lz_grad(n.w2), lz_grad(n.g2), lz_grad(n.b2),
                             lz_grad(n.sc), lz_grad(n.sh), lz_grad(n.w3), lz_grad(n.w4), lz_grad(n.fc),
                             lz_grad(n.fcb)};
    lz_executable *e = lz_test_compile_step(read, NRES);
    CHECK(e != NULL);
    o->boundary_ok = 1;
    for (int v = 0; e && v < e->prog.n_values; v++) {
        const lz_value *val = &e->prog.values[v];
        o->blocked += val->block != 0;
        o->blocked_bf16 += val->block != 0 && val->dtype == LZ_BF16;
        o->blocked_nhwc += val->block != 0 && val->block == val->shape[1];
        if (val->block && val->kind != LZ_VALUE_TEMP) o->boundary_ok = 0;
    }
    for (int i = 0; e && i < e->prog.n_instrs; i++) {
        const lz_instr *st = &e->prog.instrs[i];
        const lz_value *out = &e->prog.values[st->out];
        o->cat_nhwc |= st->op == LZ_OP_CAT && out->block > 16 && out->block == out->shape[1];
    }
    lz_executable_unref(e);
    lz_metrics m0 = lz_metrics_get();
    CHECK(lz_sync(read, NRES, 1) == 0);   /* cuts the graph of read[], as above */
    for (int i = 0; i < NRES; i++) {
        o->n[i] = lz_numel(read[i]);
        CHECK(o->n[i] <= 9216);
        CHECK(lz_to_host(read[i], o->v[i], sizeof(float) * (size_t)o->n[i]) == 0);
    }
    lz_metrics m1 = lz_metrics_get();
    o->execs = (int)(m1.executions - m0.executions);
    o->compiles = (int)(m1.compiles - m0.compiles);
    net_free(&n);
    lz_free(loss);
    lz_scope_end();
    lz_blocked_layouts_set(-1);
    lz_fusion_set(-1);
}

/* Each result of b against plain's: relative to the result's scale, or
   to 1e-2 for the conv bias's gradient, zero through batch norm but for
   rounding. */
static void check_same(const outcome *b, const outcome *plain, double tol, const char *what)
{
    for (int i = 0; i < NRES; i++) {
        CHECK_EQ_I(b->n[i], plain->n[i]);
        double scale = 0;
        for (int64_t k = 0; k < plain->n[i]; k++)
            if (fabs(plain->v[i][k]) > scale) scale = fabs(plain->v[i][k]);
        double err = lz_test_rel_err(b->v[i], plain->v[i], plain->n[i]) * scale /
                     (scale > 1e-2 ? scale : 1e-2);
        if (err > tol) fprintf(stderr, "%s, result %d: rel err %g\n", what, i, err);
        CHECK(err <= tol);
    }
}

static void check_cnn_step(void)
{
    if (!lz_cpu_layout_block()) {
        fprintf(stderr, "test_layout: NOT CHECKED: this CPU has no blocked layout for oneDNN "
                        "(neither AVX-512 nor AVX2)\n");
        return;
    }
    static outcome plain, blocked[2];
    run_step(0, 1, 0, &plain);
    CHECK_EQ_I(plain.blocked, 0);
    CHECK_EQ_I(plain.execs, 1);
    CHECK_EQ_I(plain.compiles, 0);   /* the barrier ran the executable looked at */
    for (int fusion = 0; fusion < 2; fusion++) {
        const outcome *b = &blocked[fusion];
        run_step(1, fusion, 0, &blocked[fusion]);
        /* conv outputs, batch norms', ReLU's and the add's results, pooled
           and concatenated values, and their gradients: a dozen at least */
        CHECK(b->blocked >= 12);
        CHECK_EQ_I(b->blocked_bf16, 0);
        CHECK(b->boundary_ok);
        CHECK_EQ_I(b->execs, 1);
        CHECK_EQ_I(b->compiles, 0);
        check_same(b, &plain, 1e-5, fusion ? "fused" : "unfused");
    }
    /* channels-last (LZ_BLOCKED=nhwc; AMX's bf16 steps get it by default):
       the same values go blocked, each with its channel count as its block,
       the concatenation and its slices back among them */
    static outcome nhwc;
    run_step(LZ_BLOCKED_NHWC, 1, 0, &nhwc);
    CHECK(nhwc.blocked >= 12);
    CHECK_EQ_I(nhwc.blocked_nhwc, nhwc.blocked);
    CHECK(nhwc.cat_nhwc);
    CHECK(nhwc.boundary_ok);
    CHECK_EQ_I(nhwc.execs, 1);
    check_same(&nhwc, &plain, 1e-5, "channels-last");
}

/* The same step under autocast: both convolutions' bf16 activations (x
   and the pooled h, forward and for the weight gradients) and the bf16
   gradients their backward products read go blocked, and the results are
   the plain executable's but for the order of the float32 sums (both read
   the same bf16 operands). */
static void check_cnn_step_bf16(void)
{
    if (!lz_cpu_layout_block()) return;
    static outcome plain, blocked;
    run_step(0, 1, 1, &plain);
    run_step(1, 1, 1, &blocked);
    CHECK_EQ_I(plain.blocked, 0);
    CHECK_EQ_I(blocked.execs, 1);
    CHECK(blocked.boundary_ok);
    if (lz_cpu_bf16_way() == LZ_BF16_WIDENED) {
        CHECK_EQ_I(blocked.blocked_bf16, 0);
    } else {
        /* x cast for conv 1, h cast for conv 2, conv 2's output gradient
           cast for its backward products; conv 1's too */
        CHECK(blocked.blocked_bf16 >= 3);
    }
    check_same(&blocked, &plain, 1e-4, "bf16");
    /* channels-last, AMX's default (its 1x1 weight gradient one matrix
       product, k_dnnl_conv.c), on any CPU with native bf16 */
    if (lz_cpu_bf16_way() == LZ_BF16_WIDENED) return;
    static outcome nhwc;
    run_step(LZ_BLOCKED_NHWC, 1, 1, &nhwc);
    CHECK(nhwc.blocked_bf16 >= 3);
    CHECK_EQ_I(nhwc.blocked_nhwc, nhwc.blocked);
    check_same(&nhwc, &plain, 1e-4, "bf16 channels-last");
}

int main(void)
{
    /* the bf16 machinery itself: every product bf16, whatever this CPU runs
       faster (which products autocast keeps float32: test_product_choice) */
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);
    check_pass_rules();
    check_cnn_step();
    check_cnn_step_bf16();
    return lz_test_done();
}
