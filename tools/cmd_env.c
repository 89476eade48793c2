/* lazyc env: the table of LZ_* environment variables, with the value each
 * takes in this environment. Exit 1 when one is set to a value it does
 * not accept, so a script can check its settings before a long run. */
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

int lz_cmd_env(int argc, char **argv)
{
    if (argc > 1) {
        FILE *f = lz_cli_is_help(argv[1]) ? stdout : stderr;
        if (f == stderr) fprintf(stderr, "lazyc env: unexpected argument '%s'\n", argv[1]);
        fprintf(f, "usage: lazyc env\n\n"
                   "Lists every LZ_* environment variable lazyc reads: its value here\n"
                   "(\"*\" when set in the environment), default, accepted values and meaning.\n"
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
    return bad;
}
