/* LZ_BF16 storage: the casts both ways bit for bit (round to nearest even,
 * ties, subnormals, NaN quiet, Inf), element size, host copies, lz_full and
 * lz_item, reshapes and transposes of bf16 data, and safetensors BF16
 * written and read without widening (and widened when not asked). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* what the cast must give: PyTorch's c10::BFloat16 rounding */
static uint16_t want(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void casts(void)
{
    static const uint32_t bits[] = {
        0x3f800000u, /* 1 */
        0x3f808000u, /* 1 + half an ulp: tie, even is down */
        0x3f818000u, /* 1 + 1.5 ulp: tie, even is up */
        0x3f808001u, /* just above the tie: up */
        0x3f807fffu, /* just below: down */
        0xbf808000u, /* -tie: down in magnitude */
        0x7f7fffffu, /* largest float: rounds to +Inf */
        0x7f800000u, 0xff800000u, /* +-Inf */
        0x7fc00000u, 0x7f800001u, 0xff800001u, /* quiet NaN, signalling NaNs (+, -) */
        0x00000001u, /* smallest subnormal: to +0 */
        0x00008000u, /* subnormal tie: even (0) */
        0x00018000u, /* subnormal tie: even (up to 2) */
        0x007fffffu, /* largest subnormal: rounds up to the smallest normal */
        0x80000000u, 0x00000000u, /* -0, +0 */
        0x3dcccccdu, /* 0.1 */
    };
    enum { N = sizeof bits / sizeof bits[0] };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = f_of(bits[i]);
    int64_t n = N;
    lz_tensor *t = lz_from_host(x, LZ_F32, 1, &n);
    lz_tensor *h = lz_cast(t, LZ_BF16);
    CHECK(h && lz_tensor_dtype(h) == LZ_BF16);
    uint16_t got[N];
    CHECK(lz_to_host(h, got, sizeof got) == 0);
    for (int i = 0; i < N; i++) {
        if (got[i] != want(bits[i]))
            fprintf(stderr, "bf16 of 0x%08x: got 0x%04x, want 0x%04x\n", bits[i], got[i], want(bits[i]));
        CHECK_EQ_I(got[i], want(bits[i]));
    }
    /* spot values written out, so the test does not only agree with itself */
    CHECK_EQ_I(got[1], 0x3f80);
    CHECK_EQ_I(got[2], 0x3f82);
    CHECK_EQ_I(got[6], 0x7f80);
    CHECK_EQ_I(got[10], 0x7fc0);
    CHECK_EQ_I(got[11], 0xffc0);
    CHECK_EQ_I(got[13], 0x0000);
    CHECK_EQ_I(got[15], 0x0080);
    CHECK_EQ_I(got[16], 0x8000);
    CHECK_EQ_I(got[18], 0x3dcd);
    /* back to f32: exact */
    lz_tensor *back = lz_cast(h, LZ_F32);
    float fb[N];
    CHECK(lz_to_host(back, fb, sizeof fb) == 0);
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &fb[i], 4);
        CHECK_EQ_I(u, (uint32_t)got[i] << 16);
    }
    CHECK(isnan(fb[9]) && isinf(fb[7]) && fb[7] > 0);
    /* a long row (the vectorised loop) agrees with the scalar rule */
    enum { M = 100003 };
    static float y[M];
    static uint16_t gy[M];
    uint32_t r = 12345;
    for (int i = 0; i < M; i++) {
        r = r * 1664525u + 1013904223u;
        y[i] = f_of(r);
    }
    int64_t m = M;
    lz_tensor *ty = lz_from_host(y, LZ_F32, 1, &m), *hy = lz_cast(ty, LZ_BF16);
    CHECK(lz_to_host(hy, gy, sizeof gy) == 0);
    int bad = 0;
    for (int i = 0; i < M; i++) {
        uint32_t u;
        memcpy(&u, &y[i], 4);
        bad += gy[i] != want(u);
    }
    CHECK_EQ_I(bad, 0);
    lz_free(t); lz_free(h); lz_free(back); lz_free(ty); lz_free(hy);
}

static void storage(void)
{
    CHECK_EQ_I(lz_dtype_size(LZ_BF16), 2);
    uint16_t v[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0}; /* 1..6 */
    int64_t s[2] = {2, 3};
    lz_tensor *t = lz_from_host(v, LZ_BF16, 2, s);
    CHECK(t && lz_tensor_dtype(t) == LZ_BF16);
    uint16_t o[6];
    CHECK(lz_to_host(t, o, sizeof o) == 0 && memcmp(o, v, sizeof v) == 0);
    CHECK(lz_to_host(t, o, 4 * 6) != 0);   /* the size is numel * 2 */
    /* a transpose moves 2-byte elements */
    lz_tensor *tt = lz_transpose(t, 0, 1);
    lz_tensor *c = lz_reshape(tt, 1, (int64_t[]){6});
    CHECK(lz_to_host(c, o, sizeof o) == 0);
    const uint16_t want_t[6] = {0x3f80, 0x4080, 0x4000, 0x40a0, 0x4040, 0x40c0};
    CHECK(memcmp(o, want_t, sizeof o) == 0);
    lz_tensor *f = lz_full(LZ_BF16, 0, NULL, 1.00390625);   /* 1 + 2^-8: tie, down */
    CHECK_NEAR(lz_item(f), 1.0, 0);
    lz_tensor *sl = lz_slice(t, 1, 1, 2);
    lz_tensor *sf = lz_cast(sl, LZ_F32);
    float fs[2];
    CHECK(lz_to_host(sf, fs, sizeof fs) == 0 && fs[0] == 2 && fs[1] == 5);
    /* only f32 <-> bf16 */
    lz_tensor *i = lz_zeros(LZ_I64, 1, (int64_t[]){2});
    CHECK(lz_cast(i, LZ_BF16) == NULL && strstr(lz_last_error(), "bf16"));
    lz_clear_error();
    lz_free(t); lz_free(tt); lz_free(c); lz_free(f); lz_free(sl); lz_free(sf); lz_free(i);
}

static void safetensors(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/lz_bf16_%d.safetensors", (int)getpid());
    uint16_t v[4] = {0x3f80, 0xc000, 0x7fc0, 0x0001};
    int64_t s[1] = {4};
    lz_params *p = lz_params_new();
    lz_params_add(p, "w", lz_from_host(v, LZ_BF16, 1, s), 0);
    CHECK(lz_safetensors_save(path, p) == 0);
    /* the header says BF16 and the data is 8 bytes */
    FILE *fp = fopen(path, "rb");
    char buf[256] = {0};
    uint64_t hl = 0;
    CHECK(fp && fread(&hl, 8, 1, fp) == 1 && hl < sizeof buf && fread(buf, 1, hl, fp) == hl);
    CHECK(strstr(buf, "\"BF16\"") && strstr(buf, "[0,8]"));
    if (fp) fclose(fp);
    lz_params *kept = lz_safetensors_read_bf16(path), *wide = lz_safetensors_read(path);
    CHECK(kept && wide);
    if (kept && wide) {
        lz_tensor *k = lz_params_find(kept, "w"), *w = lz_params_find(wide, "w");
        CHECK(lz_tensor_dtype(k) == LZ_BF16 && lz_tensor_dtype(w) == LZ_F32);
        uint16_t o[4];
        float fo[4];
        CHECK(lz_to_host(k, o, sizeof o) == 0 && memcmp(o, v, sizeof v) == 0);
        CHECK(lz_to_host(w, fo, sizeof fo) == 0 && fo[0] == 1 && fo[1] == -2 && isnan(fo[2]));
    }
    /* loading into a bf16 set copies, into an f32 one widens */
    lz_params *q = lz_params_new();
    lz_params_add(q, "w", lz_zeros(LZ_BF16, 1, s), 0);
    CHECK(lz_safetensors_load(path, q, 1) == 0);
    uint16_t o[4];
    CHECK(lz_to_host(lz_params_find(q, "w"), o, sizeof o) == 0 && memcmp(o, v, sizeof v) == 0);
    lz_params_free(p); lz_params_free(kept); lz_params_free(wide); lz_params_free(q);
    unlink(path);
}

int main(void)
{
    casts();
    storage();
    safetensors();
    return lz_test_done();
}
