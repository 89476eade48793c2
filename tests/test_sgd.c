/* SGD: values against updates worked out by hand from torch.optim.SGD's
 * rules, and the counters of a lazy MLP training loop (issue 2): one graph
 * and one execution per step, no compile after the first step, a new
 * learning rate every step without a compile, and a read of the loss that
 * costs one wait and no execution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* loss = sum(p * p), so grad = 2 p: a gradient that follows the parameter,
   which makes the order of weight decay, momentum and the update visible. */
static int train_square(lz_tensor *p, lz_sgd *opt)
{
    lz_scope_begin();
    lz_tensor *loss = lz_sum(lz_mul(p, p));
    lz_sgd_zero_grad(opt);
    int rc = loss ? lz_backward(loss) : -1;
    if (rc == 0)
        rc = lz_sgd_step(opt);
    lz_scope_end();
    lz_mark_step();
    return rc;
}

/* Runs `steps` steps from p = p0 (one element) and stores p after each. */
static void run_scalar(lz_sgd_opts o, float p0, int steps, float *after)
{
    int64_t shape[1] = { 1 };
    lz_tensor *p = lz_from_host(&p0, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_sgd *opt = lz_sgd_new(&p, 1, o);
    CHECK(opt != NULL);
    for (int s = 0; s < steps; s++) {
        CHECK_EQ_I(train_square(p, opt), 0);
        after[s] = lz_item(p);
    }
    lz_sgd_free(opt);
    lz_free(p);
}

static void test_momentum(void)
{
    /* lr 0.1, momentum 0.9, no weight decay, p0 = 1, grad = 2p:
       step 1: g = 2,    buf = g = 2 (torch clones the first grad)
               p = 1 - 0.1 * 2 = 0.8
       step 2: g = 1.6,  buf = 0.9 * 2 + 1.6 = 3.4
               p = 0.8 - 0.34 = 0.46
       step 3: g = 0.92, buf = 0.9 * 3.4 + 0.92 = 3.98
               p = 0.46 - 0.398 = 0.062 */
    float after[3];
    run_scalar((lz_sgd_opts){ .lr = 0.1f, .momentum = 0.9f }, 1.0f, 3, after);
    CHECK_NEAR(after[0], 0.8, 1e-6);
    CHECK_NEAR(after[1], 0.46, 1e-6);
    CHECK_NEAR(after[2], 0.062, 1e-6);
}

static void test_dampening_weight_decay(void)
{
    /* lr 0.1, momentum 0.9, dampening 0.5, weight decay 0.1, p0 = 1:
       step 1: g = 2, d_p = 2 + 0.1 * 1 = 2.1
               buf = d_p = 2.1 (no dampening on the first step)
               p = 1 - 0.21 = 0.79
       step 2: g = 1.58, d_p = 1.58 + 0.079 = 1.659
               buf = 0.9 * 2.1 + 0.5 * 1.659 = 1.89 + 0.8295 = 2.7195
               p = 0.79 - 0.27195 = 0.51805 */
    float after[2];
    run_scalar((lz_sgd_opts){ .lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f,
                              .weight_decay = 0.1f }, 1.0f, 2, after);
    CHECK_NEAR(after[0], 0.79, 1e-6);
    CHECK_NEAR(after[1], 0.51805, 1e-6);
}

static void test_nesterov(void)
{
    /* lr 0.1, momentum 0.9, nesterov, weight decay 0.1, p0 = 1:
       step 1: g = 2, d_p = 2.1, buf = 2.1
               d_p = 2.1 + 0.9 * 2.1 = 3.99,  p = 1 - 0.399 = 0.601
       step 2: g = 1.202, d_p = 1.202 + 0.0601 = 1.2621
               buf = 0.9 * 2.1 + 1.2621 = 3.1521
               d_p = 1.2621 + 0.9 * 3.1521 = 4.09899
               p = 0.601 - 0.409899 = 0.191101 */
    float after[2];
    run_scalar((lz_sgd_opts){ .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f,
                              .nesterov = 1 }, 1.0f, 2, after);
    CHECK_NEAR(after[0], 0.601, 1e-6);
    CHECK_NEAR(after[1], 0.191101, 1e-6);
}

static void test_plain_set_lr_and_skip(void)
{
    /* No momentum. p = [1, -2], grad = 2p.
       step 1, lr 0.25: p = p - 0.5 p = [0.5, -1]
       step 2, lr 0.1:  p = p - 0.2 p = [0.4, -0.8]
       q takes no part in the loss: it has no grad and torch leaves it alone. */
    int64_t shape[1] = { 2 };
    float p0[2] = { 1.0f, -2.0f }, q0[2] = { 3.0f, 4.0f };
    lz_tensor *p = lz_from_host(p0, LZ_F32, 1, shape);
    lz_tensor *q = lz_from_host(q0, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_requires_grad(q, 1);
    lz_tensor *params[2] = { p, q };
    lz_sgd *opt = lz_sgd_new(params, 2, (lz_sgd_opts){ .lr = 0.25f });
    CHECK(opt != NULL);
    float v[2];
    CHECK_EQ_I(train_square(p, opt), 0);
    CHECK_EQ_I(lz_to_host(p, v, sizeof v), 0);
    CHECK_NEAR(v[0], 0.5, 1e-6);
    CHECK_NEAR(v[1], -1.0, 1e-6);
    lz_sgd_set_lr(opt, 0.1f);
    CHECK_EQ_I(train_square(p, opt), 0);
    CHECK_EQ_I(lz_to_host(p, v, sizeof v), 0);
    CHECK_NEAR(v[0], 0.4, 1e-6);
    CHECK_NEAR(v[1], -0.8, 1e-6);
    CHECK(lz_grad(q) == NULL);
    CHECK_EQ_I(lz_to_host(q, v, sizeof v), 0);
    CHECK_NEAR(v[0], 3.0, 0);
    CHECK_NEAR(v[1], 4.0, 0);
    /* zero_grad drops the grads, so the next backward starts from zero. */
    CHECK(lz_grad(p) != NULL);
    lz_sgd_zero_grad(opt);
    CHECK(lz_grad(p) == NULL);
    lz_sgd_free(opt);
    lz_free(p);
    lz_free(q);
}

static void test_bad_options(void)
{
    int64_t shape[1] = { 1 };
    float one = 1.0f;
    lz_tensor *p = lz_from_host(&one, LZ_F32, 1, shape);
    lz_requires_grad(p, 1);
    lz_clear_error();
    CHECK(lz_sgd_new(&p, 1, (lz_sgd_opts){ .lr = -1.0f }) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "learning rate"));
    lz_clear_error();
    CHECK(lz_sgd_new(&p, 1, (lz_sgd_opts){ .lr = 0.1f, .momentum = 0.9f,
                                           .dampening = 0.1f, .nesterov = 1 }) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "nesterov"));
    lz_clear_error();
    CHECK(lz_sgd_new(&p, 1, (lz_sgd_opts){ .lr = 0.1f, .nesterov = 1 }) == NULL);
    lz_clear_error();
    lz_free(p);
}

/* ---- counters of a lazy MLP training loop ----------------------------- */

enum { B = 32, IN = 16, HID = 32, OUT = 4, STEPS = 30 };

static void test_mlp_counters(void)
{
    int64_t sx[2] = { B, IN }, s1[2] = { IN, HID }, sb1[1] = { HID };
    int64_t s2[2] = { HID, OUT }, sb2[1] = { OUT }, sy[1] = { B };
    lz_tensor *x = lz_test_rand(1, -1.0f, 1.0f, 2, sx);
    lz_tensor *w1 = lz_test_rand(2, -0.25f, 0.25f, 2, s1);
    lz_tensor *b1 = lz_test_rand(3, -0.25f, 0.25f, 1, sb1);
    lz_tensor *w2 = lz_test_rand(4, -0.18f, 0.18f, 2, s2);
    lz_tensor *b2 = lz_test_rand(5, -0.18f, 0.18f, 1, sb2);
    int64_t labels[B];
    for (int i = 0; i < B; i++)
        labels[i] = i % OUT;
    lz_tensor *y = lz_from_host(labels, LZ_I64, 1, sy);
    lz_tensor *params[4] = { w1, b1, w2, b2 };
    for (int i = 0; i < 4; i++)
        lz_requires_grad(params[i], 1);
    lz_sgd *opt = lz_sgd_new(params, 4, (lz_sgd_opts){ .lr = 0.1f, .momentum = 0.9f,
                                                      .weight_decay = 1e-4f });
    CHECK(opt != NULL);
    CHECK_EQ_I(lz_wait(), 0);
    lz_metrics_reset();

    float first_loss = NAN, last_loss = NAN;
    for (int step = 1; step <= STEPS; step++) {
        lz_metrics m0 = lz_metrics_get();
        /* A schedule that changes every step: new data, same graph. */
        lz_sgd_set_lr(opt, 0.1f / (1.0f + 0.05f * (float)step));

        lz_scope_begin();
        lz_tensor *h = lz_relu(lz_add(lz_matmul(x, w1), b1));
        lz_tensor *loss = lz_keep(lz_cross_entropy(lz_add(lz_matmul(h, w2), b2), y));
        lz_sgd_zero_grad(opt);
        CHECK_EQ_I(lz_backward(loss), 0);
        CHECK_EQ_I(lz_sgd_step(opt), 0);
        /* The forward's intermediates are dropped before the barrier, so
           they are not outputs of the graph. */
        lz_scope_end();
        lz_mark_step();

        int reads = step % 10 == 0 || step == 1;
        if (reads) {
            /* The loss is data (on a placeholder) after the barrier: reading
               it waits for that execution and runs nothing. */
            float l = lz_item(loss);
            if (step == 1)
                first_loss = l;
            last_loss = l;
        }
        lz_free(loss);

        lz_metrics m1 = lz_metrics_get();
        CHECK_EQ_I(m1.mark_steps - m0.mark_steps, 1);
        CHECK_EQ_I(m1.graphs - m0.graphs, 1);
        CHECK_EQ_I(m1.executions - m0.executions, 1);
        CHECK_EQ_I(m1.host_waits - m0.host_waits, reads ? 1 : 0);
        /* Step 1 compiles; step 2 could differ from it because torch's first
           momentum step copies the grad into a fresh buffer, but lz_sgd
           writes that step as buf = 0 * buf + d_p with the 0 (and the
           dampening's 1) as data, so every step records the same graph and
           step 2 on are cache hits. */
        if (step == 1) {
            CHECK_EQ_I(m1.compiles - m0.compiles, 1);
        } else {
            CHECK_EQ_I(m1.compiles - m0.compiles, 0);
            CHECK_EQ_I(m1.cache_hits - m0.cache_hits, 1);
        }
    }
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(lz_wait(), 0);
    CHECK_EQ_I(m.compiles, 1);
    CHECK_EQ_I(m.executions, STEPS);
    CHECK_EQ_I(m.host_waits, 1 + STEPS / 10);
    CHECK(isfinite(first_loss) && isfinite(last_loss));
    CHECK(last_loss < first_loss);

    lz_sgd_free(opt);
    for (int i = 0; i < 4; i++)
        lz_free(params[i]);
    lz_free(x);
    lz_free(y);
}

int main(void)
{
    test_momentum();
    test_dampening_weight_decay();
    test_nesterov();
    test_plain_set_lr_and_skip();
    test_bad_options();
    test_mlp_counters();
    return lz_test_done();
}
