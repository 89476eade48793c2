/* safetensors: round trips, a file written by PyTorch's layout
 * (tests/reference/gen_safetensors.py), BF16/F16 widening, metadata, and a
 * clear error naming the file and the tensor for every kind of bad file. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "testlib.h"

static char dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

/* Writes a safetensors file by hand: header length, header text, data. */
static void write_raw(const char *path, const char *header, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    uint64_t len = strlen(header);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(len >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static int has(const char *s) { return lz_last_error() && strstr(lz_last_error(), s) != NULL; }

static lz_tensor *f32(int ndim, const int64_t *shape, const float *v)
{
    return lz_from_host(v, LZ_F32, ndim, shape);
}

static int equal_tensor(lz_tensor *a, lz_tensor *b)
{
    if (!a || !b || lz_ndim(a) != lz_ndim(b) || lz_tensor_dtype(a) != lz_tensor_dtype(b)) return 0;
    for (int d = 0; d < lz_ndim(a); d++)
        if (lz_dim(a, d) != lz_dim(b, d)) return 0;
    size_t n = (size_t)lz_numel(a) * lz_dtype_size(lz_tensor_dtype(a));
    char *x = malloc(n + 1), *y = malloc(n + 1);
    int ok = lz_to_host(a, x, n) == 0 && lz_to_host(b, y, n) == 0 && memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return ok;
}

static const char *const NAMES[] = { "w", "counts", "ids", "scalar", "empty", "odd \"name\"\\\n" };

/* A set with every dtype lazyc saves, a 0-d and an empty tensor, a name
   that needs JSON escapes, and one pending tensor. */
static lz_params *sample(float shift)
{
    lz_params *p = lz_params_new();
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s22[2] = {2, 2}, s03[2] = {0, 3};
    float w[6] = {1.5f + shift, -2, 3.25f, 1e-30f, -0.0f, 65504};
    int64_t c[3] = {INT64_MAX, INT64_MIN, 42};
    int32_t ids[4] = {7, -7, INT32_MAX, INT32_MIN};
    float sc = 0.1f + shift;
    lz_params_add(p, NAMES[0], f32(2, s23, w), 1);
    lz_params_add(p, NAMES[1], lz_from_host(c, LZ_I64, 1, s3), 0);
    lz_params_add(p, NAMES[2], lz_from_host(ids, LZ_I32, 2, s22), 0);
    lz_params_add(p, NAMES[3], lz_scalar(sc), 1);
    lz_params_add(p, NAMES[4], lz_zeros(LZ_F32, 2, s03), 0);
    lz_tensor *x = f32(2, s23, w);
    lz_params_add(p, NAMES[5], lz_add(x, x), 0);
    lz_free(x);
    return p;
}

static lz_params *zeros_like(const lz_params *p)
{
    lz_params *q = lz_params_new();
    for (int i = 0; i < lz_params_count(p); i++) {
        lz_tensor *t = lz_params_at(p, i);
        int64_t shape[LZ_MAX_DIMS];
        for (int d = 0; d < lz_ndim(t); d++) shape[d] = lz_dim(t, d);
        lz_params_add(q, lz_params_name(p, i), lz_zeros(lz_tensor_dtype(t), lz_ndim(t), shape),
                      lz_params_trainable(p, i));
    }
    return q;
}

static void test_round_trip(void)
{
    lz_params *p = sample(0);
    const char *path = tmp_path("rt.safetensors");
    lz_metrics_reset();
    CHECK(lz_safetensors_save(path, p) == 0);
    /* the pending tensor is computed by one graph, not one per tensor */
    CHECK_EQ_I(lz_metrics_get().graphs, 1);

    lz_params *r = lz_safetensors_read(path);
    CHECK(r != NULL);
    if (r) {
        CHECK_EQ_I(lz_params_count(r), lz_params_count(p));
        for (int i = 0; i < lz_params_count(p) && i < lz_params_count(r); i++) {
            CHECK(strcmp(lz_params_name(r, i), lz_params_name(p, i)) == 0);
            CHECK(equal_tensor(lz_params_at(r, i), lz_params_at(p, i)));
            CHECK_EQ_I(lz_params_trainable(r, i), 0);
        }
        lz_params_free(r);
    }

    lz_params *q = zeros_like(p);
    CHECK(lz_safetensors_load(path, q, 1) == 0);
    for (int i = 0; i < lz_params_count(p); i++)
        CHECK(equal_tensor(lz_params_at(q, i), lz_params_at(p, i)));
    /* trainable tensors keep requires_grad across a load */
    lz_tensor *w = lz_params_find(q, "w");
    lz_tensor *loss = lz_sum(lz_mul(w, w));
    CHECK(lz_backward(loss) == 0);
    CHECK(lz_grad(w) != NULL);
    lz_free(loss);

    /* saving over an existing file replaces it */
    lz_params *p2 = sample(1);
    CHECK(lz_safetensors_save(path, p2) == 0);
    CHECK(lz_safetensors_load(path, q, 1) == 0);
    CHECK_NEAR(lz_item(lz_params_find(q, "scalar")), 1.1f, 0);
    lz_params_free(p2);

    /* an empty set is a valid file */
    lz_params *none = lz_params_new();
    CHECK(lz_safetensors_save(tmp_path("none.safetensors"), none) == 0);
    lz_params *rn = lz_safetensors_read(tmp_path("none.safetensors"));
    CHECK(rn && lz_params_count(rn) == 0);
    lz_params_free(rn);
    lz_params_free(none);
    lz_params_free(q);
    lz_params_free(p);
}

/* The header is valid JSON and the data starts 8-byte aligned, like the
   reference writer's output. */
static void test_layout(void)
{
    lz_params *p = sample(0);
    const char *path = tmp_path("layout.safetensors");
    const char *k[2] = {"epoch", "step"}, *v[2] = {"2", "1234"};
    CHECK(lz_safetensors_save_meta(path, p, 2, k, v) == 0);
    FILE *f = fopen(path, "rb");
    unsigned char lb[8];
    CHECK(fread(lb, 1, 8, f) == 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
    CHECK_EQ_I((8 + hl) % 8, 0);
    char *h = calloc(1, hl + 1);
    CHECK(fread(h, 1, hl, f) == hl);
    fclose(f);
    CHECK(h[0] == '{');
    CHECK(strstr(h, "\"__metadata__\":{\"epoch\":\"2\",\"step\":\"1234\"}") != NULL);
    CHECK(strstr(h, "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}") != NULL);
    CHECK(strstr(h, "\"scalar\":{\"dtype\":\"F32\",\"shape\":[]") != NULL);
    CHECK(strstr(h, "\"counts\":{\"dtype\":\"I64\"") != NULL);
    CHECK(strstr(h, "\"ids\":{\"dtype\":\"I32\"") != NULL);
    CHECK(strstr(h, "\"odd \\\"name\\\"\\\\\\u000a\"") != NULL);
    free(h);
    lz_params_free(p);
}

static void test_metadata(void)
{
    lz_params *p = sample(0);
    const char *path = tmp_path("meta.safetensors");
    const char *k[3] = {"epoch", "step", "note"};
    const char *v[3] = {"3", "1875", "quote \" backslash \\ newline \n tab \t \xc3\xa9"};
    CHECK(lz_safetensors_save_meta(path, p, 3, k, v) == 0);
    for (int i = 0; i < 3; i++) {
        char *s = lz_safetensors_read_meta(path, k[i]);
        CHECK(s && strcmp(s, v[i]) == 0);
        free(s);
    }
    lz_clear_error();
    CHECK(lz_safetensors_read_meta(path, "lr") == NULL);
    CHECK(has("'lr'") && has(path));
    /* metadata does not disturb loading */
    lz_params *q = zeros_like(p);
    CHECK(lz_safetensors_load(path, q, 1) == 0);
    CHECK(equal_tensor(lz_params_at(q, 0), lz_params_at(p, 0)));
    lz_params_free(q);

    CHECK(lz_safetensors_save(path, p) == 0);
    lz_clear_error();
    CHECK(lz_safetensors_read_meta(path, "epoch") == NULL);
    CHECK(has("'epoch'"));
    lz_clear_error();
    CHECK(lz_safetensors_save_meta(path, p, 1, k, NULL) == -1);
    CHECK(has("metadata"));
    lz_params_free(p);
}

/* A file in PyTorch's layout (reference writer): every tensor equals what
   PyTorch itself widened; then it round-trips through lazyc. */
static void test_torch_file(void)
{
    const char *path = "fixtures/safetensors/torch.safetensors";
    lz_test_fx fx;
    char err[256];
    if (lz_test_fx_load("fixtures/safetensors/torch_expected.lzf", &fx, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        return;
    }
    lz_params *r = lz_safetensors_read(path);
    CHECK(r != NULL);
    if (!r) { lz_test_fx_free(&fx); return; }
    CHECK_EQ_I(lz_params_count(r), fx.n_tensors);
    for (int i = 0; i < fx.n_tensors; i++) {
        lz_test_fx_tensor *e = &fx.t[i];
        /* the fixture format has no dots in names */
        lz_tensor *t = NULL;
        for (int j = 0; j < lz_params_count(r); j++) {
            char n[64];
            snprintf(n, sizeof n, "%s", lz_params_name(r, j));
            for (char *c = n; *c; c++) if (*c == '.') *c = '_';
            if (strcmp(n, e->name) == 0) t = lz_params_at(r, j);
        }
        CHECK(t != NULL);
        if (!t) continue;
        lz_tensor *want = lz_from_host(e->data, e->dtype, e->ndim, e->shape);
        if (!equal_tensor(t, want)) fprintf(stderr, "tensor %s differs\n", e->name);
        CHECK(equal_tensor(t, want));
        lz_free(want);
    }
    char *note = lz_safetensors_read_meta(path, "note");
    CHECK(note && strcmp(note, "quote \" backslash \\ tab \t end") == 0);
    free(note);

    /* lazyc writes it back (bf16/f16 now f32) and reads the same values */
    const char *out = tmp_path("torch_again.safetensors");
    CHECK(lz_safetensors_save(out, r) == 0);
    lz_params *q = zeros_like(r);
    CHECK(lz_safetensors_load(out, q, 1) == 0);
    CHECK(lz_safetensors_load(path, q, 1) == 0);
    for (int i = 0; i < lz_params_count(r); i++)
        CHECK(equal_tensor(lz_params_at(q, i), lz_params_at(r, i)));
    lz_params_free(q);
    lz_params_free(r);
    lz_test_fx_free(&fx);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* BF16 is the top half of an f32: widening must give back exactly the f32
   whose low 16 bits are zero, including signed zero, subnormals, inf, NaN. */
static void test_bf16_f16(void)
{
    uint16_t bf[8] = {0x3F80, 0xC020, 0x3E20, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0};
    uint16_t hf[6] = {0x3C00, 0xC100, 0x0001, 0x7BFF, 0x8000, 0x7C00};
    unsigned char data[28];
    memcpy(data, bf, 16);
    memcpy(data + 16, hf, 12);
    const char *path = tmp_path("bf16.safetensors");
    write_raw(path, "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[16,28]}}",
              data, sizeof data);
    lz_params *r = lz_safetensors_read(path);
    CHECK(r != NULL);
    if (!r) return;
    lz_tensor *b = lz_params_find(r, "b"), *h = lz_params_find(r, "h");
    CHECK(lz_tensor_dtype(b) == LZ_F32 && lz_ndim(b) == 2 && lz_dim(b, 1) == 4);
    float vb[8], vh[6];
    CHECK(lz_to_host(b, vb, sizeof vb) == 0);
    for (int i = 0; i < 8; i++) CHECK_EQ_I(bits(vb[i]), (uint32_t)bf[i] << 16);
    CHECK(vb[0] == 1.0f && vb[1] == -2.5f && vb[2] == 0.15625f && vb[4] == ldexpf(1, -133));
    CHECK(lz_to_host(h, vh, sizeof vh) == 0);
    CHECK(vh[0] == 1.0f && vh[1] == -2.5f && vh[2] == ldexpf(1, -24) && vh[3] == 65504.0f);
    CHECK(bits(vh[4]) == 0x80000000u && isinf(vh[5]));
    lz_params_free(r);

    /* BF16 on disk loads into an f32 parameter */
    lz_params *p = lz_params_new();
    int64_t s24[2] = {2, 4}, s6[1] = {6};
    lz_params_add(p, "b", lz_zeros(LZ_F32, 2, s24), 1);
    lz_params_add(p, "h", lz_zeros(LZ_F32, 1, s6), 1);
    CHECK(lz_safetensors_load(path, p, 1) == 0);
    CHECK(lz_to_host(lz_params_find(p, "b"), vb, sizeof vb) == 0);
    CHECK(vb[1] == -2.5f);
    lz_params_free(p);
}

/* Each bad file gives -1 / NULL and a message naming the file and, where
   there is one, the tensor. */
static void expect_bad(const char *path, const char *want1, const char *want2, int line)
{
    lz_params *p = lz_params_new();
    int64_t s2[1] = {2};
    lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 1);
    lz_clear_error();
    int rc = lz_safetensors_load(path, p, 1);
    int ok = rc == -1 && has(path) && has(want1) && (!want2 || has(want2));
    lz_clear_error();
    lz_params *r = lz_safetensors_read(path);
    ok = ok && r == NULL && has(path) && has(want1) && (!want2 || has(want2));
    if (!ok)
        fprintf(stderr, "line %d: wanted an error with '%s'%s%s, got rc %d: %s\n", line, want1,
                want2 ? " and " : "", want2 ? want2 : "", rc,
                lz_last_error() ? lz_last_error() : "none");
    CHECK(ok);
    lz_params_free(r);
    lz_params_free(p);
}
#define EXPECT_BAD(path, a, b) expect_bad(path, a, b, __LINE__)

static void test_bad_files(void)
{
    float d[4] = {1, 2, 3, 4};
    const char *p;

    EXPECT_BAD(tmp_path("does_not_exist.safetensors"), "cannot open", NULL);

    p = tmp_path("short.safetensors");
    FILE *f = fopen(p, "wb");
    fwrite("\x10\0\0", 1, 3, f);
    fclose(f);
    EXPECT_BAD(p, "too short", NULL);

    p = tmp_path("hlen.safetensors");
    f = fopen(p, "wb");
    fwrite("\xff\x00\x00\x00\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    EXPECT_BAD(p, "header length 255 is larger", NULL);

    p = tmp_path("huge.safetensors");
    f = fopen(p, "wb");
    fwrite("\xff\xff\xff\xff\xff\xff\xff\xff{}", 1, 10, f);
    fclose(f);
    EXPECT_BAD(p, "larger than the rest of the file", NULL);

    p = tmp_path("notjson.safetensors");
    write_raw(p, "{\"a\": {\"dtype\": \"F32\", oops}}", d, 8);
    EXPECT_BAD(p, "not JSON", "byte");

    p = tmp_path("array.safetensors");
    write_raw(p, "[1, 2]", NULL, 0);
    EXPECT_BAD(p, "not a JSON object", NULL);

    p = tmp_path("dupkey.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", d, 16);
    EXPECT_BAD(p, "duplicate key \"a\"", NULL);

    p = tmp_path("truncated.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", d, 12);
    EXPECT_BAD(p, "tensor 'b'", "truncated");

    p = tmp_path("overlap.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", d, 16);
    EXPECT_BAD(p, "'a'", "'b' [4, 12] overlap");

    /* bytes that belong to no tensor: the reference implementation refuses
       the file (MetadataIncompleteBuffer, InvalidOffset) */
    p = tmp_path("trailing.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 12);
    EXPECT_BAD(p, "4 bytes after the last tensor's data", "(at 8 of 12 data bytes)");
    p = tmp_path("trailing_empty.safetensors");
    write_raw(p, "{}", d, 4);
    EXPECT_BAD(p, "4 bytes after the last tensor's data", "belong to no tensor");
    p = tmp_path("gap.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", d, 16);
    EXPECT_BAD(p, "data bytes [4, 8] after tensor 'a'", "belong to no tensor");
    p = tmp_path("lead.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", d, 16);
    EXPECT_BAD(p, "data bytes [0, 8] before the first tensor", "belong to no tensor");

    p = tmp_path("badsize.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d, 8);
    EXPECT_BAD(p, "tensor 'a' (F32 [3]) needs 12 bytes", NULL);

    p = tmp_path("backwards.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d, 8);
    EXPECT_BAD(p, "tensor 'a'", "end before begin");

    p = tmp_path("nooffsets.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d, 8);
    EXPECT_BAD(p, "tensor 'a'", "data_offsets");

    p = tmp_path("negshape.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", d, 8);
    EXPECT_BAD(p, "tensor 'a'", "shape");

    p = tmp_path("unknown.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8);
    EXPECT_BAD(p, "tensor 'a'", "unknown dtype 'F33'");

    p = tmp_path("f64.safetensors");
    write_raw(p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d, 16);
    EXPECT_BAD(p, "tensor 'a' has dtype F64", "does not read");

    p = tmp_path("badmeta.safetensors");
    write_raw(p, "{\"__metadata__\":{\"epoch\":3},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 8);
    EXPECT_BAD(p, "__metadata__", "'epoch'");
}

/* Name matching: missing, extra, mis-shaped and mis-typed tensors; strict
   and not; a failed load changes nothing. */
static void test_matching(void)
{
    float d[6] = {1, 2, 3, 4, 5, 6};
    const char *path = tmp_path("match.safetensors");
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]}}", d, 24);
    int64_t s2[1] = {2}, s22[2] = {2, 2}, s4[1] = {4};
    float out[4];

    lz_params *p = lz_params_new();        /* a, b, c: c is missing */
    lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 1);
    lz_params_add(p, "b", lz_zeros(LZ_F32, 2, s22), 1);
    lz_params_add(p, "c", lz_zeros(LZ_F32, 1, s2), 1);
    lz_clear_error();
    CHECK(lz_safetensors_load(path, p, 1) == -1);
    CHECK(has("tensor 'c' is missing") && has(path));
    CHECK(lz_to_host(lz_params_find(p, "a"), out, 8) == 0 && out[0] == 0);   /* unchanged */
    lz_clear_error();
    CHECK(lz_safetensors_load(path, p, 0) == 0);
    CHECK(lz_to_host(lz_params_find(p, "b"), out, 16) == 0 && out[3] == 6);
    lz_params_free(p);

    p = lz_params_new();                   /* only a: b is extra */
    lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 1);
    lz_clear_error();
    CHECK(lz_safetensors_load(path, p, 1) == -1);
    CHECK(has("tensor 'b' in the file is not in the parameters"));
    CHECK(lz_safetensors_load(path, p, 0) == 0);
    CHECK(lz_to_host(lz_params_find(p, "a"), out, 8) == 0 && out[1] == 2);
    lz_params_free(p);

    p = lz_params_new();                   /* b mis-shaped: an error even when not strict */
    lz_params_add(p, "a", lz_zeros(LZ_F32, 1, s2), 1);
    lz_params_add(p, "b", lz_zeros(LZ_F32, 1, s4), 1);
    lz_clear_error();
    CHECK(lz_safetensors_load(path, p, 0) == -1);
    CHECK(has("tensor 'b' has shape [2, 2] in the file but [4] in the parameters"));
    CHECK(lz_to_host(lz_params_find(p, "a"), out, 8) == 0 && out[0] == 0);   /* unchanged */
    lz_params_free(p);

    p = lz_params_new();                   /* a mis-typed */
    lz_params_add(p, "a", lz_zeros(LZ_I64, 1, s2), 0);
    lz_params_add(p, "b", lz_zeros(LZ_F32, 2, s22), 1);
    lz_clear_error();
    CHECK(lz_safetensors_load(path, p, 1) == -1);
    CHECK(has("tensor 'a' is F32 in the file but i64"));
    lz_params_free(p);

    lz_clear_error();
    CHECK(lz_safetensors_load(path, NULL, 1) == -1);
    CHECK(has("NULL"));
}

static void test_save_errors(void)
{
    lz_params *p = sample(0);
    lz_clear_error();
    CHECK(lz_safetensors_save("/nonexistent-dir/x.safetensors", p) == -1);
    CHECK(has("/nonexistent-dir/x.safetensors"));
    lz_params *q = lz_params_new();
    int64_t s2[1] = {2};
    lz_params_add(q, "__metadata__", lz_zeros(LZ_F32, 1, s2), 0);
    lz_clear_error();
    CHECK(lz_safetensors_save(tmp_path("meta_name.safetensors"), q) == -1);
    CHECK(has("__metadata__"));
    lz_clear_error();
    CHECK(lz_safetensors_save(NULL, p) == -1);
    CHECK(lz_safetensors_save(tmp_path("x.safetensors"), NULL) == -1);
    lz_params_free(q);
    lz_params_free(p);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lz_safetensors_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_layout();
    test_metadata();
    test_torch_file();
    test_bf16_f16();
    test_bad_files();
    test_matching();
    test_save_errors();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return lz_test_done();
}
