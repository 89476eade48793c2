/* An executable: a compiled graph. The program (schedule + memory plan),
 * the backend's prepared kernels, and the arena its temporaries live in.
 * Shared by the cache and by executions in flight, hence refcounted. */
#ifndef LZ_EXECUTABLE_H
#define LZ_EXECUTABLE_H

#include <stdatomic.h>

#include "backend/backend.h"
#include "compile/program.h"
#include "ir/graph.h"

typedef struct lz_executable {
    atomic_int refs;
    uint64_t hash;
    int64_t *sig;            /* graph structure, to confirm a cache hit */
    size_t   sig_len;
    lz_program prog;
    const lz_backend *backend;
    lz_backend_exec  *bexec;
    void    *arena;          /* prog.arena_bytes; executions of one executable
                                run one at a time (FIFO queue), so one suffices */
    int      pinned;         /* captures replaying it: while > 0, never evicted */
    int      ran;            /* executed before (executor thread only) */
} lz_executable;

/* Lowers g to a program, plans its memory and prepares its kernels.
   NULL + error (naming the op) on failure. */
lz_executable *lz_compile(const lz_graph *g);
void lz_executable_ref(lz_executable *e);
void lz_executable_unref(lz_executable *e);

/* Places the temporaries of p in one arena by liveness (memplan.c). */
void lz_plan_memory(lz_program *p);

#endif
