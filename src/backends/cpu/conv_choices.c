/* The convolution choices' table (see conv_choices.h): one table of
   choices_file.h. */
#include "backends/cpu/conv_choices.h"

#include "backends/cpu/choices_file.h"

static lz_choices conv = {
    .magic = "lazyc convolution choices 1", .prefix = "conv-choices-",
    .what = "convolution choices", .key_len = LZ_CONV_KEY_LEN, .lo = 0, .hi = LZ_CONV_WAYS - 1,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

int lz_conv_choice_find(const int64_t *key) { return (int)lz_choices_find(&conv, key, -1); }

void lz_conv_choice_put(const int64_t *key, int way) { lz_choices_put(&conv, key, way); }

int64_t lz_conv_choices_loaded(void) { return lz_choices_loaded(&conv); }
