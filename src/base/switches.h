/* Switches for the compiler's optional passes and the backend's one choice
 * of algorithm. On the ground floor, as settings are: the compiler reads
 * them and so does a kernel (backends/cpu/k_dnnl_conv.c, Winograd), which
 * must not reach up into the compiler for them. */
#ifndef LZ_SWITCHES_H
#define LZ_SWITCHES_H

/* Whether lz_plan_layouts marks any, whether lz_fuse fuses, and whether
   a backend may run a 3x3 convolution by Winograd's algorithm (fewer
   multiplications, results that differ from the direct sum by rounding)
   (base/switches.c): LZ_BLOCKED=0, LZ_FUSION=0 and LZ_WINOGRAD=0 in the
   environment (read once) turn them off; the _set functions override
   that (1 on, 0 off, -1 back to the environment) for tests and
   benchmarks. Executables already compiled keep their steps. */
/* LZ_BLOCKED=nhwc: lz_blocked_layouts_enabled() gives LZ_BLOCKED_NHWC
   (channels-last wherever values go blocked), also a value for _set */
#define LZ_BLOCKED_NHWC 2
int  lz_blocked_layouts_enabled(void);
void lz_blocked_layouts_set(int on);
int  lz_fusion_enabled(void);
void lz_fusion_set(int on);
int  lz_winograd_enabled(void);
void lz_winograd_set(int on);
/* Which products autocast runs in bf16 (LZ_AUTOCAST_PRODUCTS, read once;
   _set overrides it for tests, -1 back to the environment): measured per
   shape, the rule of the two peaks, all, or none (then float32). The ops
   apply the last two; the backend's product_f32_faster the others. */
enum { LZ_PRODUCTS_MEASURE, LZ_PRODUCTS_RULE, LZ_PRODUCTS_BF16, LZ_PRODUCTS_F32 };
int  lz_autocast_products(void);
void lz_autocast_products_set(int mode);

#endif
