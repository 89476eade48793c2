/* Convolutions through cuDNN (the plan: f_conv.c), NCHW, in all three
 * directions, with cuDNN's legacy convolution calls (still in cuDNN 9).
 *
 * float32 is float32: CUDNN_FMA_MATH, and an algorithm that uses TF32
 * tensor cores only when LZ_CUDA_TF32=1 (CUDNN_DEFAULT_MATH); autocast's
 * bf16 operands run on the tensor cores (CUDNN_TENSOR_OP_MATH) with
 * float32 accumulation into a bf16 result, widened to float32 by the
 * plan's next action (cuDNN's legacy calls have no mixed-precision
 * output). The algorithm is the first of cuDNN's heuristics (_v7) that
 * fits the math and WORKSPACE_MAX; its workspace joins the step's scratch. */
#include <cudnn.h>
#include <stdlib.h>

#include "backends/cuda/cu_runtime.h"

#define WORKSPACE_MAX ((size_t)1 << 30)

typedef struct loaded {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    int algo;
} loaded;

static const char *dnn_fail(const char *what, cudnnStatus_t st)
{
    return lz_cu_msg("cuda: cuDNN %s: %s", what, cudnnGetErrorString(st));
}

void lz_cu_conv_unload(lz_cu_conv *c)
{
    loaded *d = c->loaded;
    if (!d) return;
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->c) cudnnDestroyConvolutionDescriptor(d->c);
    free(d);
    c->loaded = NULL;
}

static int fits(int bf16, cudnnMathType_t math)
{
    /* strict float32 takes no tensor-core (TF32) algorithm */
    return bf16 || lz_cu.tf32 || math != CUDNN_TENSOR_OP_MATH;
}

const char *lz_cu_conv_load(lz_cu_conv *c, lz_cu_instr *st)
{
    loaded *d = calloc(1, sizeof *d);
    if (!d) return "cuda: out of host memory";
    c->loaded = d;
    cudnnHandle_t h = (cudnnHandle_t)lz_cu.dnn_prepare;
    const cudnnDataType_t dt = c->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const cudnnMathType_t math = c->bf16 ? CUDNN_TENSOR_OP_MATH : lz_cu.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&d->x);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->y);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&d->w);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d->c);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dt, (int)c->x[0], (int)c->x[1], (int)c->x[2], (int)c->x[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, dt, (int)c->y[0], (int)c->y[1], (int)c->y[2], (int)c->y[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetFilter4dDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, (int)c->w[0], (int)c->w[1], (int)c->w[2], (int)c->w[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolution2dDescriptor(d->c, c->pad[0], c->pad[1], c->stride[0], c->stride[1], c->dil[0],
                                            c->dil[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(d->c, c->groups);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(d->c, math);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail("descriptors", s);
    enum { MAX_ALGOS = 16 };
    int found = 0, chosen = -1;
    size_t ws = 0;
    cudnnMathType_t chosen_math = math;
    if (c->dir == LZ_CU_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[MAX_ALGOS];
        s = cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->c, d->y, MAX_ALGOS, &found, perf);
        for (int k = 0; s == CUDNN_STATUS_SUCCESS && k < found && chosen < 0; k++)
            if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WORKSPACE_MAX && fits(c->bf16, perf[k].mathType)) {
                chosen = (int)perf[k].algo;
                chosen_math = perf[k].mathType;
            }
        if (chosen >= 0 && (s = cudnnSetConvolutionMathType(d->c, chosen_math)) == CUDNN_STATUS_SUCCESS)
            s = cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->c, d->y, (cudnnConvolutionFwdAlgo_t)chosen, &ws);
    } else if (c->dir == LZ_CU_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ALGOS];
        s = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->c, d->x, MAX_ALGOS, &found, perf);
        for (int k = 0; s == CUDNN_STATUS_SUCCESS && k < found && chosen < 0; k++)
            if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WORKSPACE_MAX && fits(c->bf16, perf[k].mathType)) {
                chosen = (int)perf[k].algo;
                chosen_math = perf[k].mathType;
            }
        if (chosen >= 0 && (s = cudnnSetConvolutionMathType(d->c, chosen_math)) == CUDNN_STATUS_SUCCESS)
            s = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->c, d->x,
                                                             (cudnnConvolutionBwdDataAlgo_t)chosen, &ws);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ALGOS];
        s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->c, d->w, MAX_ALGOS, &found, perf);
        for (int k = 0; s == CUDNN_STATUS_SUCCESS && k < found && chosen < 0; k++)
            if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WORKSPACE_MAX && fits(c->bf16, perf[k].mathType)) {
                chosen = (int)perf[k].algo;
                chosen_math = perf[k].mathType;
            }
        if (chosen >= 0 && (s = cudnnSetConvolutionMathType(d->c, chosen_math)) == CUDNN_STATUS_SUCCESS)
            s = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->c, d->w,
                                                               (cudnnConvolutionBwdFilterAlgo_t)chosen, &ws);
    }
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail("choosing an algorithm", s);
    if (chosen < 0)
        return lz_cu_msg("cuda: cuDNN offers no %s algorithm for this convolution%s", c->bf16 ? "bf16" : "float32",
                         c->bf16 || lz_cu.tf32 ? "" : " without TF32 (LZ_CUDA_TF32=1 allows it)");
    d->algo = chosen;
    c->workspace_bytes = ws;
    c->workspace = (lz_cu_ref){LZ_CU_REF_SCRATCH, ws ? lz_cu_step_take(st, ws) : 0};
    return NULL;
}

const char *lz_cu_conv_run(const lz_cu_conv *c, void *const *ptrs, void *scratch, cudaStream_t strm)
{
    const loaded *d = c->loaded;
    cudnnHandle_t h = (cudnnHandle_t)lz_cu.dnn_run;
    cudnnStatus_t s = cudnnSetStream(h, strm);   /* the stream, or a graph's capture */
    const float one = 1.0f, zero = 0.0f;
    const void *in0 = lz_cu_addr(c->in0, ptrs, scratch), *in1 = lz_cu_addr(c->in1, ptrs, scratch);
    void *out = c->staged.value == LZ_CU_REF_NONE ? lz_cu_addr(c->out, ptrs, scratch) : lz_cu_addr(c->staged, ptrs, scratch);
    void *ws = c->workspace_bytes ? lz_cu_addr(c->workspace, ptrs, scratch) : NULL;
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail("setting the stream", s);
    if (c->dir == LZ_CU_CONV_FWD)   /* (x, w) -> y */
        s = cudnnConvolutionForward(h, &one, d->x, in0, d->w, in1, d->c, (cudnnConvolutionFwdAlgo_t)d->algo, ws,
                                    c->workspace_bytes, &zero, d->y, out);
    else if (c->dir == LZ_CU_CONV_BWD_DATA)   /* (g, w) -> x */
        s = cudnnConvolutionBackwardData(h, &one, d->w, in1, d->y, in0, d->c, (cudnnConvolutionBwdDataAlgo_t)d->algo,
                                         ws, c->workspace_bytes, &zero, d->x, out);
    else   /* (x, g) -> w */
        s = cudnnConvolutionBackwardFilter(h, &one, d->x, in0, d->y, in1, d->c,
                                           (cudnnConvolutionBwdFilterAlgo_t)d->algo, ws, c->workspace_bytes, &zero,
                                           d->w, out);
    return s == CUDNN_STATUS_SUCCESS ? NULL : dnn_fail("convolution", s);
}
