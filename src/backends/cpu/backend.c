/* The CPU backend: host memory as device memory, kernels picked once per
 * executable at compile time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backends/cpu/buffer_pool.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/product_choice.h"
#include "backends/cpu/product_time.h"
#include "backends/cpu/random_fill.h"
#include "backends/cpu/scratch.h"
#include "base/bf16.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/profile.h"
#include "comm/comm.h"

typedef struct cpu_instr {
    lz_kernel kernel;
    const lz_stateful_kernel *stateful;   /* with state: runs instead of kernel */
    void *state;
    int library;   /* the state runs a library primitive (the profile says so) */
} cpu_instr;

struct lz_backend_exec {
    const lz_program *prog;
    cpu_instr instrs[];       /* one per instruction */
};

/* Host memory is the device's: transfers and copies are memcpy, done when
   they return (the contract's order holds trivially). */
static const char *cpu_copy(void *dst, const void *src, size_t nbytes)
{
    memcpy(dst, src, nbytes);
    return NULL;
}

static const char *cpu_fill(void *dst, size_t nbytes, const void *value, size_t width)
{
    const unsigned char *v = value;
    size_t same = 1;
    while (same < width && v[same] == v[0]) same++;
    if (same == width) {   /* zeros, and any value of one repeated byte */
        memset(dst, v[0], nbytes);
        return NULL;
    }
    if (width == 2) {
        uint16_t x;
        memcpy(&x, value, 2);
        for (size_t i = 0; i < nbytes / 2; i++) ((uint16_t *)dst)[i] = x;
    } else if (width == 4) {
        uint32_t x;
        memcpy(&x, value, 4);
        for (size_t i = 0; i < nbytes / 4; i++) ((uint32_t *)dst)[i] = x;
    } else if (width == 8) {
        uint64_t x;
        memcpy(&x, value, 8);
        for (size_t i = 0; i < nbytes / 8; i++) ((uint64_t *)dst)[i] = x;
    } else {
        return "cpu backend: a fill of width other than 1, 2, 4 or 8 bytes";
    }
    return NULL;
}

static const char *cpu_fill_random(void *dst, int64_t n, uint64_t seed, int dist, float a, float b)
{
    lz_cpu_fill_random(dst, n, seed, dist, a, b);
    return NULL;
}

static const char *cpu_to_bf16(void *dst, const void *src, int64_t n)
{
    const float *s = src;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = lz_f32_to_bf16(s[i]);
    return NULL;
}

static pthread_mutex_t sgemm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t sgemm_thread;
static int sgemm_started, sgemm_running;
static atomic_int sgemm_made;

static void *make_sgemm_kernels(void *arg)
{
    lz_cpu_sgemm_make_kernels();
    atomic_store(&sgemm_made, 1);
    return arg;
}

/* The process's first prepare of a program with products starts a thread
   that makes oneDNN's sgemm kernels (tens of ms; else the first product
   makes them inside the first step: docs/performance.md, "Time to first
   step") while the compile goes
   on. The compile joins it before it returns, through cpu_ready or, when
   it stops early, cpu_release: nothing outlives the compile, so a program
   that exits right after one exits cleanly (oneDNN's kernels are static
   objects destroyed at exit). */
static void sgemm_thread_start(const lz_program *p)
{
    int products = 0;   /* the instructions that may run sgemm */
    for (int i = 0; i < p->n_instrs && !products; i++)
        products = p->instrs[i].op == LZ_OP_MATMUL || p->instrs[i].op == LZ_OP_CONV2D ||
                   p->instrs[i].op == LZ_OP_CONV2D_GRAD_INPUT ||
                   p->instrs[i].op == LZ_OP_CONV2D_GRAD_WEIGHT;
    if (!products) return;
    pthread_mutex_lock(&sgemm_mu);
    if (!sgemm_started) {
        sgemm_started = 1;   /* if the thread can't start, the first product makes them */
        sgemm_running = pthread_create(&sgemm_thread, NULL, make_sgemm_kernels, NULL) == 0;
    }
    pthread_mutex_unlock(&sgemm_mu);
}

static void sgemm_thread_join(void)
{
    pthread_mutex_lock(&sgemm_mu);
    if (sgemm_running) pthread_join(sgemm_thread, NULL);
    sgemm_running = 0;
    pthread_mutex_unlock(&sgemm_mu);
}

static void cpu_release(lz_backend_exec *e)
{
    sgemm_thread_join();
    for (int i = 0; i < e->prog->n_instrs; i++)
        if (e->instrs[i].state) e->instrs[i].stateful->release(e->instrs[i].state);
    free(e);
}

/* While the kernels are still being made, the waiting thread faults the
   arena's pages in, a write a page, instead of idling: the first run
   would fault them in anyway, and a fresh page's first touch is most of
   a first step's extra time (docs/performance.md, "Time to first step").
   It stops when the kernels are made: the rest is no longer free. */
static void cpu_ready(lz_backend_exec *e, void *arena, size_t arena_bytes)
{
    (void)e;
    pthread_mutex_lock(&sgemm_mu);
    const int running = sgemm_running;
    pthread_mutex_unlock(&sgemm_mu);
    if (running) lz_pool_fault_in(arena, arena_bytes, &sgemm_made);
    sgemm_thread_join();
}

static lz_backend_exec *cpu_prepare(lz_program *p)
{
    lz_backend_exec *e = calloc(1, sizeof *e + sizeof(cpu_instr) * (size_t)(p->n_instrs + 1));
    if (!e) return lz_errorf("out of memory preparing %d kernels", p->n_instrs);
    e->prog = p;
    sgemm_thread_start(p);
    for (int i = 0; i < p->n_instrs; i++) {
        cpu_instr *cs = &e->instrs[i];
        cs->kernel = lz_cpu_kernel_for((lz_op)p->instrs[i].op);
        if (!cs->kernel) {
            cpu_release(e);
            return lz_errorf("cpu backend: no kernel for op %s", lz_op_name((lz_op)p->instrs[i].op));
        }
        cs->stateful = lz_cpu_stateful_kernel_for((lz_op)p->instrs[i].op);
        if (cs->stateful) cs->state = cs->stateful->prepare(p, &p->instrs[i]);
        cs->library = cs->state && cs->stateful->library(cs->state);
        p->instrs[i].scratch_bytes = cs->state ? cs->stateful->scratch_bytes(cs->state) : 0;
    }
    return e;
}

/* The in-place tail runs whole or not at all (compile/inplace.c): its
   kernels' faults are drawn before the first of them runs, so a failed
   step has written nothing over its inputs. */
static const char *injected_fault(const lz_program *p, int i)
{
    if (i > p->commit_from) return NULL;
    int end = i == p->commit_from ? p->n_instrs : i + 1;
    for (int j = i; j < end; j++)
        if (lz_fault_hit(LZ_FAULT_KERNEL)) return lz_fault_kernel_message(lz_op_name((lz_op)p->instrs[j].op));
    return NULL;
}

static const char *run_instrs(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    const lz_program *p = e->prog;
    lz_metrics_add_launches(0, p->n_instrs);   /* one call per kernel */
    for (int i = 0; i < p->n_instrs; i++) {
        const char *fault = injected_fault(p, i);
        if (fault) {
            lz_comm_abandon(fault);
            return fault;
        }
        const cpu_instr *cs = &e->instrs[i];
        /* MPI moves a started sum's data only inside its calls */
        if (lz_comm_in_flight()) lz_comm_progress();
        const int timed = lz_profile_on();
        const double t0 = timed ? lz_now_ms() : 0;
        const lz_instr *s = &p->instrs[i];
        void *scratch = s->scratch_bytes ? (char *)arena + s->scratch_offset : NULL;
        const char *err = cs->state ? cs->stateful->run(cs->state, p, s, ptrs, scratch)
                                    : cs->kernel(p, s, ptrs);
        if (err) {
            lz_comm_abandon(err);
            return err;
        }
        if (timed) {
            const double ms = lz_now_ms() - t0;
            if (!lz_profile_steps_on()) {
                lz_profile_add(s->op, cs->library, ms);
            } else {
                char text[LZ_PROFILE_OPERANDS];
                lz_instr_operands(p, s, text, sizeof text);
                lz_profile_add_step(s->op, cs->library, text, lz_instr_flops(p, s), ms);
            }
        }
    }
    return NULL;
}

/* Never beside a product's timing (product_time.h). */
static const char *cpu_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    lz_cpu_kernels_lock();
    const char *err = run_instrs(e, ptrs, arena);
    lz_cpu_kernels_unlock();
    return err;
}

/* lz_shutdown, with the executor stopped: no kernel holds scratch. */
static void cpu_trim(void)
{
    lz_pool_trim();
    lz_cpu_scratch_trim();
    lz_dnnl_conv_trim();
}

const lz_backend *lz_backend_cpu(void)
{
    static const lz_backend cpu = {
        .name = "cpu", .alloc = lz_pool_alloc, .free = lz_pool_free,
        .to_device = cpu_copy, .to_host = cpu_copy, .copy = cpu_copy, .fill = cpu_fill,
        .fill_random = cpu_fill_random, .to_bf16 = cpu_to_bf16,
        .prepare = cpu_prepare, .run = cpu_run, .ready = cpu_ready, .release = cpu_release,
        .trim = cpu_trim,
        .layout_block = lz_cpu_program_block, .operand_layouts = lz_cpu_operand_layouts,
        .product_f32_faster = lz_cpu_product_f32_faster,
    };
    return &cpu;
}
