/* libFuzzer harness for the safetensors reader: the input is a whole file.
 * Every entry point that reads a file runs on it (read, load into a fixed
 * set strict and not, read_meta). Checked on top of the sanitizers:
 *  - a failure sets lz_last_error();
 *  - a file that lz_safetensors_read accepts loads strictly into the set it
 *    made, every tensor can be read back, and saving the set then reading
 *    the copy gives the same names, dtypes, shapes and bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazyc.h"
#include "fuzz_util.h"

static fuzz_file st_in;
static char st_copy[4096];

static void st_die(const char *what, const char *name)
{
    fprintf(stderr, "fuzz_safetensors: %s (tensor '%s'; last error: %s)\n", what, name ? name : "",
            lz_last_error() ? lz_last_error() : "none");
    abort();
}

/* The bytes of t, malloc'ed; dies if they cannot be read. */
static void *st_bytes(lz_tensor *t, size_t *nb, const char *name)
{
    *nb = (size_t)lz_numel(t) * lz_dtype_size(lz_tensor_dtype(t));
    void *buf = malloc(*nb ? *nb : 1);
    lz_clear_error();
    if (lz_to_host(t, buf, *nb)) st_die("a tensor of a file that was read cannot be read back", name);
    return buf;
}

static void st_check_same(const lz_params *a, const lz_params *b)
{
    if (lz_params_count(a) != lz_params_count(b)) st_die("the saved copy has another tensor count", NULL);
    for (int i = 0; i < lz_params_count(a); i++) {
        const char *name = lz_params_name(a, i);
        lz_tensor *x = lz_params_at(a, i), *y = lz_params_find(b, name);
        if (!y) st_die("the saved copy lacks a tensor", name);
        if (lz_tensor_dtype(x) != lz_tensor_dtype(y) || lz_ndim(x) != lz_ndim(y))
            st_die("the saved copy has another dtype or rank", name);
        for (int d = 0; d < lz_ndim(x); d++)
            if (lz_dim(x, d) != lz_dim(y, d)) st_die("the saved copy has another shape", name);
        size_t nx, ny;
        void *bx = st_bytes(x, &nx, name), *by = st_bytes(y, &ny, name);
        if (nx != ny || memcmp(bx, by, nx) != 0) st_die("the saved copy has other data", name);
        free(bx);
        free(by);
    }
}

/* A set like a small model's, to load files into. */
static lz_params *st_fixed_set(void)
{
    lz_params *p = lz_params_new();
    const int64_t s22[] = {2, 2}, s2[] = {2};
    lz_params_add(p, "weight", lz_zeros(LZ_F32, 2, s22), 1);
    lz_params_add(p, "bias", lz_zeros(LZ_F32, 1, s2), 1);
    lz_params_add(p, "step", lz_zeros(LZ_I64, 0, NULL), 0);
    lz_params_add(p, "idx", lz_zeros(LZ_I32, 1, s2), 0);
    return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_open(&st_in, "fuzz_safetensors");
    const char *dir = getenv("TMPDIR");
    snprintf(st_copy, sizeof st_copy, "%s/fuzz_safetensors_copy.%ld", dir && *dir ? dir : "/tmp",
             (long)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (st_in.path[0] == '\0') LLVMFuzzerInitialize(NULL, NULL);
    fuzz_file_set(&st_in, data, size);
    const char *path = st_in.path;

    lz_clear_error();
    lz_params *p = lz_safetensors_read(path);
    if (!p) {
        fuzz_expect_error("lz_safetensors_read");
    } else {
        for (int i = 0; i < lz_params_count(p); i++) {
            size_t nb;
            free(st_bytes(lz_params_at(p, i), &nb, lz_params_name(p, i)));
        }
        lz_clear_error();
        if (lz_safetensors_load(path, p, 1) != 0) st_die("a file that was read does not load into its own set", NULL);
        lz_clear_error();
        if (lz_safetensors_save(st_copy, p) != 0) st_die("a set that was read cannot be saved", NULL);
        lz_params *q = lz_safetensors_read(st_copy);
        if (!q) st_die("the saved copy cannot be read", NULL);
        st_check_same(p, q);
        lz_params_free(q);
        remove(st_copy);
        lz_params_free(p);
    }

    for (int strict = 0; strict < 2; strict++) {
        lz_params *f = st_fixed_set();
        lz_clear_error();
        if (lz_safetensors_load(path, f, strict) != 0) fuzz_expect_error("lz_safetensors_load");
        lz_params_free(f);
    }

    static const char *const keys[] = {"epoch", "step", ""};
    for (int k = 0; k < 3; k++) {
        lz_clear_error();
        char *v = lz_safetensors_read_meta(path, keys[k]);
        if (!v) fuzz_expect_error("lz_safetensors_read_meta");
        free(v);
    }
    lz_wait();
    return 0;
}
