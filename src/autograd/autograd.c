/* Autograd records: which tensors need gradients and how each was made. */
#include "autograd/autograd.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/thread.h"

static int no_grad_depth;
/* every change of a requires-grad flag: a capture's guard compares it */
static uint64_t requires_grad_changes;

void lz_no_grad_begin(void)
{
    if (!lz_owner_check("lz_no_grad_begin")) no_grad_depth++;
}
void lz_no_grad_end(void)
{
    if (!lz_owner_check("lz_no_grad_end") && no_grad_depth) no_grad_depth--;
}
int  lz_grad_enabled(void) { return no_grad_depth == 0; }
int  lz_no_grad_depth(void) { return no_grad_depth; }
void lz_no_grad_restore(int d) { no_grad_depth = d; }
void lz_autograd_shutdown(void) { no_grad_depth = 0; }

static int is_dead(const lz_ag *ag) { return ag && ag->state != LZ_AG_LIVE; }

int lz_needs_grad(const lz_tensor *t)
{
    if (!t) return 0;
    t = lz_tensor_of(t);
    return t->requires_grad || (t->ag && t->ag->state == LZ_AG_LIVE);
}

/* An internal handle on t's current value: it keeps the node, not the
   tensor, so a later lz_assign to t does not change it. An input's value
   is live, as the input tensor the record used to hold was: a barrier
   before the backward materialises it. The output's is not: the output
   tensor, if still held, is live itself, and a value saved only for a
   record nobody can reach any more must not become a capture's state. */
static lz_tensor *save_value(const lz_tensor *t, int live)
{
    lz_node_ref(t->node);
    lz_tensor *s = lz_tensor_saved(t->node, live);
    if (s) s->requires_grad = lz_needs_grad(t);
    return s;
}

static void set_ag(lz_tensor *out, lz_ag *ag)
{
    if (out->ag) lz_ag_unref(out->ag);
    out->ag = ag;
}

static int lost_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)ag, (void)out, (void)gout, (void)gin;
    return lz_errorf_int("lz_backward: a tensor on the path to the loss lost its autograd "
                         "record (out of memory when its op was recorded): no gradient");
}

/* Stands for a record that could not be allocated: the tensor still needs
   a gradient, and a backward through it fails instead of skipping it. */
static lz_ag lost_record = {.refs = 1 << 30, .backward = lost_backward, .name = "a lost record"};

/* Stands for an overwritten mark that could not be allocated: still an
   error at backward, with a vaguer name. */
static lz_ag lost_overwritten = {.refs = 1 << 30, .state = LZ_AG_OVERWRITTEN, .name = "an op"};

/* Shared by every tensor a replay returns in place of one with a record. */
static lz_ag replayed = {.refs = 1 << 30, .state = LZ_AG_REPLAYED, .name = "a captured step"};

static void drop_contents(lz_ag *ag);

void lz_ag_attach(lz_tensor *out, const char *name, lz_backward_fn fn,
                  int n_in, lz_tensor *const *in, const lz_attrs *attrs)
{
    if (!out || !lz_grad_enabled()) return;
    int any = 0;
    lz_ag *dead = NULL;
    for (int i = 0; i < n_in; i++) {
        any |= lz_needs_grad(in[i]);
        if (!dead && is_dead(lz_tensor_of(in[i])->ag)) dead = lz_tensor_of(in[i])->ag;
    }
    if (!any) {
        /* made only from values whose graph is gone: a backward from out
           must say so, not that nothing requires grad */
        if (dead && dead != out->ag) {
            dead->refs++;
            set_ag(out, dead);
        }
        return;
    }
    size_t n = (size_t)n_in;
    lz_ag *ag = lz_host_calloc(1, sizeof *ag + n * (2 * sizeof(lz_tensor *) + sizeof(lz_ag *)));
    if (!ag) {
        lz_errorf("%s: out of memory recording it for autograd", name);
        lost_record.refs++;
        set_ag(out, &lost_record);
        return;
    }
    ag->refs = 1;
    ag->backward = fn;
    ag->name = name;
    if (attrs) ag->attrs = *attrs;
    ag->n_in = n_in;
    ag->leaf = ag->in + n;
    ag->fn = (lz_ag **)(ag->leaf + n);
    for (int i = 0; i < n_in; i++) {
        lz_tensor *x = lz_tensor_of(in[i]);   /* an lz_retain handle's tensor */
        ag->in[i] = save_value(x, 1);
        if (x->ag) {
            ag->fn[i] = x->ag;
            ag->fn[i]->refs++;
        } else if (x->requires_grad) {
            ag->leaf[i] = x;
            lz_tensor_ref(x);
        }
    }
    ag->out = save_value(out, 0);
    int saved = ag->out != NULL;
    for (int i = 0; i < n_in; i++) saved &= ag->in[i] != NULL;
    if (!saved) {
        drop_contents(ag);
        free(ag);
        lz_errorf("%s: out of memory recording it for autograd", name);
        lost_record.refs++;
        set_ag(out, &lost_record);
        return;
    }
    set_ag(out, ag);
}

/* Drops what a live record holds: saved values and edges. */
static void drop_contents(lz_ag *ag)
{
    for (int i = 0; i < ag->n_in; i++) {
        lz_tensor_unref(ag->in[i]);
        if (ag->fn[i]) lz_ag_unref(ag->fn[i]);
        lz_tensor_unref(ag->leaf[i]);
        ag->in[i] = ag->leaf[i] = NULL;
        ag->fn[i] = NULL;
    }
    lz_tensor_unref(ag->out);
    ag->out = NULL;
    if (ag->acc) { lz_tensor_unref(ag->acc); ag->acc = NULL; }
}

void lz_ag_unref(lz_ag *ag)
{
    if (!ag || --ag->refs > 0) return;
    drop_contents(ag);
    free(ag);
}

void lz_ag_release(lz_ag *ag)
{
    if (ag->state != LZ_AG_LIVE || ag == &lost_record) return;
    drop_contents(ag);
    ag->state = LZ_AG_FREED;
}

void lz_ag_overwritten(lz_tensor *t)
{
    if (!t->ag || is_dead(t->ag)) return;
    lz_ag *m = lz_host_calloc(1, sizeof *m);
    if (!m) {
        lost_overwritten.refs++;
        set_ag(t, &lost_overwritten);
        return;
    }
    m->refs = 1;
    m->state = LZ_AG_OVERWRITTEN;
    m->name = t->ag->name;
    set_ag(t, m);
}

void lz_ag_mark_replayed(lz_tensor *t)
{
    t = lz_tensor_of(t);
    replayed.refs++;
    set_ag(t, &replayed);
}

int lz_ag_dead_error(const lz_ag *ag)
{
    if (ag->state == LZ_AG_REPLAYED)
        return lz_errorf_int("lz_backward: the tensor was returned by a replay of a captured step "
                             "(lz_call), which runs none of the step's ops and records no autograd; "
                             "call lz_backward inside the step function (or run the call under "
                             "lz_no_grad_begin when no gradient is wanted)");
    if (ag->state == LZ_AG_FREED)
        return lz_errorf_int("lz_backward: the graph through %s was already freed by an earlier "
                             "lz_backward (PyTorch: \"Trying to backward through the graph a second "
                             "time\"); record the forward again before another backward",
                             ag->name);
    return lz_errorf_int("lz_backward: a tensor made by %s was overwritten (lz_assign or "
                         "lz_copy_from_host) after that op was recorded and then used where a "
                         "gradient is needed; the gradient of its new value is unknown (PyTorch: "
                         "\"one of the variables needed for gradient computation has been modified "
                         "by an inplace operation\"); make a new tensor instead of assigning",
                         ag->name);
}

void lz_requires_grad(lz_tensor *t, int on)
{
    if (!t || lz_owner_check("lz_requires_grad")) return;
    t = lz_tensor_of(t);
    /* a gradient of integers has no meaning (torch refuses it too) */
    if (on && t->node->dtype != LZ_F32) {
        lz_errorf("lz_requires_grad: tensor is %s; only f32 tensors can require grad",
                  lz_dtype_name((lz_dtype)t->node->dtype));
        return;
    }
    if (t->requires_grad != (on != 0)) requires_grad_changes++;
    t->requires_grad = on != 0;
}

uint64_t lz_requires_grad_changes(void) { return requires_grad_changes; }

lz_tensor *lz_detach(lz_tensor *x)
{
    if (lz_check_operands("lz_detach", 1, &x)) return NULL;
    lz_node *n = lz_tensor_of(x)->node;
    lz_node_ref(n);
    return lz_tensor_wrap(n);
}

lz_tensor *lz_grad(lz_tensor *t)
{
    return t && !lz_owner_check("lz_grad") ? lz_tensor_of(t)->grad : NULL;
}

void lz_zero_grad(lz_tensor *t)
{
    if (!t || lz_owner_check("lz_zero_grad")) return;
    t = lz_tensor_of(t);
    if (!t->grad) return;
    lz_tensor_unref(t->grad);
    t->grad = NULL;
}
