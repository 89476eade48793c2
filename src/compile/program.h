/* A lowered graph: values, a schedule of kernel instructions, and a memory plan.
 * This is what backends see: no IR nodes, no tensors. */
#ifndef LZ_PROGRAM_H
#define LZ_PROGRAM_H

#include <stddef.h>
#include <stdint.h>
#include "lazyc.h"
#include "base/op.h"
#include "base/switches.h"

/* VIEW: a temporary that is another value's memory read with its own
   shape (a reshape's result; views.c). */
enum { LZ_VALUE_INPUT, LZ_VALUE_OUTPUT, LZ_VALUE_TEMP, LZ_VALUE_CONST, LZ_VALUE_VIEW };

typedef struct lz_value {
    uint8_t dtype, ndim, kind;
    int64_t shape[LZ_MAX_DIMS];
    int64_t numel;
    size_t  nbytes;
    int     slot;            /* input or output slot, for those kinds */
    size_t  offset;          /* arena offset, for temps */
    int     view_of;         /* for views: the value whose memory it is (never a view) */
    /* 0: plain (row-major). b > 0: 4-d [N, C, H, W] stored channel-blocked
       as [N, C/b, H, W, b] (oneDNN's nChw16c for b = 16; b = C is
       channels-last, NHWC); C is a multiple of b, so the size is the same.
       Only temporaries (compile/layout_plan.c). */
    uint16_t block;
} lz_value;

struct lz_fused;

/* One instruction of a program: a kernel call. ("Step" is kept for the
   training step: the barrier, lz_step_fn, an optimizer's update.) */
typedef struct lz_instr {
    uint16_t op;             /* lz_op: backends dispatch on it */
    int      out;            /* value index */
    int      n_in;
    int     *in;             /* value indices */
    int64_t  iattr[LZ_MAX_IATTR];
    float    fattr[LZ_MAX_FATTR];
    struct lz_fused *fused;  /* LZ_OP_FUSED_ELEMENTWISE only, owned by the program */
    /* memory the instruction's kernel needs only while it runs (a library's
       scratchpad, reorder buffers): the backend's prepare sets the size,
       the memory plan places it in the arena beside the instruction's values */
    size_t   scratch_bytes, scratch_offset;
} lz_instr;

/* Where a micro-op of a fused instruction reads an operand. */
enum {
    LZ_FUSED_TILE,           /* the result of an earlier micro-op (`ref` is its index) */
    LZ_FUSED_CONTIG,         /* value `ref` in memory, same element order as the group */
    LZ_FUSED_SCALAR,         /* value `ref`, one element read for every element */
    LZ_FUSED_BCAST,          /* value `ref` broadcast to the micro-op's output shape */
};

#define LZ_FUSED_MAX_OPS 16
#define LZ_FUSED_MAX_IN 2

typedef struct lz_fused_arg { int kind, ref; } lz_fused_arg;

/* A chain of element-wise instructions over `numel` elements, run as one pass
   (compile/fuse.c). ops are the original instructions in order; a result marked
   in `store` is written to its value's memory (a graph output, or read by
   a later instruction), the others live only in the kernel's tiles. */
typedef struct lz_fused {
    int      n_ops;
    int64_t  numel;
    lz_instr  ops[LZ_FUSED_MAX_OPS];
    lz_fused_arg args[LZ_FUSED_MAX_OPS][LZ_FUSED_MAX_IN];
    uint8_t  store[LZ_FUSED_MAX_OPS];
    int      n_extra;        /* stored results besides the instruction's `out` */
    int      extra[LZ_FUSED_MAX_OPS];
} lz_fused;

typedef struct lz_program {
    int       n_values;
    lz_value *values;
    int       n_instrs;
    lz_instr  *instrs;
    int       n_inputs, n_outputs;
    size_t    arena_bytes;   /* temps live here, placed by liveness */
    double    flops;         /* matmul (and later conv) work per run */
    /* the in-place tail (inplace.c): instructions from commit_from on are fused
       element-wise instructions, the only ones that may write over an input; the
       backend checks their injected faults before the first runs */
    int       commit_from;
    int      *written_by;    /* per output slot: the instruction writing it */
    int      *last_read_by;  /* per input slot: the last instruction reading it, or -1 */
    int      *output_value, *input_value;   /* per slot: its value */
    int       out_of_memory; /* a pass found no host memory: lz_compile fails */
} lz_program;

/* The value whose memory v is: itself, or the value it views. */
static inline int lz_memory_of(const lz_program *p, int v)
{
    return p->values[v].kind == LZ_VALUE_VIEW ? p->values[v].view_of : v;
}

/* Instruction s in words for the profile by instruction shape (describe.c): its inputs'
   and result's dtypes and shapes into buf, as lz_profile_step_entry's
   operands; and the flops one run computes (a convolution in either
   direction, a matmul; 0 for other ops). */
void   lz_instr_operands(const lz_program *p, const lz_instr *s, char *buf, size_t n);
double lz_instr_flops(const lz_program *p, const lz_instr *s);

/* Frees the program's instructions and tables (program.c). */
void lz_program_free(lz_program *p);
/* Takes the instructions i with drop[i] set out of the schedule, in order, and
   frees them (program.c): what the passes below use to remove the instructions
   they fold. */
void lz_program_drop_instrs(lz_program *p, const char *drop);

/* Stamps each data-parallel sum with the graph's hash and its place, and
   (unless LZ_DIST_OVERLAP=0) moves its start, with the instructions making its
   inputs, up to run as soon as they can, and its wait down to its first
   reader (schedule_comm.c). Runs first, on the lowered program. */
void lz_schedule_collectives(lz_program *p, uint64_t graph_hash);
/* Element-wise instructions that read an expand read its source instead, and
   expands left unread leave the schedule (fold_expand.c). Runs first. */
void lz_fold_expands(lz_program *p);
/* A tree of adds over slice gradients that tile one axis becomes a cat of
   the slices' gradients (fold_slice_grad.c). Runs before fusion. */
void lz_fold_slice_grads(lz_program *p);
/* Folds a ReLU or hardtanh that alone reads a training batch norm's
   output into the batch-norm instruction (fuse_bn_act.c), unless fusion is off.
   Runs before lz_fuse. */
void lz_fuse_bn_activation(lz_program *p);
/* A bf16 cast that alone reads a batch norm's, its gradient's or a
   permute's result is written by that instruction (fold_casts.c), unless fusion
   is off. Runs after lz_fuse_bn_activation, before lz_fuse. */
void lz_fold_casts(lz_program *p);
/* Replaces runs of element-wise instructions with fused instructions, unless fusion is
   off (fuse.c). Runs before the memory plan. */
void lz_fuse(lz_program *p);
/* Turns reshapes whose result is a temporary into views of their input
   and takes their copies out of the schedule (views.c). Runs after lz_fuse,
   before the memory plan. */
void lz_plan_views(lz_program *p);
/* Moves the instructions that may write an output over an input, and what reads
   their results, to the end of the schedule, and records where each output
   is written and each input last read (inplace.c). Runs after
   lz_plan_views, before the memory plan. */
void lz_plan_inplace(lz_program *p);
/* Whether output out_slot may be written over input in_slot's memory: the
   two are the same size and type, and no instruction reads the input after the
   output's instruction writes the element it reads. */
int  lz_program_may_overwrite(const lz_program *p, int out_slot, int in_slot);
/* How a kernel takes a 4-d value of its instruction under blocked layouts: */
enum {
    LZ_TAKES_PLAIN,          /* plain only */
    LZ_TAKES_STEP_LAYOUT,    /* in the one layout all such values of the instruction share */
    LZ_TAKES_EITHER,         /* plain or blocked, whatever the others are */
};
struct lz_backend;
/* Marks the temporaries that every kernel writing or reading them takes
   blocked, as the backend reports (compile/layout_plan.c), unless blocked
   layouts are off. Runs after lz_plan_views. */
void lz_plan_layouts(lz_program *p, const struct lz_backend *be);

#endif
