/* Records a TEST_GATE op: an identity whose kernel blocks while the test
 * gate is closed (see backends/cpu/test_gate.h). Tests only. */
#include "ops/test_gate.h"

lz_tensor *lz_test_gate(lz_tensor *x)
{
    lz_tensor *in[1] = {x};
    if (lz_check_operands("lz_test_gate", 1, in)) return NULL;
    return lz_record(LZ_OP_TEST_GATE, (lz_dtype)x->node->dtype, x->node->ndim, x->node->shape, 1, in, NULL);
}
