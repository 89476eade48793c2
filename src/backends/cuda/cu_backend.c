/* The CUDA backend (issue 46): liblazyc_cuda.so, loaded by the registry
 * (backend/registry.c) on lz_device_use("cuda"), LZ_DEVICE=cuda or
 * --device cuda. It implements the contract of backend/backend.h on one
 * NVIDIA GPU:
 *
 *  - device memory from the device's stream-ordered pool (cudaMallocAsync
 *    on the one stream: a freed block is reused only by work queued after
 *    the free, as the contract asks);
 *  - every call on one stream, the contract's in-order queue; to_host
 *    alone waits; host-to-device copies go through pinned staging so the
 *    caller's buffer is free on return and the copy is queued, never
 *    waited for (cu_staging.c);
 *  - programs planned step by step (plan.c, f_*.c, codegen.c), the plan's
 *    generated element-wise source compiled by NVRTC at prepare time and
 *    cached on disk (nvrtc_cache.c), products through cuBLASLt and
 *    convolutions through cuDNN (cu_matmul.c, cu_conv.c);
 *  - an executable's runs from the second on replayed as one CUDA graph
 *    launch (cu_graph.c).
 *
 * It links nothing of liblazyc: settings, errors and counters come in the
 * host table. With no GPU, or no driver, lz_backend_open refuses with
 * "no CUDA device: <the runtime's reason>". */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cu_runtime.h"
#include "backends/cuda/nvrtc_cache.h"
#include "base/settings.h"

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

static lz_backend table;

/* what lz_backend_open says when the runtime finds no usable GPU */
static const char *no_device(cudaError_t e)
{
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    const char *why = lz_cu_msg("no CUDA device: %s (%s)%s", cudaGetErrorString(e), cudaGetErrorName(e),
                                driver ? "" : "; the NVIDIA driver's libcuda.so.1 is not installed");
    if (driver) dlclose(driver);
    return why;
}

static void close_device(void)
{
    lz_cu_libraries_close();
    lz_cu_staging_free();
    if (lz_cu.status) cudaFreeHost(lz_cu.status);
    if (lz_cu.read_done) cudaEventDestroy(lz_cu.read_done);
    if (lz_cu.capture) cudaStreamDestroy(lz_cu.capture);
    if (lz_cu.stream) cudaStreamDestroy(lz_cu.stream);
    lz_cu.status = NULL;
    lz_cu.stream = lz_cu.capture = NULL;
    lz_cu.read_done = NULL;
}

static const char *open_device(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return no_device(e);
    if (n == 0) return "no CUDA device: the driver reports none";
    const int dev = (int)lz_cu.host->setting_int(LZ_SETTING_CUDA_DEVICE);
    if (dev >= n) return lz_cu_msg("no CUDA device %d: the driver reports %d (LZ_CUDA_DEVICE)", dev, n);
    int major = 0, minor = 0;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&lz_cu.sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
        return no_device(e);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        snprintf(lz_cu.name, sizeof lz_cu.name, "%s", prop.name);
        lz_cu.total_bytes = prop.totalGlobalMem;
    }
    lz_cu.device = dev;
    lz_cu.arch = major * 10 + minor;
    if (lz_cu.arch < 70)
        return lz_cu_msg("no CUDA device lazyc can use: %s is sm_%d, the kernels need sm_70 or later", lz_cu.name,
                         lz_cu.arch);
    const char *why = NULL;
    uint64_t keep = UINT64_MAX;   /* freed memory stays in the pool until lz_shutdown trims it */
    if ((e = cudaStreamCreateWithFlags(&lz_cu.stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&lz_cu.capture, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&lz_cu.read_done, cudaEventDisableTiming)) != cudaSuccess)
        why = lz_cu_err("creating streams", e);
    else if ((e = cudaDeviceGetDefaultMemPool(&lz_cu.pool, dev)) != cudaSuccess ||
             (e = cudaMemPoolSetAttribute(lz_cu.pool, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess)
        why = lz_cu_err("setting up the memory pool", e);
    else if ((e = cudaHostAlloc((void **)&lz_cu.status, sizeof *lz_cu.status, cudaHostAllocMapped)) != cudaSuccess ||
             (e = cudaHostGetDevicePointer((void **)&lz_cu.status_dev, lz_cu.status, 0)) != cudaSuccess)
        why = lz_cu_err("allocating the status word", e);
    if (!why) {
        memset(lz_cu.status, 0, sizeof *lz_cu.status);
        why = lz_cu_staging_init((size_t)lz_cu.host->setting_int(LZ_SETTING_CUDA_STAGING_MIB) << 20);
    }
    if (!why) why = lz_cu_libraries_open();
    if (why) close_device();
    return why;
}

__attribute__((visibility("default")))
const char *lz_backend_open(const lz_backend_host *host, const lz_backend **out)
{
    if (!host || host->abi != LZ_BACKEND_ABI || host->size < sizeof *host || !host->set_error ||
        !host->setting_int || !host->setting_text || !host->count_launches)
        return "liblazyc_cuda.so was built for another version of the backend contract";
    if (table.name) {   /* opened before in this process */
        *out = &table;
        return NULL;
    }
    lz_cu.host = host;
    lz_cu.tf32 = host->setting_int(LZ_SETTING_CUDA_TF32) != 0;
    lz_cu.graphs = host->setting_int(LZ_SETTING_CUDA_GRAPHS) != 0;
    lz_cu.graph_copy_bytes = (size_t)host->setting_int(LZ_SETTING_CUDA_GRAPH_COPY_MIB) << 20;
    lz_cu.use_cache = host->setting_int(LZ_SETTING_CUDA_CACHE) != 0 &&
                      lz_cu_cache_dir(lz_cu.cache_dir, sizeof lz_cu.cache_dir) == 0;
    const char *why = open_device();
    if (why) return why;
    table = (lz_backend){
        .name = "cuda",
        .alloc = lz_cu_alloc, .free = lz_cu_free,
        .to_device = lz_cu_to_device, .to_host = lz_cu_to_host, .copy = lz_cu_device_copy,
        .fill = lz_cu_fill, .fill_random = lz_cu_fill_random, .to_bf16 = lz_cu_to_bf16,
        .prepare = lz_cu_prepare, .run = lz_cu_run, .ready = lz_cu_ready, .release = lz_cu_release,
        .trim = lz_cu_trim,
    };
    *out = &table;
    return NULL;
}
