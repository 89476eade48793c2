/* Communication between the processes of a data-parallel job: the one
 * place that talks to MPI (comm_mpi.c when lazyc is built with MPI,
 * comm_none.c otherwise). Kernels call it from the executor thread, the
 * lz_dist_* functions from the recording thread, never both at once
 * (MPI_THREAD_SERIALIZED): the recording thread waits for the executor
 * before it communicates itself.
 *
 * Floor 1: beside the backend contract, so the CPU kernels (floor 4) run
 * collectives as steps of a program and the ops (floor 7) join the job. */
#ifndef LZ_COMM_H
#define LZ_COMM_H

#include <stddef.h>
#include <stdint.h>

/* 1 when lazyc was built with MPI. */
int  lz_comm_built(void);
/* Joins the job (MPI_Init_thread) when launched by mpirun; a process
   started alone is rank 0 of 1 and starts no MPI. Idempotent; 0, or -1 +
   error (built without MPI: an error saying so). */
int  lz_comm_init(void);
int  lz_comm_initialised(void);
int  lz_comm_rank(void);
int  lz_comm_size(void);
void lz_comm_finalize(void);

/* Starts a sum of buf[0..n) over every rank in place, non-blocking. First
   checks, with a small blocking exchange, that every rank reached the same
   collective: sig (the graph's hash, the collective's place in it, n) must
   be equal everywhere, else every rank fails naming both signatures.
   NULL, or a message naming what failed. */
const char *lz_comm_allreduce_start(float *buf, int64_t n, uint64_t sig);
/* Waits (at most the LZ_DIST_TIMEOUT seconds) for the sum started on buf. */
const char *lz_comm_allreduce_wait(float *buf);
/* Lets started collectives progress (MPI moves data only inside its calls):
   the executor calls it before each kernel that runs while any is in
   flight, and counts that kernel as overlapped. */
void lz_comm_progress(void);
int  lz_comm_in_flight(void);
/* An execution failed with collectives in flight: their memory will be
   reused, so the job cannot go on; every later collective fails. */
void lz_comm_abandon(const char *why);
/* Copies rank 0's nbytes at buf to every rank (blocking, bounded wait). */
int  lz_comm_broadcast(void *buf, size_t nbytes);

/* Counters since the start: collectives, bytes reduced, time from start to
   completion seen by wait (comm_ms), of which blocked in wait (wait_ms),
   kernels run while a sum was in flight (overlapped_kernels). */
typedef struct lz_comm_stats {
    int64_t all_reduces, bytes, overlapped_kernels;
    double comm_ms, wait_ms;
} lz_comm_stats;
lz_comm_stats lz_comm_stats_get(void);
void lz_comm_stats_reset(void);

#endif
