/* oneDNN's convolution kernels by dtype, on the channel-blocked layouts
 * lazyc keeps activations in: f32 direct, f32 Winograd (where oneDNN has
 * it) and bf16 direct (bf16 operands, f32 output or gradients, as
 * autocast runs them), forward, grad input and grad weight, for shapes of
 * the zoo's layers (8 images). The figures behind autocast's rule that a
 * Winograd-shaped convolution on a plane of 16x16 or more stays f32
 * (backends/cpu/k_dnnl_conv.c, lz_cpu_conv_f32_faster):
 *
 *   build/conv_dtypes            # best of 5 runs each, ms
 *
 * One line per shape and direction; "f32/bf16" is the faster f32 kernel's
 * time over bf16's (above 1: bf16 is faster). Where oneDNN has AMX, also
 * its channels-last bf16 kernel ("amx") and the reorders that step adds
 * between lazyc's layouts and nhwc ("+reord"); "f32/bf16" then takes the
 * faster bf16 way. Needs no lazyc: oneDNN only.
 *
 *   build/conv_dtypes --winograd-products
 *
 * instead times what a bf16 Winograd F(4x4, 3x3) of lazyc's own would
 * multiply, for the 3x3 stride-1 shapes: the 36 products [tiles x C] x
 * [C x O] of the transformed domain as one batched oneDNN matmul, bf16 in
 * and f32 out against f32, beside oneDNN's whole f32 Winograd forward and
 * its bf16 direct one, and the least bytes the transforms around the
 * products would move (input read in f32 and written in bf16 36/16 times
 * over, output read in f32 36/16 times over and written): the products'
 * share of what such a kernel could save, not a kernel. */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"

static dnnl_engine_t engine;
static dnnl_stream_t stream;

static dnnl_memory_t zeroed(const dnnl_memory_desc_t *d)
{
    dnnl_memory_t m;
    if (dnnl_memory_create(&m, d, engine, DNNL_MEMORY_ALLOCATE) != dnnl_success) return NULL;
    void *h = NULL;
    dnnl_memory_get_data_handle(m, &h);
    if (h) memset(h, 0, dnnl_memory_desc_get_size(d));
    return m;
}

enum { FWD, BWD_DATA, BWD_WEIGHTS };

/* Runs p on a[0..n) six times and frees the memories and p: the best of
   the last five, ms; -1 if one of the first `need` memories could not be
   made or a run failed. */
static double time_and_free(dnnl_primitive_t p, dnnl_exec_arg_t *a, int n, int need)
{
    int ok = 1;
    for (int k = 0; k < need; k++) ok &= a[k].memory != NULL;
    double best = -1;
    for (int r = 0; ok && r < 6; r++) {
        const double t = now_ms();
        if (dnnl_primitive_execute(p, stream, n, a) != dnnl_success) break;
        dnnl_stream_wait(stream);
        const double d = now_ms() - t;
        if (r && (best < 0 || d < best)) best = d;
    }
    for (int k = 0; k < n; k++)
        if (a[k].memory) dnnl_memory_destroy(a[k].memory);
    dnnl_primitive_destroy(p);
    return best;
}

/* One direction's primitive, timed (time_and_free). */
static double time_pd(dnnl_primitive_desc_t pd, int dir)
{
    static const dnnl_query_t q[3][3] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
        {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
    static const int arg[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                  {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                                  {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
    dnnl_primitive_t p;
    if (dnnl_primitive_create(&p, pd) != dnnl_success) return -1;
    dnnl_exec_arg_t a[4];
    for (int k = 0; k < 3; k++) {
        a[k].arg = arg[dir][k];
        a[k].memory = zeroed(dnnl_primitive_desc_query_md(pd, q[dir][k], 0));
    }
    a[3].arg = DNNL_ARG_SCRATCHPAD;
    a[3].memory = zeroed(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    return time_and_free(p, a, 4, 3);
}

/* The layout lazyc keeps an activation of c channels in: channel-blocked,
   an image's 3 channels plain. */
static dnnl_format_tag_t kept_tag(int c) { return c % 16 ? dnnl_nchw : dnnl_nChw16c; }

/* One direction of one shape (square planes, padding k/2, groups 1):
   ms, and the implementation's name; -1 where oneDNN has none.
   channels_last: the activations in nhwc (AMX's kernels take no other),
   else as lazyc keeps them. */
static double time_conv(const int *L, int bf16, int winograd, int dir, int channels_last,
                        const char **impl)
{
    const int N = L[0], C = L[1], H = L[2], O = L[3], k = L[4], s = L[5], pad = k / 2;
    const int OH = (H + 2 * pad - k) / s + 1;
    dnnl_dims_t xd = {N, C, H, H}, wd = {O, C, k, k}, yd = {N, O, OH, OH};
    dnnl_dims_t st = {s, s}, pd_ = {pad, pad};
    const dnnl_data_type_t lo = bf16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_format_tag_t xt = channels_last ? dnnl_nhwc : kept_tag(C),
                            yt = channels_last ? dnnl_nhwc : kept_tag(O);
    dnnl_memory_desc_t x, w, y, xf, wf, yf;
    dnnl_memory_desc_init_by_tag(&x, 4, xd, lo, xt);
    dnnl_memory_desc_init_by_tag(&w, 4, wd, lo, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&y, 4, yd, lo, yt);
    dnnl_memory_desc_init_by_tag(&xf, 4, xd, dnnl_f32, xt);   /* what autocast gets back */
    dnnl_memory_desc_init_by_tag(&wf, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&yf, 4, yd, dnnl_f32, yt);
    const dnnl_alg_kind_t alg = winograd ? dnnl_convolution_winograd : dnnl_convolution_direct;
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    *impl = "none";
    if (dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &x, &w, NULL,
                                           bf16 ? &yf : &y, st, pd_, pd_) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fd, NULL, engine, NULL) != dnnl_success)
        return -1;
    if (dir == FWD) {
        pd = fpd;
    } else {
        dnnl_status_t r = dir == BWD_DATA
            ? dnnl_convolution_backward_data_desc_init(&bd, alg, bf16 ? &xf : &x, &w, &y, st, pd_, pd_)
            : dnnl_convolution_backward_weights_desc_init(&bd, alg, &x, bf16 ? &wf : &w, NULL, &y,
                                                          st, pd_, pd_);
        if (r != dnnl_success || dnnl_primitive_desc_create(&pd, &bd, NULL, engine, fpd) != dnnl_success)
            pd = NULL;
        dnnl_primitive_desc_destroy(fpd);
        if (!pd) return -1;
    }
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    static char names[64][48];
    static int next;
    snprintf(names[next % 64], sizeof names[0], "%s", name ? name : "?");
    *impl = names[next++ % 64];
    const double ms = time_pd(pd, dir);
    dnnl_primitive_desc_destroy(pd);
    return ms;
}

/* One reorder of an activation of dims d and type t, from lazyc's layout
   to nhwc (to_nhwc) or back, best of 5, ms. */
static double time_reorder(const dnnl_dims_t d, dnnl_data_type_t t, int to_nhwc)
{
    dnnl_memory_desc_t kept, cl;
    dnnl_memory_desc_init_by_tag(&kept, 4, d, t, kept_tag((int)d[1]));
    dnnl_memory_desc_init_by_tag(&cl, 4, d, t, dnnl_nhwc);
    const dnnl_memory_desc_t *from = to_nhwc ? &kept : &cl, *to = to_nhwc ? &cl : &kept;
    dnnl_primitive_desc_t rpd;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) != dnnl_success)
        return -1;
    dnnl_primitive_t p;
    const int made = dnnl_primitive_create(&p, rpd) == dnnl_success;
    dnnl_primitive_desc_destroy(rpd);
    if (!made) return -1;
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, zeroed(from)}, {DNNL_ARG_TO, zeroed(to)}};
    return time_and_free(p, a, 2, 2);
}

/* The reorders a channels-last bf16 step adds to lazyc's layouts: its bf16
   activations in, its f32 one (forward, grad input) out, ms. */
static double channels_last_reorders(const int *L, int dir)
{
    const int pad = L[4] / 2, OH = (L[2] + 2 * pad - L[4]) / L[5] + 1;
    const dnnl_dims_t xd = {L[0], L[1], L[2], L[2]}, yd = {L[0], L[3], OH, OH};
    if (dir == FWD) return time_reorder(xd, dnnl_bf16, 1) + time_reorder(yd, dnnl_f32, 0);
    if (dir == BWD_DATA) return time_reorder(yd, dnnl_bf16, 1) + time_reorder(xd, dnnl_f32, 0);
    return time_reorder(xd, dnnl_bf16, 1) + time_reorder(yd, dnnl_bf16, 1);
}

/* The 36 domain products of shape L as one batched matmul, best of 5
   runs after one, ms; -1 where oneDNN has none. */
static double time_products(const int *L, int bf16)
{
    const int64_t tiles = (int64_t)L[0] * ((L[2] + 3) / 4) * ((L[2] + 3) / 4);
    dnnl_dims_t ad = {36, tiles, L[1]}, bd = {36, L[1], L[3]}, cd = {36, tiles, L[3]};
    const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c;
    dnnl_memory_desc_init_by_tag(&a, 3, ad, in, dnnl_abc);
    dnnl_memory_desc_init_by_tag(&b, 3, bd, in, dnnl_abc);
    dnnl_memory_desc_init_by_tag(&c, 3, cd, dnnl_f32, dnnl_abc);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL) != dnnl_success)
        return -1;
    dnnl_primitive_t p;
    const int made = dnnl_primitive_create(&p, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    if (!made) return -1;
    dnnl_exec_arg_t arg[3] = {{DNNL_ARG_SRC, zeroed(&a)}, {DNNL_ARG_WEIGHTS, zeroed(&b)},
                              {DNNL_ARG_DST, zeroed(&c)}};
    return time_and_free(p, arg, 3, 3);
}

static void winograd_products(const int (*shapes)[6], size_t n)
{
    printf("%-22s %9s %9s %12s %12s %12s\n", "shape NxCxHxH->O 3x3", "wino ms", "bf16 ms",
           "f32 prod ms", "bf16 prod ms", "transform MB");
    for (size_t i = 0; i < n; i++) {
        const int *L = shapes[i];
        if (L[4] != 3 || L[5] != 1) continue;
        const char *iw, *ib;
        const double w = time_conv(L, 0, 1, FWD, 0, &iw), b = time_conv(L, 1, 0, FWD, 0, &ib);
        const double pf = time_products(L, 0), pb = time_products(L, 1);
        const double in = (double)L[0] * L[1] * L[2] * L[2], out = (double)L[0] * L[3] * L[2] * L[2];
        char shape[32];
        snprintf(shape, sizeof shape, "%dx%dx%dx%d->%d", L[0], L[1], L[2], L[2], L[3]);
        printf("%-22s %9.2f %9.2f %12.2f %12.2f %12.1f\n", shape, w, b, pf, pb,
               (in * (4 + 2.25 * 2) + out * (2.25 * 4 + 4)) / 1e6);
    }
}

int main(int argc, char **argv)
{
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "conv_dtypes: oneDNN made no CPU engine\n");
        return 1;
    }
    /* N, C, H (= W), O, kernel, stride */
    static const int shapes[][6] = {
        {8, 64, 64, 64, 3, 1},  {8, 128, 32, 128, 3, 1}, {8, 256, 16, 256, 3, 1},
        {8, 512, 8, 512, 3, 1}, {8, 64, 32, 64, 3, 1},   {8, 128, 16, 128, 3, 1},
        {8, 256, 8, 256, 3, 1}, {8, 64, 32, 256, 1, 1},  {8, 256, 32, 64, 1, 1},
        {8, 512, 8, 128, 1, 1}, {8, 3, 128, 64, 7, 2},  {8, 64, 128, 64, 3, 1},
        {8, 512, 16, 512, 3, 1},
    };
    if (argc > 1 && !strcmp(argv[1], "--winograd-products")) {
        winograd_products(shapes, sizeof shapes / sizeof shapes[0]);
        return 0;
    }
    static const char *dir_name[3] = {"fwd", "bwd_data", "bwd_weights"};
    const int amx = ((unsigned)dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_amx) ==
                    dnnl_cpu_isa_avx512_core_amx;
    printf("%-22s %-11s %8s %8s %8s %8s %8s %8s  kernels (f32, winograd, bf16%s)\n",
           "shape NxCxHxH->O kxk", "direction", "f32 ms", "wino ms", "bf16 ms", amx ? "amx ms" : "",
           amx ? "+reord" : "", "f32/bf16", amx ? ", amx" : "");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int dir = 0; dir < 3; dir++) {
            const int *L = shapes[i];
            if (dir == BWD_DATA && L[1] % 16) continue;   /* no gradient for an image */
            const char *i32, *iw, *ib, *ia = "";
            const double f = time_conv(L, 0, 0, dir, 0, &i32);
            const double w = time_conv(L, 0, 1, dir, 0, &iw);
            const double b = time_conv(L, 1, 0, dir, 0, &ib);
            /* with AMX: its channels-last kernel and the reorders to and
               from lazyc's layouts, the way autocast runs there */
            const double a = amx ? time_conv(L, 1, 0, dir, 1, &ia) : -1;
            const double r = a > 0 ? channels_last_reorders(L, dir) : -1;
            const double bf = a > 0 && r >= 0 && (b < 0 || a + r < b) ? a + r : b;
            const double best = w > 0 && w < f ? w : f;
            char shape[32], am[2][16] = {"", ""};
            snprintf(shape, sizeof shape, "%dx%dx%dx%d->%d %dx%d", L[0], L[1], L[2], L[2], L[3],
                     L[4], L[4]);
            if (amx) {
                snprintf(am[0], sizeof am[0], "%8.2f", a);
                snprintf(am[1], sizeof am[1], "%8.2f", r);
            }
            printf("%-22s %-11s %8.2f %8.2f %8.2f %8s %8s %8.2f  %s, %s, %s%s%s\n", shape,
                   dir_name[dir], f, w, b, am[0], am[1], bf > 0 ? best / bf : 0.0, i32,
                   iw, ib, amx ? ", " : "", ia);
        }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
