/* A kernel's per-thread scratch buffer that cannot grow (LZ_FAULT_SCRATCH):
 * the step fails with a message that says memory ran out, on every result
 * and on lz_wait, without a crash, and the same step run again gives the
 * unfaulted gradients bit for bit. Each scratch growth of two steps that
 * run the kernels that use one (im2col columns, depthwise weight gradients,
 * batch norm's masked rows; the gathered columns of a convolution over
 * small planes) fails in turn. */
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "base/fault.h"

enum { N_GRADS = 4 };

enum { MIXED, GATHERED };

typedef struct net {
    int kind;
    lz_tensor *ps[N_GRADS];   /* what gets a gradient */
    lz_tensor *x;
} net;

/* MIXED: 3 input channels (lazyc's im2col kernels), 12 channels (plain
   layouts: not a multiple of the block), a 5x5 depthwise convolution
   (lazyc's depthwise weight gradient), a batch norm with a ReLU folded in.
   GATHERED: 24 output channels over 3x3 planes (every image's columns side
   by side), with an input gradient too. */
static void net_init(net *m, int kind)
{
    m->kind = kind;
    if (kind == MIXED) {
        m->x = lz_test_rand(1, -1, 1, 4, (int64_t[]){4, 3, 20, 20});
        m->ps[0] = lz_test_rand(2, -0.3f, 0.3f, 4, (int64_t[]){12, 3, 3, 3});
        m->ps[1] = lz_test_rand(3, -0.3f, 0.3f, 4, (int64_t[]){12, 1, 5, 5});
        m->ps[2] = lz_test_rand(4, 0.5f, 1.5f, 1, (int64_t[]){12});
        m->ps[3] = lz_test_rand(5, -0.5f, 0.5f, 1, (int64_t[]){12});
    } else {
        m->x = lz_test_rand(6, -1, 1, 4, (int64_t[]){2, 12, 3, 3});
        m->ps[0] = lz_test_rand(7, -0.3f, 0.3f, 4, (int64_t[]){24, 12, 3, 3});
        m->ps[1] = lz_test_rand(8, -1, 1, 4, (int64_t[]){2, 12, 3, 3});
        m->ps[2] = lz_test_rand(9, -0.3f, 0.3f, 4, (int64_t[]){24, 24, 3, 3});
        m->ps[3] = lz_test_rand(10, -1, 1, 1, (int64_t[]){24});
    }
    for (int i = 0; i < N_GRADS; i++) lz_requires_grad(m->ps[i], 1);
}

static void net_free(net *m)
{
    lz_free(m->x);
    for (int i = 0; i < N_GRADS; i++) lz_free(m->ps[i]);
}

static lz_tensor *forward(net *m)
{
    lz_tensor **p = m->ps;
    if (m->kind == GATHERED) {
        lz_conv2d_opts same = {.padding = {1, 1}};
        lz_tensor *h = lz_conv2d(lz_add(m->x, p[1]), p[0], NULL, same);
        return lz_conv2d(lz_relu(h), p[2], p[3], same);
    }
    lz_tensor *h = lz_conv2d(m->x, p[0], NULL, (lz_conv2d_opts){.padding = {1, 1}});
    h = lz_conv2d(h, p[1], NULL, (lz_conv2d_opts){.padding = {2, 2}, .groups = 12});
    return lz_relu(lz_batch_norm(h, p[2], p[3], NULL, NULL, 1, 0.1f, 1e-5f));
}

static size_t grads_bytes(net *m)
{
    size_t n = 0;
    for (int i = 0; i < N_GRADS; i++) n += (size_t)lz_numel(m->ps[i]);
    return sizeof(float) * n;
}

/* One forward and backward; the gradients, or NULL (and the step's error
   left in lz_last_error) when the step failed. */
static float *grads_of(net *m, int *failed)
{
    lz_tensor **ps = m->ps;
    for (int i = 0; i < N_GRADS; i++) lz_zero_grad(ps[i]);
    lz_scope_begin();
    lz_tensor *h = forward(m);
    CHECK(lz_backward(lz_sum(lz_mul(h, h))) == 0);
    lz_mark_step();
    lz_scope_end();
    *failed = lz_wait() != 0;
    size_t at = 0;
    float *all = malloc(grads_bytes(m));
    CHECK(all != NULL);
    for (int i = 0; i < N_GRADS && all; i++) {
        size_t k = (size_t)lz_numel(ps[i]);
        if (lz_to_host(lz_grad(ps[i]), all + at, sizeof(float) * k) != 0) {
            free(all);
            return NULL;
        }
        at += k;
    }
    return all;
}

/* Fails each scratch growth of the step in turn; how many there were. */
static int sweep(int kind, const char *must_say)
{
    net m;
    net_init(&m, kind);
    int failed = 0, said = 0;
    float *ref = grads_of(&m, &failed);
    CHECK(ref && !failed);
    const size_t bytes = grads_bytes(&m);
    int swept = 0;
    for (long n = 1; n <= 64; n++) {
        /* every scratch buffer freed: each growth of the step counts again */
        net_free(&m);
        lz_shutdown();
        net_init(&m, kind);
        lz_fault_reset();
        lz_fault_set(LZ_FAULT_SCRATCH, n);
        lz_clear_error();
        float *got = grads_of(&m, &failed);
        const long fired = lz_fault_fired(LZ_FAULT_SCRATCH);
        lz_fault_reset();
        if (!fired) {   /* past the step's last growth: it ran as the reference */
            CHECK(got && !failed && memcmp(got, ref, bytes) == 0);
            free(got);
            break;
        }
        swept++;
        /* the step failed, said why, and left no result */
        CHECK(failed);
        CHECK(got == NULL);
        const char *err = lz_last_error();
        CHECK(err && strstr(err, "out of memory"));
        if (err) fprintf(stderr, "scratch growth %ld: %s\n", n, err);
        said += err && strstr(err, must_say) != NULL;
        free(got);
        lz_clear_error();
        /* the same step again, no fault: the unfaulted gradients */
        got = grads_of(&m, &failed);
        CHECK(got && !failed && memcmp(got, ref, bytes) == 0);
        free(got);
    }
    fprintf(stderr, "%d scratch growths failed in turn\n", swept);
    CHECK(said > 0);
    free(ref);
    net_free(&m);
    return swept;
}

int main(void)
{
    setenv("LZ_DNNL_CONV", "0", 1);   /* lazyc's own convolution kernels, which use the scratch */
    /* the columns, the depthwise copies and the batch-norm rows */
    CHECK(sweep(MIXED, "depthwise") >= 5);
    /* the gathered columns and outputs */
    CHECK(sweep(GATHERED, "gathered columns") >= 1);
    return lz_test_done();
}
