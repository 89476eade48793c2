/* The public metrics calls (lz_metrics_get, _reset, _report). They gather
 * what every floor counts: the ground floor's counters (base/metrics.c),
 * device memory's peak (backend/memory.c) and the compile causes
 * (engine/explain.c), so they live on the engine's floor, above all three. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/memory.h"
#include "base/metrics.h"
#include "base/thread.h"
#include "engine/explain.h"

lz_metrics lz_metrics_get(void)
{
    /* The counters are plain integers the recording thread bumps: another
       thread's read would race with it (zeros and an error instead). */
    if (lz_owner_check("lz_metrics_get")) return (lz_metrics){0};
    lz_metrics m = lz_counters;
    m.execute_ms = lz_metrics_execute_ms();
    m.peak_bytes = lz_device_peak_bytes();
    lz_metrics_launches(&m.graph_launches, &m.kernel_launches);
    return m;
}

void lz_metrics_reset(void)
{
    if (lz_owner_check("lz_metrics_reset")) return;
    lz_metrics zero = {0};
    lz_counters = zero;
    lz_compile_causes_reset();
    lz_metrics_execute_ms_reset();
    lz_metrics_launches_reset();
    lz_device_peak_reset();
}

char *lz_metrics_report(void)
{
    if (lz_owner_check("lz_metrics_report")) return NULL;
    lz_metrics m = lz_metrics_get();
    enum { CAP = 4096 };
    char *s = malloc(CAP);
    if (!s) return NULL;
    int k = snprintf(s, CAP,
             "lazyc metrics\n"
             "  mark_steps            %lld\n"
             "  graphs                %lld\n"
             "  executions            %lld\n"
             "  compiles              %lld\n"
             "  cache_hits            %lld\n"
             "  ir_nodes              %lld\n"
             "  transfers_to_device   %lld\n"
             "  transfers_from_device %lld\n"
             "  host_waits            %lld\n"
             "  capture_replays       %lld\n"
             "  capture_fallbacks     %lld\n"
             "  peak_bytes            %lld (%.1f MiB)\n"
             "  trace_ms              %.3f\n"
             "  compile_ms            %.3f\n"
             "  execute_ms            %.3f\n"
             "  wait_ms               %.3f\n"
             "  flops                 %.4g\n"
             "  kernels               %lld\n"
             "  in_place_writes       %lld\n"
             "  bytes_to_device       %lld\n"
             "  bytes_from_device     %lld\n"
             "  graph_launches        %lld\n"
             "  kernel_launches       %lld\n",
             (long long)m.mark_steps, (long long)m.graphs, (long long)m.executions,
             (long long)m.compiles, (long long)m.cache_hits, (long long)m.ir_nodes,
             (long long)m.transfers_to_device, (long long)m.transfers_from_device,
             (long long)m.host_waits, (long long)m.capture_replays,
             (long long)m.capture_fallbacks, (long long)m.peak_bytes,
             m.peak_bytes / 1048576.0, m.trace_ms, m.compile_ms, m.execute_ms, m.wait_ms, m.flops,
             (long long)m.kernels, (long long)m.in_place_writes, (long long)m.bytes_to_device,
             (long long)m.bytes_from_device, (long long)m.graph_launches, (long long)m.kernel_launches);
    /* why the compiles above happened, most frequent first */
    k += snprintf(s + k, CAP - (size_t)k, "  compile causes       ");
    int done[LZ_CAUSE_COUNT] = {0}, listed = 0;
    for (;;) {
        int top = -1;
        for (int c = 0; c < LZ_CAUSE_COUNT; c++)
            if (!done[c] && lz_compile_cause_count(c) > 0 &&
                (top < 0 || lz_compile_cause_count(c) > lz_compile_cause_count(top)))
                top = c;
        if (top < 0 || k >= CAP) break;
        done[top] = 1;
        k += snprintf(s + k, CAP - (size_t)k, "%s %s %lld", listed++ ? "," : "",
                      lz_compile_cause_name(top), lz_compile_cause_count(top));
    }
    if (k < CAP) snprintf(s + k, CAP - (size_t)k, "%s\n", listed ? "" : " none");
    return s;
}
