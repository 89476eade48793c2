/* The CPU backend: host memory as device memory, kernels picked once per
 * executable at compile time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/buffer_pool.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/scratch.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "base/profile.h"
#include "comm/comm.h"

typedef struct cpu_step {
    lz_kernel kernel;
    const lz_stateful_kernel *stateful;   /* with state: runs instead of kernel */
    void *state;
    int library;   /* the state runs a library primitive (the profile says so) */
} cpu_step;

struct lz_backend_exec {
    const lz_program *prog;
    cpu_step steps[];        /* one per step */
};

static void cpu_copy(void *dst, const void *src, size_t nbytes) { memcpy(dst, src, nbytes); }

static void cpu_release(lz_backend_exec *e)
{
    for (int i = 0; i < e->prog->n_steps; i++)
        if (e->steps[i].state) e->steps[i].stateful->release(e->steps[i].state);
    free(e);
}

static void *make_sgemm_kernels(void *arg)
{
    lz_cpu_sgemm_make_kernels();
    return arg;
}

/* The process's first prepare of a program with products has a thread
   make oneDNN's sgemm kernels while it creates the executable's
   primitives (the first step made them in its first product, after the
   compile), and joins it before it returns: nothing outlives the compile,
   so a program that exits right after one exits cleanly. */
static int sgemm_thread_start(const lz_program *p, pthread_t *t)
{
    static atomic_flag started = ATOMIC_FLAG_INIT;
    int products = 0;   /* the steps that may run sgemm */
    for (int i = 0; i < p->n_steps && !products; i++)
        products = p->steps[i].op == LZ_OP_MATMUL || p->steps[i].op == LZ_OP_CONV2D ||
                   p->steps[i].op == LZ_OP_CONV2D_GRAD_INPUT ||
                   p->steps[i].op == LZ_OP_CONV2D_GRAD_WEIGHT;
    if (!products || atomic_flag_test_and_set(&started)) return 0;
    return pthread_create(t, NULL, make_sgemm_kernels, NULL) == 0;   /* else the first product makes them */
}

static lz_backend_exec *cpu_prepare(lz_program *p)
{
    lz_backend_exec *e = calloc(1, sizeof *e + sizeof(cpu_step) * (size_t)(p->n_steps + 1));
    if (!e) return lz_errorf("out of memory preparing %d kernels", p->n_steps);
    e->prog = p;
    pthread_t sgemm_thread;
    const int joining = sgemm_thread_start(p, &sgemm_thread);
    for (int i = 0; i < p->n_steps; i++) {
        cpu_step *cs = &e->steps[i];
        cs->kernel = lz_cpu_kernel_for((lz_op)p->steps[i].op);
        if (!cs->kernel) {
            if (joining) pthread_join(sgemm_thread, NULL);
            cpu_release(e);
            return lz_errorf("cpu backend: no kernel for op %s", lz_op_name((lz_op)p->steps[i].op));
        }
        cs->stateful = lz_cpu_stateful_kernel_for((lz_op)p->steps[i].op);
        if (cs->stateful) cs->state = cs->stateful->prepare(p, &p->steps[i]);
        cs->library = cs->state && cs->stateful->library(cs->state);
        p->steps[i].scratch_bytes = cs->state ? cs->stateful->scratch_bytes(cs->state) : 0;
    }
    if (joining) pthread_join(sgemm_thread, NULL);
    return e;
}

/* The in-place tail runs whole or not at all (compile/inplace.c): its
   kernels' faults are drawn before the first of them runs, so a failed
   step has written nothing over its inputs. */
static const char *injected_fault(const lz_program *p, int i)
{
    if (i > p->commit_from) return NULL;
    int end = i == p->commit_from ? p->n_steps : i + 1;
    for (int j = i; j < end; j++)
        if (lz_fault_hit(LZ_FAULT_KERNEL)) return lz_fault_kernel_message(lz_op_name((lz_op)p->steps[j].op));
    return NULL;
}

static const char *cpu_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    const lz_program *p = e->prog;
    for (int i = 0; i < p->n_steps; i++) {
        const char *fault = injected_fault(p, i);
        if (fault) {
            lz_comm_abandon(fault);
            return fault;
        }
        const cpu_step *cs = &e->steps[i];
        /* MPI moves a started sum's data only inside its calls */
        if (lz_comm_in_flight()) lz_comm_progress();
        const int timed = lz_profile_on();
        const double t0 = timed ? lz_now_ms() : 0;
        const lz_instr *s = &p->steps[i];
        void *scratch = s->scratch_bytes ? (char *)arena + s->scratch_offset : NULL;
        const char *err = cs->state ? cs->stateful->run(cs->state, p, s, ptrs, scratch)
                                    : cs->kernel(p, s, ptrs);
        if (err) {
            lz_comm_abandon(err);
            return err;
        }
        if (timed) lz_profile_add(p->steps[i].op, cs->library, lz_now_ms() - t0);
    }
    return NULL;
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
        .to_device = cpu_copy, .to_host = cpu_copy, .copy = cpu_copy,
        .prepare = cpu_prepare, .run = cpu_run, .release = cpu_release,
        .trim = cpu_trim,
        .layout_block = lz_cpu_layout_block, .operand_layouts = lz_cpu_operand_layouts,
        .conv_f32_faster = lz_cpu_conv_f32_faster,
    };
    return &cpu;
}
