/* The initialisers' host draws (lz_from_random, and lz_init_uniform /
 * lz_init_normal on top of it): the same seed gives bitwise the same
 * numbers whatever the OpenMP team (1 or 2 threads), across sizes that
 * cut the vector loop in different places; the moments are those of
 * uniform [a, b) and normal(a, b); two models built from one seed hold the
 * same parameters and another seed changes them; bad arguments are errors
 * naming the call. The fills run on the recording thread alone: before any
 * execution the process has one thread (an OpenMP team left behind there
 * would keep the executor's workers sleeping between kernels,
 * runtime/omp_quiet.c). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc_nn.h"
#include "runtime/executor.h"
#include "runtime/omp_quiet.h"
#include "testlib.h"

static float *draw(int threads, uint64_t seed, int dist, float a, float b, int64_t n)
{
    omp_set_dynamic(0);
    omp_set_num_threads(threads);
    lz_tensor *t = lz_from_random(seed, dist, a, b, 1, &n);
    CHECK(t != NULL && lz_numel(t) == n);
    float *v = t ? lz_test_read(t) : NULL;
    lz_free(t);
    return v;
}

static void test_threads_same_bits(void)
{
    /* 1, a vector's tail, one block and a bit, many blocks and a tail */
    const int64_t sizes[] = {1, 13, (1 << 14) + 7, 300001};
    for (int dist = 0; dist < 2; dist++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            float *one = draw(1, 42, dist, -0.5f, 2.0f, sizes[k]);
            float *two = draw(2, 42, dist, -0.5f, 2.0f, sizes[k]);
            CHECK(one && two && memcmp(one, two, sizeof(float) * (size_t)sizes[k]) == 0);
            free(one);
            free(two);
        }
    /* another seed, other numbers */
    float *x = draw(2, 42, 1, 0, 1, 1000), *y = draw(2, 43, 1, 0, 1, 1000);
    int differ = 0;
    for (int i = 0; x && y && i < 1000; i++) differ += x[i] != y[i];
    CHECK(differ > 990);
    free(x);
    free(y);
    omp_set_num_threads(omp_get_num_procs());
}

enum { BIG = 400000 };

static void test_moments(void)
{
    float *u = draw(2, 7, 0, -3.0f, 5.0f, BIG), *z = draw(2, 8, 1, 1.5f, 2.0f, BIG);
    if (!u || !z) {
        CHECK(0);
        free(u);
        free(z);
        return;
    }
    double su = 0, suu = 0, sz = 0, szz = 0, sz4 = 0, umin = 1e9, umax = -1e9, zmax = 0;
    int64_t within1 = 0;
    for (int64_t i = 0; i < BIG; i++) {
        su += u[i], suu += (double)u[i] * u[i];
        umin = fmin(umin, u[i]), umax = fmax(umax, u[i]);
        double s = (z[i] - 1.5) / 2.0;
        sz += s, szz += s * s, sz4 += s * s * s * s;
        zmax = fmax(zmax, fabs(s));
        within1 += fabs(s) < 1.0;
    }
    double mu = su / BIG, vu = suu / BIG - mu * mu, mz = sz / BIG, vz = szz / BIG - mz * mz;
    /* tolerances: 5 standard errors of each estimate */
    CHECK(umin >= -3.0 && umax < 5.0);
    CHECK_NEAR(mu, 1.0, 5 * sqrt(64.0 / 12 / BIG));
    CHECK_NEAR(vu, 64.0 / 12, 5 * 64 * sqrt(1.0 / 180 / BIG));
    CHECK_NEAR(mz, 0.0, 5 * sqrt(1.0 / BIG));
    CHECK_NEAR(vz, 1.0, 5 * sqrt(2.0 / BIG));
    CHECK_NEAR(sz4 / BIG, 3.0, 5 * sqrt(96.0 / BIG));
    CHECK_NEAR((double)within1 / BIG, 0.682689, 5 * sqrt(0.2166 / BIG));
    CHECK(zmax <= 5.78 && zmax > 4.0);   /* Box-Muller on 24-bit uniforms */
    free(u);
    free(z);
}

/* Sum of every parameter's values bit pattern, a model's fingerprint. */
static uint64_t fingerprint(lz_model *m)
{
    lz_params *p = lz_model_params(m);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < lz_params_count(p); i++) {
        lz_tensor *t = lz_params_at(p, i);
        if (lz_tensor_dtype(t) != LZ_F32) continue;
        float *v = lz_test_read(t);
        for (int64_t k = 0; v && k < lz_numel(t); k++) {
            uint32_t b;
            memcpy(&b, &v[k], sizeof b);
            h = (h ^ b) * 1099511628211ull;
        }
        free(v);
    }
    return h;
}

static void test_models_reproducible(void)
{
    uint64_t h[3];
    const uint64_t seeds[3] = {5, 5, 6};
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(k == 1 ? 1 : 2);
        lz_model *m = lz_model_new("resnet18", "smoke", seeds[k]);
        CHECK(m != NULL);
        h[k] = m ? fingerprint(m) : (uint64_t)k;
        lz_model_free(m);
    }
    omp_set_num_threads(omp_get_num_procs());
    CHECK(h[0] == h[1]);
    CHECK(h[0] != h[2]);
}

static void test_errors(void)
{
    int64_t n = 4, bad = -1;
    CHECK(lz_from_random(1, 2, 0, 1, 1, &n) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_from_random: dist 2"));
    CHECK(lz_from_random(1, 1, 0, NAN, 1, &n) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_from_random: parameters 0 and nan must be finite"));
    CHECK(lz_from_random(1, 0, 0, 1, 1, &bad) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_from_random"));
    lz_clear_error();
}

/* The threads of this process (/proc/self/status), -1 when unknown. */
static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

int main(void)
{
    test_threads_same_bits();
    test_moments();
    test_models_reproducible();
    test_errors();
    /* no step ran: the executor never started, and no fill left a team */
    CHECK_EQ_I(lz_executor_in_flight(), 0);
    CHECK_EQ_I(lz_omp_quiet_workers(), 0);
    CHECK_EQ_I(threads_now(), 1);
    lz_shutdown();
    CHECK_EQ_I(lz_omp_quiet_workers(), 0);
    return lz_test_done();
}
