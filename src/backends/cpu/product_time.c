/* Times a product in float32 and in bf16 as a program would run it: a
 * small program of its three steps (the product and its two gradients),
 * in each dtype, prepared and run by the CPU's own kernels, convolutions'
 * activations in the layout the layout plan would give them (channel
 * blocks; channels-last where bf16 runs on AMX, for both dtypes, since
 * the program's other convolutions put it there). The casts a bf16 step
 * adds are not timed: most join the step that makes the operand
 * (compile/fuse.c, fold_casts.c). */
#include "backends/cpu/product_time.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"
#include "base/error.h"
#include "base/metrics.h"
#include "base/product.h"
#include "base/switches.h"

static pthread_mutex_t kernels = PTHREAD_MUTEX_INITIALIZER;
void lz_cpu_kernels_lock(void) { pthread_mutex_lock(&kernels); }
void lz_cpu_kernels_unlock(void) { pthread_mutex_unlock(&kernels); }

enum { STEPS = 3, VALUES = 3 * STEPS, MIN_REPS = 3, MAX_REPS = 40 };
static const double SHORT_MS = 40, LONG_MS = 20;

typedef struct mini {
    lz_program p;
    lz_value v[VALUES];
    lz_instr s[STEPS];
    int in[STEPS][2];
    const lz_stateful_kernel *sk[STEPS];
    void *state[STEPS], *scratch[STEPS], *mem[VALUES];
    lz_kernel kernel[STEPS];
} mini;

static void value(lz_value *v, lz_dtype dt, int ndim, const int64_t *shape)
{
    memset(v, 0, sizeof *v);
    v->dtype = (uint8_t)dt;
    v->ndim = (uint8_t)ndim;
    v->kind = LZ_VALUE_TEMP;
    v->numel = 1;
    for (int d = 0; d < ndim; d++) v->numel *= v->shape[d] = shape[d];
    v->nbytes = (size_t)v->numel * (dt == LZ_BF16 ? 2 : 4);
}

/* Step i: op on values 3i, 3i+1 -> 3i+2, with attributes at. */
static void step(mini *m, int i, int op, const int64_t *at, int n_at)
{
    lz_instr *s = &m->s[i];
    memset(s, 0, sizeof *s);
    s->op = (uint16_t)op;
    m->in[i][0] = 3 * i;
    m->in[i][1] = 3 * i + 1;
    s->in = m->in[i];
    s->n_in = 2;
    s->out = 3 * i + 2;
    for (int k = 0; k < n_at; k++) s->iattr[k] = at[k];
}

static void program(mini *m)
{
    m->p.n_values = VALUES;
    m->p.values = m->v;
    m->p.n_instrs = STEPS;
    m->p.instrs = m->s;
    m->p.commit_from = STEPS;
}

/* [batch, r, c], or [r, c] for a batch of 1. */
static void matrix(lz_value *v, lz_dtype dt, int64_t batch, int64_t r, int64_t c)
{
    const int64_t s3[3] = {batch, r, c};
    if (batch > 1) value(v, dt, 3, s3);
    else value(v, dt, 2, s3 + 1);
}

/* y = a b, ga = g b^T, gb = a^T g (linalg.c's backward, b stored [N, K]
   when tb: linear's weight), operands of dtype dt, results float32. */
static int matmul_program(mini *m, const int64_t *d, lz_dtype dt)
{
    const int64_t Ba = d[LZ_MM_BA], Bb = d[LZ_MM_BB], M = d[LZ_MM_M], K = d[LZ_MM_K],
                  N = d[LZ_MM_N], B = Ba > Bb ? Ba : Bb;
    const int tb = d[LZ_MM_TB] != 0;
    if ((Ba != B && Ba != 1) || (Bb != B && Bb != 1) || M < 1 || K < 1 || N < 1) return -1;
    lz_value *v = m->v;
    matrix(&v[0], dt, Ba, M, K);
    matrix(&v[1], dt, Bb, tb ? N : K, tb ? K : N);
    matrix(&v[2], LZ_F32, B, M, N);
    const int64_t fwd[2] = {0, tb}, ga[2] = {0, !tb}, gb[2] = {1, 0};
    step(m, 0, LZ_OP_MATMUL, fwd, 2);
    matrix(&v[3], dt, B, M, N);
    v[4] = v[1];
    matrix(&v[5], LZ_F32, B, M, K);
    step(m, 1, LZ_OP_MATMUL, ga, 2);
    /* a^T g, or for linear g^T x */
    if (tb) {
        matrix(&v[6], dt, Bb, M, N);
        matrix(&v[7], dt, Bb, M, K);
        matrix(&v[8], LZ_F32, Bb, N, K);
    } else {
        matrix(&v[6], dt, Bb, M, K);
        matrix(&v[7], dt, Bb, M, N);
        matrix(&v[8], LZ_F32, Bb, K, N);
    }
    if (Bb != B) return -1;   /* a batch of a's against one b: folded by the caller */
    step(m, 2, LZ_OP_MATMUL, gb, 2);
    program(m);
    return 0;
}

/* The channel block of a C-channel activation under program block b. */
static int block_of(int b, int64_t C)
{
    if (b == LZ_BLOCK_CHANNELS_LAST) return C <= UINT16_MAX ? (int)C : 0;
    return b > 0 && C % b == 0 ? b : 0;
}

/* Forward, grad input and grad weight, as conv.c records them. bf16
   decides the program's block (channels-last on AMX) for either dtype. */
static int conv_program(mini *m, const int64_t *d, lz_dtype dt, int b)
{
    lz_value *v = m->v;
    const int64_t *x = d + LZ_CONV_X, *w = d + LZ_CONV_W, *y = d + LZ_CONV_Y;
    const int64_t at[7] = {d[LZ_CONV_STRIDE], d[LZ_CONV_STRIDE + 1], d[LZ_CONV_PAD],
                           d[LZ_CONV_PAD + 1], d[LZ_CONV_DIL], d[LZ_CONV_DIL + 1],
                           d[LZ_CONV_GROUPS]};
    value(&v[0], dt, 4, x);
    value(&v[1], dt, 4, w);
    value(&v[2], LZ_F32, 4, y);
    step(m, 0, LZ_OP_CONV2D, at, 7);
    value(&v[3], dt, 4, y);
    value(&v[4], dt, 4, w);
    value(&v[5], LZ_F32, 4, x);
    step(m, 1, LZ_OP_CONV2D_GRAD_INPUT, at, 7);
    value(&v[6], dt, 4, x);
    value(&v[7], dt, 4, y);
    value(&v[8], LZ_F32, 4, w);
    step(m, 2, LZ_OP_CONV2D_GRAD_WEIGHT, at, 7);
    program(m);
    if (b == 0) return 0;
    if (b < 0 && b != LZ_BLOCK_CHANNELS_LAST) return 0;
    int all = 1;   /* blocked only where every direction takes it */
    for (int i = 0; i < STEPS; i++) all &= lz_cpu_dnnl_conv_takes_blocked(&m->p, &m->s[i], b);
    if (!all) return 0;
    const int act[6] = {0, 2, 3, 5, 6, 7};
    for (int k = 0; k < 6; k++) v[act[k]].block = (uint16_t)block_of(b, v[act[k]].shape[1]);
    return 0;
}

static void release(mini *m)
{
    for (int i = 0; i < STEPS; i++) {
        if (m->state[i]) m->sk[i]->release(m->state[i]);
        free(m->scratch[i]);
    }
    for (int k = 0; k < VALUES; k++) free(m->mem[k]);
    memset(m->state, 0, sizeof m->state);
    memset(m->scratch, 0, sizeof m->scratch);
    memset(m->mem, 0, sizeof m->mem);
}

/* Kernels and memory for m's steps; 0 on success. */
static int prepare(mini *m)
{
    for (int k = 0; k < VALUES; k++) {
        const lz_value *v = &m->v[k];
        if (!(m->mem[k] = aligned_alloc(64, (v->nbytes + 63) / 64 * 64))) return -1;
        if (v->dtype == LZ_BF16) {   /* small values, in a pattern */
            uint16_t *h = m->mem[k];
            for (int64_t i = 0; i < v->numel; i++) h[i] = (uint16_t)(0x3e80 + i % 13);
        } else {
            float *f = m->mem[k];
            for (int64_t i = 0; i < v->numel; i++) f[i] = (float)(i % 17) * 0.0625f - 0.5f;
        }
    }
    for (int i = 0; i < STEPS; i++) {
        const lz_instr *s = &m->s[i];
        if (!(m->kernel[i] = lz_cpu_kernel_for((lz_op)s->op))) return -1;
        m->sk[i] = lz_cpu_stateful_kernel_for((lz_op)s->op);
        m->state[i] = m->sk[i] ? m->sk[i]->prepare(&m->p, s) : NULL;
        const size_t bytes = m->state[i] ? m->sk[i]->scratch_bytes(m->state[i]) : 0;
        if (bytes && !(m->scratch[i] = aligned_alloc(64, (bytes + 63) / 64 * 64))) return -1;
    }
    return 0;
}

/* One run of m's steps, in ms; < 0 when a kernel fails. */
static double run(mini *m)
{
    void *ptrs[VALUES];
    memcpy(ptrs, m->mem, sizeof ptrs);
    const double t0 = lz_now_ms();
    for (int i = 0; i < STEPS; i++) {
        const lz_instr *s = &m->s[i];
        const char *err = m->state[i] ? m->sk[i]->run(m->state[i], &m->p, s, ptrs, m->scratch[i])
                                      : m->kernel[i](&m->p, s, ptrs);
        if (err) return -1;
    }
    return lz_now_ms() - t0;
}

typedef struct job {
    int op;
    const int64_t *dims;
    double ms[2];   /* f32, bf16 */
    int rc;
} job;

static void *time_job(void *arg)
{
    job *j = arg;
    mini *m = calloc(2, sizeof *m);   /* [0] float32, [1] bf16 */
    j->rc = m ? 0 : -1;
    int b = 0;
    if (!j->rc && j->op == LZ_OP_CONV2D) {
        j->rc = conv_program(&m[1], j->dims, LZ_BF16, 0);
        b = lz_blocked_layouts_enabled() ? lz_cpu_program_block(&m[1].p) : 0;
        for (int k = 0; k < 2 && !j->rc; k++)
            j->rc = conv_program(&m[k], j->dims, k ? LZ_BF16 : LZ_F32, b);
    } else if (!j->rc) {
        for (int k = 0; k < 2 && !j->rc; k++)
            j->rc = matmul_program(&m[k], j->dims, k ? LZ_BF16 : LZ_F32);
    }
    for (int k = 0; k < 2 && !j->rc; k++) j->rc = prepare(&m[k]);
    /* in turn after a warm-up each (whose first calls make kernels), f32
       bf16 bf16 f32 ...: the best of MIN_REPS or more, up to MAX_REPS
       while under SHORT_MS in all (a short product is cheap to repeat, and
       on a shared machine one slice of another job's time can be longer
       than it); of one, for long ones where one dtype took 1.5x the other */
    j->ms[0] = j->ms[1] = 1e300;
    const double t0 = lz_now_ms();
    for (int r = 0; r <= MAX_REPS && !j->rc; r++) {
        for (int t = 0; t < 2 && !j->rc; t++) {
            const int k = (r + t) % 2;
            const double ms = run(&m[k]);
            if (ms < 0) j->rc = -1;
            else if (r > 0 && ms < j->ms[k]) j->ms[k] = ms;
        }
        const double lo = j->ms[0] < j->ms[1] ? j->ms[0] : j->ms[1];
        const double hi = j->ms[0] < j->ms[1] ? j->ms[1] : j->ms[0];
        if (r == 1 && lo >= LONG_MS && hi > 1.5 * lo) break;
        if (r >= MIN_REPS && lz_now_ms() - t0 > SHORT_MS) break;
    }
    for (int k = 0; m && k < 2; k++) release(&m[k]);
    free(m);
    return NULL;
}

int lz_cpu_time_product(int op, int n, const int64_t *dims, double *ms_f32, double *ms_bf16)
{
    if ((op == LZ_OP_MATMUL && n != LZ_MM_DIMS) || (op == LZ_OP_CONV2D && n != LZ_CONV_DIMS) ||
        (op != LZ_OP_MATMUL && op != LZ_OP_CONV2D))
        return -1;
    char *saved = lz_last_error() ? strdup(lz_last_error()) : NULL;
    job j = {.op = op, .dims = dims, .rc = -1};
    pthread_t t;
    lz_cpu_kernels_lock();
    /* on a thread of its own, which leads its own OpenMP team and ends:
       the recording thread must lead none (docs/threads.md, "OpenMP") */
    if (pthread_create(&t, NULL, time_job, &j) == 0) pthread_join(t, NULL);
    lz_cpu_kernels_unlock();
    if (saved) {
        lz_errorf("%s", saved);
        free(saved);
    } else {
        lz_clear_error();
    }
    *ms_f32 = j.ms[0];
    *ms_bf16 = j.ms[1];
    return j.rc;
}
