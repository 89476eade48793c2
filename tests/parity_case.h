/* The harness shared by the parity tests (test_parity_ops, _nn, _conv):
 * load a fixture, build its inputs x0.. (requiring grad where a gradient
 * g0.. is given), run the op through the test's callback, backward
 * sum(out * w), compare the value and gradients with the reference, check
 * that lazy mode ran the whole step as one execution, and print one line
 * per case and a per-op summary. Static inline: each test program is
 * compiled with tests/testlib.c only. */
#ifndef LZ_PARITY_CASE_H
#define LZ_PARITY_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"

#define PC_MAX_IN 8

typedef struct lz_test_pc_op {
    const char *name;
    double tol;
    int cases[2];                  /* fixtures run, per mode */
    double worst_out, worst_grad;  /* over all cases and both modes */
} lz_test_pc_op;

/* One case being run; what the callbacks see. */
typedef struct lz_test_pc_case {
    const lz_test_fx *fx;
    const char *file;
    int eager;
    lz_test_pc_op *info;
    const lz_test_fx_tensor *ref_out, *ref_w;
    int n;                                 /* inputs x0..x{n-1} */
    const lz_test_fx_tensor *xs[PC_MAX_IN], *gs[PC_MAX_IN];
    lz_tensor *in[PC_MAX_IN];
    lz_tensor *state[4];                   /* the test's own tensors (e.g. running stats) */
    lz_tensor *out;
    char line[1400];
    size_t o;                              /* length of line so far */
} lz_test_pc_case;

typedef struct lz_test_pc_hooks {
    lz_test_pc_op *ops;
    int n_ops;
    int file_width;          /* width of the file column of a case line */
    const char *skip_op;     /* fixtures of this op are someone else's: skipped, not counted */
    int need_refs;           /* no "out" or "w" tensor is an error (else no "w": no backward) */
    int check_out_shape;     /* name a wrong out shape/dtype in the line */
    int grads_all;           /* every input requires grad and every gradient is reported,
                                without the "(no grad)" note; else only those with a g%d */
    int one_worst;           /* every error (also gradients) goes into worst_out */
    /* Before the metrics are taken (inputs built); may fill c->state. */
    void (*prepare)(lz_test_pc_case *c);
    /* Runs the op on c->in[0..n); NULL + lz_last_error on failure. */
    lz_tensor *(*run)(lz_test_pc_case *c);
    /* After the value and gradient checks of a case that ran; returns 0 if
       an extra check failed (report with lz_test_pc_report). */
    int (*extra)(lz_test_pc_case *c);
} lz_test_pc_hooks;

static inline const char *lz_test_pc_dtype_str(lz_dtype d)
{
    return d == LZ_F32 ? "f32" : d == LZ_I64 ? "i64" : d == LZ_I32 ? "i32" : "?";
}

static inline int lz_test_pc_same_shape(lz_tensor *t, const lz_test_fx_tensor *ref)
{
    if (!t || lz_ndim(t) != ref->ndim) return 0;
    for (int d = 0; d < ref->ndim; d++)
        if (lz_dim(t, d) != ref->shape[d]) return 0;
    return 1;
}

static inline void lz_test_pc_shape_str(lz_tensor *t, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int d = 0; t && d < lz_ndim(t) && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, d ? ", %lld" : "%lld", (long long)lz_dim(t, d));
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Relative error of t against the fixture tensor; INFINITY if unreadable.
   Integer tensors must match exactly (0 or INFINITY). */
static inline double lz_test_pc_compare(lz_tensor *t, const lz_test_fx_tensor *ref)
{
    if (!lz_test_pc_same_shape(t, ref) || lz_tensor_dtype(t) != ref->dtype) return INFINITY;
    if (ref->dtype == LZ_F32) {
        float *v = lz_test_read(t);
        if (!v) return INFINITY;
        double e = ref->numel ? lz_test_rel_err(v, (const float *)ref->data, ref->numel) : 0;
        free(v);
        return e;
    }
    size_t nb = (size_t)ref->numel * lz_test_fx_dtype_size(ref->dtype);
    void *v = malloc(nb ? nb : 1);
    double e = lz_to_host(t, v, nb) == 0 && memcmp(v, ref->data, nb) == 0 ? 0 : INFINITY;
    free(v);
    return e;
}

/* Appends " name err" to the case line, updates *worst; returns 1 if err
   is within the op's tolerance. */
static inline int lz_test_pc_report(lz_test_pc_case *c, const char *name, double e, const char *note,
                            double *worst)
{
    c->o += (size_t)snprintf(c->line + c->o, sizeof c->line - c->o, " %s %.2e%s", name, e, note);
    if (!(e <= *worst)) *worst = e;
    return e <= c->info->tol;
}

static inline int lz_test_pc_run_case(const char *dir, const char *file, int eager, const lz_test_pc_hooks *h)
{
    char path[2304], err[2816];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lz_test_fx fx;
    if (lz_test_fx_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"fixture loads");
        return -1;
    }
    if (h->skip_op && !strcmp(fx.op, h->skip_op)) { lz_test_fx_free(&fx); return 0; }
    lz_test_pc_op *info = NULL;
    for (int i = 0; i < h->n_ops && !info; i++)
        if (!strcmp(h->ops[i].name, fx.op)) info = &h->ops[i];
    if (!info) {
        fprintf(stderr, "%s: op %s has no runner in this test\n", file, fx.op);
        CHECK(!"fixture op known");
        lz_test_fx_free(&fx);
        return -1;
    }
    info->cases[eager]++;

    static lz_test_pc_case c;   /* large line buffer; cases run one at a time */
    memset(&c, 0, sizeof c);
    c.fx = &fx;
    c.file = file;
    c.eager = eager;
    c.info = info;
    c.ref_out = lz_test_fx_get(&fx, "out");
    c.ref_w = lz_test_fx_get(&fx, "w");
    for (; c.n < PC_MAX_IN; c.n++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", c.n);
        if (!(c.xs[c.n] = lz_test_fx_get(&fx, name))) break;
        snprintf(name, sizeof name, "g%d", c.n);
        c.gs[c.n] = lz_test_fx_get(&fx, name);
    }
    double *worst_grad = h->one_worst ? &info->worst_out : &info->worst_grad;

    lz_clear_error();
    lz_scope_begin();
    for (int i = 0; i < c.n; i++) {
        c.in[i] = lz_test_fx_to_lz(c.xs[i]);
        if (h->grads_all || c.gs[i]) lz_requires_grad(c.in[i], 1);
    }
    if (h->prepare) h->prepare(&c);
    lz_metrics before = lz_metrics_get();
    c.out = h->run(&c);
    int ok = c.out != NULL && (!h->need_refs || (c.ref_out && c.ref_w));
    if (ok && c.ref_w) {
        lz_tensor *loss = lz_sum(lz_mul(c.out, lz_test_fx_to_lz(c.ref_w)));
        ok = loss && lz_backward(loss) == 0;
    }
    lz_metrics recorded = lz_metrics_get();
    lz_mark_step();

    c.o = (size_t)snprintf(c.line, sizeof c.line, "%-*s %-5s", h->file_width, file,
                           eager ? "eager" : "lazy");
    int pass = ok;
    if (!ok) {
        info->worst_out = INFINITY;
        c.o += (size_t)snprintf(c.line + c.o, sizeof c.line - c.o, " ERROR %s",
                                lz_last_error() ? lz_last_error() : "(no message)");
    } else {
        if (h->check_out_shape &&
            (!lz_test_pc_same_shape(c.out, c.ref_out) || lz_tensor_dtype(c.out) != c.ref_out->dtype)) {
            char got[128];
            lz_test_pc_shape_str(c.out, got, sizeof got);
            c.o += (size_t)snprintf(c.line + c.o, sizeof c.line - c.o, " out shape/dtype %s %s",
                                    got, lz_test_pc_dtype_str(lz_tensor_dtype(c.out)));
            pass = 0;
        }
        pass &= lz_test_pc_report(&c, "out", lz_test_pc_compare(c.out, c.ref_out), "", &info->worst_out);
        for (int i = 0; i < c.n; i++) {
            if (!h->grads_all && !c.gs[i]) continue;
            char name[16];
            snprintf(name, sizeof name, "g%d", i);
            lz_tensor *g = lz_grad(c.in[i]);
            double ge = g && c.gs[i] ? lz_test_pc_compare(g, c.gs[i]) : INFINITY;
            pass &= lz_test_pc_report(&c, name, ge, g || h->grads_all ? "" : "(no grad)", worst_grad);
        }
        if (h->extra) pass &= h->extra(&c);
    }
    /* Lazy mode: recording forward and backward ran nothing, and the whole
       step was one execution. */
    if (!eager && ok) {
        lz_metrics after = lz_metrics_get();
        int64_t rec = recorded.executions - before.executions;
        int64_t all = after.executions - before.executions;
        if (rec != 0 || all != 1) {
            c.o += (size_t)snprintf(c.line + c.o, sizeof c.line - c.o,
                                    " executions: %lld while recording, %lld in all (want 0, 1)",
                                    (long long)rec, (long long)all);
            pass = 0;
        }
    }
    snprintf(c.line + c.o, sizeof c.line - c.o, "  tol %.0e %s", info->tol, pass ? "ok" : "FAIL");
    printf("%s\n", c.line);
    CHECK(pass);
    lz_scope_end();
    lz_test_fx_free(&fx);
    return pass ? 0 : -1;
}

/* Runs every fixture listed in dir/INDEX lazily, then eagerly. Returns -1
   (after a failed check) if there are none. */
static inline int lz_test_pc_run_all(const char *dir, const lz_test_pc_hooks *h)
{
    char *files[1024];
    int nf = lz_test_fx_index(dir, files, 1024);
    if (nf <= 0) {
        fprintf(stderr, "no fixtures: cannot read %s/INDEX (run from tests/, or set LZ_FIXTURES)\n",
                dir);
        CHECK(!"fixtures present");
        return -1;
    }
    for (int eager = 0; eager <= 1; eager++) {
        lz_set_eager(eager);
        int failed = 0;
        for (int i = 0; i < nf; i++) failed += lz_test_pc_run_case(dir, files[i], eager, h) != 0;
        lz_wait();
        printf("== %s mode: %d fixture(s) failed\n", eager ? "eager" : "lazy", failed);
    }
    lz_set_eager(0);
    for (int i = 0; i < nf; i++) free(files[i]);
    return 0;
}

/* Per-op summary (value and gradient errors apart); every op must have
   run in both modes. */
static inline void lz_test_pc_summary(const lz_test_pc_op *ops, int n_ops, int name_width)
{
    printf("== per op, worst relative error over its fixtures in both modes\n");
    for (int i = 0; i < n_ops; i++)
        printf("%-*s %2d case(s)  out %.2e  grad %.2e  tol %.0e %s\n", name_width, ops[i].name,
               ops[i].cases[0], ops[i].worst_out, ops[i].worst_grad, ops[i].tol,
               ops[i].worst_out <= ops[i].tol && ops[i].worst_grad <= ops[i].tol ? "ok" : "FAIL");
    for (int i = 0; i < n_ops; i++) {
        if (ops[i].cases[0] == 0 || ops[i].cases[1] == 0)
            fprintf(stderr, "op %s has no fixture\n", ops[i].name);
        CHECK(ops[i].cases[0] > 0 && ops[i].cases[1] > 0);
    }
}

#endif
