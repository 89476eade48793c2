/* lazyc built without MPI: every lz_dist_* call that would communicate is
 * an error saying so. This program links the no-MPI communication module
 * (src/comm/comm_none.c) in place of the MPI one, so the check runs in an
 * MPI build too. */
#undef LZ_HAVE_MPI
#include "../src/comm/comm_none.c"

#include <string.h>

#include "testlib.h"

static void says_no_mpi(const char *call)
{
    const char *e = lz_last_error();
    CHECK(e && strstr(e, call) && strstr(e, "built without MPI support"));
    lz_clear_error();
}

int main(void)
{
    CHECK(lz_dist_init() == -1);
    says_no_mpi("lz_dist_init");
    CHECK_EQ_I(lz_dist_rank(), 0);
    CHECK_EQ_I(lz_dist_size(), 1);
    lz_tensor *x = lz_from_host((float[]){1, 2}, LZ_F32, 1, (int64_t[]){2});
    lz_requires_grad(x, 1);
    CHECK(lz_dist_all_reduce(x, 1) == NULL);
    says_no_mpi("lz_dist_all_reduce");
    CHECK(lz_dist_average_grads(&x, 1) == -1);
    says_no_mpi("lz_dist_average_grads");
    CHECK(lz_dist_broadcast(&x, 1) == -1);
    says_no_mpi("lz_dist_broadcast");
    lz_dist_finalize();   /* nothing joined: nothing to do */
    lz_free(x);
    return lz_test_done();
}
