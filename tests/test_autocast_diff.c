/* The differential tester of tests/fuzz/autocast_diff.h on a fixed set of
 * programs, without libFuzzer: each program runs under autocast and with
 * autocast emulated by explicit casts, and every logged value must be equal
 * byte for byte. Prints how many programs ran, how many used each event,
 * and the first differences.
 *
 *   LZ_DIFF_PROGRAMS  how many programs (default 400)
 *   LZ_DIFF_FIRST     the first program's number (default 0) */
#include <stdlib.h>
#include <math.h>

#include "testlib.h"
#include "fuzz/autocast_diff.h"

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
    /* the bf16 machinery itself: every product bf16, whatever this CPU runs
       faster (which products autocast keeps float32: test_product_choice) */
    setenv("LZ_AUTOCAST_PRODUCTS", "bf16", 1);
    long n = env_long("LZ_DIFF_PROGRAMS", 400), first = env_long("LZ_DIFF_FIRST", 0);
    int used[E_COUNT] = {0}, differs = 0;
    for (long s = first; s < first + n; s++) {
        uint8_t bytes[64];
        uint64_t st = (uint64_t)s + 0x5eed;
        for (int i = 0; i < 64; i += 8) {
            uint64_t x = splitmix(&st);
            memcpy(bytes + i, &x, 8);
        }
        aresult res;
        autocast_diff_program(bytes, sizeof bytes, &res);
        for (int k = 0; k < E_COUNT; k++) used[k] += res.events_used[k];
        if (res.differs && differs < 5) printf("program %ld differs: %s\n", s, res.report);
        differs += res.differs;
    }
    printf("test_autocast_diff: %ld programs, %d differ\n", n, differs);
    for (int k = 0; k < E_COUNT; k++)
        printf("  %-10s used by %4d programs\n", autocast_diff_events[k], used[k]);
    CHECK_EQ_I(differs, 0);
    lz_shutdown();
    return lz_test_done();
}
