#include "engine/explain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/settings.h"
#include "engine/cache.h"

static long long cause_counts[LZ_CAUSE_COUNT];
static long long misses;              /* numbers the printed lines */
static unsigned history;              /* bit i: the barrier i lookups ago compiled */
static long long barriers;
static int warned;

/* LZ_EXPLAIN_COMPILES=1: one line per compile on stderr. Read once. */
static int explain_on(void)
{
    static int on = -1;
    if (on < 0) on = (int)lz_setting_int(LZ_SETTING_EXPLAIN_COMPILES);
    return on;
}

const char *lz_compile_cause_name(int cause)
{
    static const char *const names[LZ_CAUSE_COUNT] = {
        [LZ_CAUSE_FIRST] = "first graph", [LZ_CAUSE_GREW] = "graph grew",
        [LZ_CAUSE_SHRANK] = "graph shrank", [LZ_CAUSE_OP] = "op",
        [LZ_CAUSE_SHAPE] = "shape", [LZ_CAUSE_DTYPE] = "dtype",
        [LZ_CAUSE_ATTR] = "attribute", [LZ_CAUSE_CONSTANT] = "baked constant",
        [LZ_CAUSE_OPERANDS] = "operands", [LZ_CAUSE_INPUTS] = "input aliasing",
        [LZ_CAUSE_OUTPUTS] = "outputs",
    };
    return cause >= 0 && cause < LZ_CAUSE_COUNT ? names[cause] : "?";
}

long long lz_compile_cause_count(int cause)
{
    return cause >= 0 && cause < LZ_CAUSE_COUNT ? cause_counts[cause] : 0;
}

void lz_compile_causes_reset(void) { memset(cause_counts, 0, sizeof cause_counts); }

/* ---- reading a signature (ir/graph.c writes it) ----------------------
   Per node, post-order: a leaf is [LEAF, dtype, ndim, shape..., slot]; an
   op is [op, dtype, ndim, shape..., n_iattr, iattr..., n_fattr,
   fattr bits..., n_src, src indices...]. Then -1 and the output indices. */

typedef enum field {
    F_OP, F_DTYPE, F_NDIM, F_SHAPE, F_SLOT, F_NIATTR, F_IATTR, F_NFATTR, F_FATTR,
    F_NSRC, F_SRC, F_OUT
} field;

typedef struct where {
    int node;         /* F_OUT: the node count */
    size_t rec;       /* where the node's record starts */
    field f;
    int index;        /* within shape, iattr, fattr, src */
} where;

/* The node and field of position pos of a well-formed signature s. */
static where locate(const int64_t *s, size_t len, size_t pos)
{
    size_t i = 0;
    int node = 0;
    while (i < len && s[i] != -1) {
        where w = {node, i, F_OP, 0};
        size_t j = i + 3 + (size_t)s[i + 2];
        if (pos < i + 3) {
            w.f = pos == i ? F_OP : pos == i + 1 ? F_DTYPE : F_NDIM;
            return w;
        }
        if (pos < j) {
            w.f = F_SHAPE, w.index = (int)(pos - i - 3);
            return w;
        }
        if (s[i] == LZ_OP_LEAF) {
            if (pos == j) { w.f = F_SLOT; return w; }
            i = j + 1;
        } else {
            static const field count_of[3] = {F_NIATTR, F_NFATTR, F_NSRC};
            static const field item_of[3] = {F_IATTR, F_FATTR, F_SRC};
            for (int part = 0; part < 3; part++) {
                size_t n = (size_t)s[j];
                if (pos == j) { w.f = count_of[part]; return w; }
                if (pos <= j + n) { w.f = item_of[part], w.index = (int)(pos - j - 1); return w; }
                j += 1 + n;
            }
            i = j;
        }
        node++;
    }
    return (where){node, i, F_OUT, 0};
}

static int node_count(const int64_t *s, size_t len) { return locate(s, len, len).node; }

static void shape_text(const int64_t *s, size_t rec, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "%s [", lz_dtype_name((lz_dtype)s[rec + 1]));
    for (int64_t d = 0; d < s[rec + 2] && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)s[rec + 3 + d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static float fattr_value(int64_t bits)
{
    uint32_t b = (uint32_t)bits;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* The cause of a miss of g against the nearest cached graph, and a
   sentence saying where they differ. */
static lz_compile_cause classify(const lz_graph *g, char *why, size_t cap)
{
    size_t pos;
    const lz_executable *near = lz_cache_nearest(g, &pos);
    if (!near) {
        snprintf(why, cap, "no graph is cached yet");
        return LZ_CAUSE_FIRST;
    }
    const int64_t *a = g->sig, *b = near->sig;
    size_t na = g->sig_len, nb = near->sig_len;
    int near_nodes = node_count(b, nb);
    char ctx[64];
    snprintf(ctx, sizeof ctx, "the nearest cached graph (%d nodes)", near_nodes);
    if (pos >= na || pos >= nb) {
        snprintf(why, cap, "%s has the same nodes and %s outputs", ctx,
                 na == nb ? "other" : na < nb ? "more" : "fewer");
        return LZ_CAUSE_OUTPUTS;
    }
    where w = locate(a, na, pos);
    if (w.f == F_OUT) {
        if (a[pos] == -1 && b[pos] != -1) {
            snprintf(why, cap, "%d nodes end where %s goes on", w.node, ctx);
            return LZ_CAUSE_SHRANK;
        }
        snprintf(why, cap, "%s has the same nodes and other outputs", ctx);
        return LZ_CAUSE_OUTPUTS;
    }
    const char *op = lz_op_name((lz_op)a[w.rec]);
    long long va = a[pos], vb = b[pos];
    char sa[160], sb[160];
    switch (w.f) {
    case F_OP:
        /* a loop without lz_mark_step: each graph is the last one with
           more nodes before (or instead of) its loss */
        if (vb == -1 || g->n_nodes > near_nodes) {
            snprintf(why, cap, "%d nodes where %s agrees on the first %d, then node %d is %s "
                     "where it has %s (is lz_mark_step missing from a loop?)", g->n_nodes, ctx,
                     w.node, w.node, op, vb == -1 ? "its end" : lz_op_name((lz_op)vb));
            return LZ_CAUSE_GREW;
        }
        snprintf(why, cap, "node %d is %s where %s has %s", w.node, op, ctx,
                 lz_op_name((lz_op)vb));
        return g->n_nodes < near_nodes ? LZ_CAUSE_SHRANK : LZ_CAUSE_OP;
    case F_DTYPE:
    case F_NDIM:
    case F_SHAPE:
        shape_text(a, w.rec, sa, sizeof sa);
        shape_text(b, w.rec, sb, sizeof sb);
        snprintf(why, cap, "node %d (%s) is %s where %s has %s", w.node, op, sa, ctx, sb);
        return w.f == F_DTYPE ? LZ_CAUSE_DTYPE : LZ_CAUSE_SHAPE;
    case F_SLOT:
        snprintf(why, cap, "node %d (leaf) reads input %lld where %s reads input %lld "
                 "(tensors sharing a buffer in one graph and not the other)", w.node, va, ctx, vb);
        return LZ_CAUSE_INPUTS;
    case F_NIATTR:
        snprintf(why, cap, "node %d (%s) has %lld attributes where %s has %lld", w.node, op, va,
                 ctx, vb);
        return LZ_CAUSE_ATTR;
    case F_IATTR:
        snprintf(why, cap, "node %d (%s) has attribute %d = %lld where %s has %lld", w.node, op,
                 w.index, va, ctx, vb);
        return LZ_CAUSE_ATTR;
    case F_NFATTR:
        snprintf(why, cap, "node %d (%s) has %lld baked constants where %s has %lld", w.node, op,
                 va, ctx, vb);
        return LZ_CAUSE_CONSTANT;
    case F_FATTR:
        snprintf(why, cap, "node %d (%s) has the baked constant %.9g where %s has %.9g "
                 "(a host value recorded into the graph?)", w.node, op,
                 (double)fattr_value(va), ctx, (double)fattr_value(vb));
        return LZ_CAUSE_CONSTANT;
    case F_NSRC:
        snprintf(why, cap, "node %d (%s) has %lld operands where %s has %lld", w.node, op, va,
                 ctx, vb);
        return LZ_CAUSE_OPERANDS;
    case F_SRC:
        snprintf(why, cap, "node %d (%s) reads node %lld as operand %d where %s reads node %lld",
                 w.node, op, va, w.index, ctx, vb);
        return LZ_CAUSE_OPERANDS;
    case F_OUT:
        break;
    }
    return LZ_CAUSE_OUTPUTS;
}

void lz_explain_miss(const lz_graph *g)
{
    char why[512];
    lz_compile_cause c = classify(g, why, sizeof why);
    cause_counts[c]++;
    misses++;
    if (explain_on())
        fprintf(stderr, "lazyc: compile %lld: %d nodes, %d inputs, %d outputs; cause %s: %s\n",
                misses, g->n_nodes, g->n_inputs, g->n_outputs, lz_compile_cause_name(c), why);
}

/* The storm warning: more than 8 of the last 10 lookups compiled, once the
   first 10 (warm-up: a step, its optimizer's first step, an evaluation)
   are past. Once per process; never with LZ_EXPLAIN_COMPILES on, whose
   lines already say it. */
void lz_explain_barrier(int compiled)
{
    history = (history << 1 | (compiled != 0)) & 0x3ffu;
    barriers++;
    if (!compiled || warned || barriers <= 10 || __builtin_popcount(history) <= 8 || explain_on())
        return;
    warned = 1;
    int top = LZ_CAUSE_GREW;
    for (int c = LZ_CAUSE_GREW; c < LZ_CAUSE_COUNT; c++)
        if (cause_counts[c] > cause_counts[top]) top = c;
    lz_warning("%d of the last 10 graphs compiled anew (%lld graphs so far); usual causes: a "
               "loop without lz_mark_step (the graph grows every step), a shape that changes "
               "every step, a host value baked into the graph. Most compiles here: \"%s\". "
               "LZ_EXPLAIN_COMPILES=1 prints why each one missed the cache.",
               __builtin_popcount(history), barriers, lz_compile_cause_name(top));
}
