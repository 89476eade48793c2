/* lz_dist_* in a process started alone (no mpirun): rank 0 of 1, a sum over
 * ranks is the tensor itself; and where the compiler puts the two halves of
 * a sum (compile/schedule_comm.c): each start, and the steps making its
 * inputs, as early as they can run; each wait right before its sum is
 * read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "comm/comm.h"
#include "compile/program.h"

static void test_alone(void)
{
    CHECK_EQ_I(lz_dist_rank(), 0);
    CHECK_EQ_I(lz_dist_size(), 1);
    float v[3] = {1, -2, 3.5f};
    lz_tensor *x = lz_from_host(v, LZ_F32, 1, (int64_t[]){3});
    /* not joined yet (or no MPI at all): an error naming the call */
    CHECK(lz_dist_all_reduce(x, 0) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), lz_comm_built()
                                                         ? "lz_dist_all_reduce: call lz_dist_init first"
                                                         : "lz_dist_all_reduce: lazyc was built without MPI"));
    lz_clear_error();
    if (!lz_comm_built()) {   /* test_dist_nompi covers that build */
        lz_free(x);
        return;
    }
    CHECK(lz_dist_init() == 0);
    CHECK(lz_dist_init() == 0);   /* idempotent */
    CHECK_EQ_I(lz_dist_rank(), 0);
    CHECK_EQ_I(lz_dist_size(), 1);
    lz_tensor *s = lz_dist_all_reduce(x, 0), *m = lz_dist_all_reduce(x, 1);
    float *rs = lz_test_read(s), *rm = lz_test_read(m);
    CHECK(rs && rm && !memcmp(rs, v, sizeof v) && !memcmp(rm, v, sizeof v));
    free(rs);
    free(rm);
    lz_requires_grad(x, 1);
    CHECK(lz_dist_average_grads(&x, 1) == 0);   /* one rank: nothing to do */
    CHECK(lz_dist_broadcast(&x, 1) == 0);
    /* a NULL entry is an error at any size, not only under mpirun */
    lz_tensor *none[2] = {x, NULL};
    lz_clear_error();
    CHECK(lz_dist_average_grads(none, 2) == -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_dist_average_grads: parameter 1 is NULL"));
    lz_clear_error();
    CHECK(lz_dist_broadcast(none, 2) == -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_dist_broadcast: tensor 1 is NULL"));
    lz_clear_error();
    CHECK(lz_dist_all_reduce(lz_from_host((int64_t[]){1}, LZ_I64, 1, (int64_t[]){1}), 0) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "f32"));
    lz_free(s);
    lz_free(m);
    lz_free(x);
    lz_dist_finalize();
}

/* A hand-made schedule, as lowering gives it (post-order): 0 a = relu(in),
   1 b = relu(a), 2 c = relu(b) (backward's chain of input gradients),
   3 gw = relu(a) (a weight gradient, left after the chain), 4 start(gw),
   5 w = wait(start), 6 d = relu(c), 7 e = add(w, d) (the update). The
   start and the step making its input move up to right after a; the wait
   moves down to right before e, its first reader; the rest keeps its
   order. */
static void test_schedule(void)
{
    lz_value values[9] = {{.kind = LZ_VALUE_INPUT}};
    int in[8][2] = {{0}, {1}, {2}, {1}, {4}, {5}, {3}, {6, 7}};
    const uint16_t ops[8] = {LZ_OP_RELU, LZ_OP_RELU, LZ_OP_RELU, LZ_OP_RELU, LZ_OP_ALLREDUCE_START,
                             LZ_OP_ALLREDUCE_WAIT, LZ_OP_RELU, LZ_OP_ADD};
    lz_instr steps[8];
    memset(steps, 0, sizeof steps);
    for (int i = 0; i < 8; i++) {
        steps[i].op = ops[i];
        steps[i].out = i + 1;
        steps[i].n_in = ops[i] == LZ_OP_ADD ? 2 : 1;
        steps[i].in = in[i];
    }
    lz_program p = {.n_values = 9, .values = values, .n_instrs = 8, .instrs = steps};
    lz_schedule_collectives(&p, 0x1234);
    const int want[8] = {1, 4, 5, 2, 3, 7, 6, 8};   /* the steps, by the value each makes */
    for (int i = 0; i < 8; i++) CHECK_EQ_I(p.instrs[i].out, want[i]);
    CHECK_EQ_I(p.instrs[2].op, LZ_OP_ALLREDUCE_START);
    CHECK_EQ_I(p.instrs[2].iattr[0], 0x1234);   /* the graph, in the signature */
    CHECK_EQ_I(p.instrs[2].iattr[1], 0);        /* its first sum */
}

int main(void)
{
    test_alone();
    test_schedule();
    return lz_test_done();
}
