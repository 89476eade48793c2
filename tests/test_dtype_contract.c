/* Every op refuses at record time a dtype its kernels cannot run, or runs
 * it: for each public op and each dtype of its operands, either the call
 * returns NULL with an error naming the op, or the step it is recorded in
 * runs, and an unrelated f32 result of that step is never lost with it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static const lz_dtype dtypes[] = {LZ_F32, LZ_BF16, LZ_I64, LZ_I32};
static const char *const dtype_names[] = {"f32", "i64", "i32", "bf16"};   /* by enum value */
#define N_DTYPES 4
#define lz_dtype_name(dt) dtype_names[dt]

/* [2, 3] of dtype dt, values 1..6 */
static lz_tensor *filled(lz_dtype dt)
{
    const int64_t s[] = {2, 3};
    lz_tensor *f = lz_from_host((const float[]){1, 2, 3, 4, 5, 6}, LZ_F32, 2, s);
    if (dt == LZ_F32) return f;
    lz_tensor *t = lz_cast(f, dt);
    lz_free(f);
    return t;
}

typedef lz_tensor *(*op1)(lz_tensor *x);
typedef lz_tensor *(*op2)(lz_tensor *a, lz_tensor *b);

static lz_tensor *sum_axes(lz_tensor *x) { return lz_sum_axes(x, 1, (const int[]){1}, 0); }
static lz_tensor *mean_axes(lz_tensor *x) { return lz_mean_axes(x, 1, (const int[]){1}, 0); }
static lz_tensor *max_axes(lz_tensor *x) { return lz_max_axes(x, 1, (const int[]){1}, 1); }
static lz_tensor *pow2(lz_tensor *x) { return lz_pow(x, 2); }
static lz_tensor *scale2(lz_tensor *x) { return lz_scale(x, 2); }
static lz_tensor *softmax1(lz_tensor *x) { return lz_softmax(x, 1); }
static lz_tensor *log_softmax1(lz_tensor *x) { return lz_log_softmax(x, 1); }
static lz_tensor *transpose01(lz_tensor *x) { return lz_transpose(x, 0, 1); }
static lz_tensor *reshape6(lz_tensor *x) { return lz_reshape(x, 1, (const int64_t[]){6}); }
static lz_tensor *slice01(lz_tensor *x) { return lz_slice(x, 1, 0, 2); }
static lz_tensor *expand3(lz_tensor *x)
{
    return lz_expand(lz_reshape(x, 3, (const int64_t[]){1, 2, 3}), 3, (const int64_t[]){2, 2, 3});
}
static lz_tensor *hardtanh1(lz_tensor *x) { return lz_hardtanh(x, -1, 1); }
static lz_tensor *layer_norm1(lz_tensor *x) { return lz_layer_norm(x, 1, NULL, NULL, 1e-5f); }
static lz_tensor *flatten0(lz_tensor *x) { return lz_flatten(x, 0); }
static lz_tensor *cast_f32(lz_tensor *x) { return lz_cast(x, LZ_F32); }
static lz_tensor *where_self(lz_tensor *x) { return lz_where(filled(LZ_F32), x, x); }
static lz_tensor *matmul_t(lz_tensor *a, lz_tensor *b) { return lz_matmul(a, lz_transpose(b, 0, 1)); }
static lz_tensor *linear_nb(lz_tensor *a, lz_tensor *b) { return lz_linear(a, b, NULL); }
static lz_tensor *cat2(lz_tensor *a, lz_tensor *b) { return lz_cat((lz_tensor *[]){a, b}, 2, 0); }

/* the ops added for models from PyTorch (issue 43) */
static lz_tensor *tri0(lz_tensor *x) { return lz_tri_mask(x, 0, 0, 0.0f); }
static lz_tensor *tri_inf(lz_tensor *x) { return lz_tri_mask(x, 0, 0, -INFINITY); }
static lz_tensor *cumsum1(lz_tensor *x) { return lz_cumsum(x, 1); }
static lz_tensor *argmax1(lz_tensor *x) { return lz_argmax(x, 1, 0); }
static lz_tensor *rms1(lz_tensor *x) { return lz_rms_norm(x, 1, NULL, 1e-5f); }
static lz_tensor *gn1(lz_tensor *x) { return lz_group_norm(x, 1, NULL, NULL, 1e-5f); }
static lz_tensor *gather1(lz_tensor *x)
{
    const int64_t s[] = {2, 3};
    lz_tensor *i = lz_from_host((const int64_t[]){0, 1, 2, 2, 1, 0}, LZ_I64, 2, s);
    return lz_gather(x, 1, i);
}
static lz_tensor *attn_causal(lz_tensor *x)
{
    lz_attention_opts o = {.causal = 1};
    return lz_attention_ex(x, x, x, &o);
}
static lz_tensor *mse(lz_tensor *a, lz_tensor *b) { return lz_mse_loss(a, b, LZ_REDUCTION_MEAN); }
static lz_tensor *bce(lz_tensor *a, lz_tensor *b) { return lz_bce_with_logits(a, b, NULL, NULL, LZ_REDUCTION_SUM); }

static const struct { const char *name; op1 f; } unary[] = {
    {"lz_silu", lz_silu}, {"lz_sin", lz_sin}, {"lz_cos", lz_cos}, {"lz_tri_mask", tri0},
    {"lz_tri_mask", tri_inf}, {"lz_cumsum", cumsum1}, {"lz_argmax", argmax1},
    {"lz_rms_norm", rms1}, {"lz_group_norm", gn1}, {"lz_gather", gather1},
    {"lz_attention_ex", attn_causal},
    {"lz_neg", lz_neg}, {"lz_exp", lz_exp}, {"lz_log", lz_log}, {"lz_sqrt", lz_sqrt},
    {"lz_rsqrt", lz_rsqrt}, {"lz_tanh", lz_tanh}, {"lz_sigmoid", lz_sigmoid},
    {"lz_relu", lz_relu}, {"lz_gelu", lz_gelu}, {"lz_relu6", lz_relu6},
    {"lz_hardtanh", hardtanh1}, {"lz_pow", pow2}, {"lz_scale", scale2},
    {"lz_sum", lz_sum}, {"lz_mean", lz_mean}, {"lz_all_finite", lz_all_finite},
    {"lz_sum_axes", sum_axes}, {"lz_mean_axes", mean_axes}, {"lz_max_axes", max_axes},
    {"lz_softmax", softmax1}, {"lz_log_softmax", log_softmax1},
    {"lz_layer_norm", layer_norm1}, {"lz_transpose", transpose01},
    {"lz_reshape", reshape6}, {"lz_slice", slice01}, {"lz_expand", expand3},
    {"lz_flatten", flatten0}, {"lz_cast", cast_f32}, {"lz_where", where_self},
};
static const struct { const char *name; op2 f; } binary[] = {
    {"lz_add", lz_add}, {"lz_sub", lz_sub}, {"lz_mul", lz_mul}, {"lz_div", lz_div},
    {"lz_maximum", lz_maximum}, {"lz_gt", lz_gt}, {"lz_lt", lz_lt}, {"lz_ge", lz_ge},
    {"lz_le", lz_le}, {"lz_eq", lz_eq}, {"lz_matmul", matmul_t}, {"lz_linear", linear_nb},
    {"lz_cat", cat2}, {"lz_ne", lz_ne}, {"lz_minimum", lz_minimum}, {"lz_mse_loss", mse},
    {"lz_bce_with_logits", bce},
};

/* The op's result y (may be NULL) in one step beside an unrelated f32
   value: y NULL needs an error naming the op; else the step must run and
   the f32 value arrive. */
static void judge(const char *name, lz_dtype dt, lz_tensor *y)
{
    const int64_t s[] = {2};
    lz_tensor *bystander = lz_add(lz_from_host((const float[]){1, 2}, LZ_F32, 1, s),
                                  lz_from_host((const float[]){3, 4}, LZ_F32, 1, s));
    if (!y) {
        const char *e = lz_last_error();
        int named = e && strstr(e, name);
        if (!named)
            fprintf(stderr, "%s(%s): refused with \"%s\", which does not name the op\n", name,
                    lz_dtype_name(dt), e ? e : "(no error)");
        CHECK(named);
    }
    lz_clear_error();
    lz_mark_step();
    float v[2] = {0, 0};
    int rc = lz_to_host(bystander, v, sizeof v);
    if (rc != 0 || v[0] != 4 || v[1] != 6)
        fprintf(stderr, "%s(%s): accepted at record, and the step holding it failed: %s\n", name,
                lz_dtype_name(dt), lz_last_error() ? lz_last_error() : "?");
    CHECK(rc == 0 && v[0] == 4 && v[1] == 6);
    if (y) {
        size_t nbytes = (size_t)lz_numel(y) * lz_dtype_size(lz_tensor_dtype(y));
        void *buf = malloc(nbytes ? nbytes : 1);
        CHECK(lz_to_host(y, buf, nbytes) == 0);
        free(buf);
    }
    lz_clear_error();
}

int main(void)
{
    /* a fresh operand for each op: a failed step would poison it */
    for (int d = 0; d < N_DTYPES; d++) {
        for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
            lz_scope_begin();
            lz_clear_error();
            judge(unary[i].name, dtypes[d], unary[i].f(filled(dtypes[d])));
            lz_scope_end();
        }
        for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
            lz_scope_begin();
            lz_tensor *x = filled(dtypes[d]);
            lz_clear_error();
            judge(binary[i].name, dtypes[d], binary[i].f(x, x));
            lz_scope_end();
        }
    }
    /* where's condition may be any dtype, its branches one */
    for (int d = 0; d < N_DTYPES; d++) {
        lz_scope_begin();
        lz_tensor *c = filled(dtypes[d]), *a = filled(LZ_F32);
        lz_clear_error();
        judge("lz_where", dtypes[d], lz_where(c, a, a));
        lz_scope_end();
    }
    return lz_test_done();
}
