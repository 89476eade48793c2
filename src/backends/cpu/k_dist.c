/* The data-parallel sum as two steps (base/op.h): start packs the inputs
 * into its result and hands it to MPI; wait blocks only if the sum has not
 * finished while the steps between ran (the executor lets it progress
 * between kernels), then divides by the rank count for a mean. */
#include <string.h>

#include "backends/cpu/kernels.h"
#include "comm/comm.h"

static const char *k_allreduce_start(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    char *out = ptrs[s->out];
    size_t off = 0;
    for (int k = 0; k < s->n_in; k++) {
        const size_t nb = p->values[s->in[k]].nbytes;
        memcpy(out + off, ptrs[s->in[k]], nb);
        off += nb;
    }
    const int64_t n = p->values[s->out].numel;
    /* the signature every rank must share: the graph, the place of this
       sum in it, its length */
    uint64_t sig = lz_hash_mix(lz_hash_mix((uint64_t)s->iattr[0], (uint64_t)s->iattr[1]), (uint64_t)n);
    return lz_comm_allreduce_start((float *)(void *)out, n, sig);
}

static const char *k_allreduce_wait(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    float *in = ptrs[s->in[0]], *out = ptrs[s->out];
    const char *err = lz_comm_allreduce_wait(in);
    if (err) return err;
    const int64_t n = p->values[s->out].numel;
    const float scale = s->iattr[0] ? 1.0f / (float)lz_comm_size() : 1.0f;
    if (scale == 1.0f) {
        if (out != in) memcpy(out, in, (size_t)n * sizeof *out);
        return NULL;
    }
    LZ_PAR_FOR(n > 65536, i, n, { out[i] = in[i] * scale; });
    return NULL;
}

lz_kernel lz_cpu_dist_kernel(lz_op op)
{
    switch (op) {
    case LZ_OP_ALLREDUCE_START: return k_allreduce_start;
    case LZ_OP_ALLREDUCE_WAIT: return k_allreduce_wait;
    default: return NULL;
    }
}
