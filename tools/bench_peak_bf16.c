/* `lazyc bench --dtype bf16`: the bf16 peak "% peak" is then of, measured
 * in the same run as the models (as bench_peak.c measures fp32's): the
 * best of a few 2048^3 products on oneDNN's matmul primitive with bf16
 * operands and float32 accumulation and result, the kernel autocast's
 * matmuls run on. Where the CPU (as oneDNN sees it) has no bf16
 * instructions this reads oneDNN's emulation, or fails below AVX-512 (no
 * figure: the table says n/a). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dnnl.h>

#include "bench.h"

enum { PEAK_N = 2048, PEAK_MIN_REPS = 5, PEAK_MAX_REPS = 40 };
static const double PEAK_BUDGET_S = 1.0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_bf16_gflops(void)
{
    const int64_t n = PEAK_N;
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
    dnnl_memory_desc_t da, db, dc;
    dnnl_matmul_desc_t md;
    dnnl_dims_t dims = {n, n};
    double best = 0;
    uint16_t *a = malloc(sizeof *a * (size_t)(n * n)), *b = malloc(sizeof *b * (size_t)(n * n));
    float *c = malloc(sizeof *c * (size_t)(n * n));
    const char *impl = "";
    if (!a || !b || !c ||
        dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&st, eng, dnnl_stream_default_flags) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&da, 2, dims, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&db, 2, dims, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dc, 2, dims, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl || strncmp(impl, "ref", 3) == 0 ||   /* reference loops: no peak to speak of */
        dnnl_primitive_create(&prim, pd) != dnnl_success ||
        dnnl_memory_create(&ma, &da, eng, a) != dnnl_success ||
        dnnl_memory_create(&mb, &db, eng, b) != dnnl_success ||
        dnnl_memory_create(&mc, &dc, eng, c) != dnnl_success)
        goto done;
    for (int64_t i = 0; i < n * n; i++) {   /* small values exact in bf16 */
        a[i] = (uint16_t)(0x3e80 + (i % 7));
        b[i] = (uint16_t)(0xbe80 + (i % 5));
    }
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double start = now_s();
    for (int r = 0; r <= PEAK_MAX_REPS; r++) {   /* the first call warms up */
        if (r > PEAK_MIN_REPS && now_s() - start > PEAK_BUDGET_S)
            break;
        double t0 = now_s();
        if (dnnl_primitive_execute(prim, st, 3, args) != dnnl_success ||
            dnnl_stream_wait(st) != dnnl_success) {
            best = 0;
            break;
        }
        double gf = 2.0 * (double)n * (double)n * (double)n / (now_s() - t0) / 1e9;
        if (r > 0 && gf > best)
            best = gf;
    }
done:
    if (ma) dnnl_memory_destroy(ma);
    if (mb) dnnl_memory_destroy(mb);
    if (mc) dnnl_memory_destroy(mc);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (st) dnnl_stream_destroy(st);
    if (eng) dnnl_engine_destroy(eng);
    free(a);
    free(b);
    free(c);
    return best;
}

double bench_peak_bf16_gflops(void)
{
    return bench_alone(peak_bf16_gflops);
}

double bench_table_peak(const bench_table *t)
{
    return t->bf16 ? t->peak_bf16_gflops : t->peak_gflops;
}

int bench_parse_dtype(const char *s, int *bf16)
{
    if (strcmp(s, "f32") == 0 || strcmp(s, "fp32") == 0) *bf16 = 0;
    else if (strcmp(s, "bf16") == 0) *bf16 = 1;
    else return -1;
    return 0;
}

void bench_measure_bf16_peak(bench_table *t)
{
    double g = bench_peak_bf16_gflops();
    fprintf(stderr, "bf16 peak (2048^3, oneDNN matmul, f32 accumulation): %.1f GFLOP/s%s\n", g,
            g <= 0 ? " (not measurable: oneDNN has no bf16 matmul here)" : "");
    if (g > t->peak_bf16_gflops)
        t->peak_bf16_gflops = g;
}

void bench_print_bf16_peak(FILE *f, const bench_table *t)
{
    if (t->peak_bf16_gflops > 0)
        fprintf(f, "bf16 peak (2048^3 bf16 matmul, f32 accumulation, this run): %.1f GFLOP/s "
                   "(%.2fx fp32's); steps under autocast, %% peak is of it\n",
                t->peak_bf16_gflops, t->peak_gflops > 0 ? t->peak_bf16_gflops / t->peak_gflops : 0);
    else
        fprintf(f, "bf16 peak: not measured; steps under autocast, %% peak n/a\n");
}
