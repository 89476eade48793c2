/* What every file of the CUDA backend uses (cu_runtime.h): the one
 * device's state (lz_cu), messages, the family modules and their kernels
 * (compiled by NVRTC on first use), family launches, and the status word
 * kernels report bad data to. It calls no other cu_*.c file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cuda/cu_runtime.h"
#include "backends/cuda/nvrtc_cache.h"

lz_cu_device lz_cu = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local char message[1024];
static _Thread_local int bound;

void lz_cu_bind_thread(void)
{
    if (bound) return;
    bound = 1;
    if (lz_cu.device) cudaSetDevice(lz_cu.device);
}

const char *lz_cu_msg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return message;
}

const char *lz_cu_err(const char *what, cudaError_t e)
{
    return lz_cu_msg("cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

const char *lz_cu_errf(cudaError_t e, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return lz_cu_err(what, e);
}

cudaLibrary_t lz_cu_module(int module, const char **why)
{
    pthread_mutex_lock(&lz_cu.mu);
    cudaLibrary_t lib = lz_cu.modules[module];
    if (!lib) {
        const char *file = lz_cu_module_file(module), *src = lz_cu_source_text(file);
        char err[1024];
        lz_cu_image img = {0};
        if (!src) {
            *why = lz_cu_msg("cuda: no embedded source %s", file ? file : "(none)");
        } else if (lz_cu_compile(file, src, lz_cu.arch, lz_cu_module_option(module),
                                 lz_cu.use_cache ? lz_cu.cache_dir : NULL, &img, err, sizeof err)) {
            *why = lz_cu_msg("%s", err);
        } else {
            cudaError_t e = cudaLibraryLoadData(&lib, img.data, NULL, NULL, 0, NULL, NULL, 0);
            if (e != cudaSuccess) {
                lib = NULL;
                *why = lz_cu_errf(e, "loading %s's cubin (sm_%d)", file, lz_cu.arch);
            }
            lz_cu.modules[module] = lib;
        }
        free(img.data);
    }
    pthread_mutex_unlock(&lz_cu.mu);
    return lib;
}

const void *lz_cu_kernel(cudaLibrary_t lib, const char *name, const char **why)
{
    cudaKernel_t k = NULL;
    cudaError_t e = cudaLibraryGetKernel(&k, lib, name);
    if (e != cudaSuccess) {
        *why = lz_cu_errf(e, "no kernel %s", name);
        return NULL;
    }
    /* a cudaKernel_t is launched by cudaLaunchKernel as its function */
    return (const void *)k;
}

const char *lz_cu_launch_family(int module, const char *kernel, const void *args, int64_t threads)
{
    lz_cu_bind_thread();
    const char *why = NULL;
    cudaLibrary_t lib = lz_cu_module(module, &why);
    const void *k = lib ? lz_cu_kernel(lib, kernel, &why) : NULL;
    if (!k) return why;
    if (threads <= 0) return NULL;
    void *params[1] = {(void *)args};
    cudaError_t e = cudaLaunchKernel(k, lz_cu_dim3(lz_cu_grid(threads, LZ_CU_BLOCK)), lz_cu_dim3(LZ_CU_BLOCK), params,
                                     0, lz_cu.stream);
    if (e != cudaSuccess) return lz_cu_errf(e, "launching %s", kernel);
    lz_cu.host->count_launches(0, 1);
    return NULL;
}

const char *lz_cu_status_take(void)
{
    volatile lz_cu_status *st = lz_cu.status;
    if (!st || st->code <= 0) return NULL;
    pthread_mutex_lock(&lz_cu.mu);
    const char *msg = NULL;
    const long long what = st->what, value = st->value, limit = st->limit;
    /* the CPU backend's messages (k_linalg.c, k_nn.c), found on the device */
    switch (st->code) {
    case LZ_CU_BAD_TARGET:
        msg = lz_cu_msg("lz_cross_entropy: target[%lld] = %lld is out of range for %lld classes", what, value,
                        limit);
        break;
    case LZ_CU_BAD_EMBEDDING:
    case LZ_CU_BAD_EMBEDDING_GRAD:
        msg = lz_cu_msg("%s: index %lld (element %lld of the indices) is out of range for a weight of %lld rows",
                        st->code == LZ_CU_BAD_EMBEDDING ? "lz_embedding" : "lz_embedding (backward)", value, what,
                        limit);
        break;
    case LZ_CU_BAD_TARGET_EX:
    case LZ_CU_BAD_TARGET_EX_IGNORE:
        msg = lz_cu_msg("lz_cross_entropy_ex: target[%lld] = %lld is out of range for %lld classes%s", what, value,
                        limit, st->code == LZ_CU_BAD_TARGET_EX_IGNORE ? " and is not ignore_index" : "");
        break;
    case LZ_CU_BAD_GATHER:
    case LZ_CU_BAD_SCATTER:
        msg = lz_cu_msg("%s: index %lld (element %lld of the indices) is out of range for an axis of %lld",
                        st->code == LZ_CU_BAD_GATHER ? "lz_gather" : "lz_scatter_add", value, what, limit);
        break;
    default:
        msg = st->code > 0 ? lz_cu_msg("cuda: a kernel reported bad data (code %d)", st->code) : NULL;
        break;
    }
    if (msg) st->code = 0;
    pthread_mutex_unlock(&lz_cu.mu);
    return msg;
}
