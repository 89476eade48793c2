/* torch's pooling windows, as the plain kernels (k_pool.c) and those for
 * channel-blocked operands (k_pool_blocked.c) both read them, so both pick
 * the same elements. */
#ifndef LZ_CPU_POOL_WINDOW_H
#define LZ_CPU_POOL_WINDOW_H

#include "backends/cpu/kernels.h"

#define POOL_PAR_MIN 32768   /* below this much work a parallel region costs more than it saves */

typedef struct pgeom {
    int64_t planes, H, W, OH, OW;   /* planes: images times channels */
    int64_t kh, kw, sh, sw, ph, pw;
    int count_pad;
} pgeom;

/* x: the pooled input's value, y: the pooled output's. */
static inline pgeom make_pgeom(const lz_value *x, const lz_value *y, const lz_instr *s, int attrs)
{
    pgeom g = {0};
    g.planes = x->shape[0] * x->shape[1];
    g.H = x->shape[2]; g.W = x->shape[3];
    g.OH = y->shape[2]; g.OW = y->shape[3];
    if (attrs) {
        g.kh = s->iattr[0]; g.kw = s->iattr[1]; g.sh = s->iattr[2]; g.sw = s->iattr[3];
        g.ph = s->iattr[4]; g.pw = s->iattr[5]; g.count_pad = s->iattr[7] != 0;
    }
    return g;
}

/* The input rows [*lo, *hi) of output row o (torch: clipped to the input). */
static inline void window(int64_t o, int64_t s, int64_t p, int64_t k, int64_t in, int64_t *lo,
                          int64_t *hi)
{
    int64_t a = o * s - p, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
}

/* torch's adaptive windows: [floor(i*in/out), ceil((i+1)*in/out)). */
static inline void adaptive_window(int64_t i, int64_t in, int64_t out, int64_t *lo, int64_t *hi)
{
    *lo = i * in / out;
    *hi = ((i + 1) * in + out - 1) / out;
}

static inline int pool_parallel(const pgeom *g, int64_t per_out)
{
    return g->planes * g->OH * g->OW * per_out > POOL_PAR_MIN;
}

/* 2x2 windows, stride 2, no padding, every window inside the input: the
   common CNN downsampling, with no window arithmetic per output. */
static inline int is_2x2(const pgeom *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 &&
           2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

#endif
