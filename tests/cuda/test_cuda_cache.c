/* The NVRTC cache of the CUDA backend (nvrtc_cache.c), without a GPU:
 * keys differ with the source, the architecture, the options and NVRTC's
 * version; a second compile of the same source reads the cubin back; a
 * truncated or altered cache file is ignored, counted, and written again;
 * a source NVRTC refuses fails with its log kept in a file the message
 * names; the folder follows XDG_CACHE_HOME (absolute only) or HOME. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cuda/nvrtc_cache.h"
#include "testlib.h"

static const char *src_a =
    "#include \"k_common.cuh\"\n"
    "extern \"C\" __global__ void k(float *o, const float *x, long long n) { LZ_GRID_LOOP(i, n) o[i] = x[i] * 2; }\n";
static const char *src_b =
    "#include \"k_common.cuh\"\n"
    "extern \"C\" __global__ void k(float *o, const float *x, long long n) { LZ_GRID_LOOP(i, n) o[i] = x[i] * 3; }\n";

static char dir[256];

static int compile(const char *src, int arch, lz_cu_image *img, char *err, size_t n)
{
    memset(img, 0, sizeof *img);
    return lz_cu_compile("test.cu", src, arch, NULL, dir, img, err, n);
}

static void keys(void)
{
    char k1[33], k2[33], k3[33], k4[33], k5[33], k6[33];
    lz_cu_cache_key_for(src_a, 90, NULL, 13, 0, k1);
    lz_cu_cache_key_for(src_a, 90, NULL, 13, 0, k2);
    lz_cu_cache_key_for(src_b, 90, NULL, 13, 0, k3);
    lz_cu_cache_key_for(src_a, 80, NULL, 13, 0, k4);
    lz_cu_cache_key_for(src_a, 90, NULL, 13, 1, k5);
    lz_cu_cache_key_for(src_a, 90, "--fmad=false", 13, 0, k6);
    CHECK(!strcmp(k1, k2));
    CHECK(strcmp(k1, k3) != 0);   /* source */
    CHECK(strcmp(k1, k4) != 0);   /* architecture */
    CHECK(strcmp(k1, k5) != 0);   /* NVRTC's version */
    CHECK(strcmp(k1, k6) != 0);   /* options */
    CHECK_EQ_I(strlen(k1), 32);
    printf("keys: the same for the same compile; differ by source, arch, NVRTC version, options\n");
}

static char *file_of(const char *src, int arch)
{
    char key[33];
    lz_cu_cache_key(src, arch, NULL, key);
    static char path[512];
    snprintf(path, sizeof path, "%s/sm_%d/%s.cubin", dir, arch, key);
    return path;
}

static void hits_and_rejects(void)
{
    char err[1024];
    lz_cu_image a, b;
    const int64_t c0 = lz_cu_cache_compiles(), h0 = lz_cu_cache_hits(), r0 = lz_cu_cache_rejects();
    CHECK_EQ_I(compile(src_a, 90, &a, err, sizeof err), 0);
    CHECK_EQ_I(lz_cu_cache_compiles() - c0, 1);
    CHECK_EQ_I(a.from_cache, 0);
    struct stat st;
    CHECK(stat(file_of(src_a, 90), &st) == 0);
    CHECK_EQ_I(compile(src_a, 90, &b, err, sizeof err), 0);   /* the second prepare hits */
    CHECK_EQ_I(lz_cu_cache_compiles() - c0, 1);
    CHECK_EQ_I(lz_cu_cache_hits() - h0, 1);
    CHECK_EQ_I(b.from_cache, 1);
    CHECK(a.size == b.size && !memcmp(a.data, b.data, a.size));
    free(b.data);
    printf("cache: a second compile of the same source reads %zu bytes back\n", a.size);

    /* another architecture is another entry */
    CHECK_EQ_I(compile(src_a, 80, &b, err, sizeof err), 0);
    CHECK_EQ_I(b.from_cache, 0);
    CHECK(stat(file_of(src_a, 80), &st) == 0);
    free(b.data);

    /* a flipped byte in the cubin: ignored, compiled again, rewritten */
    FILE *f = fopen(file_of(src_a, 90), "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, -10, SEEK_END);
        int c = fgetc(f);
        fseek(f, -10, SEEK_END);
        fputc(c ^ 0x5a, f);
        fclose(f);
    }
    CHECK_EQ_I(compile(src_a, 90, &b, err, sizeof err), 0);
    CHECK_EQ_I(b.from_cache, 0);
    CHECK_EQ_I(lz_cu_cache_rejects() - r0, 1);
    CHECK(a.size == b.size && !memcmp(a.data, b.data, a.size));
    free(b.data);
    CHECK_EQ_I(compile(src_a, 90, &b, err, sizeof err), 0);   /* rewritten whole */
    CHECK_EQ_I(b.from_cache, 1);
    free(b.data);

    /* a truncated file (a writer that died) is ignored too */
    CHECK(truncate(file_of(src_a, 90), 100) == 0);
    CHECK_EQ_I(compile(src_a, 90, &b, err, sizeof err), 0);
    CHECK_EQ_I(b.from_cache, 0);
    CHECK_EQ_I(lz_cu_cache_rejects() - r0, 2);
    free(b.data);
    /* a file holding another key's cubin under this name */
    char other[512];
    snprintf(other, sizeof other, "%s", file_of(src_b, 90));
    CHECK_EQ_I(compile(src_b, 90, &b, err, sizeof err), 0);
    free(b.data);
    CHECK(rename(other, file_of(src_a, 90)) == 0);
    CHECK_EQ_I(compile(src_a, 90, &b, err, sizeof err), 0);
    CHECK_EQ_I(b.from_cache, 0);
    CHECK_EQ_I(lz_cu_cache_rejects() - r0, 3);
    free(b.data);
    free(a.data);
    printf("cache: altered, truncated and misnamed files are ignored and rewritten (3 rejects)\n");
}

static void refused(void)
{
    char err[2048];
    lz_cu_image img;
    const char *bad = "extern \"C\" __global__ void k(float *o) { o[0] = undeclared_thing; }\n";
    CHECK_EQ_I(compile(bad, 90, &img, err, sizeof err), -1);
    CHECK(strstr(err, "NVRTC could not compile test.cu for sm_90") != NULL);
    CHECK(strstr(err, "undeclared_thing") != NULL);
    const char *kept = strstr(err, "(source and log: ");
    CHECK(kept != NULL);
    if (kept) {
        char path[512];
        snprintf(path, sizeof path, "%s", kept + strlen("(source and log: "));
        path[strcspn(path, ")")] = 0;
        struct stat st;
        CHECK(stat(path, &st) == 0 && st.st_size > 0);
    }
    printf("refused: %s\n", err);
}

static void folder(void)
{
    char buf[512];
    setenv("XDG_CACHE_HOME", "/some/where", 1);
    CHECK(lz_cu_cache_dir(buf, sizeof buf) == 0 && !strcmp(buf, "/some/where/lazyc/cuda"));
    setenv("XDG_CACHE_HOME", "relative", 1);   /* ignored, as the XDG spec says */
    setenv("HOME", "/home/u", 1);
    CHECK(lz_cu_cache_dir(buf, sizeof buf) == 0 && !strcmp(buf, "/home/u/.cache/lazyc/cuda"));
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK(lz_cu_cache_dir(buf, sizeof buf) == -1);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lazyc-cuda-cache-%ld", (long)getpid());
    keys();
    hits_and_rejects();
    refused();
    folder();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return lz_test_done();
}
