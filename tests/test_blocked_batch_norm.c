/* The batch-norm kernels on channel-blocked operands (lz_value.block,
 * k_batch_norm_blocked.c) against the plain kernels on the same data in
 * plain layout: the normalise and input-gradient kernels bit for bit
 * (given the same statistics), the statistics to 1e-6, for blocks of 16
 * and 8 (and a wider and a narrower one, which take the generic loops),
 * and channels-last (a block of all C, k_batch_norm_nhwc.c's kernels),
 * with and without weight and bias, with a ReLU or hardtanh folded in,
 * the widest channels-last case also on a thread with a 128 KB stack.
 * Each step is built by hand, so the kernels are called directly. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "testlib.h"

#define STAT_TOL 1e-6

/* Every value a step of the four ops may name; the 4-d ones (X, G, Y) are
   the blocked ones. */
enum { V_X, V_ST, V_EPS, V_W, V_B, V_G, V_GS, V_Y, V_STOUT, N_V };

typedef struct bn_case {
    int64_t shape[4];
    int b;                 /* block */
    int has_w, has_b, act;
} bn_case;

typedef struct bufs {
    float *v[N_V];
} bufs;

static void set_value(lz_value *v, int ndim, const int64_t *shape)
{
    memset(v, 0, sizeof *v);
    v->dtype = LZ_F32;
    v->ndim = (uint8_t)ndim;
    v->kind = LZ_VALUE_TEMP;
    v->numel = 1;
    for (int i = 0; i < ndim; i++) {
        v->shape[i] = shape[i];
        v->numel *= shape[i];
    }
    v->nbytes = sizeof(float) * (size_t)v->numel;
}

static void make_values(lz_value *vals, const int64_t *xs, int block)
{
    const int64_t C = xs[1], st[2] = {2, C};
    set_value(&vals[V_X], 4, xs);
    set_value(&vals[V_ST], 2, st);
    set_value(&vals[V_EPS], 0, NULL);
    set_value(&vals[V_W], 1, &xs[1]);
    set_value(&vals[V_B], 1, &xs[1]);
    set_value(&vals[V_G], 4, xs);
    set_value(&vals[V_GS], 2, st);
    set_value(&vals[V_Y], 4, xs);
    set_value(&vals[V_STOUT], 2, st);
    vals[V_X].block = vals[V_G].block = vals[V_Y].block = (uint16_t)block;
}

/* The step of op for case k, its inputs in the op's order (ir/ir.h). */
static lz_instr make_step(lz_op op, const bn_case *k, int *in)
{
    lz_instr s;
    memset(&s, 0, sizeof s);
    s.op = (uint16_t)op;
    s.in = in;
    int n = 0;
    in[n++] = V_X;
    if (op != LZ_OP_BATCH_NORM_STATS) {
        in[n++] = V_ST;
        in[n++] = V_EPS;
    }
    switch (op) {
    case LZ_OP_BATCH_NORM_STATS:
        s.out = V_STOUT;
        break;
    case LZ_OP_BATCH_NORM:
        if (k->has_w) in[n++] = V_W;
        if (k->has_b) in[n++] = V_B;
        s.iattr[0] = k->has_w;
        s.iattr[1] = k->has_b;
        s.iattr[2] = k->act;
        s.out = V_Y;
        break;
    case LZ_OP_BATCH_NORM_GRAD_STATS:
        in[n++] = V_G;
        s.out = V_STOUT;
        break;
    default:   /* LZ_OP_BATCH_NORM_GRAD */
        in[n++] = V_G;
        in[n++] = V_GS;
        if (k->has_w) in[n++] = V_W;
        s.iattr[0] = k->has_w;
        s.out = V_Y;
        break;
    }
    /* a folded activation's gradient: y recomputed with the forward's
       weight and bias, the last inputs */
    if ((op == LZ_OP_BATCH_NORM_GRAD_STATS || op == LZ_OP_BATCH_NORM_GRAD) && k->act) {
        if (k->has_w) in[n++] = V_W;
        if (k->has_b) in[n++] = V_B;
        s.iattr[2] = k->act;
        s.iattr[3] = k->has_w;
        s.iattr[4] = k->has_b;
    }
    s.n_in = n;
    s.fattr[0] = -1.0f;   /* hardtanh's bounds */
    s.fattr[1] = 1.0f;
    return s;
}

static const char *run_step(lz_op op, const bn_case *k, lz_value *vals, float *const *v)
{
    int in[8];
    lz_instr s = make_step(op, k, in);
    lz_program p;
    memset(&p, 0, sizeof p);
    p.n_values = N_V;
    p.values = vals;
    void *ptrs[N_V];
    for (int i = 0; i < N_V; i++) ptrs[i] = v[i];
    return lz_cpu_batch_norm_kernel(op)(&p, &s, ptrs);
}

static int bits_equal(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

/* Relative errors of the two halves of a [2, C] result. */
static double halves_err(const float *a, const float *b, int64_t C)
{
    const double e0 = lz_test_rel_err(a, b, C), e1 = lz_test_rel_err(a + C, b + C, C);
    return e0 > e1 ? e0 : e1;
}

static int64_t numel4(const int64_t *s) { return s[0] * s[1] * s[2] * s[3]; }

/* plain: the plain buffers; blk: their 4-d ones blocked, the rest shared. */
static void fill(const bn_case *k, bufs *plain, bufs *blk)
{
    const int64_t n = numel4(k->shape), C = k->shape[1];
    for (int i = 0; i < N_V; i++) {
        const int64_t len = i == V_EPS ? 1 : (i == V_X || i == V_G || i == V_Y)
                                                  ? n : (i == V_W || i == V_B) ? C : 2 * C;
        plain->v[i] = calloc((size_t)(len ? len : 1), sizeof(float));
        blk->v[i] = calloc((size_t)(len ? len : 1), sizeof(float));
    }
    lz_test_fill_uniform(plain->v[V_X], n, 1, -2, 3);
    lz_test_fill_uniform(plain->v[V_G], n, 2, -1, 1);
    lz_test_fill_uniform(plain->v[V_W], C, 4, 0.5f, 1.5f);
    lz_test_fill_uniform(plain->v[V_B], C, 5, -0.5f, 0.5f);
    plain->v[V_EPS][0] = 1e-5f;
    const int blocked4[] = {V_X, V_G};
    for (int i = 0; i < 2; i++)
        lz_test_reblock(plain->v[blocked4[i]], blk->v[blocked4[i]], k->shape, k->b, 1);
    memcpy(blk->v[V_W], plain->v[V_W], sizeof(float) * (size_t)C);
    memcpy(blk->v[V_B], plain->v[V_B], sizeof(float) * (size_t)C);
    blk->v[V_EPS][0] = plain->v[V_EPS][0];
}

static void free_bufs(bufs *b)
{
    for (int i = 0; i < N_V; i++) free(b->v[i]);
}

static void describe(const char *what, const bn_case *k)
{
    fprintf(stderr, "%s: [%lld, %lld, %lld, %lld] b=%d w=%d b=%d act=%d\n", what,
            (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2],
            (long long)k->shape[3], k->b, k->has_w, k->has_b, k->act);
}

static void compare(const bn_case *k)
{
    const int64_t n = numel4(k->shape), C = k->shape[1];
    lz_value pv[N_V], bv[N_V];
    make_values(pv, k->shape, 0);
    make_values(bv, k->shape, k->b);
    bufs P, B;
    fill(k, &P, &B);
    float *back = malloc(sizeof(float) * (size_t)(n ? n : 1));

    /* statistics: both from their own layout */
    CHECK(run_step(LZ_OP_BATCH_NORM_STATS, k, pv, P.v) == NULL);
    CHECK(run_step(LZ_OP_BATCH_NORM_STATS, k, bv, B.v) == NULL);
    double e = halves_err(B.v[V_STOUT], P.v[V_STOUT], C);
    if (!(e <= STAT_TOL)) describe("stats", k);
    CHECK(e <= STAT_TOL);
    /* the rest read the plain statistics, so they may agree in every bit */
    memcpy(P.v[V_ST], P.v[V_STOUT], sizeof(float) * 2 * (size_t)C);
    memcpy(B.v[V_ST], P.v[V_STOUT], sizeof(float) * 2 * (size_t)C);

    CHECK(run_step(LZ_OP_BATCH_NORM, k, pv, P.v) == NULL);
    CHECK(run_step(LZ_OP_BATCH_NORM, k, bv, B.v) == NULL);
    lz_test_reblock(B.v[V_Y], back, k->shape, k->b, 0);
    if (!bits_equal(back, P.v[V_Y], n)) describe("apply", k);
    CHECK(bits_equal(back, P.v[V_Y], n));

    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD_STATS, k, pv, P.v) == NULL);
    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD_STATS, k, bv, B.v) == NULL);
    e = halves_err(B.v[V_STOUT], P.v[V_STOUT], C);
    if (!(e <= STAT_TOL)) describe("grad stats", k);
    CHECK(e <= STAT_TOL);
    memcpy(P.v[V_GS], P.v[V_STOUT], sizeof(float) * 2 * (size_t)C);
    memcpy(B.v[V_GS], P.v[V_STOUT], sizeof(float) * 2 * (size_t)C);

    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD, k, pv, P.v) == NULL);
    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD, k, bv, B.v) == NULL);
    lz_test_reblock(B.v[V_Y], back, k->shape, k->b, 0);
    if (!bits_equal(back, P.v[V_Y], n)) describe("grad", k);
    CHECK(bits_equal(back, P.v[V_Y], n));

    free(back);
    free_bufs(&P);
    free_bufs(&B);
}

/* Plain data marked blocked must come out otherwise than the plain
   kernel's: the block field is what picks the blocked loops. */
static void dispatched(void)
{
    const bn_case k = {{2, 32, 5, 7}, 16, 1, 1, LZ_BN_ACT_NONE};
    const int64_t n = numel4(k.shape), C = k.shape[1];
    lz_value pv[N_V], bv[N_V];
    make_values(pv, k.shape, 0);
    make_values(bv, k.shape, k.b);
    bufs P, B;
    fill(&k, &P, &B);
    for (int i = 0; i < N_V; i++)
        if (i != V_Y && i != V_STOUT)
            memcpy(B.v[i], P.v[i], sizeof(float) * (size_t)(i == V_EPS ? 1 : i == V_W || i == V_B
                                                                  ? C : i == V_ST || i == V_GS
                                                                  ? 2 * C : n));
    lz_test_fill_uniform(P.v[V_ST], C, 6, -0.5f, 0.5f);   /* means, then variances */
    lz_test_fill_uniform(P.v[V_ST] + C, C, 7, 0.5f, 2);
    lz_test_fill_uniform(P.v[V_GS], 2 * C, 8, -3, 3);
    memcpy(B.v[V_ST], P.v[V_ST], sizeof(float) * 2 * (size_t)C);
    memcpy(B.v[V_GS], P.v[V_GS], sizeof(float) * 2 * (size_t)C);
    const lz_op ops[4] = {LZ_OP_BATCH_NORM_STATS, LZ_OP_BATCH_NORM, LZ_OP_BATCH_NORM_GRAD_STATS,
                          LZ_OP_BATCH_NORM_GRAD};
    for (int o = 0; o < 4; o++) {
        const int out = ops[o] == LZ_OP_BATCH_NORM_STATS || ops[o] == LZ_OP_BATCH_NORM_GRAD_STATS
                            ? V_STOUT : V_Y;
        const int64_t len = out == V_Y ? n : 2 * C;
        CHECK(run_step(ops[o], &k, pv, P.v) == NULL);
        CHECK(run_step(ops[o], &k, bv, B.v) == NULL);
        CHECK(!bits_equal(P.v[out], B.v[out], len));
    }
    /* a 4-d operand left plain beside a blocked x is refused, not misread */
    bv[V_G].block = 0;
    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD, &k, bv, B.v) != NULL);
    CHECK(run_step(LZ_OP_BATCH_NORM_GRAD_STATS, &k, bv, B.v) != NULL);
    bv[V_G].block = (uint16_t)k.b;
    bv[V_Y].block = 8;
    CHECK(run_step(LZ_OP_BATCH_NORM, &k, bv, B.v) != NULL);
    free_bufs(&P);
    free_bufs(&B);
}

/* No pixels: the statistics are NaN, as a mean over nothing, in both. */
static void empty(void)
{
    const bn_case k = {{0, 16, 3, 3}, 16, 0, 0, LZ_BN_ACT_NONE};
    lz_value bv[N_V];
    make_values(bv, k.shape, k.b);
    bufs P, B;
    fill(&k, &P, &B);
    CHECK(run_step(LZ_OP_BATCH_NORM_STATS, &k, bv, B.v) == NULL);
    for (int c = 0; c < 32; c++) CHECK(isnan(B.v[V_STOUT][c]));
    free_bufs(&P);
    free_bufs(&B);
}

/* The widest channels-last case on a thread with a small stack, as a
   program's recording thread may be (a step too small for a job runs on
   it): the per-channel arrays of 4096 channels are on the heap (they came
   to 160 KB of stack in the gradient's sums). */
static void *widest_case(void *arg)
{
    (void)arg;
    compare(&(bn_case){{1, 4096, 2, 2}, 4096, 1, 1, LZ_BN_ACT_RELU});
    return NULL;
}

static void small_stack(void)
{
    pthread_attr_t attr;
    pthread_t t;
    CHECK(pthread_attr_init(&attr) == 0);
    CHECK(pthread_attr_setstacksize(&attr, 128 * 1024) == 0);
    const int made = pthread_create(&t, &attr, widest_case, NULL) == 0;
    CHECK(made);
    if (made) CHECK(pthread_join(t, NULL) == 0);
    pthread_attr_destroy(&attr);
}

int main(void)
{
    static const int64_t shapes[][4] = {
        {2, 32, 5, 7}, {3, 16, 1, 2}, {2, 16, 9, 11}, {8, 64, 16, 16}, {4, 128, 3, 3},
    };
    static const int blocks[] = {16, 8};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t bi = 0; bi < 2; bi++)
            for (int act = LZ_BN_ACT_NONE; act <= LZ_BN_ACT_HARDTANH; act++)
                for (int wb = 0; wb < 4; wb++) {
                    bn_case k = {{0}, blocks[bi], wb & 1, wb >> 1, act};
                    memcpy(k.shape, shapes[si], sizeof k.shape);
                    compare(&k);
                }
    /* other widths: several lane groups a block, and a narrow one */
    compare(&(bn_case){{2, 64, 3, 5}, 32, 1, 1, LZ_BN_ACT_HARDTANH});
    compare(&(bn_case){{2, 48, 4, 4}, 24, 1, 0, LZ_BN_ACT_RELU});
    compare(&(bn_case){{3, 8, 3, 3}, 4, 0, 1, LZ_BN_ACT_NONE});
    /* channels-last (block = C, k_batch_norm_nhwc.c): rows not a multiple
       of its pieces or chunks, many pieces, the widest it takes */
    for (int act = LZ_BN_ACT_NONE; act <= LZ_BN_ACT_HARDTANH; act++) {
        compare(&(bn_case){{3, 24, 23, 19}, 24, 1, 1, act});
        compare(&(bn_case){{8, 64, 16, 16}, 64, act != LZ_BN_ACT_RELU, 1, act});
        compare(&(bn_case){{2, 1024, 3, 3}, 1024, 1, act == LZ_BN_ACT_NONE, act});
        compare(&(bn_case){{3, 2048, 2, 3}, 2048, act != LZ_BN_ACT_NONE, 1, act});
        compare(&(bn_case){{1, 4096, 2, 2}, 4096, 1, 1, act});
    }
    dispatched();
    empty();
    small_stack();
    return lz_test_done();
}
