/* The numbered semantics of docs/design.md (1-6, 9), asserted on counters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "backends/cpu/test_gate.h"
#include "engine/cache.h"
#include "engine/tensor.h"
#include "ops/test_gate.h"
#include "runtime/executor.h"

static const int64_t S23[2] = {2, 3};

static lz_tensor *ones23(void) { return lz_full(LZ_F32, 2, S23, 1.0); }

/* 1. Recording executes nothing; shape errors surface at record time. */
static void test_record_runs_nothing(void)
{
    lz_metrics_reset();
    lz_tensor *a = ones23(), *b = ones23();
    lz_tensor *c = lz_relu(lz_add(lz_mul(a, b), a));
    lz_metrics m = lz_metrics_get();
    CHECK(c != NULL);
    CHECK_EQ_I(m.graphs, 0);
    CHECK_EQ_I(m.executions, 0);
    CHECK_EQ_I(m.ir_nodes, 3);
    CHECK(lz_is_pending(c));

    const int64_t s4[1] = {4};
    lz_tensor *d = lz_full(LZ_F32, 1, s4, 1.0);
    lz_clear_error();
    lz_tensor *bad = lz_add(a, d);
    CHECK(bad == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "[2, 3]") && strstr(lz_last_error(), "[4]"));
    /* a NULL operand propagates, keeping the first message */
    lz_tensor *chain = lz_relu(lz_mul(bad, a));
    CHECK(chain == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "[4]"));
    lz_clear_error();
    CHECK_EQ_I(lz_metrics_get().executions, 0);
    lz_mark_step();
    CHECK_EQ_I(lz_wait(), 0);
    lz_free(a); lz_free(b); lz_free(c); lz_free(d);
}

/* 2 and 3. An empty barrier returns at once, even with an execution in
   flight; a barrier with pending IR enqueues one execution and returns
   without waiting for it. The gate kernel blocks the executor until the
   test opens it: if either barrier waited, this test would hang. */
static void test_barriers_do_not_wait(void)
{
    lz_wait();
    lz_metrics_reset();
    lz_tensor *x = ones23();
    lz_tensor *y = lz_test_gate(x);
    lz_tensor *z = lz_relu(y);
    lz_tensor *w = lz_add(x, x);
    lz_test_gate_close();
    lz_mark_step();
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.graphs, 1);
    CHECK_EQ_I(m.executions, 1);
    CHECK_EQ_I(m.host_waits, 0);
    CHECK(!lz_is_pending(y) && !lz_is_pending(z) && !lz_is_pending(w));
    CHECK(z->node->buf->writes_pending != 0 || !lz_test_gate_waiting());
    CHECK_EQ_I(lz_executor_in_flight(), 1);

    lz_mark_step();   /* empty, while the execution is held in flight */
    m = lz_metrics_get();
    CHECK_EQ_I(m.mark_steps, 2);
    CHECK_EQ_I(m.graphs, 1);
    CHECK_EQ_I(m.executions, 1);
    CHECK_EQ_I(m.host_waits, 0);
    CHECK_EQ_I(lz_executor_in_flight(), 1);

    /* 4 (part). Reading data that no execution produces does not wait for
       the one in flight. */
    float host[6];
    CHECK_EQ_I(lz_to_host(x, host, sizeof host), 0);
    CHECK_EQ_I(lz_metrics_get().host_waits, 0);
    CHECK_EQ_I(lz_executor_in_flight(), 1);

    lz_test_gate_open();
    CHECK_EQ_I(lz_to_host(z, host, sizeof host), 0);
    CHECK_NEAR(host[5], 1.0, 0);
    CHECK_EQ_I(lz_metrics_get().host_waits, 1);
    CHECK_EQ_I(lz_wait(), 0);
    lz_free(x); lz_free(y); lz_free(z); lz_free(w);
}

/* 4. Reading a pending tensor syncs just that tensor: one graph, one
   execution, and the others stay pending. */
static void test_read_syncs_one(void)
{
    lz_wait();
    lz_metrics_reset();
    lz_tensor *x = ones23();
    lz_tensor *a = lz_add(x, x);
    lz_tensor *b = lz_mul(a, a);
    float v = lz_item(lz_sum(a));
    CHECK_NEAR(v, 12.0, 0);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.graphs, 1);
    CHECK_EQ_I(m.executions, 1);
    CHECK_EQ_I(m.host_waits, 1);
    CHECK(lz_is_pending(b));
    CHECK(lz_is_pending(a));
    /* a partial sync, then a barrier: the barrier's graph holds only what
       is still pending; a's value is computed once */
    CHECK_EQ_I(lz_sync(&a, 1, 1), 0);
    CHECK(!lz_is_pending(a) && lz_is_pending(b));
    lz_mark_step();
    m = lz_metrics_get();
    CHECK_EQ_I(m.executions, 3);
    CHECK(!lz_is_pending(b));
    CHECK_NEAR(lz_item(lz_sum(b)), 24.0, 0);
    lz_free(x); lz_free(a); lz_free(b);
}

/* 5. The data of a data leaf is read without any graph or execution. */
static void test_data_leaf_reads_nothing(void)
{
    lz_wait();
    lz_metrics_reset();
    float src[6] = {1, 2, 3, 4, 5, 6}, dst[6] = {0};
    lz_tensor *x = lz_from_host(src, LZ_F32, 2, S23);
    CHECK_EQ_I(lz_to_host(x, dst, sizeof dst), 0);
    CHECK(memcmp(src, dst, sizeof src) == 0);
    CHECK_NEAR(lz_item(lz_scalar(2.5f)), 2.5, 0);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.graphs, 0);
    CHECK_EQ_I(m.executions, 0);
    CHECK_EQ_I(m.host_waits, 0);
    CHECK_EQ_I(m.transfers_to_device, 2);
    CHECK_EQ_I(m.transfers_from_device, 2);
    /* a wrong host size is an error, not a crash */
    CHECK_EQ_I(lz_to_host(x, dst, 5), -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "24 bytes"));
    lz_clear_error();
    lz_free(x);
}

static float step_value(lz_tensor *w, float scale)
{
    lz_scope_begin();
    lz_tensor *lr = lz_scalar(scale);
    lz_tensor *y = lz_keep(lz_sum(lz_mul(lz_relu(w), lr)));
    lz_scope_end();
    lz_mark_step();
    float v = lz_item(y);
    lz_free(y);
    return v;
}

/* 6. New values, same structure: a cache hit. A scalar that changes every
   step is data, not a constant: no recompile. */
static void test_cache_hits_and_scalars(void)
{
    lz_wait();
    lz_cache_clear();   /* earlier tests compiled some of these graphs */
    lz_metrics_reset();
    lz_tensor *w = ones23();
    for (int i = 0; i < 5; i++) CHECK_NEAR(step_value(w, (float)i), 6.0 * i, 1e-6);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.graphs, 5);
    CHECK_EQ_I(m.compiles, 1);
    CHECK_EQ_I(m.cache_hits, 4);

    /* two uses of one buffer and two buffers of equal shape differ */
    lz_tensor *a = ones23(), *b = ones23();
    lz_tensor *aa = lz_add(a, a), *ab = lz_add(a, b), *ba = lz_add(b, a);
    CHECK_EQ_I(lz_sync(&aa, 1, 0), 0);
    CHECK_EQ_I(lz_sync(&ab, 1, 0), 0);
    CHECK_EQ_I(lz_sync(&ba, 1, 0), 0);   /* same structure as a+b: a hit */
    m = lz_metrics_get();
    CHECK_EQ_I(m.compiles, 3);
    CHECK_EQ_I(m.cache_hits, 5);
    CHECK_NEAR(lz_item(lz_sum(aa)), 12.0, 0);
    lz_free(w); lz_free(a); lz_free(b); lz_free(aa); lz_free(ab); lz_free(ba);
}

/* The cache is an LRU bounded by its capacity; pinned entries stay. */
static void test_cache_lru_pinning(void)
{
    lz_wait();
    lz_cache_clear();
    lz_cache_set_capacity(2);
    lz_metrics_reset();
    lz_tensor *x = ones23();
    lz_tensor *r1 = lz_relu(x);
    CHECK_EQ_I(lz_sync(&r1, 1, 0), 0);
    /* pin the relu executable, as a capture would */
    lz_tensor *probe = lz_relu(x);
    lz_graph g;
    lz_graph_cut(&g, &probe->node, 1);
    lz_executable *e = lz_cache_find(&g);
    CHECK(e != NULL);
    if (e) { e->pinned = 1; lz_executable_unref(e); }
    lz_graph_release(&g);
    lz_tensor *t2 = lz_exp(x), *t3 = lz_neg(x), *t4 = lz_tanh(x);
    lz_tensor *ts[3] = {t2, t3, t4};
    for (int i = 0; i < 3; i++) CHECK_EQ_I(lz_sync(&ts[i], 1, 0), 0);
    CHECK_EQ_I(lz_cache_size(), 2);
    CHECK_EQ_I(lz_sync(&probe, 1, 0), 0);      /* still cached: pinned */
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.compiles, 4);
    CHECK_EQ_I(m.cache_hits, 1);
    lz_tensor *t2b = lz_exp(x);                 /* evicted: compiles again */
    CHECK_EQ_I(lz_sync(&t2b, 1, 1), 0);
    CHECK_EQ_I(lz_metrics_get().compiles, 5);
    lz_cache_clear();
    lz_cache_set_capacity(512);
    lz_free(x); lz_free(r1); lz_free(probe); lz_free(t2); lz_free(t3); lz_free(t4); lz_free(t2b);
}

/* An error raised inside an execution is returned by the next read and
   the next wait, and the following step runs normally. */
static void test_execution_error_is_returned(void)
{
    lz_wait();
    const int64_t s2[2] = {2, 3}, n2[1] = {2};
    float logits[6] = {0};
    int64_t bad_target[2] = {1, 7};   /* class 7 of 3 */
    lz_tensor *l = lz_from_host(logits, LZ_F32, 2, s2);
    lz_tensor *t = lz_from_host(bad_target, LZ_I64, 1, n2);
    lz_tensor *loss = lz_cross_entropy(l, t);
    CHECK(loss != NULL);
    lz_mark_step();
    lz_clear_error();
    float v = lz_item(loss);
    CHECK(isnan(v));
    CHECK(lz_last_error() != NULL);
    CHECK_EQ_I(lz_wait(), -1);
    CHECK_EQ_I(lz_wait(), 0);                  /* reported once, not lost */
    lz_clear_error();
    lz_tensor *ok = lz_sum(l);
    CHECK_NEAR(lz_item(ok), 0.0, 0);
    CHECK_EQ_I(lz_wait(), 0);
    lz_free(l); lz_free(t); lz_free(loss); lz_free(ok);
}

/* 9. The report names every counter. */
static void test_report_names_counters(void)
{
    char *r = lz_metrics_report();
    const char *names[] = {"mark_steps", "graphs", "executions", "compiles", "cache_hits",
                           "ir_nodes", "transfers_to_device", "transfers_from_device",
                           "host_waits", "capture_replays", "capture_fallbacks", "peak_bytes",
                           "trace_ms", "compile_ms", "execute_ms", "wait_ms", "kernels",
                           "in_place_writes", "bytes_to_device", "bytes_from_device"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) CHECK(r && strstr(r, names[i]));
    free(r);
}

/* Scopes drop what they made; kept handles survive. */
static void test_scopes(void)
{
    lz_wait();
    lz_mark_step();
    lz_scope_begin();
    lz_tensor *x = ones23();
    lz_tensor *kept = lz_keep(lz_add(x, x));
    lz_tensor *dropped = lz_mul(x, x);
    (void)dropped;
    CHECK_EQ_I(lz_live_count(), 2);
    lz_scope_end();
    CHECK_EQ_I(lz_live_count(), 1);   /* only the kept one is still pending */
    CHECK_NEAR(lz_item(lz_sum(kept)), 12.0, 0);
    lz_free(kept);
}

int main(void)
{
    test_record_runs_nothing();
    test_barriers_do_not_wait();
    test_read_syncs_one();
    test_data_leaf_reads_nothing();
    test_cache_hits_and_scalars();
    test_cache_lru_pinning();
    test_execution_error_is_returned();
    test_report_names_counters();
    test_scopes();
    return lz_test_done();
}
