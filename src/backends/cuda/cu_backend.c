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
 *  - programs planned step by step (plan.c, planner.c, f_*.c, codegen.c),
 *    the plan's generated element-wise source compiled by NVRTC at
 *    prepare time and cached on disk (nvrtc_cache.c), products through
 *    cuBLASLt and convolutions through cuDNN (cu_matmul.c, cu_conv.c);
 *  - an executable's runs from the second on replayed as one CUDA graph
 *    launch (cu_graph.c).
 *
 * This file opens and closes the device and fills the contract's table;
 * what every file uses (the device's state, messages, family modules and
 * launches) is cu_runtime.c's.
 *
 * It links nothing of liblazyc: settings, errors and counters come in the
 * host table. With no GPU, or no driver, lz_backend_open refuses with
 * "no CUDA device: <the runtime's reason>". */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cu_runtime.h"
#include "backends/cuda/nvrtc_cache.h"
#include "base/settings.h"

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
