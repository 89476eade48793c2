/* The LZ_* settings table (settings.h) and its one parser. */
#include "base/settings.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { KIND_BOOL, KIND_INT, KIND_CHOICE, KIND_TEXT };

typedef struct setting_def {
    const char *name, *def, *choices, *help;
    int kind;
    int64_t lo, hi;
} setting_def;

static const setting_def defs[LZ_SETTING_COUNT] = {
#define LZ_SETTING_DEF(id, kind, def, lo, hi, choices, help) \
    [LZ_SETTING_##id] = {"LZ_" #id, def, choices, help, KIND_##kind, lo, hi},
    LZ_SETTINGS(LZ_SETTING_DEF)
#undef LZ_SETTING_DEF
};

static const char *const kind_names[] = {"bool", "int", "choice", "text"};

/* Parsed values: read[i] is set (release) after value[i] is written, under
   mu, so a reader that sees it set sees the value. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int read_flag[LZ_SETTING_COUNT];
static int64_t value[LZ_SETTING_COUNT];

/* text -> *out per the entry's kind; 0, or -1 when text is not accepted */
/* An integer in [lo, hi] written as digits with an optional '-': no
   blanks, no '+', nothing after (strtoll alone would take " 12" and "+5"). */
static int parse_integer(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    const char *digits = text + (text[0] == '-');
    if (!isdigit((unsigned char)digits[0])) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*end != '\0' || errno != 0 || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse(const setting_def *d, const char *text, int64_t *out)
{
    switch (d->kind) {
    case KIND_BOOL:
        return parse_integer(text, 0, 1, out);
    case KIND_INT:
        return parse_integer(text, d->lo, d->hi, out);
    case KIND_CHOICE: {
        size_t len = strlen(text);
        int64_t index = 0;
        for (const char *c = d->choices; *c; index++) {
            size_t n = strcspn(c, "|");
            if (n == len && strncmp(c, text, n) == 0) {
                *out = index;
                return 0;
            }
            c += n + (c[n] == '|');
        }
        return -1;
    }
    default:
        *out = 0;
        return 0;
    }
}

/* What the entry accepts, in words, for warnings and `lazyc env`. */
static const char *accepted(const setting_def *d, char *buf, size_t cap)
{
    switch (d->kind) {
    case KIND_BOOL: return "0 or 1";
    case KIND_INT:
        snprintf(buf, cap, "an integer in [%lld, %lld]", (long long)d->lo, (long long)d->hi);
        return buf;
    case KIND_CHOICE:
        snprintf(buf, cap, "one of %s", d->choices);
        return buf;
    default: return "any text";
    }
}

/* The environment's value, NULL when unset or empty. */
static const char *env_of(const setting_def *d)
{
    const char *e = getenv(d->name);
    return e && *e ? e : NULL;
}

int64_t lz_setting_int(lz_setting_id id)
{
    if ((unsigned)id >= LZ_SETTING_COUNT) return 0;
    if (atomic_load_explicit(&read_flag[id], memory_order_acquire)) return value[id];
    const setting_def *d = &defs[id];
    pthread_mutex_lock(&mu);
    if (!atomic_load_explicit(&read_flag[id], memory_order_relaxed)) {
        int64_t v = 0;
        const char *e = env_of(d);
        if (e && parse(d, e, &v) != 0) {
            char buf[96];
            lz_warning("%s='%s' is not %s; using the default %s", d->name, e,
                       accepted(d, buf, sizeof buf), d->def);
            e = NULL;
        }
        if (!e) parse(d, d->def, &v);
        value[id] = v;
        atomic_store_explicit(&read_flag[id], 1, memory_order_release);
    }
    pthread_mutex_unlock(&mu);
    return value[id];
}

const char *lz_setting_text(lz_setting_id id)
{
    if ((unsigned)id >= LZ_SETTING_COUNT) return "";
    atomic_store_explicit(&read_flag[id], 1, memory_order_release);
    const char *e = env_of(&defs[id]);
    return e ? e : defs[id].def;
}

/* ---- the public listing (lazyc.h) ------------------------------------ */

int lz_settings_count(void) { return LZ_SETTING_COUNT; }

int lz_settings_get(int i, lz_setting_info *out)
{
    if (!out) return lz_errorf_int("lz_settings_get: NULL out");
    if (i < 0 || i >= LZ_SETTING_COUNT)
        return lz_errorf_int("lz_settings_get: index %d is outside [0, %d)", i, LZ_SETTING_COUNT);
    const setting_def *d = &defs[i];
    int64_t v;
    const char *e = env_of(d);
    *out = (lz_setting_info){
        .name = d->name, .kind = kind_names[d->kind], .default_value = d->def, .help = d->help,
        .choices = d->choices, .min = d->lo, .max = d->hi, .env = e,
        .valid = !e || parse(d, e, &v) == 0,
        .read = atomic_load_explicit(&read_flag[i], memory_order_acquire),
    };
    out->value = e && out->valid ? e : d->def;
    return 0;
}

const char *lz_setting(const char *name)
{
    for (int i = 0; name && i < LZ_SETTING_COUNT; i++)
        if (strcmp(defs[i].name, name) == 0) {
            if (defs[i].kind == KIND_TEXT) return lz_setting_text((lz_setting_id)i);
            lz_setting_int((lz_setting_id)i);   /* warns once if invalid */
            lz_setting_info info;
            lz_settings_get(i, &info);
            return info.value;
        }
    return lz_errorf("lz_setting: %s is not one of lazyc's settings (lazyc env lists them)",
                     name ? name : "NULL");
}
