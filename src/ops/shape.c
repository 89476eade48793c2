/* Shape ops: reshape, permute, transpose, slice, cat. They record IR only;
 * each backward rule undoes the op's data movement on the gradient. (expand,
 * whose gradient is a sum, is reduce.c's.) */
#include <stdio.h>
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "ops/ops_util.h"

/* ---- reshape ---------------------------------------------------------- */

static int reshape_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    gin[0] = lz_reshape(gout, lz_t_ndim(x), lz_t_shape(x));
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_reshape(lz_tensor *x, int ndim, const int64_t *shape)
{
    if (lz_check_operands("lz_reshape", 1, &x)) return NULL;
    if (ndim < 0 || ndim > LZ_MAX_DIMS)
        return lz_errorf("lz_reshape: ndim %d out of range [0, %d]", ndim, LZ_MAX_DIMS);
    if (ndim > 0 && !shape) return lz_errorf("lz_reshape: shape is NULL");
    char sa[96], sb[96];
    int64_t s[LZ_MAX_DIMS];
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0)
                return lz_errorf("lz_reshape: target shape %s has more than one -1",
                                 lz_shape_str(sa, ndim, shape));
            infer = i;
        } else if (s[i] < 0) {
            return lz_errorf("lz_reshape: target shape %s has a negative size",
                             lz_shape_str(sa, ndim, shape));
        }
    }
    /* the known sizes must fit before they are multiplied */
    if (infer >= 0) s[infer] = 1;
    if (lz_shape_check("lz_reshape", lz_t_dtype(x), ndim, s, NULL)) return NULL;
    for (int i = 0; i < ndim; i++)
        if (i != infer) known *= s[i];
    int64_t n = lz_shape_numel(lz_t_ndim(x), lz_t_shape(x));
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            return lz_errorf("lz_reshape: cannot reshape %s (%lld elements) to %s",
                             lz_shape_str(sa, lz_t_ndim(x), lz_t_shape(x)), (long long)n,
                             lz_shape_str(sb, ndim, shape));
        s[infer] = n / known;
        known *= s[infer];
    }
    if (known != n)
        return lz_errorf("lz_reshape: cannot reshape %s (%lld elements) to %s (%lld elements)",
                         lz_shape_str(sa, lz_t_ndim(x), lz_t_shape(x)), (long long)n,
                         lz_shape_str(sb, ndim, s), (long long)known);
    lz_tensor *t = lz_record(LZ_OP_RESHAPE, lz_t_dtype(x), ndim, s, 1, &x, NULL);
    lz_ag_attach(t, "lz_reshape", reshape_backward, 1, &x, NULL);
    return t;
}

/* ---- permute / transpose ------------------------------------------------ */

static int permute_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    if (!lz_needs_grad(ag->in[0])) return 0;
    int nd = lz_t_ndim(ag->in[0]);
    int inv[LZ_MAX_DIMS];
    for (int i = 0; i < nd; i++) inv[ag->attrs.iattr[i]] = i;
    gin[0] = lz_permute(gout, inv);
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_permute(lz_tensor *x, const int *perm)
{
    if (lz_check_operands("lz_permute", 1, &x)) return NULL;
    int nd = lz_t_ndim(x);
    if (nd > 0 && !perm) return lz_errorf("lz_permute: perm is NULL");
    char sa[96];
    int seen[LZ_MAX_DIMS] = {0};
    lz_attrs at = {.n_iattr = nd};
    int64_t s[LZ_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int p = perm[i];
        if (p < 0 || p >= nd || seen[p]) {
            /* Name the whole perm: one bad entry is easier to spot in context. */
            char pb[96];
            int len = 0;
            for (int j = 0; j < nd && len < 80; j++)
                len += snprintf(pb + len, sizeof pb - (size_t)len, "%s%d", j ? ", " : "", perm[j]);
            return lz_errorf("lz_permute: perm [%s] is not a permutation of the %d axes of %s",
                             pb, nd, lz_shape_str(sa, nd, lz_t_shape(x)));
        }
        seen[p] = 1;
        at.iattr[i] = p;
        s[i] = lz_t_shape(x)[p];
    }
    lz_tensor *t = lz_record(LZ_OP_PERMUTE, lz_t_dtype(x), nd, s, 1, &x, &at);
    lz_ag_attach(t, "lz_permute", permute_backward, 1, &x, &at);
    return t;
}

lz_tensor *lz_transpose(lz_tensor *x, int axis0, int axis1)
{
    if (lz_check_operands("lz_transpose", 1, &x)) return NULL;
    int nd = lz_t_ndim(x);
    int a0 = lz_norm_axis("lz_transpose", axis0, nd);
    if (a0 < 0) return NULL;
    int a1 = lz_norm_axis("lz_transpose", axis1, nd);
    if (a1 < 0) return NULL;
    int perm[LZ_MAX_DIMS];
    for (int i = 0; i < nd; i++) perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return lz_permute(x, perm);
}

/* ---- slice ------------------------------------------------------------------ */

static int slice_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0];
    if (!lz_needs_grad(x)) return 0;
    gin[0] = lz_record(LZ_OP_SLICE_GRAD, lz_t_dtype(gout), lz_t_ndim(x), lz_t_shape(x),
                       1, &gout, &ag->attrs);
    return gin[0] ? 0 : -1;
}

lz_tensor *lz_slice(lz_tensor *x, int axis, int64_t start, int64_t end)
{
    if (lz_check_operands("lz_slice", 1, &x)) return NULL;
    int nd = lz_t_ndim(x);
    int ax = lz_norm_axis("lz_slice", axis, nd);
    if (ax < 0) return NULL;
    int64_t len = lz_t_shape(x)[ax];
    /* Python's rules: negatives count from the end, then clamp to [0, len]. */
    if (start < 0) start += len;
    if (end < 0) end += len;
    if (start < 0) start = 0;
    if (start > len) start = len;
    if (end < start) end = start;
    if (end > len) end = len;
    int64_t s[LZ_MAX_DIMS];
    memcpy(s, lz_t_shape(x), sizeof(int64_t) * (size_t)nd);
    s[ax] = end - start;
    lz_attrs at = {.n_iattr = 2, .iattr = {ax, start}};
    lz_tensor *t = lz_record(LZ_OP_SLICE, lz_t_dtype(x), nd, s, 1, &x, &at);
    lz_ag_attach(t, "lz_slice", slice_backward, 1, &x, &at);
    return t;
}

/* ---- cat -------------------------------------------------------------------- */

static int cat_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    (void)out;
    int ax = (int)ag->attrs.iattr[0];
    int64_t off = 0;
    for (int i = 0; i < ag->n_in; i++) {
        int64_t len = lz_t_shape(ag->in[i])[ax];
        if (lz_needs_grad(ag->in[i])) {
            gin[i] = lz_slice(gout, ax, off, off + len);
            if (!gin[i]) return -1;
        }
        off += len;
    }
    return 0;
}

lz_tensor *lz_cat(lz_tensor *const *xs, int n, int axis)
{
    if (n < 1) return lz_errorf("lz_cat: needs at least one tensor (got %d)", n);
    if (!xs) return lz_errorf("lz_cat: tensor array is NULL");
    if (lz_check_operands("lz_cat", n, xs)) return NULL;
    int nd = lz_t_ndim(xs[0]);
    if (nd == 0) return lz_errorf("lz_cat: cannot concatenate 0-d tensors");
    int ax = lz_norm_axis("lz_cat", axis, nd);
    if (ax < 0) return NULL;
    const int64_t *s0 = lz_t_shape(xs[0]);
    int64_t s[LZ_MAX_DIMS];
    memcpy(s, s0, sizeof(int64_t) * (size_t)nd);
    s[ax] = 0;
    char sa[96], sb[96];
    for (int i = 0; i < n; i++) {
        const int64_t *si = lz_t_shape(xs[i]);
        int ni = lz_t_ndim(xs[i]);
        if (lz_t_dtype(xs[i]) != lz_t_dtype(xs[0]))
            return lz_errorf("lz_cat: tensor %d has dtype %s, tensor 0 has %s", i,
                             lz_dtype_name(lz_t_dtype(xs[i])), lz_dtype_name(lz_t_dtype(xs[0])));
        int ok = ni == nd;
        for (int d = 0; ok && d < nd; d++)
            if (d != ax && si[d] != s0[d]) ok = 0;
        if (!ok)
            return lz_errorf("lz_cat: tensor %d has shape %s, tensor 0 has %s: they must match "
                             "except on axis %d", i, lz_shape_str(sa, ni, si),
                             lz_shape_str(sb, nd, s0), ax);
        s[ax] += si[ax];
    }
    lz_attrs at = {.n_iattr = 1, .iattr = {ax}};
    lz_tensor *t = lz_record(LZ_OP_CAT, lz_t_dtype(xs[0]), nd, s, n, xs, &at);
    lz_ag_attach(t, "lz_cat", cat_backward, n, xs, &at);
    return t;
}
