/* A program that links lazyc and sets no environment variable gets OpenMP
 * workers that sleep between kernels (src/runtime/omp_quiet.c): after a
 * kernel's parallel region the process uses next to no CPU time while it
 * sits idle, where libgomp's default policy alone polls for milliseconds
 * per worker. A program that chose a wait policy keeps it (nothing is
 * parked), and lz_shutdown ends the parked threads. While programs that
 * take LZ_OMP_LONG_RUN_MS or more run, nothing is parked (the workers poll
 * between kernels); once only short ones have run for a while, the
 * workers are parked again.
 *
 * ctest runs every test with OMP_WAIT_POLICY=passive, so this program
 * re-executes itself once without it (and with two OpenMP threads when the
 * machine would give one, so that a worker exists to spin). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "runtime/omp_quiet.h"

enum { N = 1 << 20, ROUNDS = 10, IDLE_MS = 20 };

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One element-wise kernel over N values: over PAR_MIN, so it runs as a
   parallel region on the whole team. */
static int run_kernel(lz_tensor *x)
{
    lz_tensor *y = lz_mul(lz_add(x, x), x);
    float v = y ? lz_item(lz_sum(y)) : 0;
    lz_free(y);
    return v == v ? 0 : -1;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over ROUNDS of the CPU time the process used during an idle
   pause right after a kernel's parallel region, in ms (the median: a
   page fault or a free on a loaded machine may cost one pause a little;
   a spinning worker costs every pause milliseconds). Only pauses with the
   workers parked count: on a loaded machine a kernel can take
   LZ_OMP_LONG_RUN_MS, and then they poll, as designed, for the next
   LZ_OMP_LINGER_MS. -1 when too few pauses had them parked. */
static double idle_cpu_ms(lz_tensor *x)
{
    double each[ROUNDS];
    int n = 0;
    for (int r = 0; r < 4 * ROUNDS && n < ROUNDS; r++) {
        lz_scope_begin();
        CHECK(run_kernel(x) == 0);
        lz_scope_end();
        CHECK(lz_wait() == 0);
        const int parked = lz_omp_quiet_workers() > 0;
        double c0 = cpu_ms();
        nanosleep(&(struct timespec){0, IDLE_MS * 1000000L}, NULL);
        if (parked) each[n++] = cpu_ms() - c0;
    }
    if (n < ROUNDS) return -1;
    qsort(each, ROUNDS, sizeof *each, by_value);
    return each[ROUNDS / 2];
}

/* A chain of products of 2048x2048 matrices, in one program; the ms the
   execution took. */
static double run_long_program(lz_tensor *a)
{
    const double before = lz_metrics_get().execute_ms;
    lz_scope_begin();
    lz_tensor *y = a;
    for (int i = 0; i < 4; i++) y = lz_matmul(y, a);
    CHECK(lz_sync(&y, 1, 1) == 0);
    lz_scope_end();
    CHECK(lz_wait() == 0);
    return lz_metrics_get().execute_ms - before;
}

/* Long programs unpark the workers; short ones, a while after, park them. */
static void long_programs_let_workers_poll(lz_tensor *x, int parked)
{
    const int64_t shape[2] = {2048, 2048};
    const struct timespec linger = {0, (long)(LZ_OMP_LINGER_MS * 1.5e6)};
    lz_tensor *a = lz_test_rand(3, -0.02f, 0.02f, 2, shape);
    run_long_program(a);                       /* first run: 69 GFLOP of products */
    CHECK_EQ_I(lz_omp_quiet_workers(), 0);
    nanosleep(&linger, NULL);
    CHECK(run_kernel(x) == 0);                 /* short, long after: parked again */
    CHECK_EQ_I(lz_omp_quiet_workers(), parked);
    double ms = run_long_program(a);           /* known now by its time */
    if (ms < LZ_OMP_LONG_RUN_MS) {
        printf("the long program took %.1f ms on this machine: not long, not checked\n", ms);
    } else {
        CHECK(run_kernel(x) == 0);             /* short, right after: still none */
        CHECK_EQ_I(lz_omp_quiet_workers(), 0);
        nanosleep(&linger, NULL);
        CHECK(run_kernel(x) == 0);
        CHECK_EQ_I(lz_omp_quiet_workers(), parked);
    }
    lz_free(a);
}

/* The child run with OMP_WAIT_POLICY set: lazyc leaves it alone. */
static int respects_choice(void)
{
    const int64_t shape[1] = {N};
    lz_tensor *x = lz_test_rand(1, -1, 1, 1, shape);
    CHECK(run_kernel(x) == 0);
    CHECK_EQ_I(lz_omp_quiet_workers(), 0);
    lz_free(x);
    return lz_test_done();
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("LZ_TEST_OMP_CHILD")) return respects_choice();
    if (!getenv("LZ_TEST_OMP_REEXEC")) {
        unsetenv("OMP_WAIT_POLICY");
        unsetenv("GOMP_SPINCOUNT");
        if (omp_get_max_threads() < 2) setenv("OMP_NUM_THREADS", "2", 1);
        setenv("LZ_TEST_OMP_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "test_omp_quiet: cannot re-execute itself\n");
        return 1;
    }
    printf("OpenMP team of %d on %d CPUs\n", omp_get_max_threads(), omp_get_num_procs());

    const int64_t shape[1] = {N};
    lz_tensor *x = lz_test_rand(1, -1, 1, 1, shape);
    CHECK(run_kernel(x) == 0);
    /* the initial thread, the team's workers and the parked ones: more
       threads than CPUs, so libgomp's waits poll briefly */
    int parked = lz_omp_quiet_workers();
    CHECK(parked >= 1);
    CHECK(1 + (omp_get_max_threads() - 1) + parked > omp_get_num_procs());

    /* libgomp's default alone polls 300000 times per wait, milliseconds
       per worker and pause; with the parked workers it polls 100 times */
    double idle = idle_cpu_ms(x);
    if (idle < 0) {
        printf("kernels took %.0f ms or more in most rounds on this machine: idle pauses not checked\n",
               LZ_OMP_LONG_RUN_MS);
    } else {
        printf("CPU time in an idle pause of %d ms after a kernel: %.3f ms (median of %d)\n", IDLE_MS,
               idle, ROUNDS);
        CHECK(idle < 0.25);
    }
    long_programs_let_workers_poll(x, parked);

    /* lz_shutdown ends them; the next execution parks them again */
    lz_free(x);
    lz_shutdown();
    CHECK_EQ_I(lz_omp_quiet_workers(), 0);
    x = lz_test_rand(1, -1, 1, 1, shape);
    CHECK(run_kernel(x) == 0);
    CHECK_EQ_I(lz_omp_quiet_workers(), parked);
    lz_free(x);

    /* a program that set a policy keeps it */
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OMP_WAIT_POLICY", "active", 1);
        setenv("LZ_TEST_OMP_CHILD", "1", 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return lz_test_done();
}
