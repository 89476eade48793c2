/* Communication over MPI (Open MPI): the job's ranks, non-blocking sums
 * with a bounded wait, a broadcast. See comm.h for who calls what. */
#ifdef LZ_HAVE_MPI
#include "comm/comm.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/metrics.h"
#include "base/settings.h"

/* Collectives in flight at once: one per gradient bucket of a step. */
#define MAX_IN_FLIGHT 256

typedef struct pending {
    float *buf;
    MPI_Request req;
    double t0, t_done;       /* started; completion first seen (0: not yet) */
    int64_t n;
} pending;

static int inited, started_mpi, rank, size = 1, broken;
static pending inflight[MAX_IN_FLIGHT];
static int n_inflight;
static lz_comm_stats stats;
/* kernels return static messages: the executor thread's last one */
static char msg[512];

int lz_comm_built(void) { return 1; }
int lz_comm_initialised(void) { return inited; }
int lz_comm_rank(void) { return rank; }
int lz_comm_size(void) { return size; }

/* Launched by mpirun (Open MPI's or a PMI launcher's variables)? */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int lz_comm_init(void)
{
    if (inited) return 0;
    int already = 0;
    MPI_Initialized(&already);
    if (!already && !launched()) {   /* started alone: rank 0 of 1, no MPI */
        inited = 1;
        return 0;
    }
    if (!already) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return lz_errorf_int("lz_dist_init: MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED)
            return lz_errorf_int("lz_dist_init: this MPI gives thread level %d, lazyc needs "
                                 "MPI_THREAD_SERIALIZED (its executor thread communicates)", provided);
        started_mpi = 1;
    }
    /* failures come back as codes, turned into errors, never an abort here */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    inited = 1;
    return 0;
}

void lz_comm_finalize(void)
{
    if (!inited) return;
    /* with a collective in flight or a failed one, MPI_Finalize would wait
       for ranks that may be gone: leave it to mpirun to end the job */
    if (started_mpi && !broken && !n_inflight) MPI_Finalize();
    inited = 0;
    started_mpi = 0;
    rank = 0;
    size = 1;
}

static double timeout_ms(void) { return 1000.0 * (double)lz_setting_int(LZ_SETTING_DIST_TIMEOUT); }

static const char *fail(const char *fmt, ...) LZ_PRINTF_FORMAT(1, 2);
static const char *fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    broken = 1;
    return msg;
}

static void pause_briefly(double waited_ms)
{
    /* spin for the first millisecond (a sum between ranks on one machine
       takes microseconds), then give the core back */
    if (waited_ms < 1.0) return;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

/* Waits for req at most the timeout; 0 done, -1 failed or timed out (msg). */
static int bounded_wait(MPI_Request *req, const char *what)
{
    const double t0 = lz_now_ms(), limit = timeout_ms();
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char err[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, err, &len);
            fail("rank %d of %d: %s failed: %s (another rank died?)", rank, size, what, err);
            return -1;
        }
        if (done) return 0;
        const double waited = lz_now_ms() - t0;
        if (waited > limit) {
            fail("rank %d of %d: %s: no answer from the other ranks within %.0f s "
                 "(LZ_DIST_TIMEOUT): a rank died, failed a step or stopped communicating",
                 rank, size, what, limit / 1000);
            return -1;
        }
        pause_briefly(waited);
    }
}

const char *lz_comm_allreduce_start(float *buf, int64_t n, uint64_t sig)
{
    if (!inited) return "lz_dist_all_reduce: lz_dist_init was not called";
    if (broken) return msg;
    if (size == 1) return NULL;   /* the sum over one rank is in place already */
    if (n_inflight == MAX_IN_FLIGHT)
        return fail("rank %d: more than %d all-reduces in flight in one step", rank, MAX_IN_FLIGHT);
    if (n > INT32_MAX) return fail("rank %d: an all-reduce of %lld elements (at most 2^31-1)",
                                   rank, (long long)n);
    /* every rank must be at the same collective: a graph recorded
       differently elsewhere stops here rather than deadlocking or summing
       unrelated buffers */
    uint64_t mine[2] = {sig, ~sig}, all[2];
    MPI_Request req;
    if (MPI_Iallreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
        return fail("rank %d: MPI_Iallreduce failed checking the graph", rank);
    if (bounded_wait(&req, "checking that every rank runs the same graph")) return msg;
    if (all[0] != sig || all[1] != ~sig)
        return fail("rank %d of %d: the ranks recorded different graphs (all-reduce signature "
                    "%016llx here, %016llx on another rank): every rank must run the same "
                    "model on equally shaped batches", rank, size, (unsigned long long)sig,
                    (unsigned long long)(all[0] != sig ? all[0] : ~all[1]));
    pending *p = &inflight[n_inflight];
    if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &p->req)
        != MPI_SUCCESS)
        return fail("rank %d: MPI_Iallreduce of %lld floats failed", rank, (long long)n);
    p->buf = buf;
    p->n = n;
    p->t0 = lz_now_ms();
    p->t_done = 0;
    n_inflight++;
    return NULL;
}

void lz_comm_progress(void)
{
    stats.overlapped_kernels++;
    for (int i = 0; i < n_inflight; i++) {
        pending *p = &inflight[i];
        if (p->t_done) continue;
        int done = 0;
        if (MPI_Test(&p->req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
            p->t_done = lz_now_ms();
    }
}

int lz_comm_in_flight(void) { return n_inflight; }

const char *lz_comm_allreduce_wait(float *buf)
{
    if (broken) return msg;
    if (size == 1) return NULL;
    int i = 0;
    while (i < n_inflight && inflight[i].buf != buf) i++;
    if (i == n_inflight) return fail("rank %d: an all-reduce wait without its start", rank);
    pending p = inflight[i];
    inflight[i] = inflight[--n_inflight];
    const double t = lz_now_ms();
    if (!p.t_done) {
        if (bounded_wait(&p.req, "all-reduce")) return msg;
        p.t_done = lz_now_ms();
    }
    stats.all_reduces++;
    stats.bytes += p.n * (int64_t)sizeof(float);
    stats.comm_ms += p.t_done - p.t0;
    stats.wait_ms += lz_now_ms() - t;
    return NULL;
}

void lz_comm_abandon(const char *why)
{
    if (!n_inflight) return;
    if (why == msg) {   /* the failure was a collective's own: msg says it */
        broken = 1;
        return;
    }
    fail("rank %d: a step failed with %d all-reduces in flight (%s); the job cannot go on",
         rank, n_inflight, why ? why : "?");
}

int lz_comm_broadcast(void *buf, size_t nbytes)
{
    if (!inited) return lz_errorf_int("lz_dist_broadcast: lz_dist_init was not called");
    if (broken) return lz_errorf_int("lz_dist_broadcast: %s", msg);
    if (size == 1) return 0;
    for (size_t off = 0; off < nbytes;) {
        size_t chunk = nbytes - off > (size_t)1 << 30 ? (size_t)1 << 30 : nbytes - off;
        MPI_Request req;
        if (MPI_Ibcast((char *)buf + off, (int)chunk, MPI_BYTE, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS)
            return lz_errorf_int("lz_dist_broadcast: rank %d: MPI_Ibcast failed", rank);
        if (bounded_wait(&req, "broadcast")) return lz_errorf_int("lz_dist_broadcast: %s", msg);
        off += chunk;
    }
    return 0;
}

lz_comm_stats lz_comm_stats_get(void) { return stats; }
void lz_comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }
#else
typedef int lz_comm_mpi_unused;   /* ISO C: no empty translation unit */
#endif
