/* The settings table (src/base/settings.h): each LZ_* variable set in the
 * environment reaches the code that reads it, through the table; a value a
 * variable does not accept is warned about once on stderr, naming it, and
 * its default applies; unset, the defaults apply. Each case runs in its own
 * process, since a variable is read once per process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "backends/cpu/buffer_pool.h"
#include "backends/cpu/kernels.h"
#include "base/fault.h"
#include "base/settings.h"
#include "compile/program.h"

/* driven: the checks below run the code that reads the variable, so the
   table must mark it read (a variable without that is checked through
   lz_setting only). */
typedef struct { const char *name, *good, *bad; int driven; } case_values;

/* A non-default accepted value and a refused one (NULL for text) for every
   variable in the table, in the table's order. */
static const case_values cases[] = {
    {"LZ_EAGER", "1", "yes", 1},          {"LZ_DEVICE", "cpu", NULL, 1},
    {"LZ_FUSION", "0", "off", 1},
    {"LZ_BLOCKED", "0", "2", 1},          {"LZ_WINOGRAD", "0", " 0", 1},
    {"LZ_DNNL_CONV", "tune", "3", 1},     {"LZ_CONV_CACHE", "0", "no", 0},
    {"LZ_DETERMINISTIC", "1", "true", 1},
    {"LZ_AUTOCAST_PRODUCTS", "rule", "fast", 0},
    {"LZ_CACHE_CAPACITY", "2", "0", 1},
    {"LZ_POOL_MIB", "1", "-1", 1},        {"LZ_HUGE_PAGES", "1", "2", 1},
    {"LZ_FAULT_ALLOC", "2", "+5", 1},
    {"LZ_FAULT_KERNEL", "3", "1x", 1},    {"LZ_FAULT_HOST", "4", "-2", 1},
    {"LZ_FAULT_SCRATCH", "5", "5.5", 1},
    {"LZ_EXPLAIN_COMPILES", "1", "maybe", 1}, {"LZ_CAPTURE_CHECK", "2", "often", 0},
    {"LZ_TORCH_PYTHON", "/x/python", NULL, 1},
    {"LZ_BENCH_TORCH_SCRIPT", "/x/s.py", NULL, 1}, {"LZ_TORCH_OMP_WAIT_POLICY", "active", NULL, 1},
    {"LZ_DIST_TIMEOUT", "5", " 12", 0},  /* integers: digits only, as the 0/1 switches */      {"LZ_DIST_BUCKET_KIB", "1", "-3", 0},
    {"LZ_DIST_OVERLAP", "0", "no", 0},
    /* the CUDA backend's, read in liblazyc_cuda.so on a GPU (tests/cuda) */
    {"LZ_CUDA_DEVICE", "1", "-1", 0},      {"LZ_CUDA_TF32", "1", "2", 0},
    {"LZ_CUDA_GRAPHS", "0", "no", 0},      {"LZ_CUDA_GRAPH_COPY_MIB", "8", "-4", 0},
    {"LZ_CUDA_CACHE", "0", "off", 0},      {"LZ_CUDA_STAGING_MIB", "16", "x", 0},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* Compiles three one-op graphs, then the first again: with a cache of 2 the
   first was dropped and compiles again. Returns the compiles counted. */
static int64_t compiles_for_four_graphs(void)
{
    lz_metrics_reset();
    float v[4] = {1, 2, 3, 4};
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, (int64_t[]){4});
    lz_tensor *(*ops[4])(lz_tensor *, lz_tensor *) = {lz_add, lz_mul, lz_sub, lz_add};
    for (int i = 0; i < 4; i++) {
        lz_tensor *y = ops[i](x, x);
        CHECK(lz_sync(&y, 1, 1) == 0);
        lz_free(y);
    }
    lz_free(x);
    return lz_metrics_get().compiles;
}

/* Bytes the pool keeps of a freed 2 MiB block: 0 under a 1 MiB cap. */
static size_t pool_keeps_2mib(void)
{
    lz_pool_trim();
    void *p = lz_pool_alloc(2u << 20);
    CHECK(p != NULL);
    lz_pool_free(p, 2u << 20);
    size_t kept = lz_pool_cached_bytes();
    lz_pool_trim();
    return kept;
}

/* Whether a 2 MiB block from the pool is advised for huge pages. */
static int pool_advises_huge_pages(void)
{
    void *p = lz_pool_alloc(2u << 20);
    CHECK(p != NULL);
    char flags[512];
    lz_test_vm_flags(p, flags, sizeof flags);
    lz_pool_free(p, 2u << 20);
    lz_pool_trim();
    return strstr(flags, " hg") != NULL;
}

/* 1-based index of the first lz_fault_hit that fires within 10, else 0. */
static int fault_fires_at(int kind)
{
    for (int i = 1; i <= 10; i++)
        if (lz_fault_hit(kind)) return i;
    return 0;
}

static void check_all_read(void)
{
    CHECK_EQ_I(lz_settings_count(), LZ_SETTING_COUNT);
    CHECK_EQ_I(lz_settings_count(), N_CASES);
    for (int i = 0; i < lz_settings_count(); i++) {
        lz_setting_info s;
        CHECK(lz_settings_get(i, &s) == 0);
        if (!s.read && cases[i].driven) fprintf(stderr, "%s was not read\n", s.name);
        CHECK(s.read || !cases[i].driven);
    }
}

static void set_all(int good)
{
    for (int i = 0; i < N_CASES; i++) {
        const char *v = good ? cases[i].good : cases[i].bad;
        if (v) setenv(cases[i].name, v, 1);
        else unsetenv(cases[i].name);
    }
}

static void case_set(void)
{
    set_all(1);
    /* faults first: nothing else may count allocations before */
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_ALLOC), 2);
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_KERNEL), 3);
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_HOST), 4);
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_SCRATCH), 5);
    lz_fault_reset();
    CHECK_EQ_I(lz_is_eager(), 1);
    lz_set_eager(0);
    CHECK_EQ_I(lz_fusion_enabled(), 0);
    CHECK_EQ_I(lz_blocked_layouts_enabled(), 0);
    CHECK_EQ_I(lz_winograd_enabled(), 0);
    /* LZ_DNNL_CONV=tune, but LZ_DETERMINISTIC=1 takes the rules */
    CHECK_EQ_I(lz_dnnl_conv_enabled(), 1);
    CHECK_EQ_I(compiles_for_four_graphs(), 4);
    CHECK_EQ_I(pool_keeps_2mib(), 0);
    CHECK_EQ_I(pool_advises_huge_pages(), lz_test_thp_kernel());
    CHECK(!strcmp(lz_setting("LZ_TORCH_PYTHON"), "/x/python"));
    CHECK(!strcmp(lz_setting("LZ_BENCH_TORCH_SCRIPT"), "/x/s.py"));
    CHECK(!strcmp(lz_setting("LZ_TORCH_OMP_WAIT_POLICY"), "active"));
    check_all_read();
    for (int i = 0; i < N_CASES; i++) {
        lz_setting_info s;
        CHECK(lz_settings_get(i, &s) == 0);
        CHECK(!strcmp(s.name, cases[i].name));
        CHECK(s.valid && s.env && !strcmp(s.value, cases[i].good));
        const char *v = lz_setting(cases[i].name);
        CHECK(v && !strcmp(v, cases[i].good));
    }
    CHECK(lz_setting("LZ_NO_SUCH") == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "LZ_NO_SUCH"));
    lz_setting_info s;
    CHECK(lz_settings_get(N_CASES, &s) == -1);
}

static void check_defaults(void)
{
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_ALLOC), 0);
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_KERNEL), 0);
    CHECK_EQ_I(fault_fires_at(LZ_FAULT_SCRATCH), 0);
    lz_fault_reset();
    CHECK_EQ_I(lz_is_eager(), 0);
    CHECK_EQ_I(lz_fusion_enabled(), 1);
    CHECK_EQ_I(lz_blocked_layouts_enabled(), 1);
    CHECK_EQ_I(lz_winograd_enabled(), 1);
    CHECK_EQ_I(lz_dnnl_conv_enabled(), 1);
    CHECK_EQ_I(compiles_for_four_graphs(), 3);
    CHECK_EQ_I(pool_keeps_2mib(), 2u << 20);
    CHECK_EQ_I(pool_advises_huge_pages(), 0);
    CHECK(!strcmp(lz_setting("LZ_TORCH_PYTHON"), "/usr/bin/python3"));
    CHECK(!strcmp(lz_setting("LZ_BENCH_TORCH_SCRIPT"), ""));
    CHECK(!strcmp(lz_setting("LZ_TORCH_OMP_WAIT_POLICY"), ""));
    check_all_read();
}

static void case_unset(void)
{
    for (int i = 0; i < N_CASES; i++) unsetenv(cases[i].name);
    check_defaults();
    for (int i = 0; i < N_CASES; i++) {
        lz_setting_info s;
        CHECK(lz_settings_get(i, &s) == 0 && s.valid && !s.env);
        const char *v = lz_setting(cases[i].name);
        CHECK(v && !strcmp(v, s.default_value));
    }
}

static void case_refused(void)
{
    set_all(0);
    char path[] = "/tmp/lz_settings_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    check_defaults();
    for (int i = 0; i < N_CASES; i++) lz_setting(cases[i].name);   /* undriven ones warn here */
    /* read again: no second warning */
    CHECK_EQ_I(lz_is_eager() + lz_fusion_enabled() + lz_setting_int(LZ_SETTING_CACHE_CAPACITY), 513);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char text[8192] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    close(fd);
    unlink(path);
    if (strstr(text, " failed")) fprintf(stderr, "%s", text);   /* checks made while redirected */
    for (int i = 0; i < N_CASES; i++) {
        if (!cases[i].bad) continue;
        char want[128];
        snprintf(want, sizeof want, "lazyc: warning: %s='%s' is not ", cases[i].name, cases[i].bad);
        const char *at = strstr(text, want);
        if (!at) fprintf(stderr, "no warning \"%s\" in:\n%s", want, text);
        CHECK(at != NULL);
        CHECK(at && !strstr(at + 1, want));   /* once */
        lz_setting_info s;
        CHECK(lz_settings_get(i, &s) == 0);
        CHECK(!s.valid && !strcmp(s.value, s.default_value));
    }
    CHECK(strstr(text, "LZ_CACHE_CAPACITY='0' is not an integer in [1, 2147483647]; using the default 512"));
    CHECK(strstr(text, "LZ_DNNL_CONV='3' is not one of 0|1|2|tune; using the default 1"));
}

int main(void)
{
    int failed = lz_test_case_in_child("set", case_set) + lz_test_case_in_child("unset", case_unset)
               + lz_test_case_in_child("refused", case_refused);
    printf("%s\n", failed ? "FAILED" : "all cases passed");
    return failed != 0;
}
