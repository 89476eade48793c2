/* Matrix product and softmax. lz_matmul records MATMUL on operands of at
 * least 2 dimensions; 1-d operands are reshaped around it as numpy does, so
 * the IR (and the kernel) only ever sees the batched 2-d form. */
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "base/product.h"
#include "ops/ops_util.h"

/* ---- matmul ---------------------------------------------------------------- */

/* op(a) @ op(b) for the backward, where op transposes the last two axes
   when its flag is set. The flags ride in MATMUL's iattr[0] (a) and
   iattr[1] (b) and the kernel hands them to sgemm, so a gradient never
   copies a weight just to transpose it. Gradients carry no autograd record
   of their own (no second derivatives). */
static lz_tensor *matmul_t(lz_tensor *a, int ta, lz_tensor *b, int tb)
{
    if (!a || !b) return NULL;
    int na = lz_t_ndim(a), nb = lz_t_ndim(b), nbatch;
    const int64_t *sa = lz_t_shape(a), *sb = lz_t_shape(b);
    int64_t s[LZ_MAX_DIMS];
    if (lz_broadcast_shape("lz_matmul", na - 2, sa, nb - 2, sb, &nbatch, s) != 0) return NULL;
    s[nbatch] = ta ? sa[na - 1] : sa[na - 2];
    s[nbatch + 1] = tb ? sb[nb - 2] : sb[nb - 1];
    lz_tensor *in[2] = {a, b};
    lz_attrs at = {.n_iattr = 2, .iattr = {ta, tb}};
    return lz_record(LZ_OP_MATMUL, LZ_F32, nbatch + 2, s, 2, in, &at);
}

/* The incoming gradient as the backward products' operand: bf16 when the
   forward's were (autocast: both backward products in bf16, f32 out). */
static lz_tensor *grad_operand(lz_tensor *gout, const lz_tensor *a)
{
    return lz_t_dtype(a) == LZ_BF16 ? lz_cast(gout, LZ_BF16) : lz_same_value(gout);
}

static int matmul_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g32, lz_tensor **gin)
{
    (void)out;
    lz_tensor *a = ag->in[0], *b = ag->in[1];
    int na = lz_t_ndim(a), nb = lz_t_ndim(b);
    lz_tensor *gout = grad_operand(g32, a);
    if (!gout) return -1;
    int rc = 0;
    if (lz_needs_grad(a)) {
        lz_tensor *ga = matmul_t(gout, 0, b, 1);                /* g @ b^T */
        gin[0] = ga ? lz_reduce_to_like(ga, a) : NULL;
        lz_free(ga);
        if (!gin[0]) rc = -1;
    }
    if (rc == 0 && lz_needs_grad(b)) {
        if (nb == 2 && na > 2) {
            /* b was shared by every batch: fold the batch into the rows so
               the sum over the batch happens inside one product. */
            int64_t ak[2] = {-1, lz_t_shape(a)[na - 1]};
            int64_t gn[2] = {-1, lz_t_shape(gout)[lz_t_ndim(gout) - 1]};
            lz_tensor *a2 = lz_reshape(a, 2, ak), *g2 = lz_reshape(gout, 2, gn);
            gin[1] = matmul_t(a2, 1, g2, 0);
            lz_free(a2);
            lz_free(g2);
        } else {
            lz_tensor *gb = matmul_t(a, 1, gout, 0);            /* a^T @ g */
            gin[1] = gb ? lz_reduce_to_like(gb, b) : NULL;
            lz_free(gb);
        }
        if (!gin[1]) rc = -1;
    }
    lz_free(gout);
    return rc;
}

static void inner_mismatch(lz_tensor *a, lz_tensor *b, int64_t ka, int64_t kb)
{
    char sa[96], sb[96];
    lz_errorf("lz_matmul: shapes %s and %s: inner dimensions %lld and %lld differ",
              lz_shape_str(sa, lz_t_ndim(a), lz_t_shape(a)),
              lz_shape_str(sb, lz_t_ndim(b), lz_t_shape(b)), (long long)ka, (long long)kb);
}

static lz_tensor *matmul_nd(lz_tensor *a, lz_tensor *b)
{
    int na = lz_t_ndim(a), nb = lz_t_ndim(b);
    const int64_t *sa = lz_t_shape(a), *sb = lz_t_shape(b);
    if (sa[na - 1] != sb[nb - 2]) {
        inner_mismatch(a, b, sa[na - 1], sb[nb - 2]);
        return NULL;
    }
    int nbatch;
    int64_t s[LZ_MAX_DIMS];
    if (lz_broadcast_shape("lz_matmul", na - 2, sa, nb - 2, sb, &nbatch, s) != 0) {
        char ba[96], bb[96];
        return lz_errorf("lz_matmul: shapes %s and %s: batch dimensions cannot broadcast",
                         lz_shape_str(ba, na, sa), lz_shape_str(bb, nb, sb));
    }
    if (nbatch + 2 > LZ_MAX_DIMS) return lz_errorf("lz_matmul: too many dimensions");
    s[nbatch] = sa[na - 2];
    s[nbatch + 1] = sb[nb - 1];
    lz_tensor *in[2] = {a, b};
    lz_tensor *t = lz_record(LZ_OP_MATMUL, LZ_F32, nbatch + 2, s, 2, in, NULL);
    lz_ag_attach(t, "lz_matmul", matmul_backward, 2, in, NULL);
    return t;
}

/* Product a [..., M, K] times b [..., K, N] (b [N, K] when tb; a 1-d a
   a row, a 1-d b a column) as autocast asks the backend about it
   (base/product.h), or 0 when the shapes make no product: then the
   caller's checks give the error. */
static int product_dims(const lz_tensor *a, const lz_tensor *b, int tb, int64_t *d)
{
    const int na = lz_t_ndim(a), nb = lz_t_ndim(b);
    const int64_t *sa = lz_t_shape(a), *sb = lz_t_shape(b);
    if (na < 1 || nb < 1) return 0;
    d[LZ_MM_BA] = d[LZ_MM_BB] = 1;
    for (int k = 0; k < na - 2; k++) d[LZ_MM_BA] *= sa[k];
    for (int k = 0; k < nb - 2; k++) d[LZ_MM_BB] *= sb[k];
    d[LZ_MM_M] = na == 1 ? 1 : sa[na - 2];
    d[LZ_MM_K] = sa[na - 1];
    d[LZ_MM_N] = nb == 1 ? 1 : tb ? sb[nb - 2] : sb[nb - 1];
    d[LZ_MM_TB] = tb;
    if ((nb == 1 ? sb[0] : tb ? sb[nb - 1] : sb[nb - 2]) != d[LZ_MM_K]) return 0;
    if (d[LZ_MM_BB] == 1) {   /* b shared by the batch: one product */
        d[LZ_MM_M] *= d[LZ_MM_BA];
        d[LZ_MM_BA] = 1;
    }
    return 1;
}

static lz_dtype matmul_dtype(const lz_tensor *a, const lz_tensor *b, int tb)
{
    int64_t d[LZ_MM_DIMS];
    if (!product_dims(a, b, tb, d)) return lz_product_dtype(a, b);
    return lz_product_choice(a, b, LZ_OP_MATMUL, LZ_MM_DIMS, d);
}

lz_tensor *lz_matmul(lz_tensor *a, lz_tensor *b)
{
    lz_tensor *in[2] = {a, b};
    if (lz_check_operands("lz_matmul", 2, in)) return NULL;
    if (!lz_require_float("lz_matmul", a) || !lz_require_float("lz_matmul", b)) return NULL;
    const lz_dtype pd = matmul_dtype(a, b, 0);
    if (lz_t_dtype(a) != pd || lz_t_dtype(b) != pd) {
        lz_tensor *a2 = lz_product_operand(a, pd), *b2 = lz_product_operand(b, pd);
        lz_tensor *r = a2 && b2 ? lz_matmul(a2, b2) : NULL;
        lz_free(a2);
        lz_free(b2);
        return r;
    }
    int na = lz_t_ndim(a), nb = lz_t_ndim(b);
    const int64_t *sa = lz_t_shape(a), *sb = lz_t_shape(b);
    if (na == 0 || nb == 0) {
        char ba[96], bb[96];
        return lz_errorf("lz_matmul: shapes %s and %s: 0-d operands are not matrices",
                         lz_shape_str(ba, na, sa), lz_shape_str(bb, nb, sb));
    }
    int64_t ka = sa[na - 1], kb = nb == 1 ? sb[0] : sb[nb - 2];
    if (ka != kb) {
        inner_mismatch(a, b, ka, kb);
        return NULL;
    }
    if (na >= 2 && nb >= 2) return matmul_nd(a, b);

    /* numpy: a 1-d a is a row [1, K], a 1-d b a column [K, 1], and the
       added axis is dropped from the result. */
    lz_tensor *a2 = a, *b2 = b;
    if (na == 1) {
        int64_t s[2] = {1, ka};
        a2 = lz_reshape(a, 2, s);
    }
    if (nb == 1) {
        int64_t s[2] = {kb, 1};
        b2 = lz_reshape(b, 2, s);
    }
    lz_tensor *r = a2 && b2 ? matmul_nd(a2, b2) : NULL;
    if (a2 != a) lz_free(a2);
    if (b2 != b) lz_free(b2);
    if (!r) return NULL;
    int nr = lz_t_ndim(r);
    int64_t s[LZ_MAX_DIMS];
    memcpy(s, lz_t_shape(r), sizeof(int64_t) * (size_t)nr);
    if (nb == 1) nr--;                       /* drop N */
    if (na == 1) {                           /* drop M */
        s[nr - 2 + (nb == 1)] = s[nr - 1 + (nb == 1)];
        nr--;
    }
    lz_tensor *y = lz_reshape(r, nr, s);
    lz_free(r);
    return y;
}

/* ---- linear --------------------------------------------------------------- */

/* y = x @ w^T with x [..., in] folded to [rows, in]: gx = g @ w and
   gw = g^T @ x, both one product over all rows, no transposed copies. */
static int linear_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *g32, lz_tensor **gin)
{
    (void)out;
    lz_tensor *x = ag->in[0], *w = ag->in[1];
    lz_tensor *gout = grad_operand(g32, x);
    if (!gout) return -1;
    int rc = 0;
    if (lz_needs_grad(x) && !(gin[0] = matmul_t(gout, 0, w, 0)))
        rc = -1;
    if (rc == 0 && lz_needs_grad(w)) {
        int64_t xs[2] = {-1, lz_t_shape(x)[lz_t_ndim(x) - 1]};
        int64_t gs[2] = {-1, lz_t_shape(gout)[lz_t_ndim(gout) - 1]};
        lz_tensor *x2 = lz_reshape(x, 2, xs), *g2 = lz_reshape(gout, 2, gs);
        gin[1] = matmul_t(g2, 1, x2, 0);
        lz_free(x2);
        lz_free(g2);
        if (!gin[1]) rc = -1;
    }
    lz_free(gout);
    return rc;
}

lz_tensor *lz_linear(lz_tensor *x, lz_tensor *weight, lz_tensor *bias)
{
    lz_tensor *in[2] = {x, weight};
    if (lz_check_operands("lz_linear", 2, in)) return NULL;
    if (!lz_require_float("lz_linear", x) || !lz_require_float("lz_linear", weight) ||
        (bias && !lz_require_f32("lz_linear", bias)))
        return NULL;
    const lz_dtype pd = lz_t_ndim(weight) == 2 ? matmul_dtype(x, weight, 1) : lz_product_dtype(x, weight);
    if (lz_t_dtype(x) != pd || lz_t_dtype(weight) != pd) {
        lz_tensor *x2 = lz_product_operand(x, pd), *w2 = lz_product_operand(weight, pd);
        lz_tensor *r = x2 && w2 ? lz_linear(x2, w2, bias) : NULL;
        lz_free(x2);
        lz_free(w2);
        return r;
    }
    int nx = lz_t_ndim(x);
    const int64_t *sx = lz_t_shape(x), *sw = lz_t_shape(weight);
    char bx[96], bw[96];
    if (nx < 1 || lz_t_ndim(weight) != 2 || sx[nx - 1] != sw[1])
        return lz_errorf("lz_linear: input %s and weight %s: expected input [..., in] and "
                         "weight [out, in]", lz_shape_str(bx, nx, sx),
                         lz_shape_str(bw, lz_t_ndim(weight), sw));
    if (bias && (lz_t_ndim(bias) != 1 || lz_t_shape(bias)[0] != sw[0]))
        return lz_errorf("lz_linear: bias %s does not match weight %s: expected [%lld]",
                         lz_shape_str(bx, lz_t_ndim(bias), lz_t_shape(bias)),
                         lz_shape_str(bw, 2, sw), (long long)sw[0]);
    /* a 1-d input is one row, as in torch */
    lz_tensor *x2 = x;
    if (nx == 1) {
        int64_t s[2] = {1, sx[0]};
        if (!(x2 = lz_reshape(x, 2, s))) return NULL;
    }
    lz_tensor *y = matmul_t(x2, 0, weight, 1);
    if (y) {
        lz_tensor *ag_in[2] = {x2, weight};
        lz_ag_attach(y, "lz_linear", linear_backward, 2, ag_in, NULL);
    }
    if (x2 != x) {
        int64_t s[1] = {sw[0]};
        lz_tensor *y1 = y ? lz_reshape(y, 1, s) : NULL;
        lz_free(y);
        lz_free(x2);
        y = y1;
    }
    if (!y || !bias) return y;
    lz_tensor *yb = lz_add(y, bias);
    lz_free(y);
    return yb;
}

/* ---- softmax / log_softmax ----------------------------------------------------- */

static int softmax_backward(const lz_ag *ag, lz_tensor *out, lz_tensor *gout, lz_tensor **gin)
{
    if (!lz_needs_grad(ag->in[0])) return 0;
    lz_tensor *in[2] = {out, gout};
    lz_op op = ag->attrs.iattr[1] ? LZ_OP_LOG_SOFTMAX_GRAD : LZ_OP_SOFTMAX_GRAD;
    lz_attrs at = {.n_iattr = 1, .iattr = {ag->attrs.iattr[0]}};
    gin[0] = lz_record(op, LZ_F32, lz_t_ndim(out), lz_t_shape(out), 2, in, &at);
    return gin[0] ? 0 : -1;
}

static lz_tensor *softmax_common(const char *name, lz_tensor *x, int axis, int is_log)
{
    if (lz_check_operands(name, 1, &x)) return NULL;
    if (!lz_require_f32(name, x)) return NULL;
    int ax = lz_norm_axis(name, axis, lz_t_ndim(x));
    if (ax < 0) return NULL;
    lz_attrs at = {.n_iattr = 1, .iattr = {ax}};
    lz_tensor *t = lz_record(is_log ? LZ_OP_LOG_SOFTMAX : LZ_OP_SOFTMAX, LZ_F32,
                             lz_t_ndim(x), lz_t_shape(x), 1, &x, &at);
    /* the record carries which of the two it was in iattr[1] */
    lz_attrs bt = {.n_iattr = 2, .iattr = {ax, is_log}};
    lz_ag_attach(t, name, softmax_backward, 1, &x, &bt);
    return t;
}

lz_tensor *lz_softmax(lz_tensor *x, int axis)
{
    return softmax_common("lz_softmax", x, axis, 0);
}

lz_tensor *lz_log_softmax(lz_tensor *x, int axis)
{
    return softmax_common("lz_log_softmax", x, axis, 1);
}
