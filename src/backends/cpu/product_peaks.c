/* The two peaks autocast's rule compares (product_choice.c): float32
 * sgemm and oneDNN's bf16 matmul (f32 accumulation and result), the
 * kernels lazyc's products run on, each the best of a few 2048^3 products
 * taken in turn, so that load on a shared machine moves both alike. */
#include "backends/cpu/product_peaks.h"

#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"

enum { PEAK_N = 2048, PEAK_REPS = 4 };

typedef struct bf16_mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_memory_t m[3];
} bf16_mm;

static void bf16_drop(bf16_mm *q)
{
    for (int k = 0; k < 3; k++)
        if (q->m[k]) dnnl_memory_destroy(q->m[k]);
    if (q->prim) dnnl_primitive_destroy(q->prim);
    if (q->st) dnnl_stream_destroy(q->st);
    if (q->eng) dnnl_engine_destroy(q->eng);
}

/* 0 when oneDNN has a bf16 matmul that is not its reference loops. */
static int bf16_make(bf16_mm *q, void *a, void *b, void *c)
{
    const dnnl_dims_t dims = {PEAK_N, PEAK_N};
    dnnl_memory_desc_t d[3];
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    void *data[3] = {a, b, c};
    int bad = dnnl_engine_create(&q->eng, dnnl_cpu, 0) != dnnl_success ||
              dnnl_stream_create(&q->st, q->eng, dnnl_stream_default_flags) != dnnl_success;
    for (int k = 0; k < 3 && !bad; k++)
        bad = dnnl_memory_desc_init_by_tag(&d[k], 2, dims, k < 2 ? dnnl_bf16 : dnnl_f32,
                                           dnnl_ab) != dnnl_success;
    bad = bad || dnnl_matmul_desc_init(&md, &d[0], &d[1], NULL, &d[2]) != dnnl_success ||
          dnnl_primitive_desc_create(&pd, &md, NULL, q->eng, NULL) != dnnl_success ||
          dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
          !impl || !strncmp(impl, "ref", 3) || dnnl_primitive_create(&q->prim, pd) != dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    for (int k = 0; k < 3 && !bad; k++)
        bad = dnnl_memory_create(&q->m[k], &d[k], q->eng, data[k]) != dnnl_success;
    return bad ? -1 : 0;
}

static double gflops(double ms) { return ms > 0 ? 2.0 * PEAK_N * PEAK_N * (double)PEAK_N / ms / 1e6 : 0; }

typedef struct peaks { double f32, bf16; } peaks;

static void *measure(void *arg)
{
    peaks *out = arg;
    const size_t n = (size_t)PEAK_N * PEAK_N;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    uint16_t *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb);
    bf16_mm q;
    memset(&q, 0, sizeof q);
    if (a && b && c && ha && hb) {
        for (size_t i = 0; i < n; i++) {   /* small values, exact in bf16 */
            a[i] = (float)(i % 7) * 0.25f - 0.75f;
            b[i] = (float)(i % 5) * 0.5f - 1.0f;
            ha[i] = (uint16_t)(0x3e80 + i % 7);
            hb[i] = (uint16_t)(0xbe80 + i % 5);
        }
        const int have_bf16 = bf16_make(&q, ha, hb, c) == 0;
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, q.m[0]}, {DNNL_ARG_WEIGHTS, q.m[1]},
                                   {DNNL_ARG_DST, q.m[2]}};
        /* the first of each warms caches, pages and oneDNN's kernels */
        for (int r = 0; r <= PEAK_REPS; r++) {
            double t0 = lz_now_ms();
            if (dnnl_sgemm('N', 'N', PEAK_N, PEAK_N, PEAK_N, 1.0f, a, PEAK_N, b, PEAK_N, 0.0f, c,
                           PEAK_N) != dnnl_success)
                break;
            const double f = gflops(lz_now_ms() - t0);
            if (r > 0 && f > out->f32) out->f32 = f;
            if (!have_bf16) continue;
            t0 = lz_now_ms();
            if (dnnl_primitive_execute(q.prim, q.st, 3, args) != dnnl_success ||
                dnnl_stream_wait(q.st) != dnnl_success)
                break;
            const double g = gflops(lz_now_ms() - t0);
            if (r > 0 && g > out->bf16) out->bf16 = g;
        }
    }
    bf16_drop(&q);
    free(a);
    free(b);
    free(c);
    free(ha);
    free(hb);
    return NULL;
}

void lz_cpu_measure_peaks(double *f32, double *bf16)
{
    peaks p = {0, 0};
    pthread_t t;
    /* on a thread of its own: the recording thread must lead no OpenMP
       team (docs/threads.md, "OpenMP") */
    if (pthread_create(&t, NULL, measure, &p) == 0) pthread_join(t, NULL);
    else measure(&p);
    *f32 = p.f32;
    *bf16 = p.bf16;
}
