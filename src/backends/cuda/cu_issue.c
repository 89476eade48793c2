/* A plan's actions issued on a stream (kernel launches, copies, zeroing,
 * the libraries' calls): eagerly for a run kernel by kernel (cu_exec.c),
 * or into a CUDA graph being captured (cu_graph.c). */
#include <string.h>

#include "backends/cuda/cu_runtime.h"

static void *scratch_of(const lz_program *p, int i, void *arena)
{
    if (!p->instrs[i].scratch_bytes || !arena) return NULL;
    const uintptr_t at = (uintptr_t)arena + p->instrs[i].scratch_offset;
    return (void *)((at + 255) / 256 * 256);
}

static const char *step_error(const lz_program *p, int i, const char *why)
{
    return lz_cu_msg("%s (step %d, %s)", why, i, lz_op_name((lz_op)p->instrs[i].op));
}

const char *lz_cu_issue(const lz_cu_plan *pl, const void *const *kernels, void *const *ptrs, void *arena,
                        cudaStream_t s, int64_t *launches)
{
    const lz_program *p = pl->prog;
    int kn = 0;
    _Alignas(16) unsigned char args[LZ_CU_ARGS_MAX];
    for (int i = 0; i < p->n_instrs; i++) {
        const lz_cu_instr *st = &pl->instrs[i];
        void *scratch = scratch_of(p, i, arena);
        for (int k = 0; k < st->n_act; k++) {
            const lz_cu_action *a = &st->act[k];
            cudaError_t e = cudaSuccess;
            const char *why = NULL;
            switch (a->kind) {
            case LZ_CU_LAUNCH: {
                const lz_cu_launch *l = a->u.launch;
                memcpy(args, l->args, l->args_bytes);
                for (uint32_t j = 0; j < l->n_patch; j++) {
                    void *addr = lz_cu_addr(l->patch_ref[j], ptrs, scratch);
                    memcpy(args + l->patch_at[j], &addr, sizeof addr);
                }
                void *params[1] = {args};
                e = cudaLaunchKernel(kernels[kn++], lz_cu_dim3(l->grid), lz_cu_dim3(l->block), params, l->smem, s);
                break;
            }
            case LZ_CU_COPY: {
                const lz_cu_copy *c = &a->u.copy;
                void *dst = lz_cu_addr(c->dst, ptrs, scratch);
                const void *src = lz_cu_addr(c->src, ptrs, scratch);
                if (dst == src) break;   /* a reshape onto its own memory */
                e = c->height == 1 ? cudaMemcpyAsync(dst, src, c->width, cudaMemcpyDeviceToDevice, s)
                                   : cudaMemcpy2DAsync(dst, c->dpitch, src, c->spitch, c->width, c->height,
                                                       cudaMemcpyDeviceToDevice, s);
                break;
            }
            case LZ_CU_ZERO:
                e = cudaMemsetAsync(lz_cu_addr(a->u.copy.dst, ptrs, scratch), 0, a->u.copy.width, s);
                break;
            case LZ_CU_MATMUL: why = lz_cu_matmul_run(a->u.matmul, ptrs, scratch, s); break;
            case LZ_CU_CONV: why = lz_cu_conv_run(a->u.conv, ptrs, scratch, s); break;
            default: why = "cuda: an action of no kind"; break;
            }
            if (e != cudaSuccess) why = lz_cu_err("issuing the step's work", e);
            if (why) return step_error(p, i, why);
            (*launches)++;
        }
    }
    return NULL;
}
