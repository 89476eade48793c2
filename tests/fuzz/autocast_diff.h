/* Differential tester for autocast (issue "Trust, round 3"). A byte string
 * decodes into a short program over two parameters [3, 3] trained by SGD:
 * products (matmul, linear) on a running value, an element-wise op,
 * assignments to a parameter (lz_assign from a new tensor, or
 * lz_copy_from_host), no-grad sections, barriers, autocast regions opened
 * and closed, a backward with an optimizer step, and calls of a captured
 * step (a product, a backward and an SGD update of its own, opening a
 * region inside when the program says so).
 *
 * The program runs twice: (a) as written, with lz_autocast_begin/end, the
 * captured step through lz_call; (b) with no region at all, autocast
 * emulated by explicit lz_cast(x, LZ_BF16) of both operands of every
 * product made while (a) would be in a region (a bf16 product outside a
 * region is the same kernel), the step called directly. The cast cache,
 * the parameters' bf16 copies, capture's traces and replays exist only in
 * (a); values made in the same order by the same kernels must agree bit for
 * bit: every product's result, each step's loss and the parameters and
 * their gradients after every event. A parameter feeds at most two products
 * between backwards, so one shared cast's gradient (a) and two casts'
 * gradients summed at the parameter (b) add the same two terms.
 *
 * Byte format: read past the end yields zeros, so every input is a valid
 * program. Included by tests/fuzz/fuzz_autocast_diff.c (libFuzzer) and
 * tests/test_autocast_diff.c (fixed seeds, in ctest). */
#ifndef LZ_AUTOCAST_DIFF_H
#define LZ_AUTOCAST_DIFF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"

enum { A_NP = 2, A_N = 3, A_MAXEV = 24 };

enum {
    E_MATMUL, E_LINEAR, E_TANH, E_ASSIGN, E_NO_GRAD, E_MARK_STEP, E_REGION, E_BACKWARD,
    E_CALL, E_COUNT
};
static const char *const autocast_diff_events[E_COUNT] = {
    "matmul", "linear", "tanh", "assign", "no_grad", "mark_step", "region", "backward", "call",
};

typedef struct aev { uint8_t kind, arg; } aev;
typedef struct aprog {
    int n;
    int step_region;         /* the captured step opens its own region */
    aev ev[A_MAXEV];
} aprog;

typedef struct ard { const uint8_t *p; size_t n, i; } ard;
static unsigned abyte(ard *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static void adecode(const uint8_t *data, size_t size, aprog *p)
{
    ard r = {data, size, 0};
    memset(p, 0, sizeof *p);
    unsigned c = abyte(&r);
    p->n = 4 + (int)(c % (A_MAXEV - 3));
    p->step_region = c >> 6 & 1;
    for (int i = 0; i < p->n; i++) {
        p->ev[i].kind = (uint8_t)(abyte(&r) % E_COUNT);
        p->ev[i].arg = (uint8_t)abyte(&r);
    }
}

/* ---- one run --------------------------------------------------------------- */

typedef struct aentry { int ev; char what[32]; size_t n; uint8_t *bytes; } aentry;
typedef struct alog { aentry *e; int n, cap; } alog;

static void alog_add(alog *l, int ev, const char *what, const void *bytes, size_t n)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 128;
        l->e = realloc(l->e, sizeof *l->e * (size_t)l->cap);
        if (!l->e) abort();
    }
    aentry *e = &l->e[l->n++];
    e->ev = ev;
    snprintf(e->what, sizeof e->what, "%s", what);
    e->n = n;
    e->bytes = malloc(n ? n : 1);
    if (!e->bytes) abort();
    if (n) memcpy(e->bytes, bytes, n);
}

static void alog_free(alog *l)
{
    for (int i = 0; i < l->n; i++) free(l->e[i].bytes);
    free(l->e);
    *l = (alog){0};
}

static void alog_value(alog *l, int ev, const char *what, lz_tensor *t)
{
    if (!t) { alog_add(l, ev, what, "(none)", 6); return; }
    size_t nb = (size_t)lz_numel(t) * lz_dtype_size(lz_tensor_dtype(t));
    uint8_t *b = malloc(nb + 1);
    if (!b) abort();
    if (lz_to_host(t, b, nb) == 0) {
        alog_add(l, ev, what, b, nb);
    } else {
        char msg[300];
        snprintf(msg, sizeof msg, "read failed: %s", lz_last_error() ? lz_last_error() : "?");
        alog_add(l, ev, what, msg, strlen(msg));
    }
    free(b);
}

static lz_tensor *atensor(unsigned seed)
{
    float v[A_N * A_N];
    uint32_t x = seed * 2654435761u + 12345u;
    for (int i = 0; i < A_N * A_N; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((int)(x >> 16) % 200 - 100) / 97.0f;   /* not exact in bf16 */
    }
    return lz_from_host(v, LZ_F32, 2, (const int64_t[]){A_N, A_N});
}

typedef struct arun {
    int emulate;             /* (b): explicit casts, no region, the step called directly */
    int region;              /* (a)'s region is open (in (b): would be) */
    int no_grad;
    lz_tensor *w[A_NP];
    lz_sgd *opt;
    lz_tensor *v;            /* the running value (owned) */
    int uses[A_NP];          /* products that read w[j] since the last backward */
} arun;

/* A product of x and w[j] as the program's mode makes it. */
static lz_tensor *aproduct(arun *s, int linear, lz_tensor *x, int j)
{
    lz_tensor *a = x, *b = s->w[j], *ca = NULL, *cb = NULL;
    if (s->emulate && s->region) {
        a = ca = lz_cast(x, LZ_BF16);
        b = cb = lz_cast(s->w[j], LZ_BF16);
    }
    lz_tensor *y = linear ? lz_linear(a, b, NULL) : lz_matmul(a, b);
    lz_free(ca);
    lz_free(cb);
    return y;
}

typedef struct astep_ctx { arun *s; int j; } astep_ctx;

/* The captured step: a product of its input with w[j], a backward and the
   SGD update; the region inside it when the program says so. */
static int astep(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    astep_ctx *c = ctx;
    arun *s = c->s;
    const int outer = s->region, inner = s->emulate ? 0 : 1;
    if (inner && s->region == 2) lz_autocast_begin(LZ_BF16);
    if (s->region == 2) s->region = 1;
    lz_sgd_zero_grad(s->opt);
    lz_tensor *y = aproduct(s, 1, in[0], c->j);
    lz_tensor *loss = lz_sum(lz_tanh(y));
    int rc = loss && lz_backward(loss) == 0 && lz_sgd_step(s->opt) == 0 ? 0 : -1;
    if (inner && outer == 2) lz_autocast_end();
    s->region = outer;
    lz_free(y);
    out[0] = loss;
    return rc;
}

static void arun_program(const aprog *p, int emulate, alog *l)
{
    lz_manual_seed(1);
    lz_set_eager(0);
    arun s = {.emulate = emulate};
    for (int j = 0; j < A_NP; j++) {
        s.w[j] = atensor(10 + (unsigned)j);
        lz_requires_grad(s.w[j], 1);
    }
    s.opt = lz_sgd_new(s.w, A_NP, (lz_sgd_opts){.lr = 0.125f});
    s.v = atensor(99);
    /* one capture per parameter: a ctx read when traced is frozen */
    astep_ctx sc[A_NP];
    lz_fn *f[A_NP];
    for (int j = 0; j < A_NP; j++) {
        sc[j] = (astep_ctx){&s, j};
        f[j] = emulate ? NULL : lz_capture(astep, &sc[j], 1, 1);
    }
    int depth = 0;   /* (a)'s regions opened by the program */
    for (int i = 0; i < p->n; i++) {
        const aev *e = &p->ev[i];
        const int j = e->arg % A_NP;
        lz_clear_error();
        switch (e->kind) {
        case E_MATMUL:
        case E_LINEAR: {
            if (s.uses[j] == 2) break;   /* see the header: at most two */
            s.uses[j]++;
            lz_tensor *y = aproduct(&s, e->kind == E_LINEAR, s.v, j);
            alog_value(l, i, "product", y);
            if (y) { lz_free(s.v); s.v = y; }
            break;
        }
        case E_TANH: {
            lz_tensor *y = lz_tanh(s.v);
            if (y) { lz_free(s.v); s.v = y; }
            break;
        }
        case E_ASSIGN: {
            lz_tensor *nv = atensor(200 + e->arg);
            if (e->arg & 4) {
                float h[A_N * A_N];
                lz_to_host(nv, h, sizeof h);
                lz_copy_from_host(s.w[j], h, sizeof h);
            } else {
                lz_assign(s.w[j], nv);
            }
            lz_free(nv);
            /* uses[j] stays: a product of the old value still sends its
               gradient to w[j] (torch's too, where the product saved only
               x), and three terms summed in two orders differ in the last
               bit */
            break;
        }
        case E_NO_GRAD:
            if (s.no_grad) lz_no_grad_end();
            else lz_no_grad_begin();
            s.no_grad = !s.no_grad;
            break;
        case E_MARK_STEP:
            lz_mark_step();
            break;
        case E_REGION:
            if (!emulate && s.region) lz_autocast_end();
            if (!emulate && !s.region) lz_autocast_begin(LZ_BF16);
            depth += s.region ? -1 : 1;
            s.region = !s.region;
            break;
        case E_BACKWARD: {
            if (s.no_grad) break;
            lz_tensor *loss = lz_sum(s.v);
            int rc = loss ? lz_backward(loss) : -1;
            char msg[300];
            snprintf(msg, sizeof msg, "rc %d%s", rc, rc && lz_last_error() ? lz_last_error() : "");
            alog_add(l, i, "backward", msg, strlen(msg));
            alog_value(l, i, "loss", loss);
            lz_free(loss);
            if (rc == 0) {
                lz_sgd_step(s.opt);
                lz_sgd_zero_grad(s.opt);
            }
            lz_tensor *nv = atensor(300 + (unsigned)i);   /* a new graph from here */
            lz_free(s.v);
            s.v = nv;
            for (int k = 0; k < A_NP; k++) s.uses[k] = 0;
            break;
        }
        case E_CALL: {
            if (s.no_grad) break;
            const int outer = s.region;
            if (p->step_region && !s.region) s.region = 2;   /* astep opens it */
            lz_tensor *x = atensor(400 + (unsigned)i), *loss = NULL;
            int rc;
            if (emulate) {
                lz_scope_begin();
                rc = astep(&sc[j], &x, &loss);
                if (rc == 0) lz_keep(loss);
                lz_scope_end();
            } else {
                rc = lz_call(f[j], &x, &loss);
            }
            lz_sgd_zero_grad(s.opt);   /* no gradient of the step's left to add to */
            s.region = outer;
            char msg[300];
            snprintf(msg, sizeof msg, "rc %d%s", rc, rc && lz_last_error() ? lz_last_error() : "");
            alog_add(l, i, "call", msg, strlen(msg));
            if (rc == 0) alog_value(l, i, "step loss", loss);
            lz_free(loss);
            lz_free(x);
            break;
        }
        default:
            break;
        }
        for (int k = 0; k < A_NP; k++) {
            char what[32];
            snprintf(what, sizeof what, "w[%d]", k);
            alog_value(l, i, what, s.w[k]);
            snprintf(what, sizeof what, "w[%d].grad", k);
            alog_value(l, i, what, lz_grad(s.w[k]));
        }
    }
    if (s.no_grad) lz_no_grad_end();
    while (depth-- > 0 && !emulate) lz_autocast_end();
    for (int j = 0; j < A_NP; j++) lz_fn_free(f[j]);
    lz_sgd_free(s.opt);
    lz_free(s.v);
    for (int j = 0; j < A_NP; j++) lz_free(s.w[j]);
    lz_wait();
    lz_clear_error();
}

/* ---- one program: both runs and the comparison ---------------------------- */

typedef struct aresult {
    int differs;
    int events_used[E_COUNT];
    char report[1024];
} aresult;

static void adescribe(char *s, size_t cap, const aentry *e)
{
    if (e->n && (e->bytes[0] == 'r' || e->bytes[0] == '(')) {
        snprintf(s, cap, "\"%.*s\"", (int)(e->n > 200 ? 200 : e->n), (const char *)e->bytes);
        return;
    }
    size_t k = (size_t)snprintf(s, cap, "[");
    for (size_t i = 0; i + 4 <= e->n && i < 16 && k < cap; i += 4) {
        float f;
        memcpy(&f, e->bytes + i, 4);
        k += (size_t)snprintf(s + k, cap - k, "%s%.9g", i ? " " : "", (double)f);
    }
    if (k < cap) snprintf(s + k, cap - k, "%s]", e->n > 16 ? " ..." : "");
}

static void autocast_diff_program(const uint8_t *data, size_t size, aresult *res)
{
    memset(res, 0, sizeof *res);
    aprog p;
    adecode(data, size, &p);
    for (int i = 0; i < p.n; i++) res->events_used[p.ev[i].kind] = 1;
    alog a = {0}, b = {0};
    arun_program(&p, 0, &a);
    arun_program(&p, 1, &b);
    int n = a.n < b.n ? a.n : b.n;
    for (int i = 0; i < n && !res->differs; i++) {
        const aentry *x = &a.e[i], *y = &b.e[i];
        if (x->ev == y->ev && !strcmp(x->what, y->what) && x->n == y->n &&
            !memcmp(x->bytes, y->bytes, x->n))
            continue;
        char sx[300], sy[300], seq[300];
        adescribe(sx, sizeof sx, x);
        adescribe(sy, sizeof sy, y);
        size_t k = 0;
        for (int e = 0; e < p.n && k < sizeof seq; e++)
            k += (size_t)snprintf(seq + k, sizeof seq - k, "%s%s%d", e ? " " : "",
                                  autocast_diff_events[p.ev[e].kind], p.ev[e].arg % A_NP);
        snprintf(res->report, sizeof res->report,
                 "event %d (%s; program: %s%s), %s: autocast %s, explicit casts %s", x->ev,
                 autocast_diff_events[p.ev[x->ev].kind], seq,
                 p.step_region ? "; the step opens a region" : "", x->what, sx, sy);
        res->differs = 1;
    }
    if (!res->differs && a.n != b.n) {
        snprintf(res->report, sizeof res->report, "autocast logged %d entries, explicit casts %d",
                 a.n, b.n);
        res->differs = 1;
    }
    alog_free(&a);
    alog_free(&b);
}

#endif
