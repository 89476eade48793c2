/* The CUDA backend's plan of a program: for every step, the actions that
 * run it on the device (kernel launches with their argument bytes, copies,
 * zero fills, cuBLASLt products, cuDNN convolutions), and the CUDA source
 * generated for the program's element-wise steps.
 *
 * Making a plan needs no GPU and no CUDA runtime (only the program): it is
 * what tests/cuda/ checks on machines without one (every step of every zoo
 * model has a plan, the generated source compiles with NVRTC). Loading it
 * onto a device (cu_exec.c) compiles the source, looks the kernels up and
 * makes the libraries' descriptors. Internal to backends/cuda/. */
#ifndef LZ_CU_PLAN_H
#define LZ_CU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "compile/program.h"

/* bytes of an element of dtype d (lz_dtype_size, which lives in liblazyc:
   the backend links nothing of it) */
static inline size_t lz_cu_esize(int d) { return d == LZ_I64 ? 8 : d == LZ_BF16 ? 2 : 4; }

/* ---- text ---- */
typedef struct lz_cu_text {
    char *s;
    size_t len, cap;
    int oom;                 /* a growth failed: the text is cut, callers fail */
} lz_cu_text;
void lz_cu_text_printf(lz_cu_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lz_cu_text_free(lz_cu_text *t);
/* v as a CUDA float literal that reads back bit for bit (hex, or the bits
   of an infinity or NaN) */
void lz_cu_float_literal(char *buf, size_t n, float v);

/* ---- kernel modules: the family sources (kernels/k_*.cu) and the
   program's generated one ---- */
enum {
    LZ_CU_MOD_MISC, LZ_CU_MOD_RANDOM, LZ_CU_MOD_REDUCE, LZ_CU_MOD_SOFTMAX, LZ_CU_MOD_NORM,
    LZ_CU_MOD_POOL, LZ_CU_MOD_INDEX, LZ_CU_N_MODULES,
    LZ_CU_MOD_GENERATED = LZ_CU_N_MODULES,
};
/* a family module's file under kernels/ (k_misc.cu ...) */
const char *lz_cu_module_file(int module);
/* NVRTC options a module needs beside the architecture: NULL, or
   "--fmad=false" for k_random.cu */
const char *lz_cu_module_option(int module);

/* ---- actions ---- */
/* An address: value v's memory + add bytes, or the step's scratch + add,
   or the status word bad data is reported to (kernels/k_args.h). */
enum { LZ_CU_REF_SCRATCH = -1, LZ_CU_REF_STATUS = -2, LZ_CU_REF_NONE = -3 };
typedef struct lz_cu_ref {
    int value;
    int64_t add;
} lz_cu_ref;

#define LZ_CU_ARGS_MAX 640
#define LZ_CU_PATCH_MAX 64

/* A kernel launch: the argument struct's bytes with its pointers left to
   patch (patch_at[k]: the byte offset of a pointer that gets ref k's
   address at run time). 1-d grids of `block` threads. */
typedef struct lz_cu_launch {
    int module;
    const char *kernel;      /* a family module's kernel name (static) */
    int gen;                 /* generated: the kernel's index (lz_ew_<gen>) */
    uint32_t grid, block, smem;
    uint32_t args_bytes, n_patch;
    uint32_t patch_at[LZ_CU_PATCH_MAX];
    lz_cu_ref patch_ref[LZ_CU_PATCH_MAX];
    _Alignas(16) unsigned char args[LZ_CU_ARGS_MAX];
} lz_cu_launch;

/* height rows of width bytes, dpitch / spitch apart (a plain copy: one
   row); ZERO uses dst alone */
typedef struct lz_cu_copy {
    lz_cu_ref dst, src;
    size_t dpitch, spitch, width, height;
} lz_cu_copy;

/* cuBLASLt's product C = A B of the program's (row-major) operands. A
   batch is `count` products whose operands lie `stride_*` elements apart
   (0: one operand shared), repeated `outer` times `outer_*` apart when
   the batch axes do not fold into one stride. */
typedef struct lz_cu_matmul {
    int64_t M, N, K;
    int ta, tb;              /* A is stored [K, M], B [N, K] */
    int bf16;                /* bf16 operands, f32 result (autocast) */
    int64_t count, stride_a, stride_b, stride_c;
    int64_t outer, outer_a, outer_b, outer_c;
    lz_cu_ref a, b, c, workspace;
    size_t workspace_bytes;
    void *loaded;            /* cu_matmul.c's descriptors once loaded */
} lz_cu_matmul;

/* A cuDNN convolution in one of three directions, NCHW. bf16 operands
   give a bf16 result in scratch (`staged`) widened into the f32 value. */
enum { LZ_CU_CONV_FWD, LZ_CU_CONV_BWD_DATA, LZ_CU_CONV_BWD_FILTER };
typedef struct lz_cu_conv {
    int dir, bf16, groups;
    int64_t x[4], w[4], y[4];     /* shapes: input, weight, output of the forward */
    int pad[2], stride[2], dil[2];
    lz_cu_ref in0, in1, out, staged, workspace;
    size_t workspace_bytes;
    void *loaded;
} lz_cu_conv;

enum { LZ_CU_LAUNCH, LZ_CU_COPY, LZ_CU_ZERO, LZ_CU_MATMUL, LZ_CU_CONV };
typedef struct lz_cu_action {
    int kind;
    union {
        lz_cu_launch *launch;
        lz_cu_copy copy;
        lz_cu_matmul *matmul;
        lz_cu_conv *conv;
    } u;
} lz_cu_action;

typedef struct lz_cu_instr {
    int n_act, cap_act;
    lz_cu_action *act;
    size_t scratch;          /* bytes of the step's scratch the actions take */
} lz_cu_instr;

typedef struct lz_cu_plan {
    const lz_program *prog;
    lz_cu_instr *instrs;      /* prog->n_instrs */
    lz_cu_text gen;          /* the generated element-wise kernels' source (len 0: none) */
    int n_gen;               /* lz_ew_0 .. lz_ew_<n_gen - 1> */
    /* each generated kernel's text as lz_ew_0 and its hash: a step whose
       kernel would read the same runs that one (a model's repeated
       blocks: far fewer kernels for NVRTC to compile) */
    char **gen_text;
    uint64_t *gen_hash;
    int gen_instrs;           /* element-wise steps, so gen_instrs - n_gen shared a kernel */
    int launches;            /* kernel launches and library calls of one run */
} lz_cu_plan;

/* The plan of p, or NULL with a message in err ("cuda: no kernel for op X",
   "cuda: op X: ..."). */
lz_cu_plan *lz_cu_plan_make(const lz_program *p, char *err, size_t errn);
void lz_cu_plan_free(lz_cu_plan *pl);

/* ---- for the family planners (f_*.c): planner.c ---- */
typedef struct lz_cu_planner {
    lz_cu_plan *plan;
    int step;                /* the step being planned */
    char *err;
    size_t errn;
} lz_cu_planner;

/* -1 with "cuda: op <op>: <message>" set */
int lz_cu_fail(lz_cu_planner *pl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A launch of a family kernel over `threads` threads (blocks of `block`,
   capped at a grid that loops), its arguments copied from args. NULL + error. */
lz_cu_launch *lz_cu_add_launch(lz_cu_planner *pl, int module, const char *kernel, int64_t threads,
                               uint32_t block, const void *args, size_t args_bytes);
/* Marks the pointer at byte offset `at` of l's arguments for ref. -1 + error. */
int lz_cu_patch(lz_cu_planner *pl, lz_cu_launch *l, size_t at, int value, int64_t add);
int lz_cu_add_copy(lz_cu_planner *pl, lz_cu_copy c);
int lz_cu_add_zero(lz_cu_planner *pl, int value, int64_t add, size_t bytes);
int lz_cu_add_matmul(lz_cu_planner *pl, lz_cu_matmul *m);
int lz_cu_add_conv(lz_cu_planner *pl, lz_cu_conv *c);
/* bytes of the step's scratch, 256-aligned: their offset in it (also
   at load time, for a library's workspace) */
int64_t lz_cu_take_scratch(lz_cu_planner *pl, size_t bytes);
int64_t lz_cu_step_take(lz_cu_instr *st, size_t bytes);
/* grid for `threads` threads of `block` (at least 1, at most the loop cap) */
uint32_t lz_cu_grid(int64_t threads, uint32_t block);

/* Each family's planner: 1 when op is its (a plan was added or an error
   set: the return of *rc), 0 when op is not its. */
int lz_cu_plan_elementwise(lz_cu_planner *pl, const lz_instr *s, int *rc);   /* codegen.c */
int lz_cu_plan_shape(lz_cu_planner *pl, const lz_instr *s, int *rc);         /* f_shape.c */
int lz_cu_plan_reduce(lz_cu_planner *pl, const lz_instr *s, int *rc);        /* f_reduce.c */
int lz_cu_plan_softmax(lz_cu_planner *pl, const lz_instr *s, int *rc);       /* f_softmax.c */
int lz_cu_plan_norm(lz_cu_planner *pl, const lz_instr *s, int *rc);          /* f_norm.c */
int lz_cu_plan_pool(lz_cu_planner *pl, const lz_instr *s, int *rc);          /* f_pool.c */
int lz_cu_plan_nn(lz_cu_planner *pl, const lz_instr *s, int *rc);            /* f_nn.c */
int lz_cu_plan_matmul(lz_cu_planner *pl, const lz_instr *s, int *rc);        /* f_matmul.c */
int lz_cu_plan_conv(lz_cu_planner *pl, const lz_instr *s, int *rc);          /* f_conv.c */
int lz_cu_plan_index(lz_cu_planner *pl, const lz_instr *s, int *rc);         /* f_index.c */

/* The CUDA source of one element-wise step (unfused or a fused chain) as
   kernel lz_ew_<index>, appended to src; slots[k] gets the value whose
   address is its k-th pointer (at most max_slots). The count, or -1 with
   err set. */
int lz_cu_gen_elementwise(const lz_program *p, const lz_instr *s, int index, lz_cu_text *src,
                          int *slots, int max_slots, char *err, size_t errn);

#endif
