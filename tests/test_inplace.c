/* The in-place tail (src/compile/inplace.c), on compiled programs: an
 * update whose result could take its input's memory moves behind every
 * other step, and lz_program_may_overwrite allows a pair only when no step
 * reads the input after the element it writes. Only fused element-wise
 * steps may write over an input.
 *
 * Then lazy training steps (engine/step.c): a full step writes the new
 * parameter and momentum over the old buffers when nothing can read them
 * afterwards (executions in flight run first), and never when something
 * can: a tensor still holding the old value, a partial sync. Values are checked
 * bitwise against the same run with fusion off (no fused steps, so no
 * donation). Replays are tested in test_capture_memory, failed steps in
 * test_fault. */
#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "compile/executable.h"
#include "engine/cache.h"
#include "engine/tensor.h"
#include "ir/graph.h"
#include "testlib.h"

typedef struct compiled {
    lz_graph g;
    lz_executable *exe;
} compiled;

static compiled compile_roots(lz_tensor *const *roots, int n)
{
    lz_node *nodes[8];
    for (int i = 0; i < n; i++) nodes[i] = roots[i]->node;
    compiled c;
    lz_graph_cut(&c.g, nodes, n);
    c.exe = lz_compile(&c.g);
    CHECK(c.exe != NULL);
    return c;
}

static void release(compiled *c)
{
    lz_executable_unref(c->exe);
    lz_graph_release(&c->g);
}

static int out_slot(const compiled *c, const lz_tensor *t)
{
    for (int o = 0; o < c->g.n_outputs; o++)
        if (c->g.outputs[o] == t->node) return o;
    return -1;
}

static int in_slot(const compiled *c, const lz_tensor *t)
{
    for (int k = 0; k < c->g.n_inputs; k++)
        if (c->g.inputs[k] == t->node) return k;
    return -1;
}

static int may(const compiled *c, const lz_tensor *out, const lz_tensor *in)
{
    int o = out_slot(c, out), k = in_slot(c, in);
    CHECK(o >= 0 && k >= 0);
    return lz_program_may_overwrite(&c->exe->prog, o, k);
}

static void free_all(lz_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) lz_free(ts[i]);
}

/* p' = p - lr * g, with a matmul reading p recorded after it: the update
   moves behind the matmul and may write over p (or over g); the matmul's
   result may not write over anything. */
static void check_update_sinks(void)
{
    const int64_t ps[2] = {4, 3}, xs[2] = {3, 2};
    lz_tensor *p = lz_test_rand(1, -1, 1, 2, ps), *g = lz_test_rand(2, -1, 1, 2, ps);
    lz_tensor *x = lz_test_rand(3, -1, 1, 2, xs), *lr = lz_scalar(0.1f);
    lz_tensor *step = lz_mul(lr, g), *upd = lz_sub(p, step), *y = lz_matmul(p, x);
    lz_tensor *roots[2] = {upd, y};
    compiled c = compile_roots(roots, 2);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->n_instrs, 2);
    CHECK_EQ_I(prog->commit_from, 1);
    CHECK_EQ_I(prog->instrs[1].op, LZ_OP_FUSED_ELEMENTWISE);
    CHECK_EQ_I(prog->instrs[0].op, LZ_OP_MATMUL);
    CHECK(may(&c, upd, p));
    CHECK(may(&c, upd, g));
    CHECK(!may(&c, upd, x));      /* another size */
    CHECK(!may(&c, y, x));        /* not in the tail */
    release(&c);
    lz_tensor *all[7] = {p, g, x, lr, step, upd, y};
    free_all(all, 7);
}

/* An update whose result a matmul reads in the same graph stays where it
   is: the tail holds only kernels that cannot fail, so nothing may write
   over an input. */
static void check_fallible_reader_keeps_order(void)
{
    const int64_t ps[2] = {3, 3};
    lz_tensor *p = lz_test_rand(4, -1, 1, 2, ps), *g = lz_test_rand(5, -1, 1, 2, ps);
    lz_tensor *lr = lz_scalar(0.1f);
    lz_tensor *step = lz_mul(lr, g), *upd = lz_sub(p, step), *z = lz_matmul(upd, g);
    lz_tensor *roots[2] = {upd, z};
    compiled c = compile_roots(roots, 2);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->commit_from, prog->n_instrs);
    CHECK(!may(&c, upd, p));
    release(&c);
    lz_tensor *all[6] = {p, g, lr, step, upd, z};
    free_all(all, 6);
}

/* One fused step writes a = p * 2, reads p again for b = a + p, then
   writes c = b + r: b and c may take p's memory (written at or after p's
   last read), a may not (b would read a where p was); an operand of
   another size never may. */
static void check_reads_after_the_write(void)
{
    const int64_t ps[2] = {4, 3}, row[2] = {1, 3};
    lz_tensor *p = lz_test_rand(6, -1, 1, 2, ps), *r = lz_test_rand(7, -1, 1, 2, row);
    lz_tensor *two = lz_scalar(2.0f);
    lz_tensor *a = lz_mul(p, two), *b = lz_add(a, p), *c2 = lz_add(b, r);
    lz_tensor *roots[3] = {a, b, c2};
    compiled c = compile_roots(roots, 3);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->n_instrs, 1);
    CHECK_EQ_I(prog->commit_from, 0);
    CHECK(!may(&c, a, p));
    CHECK(may(&c, b, p));
    CHECK(may(&c, c2, p));        /* written after both reads of p */
    CHECK(!may(&c, c2, r));       /* broadcast, another size */
    release(&c);
    lz_tensor *all[6] = {p, r, two, a, b, c2};
    free_all(all, 6);
}

enum { B = 8, IN = 6, OUT = 4 };

/* One linear layer trained by SGD with momentum, or by AdamW. */
typedef struct model {
    lz_tensor *w;
    lz_sgd *opt;
    lz_adamw *adam;
} model;

static void model_init_with(model *m, int adamw)
{
    m->w = lz_test_rand(21, -0.5f, 0.5f, 2, (int64_t[]){IN, OUT});
    lz_requires_grad(m->w, 1);
    m->opt = adamw ? NULL : lz_sgd_new(&m->w, 1, (lz_sgd_opts){.lr = 0.1f, .momentum = 0.9f});
    m->adam = adamw ? lz_adamw_new(&m->w, 1, (lz_adamw_opts){.lr = 0.01f, .beta1 = 0.9f,
                                   .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                                   .decoupled = 1})
                    : NULL;
}

static void model_init(model *m) { model_init_with(m, 0); }

static void model_free(model *m)
{
    lz_sgd_free(m->opt);
    lz_adamw_free(m->adam);
    lz_free(m->w);
}

static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    model *m = ctx;
    if (m->adam) lz_adamw_zero_grad(m->adam);
    else lz_sgd_zero_grad(m->opt);
    out[0] = lz_cross_entropy(lz_matmul(in[0], m->w), in[1]);
    if (!out[0] || lz_backward(out[0])) return -1;
    return m->adam ? lz_adamw_step(m->adam) : lz_sgd_step(m->opt);
}

static const lz_buffer *buf_of(const lz_tensor *t) { return t->node->buf; }

static int same_values(lz_tensor *a, lz_tensor *b)
{
    float *x = lz_test_read(a), *y = lz_test_read(b);
    int same = x && y && memcmp(x, y, sizeof(float) * (size_t)lz_numel(a)) == 0;
    free(x);
    free(y);
    return same;
}

/* Two equal models after the same first steps, run lazily. */
static void twins_after(model *a, model *b, int steps)
{
    model_init(a);
    model_init(b);
    for (int s = 0; s < steps; s++) {
        lz_test_lazy_step(train_step, a, s, B, IN, OUT);
        lz_test_lazy_step(train_step, b, s, B, IN, OUT);
    }
}

/* One lazy step of m, compiled afresh with fusion on or off (the cache
   would hand both the same executable). */
static int64_t step_with_fusion(model *m, int s, int fusion)
{
    lz_cache_clear();
    lz_fusion_set(fusion);
    lz_metrics_reset();
    lz_test_lazy_step(train_step, m, s, B, IN, OUT);
    return lz_metrics_get().in_place_writes;
}

/* Lazy steps that read their loss (so the previous step is done): from the
   second on the new parameter lands in the old one's buffer; with fusion
   off nothing may be overwritten. The values are the same bitwise. A new
   buffer is allocated while the old one is alive, so comparing the
   pointers tells whether the step wrote over the old one. */
static void check_lazy_steps_donate(void)
{
    model a, b;
    model_init(&a);
    model_init(&b);
    for (int s = 0; s < 2; s++) {
        step_with_fusion(&a, s, 1);
        step_with_fusion(&b, s, 0);
    }
    for (int s = 2; s < 5; s++) {
        const lz_buffer *wa = buf_of(a.w), *wb = buf_of(b.w);
        CHECK_EQ_I(step_with_fusion(&a, s, 1), 2);   /* the parameter and its momentum */
        CHECK_EQ_I(step_with_fusion(&b, s, 0), 0);
        CHECK(buf_of(a.w) == wa);
        CHECK(buf_of(b.w) != wb);
    }
    CHECK(same_values(a.w, b.w));
    lz_fusion_set(1);
    lz_cache_clear();   /* the tests below need fused executables */
    model_free(&a);
    model_free(&b);
}

/* A tensor that shares the parameter's old value (lz_assign made it point
   at the same data) keeps the step from writing over it: the held value is
   the old one. Steps queued behind one still running do write over it. */
static void check_held_value_not_overwritten(void)
{
    model a, b;
    twins_after(&a, &b, 2);
    lz_tensor *held = lz_zeros(LZ_F32, 2, (int64_t[]){IN, OUT});
    CHECK(lz_assign(held, a.w) == 0);
    float *then = lz_test_read(a.w);
    const lz_buffer *wa = buf_of(a.w);
    lz_metrics_reset();
    lz_test_lazy_step(train_step, &a, 2, B, IN, OUT);
    CHECK_EQ_I(lz_metrics_get().in_place_writes, 1);   /* the momentum only */
    lz_test_lazy_step(train_step, &b, 2, B, IN, OUT);
    CHECK(buf_of(a.w) != wa);
    CHECK(buf_of(held) == wa);
    float *now = lz_test_read(held);
    CHECK(then && now && memcmp(then, now, sizeof(float) * IN * OUT) == 0);
    CHECK(same_values(a.w, b.w));
    free(then);
    free(now);
    lz_free(held);

    /* steps marked while the previous one may still run: the executions
       in flight that bind the parameter's buffer run first (FIFO), so each
       step still writes over it */
    lz_tensor *x, *y, *out[1] = {NULL};
    wa = buf_of(a.w);
    for (int s = 3; s < 5; s++) {
        lz_test_mlp_batch(s, B, IN, OUT, &x, &y);
        lz_tensor *in[2] = {x, y};
        lz_scope_begin();
        CHECK(train_step(&a, in, out) == 0);
        lz_scope_end();
        lz_metrics_reset();
        lz_mark_step();
        CHECK_EQ_I(lz_metrics_get().in_place_writes, 2);
        lz_free(x);
        lz_free(y);
        lz_test_lazy_step(train_step, &b, s, B, IN, OUT);
    }
    CHECK(lz_wait() == 0);
    CHECK(buf_of(a.w) == wa);
    CHECK(same_values(a.w, b.w));
    model_free(&a);
    model_free(&b);
}

/* A pending op reading the old parameter, recorded before the update, is
   part of the same full step and reads the old value before the tail
   writes the new one. A partial sync of the parameter alone writes a new
   buffer: the loss, still pending, reads the old value when it runs
   later. b runs the same steps plainly, for the values. */
static void check_readers_of_the_old_value(void)
{
    model a, b;
    twins_after(&a, &b, 3);
    float *then = lz_test_read(a.w);
    /* under no-grad: an autograd record would keep the old value for its
       backward, and a value kept so is never written over */
    lz_no_grad_begin();
    lz_tensor *one = lz_scalar(1.0f), *copy = lz_mul(a.w, one);
    lz_no_grad_end();
    const lz_buffer *wa = buf_of(a.w);
    lz_test_lazy_step(train_step, &a, 3, B, IN, OUT);
    CHECK(buf_of(a.w) == wa);
    float *got = lz_test_read(copy);
    CHECK(then && got && memcmp(then, got, sizeof(float) * IN * OUT) == 0);
    free(then);
    free(got);
    lz_free(copy);
    lz_free(one);
    lz_test_lazy_step(train_step, &b, 3, B, IN, OUT);
    CHECK(same_values(a.w, b.w));

    lz_tensor *x, *y, *out[1] = {NULL};
    lz_test_mlp_batch(4, B, IN, OUT, &x, &y);
    lz_tensor *in[2] = {x, y};
    CHECK(train_step(&a, in, out) == 0);
    wa = buf_of(a.w);
    lz_metrics_reset();
    CHECK(lz_sync(&a.w, 1, 1) == 0);
    CHECK_EQ_I(lz_metrics_get().in_place_writes, 0);
    CHECK(buf_of(a.w) != wa);
    float want = lz_test_lazy_step(train_step, &b, 4, B, IN, OUT);
    CHECK(lz_item(out[0]) == want);
    CHECK(same_values(a.w, b.w));
    lz_free(out[0]);
    lz_free(x);
    lz_free(y);
    model_free(&a);
    model_free(&b);
}

/* AdamW: the step count and bias corrections are computed in the graph
   from scalar state, and the parameter and both moments are updated; the
   parameter still keeps its buffer, with the values of a run that cannot
   donate (fusion off). */
static void check_adamw_donates(void)
{
    model m[2];
    for (int i = 0; i < 2; i++) model_init_with(&m[i], 1);
    const lz_buffer *w0 = NULL;
    for (int s = 0; s < 5; s++) {
        if (s == 2) w0 = buf_of(m[0].w);
        /* the parameter, both moments and the step count; from the first
           step, since AdamW's state starts as zeros made with it */
        CHECK_EQ_I(step_with_fusion(&m[0], s, 1), 4);
        CHECK_EQ_I(step_with_fusion(&m[1], s, 0), 0);
    }
    CHECK(buf_of(m[0].w) == w0);
    CHECK(same_values(m[0].w, m[1].w));
    lz_fusion_set(1);
    lz_cache_clear();
    for (int i = 0; i < 2; i++) model_free(&m[i]);
}

int main(void)
{
    lz_fusion_set(1);
    check_update_sinks();
    check_fallible_reader_keeps_order();
    check_reads_after_the_write();
    check_lazy_steps_donate();
    check_held_value_not_overwritten();
    check_readers_of_the_old_value();
    check_adamw_donates();
    lz_fusion_set(-1);
    return lz_test_done();
}
