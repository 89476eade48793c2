/* The row functions' templates of the element-wise kernels
 * (k_elementwise.c, k_elementwise_ext.c): ROW1 and ROW2 make a row function
 * of one or two operands from an expression in x, or in a and b, with
 * loops of their own for contiguous rows and a broadcast operand. */
#ifndef LZ_CPU_ROW_TEMPLATES_H
#define LZ_CPU_ROW_TEMPLATES_H

#include <stdint.h>

#define ROW1(name, TO, TI, EXPR)                                                          \
    static void name(void *o_, const void *const *in, const int64_t *st, int64_t n,      \
                     const float *fa)                                                     \
    {                                                                                     \
        TO *o = o_;                                                              \
        const TI *px = in[0];                                                    \
        (void)fa;                                                                         \
        if (st[0] == 1) {                                                                 \
            for (int64_t i = 0; i < n; i++) { TI x = px[i]; o[i] = (TO)(EXPR); }          \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) { TI x = px[i * st[0]]; o[i] = (TO)(EXPR); }  \
        }                                                                                 \
    }

#define ROW2(name, TO, TI, EXPR)                                                          \
    static void name(void *o_, const void *const *in, const int64_t *st, int64_t n,      \
                     const float *fa)                                                     \
    {                                                                                     \
        TO *o = o_;                                                              \
        const TI *pa = in[0], *pb = in[1];                              \
        (void)fa;                                                                         \
        if (st[0] == 1 && st[1] == 1) {                                                   \
            for (int64_t i = 0; i < n; i++) { TI a = pa[i], b = pb[i]; o[i] = (TO)(EXPR); } \
        } else if (st[0] == 0 && st[1] == 1) {                                            \
            TI a = pa[0];                                                                 \
            for (int64_t i = 0; i < n; i++) { TI b = pb[i]; o[i] = (TO)(EXPR); }          \
        } else if (st[0] == 1 && st[1] == 0) {                                            \
            TI b = pb[0];                                                                 \
            for (int64_t i = 0; i < n; i++) { TI a = pa[i]; o[i] = (TO)(EXPR); }          \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                TI a = pa[i * st[0]], b = pb[i * st[1]];                                  \
                o[i] = (TO)(EXPR);                                                        \
            }                                                                             \
        }                                                                                 \
    }

#endif
