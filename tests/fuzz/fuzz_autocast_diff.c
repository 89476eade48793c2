/* libFuzzer harness: the differential tester of autocast_diff.h. A program
 * whose autocast run differs from its run with explicit casts (a value, a
 * gradient, a return code or an error message) aborts with the first
 * difference. */
#include "autocast_diff.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("LZ_CACHE_CAPACITY", "64", 0);
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 0);   /* the bf16 products themselves */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    aresult res;
    autocast_diff_program(data, size, &res);
    if (res.differs) {
        fprintf(stderr, "fuzz_autocast_diff: autocast and explicit casts differ: %s\n", res.report);
        abort();
    }
    return 0;
}
