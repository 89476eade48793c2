/* `lazyc bench`: shared types of its parts. cmd_bench.c parses options and
 * runs the models; bench_timing.c times lazyc's three modes of one model,
 * bench_torch.c runs the PyTorch reference (bench/torch_reference.py),
 * bench_peak.c measures the fp32 peak, bench_report.c writes the table,
 * CSV, markdown and JSON (bench_first.c their time-to-first-step part),
 * bench_svg.c the bar chart. */
#ifndef LZ_BENCH_H
#define LZ_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "zoo.h"

typedef enum { BENCH_EAGER, BENCH_LAZY, BENCH_CAPTURED, BENCH_TORCH, BENCH_MODES } bench_mode;
extern const char *const bench_mode_names[BENCH_MODES];

typedef struct bench_opts {
    const char *size;             /* "smoke" or "bench" */
    const char *const *models;    /* NULL-terminated */
    int mode_on[BENCH_MODES];
    long steps, warmup;
    const char *out_dir;
    int json;
    int profile;                  /* print the captured steps' kernel time by op; 2: by
                                     step shape too */
    int bf16;                     /* --dtype bf16: steps under autocast (lazyc and torch) */
} bench_opts;

/* One lazyc mode of one model; ms < 0 when it did not run. */
typedef struct bench_mode_result {
    double ms;                    /* median step: first op to lz_wait done */
    double executions_per_step;   /* metrics deltas over the timed steps */
    int64_t compiles;
    double flops_per_step;        /* compiler-counted conv/matmul FLOPs */
    double kernels_per_step;      /* kernel launches: fewer when elementwise chains fuse */
    int64_t peak_bytes;           /* the instance's memory at its step's peak */
    float loss;                   /* last timed step's loss */
} bench_mode_result;

typedef struct bench_row {
    char model[64];
    int64_t params;               /* trainable elements */
    bench_mode_result mode[3];    /* eager, lazy, captured */
    double torch_ms;              /* < 0: not measured */
    int64_t torch_peak_bytes;     /* < 0: not measured */
    double torch_blas_gflops;     /* PyTorch's BLAS on a 512^3 sgemm; <= 0: unknown */
    char torch_blas[128];         /* the library file it reached */
    char note[160];               /* why something is missing, or "" */
    /* time to first step (bench_first.c), < 0 when not measured: the first
       lazyc instance's model build and its first step (trace, compile,
       first execution) with the compile time in it; PyTorch's model build
       and first step */
    double build_ms, first_ms, first_compile_ms, torch_build_ms, torch_first_ms;
} bench_row;

typedef struct bench_table {
    const char *size;
    double peak_gflops;           /* <= 0: not measured */
    int bf16;                     /* --dtype bf16: "% peak" is of peak_bf16_gflops */
    double peak_bf16_gflops;      /* <= 0: not measured (or not asked) */
    int mode_on[BENCH_MODES];
    long steps, warmup;
    int n;
    bench_row *rows;
} bench_table;

/* Times the enabled lazyc modes of one model: instances built from the same
   seed, warm-up steps per mode (captured: at least 2, the calls that trace),
   then o->steps repetitions interleaved eager, lazy, captured, eager...
   *spec gets the model's spec. Progress on stderr. 0; 1 when a mode failed
   (its ms < 0, row->note says why); -1 when the model cannot be built
   (row->note says why). */
int bench_time_model(const char *name, const bench_opts *o, bench_row *row, lz_model_spec *spec);

/* Runs the PyTorch reference for the model described by spec. *available
   starts at 1 and drops to 0 (with one note on stderr) when the reference
   cannot run at all (no python, no torch, no script), so later models skip
   it. Fills row->torch_ms and row->torch_peak_bytes, or leaves them < 0 and
   sets row->note. */
void bench_torch_model(const lz_model_spec *spec, const bench_opts *o, bench_row *row,
                       int *available);

/* fp32 peak in GFLOP/s: the best of a few large dnnl_sgemm calls on the
   cores this process may use. <= 0 when it cannot be measured. */
double bench_peak_gflops(void);
/* bf16 peak in GFLOP/s (bench_peak_bf16.c): the best of a few 2048^3 bf16
   products with float32 accumulation on oneDNN's matmul, the kernel
   autocast's products use. <= 0 when it cannot be measured. */
double bench_peak_bf16_gflops(void);
/* fn's value, computed on a thread of its own that ends with it: the peak
   GEMMs' OpenMP team then does not outlive them in the calling thread,
   where its threads would make libgomp keep lazyc's workers sleeping
   between kernels (src/runtime/omp_quiet.c). */
double bench_alone(double (*fn)(void));
/* The peak "% peak" is of: bf16's under --dtype bf16, else fp32's. */
double bench_table_peak(const struct bench_table *t);
/* "f32" or "bf16" into *bf16 (0 or 1); -1 on anything else. */
int bench_parse_dtype(const char *s, int *bf16);
/* Measures the bf16 peak into t (the higher of this and an earlier
   reading), with a line on stderr. */
void bench_measure_bf16_peak(struct bench_table *t);

/* Derived figures of a row; NAN when an input is missing. */
double bench_gflops(const bench_row *r);
double bench_ratio(double num_ms, double den_ms);   /* den/num: speedup of num */

/* A warning when PyTorch's BLAS is far below the measured peak (Debian's
   torch on the reference BLAS), or NULL; into buf. */
const char *bench_blas_warning(const bench_table *t, char *buf, size_t cap);

void bench_print_table(FILE *f, const bench_table *t);
/* The time-to-first-step table under the main one, and its CSV and JSON
   fields (bench_first.c). */
void bench_print_first_table(FILE *f, const bench_table *t, int markdown);
void bench_first_csv_head(FILE *f);
void bench_first_csv_row(FILE *f, const bench_row *r);
void bench_first_json(FILE *f, const bench_row *r);
/* The bf16 line under the table: its peak, and that "% peak" is of it. */
void bench_print_bf16_peak(FILE *f, const bench_table *t);
int  bench_write_csv(const char *path, const bench_table *t);
int  bench_write_markdown(const char *path, const bench_table *t);
void bench_print_json(FILE *f, const bench_table *t);
int  bench_write_svg(const char *path, const bench_table *t);

#endif
