/* The rules of ReLU and hardtanh and their gradients, one element at a
 * time: the element-wise kernels, the hardtanh kernels and the batch-norm
 * kernels that fold an activation in (compile/fuse_bn_act.c) all call
 * these, so a folded activation gives bitwise what the separate kernel
 * gives. Written without branches on the data (& rather than &&, the
 * gradient passed in already loaded), so loops over them vectorise. */
#ifndef LZ_CPU_ACTIVATION_H
#define LZ_CPU_ACTIVATION_H

/* x < 0 ? 0 : x keeps NaN, as torch.relu does */
static inline float relu_1(float x) { return x < 0 ? 0.0f : x; }

static inline float relu_grad_1(float x, float g) { return x > 0 ? g : 0.0f; }

/* NaN passes through, as in torch */
static inline float hardtanh_1(float x, float lo, float hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* torch's rule: the gradient is 0 at the bounds as well as outside */
static inline float hardtanh_grad_1(float x, float g, float lo, float hi)
{
    const int inside = (x > lo) & (x < hi);
    return inside ? g : 0.0f;
}

#endif
