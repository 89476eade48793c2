/* Kernels with no arithmetic: constants, copies, the test gate. */
#include <pthread.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/test_gate.h"

static const char *k_fill(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_value *out = &p->values[s->out];
    float *y = ptrs[s->out];
    const float v = s->fattr[0];
    if (out->dtype != LZ_F32) {
        memset(ptrs[s->out], 0, out->nbytes);
        return NULL;
    }
    for (int64_t i = 0; i < out->numel; i++) y[i] = v;
    return NULL;
}

static const char *k_copy(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    memcpy(ptrs[s->out], ptrs[s->in[0]], p->values[s->out].nbytes);
    return NULL;
}

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_closed, gate_waiting;

void lz_test_gate_close(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = 1;
    pthread_mutex_unlock(&gate_mu);
}

void lz_test_gate_open(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = 0;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

int lz_test_gate_waiting(void)
{
    pthread_mutex_lock(&gate_mu);
    int w = gate_waiting;
    pthread_mutex_unlock(&gate_mu);
    return w;
}

static const char *k_test_gate(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    pthread_mutex_lock(&gate_mu);
    gate_waiting = 1;
    while (gate_closed) pthread_cond_wait(&gate_cv, &gate_mu);
    gate_waiting = 0;
    pthread_mutex_unlock(&gate_mu);
    return k_copy(p, s, ptrs);
}

lz_kernel lz_cpu_misc_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_FILL: return k_fill;
    case LZ_OP_COPY: return k_copy;
    case LZ_OP_TEST_GATE: return k_test_gate;
    default: return NULL;
    }
}
