/* What every model shares: its accessors, the loss, the dropout switch,
 * and the image input conventions. Each architecture's builder (the
 * registry, registry.c, calls them) uses them. */
#include "zoo_internal.h"
#include "layers.h"

#include <stdlib.h>

void lz_zoo_image_spec(lz_model_spec *s, const char *name, int bench_size, int64_t classes)
{
    /* gpu (2): a batch that fills one GPU, at ImageNet's 224 px */
    int64_t batch = bench_size == 2 ? 64 : bench_size ? 8 : 2;
    int64_t side = bench_size == 2 ? 224 : bench_size ? 128 : 64;
    *s = (lz_model_spec){
        .name = name,
        .input_ndim = 4, .input_shape = { batch, 3, side, side }, .input_dtype = LZ_F32,
        .target_ndim = 1, .target_shape = { batch },
        .num_classes = classes,
    };
}

void lz_model_free(lz_model *m)
{
    if (!m) return;
    if (m->free_impl && m->impl) m->free_impl(m->impl);
    lz_params_free(m->params);
    free(m);
}

const lz_model_spec *lz_model_get_spec(const lz_model *m)
{
    return m ? &m->spec : NULL;
}

lz_params *lz_model_params(lz_model *m)
{
    return m ? m->params : NULL;
}

lz_tensor *lz_model_forward(lz_model *m, lz_tensor *x, int training)
{
    if (!m || !m->forward) {
        lz_set_error("lz_model_forward: %s", m ? "model has no forward" : "model is NULL");
        return NULL;
    }
    if (!x) {
        if (!lz_last_error()) lz_set_error("lz_model_forward(%s): input is NULL", m->spec.name);
        return NULL;
    }
    return m->forward(m, x, training);
}

lz_tensor *lz_model_loss(lz_model *m, lz_tensor *x, lz_tensor *y, int training)
{
    lz_tensor *logits = lz_model_forward(m, x, training);
    if (!logits) return NULL;
    if (!y) {
        lz_free(logits);
        if (!lz_last_error()) lz_set_error("lz_model_loss(%s): target is NULL", m->spec.name);
        return NULL;
    }
    if (lz_ndim(logits) == 2) {
        lz_tensor *loss = lz_cross_entropy(logits, y);
        lz_free(logits);
        return loss;
    }
    /* token models: every position is one sample, [B, S, V] -> [B*S, V] */
    int64_t v = lz_dim(logits, -1);
    int64_t lshape[2] = { -1, v }, yshape[1] = { -1 };
    lz_tensor *flat = lz_reshape(logits, 2, lshape);
    lz_tensor *yflat = lz_reshape(y, 1, yshape);
    lz_tensor *loss = lz_cross_entropy(flat, yflat);
    lz_free(flat);
    lz_free(yflat);
    lz_free(logits);
    return loss;
}

void lz_model_set_dropout(lz_model *m, int enabled)
{
    if (m) m->dropout = enabled != 0;
}
