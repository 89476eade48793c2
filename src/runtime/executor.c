#include "runtime/executor.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/metrics.h"

typedef struct job {
    lz_executable *exe;
    lz_buffer **in, **out;
    struct job *next;
} job;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;   /* queue not empty */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;   /* a job finished */
static job *head, *tail;
static int in_flight;            /* enqueued, not finished */
static char *unreported_error;   /* first failure since the last wait_all */
static pthread_once_t started = PTHREAD_ONCE_INIT;
/* recording-thread only: executions enqueued since the last wait_all */
static int enqueued_since_wait;

static char *first_input_error(const job *j)
{
    for (int i = 0; i < j->exe->prog.n_inputs; i++)
        if (j->in[i]->error) return j->in[i]->error;
    return NULL;
}

static void run_job(job *j)
{
    const lz_program *p = &j->exe->prog;
    char *err = NULL;
    const char *inherited = first_input_error(j);
    if (inherited) {
        err = strdup(inherited);
    } else {
        void *ptrs_small[256], **ptrs = ptrs_small;
        if (p->n_values > 256) ptrs = malloc(sizeof *ptrs * (size_t)p->n_values);
        for (int v = 0; v < p->n_values; v++) {
            const lz_value *val = &p->values[v];
            switch (val->kind) {
            case LZ_VALUE_INPUT: ptrs[v] = j->in[val->slot]->data; break;
            case LZ_VALUE_OUTPUT: ptrs[v] = j->out[val->slot]->data; break;
            default: ptrs[v] = (char *)j->exe->arena + val->offset; break;
            }
        }
        double t0 = lz_now_ms();
        const char *msg = j->exe->backend->run(j->exe->bexec, ptrs);
        lz_metrics_add_execute_ms(lz_now_ms() - t0);
        if (msg) err = strdup(msg);
        if (ptrs != ptrs_small) free(ptrs);
    }
    pthread_mutex_lock(&mu);
    for (int o = 0; o < p->n_outputs; o++) {
        if (err) j->out[o]->error = strdup(err);
        j->out[o]->ready = 1;
    }
    if (err && !unreported_error) unreported_error = strdup(err);
    in_flight--;
    pthread_cond_broadcast(&done_cv);
    pthread_mutex_unlock(&mu);
    free(err);
}

static void release_job(job *j)
{
    for (int i = 0; i < j->exe->prog.n_inputs; i++) lz_buffer_unref(j->in[i]);
    for (int o = 0; o < j->exe->prog.n_outputs; o++) lz_buffer_unref(j->out[o]);
    lz_executable_unref(j->exe);
    free(j->in);
    free(j->out);
    free(j);
}

static void *executor_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!head) pthread_cond_wait(&work_cv, &mu);
        job *j = head;
        head = j->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        run_job(j);
        release_job(j);
    }
    return NULL;
}

static void start_executor(void)
{
    pthread_t th;
    int rc = pthread_create(&th, NULL, executor_main, NULL);
    assert(rc == 0);
    (void)rc;
    pthread_detach(th);
}

void lz_executor_enqueue(lz_executable *exe, lz_buffer *const *in, lz_buffer *const *out)
{
    pthread_once(&started, start_executor);
    job *j = calloc(1, sizeof *j);
    assert(j);
    const lz_program *p = &exe->prog;
    j->in = malloc(sizeof *j->in * (size_t)(p->n_inputs + 1));
    j->out = malloc(sizeof *j->out * (size_t)(p->n_outputs + 1));
    assert(j->in && j->out);
    for (int i = 0; i < p->n_inputs; i++) { j->in[i] = in[i]; lz_buffer_ref(in[i]); }
    for (int o = 0; o < p->n_outputs; o++) { j->out[o] = out[o]; lz_buffer_ref(out[o]); }
    lz_executable_ref(exe);
    j->exe = exe;
    enqueued_since_wait = 1;
    pthread_mutex_lock(&mu);
    in_flight++;
    if (tail) tail->next = j; else head = j;
    tail = j;
    pthread_cond_signal(&work_cv);
    pthread_mutex_unlock(&mu);
}

int lz_executor_wait_buffer(lz_buffer *b)
{
    if (!b->host_seen) {
        /* counted whether or not the executor happened to finish first, so
           the counter depends on the program, not on timing */
        b->host_seen = 1;
        lz_counters.host_waits++;
    }
    double t0 = lz_now_ms();
    pthread_mutex_lock(&mu);
    while (!b->ready) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
    lz_counters.wait_ms += lz_now_ms() - t0;
    if (b->error) return lz_errorf_int("%s", b->error);
    return 0;
}

int lz_executor_wait_all(void)
{
    if (enqueued_since_wait) lz_counters.host_waits++;
    enqueued_since_wait = 0;
    double t0 = lz_now_ms();
    pthread_mutex_lock(&mu);
    while (in_flight) pthread_cond_wait(&done_cv, &mu);
    char *err = unreported_error;
    unreported_error = NULL;
    pthread_mutex_unlock(&mu);
    lz_counters.wait_ms += lz_now_ms() - t0;
    if (!err) return 0;
    lz_errorf("%s", err);
    free(err);
    return -1;
}

int lz_executor_in_flight(void)
{
    pthread_mutex_lock(&mu);
    int n = in_flight;
    pthread_mutex_unlock(&mu);
    return n;
}
