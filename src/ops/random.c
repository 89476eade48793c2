/* Random numbers: one global counter-based generator and dropout.
 *
 * The generator's seed and counter are two 0-d i64 data tensors that the
 * library owns. A random op reads both and advances the counter IN THE
 * GRAPH (lz_assign of an RNG_ADVANCE node), never on the host: a captured
 * step then treats the counter as state, like a parameter, and every replay
 * draws new numbers; a host-side counter would be frozen into the capture
 * and each replay would repeat the first mask. Element i of a draw is a
 * pure function of (seed, counter + i), so the numbers do not depend on
 * threads, on eager/lazy/captured mode, or on how a graph is scheduled. */
#include <string.h>

#include "autograd/autograd.h"
#include "base/error.h"
#include "base/thread.h"
#include "engine/capture_hooks.h"
#include "ops/nn_internal.h"
#include "ops/ops_util.h"

/* torch's default seed, so an unseeded program is still deterministic */
#define DEFAULT_SEED 67280421310721ull

static lz_tensor *rng_seed, *rng_counter;

static lz_tensor *library_scalar_i64(int64_t v)
{
    lz_tensor *t = lz_internal_data(&v, LZ_I64, 0, NULL);
    /* owned by the library for the life of the process: a scope open
       around the first random op must not drop it */
    if (t) lz_scope_forget(t);
    return t;
}

static int rng_create(uint64_t seed)
{
    int64_t s;
    memcpy(&s, &seed, sizeof s);
    lz_tensor *ts = library_scalar_i64(s), *tc = library_scalar_i64(0);
    if (!ts || !tc) {
        lz_free(ts);
        lz_free(tc);
        return -1;
    }
    rng_seed = ts;
    rng_counter = tc;
    /* made inside a traced step, they would be taken for its temporaries */
    lz_capture_note_internal_state();
    return 0;
}

void lz_random_shutdown(void)
{
    lz_free(rng_seed);
    lz_free(rng_counter);
    rng_seed = rng_counter = NULL;
}

void lz_manual_seed(uint64_t seed)
{
    if (lz_owner_check("lz_manual_seed")) return;
    if (!rng_seed) {
        rng_create(seed);
        return;
    }
    int64_t s, zero = 0;
    memcpy(&s, &seed, sizeof s);
    /* fresh buffers, not overwrites: a capture bound to these tensors reads
       the new values on its next replay */
    if (lz_copy_from_host(rng_seed, &s, sizeof s) == 0)
        lz_copy_from_host(rng_counter, &zero, sizeof zero);
}

lz_tensor *lz_dropout(lz_tensor *x, float p, int training)
{
    if (lz_check_operands("lz_dropout", 1, &x)) return NULL;
    if (!lz_require_f32("lz_dropout", x)) return NULL;
    if (!(p >= 0.0f && p <= 1.0f))
        return lz_errorf("lz_dropout: p = %g is not a probability in [0, 1]", (double)p);
    if (!training || p == 0.0f) return lz_nn_alias("lz_dropout", x);
    if (!rng_seed && rng_create(DEFAULT_SEED) != 0) return NULL;

    lz_tensor *state[2] = {rng_seed, rng_counter};
    lz_attrs am = {.n_fattr = 1, .fattr = {p}};
    lz_tensor *mask = lz_record(LZ_OP_DROPOUT_MASK, LZ_F32, lz_t_ndim(x), lz_t_shape(x), 2, state, &am);
    if (!mask) return NULL;
    const int64_t no_shape[1] = {0};   /* the counter is 0-d */
    lz_attrs aa = {.n_iattr = 1, .iattr = {lz_shape_numel(lz_t_ndim(x), lz_t_shape(x))}};
    lz_tensor *next = lz_record(LZ_OP_RNG_ADVANCE, LZ_I64, 0, no_shape, 1, &rng_counter, &aa);
    int rc = next ? lz_assign(rng_counter, next) : -1;
    lz_free(next);
    lz_tensor *y = rc == 0 ? lz_mul(x, mask) : NULL;
    lz_free(mask);
    return y;
}

/* A draw of shape from the generator: the RAND node reads (seed, counter),
   and the counter advances by the element count in the graph. */
static lz_tensor *draw(const char *name, int normal, int ndim, const int64_t *shape)
{
    if (lz_check_operands(name, 0, NULL) || lz_shape_check(name, LZ_F32, ndim, shape, NULL))
        return NULL;
    if (!rng_seed && rng_create(DEFAULT_SEED) != 0) return NULL;
    lz_tensor *state[2] = {rng_seed, rng_counter};
    lz_attrs ar = {.n_iattr = 1, .iattr = {normal}};
    lz_tensor *x = lz_record(LZ_OP_RAND, LZ_F32, ndim, shape, 2, state, &ar);
    if (!x) return NULL;
    const int64_t no_shape[1] = {0};
    lz_attrs aa = {.n_iattr = 1, .iattr = {lz_shape_numel(ndim, shape)}};
    lz_tensor *next = lz_record(LZ_OP_RNG_ADVANCE, LZ_I64, 0, no_shape, 1, &rng_counter, &aa);
    int rc = next ? lz_assign(rng_counter, next) : -1;
    lz_free(next);
    if (rc != 0) {
        lz_free(x);
        return NULL;
    }
    return x;
}

lz_tensor *lz_rand(int ndim, const int64_t *shape) { return draw("lz_rand", 0, ndim, shape); }
lz_tensor *lz_randn(int ndim, const int64_t *shape) { return draw("lz_randn", 1, ndim, shape); }

int lz_random_state(lz_tensor **seed, lz_tensor **counter)
{
    if (!rng_seed && rng_create(DEFAULT_SEED) != 0) return -1;
    *seed = rng_seed;
    *counter = rng_counter;
    return 0;
}
