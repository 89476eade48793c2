/* Bad input through every group of the public API: NULL handles and
 * arguments, wrong dtypes, zero-sized, negative and huge shapes (element
 * counts that overflow), ndim past LZ_MAX_DIMS, host buffers of the wrong
 * size, captures called with missing or mismatched inputs. Each case must
 * return NULL / -1 / NaN and leave a message naming what is wrong (the
 * expected substring); nothing may crash, abort or record a graph.
 * (test_errors_elementwise.c and test_errors_shape.c cover broadcasting,
 * dtype and axis errors of the element-wise, reduction and shape ops.)
 *
 * LZ_LIST_CASES=1 prints the cases and their messages as the table rows in
 * docs/reliability.md, "Bad input through the API". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

static int list_cases;

/* One case: the call must have failed and left a message with want in it. */
static void expect(const char *call, int failed, const char *want, int line)
{
    const char *e = lz_last_error();
    if (!failed) {
        lz_test_failed++;
        fprintf(stderr, "line %d: %s succeeded; expected an error with \"%s\"\n", line, call, want);
    } else if (!e || !*e) {
        lz_test_failed++;
        fprintf(stderr, "line %d: %s failed without a message\n", line, call);
    } else if (!strstr(e, want)) {
        lz_test_failed++;
        fprintf(stderr, "line %d: %s: message \"%s\" lacks \"%s\"\n", line, call, e, want);
    } else {
        lz_test_passed++;
    }
    if (list_cases) printf("| `%s` | %s |\n", call, e ? e : "(none)");
}

#define BAD_PTR(call, want) do { lz_clear_error(); const void *r_ = (call); \
    expect(#call, r_ == NULL, want, __LINE__); } while (0)
#define BAD_INT(call, want) do { lz_clear_error(); long long r_ = (long long)(call); \
    expect(#call, r_ == -1, want, __LINE__); } while (0)
#define BAD_NAN(call, want) do { lz_clear_error(); double r_ = (call); \
    expect(#call, isnan(r_), want, __LINE__); } while (0)
/* void calls: they must leave the message and change nothing */
#define BAD_VOID(call, want) do { lz_clear_error(); call; expect(#call, 1, want, __LINE__); } while (0)

/* ---- capture step functions -------------------------------------------- */

/* out[0] = in[0] @ w: fixes the inner size at 3 */
static int step_matmul(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    out[0] = lz_matmul(in[0], (lz_tensor *)ctx);
    return out[0] ? 0 : -1;
}

static int step_exp(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx;
    out[0] = lz_exp(lz_add(in[0], in[1]));
    return out[0] ? 0 : -1;
}

static int step_fails_silently(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx; (void)in; (void)out;
    return -1;
}

static int step_leaves_out_null(void *ctx, lz_tensor *const *in, lz_tensor **out)
{
    (void)ctx; (void)in; (void)out;
    return 0;
}

/* ---- a tiny IDX data set --------------------------------------------------- */

static void write_idx(const char *path, int ndim, const uint32_t *dims, int fill)
{
    FILE *f = fopen(path, "wb");
    unsigned char head[4] = {0, 0, 8, (unsigned char)ndim};
    fwrite(head, 1, 4, f);
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        unsigned char b[4] = {dims[d] >> 24, dims[d] >> 16 & 255, dims[d] >> 8 & 255, dims[d] & 255};
        fwrite(b, 1, 4, f);
        total *= dims[d];
    }
    for (uint64_t i = 0; i < total; i++) fputc((int)(i * 7 + (uint64_t)fill) % 10, f);
    fclose(f);
}

int main(void)
{
    list_cases = getenv("LZ_LIST_CASES") && getenv("LZ_LIST_CASES")[0] == '1';
    lz_set_eager(0);
    const int64_t s23[] = {2, 3}, s3[] = {3}, s32[] = {3, 2}, s1111[] = {1, 1, 1, 1};
    const int64_t s9[] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, neg[] = {2, -3};
    const int64_t huge2[] = {INT64_C(1) << 40, INT64_C(1) << 40};
    const int64_t max1[] = {INT64_MAX}, zero_huge[] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
    const float v6[6] = {1, 2, 3, 4, 5, 6};
    const int64_t iv3[] = {0, 1, 2};
    lz_tensor *a = lz_from_host(v6, LZ_F32, 2, s23);        /* [2, 3] f32 */
    lz_tensor *w = lz_from_host(v6, LZ_F32, 2, s32);        /* [3, 2] f32 */
    lz_tensor *i3 = lz_from_host(iv3, LZ_I64, 1, s3);       /* [3] i64 */
    lz_tensor *one = lz_scalar(1.0f);
    lz_tensor *x4 = lz_zeros(LZ_F32, 4, (const int64_t[]){1, 2, 4, 4});
    lz_tensor *k4 = lz_zeros(LZ_F32, 4, (const int64_t[]){3, 2, 3, 3});
    lz_tensor *t1111 = lz_zeros(LZ_F32, 4, s1111);
    CHECK(a && w && i3 && one && x4 && k4 && t1111);
    float buf[8];
    lz_metrics_reset();

    /* ---- tensor creation ---- */
    BAD_PTR(lz_from_host(NULL, LZ_F32, 2, s23), "data is NULL");
    BAD_PTR(lz_from_host(v6, (lz_dtype)9, 2, s23), "unknown dtype 9");
    BAD_PTR(lz_zeros(LZ_F32, -1, s23), "ndim -1 out of range");
    BAD_PTR(lz_zeros(LZ_F32, 9, s9), "ndim 9 out of range [0, 8]");
    BAD_PTR(lz_zeros(LZ_F32, 2, NULL), "shape is NULL");
    BAD_PTR(lz_zeros(LZ_F32, 2, neg), "negative dimension in shape [2, -3]");
    BAD_PTR(lz_full(LZ_F32, 2, huge2, 1.0), "is too large");
    BAD_PTR(lz_zeros(LZ_I64, 1, max1), "is too large");
    BAD_PTR(lz_zeros(LZ_F32, 3, zero_huge), "is too large");   /* no elements, but strides overflow */

    /* ---- queries ---- */
    BAD_INT(lz_ndim(NULL), "lz_ndim: tensor is NULL");
    BAD_INT(lz_numel(NULL), "lz_numel: tensor is NULL");
    BAD_INT(lz_dim(NULL, 0), "lz_dim: tensor is NULL");
    BAD_INT(lz_dim(a, 2), "axis 2 out of range");
    BAD_INT(lz_dim(a, -3), "axis -3 out of range");

    /* ---- reading and writing host memory ---- */
    BAD_INT(lz_to_host(NULL, buf, 24), "lz_to_host: tensor is NULL");
    BAD_INT(lz_to_host(a, buf, 20), "holds 24 bytes, destination has 20");
    BAD_INT(lz_to_host(a, buf, 28), "[2, 3] f32 holds 24 bytes");
    BAD_INT(lz_to_host(a, NULL, 24), "destination is NULL");
    BAD_INT(lz_to_host(i3, buf, 12), "[3] i64 holds 24 bytes, destination has 12");
    BAD_NAN(lz_item(NULL), "lz_item: tensor is NULL");
    BAD_NAN(lz_item(a), "has 6 elements, not 1");
    BAD_INT(lz_copy_from_host(NULL, v6, 24), "lz_copy_from_host: tensor is NULL");
    BAD_INT(lz_copy_from_host(a, v6, 23), "[2, 3] f32 holds 24 bytes, source has 23");
    BAD_INT(lz_copy_from_host(a, NULL, 24), "data is NULL");
    BAD_INT(lz_assign(NULL, a), "lz_assign: dst is NULL");
    BAD_INT(lz_assign(a, w), "differ");
    BAD_INT(lz_assign(i3, lz_cast(i3, LZ_I32)), "differ");
    BAD_INT(lz_sync(NULL, 2, 0), "bad tensor list");
    BAD_INT(lz_sync((lz_tensor *const[]){a, NULL}, 2, 1), "operand 1 is NULL");
    BAD_INT(lz_sync((lz_tensor *const[]){a}, -1, 1), "bad tensor list (n = -1)");

    /* ---- shape ops: sizes that overflow, ndim past the limit ---- */
    lz_tensor *empty = lz_zeros(LZ_F32, 2, (const int64_t[]){0, 3});
    BAD_PTR(lz_reshape(empty, 2, (const int64_t[]){INT64_C(1) << 32, INT64_C(1) << 32}), "is too large");
    BAD_PTR(lz_reshape(a, 3, (const int64_t[]){INT64_C(1) << 62, 4, -1}), "is too large");
    BAD_PTR(lz_reshape(a, 9, s9), "ndim 9 out of range");
    BAD_PTR(lz_reshape(a, 2, NULL), "shape is NULL");
    BAD_PTR(lz_expand(one, 2, huge2), "lz_expand: shape [1099511627776, 1099511627776] is too large");
    BAD_PTR(lz_expand(a, 9, s9), "cannot expand [2, 3] to 9 dimensions");
    BAD_PTR(lz_expand(a, 2, NULL), "lz_expand: shape is NULL");
    BAD_PTR(lz_permute(a, NULL), "perm is NULL");
    BAD_PTR(lz_slice(NULL, 0, 0, 1), "lz_slice: operand 0 is NULL");
    BAD_PTR(lz_cat(NULL, 2, 0), "tensor array is NULL");
    BAD_PTR(lz_cat((lz_tensor *const[]){a}, -1, 0), "got -1");
    BAD_PTR(lz_cat((lz_tensor *const[]){a, i3}, 2, 0), "dtype i64");
    BAD_PTR(lz_sum_axes(a, 9, (const int[]){0, 1, 0, 1, 0, 1, 0, 1, 0}, 0), "lz_sum_axes");
    BAD_PTR(lz_sum_axes(a, -1, NULL, 0), "lz_sum_axes");
    BAD_PTR(lz_flatten(a, 5), "lz_flatten");
    BAD_PTR(lz_transpose(NULL, 0, 1), "lz_transpose: operand 0 is NULL");

    /* ---- linear algebra and losses ---- */
    BAD_PTR(lz_matmul(NULL, w), "lz_matmul: operand 0 is NULL");
    BAD_PTR(lz_matmul(a, one), "0-d operands are not matrices");
    BAD_PTR(lz_matmul(i3, i3), "lz_matmul");
    {
        /* expanded views of one element make a product of 2^62 elements */
        lz_tensor *t11 = lz_reshape(t1111, 2, (const int64_t[]){1, 1});
        lz_tensor *col = lz_expand(t11, 2, (const int64_t[]){INT64_C(1) << 31, 1});
        lz_tensor *row = lz_expand(t11, 2, (const int64_t[]){1, INT64_C(1) << 31});
        CHECK(col && row);
        BAD_PTR(lz_matmul(col, row), "lz_matmul: shape [2147483648, 2147483648] is too large");
        lz_free(col);
        lz_free(row);
        lz_free(t11);
    }
    BAD_PTR(lz_softmax(NULL, 0), "lz_softmax: operand 0 is NULL");
    BAD_PTR(lz_softmax(i3, 0), "i64");
    BAD_PTR(lz_log_softmax(a, 7), "axis 7 out of range");
    BAD_PTR(lz_cross_entropy(NULL, i3), "lz_cross_entropy: operand 0 is NULL");
    BAD_PTR(lz_cross_entropy(a, NULL), "lz_cross_entropy: operand 1 is NULL");
    BAD_PTR(lz_cross_entropy(lz_cast(a, LZ_I64), lz_slice(i3, 0, 0, 2)), "lz_cross_entropy");
    BAD_PTR(lz_cross_entropy(empty, lz_zeros(LZ_I64, 1, (const int64_t[]){0})), "are empty");

    /* ---- neural-network ops ---- */
    lz_conv2d_opts co = {{1, 1}, {0, 0}, {1, 1}, 1};
    BAD_PTR(lz_conv2d(NULL, k4, NULL, co), "lz_conv2d: operand 0 is NULL");
    BAD_PTR(lz_conv2d(x4, NULL, NULL, co), "lz_conv2d: operand 1 is NULL");
    BAD_PTR(lz_conv2d(a, k4, NULL, co), "both must be 4-d");
    BAD_PTR(lz_conv2d(x4, lz_cast(k4, LZ_I32), NULL, co), "dtype i32 not supported");
    BAD_PTR(lz_conv2d(x4, k4, a, co), "bias [2, 3] does not match");
    BAD_PTR(lz_conv2d(x4, k4, NULL, ((lz_conv2d_opts){{1, 1}, {0, 0}, {1, 1}, 3})), "3 groups must divide");
    BAD_PTR(lz_conv2d(x4, k4, NULL, ((lz_conv2d_opts){{-1, 1}, {0, 0}, {1, 1}, 1})), "negative stride");
    BAD_PTR(lz_conv2d(x4, lz_zeros(LZ_F32, 4, (const int64_t[]){3, 2, 9, 9}), NULL, co),
            "larger than the padded input");
    BAD_PTR(lz_conv2d(t1111, t1111, NULL, ((lz_conv2d_opts){{1, 1}, {1 << 30, 1 << 30}, {1, 1}, 1})),
            "lz_conv2d: shape [1, 1, 2147483649, 2147483649] is too large");
    lz_pool2d_opts po = {{2, 2}, {0, 0}, {0, 0}, 0, 1};
    BAD_PTR(lz_max_pool2d(NULL, po), "lz_max_pool2d: operand 0 is NULL");
    BAD_PTR(lz_max_pool2d(a, po), "must be 4-d [N, C, H, W]");
    BAD_PTR(lz_avg_pool2d(lz_cast(x4, LZ_I64), po), "dtype i64 not supported");
    BAD_PTR(lz_max_pool2d(x4, ((lz_pool2d_opts){{0, 2}, {0, 0}, {0, 0}, 0, 1})), "must be positive");
    BAD_PTR(lz_avg_pool2d(x4, ((lz_pool2d_opts){{2, 2}, {0, 0}, {2, 2}, 0, 1})), "at most half the kernel");
    BAD_PTR(lz_max_pool2d(x4, ((lz_pool2d_opts){{9, 9}, {0, 0}, {0, 0}, 0, 1})), "larger than the padded input");
    BAD_PTR(lz_adaptive_avg_pool2d(x4, 0, 2), "must be positive");
    BAD_PTR(lz_adaptive_avg_pool2d(x4, 1 << 30, 1 << 30), "lz_adaptive_avg_pool2d: shape");
    BAD_PTR(lz_batch_norm(NULL, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f), "lz_batch_norm: operand 0 is NULL");
    BAD_PTR(lz_batch_norm(i3, NULL, NULL, NULL, NULL, 1, 0.1f, 1e-5f), "lz_batch_norm");
    BAD_PTR(lz_batch_norm(x4, a, NULL, NULL, NULL, 1, 0.1f, 1e-5f), "has 2 channels");
    BAD_PTR(lz_batch_norm(x4, NULL, NULL, NULL, NULL, 0, 0.1f, 1e-5f), "eval mode needs running_mean");
    BAD_PTR(lz_batch_norm(x4, NULL, NULL, one, NULL, 1, 0.1f, 1e-5f), "running_mean is [] (expected [2])");
    BAD_PTR(lz_layer_norm(NULL, 1, NULL, NULL, 1e-5f), "lz_layer_norm: operand 0 is NULL");
    BAD_PTR(lz_layer_norm(a, 3, NULL, NULL, 1e-5f), "n_axes 3 out of range [1, 2]");
    BAD_PTR(lz_layer_norm(a, 1, w, NULL, 1e-5f), "lz_layer_norm");
    BAD_PTR(lz_layer_norm(a, 1, NULL, NULL, -1.0f), "eps -1 must be >= 0");
    BAD_PTR(lz_embedding(NULL, i3), "lz_embedding: operand 0 is NULL");
    BAD_PTR(lz_embedding(w, a), "indices dtype f32 not supported");
    BAD_PTR(lz_embedding(lz_reshape(w, 1, (const int64_t[]){6}), i3), "weight must be [V, D]");
    BAD_PTR(lz_attention(NULL, a, a, NULL, 0), "lz_attention: operand 0 is NULL");
    BAD_PTR(lz_attention(a, w, a, NULL, 0), "different head dims");
    BAD_PTR(lz_attention(a, a, a, w, 0), "mask [3, 2] does not broadcast");
    BAD_PTR(lz_attention(a, a, a, NULL, NAN), "is not finite");
    BAD_PTR(lz_dropout(NULL, 0.5f, 1), "lz_dropout: operand 0 is NULL");
    BAD_PTR(lz_dropout(a, 1.5f, 1), "not a probability");
    BAD_PTR(lz_dropout(a, NAN, 1), "not a probability");
    BAD_PTR(lz_hardtanh(a, 1.0f, -1.0f), "must not exceed max_val");
    BAD_PTR(lz_relu6(i3), "dtype i64 not supported");

    /* ---- autograd ---- */
    BAD_INT(lz_backward(NULL), "lz_backward: loss is NULL");
    BAD_INT(lz_backward(a), "loss [2, 3] has 6 elements, not 1");
    BAD_INT(lz_backward(one), "does not depend on any tensor that requires grad");
    BAD_VOID(lz_requires_grad(i3, 1), "only f32 tensors can require grad");

    /* ---- optimizers ---- */
    lz_tensor *p = lz_zeros(LZ_F32, 1, s3);
    lz_requires_grad(p, 1);
    lz_sgd_opts so = {.lr = 0.1f};
    lz_adamw_opts ao = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .decoupled = 1};
    BAD_PTR(lz_sgd_new(NULL, 2, so), "2 parameters given with a NULL array");
    BAD_PTR(lz_sgd_new(&p, -1, so), "negative parameter count -1");
    BAD_PTR(lz_sgd_new((lz_tensor *const[]){p, NULL}, 2, so), "parameter 1 is NULL");
    BAD_PTR(lz_sgd_new(&i3, 1, so), "parameter 0 is i64, expected f32");
    BAD_PTR(lz_sgd_new((lz_tensor *const[]){p, p}, 2, so), "parameter 1 is parameter 0 again");
    BAD_PTR(lz_sgd_new(&p, 1, ((lz_sgd_opts){.lr = NAN})), "invalid learning rate");
    BAD_PTR(lz_sgd_new(&p, 1, ((lz_sgd_opts){.lr = 0.1f, .momentum = -1})), "invalid momentum");
    BAD_PTR(lz_sgd_new(&p, 1, ((lz_sgd_opts){.lr = 0.1f, .nesterov = 1})), "nesterov");
    BAD_INT(lz_sgd_step(NULL), "lz_sgd_step: optimizer is NULL");
    BAD_VOID(lz_sgd_set_lr(NULL, 0.1f), "lz_sgd_set_lr: optimizer is NULL");
    BAD_VOID(lz_sgd_zero_grad(NULL), "lz_sgd_zero_grad: optimizer is NULL");
    BAD_INT(lz_sgd_state(NULL, NULL, "x"), "NULL argument");
    lz_sgd *sgd = lz_sgd_new(&p, 1, so);
    CHECK(sgd != NULL);
    BAD_VOID(lz_sgd_set_lr(sgd, -1.0f), "invalid learning rate -1 (the rate stays 0.1)");
    BAD_VOID(lz_sgd_set_lr(sgd, INFINITY), "invalid learning rate inf");
    lz_sgd_free(sgd);
    BAD_PTR(lz_adamw_new(NULL, 1, ao), "1 parameters given with a NULL array");
    BAD_PTR(lz_adamw_new(&p, -2, ao), "negative parameter count -2");
    BAD_PTR(lz_adamw_new(&i3, 1, ao), "parameter 0 is i64, expected f32");
    BAD_PTR(lz_adamw_new((lz_tensor *const[]){p, p}, 2, ao), "parameter 1 is parameter 0 again");
    BAD_PTR(lz_adamw_new(&p, 1, ((lz_adamw_opts){.lr = 0.1f, .beta1 = 1.5f, .beta2 = 0.9f})), "beta");
    BAD_PTR(lz_adamw_new(&p, 1, ((lz_adamw_opts){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.9f, .eps = -1})), "eps");
    BAD_INT(lz_adamw_step(NULL), "lz_adamw_step: optimizer is NULL");
    BAD_VOID(lz_adamw_set_lr(NULL, 0.1f), "lz_adamw_set_lr: optimizer is NULL");
    BAD_VOID(lz_adamw_zero_grad(NULL), "lz_adamw_zero_grad: optimizer is NULL");
    BAD_INT(lz_adamw_state(NULL, NULL, "x"), "NULL argument");
    BAD_NAN(lz_lr_step(0.1f, 3, 0, 0.5f), "step_size 0 must be positive");
    BAD_NAN(lz_lr_cosine(0.1f, -1, 10, 0.0f), "step -1 is negative");

    /* ---- parameter sets ---- */
    lz_params *ps = lz_params_new();
    BAD_PTR(lz_params_add(NULL, "w", lz_zeros(LZ_F32, 1, s3), 1), "parameter set is NULL");
    BAD_PTR(lz_params_add(ps, NULL, lz_zeros(LZ_F32, 1, s3), 1), "name is NULL or empty");
    BAD_PTR(lz_params_add(ps, "w", NULL, 1), "tensor for 'w' is NULL");
    BAD_PTR(lz_params_add(ps, "idx", lz_zeros(LZ_I64, 1, s3), 1), "only f32 tensors can be trainable");
    CHECK(lz_params_add(ps, "w", lz_zeros(LZ_F32, 1, s3), 1) != NULL);
    BAD_PTR(lz_params_add(ps, "w", lz_zeros(LZ_F32, 1, s3), 1), "duplicate name 'w'");
    BAD_PTR(lz_params_name(ps, 1), "index 1 out of range [0, 1)");
    BAD_PTR(lz_params_at(ps, -1), "index -1 out of range");
    BAD_PTR(lz_params_find(NULL, "w"), "parameter set is NULL");
    BAD_PTR(lz_params_find(ps, NULL), "name is NULL");
    BAD_INT(lz_rng_state(NULL, "rng"), "NULL argument");

    /* ---- safetensors ---- */
    char path[64];
    snprintf(path, sizeof path, "/tmp/lz_bad_input_%d.safetensors", (int)getpid());
    BAD_INT(lz_safetensors_save(NULL, ps), "path is NULL");
    BAD_INT(lz_safetensors_save(path, NULL), "parameter set is NULL");
    BAD_INT(lz_safetensors_save("/nonexistent-dir/x.safetensors", ps), "/nonexistent-dir/x.safetensors");
    BAD_INT(lz_safetensors_save_meta(path, ps, -1, NULL, NULL), "bad metadata list (n_meta = -1)");
    BAD_INT(lz_safetensors_save_meta(path, ps, 1, (const char *const[]){"k"}, (const char *const[]){NULL}),
            "metadata entry 0 has a NULL key or value");
    BAD_INT(lz_safetensors_load(NULL, ps, 1), "lz_safetensors_load");
    BAD_INT(lz_safetensors_load(path, NULL, 1), "parameter set is NULL");
    BAD_INT(lz_safetensors_load("/nonexistent-dir/x.safetensors", ps, 1), "/nonexistent-dir/x.safetensors");
    BAD_PTR(lz_safetensors_read(NULL), "lz_safetensors_read");
    BAD_PTR(lz_safetensors_read_meta(path, NULL), "key is NULL");
    CHECK(lz_safetensors_save(path, ps) == 0);
    {
        /* the file holds w [3]; a set whose w is [2, 3] does not match */
        lz_params *other = lz_params_new();
        lz_params_add(other, "w", lz_zeros(LZ_F32, 2, s23), 1);
        BAD_INT(lz_safetensors_load(path, other, 1), "w");
        lz_params_free(other);
    }
    BAD_PTR(lz_safetensors_read_meta(path, "epoch"), "no __metadata__ entry 'epoch'");
    remove(path);

    /* ---- data sets and loaders ---- */
    char img[64], lab[64];
    snprintf(img, sizeof img, "/tmp/lz_bad_input_%d.img", (int)getpid());
    snprintf(lab, sizeof lab, "/tmp/lz_bad_input_%d.lab", (int)getpid());
    write_idx(img, 3, (const uint32_t[]){5, 2, 2}, 0);
    write_idx(lab, 1, (const uint32_t[]){5}, 3);
    BAD_PTR(lz_dataset_idx(NULL, lab), "a path is NULL");
    BAD_PTR(lz_dataset_idx("/nonexistent-file", lab), "/nonexistent-file: cannot open the file");
    BAD_PTR(lz_dataset_idx(lab, img), "bad magic number");
    BAD_PTR(lz_dataset_fashion_mnist(NULL, 1), "directory is NULL");
    BAD_INT(lz_dataset_size(NULL), "lz_dataset_size: data set is NULL");
    BAD_INT(lz_dataset_truncate(NULL, 1), "data set is NULL");
    lz_dataset *ds = lz_dataset_idx(img, lab);
    CHECK(ds != NULL);
    BAD_INT(lz_dataset_truncate(ds, 6), "6 is outside [0, 5]");
    BAD_INT(lz_dataset_truncate(ds, -1), "-1 is outside");
    BAD_VOID(lz_dataset_image_shape(ds, NULL), "lz_dataset_image_shape: shape is NULL");
    {
        int64_t shape[3] = {7, 7, 7};
        BAD_VOID(lz_dataset_image_shape(NULL, shape), "lz_dataset_image_shape: data set is NULL");
        CHECK(shape[0] == 1 && shape[1] == 0 && shape[2] == 0);
    }
    BAD_PTR(lz_loader_new(NULL, ((lz_loader_opts){.batch = 2})), "data set is NULL");
    BAD_PTR(lz_loader_new(ds, ((lz_loader_opts){.batch = 0})), "batch size 0 must be positive");
    BAD_PTR(lz_loader_new(ds, ((lz_loader_opts){.batch = -2})), "batch size -2 must be positive");
    BAD_PTR(lz_loader_new(ds, ((lz_loader_opts){.batch = 2, .std = NAN})), "std");
    BAD_INT(lz_loader_batches(NULL), "lz_loader_batches: loader is NULL");
    BAD_INT(lz_loader_start_epoch(NULL, 0), "loader is NULL");
    BAD_INT(lz_loader_skip(NULL, 1), "loader is NULL");
    lz_tensor *bx = NULL, *by = NULL;
    BAD_INT(lz_loader_next(NULL, &bx, &by), "NULL argument");
    {
        /* a batch far larger than the data set: one batch of every example */
        lz_loader *big = lz_loader_new(ds, ((lz_loader_opts){.batch = INT64_MAX}));
        CHECK(big != NULL);
        CHECK_EQ_I(lz_loader_batches(big), 1);
        BAD_INT(lz_loader_skip(big, INT64_MAX), "cannot skip");
        BAD_INT(lz_loader_skip(big, -1), "cannot skip -1");
        BAD_INT(lz_loader_next(big, NULL, &by), "NULL argument");
        CHECK_EQ_I(lz_loader_next(big, &bx, &by), 1);
        CHECK(bx && lz_dim(bx, 0) == 5 && by && lz_numel(by) == 5);
        CHECK_EQ_I(lz_loader_next(big, &bx, &by), 0);
        lz_loader_free(big);
    }
    lz_dataset_free(ds);
    remove(img);
    remove(lab);

    /* none of the failures ran anything; leftovers of the good calls run now */
    CHECK_EQ_I(lz_metrics_get().executions, 0);
    lz_mark_step();
    CHECK(lz_wait() == 0);
    lz_metrics_reset();

    /* ---- capture: missing inputs, wrong dtype or shape, failing steps ---- */
    BAD_PTR(lz_capture(NULL, NULL, 1, 1), "step function is NULL");
    BAD_PTR(lz_capture(step_exp, NULL, -1, 1), "negative input or output count (-1, 1)");
    lz_fn *mm = lz_capture(step_matmul, w, 1, 1);
    lz_fn *ex = lz_capture(step_exp, NULL, 2, 1);
    lz_tensor *out[1] = {NULL};
    BAD_INT(lz_call(NULL, &a, out), "captured function is NULL");
    BAD_INT(lz_call(ex, NULL, out), "input array is NULL");
    BAD_INT(lz_call(ex, &a, NULL), "output array is NULL");
    /* one input where two are captured: the caller's array ends in NULL */
    BAD_INT(lz_call(ex, (lz_tensor *const[]){a, NULL}, out), "lz_call: input 1 is NULL");
    BAD_INT(lz_call(ex, (lz_tensor *const[]){a, i3}, out), "lz_add");
    BAD_INT(lz_call(ex, (lz_tensor *const[]){i3, i3}, out), "lz_exp: dtype i64 not supported");
    CHECK(lz_call(mm, &a, out) == 0 && out[0]);      /* [2, 3] @ [3, 2] */
    lz_free(out[0]);
    BAD_INT(lz_call(mm, &w, out), "lz_matmul: shapes [3, 2] and [3, 2]");   /* a new shape retraces */
    CHECK(out[0] == NULL);
    lz_fn *silent = lz_capture(step_fails_silently, NULL, 0, 1);
    BAD_INT(lz_call(silent, NULL, out), "the step function failed");
    lz_fn *hole = lz_capture(step_leaves_out_null, NULL, 0, 1);
    BAD_INT(lz_call(hole, NULL, out), "lz_call");
    lz_fn_free(mm);
    lz_fn_free(ex);
    lz_fn_free(silent);
    lz_fn_free(hole);

    /* only the one good call ran */
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.executions, 1);

    /* zero-sized tensors are valid: they compute, read and write nothing */
    lz_clear_error();
    lz_tensor *z = lz_add(lz_exp(empty), empty);
    CHECK(z && lz_numel(z) == 0);
    CHECK(lz_to_host(z, NULL, 0) == 0);
    CHECK(lz_copy_from_host(empty, NULL, 0) == 0);
    CHECK(lz_from_host(NULL, LZ_F32, 2, (const int64_t[]){4, 0}) != NULL);
    lz_tensor *zs = lz_sum(empty);
    CHECK(zs && lz_item(zs) == 0.0f);

    /* and the program goes on */
    lz_clear_error();
    lz_tensor *y = lz_matmul(a, w);
    CHECK(y && lz_to_host(y, buf, 4 * sizeof(float)) == 0);
    CHECK_NEAR(buf[0], 22, 0);                         /* [1 2 3] . [1 3 5] */
    CHECK(lz_last_error() == NULL);
    lz_params_free(ps);
    return lz_test_done();
}
