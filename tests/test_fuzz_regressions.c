/* Replays the fuzz harnesses (tests/fuzz/) on every seed in
 * tests/fuzz/corpus/<harness>/ and every input a fuzzer once crashed on in
 * tests/fuzz/regressions/<harness>/, built with the normal compiler and no
 * libFuzzer: the suite keeps the fixed bugs fixed without clang. A harness
 * aborts on a broken invariant, so a regression fails this test by crashing. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "testlib.h"

#define LLVMFuzzerInitialize fuzz_safetensors_init
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerInitialize fuzz_idx_init
#define LLVMFuzzerTestOneInput fuzz_idx_one
#include "fuzz/fuzz_idx.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerInitialize fuzz_ops_init
#define LLVMFuzzerTestOneInput fuzz_ops_one
#include "fuzz/fuzz_ops.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerInitialize fuzz_autocast_diff_init
#define LLVMFuzzerTestOneInput fuzz_autocast_diff_one
#include "fuzz/fuzz_autocast_diff.c"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

typedef struct harness {
    const char *name;
    int (*init)(int *, char ***);
    int (*one)(const uint8_t *, size_t);
} harness;

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs h on every file of dir; returns how many (-1: no such dir). */
static int replay(const harness *h, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    char *names[1024];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 1024;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        if (f) {
            static uint8_t buf[1 << 20];
            size_t len = fread(buf, 1, sizeof buf, f);
            fclose(f);
            /* libFuzzer hands the harness a buffer of exactly len bytes */
            uint8_t *copy = malloc(len ? len : 1);
            memcpy(copy, buf, len);
            fprintf(stderr, "%s %s (%zu bytes)\n", h->name, path, len);
            h->one(copy, len);
            free(copy);
            lz_test_passed++;
        }
        free(names[i]);
    }
    return n;
}

/* What the fuzzers found, checked directly as well: without a sanitizer
   the replays above cannot see undefined behaviour. */
static void found_by_fuzzing(void)
{
    const int64_t s2[] = {2};
    /* lz_full converted NaN to an integer dtype (undefined) */
    lz_clear_error();
    CHECK(lz_full(LZ_I64, 1, s2, NAN) == NULL && lz_last_error());
    lz_clear_error();
    CHECK(lz_full(LZ_I32, 1, s2, 3e9) == NULL && lz_last_error());
    lz_tensor *ok = lz_full(LZ_I32, 1, s2, -2147483648.0);
    int32_t iv[2] = {0};
    CHECK(ok && lz_to_host(ok, iv, sizeof iv) == 0 && iv[0] == INT32_MIN);
    lz_free(ok);

    /* the cast kernel converted NaN and out-of-range floats (undefined):
       they now give the minimum, as x86 does */
    const float fv[4] = {NAN, 1e20f, -1e20f, -7.9f};
    const int64_t s4[] = {4};
    lz_tensor *f = lz_from_host(fv, LZ_F32, 1, s4);
    lz_tensor *c32 = lz_cast(f, LZ_I32), *c64 = lz_cast(f, LZ_I64);
    int32_t o32[4] = {0};
    int64_t o64[4] = {0};
    CHECK(lz_to_host(c32, o32, sizeof o32) == 0 && lz_to_host(c64, o64, sizeof o64) == 0);
    CHECK(o32[0] == INT32_MIN && o32[1] == INT32_MIN && o32[2] == INT32_MIN && o32[3] == -7);
    CHECK(o64[0] == INT64_MIN && o64[1] == INT64_MIN && o64[2] == INT64_MIN && o64[3] == -7);

    /* integer add, sub, mul and neg overflowed (undefined): they wrap */
    const int64_t big[2] = {INT64_MAX, INT64_MIN};
    const int32_t big32[2] = {INT32_MAX, INT32_MIN};
    lz_tensor *b64 = lz_from_host(big, LZ_I64, 1, s2), *b32 = lz_from_host(big32, LZ_I32, 1, s2);
    lz_tensor *sum64 = lz_add(b64, b64), *neg64 = lz_neg(b64), *mul32 = lz_mul(b32, b32);
    lz_tensor *dif32 = lz_sub(b32, lz_neg(b32));
    int64_t r64[2] = {0}, n64[2] = {0};
    int32_t m32[2] = {0}, d32[2] = {0};
    CHECK(lz_to_host(sum64, r64, sizeof r64) == 0 && r64[0] == -2 && r64[1] == 0);
    CHECK(lz_to_host(neg64, n64, sizeof n64) == 0 && n64[0] == -INT64_MAX && n64[1] == INT64_MIN);
    CHECK(lz_to_host(mul32, m32, sizeof m32) == 0 && m32[0] == 1 && m32[1] == 0);
    CHECK(lz_to_host(dif32, d32, sizeof d32) == 0 && d32[0] == -2 && d32[1] == 0);
    /* and so do integer sums */
    const int64_t top[2] = {INT64_MAX, 1};
    lz_tensor *t64 = lz_from_host(top, LZ_I64, 1, s2), *red = lz_sum(t64);
    int64_t rv = 0;
    CHECK(lz_to_host(red, &rv, sizeof rv) == 0 && rv == INT64_MIN);
    lz_tensor *all[] = {f, c32, c64, b64, b32, sum64, neg64, mul32, dif32, t64, red};
    for (int i = 0; i < 11; i++) lz_free(all[i]);

    /* an IDX header promising 16 GiB in a 19-byte file was allocated in
       full before the data was found missing */
    fuzz_file img, lab;
    fuzz_file_open(&img, "images");
    fuzz_file_open(&lab, "labels");
    const uint8_t huge[] = {0, 0, 8, 3, 1, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 32, 1, 2, 3};
    const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 1, 7};
    fuzz_file_set(&img, huge, sizeof huge);
    fuzz_file_set(&lab, labels, sizeof labels);
    lz_clear_error();
    /* with 1 GiB of address space to spare, allocating the promise fails
       ("out of memory") where growing with the data does not (ASan
       reserves its shadow up front: no limit under it) */
    struct rlimit old_as;
    getrlimit(RLIMIT_AS, &old_as);
#ifndef __SANITIZE_ADDRESS__
    long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm && fscanf(statm, "%ld", &pages) == 1) {
        struct rlimit lim = {(rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (1u << 30), old_as.rlim_max};
        setrlimit(RLIMIT_AS, &lim);
    }
    if (statm) fclose(statm);
#endif
    CHECK(lz_dataset_idx(img.path, lab.path) == NULL);
    setrlimit(RLIMIT_AS, &old_as);
    CHECK(lz_last_error() && strstr(lz_last_error(), "truncated"));
    /* a label over 99 was reported from freed memory */
    const uint8_t one[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 5};
    const uint8_t bad_label[] = {0, 0, 8, 1, 0, 0, 0, 1, 200};
    fuzz_file_set(&img, one, sizeof one);
    fuzz_file_set(&lab, bad_label, sizeof bad_label);
    lz_clear_error();
    CHECK(lz_dataset_idx(img.path, lab.path) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "label 0 is 200"));
    /* a corrupt gzip stream was reported with zlib's message after
       gzclose had freed it */
    uint8_t gz[96];
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)(uintptr_t)one;
    z.avail_in = sizeof one;
    z.next_out = gz;
    z.avail_out = sizeof gz;
    CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    size_t gz_len = z.total_out;
    deflateEnd(&z);
    /* a second gzip member whose data is not deflate: found after the
       data the header promised, when the reader checks for more */
    const uint8_t bad_member[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff};
    memcpy(gz + gz_len, bad_member, sizeof bad_member);
    gz_len += sizeof bad_member;
    fuzz_file_set(&img, gz, gz_len);
    fuzz_file_set(&lab, labels, sizeof labels);
    lz_clear_error();
    CHECK(lz_dataset_idx(img.path, lab.path) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "corrupt compressed data (") && strstr(lz_last_error(), "invalid block type)"));
    close(img.fd);
    close(lab.fd);
}

int main(void)
{
    found_by_fuzzing();
    const harness hs[] = {
        {"fuzz_safetensors", fuzz_safetensors_init, fuzz_safetensors_one},
        {"fuzz_idx", fuzz_idx_init, fuzz_idx_one},
        {"fuzz_ops", fuzz_ops_init, fuzz_ops_one},
        {"fuzz_autocast_diff", fuzz_autocast_diff_init, fuzz_autocast_diff_one},
    };
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) {
        hs[i].init(NULL, NULL);
        char dir[256];
        snprintf(dir, sizeof dir, "fuzz/corpus/%s", hs[i].name);
        CHECK(replay(&hs[i], dir) > 0);   /* the seeds are part of the repository */
        snprintf(dir, sizeof dir, "fuzz/regressions/%s", hs[i].name);
        replay(&hs[i], dir);
    }
    return lz_test_done();
}
