/* The backend contract: buffers, compiling a program, running it, and the
 * registry every floor reaches the backend through. Small enough that
 * another device needs no change to the engine, ops or autograd.
 *
 * It sits below the compiler (device memory and the compiler call through
 * it), so it names the compiler's program types without their definition;
 * a backend includes compile/program.h itself. */
#ifndef LZ_BACKEND_H
#define LZ_BACKEND_H

#include <stddef.h>
#include <stdint.h>

struct lz_program;
struct lz_instr;

/* lz_backend.layout_block's channels-last: a value's block is its channel
   count, so [N, C/b, H, W, b] is [N, 1, H, W, C] */
#define LZ_BLOCK_CHANNELS_LAST (-1)

typedef struct lz_backend_exec lz_backend_exec;

typedef struct lz_backend {
    const char *name;
    void *(*alloc)(size_t nbytes);
    void  (*free)(void *p, size_t nbytes);
    void  (*to_device)(void *dst, const void *src, size_t nbytes);
    void  (*to_host)(void *dst, const void *src, size_t nbytes);
    /* Device to device; the executor uses it to keep state a failed run
       would have updated. */
    void  (*copy)(void *dst, const void *src, size_t nbytes);
    /* Prepares kernels for p (which outlives the result) and sets each
       step's scratch_bytes; runs before the memory plan. NULL + error. */
    lz_backend_exec *(*prepare)(struct lz_program *p);
    /* Runs on the executor thread. ptrs[v] is value v's memory; step i's
       scratch is at arena + steps[i].scratch_offset. Returns NULL or a
       message naming the failing op. */
    const char *(*run)(lz_backend_exec *e, void *const *ptrs, void *arena);
    /* Optional: called once the memory plan has placed e's arena (NULL
       when it has none), before e's first run. */
    void  (*ready)(lz_backend_exec *e, void *arena, size_t arena_bytes);
    void  (*release)(lz_backend_exec *e);
    /* Blocked layouts (compile/layout_plan.c), both optional: the channel block
       of the backend's kernels for program p (0: plain layouts only;
       LZ_BLOCK_CHANNELS_LAST: each value's own channel count, NHWC), and
       how step s's kernel takes each value under block b (LZ_TAKES_*):
       how[k] for s->in[k], how[s->n_in] for its output(s). */
    int   (*layout_block)(const struct lz_program *p);
    void  (*operand_layouts)(const struct lz_program *p, const struct lz_instr *s, int b,
                             uint8_t *how);
    /* Returns memory the backend keeps for reuse to the system (lz_shutdown). */
    void  (*trim)(void);
    /* Optional: 1 where the backend runs this product faster in float32
       than in bf16, so autocast keeps it float32 (ops/autocast.c); op
       (LZ_OP_MATMUL or LZ_OP_CONV2D) and its n dims as base/product.h
       lays them out. The same answer for a shape all process long: a
       compiled graph's dtypes rest on it. */
    int   (*product_f32_faster)(int op, int n, const int64_t *dims);
} lz_backend;

/* Makes b the backend every later allocation and compile uses (the engine
   registers the CPU backend when the first tensor is made, unless another
   is registered before: engine/tensor_api.c). b outlives the process. */
void lz_backend_register(const lz_backend *b);
/* The registered backend; NULL before one is registered. */
const lz_backend *lz_backend_current(void);

#endif
