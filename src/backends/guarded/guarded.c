/* The guarded backend: the proof that the engine never touches device
 * memory, and the reference for whoever writes a backend.
 *
 * It runs the CPU backend's kernels (handed over in the host table), but
 * keeps every buffer and arena in its own mapping whose pages are
 * PROT_NONE except inside this file's calls: a transfer opens the one
 * buffer it moves, a run opens the buffers and arena of its own operands,
 * and each closes them again when it returns. Any read or write of device
 * memory by the engine, ops, autograd, optimizers or io (a memcpy into a
 * buffer, a value read through its address) faults at once (SIGSEGV), even
 * while a run is in flight, unless it hits one of that run's own operands.
 * The core suites run on it (ctest -L guarded, LZ_DEVICE=guarded).
 *
 * It is a shared object of its own, liblazyc_guarded.so, loaded by the
 * registry (backend/registry.c) like any device's: it includes the
 * contract (backend/backend.h) and the program's layout
 * (compile/program.h) and calls nothing in liblazyc: what it needs of
 * the CPU backend comes through the host table's function pointers.
 *
 * Not for speed: every call is two mprotect calls per buffer it touches,
 * and every buffer at least a page. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "compile/program.h"

/* One mapping per allocation, kept sorted by address. opens counts the
   calls inside which it is readable (a run and a transfer may overlap on
   one buffer: the recording thread reads a result the executor's next run
   also reads), so it goes back to PROT_NONE only when the last closes. */
typedef struct region {
    uintptr_t start;
    size_t len;
    int opens;
} region;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static region *regions;
static size_t n_regions, cap_regions;
static size_t page;
static const lz_backend *cpu;
static void (*set_error)(const char *msg);

/* under mu: index of the region holding address a, or -1 */
static long find(uintptr_t a)
{
    size_t lo = 0, hi = n_regions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (regions[mid].start + regions[mid].len <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo < n_regions && regions[lo].start <= a ? (long)lo : -1;
}

static void *guarded_alloc(size_t nbytes)
{
    const size_t len = (nbytes + page - 1) / page * page;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    pthread_mutex_lock(&mu);
    if (n_regions == cap_regions) {
        size_t nc = cap_regions ? 2 * cap_regions : 256;
        region *r = realloc(regions, sizeof *r * nc);
        if (!r) {
            pthread_mutex_unlock(&mu);
            munmap(p, len);
            return NULL;
        }
        regions = r;
        cap_regions = nc;
    }
    size_t at = 0;
    while (at < n_regions && regions[at].start < (uintptr_t)p) at++;
    memmove(regions + at + 1, regions + at, sizeof *regions * (n_regions - at));
    regions[at] = (region){(uintptr_t)p, len, 0};
    n_regions++;
    pthread_mutex_unlock(&mu);
    return p;
}

static void guarded_free(void *p, size_t nbytes)
{
    (void)nbytes;
    pthread_mutex_lock(&mu);
    long i = find((uintptr_t)p);
    if (i < 0 || regions[i].start != (uintptr_t)p) abort();   /* not ours: the engine's bug */
    const size_t len = regions[i].len;
    memmove(regions + i, regions + i + 1, sizeof *regions * (n_regions - (size_t)i - 1));
    n_regions--;
    pthread_mutex_unlock(&mu);
    munmap(p, len);
}

/* under mu: makes region i readable and writable for one more call */
static void open_region(long i)
{
    if (regions[i].opens++ == 0 &&
        mprotect((void *)regions[i].start, regions[i].len, PROT_READ | PROT_WRITE) != 0)
        abort();
}

/* under mu */
static void close_region(uintptr_t start)
{
    long i = find(start);
    if (i < 0 || regions[i].opens <= 0) abort();
    if (--regions[i].opens == 0 && mprotect((void *)start, regions[i].len, PROT_NONE) != 0) abort();
}

/* Opens the buffer holding [p, p + nbytes): its start, or 0 when p is no
   buffer of this backend or the range runs past its end. */
static uintptr_t open_buffer(const void *p, size_t nbytes)
{
    pthread_mutex_lock(&mu);
    long i = find((uintptr_t)p);
    uintptr_t start = 0;
    if (i >= 0 && (uintptr_t)p + nbytes <= regions[i].start + regions[i].len) {
        open_region(i);
        start = regions[i].start;
    }
    pthread_mutex_unlock(&mu);
    return start;
}

static void close_buffer(uintptr_t start)
{
    pthread_mutex_lock(&mu);
    close_region(start);
    pthread_mutex_unlock(&mu);
}

static const char *not_ours = "guarded backend: an address that is not the start of one of its "
                              "buffers, or a range past the buffer's end";

static const char *guarded_to_device(void *dst, const void *src, size_t nbytes)
{
    uintptr_t d = open_buffer(dst, nbytes);
    if (!d) return not_ours;
    memcpy(dst, src, nbytes);
    close_buffer(d);
    return NULL;
}

static const char *guarded_to_host(void *dst, const void *src, size_t nbytes)
{
    uintptr_t s = open_buffer(src, nbytes);
    if (!s) return not_ours;
    memcpy(dst, src, nbytes);
    close_buffer(s);
    return NULL;
}

static const char *guarded_copy(void *dst, const void *src, size_t nbytes)
{
    uintptr_t d = open_buffer(dst, nbytes), s = d ? open_buffer(src, nbytes) : 0;
    if (!s) {
        if (d) close_buffer(d);
        return not_ours;
    }
    memmove(dst, src, nbytes);
    close_buffer(s);
    close_buffer(d);
    return NULL;
}

static const char *guarded_fill(void *dst, size_t nbytes, const void *value, size_t width)
{
    uintptr_t d = open_buffer(dst, nbytes);
    if (!d) return not_ours;
    const char *why = cpu->fill(dst, nbytes, value, width);
    close_buffer(d);
    return why;
}

static const char *guarded_fill_random(void *dst, int64_t n, uint64_t seed, int dist, float a, float b)
{
    uintptr_t d = open_buffer(dst, (size_t)n * sizeof(float));
    if (!d) return not_ours;
    const char *why = cpu->fill_random(dst, n, seed, dist, a, b);
    close_buffer(d);
    return why;
}

static const char *guarded_to_bf16(void *dst, const void *src, int64_t n)
{
    uintptr_t d = open_buffer(dst, (size_t)n * 2), s = d ? open_buffer(src, (size_t)n * 4) : 0;
    if (!s) {
        if (d) close_buffer(d);
        return not_ours;
    }
    const char *why = cpu->to_bf16(dst, src, n);
    close_buffer(s);
    close_buffer(d);
    return why;
}

/* ---- programs: the CPU's kernels on the operands opened for the run ---- */

struct lz_backend_exec {
    const lz_program *prog;
    lz_backend_exec *inner;   /* the CPU backend's */
};

static lz_backend_exec *guarded_prepare(lz_program *p)
{
    lz_backend_exec *e = malloc(sizeof *e);
    if (!e) {
        set_error("guarded backend: out of host memory preparing a program");
        return NULL;
    }
    e->prog = p;
    e->inner = cpu->prepare(p);
    if (!e->inner) {
        free(e);
        return NULL;
    }
    return e;
}

static void guarded_release(lz_backend_exec *e)
{
    cpu->release(e->inner);
    free(e);
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Opens the regions holding ptrs[0..n) and arena, once each; their starts
   go to starts (n + 1 long), the count is returned. An address in none (an
   empty arena's stand-in) is left alone. */
static int open_operands(void *const *ptrs, int n, void *arena, uintptr_t *starts)
{
    int k = 0;
    pthread_mutex_lock(&mu);
    for (int v = 0; v <= n; v++) {
        void *p = v < n ? ptrs[v] : arena;
        long i = p ? find((uintptr_t)p) : -1;
        if (i >= 0) starts[k++] = regions[i].start;
    }
    qsort(starts, (size_t)k, sizeof *starts, by_address);
    int u = 0;
    for (int j = 0; j < k; j++)
        if (!u || starts[u - 1] != starts[j]) starts[u++] = starts[j];
    for (int j = 0; j < u; j++) open_region(find(starts[j]));
    pthread_mutex_unlock(&mu);
    return u;
}

static void close_operands(const uintptr_t *starts, int n)
{
    pthread_mutex_lock(&mu);
    for (int j = 0; j < n; j++) close_region(starts[j]);
    pthread_mutex_unlock(&mu);
}

static const char *guarded_run(lz_backend_exec *e, void *const *ptrs, void *arena)
{
    const int n = e->prog->n_values;
    uintptr_t small[256], *starts = n < 256 ? small : malloc(sizeof *starts * (size_t)(n + 1));
    if (!starts) return "guarded backend: out of host memory for a run's operands";
    const int k = open_operands(ptrs, n, arena, starts);
    const char *why = cpu->run(e->inner, ptrs, arena);
    close_operands(starts, k);
    if (starts != small) free(starts);
    return why;
}

static void guarded_ready(lz_backend_exec *e, void *arena, size_t arena_bytes)
{
    if (!cpu->ready) return;
    uintptr_t a = arena ? open_buffer(arena, arena_bytes) : 0;
    cpu->ready(e->inner, a ? arena : NULL, a ? arena_bytes : 0);
    if (a) close_buffer(a);
}

static lz_backend guarded;

__attribute__((visibility("default")))
const char *lz_backend_open(const lz_backend_host *host, const lz_backend **out)
{
    if (!host || host->abi != LZ_BACKEND_ABI || host->size < sizeof *host)
        return "liblazyc_guarded.so was built for another version of the backend contract";
    if (!host->cpu || !host->set_error)
        return "the guarded backend runs the CPU backend's kernels, and none was given";
    long ps = sysconf(_SC_PAGESIZE);
    page = ps > 0 ? (size_t)ps : 4096;
    cpu = host->cpu;
    set_error = host->set_error;
    guarded = *cpu;   /* layouts, trim and the convolution rule are the CPU's */
    guarded.name = "guarded";
    guarded.alloc = guarded_alloc;
    guarded.free = guarded_free;
    guarded.to_device = guarded_to_device;
    guarded.to_host = guarded_to_host;
    guarded.copy = guarded_copy;
    guarded.fill = guarded_fill;
    guarded.fill_random = guarded_fill_random;
    guarded.to_bf16 = guarded_to_bf16;
    guarded.prepare = guarded_prepare;
    guarded.run = guarded_run;
    guarded.ready = guarded_ready;
    guarded.release = guarded_release;
    *out = &guarded;
    return NULL;
}
