#include "base/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

lz_metrics lz_counters;
/* the executor thread's (and a backend's) launch counts */
static atomic_llong graph_launches, kernel_launches;

void lz_metrics_add_launches(int64_t graphs, int64_t kernels)
{
    if (graphs) atomic_fetch_add(&graph_launches, graphs);
    if (kernels) atomic_fetch_add(&kernel_launches, kernels);
}

void lz_metrics_launches(int64_t *graphs, int64_t *kernels)
{
    *graphs = atomic_load(&graph_launches);
    *kernels = atomic_load(&kernel_launches);
}

void lz_metrics_launches_reset(void)
{
    atomic_store(&graph_launches, 0);
    atomic_store(&kernel_launches, 0);
}
static double execute_ms;
static pthread_mutex_t execute_mu = PTHREAD_MUTEX_INITIALIZER;

double lz_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void lz_metrics_add_execute_ms(double ms)
{
    pthread_mutex_lock(&execute_mu);
    execute_ms += ms;
    pthread_mutex_unlock(&execute_mu);
}

double lz_metrics_execute_ms(void)
{
    pthread_mutex_lock(&execute_mu);
    double ms = execute_ms;
    pthread_mutex_unlock(&execute_mu);
    return ms;
}

void lz_metrics_execute_ms_reset(void)
{
    pthread_mutex_lock(&execute_mu);
    execute_ms = 0;
    pthread_mutex_unlock(&execute_mu);
}
