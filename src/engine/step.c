/* The path every graph takes: record (done by ops) -> cut -> hash ->
 * compile or hit -> enqueue -> (later) read. */
#include "engine/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/settings.h"
#include "base/thread.h"
#include "engine/cache.h"
#include "engine/explain.h"
#include "ir/graph.h"
#include "runtime/executor.h"

static int eager = -1;

/* The tracing state (step.h): set by capture_trace.c, noted by the barrier
   and by host reads. */
static int tracing;
static const char *break_reason;

void lz_trace_begin(void)
{
    tracing = 1;
    break_reason = NULL;
}

const char *lz_trace_end(void)
{
    const char *r = break_reason;
    tracing = 0;
    break_reason = NULL;
    return r;
}

int lz_capture_tracing(void) { return tracing; }

void lz_capture_note_break(const char *reason)
{
    if (tracing && !break_reason) break_reason = reason;
}

void lz_set_eager(int on)
{
    if (!lz_owner_check("lz_set_eager")) eager = on ? 1 : 0;
}
void lz_step_shutdown(void) { eager = -1; }

int lz_is_eager(void)
{
    if (eager < 0) eager = (int)lz_setting_int(LZ_SETTING_EAGER);
    return eager;
}

lz_executable *lz_find_or_compile(const lz_graph *g)
{
    lz_executable *exe = lz_cache_find(g);
    /* in eager mode every op is a graph of its own, so a model's first step
       compiles one per distinct op: a storm by the warning's measure, and
       none of the mistakes it names */
    if (!lz_is_eager()) lz_explain_barrier(!exe);
    if (exe) {
        lz_counters.cache_hits++;
        return exe;
    }
    lz_explain_miss(g);   /* before the insert: the nearest graph is another one */
    double t0 = lz_now_ms();
    exe = lz_compile(g);
    lz_counters.compile_ms += lz_now_ms() - t0;
    if (!exe) return NULL;
    lz_counters.compiles++;
    lz_cache_insert(exe);
    return exe;
}

typedef struct id_slot { uint64_t id; int slot; } id_slot;

static int by_id(const void *a, const void *b)
{
    uint64_t x = ((const id_slot *)a)->id, y = ((const id_slot *)b)->id;
    return (x > y) - (x < y);
}

/* Per output of g: the input slot holding the value that the tensors
   rooted there had before their update (prev_buf_id), or -1 (a new value,
   or tensors that disagree). A failed step leaves those outputs at that
   value: parameters and optimizer state stay as they were. Every pending
   tensor is in the live registry. *keep is NULL when nothing is kept.
   -1 when out of memory (*keep NULL): the caller then fails the step
   (fail_outputs finds the slots without memory). */
static int keep_slots(const lz_graph *g, int **keep_out)
{
    int *keep = lz_host_malloc(sizeof *keep * (size_t)(g->n_outputs + 1));
    int *out_of = lz_host_malloc(sizeof *out_of * (size_t)(g->n_nodes + 1));
    id_slot *ids = lz_host_malloc(sizeof *ids * (size_t)(g->n_inputs + 1));
    int kept = 0, oom = !keep || !out_of || !ids;
    if (!oom) {
        for (int o = 0; o < g->n_outputs; o++) keep[o] = -1;
        for (int v = 0; v < g->n_nodes; v++) out_of[v] = -1;
        for (int o = 0; o < g->n_outputs; o++) out_of[g->outputs[o]->cut_index] = o;
        for (int k = 0; k < g->n_inputs; k++) ids[k] = (id_slot){g->inputs[k]->buf->id, k};
        qsort(ids, (size_t)g->n_inputs, sizeof *ids, by_id);
        for (const lz_tensor *t = lz_live_first(); t; t = t->live_next) {
            const lz_node *node = t->node;
            int ci = node->cut_index;
            if (!t->prev_buf_id || node->buf || ci < 0 || ci >= g->n_nodes ||
                g->nodes[ci] != node || out_of[ci] < 0)
                continue;
            id_slot key = {t->prev_buf_id, 0};
            const id_slot *hit = bsearch(&key, ids, (size_t)g->n_inputs, sizeof *ids, by_id);
            int o = out_of[ci], slot = hit ? hit->slot : -1;
            if (keep[o] == -1 && slot >= 0) keep[o] = slot, kept++;
            else if (keep[o] != slot) keep[o] = -2;   /* two tensors, two previous values */
        }
        for (int o = 0; o < g->n_outputs; o++)
            if (keep[o] == -2) keep[o] = -1;
    }
    free(out_of);
    free(ids);
    if (!kept) { free(keep); keep = NULL; }
    *keep_out = keep;
    return oom ? -1 : 0;
}

/* keep_slots' answer for output o alone, without allocating: for
   fail_outputs when keep_slots had no memory (slow: every live tensor and
   input per output, but only a failing step pays it). */
static int kept_slot(const lz_graph *g, int o)
{
    int keep = -1;
    for (const lz_tensor *t = lz_live_first(); t; t = t->live_next) {
        if (!t->prev_buf_id || t->node->buf || t->node != g->outputs[o]) continue;
        int slot = 0;
        while (slot < g->n_inputs && g->inputs[slot]->buf->id != t->prev_buf_id) slot++;
        if (slot == g->n_inputs) slot = -1;
        if (keep == -1 && slot >= 0) keep = slot;
        else if (keep != slot) keep = -2;
    }
    return keep == -2 ? -1 : keep;
}

/* A step that fails before it is enqueued (compile, an output allocation)
   ends like one that fails on the executor: its results report the error
   when read, what it updated keeps its previous value, and the next
   lz_wait reports it. Nothing is left pending to be applied later. */
static void fail_outputs(const lz_graph *g, const int *keep)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", lz_last_error() ? lz_last_error() : "a step failed");
    /* materialising an output drops the nodes under it: the inputs, whose
       buffers later outputs keep, are held until the end */
    for (int k = 0; k < g->n_inputs; k++) lz_node_ref(g->inputs[k]);
    for (int o = 0; o < g->n_outputs; o++) {
        const lz_node *n = g->outputs[o];
        lz_buffer *b;
        const int slot = keep ? keep[o] : kept_slot(g, o);
        if (slot >= 0) {
            b = g->inputs[slot]->buf;
            lz_buffer_ref(b);
        } else {
            b = lz_buffer_failed((size_t)lz_node_numel(n) * lz_dtype_size((lz_dtype)n->dtype), msg);
            if (!b) continue;   /* out of host memory: stays pending */
        }
        lz_node_materialise(g->outputs[o], b);
        lz_buffer_unref(b);
    }
    for (int k = 0; k < g->n_inputs; k++) lz_node_unref(g->inputs[k]);
    lz_live_prune();
    lz_executor_note_error(msg);
    lz_errorf("%s", msg);
}

/* Per output of a full step (every pending tensor a root): the buffer of
   the value it replaces, when the new value may be written over it
   (docs/design.md semantic 7: donated, as a captured replay does): the program
   allows the pair (lz_program_may_overwrite), one leaf node holds the
   buffer besides executions in flight, which run first
   (lz_executor_overwritable), and every reference to that leaf is an
   operand of a node of g. With every pending
   tensor a root, those nodes are gone once the outputs are materialised,
   so nothing can read the old value after the step. NULL when none, or
   when out of memory to find them (the step then writes new buffers). */
static lz_buffer **donations(const lz_graph *g, const lz_executable *exe, const int *keep)
{
    if (!keep || !exe) return NULL;
    int *operand_refs = lz_host_calloc((size_t)g->n_nodes + 1, sizeof *operand_refs);
    lz_buffer **donated = lz_host_calloc((size_t)g->n_outputs + 1, sizeof *donated);
    char *taken = lz_host_calloc((size_t)g->n_inputs + 1, 1);   /* one output per buffer */
    int any = 0;
    if (operand_refs && donated && taken) {
        for (int i = 0; i < g->n_nodes; i++)
            if (g->slot_of[i] < 0)
                for (int k = 0; k < g->nodes[i]->n_src; k++) operand_refs[g->nodes[i]->src[k]->cut_index]++;
        for (int o = 0; o < g->n_outputs; o++) {
            if (keep[o] < 0 || taken[keep[o]]) continue;
            const lz_node *leaf = g->inputs[keep[o]], *out = g->outputs[o];
            size_t nbytes = (size_t)lz_node_numel(out) * lz_dtype_size((lz_dtype)out->dtype);
            if (leaf->refs == operand_refs[leaf->cut_index] &&
                lz_executor_overwritable(leaf->buf, nbytes) &&
                lz_program_may_overwrite(&exe->prog, o, keep[o])) {
                donated[o] = leaf->buf;
                taken[keep[o]] = 1;
                any = 1;
            }
        }
    }
    free(operand_refs);
    free(taken);
    if (!any) { free(donated); donated = NULL; }
    return donated;
}

static int execute_graph(const lz_graph *g, lz_executable *exe, int full_step)
{
    int *keep;
    if (keep_slots(g, &keep) != 0) {
        /* a failed compile keeps its own error */
        if (exe) lz_errorf("out of memory starting a step of %d outputs", g->n_outputs);
        fail_outputs(g, NULL);
        return -1;
    }
    lz_buffer **donated = full_step ? donations(g, exe, keep) : NULL;
    if (!exe) {
        fail_outputs(g, keep);
        free(keep);
        return -1;
    }
    lz_buffer *in_small[64], **in = in_small;
    lz_buffer *out_small[64], **out = out_small;
    if (g->n_inputs > 64) in = lz_host_malloc(sizeof *in * (size_t)g->n_inputs);
    if (g->n_outputs > 64) out = lz_host_malloc(sizeof *out * (size_t)g->n_outputs);
    if (!in || !out) {
        if (in != in_small) free(in);
        if (out != out_small) free(out);
        lz_errorf("out of memory starting a step of %d outputs", g->n_outputs);
        fail_outputs(g, keep);
        free(keep);
        free(donated);
        return -1;
    }
    for (int i = 0; i < g->n_inputs; i++) in[i] = g->inputs[i]->buf;
    int rc = 0, made = 0;
    for (; made < g->n_outputs; made++) {
        const lz_node *o = g->outputs[made];
        size_t nbytes = (size_t)lz_node_numel(o) * lz_dtype_size((lz_dtype)o->dtype);
        if (donated && donated[made]) {
            out[made] = donated[made];
            lz_buffer_ref(out[made]);
            continue;
        }
        out[made] = lz_buffer_placeholder(nbytes);
        if (!out[made]) { rc = -1; break; }
    }
    if (rc == 0) {
        /* donated buffers change only once nothing can fail */
        for (int o = 0; donated && o < g->n_outputs; o++)
            if (donated[o]) {
                lz_buffer_refill(donated[o]);
                lz_counters.in_place_writes++;
            }
        lz_executor_enqueue(exe, in, out, keep);
        lz_counters.executions++;
        lz_counters.flops += exe->prog.flops;
        lz_counters.kernels += exe->prog.n_instrs;
        for (int o = 0; o < g->n_outputs; o++) lz_node_materialise(g->outputs[o], out[o]);
        lz_live_prune();
    }
    for (int o = 0; o < made; o++) lz_buffer_unref(out[o]);
    if (rc) fail_outputs(g, keep);
    free(keep);
    free(donated);
    if (in != in_small) free(in);
    if (out != out_small) free(out);
    return rc;
}

int lz_execute_graph(const lz_graph *g, lz_executable *exe)
{
    return execute_graph(g, exe, 0);
}

int lz_execute_step_graph(const lz_graph *g, lz_executable *exe)
{
    return execute_graph(g, exe, 1);
}

static int run_roots(lz_node *const *roots, int n, int full_step)
{
    double t0 = lz_now_ms();
    lz_graph g;
    /* out of memory: the roots stay pending, for the next barrier */
    if (lz_graph_cut(&g, roots, n) != 0) return -1;
    lz_counters.graphs++;
    lz_counters.trace_ms += lz_now_ms() - t0;
    lz_executable *exe = lz_find_or_compile(&g);
    int rc = execute_graph(&g, exe, full_step);
    lz_executable_unref(exe);
    lz_graph_release(&g);
    return rc;
}

int lz_run_roots(lz_node *const *roots, int n) { return run_roots(roots, n, 0); }

int lz_step_all(void)
{
    /* Nothing pending: no graph, no queue, no lock. */
    if (!lz_live_count()) return 0;
    lz_live_prune();
    int n = lz_live_count();
    if (!n) return 0;
    lz_node **roots = lz_host_malloc(sizeof *roots * (size_t)n);
    if (!roots) return lz_errorf_int("out of memory cutting a graph of %d tensors", n);
    int k = 0;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) roots[k++] = t->node;
    /* The roots stay referenced by their tensors while the graph is cut. */
    int rc = run_roots(roots, k, 1);
    free(roots);
    return rc;
}

void lz_mark_step(void)
{
    if (lz_owner_check("lz_mark_step")) return;
    lz_capture_note_break("lz_mark_step");
    lz_counters.mark_steps++;
    /* a failure is reported by the next read of a result, or lz_wait */
    lz_step_all();
}

int lz_sync(lz_tensor *const *ts, int n, int wait)
{
    if (lz_owner_check("lz_sync")) return -1;
    lz_capture_note_break("lz_sync");
    return lz_sync_tensors(ts, n, wait);
}

int lz_sync_tensors(lz_tensor *const *ts, int n, int wait)
{
    if (n < 0 || (n > 0 && !ts)) return lz_errorf_int("lz_sync: bad tensor list (n = %d)", n);
    if (lz_check_operands("lz_sync", n, ts)) return -1;
    lz_node **roots = lz_host_malloc(sizeof *roots * (size_t)(n ? n : 1));
    if (!roots) return lz_errorf_int("lz_sync: out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!ts[i]->node->buf) roots[k++] = ts[i]->node;
    int rc = k ? lz_run_roots(roots, k) : 0;
    free(roots);
    for (int i = 0; rc == 0 && wait && i < n; i++)
        rc = lz_executor_wait_buffer(ts[i]->node->buf);
    return rc;
}

int lz_wait(void)
{
    if (lz_owner_check("lz_wait")) return -1;
    lz_capture_note_break("lz_wait");
    return lz_executor_wait_all();
}
