/* OpenMP workers that sleep between kernels, with no environment variable.
 *
 * libgomp's workers spin after each parallel region (300000 polls, a few
 * milliseconds) before they sleep, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT
 * said otherwise when libgomp was loaded, which is before any code of ours
 * runs. A team as large as the machine then keeps every core busy between
 * kernels, and the thread that records the next step (or anything else the
 * program does) waits for a core: small steps run many times slower.
 *
 * libgomp's documented exception (GOMP_SPINCOUNT in its manual): while it
 * manages more threads than there are CPUs, a wait polls only 100 times
 * before it sleeps. It counts the initial thread plus each team's workers,
 * idle or not, alive as long as the thread that leads their team. So this
 * file starts one thread that leads a team of its own once, made just big
 * enough that the count exceeds the CPUs, and then sleeps with its workers
 * on a condition variable until lz_shutdown. Nothing spins afterwards; the
 * sleeping threads cost no CPU time. A program that chose a wait policy or
 * a spin count keeps its choice: nothing starts then.
 *
 * Sleeping has its price inside a long program: every parallel region
 * and every barrier inside oneDNN's primitives then wakes a sleeping
 * worker, and a training step of a few hundred kernels waits that way
 * for much of its time (docs/performance.md, "Spinning workers in long
 * programs"). So the executor ends the parked threads while it
 * runs programs that take LZ_OMP_LONG_RUN_MS or more (or, run first,
 * compute LZ_OMP_LONG_FLOPS of products), and parks them again once no
 * long program has ended for LZ_OMP_LINGER_MS: the workers then poll
 * between kernels (and a few milliseconds after the last one), while short
 * steps, where the polling costs more than the waking, keep sleeping
 * workers. The count only drops to the CPUs if no other thread leads a
 * team of its own: lazyc's random fills use plain threads
 * (random_fill.c). */
#include "runtime/omp_quiet.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/metrics.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static int running, ready, stopping, team_size;
static int quiet_extra;   /* parked workers of the last start; 0 when none */
static double long_until;  /* executor thread: workers poll until then */

static void *parker_main(void *arg)
{
    (void)arg;
    int got = 0;
    /* the team's workers stay with this thread after the region (libgomp
       keeps a team's threads for its leader's next region) */
    #pragma omp parallel num_threads(team_size)
    {
        #pragma omp single
        got = omp_get_num_threads();
    }
    pthread_mutex_lock(&mu);
    quiet_extra = got - 1;
    ready = 1;
    pthread_cond_broadcast(&cv);
    while (!stopping) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static int policy_chosen;

static void read_policy(void)
{
    policy_chosen = getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT");
}

/* read once: libgomp took its policy from the environment when it loaded,
   and the executor asks before every program */
static int user_chose_policy(void)
{
    pthread_once(&policy_once, read_policy);
    return policy_chosen;
}

void lz_omp_quiet_start(void)
{
    if (running || user_chose_policy()) return;
    const int team = omp_get_max_threads(), cpus = omp_get_num_procs();
    if (team < 2) return;   /* no workers, nothing spins */
    /* counted: the initial thread and the executor's team - 1 workers;
       team_size - 1 more make it cpus + 1 */
    int extra = cpus + 1 - team;
    if (extra < 1) extra = 1;
    team_size = extra + 1;
    ready = stopping = 0;
    if (pthread_create(&thread, NULL, parker_main, NULL) != 0) return;   /* runs on, spinning */
    running = 1;
    /* the count holds before the first kernel runs */
    pthread_mutex_lock(&mu);
    while (!ready) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

void lz_omp_quiet_stop(void)
{
    if (!running) return;
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);   /* libgomp ends its workers with it */
    running = 0;
    quiet_extra = 0;
}

void lz_omp_quiet_before_run(int first_run, double flops)
{
    if (user_chose_policy()) return;
    /* a first run has no time yet: its products say whether it is long
       (a GFLOP takes milliseconds on a few cores) */
    if (lz_now_ms() < long_until || (first_run && flops >= LZ_OMP_LONG_FLOPS)) lz_omp_quiet_stop();
    else lz_omp_quiet_start();
}

void lz_omp_quiet_after_run(double ms)
{
    if (ms >= LZ_OMP_LONG_RUN_MS) long_until = lz_now_ms() + LZ_OMP_LINGER_MS;
}

int lz_omp_quiet_workers(void)
{
    pthread_mutex_lock(&mu);
    int n = quiet_extra;
    pthread_mutex_unlock(&mu);
    return n;
}
