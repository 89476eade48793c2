/* The path every graph takes: record (done by ops) -> cut -> hash ->
 * compile or hit -> enqueue -> (later) read. */
#include "core/step.h"

#include <stdlib.h>
#include <string.h>

#include "core/cache.h"
#include "core/capture.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/metrics.h"
#include "runtime/executor.h"

static int eager = -1;

void lz_set_eager(int on) { eager = on ? 1 : 0; }

int lz_is_eager(void)
{
    if (eager < 0) {
        const char *env = getenv("LZ_EAGER");
        eager = env && env[0] == '1';
    }
    return eager;
}

lz_executable *lz_find_or_compile(const lz_graph *g)
{
    lz_executable *exe = lz_cache_find(g);
    if (exe) {
        lz_counters.cache_hits++;
        return exe;
    }
    double t0 = lz_now_ms();
    exe = lz_compile(g);
    lz_counters.compile_ms += lz_now_ms() - t0;
    if (!exe) return NULL;
    lz_counters.compiles++;
    lz_cache_insert(exe);
    return exe;
}

int lz_execute_graph(const lz_graph *g, lz_executable *exe)
{
    lz_buffer *in_small[64], **in = in_small;
    lz_buffer *out_small[64], **out = out_small;
    if (g->n_inputs > 64) in = malloc(sizeof *in * (size_t)g->n_inputs);
    if (g->n_outputs > 64) out = malloc(sizeof *out * (size_t)g->n_outputs);
    for (int i = 0; i < g->n_inputs; i++) in[i] = g->inputs[i]->buf;
    int rc = 0, made = 0;
    for (; made < g->n_outputs; made++) {
        const lz_node *o = g->outputs[made];
        size_t nbytes = (size_t)lz_node_numel(o) * lz_dtype_size((lz_dtype)o->dtype);
        out[made] = lz_buffer_placeholder(nbytes);
        if (!out[made]) { rc = -1; break; }
    }
    if (rc == 0) {
        lz_executor_enqueue(exe, in, out);
        lz_counters.executions++;
        lz_counters.flops += exe->prog.flops;
        for (int o = 0; o < g->n_outputs; o++) lz_node_materialise(g->outputs[o], out[o]);
        lz_live_prune();
    }
    for (int o = 0; o < made; o++) lz_buffer_unref(out[o]);
    if (in != in_small) free(in);
    if (out != out_small) free(out);
    return rc;
}

int lz_run_roots(lz_node *const *roots, int n)
{
    double t0 = lz_now_ms();
    lz_graph g;
    lz_graph_cut(&g, roots, n);
    lz_counters.graphs++;
    lz_counters.trace_ms += lz_now_ms() - t0;
    lz_executable *exe = lz_find_or_compile(&g);
    int rc = exe ? lz_execute_graph(&g, exe) : -1;
    lz_executable_unref(exe);
    lz_graph_release(&g);
    return rc;
}

void lz_mark_step(void)
{
    lz_capture_note_break("lz_mark_step");
    lz_counters.mark_steps++;
    /* Nothing pending: no graph, no queue, no lock. */
    if (!lz_live_count()) return;
    lz_live_prune();
    int n = lz_live_count();
    if (!n) return;
    lz_node **roots = malloc(sizeof *roots * (size_t)n);
    int k = 0;
    for (lz_tensor *t = lz_live_first(); t; t = t->live_next) roots[k++] = t->node;
    /* The roots stay referenced by their tensors while the graph is cut. */
    lz_run_roots(roots, k);
    free(roots);
}

int lz_sync(lz_tensor *const *ts, int n, int wait)
{
    lz_capture_note_break("lz_sync");
    return lz_sync_tensors(ts, n, wait);
}

int lz_sync_tensors(lz_tensor *const *ts, int n, int wait)
{
    if (n < 0 || (n > 0 && !ts)) return lz_errorf_int("lz_sync: bad tensor list (n = %d)", n);
    if (lz_check_operands("lz_sync", n, ts)) return -1;
    lz_node **roots = malloc(sizeof *roots * (size_t)(n ? n : 1));
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
    lz_capture_note_break("lz_wait");
    return lz_executor_wait_all();
}
