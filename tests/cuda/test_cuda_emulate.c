/* The CUDA backend's generated element-wise kernels, run on the CPU: the
 * values of codegen.c's source checked without a GPU.
 *
 * A backend registered here plans every program for CUDA and compiles the
 * plan's generated source as C++ with the host compiler (cuda/emu/
 * cuda_emu.h stands in for CUDA: a grid of one thread, whose grid-stride
 * loop visits every element). It runs each program step by step: every
 * step with the CPU backend's own kernel, and every element-wise step
 * (unfused, or a fused chain) also through its generated kernel, with the
 * same inputs, into buffers of its own; the two results must agree within
 * 1e-5 of the output's largest value (the formulas are CUDA's expf,
 * tanhf and erfc-based gelu against the CPU's own approximations; integer
 * and bf16 results exactly). The training follows the CPU's results, so
 * every step is compared on the inputs a real run gives it: the zoo models
 * at smoke size, a lazy SGD step and an eval forward each. A kernel that
 * broadcasts from the wrong element, applies the wrong formula or stores
 * the wrong result fails here. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cuda/cu_plan.h"
#include "compile/program.h"
#include "testlib.h"

static const lz_backend *cpu;
static lz_backend emulating;
static char dir[256], kernels_dir[512], emu_dir[512];
static int n_programs, n_steps_checked, n_failed_steps, n_compile_failures;
static double worst_err;
static char worst_what[256];

struct lz_backend_exec {
    lz_program *prog;
    lz_cu_plan *plan;
    void *so;
    void (**call)(void *const *slots);   /* per generated kernel */
    lz_backend_exec *inner;              /* the CPU's, for ready/release */
};

/* the generated source with a C entry per kernel, compiled and opened */
static int compile_plan(lz_backend_exec *e)
{
    const lz_cu_plan *pl = e->plan;
    char src[300], so[300], cmd[3000];
    snprintf(src, sizeof src, "%s/p%d.cpp", dir, n_programs);
    snprintf(so, sizeof so, "%s/p%d.so", dir, n_programs);
    FILE *f = fopen(src, "w");
    if (!f) return -1;
    fprintf(f, "#include \"cuda_emu.h\"\n%s\n", pl->gen.s);
    for (int k = 0; k < pl->n_gen; k++)
        fprintf(f, "extern \"C\" void lz_emu_%d(void *const *slots)\n{\n    lz_ew_%d_args a;\n"
                   "    memcpy(a.p, slots, sizeof a.p);\n    lz_ew_%d(a);\n}\n", k, k, k);
    fclose(f);
    snprintf(cmd, sizeof cmd, "c++ -std=c++17 -O1 -fPIC -shared -w -I%s -I%s -o %s %s 2> %s.log", emu_dir,
             kernels_dir, so, src, so);
    if (system(cmd) != 0) {
        fprintf(stderr, "the host compiler refused %s (see %s.log)\n", src, so);
        return -1;
    }
    e->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    e->call = calloc((size_t)(pl->n_gen ? pl->n_gen : 1), sizeof *e->call);
    if (!e->so || !e->call) return -1;
    for (int k = 0; k < pl->n_gen; k++) {
        char name[32];
        snprintf(name, sizeof name, "lz_emu_%d", k);
        *(void **)&e->call[k] = dlsym(e->so, name);
        if (!e->call[k]) return -1;
    }
    return 0;
}

static lz_backend_exec *emulating_prepare(lz_program *p)
{
    lz_backend_exec *e = calloc(1, sizeof *e);
    char err[1024];
    e->prog = p;
    e->plan = lz_cu_plan_make(p, err, sizeof err);
    CHECK(e->plan != NULL);
    if (!e->plan) fprintf(stderr, "%s\n", err);
    if (e->plan && e->plan->gen.len && compile_plan(e)) {
        n_compile_failures++;
        CHECK(0);
    }
    n_programs++;
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
    free(e->call);
    free(e);
}

/* max |a - b| / max |b|, NaN where only one is NaN counted as infinite */
static double rel_err(const lz_value *v, const void *a, const void *b)
{
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < v->numel; i++) {
        double x, y;
        if (v->dtype == LZ_F32) {
            x = ((const float *)a)[i];
            y = ((const float *)b)[i];
        } else if (v->dtype == LZ_BF16) {
            if (((const uint16_t *)a)[i] != ((const uint16_t *)b)[i]) return INFINITY;
            continue;
        } else if (v->dtype == LZ_I64) {
            if (((const int64_t *)a)[i] != ((const int64_t *)b)[i]) return INFINITY;
            continue;
        } else {
            if (((const int32_t *)a)[i] != ((const int32_t *)b)[i]) return INFINITY;
            continue;
        }
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

/* step i's generated kernel into buffers of its own, then the CPU's into
   the program's memory, compared */
static void check_step(lz_backend_exec *e, int i, const lz_cu_launch *l, void *const *ptrs)
{
    const lz_program *p = e->prog;
    const lz_instr *s = &p->steps[i];
    const int n_out = s->op == LZ_OP_FUSED_ELEMENTWISE ? 1 + s->fused->n_extra : 1;
    void *slots[LZ_CU_PATCH_MAX], *mine[LZ_CU_PATCH_MAX] = {0};
    for (uint32_t k = 0; k < l->n_patch; k++) {
        const lz_cu_ref r = l->patch_ref[k];
        slots[k] = (char *)ptrs[r.value] + r.add;
        if ((int)k < n_out) slots[k] = mine[k] = calloc(1, p->values[r.value].nbytes + 8);
    }
    e->call[l->gen](slots);
    const char *why = cpu->run ? NULL : "no CPU";
    lz_kernel k = lz_cpu_kernel_for((lz_op)s->op);
    why = k ? k(p, s, ptrs) : "no CPU kernel";
    CHECK(why == NULL);
    for (int k2 = 0; k2 < n_out; k2++) {
        const int v = l->patch_ref[k2].value;
        const double err = rel_err(&p->values[v], mine[k2], ptrs[v]);
        n_steps_checked++;
        if (!(err <= 1e-5)) {
            n_failed_steps++;
            fprintf(stderr, "step %d (%s, kernel lz_ew_%d): result %d differs by %.3g\n", i,
                    lz_op_name((lz_op)s->op), l->gen, k2, err);
        }
        if (err > worst_err || !worst_what[0]) {
            worst_err = err;
            snprintf(worst_what, sizeof worst_what, "step %d (%s)", i, lz_op_name((lz_op)s->op));
        }
    }
    for (int k2 = 0; k2 < n_out; k2++) free(mine[k2]);
}

static const char *emulating_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    const lz_program *p = e->prog;
    (void)arena;
    for (int i = 0; i < p->n_steps; i++) {
        const lz_instr *s = &p->steps[i];
        const lz_cu_launch *gen = NULL;
        for (int k = 0; e->plan && e->call && k < e->plan->steps[i].n_act; k++) {
            const lz_cu_action *a = &e->plan->steps[i].act[k];
            if (a->kind == LZ_CU_LAUNCH && a->u.launch->module == LZ_CU_MOD_GENERATED) gen = a->u.launch;
        }
        if (gen) {
            check_step(e, i, gen, ptrs);
            continue;
        }
        lz_kernel k = lz_cpu_kernel_for((lz_op)s->op);
        const char *why = k ? k(p, s, ptrs) : "no CPU kernel";
        if (why) return why;
    }
    return NULL;
}

static lz_sgd *make_sgd(lz_model *m)
{
    lz_params *p = lz_model_params(m);
    int n = lz_params_count(p);
    lz_tensor **list = malloc(sizeof *list * (size_t)(n ? n : 1));
    int k = lz_params_trainable_list(p, list, n);
    lz_sgd *opt = lz_sgd_new(list, k, (lz_sgd_opts){.lr = 0.01f, .momentum = 0.9f});
    free(list);
    return opt;
}

static void model(const char *name)
{
    const int failed0 = n_failed_steps, checked0 = n_steps_checked;
    lz_model *m = lz_model_new(name, "smoke", 1);
    CHECK(m != NULL);
    if (!m) return;
    const lz_model_spec *s = lz_model_get_spec(m);
    lz_test_trainer t = {m, make_sgd(m)};
    lz_tensor *x, *y;
    int64_t nx = 1, ny = 1;
    for (int d = 0; d < s->input_ndim; d++) nx *= s->input_shape[d];
    for (int d = 0; d < s->target_ndim; d++) ny *= s->target_shape[d];
    int64_t *lab = malloc(sizeof *lab * (size_t)(nx > ny ? nx : ny));
    if (s->input_dtype == LZ_F32) {
        x = lz_test_rand(1, -1, 1, s->input_ndim, s->input_shape);
    } else {
        for (int64_t i = 0; i < nx; i++) lab[i] = (i * 7919) % s->num_classes;
        x = lz_from_host(lab, LZ_I64, s->input_ndim, s->input_shape);
    }
    for (int64_t i = 0; i < ny; i++) lab[i] = (i * 31) % s->num_classes;
    y = lz_from_host(lab, LZ_I64, s->target_ndim, s->target_shape);
    free(lab);
    for (int step = 0; step < 2; step++) {
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
    printf("%-24s %4d generated-kernel results compared with the CPU's%s\n", name, n_steps_checked - checked0,
           n_failed_steps > failed0 ? ", DIFFERENCES above" : "");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    snprintf(dir, sizeof dir, "/tmp/lazyc-cuda-emulate-%ld", (long)getpid());
    char cwd[400];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);   /* tests/ (ctest's working directory) */
    snprintf(kernels_dir, sizeof kernels_dir, "%s/../src/backends/cuda/kernels", cwd);
    snprintf(emu_dir, sizeof emu_dir, "%s/cuda/emu", cwd);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    cpu = lz_backend_cpu();
    emulating = *cpu;
    emulating.name = "cuda-emulating";
    emulating.prepare = emulating_prepare;
    emulating.run = emulating_run;
    emulating.ready = emulating_ready;
    emulating.release = emulating_release;
    emulating.layout_block = NULL;     /* the CUDA backend's layouts: plain */
    emulating.operand_layouts = NULL;
    emulating.conv_f32_faster = NULL;
    lz_backend_register(&emulating);
    const char *const *names = lz_model_names();
    for (int i = 0; names[i]; i++)
        if (argc < 2 || strstr(argv[1], names[i])) model(names[i]);
    printf("%d programs, %d generated-kernel results compared, %d differ; worst %.2e at %s\n", n_programs,
           n_steps_checked, n_failed_steps, worst_err, worst_what);
    CHECK(n_steps_checked > 100);
    CHECK_EQ_I(n_failed_steps, 0);
    CHECK_EQ_I(n_compile_failures, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    lz_shutdown();
    return lz_test_done();
}
