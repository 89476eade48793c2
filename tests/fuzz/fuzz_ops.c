/* libFuzzer harness for op recording: the input is a program of public API
 * calls on a few tensor slots (random shapes, dtypes and attributes, steps,
 * reads, frees, scopes, autograd, eager mode, capture and replay). Invariants checked on top of
 * the sanitizers:
 *  - a call that fails (NULL / -1) has set lz_last_error();
 *  - after every handle is freed, scopes closed and the queue drained, no
 *    tensor is left but those the library keeps for the process (the
 *    generator's two, one scalar per constant value; LSan cannot see such a leak:
 *    every tensor stays reachable from the library's list of all tensors).
 *
 * Byte format: a stream of (opcode, operands...) bytes; reading past the end
 * yields zeros, so every input is a valid program. Changing the decoding
 * changes what the inputs in regressions/fuzz_ops/ do: re-derive them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"
#include "engine/tensor.h"
#include "ops/nn_internal.h"

enum { NSLOT = 8, MAX_DEPTH = 4, MAX_OPS = 64 };

typedef struct rd { const uint8_t *p; size_t n, i; } rd;

static unsigned u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static int s8(rd *r) { return (int)(int8_t)u8(r); }

/* A slot is one handle the harness owns. level: the scope depth that owns
   its creation handle (0: the harness); kept: lz_keep was called on it in
   that scope. A handle its scope dropped is forgotten, never freed. */
typedef struct slot { lz_tensor *t; int level, kept; } slot;

static slot slots[NSLOT];
static int depth, no_grad, baseline;

static void fail_no_error(const char *call)
{
    fprintf(stderr, "fuzz_ops: %s failed without setting lz_last_error()\n", call);
    abort();
}

static void expect_error(const char *call)
{
    const char *e = lz_last_error();
    if (!e || !*e) fail_no_error(call);
}

static lz_tensor *pick(rd *r)
{
    unsigned b = u8(r);
    /* one value in 32 is a NULL operand */
    if ((b & 31) == 31) return NULL;
    return slots[b % NSLOT].t;
}

static int pick_index(rd *r) { return (int)(u8(r) % NSLOT); }

static void drop_slot(int i)
{
    lz_free(slots[i].t);
    slots[i] = (slot){0};
}

/* Stores a new handle from a call that returned t (NULL: must have set an
   error), owned by the scope at level (0: the harness). Fills an empty
   slot, else replaces a chosen one. */
static void put_at(rd *r, lz_tensor *t, const char *call, int level)
{
    if (!t) { expect_error(call); return; }
    int k = -1;
    for (int i = 0; i < NSLOT && k < 0; i++)
        if (!slots[i].t) k = i;
    if (k < 0) {
        k = pick_index(r);
        drop_slot(k);
    }
    slots[k] = (slot){t, level, 0};
    if (lz_ndim(t) < 0 || lz_ndim(t) > LZ_MAX_DIMS || lz_numel(t) < 0) {
        fprintf(stderr, "fuzz_ops: %s returned a tensor with ndim %d numel %lld\n", call, lz_ndim(t),
                (long long)lz_numel(t));
        abort();
    }
}

/* A handle made in the innermost scope (the scope owns it). */
static void put(rd *r, lz_tensor *t, const char *call) { put_at(r, t, call, depth); }

static void check_rc(int rc, const char *call)
{
    if (rc) expect_error(call);
}

static lz_dtype pick_dtype(rd *r)
{
    static const lz_dtype d[8] = {LZ_F32, LZ_F32, LZ_F32, LZ_F32, LZ_I64, LZ_I64, LZ_I32, (lz_dtype)7};
    return d[u8(r) & 7];
}

static int pick_shape(rd *r, int64_t *shape)
{
    static const int64_t dims[8] = {1, 2, 3, 4, 0, 1, 2, 5};
    int nd = (int)(u8(r) % 5);
    for (int d = 0; d < nd; d++) shape[d] = dims[u8(r) & 7];
    return nd;
}

/* A target shape for reshape/expand: may hold -1 and invalid entries. */
static int pick_target_shape(rd *r, int64_t *shape)
{
    static const int64_t dims[8] = {1, 2, 3, 4, 0, -1, 6, -2};
    int nd = (int)(u8(r) % 5);
    for (int d = 0; d < nd; d++) shape[d] = dims[u8(r) & 7];
    return nd;
}

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d] < 0 ? 0 : shape[d];
    return n;
}

/* Host data of n elements of dtype from a seed: small floats (some
   negative) or small integers (some out of any index range). */
static void *make_data(unsigned seed, lz_dtype dt, int64_t n)
{
    size_t es = dt == LZ_I64 ? 8 : 4;
    void *p = malloc((size_t)(n ? n : 1) * es);
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        int v = (int)(x >> 24) % 8 - 1;   /* -1 .. 6 */
        if (dt == LZ_I64) ((int64_t *)p)[i] = v;
        else if (dt == LZ_I32) ((int32_t *)p)[i] = v;
        else ((float *)p)[i] = (float)((int)(x >> 16) % 200 - 100) / 25.0f;
    }
    return p;
}

static const float floats[8] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-5f, 0.1f, NAN};

static float pick_float(rd *r) { return floats[u8(r) & 7]; }

static void op_create(rd *r)
{
    int64_t shape[LZ_MAX_DIMS];
    lz_dtype dt = pick_dtype(r);
    int nd = pick_shape(r, shape);
    unsigned kind = u8(r) % 4;
    lz_clear_error();
    if (kind == 0) {
        void *data = make_data(u8(r), dt, numel_of(nd, shape));
        put(r, lz_from_host(data, dt, nd, shape), "lz_from_host");
        free(data);
    } else if (kind == 1) {
        put(r, lz_zeros(dt, nd, shape), "lz_zeros");
    } else if (kind == 2) {
        put(r, lz_full(dt, nd, shape, pick_float(r)), "lz_full");
    } else {
        put(r, lz_scalar(pick_float(r)), "lz_scalar");
    }
}

static void op_binary(rd *r)
{
    static lz_tensor *(*const f[])(lz_tensor *, lz_tensor *) = {
        lz_add, lz_sub, lz_mul, lz_div, lz_maximum, lz_gt, lz_lt, lz_ge, lz_le, lz_eq, lz_matmul,
    };
    unsigned k = u8(r) % (sizeof f / sizeof f[0]);
    lz_tensor *a = pick(r), *b = pick(r);
    lz_clear_error();
    put(r, f[k](a, b), "binary op");
}

static void op_unary(rd *r)
{
    static lz_tensor *(*const f[])(lz_tensor *) = {
        lz_neg, lz_exp, lz_log, lz_sqrt, lz_rsqrt, lz_tanh, lz_sigmoid, lz_relu, lz_gelu, lz_relu6,
        lz_sum, lz_mean,
    };
    unsigned k = u8(r) % 16;
    lz_tensor *x = pick(r);
    lz_clear_error();
    if (k < sizeof f / sizeof f[0]) {
        put(r, f[k](x), "unary op");
    } else if (k == 12) {
        put(r, lz_pow(x, pick_float(r)), "lz_pow");
    } else if (k == 13) {
        float lo = pick_float(r), hi = pick_float(r);
        put(r, lz_hardtanh(x, lo, hi), "lz_hardtanh");
    } else if (k == 14) {
        put(r, lz_cast(x, pick_dtype(r)), "lz_cast");
    } else {
        float p = pick_float(r);
        put(r, lz_dropout(x, p, (int)(u8(r) & 1)), "lz_dropout");
    }
}

static void op_where(rd *r)
{
    lz_tensor *c = pick(r), *a = pick(r), *b = pick(r);
    lz_clear_error();
    put(r, lz_where(c, a, b), "lz_where");
}

static void op_reduce(rd *r)
{
    int axes[4];
    unsigned k = u8(r) % 3;
    lz_tensor *x = pick(r);
    int n = (int)(u8(r) % 4);
    for (int i = 0; i < n; i++) axes[i] = s8(r) % 5;
    int keep = (int)(u8(r) & 1);
    lz_clear_error();
    if (k == 0) put(r, lz_sum_axes(x, n, axes, keep), "lz_sum_axes");
    else if (k == 1) put(r, lz_mean_axes(x, n, axes, keep), "lz_mean_axes");
    else put(r, lz_max_axes(x, n, axes, keep), "lz_max_axes");
}

static void op_shape(rd *r)
{
    unsigned k = u8(r) % 7;
    lz_tensor *x = pick(r);
    int64_t shape[LZ_MAX_DIMS];
    lz_clear_error();
    switch (k) {
    case 0: {
        int nd = pick_target_shape(r, shape);
        lz_clear_error();
        put(r, lz_reshape(x, nd, shape), "lz_reshape");
        break;
    }
    case 1: {
        int perm[LZ_MAX_DIMS];
        for (int i = 0; i < LZ_MAX_DIMS; i++) perm[i] = s8(r) % 5;
        lz_clear_error();
        put(r, lz_permute(x, perm), "lz_permute");
        break;
    }
    case 2: {
        int a0 = s8(r) % 5, a1 = s8(r) % 5;
        lz_clear_error();
        put(r, lz_transpose(x, a0, a1), "lz_transpose");
        break;
    }
    case 3: {
        int nd = pick_target_shape(r, shape);
        lz_clear_error();
        put(r, lz_expand(x, nd, shape), "lz_expand");
        break;
    }
    case 4: {
        int axis = s8(r) % 5;
        int64_t start = s8(r) % 7, end = s8(r) % 7;
        lz_clear_error();
        put(r, lz_slice(x, axis, start, end), "lz_slice");
        break;
    }
    case 5: {
        lz_tensor *xs[4] = {x};
        int n = (int)(u8(r) % 4);
        for (int i = 1; i < n; i++) xs[i] = pick(r);
        int axis = s8(r) % 5;
        lz_clear_error();
        put(r, lz_cat(xs, n, axis), "lz_cat");
        break;
    }
    default: {
        int axis = s8(r) % 5;
        lz_clear_error();
        put(r, lz_flatten(x, axis), "lz_flatten");
        break;
    }
    }
}

static void op_nn(rd *r)
{
    unsigned k = u8(r) % 10;
    lz_tensor *x = pick(r);
    switch (k) {
    case 0: case 1: {
        int axis = s8(r) % 5;
        lz_clear_error();
        put(r, k ? lz_log_softmax(x, axis) : lz_softmax(x, axis), "lz_softmax");
        break;
    }
    case 2: {
        lz_tensor *t = pick(r);
        lz_clear_error();
        put(r, lz_cross_entropy(x, t), "lz_cross_entropy");
        break;
    }
    case 3: {
        lz_tensor *w = pick(r), *b = (u8(r) & 1) ? pick(r) : NULL;
        lz_conv2d_opts o;
        for (int i = 0; i < 2; i++) {
            o.stride[i] = (int)(u8(r) % 3);
            o.padding[i] = (int)(u8(r) % 3);
            o.dilation[i] = (int)(u8(r) % 3);
        }
        o.groups = (int)(u8(r) % 3);
        lz_clear_error();
        put(r, lz_conv2d(x, w, b, o), "lz_conv2d");
        break;
    }
    case 4: case 5: {
        lz_pool2d_opts o;
        for (int i = 0; i < 2; i++) {
            o.kernel[i] = (int)(u8(r) % 4);
            o.stride[i] = (int)(u8(r) % 3);
            o.padding[i] = (int)(u8(r) % 3);
        }
        o.ceil_mode = (int)(u8(r) & 1);
        o.count_include_pad = (int)(u8(r) & 1);
        lz_clear_error();
        put(r, k == 4 ? lz_max_pool2d(x, o) : lz_avg_pool2d(x, o), "pool2d");
        break;
    }
    case 6: {
        int oh = (int)(u8(r) % 4), ow = (int)(u8(r) % 4);
        lz_clear_error();
        put(r, lz_adaptive_avg_pool2d(x, oh, ow), "lz_adaptive_avg_pool2d");
        break;
    }
    case 7: {
        unsigned m = u8(r);
        lz_tensor *w = (m & 1) ? pick(r) : NULL, *b = (m & 2) ? pick(r) : NULL;
        lz_tensor *rm = (m & 4) ? pick(r) : NULL, *rv = (m & 8) ? pick(r) : NULL;
        float mom = pick_float(r), eps = pick_float(r);
        lz_clear_error();
        put(r, lz_batch_norm(x, w, b, rm, rv, (int)(m >> 4 & 1), mom, eps), "lz_batch_norm");
        break;
    }
    case 8: {
        unsigned m = u8(r);
        lz_tensor *w = (m & 1) ? pick(r) : NULL, *b = (m & 2) ? pick(r) : NULL;
        int n = (int)(m >> 2 & 3);
        float eps = pick_float(r);
        lz_clear_error();
        put(r, lz_layer_norm(x, n, w, b, eps), "lz_layer_norm");
        break;
    }
    default: {
        unsigned m = u8(r);
        if (m & 1) {
            lz_tensor *idx = pick(r);
            lz_clear_error();
            put(r, lz_embedding(x, idx), "lz_embedding");
        } else {
            lz_tensor *k2 = pick(r), *v = pick(r), *mask = (m & 2) ? pick(r) : NULL;
            float scale = pick_float(r);
            lz_clear_error();
            put(r, lz_attention(x, k2, v, mask, scale), "lz_attention");
        }
        break;
    }
    }
}

static void op_read(rd *r)
{
    unsigned k = u8(r) % 5;
    lz_tensor *t = pick(r);
    lz_clear_error();
    if (k == 0) {
        float v = lz_item(t);
        if (isnan(v) && (!t || lz_numel(t) != 1)) expect_error("lz_item");
        return;
    }
    if (k == 3) {
        check_rc(lz_wait(), "lz_wait");
        return;
    }
    if (k == 4) {
        lz_mark_step();
        return;
    }
    int64_t n = t ? lz_numel(t) : 0;
    size_t nb = (size_t)n * lz_dtype_size(t ? lz_tensor_dtype(t) : LZ_F32);
    size_t off = (u8(r) & 7) == 7 ? 4 : 0;   /* sometimes a wrong size */
    void *buf = malloc(nb + off + 1);
    if (k == 1) {
        int rc = lz_to_host(t, buf, nb + off);
        check_rc(rc, "lz_to_host");
        if (off && rc == 0) { fprintf(stderr, "lz_to_host accepted a wrong size\n"); abort(); }
    } else {
        void *src = make_data(u8(r), t ? lz_tensor_dtype(t) : LZ_F32, n);
        free(buf);
        buf = realloc(src, nb + off + 1);
        int rc = lz_copy_from_host(t, buf, nb + off);
        check_rc(rc, "lz_copy_from_host");
        if (off && rc == 0) { fprintf(stderr, "lz_copy_from_host accepted a wrong size\n"); abort(); }
    }
    free(buf);
}

static void op_sync(rd *r)
{
    lz_tensor *ts[4];
    int n = (int)(u8(r) % 5);
    for (int i = 0; i < n; i++) ts[i] = pick(r);
    int wait = (int)(u8(r) & 1);
    lz_clear_error();
    check_rc(lz_sync(ts, n, wait), "lz_sync");
}

static void op_handles(rd *r)
{
    unsigned k = u8(r) % 4;
    int i = pick_index(r);
    if (k == 0 || !slots[i].t) {
        if (slots[i].t) drop_slot(i);
        return;
    }
    if (k == 1) {
        /* a distinct handle the harness owns, in or out of a scope */
        put_at(r, lz_retain(slots[i].t), "lz_retain", 0);
        return;
    }
    if (k == 2) {
        lz_tensor *t = slots[i].t;
        if (lz_keep(t) != t) { fprintf(stderr, "lz_keep changed the handle\n"); abort(); }
        if (slots[i].level == depth && depth) slots[i].kept = 1;
        return;
    }
    lz_tensor *src = pick(r);
    lz_clear_error();
    check_rc(lz_assign(slots[i].t, src), "lz_assign");
}

static void op_grad(rd *r)
{
    unsigned k = u8(r) % 4;
    int i = pick_index(r);
    lz_tensor *t = slots[i].t;
    lz_clear_error();
    if (k == 0) {
        if (t) lz_requires_grad(t, (int)(u8(r) % 4 != 0));
    } else if (k == 1) {
        check_rc(lz_backward(t), "lz_backward");
    } else if (k == 2) {
        lz_tensor *g = t ? lz_grad(t) : NULL;
        /* borrowed: keep a handle of our own */
        if (g) put_at(r, lz_retain(g), "lz_retain(grad)", 0);
    } else if (t) {
        lz_zero_grad(t);
    }
}

static void scope_end(void)
{
    lz_scope_end();
    depth--;
    for (int i = 0; i < NSLOT; i++) {
        if (!slots[i].t || slots[i].level != depth + 1) continue;
        if (slots[i].kept) slots[i].level = depth, slots[i].kept = 0;
        else slots[i] = (slot){0};
    }
}

static void op_mode(rd *r)
{
    unsigned k = u8(r) % 6;
    if (k == 0) lz_set_eager((int)(u8(r) & 1));
    else if (k == 1 && no_grad < 4) { lz_no_grad_begin(); no_grad++; }
    else if (k == 2 && no_grad) { lz_no_grad_end(); no_grad--; }
    else if (k == 3 && depth < MAX_DEPTH) { lz_scope_begin(); depth++; }
    else if (k == 4 && depth) scope_end();
    else if (k == 5) lz_manual_seed(u8(r));
}

/* ---- capture: a step function that runs a tiny program on its inputs -- */

typedef struct cap_ctx { uint8_t prog[8]; int n_in, n_out; } cap_ctx;

static cap_ctx cap_ctxs[2];
static lz_fn *cap_fns[2];

static int cap_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    const cap_ctx *c = ctx;
    lz_tensor *t[4 + 2];
    int n = 0;
    for (int i = 0; i < c->n_in; i++) t[n++] = in[i];   /* borrowed */
    int first_owned = n, rc = 0;
    for (int k = 0; k < 8 && rc == 0; k += 2) {
        lz_tensor *a = t[c->prog[k + 1] % n], *b = t[(c->prog[k + 1] >> 4) % n], *r;
        switch (c->prog[k] % 8) {
        case 0: r = lz_add(a, b); break;
        case 1: r = lz_mul(a, b); break;
        case 2: r = lz_relu(a); break;
        case 3: r = lz_sum(a); break;
        case 4: r = lz_matmul(a, b); break;
        case 5: r = lz_softmax(a, -1); break;
        case 6: r = lz_dropout(a, 0.5f, 1); break;
        default: lz_item(a); r = lz_exp(a); break;   /* a host read: a graph break */
        }
        if (!r) {
            expect_error("an op in a captured function");
            rc = -1;
        } else {
            t[n++] = r;
        }
    }
    for (int j = 0; rc == 0 && j < c->n_out; j++) out[j] = lz_retain(t[n - 1 - j % n]);
    for (int i = first_owned; i < n; i++) lz_free(t[i]);
    return rc;
}

static void op_capture(rd *r)
{
    unsigned k = u8(r) % 2;
    int f = (int)(u8(r) % 2);
    if (k == 0) {
        lz_fn_free(cap_fns[f]);
        cap_fns[f] = NULL;
        cap_ctx *c = &cap_ctxs[f];
        c->n_in = 1 + (int)(u8(r) % 2);
        c->n_out = 1 + (int)(u8(r) % 2);
        for (int i = 0; i < 8; i++) c->prog[i] = (uint8_t)u8(r);
        lz_clear_error();
        cap_fns[f] = lz_capture(cap_step, c, c->n_in, c->n_out);
        if (!cap_fns[f]) expect_error("lz_capture");
        return;
    }
    lz_tensor *in[2] = {pick(r), pick(r)}, *out[2] = {NULL, NULL};
    /* Only outside scopes: a call may return an input as an output, that
       is, a second reference to one tensor (see op_handles). */
    if (!cap_fns[f] || depth) return;
    lz_clear_error();
    if (lz_call(cap_fns[f], in, out) != 0) {
        expect_error("lz_call");
        return;
    }
    for (int j = 0; j < cap_ctxs[f].n_out; j++) put(r, out[j], "lz_call output");
}

static int count_tensors(void)
{
    int n = 0;
    for (lz_tensor *t = lz_all_first(); t; t = t->all_next) n++;
    return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* a small cache: many distinct graphs, bounded memory */
    setenv("LZ_CACHE_CAPACITY", "64", 0);
    lz_set_eager(0);
    lz_manual_seed(1);   /* the generator's two tensors live for the process */
    /* so do the scalars layer norm and attention make for eps and scale,
       one per value: make them all now, so any tensor left later leaked */
    for (int i = 0; i < 8; i++) lz_nn_const_scalar(floats[i]);
    baseline = count_tensors();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rd r = {data, size, 0};
    lz_manual_seed(1);
    for (int ops = 0; r.i < r.n && ops < MAX_OPS; ops++) {
        switch (u8(&r) % 14) {
        case 0: case 1: op_create(&r); break;
        case 2: op_binary(&r); break;
        case 3: op_unary(&r); break;
        case 4: op_where(&r); break;
        case 5: op_reduce(&r); break;
        case 6: op_shape(&r); break;
        case 7: op_nn(&r); break;
        case 8: op_read(&r); break;
        case 9: op_sync(&r); break;
        case 10: op_handles(&r); break;
        case 11: op_grad(&r); break;
        case 12: op_mode(&r); break;
        default: op_capture(&r); break;
        }
    }
    for (int f = 0; f < 2; f++) {
        lz_fn_free(cap_fns[f]);
        cap_fns[f] = NULL;
    }
    while (depth) scope_end();
    while (no_grad) { lz_no_grad_end(); no_grad--; }
    lz_set_eager(0);
    for (int i = 0; i < NSLOT; i++) drop_slot(i);
    lz_mark_step();
    lz_wait();
    lz_clear_error();
    int n = count_tensors();
    if (n != baseline || lz_live_count() != 0) {
        fprintf(stderr, "fuzz_ops: %d tensors alive (%d pending) after everything was freed; want %d\n",
                n, lz_live_count(), baseline);
        abort();
    }
    return 0;
}
