/* Autocast's dtype per product shape on the CPU (product_choice.c). */
#ifndef LZ_CPU_PRODUCT_CHOICE_H
#define LZ_CPU_PRODUCT_CHOICE_H

#include <stdint.h>

/* lz_backend.product_f32_faster. */
int  lz_cpu_product_f32_faster(int op, int n, const int64_t *dims);
/* Once per process, where some product shape was kept float32: how many
   of the shapes seen, and why. Runs at exit (registered with the first
   such shape); tests call it sooner. */
void lz_cpu_product_notice(void);

/* Tests: the peaks the rule compares, instead of measuring them (f32 <= 0:
   measured again); forgetting the answers given so far (their graphs
   compiled before keep theirs); the answers' counts so far (kept float32,
   all) and the shapes timed by this process. */
void lz_cpu_product_peaks_set(double f32, double bf16);
void lz_cpu_product_choices_forget(void);
void lz_cpu_product_counts(int64_t *kept_f32, int64_t *shapes, int64_t *measured);

#endif
