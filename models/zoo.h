/* The model zoo: the ten reference models (and small ones for training),
 * built on the public API alone. Parameter names equal the PyTorch
 * definitions' state_dict keys, so a checkpoint written by PyTorch loads
 * into lazyc and back. */
#ifndef LZ_ZOO_H
#define LZ_ZOO_H

#include "lazyc.h"

typedef struct lz_model lz_model;

/* What a model takes and predicts at a size. */
typedef struct lz_model_spec {
    const char *name;        /* as in the reference table, e.g. "resnet50" */
    int      input_ndim;
    int64_t  input_shape[4]; /* images [B, 3, H, W] f32; BERT tokens [B, S] i64 */
    lz_dtype input_dtype;
    int      target_ndim;    /* classes [B]; BERT: token labels [B, S] */
    int64_t  target_shape[2];
    int64_t  num_classes;    /* logits width (vocabulary for BERT) */
} lz_model_spec;

/* Names of the models, NULL-terminated, in the reference table's order. */
const char *const *lz_model_names(void);
/* size: "smoke" or "bench". Parameters are initialised from seed like
   PyTorch's default initialisers (values differ; distributions match).
   NULL + error for an unknown name or size. */
lz_model  *lz_model_new(const char *name, const char *size, uint64_t seed);
void       lz_model_free(lz_model *m);
const lz_model_spec *lz_model_get_spec(const lz_model *m);
lz_params *lz_model_params(lz_model *m);          /* borrowed */
/* Records the forward pass: logits [B, classes] ([B, S, vocab] for BERT).
   training selects batch-norm statistics and dropout. */
lz_tensor *lz_model_forward(lz_model *m, lz_tensor *x, int training);
/* Cross-entropy of the forward pass against y (mean over all targets). */
lz_tensor *lz_model_loss(lz_model *m, lz_tensor *x, lz_tensor *y, int training);
/* Dropout off for parity runs (train-mode batch norm stays). */
void       lz_model_set_dropout(lz_model *m, int enabled);

#endif
