/* How autocast describes a product to the backend (lz_backend's
 * product_f32_faster): the op that records it and its shapes, as an array
 * of integers. On the ground floor because the ops write it and a backend
 * reads it. */
#ifndef LZ_PRODUCT_H
#define LZ_PRODUCT_H

/* LZ_OP_MATMUL (matmul, linear, attention's products): a [Ba, M, K] times
   b [Bb, K, N], or b stored [Bb, N, K] when TB (linear's weight); a batch
   shared by b (Bb = 1) is folded into M. The backward products follow
   (g b^T and a^T g), so the choice holds for all three. */
enum {
    LZ_MM_BA, LZ_MM_BB, LZ_MM_M, LZ_MM_K, LZ_MM_N, LZ_MM_TB,
    LZ_MM_DIMS
};

/* LZ_OP_CONV2D: x [N, C, H, W], weight [O, C/groups, KH, KW], output
   [N, O, OH, OW], stride, padding, dilation (height, width), groups; the
   choice holds for its three directions. */
enum {
    LZ_CONV_X = 0, LZ_CONV_W = 4, LZ_CONV_Y = 8, LZ_CONV_STRIDE = 12, LZ_CONV_PAD = 14,
    LZ_CONV_DIL = 16, LZ_CONV_GROUPS = 18,
    LZ_CONV_DIMS
};

#endif
