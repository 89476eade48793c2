/* The differential tester of tests/fuzz/capture_diff.h on a fixed set of
 * programs, without libFuzzer: each program runs lazily and captured and
 * every call's results must be equal byte for byte. Prints how many
 * programs ran and, per kind of change, how many used it and how many of
 * those differed.
 *
 *   LZ_DIFF_KINDS     kinds drawn (default: those expected to pass)
 *   LZ_DIFF_PROGRAMS  how many programs (default 1000)
 *   LZ_DIFF_FIRST     the first program's number (default 0)
 *   LZ_DIFF_VERBOSE   1: print every differing program, not the first 5 */
#include <math.h>

#include "testlib.h"
#include "fuzz/capture_diff.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

int main(void)
{
    if (diff_read_kinds() != 0) return 1;
    long n = env_long("LZ_DIFF_PROGRAMS", 1000), first = env_long("LZ_DIFF_FIRST", 0);
    int verbose = env_long("LZ_DIFF_VERBOSE", 0) != 0;
    int used[K_COUNT] = {0}, bad[K_COUNT] = {0}, differs = 0;
    char on[512];
    kinds_str(on, sizeof on, diff_enabled);
    printf("test_capture_diff: kinds %s\n", on);
    for (long s = first; s < first + n; s++) {
        uint8_t bytes[64];
        uint64_t st = (uint64_t)s;
        for (int i = 0; i < 64; i += 8) {
            uint64_t x = splitmix(&st);
            memcpy(bytes + i, &x, 8);
        }
        dresult res;
        diff_program(bytes, sizeof bytes, &res);
        for (int k = 0; k < K_COUNT; k++) {
            used[k] += res.kinds_used[k];
            bad[k] += res.kinds_used[k] && res.differs;
        }
        if (res.differs && (verbose || differs < 5)) {
            char u[256];
            kinds_str(u, sizeof u, res.kinds_used);
            printf("program %ld differs (kinds %s): %s\n", s, u, res.report);
        }
        differs += res.differs;
    }
    printf("test_capture_diff: %ld programs, %d differ; %ld captured calls, %ld of them replays\n",
           n, differs, diff_captured_calls, diff_replays);
    for (int k = 0; k < K_COUNT; k++)
        if (diff_enabled[k])
            printf("  %-14s used by %4d, of which %4d differ\n", diff_kinds[k].name, used[k], bad[k]);
    CHECK_EQ_I(differs, 0);
    /* capture really replayed, not only traced: with every kind of change
       on, about 0.6 replays a program (most changes make it trace again) */
    CHECK(n == 0 || diff_replays > n / 3);
    lz_shutdown();
    return lz_test_done();
}
