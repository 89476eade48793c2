/* The way bf16 products run on this CPU, and its one notice. */
#include "backends/cpu/bf16_isa.h"

#include <dnnl.h>
#include <pthread.h>

#include "base/error.h"

static pthread_once_t once = PTHREAD_ONCE_INIT, told = PTHREAD_ONCE_INIT;
static int way, amx;

static void find_way(void)
{
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const unsigned bf16 = dnnl_cpu_isa_avx512_core_bf16, tiles = dnnl_cpu_isa_avx512_core_amx;
    way = (isa & bf16) == bf16 ? LZ_BF16_NATIVE : LZ_BF16_WIDENED;
    amx = (isa & tiles) == tiles;
}

int lz_cpu_bf16_way(void)
{
    pthread_once(&once, find_way);
    return way;
}

int lz_cpu_bf16_amx(void)
{
    pthread_once(&once, find_way);
    return amx;
}

static void tell(void)
{
    if (lz_cpu_bf16_way() == LZ_BF16_WIDENED)
        lz_notice("no AVX512_BF16 instructions (as oneDNN sees this CPU): autocast keeps its "
                  "products float32, and bf16 operands are widened to float32 (no speed-up; "
                  "oneDNN's bf16 emulation is slower than float32)");
}

void lz_cpu_bf16_notice(void) { pthread_once(&told, tell); }
