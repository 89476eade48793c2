/* The PyTorch side of `lazyc bench`: runs bench/torch_reference.py for one
 * model, in the same invocation, and reads the one JSON line it prints.
 *
 * One Python process per model: its resident-set high-water mark is then
 * that model's alone, and the import (about a second) is small next to a
 * model's steps. The child gets OPENBLAS_CORETYPE=SkylakeX (OpenBLAS 0.3.21
 * does not recognise this CPU and would fall back to an SSE3 kernel) and
 * loses any OMP_WAIT_POLICY of ours, so PyTorch runs with its own
 * defaults, as in the reference figures; the script sets
 * two threads. Those defaults spin between parallel regions, which on a
 * machine shared with other jobs makes PyTorch 5-10x slower (measured:
 * resnet18 smoke 585-1145 ms against 116-126 ms passive at load 6.5);
 * LZ_TORCH_OMP_WAIT_POLICY=passive gives it blocking workers (lazyc's
 * sleep between kernels without a setting: src/runtime/omp_quiet.c).
 * Its progress (stderr) passes through to ours.
 *
 * Where things are: the interpreter is $LZ_TORCH_PYTHON or /usr/bin/python3
 * (Debian's, which has python3-torch); the script is
 * $LZ_BENCH_TORCH_SCRIPT, else bench/torch_reference.py next to the build
 * folder holding this binary (build/lazyc -> ./bench/), else under the
 * current directory. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static int find_script(char *path, size_t cap)
{
    const char *env = lz_setting("LZ_BENCH_TORCH_SCRIPT");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return access(path, R_OK) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, cap, "%s/../bench/torch_reference.py", exe);
            if (access(path, R_OK) == 0)
                return 0;
        }
    }
    snprintf(path, cap, "bench/torch_reference.py");
    return access(path, R_OK) == 0 ? 0 : -1;
}

/* Appends s to buf in single quotes, for /bin/sh. */
static void append_quoted(char *buf, size_t cap, const char *s)
{
    size_t len = strlen(buf);
    if (len + 1 < cap)
        buf[len++] = '\'';
    for (; *s && len + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(buf + len, "'\\''", 4);
            len += 4;
        } else {
            buf[len++] = *s;
        }
    }
    if (len + 1 < cap)
        buf[len++] = '\'';
    buf[len < cap ? len : cap - 1] = '\0';
}

static void append_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t len = strlen(buf);
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "x" : "", (long long)shape[i]);
}

/* The value after "key": in a flat JSON object: a number into *num, or a
   string (escapes kept as written) into str. 0 if found. */
static int json_field(const char *line, const char *key, double *num, char *str, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p == '"') {
        if (!str)
            return -1;
        size_t n = 0;
        for (p++; *p && *p != '"' && n + 1 < cap; p++) {
            if (*p == '\\' && p[1])
                str[n++] = *p++;
            if (n + 1 < cap)
                str[n++] = *p;
        }
        str[n] = '\0';
        return 0;
    }
    if (!num)
        return -1;
    char *end = NULL;
    *num = strtod(p, &end);
    return end == p ? -1 : 0;
}

void bench_torch_model(const lz_model_spec *spec, const bench_opts *o, bench_row *row,
                       int *available)
{
    row->torch_ms = -1;
    row->torch_peak_bytes = -1;
    row->torch_build_ms = row->torch_first_ms = -1;
    if (!*available)
        return;
    const char *py = lz_setting("LZ_TORCH_PYTHON");
    char script[PATH_MAX + 64];
    if (access(py, X_OK) != 0 || find_script(script, sizeof script) != 0) {
        fprintf(stderr, "lazyc bench: no PyTorch reference (%s): the torch column is n/a\n",
                access(py, X_OK) != 0 ? "no python interpreter"
                                      : "bench/torch_reference.py not found");
        *available = 0;
        return;
    }

    char cmd[PATH_MAX * 2 + 640] =
        "env -u OMP_WAIT_POLICY OPENBLAS_CORETYPE=SkylakeX PYTHONDONTWRITEBYTECODE=1 ";
    const char *policy = lz_setting("LZ_TORCH_OMP_WAIT_POLICY");
    if (policy && *policy) {
        strncat(cmd, "OMP_WAIT_POLICY=", sizeof cmd - strlen(cmd) - 1);
        append_quoted(cmd, sizeof cmd, policy);
        strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    }
    append_quoted(cmd, sizeof cmd, py);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    append_quoted(cmd, sizeof cmd, script);
    strncat(cmd, " --model ", sizeof cmd - strlen(cmd) - 1);
    append_quoted(cmd, sizeof cmd, spec->name);
    size_t len = strlen(cmd);
    snprintf(cmd + len, sizeof cmd - len, " --size %s --input ", o->size);
    append_shape(cmd, sizeof cmd, spec->input_ndim, spec->input_shape);
    strncat(cmd, " --target ", sizeof cmd - strlen(cmd) - 1);
    append_shape(cmd, sizeof cmd, spec->target_ndim, spec->target_shape);
    len = strlen(cmd);
    snprintf(cmd + len, sizeof cmd - len, " --classes %lld --steps %ld --warmup %ld",
             (long long)spec->num_classes, o->steps, o->warmup);
    if (o->bf16)
        strncat(cmd, " --autocast bf16", sizeof cmd - strlen(cmd) - 1);

    fflush(stderr);
    FILE *f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "lazyc bench: cannot start the PyTorch reference: "
                        "the torch column is n/a\n");
        *available = 0;
        return;
    }
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] == '{')
            snprintf(last, sizeof last, "%s", line);
    int status = pclose(f);

    char text[140];
    double v;
    if (json_field(last, "unavailable", NULL, text, sizeof text) == 0) {
        fprintf(stderr, "lazyc bench: no PyTorch reference (%s): the torch column is n/a\n", text);
        *available = 0;
    } else if (json_field(last, "error", NULL, text, sizeof text) == 0) {
        fprintf(stderr, "lazyc bench: PyTorch reference failed on %s: %s\n", spec->name, text);
        if (!row->note[0])
            snprintf(row->note, sizeof row->note, "torch: %s", text);
    } else if (json_field(last, "torch_ms", &v, NULL, 0) == 0 && v > 0) {
        row->torch_ms = v;
        if (json_field(last, "peak_bytes", &v, NULL, 0) == 0 && v >= 0)
            row->torch_peak_bytes = (int64_t)v;
        if (json_field(last, "blas_gflops", &v, NULL, 0) == 0)
            row->torch_blas_gflops = v;
        json_field(last, "blas", NULL, row->torch_blas, sizeof row->torch_blas);
        if (json_field(last, "build_ms", &v, NULL, 0) == 0 && v > 0)
            row->torch_build_ms = v;
        if (json_field(last, "first_ms", &v, NULL, 0) == 0 && v > 0)
            row->torch_first_ms = v;
    } else {
        fprintf(stderr, "lazyc bench: the PyTorch reference for %s printed no result "
                        "(exit status %d)\n", spec->name, status);
        if (!row->note[0])
            snprintf(row->note, sizeof row->note, "torch: no result");
    }
}
