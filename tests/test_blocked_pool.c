/* The pooling kernels on channel-blocked operands (lz_value.block, the
 * kernels in src/backends/cpu/k_pool_blocked.c) against the same kernels on
 * plain ones: a hand-built one-step program is run plain on plain arrays
 * and blocked on reblocked ones, and the result, reblocked back, must have
 * the same bits. Max pool inputs have ties (a few levels, +0 and -0), NaNs
 * of either sign and another payload, infinities and an all -inf plane,
 * so that every rule of the pick shows (first maximum, last NaN, the NaN
 * constant of the plain fast paths); average pool inputs and gradients
 * are uniform, so that a sum in another order shows; gradients have -0.
 * Shapes go from serial to the parallel path, windows from ResNet's,
 * VGG's and SqueezeNet's (ceil_mode) max pools to global and overlapping
 * adaptive average pools. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/k_pool.h"
#include "testlib.h"

/* torch's pooling_output_shape (dilation 1), as src/ops/pool.c has it */
static int64_t pool_extent(int64_t in, int64_t k, int64_t s, int64_t p, int ceil_mode)
{
    int64_t num = in + 2 * p - k + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

static int64_t numel(const int64_t *sh) { return sh[0] * sh[1] * sh[2] * sh[3]; }

static float nan_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Max pool inputs: a few levels with +0 and -0 (ties in most windows),
   about 2% NaNs (three kinds), 2% -inf and 1% +inf, and channel 1 of
   image 0 all -inf (windows whose maximum is their first element only by
   rule). Average pool inputs: uniform, so that a sum in another order
   rounds otherwise, with a few NaNs and infinities. */
static void fill_x(float *x, const int64_t *sh, unsigned seed, int for_max)
{
    static const float level[6] = {-1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f};
    const int64_t n = numel(sh);
    lz_test_fill_uniform(x, n, seed, 0.0f, 1.0f);
    const int64_t per = for_max ? 1000 : 20000;   /* specials per that many */
    for (int64_t i = 0; i < n; i++) {
        const float u = x[i];
        const int64_t r = (i * 2654435761u + seed) % per;
        if (r < 7) x[i] = NAN;
        else if (r < 14) x[i] = -NAN;
        else if (r < 20) x[i] = nan_bits(0x7fc12345u);
        else if (r < 40) x[i] = -INFINITY;
        else if (r < 50) x[i] = INFINITY;
        else x[i] = for_max ? level[(int)(u * 6.0f) % 6] : 2.0f * u - 1.0f;
    }
    if (!for_max) return;
    const int64_t plane = sh[2] * sh[3];
    for (int64_t i = 0; i < plane; i++) x[plane + i] = -INFINITY;
}

/* Gradients: uniform, every seventh -0. */
static void fill_g(float *g, const int64_t *sh, unsigned seed)
{
    lz_test_fill_uniform(g, numel(sh), seed, -1.0f, 1.0f);
    for (int64_t i = 0; i < numel(sh); i += 7) g[i] = -0.0f;
}

typedef struct pool_case {
    const char *name;
    lz_op op;
    int64_t x[4], y[4];   /* the pooled input's shape, the pooled output's */
    int64_t attr[8];
} pool_case;

/* Runs c's op plain and blocked with block b: whether the outputs' bytes
   are the same. */
static int run_case(const pool_case *c, int b)
{
    const int grad = c->op == LZ_OP_MAX_POOL2D_GRAD || c->op == LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD;
    const int is_max = c->op == LZ_OP_MAX_POOL2D || c->op == LZ_OP_MAX_POOL2D_GRAD;
    /* values: the step's inputs, then its output */
    const int64_t *shapes[3];
    int n_in = 0;
    if (c->op == LZ_OP_MAX_POOL2D || c->op == LZ_OP_ADAPTIVE_AVG_POOL2D) {
        shapes[n_in++] = c->x;
        shapes[n_in] = c->y;
    } else if (c->op == LZ_OP_MAX_POOL2D_GRAD) {
        shapes[n_in++] = c->x;
        shapes[n_in++] = c->y;
        shapes[n_in] = c->x;
    } else {
        shapes[n_in++] = c->y;
        shapes[n_in] = c->x;
    }
    const int nv = n_in + 1;
    lz_value vals[2][3];
    int in[2] = {0, 1};
    float *plain[3], *blocked[3];
    memset(vals, 0, sizeof vals);
    for (int v = 0; v < nv; v++) {
        const int64_t *sh = shapes[v];
        for (int k = 0; k < 2; k++) {
            lz_value *val = &vals[k][v];
            val->dtype = LZ_F32;
            val->ndim = 4;
            memcpy(val->shape, sh, 4 * sizeof *sh);
            val->numel = numel(sh);
            val->nbytes = (size_t)val->numel * sizeof(float);
            val->kind = LZ_VALUE_TEMP;
            /* the compiler may leave a value with one position plain */
            val->block = k == 1 && sh[2] * sh[3] > 1 ? (uint8_t)b : 0;
        }
        plain[v] = malloc(vals[0][v].nbytes);
        blocked[v] = malloc(vals[0][v].nbytes);
    }
    /* inputs: x where the op reads it, else g */
    for (int v = 0; v < n_in; v++) {
        const int is_g = grad && (c->op == LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD || v == 1);
        if (is_g) fill_g(plain[v], shapes[v], 11u + (unsigned)v);
        else fill_x(plain[v], shapes[v], 7u + (unsigned)b, is_max);
        lz_test_reblock(plain[v], blocked[v], shapes[v], b, 1);
    }
    /* garbage where the output goes: every element must be written */
    memset(plain[n_in], 0x7f, vals[0][n_in].nbytes);
    memset(blocked[n_in], 0xff, vals[0][n_in].nbytes);

    lz_instr st;
    memset(&st, 0, sizeof st);
    st.op = (uint16_t)c->op;
    st.in = in;
    st.n_in = n_in;
    st.out = n_in;
    memcpy(st.iattr, c->attr, sizeof c->attr);
    lz_program prog[2];
    memset(prog, 0, sizeof prog);
    for (int k = 0; k < 2; k++) {
        prog[k].n_values = nv;
        prog[k].values = vals[k];
        prog[k].n_instrs = 1;
        prog[k].instrs = &st;
    }
    lz_kernel kern = lz_cpu_pool_kernel(c->op);
    CHECK(kern != NULL);
    int same = 0;
    if (kern) {
        const char *e0 = kern(&prog[0], &st, (void *const *)plain);
        const char *e1 = kern(&prog[1], &st, (void *const *)blocked);
        CHECK(e0 == NULL);
        CHECK(e1 == NULL);
        float *back = malloc(vals[0][n_in].nbytes);
        lz_test_reblock(blocked[n_in], back, shapes[n_in], b, 0);
        /* bitwise; but where a sum meets two NaNs, IEEE leaves open whose
           payload and sign it keeps (x86 keeps the first operand's, and
           the compiler may swap operands), so there any NaN will do */
        const int any_nan = c->op == LZ_OP_ADAPTIVE_AVG_POOL2D;
        same = 1;
        for (int64_t i = 0; i < vals[0][n_in].numel && same; i++) {
            const float u = back[i], v = plain[n_in][i];
            if (memcmp(&u, &v, sizeof u) == 0 || (any_nan && u != u && v != v)) continue;
            fprintf(stderr, "%s%s, b=%d: element %lld is %g blocked, %g plain\n", c->name,
                    grad ? " grad" : "", b, (long long)i, (double)u, (double)v);
            same = 0;
        }
        free(back);
    }
    for (int v = 0; v < nv; v++) {
        free(plain[v]);
        free(blocked[v]);
    }
    return same;
}

static pool_case max_case(const char *name, int grad, int64_t N, int64_t C, int64_t H, int64_t W,
                          int64_t k, int64_t s, int64_t p, int ceil_mode)
{
    pool_case c = {name, grad ? LZ_OP_MAX_POOL2D_GRAD : LZ_OP_MAX_POOL2D,
                   {N, C, H, W},
                   {N, C, pool_extent(H, k, s, p, ceil_mode), pool_extent(W, k, s, p, ceil_mode)},
                   {k, k, s, s, p, p, ceil_mode, 0}};
    return c;
}

static pool_case adaptive_case(const char *name, int grad, int64_t N, int64_t C, int64_t H,
                               int64_t W, int64_t OH, int64_t OW)
{
    pool_case c = {name, grad ? LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD : LZ_OP_ADAPTIVE_AVG_POOL2D,
                   {N, C, H, W}, {N, C, OH, OW}, {0}};
    return c;
}

int main(void)
{
    pool_case cases[64];
    int n = 0;
    for (int grad = 0; grad < 2; grad++) {
        /* ResNet's 3x3/2 pad 1; VGG's 2x2/2, also on odd sizes (a row and a
           column no window reads); SqueezeNet's 3x3/2 with ceil_mode (the
           last windows clipped), and 2x2 with ceil_mode (not the 2x2 path) */
        cases[n++] = max_case("max 3x3/2 p1", grad, 2, 32, 9, 11, 3, 2, 1, 0);
        cases[n++] = max_case("max 3x3/2 p1 large", grad, 8, 64, 32, 32, 3, 2, 1, 0);
        cases[n++] = max_case("max 2x2/2", grad, 2, 32, 8, 10, 2, 2, 0, 0);
        cases[n++] = max_case("max 2x2/2 odd", grad, 2, 32, 9, 7, 2, 2, 0, 0);
        cases[n++] = max_case("max 2x2/2 large", grad, 8, 64, 32, 32, 2, 2, 0, 0);
        cases[n++] = max_case("max 2x2/2 ceil", grad, 2, 32, 9, 7, 2, 2, 0, 1);
        cases[n++] = max_case("max 3x3/2 ceil", grad, 2, 32, 14, 13, 3, 2, 0, 1);
        cases[n++] = max_case("max 3x3/2 ceil large", grad, 8, 64, 32, 32, 3, 2, 0, 1);
        cases[n++] = max_case("max 3x3/1 p1", grad, 2, 16, 6, 6, 3, 1, 1, 0);
        /* global (the output [N, C, 1, 1] plain in the program), and 7x7
           from 4x4 and from 9x9: overlapping windows */
        cases[n++] = adaptive_case("adaptive 1x1", grad, 2, 32, 5, 3, 1, 1);
        cases[n++] = adaptive_case("adaptive 1x1 large", grad, 8, 64, 7, 7, 1, 1);
        cases[n++] = adaptive_case("adaptive 7x7 from 4x4", grad, 8, 64, 4, 4, 7, 7);
        cases[n++] = adaptive_case("adaptive 7x7 from 9x9", grad, 8, 64, 9, 9, 7, 7);
        cases[n++] = adaptive_case("adaptive 7x7 from 9x9 small", grad, 1, 16, 9, 9, 7, 7);
    }
    /* oneDNN's blocks, and 32: two lane groups, the kernels' generic path */
    static const int blocks[] = {16, 8, 32};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) {
            if (cases[i].x[1] % blocks[k]) continue;
            CHECK(run_case(&cases[i], blocks[k]));
        }
    return lz_test_done();
}
