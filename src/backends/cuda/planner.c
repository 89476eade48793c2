/* What the family planners (f_*.c, codegen.c) build a plan with
 * (cu_plan.h): actions added to the step being planned (launches and the
 * addresses they patch in, copies, zero fills, library calls), its
 * scratch, grids, the generated source's text, and the error of a step. */
#include "backends/cuda/cu_plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lz_cu_text_printf(lz_cu_text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = t->cap - t->len;
        const int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->s && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? 2 * t->cap : 4096;
        while (cap < t->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

void lz_cu_text_free(lz_cu_text *t)
{
    free(t->s);
    *t = (lz_cu_text){0};
}

void lz_cu_float_literal(char *buf, size_t n, float v)
{
    if (isfinite(v)) {
        snprintf(buf, n, "%af", (double)v);   /* a float is exact as a double in hex */
        return;
    }
    union { float f; uint32_t u; } b = {.f = v};
    snprintf(buf, n, "__uint_as_float(0x%08xu)", (unsigned)b.u);
}

static const char *const module_files[LZ_CU_N_MODULES] = {
    [LZ_CU_MOD_MISC] = "k_misc.cu", [LZ_CU_MOD_RANDOM] = "k_random.cu",
    [LZ_CU_MOD_REDUCE] = "k_reduce.cu", [LZ_CU_MOD_SOFTMAX] = "k_softmax.cu",
    [LZ_CU_MOD_NORM] = "k_norm.cu", [LZ_CU_MOD_POOL] = "k_pool.cu", [LZ_CU_MOD_INDEX] = "k_index.cu",
};

const char *lz_cu_module_file(int module)
{
    return module >= 0 && module < LZ_CU_N_MODULES ? module_files[module] : NULL;
}

const char *lz_cu_module_option(int module)
{
    /* base/rng.h's draws are bitwise the CPU's only without contraction */
    return module == LZ_CU_MOD_RANDOM ? "--fmad=false" : NULL;
}

int lz_cu_fail(lz_cu_planner *pl, const char *fmt, ...)
{
    const lz_instr *s = &pl->plan->prog->instrs[pl->step];
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(pl->err, pl->errn, "cuda: op %s (step %d): %s", lz_op_name((lz_op)s->op), pl->step, why);
    return -1;
}

/* a grid that covers the threads, capped: the kernels loop over the rest
   (132 multiprocessors of an H100 hold 16 blocks of 128 threads each) */
#define GRID_CAP 8192u

uint32_t lz_cu_grid(int64_t threads, uint32_t block)
{
    int64_t g = (threads + block - 1) / block;
    if (g < 1) g = 1;
    return g > GRID_CAP ? GRID_CAP : (uint32_t)g;
}

static lz_cu_action *new_action(lz_cu_planner *pl, int kind)
{
    lz_cu_instr *st = &pl->plan->instrs[pl->step];
    if (st->n_act == st->cap_act) {
        const int cap = st->cap_act ? 2 * st->cap_act : 2;
        lz_cu_action *act = realloc(st->act, sizeof *act * (size_t)cap);
        if (!act) {
            lz_cu_fail(pl, "out of host memory");
            return NULL;
        }
        st->act = act;
        st->cap_act = cap;
    }
    lz_cu_action *a = &st->act[st->n_act++];
    memset(a, 0, sizeof *a);
    a->kind = kind;
    pl->plan->launches++;
    return a;
}

lz_cu_launch *lz_cu_add_launch(lz_cu_planner *pl, int module, const char *kernel, int64_t threads,
                               uint32_t block, const void *args, size_t args_bytes)
{
    if (args_bytes > LZ_CU_ARGS_MAX) {
        lz_cu_fail(pl, "%zu bytes of kernel arguments (at most %d)", args_bytes, LZ_CU_ARGS_MAX);
        return NULL;
    }
    lz_cu_launch *l = calloc(1, sizeof *l);
    lz_cu_action *a = l ? new_action(pl, LZ_CU_LAUNCH) : NULL;
    if (!a) {
        if (!l) lz_cu_fail(pl, "out of host memory");
        free(l);
        return NULL;
    }
    a->u.launch = l;
    l->module = module;
    l->kernel = kernel;
    l->block = block;
    l->grid = lz_cu_grid(threads, block);
    l->args_bytes = (uint32_t)args_bytes;
    memcpy(l->args, args, args_bytes);
    return l;
}

int lz_cu_patch(lz_cu_planner *pl, lz_cu_launch *l, size_t at, int value, int64_t add)
{
    if (l->n_patch == LZ_CU_PATCH_MAX || at + sizeof(void *) > l->args_bytes)
        return lz_cu_fail(pl, "kernel argument patch at byte %zu out of range", at);
    l->patch_at[l->n_patch] = (uint32_t)at;
    l->patch_ref[l->n_patch] = (lz_cu_ref){value, add};
    l->n_patch++;
    return 0;
}

int lz_cu_add_copy(lz_cu_planner *pl, lz_cu_copy c)
{
    if (!c.width || !c.height) return 0;   /* nothing to move */
    lz_cu_action *a = new_action(pl, LZ_CU_COPY);
    if (!a) return -1;
    a->u.copy = c;
    return 0;
}

int lz_cu_add_zero(lz_cu_planner *pl, int value, int64_t add, size_t bytes)
{
    if (!bytes) return 0;
    lz_cu_action *a = new_action(pl, LZ_CU_ZERO);
    if (!a) return -1;
    a->u.copy = (lz_cu_copy){.dst = {value, add}, .width = bytes, .height = 1};
    return 0;
}

int lz_cu_add_matmul(lz_cu_planner *pl, lz_cu_matmul *m)
{
    lz_cu_action *a = new_action(pl, LZ_CU_MATMUL);
    if (!a) {
        free(m);
        return -1;
    }
    a->u.matmul = m;
    return 0;
}

int lz_cu_add_conv(lz_cu_planner *pl, lz_cu_conv *c)
{
    lz_cu_action *a = new_action(pl, LZ_CU_CONV);
    if (!a) {
        free(c);
        return -1;
    }
    a->u.conv = c;
    return 0;
}

int64_t lz_cu_step_take(lz_cu_instr *st, size_t bytes)
{
    const size_t at = (st->scratch + 255) / 256 * 256;
    st->scratch = at + bytes;
    return (int64_t)at;
}

int64_t lz_cu_take_scratch(lz_cu_planner *pl, size_t bytes)
{
    return lz_cu_step_take(&pl->plan->instrs[pl->step], bytes);
}
