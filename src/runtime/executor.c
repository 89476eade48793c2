#include "runtime/executor.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/metrics.h"
#include "runtime/omp_quiet.h"

/* One allocation per job: the struct, then in[], out[] and keep[]. */
typedef struct job {
    lz_executable *exe;
    lz_buffer **in, **out;
    int *keep;               /* per output: input slot it falls back to, or -1; may be NULL */
    struct job *next;
    int inline_run;          /* on the recording thread's stack: nothing to free */
    lz_buffer *slots[];      /* in[] then out[]; keep[] after them */
} job;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;   /* queue not empty */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;   /* what the host waits for is done */
/* under mu: what the recording thread (the only one that waits) waits for,
   so a finished job wakes it only when that is done, not after every job
   of a queue it waits to drain */
static const lz_buffer *awaited;  /* its writes_pending reaching 0, or NULL */
static int awaiting_all;          /* in_flight reaching 0 */
static job *head, *tail;
static int in_flight;            /* enqueued, not finished */
static char *unreported_error;   /* first failure since the last wait_all */
/* recording-thread only: the executor thread runs (started on the first
   enqueue, stopped by lz_executor_shutdown) */
static int running;
static pthread_t thread;
static int stopping;             /* under mu: the thread exits once the queue is empty */
/* recording-thread only: executions enqueued since the last wait_all */
static int enqueued_since_wait;

static char *first_input_error(const job *j)
{
    for (int i = 0; i < j->exe->prog.n_inputs; i++)
        if (j->in[i]->error) return j->in[i]->error;
    return NULL;
}

static max_align_t no_arena;

/* An execution's reference: job_refs first, so that a reader taking refs
   and then job_refs never counts fewer host references than there are. */
static void job_unref(lz_buffer *b)
{
    atomic_fetch_sub(&b->job_refs, 1);
    lz_buffer_unref(b);
}

static void job_ref(lz_buffer *b)
{
    lz_buffer_ref(b);
    atomic_fetch_add(&b->job_refs, 1);
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
            case LZ_VALUE_INPUT: ptrs[v] = lz_buffer_address(j->in[val->slot]); break;
            case LZ_VALUE_OUTPUT: ptrs[v] = lz_buffer_address(j->out[val->slot]); break;
            /* a graph whose intermediates are all empty has no arena; they
               still get a valid address, as empty buffers do */
            case LZ_VALUE_VIEW: break;   /* below, once every other value has its memory */
            default: ptrs[v] = j->exe->arena ? (char *)j->exe->arena + val->offset : (void *)&no_arena; break;
            }
        }
        for (int v = 0; v < p->n_values; v++)
            if (p->values[v].kind == LZ_VALUE_VIEW) ptrs[v] = ptrs[p->values[v].view_of];
        if (!j->inline_run) lz_omp_quiet_before_run(!j->exe->ran, p->flops);
        j->exe->ran = 1;
        double t0 = lz_now_ms();
        const char *msg = j->exe->backend->run(j->exe->bexec, ptrs, j->exe->arena);
        const double ms = lz_now_ms() - t0;
        if (!j->inline_run) lz_omp_quiet_after_run(ms);
        lz_metrics_add_execute_ms(ms);
        if (msg) err = strdup(msg);
        if (ptrs != ptrs_small) free(ptrs);
    }
    /* A failed run leaves the state it would have updated at its previous
       value, so the next step starts from it; its other results report the
       error. Only this thread writes a buffer's error: no lock needed to
       read an input's. */
    char *kept = NULL;
    if (err && j->keep) {
        kept = calloc((size_t)p->n_outputs + 1, 1);
        for (int o = 0; kept && o < p->n_outputs; o++) {
            const lz_buffer *src = j->keep[o] >= 0 ? j->in[j->keep[o]] : NULL;
            if (!src || src->error || src->nbytes != j->out[o]->nbytes) continue;
            /* a donated buffer is both: the in-place tail did not run */
            /* on the device, in queue order after the failed run */
            if (src != j->out[o] && lz_buffer_copy(j->out[o], src, src->nbytes)) continue;
            kept[o] = 1;
        }
    }
    /* The job's references go before it counts as finished: once a wait
       returns, memory the host no longer holds is free (the next step can
       reuse it, and the peak and bytes-held metrics do not depend on how
       soon this thread got to run). */
    const int n_inputs = p->n_inputs, n_outputs = p->n_outputs;
    lz_executable_unref(j->exe);   /* p is gone with it */
    /* Every reference this thread drops goes under mu, inputs' too:
       lz_executor_overwritable reads a buffer's two counters as a pair,
       and between job_unref's two decrements the job's reference reads as
       a host's. A replay enqueued in that instant did not donate (TSan's
       timing hit it in test_capture_memory: 479 of 480 writes in place). */
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_inputs; i++) job_unref(j->in[i]);
    int wake = 0;
    for (int o = 0; o < n_outputs; o++) {
        lz_buffer *b = j->out[o];
        if (err && !(kept && kept[o])) {
            free(b->error);   /* an input's failure this run inherited */
            b->error = strdup(err);
        }
        b->writes_pending--;
        wake |= b == awaited && !b->writes_pending;
        job_unref(b);
    }
    free(kept);
    if (err && !unreported_error) unreported_error = strdup(err);
    in_flight--;
    if (wake || (awaiting_all && !in_flight)) pthread_cond_signal(&done_cv);
    pthread_mutex_unlock(&mu);
    free(err);
    if (j->inline_run) return;
    free(j);
}

static void *executor_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!head && !stopping) pthread_cond_wait(&work_cv, &mu);
        if (!head) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        job *j = head;
        head = j->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        run_job(j);
    }
    return NULL;
}

/* A program that returns from main with executions in flight (it never
   waited) exits while the executor thread runs them, and exit() runs the
   libraries' destructors under it: oneDNN's kernels are static objects, and
   a product running on them crashed (test_exit_in_flight). So exit first
   lets the queue drain. Not on the executor thread itself (a kernel that
   exits would wait for its own job). */
static void drain_at_exit(void)
{
    if (!running || pthread_equal(pthread_self(), thread)) return;
    pthread_mutex_lock(&mu);
    awaiting_all = 1;
    while (in_flight) pthread_cond_wait(&done_cv, &mu);
    awaiting_all = 0;
    pthread_mutex_unlock(&mu);
}

/* Joinable, not detached: lz_executor_shutdown joins it, so its stack and
   the OpenMP team it leads are released with it. */
static void start_executor(void)
{
    static int at_exit;
    if (!at_exit) at_exit = atexit(drain_at_exit) == 0;
    lz_omp_quiet_start();
    running = pthread_create(&thread, NULL, executor_main, NULL) == 0;
}

/* Without memory for a job (or a thread to run it), the execution runs
   here, after those in flight: slower, never lost. */
static void run_inline(lz_executable *exe, lz_buffer *const *in, lz_buffer *const *out,
                       const int *keep)
{
    const lz_program *p = &exe->prog;
    pthread_mutex_lock(&mu);
    awaiting_all = 1;
    while (in_flight) pthread_cond_wait(&done_cv, &mu);
    awaiting_all = 0;
    pthread_mutex_unlock(&mu);
    job j = {.exe = exe, .in = (lz_buffer **)in, .out = (lz_buffer **)out, .keep = (int *)keep,
             .inline_run = 1};
    for (int i = 0; i < p->n_inputs; i++) job_ref(in[i]);
    for (int o = 0; o < p->n_outputs; o++) job_ref(out[o]);
    lz_executable_ref(exe);
    enqueued_since_wait = 1;
    pthread_mutex_lock(&mu);
    for (int o = 0; o < p->n_outputs; o++) out[o]->writes_pending++;
    in_flight++;
    pthread_mutex_unlock(&mu);
    run_job(&j);
}

void lz_executor_enqueue(lz_executable *exe, lz_buffer *const *in, lz_buffer *const *out,
                         const int *keep)
{
    if (!running) start_executor();
    const lz_program *p = &exe->prog;
    const size_t n_slots = (size_t)p->n_inputs + (size_t)p->n_outputs;
    job *j = running ? lz_host_malloc(sizeof *j + sizeof(lz_buffer *) * n_slots +
                                      (keep ? sizeof(int) * (size_t)p->n_outputs : 0))
                     : NULL;
    if (!j) {
        run_inline(exe, in, out, keep);
        return;
    }
    j->next = NULL;
    j->inline_run = 0;
    j->in = j->slots;
    j->out = j->slots + p->n_inputs;
    j->keep = keep ? (int *)(j->slots + n_slots) : NULL;
    for (int i = 0; i < p->n_inputs; i++) { j->in[i] = in[i]; job_ref(in[i]); }
    for (int o = 0; o < p->n_outputs; o++) { j->out[o] = out[o]; job_ref(out[o]); }
    if (keep) memcpy(j->keep, keep, sizeof *j->keep * (size_t)p->n_outputs);
    lz_executable_ref(exe);
    j->exe = exe;
    enqueued_since_wait = 1;
    pthread_mutex_lock(&mu);
    for (int o = 0; o < p->n_outputs; o++) out[o]->writes_pending++;
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
    awaited = b;
    while (b->writes_pending) pthread_cond_wait(&done_cv, &mu);
    awaited = NULL;
    pthread_mutex_unlock(&mu);
    lz_counters.wait_ms += lz_now_ms() - t0;
    if (b->error) return lz_errorf_int("%s", b->error);
    return 0;
}

int lz_executor_overwritable(lz_buffer *b, size_t nbytes)
{
    pthread_mutex_lock(&mu);
    int host_refs = atomic_load(&b->refs) - atomic_load(&b->job_refs);
    int ok = host_refs == 1 && lz_buffer_address(b) && !b->error && b->nbytes == nbytes;
    pthread_mutex_unlock(&mu);
    return ok;
}

int lz_executor_wait_all(void)
{
    if (enqueued_since_wait) lz_counters.host_waits++;
    enqueued_since_wait = 0;
    double t0 = lz_now_ms();
    pthread_mutex_lock(&mu);
    awaiting_all = 1;
    while (in_flight) pthread_cond_wait(&done_cv, &mu);
    awaiting_all = 0;
    char *err = unreported_error;
    unreported_error = NULL;
    pthread_mutex_unlock(&mu);
    lz_counters.wait_ms += lz_now_ms() - t0;
    if (!err) return 0;
    lz_errorf("%s", err);
    free(err);
    return -1;
}

void lz_executor_note_error(const char *msg)
{
    if (!msg) msg = "a step failed";
    pthread_mutex_lock(&mu);
    if (!unreported_error) unreported_error = strdup(msg);
    pthread_mutex_unlock(&mu);
}

int lz_executor_in_flight(void)
{
    pthread_mutex_lock(&mu);
    int n = in_flight;
    pthread_mutex_unlock(&mu);
    return n;
}

void lz_executor_shutdown(void)
{
    if (!running) {
        lz_omp_quiet_stop();
        return;
    }
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_signal(&work_cv);
    pthread_mutex_unlock(&mu);
    /* the thread drains the queue before it exits */
    pthread_join(thread, NULL);
    lz_omp_quiet_stop();
    running = 0;
    stopping = 0;
    free(unreported_error);
    unreported_error = NULL;
    enqueued_since_wait = 0;
}
