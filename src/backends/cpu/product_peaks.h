/* The CPU's float32 and bf16 product peaks, in GFLOP/s (product_peaks.c). */
#ifndef LZ_CPU_PRODUCT_PEAKS_H
#define LZ_CPU_PRODUCT_PEAKS_H

/* Measures both now (a fraction of a second); a peak oneDNN cannot run
   (no bf16 matmul but its reference loops) reads 0. */
void lz_cpu_measure_peaks(double *f32, double *bf16);

#endif
