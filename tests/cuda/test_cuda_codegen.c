/* The CUDA backend's GPU-free half, on a machine with no GPU (issue 46):
 *
 *  - every program the ten zoo models compile at smoke size (a lazy SGD
 *    step, a captured one, an autocast step, an eval forward), and a set
 *    of single ops the zoo does not reach, gets a CUDA plan: no step is
 *    refused ("cuda: no kernel for op X" would fail the test), every launch
 *    is well formed, and the generated element-wise source compiles with
 *    NVRTC to PTX for sm_90 (the backend's own compiles, to cubins, are
 *    the family modules' below and test_cuda_cache's);
 *  - every family module (kernels/k_*.cu, base/rng.h in k_random.cu)
 *    compiles for sm_90 and holds every kernel a plan names;
 *  - the kernel argument structs have the same size and alignment in
 *    the host's C and in NVRTC's CUDA (k_args.h is compiled by both);
 *  - the generated text of one small fused chain equals
 *    tests/cuda/golden_ew.cu (--write-golden rewrites it).
 *
 * The programs come from the CPU backend's compiles: a backend registered
 * here runs the CPU's kernels but plans every program for CUDA in its
 * prepare, with the CUDA backend's layouts (plain) and autocast rules. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backends/cuda/cu_plan.h"
#include "backends/cuda/kernels/k_args.h"
#include "backends/cuda/nvrtc_cache.h"
#include "compile/program.h"
#include "testlib.h"

#define ARCH 90

static const lz_backend *cpu;
static lz_backend planning;
static char cache_dir[256];

static int programs, plan_failures, compile_failures, bad_launches, gen_kernels, gen_instrs;
static long long steps_planned, launches_planned;
static char first_failure[1024];

/* kernels the plans named, per module, to look up in the cubins */
#define MAX_NAMES 128
typedef struct named_kernel { int module; const char *kernel; } named_kernel;
static named_kernel named[MAX_NAMES];
static int n_named;

/* golden mode: the first program's generated source is kept here */
static int keep_source;
static char *kept_source;

static void note_failure(const char *what)
{
    if (!first_failure[0]) snprintf(first_failure, sizeof first_failure, "%s", what);
    fprintf(stderr, "%s\n", what);
}

static void note_kernel(int module, const char *kernel)
{
    for (int i = 0; i < n_named; i++)
        if (named[i].module == module && !strcmp(named[i].kernel, kernel)) return;
    if (n_named < MAX_NAMES) named[n_named++] = (named_kernel){module, kernel};
}

/* every launch well formed: a grid, whole warps, arguments in bounds,
   every pointer bound to a value of the program, its scratch or status */
static void check_launch(const lz_program *p, const lz_cu_instr *st, const lz_cu_launch *l, int step)
{
    int ok = l->grid >= 1 && l->block >= 32 && l->block <= 1024 && l->block % 32 == 0 &&
             l->args_bytes <= LZ_CU_ARGS_MAX && l->n_patch <= LZ_CU_PATCH_MAX;
    for (uint32_t k = 0; ok && k < l->n_patch; k++) {
        const lz_cu_ref r = l->patch_ref[k];
        ok = l->patch_at[k] % 8 == 0 && l->patch_at[k] + 8 <= l->args_bytes &&
             (r.value == LZ_CU_REF_STATUS || (r.value == LZ_CU_REF_SCRATCH && (size_t)r.add < st->scratch) ||
              (r.value >= 0 && r.value < p->n_values && (size_t)r.add <= p->values[r.value].nbytes));
    }
    if (!ok) {
        bad_launches++;
        char msg[200];
        snprintf(msg, sizeof msg, "step %d (%s): a malformed launch of %s", step,
                 lz_op_name((lz_op)p->instrs[step].op), l->kernel ? l->kernel : "a generated kernel");
        note_failure(msg);
    }
    if (l->module != LZ_CU_MOD_GENERATED) note_kernel(l->module, l->kernel);
}

static lz_backend_exec *planning_prepare(lz_program *p)
{
    char err[1024];
    lz_cu_plan *pl = lz_cu_plan_make(p, err, sizeof err);
    if (!pl) {
        plan_failures++;
        note_failure(err);
        return cpu->prepare(p);
    }
    programs++;
    steps_planned += p->n_instrs;
    launches_planned += pl->launches;
    gen_kernels += pl->n_gen;
    gen_instrs += pl->gen_instrs;
    for (int i = 0; i < p->n_instrs; i++)
        for (int k = 0; k < pl->instrs[i].n_act; k++)
            if (pl->instrs[i].act[k].kind == LZ_CU_LAUNCH) check_launch(p, &pl->instrs[i], pl->instrs[i].act[k].u.launch, i);
    if (pl->gen.len) {
        if (keep_source && !kept_source) kept_source = strdup(pl->gen.s);
        lz_cu_image img = {0};
        if (lz_cu_compile_ptx("elementwise.cu", pl->gen.s, ARCH, NULL, &img, err, sizeof err)) {
            compile_failures++;
            note_failure(err);
        }
        free(img.data);
    }
    lz_cu_plan_free(pl);
    return cpu->prepare(p);
}

/* ---- the zoo ---- */

static int autocast_step(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    if (lz_autocast_begin(LZ_BF16)) return -1;
    int rc = lz_test_sgd_step(ctx, in, out);
    lz_autocast_end();
    return rc;
}

static void zoo_model(const char *name)
{
    const int before = programs, failed = plan_failures + compile_failures + bad_launches;
    lz_model *m = lz_model_new(name, "smoke", 1);
    CHECK(m != NULL);
    if (!m) return;
    lz_test_trainer t = {m, lz_test_model_sgd(m, 0.01f)};
    lz_tensor *x, *y;
    lz_test_model_batch(lz_model_get_spec(m), 1, &x, &y);
    lz_tensor *in[2] = {x, y};
    /* a captured step (its trace is the lazy step) and two replays, then
       the same under autocast, then an eval forward */
    lz_fn *f = lz_capture(lz_test_sgd_step, &t, 2, 1), *g = lz_capture(autocast_step, &t, 2, 1);
    for (int k = 0; k < 4; k++) {
        lz_tensor *out[1] = {NULL};
        CHECK_EQ_I(lz_call(k < 2 ? f : g, in, out), 0);
        float loss = out[0] ? lz_item(out[0]) : -1;
        CHECK(loss == loss);
        lz_free(out[0]);
    }
    lz_scope_begin();
    lz_tensor *logits = lz_model_forward(m, x, 0);
    CHECK(logits != NULL && lz_sync(&logits, 1, 1) == 0);
    lz_scope_end();
    lz_fn_free(f);
    lz_fn_free(g);
    lz_free(x);
    lz_free(y);
    lz_sgd_free(t.opt);
    lz_model_free(m);
    lz_wait();
    printf("%-24s %d programs planned for CUDA%s\n", name, programs - before,
           plan_failures + compile_failures + bad_launches > failed ? ", FAILURES above" : "");
    fflush(stdout);
}

/* ---- ops the zoo does not reach ---- */

static void single_ops(void)
{
    const int64_t s4[4] = {2, 3, 6, 5}, s2[2] = {4, 6};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(2, -1, 1, 4, s4), *a = lz_test_rand(3, -1, 1, 2, s2);
    lz_tensor *outs[40];
    int n = 0;
    const int axes01[2] = {0, 2}, perm[4] = {3, 1, 0, 2};
    outs[n++] = lz_softmax(x, 1);                                   /* an axis other than the last */
    outs[n++] = lz_log_softmax(x, 2);
    outs[n++] = lz_max_axes(x, 2, axes01, 1);
    outs[n++] = lz_mean_axes(x, 2, axes01, 0);
    outs[n++] = lz_sum(lz_cast(lz_gt(a, lz_scale(a, 0.5f)), LZ_I32));  /* integer sum */
    outs[n++] = lz_where(lz_lt(a, lz_neg(a)), a, lz_pow(a, 3.0f));
    outs[n++] = lz_cast(lz_permute(x, perm), LZ_BF16);
    outs[n++] = lz_avg_pool2d(x, (lz_pool2d_opts){.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1},
                                                  .ceil_mode = 1, .count_include_pad = 0});
    outs[n++] = lz_max_pool2d(x, (lz_pool2d_opts){.kernel = {2, 2}, .ceil_mode = 1});
    outs[n++] = lz_adaptive_avg_pool2d(x, 4, 3);
    outs[n++] = lz_conv_transpose2d(x, lz_test_rand(12, -1, 1, 4, (int64_t[]){3, 2, 3, 3}), NULL,
                                    (lz_conv2d_opts){.stride = {2, 2}, .padding = {1, 1}}, (const int[]){1, 1});
    outs[n++] = lz_hardtanh(x, -0.5f, 0.25f);
    outs[n++] = lz_slice(x, 2, 1, 4);
    lz_tensor *parts[3] = {x, lz_relu(x), x};
    outs[n++] = lz_cat(parts, 3, 1);
    outs[n++] = lz_rand(2, s2);
    outs[n++] = lz_randn(2, s2);
    outs[n++] = lz_dropout(a, 0.25f, 1);
    outs[n++] = lz_cast(lz_cast(a, LZ_I64), LZ_F32);
    outs[n++] = lz_maximum(a, lz_tanh(lz_sigmoid(lz_exp(lz_log(lz_sqrt(lz_rsqrt(lz_mul(a, a))))))));
    const int64_t e3[3] = {5, 4, 6};
    outs[n++] = lz_expand(a, 3, e3);
    /* the ops added for models from PyTorch */
    lz_requires_grad(a, 1);
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
    outs[n++] = lz_scatter_add(a, 1, idx, a);
    lz_tensor *ps[1] = {a};
    lz_tensor *l = lz_add(lz_sum(outs[n - 2]), lz_sum(lz_mul(outs[n - 4], outs[n - 4])));
    CHECK(l && lz_backward(l) == 0);
    outs[n++] = lz_clip_grad_norm(ps, 1, 0.5f);
    outs[n++] = lz_grad(a);
    for (int k = 0; k < n; k++) CHECK(outs[k] != NULL);
    CHECK(lz_sync(outs, n, 1) == 0);
    lz_scope_end();
}

/* ---- family modules and argument structs ---- */

/* name as a whole string of the cubin's ELF string table (extern "C"
   kernels keep their names) */
static int has_symbol(const lz_cu_image *img, const char *name)
{
    const size_t n = strlen(name);
    const char *base = img->data, *end = base + img->size;
    for (const char *p = base + 1; p + n < end; p++)
        if (p[-1] == 0 && p[n] == 0 && !memcmp(p, name, n)) return 1;
    return 0;
}

static void modules(void)
{
    for (int mod = 0; mod < LZ_CU_N_MODULES; mod++) {
        const char *file = lz_cu_module_file(mod), *src = lz_cu_source_text(file);
        CHECK(src != NULL);
        if (!src) continue;
        lz_cu_image img = {0};
        char err[2048];
        const int rc = lz_cu_compile(file, src, ARCH, lz_cu_module_option(mod), cache_dir, &img, err, sizeof err);
        CHECK_EQ_I(rc, 0);
        if (rc) {
            note_failure(err);
            continue;
        }
        int found = 0, wanted = 0;
        for (int i = 0; i < n_named; i++) {
            if (named[i].module != mod) continue;
            wanted++;
            if (has_symbol(&img, named[i].kernel)) found++;
            else fprintf(stderr, "%s: no kernel %s in its cubin\n", file, named[i].kernel);
        }
        CHECK_EQ_I(found, wanted);
        printf("%-16s compiled for sm_%d: %zu bytes, %d kernels the plans launch all there\n", file, ARCH,
               img.size, wanted);
        free(img.data);
    }
}

#define SIZE_CHECK(T) \
    lz_cu_text_printf(&src, "static_assert(sizeof(" #T ") == %zu, \"" #T "\");\n", sizeof(T))
/* NVRTC has no offsetof: the sizes and alignments, with the members in
   one order (one header), pin the offsets */
#define ALIGN_CHECK(T) \
    lz_cu_text_printf(&src, "static_assert(alignof(" #T ") == %zu, \"" #T "\");\n", _Alignof(T))

static void arg_structs(void)
{
    lz_cu_text src = {0};
    lz_cu_text_printf(&src, "#include \"k_common.cuh\"\n");
    SIZE_CHECK(lz_cu_status);
    ALIGN_CHECK(lz_cu_status);
    SIZE_CHECK(lz_cu_fill_args);
    ALIGN_CHECK(lz_cu_fill_args);
    SIZE_CHECK(lz_cu_convert_args);
    ALIGN_CHECK(lz_cu_convert_args);
    SIZE_CHECK(lz_cu_gather_args);
    ALIGN_CHECK(lz_cu_gather_args);
    SIZE_CHECK(lz_cu_hardtanh_args);
    ALIGN_CHECK(lz_cu_hardtanh_args);
    SIZE_CHECK(lz_cu_embedding_args);
    ALIGN_CHECK(lz_cu_embedding_args);
    SIZE_CHECK(lz_cu_rng_advance_args);
    ALIGN_CHECK(lz_cu_rng_advance_args);
    SIZE_CHECK(lz_cu_fill_random_args);
    ALIGN_CHECK(lz_cu_fill_random_args);
    SIZE_CHECK(lz_cu_random_op_args);
    ALIGN_CHECK(lz_cu_random_op_args);
    SIZE_CHECK(lz_cu_reduce_args);
    ALIGN_CHECK(lz_cu_reduce_args);
    SIZE_CHECK(lz_cu_softmax_args);
    ALIGN_CHECK(lz_cu_softmax_args);
    SIZE_CHECK(lz_cu_xent_args);
    ALIGN_CHECK(lz_cu_xent_args);
    SIZE_CHECK(lz_cu_bn_args);
    ALIGN_CHECK(lz_cu_bn_args);
    SIZE_CHECK(lz_cu_ln_args);
    ALIGN_CHECK(lz_cu_ln_args);
    SIZE_CHECK(lz_cu_pool_args);
    SIZE_CHECK(lz_cu_ce_args);
    ALIGN_CHECK(lz_cu_ce_args);
    SIZE_CHECK(lz_cu_index_args);
    ALIGN_CHECK(lz_cu_index_args);
    ALIGN_CHECK(lz_cu_pool_args);
    CHECK(!src.oom);
    lz_cu_image img = {0};
    char err[2048];
    const int rc = lz_cu_compile("k_args_check.cu", src.s, ARCH, NULL, NULL, &img, err, sizeof err);
    CHECK_EQ_I(rc, 0);
    if (rc) note_failure(err);
    else printf("kernel argument structs: the same sizes and alignments in C and in NVRTC's CUDA\n");
    free(img.data);
    lz_cu_text_free(&src);
}

/* ---- the golden text ---- */

static void golden(const char *path, int write)
{
    keep_source = 1;
    const int64_t s2[2] = {4, 8}, s1[1] = {8};
    lz_scope_begin();
    lz_tensor *x = lz_test_rand(4, -1, 1, 2, s2), *b = lz_test_rand(5, -1, 1, 1, s1);
    lz_tensor *y = lz_relu(lz_add(x, b));   /* a chain of two with a broadcast bias */
    CHECK(lz_sync(&y, 1, 1) == 0);
    lz_scope_end();
    keep_source = 0;
    CHECK(kept_source != NULL);
    if (!kept_source) return;
    if (write) {
        FILE *f = fopen(path, "w");
        CHECK(f && fputs(kept_source, f) >= 0 && fclose(f) == 0);
        printf("wrote %s\n", path);
        return;
    }
    FILE *f = fopen(path, "r");
    char want[8192] = "";
    size_t n = f ? fread(want, 1, sizeof want - 1, f) : 0;
    if (f) fclose(f);
    want[n] = 0;
    const int same = !strcmp(want, kept_source);
    CHECK(same);
    if (!same) fprintf(stderr, "generated:\n%s\nexpected (%s):\n%s\n", kept_source, path, want);
    else printf("golden: the generated kernel of relu(x + b) is %s\n", path);
}

int main(int argc, char **argv)
{
    const int write_golden = argc > 1 && !strcmp(argv[1], "--write-golden");
    /* a fresh cache: every source is compiled, not read back */
    snprintf(cache_dir, sizeof cache_dir, "/tmp/lazyc-cuda-codegen-%ld", (long)getpid());
    cpu = lz_backend_cpu();
    planning = *cpu;
    planning.name = "cuda-planning";
    planning.prepare = planning_prepare;
    planning.layout_block = NULL;      /* the CUDA backend's layouts: plain */
    planning.operand_layouts = NULL;
    planning.product_f32_faster = NULL;   /* its autocast: every product in bf16 */
    lz_backend_register(&planning);

    golden("cuda/golden_ew.cu", write_golden);
    if (write_golden) return lz_test_done();
    arg_structs();
    single_ops();
    const char *const *names = lz_model_names();
    for (int i = 0; names[i]; i++) zoo_model(names[i]);
    modules();
    printf("%d programs, %lld steps, %lld device actions, %d element-wise steps run by %d generated kernels; "
           "%d plans refused, %d sources NVRTC refused, %d malformed launches\n",
           programs, steps_planned, launches_planned, gen_instrs, gen_kernels, plan_failures, compile_failures,
           bad_launches);
    CHECK(programs >= 30);
    CHECK_EQ_I(plan_failures, 0);
    CHECK_EQ_I(compile_failures, 0);
    CHECK_EQ_I(bad_launches, 0);
    if (first_failure[0]) fprintf(stderr, "first failure: %s\n", first_failure);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", cache_dir);
    free(kept_source);
    lz_shutdown();
    return lz_test_done();
}
