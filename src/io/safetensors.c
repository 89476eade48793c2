/* safetensors files: an 8-byte little-endian header length, a JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {string: string}}, then the raw little-endian data, with
 * offsets relative to the end of the header. Loading validates the whole
 * header and every name, dtype and shape before it changes any tensor, so
 * a failed load leaves the parameters as they were. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "base/error.h"
#include "base/durable.h"
#include "io/json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this file copies it as host order"
#endif

/* The reference implementation refuses headers above 100 MB; so do we, so
   that a garbage length cannot make us allocate gigabytes. */
#define MAX_HEADER (100u * 1000u * 1000u)

/* ---- dtypes ---------------------------------------------------------- */

typedef enum { ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_OTHER } st_kind;

typedef struct st_dtype {
    const char *name;
    int size;
    st_kind kind;
} st_dtype;

/* Every dtype the format defines, so that a file with one we do not read
   gets "not supported", and a misspelt one gets "unknown". */
static const st_dtype dtypes[] = {
    { "F32", 4, ST_F32 },  { "F16", 2, ST_F16 },  { "BF16", 2, ST_BF16 },
    { "I64", 8, ST_I64 },  { "I32", 4, ST_I32 },  { "F64", 8, ST_OTHER },
    { "I16", 2, ST_OTHER }, { "I8", 1, ST_OTHER }, { "U8", 1, ST_OTHER },
    { "U16", 2, ST_OTHER }, { "U32", 4, ST_OTHER }, { "U64", 8, ST_OTHER },
    { "BOOL", 1, ST_OTHER }, { "F8_E4M3", 1, ST_OTHER }, { "F8_E5M2", 1, ST_OTHER },
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

static const st_dtype *find_dtype(const char *name)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
    return NULL;
}

/* The lazyc dtype a file dtype loads as; F16 widens exactly, and BF16
   too unless keep_bf16. */
static lz_dtype lz_kind(st_kind k, int keep_bf16)
{
    return k == ST_I64 ? LZ_I64 : k == ST_I32 ? LZ_I32 : k == ST_BF16 && keep_bf16 ? LZ_BF16 : LZ_F32;
}

static const char *st_name(lz_dtype d)
{
    return d == LZ_I64 ? "I64" : d == LZ_I32 ? "I32" : d == LZ_BF16 ? "BF16" : "F32";
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, u;
    if (exp == 0x1F) {
        u = sign | 0x7F800000u | (man << 13);
    } else if (exp) {
        u = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man) {
        /* subnormal half: renormalise into a normal float */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3FF) << 13);
    } else {
        u = sign;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- reading a file's header ----------------------------------------- */

typedef struct st_entry {
    const char *name;        /* points into the parsed header */
    const st_dtype *dtype;
    int ndim;
    int64_t shape[LZ_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

typedef struct st_file {
    const char *fn, *path;   /* calling function and file, for messages */
    FILE *f;
    uint64_t data_start, data_size;
    lz_json *header;
    const lz_json *meta;     /* __metadata__ or NULL */
    st_entry *e;
    int n;
} st_file;

static void st_close(st_file *s)
{
    if (s->f) fclose(s->f);
    lz_json_free(s->header);
    free(s->e);
    s->f = NULL;
    s->header = NULL;
    s->e = NULL;
}

static int st_fail(st_file *s, const char *what)
{
    lz_errorf_int("%s: %s: %s", s->fn, s->path, what);
    st_close(s);
    return -1;
}

#define ST_FAILF(s, ...) do { char m_[400]; snprintf(m_, sizeof m_, __VA_ARGS__); \
    return st_fail(s, m_); } while (0)

static int by_begin(const void *a, const void *b)
{
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int parse_entry(st_file *s, const char *name, const lz_json *v, st_entry *e)
{
    char shp[96];
    e->name = name;
    if (v->type != LZ_JSON_OBJECT) ST_FAILF(s, "bad header: tensor '%s' is not a JSON object", name);
    const lz_json *dt = lz_json_get(v, "dtype"), *sh = lz_json_get(v, "shape"),
                  *off = lz_json_get(v, "data_offsets");
    if (!dt || dt->type != LZ_JSON_STRING)
        ST_FAILF(s, "bad header: tensor '%s' has no \"dtype\" string", name);
    if (!sh || sh->type != LZ_JSON_ARRAY)
        ST_FAILF(s, "bad header: tensor '%s' has no \"shape\" array", name);
    if (!off || off->type != LZ_JSON_ARRAY || off->n != 2 || !off->items[0].is_int
        || !off->items[1].is_int || off->items[0].i < 0 || off->items[1].i < 0)
        ST_FAILF(s, "bad header: tensor '%s' needs \"data_offsets\": [begin, end] of two "
                 "non-negative integers", name);
    e->dtype = find_dtype(dt->str);
    if (!e->dtype) ST_FAILF(s, "tensor '%s' has unknown dtype '%s'", name, dt->str);
    if (sh->n > LZ_MAX_DIMS)
        ST_FAILF(s, "tensor '%s' has %d dimensions; lazyc supports at most %d", name, sh->n, LZ_MAX_DIMS);
    e->ndim = sh->n;
    uint64_t bytes = (uint64_t)e->dtype->size;
    for (int d = 0; d < sh->n; d++) {
        const lz_json *x = &sh->items[d];
        if (!x->is_int || x->i < 0)
            ST_FAILF(s, "bad header: tensor '%s' has a shape entry that is not a non-negative integer", name);
        e->shape[d] = x->i;
        if (x->i && bytes > (UINT64_C(1) << 62) / (uint64_t)x->i)
            ST_FAILF(s, "bad header: tensor '%s' has an impossibly large shape", name);
        bytes *= (uint64_t)x->i;
    }
    e->begin = (uint64_t)off->items[0].i;
    e->end = (uint64_t)off->items[1].i;
    if (e->end < e->begin)
        ST_FAILF(s, "bad header: tensor '%s' has data_offsets [%llu, %llu] with end before begin",
                 name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > s->data_size)
        ST_FAILF(s, "tensor '%s': data_offsets [%llu, %llu] run past the %llu data bytes of the "
                 "file (truncated file or bad header)", name, (unsigned long long)e->begin,
                 (unsigned long long)e->end, (unsigned long long)s->data_size);
    if (e->end - e->begin != bytes)
        ST_FAILF(s, "bad header: tensor '%s' (%s %s) needs %llu bytes but data_offsets [%llu, %llu] "
                 "span %llu", name, e->dtype->name, lz_shape_str(shp, e->ndim, e->shape),
                 (unsigned long long)bytes, (unsigned long long)e->begin,
                 (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    return 0;
}

/* Opens path and validates its header completely: on success every entry
   lies inside the file, has a known dtype and a size that matches its
   shape, and no two entries overlap. */
static int st_open(st_file *s, const char *fn, const char *path)
{
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->path = path ? path : "(null)";
    if (!path) return st_fail(s, "path is NULL");
    s->f = fopen(path, "rb");
    if (!s->f) ST_FAILF(s, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(s->f), &st) != 0) ST_FAILF(s, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return st_fail(s, "not a regular file");
    uint64_t size = (uint64_t)st.st_size;
    unsigned char lenbuf[8];
    if (size < 8 || fread(lenbuf, 1, 8, s->f) != 8)
        ST_FAILF(s, "file is %llu bytes, too short for the 8-byte header length (truncated?)",
                 (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    if (hlen > size - 8)
        ST_FAILF(s, "header length %llu is larger than the rest of the file (%llu bytes): truncated "
                 "or not a safetensors file", (unsigned long long)hlen, (unsigned long long)(size - 8));
    if (hlen > MAX_HEADER)
        ST_FAILF(s, "header length %llu is over the format's limit of %u bytes",
                 (unsigned long long)hlen, MAX_HEADER);
    char *text = malloc(hlen ? hlen : 1);
    if (!text) return st_fail(s, "out of memory reading the header");
    if (fread(text, 1, hlen, s->f) != hlen) {
        free(text);
        return st_fail(s, "read error in the header");
    }
    char jerr[160];
    s->header = lz_json_parse(text, hlen, jerr, sizeof jerr);
    free(text);
    if (!s->header) ST_FAILF(s, "bad header: not JSON (%s)", jerr);
    if (s->header->type != LZ_JSON_OBJECT) return st_fail(s, "bad header: not a JSON object");
    s->data_start = 8 + hlen;
    s->data_size = size - 8 - hlen;

    const lz_json *h = s->header;
    s->e = calloc((size_t)(h->n ? h->n : 1), sizeof *s->e);
    if (!s->e) return st_fail(s, "out of memory");
    for (int i = 0; i < h->n; i++) {
        if (strcmp(h->keys[i], "__metadata__") == 0) {
            const lz_json *m = &h->items[i];
            if (m->type != LZ_JSON_OBJECT) return st_fail(s, "bad header: __metadata__ is not an object");
            for (int k = 0; k < m->n; k++)
                if (m->items[k].type != LZ_JSON_STRING)
                    ST_FAILF(s, "bad header: __metadata__ value of '%s' is not a string", m->keys[k]);
            s->meta = m;
            continue;
        }
        if (parse_entry(s, h->keys[i], &h->items[i], &s->e[s->n])) return -1;
        s->n++;
    }

    st_entry **order = malloc(sizeof *order * (size_t)(s->n ? s->n : 1));
    if (!order) return st_fail(s, "out of memory");
    for (int i = 0; i < s->n; i++) order[i] = &s->e[i];
    qsort(order, (size_t)s->n, sizeof *order, by_begin);
    const st_entry *prev = NULL;
    for (int i = 0; i < s->n; i++) {
        const st_entry *e = order[i];
        if (e->begin == e->end) continue;
        /* the reference implementation refuses bytes that belong to no
           tensor: between two tensors, before the first or after the last */
        const uint64_t from = prev ? prev->end : 0;
        if (e->begin > from) {
            char m[400];
            snprintf(m, sizeof m, "bad header: data bytes [%llu, %llu] %s%s%s belong to no tensor",
                     (unsigned long long)from, (unsigned long long)e->begin,
                     prev ? "after tensor '" : "before the first tensor", prev ? prev->name : "",
                     prev ? "'" : "");
            free(order);
            return st_fail(s, m);
        }
        if (prev && e->begin < prev->end) {
            char m[400];
            snprintf(m, sizeof m, "bad header: data of tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] "
                     "overlap", prev->name, (unsigned long long)prev->begin,
                     (unsigned long long)prev->end, e->name, (unsigned long long)e->begin,
                     (unsigned long long)e->end);
            free(order);
            return st_fail(s, m);
        }
        prev = e;
    }
    free(order);
    const uint64_t end = prev ? prev->end : 0;
    if (end < s->data_size)
        ST_FAILF(s, "%llu bytes after the last tensor's data (at %llu of %llu data bytes) belong to "
                 "no tensor: not a safetensors file, or written over a longer one",
                 (unsigned long long)(s->data_size - end), (unsigned long long)end,
                 (unsigned long long)s->data_size);
    return 0;
}

static const st_entry *st_find(const st_file *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->e[i].name, name) == 0) return &s->e[i];
    return NULL;
}

static int64_t entry_numel(const st_entry *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

/* Reads e's data, widened to its lazyc dtype (BF16 kept as it is with
   keep_bf16), into out (numel * lazyc dtype size bytes); raw is scratch of
   at least the on-disk size. */
static int st_read_entry(st_file *s, const st_entry *e, void *out, void *raw, int keep_bf16)
{
    uint64_t nbytes = e->end - e->begin;
    int widen = (e->dtype->kind == ST_BF16 && !keep_bf16) || e->dtype->kind == ST_F16;
    void *dst = widen ? raw : out;
    if (nbytes) {
        if (fseeko(s->f, (off_t)(s->data_start + e->begin), SEEK_SET) != 0
            || fread(dst, 1, nbytes, s->f) != nbytes)
            ST_FAILF(s, "tensor '%s': read of %llu bytes failed (file truncated while reading?)",
                     e->name, (unsigned long long)nbytes);
    }
    if (widen) {
        int64_t n = entry_numel(e);
        const uint16_t *h = raw;
        float *f = out;
        if (e->dtype->kind == ST_BF16)
            for (int64_t i = 0; i < n; i++) f[i] = lz_bf16_to_f32(h[i]);
        else
            for (int64_t i = 0; i < n; i++) f[i] = f16_to_f32(h[i]);
    }
    return 0;
}

static int check_readable(st_file *s, const st_entry *e)
{
    if (e->dtype->kind == ST_OTHER)
        ST_FAILF(s, "tensor '%s' has dtype %s, which lazyc does not read (it reads F32, F16, BF16, "
                 "I64, I32)", e->name, e->dtype->name);
    return 0;
}

/* ---- loading into a set, reading a set -------------------------------- */

int lz_safetensors_load(const char *path, lz_params *p, int strict)
{
    static const char fn[] = "lz_safetensors_load";
    if (!p) return lz_errorf_int("%s: %s: parameter set is NULL", fn, path ? path : "(null)");
    st_file s;
    if (st_open(&s, fn, path)) return -1;
    int np = lz_params_count(p);
    const st_entry **match = calloc((size_t)(np ? np : 1), sizeof *match);
    unsigned char *used = calloc((size_t)(s.n ? s.n : 1), 1);
    int rc = 0;
    uint64_t max_out = 1, max_raw = 1;
    char m[400];
    if (!match || !used) {
        snprintf(m, sizeof m, "out of memory");
        goto fail;
    }
    int missing = 0;
    const char *first_missing = NULL;
    for (int i = 0; i < np; i++) {
        const char *name = lz_params_name(p, i);
        lz_tensor *t = lz_params_at(p, i);
        const st_entry *e = st_find(&s, name);
        if (!e) {
            if (!missing++) first_missing = name;
            continue;
        }
        used[e - s.e] = 1;
        if (check_readable(&s, e)) { rc = -1; goto out; }
        char a[96], b[96];
        int64_t shape[LZ_MAX_DIMS];
        int nd = lz_ndim(t);
        for (int d = 0; d < nd; d++) shape[d] = lz_dim(t, d);
        const int keep = lz_tensor_dtype(t) == LZ_BF16;
        if (lz_kind(e->dtype->kind, keep) != lz_tensor_dtype(t)) {
            snprintf(m, sizeof m, "tensor '%s' is %s in the file but %s in the parameters", name,
                     e->dtype->name, lz_dtype_name(lz_tensor_dtype(t)));
            goto fail;
        }
        if (nd != e->ndim || memcmp(shape, e->shape, sizeof *shape * (size_t)nd) != 0) {
            snprintf(m, sizeof m, "tensor '%s' has shape %s in the file but %s in the parameters",
                     name, lz_shape_str(a, e->ndim, e->shape), lz_shape_str(b, nd, shape));
            goto fail;
        }
        match[i] = e;
        uint64_t ob = (uint64_t)entry_numel(e) * lz_dtype_size(lz_tensor_dtype(t));
        if (ob > max_out) max_out = ob;
        if (e->end - e->begin > max_raw) max_raw = e->end - e->begin;
    }
    if (strict && missing) {
        snprintf(m, sizeof m, "tensor '%s' is missing from the file (%d missing in all; strict load)",
                 first_missing, missing);
        goto fail;
    }
    if (strict) {
        int extra = 0;
        const char *first_extra = NULL;
        for (int i = 0; i < s.n; i++)
            if (!used[i] && !extra++) first_extra = s.e[i].name;
        if (extra) {
            snprintf(m, sizeof m, "tensor '%s' in the file is not in the parameters (%d extra in "
                     "all; strict load)", first_extra, extra);
            goto fail;
        }
    }

    void *out = malloc(max_out), *raw = malloc(max_raw);
    if (!out || !raw) {
        free(out);
        free(raw);
        snprintf(m, sizeof m, "out of memory (%llu bytes)", (unsigned long long)(max_out + max_raw));
        goto fail;
    }
    for (int i = 0; i < np && rc == 0; i++) {
        if (!match[i]) continue;
        lz_tensor *t = lz_params_at(p, i);
        if (st_read_entry(&s, match[i], out, raw, lz_tensor_dtype(t) == LZ_BF16)) { rc = -1; break; }
        size_t nb = (size_t)entry_numel(match[i]) * lz_dtype_size(lz_tensor_dtype(t));
        if (lz_copy_from_host(t, out, nb)) {
            snprintf(m, sizeof m, "tensor '%s': %s", match[i]->name, lz_last_error());
            free(out);
            free(raw);
            goto fail;
        }
    }
    free(out);
    free(raw);
    goto out;
fail:
    st_fail(&s, m);
    rc = -1;
out:
    free(match);
    free(used);
    st_close(&s);
    return rc;
}

static lz_params *read_all(const char *fn, const char *path, int keep_bf16)
{
    st_file s;
    if (st_open(&s, fn, path)) return NULL;
    uint64_t max_out = 1, max_raw = 1;
    for (int i = 0; i < s.n; i++) {
        if (check_readable(&s, &s.e[i])) return NULL;
        uint64_t ob = (uint64_t)entry_numel(&s.e[i]) * lz_dtype_size(lz_kind(s.e[i].dtype->kind, keep_bf16));
        if (ob > max_out) max_out = ob;
        if (s.e[i].end - s.e[i].begin > max_raw) max_raw = s.e[i].end - s.e[i].begin;
    }
    lz_params *p = lz_params_new();
    void *out = malloc(max_out), *raw = malloc(max_raw);
    if (!p || !out || !raw) {
        free(out);
        free(raw);
        lz_params_free(p);
        st_fail(&s, "out of memory");
        return NULL;
    }
    for (int i = 0; i < s.n; i++) {
        const st_entry *e = &s.e[i];
        if (st_read_entry(&s, e, out, raw, keep_bf16)) goto fail;
        lz_tensor *t = lz_from_host(out, lz_kind(e->dtype->kind, keep_bf16), e->ndim, e->shape);
        if (!lz_params_add(p, e->name, t, 0)) {
            char m[400];
            snprintf(m, sizeof m, "tensor '%s': %s", e->name, lz_last_error());
            st_fail(&s, m);
            goto fail;
        }
    }
    free(out);
    free(raw);
    st_close(&s);
    return p;
fail:
    free(out);
    free(raw);
    lz_params_free(p);
    return NULL;
}

lz_params *lz_safetensors_read(const char *path)
{
    return read_all("lz_safetensors_read", path, 0);
}

lz_params *lz_safetensors_read_bf16(const char *path)
{
    return read_all("lz_safetensors_read_bf16", path, 1);
}

char *lz_safetensors_read_meta(const char *path, const char *key)
{
    static const char fn[] = "lz_safetensors_read_meta";
    st_file s;
    if (!key) return lz_errorf("%s: %s: key is NULL", fn, path ? path : "(null)");
    if (st_open(&s, fn, path)) return NULL;
    const lz_json *v = lz_json_get(s.meta, key);
    if (!v) {
        char m[400];
        snprintf(m, sizeof m, "no __metadata__ entry '%s'", key);
        st_fail(&s, m);
        return NULL;
    }
    char *copy = malloc(v->str_len + 1);
    if (copy) memcpy(copy, v->str, v->str_len + 1);
    st_close(&s);
    return copy ? copy : lz_errorf("%s: out of memory", fn);
}

/* ---- writing ---------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) { b->oom = 1; return; }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void put_json_string(sbuf *b, const char *s)
{
    puts_(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(b, esc, 6);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    puts_(b, "\"");
}

int lz_safetensors_save_meta(const char *path, const lz_params *p, int n_meta,
                             const char *const *keys, const char *const *values)
{
    static const char fn[] = "lz_safetensors_save";
    const char *pname = path ? path : "(null)";
    if (!path || !p) return lz_errorf_int("%s: %s: %s is NULL", fn, pname, path ? "parameter set" : "path");
    if (n_meta < 0 || (n_meta > 0 && (!keys || !values)))
        return lz_errorf_int("%s: %s: bad metadata list (n_meta = %d)", fn, pname, n_meta);
    for (int i = 0; i < n_meta; i++)
        if (!keys[i] || !values[i])
            return lz_errorf_int("%s: %s: metadata entry %d has a NULL key or value", fn, pname, i);
    int n = lz_params_count(p);
    lz_tensor **ts = malloc(sizeof *ts * (size_t)(n ? n : 1));
    if (!ts) return lz_errorf_int("%s: %s: out of memory", fn, pname);
    for (int i = 0; i < n; i++) {
        ts[i] = lz_params_at(p, i);
        if (strcmp(lz_params_name(p, i), "__metadata__") == 0) {
            free(ts);
            return lz_errorf_int("%s: %s: a tensor cannot be named '__metadata__'", fn, pname);
        }
    }
    /* One graph for every pending tensor, not one per lz_to_host. */
    if (lz_sync(ts, n, 1)) {
        free(ts);
        return lz_errorf_int("%s: %s: computing the tensors failed: %s", fn, pname, lz_last_error());
    }

    sbuf h = {0};
    puts_(&h, "{");
    if (n_meta) {
        puts_(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) puts_(&h, ",");
            put_json_string(&h, keys[i]);
            puts_(&h, ":");
            put_json_string(&h, values[i]);
        }
        puts_(&h, "}");
    }
    uint64_t off = 0;
    size_t max_bytes = 1;
    for (int i = 0; i < n; i++) {
        char num[64];
        if (i || n_meta) puts_(&h, ",");
        put_json_string(&h, lz_params_name(p, i));
        puts_(&h, ":{\"dtype\":\"");
        puts_(&h, st_name(lz_tensor_dtype(ts[i])));
        puts_(&h, "\",\"shape\":[");
        for (int d = 0; d < lz_ndim(ts[i]); d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)lz_dim(ts[i], d));
            puts_(&h, num);
        }
        size_t nb = (size_t)lz_numel(ts[i]) * lz_dtype_size(lz_tensor_dtype(ts[i]));
        if (nb > max_bytes) max_bytes = nb;
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nb));
        puts_(&h, num);
        off += nb;
    }
    puts_(&h, "}");
    /* Pad with spaces (valid JSON) so the data starts 8-byte aligned, as
       the reference writer does. */
    while ((8 + h.n) % 8) puts_(&h, " ");
    void *data = malloc(max_bytes);
    if (h.oom || !data) {
        free(h.s);
        free(data);
        free(ts);
        return lz_errorf_int("%s: %s: out of memory", fn, pname);
    }
    /* Written beside the target, fsync'd and renamed over it (durable.h):
       a crash or a full disk mid-save never costs the previous checkpoint. */
    int rc = 0;
    lz_durable out;
    if (lz_durable_open(&out, fn, path) != 0) {
        rc = -1;
        goto done;
    }
    unsigned char lenbuf[8];
    uint64_t hl = h.n;
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(hl >> (8 * i));
    int ok = fwrite(lenbuf, 1, 8, out.f) == 8 && fwrite(h.s, 1, h.n, out.f) == h.n;
    for (int i = 0; ok && i < n; i++) {
        size_t nb = (size_t)lz_numel(ts[i]) * lz_dtype_size(lz_tensor_dtype(ts[i]));
        if (lz_to_host(ts[i], data, nb)) {
            rc = lz_errorf_int("%s: %s: tensor '%s': %s", fn, pname, lz_params_name(p, i), lz_last_error());
            ok = 0;
            break;
        }
        ok = fwrite(data, 1, nb, out.f) == nb;
    }
    if (!ok && rc) lz_durable_abort(&out);   /* rc: the tensor's error, kept */
    else if (!ok) rc = lz_durable_write_failed(&out, fn, pname);
    else rc = lz_durable_commit(&out, fn, path);
done:
    free(h.s);
    free(data);
    free(ts);
    return rc;
}

int lz_safetensors_save(const char *path, const lz_params *p)
{
    return lz_safetensors_save_meta(path, p, 0, NULL, NULL);
}
