/* lazyc train's summary: one JSON object, rewritten whole (and durably)
 * at the start, after every epoch and at the end, so the file is always
 * valid JSON that says how far the run got; a NaN or Inf is written as
 * null, since JSON has no such numbers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

typedef struct text {
    char *s;
    size_t n, cap;
    int oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { t->oom = 1; return; }
        if (t->s && t->n + (size_t)k < t->cap) { t->n += (size_t)k; return; }
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap <= t->n + (size_t)k) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) { t->oom = 1; return; }
        t->s = s;
        t->cap = cap;
    }
}

/* A number, or null when it is NaN or infinite. */
static void num(text *t, const char *key, double v, const char *fmt)
{
    add(t, "\"%s\": ", key);
    if (isfinite(v)) add(t, fmt, v);
    else add(t, "null");
}

static void str(text *t, const char *s)
{
    add(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') add(t, "\\%c", c);
        else if (c < 0x20) add(t, "\\u%04x", c);
        else add(t, "%c", c);
    }
    add(t, "\"");
}

int train_summary_add(train_summary *s, train_epoch e)
{
    if (s->n_epochs == s->cap_epochs) {
        int cap = s->cap_epochs ? s->cap_epochs * 2 : 8;
        train_epoch *ne = realloc(s->epochs, sizeof *ne * (size_t)cap);
        if (!ne) return -1;
        s->epochs = ne;
        s->cap_epochs = cap;
    }
    s->epochs[s->n_epochs++] = e;
    return 0;
}

int train_summary_write(const train_summary *s)
{
    if (s->silent) return 0;
    text t = {0};
    add(&t, "{\"model\": ");
    str(&t, s->model);
    add(&t, ", \"epochs\": [");
    for (int i = 0; i < s->n_epochs; i++) {
        const train_epoch *e = &s->epochs[i];
        add(&t, "%s{\"epoch\": %ld, \"steps\": %ld, ", i ? ", " : "", e->epoch, e->steps);
        num(&t, "train_loss", e->train_loss, "%.6f");
        add(&t, ", ");
        num(&t, "test_accuracy", e->test_accuracy, "%.6f");
        add(&t, ", ");
        num(&t, "lr_first", e->lr_first, "%.9g");
        add(&t, ", ");
        num(&t, "lr_last", e->lr_last, "%.9g");
        add(&t, "}");
    }
    add(&t, "], ");
    num(&t, "test_accuracy", s->test_accuracy, "%.6f");
    add(&t, ", ");
    num(&t, "wall_s", s->wall_s, "%.3f");
    add(&t, ", ");
    num(&t, "images_per_s", s->images_per_s, "%.1f");
    add(&t, ", \"steps\": %lld, \"executions\": %lld, \"status\": ", (long long)s->steps,
        (long long)s->executions);
    str(&t, s->status);
    add(&t, ", \"exit_code\": %d, \"error\": ", s->exit_code);
    if (s->error[0]) str(&t, s->error);
    else add(&t, "null");
    if (s->fail_global_step)
        add(&t, ", \"nonfinite_at\": {\"epoch\": %ld, \"step\": %ld, \"global_step\": %ld}", s->fail_epoch,
            s->fail_step, s->fail_global_step);
    add(&t, "}\n");
    if (t.oom) {
        free(t.s);
        lz_set_error("lazyc train: out of memory writing the summary");
        return -1;
    }
    int rc = lz_write_file(s->path, t.s, t.n);
    free(t.s);
    return rc;
}

void train_summary_free(train_summary *s)
{
    free(s->epochs);
    s->epochs = NULL;
    s->n_epochs = s->cap_epochs = 0;
}
