/* Kernel time of one element-wise activation over a [rows, cols] tensor:
 * ms per step of y = op(x) (x fixed, y assigned to a kept tensor), median
 * of five rounds of N steps. gelu is bound by arithmetic, relu by memory;
 * the pair shows what a change to the row functions or their vectors
 * (LZ_MATH_CLONES, docs/performance.md "Build flags") buys:
 *
 *   build/activation_speed --rows 520 --cols 1536 --steps 50
 *
 * Prints one line per op: name, rows, cols, ms per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "lazyc.h"

/* median ms per step of n steps of y = op(x), over five rounds */
static double time_op(lz_tensor *(*op)(lz_tensor *), lz_tensor *x, lz_tensor *y, long n)
{
    double round_ms[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now_ms();
        for (long i = 0; i < n; i++) {
            lz_tensor *v = op(x);
            if (!v || lz_assign(y, v) != 0) return -1;
            lz_free(v);
            lz_mark_step();
        }
        if (lz_wait() != 0) return -1;
        round_ms[r] = (now_ms() - t0) / (double)n;
    }
    return median(round_ms, 5);
}

int main(int argc, char **argv)
{
    int64_t shape[2] = {520, 1536};
    long steps = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) shape[0] = atol(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) shape[1] = atol(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: activation_speed [--rows N] [--cols N] [--steps N]\n");
            return 2;
        }
    }
    if (shape[0] < 1 || shape[1] < 1 || steps < 1) {
        fprintf(stderr, "activation_speed: rows, cols and steps must be positive\n");
        return 2;
    }
    lz_tensor *x = lz_randn(2, shape), *y = lz_zeros(LZ_F32, 2, shape);
    lz_mark_step();
    if (!x || !y || lz_wait() != 0) {
        fprintf(stderr, "activation_speed: %s\n", lz_last_error());
        return 1;
    }
    static const struct { const char *name; lz_tensor *(*op)(lz_tensor *); } ops[] = {
        {"gelu", lz_gelu}, {"relu", lz_relu}, {"sigmoid", lz_sigmoid}, {"exp", lz_exp},
    };
    int rc = 0;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        double ms = time_op(ops[k].op, x, y, steps);
        if (ms < 0) {
            fprintf(stderr, "activation_speed: %s: %s\n", ops[k].name, lz_last_error());
            rc = 1;
            continue;
        }
        printf("%-8s %6lld x %-6lld %8.3f ms a step\n", ops[k].name, (long long)shape[0],
               (long long)shape[1], ms);
    }
    lz_free(x);
    lz_free(y);
    return rc;
}
