/* The time-to-first-step part of `lazyc bench`'s results: per model, how
 * long the model takes to build (parameter initialisation) and its first
 * training step (trace, compile, first execution) against the steady step,
 * for lazyc and for PyTorch. Printed as a second table under the main one
 * (the main one is already as wide as a terminal), and as extra CSV
 * columns and JSON keys. Missing figures print as "n/a" (JSON null). */
#include <math.h>

#include "bench.h"

enum { F_BUILD, F_FIRST, F_COMPILE, F_RATIO, F_TORCH_BUILD, F_TORCH_FIRST, F_TORCH_RATIO, N_F };

static const char *const heads[N_F] = {
    "build ms", "first ms", "compile ms", "first/steady",
    "torch build", "torch first", "torch f/s",
};
static const char *const keys[N_F] = {
    "build_ms", "first_step_ms", "first_compile_ms", "first_vs_steady",
    "torch_build_ms", "torch_first_step_ms", "torch_first_vs_steady",
};

static double pos(double v) { return v > 0 ? v : NAN; }

/* The steady step the first is compared with: lazy mode's, whose steps the
   first one is (captured mode's first call traces a lazy step too). */
static double steady_ms(const bench_row *r)
{
    return r->mode[BENCH_LAZY].ms > 0 ? r->mode[BENCH_LAZY].ms : r->mode[BENCH_CAPTURED].ms;
}

static double field(const bench_row *r, int c)
{
    switch (c) {
    case F_BUILD: return pos(r->build_ms);
    case F_FIRST: return pos(r->first_ms);
    case F_COMPILE: return r->first_ms > 0 && r->first_compile_ms >= 0 ? r->first_compile_ms : NAN;
    case F_RATIO: return r->first_ms > 0 && steady_ms(r) > 0 ? r->first_ms / steady_ms(r) : NAN;
    case F_TORCH_BUILD: return pos(r->torch_build_ms);
    case F_TORCH_FIRST: return pos(r->torch_first_ms);
    case F_TORCH_RATIO:
        return r->torch_first_ms > 0 && r->torch_ms > 0 ? r->torch_first_ms / r->torch_ms : NAN;
    default: return NAN;
    }
}

static void cell(char *buf, size_t cap, int c, double v)
{
    if (!isfinite(v))
        snprintf(buf, cap, "n/a");
    else if (c == F_RATIO || c == F_TORCH_RATIO)
        snprintf(buf, cap, "%.2fx", v);
    else
        snprintf(buf, cap, v >= 100 ? "%.0f" : "%.1f", v);
}

void bench_print_first_table(FILE *f, const bench_table *t, int markdown)
{
    static const int width[N_F] = { 9, 9, 10, 12, 11, 11, 9 };
    char buf[64];
    if (markdown) {
        fprintf(f, "\n## Time to first step\n\nbuild: the model's parameters made; first: its first\n"
                   "training step (trace, compile, first execution); compile: the compile time\n"
                   "in it; first/steady against the median lazy step. PyTorch: model and\n"
                   "optimizer built, first step.\n\n| model |");
        for (int c = 0; c < N_F; c++)
            fprintf(f, " %s |", heads[c]);
        fprintf(f, "\n| --- |");
        for (int c = 0; c < N_F; c++)
            fprintf(f, " ---: |");
        fprintf(f, "\n");
    } else {
        fprintf(f, "\ntime to first step (build: parameters made; first: trace + compile + first\n"
                   "execution; first/steady against the lazy step):\n%-24s", "model");
        for (int c = 0; c < N_F; c++)
            fprintf(f, " %*s", width[c], heads[c]);
        fprintf(f, "\n");
    }
    double total[N_F] = { 0 };
    int complete[N_F];
    for (int c = 0; c < N_F; c++)
        complete[c] = t->n > 0;
    for (int i = 0; i <= t->n; i++) {
        const bench_row *r = i < t->n ? &t->rows[i] : NULL;
        const char *name = r ? r->model : "total";
        if (markdown)
            fprintf(f, "| %s |", r ? name : "**total**");
        else
            fprintf(f, "%-24s", name);
        for (int c = 0; c < N_F; c++) {
            /* the total row sums times; a ratio or a column with a gap has none */
            double v = r ? field(r, c) : complete[c] && c != F_RATIO && c != F_TORCH_RATIO ? total[c] : NAN;
            if (r) {
                if (isfinite(v))
                    total[c] += v;
                else
                    complete[c] = 0;
            }
            cell(buf, sizeof buf, c, v);
            if (markdown)
                fprintf(f, " %s |", buf);
            else
                fprintf(f, " %*s", width[c], buf);
        }
        fprintf(f, "\n");
    }
}

void bench_first_csv_head(FILE *f)
{
    for (int c = 0; c < N_F; c++)
        fprintf(f, ",%s", keys[c]);
}

void bench_first_csv_row(FILE *f, const bench_row *r)
{
    for (int c = 0; c < N_F; c++) {
        double v = r ? field(r, c) : NAN;
        if (isfinite(v))
            fprintf(f, ",%.6g", v);
        else
            fprintf(f, ",");
    }
}

void bench_first_json(FILE *f, const bench_row *r)
{
    for (int c = 0; c < N_F; c++) {
        double v = field(r, c);
        fprintf(f, ", \"%s\": ", keys[c]);
        if (isfinite(v))
            fprintf(f, "%.4f", v);
        else
            fprintf(f, "null");
    }
}
