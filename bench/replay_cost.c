/* The host cost of a captured replay: a tiny step (y = sum(x * w + b), or
 * with --train a forward, backward and SGD step on w and b) replayed N
 * times. Meant for instruction counts of lz_call alone:
 *
 *   valgrind --tool=callgrind --toggle-collect=lz_call build/replay_cost --calls 100000
 *
 * (the total Ir divided by the calls is the cost of one lz_call on the
 * recording thread: guard, binding, enqueue; the kernels run on the
 * executor thread). Prints the calls made and the replays counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"

typedef struct model { lz_tensor *w, *b; lz_sgd *opt; int train; } model;

static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    if (m->train) lz_sgd_zero_grad(m->opt);
    lz_tensor *loss = lz_sum(lz_add(lz_mul(in[0], m->w), m->b));
    if (!loss) return -1;
    if (m->train && (lz_backward(loss) || lz_sgd_step(m->opt))) return -1;
    out[0] = loss;
    return 0;
}

int main(int argc, char **argv)
{
    long calls = 100000;
    int train = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atol(argv[++i]);
        else if (!strcmp(argv[i], "--train")) train = 1;
        else {
            fprintf(stderr, "usage: replay_cost [--calls N] [--train]\n");
            return 2;
        }
    }
    float v[4] = {1, 2, 3, 4};
    model m = {lz_from_host(v, LZ_F32, 1, (int64_t[]){4}), lz_from_host(v, LZ_F32, 1, (int64_t[]){4}), NULL, train};
    if (train) {
        lz_requires_grad(m.w, 1);
        lz_requires_grad(m.b, 1);
        lz_tensor *ps[2] = {m.w, m.b};
        m.opt = lz_sgd_new(ps, 2, (lz_sgd_opts){.lr = 1e-6f, .momentum = 0.9f});
    }
    lz_fn *f = lz_capture(step, &m, 1, 1);
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, (int64_t[]){4});
    for (long i = 0; i < calls; i++) {
        lz_tensor *out[1] = {NULL};
        if (lz_call(f, &x, out)) {
            fprintf(stderr, "replay_cost: %s\n", lz_last_error());
            return 1;
        }
        lz_free(out[0]);
        if (i % 64 == 63 && lz_wait()) {
            fprintf(stderr, "replay_cost: %s\n", lz_last_error());
            return 1;
        }
    }
    if (lz_wait()) return 1;
    printf("calls %ld replays %lld\n", calls, (long long)lz_metrics_get().capture_replays);
    lz_fn_free(f);
    lz_free(x);
    lz_sgd_free(m.opt);
    lz_free(m.w);
    lz_free(m.b);
    lz_shutdown();
    return 0;
}
