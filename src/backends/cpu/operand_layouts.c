/* Which values the CPU kernels take channel-blocked (compile/layout_plan.c):
 * the block is oneDNN's for this machine's ISA (16 floats, one AVX-512
 * register, or 8 with AVX2), the one its convolutions run on, or, for a
 * program with bf16 convolutions on AMX, channels-last (each value's
 * channel count: lz_cpu_program_block). Kernels with a blocked form:
 * oneDNN's convolutions (each activation on its own; weights plain),
 * batch norm, max and adaptive-average pooling and their gradients, sums
 * and means over all but the channels, concatenations and slices along
 * whole channel blocks (channels-last: along any channels), and
 * element-wise steps, fused or not,
 * hardtanh and its gradient among them (an operand of another shape, a
 * per-channel bias say, is read plain through the blocked order:
 * lz_order_strides). */
#include "backend/backend.h"
#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/k_batch_norm_nhwc.h"
#include "backends/cpu/kernels.h"
#include "base/switches.h"

static int has_bf16_conv(const lz_program *p)
{
    for (int i = 0; i < p->n_instrs; i++)
        if (lz_cpu_conv_is_bf16(p, &p->instrs[i])) return 1;
    return 0;
}

/* Channels-last for a program with bf16 convolutions on AMX, whose
   oneDNN kernels read no other activation layout (bf16_isa.h), or for
   every program under LZ_BLOCKED=nhwc; else the ISA's channel block. */
int lz_cpu_program_block(const lz_program *p)
{
    const int b = lz_cpu_layout_block();
    if (!b) return 0;
    const int mode = lz_blocked_layouts_enabled();
    if (mode == LZ_BLOCKED_NHWC) return LZ_BLOCK_CHANNELS_LAST;
    if (lz_cpu_bf16_way() == LZ_BF16_NATIVE && lz_cpu_bf16_amx() && has_bf16_conv(p))
        return LZ_BLOCK_CHANNELS_LAST;
    return b;
}

static int same_shape(const lz_value *a, const lz_value *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* An element-wise kernel walks its output's order, reading an operand of
   the output's shape in that order and a broadcast one (plain) through it
   (lz_order_strides). */
static void elementwise(const lz_program *p, const lz_instr *s, uint8_t *how)
{
    const lz_value *out = &p->values[s->out];
    for (int k = 0; k < s->n_in; k++)
        how[k] = same_shape(&p->values[s->in[k]], out) ? LZ_TAKES_STEP_LAYOUT : LZ_TAKES_PLAIN;
    how[s->n_in] = LZ_TAKES_STEP_LAYOUT;
}

/* The fused kernel reads an operand in the group's order, or gathers it
   through the blocked order (broadcasts); every micro-op must have the
   output's shape for that order to be the group's. */
static void fused(const lz_program *p, const lz_instr *s, uint8_t *how)
{
    const lz_fused *f = s->fused;
    const lz_value *out = &p->values[s->out];
    int ok = f != NULL;
    for (int k = 0; ok && k < f->n_ops; k++) ok = same_shape(&p->values[f->ops[k].out], out);
    for (int k = 0; k <= s->n_in; k++) how[k] = ok ? LZ_TAKES_STEP_LAYOUT : LZ_TAKES_PLAIN;
    for (int k = 0; ok && k < s->n_in; k++)
        for (int o = 0; o < f->n_ops; o++)
            for (int a = 0; a < f->ops[o].n_in; a++)
                if (f->args[o][a].ref == s->in[k] && f->args[o][a].kind != LZ_FUSED_TILE &&
                    f->args[o][a].kind != LZ_FUSED_CONTIG)
                    how[k] = LZ_TAKES_PLAIN;
}

void lz_cpu_operand_layouts(const lz_program *p, const lz_instr *s, int b, uint8_t *how)
{
    for (int k = 0; k <= s->n_in; k++) how[k] = LZ_TAKES_PLAIN;
    switch (s->op) {
    case LZ_OP_CONV2D:
    case LZ_OP_CONV2D_GRAD_INPUT:
    case LZ_OP_CONV2D_GRAD_WEIGHT:
        if (lz_cpu_dnnl_conv_takes_blocked(p, s, b)) {
            /* activations: forward (x, w) -> y, data (dy, w) -> dx, weights (x, dy) -> dw */
            how[0] = LZ_TAKES_EITHER;
            if (s->op == LZ_OP_CONV2D_GRAD_WEIGHT) how[1] = LZ_TAKES_EITHER;
            else how[s->n_in] = LZ_TAKES_EITHER;
        }
        break;
    case LZ_OP_BATCH_NORM_STATS:
    case LZ_OP_BATCH_NORM:
    case LZ_OP_BATCH_NORM_GRAD_STATS:
    case LZ_OP_BATCH_NORM_GRAD:
        /* the channels-last kernels keep per-channel arrays of a bounded size */
        if (b == LZ_BLOCK_CHANNELS_LAST && p->values[s->in[0]].shape[1] > LZ_BN_NHWC_MAX_C) break;
        how[0] = LZ_TAKES_STEP_LAYOUT;   /* x */
        if (s->op == LZ_OP_BATCH_NORM || s->op == LZ_OP_BATCH_NORM_GRAD)
            how[s->n_in] = LZ_TAKES_STEP_LAYOUT;
        if (s->op == LZ_OP_BATCH_NORM_GRAD_STATS || s->op == LZ_OP_BATCH_NORM_GRAD)
            how[3] = LZ_TAKES_STEP_LAYOUT;   /* g */
        break;
    case LZ_OP_MAX_POOL2D:
    case LZ_OP_MAX_POOL2D_GRAD:
    case LZ_OP_ADAPTIVE_AVG_POOL2D:
    case LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD:
        for (int k = 0; k <= s->n_in; k++) how[k] = LZ_TAKES_STEP_LAYOUT;
        break;
    case LZ_OP_CAT:
    case LZ_OP_SLICE:
    case LZ_OP_SLICE_GRAD:
        /* along channels at multiples of the block: a block of b channels
           is b*H*W floats as b channels are plain, so the copies are the
           same bytes in both layouts; channels-last, along channels
           anywhere: rows of pixels (k_shape.c) */
        if (b == LZ_BLOCK_CHANNELS_LAST && s->iattr[0] == 1) {
            for (int k = 0; k <= s->n_in; k++) how[k] = LZ_TAKES_STEP_LAYOUT;
        } else if (b > 0 && s->iattr[0] == 1 && (s->op == LZ_OP_CAT || s->iattr[1] % b == 0)) {
            int whole = p->values[s->out].shape[1] % b == 0;
            for (int k = 0; k < s->n_in; k++) whole &= p->values[s->in[k]].shape[1] % b == 0;
            for (int k = 0; whole && k <= s->n_in; k++) how[k] = LZ_TAKES_STEP_LAYOUT;
        }
        break;
    case LZ_OP_SUM:
    case LZ_OP_MEAN:
        /* over N, H, W (a bias gradient) or everything: the result is a
           channel vector or a scalar, in the same order from either layout */
        if ((s->iattr[0] & 0xd) == 0xd && p->values[s->in[0]].ndim == 4) how[0] = LZ_TAKES_EITHER;
        break;
    case LZ_OP_FUSED_ELEMENTWISE:
        fused(p, s, how);
        break;
    case LZ_OP_HARDTANH:
    case LZ_OP_HARDTANH_GRAD:
        /* element by element (k_nn.c), as the element-wise ops: a ReLU6
           that no batch norm folded (LZ_FUSION=0) must not turn the
           layouts around it plain, or the convolutions next to it would
           run another algorithm than with fusion on */
        elementwise(p, s, how);
        break;
    default:
        if (lz_op_is_elementwise((lz_op)s->op)) elementwise(p, s, how);
        break;
    }
}
