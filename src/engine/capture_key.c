/* How a call finds its trace: the key (the inputs' dtypes, shapes and
 * aliasing, dead autograd records, which leaves have a gradient, the
 * autocast region), and the guard checked before each replay. */
#include "engine/capture_internal.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "base/fault.h"
#include "engine/autocast.h"

static int first_alias(lz_buffer *const *buf, int k)
{
    for (int j = 0; j < k; j++)
        if (buf[j] == buf[k]) return j;
    return k;
}

/* An input made by ops whose graph is gone (a backward freed it, or a
   replay returned it): a backward that reaches it must fail. */
static uint8_t carries_dead_record(const lz_tensor *x)
{
    const lz_ag *ag = lz_tensor_of(x)->ag;
    return ag && ag->state != LZ_AG_LIVE && lz_grad_enabled();
}

/* The key: does this call look like the one tr was traced on? */
int lz_capture_key_matches(const lz_fn *f, const trace *tr, lz_tensor *const *in)
{
    if (tr->autocast != (int)lz_autocast_dtype()) return 0;
    for (int k = 0; k < f->n_in; k++) {
        const lz_node *n = in[k]->node;
        if (n->dtype != tr->dtype[k] || n->ndim != tr->ndim[k] ||
            memcmp(n->shape, tr->shape[k], sizeof(int64_t) * n->ndim))
            return 0;
        if (tr->alias[k] != k && in[tr->alias[k]]->node->buf != n->buf) return 0;
        if (tr->dead[k] != carries_dead_record(in[k])) return 0;
        if (tr->alias[k] == k)
            for (int j = 0; j < k; j++)
                if (in[j]->node->buf == n->buf) return 0;
    }
    for (int i = 0; i < tr->n_leaves; i++)
        if ((tr->leaves[i].t->grad != NULL) != tr->leaves[i].had_grad) return 0;
    return 1;
}

/* A trace keyed by the inputs as they were when the call began (inbuf:
   their buffers then); NULL with the error set when out of memory. */
trace *lz_capture_new_trace(lz_fn *f, lz_tensor *const *in, lz_buffer *const *inbuf)
{
    trace *tr = lz_host_calloc(1, sizeof *tr);
    if (tr) {
        tr->dtype = lz_host_malloc((size_t)f->n_in + 1);
        tr->ndim = lz_host_malloc((size_t)f->n_in + 1);
        tr->shape = lz_host_malloc(sizeof *tr->shape * (size_t)(f->n_in + 1));
        tr->alias = lz_host_malloc(sizeof *tr->alias * (size_t)(f->n_in + 1));
        tr->dead = lz_host_malloc((size_t)f->n_in + 1);
    }
    if (!tr || !tr->dtype || !tr->ndim || !tr->shape || !tr->alias || !tr->dead) {
        if (tr) { free(tr->dtype); free(tr->ndim); free(tr->shape); free(tr->alias); free(tr->dead); }
        free(tr);
        return lz_errorf("lz_call: out of memory keeping a new trace");
    }
    for (int k = 0; k < f->n_in; k++) {
        tr->dtype[k] = in[k]->node->dtype;
        tr->ndim[k] = in[k]->node->ndim;
        memcpy(tr->shape[k], in[k]->node->shape, sizeof tr->shape[k]);
        tr->alias[k] = first_alias(inbuf, k);
        tr->dead[k] = carries_dead_record(in[k]);
    }
    tr->autocast = (int)lz_autocast_dtype();
    tr->next = f->traces;
    f->traces = tr;
    return tr;
}

void lz_capture_free_trace(trace *tr)
{
    lz_capture_clear(tr);
    lz_capture_clear_leaves(tr);
    if (tr->exe) { tr->exe->pinned--; lz_executable_unref(tr->exe); }
    free(tr->dtype); free(tr->ndim); free(tr->shape); free(tr->alias); free(tr->dead);
    free(tr);
}

/* The rest of the guard, checked before each replay: every tensor the
   capture bound is still the program's, tensors that shared a buffer
   still do, no requires-grad flag changed, and no bf16 copy of a
   parameter lags behind it (the parameter was assigned since). */
int lz_capture_guard_holds(const trace *tr, lz_tensor *const *in)
{
    if (tr->leaf_epoch != lz_requires_grad_changes()) return 0;
    for (int i = 0; i < tr->n_live_check; i++)
        if (!lz_tensor_held(tr->live_check[i], 0) || lz_autocast_copy_stale(tr->live_check[i])) return 0;
    for (int i = 0; i < tr->n_alias; i++) {
        const alias_check *a = &tr->aliases[i];
        const lz_buffer *x = (a->input >= 0 ? in[a->input] : a->a)->node->buf;
        if (!x || x != a->b->node->buf) return 0;
    }
    return 1;
}
