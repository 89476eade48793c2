/* The profile by step shape (lz_profile_enable(2), lz_profile_read_steps):
 * one entry per op, library and operands, with the flops of a product;
 * its times add up to the profile by op; level 1 leaves it empty; shapes
 * past its table are counted under "(other shapes)", not lost. */
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"
#include "testlib.h"

static const lz_profile_step_entry *find(const lz_profile_step_entry *e, int n, const char *op)
{
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].op, op) == 0) return &e[i];
    return NULL;
}

/* c = a [4, 8] x b [8, 16]; y = conv(x [2, 3, 8, 8], w [4, 3, 3, 3], pad 1) */
static void one_step(void)
{
    int64_t sa[2] = {4, 8}, sb[2] = {8, 16}, sx[4] = {2, 3, 8, 8}, sw[4] = {4, 3, 3, 3};
    lz_scope_begin();
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, sa), *b = lz_test_rand(2, -1, 1, 2, sb);
    lz_tensor *x = lz_test_rand(3, -1, 1, 4, sx), *w = lz_test_rand(4, -1, 1, 4, sw);
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    lz_conv2d_opts o = {.padding = {1, 1}};
    lz_tensor *s = lz_add(lz_sum(lz_matmul(a, b)), lz_sum(lz_conv2d(x, w, NULL, o)));
    lz_keep(s);
    lz_scope_end();
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    lz_free(s);
}

static void shapes_and_flops(void)
{
    one_step();   /* compiled and run once, unprofiled */
    lz_profile_reset();
    lz_profile_enable(2);
    one_step();
    lz_profile_enable(0);
    lz_profile_step_entry e[64];
    const int n = lz_profile_read_steps(e, 64);
    CHECK(n > 2 && n <= 64);
    const lz_profile_step_entry *mm = find(e, n, "matmul"), *cv = find(e, n, "conv2d");
    CHECK(mm && cv);
    if (!mm || !cv) return;
    fprintf(stderr, "matmul: %s, %.0f flops; conv2d: %s, %.0f flops\n", mm->operands, mm->flops,
            cv->operands, cv->flops);
    CHECK(strcmp(mm->operands, "f32[4, 8] f32[8, 16] -> f32[4, 16]") == 0);
    CHECK(mm->flops == 2.0 * 4 * 16 * 8);
    CHECK_EQ_I(mm->calls, 1);
    CHECK(strstr(cv->operands, "f32[2, 3, 8, 8] f32[4, 3, 3, 3] -> f32[2, 4, 8, 8]") != NULL);
    CHECK(cv->flops == 2.0 * (2 * 4 * 8 * 8) * (3 * 3 * 3));
    /* the same kernels as the profile by op: the same calls and time */
    lz_profile_entry byop[64];
    const int m = lz_profile_read(byop, 64);
    double ms_steps = 0, ms_ops = 0;
    int64_t calls_steps = 0, calls_ops = 0;
    for (int i = 0; i < n; i++) { ms_steps += e[i].ms; calls_steps += e[i].calls; }
    for (int i = 0; i < m; i++) { ms_ops += byop[i].ms; calls_ops += byop[i].calls; }
    CHECK_EQ_I(calls_steps, calls_ops);
    CHECK(ms_steps > 0 && ms_steps > ms_ops * (1 - 1e-9) && ms_steps < ms_ops * (1 + 1e-9));
    /* slowest first */
    for (int i = 1; i < n; i++) CHECK(e[i - 1].ms >= e[i].ms);

    /* level 1: by op only */
    lz_profile_reset();
    CHECK_EQ_I(lz_profile_read_steps(NULL, 0), 0);
    lz_profile_enable(1);
    one_step();
    lz_profile_enable(0);
    CHECK(lz_profile_read(NULL, 0) > 0);
    CHECK_EQ_I(lz_profile_read_steps(NULL, 0), 0);
}

/* More matmul shapes than the table keeps: every call is still counted. */
static void overflow(void)
{
    enum { SHAPES = 1100 };
    lz_profile_reset();
    lz_profile_enable(2);
    for (int k = 1; k <= SHAPES; k++) {
        int64_t sa[2] = {1, k}, sb[2] = {k, 1};
        lz_scope_begin();
        lz_tensor *c = lz_matmul(lz_zeros(LZ_F32, 2, sa), lz_zeros(LZ_F32, 2, sb));
        lz_keep(c);
        lz_scope_end();
        lz_mark_step();
        lz_free(c);
    }
    CHECK_EQ_I(lz_wait(), 0);
    lz_profile_enable(0);
    const int n = lz_profile_read_steps(NULL, 0);
    lz_profile_step_entry *e = malloc(sizeof *e * (size_t)n);
    CHECK(e && lz_profile_read_steps(e, n) == n);
    int64_t calls = 0, other = 0;
    for (int i = 0; e && i < n; i++) {
        if (strcmp(e[i].op, "matmul") != 0) continue;
        calls += e[i].calls;
        if (strcmp(e[i].operands, "(other shapes)") == 0) other = e[i].calls;
    }
    fprintf(stderr, "%d entries; %lld matmuls, %lld under (other shapes)\n", n, (long long)calls,
            (long long)other);
    CHECK_EQ_I(calls, SHAPES);
    CHECK(other > 0 && other < SHAPES);
    free(e);
}

int main(void)
{
    shapes_and_flops();
    overflow();
    lz_shutdown();
    return lz_test_done();
}
