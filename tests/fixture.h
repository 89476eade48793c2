/* Reader for the parity fixtures written by tests/reference/gen_fixtures.py
 * (format described there): a text header of attributes and named tensors,
 * a "data" line, then every tensor's raw little-endian values in header
 * order. Static inline so each test program needs nothing else linked. */
#ifndef LZ_FIXTURE_H
#define LZ_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lazyc.h"

#define LZ_TEST_FX_MAX_TENSORS 32
#define LZ_TEST_FX_MAX_ATTRS 16
#define LZ_TEST_FX_MAX_VALS 16

typedef struct lz_test_fx_tensor {
    char name[32];
    lz_dtype dtype;
    int ndim;
    int64_t shape[LZ_MAX_DIMS];
    int64_t numel;
    const void *data;        /* points into the fixture's file image */
} lz_test_fx_tensor;

typedef struct lz_test_fx_attr {
    char key[32];
    int n, is_float;
    int64_t i[LZ_TEST_FX_MAX_VALS];
    double f[LZ_TEST_FX_MAX_VALS];
} lz_test_fx_attr;

typedef struct lz_test_fx {
    char op[32];
    int n_tensors, n_attrs;
    lz_test_fx_tensor t[LZ_TEST_FX_MAX_TENSORS];
    lz_test_fx_attr a[LZ_TEST_FX_MAX_ATTRS];
    char *image;             /* the whole file */
    char *data;              /* the tensors, each 8-byte aligned */
} lz_test_fx;

static inline size_t lz_test_fx_dtype_size(lz_dtype d)
{
    return d == LZ_F32 ? 4 : d == LZ_I64 ? 8 : 4;
}

static inline int lz_test_fx_dtype_parse(const char *s, lz_dtype *d)
{
    if (!strcmp(s, "f32")) *d = LZ_F32;
    else if (!strcmp(s, "i64")) *d = LZ_I64;
    else if (!strcmp(s, "i32")) *d = LZ_I32;
    else return -1;
    return 0;
}

static inline void lz_test_fx_free(lz_test_fx *fx)
{
    free(fx->image);
    free(fx->data);
    fx->image = NULL;
    fx->data = NULL;
}

/* Loads path into fx; on failure returns -1 with a reason in err. */
static inline int lz_test_fx_load(const char *path, lz_test_fx *fx, char *err, size_t errlen)
{
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", path); return -1; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    fx->image = malloc((size_t)size + 1);
    if (!fx->image || fread(fx->image, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        lz_test_fx_free(fx);
        snprintf(err, errlen, "%s: cannot read", path);
        return -1;
    }
    fclose(f);
    fx->image[size] = 0;

    char *p = fx->image, *end = fx->image + size;
    int line_no = 0, got_magic = 0;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        *nl = 0;
        line_no++;
        char *line = p;
        p = nl + 1;
        char *save = NULL, *word = strtok_r(line, " ", &save);
        if (!word) continue;
        if (line_no == 1) {
            char *ver = strtok_r(NULL, " ", &save);
            got_magic = !strcmp(word, "lazyc-fixture") && ver && !strcmp(ver, "1");
            if (!got_magic) break;
        } else if (!strcmp(word, "op")) {
            char *op = strtok_r(NULL, " ", &save);
            snprintf(fx->op, sizeof fx->op, "%s", op ? op : "");
        } else if (!strcmp(word, "iattr") || !strcmp(word, "fattr")) {
            if (fx->n_attrs == LZ_TEST_FX_MAX_ATTRS) goto bad;
            lz_test_fx_attr *a = &fx->a[fx->n_attrs++];
            char *key = strtok_r(NULL, " ", &save);
            if (!key) goto bad;
            snprintf(a->key, sizeof a->key, "%s", key);
            a->is_float = word[0] == 'f';
            for (char *v; (v = strtok_r(NULL, " ", &save));) {
                if (a->n == LZ_TEST_FX_MAX_VALS) goto bad;
                a->f[a->n] = strtod(v, NULL);
                a->i[a->n] = strtoll(v, NULL, 10);
                a->n++;
            }
        } else if (!strcmp(word, "tensor")) {
            if (fx->n_tensors == LZ_TEST_FX_MAX_TENSORS) goto bad;
            lz_test_fx_tensor *t = &fx->t[fx->n_tensors++];
            char *name = strtok_r(NULL, " ", &save), *dt = strtok_r(NULL, " ", &save);
            char *nd = strtok_r(NULL, " ", &save);
            if (!name || !dt || !nd || lz_test_fx_dtype_parse(dt, &t->dtype)) goto bad;
            snprintf(t->name, sizeof t->name, "%s", name);
            t->ndim = atoi(nd);
            if (t->ndim < 0 || t->ndim > LZ_MAX_DIMS) goto bad;
            t->numel = 1;
            for (int d = 0; d < t->ndim; d++) {
                char *v = strtok_r(NULL, " ", &save);
                if (!v) goto bad;
                t->shape[d] = strtoll(v, NULL, 10);
                t->numel *= t->shape[d];
            }
        } else if (!strcmp(word, "data")) {
            /* The values follow a text header at any byte offset; reading a
               float there is undefined (UBSan: misaligned load), so each
               tensor is copied to an 8-byte aligned place of its own. */
            size_t total = 0;
            for (int i = 0; i < fx->n_tensors; i++)
                total += ((size_t)fx->t[i].numel * lz_test_fx_dtype_size(fx->t[i].dtype) + 7) & ~(size_t)7;
            fx->data = malloc(total ? total : 1);
            if (!fx->data) {
                snprintf(err, errlen, "%s: out of memory", path);
                lz_test_fx_free(fx);
                return -1;
            }
            char *q = fx->data;
            for (int i = 0; i < fx->n_tensors; i++) {
                size_t nb = (size_t)fx->t[i].numel * lz_test_fx_dtype_size(fx->t[i].dtype);
                if ((size_t)(end - p) < nb) {
                    snprintf(err, errlen, "%s: data ends inside tensor %s", path, fx->t[i].name);
                    lz_test_fx_free(fx);
                    return -1;
                }
                memcpy(q, p, nb);
                fx->t[i].data = q;
                q += (nb + 7) & ~(size_t)7;
                p += nb;
            }
            if (p != end) {
                snprintf(err, errlen, "%s: %ld bytes after the last tensor", path, (long)(end - p));
                lz_test_fx_free(fx);
                return -1;
            }
            return 0;
        } else {
            goto bad;
        }
    }
    snprintf(err, errlen, "%s: %s", path, got_magic ? "no data line" : "not a lazyc fixture");
    lz_test_fx_free(fx);
    return -1;
bad:
    snprintf(err, errlen, "%s:%d: malformed header line", path, line_no);
    lz_test_fx_free(fx);
    return -1;
}

static inline const lz_test_fx_tensor *lz_test_fx_get(const lz_test_fx *fx, const char *name)
{
    for (int i = 0; i < fx->n_tensors; i++)
        if (!strcmp(fx->t[i].name, name)) return &fx->t[i];
    return NULL;
}

static inline const lz_test_fx_attr *lz_test_fx_attr_get(const lz_test_fx *fx, const char *key)
{
    for (int i = 0; i < fx->n_attrs; i++)
        if (!strcmp(fx->a[i].key, key)) return &fx->a[i];
    return NULL;
}

/* First value of an integer attribute, or dflt when absent. */
static inline int64_t lz_test_fx_int(const lz_test_fx *fx, const char *key, int64_t dflt)
{
    const lz_test_fx_attr *a = lz_test_fx_attr_get(fx, key);
    return a && a->n > 0 ? a->i[0] : dflt;
}

static inline double lz_test_fx_float(const lz_test_fx *fx, const char *key, double dflt)
{
    const lz_test_fx_attr *a = lz_test_fx_attr_get(fx, key);
    return a && a->n > 0 ? a->f[0] : dflt;
}

/* A new lazyc data tensor with the fixture tensor's values. */
static inline lz_tensor *lz_test_fx_to_lz(const lz_test_fx_tensor *t)
{
    return lz_from_host(t->data, t->dtype, t->ndim, t->shape);
}

/* Address of element off of t's data (to feed one batch of a stacked
   tensor). */
static inline const void *lz_test_fx_data_at(const lz_test_fx_tensor *t, int64_t off)
{
    return (const char *)t->data + (size_t)off * lz_test_fx_dtype_size(t->dtype);
}

/* Reads INDEX of dir: up to max case file names into names (each malloc'ed);
   returns the count, or -1. */
static inline int lz_test_fx_index(const char *dir, char **names, int max)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/INDEX", dir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) names[n++] = strdup(line);
    }
    fclose(f);
    return n;
}

/* The fixture directory: $LZ_FIXTURES, else "fixtures" (ctest runs the
   tests in tests/). */
static inline const char *lz_test_fx_dir(void)
{
    const char *d = getenv("LZ_FIXTURES");
    return d && d[0] ? d : "fixtures";
}

#endif
