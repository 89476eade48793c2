/* The CPU kernel for fused element-wise chains (compile/fuse.c).
 *
 * The element range is cut into tiles small enough that every micro-op's
 * tile stays in L1. For each tile the micro-ops run in order, each as one
 * call of the element-wise kernel's own row function (so the formulas and
 * their vectorised loops are those of the unfused kernel, and the results
 * are bitwise the same): operands come from earlier micro-ops' tiles, from
 * memory at the tile's offset, or from a broadcast operand gathered into a
 * tile. A result that must be kept is written straight to its memory; the
 * others never leave the tile.
 */
#include <stdint.h>
#include <string.h>

#include "backends/cpu/kernels.h"

#define TILE 512
/* as the element-wise kernel: below this OpenMP's fork costs more */
#define PAR_MIN 32768

/* A broadcast operand, folded to as few dimensions as its strides allow. */
typedef struct bcast {
    int nd;
    int64_t shp[LZ_MAX_DIMS], st[LZ_MAX_DIMS];
} bcast;

/* An operand broadcast over the micro-op's output, through the output's
   element order (lz_order_strides: plain or channel-blocked). */
static void fold(const lz_value *in, const lz_value *out, bcast *b)
{
    int64_t shp[LZ_MAX_DIMS + 1], st[LZ_MAX_DIMS + 1];
    const int nd = lz_order_strides(in, out, shp, st);
    b->nd = 0;
    for (int d = 0; d < nd; d++) {
        int64_t n = shp[d];
        if (n == 1) continue;
        if (b->nd > 0 && b->st[b->nd - 1] == st[d] * n) {
            b->shp[b->nd - 1] *= n;
            b->st[b->nd - 1] = st[d];
        } else {
            b->shp[b->nd] = n;
            b->st[b->nd] = st[d];
            b->nd++;
        }
    }
    if (b->nd == 0) {
        b->shp[0] = 1;
        b->st[0] = 0;
        b->nd = 1;
    }
}

/* dst[0..len) = the operand's elements e0..e0+len of the output order */
static void gather(float *dst, const float *base, const bcast *b, int64_t e0, int64_t len)
{
    int nd = b->nd;
    int64_t idx[LZ_MAX_DIMS], off = 0, rem = e0;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % b->shp[d];
        rem /= b->shp[d];
        off += idx[d] * b->st[d];
    }
    int64_t s = b->st[nd - 1];
    for (int64_t i = 0; i < len;) {
        int64_t run = b->shp[nd - 1] - idx[nd - 1];
        if (run > len - i) run = len - i;
        if (s == 0) {
            float x = base[off];
            for (int64_t j = 0; j < run; j++) dst[i + j] = x;
        } else {
            for (int64_t j = 0; j < run; j++) dst[i + j] = base[off + j * s];
        }
        i += run;
        idx[nd - 1] += run;
        off += run * s;
        for (int d = nd - 1; d > 0 && idx[d] == b->shp[d]; d--) {
            off += b->st[d - 1] - idx[d] * b->st[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static const char *k_fused(const lz_program *p, const lz_instr *s, void *const *ptrs)
{
    const lz_fused *f = s->fused;
    if (!f || f->n_ops < 1 || f->n_ops > LZ_FUSED_MAX_OPS) return "fused kernel: no micro-program";
    int n_ops = f->n_ops;
    lz_cpu_row_fn row[LZ_FUSED_MAX_OPS];
    size_t out_size[LZ_FUSED_MAX_OPS];
    bcast bc[LZ_FUSED_MAX_OPS][LZ_FUSED_MAX_IN];
    for (int k = 0; k < n_ops; k++) {
        row[k] = lz_cpu_elementwise_row(p, &f->ops[k]);
        if (!row[k]) return "fused kernel: operand dtype not supported by this op";
        out_size[k] = lz_dtype_size((lz_dtype)p->values[f->ops[k].out].dtype);
        /* tiles hold floats: a bf16 result (a cast) goes to memory */
        if (out_size[k] != sizeof(float) && !f->store[k]) return "fused kernel: a bf16 result must be stored";
        /* every micro-op walks the group's order: the step's output's layout */
        lz_value order = p->values[f->ops[k].out];
        order.block = p->values[s->out].block;
        for (int a = 0; a < f->ops[k].n_in; a++)
            if (f->args[k][a].kind == LZ_FUSED_BCAST)
                fold(&p->values[f->args[k][a].ref], &order, &bc[k][a]);
    }
    int64_t numel = f->numel, tiles = (numel + TILE - 1) / TILE;

    LZ_PAR_FOR(numel > PAR_MIN, t, tiles, {
        _Alignas(64) float tile[LZ_FUSED_MAX_OPS][TILE];
        _Alignas(64) float gathered[LZ_FUSED_MAX_IN][TILE];
        void *res[LZ_FUSED_MAX_OPS];
        int64_t e0 = t * TILE, len = numel - e0 < TILE ? numel - e0 : TILE;
        for (int k = 0; k < n_ops; k++) {
            const lz_instr *op = &f->ops[k];
            const void *src[LZ_FUSED_MAX_IN];
            int64_t st[LZ_FUSED_MAX_IN];
            for (int a = 0; a < op->n_in; a++) {
                lz_fused_arg arg = f->args[k][a];
                const float *mem = arg.kind == LZ_FUSED_TILE ? NULL : ptrs[arg.ref];
                st[a] = 1;
                switch (arg.kind) {
                case LZ_FUSED_TILE: src[a] = res[arg.ref]; break;
                case LZ_FUSED_CONTIG: src[a] = mem + e0; break;
                case LZ_FUSED_SCALAR: src[a] = mem; st[a] = 0; break;
                default:
                    gather(gathered[a], mem, &bc[k][a], e0, len);
                    src[a] = gathered[a];
                    break;
                }
            }
            /* kept results go straight to memory: the memory plan never
               places an output over an input of the same step */
            res[k] = f->store[k] ? (char *)ptrs[op->out] + e0 * (int64_t)out_size[k] : (void *)tile[k];
            row[k](res[k], src, st, len, op->fattr);
        }
    });
    return NULL;
}

lz_kernel lz_cpu_fused_kernel(lz_op op)
{
    return op == LZ_OP_FUSED_ELEMENTWISE ? k_fused : NULL;
}
