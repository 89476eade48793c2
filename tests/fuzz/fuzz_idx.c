/* libFuzzer harness for the IDX reader and the loader behind it.
 *
 * Input: a flags byte, the image file's length (2 bytes, little-endian,
 * clamped to what is left), the image file, then the label file. Flags bit
 * 0 / bit 1: the harness gzips the image / label file first (so mutations
 * reach the parser behind valid compression too; a seed that is already a
 * .gz file reaches the decompressor); bits 2-3: batch size - 1; bit 4:
 * shuffle; bit 5: drop_last. Checked on top of the sanitizers: a failure
 * sets lz_last_error(), and an accepted data set yields exactly its
 * examples through the loader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "lazyc.h"
#include "fuzz_util.h"

static fuzz_file idx_img, idx_lab;

static void idx_die(const char *what)
{
    fprintf(stderr, "fuzz_idx: %s (last error: %s)\n", what, lz_last_error() ? lz_last_error() : "none");
    abort();
}

/* Writes data to f, gzip-compressed when gz. */
static void idx_put(fuzz_file *f, const uint8_t *data, size_t n, int gz)
{
    if (!gz) {
        fuzz_file_set(f, data, n);
        return;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) idx_die("deflateInit2");
    uLong cap = deflateBound(&z, (uLong)n) + 32;
    uint8_t *out = malloc(cap);
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) idx_die("deflate");
    fuzz_file_set(f, out, z.total_out);
    deflateEnd(&z);
    free(out);
}

static void idx_walk(lz_dataset *ds, unsigned flags)
{
    int64_t n = lz_dataset_size(ds), shape[3];
    lz_dataset_image_shape(ds, shape);
    if (n <= 0 || shape[0] != 1 || shape[1] <= 0 || shape[2] <= 0) idx_die("an accepted data set has a bad size");
    lz_clear_error();
    if (lz_dataset_truncate(ds, n + 1) == 0) idx_die("truncate grew the data set");
    fuzz_expect_error("lz_dataset_truncate");
    if (n > 1 && lz_dataset_truncate(ds, n - 1) != 0) idx_die("truncate failed");
    n = lz_dataset_size(ds);

    lz_loader_opts o = {.batch = (int64_t)(flags >> 2 & 3) + 1, .shuffle = (int)(flags >> 4 & 1),
                        .drop_last = (int)(flags >> 5 & 1), .seed = flags, .mean = 0.5f, .std = 0.25f};
    lz_loader *l = lz_loader_new(ds, o);
    if (!l) idx_die("lz_loader_new failed on an accepted data set");
    int64_t want = o.drop_last ? n / o.batch * o.batch : n, seen = 0;
    if (lz_loader_start_epoch(l, 0) != 0) idx_die("lz_loader_start_epoch failed");
    for (;;) {
        lz_tensor *x = NULL, *y = NULL;
        int rc = lz_loader_next(l, &x, &y);
        if (rc < 0) idx_die("lz_loader_next failed");
        if (rc == 0) break;
        int64_t b = lz_dim(x, 0);
        if (lz_ndim(x) != 4 || lz_dim(x, 2) != shape[1] || lz_dim(x, 3) != shape[2] || lz_dim(y, 0) != b)
            idx_die("a batch has the wrong shape");
        seen += b;
        int64_t *labels = malloc(sizeof *labels * (size_t)b);
        if (lz_to_host(y, labels, sizeof *labels * (size_t)b) != 0) idx_die("labels cannot be read");
        free(labels);
        lz_free(x);
        lz_free(y);
    }
    if (seen != want) idx_die("the loader did not yield every example once");
    lz_loader_free(l);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_open(&idx_img, "fuzz_idx_images");
    fuzz_file_open(&idx_lab, "fuzz_idx_labels");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (idx_img.path[0] == '\0') LLVMFuzzerInitialize(NULL, NULL);
    if (size < 3) return 0;
    unsigned flags = data[0];
    size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    if (ilen > size) ilen = size;
    idx_put(&idx_img, data, ilen, flags & 1);
    idx_put(&idx_lab, data + ilen, size - ilen, flags & 2);

    lz_clear_error();
    lz_dataset *ds = lz_dataset_idx(idx_img.path, idx_lab.path);
    if (!ds) {
        fuzz_expect_error("lz_dataset_idx");
        return 0;
    }
    idx_walk(ds, flags);
    lz_dataset_free(ds);
    lz_wait();
    return 0;
}
