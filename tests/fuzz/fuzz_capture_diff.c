/* libFuzzer harness: the differential tester of capture/capture_diff.h. A
 * program whose captured run differs from its lazy run (a value, a
 * gradient, a return code or an error message) aborts with the first
 * difference. LZ_DIFF_KINDS chooses the changes drawn between calls. */
#include "capture_diff.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("LZ_CACHE_CAPACITY", "64", 0);
    if (diff_read_kinds() != 0) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dresult res;
    diff_program(data, size, &res);
    if (res.differs) {
        char used[256];
        kinds_str(used, sizeof used, res.kinds_used);
        fprintf(stderr, "fuzz_capture_diff: captured and lazy runs differ (kinds %s): %s\n", used,
                res.report);
        abort();
    }
    return 0;
}
