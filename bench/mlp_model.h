/* The MLP training step the benchmark programs share (bench_mlp, soak):
 * random weights, a fixed batch, forward, cross-entropy, backward and SGD
 * with momentum, recorded by one function that is also the captured step.
 * A header of static inline functions: CMake builds each .c file in bench/ as a
 * program of its own, so there is no library to put them in. */
#ifndef LZ_BENCH_MLP_MODEL_H
#define LZ_BENCH_MLP_MODEL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"

enum { MLP_MAX_LAYERS = 64 };

typedef struct mlp_cfg {
    long batch, in, hidden, depth, classes;
    long bias;               /* 0: linear layers without bias */
} mlp_cfg;

typedef struct mlp_model {
    int n;                   /* parameters: weight (and bias) per layer */
    int bias;
    lz_tensor *p[2 * MLP_MAX_LAYERS];
    lz_tensor *x, *y;
    lz_sgd *opt;
    uint64_t rng;
} mlp_model;

static inline float mlp_uniform(mlp_model *m, float bound)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return bound * (float)(2.0 * (double)(m->rng >> 11) / 9007199254740992.0 - 1.0);
}

static inline lz_tensor *mlp_rand_tensor(mlp_model *m, int ndim, const int64_t *shape, float bound,
                                         int grad)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        v[i] = mlp_uniform(m, bound);
    lz_tensor *t = lz_from_host(v, LZ_F32, ndim, shape);
    free(v);
    if (t && grad)
        lz_requires_grad(t, 1);
    return t;
}

static inline void mlp_model_free(mlp_model *m)
{
    lz_sgd_free(m->opt);
    for (int i = 0; i < m->n; i++)
        lz_free(m->p[i]);
    lz_free(m->x);
    lz_free(m->y);
    memset(m, 0, sizeof *m);
}

/* depth hidden layers of width hidden, then the classifier. 0, or -1 with
   lz_last_error() set (whatever was made is then freed). */
static inline int mlp_model_init(mlp_model *m, const mlp_cfg *c)
{
    memset(m, 0, sizeof *m);
    m->rng = 88172645463325252ull;
    m->bias = c->bias != 0;
    int layers = (int)c->depth + 1;
    for (int l = 0; l < layers && l < MLP_MAX_LAYERS; l++) {
        int64_t fin = l ? c->hidden : c->in, fout = l == layers - 1 ? c->classes : c->hidden;
        int64_t sw[2] = { fin, fout }, sb[1] = { fout };
        float k = 1.0f / sqrtf((float)fin);
        m->p[m->n++] = mlp_rand_tensor(m, 2, sw, k, 1);
        if (m->bias)
            m->p[m->n++] = mlp_rand_tensor(m, 1, sb, k, 1);
    }
    int64_t sx[2] = { c->batch, c->in }, sy[1] = { c->batch };
    m->x = mlp_rand_tensor(m, 2, sx, 1.0f, 0);
    int64_t *labels = malloc(sizeof *labels * (size_t)c->batch);
    if (labels) {
        for (long i = 0; i < c->batch; i++)
            labels[i] = i % c->classes;
        m->y = lz_from_host(labels, LZ_I64, 1, sy);
        free(labels);
    }
    int ok = m->x && m->y;
    for (int i = 0; i < m->n; i++)
        ok = ok && m->p[i];
    if (ok)
        m->opt = lz_sgd_new(m->p, m->n, (lz_sgd_opts){ .lr = 0.01f, .momentum = 0.9f });
    if (!m->opt) {
        mlp_model_free(m);
        return -1;
    }
    return 0;
}

/* Records forward, backward and the update of one step on in = {x, y};
   out[0] = the loss. Also the captured function (ctx: the mlp_model). */
static inline int mlp_step_fn(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    mlp_model *m = ctx;
    lz_tensor *h = in[0];
    const int per_layer = m->bias ? 2 : 1;
    for (int i = 0; i < m->n; i += per_layer) {
        h = lz_matmul(h, m->p[i]);
        if (m->bias)
            h = lz_add(h, m->p[i + 1]);
        if (i + per_layer < m->n)
            h = lz_relu(h);
    }
    lz_tensor *loss = lz_cross_entropy(h, in[1]);
    lz_sgd_zero_grad(m->opt);
    int rc = loss ? lz_backward(loss) : -1;
    if (rc == 0)
        rc = lz_sgd_step(m->opt);
    out[0] = loss;
    return rc;
}

/* One lazy step in a scope (its intermediate handles die at its end). */
static inline int mlp_record_step(mlp_model *m)
{
    lz_tensor *in[2] = { m->x, m->y }, *out[1] = { NULL };
    lz_scope_begin();
    int rc = mlp_step_fn(m, in, out);
    lz_scope_end();
    return rc;
}

/* An integer option value within [lo, hi]; prints "PROG: OPT needs ..."
   and returns -1 when the value is not one. */
static inline int mlp_parse_long(const char *prog, const char *opt, const char *val,
                                 long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || end == val || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s needs an integer in [%ld, %ld]\n", prog, opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct mlp_opt { const char *name; long *v; long lo, hi; } mlp_opt;

/* Parses "--name value" pairs against opts. Returns -1 when the program
   should go on, else its exit status: 0 after -h/--help, 2 on a bad option. */
static inline int mlp_parse_args(const char *prog, int argc, char **argv, const mlp_opt *opts,
                                 size_t n_opts, void (*usage)(FILE *))
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        size_t k = 0;
        while (k < n_opts && strcmp(argv[i], opts[k].name) != 0) k++;
        if (k == n_opts) {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, argv[i]);
            usage(stderr);
            return 2;
        }
        if (mlp_parse_long(prog, opts[k].name, i + 1 < argc ? argv[++i] : NULL,
                           opts[k].lo, opts[k].hi, opts[k].v) != 0)
            return 2;
    }
    return -1;
}

#endif
