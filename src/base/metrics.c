#include "base/metrics.h"

#include <pthread.h>
#include <time.h>

lz_metrics lz_counters;
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
