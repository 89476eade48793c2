/* Parity with PyTorch 1.13 for the nn ops: every fixture written by
 * tests/reference/gen_nn.py (into fixtures/nn) gives inputs, the forward
 * value and the gradients of sum(out * w); this runs the same op lazily
 * (forward and backward in one execution) and then eagerly, and compares
 * within 1e-5 relative for element-wise ops and 1e-4 for ops that sum
 * (layer norm's statistics, attention's products and softmax, the
 * embedding gradient's scatter-add).
 *
 * Dropout has no fixture: torch's generator is not lazyc's, so the same
 * seed draws different masks by design; tests/test_dropout.c checks its
 * distribution and determinism instead. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "fixture.h"
#include "parity_case.h"

#define TOL_ELEMENTWISE 1e-5
#define TOL_REDUCTION 1e-4

static lz_test_pc_op OPS[] = {
    {"embedding", TOL_REDUCTION, {0, 0}, 0, 0},
    {"layer_norm", TOL_REDUCTION, {0, 0}, 0, 0},
    {"hardtanh", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"relu6", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"flatten", TOL_ELEMENTWISE, {0, 0}, 0, 0},
    {"attention", TOL_REDUCTION, {0, 0}, 0, 0},
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static lz_tensor *run_op(lz_test_pc_case *c)
{
    const lz_test_fx *fx = c->fx;
    lz_tensor **in = c->in;
    int n = c->n;
    const char *op = fx->op;
    if (!strcmp(op, "embedding")) return lz_embedding(in[0], in[1]);
    if (!strcmp(op, "hardtanh"))
        return lz_hardtanh(in[0], (float)lz_test_fx_float(fx, "min", NAN), (float)lz_test_fx_float(fx, "max", NAN));
    if (!strcmp(op, "relu6")) return lz_relu6(in[0]);
    if (!strcmp(op, "flatten")) return lz_flatten(in[0], (int)lz_test_fx_int(fx, "start", 0));
    if (!strcmp(op, "layer_norm")) {
        int k = 1;
        lz_tensor *w = lz_test_fx_int(fx, "has_weight", 0) && k < n ? in[k++] : NULL;
        lz_tensor *b = lz_test_fx_int(fx, "has_bias", 0) && k < n ? in[k++] : NULL;
        return lz_layer_norm(in[0], (int)lz_test_fx_int(fx, "n_axes", 1), w, b,
                             (float)lz_test_fx_float(fx, "eps", NAN));
    }
    if (!strcmp(op, "attention"))
        return lz_attention(in[0], in[1], in[2], lz_test_fx_int(fx, "has_mask", 0) && n > 3 ? in[3] : NULL,
                            (float)lz_test_fx_float(fx, "scale", NAN));
    return NULL;
}

int main(int argc, char **argv)
{
    char dir[1024];
    if (argc > 1) snprintf(dir, sizeof dir, "%s", argv[1]);
    else snprintf(dir, sizeof dir, "%s/nn", lz_test_fx_dir());
    const lz_test_pc_hooks h = {
        .ops = OPS, .n_ops = N_OPS, .file_width = 26, .need_refs = 1, .run = run_op,
    };
    if (lz_test_pc_run_all(dir, &h) != 0) return lz_test_done();
    lz_test_pc_summary(OPS, N_OPS, 11);
    return lz_test_done();
}
