/* The backend contract: what a device implements so that lazyc runs on it.
 * The engine, ops, autograd, optimizers and io reach device memory only
 * through this table (by way of backend/buffer.h and backend/memory.h):
 * they never read or write it themselves, so another device needs nothing
 * more from them. The reference for whoever writes a backend is the
 * guarded test backend (backends/guarded/guarded.c): its memory is
 * unreadable to the host outside its own calls, and the core suites pass
 * on it.
 *
 * Device addresses. alloc returns an address the engine treats as a
 * handle: it offsets it (values inside an executable's arena, views) and
 * hands it back to this table, never dereferences it.
 *
 * Order: the executor's queue. The backend does what it is asked in the
 * order it is asked, as if on one in-order queue (a CUDA stream): calls
 * come from two threads, the recording thread (transfers, fills, casts,
 * alloc, free, prepare) and the executor thread (run, copy, free), and the
 * engine orders them through the executor's queue: it writes a buffer
 * (to_device, fill) before it enqueues the execution that reads it, and it
 * reads a buffer (to_host, cast) only after the execution that writes it
 * has run (lz_executor_wait_buffer). So every call below may return before
 * the device has done the work, except to_host, which returns when dst
 * holds the values. A host buffer handed to to_device may be reused (written,
 * freed) as soon as to_device returns: the backend copies or stages it
 * first. free may come while work asked before on that memory is still
 * queued; the backend must not hand the memory out again before that work
 * is done (stream-ordered reuse).
 *
 * Errors. Calls that can fail return NULL, or a message (static or
 * thread-local, read before the backend's next call on that thread)
 * naming what failed; alloc returns NULL when the device is out of memory.
 * The engine turns a message into the caller's error.
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

    /* ---- device memory ---- */
    /* nbytes (> 0) of device memory, 64-byte aligned; NULL when out of it. */
    void *(*alloc)(size_t nbytes);
    void  (*free)(void *p, size_t nbytes);

    /* ---- work outside executions (ordered as above) ---- */
    /* Host to device: nbytes from src to dst. src may be reused on return. */
    const char *(*to_device)(void *dst, const void *src, size_t nbytes);
    /* Device to host; waits: dst holds the values when it returns. */
    const char *(*to_host)(void *dst, const void *src, size_t nbytes);
    /* Device to device. The executor uses it to keep state a failed run
       would have updated (on the executor thread). */
    const char *(*copy)(void *dst, const void *src, size_t nbytes);
    /* dst = nbytes / width copies of the width bytes at value (width 1, 2,
       4 or 8; nbytes a multiple of it): lz_zeros, lz_full. */
    const char *(*fill)(void *dst, size_t nbytes, const void *value, size_t width);
    /* dst = n float32 draws of lazyc's counter-based generator from seed:
       dist 0 uniform in [a, b), 1 normal (mean a, deviation b). The values
       are lz_from_random's definition: backends/cpu/random_fill.c is the
       reference a device's kernel must match bit for bit. */
    const char *(*fill_random)(void *dst, int64_t n, uint64_t seed, int dist, float a, float b);
    /* dst (n bfloat16) = src (n float32) rounded to nearest even, as
       lz_cast rounds: autocast's parameter copies. */
    const char *(*to_bf16)(void *dst, const void *src, int64_t n);

    /* ---- programs ---- */
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
    /* Optional: returns memory the backend keeps for reuse to the system
       (lz_shutdown). */
    void  (*trim)(void);
    /* Optional: 1 where the backend runs this product faster in float32
       than in bf16, so autocast keeps it float32 (ops/autocast.c); op
       (LZ_OP_MATMUL or LZ_OP_CONV2D) and its n dims as base/product.h
       lays them out. The same answer for a shape all process long: a
       compiled graph's dtypes rest on it. */
    int   (*product_f32_faster)(int op, int n, const int64_t *dims);
} lz_backend;

/* ---- backends as shared objects ----
   A backend other than the CPU's is its own shared object,
   liblazyc_NAME.so, loaded on demand (lz_device_use, LZ_DEVICE): liblazyc
   itself never depends on a device's libraries. It exports one function,
   LZ_BACKEND_ENTRY, and needs nothing else from liblazyc: what it may use
   of the library comes in the host table. */
#define LZ_BACKEND_ABI 1
#define LZ_BACKEND_ENTRY "lz_backend_open"

typedef struct lz_backend_host {
    int abi;                  /* LZ_BACKEND_ABI of the library loading it */
    size_t size;              /* sizeof(lz_backend_host) there */
    /* The built-in CPU backend, for a backend that hands it work: the
       guarded test backend runs every kernel there. */
    const lz_backend *cpu;
    /* Sets the calling thread's error (lz_last_error), for the calls whose
       failure is NULL + error: alloc's caller names it, prepare's does not. */
    void (*set_error)(const char *msg);
    /* The settings table (base/settings.h, docs/env.md): a backend reads
       its LZ_* variables here, by id, never from the environment. */
    int64_t (*setting_int)(int id);
    const char *(*setting_text)(int id);
    /* Adds to the metrics' graph_launches and kernel_launches: what the
       backend launched for a run, a graph as one (any thread). */
    void (*count_launches)(int64_t graphs, int64_t kernels);
} lz_backend_host;

/* The entry: *out = the backend's table (living as long as the process),
   or a message saying why not (a library of another ABI, no device
   present). Defined by each loadable backend, never by liblazyc. */
typedef const char *(*lz_backend_open_fn)(const lz_backend_host *host, const lz_backend **out);
const char *lz_backend_open(const lz_backend_host *host, const lz_backend **out);

/* Makes b the backend every later allocation and compile uses (the engine
   registers one when the first tensor is made, unless another is
   registered before: engine/device.c). b outlives the process. */
void lz_backend_register(const lz_backend *b);
/* The registered backend; NULL before one is registered. */
const lz_backend *lz_backend_current(void);
/* Loads liblazyc_NAME.so (registry.c): beside the library (or the program
   it is linked into), else where the dynamic loader looks. Its table, or
   NULL + error naming what failed (no such file, not a backend, the
   backend's own refusal). Recording thread. */
const lz_backend *lz_backend_load(const char *name, const lz_backend_host *host);

/* The built-in CPU backend's table (backends/cpu/backend.c), declared with
   the contract so that no floor includes a backend's own header: the
   engine names it to start it, and hands it to loaded backends. */
const lz_backend *lz_backend_cpu(void);

#endif
