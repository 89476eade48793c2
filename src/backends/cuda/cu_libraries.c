/* The libraries' handles: cuBLASLt's, and two of cuDNN's (a cuDNN handle
 * is not for two threads at once: the recording thread chooses algorithms
 * with one while the executor thread runs convolutions with the other). */
#include <cublasLt.h>
#include <cudnn.h>

#include "backends/cuda/cu_runtime.h"

const char *lz_cu_libraries_open(void)
{
    cublasLtHandle_t lt = NULL;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return "cuda: cuBLASLt could not start";
    lz_cu.lt = lt;
    cudnnHandle_t a = NULL, b = NULL;
    cudnnStatus_t s = cudnnCreate(&a);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreate(&b);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(a, lz_cu.stream);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(b, lz_cu.stream);
    lz_cu.dnn_prepare = a;
    lz_cu.dnn_run = b;
    return s == CUDNN_STATUS_SUCCESS ? NULL : lz_cu_msg("cuda: cuDNN could not start: %s", cudnnGetErrorString(s));
}

void lz_cu_libraries_close(void)
{
    if (lz_cu.dnn_prepare) cudnnDestroy((cudnnHandle_t)lz_cu.dnn_prepare);
    if (lz_cu.dnn_run) cudnnDestroy((cudnnHandle_t)lz_cu.dnn_run);
    if (lz_cu.lt) cublasLtDestroy((cublasLtHandle_t)lz_cu.lt);
    lz_cu.dnn_prepare = lz_cu.dnn_run = lz_cu.lt = NULL;
}
