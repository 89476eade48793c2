/* A step in words, for the profile by step shape (lz_profile_read_steps):
 * what it ran on, and what a product computes, so a reader can find the
 * layers a training step's time goes to and how near the machine's peak
 * each runs. */
#include <stdio.h>

#include "base/error.h"
#include "compile/program.h"

void lz_instr_operands(const lz_program *p, const lz_instr *s, char *buf, size_t n)
{
    if (n) buf[0] = '\0';
    size_t at = 0;
    for (int k = 0; k <= s->n_in && at < n; k++) {
        const int result = k == s->n_in;
        const lz_value *v = &p->values[result ? s->out : s->in[k]];
        char shape[96], block[16] = "";
        if (v->block) snprintf(block, sizeof block, "/%d", v->block);
        at += (size_t)snprintf(buf + at, n - at, "%s%s%s%s",
                               result ? (k ? " -> " : "-> ") : k ? " " : "",
                               lz_dtype_name((lz_dtype)v->dtype),
                               lz_shape_str(shape, v->ndim, v->shape), block);
    }
}

static double numel(const lz_value *v) { return (double)v->numel; }

double lz_instr_flops(const lz_program *p, const lz_instr *s)
{
    const lz_value *out = &p->values[s->out];
    switch (s->op) {
    case LZ_OP_CONV2D:   /* y = x * w: each output sums C/g x KH x KW products */
    case LZ_OP_CONV2D_GRAD_INPUT: {   /* (gy, w) -> gx: the same products */
        const lz_value *y = s->op == LZ_OP_CONV2D ? out : &p->values[s->in[0]];
        const lz_value *w = &p->values[s->in[1]];
        return w->ndim == 4 ? 2.0 * numel(y) * (double)(w->shape[1] * w->shape[2] * w->shape[3]) : 0;
    }
    case LZ_OP_CONV2D_GRAD_WEIGHT: {   /* (x, gy) -> gw */
        const lz_value *gy = &p->values[s->in[1]];
        return out->ndim == 4
                   ? 2.0 * numel(gy) * (double)(out->shape[1] * out->shape[2] * out->shape[3]) : 0;
    }
    case LZ_OP_MATMUL: {   /* a [..., M, K] (or [..., K, M] transposed), result [..., M, N] */
        const lz_value *a = &p->values[s->in[0]];
        if (a->ndim < 2) return 0;
        const int64_t K = s->iattr[0] ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        return 2.0 * numel(out) * (double)K;
    }
    default:
        return 0;
    }
}
