/* The convolution choices LZ_DNNL_CONV=tune made by timing (k_dnnl_conv.c),
 * kept for the process and in a file (choices_file.h:
 * conv-choices-<hash>.txt). A key is a step's pass (forward, grad input,
 * grad weight), its operands' shapes, stride, padding, dilation, groups
 * and layouts, and whether Winograd is on (it changes what oneDNN runs);
 * the value, the way that measured fastest. */
#ifndef LZ_CONV_CHOICES_H
#define LZ_CONV_CHOICES_H

#include <stdint.h>

#define LZ_CONV_KEY_LEN 23   /* op, x, w and y shapes, 7 attributes, x's and y's blocks, Winograd on */
#define LZ_CONV_WAYS 4       /* k_dnnl_conv.c's ways: per image, gathered, oneDNN, rows */

/* The way recorded for key, or -1. The first call reads the file. */
int  lz_conv_choice_find(const int64_t *key);
/* Records way for key, for the process and in the file. */
void lz_conv_choice_put(const int64_t *key, int way);
/* Choices read from the file so far (tests). */
int64_t lz_conv_choices_loaded(void);

#endif
