/* Programs on the device: prepare plans the program (plan.c), compiles
 * its generated element-wise source with NVRTC (read from the disk cache
 * when it was compiled before), looks every kernel up, and makes the
 * libraries' descriptors, each step's scratch (a library's workspace, a
 * reduction's partial sums) joining the memory plan's arena; run issues
 * the plan's actions on the stream (cu_issue.c), the first run kernel by
 * kernel and the later ones as one CUDA graph launch (cu_graph.c). */
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cu_runtime.h"
#include "backends/cuda/nvrtc_cache.h"

struct lz_backend_exec {
    lz_program *prog;
    lz_cu_plan *plan;
    cudaLibrary_t gen;       /* the generated kernels' module, or NULL */
    const void **kernels;    /* per launch action in plan order: its kernel */
    int n_kernels;
    void *arena;
    int64_t runs;
    lz_cu_graph *graph;
};

static void unload(lz_backend_exec *e)
{
    if (!e->plan) return;
    for (int i = 0; i < e->prog->n_instrs; i++)
        for (int k = 0; k < e->plan->instrs[i].n_act; k++) {
            lz_cu_action *a = &e->plan->instrs[i].act[k];
            if (a->kind == LZ_CU_MATMUL) lz_cu_matmul_unload(a->u.matmul);
            else if (a->kind == LZ_CU_CONV) lz_cu_conv_unload(a->u.conv);
        }
}

void lz_cu_release(lz_backend_exec *e)
{
    if (!e) return;
    lz_cu_bind_thread();
    /* work queued with this executable's kernels and descriptors may still
       run: let it finish before they go (a release is rare: eviction,
       shutdown) */
    cudaStreamSynchronize(lz_cu.stream);
    lz_cu_graph_free(e->graph);
    unload(e);
    if (e->gen) cudaLibraryUnload(e->gen);
    lz_cu_plan_free(e->plan);
    free(e->kernels);
    free(e);
}

static lz_backend_exec *fail(lz_backend_exec *e, const char *why)
{
    lz_cu.host->set_error(why);
    lz_cu_release(e);
    return NULL;
}

lz_backend_exec *lz_cu_prepare(lz_program *p)
{
    lz_cu_bind_thread();
    lz_backend_exec *e = calloc(1, sizeof *e);
    if (!e) {
        lz_cu.host->set_error("cuda: out of host memory preparing a program");
        return NULL;
    }
    e->prog = p;
    char err[1024];
    e->plan = lz_cu_plan_make(p, err, sizeof err);
    if (!e->plan) return fail(e, err);
    const char *why = NULL;
    if (e->plan->gen.len) {
        lz_cu_image img = {0};
        if (lz_cu_compile("lazyc_elementwise.cu", e->plan->gen.s, lz_cu.arch, NULL,
                          lz_cu.use_cache ? lz_cu.cache_dir : NULL, &img, err, sizeof err))
            return fail(e, err);
        cudaError_t ce = cudaLibraryLoadData(&e->gen, img.data, NULL, NULL, 0, NULL, NULL, 0);
        free(img.data);
        if (ce != cudaSuccess) {
            e->gen = NULL;
            return fail(e, lz_cu_errf(ce, "loading the generated element-wise kernels (sm_%d)", lz_cu.arch));
        }
    }
    /* every launch's kernel, and the libraries' descriptors */
    int launches = 0;
    for (int i = 0; i < p->n_instrs; i++)
        for (int k = 0; k < e->plan->instrs[i].n_act; k++) launches += e->plan->instrs[i].act[k].kind == LZ_CU_LAUNCH;
    e->kernels = calloc((size_t)(launches ? launches : 1), sizeof *e->kernels);
    if (!e->kernels) return fail(e, "cuda: out of host memory preparing a program");
    char name[32];
    for (int i = 0; i < p->n_instrs && !why; i++) {
        lz_cu_instr *st = &e->plan->instrs[i];
        for (int k = 0; k < st->n_act && !why; k++) {
            lz_cu_action *a = &st->act[k];
            if (a->kind == LZ_CU_MATMUL) {
                why = lz_cu_matmul_load(a->u.matmul, st);
            } else if (a->kind == LZ_CU_CONV) {
                why = lz_cu_conv_load(a->u.conv, st);
            } else if (a->kind == LZ_CU_LAUNCH) {
                const lz_cu_launch *l = a->u.launch;
                cudaLibrary_t lib = l->module == LZ_CU_MOD_GENERATED ? e->gen : lz_cu_module(l->module, &why);
                if (l->module == LZ_CU_MOD_GENERATED) snprintf(name, sizeof name, "lz_ew_%d", l->gen);
                if (lib) e->kernels[e->n_kernels++] = lz_cu_kernel(lib, l->module == LZ_CU_MOD_GENERATED ? name : l->kernel, &why);
            }
        }
        if (why) {
            snprintf(err, sizeof err, "%s (step %d, %s)", why, i, lz_op_name((lz_op)p->instrs[i].op));
            return fail(e, err);
        }
        /* the scratch's start is aligned at run time: 256 bytes more */
        p->instrs[i].scratch_bytes = st->scratch ? st->scratch + 256 : 0;
    }
    return e;
}

void lz_cu_ready(lz_backend_exec *e, void *arena, size_t arena_bytes)
{
    (void)arena_bytes;
    e->arena = arena;
}

const char *lz_cu_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    lz_cu_bind_thread();
    /* bad data an earlier kernel found fails the next run, as it would
       have failed its own on the CPU */
    const char *bad = lz_cu_status_take();
    if (bad) return bad;
    const char *msg = NULL;
    int64_t launches = 0;
    e->runs++;
    /* the graph module runs the first run kernel by kernel (an executable
       run once, an eager op or a warm-up, never pays an instantiation) */
    if (lz_cu.graphs && lz_cu_graph_run(&e->graph, e->plan, e->kernels, ptrs, arena, &msg)) {
        if (!msg) lz_cu.host->count_launches(1, 0);
        return msg;
    }
    msg = lz_cu_issue(e->plan, e->kernels, ptrs, arena, lz_cu.stream, &launches);
    lz_cu.host->count_launches(0, launches);
    return msg;
}
