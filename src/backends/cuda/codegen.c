/* CUDA source for a program's element-wise steps, from its instructions
 * (never from IR nodes: the backend sees programs alone).
 *
 * Every element-wise step, unfused or a fused chain (compile/fuse.c),
 * becomes one kernel lz_ew_<n>: a grid-stride loop over the step's
 * elements in which each micro-op is one statement on registers, operands
 * read from memory contiguously, as one element (a scalar) or through
 * broadcast strides folded to a few axes whose sizes and strides are
 * constants of the source, and only the results the chain must keep
 * stored. float32 and bf16 load and store, the arithmetic is float32 (or
 * the integers' own, wrapping as the CPU's). The source of all of a
 * program's element-wise steps is one NVRTC compile at prepare time,
 * cached on disk by its hash (nvrtc_cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"

/* the C type of a value of dtype d in the kernel's registers and memory */
static const char *ctype(int d)
{
    switch (d) {
    case LZ_F32: return "float";
    case LZ_I64: return "i64";
    case LZ_I32: return "int";
    case LZ_BF16: return "u16";
    default: return NULL;
    }
}

/* the unsigned type integer arithmetic wraps in */
static const char *utype(int d) { return d == LZ_I64 ? "u64" : "u32"; }

/* An operand broadcast over an output of `out` shape: its strides in
   elements (0 on broadcast axes), folded to few axes, innermost last. */
typedef struct bcast {
    int nd;
    int64_t size[LZ_MAX_DIMS], stride[LZ_MAX_DIMS];
} bcast;

static void fold_bcast(const lz_value *in, const lz_value *out, bcast *b)
{
    int64_t st[LZ_MAX_DIMS], s = 1;
    const int off = out->ndim - in->ndim;
    for (int d = out->ndim - 1; d >= 0; d--) {
        const int id = d - off;
        if (id < 0) {
            st[d] = 0;
            continue;
        }
        st[d] = in->shape[id] == 1 && out->shape[d] != 1 ? 0 : s;
        s *= in->shape[id];
    }
    b->nd = 0;
    for (int d = 0; d < out->ndim; d++) {
        const int64_t n = out->shape[d];
        if (n == 1) continue;
        if (b->nd && b->stride[b->nd - 1] == st[d] * n) {   /* walks as one axis with the last */
            b->size[b->nd - 1] *= n;
            b->stride[b->nd - 1] = st[d];
        } else {
            b->size[b->nd] = n;
            b->stride[b->nd] = st[d];
            b->nd++;
        }
    }
}

/* How a micro-op's operand is read (lz_fused_arg's kinds; an unfused
   step's operands are classified the same way). */
typedef struct operand {
    int kind;                /* LZ_FUSED_TILE, _CONTIG, _SCALAR, _BCAST */
    int ref;                 /* micro-op index for a tile, else the value */
} operand;

typedef struct gen {
    const lz_program *p;
    lz_cu_text *src;
    int *slots, n_slots, max_slots;
    /* loads made so far: (value, kind, the shape it is broadcast over) */
    int n_loads;
    struct { int value, kind; const lz_value *order; } loads[LZ_FUSED_MAX_OPS * 3];
    char *err;
    size_t errn;
} gen;

/* the kernel pointer slot of value v, added on first use; -1 when full */
static int slot_of(gen *g, int v)
{
    for (int k = 0; k < g->n_slots; k++)
        if (g->slots[k] == v) return k;
    if (g->n_slots == g->max_slots) return -1;
    g->slots[g->n_slots] = v;
    return g->n_slots++;
}

/* "(e / inner % size) * stride + ..." for an operand broadcast over order */
static int bcast_index(const lz_value *val, const lz_value *order, char *buf, size_t n)
{
    bcast b;
    fold_bcast(val, order, &b);
    size_t at = 0;
    int64_t inner = 1;
    int terms = 0;
    for (int d = b.nd - 1; d >= 0; d--) {
        if (b.stride[d]) {
            char div[32] = "", mod[32] = "", mul[32] = "";
            if (inner != 1) snprintf(div, sizeof div, " / %lldLL", (long long)inner);
            if (d) snprintf(mod, sizeof mod, " %% %lldLL", (long long)b.size[d]);   /* the outermost needs none */
            if (b.stride[d] != 1) snprintf(mul, sizeof mul, " * %lldLL", (long long)b.stride[d]);
            at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "%s(e%s%s)%s", terms ? " + " : "", div, mod, mul);
            terms++;
        }
        inner *= b.size[d];
    }
    if (!terms) at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "0");
    return at < n ? 0 : -1;
}

/* The register holding value v read `kind` over order: loads are made
   once each, scalars before the loop and the rest at the top of its body,
   before any store (an output never aliases a broadcast operand: the
   memory plan overwrites only inputs of the same size). */
static int load_of(gen *g, int v, int kind, const lz_value *order, lz_cu_text *pre, lz_cu_text *body)
{
    for (int k = 0; k < g->n_loads; k++)
        if (g->loads[k].value == v && g->loads[k].kind == kind &&
            (kind != LZ_FUSED_BCAST || (g->loads[k].order->ndim == order->ndim &&
                                        !memcmp(g->loads[k].order->shape, order->shape,
                                                sizeof order->shape[0] * order->ndim))))
            return k;
    const int slot = slot_of(g, v), id = g->n_loads;
    if (slot < 0 || id == (int)(sizeof g->loads / sizeof g->loads[0])) {
        snprintf(g->err, g->errn, "more than %d operands", g->max_slots);
        return -1;
    }
    g->loads[id].value = v;
    g->loads[id].kind = kind;
    g->loads[id].order = order;
    g->n_loads++;
    const lz_value *val = &g->p->values[v];
    const char *t = ctype(val->dtype);
    const int bf16 = val->dtype == LZ_BF16;
    char at[400];
    if (kind == LZ_FUSED_CONTIG) snprintf(at, sizeof at, "e");
    else if (kind == LZ_FUSED_SCALAR) snprintf(at, sizeof at, "0");
    else if (bcast_index(val, order, at, sizeof at)) {
        snprintf(g->err, g->errn, "a broadcast operand's index is too long");
        return -1;
    }
    lz_cu_text_printf(kind == LZ_FUSED_SCALAR ? pre : body, "%s    const %s r%d = %s((const %s *)a.p[%d])[%s]%s;\n",
                      kind == LZ_FUSED_SCALAR ? "" : "    ", bf16 ? "float" : t, id,
                      bf16 ? "lz_bf16_to_f32(" : "", t, slot, at, bf16 ? ")" : "");
    return id;
}

/* the expression of micro-op s on operands x[0..n_in) (register names) of
   dtypes ti[], into buf; -1 when the op or its dtypes have no formula */
static int expr(const lz_program *p, const lz_instr *s, char x[][16], const int *ti, char *buf, size_t n)
{
    const int to = p->values[s->out].dtype, t0 = ti[0];
    const int f32 = t0 == LZ_F32, ints = t0 == LZ_I64 || t0 == LZ_I32;
    const char *a = x[0], *b = s->n_in > 1 ? x[1] : "", *c = s->n_in > 2 ? x[2] : "";
    char k[64];
    lz_cu_float_literal(k, sizeof k, s->fattr[0]);
    if (s->op == LZ_OP_CAST) {
        if (t0 == to || (t0 == LZ_BF16 && to == LZ_F32)) return snprintf(buf, n, "%s", a) < 0;   /* bf16 loads widen */
        if (to == LZ_BF16) return t0 == LZ_F32 ? snprintf(buf, n, "lz_f32_to_bf16(%s)", a) < 0 : -1;
        if (t0 == LZ_BF16) return -1;
        if (f32 && to == LZ_I64) return snprintf(buf, n, "lz_f2i64(%s)", a) < 0;
        if (f32 && to == LZ_I32) return snprintf(buf, n, "lz_f2i32(%s)", a) < 0;
        return snprintf(buf, n, "(%s)(%s)", ctype(to), a) < 0;
    }
    if (t0 == LZ_BF16 || (s->n_in > 1 && ti[1] == LZ_BF16 && s->op != LZ_OP_WHERE)) return -1;
    switch ((lz_op)s->op) {
    case LZ_OP_NEG: return (f32 ? snprintf(buf, n, "-%s", a) : snprintf(buf, n, "(%s)(0 - (%s)%s)", ctype(t0), utype(t0), a)) < 0;
    case LZ_OP_EXP: return f32 ? snprintf(buf, n, "expf(%s)", a) < 0 : -1;
    case LZ_OP_LOG: return f32 ? snprintf(buf, n, "logf(%s)", a) < 0 : -1;
    case LZ_OP_SQRT: return f32 ? snprintf(buf, n, "sqrtf(%s)", a) < 0 : -1;
    case LZ_OP_RSQRT: return f32 ? snprintf(buf, n, "1.0f / sqrtf(%s)", a) < 0 : -1;
    case LZ_OP_TANH: return f32 ? snprintf(buf, n, "tanhf(%s)", a) < 0 : -1;
    case LZ_OP_SIGMOID: return f32 ? snprintf(buf, n, "lz_sigmoid(%s)", a) < 0 : -1;
    case LZ_OP_RELU: return f32 ? snprintf(buf, n, "lz_relu(%s)", a) < 0 : -1;
    case LZ_OP_GELU: return f32 ? snprintf(buf, n, "lz_gelu(%s)", a) < 0 : -1;
    case LZ_OP_SCALE: return f32 ? snprintf(buf, n, "%s * (%s)", a, k) < 0 : -1;
    case LZ_OP_POW: {
        if (!f32) return -1;
        /* the CPU's exponents with their own formulas (k_elementwise.c) */
        const float e = s->fattr[0];
        if (e == 2.0f) return snprintf(buf, n, "%s * %s", a, a) < 0;
        if (e == 3.0f) return snprintf(buf, n, "%s * %s * %s", a, a, a) < 0;
        if (e == 0.5f) return snprintf(buf, n, "sqrtf(%s)", a) < 0;
        if (e == 1.0f) return snprintf(buf, n, "%s", a) < 0;
        if (e == -1.0f) return snprintf(buf, n, "1.0f / %s", a) < 0;
        if (e == -0.5f) return snprintf(buf, n, "1.0f / sqrtf(%s)", a) < 0;
        if (e == -2.0f) return snprintf(buf, n, "1.0f / (%s * %s)", a, a) < 0;
        if (e == 0.0f) return snprintf(buf, n, "1.0f") < 0;
        return snprintf(buf, n, "powf(%s, %s)", a, k) < 0;
    }
    case LZ_OP_ADD: case LZ_OP_SUB: case LZ_OP_MUL: {
        const char *o = s->op == LZ_OP_ADD ? "+" : s->op == LZ_OP_SUB ? "-" : "*";
        if (f32) return snprintf(buf, n, "%s %s %s", a, o, b) < 0;
        return ints ? snprintf(buf, n, "(%s)((%s)%s %s (%s)%s)", ctype(t0), utype(t0), a, o, utype(t0), b) < 0 : -1;
    }
    case LZ_OP_DIV: return f32 ? snprintf(buf, n, "%s / %s", a, b) < 0 : -1;
    case LZ_OP_MAXIMUM:
        if (f32) return snprintf(buf, n, "lz_maxf(%s, %s)", a, b) < 0;
        return ints ? snprintf(buf, n, "(%s)lz_maxi(%s, %s)", ctype(t0), a, b) < 0 : -1;
    case LZ_OP_GT: case LZ_OP_LT: case LZ_OP_GE: case LZ_OP_LE: case LZ_OP_EQ: {
        const char *o = s->op == LZ_OP_GT ? ">" : s->op == LZ_OP_LT ? "<" : s->op == LZ_OP_GE ? ">=" : s->op == LZ_OP_LE ? "<=" : "==";
        return snprintf(buf, n, "%s %s %s ? 1.0f : 0.0f", a, o, b) < 0;
    }
    case LZ_OP_WHERE: return snprintf(buf, n, "%s != 0 ? %s : %s", a, b, c) < 0;
    case LZ_OP_RELU_GRAD: return f32 ? snprintf(buf, n, "%s > 0 ? %s : 0.0f", a, b) < 0 : -1;
    case LZ_OP_GELU_GRAD: return f32 ? snprintf(buf, n, "%s * lz_gelu_grad(%s)", b, a) < 0 : -1;
    /* the ops added for models from PyTorch (backends/cpu/k_elementwise_ext.c) */
    case LZ_OP_SILU: return f32 ? snprintf(buf, n, "lz_silu(%s)", a) < 0 : -1;
    case LZ_OP_SILU_GRAD: return f32 ? snprintf(buf, n, "lz_silu_grad(%s, %s)", a, b) < 0 : -1;
    case LZ_OP_SIN: return f32 ? snprintf(buf, n, "sinf(%s)", a) < 0 : -1;
    case LZ_OP_COS: return f32 ? snprintf(buf, n, "cosf(%s)", a) < 0 : -1;
    case LZ_OP_CLIP_COEF: return f32 ? snprintf(buf, n, "lz_clip_coef(%s, %s)", a, k) < 0 : -1;
    case LZ_OP_NE: return snprintf(buf, n, "%s != %s ? 1.0f : 0.0f", a, b) < 0;
    case LZ_OP_MINIMUM:
        if (f32) return snprintf(buf, n, "lz_minf(%s, %s)", a, b) < 0;
        return ints ? snprintf(buf, n, "%s < %s ? %s : %s", a, b, a, b) < 0 : -1;
    default: return -1;
    }
}

/* the register type of a result of dtype d (bf16 kept as its bits) */
static const char *reg_type(int d) { return ctype(d); }

int lz_cu_gen_elementwise(const lz_program *p, const lz_instr *s, int index, lz_cu_text *src,
                          int *slots, int max_slots, char *err, size_t errn)
{
    /* an unfused step is a chain of one */
    lz_fused one;
    const lz_fused *f = s->fused;
    if (s->op != LZ_OP_FUSED_ELEMENTWISE) {
        memset(&one, 0, sizeof one);
        one.n_ops = 1;
        one.numel = p->values[s->out].numel;
        one.ops[0] = *s;
        one.store[0] = 1;
        if (s->n_in > 3) {
            snprintf(err, errn, "%d operands", s->n_in);
            return -1;
        }
        f = &one;
    } else if (!f || f->n_ops < 1 || f->n_ops > LZ_FUSED_MAX_OPS) {
        snprintf(err, errn, "a fused step without its chain");
        return -1;
    }
    gen g = {.p = p, .src = src, .slots = slots, .max_slots = max_slots, .err = err, .errn = errn};
    lz_cu_text pre = {0}, body = {0}, calc = {0}, post = {0};
    int rc = 0;
    /* results stored first: their slots do not move when inputs are added */
    for (int k = 0; k < f->n_ops; k++)
        if (f->store[k] && slot_of(&g, f->ops[k].out) < 0) rc = -1;
    for (int k = 0; k < f->n_ops && !rc; k++) {
        const lz_instr *op = &f->ops[k];
        const lz_value *order = &p->values[op->out];
        char names[3][16];
        int ti[3] = {0};
        for (int a = 0; a < op->n_in && !rc; a++) {
            int kind = s->op == LZ_OP_FUSED_ELEMENTWISE && a < LZ_FUSED_MAX_IN ? f->args[k][a].kind : -1;
            int ref = s->op == LZ_OP_FUSED_ELEMENTWISE && a < LZ_FUSED_MAX_IN ? f->args[k][a].ref : op->in[a];
            if (kind < 0) {   /* unfused: classified as compile/fuse.c does */
                const int64_t numel = p->values[ref].numel;
                kind = numel == f->numel ? LZ_FUSED_CONTIG : numel == 1 ? LZ_FUSED_SCALAR : LZ_FUSED_BCAST;
            }
            if (kind == LZ_FUSED_TILE) {
                snprintf(names[a], sizeof names[a], "t%d", ref);
                ti[a] = p->values[f->ops[ref].out].dtype;
                continue;
            }
            const int id = load_of(&g, ref, kind, order, &pre, &body);
            if (id < 0) {
                rc = -1;
                break;
            }
            snprintf(names[a], sizeof names[a], "r%d", id);
            ti[a] = p->values[ref].dtype;
        }
        if (rc) break;
        char e[512];
        if (expr(p, op, names, ti, e, sizeof e)) {
            snprintf(err, errn, "no formula for %s on %s", lz_op_name((lz_op)op->op),
                     ctype(ti[0]) ? ctype(ti[0]) : "this dtype");
            rc = -1;
            break;
        }
        const int to = p->values[op->out].dtype;
        lz_cu_text_printf(&calc, "        const %s t%d = %s;   /* %s */\n", reg_type(to), k, e,
                          lz_op_name((lz_op)op->op));
        if (f->store[k])
            lz_cu_text_printf(&post, "        ((%s *)a.p[%d])[e] = t%d;\n", ctype(to), slot_of(&g, op->out), k);
    }
    if (!rc) {
        lz_cu_text_printf(src, "\n/* step: %s, %d op%s over %lld elements */\n", lz_op_name((lz_op)s->op),
                          f->n_ops, f->n_ops == 1 ? "" : "s", (long long)f->numel);
        lz_cu_text_printf(src, "struct lz_ew_%d_args { void *p[%d]; };\n", index, g.n_slots);
        lz_cu_text_printf(src, "extern \"C\" __global__ void __launch_bounds__(%d) lz_ew_%d(const lz_ew_%d_args a)\n{\n",
                          LZ_CU_BLOCK, index, index);
        if (pre.len) lz_cu_text_printf(src, "%s", pre.s);
        lz_cu_text_printf(src, "    LZ_GRID_LOOP(e, %lldLL) {\n", (long long)f->numel);
        if (body.len) lz_cu_text_printf(src, "%s", body.s);
        if (calc.len) lz_cu_text_printf(src, "%s", calc.s);
        if (post.len) lz_cu_text_printf(src, "%s", post.s);
        lz_cu_text_printf(src, "    }\n}\n");
        if (pre.oom || body.oom || calc.oom || post.oom) src->oom = 1;
    }
    lz_cu_text_free(&pre);
    lz_cu_text_free(&body);
    lz_cu_text_free(&calc);
    lz_cu_text_free(&post);
    return rc ? -1 : g.n_slots;
}

static uint64_t text_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The kernel index that runs text (made as lz_ew_0): an earlier one with
   the same text, or a new one appended to the program's source. -1 when
   out of memory. */
static int kernel_for(lz_cu_plan *plan, const lz_program *p, const lz_instr *s, const lz_cu_text *text,
                      int *slots, char *err, size_t errn)
{
    const uint64_t h = text_hash(text->s);
    for (int k = 0; k < plan->n_gen; k++)
        if (plan->gen_hash[k] == h && !strcmp(plan->gen_text[k], text->s)) return k;
    const int k = plan->n_gen;
    char **t = realloc(plan->gen_text, sizeof *t * (size_t)(k + 1));
    if (t) plan->gen_text = t;
    uint64_t *hs = t ? realloc(plan->gen_hash, sizeof *hs * (size_t)(k + 1)) : NULL;
    if (hs) plan->gen_hash = hs;
    char *copy = hs ? strdup(text->s) : NULL;
    if (!copy) {
        snprintf(err, errn, "out of host memory");
        return -1;
    }
    plan->gen_text[k] = copy;
    plan->gen_hash[k] = h;
    plan->n_gen++;
    /* the same text under its own name */
    if (lz_cu_gen_elementwise(p, s, k, &plan->gen, slots, LZ_CU_PATCH_MAX, err, errn) < 0) return -1;
    return k;
}

int lz_cu_plan_elementwise(lz_cu_planner *pl, const lz_instr *s, int *rc)
{
    if (s->op != LZ_OP_FUSED_ELEMENTWISE && !lz_op_is_elementwise((lz_op)s->op)) return 0;
    const lz_program *p = pl->plan->prog;
    lz_cu_plan *plan = pl->plan;
    const int64_t numel = s->op == LZ_OP_FUSED_ELEMENTWISE && s->fused ? s->fused->numel : p->values[s->out].numel;
    *rc = 0;
    if (numel == 0) return 1;   /* nothing to compute */
    if (!plan->gen.len) lz_cu_text_printf(&plan->gen, "#include \"k_elementwise.cuh\"\n");
    int slots[LZ_CU_PATCH_MAX];
    char why[200];
    lz_cu_text text = {0};
    const int n = lz_cu_gen_elementwise(p, s, 0, &text, slots, LZ_CU_PATCH_MAX, why, sizeof why);
    const int k = n < 0 || text.oom ? -1 : kernel_for(plan, p, s, &text, slots, why, sizeof why);
    if (text.oom) snprintf(why, sizeof why, "out of host memory");
    lz_cu_text_free(&text);
    if (k < 0) {
        *rc = lz_cu_fail(pl, "%s", why);
        return 1;
    }
    plan->gen_instrs++;
    void *args[LZ_CU_PATCH_MAX] = {0};
    lz_cu_launch *l = lz_cu_add_launch(pl, LZ_CU_MOD_GENERATED, NULL, numel, LZ_CU_BLOCK, args,
                                       sizeof(void *) * (size_t)(n ? n : 1));
    if (!l) {
        *rc = -1;
        return 1;
    }
    l->gen = k;
    for (int j = 0; j < n && !*rc; j++) *rc = lz_cu_patch(pl, l, sizeof(void *) * (size_t)j, slots[j], 0);
    return 1;
}
