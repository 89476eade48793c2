/* An executable's runs as one CUDA graph launch (issue 46, item 4).
 *
 * A captured step replays the same executable on new input buffers (the
 * batch), writes new output buffers (the loss) and updates its state in
 * place (parameters, gradients, optimizer state: the same buffers every
 * call). The graph is the plan's work captured once, with the values whose
 * buffers change between runs bound through fixed buffers of the graph's
 * own: a copy into each at the start for an input, out of each at the end
 * for an output, the kernels reading and writing the fixed ones. A launch
 * then sets those copies' addresses (cudaGraphExecMemcpyNodeSetParams1D,
 * a few per step) and launches the graph: one cudaGraphLaunch per run,
 * whatever the number of kernels.
 *
 * The first run goes kernel by kernel and notes every buffer; a value
 * seen in another buffer later joins the bound ones and the graph is made
 * again (once per value, so at most a few times). A graph that cannot be
 * made (a capture refused) leaves its executable kernel by kernel, with one
 * warning. When the bound values
 * would copy more than LZ_CUDA_GRAPH_COPY_MIB a run (a step that does not
 * update its state in place), the runs go kernel by kernel. Graphs are
 * captured on their own stream, thread-locally, so the recording thread's
 * transfers on the main stream are never caught in one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cu_runtime.h"

typedef struct bind {
    int value, out;          /* out: copied from the fixed buffer at the end */
    size_t bytes;
    void *slot;
    cudaGraphNode_t node;
} bind;

struct lz_cu_graph {
    int n_values;
    void **seen;             /* each value's buffer at the first run */
    uint8_t *varies;         /* inputs and outputs seen in another buffer since */
    uint8_t *bound;          /* those the graph binds */
    void **use;              /* the addresses the captured work uses */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    bind *binds;
    int n_binds;
    void *slots;
    int broken;              /* a build failed: this executable goes kernel by kernel */
};

static void drop_graph(lz_cu_graph *g)
{
    /* launches of it may be queued: they finish first (a rebuild is rare) */
    if (g->exec) cudaStreamSynchronize(lz_cu.stream);
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    if (g->slots) cudaFreeAsync(g->slots, lz_cu.stream);   /* after the launches queued before */
    free(g->binds);
    g->exec = NULL;
    g->graph = NULL;
    g->slots = NULL;
    g->binds = NULL;
    g->n_binds = 0;
}

void lz_cu_graph_free(lz_cu_graph *g)
{
    if (!g) return;
    drop_graph(g);
    free(g->seen);
    free(g->varies);
    free(g->bound);
    free(g->use);
    free(g);
}

static const char *build(lz_cu_graph *g, const lz_cu_plan *pl, const void *const *kernels, void *const *ptrs,
                         void *arena)
{
    const lz_program *p = pl->prog;
    drop_graph(g);
    /* the fixed buffers, one region each */
    size_t total = 0;
    int n = 0;
    for (int v = 0; v < p->n_values; v++) {
        g->bound[v] = g->varies[v] && p->values[v].nbytes;
        if (g->bound[v]) {
            total += (p->values[v].nbytes + 255) / 256 * 256;
            n++;
        }
    }
    g->binds = calloc((size_t)(n ? n : 1), sizeof *g->binds);
    if (!g->binds) return "cuda: out of host memory building a graph";
    cudaError_t e = total ? cudaMallocAsync(&g->slots, total, lz_cu.stream) : cudaSuccess;
    if (e != cudaSuccess) {
        cudaGetLastError();
        g->slots = NULL;
        return lz_cu_errf(e, "out of device memory: %zu bytes asked for a graph's fixed buffers", total);
    }
    size_t at = 0;
    for (int v = 0; v < p->n_values; v++) {
        g->use[v] = ptrs[v];
        if (!g->bound[v]) continue;
        bind *b = &g->binds[g->n_binds++];
        *b = (bind){v, p->values[v].kind == LZ_VALUE_OUTPUT, p->values[v].nbytes, (char *)g->slots + at, NULL};
        g->use[v] = b->slot;
        at += (b->bytes + 255) / 256 * 256;
    }
    for (int v = 0; v < p->n_values; v++)
        if (p->values[v].kind == LZ_VALUE_VIEW) g->use[v] = g->use[p->values[v].view_of];

    /* the plan's work, captured */
    cudaGraph_t body = NULL;
    int64_t launches = 0;
    e = cudaStreamBeginCapture(lz_cu.capture, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return lz_cu_err("beginning a graph capture", e);
    const char *why = lz_cu_issue(pl, kernels, g->use, arena, lz_cu.capture, &launches);
    e = cudaStreamEndCapture(lz_cu.capture, &body);
    if (why || e != cudaSuccess) {
        if (body) cudaGraphDestroy(body);
        cudaGetLastError();
        return why ? why : lz_cu_err("capturing a graph", e);
    }
    if (!g->n_binds) {
        g->graph = body;
    } else {
        /* copies in, the work as a child graph after them, copies out */
        cudaGraphNode_t *ins = malloc(sizeof *ins * (size_t)g->n_binds), child;
        size_t n_in = 0;
        e = ins ? cudaGraphCreate(&g->graph, 0) : cudaErrorMemoryAllocation;
        for (int k = 0; k < g->n_binds && e == cudaSuccess; k++) {
            bind *b = &g->binds[k];
            if (b->out) continue;
            e = cudaGraphAddMemcpyNode1D(&b->node, g->graph, NULL, 0, b->slot, ptrs[b->value], b->bytes,
                                         cudaMemcpyDeviceToDevice);
            if (e == cudaSuccess) ins[n_in++] = b->node;
        }
        if (e == cudaSuccess) e = cudaGraphAddChildGraphNode(&child, g->graph, ins, n_in, body);
        for (int k = 0; k < g->n_binds && e == cudaSuccess; k++) {
            bind *b = &g->binds[k];
            if (b->out)
                e = cudaGraphAddMemcpyNode1D(&b->node, g->graph, &child, 1, ptrs[b->value], b->slot, b->bytes,
                                             cudaMemcpyDeviceToDevice);
        }
        free(ins);
        cudaGraphDestroy(body);   /* the child node holds its own copy */
        if (e != cudaSuccess) return lz_cu_err("building a graph", e);
    }
    e = cudaGraphInstantiate(&g->exec, g->graph, 0);
    if (e != cudaSuccess) {
        g->exec = NULL;
        return lz_cu_err("instantiating a graph", e);
    }
    return NULL;
}

int lz_cu_graph_run(lz_cu_graph **gp, const lz_cu_plan *pl, const void *const *kernels, void *const *ptrs,
                    void *arena, const char **msg)
{
    const lz_program *p = pl->prog;
    lz_cu_graph *g = *gp;
    *msg = NULL;
    if (!g) {   /* the first run: note the buffers, go kernel by kernel */
        g = calloc(1, sizeof *g);
        if (g) {
            const size_t n = (size_t)(p->n_values ? p->n_values : 1);
            g->seen = malloc(sizeof *g->seen * n);
            g->use = malloc(sizeof *g->use * n);
            g->varies = calloc(n, 1);
            g->bound = calloc(n, 1);
            if (!g->seen || !g->use || !g->varies || !g->bound) {
                lz_cu_graph_free(g);
                return 0;
            }
            memcpy(g->seen, ptrs, sizeof *ptrs * (size_t)p->n_values);
            g->n_values = p->n_values;
        }
        *gp = g;
        return 0;
    }
    int rebuild = !g->exec;
    size_t copied = 0;
    for (int v = 0; v < p->n_values; v++) {
        const int kind = p->values[v].kind;
        if (kind != LZ_VALUE_INPUT && kind != LZ_VALUE_OUTPUT) continue;
        if (ptrs[v] != g->seen[v]) g->varies[v] = 1;
        if (g->varies[v]) copied += p->values[v].nbytes;
        if (g->varies[v] && !g->bound[v] && p->values[v].nbytes) rebuild = 1;
        /* an unbound value must be where the graph was captured with it */
        if (!g->bound[v] && g->exec && ptrs[v] != g->use[v]) rebuild = 1;
    }
    if (g->broken || copied > lz_cu.graph_copy_bytes) return 0;
    const char *why = rebuild ? build(g, pl, kernels, ptrs, arena) : NULL;
    if (why) {
        /* the runs stay right without a graph: kernel by kernel, said once */
        static int said;
        if (!said++)
            fprintf(stderr, "lazyc: warning: cuda: an executable runs kernel by kernel: its CUDA graph could "
                            "not be made (%s)\n", why);
        drop_graph(g);
        g->broken = 1;
        return 0;
    }
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < g->n_binds && e == cudaSuccess; k++) {
        const bind *b = &g->binds[k];
        e = b->out ? cudaGraphExecMemcpyNodeSetParams1D(g->exec, b->node, ptrs[b->value], b->slot, b->bytes,
                                                        cudaMemcpyDeviceToDevice)
                   : cudaGraphExecMemcpyNodeSetParams1D(g->exec, b->node, b->slot, ptrs[b->value], b->bytes,
                                                        cudaMemcpyDeviceToDevice);
    }
    if (e == cudaSuccess) e = cudaGraphLaunch(g->exec, lz_cu.stream);
    if (e != cudaSuccess) *msg = lz_cu_err("launching a graph", e);
    return 1;
}
