/* The backend registry: device memory (memory.c), buffers (buffer.c), the
 * compiler and the executor reach the backend through this one table of
 * function pointers, never by calling an implementation in backends/,
 * which sits floors above them (it reads compiled programs). The engine,
 * above both, registers the backend the program asked for
 * (engine/device.c); a backend other than the CPU's is loaded here, from
 * its own shared object. */
#include <dlfcn.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/error.h"

static const lz_backend *_Atomic current;

void lz_backend_register(const lz_backend *b) { atomic_store(&current, b); }

const lz_backend *lz_backend_current(void) { return atomic_load(&current); }

/* The folder of the object this code is in: liblazyc.so's, or the
   program's when lazyc is linked in statically. The mapping that holds
   this function names its file (dladdr would give argv[0] for a program,
   which may be relative or /proc/self/exe). 0, or -1 when unknown. */
static int own_folder(char *dir, size_t cap)
{
    const uintptr_t here = (uintptr_t)&own_folder;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[PATH_MAX + 128];
    int found = -1;
    while (f && found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) != 2 || !at) continue;
        if (here < lo || here >= hi || line[at] != '/') continue;
        line[strcspn(line, "\n")] = 0;
        const char *slash = strrchr(line + at, '/');
        size_t len = (size_t)(slash - (line + at));
        if (len + 1 > cap) break;
        memcpy(dir, line + at, len);
        dir[len] = 0;
        found = 0;
    }
    if (f) fclose(f);
    return found;
}

const lz_backend *lz_backend_load(const char *name, const lz_backend_host *host)
{
    /* a name, never a path: LZ_DEVICE comes from the environment */
    size_t len = name ? strlen(name) : 0;
    if (!len || len > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != len)
        return lz_errorf("'%s' is not a device name (lower-case letters, digits and _)",
                         name ? name : "(null)");
    char file[96], dir[PATH_MAX], path[PATH_MAX + 100];
    snprintf(file, sizeof file, "liblazyc_%s.so", name);
    void *lib = NULL;
    char beside[PATH_MAX + 200] = "";
    if (own_folder(dir, sizeof dir) == 0) {
        snprintf(path, sizeof path, "%s/%s", dir, file);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib && access(path, F_OK) == 0)   /* there, but broken: say why */
            return lz_errorf("cannot load %s: %s", path, dlerror());
        if (!lib) snprintf(beside, sizeof beside, " (not in %s", dir);
    }
    if (!lib) lib = dlopen(file, RTLD_NOW | RTLD_LOCAL);   /* LD_LIBRARY_PATH, the system's */
    /* a backend of this repository that this build left out says so */
    if (!lib && !strcmp(name, "cuda"))
        return lz_errorf("lazyc was built without the CUDA backend: %s not found%s%s (configure where the "
                         "CUDA toolkit is, or with -DLZ_CUDA=ON to be told what is missing)", file, beside,
                         beside[0] ? " nor where the dynamic loader looks)" : "");
    if (!lib)
        return lz_errorf("no backend '%s': %s not found%s%s (lazyc built without it?)", name, file,
                         beside, beside[0] ? " nor where the dynamic loader looks)" : "");
    lz_backend_open_fn open_fn;
    *(void **)&open_fn = dlsym(lib, LZ_BACKEND_ENTRY);   /* POSIX's way to a function */
    if (!open_fn) {
        dlclose(lib);
        return lz_errorf("%s is not a lazyc backend: it has no %s", file, LZ_BACKEND_ENTRY);
    }
    const lz_backend *b = NULL;
    const char *why = open_fn(host, &b);
    /* never closed, even when it refused: its open may have started
       libraries (the CUDA runtime, cuDNN and their C++ runtime) that do
       not unload cleanly; what they allocated at load would read as leaked */
    if (why || !b)
        return lz_errorf("backend '%s' refused to start: %s", name, why ? why : "it gave no table");
    return b;
}
