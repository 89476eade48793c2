/* The writers of `lazyc bench`'s results: the table on stdout, CSV,
 * markdown and the JSON object of issue 5. Every figure that a run did not
 * measure prints as "n/a" (null in JSON), never as 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *const bench_mode_names[BENCH_MODES] = { "eager", "lazy", "captured", "torch" };

static double ms_or_nan(double ms) { return ms > 0 ? ms : NAN; }

double bench_ratio(double num_ms, double den_ms)
{
    return num_ms > 0 && den_ms > 0 ? den_ms / num_ms : NAN;
}

double bench_gflops(const bench_row *r)
{
    const bench_mode_result *c = &r->mode[BENCH_CAPTURED];
    return c->ms > 0 && c->flops_per_step > 0 ? c->flops_per_step / c->ms / 1e6 : NAN;
}

/* What the GFLOP/s column counts, under the table: the model's FLOPs,
   which the Winograd steps do not all perform. */
static const char flops_note[] =
    "GFLOP/s counts every convolution as the direct sum (the model's FLOPs). 3x3\n"
    "convolutions that run by Winograd's algorithm do about a quarter of those\n"
    "multiplications, so % peak can pass 100% (LZ_WINOGRAD=0: every step direct).";

static double pct_peak(const bench_table *t, const bench_row *r)
{
    const double peak = bench_table_peak(t);
    return peak > 0 ? 100.0 * bench_gflops(r) / peak : NAN;
}

/* The columns every writer shares, by index; geometric means skip the
   rows where a column is missing. */
enum { C_TORCH, C_EAGER, C_LAZY, C_CAPTURED, C_CAP_LAZY, C_CAP_TORCH, C_EXECS, C_COMPILES,
       C_GFLOPS, C_PCT, C_MIB, C_TORCH_MIB, N_COLS };

static double column(const bench_table *t, const bench_row *r, int c)
{
    const bench_mode_result *cap = &r->mode[BENCH_CAPTURED];
    switch (c) {
    case C_TORCH: return ms_or_nan(r->torch_ms);
    case C_EAGER: return ms_or_nan(r->mode[BENCH_EAGER].ms);
    case C_LAZY: return ms_or_nan(r->mode[BENCH_LAZY].ms);
    case C_CAPTURED: return ms_or_nan(cap->ms);
    case C_CAP_LAZY: return bench_ratio(cap->ms, r->mode[BENCH_LAZY].ms);
    case C_CAP_TORCH: return bench_ratio(cap->ms, r->torch_ms);
    case C_EXECS: return cap->ms > 0 ? cap->executions_per_step : NAN;
    case C_COMPILES: return cap->ms > 0 ? (double)cap->compiles : NAN;
    case C_GFLOPS: return bench_gflops(r);
    case C_PCT: return pct_peak(t, r);
    case C_MIB: return cap->ms > 0 ? cap->peak_bytes / 1048576.0 : NAN;
    case C_TORCH_MIB: return r->torch_peak_bytes >= 0 ? r->torch_peak_bytes / 1048576.0 : NAN;
    default: return NAN;
    }
}

static double geomean(const bench_table *t, int c)
{
    double s = 0;
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        double v = column(t, &t->rows[i], c);
        if (isfinite(v) && v > 0) {
            s += log(v);
            n++;
        }
    }
    return n ? exp(s / n) : NAN;
}

/* One cell: "n/a" for a missing value, else the value in the column's
   format ("x" after ratios). */
static void cell(char *buf, size_t cap, int c, double v)
{
    if (!isfinite(v)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    switch (c) {
    case C_CAP_LAZY:
    case C_CAP_TORCH: snprintf(buf, cap, "%.2fx", v); break;
    case C_EXECS: snprintf(buf, cap, "%.2f", v); break;
    case C_COMPILES: snprintf(buf, cap, "%.0f", v); break;
    case C_PCT: snprintf(buf, cap, "%.1f%%", v); break;
    case C_GFLOPS:
    case C_MIB:
    case C_TORCH_MIB: snprintf(buf, cap, "%.1f", v); break;
    default: snprintf(buf, cap, v >= 100 ? "%.1f" : "%.2f", v); break;
    }
}

static const char *const heads[N_COLS] = {
    "torch ms", "eager ms", "lazy ms", "captured ms", "cap/lazy", "cap/torch", "execs/step",
    "compiles", "GFLOP/s", "% peak", "MiB", "torch MiB",
};
static const char *const csv_heads[N_COLS] = {
    "torch_ms", "eager_ms", "lazy_ms", "captured_ms", "captured_vs_lazy", "captured_vs_torch",
    "executions_per_step", "compiles", "gflops", "pct_peak", "peak_mib", "torch_peak_mib",
};
/* the stdout table leaves out the memory columns (they are in the files) */
enum { N_TABLE_COLS = C_PCT + 1 };

/* The fastest BLAS speed any PyTorch run reported, and its library: every
   run calls the same library, and a busy machine only ever slows one
   (a single slow reading of OpenBLAS, 63 GFLOP/s against a 455 peak, once
   raised the warning below). */
static const bench_row *best_blas(const bench_table *t)
{
    const bench_row *best = NULL;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].torch_blas_gflops > 0 &&
            (!best || t->rows[i].torch_blas_gflops > best->torch_blas_gflops))
            best = &t->rows[i];
    return best;
}

const char *bench_blas_warning(const bench_table *t, char *buf, size_t cap)
{
    const bench_row *r = best_blas(t);
    /* OpenBLAS reaches well over half the sgemm peak at 512^3; the
       reference BLAS about 2% */
    double floor = t->peak_gflops > 0 ? 0.1 * t->peak_gflops : 30.0;
    if (!r || r->torch_blas_gflops >= floor)
        return NULL;
    snprintf(buf, cap,
             "PyTorch's BLAS runs a 512^3 sgemm at %.1f GFLOP/s at best, so it is not OpenBLAS\n"
             "  (%s). Its linear layers are 20-60x slower than\n"
             "  they would be, so its times for BERT_pytorch, timm_vision_transformer,\n"
             "  alexnet and vgg16 are not a fair reference; install libopenblas0-pthread\n"
             "  (it becomes the libblas.so.3 alternative) and run again.",
             r->torch_blas_gflops, r->torch_blas[0] ? r->torch_blas : "libblas.so.3");
    return buf;
}

void bench_print_table(FILE *f, const bench_table *t)
{
    static const int width[N_COLS] = { 9, 9, 9, 11, 8, 9, 10, 8, 8, 7, 8, 9 };
    char buf[64];
    fprintf(f, "%-24s", "model");
    for (int c = 0; c < N_TABLE_COLS; c++)
        fprintf(f, " %*s", width[c], heads[c]);
    fprintf(f, "\n");
    for (int i = 0; i <= t->n; i++) {
        const bench_row *r = i < t->n ? &t->rows[i] : NULL;
        fprintf(f, "%-24s", r ? r->model : "geometric mean");
        for (int c = 0; c < N_TABLE_COLS; c++) {
            if (!r && c == C_COMPILES)
                snprintf(buf, sizeof buf, "-");
            else
                cell(buf, sizeof buf, c, r ? column(t, r, c) : geomean(t, c));
            fprintf(f, " %*s", width[c], buf);
        }
        fprintf(f, "\n");
    }
    bench_print_first_table(f, t, 0);
    if (t->peak_gflops > 0)
        fprintf(f, "\nfp32 peak (2048^3 sgemm, this run): %.1f GFLOP/s\n", t->peak_gflops);
    if (t->bf16)
        bench_print_bf16_peak(f, t);
    else
        fprintf(f, "\nfp32 peak: not measured\n");
    fprintf(f, "%s\n", flops_note);
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].note[0])
            fprintf(f, "note: %s: %s\n", t->rows[i].model, t->rows[i].note);
    char warn[640];
    if (bench_blas_warning(t, warn, sizeof warn))
        fprintf(f, "warning: %s\n", warn);
}

int bench_write_csv(const char *path, const bench_table *t)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    char buf[64];
    fprintf(f, "model,params");
    for (int c = 0; c < N_COLS; c++)
        fprintf(f, ",%s", csv_heads[c]);
    fprintf(f, ",eager_executions_per_step,lazy_executions_per_step");
    bench_first_csv_head(f);
    fprintf(f, ",note\n");
    for (int i = 0; i <= t->n; i++) {
        const bench_row *r = i < t->n ? &t->rows[i] : NULL;
        if (r)
            fprintf(f, "%s,%lld", r->model, (long long)r->params);
        else
            fprintf(f, "geometric_mean,");
        for (int c = 0; c < N_COLS; c++) {
            double v = r ? column(t, r, c) : c == C_COMPILES ? NAN : geomean(t, c);
            if (isfinite(v))
                snprintf(buf, sizeof buf, "%.6g", v);
            else
                buf[0] = '\0';
            fprintf(f, ",%s", buf);
        }
        for (int md = BENCH_EAGER; md <= BENCH_LAZY; md++)
            if (r && r->mode[md].ms > 0)
                fprintf(f, ",%.6g", r->mode[md].executions_per_step);
            else
                fprintf(f, ",");
        bench_first_csv_row(f, r);
        /* notes are free text: quote them, doubling quotes */
        fprintf(f, ",\"");
        for (const char *p = r ? r->note : ""; *p; p++)
            fprintf(f, *p == '"' ? "\"\"" : "%c", *p);
        fprintf(f, "\"\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

int bench_write_markdown(const char *path, const bench_table *t)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    char buf[64];
    fprintf(f, "# lazyc bench --size %s\n\n", t->size);
    fprintf(f, "Median training-step time (forward, cross-entropy, backward, SGD momentum 0.9)\n"
               "over %ld interleaved repetitions after %ld warm-up steps; PyTorch 1.13 eager on\n"
               "2 threads in the same run. cap/lazy and cap/torch are speedups of captured mode.\n"
               "execs/step, compiles, GFLOP/s and MiB are captured mode's; MiB is lazyc's\n"
               "device memory at the step's peak, torch MiB PyTorch's resident-set growth.\n\n",
            t->steps, t->warmup);
    fprintf(f, "| model |");
    for (int c = 0; c < N_COLS; c++)
        fprintf(f, " %s |", heads[c]);
    fprintf(f, "\n| --- |");
    for (int c = 0; c < N_COLS; c++)
        fprintf(f, " ---: |");
    fprintf(f, "\n");
    for (int i = 0; i <= t->n; i++) {
        const bench_row *r = i < t->n ? &t->rows[i] : NULL;
        fprintf(f, "| %s |", r ? r->model : "**geometric mean**");
        for (int c = 0; c < N_COLS; c++) {
            if (!r && c == C_COMPILES)
                snprintf(buf, sizeof buf, "-");
            else
                cell(buf, sizeof buf, c, r ? column(t, r, c) : geomean(t, c));
            fprintf(f, " %s |", buf);
        }
        fprintf(f, "\n");
    }
    bench_print_first_table(f, t, 1);
    if (t->peak_gflops > 0)
        fprintf(f, "\nfp32 peak (2048^3 sgemm, this run): %.1f GFLOP/s\n", t->peak_gflops);
    if (t->bf16)
        bench_print_bf16_peak(f, t);
    fprintf(f, "\n%s\n", flops_note);
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].note[0])
            fprintf(f, "\n- %s: %s", t->rows[i].model, t->rows[i].note);
    char warn[640];
    if (bench_blas_warning(t, warn, sizeof warn))
        fprintf(f, "\n**Warning**: %s", warn);
    fprintf(f, "\n");
    return fclose(f) == 0 ? 0 : -1;
}

static void json_num(FILE *f, const char *key, double v, const char *fmt)
{
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fprintf(f, "null");
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void bench_print_json(FILE *f, const bench_table *t)
{
    fprintf(f, "{\"size\": ");
    json_str(f, t->size);
    json_num(f, "peak_gflops", t->peak_gflops > 0 ? t->peak_gflops : NAN, "%.3f");
    if (t->bf16)
        json_num(f, "peak_bf16_gflops", t->peak_bf16_gflops > 0 ? t->peak_bf16_gflops : NAN, "%.3f");
    const bench_row *blas = best_blas(t);
    json_num(f, "torch_blas_gflops", blas ? blas->torch_blas_gflops : NAN, "%.3f");
    fprintf(f, ", \"rows\": [");
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        const bench_mode_result *cap = &r->mode[BENCH_CAPTURED];
        fprintf(f, "%s\n  {\"model\": ", i ? "," : "");
        json_str(f, r->model);
        json_num(f, "torch_ms", column(t, r, C_TORCH), "%.4f");
        json_num(f, "eager_ms", column(t, r, C_EAGER), "%.4f");
        json_num(f, "lazy_ms", column(t, r, C_LAZY), "%.4f");
        json_num(f, "captured_ms", column(t, r, C_CAPTURED), "%.4f");
        json_num(f, "executions_per_step", column(t, r, C_EXECS), "%.6g");
        json_num(f, "compiles", column(t, r, C_COMPILES), "%.0f");
        json_num(f, "gflops", column(t, r, C_GFLOPS), "%.4f");
        json_num(f, "peak_bytes", cap->ms > 0 ? (double)cap->peak_bytes : NAN, "%.0f");
        /* beyond issue 5's keys: what the table and CSV also show */
        json_num(f, "pct_peak", column(t, r, C_PCT), "%.3f");
        json_num(f, "torch_peak_bytes",
                 r->torch_peak_bytes >= 0 ? (double)r->torch_peak_bytes : NAN, "%.0f");
        json_num(f, "params", (double)r->params, "%.0f");
        json_num(f, "kernels_per_step", cap->ms > 0 ? cap->kernels_per_step : NAN, "%.6g");
        for (int md = BENCH_EAGER; md <= BENCH_LAZY; md++) {
            char key[48];
            snprintf(key, sizeof key, "%s_executions_per_step", bench_mode_names[md]);
            json_num(f, key, r->mode[md].ms > 0 ? r->mode[md].executions_per_step : NAN, "%.6g");
        }
        bench_first_json(f, r);
        fprintf(f, "}");
    }
    fprintf(f, "%s]}\n", t->n ? "\n" : "");
}
