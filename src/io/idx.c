/* IDX files (the MNIST family's format), gzip-compressed or plain:
 * 0x00 0x00, a type byte (0x08: unsigned bytes), a dimension count, the
 * dimensions as big-endian u32, then the data. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/error.h"
#include "io/dataset.h"

/* Reads exactly n bytes; returns 0, or -1 when the file ends early. */
static int read_all(gzFile f, void *dst, size_t n)
{
    char *p = dst;
    while (n) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        int got = gzread(f, p, chunk);
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* Reads one IDX file of unsigned bytes with want_ndim dimensions. */
static int read_idx(const char *path, int want_ndim, int64_t *dims, uint8_t **data)
{
    gzFile f = gzopen(path, "rb");
    if (!f) return lz_errorf_int("%s: cannot open the file", path);
    unsigned char head[4];
    if (read_all(f, head, 4)) { gzclose(f); return lz_errorf_int("%s: truncated: no IDX header", path); }
    if (head[0] || head[1] || head[2] != 0x08 || head[3] != want_ndim) {
        gzclose(f);
        return lz_errorf_int("%s: bad magic number 0x%02x%02x%02x%02x (want 0x000008%02x: unsigned bytes, %d dimensions)",
                             path, head[0], head[1], head[2], head[3], want_ndim, want_ndim);
    }
    uint64_t total = 1;
    for (int d = 0; d < want_ndim; d++) {
        unsigned char b[4];
        if (read_all(f, b, 4)) { gzclose(f); return lz_errorf_int("%s: truncated in the dimensions", path); }
        dims[d] = (int64_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
        if (dims[d] <= 0 || dims[d] > (1 << 28)) {
            gzclose(f);
            return lz_errorf_int("%s: dimension %d is %lld", path, d, (long long)dims[d]);
        }
        total *= (uint64_t)dims[d];
    }
    if (total > ((uint64_t)1 << 34)) { gzclose(f); return lz_errorf_int("%s: %llu elements is too many", path, (unsigned long long)total); }
    /* The buffer grows as data arrives rather than trusting the header: a
       corrupt 20-byte file must not make us allocate 16 GiB first. */
    uint64_t have = 0, cap = total < (1u << 20) ? total : (1u << 20);
    *data = malloc(cap ? cap : 1);
    int short_read = 0;
    while (*data && !short_read && have < total) {
        if (have == cap) {
            cap = cap * 2 < total ? cap * 2 : total;
            uint8_t *grown = realloc(*data, cap);
            if (!grown) { free(*data); *data = NULL; break; }
            *data = grown;
        }
        short_read = read_all(f, *data + have, cap - have) != 0;
        have = cap;
    }
    if (!*data) { gzclose(f); return lz_errorf_int("%s: out of memory for %llu bytes", path, (unsigned long long)total); }
    if (short_read) {
        free(*data);
        gzclose(f);
        return lz_errorf_int("%s: truncated: the header promises %llu bytes of data", path, (unsigned long long)total);
    }
    char extra;
    int more = gzread(f, &extra, 1);
    int zerr;
    char zmsg[128];   /* gzerror's string dies with gzclose */
    snprintf(zmsg, sizeof zmsg, "%s", gzerror(f, &zerr));
    gzclose(f);
    if (more > 0 || zerr < 0) {
        free(*data);
        return more > 0 ? lz_errorf_int("%s: %s after the data the header promises", path, "bytes remain")
                        : lz_errorf_int("%s: corrupt compressed data (%s)", path, zmsg);
    }
    return 0;
}

lz_dataset *lz_dataset_idx(const char *images_path, const char *labels_path)
{
    if (!images_path || !labels_path) return lz_errorf("lz_dataset_idx: a path is NULL");
    lz_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return lz_errorf("lz_dataset_idx: out of memory");
    int64_t idims[3] = {0}, ldims[1] = {0};
    if (read_idx(images_path, 3, idims, &ds->images)) { free(ds); return NULL; }
    if (read_idx(labels_path, 1, ldims, &ds->labels)) { free(ds->images); free(ds); return NULL; }
    if (idims[0] != ldims[0]) {
        lz_dataset_free(ds);
        return lz_errorf("%s has %lld images but %s has %lld labels", images_path, (long long)idims[0],
                         labels_path, (long long)ldims[0]);
    }
    ds->n = idims[0];
    ds->h = idims[1];
    ds->w = idims[2];
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->labels[i] > 99) {
            int bad = ds->labels[i];   /* read before the free, not after */
            lz_dataset_free(ds);
            return lz_errorf("%s: label %lld is %d, not a class index", labels_path, (long long)i, bad);
        }
    return ds;
}

lz_dataset *lz_dataset_fashion_mnist(const char *dir, int train)
{
    if (!dir) return lz_errorf("lz_dataset_fashion_mnist: directory is NULL");
    char img[4096], lab[4096];
    const char *split = train ? "train" : "t10k";
    snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    FILE *probe = fopen(img, "rb");
    if (!probe) return lz_errorf("%s: no Fashion-MNIST images here (install dataset-fashion-mnist or pass --data-dir)", img);
    fclose(probe);
    return lz_dataset_idx(img, lab);
}

int64_t lz_dataset_size(const lz_dataset *ds)
{
    return ds ? ds->n : lz_errorf_int("lz_dataset_size: data set is NULL");
}

void lz_dataset_image_shape(const lz_dataset *ds, int64_t shape[3])
{
    if (!shape) {
        lz_errorf("lz_dataset_image_shape: shape is NULL");
        return;
    }
    if (!ds) lz_errorf("lz_dataset_image_shape: data set is NULL");
    shape[0] = 1;
    shape[1] = ds ? ds->h : 0;
    shape[2] = ds ? ds->w : 0;
}

int lz_dataset_truncate(lz_dataset *ds, int64_t n)
{
    if (!ds) return lz_errorf_int("lz_dataset_truncate: data set is NULL");
    if (n < 0 || n > ds->n)
        return lz_errorf_int("lz_dataset_truncate: %lld is outside [0, %lld]", (long long)n, (long long)ds->n);
    ds->n = n;
    return 0;
}

void lz_dataset_free(lz_dataset *ds)
{
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    free(ds);
}
