/* 2-d pooling (NCHW) as torch: max_pool2d, avg_pool2d and
 * adaptive_avg_pool2d, with torch's output sizes (ceil_mode included) and
 * its shape checks. Each backward is one *_GRAD op; max pool's recomputes
 * the argmax from x rather than keeping indices, so the forward stays one
 * output and the gradient needs no integer tensor. */
#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

/* iattr layout of the pool ops (see ir/ir.h). */
enum { A_KH, A_KW, A_SH, A_SW, A_PH, A_PW, A_CEIL, A_COUNT_PAD, N_ATTR };

/* torch's pooling_output_shape (dilation 1): with ceil_mode the last window
   must still start inside the input or its left padding. */
static int64_t pool_extent(int64_t in, int k, int s, int p, int ceil_mode)
{
    int64_t num = in + 2 * (int64_t)p - k + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

static int pool_grad(const lz_ag *ag, lz_tensor *g, lz_tensor **gin, lz_op op)
{
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    lz_tensor *in[2] = {x, g};
    /* max pool's gradient reads x (argmax); the averages need g alone */
    if (op == LZ_OP_MAX_POOL2D_GRAD)
        gin[0] = lz_record(op, LZ_F32, 4, lz_t_shape(x), 2, in, &ag->attrs);
    else
        gin[0] = lz_record(op, LZ_F32, 4, lz_t_shape(x), 1, &in[1], &ag->attrs);
    return gin[0] ? 0 : -1;
}

static int max_pool_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return pool_grad(ag, g, gin, LZ_OP_MAX_POOL2D_GRAD);
}

static int avg_pool_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return pool_grad(ag, g, gin, LZ_OP_AVG_POOL2D_GRAD);
}

static int adaptive_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g, lz_tensor **gin)
{
    (void)out;
    return pool_grad(ag, g, gin, LZ_OP_ADAPTIVE_AVG_POOL2D_GRAD);
}

static int require_nchw(const char *name, lz_tensor *x)
{
    if (lz_check_operands(name, 1, &x)) return -1;
    if (!lz_require_f32(name, x)) return -1;
    if (lz_t_ndim(x) != 4) {
        char s[96];
        return lz_errorf_int("%s: input %s must be 4-d [N, C, H, W]", name,
                             lz_shape_str(s, lz_t_ndim(x), lz_t_shape(x)));
    }
    return 0;
}

static lz_tensor *pool(const char *name, lz_op op, lz_backward_fn bw, lz_tensor *x,
                       lz_pool2d_opts o, int avg)
{
    if (require_nchw(name, x)) return NULL;
    char sx[96];
    const int64_t *xs = lz_t_shape(x);
    lz_shape_str(sx, 4, xs);
    int k[2] = {o.kernel[0], o.kernel[1]}, s[2], p[2] = {o.padding[0], o.padding[1]};
    for (int i = 0; i < 2; i++) {
        s[i] = o.stride[i] ? o.stride[i] : k[i];
        if (k[i] <= 0 || s[i] < 0 || p[i] < 0)
            return lz_errorf("%s: input %s: kernel (%d, %d) must be positive, stride (%d, %d) "
                             "and padding (%d, %d) not negative", name, sx, o.kernel[0],
                             o.kernel[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1]);
        /* torch's rule: a window must always hold at least one real input */
        if (p[i] > k[i] / 2)
            return lz_errorf("%s: input %s: padding (%d, %d) must be at most half the kernel "
                             "(%d, %d)", name, sx, p[0], p[1], k[0], k[1]);
    }
    int64_t oh = pool_extent(xs[2], k[0], s[0], p[0], o.ceil_mode);
    int64_t ow = pool_extent(xs[3], k[1], s[1], p[1], o.ceil_mode);
    if (oh < 1 || ow < 1)
        return lz_errorf("%s: input %s: the kernel (%d x %d) is larger than the padded input "
                         "(%lld x %lld, padding %d x %d)", name, sx, k[0], k[1],
                         (long long)(xs[2] + 2 * p[0]), (long long)(xs[3] + 2 * p[1]), p[0], p[1]);
    lz_attrs at = {.n_iattr = avg ? N_ATTR : N_ATTR - 1,
                   .iattr = {k[0], k[1], s[0], s[1], p[0], p[1], o.ceil_mode != 0,
                             avg ? o.count_include_pad != 0 : 0}};
    int64_t shape[4] = {xs[0], xs[1], oh, ow};
    lz_tensor *y = lz_record(op, LZ_F32, 4, shape, 1, &x, &at);
    lz_ag_attach(y, name, bw, 1, &x, &at);
    return y;
}

lz_tensor *lz_max_pool2d(lz_tensor *x, lz_pool2d_opts opts)
{
    return pool("lz_max_pool2d", LZ_OP_MAX_POOL2D, max_pool_backward, x, opts, 0);
}

lz_tensor *lz_avg_pool2d(lz_tensor *x, lz_pool2d_opts opts)
{
    return pool("lz_avg_pool2d", LZ_OP_AVG_POOL2D, avg_pool_backward, x, opts, 1);
}

lz_tensor *lz_adaptive_avg_pool2d(lz_tensor *x, int out_h, int out_w)
{
    if (require_nchw("lz_adaptive_avg_pool2d", x)) return NULL;
    if (out_h < 1 || out_w < 1) {
        char sx[96];
        return lz_errorf("lz_adaptive_avg_pool2d: input %s: output size (%d, %d) must be "
                         "positive", lz_shape_str(sx, 4, lz_t_shape(x)), out_h, out_w);
    }
    const int64_t *xs = lz_t_shape(x);
    if (xs[2] < 1 || xs[3] < 1) {
        char sx[96];
        return lz_errorf("lz_adaptive_avg_pool2d: input %s has an empty spatial extent",
                         lz_shape_str(sx, 4, xs));
    }
    int64_t shape[4] = {xs[0], xs[1], out_h, out_w};
    lz_tensor *y = lz_record(LZ_OP_ADAPTIVE_AVG_POOL2D, LZ_F32, 4, shape, 1, &x, NULL);
    lz_ag_attach(y, "lz_adaptive_avg_pool2d", adaptive_backward, 1, &x, NULL);
    return y;
}
