/* The compiler passes, and the backend's one choice of algorithm, that
 * can be turned off (switches.h): each reads its LZ_* setting once
 * ("0" turns it off), and tests and benchmarks override it without
 * touching the environment. Executables already compiled keep what they
 * were compiled with. */
#include "base/switches.h"

#include "base/settings.h"

typedef struct pass_switch {
    lz_setting_id env;
    int forced;      /* -1: the environment decides */
    int from_env;    /* -1: not read yet */
} pass_switch;

static pass_switch fusion = {LZ_SETTING_FUSION, -1, -1}, blocked = {LZ_SETTING_BLOCKED, -1, -1},
                   winograd = {LZ_SETTING_WINOGRAD, -1, -1},
                   products = {LZ_SETTING_AUTOCAST_PRODUCTS, -1, -1};

static int switch_on(pass_switch *s)
{
    if (s->forced >= 0) return s->forced;
    if (s->from_env < 0) s->from_env = (int)lz_setting_int(s->env);
    return s->from_env;
}

static void switch_set(pass_switch *s, int on) { s->forced = on < 0 ? -1 : on; }

int  lz_fusion_enabled(void) { return switch_on(&fusion); }
void lz_fusion_set(int on) { switch_set(&fusion, on); }
int  lz_blocked_layouts_enabled(void) { return switch_on(&blocked); }
void lz_blocked_layouts_set(int on) { switch_set(&blocked, on); }
int  lz_winograd_enabled(void) { return switch_on(&winograd); }
void lz_winograd_set(int on) { switch_set(&winograd, on); }
int  lz_autocast_products(void) { return switch_on(&products); }
void lz_autocast_products_set(int mode) { switch_set(&products, mode); }
