/* CPU kernels. A kernel runs one step of a program: ptrs[v] is the memory
 * of value v. It returns NULL, or a static message naming what failed. */
#ifndef LZ_CPU_KERNELS_H
#define LZ_CPU_KERNELS_H

#include "backend/backend.h"
#include "compile/program.h"

typedef const char *(*lz_kernel)(const lz_program *p, const lz_instr *s, void *const *ptrs);

/* for (int64_t i = 0; i < n; i++) { body }: a static OpenMP loop over the
   team when par, else a plain loop on the calling thread. An `if (par)`
   clause is not enough for small work: with it false libgomp still starts
   and ends a team of one (about 1000 instructions and an allocation per
   kernel, as much as a tiny kernel's work). The _SUM form adds a
   reduction(+:acc); with one thread it sums in loop order either way. */
#define LZ_PRAGMA(x) _Pragma(#x)
#define LZ_PAR_FOR(par, i, n, ...)                                                    \
    do {                                                                               \
        if (par) {                                                                     \
            LZ_PRAGMA(omp parallel for schedule(static))                               \
            for (int64_t i = 0; i < (n); i++) __VA_ARGS__                              \
        } else {                                                                       \
            for (int64_t i = 0; i < (n); i++) __VA_ARGS__                              \
        }                                                                              \
    } while (0)
#define LZ_PAR_FOR_SUM(par, acc, i, n, ...)                                           \
    do {                                                                               \
        if (par) {                                                                     \
            LZ_PRAGMA(omp parallel for schedule(static) reduction(+:acc))              \
            for (int64_t i = 0; i < (n); i++) __VA_ARGS__                              \
        } else {                                                                       \
            for (int64_t i = 0; i < (n); i++) __VA_ARGS__                              \
        }                                                                              \
    } while (0)

/* Each kernel family returns its kernel for op, or NULL if op is not its. */
lz_kernel lz_cpu_elementwise_kernel(lz_op op);   /* k_elementwise.c */
lz_kernel lz_cpu_reduce_kernel(lz_op op);        /* k_reduce.c */
lz_kernel lz_cpu_shape_kernel(lz_op op);         /* k_shape.c */
lz_kernel lz_cpu_linalg_kernel(lz_op op);        /* k_linalg.c: matmul, softmax, losses */
lz_kernel lz_cpu_misc_kernel(lz_op op);          /* k_misc.c: fill, copy, test gate */
lz_kernel lz_cpu_nn_kernel(lz_op op);            /* k_nn.c: hardtanh, embedding, dropout, rand, rng */
lz_kernel lz_cpu_conv_kernel(lz_op op);          /* k_conv.c: conv2d, pooling */
lz_kernel lz_cpu_batch_norm_kernel(lz_op op);    /* k_batch_norm.c: fused training batch norm */
lz_kernel lz_cpu_layer_norm_kernel(lz_op op);    /* k_layer_norm.c: layer norm and its gradient */
lz_kernel lz_cpu_fused_kernel(lz_op op);         /* k_fused.c: fused element-wise chains */
lz_kernel lz_cpu_dist_kernel(lz_op op);          /* k_dist.c: data-parallel all-reduce */

/* Runs an element-wise op over n elements of one row: in[k] advances by
   st[k] elements (1: contiguous, 0: one element broadcast). */
typedef void (*lz_cpu_row_fn)(void *out, const void *const *in, const int64_t *st, int64_t n,
                              const float *fattr);
/* The element-wise kernel's row function for step s (k_elementwise.c), so
   the fused kernel applies the very same formulas; NULL if s is not an
   element-wise op or its dtypes are not supported. */
lz_cpu_row_fn lz_cpu_elementwise_row(const lz_program *p, const lz_instr *s);
/* The rows of the element-wise ops added for models from PyTorch (silu,
   sin, cos, ne, minimum, clip_coef; k_elementwise_ext.c) for input dtype
   ti (an lz_dtype below LZ_BF16); NULL for any other op or dtype. */
lz_cpu_row_fn lz_cpu_elementwise_ext_row(int op, int ti);
lz_kernel lz_cpu_index_kernel(lz_op op);         /* k_index.c: tri mask, cumsum, gather, argmax */
lz_kernel lz_cpu_loss_ext_kernel(lz_op op);      /* k_loss_ext.c: cross-entropy with options */

/* The kernel for op, or NULL if no family has one. */
lz_kernel lz_cpu_kernel_for(lz_op op);

/* A kernel that builds state for its step when an executable is compiled
   (oneDNN primitives) and reuses it on every run. prepare returns NULL
   when the step is better (or only) run by the plain kernel for its op. */
typedef struct lz_stateful_kernel {
    void *(*prepare)(const lz_program *p, const lz_instr *s);
    /* the step's scratch (lz_instr.scratch_bytes) the state asks for */
    size_t (*scratch_bytes)(const void *state);
    /* scratch: scratch_bytes of the executable's arena, this step's alone */
    const char *(*run)(void *state, const lz_program *p, const lz_instr *s, void *const *ptrs,
                       void *scratch);
    void (*release)(void *state);
    /* whether the state runs a library primitive (oneDNN) rather than
       one of lazyc's kernels: what the profile calls it */
    int (*library)(const void *state);
} lz_stateful_kernel;

/* The stateful kernel for op, or NULL: op has plain kernels only. */
const lz_stateful_kernel *lz_cpu_stateful_kernel_for(lz_op op);
const lz_stateful_kernel *lz_cpu_dnnl_conv_kernel(lz_op op);   /* k_dnnl_conv.c */
/* Whether conv2d steps use oneDNN primitives (k_dnnl_conv.c): 1 on the
   steps where they measured faster, 2 on every step oneDNN has a jit
   kernel for (to test them), 0 off, LZ_DNNL_CONV_TUNE: each step shape
   timed once per machine, every way it can run, when it is compiled
   (conv_choices.h). LZ_DNNL_CONV=0, =1, =2 or =tune in the environment
   (read once through the settings table) picks 0, 1, 2 or tune, anything
   else warns and uses 1; lz_dnnl_conv_set overrides that (-1: back to the
   environment) for tests; LZ_DETERMINISTIC=1 turns tune into 1.
   Executables already compiled keep their choice. */
#define LZ_DNNL_CONV_TUNE 3
int  lz_dnnl_conv_enabled(void);
void lz_dnnl_conv_set(int on);
/* How many steps were prepared with a oneDNN primitive, ever, how many
   of those by Winograd's algorithm, and how many step shapes were timed
   to choose their way (tests). */
int64_t lz_dnnl_conv_created(void);
int64_t lz_dnnl_conv_winograd(void);
int64_t lz_dnnl_conv_timed(void);
/* Whether oneDNN has a jit primitive for conv2d step s with its
   activations in channel block b, or channels-last (b =
   LZ_BLOCK_CHANNELS_LAST) (k_dnnl_conv.c). */
int lz_cpu_dnnl_conv_takes_blocked(const lz_program *p, const lz_instr *s, int b);
/* Whether step s is a convolution (any direction) with a bf16 operand:
   autocast's (k_dnnl_conv.c). */
int lz_cpu_conv_is_bf16(const lz_program *p, const lz_instr *s);
/* The ISA's channel block, the one oneDNN's convolutions run on (16 with
   AVX-512, 8 with AVX2, 0 without oneDNN's convolutions) (k_dnnl_conv.c). */
int  lz_cpu_layout_block(void);
/* Blocked layouts on the CPU (operand_layouts.c), the lz_backend hooks:
   program p's block (lz_backend.layout_block) and how each step takes its
   values. */
int  lz_cpu_program_block(const lz_program *p);
void lz_cpu_operand_layouts(const lz_program *p, const lz_instr *s, int b, uint8_t *how);
/* Whether autocast's rule keeps a convolution of this shape float32
   (k_dnnl_conv.c; product_choice.c asks it). */
int lz_cpu_conv_f32_faster(const int64_t *x, const int64_t *w, const int64_t *y,
                           const int *stride, const int *dilation, int groups);
/* Makes oneDNN's sgemm kernels now (k_matmul_f32.c): once a process, a product
   of 8x8x8 on zeros. */
void lz_cpu_sgemm_make_kernels(void);
/* Frees the oneDNN engine and stream once no prepared step holds them. */
void lz_dnnl_conv_trim(void);

/* How k_conv.c runs a conv2d step: by its own rule (what the plain kernel
   does), one image at a time (each thread its own images), or with every
   image's columns side by side in one product. Depthwise steps take their
   direct loops whatever the path; GATHERED where it cannot apply (one
   image, too large) runs one image at a time. */
typedef enum lz_conv_path { LZ_CONV_BY_RULE, LZ_CONV_PER_IMAGE, LZ_CONV_GATHERED } lz_conv_path;
const char *lz_cpu_conv_run(const lz_program *p, const lz_instr *s, void *const *ptrs,
                            lz_conv_path path);
/* A conv2d step on channel-blocked activations (either may be plain) as
   one sgemm over rows [C, N*P], every image side by side: the weight
   gradient, with all N*P output pixels as the product's inner dimension
   (im2col's columns when not 1x1), and the forward of a 1x1, stride-1,
   unpadded step; its grad input over pixels [N*P, C] instead. Activations
   are copied out of their blocks and back in through `scratch`, of
   lz_cpu_conv_rows_bytes. Ungrouped steps only; lz_cpu_conv_rows_apply
   says whether s is one it takes. */
int lz_cpu_conv_rows_apply(const lz_program *p, const lz_instr *s);
size_t lz_cpu_conv_rows_bytes(const lz_program *p, const lz_instr *s);
const char *lz_cpu_conv_rows(const lz_program *p, const lz_instr *s, void *const *ptrs,
                             void *scratch);
/* Whether s is a float32 depthwise weight gradient, which k_conv.c's
   direct loops run on activations in any layout (plain, channel-blocked,
   channels-last): oneDNN 2.6 has a depthwise kernel for it only up to
   3x3, and runs larger ones as 16x16-blocked groups, 16x the arithmetic
   (docs/performance.md, "Depthwise weight gradients"). */
int lz_cpu_conv_dw_grad_weight_blocked(const lz_program *p, const lz_instr *s);
/* Whether step s can run GATHERED, and whether its rule picks that. */
int lz_cpu_conv_can_gather(const lz_program *p, const lz_instr *s);
int lz_cpu_conv_by_rule_gathers(const lz_program *p, const lz_instr *s);

/* Strides (in elements) that read `in` broadcast to out's shape, aligned
   to out's ndim (0 on broadcast axes) (strides.c). */
void lz_broadcast_strides(const lz_value *in, const lz_value *out, int64_t *strides);
/* The axes of out's element order and the strides (in elements) that read
   `in` along them, broadcast: out's own axes, or for a channel-blocked out
   (lz_value.block = b) the 5 axes [N, C/b, H, W, b], which read a blocked
   in of out's shape contiguously and a plain one (a per-channel bias, a
   scalar) through its broadcast strides. Returns the axis count. */
int lz_order_strides(const lz_value *in, const lz_value *out, int64_t *shape, int64_t *st);

#endif
