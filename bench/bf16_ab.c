/* A/B of autocast on the zoo: for each model, a float32 and a bf16
 * (lz_autocast_begin(LZ_BF16) around forward and loss) instance of the same
 * seed, both captured, SGD lr 0.01 momentum 0.9 as `lazyc bench`; warm-up,
 * then timed steps alternating f32, bf16, bf16, f32, ... so that a loaded
 * stretch of a shared machine hits both alike. Prints per model the median
 * step of each, the speedup, and the memory each instance holds after its
 * warm-up plus the most a timed step added (lz_metrics' peak), then the
 * median CPU time of the process a step and its speedup (steadier than the
 * wall clock where other jobs share the cores; with OMP_WAIT_POLICY=passive
 * no worker spins, so it counts the work alone), and the geometric means.
 *
 *   bf16_ab [--size smoke|bench] [--steps N] [--models a,b,...]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "lazyc.h"
#include "lazyc_nn.h"

typedef struct inst {
    lz_model *m;
    lz_sgd *opt;
    lz_tensor *x, *y;
    lz_fn *fn;
    int bf16;
    int64_t held, growth;
    double ms[64], cpu[64];
    int n;
} inst;

static int64_t bytes_now(void)
{
    lz_metrics_reset();
    return lz_metrics_get().peak_bytes;
}

static int step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    inst *b = ctx;
    lz_sgd_zero_grad(b->opt);
    if (b->bf16) lz_autocast_begin(LZ_BF16);
    lz_tensor *loss = lz_model_loss(b->m, in[0], in[1], 1);
    if (b->bf16) lz_autocast_end();
    if (!loss || lz_backward(loss) || lz_sgd_step(b->opt)) return -1;
    out[0] = loss;
    return 0;
}

static lz_tensor *batch(lz_dtype dt, int nd, const int64_t *shape, int64_t classes, unsigned seed)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    void *v = malloc((size_t)n * 8);
    if (!v) return NULL;
    srand(seed);
    for (int64_t i = 0; i < n; i++) {
        if (dt == LZ_F32) ((float *)v)[i] = 2.0f * (float)rand() / (float)RAND_MAX - 1.0f;
        else if (dt == LZ_I64) ((int64_t *)v)[i] = rand() % classes;
        else ((int32_t *)v)[i] = rand() % (int)classes;
    }
    lz_tensor *t = lz_from_host(v, dt, nd, shape);
    free(v);
    return t;
}

static int init(inst *b, const char *name, const char *size, int bf16)
{
    memset(b, 0, sizeof *b);
    b->bf16 = bf16;
    if (!(b->m = lz_model_new(name, size, 1))) return -1;
    const lz_model_spec *s = lz_model_get_spec(b->m);
    lz_params *p = lz_model_params(b->m);
    lz_tensor *tr[1024];
    int nt = lz_params_trainable_list(p, tr, 1024);
    b->opt = lz_sgd_new(tr, nt, (lz_sgd_opts){.lr = 0.01f, .momentum = 0.9f});
    b->x = batch(s->input_dtype, s->input_ndim, s->input_shape, s->num_classes, 11);
    b->y = batch(LZ_I64, s->target_ndim, s->target_shape, s->num_classes, 12);
    b->fn = lz_capture(step, b, 2, 1);
    lz_mark_step();
    return b->opt && b->x && b->y && b->fn && lz_wait() == 0 ? 0 : -1;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int run(inst *b, double *ms, double *cpu, float *loss)
{
    lz_tensor *in[2] = {b->x, b->y}, *out[1] = {NULL};
    double t0 = now_ms(), c0 = cpu_ms();
    int rc = lz_call(b->fn, in, out);
    rc |= lz_wait();
    if (ms) *ms = now_ms() - t0;
    if (cpu) *cpu = cpu_ms() - c0;
    if (rc == 0 && loss) *loss = lz_item(out[0]);
    lz_free(out[0]);
    return rc;
}

static void done(inst *b)
{
    lz_fn_free(b->fn);
    lz_sgd_free(b->opt);
    lz_free(b->x);
    lz_free(b->y);
    lz_model_free(b->m);
}

int main(int argc, char **argv)
{
    const char *size = "bench", *models = NULL;
    int steps = 5;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--size") && v) size = argv[++i];
        else if (!strcmp(argv[i], "--steps") && v) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--models") && v) models = argv[++i];
        else {
            fprintf(stderr, "usage: bf16_ab [--size smoke|bench] [--steps 1..32] [--models a,b,...]\n");
            return 2;
        }
    }
    if (steps < 1 || steps > 32) {
        fprintf(stderr, "bf16_ab: --steps must be 1..32\n");
        return 2;
    }
    const char *names[64];
    int n = 0;
    char *list = models ? strdup(models) : NULL;
    if (list)
        for (char *t = strtok(list, ","); t && n < 64; t = strtok(NULL, ",")) names[n++] = t;
    else
        for (const char *const *m = lz_model_names(); *m && n < 64; m++) names[n++] = *m;
    double logsum = 0, logsum_cpu = 0;
    int counted = 0;
    printf("%-26s %10s %10s %8s %10s %10s %9s %9s %10s %10s %8s\n", "model", "f32 ms", "bf16 ms",
           "speedup", "f32 MiB", "bf16 MiB", "f32 loss", "bf16 loss", "f32 cpu", "bf16 cpu",
           "cpu x");
    for (int k = 0; k < n; k++) {
        inst v[2];
        int bad = 0;
        float loss[2] = {0, 0};
        for (int d = 0; d < 2 && !bad; d++) {
            int64_t before = bytes_now();
            bad = init(&v[d], names[k], size, d);
            for (int w = 0; w < 2 && !bad; w++) bad = run(&v[d], NULL, NULL, NULL);
            v[d].held = bytes_now() - before;
        }
        for (int s = 0; s < steps && !bad; s++)
            for (int j = 0; j < 2 && !bad; j++) {
                int d = (s % 2) ? 1 - j : j;   /* f32 bf16 bf16 f32 ... */
                int64_t before = bytes_now();
                bad = run(&v[d], &v[d].ms[v[d].n], &v[d].cpu[v[d].n], &loss[d]);
                v[d].n++;
                int64_t g = lz_metrics_get().peak_bytes - before;
                if (g > v[d].growth) v[d].growth = g;
            }
        if (bad) {
            printf("%-26s failed: %s\n", names[k], lz_last_error() ? lz_last_error() : "?");
            lz_clear_error();
        } else {
            double m32 = median(v[0].ms, v[0].n), m16 = median(v[1].ms, v[1].n);
            double c32 = median(v[0].cpu, v[0].n), c16 = median(v[1].cpu, v[1].n);
            printf("%-26s %10.1f %10.1f %7.2fx %10.1f %10.1f %9.4f %9.4f %10.1f %10.1f %7.2fx\n",
                   names[k], m32, m16, m32 / m16, (double)(v[0].held + v[0].growth) / 1048576.0,
                   (double)(v[1].held + v[1].growth) / 1048576.0, (double)loss[0], (double)loss[1],
                   c32, c16, c32 / c16);
            logsum += log(m32 / m16);
            logsum_cpu += log(c32 / c16);
            counted++;
        }
        fflush(stdout);
        done(&v[0]);
        done(&v[1]);
        lz_wait();
    }
    if (counted)
        printf("geometric mean speedup over %d models: %.2fx (CPU time: %.2fx)\n", counted,
               exp(logsum / counted), exp(logsum_cpu / counted));
    free(list);
    return 0;
}
