/* Autograd records: which tensors need gradients and how each was made. */
#include "autograd/autograd.h"

#include <stdlib.h>
#include <string.h>

#include "backend/fault.h"
#include "core/capture.h"
#include "core/error.h"
#include "core/thread.h"

static int no_grad_depth;

void lz_no_grad_begin(void)
{
    if (!lz_owner_check("lz_no_grad_begin")) no_grad_depth++;
}
void lz_no_grad_end(void)
{
    if (!lz_owner_check("lz_no_grad_end") && no_grad_depth) no_grad_depth--;
}
int  lz_grad_enabled(void) { return no_grad_depth == 0; }
void lz_autograd_shutdown(void) { no_grad_depth = 0; }

int lz_needs_grad(const lz_tensor *t) { return t && (t->requires_grad || t->ag); }

static int lost_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)ag, (void)out, (void)gout, (void)gin;
    return lz_errorf_int("lz_backward: a tensor on the path to the loss lost its autograd "
                         "record (out of memory when its op was recorded): no gradient");
}

/* Stands for a record that could not be allocated: the tensor still needs
   a gradient, and a backward through it fails instead of skipping it. */
static lz_ag lost_record = {.backward = lost_backward, .name = "a lost record"};

void lz_ag_attach(lz_tensor *out, const char *name, lz_backward_fn fn,
                  int n_in, lz_tensor *const *in, const lz_attrs *attrs)
{
    if (!out || !lz_grad_enabled()) return;
    int any = 0;
    for (int i = 0; i < n_in; i++) any |= lz_needs_grad(in[i]);
    if (!any) return;
    lz_ag *ag = lz_host_calloc(1, sizeof *ag + sizeof(lz_tensor *) * (size_t)n_in);
    if (!ag) {
        lz_errorf("%s: out of memory recording it for autograd", name);
        ag = &lost_record;
        n_in = 0;
    }
    if (ag != &lost_record) {
        ag->backward = fn;
        ag->name = name;
        if (attrs) ag->attrs = *attrs;
        ag->n_in = n_in;
    }
    for (int i = 0; i < n_in; i++) {
        ag->in[i] = in[i];
        lz_tensor_ref(in[i]);
    }
    if (out->ag) lz_ag_free(out->ag);
    out->ag = ag;
}

void lz_ag_free(lz_ag *ag)
{
    if (ag == &lost_record) return;
    for (int i = 0; i < ag->n_in; i++) lz_tensor_unref(ag->in[i]);
    free(ag);
}

void lz_requires_grad(lz_tensor *t, int on)
{
    if (!t || lz_owner_check("lz_requires_grad")) return;
    /* a gradient of integers has no meaning (torch refuses it too) */
    if (on && t->node->dtype != LZ_F32) {
        lz_errorf("lz_requires_grad: tensor is %s; only f32 tensors can require grad",
                  lz_dtype_name((lz_dtype)t->node->dtype));
        return;
    }
    if (t->requires_grad != (on != 0)) lz_capture_leaves_changed();
    t->requires_grad = on != 0;
}

lz_tensor *lz_grad(lz_tensor *t) { return t && !lz_owner_check("lz_grad") ? t->grad : NULL; }

void lz_zero_grad(lz_tensor *t)
{
    if (!t || lz_owner_check("lz_zero_grad") || !t->grad) return;
    lz_tensor_unref(t->grad);
    t->grad = NULL;
}
