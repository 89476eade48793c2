/* lazyc env: the table of LZ_* environment variables, with the value each
 * takes in this environment, then this CPU's float32 and bf16 product
 * peaks and what autocast does with products here. Exit 1 when a variable
 * is set to a value it does not accept, so a script can check its
 * settings before a long run. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lazyc.h"

static void accepted(const lz_setting_info *s, char *buf, size_t cap)
{
    if (!strcmp(s->kind, "bool")) snprintf(buf, cap, "0 or 1");
    else if (!strcmp(s->kind, "int"))
        snprintf(buf, cap, "integer %lld..%lld", (long long)s->min, (long long)s->max);
    else if (!strcmp(s->kind, "choice")) snprintf(buf, cap, "%s", s->choices);
    else snprintf(buf, cap, "text");
}

/* The peaks (measured again now; the best seen on this machine kept) and
   what autocast's products do with them. */
static void print_cpu(void)
{
    lz_autocast_probe p;
    if (lz_autocast_probe_cpu(&p) != 0) {
        printf("\nautocast on this CPU: %s\n", lz_last_error());
        return;
    }
    printf("\nthis CPU, as oneDNN sees it (DNNL_MAX_CPU_ISA caps it): %s\n",
           !p.native_bf16 ? "no AVX512_BF16" : p.amx ? "AVX512_BF16 and AMX tiles" : "AVX512_BF16, no AMX");
    if (p.f32_gflops > 0 && p.bf16_gflops > 0)
        printf("product peaks (2048^3, best of 4): float32 sgemm %.1f GFLOP/s, bf16 matmul %.1f "
               "GFLOP/s (%.2fx)\n", p.f32_gflops, p.bf16_gflops, p.bf16_gflops / p.f32_gflops);
    else
        printf("product peaks (2048^3, best of 4): float32 sgemm %.1f GFLOP/s, bf16 matmul: none "
               "(oneDNN has only its reference loops here)\n", p.f32_gflops);
    char rule[256];
    if (!p.native_bf16)
        snprintf(rule, sizeof rule, "every product float32 (no AVX512_BF16: widened operands cost more)");
    else if (p.rule_keeps_f32)
        snprintf(rule, sizeof rule, "every product float32 (bf16's peak below %.1fx float32's)",
                 p.rule_min_ratio);
    else
        snprintf(rule, sizeof rule, "matmuls bf16, convolutions bf16 but where float32 Winograd or "
                 "plain layouts run them faster (bf16's peak at least %.1fx float32's)",
                 p.rule_min_ratio);
    if (!p.native_bf16 && strcmp(p.mode, "bf16"))
        printf("autocast (LZ_AUTOCAST_PRODUCTS=%s): %s\n", p.mode, rule);
    else if (!strcmp(p.mode, "measure"))
        printf("autocast (LZ_AUTOCAST_PRODUCTS=measure): each product shape in bf16 where it "
               "measured at most %.2fx float32's time, timed once per machine; until timed, the "
               "rule: %s\n", p.bf16_max_ratio, rule);
    else if (!strcmp(p.mode, "rule"))
        printf("autocast (LZ_AUTOCAST_PRODUCTS=rule): %s\n", rule);
    else
        printf("autocast (LZ_AUTOCAST_PRODUCTS=%s): every product %s\n", p.mode,
               !strcmp(p.mode, "f32") ? "float32" : "bf16");
    printf("product shapes measured on this machine: %d, %d of them kept float32 (%s)\n",
           p.measured, p.measured_f32, p.file[0] ? p.file : "no file: LZ_CONV_CACHE=0 or no cache directory");
}

int lz_cmd_env(int argc, char **argv)
{
    if (argc > 1) {
        FILE *f = lz_cli_is_help(argv[1]) ? stdout : stderr;
        if (f == stderr) fprintf(stderr, "lazyc env: unexpected argument '%s'\n", argv[1]);
        fprintf(f, "usage: lazyc env\n\n"
                   "Lists every LZ_* environment variable lazyc reads: its value here\n"
                   "(\"*\" when set in the environment), default, accepted values and meaning;\n"
                   "then this CPU's float32 and bf16 product peaks (measured again now; the\n"
                   "best seen on this machine is kept for autocast's rule)\n"
                   "and which products autocast runs in bf16 here.\n"
                   "Exits 1 when a variable is set to a value it does not accept.\n");
        return f == stdout ? 0 : LZ_CLI_USAGE_ERROR;
    }
    int bad = 0, n = lz_settings_count();
    printf("%-26s %-18s %-18s %-22s %s\n", "variable", "value", "default", "accepts", "meaning");
    for (int i = 0; i < n; i++) {
        lz_setting_info s;
        if (lz_settings_get(i, &s) != 0) return 1;
        char acc[64], val[64];
        accepted(&s, acc, sizeof acc);
        snprintf(val, sizeof val, "%s%s", s.value[0] ? s.value : "\"\"", s.env && s.valid ? " *" : "");
        printf("%-26s %-18s %-18s %-22s %s\n", s.name, val, s.default_value[0] ? s.default_value : "\"\"",
               acc, s.help);
        if (!s.valid) {
            fprintf(stderr, "lazyc env: %s='%s' is not accepted (%s); the default %s applies\n",
                    s.name, s.env, acc, s.default_value[0] ? s.default_value : "\"\"");
            bad = 1;
        }
    }
    fflush(stdout);
    print_cpu();
    return bad;
}
