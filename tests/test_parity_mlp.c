/* Parity with PyTorch 1.13 for a training loop: a 2-layer MLP
 * (16 -> 32 relu -> 10, batch 8, cross-entropy over i64 targets) trained
 * with torch.optim.SGD (momentum, weight decay, optionally nesterov) from
 * the initial weights in the fixture. The losses of every step and the
 * final parameters must match within 1e-4 relative, in lazy mode (one
 * lz_mark_step per step) and in eager mode. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"

#define TOL 1e-4
#define N_PARAMS 4

static const char *PARAM_NAMES[N_PARAMS] = {"W1", "b1", "W2", "b2"};

/* nn.Linear: x @ W^T + b with W [out, in]. */
static lz_tensor *linear(lz_tensor *x, lz_tensor *w, lz_tensor *b)
{
    return lz_add(lz_matmul(x, lz_transpose(w, 0, 1)), b);
}

static void run_fixture(const char *dir, const char *file, int eager)
{
    char path[1024], err[1536];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lz_test_fx fx;
    if (lz_test_fx_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        CHECK(!"fixture loads");
        return;
    }
    const char *mode = eager ? "eager" : "lazy";
    const lz_test_fx_tensor *x = lz_test_fx_get(&fx, "x"), *y = lz_test_fx_get(&fx, "y");
    const lz_test_fx_tensor *ref_losses = lz_test_fx_get(&fx, "losses");
    int steps = (int)lz_test_fx_int(&fx, "steps", 0);
    CHECK(x && y && ref_losses && x->ndim == 3 && y->ndim == 2 && y->dtype == LZ_I64);
    CHECK(steps > 0 && steps == ref_losses->numel && steps == x->shape[0]);
    if (!x || !y || !ref_losses || x->ndim != 3 || y->ndim != 2 || steps <= 0 ||
        steps != ref_losses->numel || steps != x->shape[0]) {
        lz_test_fx_free(&fx);
        return;
    }

    lz_clear_error();
    lz_set_eager(eager);
    lz_tensor *params[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) {
        const lz_test_fx_tensor *p = lz_test_fx_get(&fx, PARAM_NAMES[i]);
        CHECK(p != NULL);
        if (!p) { lz_test_fx_free(&fx); return; }
        params[i] = lz_test_fx_to_lz(p);
        lz_requires_grad(params[i], 1);
    }
    lz_sgd_opts opts = {
        .lr = (float)lz_test_fx_float(&fx, "lr", NAN),
        .momentum = (float)lz_test_fx_float(&fx, "momentum", 0),
        .dampening = (float)lz_test_fx_float(&fx, "dampening", 0),
        .weight_decay = (float)lz_test_fx_float(&fx, "weight_decay", 0),
        .nesterov = (int)lz_test_fx_int(&fx, "nesterov", 0),
    };
    lz_sgd *opt = lz_sgd_new(params, N_PARAMS, opts);
    CHECK(opt != NULL);

    float losses[64];
    int64_t batch = x->shape[1], n_in = x->shape[2];
    int64_t xshape[2] = {batch, n_in}, yshape[1] = {batch};
    int ok = opt != NULL && steps <= 64;
    for (int s = 0; ok && s < steps; s++) {
        lz_scope_begin();
        lz_tensor *xt = lz_from_host(lz_test_fx_data_at(x, (int64_t)s * batch * n_in), LZ_F32, 2, xshape);
        lz_tensor *yt = lz_from_host(lz_test_fx_data_at(y, (int64_t)s * batch), LZ_I64, 1, yshape);
        lz_sgd_zero_grad(opt);
        lz_tensor *h = lz_relu(linear(xt, params[0], params[1]));
        lz_tensor *loss = lz_cross_entropy(linear(h, params[2], params[3]), yt);
        ok = loss && lz_backward(loss) == 0 && lz_sgd_step(opt) == 0;
        lz_mark_step();
        losses[s] = ok ? lz_item(loss) : NAN;
        ok = ok && !isnan(losses[s]);
        lz_scope_end();
    }
    if (!ok)
        fprintf(stderr, "%s %s: step failed: %s\n", file, mode,
                lz_last_error() ? lz_last_error() : "(no message)");
    CHECK(ok);
    if (lz_wait() != 0) {
        fprintf(stderr, "%s %s: lz_wait: %s\n", file, mode, lz_last_error());
        CHECK(!"lz_wait succeeds");
    }

    double le = ok ? lz_test_rel_err(losses, (const float *)ref_losses->data, steps) : INFINITY;
    printf("%-22s %-5s losses rel %.2e:", file, mode, le);
    for (int s = 0; s < steps; s++)
        printf(" %.6f/%.6f", ok ? losses[s] : NAN, ((const float *)ref_losses->data)[s]);
    printf("  (lazyc/torch)\n");
    CHECK(le <= TOL);

    for (int i = 0; i < N_PARAMS; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s_final", PARAM_NAMES[i]);
        const lz_test_fx_tensor *ref = lz_test_fx_get(&fx, name);
        double e = INFINITY;
        if (ref && ok && lz_numel(params[i]) == ref->numel) {
            float *v = lz_test_read(params[i]);
            if (v) e = lz_test_rel_err(v, (const float *)ref->data, ref->numel);
            free(v);
        }
        printf("%-22s %-5s %-8s rel %.2e %s\n", file, mode, name, e, e <= TOL ? "ok" : "FAIL");
        CHECK(e <= TOL);
    }
    if (opt) lz_sgd_free(opt);
    for (int i = 0; i < N_PARAMS; i++) lz_free(params[i]);
    lz_set_eager(0);
    lz_test_fx_free(&fx);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : lz_test_fx_dir();
    char *files[1024];
    int nf = lz_test_fx_index(dir, files, 1024);
    if (nf <= 0) {
        fprintf(stderr, "no fixtures: cannot read %s/INDEX (run from tests/, or set LZ_FIXTURES)\n",
                dir);
        CHECK(!"fixtures present");
        return lz_test_done();
    }
    int n_mlp = 0;
    for (int i = 0; i < nf; i++) {
        if (strncmp(files[i], "mlp_", 4) != 0) continue;
        n_mlp++;
        for (int eager = 0; eager <= 1; eager++) run_fixture(dir, files[i], eager);
    }
    CHECK(n_mlp >= 1);
    for (int i = 0; i < nf; i++) free(files[i]);
    return lz_test_done();
}
