/* A 2-layer MLP learns 4 classes of random points, lazily.
   Build: cc train_mlp.c $(pkg-config --cflags --libs lazyc) */
#include <lazyc.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    float x[64 * 8], w[8 * 32 + 32 * 4];
    int64_t y[64];
    for (int i = 0; i < 64 * 8; i++) x[i] = rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < 64; i++) y[i] = (x[8 * i] > 0) + 2 * (x[8 * i + 1] > 0);
    for (int i = 0; i < 8 * 32 + 32 * 4; i++) w[i] = rand() / (float)RAND_MAX - 0.5f;
    lz_tensor *X = lz_from_host(x, LZ_F32, 2, (int64_t[]){64, 8});
    lz_tensor *Y = lz_from_host(y, LZ_I64, 1, (int64_t[]){64});
    lz_tensor *W[2] = {lz_from_host(w, LZ_F32, 2, (int64_t[]){8, 32}),
                       lz_from_host(w + 8 * 32, LZ_F32, 2, (int64_t[]){32, 4})};
    lz_requires_grad(W[0], 1), lz_requires_grad(W[1], 1);
    lz_sgd *opt = lz_sgd_new(W, 2, (lz_sgd_opts){.lr = 0.2f, .momentum = 0.9f});
    for (int step = 0; step < 200; step++) {
        lz_scope_begin();                  /* handles made in here die at scope end */
        lz_tensor *h = lz_relu(lz_matmul(X, W[0]));
        lz_tensor *loss = lz_keep(lz_cross_entropy(lz_matmul(h, W[1]), Y));
        lz_sgd_zero_grad(opt);
        lz_backward(loss);
        lz_sgd_step(opt);                  /* all recorded: nothing has run yet */
        lz_scope_end();
        lz_mark_step();                    /* one graph, one execution, async */
        if (step % 20 == 0 || step == 199) /* lz_item waits for the value */
            printf("step %3d  loss %.4f\n", step, lz_item(loss));
        lz_free(loss);
    }
    char *report = lz_metrics_report();
    printf("%s", report), free(report);
    lz_sgd_free(opt), lz_free(X), lz_free(Y), lz_free(W[0]), lz_free(W[1]);
    return 0;
}
