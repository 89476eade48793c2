/* Lowering: one value per graph node, one instruction per pending node, in
 * post-order; then the passes that take kernels out (shape instructions that need
 * none: fold_expand.c, fold_slice_grad.c; fusion: fuse_bn_act.c,
 * fold_casts.c, fuse.c;
 * reshapes as views: views.c; the in-place tail: inplace.c), the backend's
 * kernel preparation, and the memory plan (memplan.c), which places the
 * values and the scratch the kernels asked for. */
#include "compile/executable.h"

#include <stdlib.h>
#include <string.h>

#include "backend/memory.h"
#include "base/error.h"
#include "base/fault.h"

static size_t dtype_bytes(int dtype) { return lz_dtype_size((lz_dtype)dtype); }

/* Multiply-adds of the ops that dominate a training step, counted once
   here so the benchmark can report achieved GFLOP/s. */
static double step_flops(const lz_program *p, const lz_instr *s)
{
    const lz_value *out = &p->values[s->out];
    switch (s->op) {
    case LZ_OP_MATMUL: {
        const lz_value *a = &p->values[s->in[0]];
        /* iattr[0] says a is stored transposed */
        int64_t k = s->iattr[0] ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        return 2.0 * (double)out->numel * (double)k;
    }
    case LZ_OP_CONV2D: {
        /* each output element: C/groups * KH * KW multiply-adds */
        const lz_value *w = &p->values[s->in[1]];
        return 2.0 * (double)out->numel * (double)(w->shape[1] * w->shape[2] * w->shape[3]);
    }
    case LZ_OP_CONV2D_GRAD_INPUT:
    case LZ_OP_CONV2D_GRAD_WEIGHT: {
        /* the same multiply-adds as the forward convolution they undo */
        const lz_value *g = &p->values[s->in[s->op == LZ_OP_CONV2D_GRAD_INPUT ? 0 : 1]];
        const lz_value *w = &p->values[s->op == LZ_OP_CONV2D_GRAD_INPUT ? s->in[1] : s->out];
        return 2.0 * (double)g->numel * (double)(w->shape[1] * w->shape[2] * w->shape[3]);
    }
    default:
        return 0;
    }
}

static void lower(const lz_graph *g, lz_program *p)
{
    p->n_values = g->n_nodes;
    p->values = lz_host_calloc((size_t)g->n_nodes, sizeof *p->values);
    p->instrs = lz_host_calloc((size_t)g->n_nodes, sizeof *p->instrs);
    if (!p->values || !p->instrs) {
        p->out_of_memory = 1;
        return;
    }
    p->n_inputs = g->n_inputs;
    p->n_outputs = g->n_outputs;
    for (int i = 0; i < g->n_nodes; i++) {
        const lz_node *n = g->nodes[i];
        lz_value *v = &p->values[i];
        v->dtype = n->dtype;
        v->ndim = n->ndim;
        memcpy(v->shape, n->shape, sizeof v->shape);
        v->numel = lz_node_numel(n);
        v->nbytes = (size_t)v->numel * dtype_bytes(n->dtype);
        v->kind = LZ_VALUE_TEMP;
        if (g->slot_of[i] >= 0) {
            v->kind = LZ_VALUE_INPUT;
            v->slot = g->slot_of[i];
            continue;
        }
        lz_instr *s = &p->instrs[p->n_instrs++];
        s->op = n->op;
        s->out = i;
        s->n_in = n->n_src;
        s->in = lz_host_malloc(sizeof *s->in * (size_t)(n->n_src ? n->n_src : 1));
        if (!s->in) {
            p->out_of_memory = 1;
            return;
        }
        for (int k = 0; k < n->n_src; k++) s->in[k] = n->src[k]->cut_index;
        memcpy(s->iattr, n->iattr, sizeof s->iattr);
        memcpy(s->fattr, n->fattr, sizeof s->fattr);
        p->flops += step_flops(p, s);
    }
    for (int o = 0; o < g->n_outputs; o++) {
        lz_value *v = &p->values[g->outputs[o]->cut_index];
        v->kind = LZ_VALUE_OUTPUT;
        v->slot = o;
    }
}

lz_executable *lz_compile(const lz_graph *g)
{
    lz_executable *e = lz_host_calloc(1, sizeof *e);
    if (!e) return lz_errorf("out of memory compiling a graph of %d nodes", g->n_nodes);
    atomic_init(&e->refs, 1);
    e->hash = g->hash;
    e->sig_len = g->sig_len;
    e->sig = lz_host_malloc(sizeof *e->sig * (g->sig_len ? g->sig_len : 1));
    if (e->sig) {
        memcpy(e->sig, g->sig, sizeof *e->sig * g->sig_len);
        lower(g, &e->prog);
        if (!e->prog.out_of_memory) lz_schedule_collectives(&e->prog, g->hash);
    }
    /* each pass leaves the program whole when it stops for memory */
    void (*const passes[])(lz_program *) = {lz_fold_expands, lz_fold_slice_grads,
                                            lz_fuse_bn_activation, lz_fold_casts, lz_fuse,
                                            lz_plan_views};
    for (size_t k = 0; e->sig && k < sizeof passes / sizeof *passes && !e->prog.out_of_memory; k++)
        passes[k](&e->prog);
    e->backend = lz_backend_current();
    if (!e->backend) {
        lz_executable_unref(e);
        return lz_errorf("no backend registered: cannot compile a graph of %d nodes", g->n_nodes);
    }
    if (e->sig && !e->prog.out_of_memory) lz_plan_layouts(&e->prog, e->backend);
    if (e->sig && !e->prog.out_of_memory) lz_plan_inplace(&e->prog);
    if (!e->sig || e->prog.out_of_memory) {
        lz_executable_unref(e);
        return lz_errorf("out of memory compiling a graph of %d nodes", g->n_nodes);
    }
    /* the kernels first: the plan places the scratch they ask for */
    e->bexec = e->backend->prepare(&e->prog);
    if (!e->bexec) {
        lz_executable_unref(e);
        return NULL;
    }
    lz_plan_memory(&e->prog);
    if (e->prog.out_of_memory) {
        lz_executable_unref(e);
        return lz_errorf("out of memory compiling a graph of %d nodes", g->n_nodes);
    }
    if (e->prog.arena_bytes) {
        e->arena = lz_device_alloc(e->prog.arena_bytes);
        if (!e->arena) {
            size_t nbytes = e->prog.arena_bytes;   /* e is gone after the unref */
            lz_executable_unref(e);
            return lz_errorf("device allocation of %zu bytes for an executable arena failed "
                             "(out of device memory)", nbytes);
        }
    }
    if (e->backend->ready) e->backend->ready(e->bexec, e->arena, e->prog.arena_bytes);
    return e;
}

void lz_executable_ref(lz_executable *e) { atomic_fetch_add(&e->refs, 1); }

void lz_executable_unref(lz_executable *e)
{
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
    if (e->bexec) e->backend->release(e->bexec);
    lz_device_free(e->arena, e->prog.arena_bytes);
    lz_program_free(&e->prog);
    free(e->sig);
    free(e);
}
