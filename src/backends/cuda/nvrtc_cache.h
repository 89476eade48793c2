/* CUDA source to device code with NVRTC, cached on disk (nvrtc_cache.c).
 * NVRTC runs on the CPU: this needs no GPU, so the tests compile every
 * kernel source on machines without one. Internal to backends/cuda/. */
#ifndef LZ_CU_NVRTC_CACHE_H
#define LZ_CU_NVRTC_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* The family sources and headers under kernels/ and base/rng.h, embedded
   at build time (cu_sources.c, made by CMake from the files). */
typedef struct lz_cu_source {
    const char *name;        /* "k_misc.cu", "k_common.cuh", "base/rng.h" ... */
    const char *text;
} lz_cu_source;
extern const lz_cu_source lz_cu_sources[];
extern const int lz_cu_n_sources;
/* the embedded file called name, or NULL */
const char *lz_cu_source_text(const char *name);

typedef struct lz_cu_image {
    void *data;              /* a cubin for sm_<arch>; the caller frees it */
    size_t size;
    int from_cache;          /* read from the disk cache, not compiled */
} lz_cu_image;

/* The cache key of a compile: a hash of the source, of every embedded
   header it may include, of the options, of NVRTC's version and of the
   target architecture (32 hex digits). */
void lz_cu_cache_key(const char *src, int arch, const char *option, char key[33]);
/* the same for a given NVRTC version (tests: keys differ across versions) */
void lz_cu_cache_key_for(const char *src, int arch, const char *option, int nvrtc_major, int nvrtc_minor,
                         char key[33]);

/* The cache's folder: ${XDG_CACHE_HOME:-$HOME/.cache}/lazyc/cuda. 0, or
   -1 when there is none (neither set). */
int lz_cu_cache_dir(char *buf, size_t n);

/* Compiles src (its name for messages) for sm_<arch> (90: Hopper) with
   the embedded headers and one extra NVRTC option (or NULL). With
   cache_dir, a cubin stored there under the key is used instead when it
   reads back whole (a truncated or altered file is ignored and
   rewritten), and a compiled one is stored (temporary file, then rename).
   0, or -1 with err set; a source NVRTC refuses is kept with NVRTC's log
   in the cache folder (or /tmp) and the message names the file. */
int lz_cu_compile(const char *name, const char *src, int arch, const char *option, const char *cache_dir,
                  lz_cu_image *out, char *err, size_t errn);

/* The same source to PTX for compute_<arch>, never cached: NVRTC's
   front end and code generator without ptxas (the tests' check of a
   generated source). */
int lz_cu_compile_ptx(const char *name, const char *src, int arch, const char *option, lz_cu_image *out,
                      char *err, size_t errn);

/* Since the process started: cubins read from the cache, compiled, and
   cache files ignored as unreadable or corrupt (tests). */
int64_t lz_cu_cache_hits(void);
int64_t lz_cu_cache_compiles(void);
int64_t lz_cu_cache_rejects(void);

#endif
