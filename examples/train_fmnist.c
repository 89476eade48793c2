/* A small conv net learns Fashion-MNIST: a shuffling loader, AdamW with a cosine
   schedule, the step captured (one execution each), a checkpoint per epoch.
   Build: cc train_fmnist.c $(pkg-config --cflags --libs lazyc)
   Run:   ./a.out [DATA_DIR [TRAIN_LIMIT [EPOCHS]]] */
#include <lazyc.h>
#include <stdio.h>
#include <stdlib.h>

#define CKPT "fmnist.safetensors"
typedef struct net { lz_params *params; lz_adamw *opt; } net;

static int fail(const char *what) {      /* lz_last_error() names what went wrong */
    return fprintf(stderr, "train_fmnist: %s: %s\n", what, lz_last_error() ? lz_last_error() : "?"), 1;
}

/* uniform(-bound, bound) from xorshift32; bound 1/sqrt(fan in), torch's default */
static lz_tensor *uniform(int ndim, const int64_t *shape, float bound) {
    static uint32_t s = 42;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; v && i < n; i++)
        s ^= s << 13, s ^= s >> 17, s ^= s << 5, v[i] = bound * ((float)s / 2147483648.0f - 1);
    lz_tensor *t = v ? lz_from_host(v, LZ_F32, ndim, shape) : NULL;
    free(v);
    return t;
}

/* x [B, 1, 28, 28] -> 3x3 conv to 16 channels, ReLU, 2x2 max pool, linear to 10 */
static lz_tensor *forward(net *m, lz_tensor *x) {
    lz_params *p = m->params;
    lz_tensor *h = lz_conv2d(x, lz_params_find(p, "conv.weight"), lz_params_find(p, "conv.bias"),
                             (lz_conv2d_opts){.padding = {1, 1}});
    h = lz_max_pool2d(lz_relu(h), (lz_pool2d_opts){.kernel = {2, 2}});
    return lz_linear(lz_flatten(h, 1), lz_params_find(p, "fc.weight"), lz_params_find(p, "fc.bias"));
}

/* Traced by lz_capture once, then replayed: in = {x, y}, out = {loss}. */
static int train_step(void *ctx, lz_tensor *const *in, lz_tensor **out) {
    net *m = ctx;
    lz_adamw_zero_grad(m->opt);
    out[0] = lz_cross_entropy(forward(m, in[0]), in[1]);
    return out[0] && lz_backward(out[0]) == 0 && lz_adamw_step(m->opt) == 0 ? 0 : -1;
}

static double accuracy(net *m, lz_loader *test) {        /* batches of at most 1000 */
    static float logits[1000 * 10];
    static int64_t labels[1000];
    int64_t right = 0, seen = 0;
    lz_tensor *x, *y;
    lz_loader_start_epoch(test, 0);
    while (lz_loader_next(test, &x, &y) == 1) {
        int64_t b = lz_dim(y, 0);
        lz_no_grad_begin(), lz_scope_begin();           /* the scope frees intermediates */
        lz_tensor *out = lz_keep(forward(m, x));
        lz_scope_end(), lz_no_grad_end();
        int ok = lz_to_host(out, logits, sizeof(float) * (size_t)(b * 10)) == 0 &&
                 lz_to_host(y, labels, sizeof(int64_t) * (size_t)b) == 0;
        lz_free(out), lz_free(x), lz_free(y);
        if (!ok) return -1;
        for (int64_t i = 0; i < b; i++, seen++) {
            int best = 0;
            for (int k = 1; k < 10; k++) best = logits[i * 10 + k] > logits[i * 10 + best] ? k : best;
            right += best == labels[i];
        }
    }
    return seen ? (double)right / (double)seen : -1;
}

/* What a checkpoint holds: parameters, AdamW's moments and steps, the generator. */
static lz_params *checkpoint(net *m) {
    lz_params *ck = lz_params_new();
    int ok = ck != NULL;
    for (int i = 0; ok && i < lz_params_count(m->params); i++)
        ok = lz_params_add(ck, lz_params_name(m->params, i), lz_retain(lz_params_at(m->params, i)), 0) != NULL;
    if (!ok || lz_adamw_state(m->opt, ck, "optimizer") || lz_rng_state(ck, "rng")) lz_params_free(ck), ck = NULL;
    return ck;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    int64_t limit = argc > 2 ? atoll(argv[2]) : 0;
    int epochs = argc > 3 ? atoi(argv[3]) : 2, first = 0;
    lz_dataset *train = lz_dataset_fashion_mnist(dir, 1), *test = lz_dataset_fashion_mnist(dir, 0);
    if (!train || !test) return fail(dir);
    if (limit > 0 && limit < lz_dataset_size(train)) lz_dataset_truncate(train, limit);
    lz_loader_opts lo = {.batch = 64, .shuffle = 1, .drop_last = 1, .seed = 1,
                         .mean = 0.2860f, .std = 0.3530f};      /* over the training pixels */
    lz_loader *loader = lz_loader_new(train, lo);
    lo.batch = 1000, lo.shuffle = 0, lo.drop_last = 0;
    lz_loader *test_loader = lz_loader_new(test, lo);
    net m = {lz_params_new(), NULL};
    lz_params_add(m.params, "conv.weight", uniform(4, (int64_t[]){16, 1, 3, 3}, 1.0f / 3), 1);
    lz_params_add(m.params, "conv.bias", uniform(1, (int64_t[]){16}, 1.0f / 3), 1);
    lz_params_add(m.params, "fc.weight", uniform(2, (int64_t[]){10, 16 * 14 * 14}, 1.0f / 56), 1);
    lz_params_add(m.params, "fc.bias", uniform(1, (int64_t[]){10}, 1.0f / 56), 1);
    lz_tensor *ps[4];
    if (lz_params_trainable_list(m.params, ps, 4) == 4)
        m.opt = lz_adamw_new(ps, 4, (lz_adamw_opts){.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
                                                    .eps = 1e-8f, .weight_decay = 5e-4f, .decoupled = 1});
    if (!loader || !test_loader || !m.opt || lz_loader_batches(loader) == 0) return fail("setup");
    FILE *f = fopen(CKPT, "rb");                        /* a checkpoint there: resume from it */
    if (f) {
        fclose(f);
        char *e = lz_safetensors_read_meta(CKPT, "epoch");
        lz_params *ck = checkpoint(&m);                 /* loads into the model's own tensors */
        if (!e || !ck || lz_safetensors_load(CKPT, ck, 1) != 0) return fail(CKPT);
        first = atoi(e), free(e), lz_params_free(ck);
        printf("resumed from %s after epoch %d\n", CKPT, first);
    }
    lz_fn *step = lz_capture(train_step, &m, 2, 1);
    int64_t per_epoch = lz_loader_batches(loader);
    for (int epoch = first; epoch < epochs; epoch++) {
        lz_loader_start_epoch(loader, epoch);          /* the order: (seed, epoch) alone */
        int64_t execs = lz_metrics_get().executions, n = 0;
        double sum = 0;
        lz_tensor *x, *y, *loss, *prev = NULL;
        while (lz_loader_next(loader, &x, &y) == 1) {
            int64_t t = epoch * per_epoch + n;                        /* the schedule's step */
            lz_adamw_set_lr(m.opt, lz_lr_cosine(2e-3f, (int)t, (int)(epochs * per_epoch), 0));
            int rc = lz_call(step, (lz_tensor *[]){x, y}, &loss);   /* enqueues, returns */
            lz_free(x), lz_free(y);
            if (rc != 0) return fail("step");
            if (prev) sum += lz_item(prev), lz_free(prev);          /* read while this step runs */
            prev = loss, n++;
        }
        sum += lz_item(prev), lz_free(prev);
        execs = lz_metrics_get().executions - execs;
        printf("epoch %d: train loss %.4f, test accuracy %.4f (%lld steps, %lld executions)\n", epoch + 1,
               sum / (double)n, accuracy(&m, test_loader), (long long)n, (long long)execs);
        char e[16];
        snprintf(e, sizeof e, "%d", epoch + 1);
        lz_params *ck = checkpoint(&m);
        if (!ck || lz_safetensors_save_meta(CKPT, ck, 1, (const char *[]){"epoch"}, (const char *[]){e}))
            return fail(CKPT);
        lz_params_free(ck);
    }
    lz_fn_free(step), lz_adamw_free(m.opt), lz_params_free(m.params);
    lz_loader_free(loader), lz_loader_free(test_loader), lz_dataset_free(train), lz_dataset_free(test);
    return 0;
}
