/* Autocast's dtype for each product shape on the CPU
 * (lz_backend.product_f32_faster): bf16 only where bf16 runs it faster.
 *
 * LZ_AUTOCAST_PRODUCTS=measure (the default) times each shape once per
 * machine in both dtypes, as a program runs it (product_time.c), and keeps
 * the ratio in a file beside the convolution choices (choices_file.h:
 * product-choices-<hash>.txt); bf16 where it took at most BF16_MAX_RATIO
 * of float32's time, so that a tie keeps the more exact float32. Until a
 * shape is measured (past the process's timing budget, or where it cannot
 * be timed) the rule predicts it; =rule uses the rule alone. The rule:
 * without native bf16 every product stays float32 (widening costs more
 * than it saves); where oneDNN's bf16 matmul peak is below RULE_MIN_RATIO
 * of sgemm's (a Xeon whose AVX512_BF16 kernels run at half float32's
 * rate), every product stays float32; else convolutions follow
 * lz_cpu_conv_f32_faster's rules and matmuls take bf16. The peaks are
 * measured once per machine (product_peaks.c) and kept in the same file.
 * LZ_DETERMINISTIC=1 takes the rule without the peaks: nothing timed.
 *
 * A shape's answer is made before its first use and kept for the process
 * (a compiled graph's key holds its dtypes: an answer that changed would
 * recompile). At exit, one notice counts the shapes kept float32 and says
 * why. Figures: docs/performance.md, "Which products autocast
 * keeps float32". */
#include "backends/cpu/product_choice.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/choices_file.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/product_peaks.h"
#include "backends/cpu/product_time.h"
#include "base/error.h"
#include "base/metrics.h"
#include "base/product.h"
#include "base/settings.h"
#include "base/switches.h"

#define RULE_MIN_RATIO 0.8
#define BF16_MAX_RATIO 0.95
#define BUDGET_MS 30000.0
#define KEY_LEN 24
#define PEAK_KEY (-1)
#define N_SEEN 4096

static lz_choices file = {
    .magic = "lazyc product choices 1", .prefix = "product-choices-",
    .what = "autocast's product choices", .key_len = KEY_LEN, .lo = 1, .hi = 1000000000,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

enum { WHY_BF16, WHY_MEASURED, WHY_PEAKS, WHY_CONV_RULE, WHY_WIDENED, N_WHY };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { int64_t key[KEY_LEN]; int why; } seen[N_SEEN];
static int n_seen, told, exit_notice;
static int64_t counts[N_WHY], measured_now;
static double spent_ms;
static double peak[2], forced_peak[2];   /* f32, bf16; 0: not known yet */
static int peaks_known;

/* The key: op, dims, and for convolutions the switches that change which
   kernels and layouts run it. 0, or -1 for a description it does not know. */
static int make_key(int op, int n, const int64_t *d, int64_t *key)
{
    memset(key, 0, sizeof(int64_t) * KEY_LEN);
    if (!((op == LZ_OP_MATMUL && n == LZ_MM_DIMS) || (op == LZ_OP_CONV2D && n == LZ_CONV_DIMS)))
        return -1;
    key[0] = op;
    memcpy(key + 1, d, sizeof(int64_t) * (size_t)n);
    if (op == LZ_OP_CONV2D) {
        key[1 + LZ_CONV_DIMS] = lz_blocked_layouts_enabled();
        key[2 + LZ_CONV_DIMS] = lz_dnnl_conv_enabled();
        key[3 + LZ_CONV_DIMS] = lz_winograd_enabled();
    }
    return 0;
}

static int deterministic(void) { return (int)lz_setting_int(LZ_SETTING_DETERMINISTIC); }

static const int64_t peak_key[2][KEY_LEN] = {{PEAK_KEY, 0}, {PEAK_KEY, 1}};

/* The peaks into the file (MFLOP/s), where both are known; under lock. */
static void peaks_store_locked(void)
{
    if (peak[0] <= 0 || peak[1] <= 0) return;
    for (int i = 0; i < 2; i++) lz_choices_put(&file, peak_key[i], (int64_t)llround(peak[i] * 1000));
}

/* The two peaks, from the file or (may_measure) measured and kept once;
   under lock. */
static void peaks_locked(int may_measure)
{
    if (forced_peak[0] > 0) {
        peak[0] = forced_peak[0];
        peak[1] = forced_peak[1];
        return;
    }
    if (peaks_known) return;
    const int64_t f = lz_choices_find(&file, peak_key[0], -1), b = lz_choices_find(&file, peak_key[1], -1);
    if (f > 0 && b > 0) {   /* MFLOP/s */
        peak[0] = (double)f / 1000;
        peak[1] = (double)b / 1000;
        peaks_known = 1;
        return;
    }
    if (!may_measure) return;
    peaks_known = 1;
    lz_cpu_measure_peaks(&peak[0], &peak[1]);
    peaks_store_locked();
}

/* Measures the peaks now and keeps, of each, the best rate seen on this
   machine: load on a shared machine only ever lowers a rate, and a pair
   once measured under load (sgemm hit harder than AMX: 89 against 320
   GFLOP/s quiet) would otherwise stand in the file for good. Under lock. */
static void peaks_remeasure_locked(void)
{
    peaks_locked(0);
    if (forced_peak[0] > 0) return;
    double now[2] = {0, 0};
    lz_cpu_measure_peaks(&now[0], &now[1]);
    int better = 0;
    for (int i = 0; i < 2; i++)
        if (now[i] > peak[i]) peak[i] = now[i], better = 1;
    peaks_known = 1;
    if (better) peaks_store_locked();
}

/* 1 where the rule keeps the product float32; *why says which rule. */
static int rule_f32(int op, const int64_t *d, int *why)
{
    if (!deterministic()) {
        peaks_locked(1);
        if (peak[0] > 0 && peak[1] < RULE_MIN_RATIO * peak[0]) {
            *why = WHY_PEAKS;
            return 1;
        }
    }
    if (op == LZ_OP_CONV2D) {
        const int st[2] = {(int)d[LZ_CONV_STRIDE], (int)d[LZ_CONV_STRIDE + 1]};
        const int dil[2] = {(int)d[LZ_CONV_DIL], (int)d[LZ_CONV_DIL + 1]};
        if (lz_cpu_conv_f32_faster(d + LZ_CONV_X, d + LZ_CONV_W, d + LZ_CONV_Y, st, dil,
                                   (int)d[LZ_CONV_GROUPS])) {
            *why = WHY_CONV_RULE;
            return 1;
        }
    }
    *why = WHY_BF16;
    return 0;
}

/* bf16's time over float32's for the shape, per mille, timed now; 0 when
   it cannot be. */
static int64_t time_ratio(int op, const int64_t *d)
{
    double f32, bf16;
    const double t0 = lz_now_ms();
    const int rc = lz_cpu_time_product(op, op == LZ_OP_MATMUL ? LZ_MM_DIMS : LZ_CONV_DIMS, d,
                                       &f32, &bf16);
    spent_ms += lz_now_ms() - t0;
    if (rc != 0 || !(f32 > 0) || !(bf16 > 0)) return 0;
    const double r = 1000 * bf16 / f32;
    return r < 1 ? 1 : r > 1e9 ? 1000000000 : llround(r);
}

static int ratio_keeps_f32(int64_t r) { return r > llround(1000 * BF16_MAX_RATIO); }

/* The measured ratio from the file, or timed now within the budget; 0
   when neither. A timing that goes against the rule is taken again, and
   the one nearer the rule kept: one slice of another job's time on a
   shared machine can make either dtype look slow, and what is kept is
   kept for good. */
static int64_t measured_locked(int op, const int64_t *d, const int64_t *key)
{
    const int64_t known = lz_choices_find(&file, key, 0);
    if (known > 0 || spent_ms >= BUDGET_MS) return known;
    int64_t r = time_ratio(op, d);
    int why;
    const int rule = rule_f32(op, d, &why);
    if (r > 0 && ratio_keeps_f32(r) != rule) {
        const int64_t again = time_ratio(op, d);
        if (again > 0) r = rule ? (again > r ? again : r) : (again < r ? again : r);
    }
    if (r > 0) {
        lz_choices_put(&file, key, r);
        measured_now++;
    }
    return r;
}

static int decide_locked(int op, const int64_t *d, const int64_t *key)
{
    if (lz_cpu_bf16_way() != LZ_BF16_NATIVE) {
        lz_cpu_bf16_notice();
        return WHY_WIDENED;
    }
    int why;
    const int mode = lz_autocast_products();
    if (mode == LZ_PRODUCTS_RULE || deterministic()) {
        rule_f32(op, d, &why);
        return why;
    }
    const int64_t ratio = measured_locked(op, d, key);
    if (ratio > 0) return ratio_keeps_f32(ratio) ? WHY_MEASURED : WHY_BF16;
    rule_f32(op, d, &why);
    return why;
}

int lz_cpu_product_f32_faster(int op, int n, const int64_t *dims)
{
    const int mode = lz_autocast_products();
    if (mode == LZ_PRODUCTS_F32 || mode == LZ_PRODUCTS_BF16) return mode == LZ_PRODUCTS_F32;
    int64_t key[KEY_LEN];
    if (make_key(op, n, dims, key) != 0) return lz_cpu_bf16_way() != LZ_BF16_NATIVE;
    pthread_mutex_lock(&mu);
    int why = -1;
    for (int i = 0; i < n_seen && why < 0; i++)
        if (!memcmp(seen[i].key, key, sizeof key)) why = seen[i].why;
    if (why < 0) {
        why = decide_locked(op, dims, key);
        if (n_seen < N_SEEN) {   /* past it, shapes are asked again: the rule's and the file's answers hold */
            memcpy(seen[n_seen].key, key, sizeof key);
            seen[n_seen++].why = why;
        }
        counts[why]++;
        if (why != WHY_BF16 && why != WHY_WIDENED && !exit_notice) {
            exit_notice = 1;
            atexit(lz_cpu_product_notice);
        }
    }
    pthread_mutex_unlock(&mu);
    return why != WHY_BF16;
}

void lz_cpu_product_notice(void)
{
    pthread_mutex_lock(&mu);
    int64_t kept = 0, all = 0;
    for (int w = 0; w < N_WHY; w++) {
        all += counts[w];
        if (w != WHY_BF16) kept += counts[w];
    }
    /* without native bf16, bf16_isa.c's notice has said so */
    if (told || kept == 0 || kept == counts[WHY_WIDENED]) {
        pthread_mutex_unlock(&mu);
        return;
    }
    told = 1;
    peaks_locked(0);   /* at exit: no timing */
    char why[512] = "", more[160];
    if (counts[WHY_MEASURED]) {
        snprintf(more, sizeof more, "%lld measured faster in float32 on this CPU",
                 (long long)counts[WHY_MEASURED]);
        strcat(why, more);
    }
    if (counts[WHY_PEAKS]) {
        snprintf(more, sizeof more, "%s%lld by the rule, as bf16 products run at %.2fx float32's "
                 "speed here", why[0] ? "; " : "", (long long)counts[WHY_PEAKS],
                 peak[0] > 0 ? peak[1] / peak[0] : 0);
        strcat(why, more);
    }
    if (counts[WHY_CONV_RULE]) {
        snprintf(more, sizeof more, "%s%lld convolutions by the rule that float32 runs them faster "
                 "(Winograd, plain layouts, groups)", why[0] ? "; " : "",
                 (long long)counts[WHY_CONV_RULE]);
        strcat(why, more);
    }
    char peaks[160] = "";
    if (peak[0] > 0)
        snprintf(peaks, sizeof peaks, "; peaks: bf16 %.0f, float32 %.0f GFLOP/s (%.2fx)", peak[1],
                 peak[0], peak[1] / peak[0]);
    pthread_mutex_unlock(&mu);
    lz_notice("autocast kept %lld of %lld product shapes in float32: %s%s "
              "(LZ_AUTOCAST_PRODUCTS=bf16 runs them all in bf16)",
              (long long)kept, (long long)all, why, peaks);
}

void lz_cpu_product_peaks_set(double f32, double bf16)
{
    pthread_mutex_lock(&mu);
    forced_peak[0] = f32;
    forced_peak[1] = bf16;
    if (f32 <= 0) peak[0] = peak[1] = 0, peaks_known = 0;
    pthread_mutex_unlock(&mu);
}

void lz_cpu_product_choices_forget(void)
{
    pthread_mutex_lock(&mu);
    n_seen = 0;
    told = 0;
    memset(counts, 0, sizeof counts);
    pthread_mutex_unlock(&mu);
}

void lz_cpu_product_counts(int64_t *kept_f32, int64_t *shapes, int64_t *measured)
{
    pthread_mutex_lock(&mu);
    *kept_f32 = *shapes = 0;
    for (int w = 0; w < N_WHY; w++) {
        *shapes += counts[w];
        if (w != WHY_BF16) *kept_f32 += counts[w];
    }
    *measured = measured_now;
    pthread_mutex_unlock(&mu);
}

int lz_autocast_probe_cpu(lz_autocast_probe *out)
{
    if (!out) return lz_errorf_int("lz_autocast_probe_cpu: NULL out");
    memset(out, 0, sizeof *out);
    out->native_bf16 = lz_cpu_bf16_way() == LZ_BF16_NATIVE;
    out->amx = out->native_bf16 && lz_cpu_bf16_amx();
    static const char *const modes[] = {"measure", "rule", "bf16", "f32"};
    const int mode = lz_autocast_products();
    out->mode = mode >= 0 && mode < 4 ? modes[mode] : "measure";
    pthread_mutex_lock(&mu);
    peaks_remeasure_locked();
    out->f32_gflops = peak[0];
    out->bf16_gflops = peak[1];
    pthread_mutex_unlock(&mu);
    out->rule_keeps_f32 = !out->native_bf16 || (out->f32_gflops > 0 &&
                                                 out->bf16_gflops < RULE_MIN_RATIO * out->f32_gflops);
    out->rule_min_ratio = RULE_MIN_RATIO;
    out->bf16_max_ratio = BF16_MAX_RATIO;
    static lz_choice_entry list[LZ_CHOICES_MAX];
    const int n = lz_choices_list(&file, list, LZ_CHOICES_MAX);
    for (int i = 0; i < n; i++) {
        if (list[i].key[0] == PEAK_KEY) continue;
        out->measured++;
        if (ratio_keeps_f32(list[i].value)) out->measured_f32++;
    }
    lz_choices_path(&file, out->file, sizeof out->file);
    return 0;
}
