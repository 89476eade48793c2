/* `lazyc demo`: trains a 2 -> 64 -> 64 -> 4 MLP on a synthetic 4-arm spiral
 * in lazy mode, full batch, SGD with momentum. Prints the loss every 25
 * steps as a bar, the training accuracy, and the metrics report of the
 * training loop, which shows one graph and one execution per step and a
 * single compile. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lazyc.h"
#include "lazyc_optim.h"

enum { CLASSES = 4, PER_CLASS = 128, N = CLASSES * PER_CLASS, HIDDEN = 64, EVERY = 25,
       BAR = 50 };

/* xorshift64*: the same data and weights on every machine and run. */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double rng_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
}
static double rng_normal(void)
{
    double u = rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* Arm c of the spiral: radius grows from 0 to 1 while the angle turns by
   4 radians, offset by c * 2pi / CLASSES, with noise on the angle. */
static void make_spiral(float *x, int64_t *y)
{
    for (int c = 0; c < CLASSES; c++)
        for (int i = 0; i < PER_CLASS; i++) {
            double r = (double)i / (PER_CLASS - 1);
            double t = c * 6.283185307179586 / CLASSES + 4.0 * r + 0.2 * rng_normal();
            int k = c * PER_CLASS + i;
            x[2 * k] = (float)(r * sin(t));
            x[2 * k + 1] = (float)(r * cos(t));
            y[k] = c;
        }
}

/* Like torch.nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static lz_tensor *uniform_param(int ndim, const int64_t *shape, int64_t fan_in)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v)
        return NULL;
    double bound = 1.0 / sqrt((double)fan_in);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((2.0 * rng_uniform() - 1.0) * bound);
    lz_tensor *t = lz_from_host(v, LZ_F32, ndim, shape);
    free(v);
    if (t)
        lz_requires_grad(t, 1);
    return t;
}

typedef struct mlp {
    lz_tensor *p[6];   /* w1 [2,H], b1 [H], w2 [H,H], b2 [H], w3 [H,C], b3 [C] */
} mlp;

static int mlp_init(mlp *m)
{
    const int64_t dims[4] = { 2, HIDDEN, HIDDEN, CLASSES };
    for (int l = 0; l < 3; l++) {
        int64_t ws[2] = { dims[l], dims[l + 1] }, bs[1] = { dims[l + 1] };
        m->p[2 * l] = uniform_param(2, ws, dims[l]);
        m->p[2 * l + 1] = uniform_param(1, bs, dims[l]);
        if (!m->p[2 * l] || !m->p[2 * l + 1])
            return -1;
    }
    return 0;
}

static lz_tensor *mlp_forward(const mlp *m, lz_tensor *x)
{
    lz_tensor *h = lz_relu(lz_add(lz_matmul(x, m->p[0]), m->p[1]));
    h = lz_relu(lz_add(lz_matmul(h, m->p[2]), m->p[3]));
    return lz_add(lz_matmul(h, m->p[4]), m->p[5]);
}

static void print_loss(int step, float loss, float scale)
{
    int len = (int)lrintf(loss / scale * BAR);
    if (len < 0)
        len = 0;
    if (len > BAR)
        len = BAR;
    char bar[BAR + 1];
    memset(bar, '#', (size_t)len);
    bar[len] = '\0';
    printf("step %5d  loss %.4f  %s\n", step, (double)loss, bar);
}

/* Training accuracy from one forward pass, without autograd records. */
static int accuracy(const mlp *m, lz_tensor *x, const int64_t *labels, double *acc)
{
    static float logits[N * CLASSES];
    lz_no_grad_begin();
    lz_scope_begin();
    lz_tensor *out = mlp_forward(m, x);
    int rc = out ? lz_to_host(out, logits, sizeof logits) : -1;
    lz_scope_end();
    lz_no_grad_end();
    if (rc != 0)
        return -1;
    int right = 0;
    for (int i = 0; i < N; i++) {
        int best = 0;
        for (int c = 1; c < CLASSES; c++)
            if (logits[i * CLASSES + c] > logits[i * CLASSES + best])
                best = c;
        right += best == labels[i];
    }
    *acc = (double)right / N;
    return 0;
}

static void demo_usage(FILE *f)
{
    fprintf(f, "usage: lazyc demo [--steps N] [--lr LR]\n\n"
               "Trains a 2-64-64-%d MLP on a %d-point spiral (full batch, SGD with\n"
               "momentum 0.9) in lazy mode, printing the loss every %d steps and the\n"
               "metrics report of the training loop.\n\n"
               "  --steps N   training steps (default 300)\n"
               "  --lr LR     learning rate (default 0.1)\n",
            CLASSES, N, EVERY);
}

static int fail(const char *what)
{
    fprintf(stderr, "lazyc demo: %s: %s\n", what, lz_last_error() ? lz_last_error() : "unknown error");
    return 1;
}

int lz_cmd_demo(int argc, char **argv)
{
    long steps = 300;
    double lr = 0.1;
    for (int i = 1; i < argc; i++) {
        if (lz_cli_is_help(argv[i])) {
            demo_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--steps") == 0) {
            if (lz_cli_int("--steps", i + 1 < argc ? argv[++i] : NULL, 1, 1000000, &steps) != 0)
                return LZ_CLI_USAGE_ERROR;
        } else if (strcmp(argv[i], "--lr") == 0) {
            if (lz_cli_float("--lr", i + 1 < argc ? argv[++i] : NULL, 0.0, 10.0, &lr) != 0)
                return LZ_CLI_USAGE_ERROR;
        } else {
            fprintf(stderr, "lazyc demo: unknown option '%s'\n\n", argv[i]);
            demo_usage(stderr);
            return LZ_CLI_USAGE_ERROR;
        }
    }

    static float xs[N * 2];
    static int64_t ys[N];
    make_spiral(xs, ys);
    int64_t sx[2] = { N, 2 }, sy[1] = { N };
    lz_tensor *x = lz_from_host(xs, LZ_F32, 2, sx);
    lz_tensor *y = lz_from_host(ys, LZ_I64, 1, sy);
    mlp m = { { 0 } };
    if (!x || !y || mlp_init(&m) != 0)
        return fail("making the data and the model");
    lz_optimizer *opt = lz_optimizer_sgd(m.p, 6, (lz_sgd_opts){ .lr = (float)lr, .momentum = 0.9f });
    if (!opt)
        return fail("making the optimizer");

    printf("lazyc demo: MLP 2-%d-%d-%d, %d points, %ld steps, SGD lr %g momentum 0.9\n\n",
           HIDDEN, HIDDEN, CLASSES, N, steps, lr);
    lz_metrics_reset();
    float scale = 0.0f;
    int rc = 0;
    for (long step = 1; step <= steps && rc == 0; step++) {
        lz_scope_begin();
        lz_tensor *loss = lz_keep(lz_cross_entropy(mlp_forward(&m, x), y));
        lz_optimizer_zero_grad(opt);
        rc = loss ? lz_backward(loss) : -1;
        if (rc == 0)
            rc = lz_optimizer_step(opt);
        /* Intermediates go before the barrier so they are not graph outputs. */
        lz_scope_end();
        lz_mark_step();
        if (rc == 0 && (step == 1 || step % EVERY == 0 || step == steps)) {
            float l = lz_item(loss);   /* waits for this step's execution only */
            if (isnan(l) && lz_last_error())
                rc = -1;
            else {
                if (scale == 0.0f)
                    scale = l > 0.0f ? l : 1.0f;
                print_loss((int)step, l, scale);
            }
        }
        lz_free(loss);
    }
    if (rc != 0 || lz_wait() != 0)
        return fail("training");
    char *report = lz_metrics_report();

    double acc = 0.0;
    if (accuracy(&m, x, ys, &acc) != 0) {
        free(report);
        return fail("evaluating");
    }
    printf("\ntraining accuracy %.1f%%\n\nmetrics of the training loop:\n%s", 100.0 * acc,
           report ? report : "(no report)\n");
    free(report);

    lz_optimizer_free(opt);
    for (int i = 0; i < 6; i++)
        lz_free(m.p[i]);
    lz_free(x);
    lz_free(y);
    return 0;
}
