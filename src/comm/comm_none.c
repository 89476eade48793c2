/* lazyc built without MPI: every attempt to communicate says so. */
#ifndef LZ_HAVE_MPI
#include "comm/comm.h"
#include "base/error.h"

static const char *const no_mpi =
    "lazyc was built without MPI support (install libopenmpi-dev and rebuild)";

int lz_comm_built(void) { return 0; }
int lz_comm_init(void) { return lz_errorf_int("lz_dist_init: %s", no_mpi); }
int lz_comm_initialised(void) { return 0; }
int lz_comm_rank(void) { return 0; }
int lz_comm_size(void) { return 1; }
void lz_comm_finalize(void) {}
const char *lz_comm_allreduce_start(float *buf, int64_t n, uint64_t sig)
{
    (void)buf, (void)n, (void)sig;
    return no_mpi;
}
const char *lz_comm_allreduce_wait(float *buf)
{
    (void)buf;
    return no_mpi;
}
void lz_comm_progress(void) {}
int lz_comm_in_flight(void) { return 0; }
void lz_comm_abandon(const char *why) { (void)why; }
int lz_comm_broadcast(void *buf, size_t nbytes)
{
    (void)buf, (void)nbytes;
    return lz_errorf_int("lz_dist_broadcast: %s", no_mpi);
}
lz_comm_stats lz_comm_stats_get(void) { return (lz_comm_stats){0}; }
void lz_comm_stats_reset(void) {}
#else
typedef int lz_comm_none_unused;   /* ISO C: no empty translation unit */
#endif
