#include "ops/ops_util.h"

#include "autograd/autograd.h"
#include "base/error.h"

int64_t lz_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

int lz_broadcast_shape(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                       int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int d = 0; d < n; d++) {
        int ia = d - (n - na), ib = d - (n - nb);
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a != b && a != 1 && b != 1) {
            char s1[96], s2[96];
            return lz_errorf_int("%s: shapes %s and %s cannot broadcast (dimension %d: %lld vs %lld)",
                                 op, lz_shape_str(s1, na, sa), lz_shape_str(s2, nb, sb), d,
                                 (long long)a, (long long)b);
        }
        out[d] = a == 1 ? b : a;
    }
    *nout = n;
    return 0;
}

int lz_norm_axis(const char *op, int axis, int ndim)
{
    if (axis < -ndim || axis >= (ndim ? ndim : 1))
        return lz_errorf_int("%s: axis %d out of range for a %d-d tensor", op, axis, ndim);
    return axis < 0 ? axis + ndim : axis;
}

lz_tensor *lz_same_value(lz_tensor *g)
{
    lz_node_ref(g->node);
    return lz_tensor_wrap(g->node);
}

int lz_grad_of_x_g(lz_op op, const lz_ag *ag, lz_tensor *g, lz_tensor **gin, const lz_attrs *attrs)
{
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    lz_tensor *in[2] = {x, g};
    gin[0] = lz_record(op, LZ_F32, lz_t_ndim(x), lz_t_shape(x), 2, in, attrs);
    return gin[0] ? 0 : -1;
}

int lz_refuse_bf16(const char *op, const lz_tensor *t)
{
    if (lz_t_dtype(t) != LZ_BF16) return 1;
    lz_errorf("%s: dtype bf16 not supported (f32 or integers; bf16 is the dtype of products' "
              "operands: lz_cast(x, LZ_F32) first)", op);
    return 0;
}

int lz_require_f32(const char *op, const lz_tensor *t)
{
    if (lz_t_dtype(t) == LZ_F32) return 1;
    lz_errorf("%s: dtype %s not supported (f32 only)", op, lz_dtype_name(lz_t_dtype(t)));
    return 0;
}
