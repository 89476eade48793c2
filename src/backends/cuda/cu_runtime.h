/* The CUDA backend's device half: the one device the process uses, its
 * stream (the contract's in-order queue), the kernel modules, the
 * libraries' handles, and the pieces each file of backends/cuda/cu_*.c
 * gives the others. Internal to backends/cuda/. */
#ifndef LZ_CU_RUNTIME_H
#define LZ_CU_RUNTIME_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

typedef struct lz_cu_device {
    const lz_backend_host *host;
    int device, arch, sms;          /* arch: 90 for sm_90 */
    char name[256];
    size_t total_bytes;
    /* every call of the contract goes on `stream`, in the order asked;
       graphs are captured on `capture` (never run there), so the other
       thread's transfers are never caught in a capture */
    cudaStream_t stream, capture;
    cudaEvent_t read_done;               /* to_host's (the recording thread's alone) */
    cudaMemPool_t pool;
    lz_cu_status *status, *status_dev;   /* mapped pinned memory kernels report bad data to */
    pthread_mutex_t mu;                  /* modules, the status word's reading */
    cudaLibrary_t modules[LZ_CU_N_MODULES];
    void *lt;                            /* cublasLtHandle_t */
    void *dnn_prepare, *dnn_run;         /* cudnnHandle_t: the recording thread's, the executor's */
    int tf32, graphs, use_cache;
    size_t graph_copy_bytes;
    char cache_dir[4096];
} lz_cu_device;

extern lz_cu_device lz_cu;

/* The calling thread's current device is lz_cu.device (the runtime's is
   per thread, device 0 by default): every entry point calls it first. */
void lz_cu_bind_thread(void);

/* "cuda: <what>: <CUDA's message> (<its name>)" in a thread-local buffer */
const char *lz_cu_err(const char *what, cudaError_t e);
/* The same, printf-style what. */
const char *lz_cu_errf(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A message in the thread-local buffer. */
const char *lz_cu_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A family module, compiled (or read from the NVRTC cache) and loaded on
   first use. NULL + *why. */
cudaLibrary_t lz_cu_module(int module, const char **why);
/* kernel `name` of a loaded module or library; NULL + *why */
const void *lz_cu_kernel(cudaLibrary_t lib, const char *name, const char **why);
/* a family kernel launched on the stream over n threads (blocks of
   LZ_CU_BLOCK): the contract's own work (fills, draws, casts). NULL or a
   message. */
const char *lz_cu_launch_family(int module, const char *kernel, const void *args, int64_t threads);

/* The status word: a message for bad data a kernel reported (and the word
   cleared), or NULL. */
const char *lz_cu_status_take(void);

/* ---- cu_memory.c: the contract's memory and transfer members ---- */
void *lz_cu_alloc(size_t nbytes);
void lz_cu_free(void *p, size_t nbytes);
const char *lz_cu_to_device(void *dst, const void *src, size_t nbytes);
const char *lz_cu_to_host(void *dst, const void *src, size_t nbytes);
const char *lz_cu_device_copy(void *dst, const void *src, size_t nbytes);
const char *lz_cu_fill(void *dst, size_t nbytes, const void *value, size_t width);
const char *lz_cu_fill_random(void *dst, int64_t n, uint64_t seed, int dist, float a, float b);
const char *lz_cu_to_bf16(void *dst, const void *src, int64_t n);
void lz_cu_trim(void);

/* ---- cu_staging.c: pinned host memory for host-to-device copies ---- */
/* the ring of `bytes` (0: none, copies then go from pageable memory) */
const char *lz_cu_staging_init(size_t bytes);
/* dst <- src through the ring, on the stream; src reusable on return */
const char *lz_cu_staged_copy(void *dst, const void *src, size_t nbytes);
void lz_cu_staging_free(void);

/* ---- cu_exec.c: programs ---- */
lz_backend_exec *lz_cu_prepare(lz_program *p);
const char *lz_cu_run(lz_backend_exec *e, void *const *ptrs, void *arena);
void lz_cu_ready(lz_backend_exec *e, void *arena, size_t arena_bytes);
void lz_cu_release(lz_backend_exec *e);

/* ---- cu_issue.c ---- */
/* Issues every action of the plan on stream s with the values at ptrs
   (the step's scratch at arena + its offset): eagerly, or into a graph
   being captured on s. *launches counts the kernels and library calls.
   NULL or a message naming the step. */
const char *lz_cu_issue(const lz_cu_plan *pl, const void *const *kernels, void *const *ptrs, void *arena,
                        cudaStream_t s, int64_t *launches);

/* ---- cu_graph.c: an executable's runs as one CUDA graph launch ---- */
typedef struct lz_cu_graph lz_cu_graph;
/* Runs the plan through its graph, building (or rebuilding) it when the
   values whose buffers change between runs are not those it binds. 1 when
   it ran (*msg NULL or the error), 0 when this run goes kernel by kernel:
   the executable's first (*g made, the buffers noted), or one whose
   changing buffers would copy more than LZ_CUDA_GRAPH_COPY_MIB. */
int lz_cu_graph_run(lz_cu_graph **g, const lz_cu_plan *pl, const void *const *kernels, void *const *ptrs,
                    void *arena, const char **msg);
void lz_cu_graph_free(lz_cu_graph *g);

/* ---- cu_matmul.c, cu_conv.c: the libraries ---- */
const char *lz_cu_matmul_load(lz_cu_matmul *m, lz_cu_instr *st);
const char *lz_cu_matmul_run(const lz_cu_matmul *m, void *const *ptrs, void *scratch, cudaStream_t s);
void lz_cu_matmul_unload(lz_cu_matmul *m);
const char *lz_cu_conv_load(lz_cu_conv *c, lz_cu_instr *st);
const char *lz_cu_conv_run(const lz_cu_conv *c, void *const *ptrs, void *scratch, cudaStream_t s);
void lz_cu_conv_unload(lz_cu_conv *c);
const char *lz_cu_libraries_open(void);
void lz_cu_libraries_close(void);

/* a 1-d launch dimension (dim3 has no constructor in C) */
static inline dim3 lz_cu_dim3(unsigned x)
{
    dim3 d = {x, 1, 1};
    return d;
}

/* The address of ref for a run: a value's memory, the step's scratch
   (256-aligned), or the status word's device address. */
static inline void *lz_cu_addr(lz_cu_ref r, void *const *ptrs, void *scratch)
{
    char *base = r.value >= 0 ? (char *)ptrs[r.value]
               : r.value == LZ_CU_REF_SCRATCH ? (char *)scratch
               : r.value == LZ_CU_REF_STATUS ? (char *)lz_cu.status_dev : NULL;
    return base ? base + r.add : NULL;
}

#endif
