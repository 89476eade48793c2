/* A bf16 weight gradient of a convolution larger than 1x1 on channels-last
 * activations (AMX's programs, k_dnnl_conv.c) as one matrix product over
 * columns: the input's patches are copied into rows of KH*KW*C values a
 * output pixel, cols [N*OH*OW, KH*KW*C], and dw = dy^T cols on oneDNN's
 * matmul, whose result [O, KH, KW, C] is turned into the weight's OIHW.
 * oneDNN 2.6's AMX weight-gradient kernel takes twice its forward's time,
 * and far more on deep layers' few pixels. Over few output pixels the
 * columns are small and this is faster; over many, copying them costs
 * more than it saves, hence a bound on the pixels (docs/performance.md,
 * "Channels-last on AMX"). The sums are
 * f32 over the same bf16 products. */
#include "backends/cpu/conv_wgrad_cols.h"

#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/kernels.h"

#define COLS_MAX_PIXELS 512   /* output pixels over the batch */

struct lz_wgrad_cols {
    dnnl_primitive_t prim;
    dnnl_memory_t dy, cols, res, pad;   /* pad: the matmul's scratchpad */
    int64_t N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw;
    size_t cols_bytes, res_bytes, pad_bytes;
};

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

void lz_cpu_wgrad_cols_free(lz_wgrad_cols *g)
{
    if (!g) return;
    if (g->prim) dnnl_primitive_destroy(g->prim);
    dnnl_memory_t m[4] = {g->dy, g->cols, g->res, g->pad};
    for (int k = 0; k < 4; k++)
        if (m[k]) dnnl_memory_destroy(m[k]);
    free(g);
}

lz_wgrad_cols *lz_cpu_wgrad_cols_make(const lz_program *p, const lz_instr *s, dnnl_engine_t engine)
{
    if (s->op != LZ_OP_CONV2D_GRAD_WEIGHT || s->n_in != 2) return NULL;
    const lz_value *X = &p->values[s->in[0]], *Y = &p->values[s->in[1]], *Wv = &p->values[s->out];
    const int64_t *a = s->iattr;   /* stride, padding, dilation, groups */
    if (X->dtype != LZ_BF16 || Y->dtype != LZ_BF16 || Wv->dtype != LZ_F32 || X->ndim != 4 ||
        Y->ndim != 4 || Wv->ndim != 4 || X->block != X->shape[1] || Y->block != Y->shape[1] ||
        a[4] != 1 || a[5] != 1 || a[6] != 1 || Wv->shape[2] * Wv->shape[3] == 1)
        return NULL;
    /* only over few output pixels (see the top comment) */
    if (Y->shape[0] * Y->shape[2] * Y->shape[3] > COLS_MAX_PIXELS) return NULL;
    lz_wgrad_cols *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->N = X->shape[0]; g->C = X->shape[1]; g->H = X->shape[2]; g->W = X->shape[3];
    g->O = Y->shape[1]; g->OH = Y->shape[2]; g->OW = Y->shape[3];
    g->KH = Wv->shape[2]; g->KW = Wv->shape[3];
    g->sh = a[0]; g->sw = a[1]; g->ph = a[2]; g->pw = a[3];
    const int64_t NP = g->N * g->OH * g->OW, K = g->KH * g->KW * g->C;
    const dnnl_dims_t dyd = {g->O, NP}, dys = {1, g->O}, cd = {NP, K}, rd = {g->O, K};
    dnnl_memory_desc_t md[3];
    int bad = dnnl_memory_desc_init_by_strides(&md[0], 2, dyd, dnnl_bf16, dys) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&md[1], 2, cd, dnnl_bf16, dnnl_ab) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&md[2], 2, rd, dnnl_f32, dnnl_ab) != dnnl_success;
    dnnl_primitive_desc_t pd = bad ? NULL : lz_cpu_bf16_matmul_pd(engine, &md[0], &md[1], &md[2]);
    bad = bad || !pd;
    const dnnl_memory_desc_t *sp = bad ? NULL : dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    bad = bad || !sp ||
          dnnl_memory_create(&g->dy, &md[0], engine, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_memory_create(&g->cols, &md[1], engine, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_memory_create(&g->res, &md[2], engine, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_memory_create(&g->pad, sp, engine, DNNL_MEMORY_NONE) != dnnl_success ||
          dnnl_primitive_create(&g->prim, pd) != dnnl_success;
    if (!bad) {
        g->cols_bytes = align64(sizeof(uint16_t) * (size_t)(NP * K));
        g->res_bytes = align64(sizeof(float) * (size_t)(g->O * K));
        g->pad_bytes = align64(dnnl_memory_desc_get_size(sp));
    } else {
        g->prim = NULL;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (bad) {
        lz_cpu_wgrad_cols_free(g);
        return NULL;
    }
    return g;
}

size_t lz_cpu_wgrad_cols_bytes(const lz_wgrad_cols *g)
{
    return g->cols_bytes + g->res_bytes + g->pad_bytes;
}

/* cols[p, (kh KW + kw) C + c] = x[n, oh sh - ph + kh, ow sw - pw + kw, c],
   0 outside the input */
static void gather(const lz_wgrad_cols *g, const uint16_t *x, uint16_t *cols)
{
    const int64_t C = g->C, T = g->KH * g->KW, NP = g->N * g->OH * g->OW;
    const size_t run = sizeof(uint16_t) * (size_t)C;
    #pragma omp parallel for schedule(static) if (NP * T * C > 32768)
    for (int64_t q = 0; q < NP; q++) {
        const int64_t n = q / (g->OH * g->OW), oh = q / g->OW % g->OH, ow = q % g->OW;
        uint16_t *row = cols + q * T * C;
        for (int64_t kh = 0; kh < g->KH; kh++) {
            const int64_t ih = oh * g->sh - g->ph + kh;
            for (int64_t kw = 0; kw < g->KW; kw++) {
                const int64_t iw = ow * g->sw - g->pw + kw;
                uint16_t *to = row + (kh * g->KW + kw) * C;
                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) memset(to, 0, run);
                else memcpy(to, x + ((n * g->H + ih) * g->W + iw) * C, run);
            }
        }
    }
}

const char *lz_cpu_wgrad_cols_run(const lz_wgrad_cols *g, const void *x, const void *dy, float *dw,
                                  void *scratch, dnnl_stream_t stream)
{
    if (!scratch) return "lz_conv2d: no scratch for the weight gradient's columns";
    char *at = scratch;
    uint16_t *cols = (uint16_t *)at;
    float *res = (float *)(at + g->cols_bytes);
    void *pad = at + g->cols_bytes + g->res_bytes;
    gather(g, x, cols);
    int bad = dnnl_memory_set_data_handle(g->dy, (void *)dy) != dnnl_success ||
              dnnl_memory_set_data_handle(g->cols, cols) != dnnl_success ||
              dnnl_memory_set_data_handle(g->res, res) != dnnl_success ||
              dnnl_memory_set_data_handle(g->pad, pad) != dnnl_success;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, g->dy}, {DNNL_ARG_WEIGHTS, g->cols},
                               {DNNL_ARG_DST, g->res}, {DNNL_ARG_SCRATCHPAD, g->pad}};
    bad = bad || dnnl_primitive_execute(g->prim, stream, 4, args) != dnnl_success ||
          dnnl_stream_wait(stream) != dnnl_success;
    if (bad) return "lz_conv2d: oneDNN's matmul failed (a weight gradient over columns)";
    /* res [O, T, C] -> dw [O, C, T] */
    const int64_t O = g->O, C = g->C, T = g->KH * g->KW;
    #pragma omp parallel for schedule(static) if (O * C * T > 32768)
    for (int64_t o = 0; o < O; o++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) dw[(o * C + c) * T + t] = res[(o * T + t) * C + c];
    return NULL;
}
