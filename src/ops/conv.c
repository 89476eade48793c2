/* 2-d convolution (NCHW), as torch.nn.functional.conv2d: stride, padding,
 * dilation and groups. The op records CONV2D on (x, w); a bias is a
 * broadcast add of b viewed as [1, O, 1, 1], so its gradient is the add's
 * ordinary reduction and the compiler may fuse it with what follows.
 * The transposed convolution is the same three products with the roles
 * of the forward and the input gradient exchanged. */
#include "autograd/autograd.h"
#include "base/error.h"
#include "base/product.h"
#include "ops/ops_util.h"

/* iattr layout of CONV2D and its gradients (see ir/ir.h). */
enum { A_SH, A_SW, A_PH, A_PW, A_DH, A_DW, A_GROUPS, N_ATTR };

/* The gradients of out = conv(x, w) or, transposed, of out = the input
   gradient of a convolution whose output gradient x is (x then plays the
   convolution's output, out its input: x's gradient is that convolution's
   forward of g, w's its weight gradient of (g, x)). Under autocast x and w
   are bf16: both gradient products then take the incoming gradient as
   bf16 too (one cast, shared) and give f32. */
static int products_backward(const lz_ag *ag, lz_tensor *g32, lz_tensor **gin, int transposed)
{
    lz_tensor *x = ag->in[0], *w = ag->in[1];
    lz_tensor *g = lz_t_dtype(x) == LZ_BF16 ? lz_cast(g32, LZ_BF16) : lz_same_value(g32);
    if (!g) return -1;
    int rc = 0;
    if (lz_needs_grad(x)) {
        lz_tensor *in[2] = {g, w};
        gin[0] = lz_record(transposed ? LZ_OP_CONV2D : LZ_OP_CONV2D_GRAD_INPUT, LZ_F32, 4, lz_t_shape(x),
                           2, in, &ag->attrs);
        if (!gin[0]) rc = -1;
    }
    if (rc == 0 && lz_needs_grad(w)) {
        lz_tensor *in[2] = {transposed ? g : x, transposed ? x : g};
        gin[1] = lz_record(LZ_OP_CONV2D_GRAD_WEIGHT, LZ_F32, 4, lz_t_shape(w), 2, in, &ag->attrs);
        if (!gin[1]) rc = -1;
    }
    lz_free(g);
    return rc;
}

static int conv_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g32, lz_tensor **gin)
{
    (void)out;
    return products_backward(ag, g32, gin, 0);
}

static int conv_transpose_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g32, lz_tensor **gin)
{
    (void)out;
    return products_backward(ag, g32, gin, 1);
}

/* Output extent of one spatial axis, or -1 when the dilated kernel does not
   fit in the padded input. */
static int64_t out_extent(int64_t in, int64_t k, int s, int p, int d)
{
    int64_t span = (int64_t)d * (k - 1) + 1;
    if (span > in + 2 * (int64_t)p) return -1;
    return (in + 2 * (int64_t)p - span) / s + 1;
}

/* Autocast's dtype for the product of a valid step (output shape y):
   bf16, unless the backend runs this shape faster in float32 (on the CPU,
   by its rules or as measured: backends/cpu/product_choice.c). */
static lz_dtype conv_dtype(lz_tensor *x, lz_tensor *w, const int64_t *xs, const int64_t *y,
                           const int *stride, const int *pad, const int *dil, int groups)
{
    int64_t d[LZ_CONV_DIMS];
    for (int k = 0; k < 4; k++) {
        d[LZ_CONV_X + k] = xs[k];
        d[LZ_CONV_W + k] = lz_t_shape(w)[k];
        d[LZ_CONV_Y + k] = y[k];
    }
    for (int k = 0; k < 2; k++) {
        d[LZ_CONV_STRIDE + k] = stride[k];
        d[LZ_CONV_PAD + k] = pad[k];
        d[LZ_CONV_DIL + k] = dil[k];
    }
    d[LZ_CONV_GROUPS] = groups;
    return lz_product_choice(x, w, LZ_OP_CONV2D, LZ_CONV_DIMS, d);
}

/* y + b viewed as [1, O, 1, 1] (y is taken; b may be NULL). */
static lz_tensor *with_bias(lz_tensor *y, lz_tensor *b, int64_t O)
{
    if (!y || !b) return y;
    int64_t bs[4] = {1, O, 1, 1};
    lz_tensor *b4 = lz_reshape(b, 4, bs);
    lz_tensor *r = b4 ? lz_add(y, b4) : NULL;
    lz_free(b4);
    lz_free(y);
    return r;
}

lz_tensor *lz_conv2d(lz_tensor *x, lz_tensor *w, lz_tensor *b, lz_conv2d_opts o)
{
    lz_tensor *in[2] = {x, w};
    if (lz_check_operands("lz_conv2d", 2, in)) return NULL;
    if (!lz_require_float("lz_conv2d", x) || !lz_require_float("lz_conv2d", w)) return NULL;
    if (b && !lz_require_f32("lz_conv2d", b)) return NULL;
    char sx[96], sw[96], sb[96];
    lz_shape_str(sx, lz_t_ndim(x), lz_t_shape(x));
    lz_shape_str(sw, lz_t_ndim(w), lz_t_shape(w));
    if (lz_t_ndim(x) != 4 || lz_t_ndim(w) != 4)
        return lz_errorf("lz_conv2d: input %s and weight %s: both must be 4-d "
                         "(input [N, C, H, W], weight [O, C/groups, KH, KW])", sx, sw);
    int sh = o.stride[0] ? o.stride[0] : 1, swd = o.stride[1] ? o.stride[1] : 1;
    int dh = o.dilation[0] ? o.dilation[0] : 1, dw = o.dilation[1] ? o.dilation[1] : 1;
    int groups = o.groups ? o.groups : 1;
    if (sh < 0 || swd < 0 || dh < 0 || dw < 0 || o.padding[0] < 0 || o.padding[1] < 0 || groups < 0)
        return lz_errorf("lz_conv2d: negative stride (%d, %d), padding (%d, %d), dilation "
                         "(%d, %d) or groups %d", o.stride[0], o.stride[1], o.padding[0],
                         o.padding[1], o.dilation[0], o.dilation[1], o.groups);
    const int64_t *xs = lz_t_shape(x), *ws = lz_t_shape(w);
    int64_t C = xs[1], O = ws[0];
    if (C % groups || O % groups)
        return lz_errorf("lz_conv2d: input %s and weight %s: %d groups must divide both the "
                         "input channels (%lld) and the output channels (%lld)",
                         sx, sw, groups, (long long)C, (long long)O);
    if (ws[1] * groups != C)
        return lz_errorf("lz_conv2d: input %s and weight %s: channel mismatch: the weight "
                         "takes %lld input channels per group x %d groups = %lld, the input "
                         "has %lld", sx, sw, (long long)ws[1], groups,
                         (long long)(ws[1] * groups), (long long)C);
    if (ws[2] < 1 || ws[3] < 1)
        return lz_errorf("lz_conv2d: weight %s has an empty kernel", sw);
    int64_t oh = out_extent(xs[2], ws[2], sh, o.padding[0], dh);
    int64_t ow = out_extent(xs[3], ws[3], swd, o.padding[1], dw);
    if (oh < 0 || ow < 0)
        return lz_errorf("lz_conv2d: input %s and weight %s: the kernel (%lld x %lld, "
                         "dilation %d x %d) is larger than the padded input (%lld x %lld, "
                         "padding %d x %d)", sx, sw,
                         (long long)((ws[2] - 1) * dh + 1), (long long)((ws[3] - 1) * dw + 1),
                         dh, dw, (long long)(xs[2] + 2 * o.padding[0]),
                         (long long)(xs[3] + 2 * o.padding[1]), o.padding[0], o.padding[1]);
    if (b && (lz_t_ndim(b) != 1 || lz_t_shape(b)[0] != O))
        return lz_errorf("lz_conv2d: bias %s does not match the weight %s: expected [%lld]",
                         lz_shape_str(sb, lz_t_ndim(b), lz_t_shape(b)), sw, (long long)O);
    int64_t shape[4] = {xs[0], O, oh, ow};
    const int stride[2] = {sh, swd}, dil[2] = {dh, dw};
    const lz_dtype pd = conv_dtype(x, w, lz_t_shape(x), shape, stride, o.padding, dil, groups);
    if (lz_t_dtype(x) != pd || lz_t_dtype(w) != pd) {   /* autocast: the step on its operands' casts */
        lz_tensor *x2 = lz_product_operand(x, pd), *w2 = lz_product_operand(w, pd);
        lz_tensor *r = x2 && w2 ? lz_conv2d(x2, w2, b, o) : NULL;
        lz_free(x2);
        lz_free(w2);
        return r;
    }

    lz_attrs at = {.n_iattr = N_ATTR,
                   .iattr = {sh, swd, o.padding[0], o.padding[1], dh, dw, groups}};
    lz_tensor *y = lz_record(LZ_OP_CONV2D, LZ_F32, 4, shape, 2, in, &at);
    lz_ag_attach(y, "lz_conv2d", conv_backward, 2, in, &at);
    return with_bias(y, b, O);
}

lz_tensor *lz_conv_transpose2d(lz_tensor *x, lz_tensor *w, lz_tensor *b, lz_conv2d_opts o,
                               const int *output_padding)
{
    const char *op = "lz_conv_transpose2d";
    lz_tensor *in[2] = {x, w};
    if (lz_check_operands(op, 2, in)) return NULL;
    if (!lz_require_float(op, x) || !lz_require_float(op, w)) return NULL;
    if (b && !lz_require_f32(op, b)) return NULL;
    char sx[96], sw[96], sb[96];
    lz_shape_str(sx, lz_t_ndim(x), lz_t_shape(x));
    lz_shape_str(sw, lz_t_ndim(w), lz_t_shape(w));
    if (lz_t_ndim(x) != 4 || lz_t_ndim(w) != 4)
        return lz_errorf("%s: input %s and weight %s: both must be 4-d (input [N, C, H, W], weight "
                         "[C, O/groups, KH, KW])", op, sx, sw);
    const int st[2] = {o.stride[0] ? o.stride[0] : 1, o.stride[1] ? o.stride[1] : 1};
    const int dil[2] = {o.dilation[0] ? o.dilation[0] : 1, o.dilation[1] ? o.dilation[1] : 1};
    const int op_[2] = {output_padding ? output_padding[0] : 0, output_padding ? output_padding[1] : 0};
    const int groups = o.groups ? o.groups : 1;
    for (int k = 0; k < 2; k++)
        if (st[k] < 0 || dil[k] < 0 || o.padding[k] < 0 || op_[k] < 0 || op_[k] >= st[k])
            return lz_errorf("%s: stride (%d, %d), padding (%d, %d), dilation (%d, %d), output padding "
                             "(%d, %d): none may be negative, and the output padding must be below the "
                             "stride", op, o.stride[0], o.stride[1], o.padding[0], o.padding[1],
                             o.dilation[0], o.dilation[1], op_[0], op_[1]);
    const int64_t *xs = lz_t_shape(x), *ws = lz_t_shape(w);
    if (groups < 1 || xs[1] % groups || ws[0] != xs[1])
        return lz_errorf("%s: input %s and weight %s: the weight's first axis must be the input's %lld "
                         "channels, and %d groups must divide them", op, sx, sw, (long long)xs[1], groups);
    if (ws[2] < 1 || ws[3] < 1) return lz_errorf("%s: weight %s has an empty kernel", op, sw);
    const int64_t O = ws[1] * groups;
    int64_t shape[4] = {xs[0], O, 0, 0};
    for (int k = 0; k < 2; k++) {
        shape[2 + k] = (xs[2 + k] - 1) * st[k] - 2 * (int64_t)o.padding[k] +
                       (int64_t)dil[k] * (ws[2 + k] - 1) + op_[k] + 1;
        if (shape[2 + k] < 1)
            return lz_errorf("%s: input %s and weight %s with padding (%d, %d) give an empty output", op,
                             sx, sw, o.padding[0], o.padding[1]);
    }
    if (b && (lz_t_ndim(b) != 1 || lz_t_shape(b)[0] != O))
        return lz_errorf("%s: bias %s does not match the weight %s: expected [%lld]", op,
                         lz_shape_str(sb, lz_t_ndim(b), lz_t_shape(b)), sw, (long long)O);
    /* autocast asks about the forward convolution this op is the input gradient of */
    const lz_dtype pd = conv_dtype(x, w, shape, xs, st, o.padding, dil, groups);
    if (lz_t_dtype(x) != pd || lz_t_dtype(w) != pd) {
        lz_tensor *x2 = lz_product_operand(x, pd), *w2 = lz_product_operand(w, pd);
        lz_tensor *r = x2 && w2 ? lz_conv_transpose2d(x2, w2, b, o, output_padding) : NULL;
        lz_free(x2);
        lz_free(w2);
        return r;
    }
    lz_attrs at = {.n_iattr = N_ATTR,
                   .iattr = {st[0], st[1], o.padding[0], o.padding[1], dil[0], dil[1], groups}};
    lz_tensor *y = lz_record(LZ_OP_CONV2D_GRAD_INPUT, LZ_F32, 4, shape, 2, in, &at);
    lz_ag_attach(y, op, conv_transpose_backward, 2, in, &at);
    return with_bias(y, b, O);
}
