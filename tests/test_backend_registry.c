/* The backend registry (backend/registry.c): device memory and the
 * compiler reach the backend only through the registered table. Before
 * anything is registered, allocating fails with a clear error (no crash);
 * a backend registered before the first tensor is the one every buffer,
 * compile and run goes through; otherwise the first tensor registers the
 * CPU backend (engine/tensor_api.c). */
#include <math.h>
#include <string.h>

#include "testlib.h"
#include "backend/backend.h"
#include "backend/buffer.h"
#include "backends/cpu/kernels.h"

static lz_backend counting;
static int allocs, prepares, runs;

static void *count_alloc(size_t nbytes)
{
    allocs++;
    return lz_backend_cpu()->alloc(nbytes);
}

static lz_backend_exec *count_prepare(struct lz_program *p)
{
    prepares++;
    return lz_backend_cpu()->prepare(p);
}

static const char *count_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    runs++;   /* executor thread; read after lz_item waited for it */
    return lz_backend_cpu()->run(e, ptrs, arena);
}

int main(void)
{
    /* nothing registered: an error naming it, not a crash */
    CHECK(lz_backend_current() == NULL);
    lz_buffer *b = lz_buffer_new(64);
    CHECK(b == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "no backend registered") != NULL);

    /* registered before the first tensor: used for memory, compile and run */
    counting = *lz_backend_cpu();
    counting.name = "counting";
    counting.alloc = count_alloc;
    counting.prepare = count_prepare;
    counting.run = count_run;
    lz_backend_register(&counting);
    const float x[4] = {1, 2, 3, 4};
    const int64_t shape[1] = {4};
    lz_tensor *t = lz_from_host(x, LZ_F32, 1, shape);
    CHECK(t != NULL);
    CHECK(lz_backend_current() == &counting);   /* the first tensor kept it */
    CHECK_EQ_I(allocs, 1);
    lz_tensor *sq = lz_mul(t, t);
    lz_tensor *s = lz_sum(sq);
    CHECK_NEAR(lz_item(s), 30.0, 1e-6);
    CHECK_EQ_I(prepares, 1);
    CHECK_EQ_I(runs, 1);
    CHECK(allocs > 1);   /* the execution's output */
    lz_free(s);
    lz_free(sq);
    lz_free(t);
    lz_shutdown();
    return lz_test_done();
}
