/* The convolution choices' table and its file (see conv_choices.h). */
#include "backends/cpu/conv_choices.h"

#include <dnnl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "base/durable.h"
#include "base/error.h"
#include "base/op.h"
#include "base/settings.h"

#define MAGIC "lazyc convolution choices 1"
#define N_CHOICES 2048

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct { int64_t key[LZ_CONV_KEY_LEN]; int way; } table[N_CHOICES];
static int n_table;
static int read_once;
static int64_t loaded;
static char path[4096];       /* "" when the choices are not kept in a file */
static char identity[512];
static int write_noticed;

/* The CPU's model string (cpuid's brand string), spaces trimmed. */
static void cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown CPU");
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12];
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return;   /* int in clang, unsigned in gcc */
    for (unsigned i = 0; i < 3; i++)
        __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char brand[49];
    memcpy(brand, r, 48);
    brand[48] = '\0';
    const char *b = brand;
    while (*b == ' ') b++;
    size_t len = strlen(b);
    while (len && b[len - 1] == ' ') len--;
    if (len) snprintf(out, n, "%.*s", (int)len, b);
#endif
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

/* The file's path for this machine identity, or "" (no cache directory:
   neither XDG_CACHE_HOME, absolute, nor HOME set). */
static void choose_path(void)
{
    char cpu[64];
    cpu_model(cpu, sizeof cpu);
    const dnnl_version_t *v = dnnl_version();
    snprintf(identity, sizeof identity, "cpu %s; isa %s; oneDNN %d.%d.%d (%s); lazyc %s", cpu,
             isa_name(dnnl_get_effective_cpu_isa()), v->major, v->minor, v->patch,
             v->hash ? v->hash : "", lz_version());
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')   /* the XDG spec ignores a relative path */
        n = snprintf(path, sizeof path, "%s/lazyc", xdg);
    else if (home && home[0])
        n = snprintf(path, sizeof path, "%s/.cache/lazyc", home);
    else
        n = -1;
    if (n < 0 || (size_t)n + 48 >= sizeof path) {
        path[0] = '\0';
        return;
    }
    snprintf(path + n, sizeof path - (size_t)n, "/conv-choices-%016llx.txt",
             (unsigned long long)lz_hash_str(identity));
}

static int find_locked(const int64_t *key)
{
    for (int i = 0; i < n_table; i++)
        if (!memcmp(table[i].key, key, sizeof table[i].key)) return i;
    return -1;
}

/* One line of choices: the key's numbers, then the way. 0 if it parses. */
static int parse_line(char *line, int64_t *key, int *way)
{
    char *p = line, *end;
    for (int k = 0; k <= LZ_CONV_KEY_LEN; k++) {
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno) return -1;
        if (k < LZ_CONV_KEY_LEN) key[k] = v;
        else if (v < 0 || v >= LZ_CONV_WAYS) return -1;
        else *way = (int)v;
        p = end;
    }
    while (*p == ' ' || *p == '\t') p++;
    return *p == '\n' || *p == '\0' ? 0 : -1;
}

/* Reads the file's choices into the table; a file that does not parse or
   names another identity adds nothing. */
static void read_file_locked(void)
{
    read_once = 1;
    if (!lz_setting_int(LZ_SETTING_CONV_CACHE)) return;
    choose_path();
    if (!path[0]) return;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno != ENOENT)
            lz_notice("%s: cannot read the convolution choices (%s); they are timed again", path,
                   strerror(errno));
        return;
    }
    char line[1024];
    const int n0 = n_table;
    int lineno = 0, bad = 0;
    const size_t id_len = strlen(identity);
    if (!fgets(line, sizeof line, f) || strcmp(line, MAGIC "\n")) {
        bad = 1;
    } else if (!fgets(line, sizeof line, f) || strncmp(line, "for: ", 5) || !strchr(line, '\n')) {
        bad = 1;
        lineno = 2;
    } else if (strncmp(line + 5, identity, id_len) || strcmp(line + 5 + id_len, "\n")) {
        line[strcspn(line, "\n")] = '\0';
        lz_notice("%s was written for another machine or version (%s; this is %s): ignored, its "
               "convolution choices are timed again", path, line, identity);
        fclose(f);
        return;
    }
    if (!bad) lineno = 2;
    while (!bad && fgets(line, sizeof line, f)) {
        lineno++;
        int64_t key[LZ_CONV_KEY_LEN];
        int way = -1;
        if (!strchr(line, '\n') && !feof(f)) bad = 1;   /* a line too long */
        else if (parse_line(line, key, &way)) bad = 1;
        else if (find_locked(key) < 0 && n_table < N_CHOICES) {
            memcpy(table[n_table].key, key, sizeof key);
            table[n_table++].way = way;
        }
    }
    if (ferror(f)) bad = 1;
    fclose(f);
    if (bad) {
        n_table = n0;
        lz_notice("%s: not a file of convolution choices (line %d does not parse): ignored, its "
               "choices are timed again and the file replaced", path, lineno ? lineno : 1);
        return;
    }
    loaded += n_table - n0;
}

/* mkdir -p of path's directory. */
static int make_dirs(char *dir)
{
    for (char *s = dir + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        int rc = mkdir(dir, 0777);
        *s = '/';
        if (rc != 0 && errno != EEXIST) return -1;
    }
    return mkdir(dir, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Replaces the file with the table. A failure is noticed once; the
   caller's error state is left as it was. */
static void write_file_locked(void)
{
    if (!path[0]) return;
    char *saved = lz_last_error() ? strdup(lz_last_error()) : NULL;
    char dir[sizeof path];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    const char *why = NULL;
    char msg[sizeof path + 200];
    lz_durable d;
    if (make_dirs(dir) != 0) {
        snprintf(msg, sizeof msg, "%s: cannot create the directory: %s", dir, strerror(errno));
        why = msg;
    } else if (lz_durable_open(&d, "lazyc", path) != 0) {
        why = lz_last_error();
    } else {
        int ok = fprintf(d.f, "%s\nfor: %s\n", MAGIC, identity) > 0;
        for (int i = 0; ok && i < n_table; i++) {
            for (int k = 0; ok && k < LZ_CONV_KEY_LEN; k++)
                ok = fprintf(d.f, "%lld ", (long long)table[i].key[k]) > 0;
            ok = ok && fprintf(d.f, "%d\n", table[i].way) > 0;
        }
        if (!ok) {
            lz_durable_abort(&d);
            snprintf(msg, sizeof msg, "%s: write failed: %s", path, strerror(errno));
            why = msg;
        } else if (lz_durable_commit(&d, "lazyc", path) != 0) {
            why = lz_last_error();
        }
    }
    if (why && !write_noticed) {
        write_noticed = 1;
        lz_notice("the convolution choices are kept for this process only: %s", why);
    }
    if (saved) {
        lz_errorf("%s", saved);
        free(saved);
    } else {
        lz_clear_error();
    }
}

int lz_conv_choice_find(const int64_t *key)
{
    pthread_mutex_lock(&lock);
    if (!read_once) read_file_locked();
    const int i = find_locked(key), way = i >= 0 ? table[i].way : -1;
    pthread_mutex_unlock(&lock);
    return way;
}

void lz_conv_choice_put(const int64_t *key, int way)
{
    pthread_mutex_lock(&lock);
    if (!read_once) read_file_locked();
    int i = find_locked(key);
    if (i < 0 && n_table < N_CHOICES) i = n_table++;
    if (i >= 0) {
        memcpy(table[i].key, key, sizeof table[i].key);
        table[i].way = way;
        write_file_locked();
    }
    pthread_mutex_unlock(&lock);
}

int64_t lz_conv_choices_loaded(void)
{
    pthread_mutex_lock(&lock);
    const int64_t n = loaded;
    pthread_mutex_unlock(&lock);
    return n;
}
