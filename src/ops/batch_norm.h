/* Internal switch for lz_batch_norm's fused training path (on by default),
 * so tests can compare it with the composed form it replaces. */
#ifndef LZ_OPS_BATCH_NORM_H
#define LZ_OPS_BATCH_NORM_H

/* 1: training mode records the fused BATCH_NORM_* ops; 0: the composed
   reductions and element-wise ops. Returns the previous setting. */
int lz_batch_norm_set_fused(int on);

#endif
