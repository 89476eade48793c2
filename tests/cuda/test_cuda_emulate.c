/* The CUDA backend's kernels and plans, run on the CPU: every step's
 * device work checked without a GPU, but the libraries' (cuBLASLt's
 * products, cuDNN's convolutions).
 *
 * A backend registered here plans every program for CUDA, and compiles
 * the plan's generated element-wise source and the family modules
 * (kernels/k_*.cu) as C++ with the host compiler: cuda/emu/cuda_emu.h
 * stands in for CUDA, running a block's threads as fibers so barriers,
 * warp shuffles and shared memory behave as on the device. It runs each
 * program step by step with the CPU backend's own kernels, and every step
 * whose actions are kernel launches, copies and fills also through those
 * actions (argument bytes, patched addresses, scratch, pitches: the plan
 * itself) on the same inputs, into buffers of its own; the two results
 * must agree within 1e-5 of the output's largest value (CUDA's formulas
 * against the CPU's own approximations, sums in other orders; the
 * generator's draws, integer and bf16 results exactly). The training
 * follows the CPU's results, so every step is checked on the inputs a real
 * run gives it: zoo models at smoke size, a lazy SGD step and an eval
 * forward each, and single ops the zoo does not reach, forward and
 * backward. Launches run at most 2 blocks (every kernel loops over its
 * grid).
 *
 *   test_cuda_emulate [MODEL,MODEL,...|all]
 *
 * ctest runs four models that between them reach every op the zoo has
 * (resnet18, BERT, squeezenet1_1, ViT: 10 minutes for all ten on 2
 * loaded cores, where every one agreed, 14433 results). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"
#include "backends/cuda/nvrtc_cache.h"
#include "compile/program.h"
#include "testlib.h"

#define MAX_BLOCKS 2

typedef void (*emu_call)(const void *args, unsigned grid, unsigned block);

static const lz_backend *cpu;
static lz_backend emulating;
static char dir[256], src_dir[512], emu_dir[512];
static void *modules[LZ_CU_N_MODULES];
static int n_programs, n_checked, n_failed, n_compile_failures, n_library_steps;
static double worst_err;
static char worst_what[256];
/* per op: results checked, and the worst error */
static int op_checked[LZ_OP_COUNT];
static double op_worst[LZ_OP_COUNT];

struct lz_backend_exec {
    lz_program *prog;
    lz_cu_plan *plan;
    void *so;                /* the generated kernels' */
    lz_backend_exec *inner;  /* the CPU's */
};

/* the kernels whose threads meet at barriers or shuffle within a warp:
   run as fibers (slow: a context switch each); the rest as plain calls */
static int cooperative(const char *kernel)
{
    static const char *const names[] = {"lz_softmax_warp", "lz_softmax_block", "lz_xent_rows", "lz_xent_mean",
                                        "lz_xent_grad", "lz_reduce_rows", "lz_bn_partial", "lz_layer_norm",
                                        "lz_layer_norm_grad", "lz_ce_rows", "lz_ce_rows_grad"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(kernel, names[i])) return 1;
    return 0;
}

/* compiles src (a file) with the stand-in for CUDA, wrapping every
   extern "C" kernel as lz_emu_call_<name>; its handle, or NULL */
static void *build(const char *src_text, const char *tag)
{
    char src[300], so[300], cmd[3000];
    snprintf(src, sizeof src, "%s/%s.cpp", dir, tag);
    snprintf(so, sizeof so, "%s/%s.so", dir, tag);
    FILE *f = fopen(src, "w");
    if (!f) return NULL;
    fprintf(f, "#include \"cuda_emu.h\"\n%s\n", src_text);
    /* the kernels: extern "C" __global__ void [__launch_bounds__(n)] NAME(const TYPE a) */
    for (const char *p = src_text; (p = strstr(p, "extern \"C\" __global__ void ")); p++) {
        const char *q = p + strlen("extern \"C\" __global__ void ");
        if (!strncmp(q, "__launch_bounds__(", 18)) q = strchr(q, ')') + 2;
        char name[64], type[64];
        if (sscanf(q, "%63[A-Za-z0-9_](const %63[A-Za-z0-9_] a)", name, type) != 2) continue;
        fprintf(f, "extern \"C\" void lz_emu_call_%s(const void *a, unsigned g, unsigned b)\n"
                   "{ lz_emu_launch([](const void *p) { %s(*(const %s *)p); }, a, g, b, %d); }\n", name, name, type,
                cooperative(name));
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O2 -ffp-contract=off -fPIC -shared -w -D__CUDACC_RTC__ -I%s "
             "-I%s/backends/cuda/kernels -I%s -o %s %s 2> %s.log", emu_dir, src_dir, src_dir, so, src, so);
    if (system(cmd) != 0) {
        fprintf(stderr, "the host compiler refused %s (see %s.log)\n", src, so);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) fprintf(stderr, "%s: %s\n", so, dlerror());
    return h;
}

static emu_call lookup(void *so, const char *kernel)
{
    char name[128];
    snprintf(name, sizeof name, "lz_emu_call_%s", kernel);
    emu_call c = NULL;
    if (so) *(void **)&c = dlsym(so, name);
    return c;
}

static lz_backend_exec *emulating_prepare(lz_program *p)
{
    lz_backend_exec *e = calloc(1, sizeof *e);
    char err[1024], tag[32];
    e->prog = p;
    e->plan = lz_cu_plan_make(p, err, sizeof err);
    CHECK(e->plan != NULL);
    if (!e->plan) fprintf(stderr, "%s\n", err);
    snprintf(tag, sizeof tag, "p%d", n_programs++);
    if (e->plan && e->plan->gen.len && !(e->so = build(e->plan->gen.s, tag))) {
        n_compile_failures++;
        CHECK(0);
    }
    e->inner = cpu->prepare(p);   /* sets the steps' scratch as the CPU runs them */
    return e;
}

static void emulating_ready(lz_backend_exec *e, void *arena, size_t bytes)
{
    if (cpu->ready) cpu->ready(e->inner, arena, bytes);
}

static void emulating_release(lz_backend_exec *e)
{
    cpu->release(e->inner);
    lz_cu_plan_free(e->plan);
    if (e->so) dlclose(e->so);
    free(e);
}

/* max |a - b| / max |b| (NaN only on one side: infinite); integers,
   bf16 and exact results bit for bit */
static double rel_err(const lz_value *v, const void *a, const void *b, int exact)
{
    if (v->dtype != LZ_F32 || exact) return memcmp(a, b, v->nbytes) ? INFINITY : 0.0;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < v->numel; i++) {
        const double x = ((const float *)a)[i], y = ((const float *)b)[i];
        if (x != x || y != y) {
            if ((x != x) != (y != y)) return INFINITY;
            continue;
        }
        const double d = fabs(x - y);
        diff = d > diff ? d : diff;
        scale = fabs(y) > scale ? fabs(y) : scale;
    }
    return scale > 0 ? diff / scale : diff;
}

typedef struct redirect {
    int n, value[LZ_FUSED_MAX_OPS + 1];
    void *mem[LZ_FUSED_MAX_OPS + 1];
    void *scratch;
    lz_cu_status status;
} redirect;

static void *addr(const redirect *r, lz_cu_ref ref, void *const *ptrs)
{
    if (ref.value == LZ_CU_REF_SCRATCH) return (char *)r->scratch + ref.add;
    if (ref.value == LZ_CU_REF_STATUS) return (char *)&r->status + ref.add;
    for (int k = 0; k < r->n; k++)
        if (r->value[k] == ref.value) return (char *)r->mem[k] + ref.add;
    return (char *)ptrs[ref.value] + ref.add;
}

/* runs step i's actions into buffers of their own; 0, or -1 when an
   action cannot run here (a library call) */
static int emulate_step(lz_backend_exec *e, int i, void *const *ptrs, redirect *r)
{
    const lz_cu_instr *st = &e->plan->instrs[i];
    for (int k = 0; k < st->n_act; k++)
        if (st->act[k].kind == LZ_CU_MATMUL || st->act[k].kind == LZ_CU_CONV) return -1;
    const lz_program *p = e->prog;
    const lz_instr *s = &p->instrs[i];
    r->n = 0;
    r->value[r->n++] = s->out;
    for (int k = 0; s->op == LZ_OP_FUSED_ELEMENTWISE && k < s->fused->n_extra; k++) r->value[r->n++] = s->fused->extra[k];
    for (int k = 0; k < r->n; k++) r->mem[k] = calloc(1, p->values[r->value[k]].nbytes + 64);
    r->scratch = calloc(1, st->scratch + 256);
    memset(&r->status, 0, sizeof r->status);
    for (int k = 0; k < st->n_act; k++) {
        const lz_cu_action *a = &st->act[k];
        if (a->kind == LZ_CU_ZERO) {
            memset(addr(r, a->u.copy.dst, ptrs), 0, a->u.copy.width);
        } else if (a->kind == LZ_CU_COPY) {
            const lz_cu_copy *c = &a->u.copy;
            char *d = addr(r, c->dst, ptrs);
            const char *src = addr(r, c->src, ptrs);
            for (size_t row = 0; row < c->height; row++)
                memmove(d + row * c->dpitch, src + row * c->spitch, c->width);
        } else {
            const lz_cu_launch *l = a->u.launch;
            _Alignas(16) unsigned char args[LZ_CU_ARGS_MAX];
            memcpy(args, l->args, l->args_bytes);
            for (uint32_t j = 0; j < l->n_patch; j++) {
                void *ad = addr(r, l->patch_ref[j], ptrs);
                memcpy(args + l->patch_at[j], &ad, sizeof ad);
            }
            char gen_name[32];
            snprintf(gen_name, sizeof gen_name, "lz_ew_%d", l->gen);
            emu_call c = l->module == LZ_CU_MOD_GENERATED ? lookup(e->so, gen_name)
                                                           : lookup(modules[l->module], l->kernel);
            CHECK(c != NULL);
            if (!c) {
                fprintf(stderr, "no emulated kernel %s\n", l->kernel ? l->kernel : gen_name);
                return -1;
            }
            c(args, l->grid < MAX_BLOCKS ? l->grid : MAX_BLOCKS, l->block);
        }
    }
    return 0;
}

static void compare_step(lz_backend_exec *e, int i, void *const *ptrs, redirect *r)
{
    const lz_program *p = e->prog;
    const lz_instr *s = &p->instrs[i];
    /* the generator's draws are base/rng.h's on both sides: bit for bit */
    const int exact = s->op == LZ_OP_DROPOUT_MASK || s->op == LZ_OP_RAND || s->op == LZ_OP_RNG_ADVANCE;
    for (int k = 0; k < r->n; k++) {
        const int v = r->value[k];
        const double err = rel_err(&p->values[v], r->mem[k], ptrs[v], exact);
        n_checked++;
        op_checked[s->op]++;
        if (err > op_worst[s->op]) op_worst[s->op] = err;
        if (!(err <= 1e-5)) {
            n_failed++;
            fprintf(stderr, "step %d (%s): result %d differs by %.3g\n", i, lz_op_name((lz_op)s->op), k, err);
        }
        if (err > worst_err || !worst_what[0]) {
            worst_err = err;
            snprintf(worst_what, sizeof worst_what, "step %d (%s)", i, lz_op_name((lz_op)s->op));
        }
    }
    CHECK(r->status.code == 0);
}

static const char *emulating_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    const lz_program *p = e->prog;
    (void)arena;
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_instr *s = &p->instrs[i];
        redirect r = {0};
        const int emulated = e->plan && (!e->plan->gen.len || e->so) && emulate_step(e, i, ptrs, &r) == 0;
        if (!emulated) n_library_steps++;
        lz_kernel k = lz_cpu_kernel_for((lz_op)s->op);
        const char *why = k ? k(p, s, ptrs) : "no CPU kernel";
        if (why) return why;
        if (emulated) compare_step(e, i, ptrs, &r);
        for (int j = 0; j < r.n; j++) free(r.mem[j]);
        free(r.scratch);
    }
    return NULL;
}
static void model(const char *name)
{
    const int failed0 = n_failed, checked0 = n_checked;
    lz_model *m = lz_model_new(name, "smoke", 1);
    CHECK(m != NULL);
    if (!m) return;
    const lz_model_spec *s = lz_model_get_spec(m);
    lz_test_trainer t = {m, lz_test_model_sgd(m, 0.01f)};
    lz_tensor *x, *y;
    lz_test_model_batch(s, 1, &x, &y);
    for (int step = 0; step < 1; step++) {
        lz_tensor *in[2] = {x, y}, *out[1] = {NULL};
        lz_scope_begin();
        CHECK_EQ_I(lz_test_sgd_step(&t, in, out), 0);
        lz_keep(out[0]);
        lz_scope_end();
        lz_mark_step();
        CHECK(out[0] && isfinite(lz_item(out[0])));
        lz_free(out[0]);
    }
    lz_scope_begin();
    lz_tensor *logits = lz_model_forward(m, x, 0);
    CHECK(logits && lz_sync(&logits, 1, 1) == 0);
    lz_scope_end();
    lz_free(x);
    lz_free(y);
    lz_sgd_free(t.opt);
    lz_model_free(m);
    CHECK(lz_wait() == 0);
    printf("%-24s %5d step results compared with the CPU's%s\n", name, n_checked - checked0,
           n_failed > failed0 ? ", DIFFERENCES above" : "");
    fflush(stdout);
}

static void single_ops(void)
{
    const int64_t s4[4] = {2, 3, 6, 5}, s2[2] = {4, 6}, big[1] = {1 << 18};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(2, -1, 1, 4, s4), *a = lz_test_rand(3, -1, 1, 2, s2);
    lz_requires_grad(x, 1);
    lz_requires_grad(a, 1);
    lz_tensor *outs[32];
    int n = 0;
    const int axes01[2] = {0, 2}, perm[4] = {3, 1, 0, 2};
    outs[n++] = lz_softmax(x, 1);
    outs[n++] = lz_log_softmax(x, 2);
    outs[n++] = lz_max_axes(x, 2, axes01, 1);
    outs[n++] = lz_mean_axes(x, 2, axes01, 0);
    outs[n++] = lz_sum(lz_test_rand(4, -1, 1, 1, big));   /* split in partial sums */
    outs[n++] = lz_sum(lz_cast(lz_gt(a, lz_scale(a, 0.5f)), LZ_I32));
    outs[n++] = lz_where(lz_lt(a, lz_neg(a)), a, lz_pow(a, 3.0f));
    outs[n++] = lz_cast(lz_permute(x, perm), LZ_BF16);
    outs[n++] = lz_avg_pool2d(x, (lz_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
                                                  .ceil_mode = 1, .count_include_pad = 0});
    outs[n++] = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {2, 2}, .ceil_mode = 1});
    outs[n++] = lz_adaptive_avg_pool2d(x, 4, 3);
    outs[n++] = lz_hardtanh(x, -0.5f, 0.25f);
    outs[n++] = lz_slice(x, 2, 1, 4);
    lz_tensor *parts[3] = {x, lz_relu(x), x};
    outs[n++] = lz_cat(parts, 3, 1);
    lz_manual_seed(11);
    outs[n++] = lz_rand(2, s2);
    outs[n++] = lz_randn(2, s2);
    outs[n++] = lz_dropout(a, 0.25f, 1);
    const int64_t e3[3] = {5, 4, 6};
    outs[n++] = lz_expand(a, 3, e3);
    /* the ops added for models from PyTorch */
    lz_tensor *pos = lz_add(lz_relu(a), lz_scale(lz_exp(a), 0.1f));
    outs[n++] = lz_add(lz_silu(a), lz_mul(lz_sin(a), lz_cos(pos)));
    outs[n++] = lz_minimum(a, lz_ne(a, lz_relu(a)));
    outs[n++] = lz_tri_mask(a, 1, 0, -1e9f);
    outs[n++] = lz_cumsum(x, 2);
    int64_t gi[24];
    for (int i = 0; i < 24; i++) gi[i] = (i * 5) % 6;
    lz_tensor *idx = lz_from_host(gi, LZ_I64, 2, s2);
    outs[n++] = lz_gather(a, 1, idx);
    outs[n++] = lz_cast(lz_argmax(x, 1, 0), LZ_F32);
    int64_t tg[4] = {1, -100, 5, 0};
    lz_tensor *target = lz_from_host(tg, LZ_I64, 1, (int64_t[]){4});
    lz_cross_entropy_opts ce = {.weight = lz_test_rand(9, 0.5f, 1.5f, 1, (int64_t[]){6}), .ignore_index = -100,
                                .use_ignore_index = 1, .label_smoothing = 0.1f, .reduction = LZ_REDUCTION_MEAN};
    outs[n++] = lz_cross_entropy_ex(a, target, &ce);
    for (int k = 0; k < n; k++) CHECK(outs[k] != NULL);
    CHECK(lz_sync(outs, n, 1) == 0);
    /* their gradients: every backward op of the list */
    lz_tensor *loss = NULL;
    for (int k = 0; k < n; k++) {
        /* not the integer sum (5), the draws (14-17), ne's (19) or argmax's */
        if (lz_tensor_dtype(outs[k]) != LZ_F32 || k == 5 || (k >= 14 && k <= 16) || k == 19 || k == 23) continue;
        lz_tensor *t = lz_sum(lz_mul(outs[k], outs[k]));
        loss = loss ? lz_add(loss, t) : t;
    }
    CHECK(loss && lz_backward(loss) == 0);
    lz_tensor *g[2] = {lz_grad(x), lz_grad(a)};
    CHECK(g[0] && g[1] && lz_sync(g, 2, 1) == 0);
    lz_scope_end();
    printf("single ops: %d results so far\n", n_checked);
}

int main(int argc, char **argv)
{
    snprintf(dir, sizeof dir, "/tmp/lazyc-cuda-emulate-%ld", (long)getpid());
    char cwd[400];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);   /* tests/ (ctest's working directory) */
    snprintf(src_dir, sizeof src_dir, "%s/../src", cwd);
    snprintf(emu_dir, sizeof emu_dir, "%s/cuda/emu", cwd);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    for (int m = 0; m < LZ_CU_N_MODULES; m++) {
        char tag[32];
        snprintf(tag, sizeof tag, "module%d", m);
        modules[m] = build(lz_cu_source_text(lz_cu_module_file(m)), tag);
        CHECK(modules[m] != NULL);
    }
    cpu = lz_backend_cpu();
    emulating = *cpu;
    emulating.name = "cuda-emulating";
    emulating.prepare = emulating_prepare;
    emulating.run = emulating_run;
    emulating.ready = emulating_ready;
    emulating.release = emulating_release;
    emulating.layout_block = NULL;     /* the CUDA backend's layouts: plain */
    emulating.operand_layouts = NULL;
    emulating.product_f32_faster = NULL;
    lz_backend_register(&emulating);
    single_ops();
    const char *const *names = lz_model_names();
    const char *which = argc > 1 ? argv[1] : "all";
    for (int i = 0; names[i]; i++)
        if (!strcmp(which, "all") || strstr(which, names[i])) model(names[i]);
    printf("by op: results checked, worst error\n");
    for (int op = 0; op < LZ_OP_COUNT; op++)
        if (op_checked[op]) printf("  %-28s %6d  %.2e\n", lz_op_name((lz_op)op), op_checked[op], op_worst[op]);
    printf("%d programs, %d step results compared, %d differ (worst %.2e at %s); %d steps with a library "
           "call run on the CPU alone\n", n_programs, n_checked, n_failed, worst_err, worst_what, n_library_steps);
    CHECK(n_checked > 100);
    CHECK_EQ_I(n_failed, 0);
    CHECK_EQ_I(n_compile_failures, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    lz_shutdown();
    return lz_test_done();
}
