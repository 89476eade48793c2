/* Just enough of CUDA for the CUDA backend's kernels to compile as C++ and
 * run on the host (tests/cuda/test_cuda_emulate.c): the generated
 * element-wise kernels and the family modules (kernels/k_*.cu).
 *
 * A launch runs its blocks one after the other; a block's threads are
 * fibers that run until they finish or reach a barrier (a stack switch of
 * a few instructions on x86-64; ucontext, whose switch is a system call,
 * elsewhere), so
 * __syncthreads, warp shuffles and shared memory behave as on the device
 * for kernels whose threads all reach the same barriers (every kernel of
 * the backend). Only one fiber runs at a time: atomics are plain
 * read-modify-writes. The math functions are the C library's. Not fast:
 * for smoke-sized programs. */
#ifndef LZ_CUDA_EMU_H
#define LZ_CUDA_EMU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static

struct lz_emu_dim { unsigned x, y, z; };

/* ---- the scheduler ---- */
#if defined(__x86_64__)
/* saves the callee-saved registers on the stack, the stack pointer in
   *from, and resumes the stack to (what a switch away from it saved) */
extern "C" void lz_emu_switch(void **from, void *to);
__asm__(".text\n.globl lz_emu_switch\n.hidden lz_emu_switch\n.type lz_emu_switch,@function\n"
        "lz_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n.size lz_emu_switch, .-lz_emu_switch\n");
typedef void *lz_emu_ctx;
#else
typedef ucontext_t lz_emu_ctx;
#endif
enum { LZ_EMU_RUN, LZ_EMU_BLOCK_WAIT, LZ_EMU_WARP_WAIT, LZ_EMU_DONE };
struct lz_emu_fiber {
    lz_emu_ctx ctx;
    int state;
    lz_emu_dim tid;
};
struct lz_emu_block {
    lz_emu_ctx sched;
    lz_emu_fiber *f;
    char *stacks;
    unsigned n, cur;
    void (*body)(const void *);
    const void *args;
    unsigned long long slots[1024];   /* a warp shuffle's values, by thread */
};
enum { LZ_EMU_STACK = 64 * 1024 };
static lz_emu_block lz_emu_b;
static lz_emu_dim blockIdx, blockDim, gridDim;
#define threadIdx (lz_emu_b.f[lz_emu_b.cur].tid)

/* from the running fiber back to the scheduler, and from it into fiber t */
static inline void lz_emu_to_sched(void)
{
#if defined(__x86_64__)
    lz_emu_switch(&lz_emu_b.f[lz_emu_b.cur].ctx, lz_emu_b.sched);
#else
    swapcontext(&lz_emu_b.f[lz_emu_b.cur].ctx, &lz_emu_b.sched);
#endif
}

static inline void lz_emu_to_fiber(unsigned t)
{
    lz_emu_b.cur = t;
#if defined(__x86_64__)
    lz_emu_switch(&lz_emu_b.sched, lz_emu_b.f[t].ctx);
#else
    swapcontext(&lz_emu_b.sched, &lz_emu_b.f[t].ctx);
#endif
}

static void lz_emu_trampoline(void)
{
    lz_emu_b.body(lz_emu_b.args);
    lz_emu_b.f[lz_emu_b.cur].state = LZ_EMU_DONE;
    lz_emu_to_sched();   /* never resumed */
    abort();
}

/* fiber t's stack, set to start in the trampoline */
static void lz_emu_start(unsigned t)
{
    lz_emu_fiber *f = &lz_emu_b.f[t];
    char *stack = lz_emu_b.stacks + (size_t)t * LZ_EMU_STACK;
#if defined(__x86_64__)
    /* six saved registers, then the trampoline as the return address:
       entered with the stack 8 off 16-byte alignment, as after a call */
    char *base = (char *)((unsigned long)(stack + LZ_EMU_STACK) & ~15ul);
    void **sp = (void **)(base - 64);
    for (int k = 0; k < 6; k++) sp[k] = 0;
    sp[6] = (void *)lz_emu_trampoline;
    f->ctx = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = stack;
    f->ctx.uc_stack.ss_size = LZ_EMU_STACK;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, lz_emu_trampoline, 0);
#endif
}

/* threads run one after the other as plain calls: kernels without a
   barrier (the test says which have one; a barrier here aborts) */
static int lz_emu_plain;

static void lz_emu_yield(int state)
{
    if (lz_emu_plain) {
        fprintf(stderr, "cuda_emu: a barrier in a kernel run without fibers (add it to the cooperative list)\n");
        abort();
    }
    lz_emu_b.f[lz_emu_b.cur].state = state;
    lz_emu_to_sched();
}

/* a group's waiters go on once every live thread of it waits */
static int lz_emu_release(unsigned lo, unsigned hi, int state)
{
    unsigned waiting = 0, live = 0;
    for (unsigned t = lo; t < hi; t++) {
        live += lz_emu_b.f[t].state != LZ_EMU_DONE;
        waiting += lz_emu_b.f[t].state == state;
    }
    if (!waiting || waiting != live) return 0;
    for (unsigned t = lo; t < hi; t++)
        if (lz_emu_b.f[t].state == state) lz_emu_b.f[t].state = LZ_EMU_RUN;
    return 1;
}

static void lz_emu_launch(void (*body)(const void *), const void *args, unsigned grid, unsigned block,
                          int cooperative)
{
    if (block > 1024) abort();
    if (!cooperative) {
        static lz_emu_fiber one;
        lz_emu_b.f = lz_emu_b.f ? lz_emu_b.f : &one;
        lz_emu_plain = 1;
        gridDim = lz_emu_dim{grid, 1, 1};
        blockDim = lz_emu_dim{block, 1, 1};
        lz_emu_b.cur = 0;
        for (unsigned b = 0; b < grid; b++) {
            blockIdx = lz_emu_dim{b, 0, 0};
            for (unsigned t = 0; t < block; t++) {
                lz_emu_b.f[0].tid = lz_emu_dim{t, 0, 0};
                body(args);
            }
        }
        lz_emu_plain = 0;
        return;
    }
    if (!lz_emu_b.f || lz_emu_b.stacks == NULL) {
        lz_emu_b.f = (lz_emu_fiber *)calloc(1024, sizeof(lz_emu_fiber));
        lz_emu_b.stacks = (char *)malloc((size_t)1024 * LZ_EMU_STACK);
        if (!lz_emu_b.f || !lz_emu_b.stacks) abort();
    }
    gridDim = lz_emu_dim{grid, 1, 1};
    blockDim = lz_emu_dim{block, 1, 1};
    lz_emu_b.body = body;
    lz_emu_b.args = args;
    lz_emu_b.n = block;
    for (unsigned b = 0; b < grid; b++) {
        blockIdx = lz_emu_dim{b, 0, 0};
        for (unsigned t = 0; t < block; t++) {
            lz_emu_b.f[t].state = LZ_EMU_RUN;
            lz_emu_b.f[t].tid = lz_emu_dim{t, 0, 0};
            lz_emu_start(t);
        }
        for (;;) {
            int ran = 0, done = 1;
            for (unsigned t = 0; t < block; t++) {
                if (lz_emu_b.f[t].state != LZ_EMU_RUN) continue;
                ran = 1;
                lz_emu_to_fiber(t);
            }
            int released = lz_emu_release(0, block, LZ_EMU_BLOCK_WAIT);
            for (unsigned w = 0; w < block; w += 32)
                released |= lz_emu_release(w, w + 32 < block ? w + 32 : block, LZ_EMU_WARP_WAIT);
            for (unsigned t = 0; t < block; t++) done &= lz_emu_b.f[t].state == LZ_EMU_DONE;
            if (done) break;
            if (!ran && !released) {
                fprintf(stderr, "cuda_emu: the threads of a block wait at different barriers\n");
                abort();
            }
        }
    }
}

static inline void __syncthreads() { lz_emu_yield(LZ_EMU_BLOCK_WAIT); }
static inline void __syncwarp(unsigned = 0xffffffffu) { lz_emu_yield(LZ_EMU_WARP_WAIT); }

template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o)
{
    const unsigned t = lz_emu_b.cur;
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof v);
    lz_emu_b.slots[t] = bits;
    lz_emu_yield(LZ_EMU_WARP_WAIT);            /* every lane has written */
    bits = lz_emu_b.slots[t ^ (unsigned)o];
    lz_emu_yield(LZ_EMU_WARP_WAIT);            /* every lane has read */
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752440f); }
static inline void __threadfence_system() {}
static inline int atomicCAS(int *a, int c, int v) { int o = *a; if (o == c) *a = v; return o; }
static inline int atomicExch(int *a, int v) { int o = *a; *a = v; return o; }
static inline float atomicAdd(float *a, float v) { float o = *a; *a += v; return o; }

#endif
