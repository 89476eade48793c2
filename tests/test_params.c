/* Named parameter sets: order, unique names, ownership across scopes,
 * trainable flags and counts. */
#include <math.h>
#include <string.h>

#include "engine/tensor.h"
#include "testlib.h"

static void test_order_and_lookup(void)
{
    lz_params *p = lz_params_new();
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    lz_tensor *w = lz_params_add(p, "fc.weight", lz_zeros(LZ_F32, 2, s23), 1);
    lz_tensor *b = lz_params_add(p, "fc.bias", lz_zeros(LZ_F32, 1, s4), 1);
    lz_tensor *rm = lz_params_add(p, "bn.running_mean", lz_zeros(LZ_F32, 1, s4), 0);
    lz_tensor *nb = lz_params_add(p, "bn.num_batches_tracked", lz_zeros(LZ_I64, 0, NULL), 0);
    CHECK(w && b && rm && nb);
    CHECK_EQ_I(lz_params_count(p), 4);
    CHECK(strcmp(lz_params_name(p, 0), "fc.weight") == 0);
    CHECK(strcmp(lz_params_name(p, 3), "bn.num_batches_tracked") == 0);
    CHECK(lz_params_at(p, 1) == b);
    CHECK(lz_params_find(p, "bn.running_mean") == rm);
    CHECK(lz_params_find(p, "nope") == NULL);
    CHECK_EQ_I(lz_params_trainable(p, 0), 1);
    CHECK_EQ_I(lz_params_trainable(p, 2), 0);
    CHECK_EQ_I(w->requires_grad, 1);
    CHECK_EQ_I(rm->requires_grad, 0);
    CHECK_EQ_I(lz_params_numel(p, 1), 10);
    CHECK_EQ_I(lz_params_numel(p, 0), 15);

    lz_tensor *list[4] = {0};
    CHECK_EQ_I(lz_params_trainable_list(p, list, 4), 2);
    CHECK(list[0] == w && list[1] == b && list[2] == NULL);
    /* a short array gets what fits; the count is still the total */
    lz_tensor *one[1];
    CHECK_EQ_I(lz_params_trainable_list(p, one, 1), 2);
    CHECK(one[0] == w);
    CHECK_EQ_I(lz_params_trainable_list(p, NULL, 0), 2);

    CHECK(lz_params_at(p, 4) == NULL);
    CHECK(lz_params_name(p, -1) == NULL);
    CHECK_EQ_I(lz_params_trainable(p, 9), 0);
    lz_clear_error();
    lz_params_free(p);
}

static void test_errors(void)
{
    lz_params *p = lz_params_new();
    int64_t s2[1] = {2};
    CHECK(lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 1) != NULL);
    lz_clear_error();
    CHECK(lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 0) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "duplicate") && strstr(lz_last_error(), "'a'"));
    CHECK_EQ_I(lz_params_count(p), 1);

    lz_clear_error();
    CHECK(lz_params_add(p, "b", NULL, 1) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "'b'"));

    /* a failed op chain keeps its own message */
    lz_clear_error();
    int64_t s3[1] = {3};
    lz_tensor *x = lz_zeros(LZ_F32, 1, s2), *y = lz_zeros(LZ_F32, 1, s3);
    CHECK(lz_params_add(p, "c", lz_add(x, y), 1) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_add"));
    lz_free(x);
    lz_free(y);

    lz_clear_error();
    CHECK(lz_params_add(p, "steps", lz_zeros(LZ_I64, 0, NULL), 1) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "'steps'") && strstr(lz_last_error(), "f32"));

    lz_clear_error();
    CHECK(lz_params_add(p, "", lz_zeros(LZ_F32, 1, s2), 0) == NULL);
    CHECK(lz_params_add(NULL, "d", lz_zeros(LZ_F32, 1, s2), 0) == NULL);
    CHECK_EQ_I(lz_params_count(p), 1);
    CHECK_EQ_I(lz_params_count(NULL), 0);
    CHECK_EQ_I(lz_params_numel(NULL, 0), 0);
    lz_clear_error();
    lz_params_free(p);
    lz_params_free(NULL);
}

/* A model built inside a scope keeps its parameters after the scope ends:
   the set, not the scope, owns them. Other handles of the scope still go. */
static void test_scope_ownership(void)
{
    lz_params *p = lz_params_new();
    float v[3] = {1, 2, 3};
    int64_t s3[1] = {3};
    lz_scope_begin();
    lz_tensor *w = lz_params_add(p, "w", lz_from_host(v, LZ_F32, 1, s3), 1);
    lz_tensor *tmp = lz_mul(w, w);
    int refs_before = tmp->refs;
    lz_scope_end();
    CHECK(refs_before >= 1);
    CHECK_EQ_I(w->refs, 1);
    CHECK_EQ_I(w->scope_level, 0);
    float out[3] = {0};
    CHECK(lz_to_host(lz_params_find(p, "w"), out, sizeof out) == 0);
    CHECK_NEAR(out[2], 3.0, 0);

    /* nested scopes: an outer scope must not take it either */
    lz_scope_begin();
    lz_scope_begin();
    lz_tensor *u = lz_params_add(p, "u", lz_from_host(v, LZ_F32, 1, s3), 0);
    lz_scope_end();
    lz_scope_end();
    CHECK_EQ_I(u->refs, 1);
    CHECK(lz_to_host(u, out, sizeof out) == 0);
    CHECK_NEAR(out[0], 1.0, 0);
    lz_params_free(p);
}

/* Gradients reach the set's trainable tensors through lz_backward. */
static void test_grad(void)
{
    lz_params *p = lz_params_new();
    float v[2] = {3, -4};
    int64_t s2[1] = {2};
    lz_tensor *w = lz_params_add(p, "w", lz_from_host(v, LZ_F32, 1, s2), 1);
    lz_scope_begin();
    lz_tensor *loss = lz_sum(lz_mul(w, w));
    CHECK(lz_backward(loss) == 0);
    lz_scope_end();
    float g[2] = {0};
    CHECK(lz_grad(w) && lz_to_host(lz_grad(w), g, sizeof g) == 0);
    CHECK_NEAR(g[0], 6.0, 0);
    CHECK_NEAR(g[1], -8.0, 0);
    lz_params_free(p);
}

/* The optimizers hold their own references (lazyc.h): the set freed
   first (no other handle on w), a step still runs and updates w, which
   the optimizers free. */
static void test_optimizer_outlives_set(void)
{
    lz_params *p = lz_params_new();
    int64_t s2[1] = {2};
    lz_tensor *w = lz_params_add(p, "w", lz_from_host((const float[]){3, -4}, LZ_F32, 1, s2), 1);
    lz_sgd *sgd = lz_sgd_new(&w, 1, (lz_sgd_opts){.lr = 0.5f, .momentum = 0.9f});
    lz_adamw *adam = lz_adamw_new(&w, 1, (lz_adamw_opts){.lr = 0.1f});
    lz_params *state = lz_params_new();
    CHECK(lz_sgd_state(sgd, state, "sgd") == 0);   /* momentum: the first step's d_p */
    lz_scope_begin();
    CHECK(lz_backward(lz_sum(lz_mul(w, w))) == 0);   /* grad 2w = (6, -8) */
    lz_scope_end();
    lz_params_free(p);
    CHECK(lz_sgd_step(sgd) == 0);
    lz_mark_step();
    float v[2] = {0, 0};
    lz_tensor *buf = lz_params_find(state, "sgd.momentum_buffer.0");
    CHECK(buf && lz_to_host(buf, v, sizeof v) == 0);
    CHECK(v[0] == 6.0f && v[1] == -8.0f);
    CHECK(lz_adamw_step(adam) == 0);
    lz_mark_step();
    CHECK(lz_wait() == 0);
    lz_sgd_free(sgd);
    lz_adamw_free(adam);
    lz_params_free(state);
}

int main(void)
{
    test_order_and_lookup();
    test_errors();
    test_scope_ownership();
    test_grad();
    test_optimizer_outlives_set();
    return lz_test_done();
}
