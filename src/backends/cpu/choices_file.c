/* A table of timed choices and its file (see choices_file.h). */
#include "backends/cpu/choices_file.h"

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
static void choose_path(lz_choices *c)
{
    char *path = c->path, *identity = c->identity;
    const size_t path_cap = sizeof c->path;
    char cpu[64];
    cpu_model(cpu, sizeof cpu);
    const dnnl_version_t *v = dnnl_version();
    snprintf(identity, sizeof c->identity, "cpu %s; isa %s; oneDNN %d.%d.%d (%s); lazyc %s", cpu,
             isa_name(dnnl_get_effective_cpu_isa()), v->major, v->minor, v->patch,
             v->hash ? v->hash : "", lz_version());
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')   /* the XDG spec ignores a relative path */
        n = snprintf(path, path_cap, "%s/lazyc", xdg);
    else if (home && home[0])
        n = snprintf(path, path_cap, "%s/.cache/lazyc", home);
    else
        n = -1;
    if (n < 0 || (size_t)n + 64 >= path_cap) {
        path[0] = '\0';
        return;
    }
    snprintf(path + n, path_cap - (size_t)n, "/%s%016llx.txt", c->prefix,
             (unsigned long long)lz_hash_str(identity));
}

static int find_locked(const lz_choices *c, const int64_t *key)
{
    for (int i = 0; i < c->n; i++)
        if (!memcmp(c->table[i].key, key, sizeof(int64_t) * (size_t)c->key_len)) return i;
    return -1;
}

/* One line of choices: the key's numbers, then the value. 0 if it parses. */
static int parse_line(const lz_choices *c, char *line, int64_t *key, int64_t *value)
{
    char *p = line, *end;
    for (int k = 0; k <= c->key_len; k++) {
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno) return -1;
        if (k < c->key_len) key[k] = v;
        else if (v < c->lo || v > c->hi) return -1;
        else *value = v;
        p = end;
    }
    while (*p == ' ' || *p == '\t') p++;
    return *p == '\n' || *p == '\0' ? 0 : -1;
}

/* Reads the file's choices into the table; a file that does not parse or
   names another identity adds nothing. */
static void read_file_locked(lz_choices *c)
{
    c->read_once = 1;
    const char *path = c->path, *identity = c->identity;
    if (!lz_setting_int(LZ_SETTING_CONV_CACHE)) return;
    choose_path(c);
    if (!path[0]) return;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno != ENOENT)
            lz_notice("%s: cannot read the %s (%s); they are timed again", path, c->what,
                   strerror(errno));
        return;
    }
    char line[1024];
    const int n0 = c->n;
    int lineno = 0, bad = 0;
    const size_t id_len = strlen(identity);
    if (!fgets(line, sizeof line, f) || strncmp(line, c->magic, strlen(c->magic)) ||
        strcmp(line + strlen(c->magic), "\n")) {
        bad = 1;
    } else if (!fgets(line, sizeof line, f) || strncmp(line, "for: ", 5) || !strchr(line, '\n')) {
        bad = 1;
        lineno = 2;
    } else if (strncmp(line + 5, identity, id_len) || strcmp(line + 5 + id_len, "\n")) {
        line[strcspn(line, "\n")] = '\0';
        lz_notice("%s was written for another machine or version (%s; this is %s): ignored, its "
               "%s are timed again", path, line, identity, c->what);
        fclose(f);
        return;
    }
    if (!bad) lineno = 2;
    while (!bad && fgets(line, sizeof line, f)) {
        lineno++;
        int64_t key[LZ_CHOICES_MAX_KEY] = {0}, value = 0;
        if (!strchr(line, '\n') && !feof(f)) bad = 1;   /* a line too long */
        else if (parse_line(c, line, key, &value)) bad = 1;
        else if (find_locked(c, key) < 0 && c->n < LZ_CHOICES_MAX) {
            memcpy(c->table[c->n].key, key, sizeof key);
            c->table[c->n++].value = value;
        }
    }
    if (ferror(f)) bad = 1;
    fclose(f);
    if (bad) {
        c->n = n0;
        lz_notice("%s: not a file of %s (line %d does not parse): ignored, its "
               "choices are timed again and the file replaced", path, c->what, lineno ? lineno : 1);
        return;
    }
    c->loaded += c->n - n0;
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
static void write_file_locked(lz_choices *c)
{
    const char *path = c->path;
    if (!path[0]) return;
    char *saved = lz_last_error() ? strdup(lz_last_error()) : NULL;
    char dir[sizeof c->path];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    const char *why = NULL;
    char msg[sizeof c->path + 200];
    lz_durable d;
    if (make_dirs(dir) != 0) {
        snprintf(msg, sizeof msg, "%s: cannot create the directory: %s", dir, strerror(errno));
        why = msg;
    } else if (lz_durable_open(&d, "lazyc", path) != 0) {
        why = lz_last_error();
    } else {
        int ok = fprintf(d.f, "%s\nfor: %s\n", c->magic, c->identity) > 0;
        for (int i = 0; ok && i < c->n; i++) {
            for (int k = 0; ok && k < c->key_len; k++)
                ok = fprintf(d.f, "%lld ", (long long)c->table[i].key[k]) > 0;
            ok = ok && fprintf(d.f, "%lld\n", (long long)c->table[i].value) > 0;
        }
        if (!ok) {
            lz_durable_abort(&d);
            snprintf(msg, sizeof msg, "%s: write failed: %s", path, strerror(errno));
            why = msg;
        } else if (lz_durable_commit(&d, "lazyc", path) != 0) {
            why = lz_last_error();
        }
    }
    if (why && !c->write_noticed) {
        c->write_noticed = 1;
        lz_notice("the %s are kept for this process only: %s", c->what, why);
    }
    if (saved) {
        lz_errorf("%s", saved);
        free(saved);
    } else {
        lz_clear_error();
    }
}

int64_t lz_choices_find(lz_choices *c, const int64_t *key, int64_t missing)
{
    pthread_mutex_lock(&c->lock);
    if (!c->read_once) read_file_locked(c);
    const int i = find_locked(c, key);
    const int64_t v = i >= 0 ? c->table[i].value : missing;
    pthread_mutex_unlock(&c->lock);
    return v;
}

void lz_choices_put(lz_choices *c, const int64_t *key, int64_t value)
{
    pthread_mutex_lock(&c->lock);
    if (!c->read_once) read_file_locked(c);
    int i = find_locked(c, key);
    if (i < 0 && c->n < LZ_CHOICES_MAX) i = c->n++;
    if (i >= 0) {
        memset(c->table[i].key, 0, sizeof c->table[i].key);
        memcpy(c->table[i].key, key, sizeof(int64_t) * (size_t)c->key_len);
        c->table[i].value = value;
        write_file_locked(c);
    }
    pthread_mutex_unlock(&c->lock);
}

int64_t lz_choices_loaded(lz_choices *c)
{
    pthread_mutex_lock(&c->lock);
    const int64_t n = c->loaded;
    pthread_mutex_unlock(&c->lock);
    return n;
}

int lz_choices_list(lz_choices *c, lz_choice_entry *out, int cap)
{
    pthread_mutex_lock(&c->lock);
    if (!c->read_once) read_file_locked(c);
    const int n = c->n < cap ? c->n : cap;
    memcpy(out, c->table, sizeof *out * (size_t)(n > 0 ? n : 0));
    pthread_mutex_unlock(&c->lock);
    return n;
}

void lz_choices_path(lz_choices *c, char *out, size_t n)
{
    pthread_mutex_lock(&c->lock);
    if (!c->read_once) read_file_locked(c);
    snprintf(out, n, "%s", c->path);
    pthread_mutex_unlock(&c->lock);
}
