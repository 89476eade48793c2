/* Differential tester for capture (issue "a captured step computes exactly
 * what the lazy step computes, or refuses"). A byte string decodes into a
 * program: parameters, a step function (a few ops on two inputs and the
 * parameters, optionally a backward and an in-graph SGD update) and a run
 * of calls with changes made between calls. The program runs twice from
 * the same seed: once calling the step directly (lazy mode, a barrier after
 * each call) and once through lz_capture / lz_call. After every call both
 * runs record the call's return code and error, its outputs, every
 * parameter's value and gradient and the inputs' values; the two records
 * must be equal byte for byte.
 *
 * Each change (and each step feature that capture must re-bind) is a kind
 * that can be switched off: LZ_DIFF_KINDS lists the enabled kinds by name,
 * comma-separated ("all", or "default": those expected to pass). A kind
 * that is off is never drawn, so a failing kind can be isolated by enabling
 * it alone.
 *
 * Byte format: read past the end yields zeros, so every input is a valid
 * program. Included by fuzz_capture_diff.c (libFuzzer) and by
 * tests/test_capture_diff.c (fixed seeds, in ctest). */
#ifndef LZ_CAPTURE_DIFF_H
#define LZ_CAPTURE_DIFF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"

/* ---- kinds ---------------------------------------------------------------- */

enum {
    K_ZERO_GRAD,        /* lz_zero_grad on a parameter between calls */
    K_TOGGLE_GRAD,      /* lz_requires_grad flipped on a parameter between calls */
    K_ASSIGN_STATE,     /* a parameter given new values from outside (copy or assign) */
    K_ALIAS_INPUTS,     /* the call's two inputs are one tensor */
    K_REPLACE_PARAM,    /* a parameter freed and replaced in the step's context */
    K_RESEED,           /* lz_manual_seed between calls */
    K_SHUTDOWN,         /* lz_shutdown between calls */
    K_BAD_SHAPE,        /* a call with inputs of another shape (errors must match) */
    K_ASSIGN_INPUT,     /* step feature: lz_assign to in[0] inside the step */
    K_STATE_HANDLE,     /* step feature: state kept by replacing a handle in the context */
    K_TWO_CAPTURES,     /* two captures of the step over one context, called in turn */
    K_DROPOUT,          /* step feature: dropout (the generator's state) */
    K_COUNT
};

typedef struct diff_kind { const char *name; int on_by_default; } diff_kind;

/* on_by_default: every kind; LZ_DIFF_KINDS narrows a run to some (docs/env.md). */
static const diff_kind diff_kinds[K_COUNT] = {
    [K_ZERO_GRAD] = {"zero_grad", 1},
    [K_TOGGLE_GRAD] = {"toggle_grad", 1},
    [K_ASSIGN_STATE] = {"assign_state", 1},
    [K_ALIAS_INPUTS] = {"alias_inputs", 1},
    [K_REPLACE_PARAM] = {"replace_param", 1},
    [K_RESEED] = {"reseed", 1},
    [K_SHUTDOWN] = {"shutdown", 1},
    [K_BAD_SHAPE] = {"bad_shape", 1},
    [K_ASSIGN_INPUT] = {"assign_input", 1},
    [K_STATE_HANDLE] = {"state_handle", 1},
    [K_TWO_CAPTURES] = {"two_captures", 1},
    [K_DROPOUT] = {"dropout", 1},
};

static int diff_enabled[K_COUNT];
/* calls made through lz_call, and how many of them were replays */
static long diff_captured_calls, diff_replays;

/* Reads LZ_DIFF_KINDS: unset or "default": the kinds on by default; "all";
   "none"; or a comma-separated list of names (optionally after "default,").
   Returns 0, or -1 naming an unknown kind on stderr. */
static int diff_read_kinds(void)
{
    const char *env = getenv("LZ_DIFF_KINDS");
    if (!env || !*env) env = "default";
    for (int k = 0; k < K_COUNT; k++) diff_enabled[k] = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        int found = 0;
        if (!strcmp(w, "none")) found = 1;
        for (int k = 0; k < K_COUNT; k++)
            if (!strcmp(w, "all") || (!strcmp(w, "default") && diff_kinds[k].on_by_default) ||
                !strcmp(w, diff_kinds[k].name))
                diff_enabled[k] = found = 1;
        if (!strcmp(w, "all") || !strcmp(w, "default")) found = 1;
        if (!found) {
            fprintf(stderr, "LZ_DIFF_KINDS: unknown kind \"%s\"\n", w);
            return -1;
        }
    }
    return 0;
}

/* ---- decoding ------------------------------------------------------------- */

typedef struct drd { const uint8_t *p; size_t n, i; } drd;
static unsigned dbyte(drd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

enum { D_MAXP = 3, D_MAXOPS = 6, D_MAXCALLS = 8, D_N = 3 };

typedef struct dcall {
    int kind;                /* -1: no change before this call */
    unsigned arg, arg2;
} dcall;

typedef struct dprog {
    int np, n_out, n_ops, backward, update, zero_in_step, n_calls;
    int assign_input, state_handle, two_captures;
    uint8_t op[D_MAXOPS], a[D_MAXOPS], b[D_MAXOPS];
    int rg[D_MAXP];
    dcall calls[D_MAXCALLS];
} dprog;

static int pick_kind(drd *r)
{
    int on[K_COUNT], n = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (diff_enabled[k] && k != K_ASSIGN_INPUT && k != K_STATE_HANDLE && k != K_TWO_CAPTURES &&
            k != K_DROPOUT)
            on[n++] = k;
    unsigned b = dbyte(r);
    if (!n || (b & 1)) return -1;
    return on[(b >> 1) % (unsigned)n];
}

static void decode(drd *r, dprog *p)
{
    memset(p, 0, sizeof *p);
    unsigned c = dbyte(r);
    p->np = 1 + (int)(c % D_MAXP);
    p->n_out = 1 + (int)(c >> 2 & 1);
    p->backward = (c >> 3 & 1) || (c >> 4 & 1);
    p->update = p->backward && (c >> 5 & 1);
    p->zero_in_step = p->update && (c >> 6 & 1);
    unsigned f = dbyte(r);
    p->assign_input = diff_enabled[K_ASSIGN_INPUT] && (f & 1);
    p->state_handle = diff_enabled[K_STATE_HANDLE] && (f >> 1 & 1);
    p->two_captures = diff_enabled[K_TWO_CAPTURES] && (f >> 2 & 1);
    for (int j = 0; j < p->np; j++) p->rg[j] = (f >> (3 + j) & 1) || j == 0;
    p->n_ops = 1 + (int)(dbyte(r) % D_MAXOPS);
    for (int k = 0; k < p->n_ops; k++) {
        p->op[k] = (uint8_t)dbyte(r);
        if (!diff_enabled[K_DROPOUT] && p->op[k] % 8 == 6) p->op[k] = 0;
        p->a[k] = (uint8_t)dbyte(r);
        p->b[k] = (uint8_t)dbyte(r);
    }
    p->n_calls = 3 + (int)(dbyte(r) % (D_MAXCALLS - 2));
    for (int i = 0; i < p->n_calls; i++) {
        p->calls[i].kind = i ? pick_kind(r) : -1;
        p->calls[i].arg = dbyte(r);
        p->calls[i].arg2 = dbyte(r);
    }
}

/* ---- the step function ---------------------------------------------------- */

typedef struct dctx {
    const dprog *p;
    lz_tensor *param[D_MAXP];
    lz_tensor *acc;          /* K_STATE_HANDLE */
    lz_tensor *lr;           /* 0-d */
    int rg[D_MAXP];          /* each parameter's requires-grad flag (no getter) */
} dctx;

static int dstep(void *vctx, lz_tensor *const *in, lz_tensor **out)
{
    dctx *c = vctx;
    const dprog *p = c->p;
    lz_tensor *v[2 + D_MAXP + 1 + D_MAXOPS + 2], *owned[D_MAXOPS + 8];
    int nv = 0, no = 0, rc = 0;
    if (p->zero_in_step)
        for (int j = 0; j < p->np; j++) lz_zero_grad(c->param[j]);
    if (p->assign_input) {
        lz_tensor *x1 = lz_add(in[0], c->param[0]);
        rc = x1 ? lz_assign(in[0], x1) : -1;
        lz_free(x1);
        if (rc) return -1;
    }
    v[nv++] = in[0];
    v[nv++] = in[1];
    for (int j = 0; j < p->np; j++) v[nv++] = c->param[j];
    if (p->state_handle) {
        lz_tensor *a2 = lz_add(c->acc, in[1]);
        if (!a2) return -1;
        /* lz_call runs the step in a scope: the new state outlives it */
        lz_keep(a2);
        lz_free(c->acc);
        c->acc = a2;
        v[nv++] = a2;
    }
    lz_tensor *last = NULL;
    for (int k = 0; k < p->n_ops && rc == 0; k++) {
        lz_tensor *a = v[p->a[k] % nv], *b = v[p->b[k] % nv], *t;
        switch (p->op[k] % 8) {
        case 0: t = lz_add(a, b); break;
        case 1: t = lz_sub(a, b); break;
        case 2: t = lz_mul(a, b); break;
        case 3: t = lz_tanh(a); break;
        case 4: t = lz_sigmoid(a); break;
        case 5: t = lz_matmul(a, b); break;
        case 6: t = lz_dropout(a, 0.5f, 1); break;
        default: t = lz_relu(a); break;
        }
        if (!t) { rc = -1; break; }
        v[nv++] = owned[no++] = last = t;
    }
    if (rc == 0 && !last) {
        last = lz_add(in[0], c->param[0]);
        if (last) owned[no++] = last;
        else rc = -1;
    }
    lz_tensor *loss = NULL;
    if (rc == 0) {
        /* the last result through every parameter, so each one may get a gradient */
        lz_tensor *s = lz_sum(last);
        if (s) owned[no++] = s;
        for (int j = 0; s && j < p->np; j++) {
            lz_tensor *ps = lz_sum(c->param[j]);
            lz_tensor *s2 = ps ? lz_add(s, ps) : NULL;
            lz_free(ps);
            if (s2) owned[no++] = s2;
            s = s2;
        }
        loss = s;
        if (!loss) rc = -1;
    }
    if (rc == 0 && p->backward) rc = lz_backward(loss);
    if (rc == 0 && p->update) {
        lz_no_grad_begin();
        for (int j = 0; j < p->np && rc == 0; j++) {
            lz_tensor *g = lz_grad(c->param[j]);
            if (!g) continue;
            lz_tensor *d = lz_mul(g, c->lr), *np = d ? lz_sub(c->param[j], d) : NULL;
            rc = np ? lz_assign(c->param[j], np) : -1;
            lz_free(d);
            lz_free(np);
        }
        lz_no_grad_end();
    }
    if (rc == 0) {
        out[0] = lz_retain(last);
        if (p->n_out > 1) out[1] = lz_retain(loss);
    }
    for (int i = 0; i < no; i++) lz_free(owned[i]);
    return rc;
}

/* ---- one run -------------------------------------------------------------- */

typedef struct dentry { int call; char what[40]; size_t n; uint8_t *bytes; } dentry;
typedef struct dlog { dentry *e; int n, cap; } dlog;

static void dlog_add(dlog *l, int call, const char *what, const void *bytes, size_t n)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->e = realloc(l->e, sizeof *l->e * (size_t)l->cap);
        if (!l->e) abort();
    }
    dentry *e = &l->e[l->n++];
    e->call = call;
    snprintf(e->what, sizeof e->what, "%s", what);
    e->n = n;
    e->bytes = malloc(n ? n : 1);
    if (!e->bytes) abort();
    if (n) memcpy(e->bytes, bytes, n);
}

static void dlog_free(dlog *l)
{
    for (int i = 0; i < l->n; i++) free(l->e[i].bytes);
    free(l->e);
    *l = (dlog){0};
}

/* Logs t's value (or that reading it failed, with the error). */
static void log_value(dlog *l, int call, const char *what, lz_tensor *t)
{
    if (!t) { dlog_add(l, call, what, "(none)", 6); return; }
    int64_t n = lz_numel(t);
    size_t nb = (size_t)(n > 0 ? n : 0) * lz_dtype_size(lz_tensor_dtype(t));
    uint8_t *b = malloc(nb + 1);
    if (!b) abort();
    if (lz_to_host(t, b, nb) == 0) {
        dlog_add(l, call, what, b, nb);
    } else {
        const char *e = lz_last_error();
        char msg[300];
        snprintf(msg, sizeof msg, "read failed: %s", e ? e : "?");
        dlog_add(l, call, what, msg, strlen(msg));
    }
    free(b);
}

static lz_tensor *dtensor(unsigned seed, int rows, int rg)
{
    float v[D_N * D_N];
    uint32_t x = seed * 2654435761u + 777u;
    for (int i = 0; i < rows * D_N; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((int)(x >> 16) % 200 - 100) / 64.0f;
    }
    const int64_t shape[2] = {rows, D_N};
    lz_tensor *t = lz_from_host(v, LZ_F32, 2, shape);
    if (rg) lz_requires_grad(t, 1);
    return t;
}

/* Applies change kind before call i; identical in both runs. */
static void apply_change(dctx *c, const dcall *d, int *alias, int *rows)
{
    const dprog *p = c->p;
    int j = (int)(d->arg % (unsigned)p->np);
    switch (d->kind) {
    case K_ZERO_GRAD: lz_zero_grad(c->param[j]); break;
    case K_TOGGLE_GRAD:
        c->rg[j] = !c->rg[j];
        lz_requires_grad(c->param[j], c->rg[j]);
        break;
    case K_ASSIGN_STATE: {
        lz_tensor *nv = dtensor(1000 + d->arg2, D_N, 0);
        if (d->arg2 & 1) {
            float v[D_N * D_N];
            lz_to_host(nv, v, sizeof v);
            lz_copy_from_host(c->param[j], v, sizeof v);
        } else {
            lz_assign(c->param[j], nv);
        }
        lz_free(nv);
        break;
    }
    case K_ALIAS_INPUTS: *alias = 1; break;
    case K_REPLACE_PARAM: {
        lz_free(c->param[j]);
        c->param[j] = dtensor(2000 + d->arg2, D_N, c->rg[j]);
        break;
    }
    case K_RESEED: lz_manual_seed(d->arg2); break;
    case K_SHUTDOWN: lz_shutdown(); break;
    case K_BAD_SHAPE: *rows = 2; break;
    default: break;
    }
}

/* Runs program p (captured or not) from a fresh seed; logs into l. */
static void run_program(const dprog *p, int captured, dlog *l)
{
    lz_manual_seed(1);
    lz_set_eager(0);
    dctx c = {.p = p};
    for (int j = 0; j < p->np; j++) {
        c.rg[j] = p->rg[j];
        c.param[j] = dtensor(10 + (unsigned)j, D_N, p->rg[j]);
    }
    c.acc = dtensor(50, D_N, 0);
    c.lr = lz_scalar(0.125f);
    lz_fn *fns[2] = {NULL, NULL};
    if (captured) {
        fns[0] = lz_capture(dstep, &c, 2, p->n_out);
        if (p->two_captures) fns[1] = lz_capture(dstep, &c, 2, p->n_out);
    }
    for (int i = 0; i < p->n_calls; i++) {
        int alias = 0, rows = D_N;
        apply_change(&c, &p->calls[i], &alias, &rows);
        lz_tensor *in[2], *out[2] = {NULL, NULL};
        in[0] = dtensor(100 + 2 * (unsigned)i, rows, 0);
        in[1] = alias ? in[0] : dtensor(101 + 2 * (unsigned)i, rows, 0);
        lz_clear_error();
        int rc;
        if (captured) {
            int64_t before = lz_metrics_get().capture_replays;
            rc = lz_call(fns[p->two_captures ? i & 1 : 0], in, out);
            diff_captured_calls++;
            diff_replays += lz_metrics_get().capture_replays > before;
        } else {
            /* the step frees what it makes and keeps its state handle, so
               a direct call needs no scope */
            rc = dstep(&c, in, out);
            lz_mark_step();
        }
        char msg[400];
        snprintf(msg, sizeof msg, "rc %d%s%s", rc, rc ? ": " : "",
                 rc && lz_last_error() ? lz_last_error() : "");
        dlog_add(l, i, "return code and error", msg, strlen(msg));
        for (int k = 0; rc == 0 && k < p->n_out; k++) {
            char what[40];
            snprintf(what, sizeof what, "out[%d]", k);
            log_value(l, i, what, out[k]);
            lz_free(out[k]);
        }
        for (int j = 0; j < p->np; j++) {
            char what[40];
            snprintf(what, sizeof what, "param[%d]", j);
            log_value(l, i, what, c.param[j]);
            snprintf(what, sizeof what, "param[%d].grad", j);
            log_value(l, i, what, lz_grad(c.param[j]));
        }
        log_value(l, i, "in[0] after the call", in[0]);
        if (p->state_handle) log_value(l, i, "state (acc)", c.acc);
        if (!alias) lz_free(in[1]);
        lz_free(in[0]);
    }
    lz_fn_free(fns[0]);
    lz_fn_free(fns[1]);
    for (int j = 0; j < p->np; j++) lz_free(c.param[j]);
    lz_free(c.acc);
    lz_free(c.lr);
    lz_wait();
    lz_clear_error();
}

/* ---- one program: both runs and the comparison ---------------------------- */

typedef struct dresult {
    int differs;
    int kinds_used[K_COUNT]; /* changes and features the program used */
    char report[1024];       /* the first difference */
} dresult;

static void describe_bytes(char *s, size_t cap, const dentry *e)
{
    int text = e->n && (e->bytes[0] == 'r' || e->bytes[0] == '(');
    if (text) { snprintf(s, cap, "\"%.*s\"", (int)(e->n > 200 ? 200 : e->n), (const char *)e->bytes); return; }
    size_t k = 0;
    k += (size_t)snprintf(s + k, cap - k, "[");
    for (size_t i = 0; i + 4 <= e->n && i < 16 && k < cap; i += 4) {
        float f;
        memcpy(&f, e->bytes + i, 4);
        k += (size_t)snprintf(s + k, cap - k, "%s%.9g", i ? " " : "", (double)f);
    }
    if (k < cap) snprintf(s + k, cap - k, "%s]", e->n > 16 ? " ..." : "");
}

static void diff_program(const uint8_t *data, size_t size, dresult *res)
{
    memset(res, 0, sizeof *res);
    drd r = {data, size, 0};
    dprog p;
    decode(&r, &p);
    for (int i = 0; i < p.n_calls; i++)
        if (p.calls[i].kind >= 0) res->kinds_used[p.calls[i].kind] = 1;
    res->kinds_used[K_ASSIGN_INPUT] = p.assign_input;
    res->kinds_used[K_STATE_HANDLE] = p.state_handle;
    res->kinds_used[K_TWO_CAPTURES] = p.two_captures;
    for (int k = 0; k < p.n_ops; k++)
        if (p.op[k] % 8 == 6) res->kinds_used[K_DROPOUT] = 1;
    dlog lazy = {0}, cap = {0};
    run_program(&p, 0, &lazy);
    run_program(&p, 1, &cap);
    int n = lazy.n < cap.n ? lazy.n : cap.n;
    for (int i = 0; i < n && !res->differs; i++) {
        const dentry *a = &lazy.e[i], *b = &cap.e[i];
        if (a->call == b->call && !strcmp(a->what, b->what) && a->n == b->n &&
            !memcmp(a->bytes, b->bytes, a->n))
            continue;
        char sa[300], sb[300];
        describe_bytes(sa, sizeof sa, a);
        describe_bytes(sb, sizeof sb, b);
        const dcall *d = &p.calls[a->call];
        char seq[200];
        size_t k = 0;
        for (int c = 0; c < p.n_calls && k < sizeof seq; c++)
            k += (size_t)snprintf(seq + k, sizeof seq - k, "%s%s", c ? " " : "",
                                  p.calls[c].kind >= 0 ? diff_kinds[p.calls[c].kind].name : "-");
        snprintf(res->report, sizeof res->report,
                 "call %d (change before it: %s; changes per call: %s; %d params, %s%s%d ops), "
                 "%s: lazy %s, captured %s",
                 a->call, d->kind >= 0 ? diff_kinds[d->kind].name : "none", seq, p.np,
                 p.backward ? "backward, " : "", p.update ? "update, " : "", p.n_ops, a->what, sa, sb);
        res->differs = 1;
    }
    if (!res->differs && lazy.n != cap.n) {
        snprintf(res->report, sizeof res->report, "lazy logged %d entries, captured %d", lazy.n, cap.n);
        res->differs = 1;
    }
    dlog_free(&lazy);
    dlog_free(&cap);
}

/* The kinds a program used, as "a,b,c" (for reports). */
static void kinds_str(char *s, size_t cap, const int *used)
{
    size_t k = 0;
    s[0] = 0;
    for (int i = 0; i < K_COUNT && k < cap; i++)
        if (used[i]) k += (size_t)snprintf(s + k, cap - k, "%s%s", k ? "," : "", diff_kinds[i].name);
    if (!k) snprintf(s, cap, "(none)");
}

#endif
