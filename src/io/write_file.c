/* lz_write_file: a whole buffer written durably (base/durable.h). */
#include "lazyc.h"
#include "base/durable.h"
#include "base/error.h"

int lz_write_file(const char *path, const void *data, size_t nbytes)
{
    static const char fn[] = "lz_write_file";
    if (!path) return lz_errorf_int("%s: path is NULL", fn);
    if (!data && nbytes) return lz_errorf_int("%s: %s: data is NULL", fn, path);
    lz_durable d;
    if (lz_durable_open(&d, fn, path) != 0) return -1;
    if (nbytes && fwrite(data, 1, nbytes, d.f) != nbytes) return lz_durable_write_failed(&d, fn, path);
    return lz_durable_commit(&d, fn, path);
}
