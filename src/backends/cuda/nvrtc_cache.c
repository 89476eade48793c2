/* NVRTC compiles, cached on disk like the CPU's convolution choices
 * (backends/cpu/conv_choices.c): a compile of the same source, headers,
 * options, NVRTC version and architecture reads the cubin back instead of
 * compiling (hundreds of milliseconds for a program's element-wise
 * kernels, seconds for the family modules). A cache file holds a header
 * naming its key, the payload's length and checksum, then the cubin: one
 * that does not read back whole is ignored and written again, so a
 * crashed writer or a full disk costs a compile, never a wrong kernel. */
#include "backends/cuda/nvrtc_cache.h"

#include <errno.h>
#include <nvrtc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "LZCUBIN1"

static atomic_llong hits, compiles, rejects;

int64_t lz_cu_cache_hits(void) { return atomic_load(&hits); }
int64_t lz_cu_cache_compiles(void) { return atomic_load(&compiles); }
int64_t lz_cu_cache_rejects(void) { return atomic_load(&rejects); }

const char *lz_cu_source_text(const char *name)
{
    for (int i = 0; i < lz_cu_n_sources; i++)
        if (!strcmp(lz_cu_sources[i].name, name)) return lz_cu_sources[i].text;
    return NULL;
}

/* two 64-bit FNV-1a hashes with different bases: 128 bits of key */
typedef struct hash2 { uint64_t a, b; } hash2;

static void mix(hash2 *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h->a = (h->a ^ p[i]) * 0x100000001b3ull;
        h->b = (h->b ^ p[i]) * 0x100000001b3ull;
        h->b ^= h->b >> 29;
    }
}

static void mix_str(hash2 *h, const char *s)
{
    mix(h, s, strlen(s) + 1);   /* the terminator separates fields */
}

void lz_cu_cache_key(const char *src, int arch, const char *option, char key[33])
{
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    lz_cu_cache_key_for(src, arch, option, major, minor, key);
}

void lz_cu_cache_key_for(const char *src, int arch, const char *option, int major, int minor, char key[33])
{
    hash2 h = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    char meta[96];
    snprintf(meta, sizeof meta, "nvrtc %d.%d; sm_%d; %s", major, minor, arch, option ? option : "");
    mix_str(&h, meta);
    mix_str(&h, src);
    /* a generated source includes the headers: they are part of it */
    for (int i = 0; i < lz_cu_n_sources; i++) {
        mix_str(&h, lz_cu_sources[i].name);
        mix_str(&h, lz_cu_sources[i].text);
    }
    snprintf(key, 33, "%016llx%016llx", (unsigned long long)h.a, (unsigned long long)h.b);
}

int lz_cu_cache_dir(char *buf, size_t n)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && xdg[0] == '/') k = snprintf(buf, n, "%s/lazyc/cuda", xdg);   /* XDG ignores a relative path */
    else if (home && home[0]) k = snprintf(buf, n, "%s/.cache/lazyc/cuda", home);
    else return -1;
    return k > 0 && (size_t)k < n ? 0 : -1;
}

static uint64_t checksum(const void *data, size_t n)
{
    hash2 h = {0xcbf29ce484222325ull, 0};
    mix(&h, data, n);
    return h.a;
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

/* the cached cubin of key, or -1 (none, or not whole: counted as a reject) */
static int read_cached(const char *path, const char *key, lz_cu_image *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[16] = "", k[40] = "";
    unsigned long long size = 0, sum = 0;
    void *data = NULL;
    int ok = fscanf(f, "%15s %39s %llu %llx", magic, k, &size, &sum) == 4 && !strcmp(magic, MAGIC) &&
             !strcmp(k, key) && fgetc(f) == '\n' && size > 0 && size < (1ull << 31);
    if (ok && (data = malloc((size_t)size))) {
        ok = fread(data, 1, (size_t)size, f) == size && fgetc(f) == EOF && checksum(data, (size_t)size) == sum;
    } else {
        ok = 0;
    }
    fclose(f);
    if (!ok) {
        free(data);
        atomic_fetch_add(&rejects, 1);
        return -1;
    }
    *out = (lz_cu_image){data, (size_t)size, 1};
    atomic_fetch_add(&hits, 1);
    return 0;
}

/* stored whole or not at all: a temporary file beside it, then rename */
static void write_cached(const char *dir, const char *path, const char *key, const lz_cu_image *img)
{
    if (make_dirs(dir)) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    int ok = fprintf(f, "%s %s %zu %016llx\n", MAGIC, key, img->size,
                     (unsigned long long)checksum(img->data, img->size)) > 0 &&
             fwrite(img->data, 1, img->size, f) == img->size;
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    if (fclose(f) || !ok || rename(tmp, path)) unlink(tmp);
}

/* the source and NVRTC's log, kept where the message can name them */
static void keep_failure(const char *dir, const char *key, const char *src, const char *log, char *file, size_t n)
{
    snprintf(file, n, "%s/failed-%s.cu", dir && !make_dirs(dir) ? dir : "/tmp", key);
    FILE *f = fopen(file, "w");
    if (!f) {
        snprintf(file, n, "(not kept: %s)", strerror(errno));
        return;
    }
    fprintf(f, "%s\n/* NVRTC's log:\n%s\n*/\n", src, log);
    fclose(f);
}

/* NVRTC on src: a cubin for sm_<arch>, or PTX for compute_<arch> (no
   ptxas: what a check of the source alone needs). 0, or -1 + err. */
static int build(const char *name, const char *src, int arch, const char *option, int ptx, const char *keep_dir,
                 const char *key, lz_cu_image *out, char *err, size_t errn)
{
    const char *hnames[16], *htexts[16];
    int nh = 0;
    for (int i = 0; i < lz_cu_n_sources && nh < 16; i++) {
        const size_t len = strlen(lz_cu_sources[i].name);
        if (len > 3 && !strcmp(lz_cu_sources[i].name + len - 3, ".cu")) continue;   /* not a header */
        hnames[nh] = lz_cu_sources[i].name;
        htexts[nh++] = lz_cu_sources[i].text;
    }
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, name, nh, htexts, hnames);
    if (r != NVRTC_SUCCESS) {
        snprintf(err, errn, "cuda: NVRTC could not take %s: %s", name, nvrtcGetErrorString(r));
        return -1;
    }
    char opt_arch[40];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s_%d", ptx ? "compute" : "sm", arch);
    const char *opts[4] = {opt_arch, "--std=c++17", "--device-as-default-execution-space", option};
    r = nvrtcCompileProgram(prog, option ? 4 : 3, opts);
    atomic_fetch_add(&compiles, 1);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
        if (log) log[n] = 0;
        char file[4200];
        char first[240] = "";
        if (log) snprintf(first, sizeof first, "%s", log);
        first[strcspn(first, "\n")] = 0;
        keep_failure(keep_dir, key, src, log ? log : "(no log: out of memory)", file, sizeof file);
        snprintf(err, errn, "cuda: NVRTC could not compile %s for sm_%d: %s (source and log: %s)", name, arch,
                 first[0] ? first : nvrtcGetErrorString(r), file);
        free(log);
        nvrtcDestroyProgram(&prog);
        return -1;
    }
    size_t size = 0;
    void *data = NULL;
    const int got = ptx ? nvrtcGetPTXSize(prog, &size) == NVRTC_SUCCESS && size && (data = malloc(size)) &&
                              nvrtcGetPTX(prog, data) == NVRTC_SUCCESS
                        : nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS && size && (data = malloc(size)) &&
                              nvrtcGetCUBIN(prog, data) == NVRTC_SUCCESS;
    nvrtcDestroyProgram(&prog);
    if (!got) {
        free(data);
        snprintf(err, errn, "cuda: NVRTC compiled %s but gave no %s for sm_%d", name, ptx ? "PTX" : "cubin", arch);
        return -1;
    }
    *out = (lz_cu_image){data, size, 0};
    return 0;
}

int lz_cu_compile(const char *name, const char *src, int arch, const char *option, const char *cache_dir,
                  lz_cu_image *out, char *err, size_t errn)
{
    char key[33], path[4096] = "";
    lz_cu_cache_key(src, arch, option, key);
    if (cache_dir) {
        snprintf(path, sizeof path, "%s/sm_%d/%s.cubin", cache_dir, arch, key);
        if (read_cached(path, key, out) == 0) return 0;
    }
    if (build(name, src, arch, option, 0, cache_dir, key, out, err, errn)) return -1;
    if (cache_dir) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/sm_%d", cache_dir, arch);
        write_cached(dir, path, key, out);
    }
    return 0;
}

int lz_cu_compile_ptx(const char *name, const char *src, int arch, const char *option, lz_cu_image *out,
                      char *err, size_t errn)
{
    char key[33];
    lz_cu_cache_key(src, arch, option, key);
    return build(name, src, arch, option, 1, NULL, key, out, err, errn);
}
