/* LZ_CAPTURE_CHECK=N: every N-th call of a captured function traces again
 * and compares what it recorded with the capture (graph, frozen constants,
 * the tensor each input is read from), failing the call on a difference. */
#include "engine/capture_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/buffer.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/settings.h"
#include "engine/step.h"

/* LZ_CAPTURE_CHECK=N: trace every N-th call again and compare (0: off). */
int64_t lz_capture_check_every(void)
{
    static int64_t every = -1;
    if (every < 0) every = lz_setting_int(LZ_SETTING_CAPTURE_CHECK);
    return every;
}

/* The first difference between the capture tr holds and the graph g just
   traced for the same call (LZ_CAPTURE_CHECK): 0 if none, else -1 with
   the error set. */
static int compare_capture(const trace *tr, const lz_graph *g)
{
    char what[512];
    if (lz_graph_sig_diff(tr->exe->sig, tr->exe->sig_len, g->sig, g->sig_len, what, sizeof what))
        return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: the step function recorded a different graph "
                             "than when it was captured: %s", what);
    for (int i = 0; i < g->n_inputs && i < tr->n_slots; i++) {
        if (tr->slots[i].kind != SRC_CONST) continue;
        const lz_buffer *old = tr->slots[i].buf, *now = g->inputs[i]->buf;
        if (old->nbytes != now->nbytes || old->error || now->error) continue;
        /* both made from host data: read them back from the device */
        char *host = lz_host_malloc(2 * old->nbytes + 1);
        if (!host)
            return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: out of memory reading constant input %d "
                                 "(%zu bytes) to compare it", i, old->nbytes);
        const char *was = host, *is = host + old->nbytes;
        if (lz_buffer_read("lz_call", old, host, old->nbytes) ||
            lz_buffer_read("lz_call", now, host + old->nbytes, old->nbytes)) {
            free(host);
            return -1;
        }
        if (memcmp(was, is, old->nbytes) == 0) {
            free(host);
            continue;
        }
        const lz_node *n = g->inputs[i];
        size_t es = lz_dtype_size((lz_dtype)n->dtype), e = 0;
        while (e * es < old->nbytes && !memcmp(was + e * es, is + e * es, es)) e++;
        char shape[96], ov[48], nv[48];
        const char *od = was + e * es, *ndt = is + e * es;
        if (n->dtype == LZ_F32) {
            snprintf(ov, sizeof ov, "%.9g", (double)*(const float *)od);
            snprintf(nv, sizeof nv, "%.9g", (double)*(const float *)ndt);
        } else if (n->dtype == LZ_I64) {
            snprintf(ov, sizeof ov, "%" PRId64, *(const int64_t *)od);
            snprintf(nv, sizeof nv, "%" PRId64, *(const int64_t *)ndt);
        } else if (n->dtype == LZ_BF16) {
            snprintf(ov, sizeof ov, "%.9g", (double)lz_bf16_to_f32(*(const uint16_t *)od));
            snprintf(nv, sizeof nv, "%.9g", (double)lz_bf16_to_f32(*(const uint16_t *)ndt));
        } else {
            snprintf(ov, sizeof ov, "%" PRId32, *(const int32_t *)od);
            snprintf(nv, sizeof nv, "%" PRId32, *(const int32_t *)ndt);
        }
        free(host);
        return lz_errorf_int("lz_call: LZ_CAPTURE_CHECK: constant input %d (%s %s, made from host memory "
                             "inside the step function) changed since the capture: element %zu was %s, "
                             "is now %s", i, lz_shape_str(shape, n->ndim, n->shape),
                             lz_dtype_name((lz_dtype)n->dtype), e, ov, nv);
    }
    return 0;
}

/* What a slot reads, as an identity: the tensor, the input index or the
   leaf whose gradient, or the constant buffer. */
static const void *binding_source(const trace *tr, const binding *b)
{
    switch (b->kind) {
    case SRC_INPUT: return (const void *)(uintptr_t)(1 + b->index);   /* not a heap address */
    case SRC_TENSOR: return b->t;
    case SRC_GRAD: return tr->leaves[b->index].t;
    default: return NULL;
    }
}

const void **lz_capture_check_before(const trace *tr, const lz_graph *g, lz_executable *exe)
{
    const void **was = NULL;
    int n_was = tr->n_slots;
    if (compare_capture(tr, g) == 0 && !(was = lz_host_malloc(sizeof *was * (size_t)(n_was + 1))))
        lz_errorf("lz_call: LZ_CAPTURE_CHECK: out of memory comparing the capture's %d inputs", n_was);
    if (!was) {
        /* the call fails; the capture stays as it was */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", lz_last_error());
        lz_execute_graph(g, NULL);
        lz_errorf("%s", msg);
        lz_executable_unref(exe);
        return NULL;
    }
    for (int i = 0; i < n_was; i++) was[i] = binding_source(tr, &tr->slots[i]);
    return was;
}

int lz_capture_check_after(const trace *tr, const lz_graph *g, const void *const *was, int n_was)
{
    int rebound = -1;
    for (int i = 0; i < n_was && i < tr->n_slots && rebound < 0; i++)
        if (was[i] != binding_source(tr, &tr->slots[i])) rebound = i;
    if (rebound < 0) return 0;
    /* the capture is bound anew (later replays read what the function
       reads now); this call fails and its state keeps its values */
    char shape[96];
    const lz_node *n = g->inputs[rebound];
    lz_errorf("lz_call: LZ_CAPTURE_CHECK: input %d of the captured graph (%s %s) is read from a "
              "different tensor than when the step function was captured (it reaches another "
              "tensor through its context now)", rebound, lz_shape_str(shape, n->ndim, n->shape),
              lz_dtype_name((lz_dtype)n->dtype));
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lz_last_error());
    lz_execute_graph(g, NULL);
    lz_errorf("%s", msg);
    return -1;
}
