/* The bar chart of `lazyc bench`: per model, the speedup of each mode over
 * a baseline (PyTorch when every model has a PyTorch time, else lazyc's
 * eager mode), one bar per mode, on a log axis so that 0.5x and 2x are
 * equally far from the 1x line. Step times span 100 ms to 5 s across the
 * models, so speedups, not times, share one axis. Plain SVG 1.1, no
 * scripts or external fonts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { LEFT = 60, RIGHT = 20, TOP = 50, PLOT_H = 300, BOTTOM = 120, BAR_W = 14, GROUP_GAP = 18 };

static const char *const colours[BENCH_MODES] = { "#b0b0b0", "#6baed6", "#08519c", "#e6550d" };

static double mode_ms(const bench_row *r, int md)
{
    return md == BENCH_TORCH ? r->torch_ms : r->mode[md].ms;
}

int bench_write_svg(const char *path, const bench_table *t)
{
    int base = BENCH_TORCH;
    for (int i = 0; i < t->n; i++)
        if (!(t->rows[i].torch_ms > 0))
            base = BENCH_EAGER;
    /* the bars: every mode that ran, other than the baseline */
    int shown[BENCH_MODES], n_shown = 0;
    for (int md = 0; md < BENCH_MODES; md++) {
        if (md == base || !t->mode_on[md])
            continue;
        int any = 0;
        for (int i = 0; i < t->n; i++)
            any |= mode_ms(&t->rows[i], md) > 0 && mode_ms(&t->rows[i], base) > 0;
        if (any)
            shown[n_shown++] = md;
    }
    /* log axis over the speedups present, always including 1x */
    double lo = 1.0, hi = 1.0;
    for (int i = 0; i < t->n; i++)
        for (int k = 0; k < n_shown; k++) {
            double s = bench_ratio(mode_ms(&t->rows[i], shown[k]), mode_ms(&t->rows[i], base));
            if (isfinite(s) && s > 0) {
                lo = s < lo ? s : lo;
                hi = s > hi ? s : hi;
            }
        }
    double llo = floor(log2(lo)), lhi = ceil(log2(hi));
    if (lhi - llo < 2)
        lhi = llo + 2;
    int group_w = (n_shown ? n_shown : 1) * BAR_W + GROUP_GAP;
    int width = LEFT + RIGHT + (t->n ? t->n : 1) * group_w;
    if (width < 560)
        width = 560;
    int height = TOP + PLOT_H + BOTTOM;
#define Y(v) (TOP + PLOT_H - (log2(v) - llo) / (lhi - llo) * PLOT_H)

    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\">lazyc bench --size %s</text>\n",
            LEFT, t->size);
    fprintf(f, "<text x=\"%d\" y=\"36\">training-step speedup over %s "
               "(median step time; higher is better; log scale)</text>\n",
            LEFT, base == BENCH_TORCH ? "PyTorch 1.13 eager" : "lazyc eager");
    /* grid lines at powers of two, the 1x line darker */
    for (double e = llo; e <= lhi + 1e-9; e++) {
        double v = exp2(e), y = Y(v);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", LEFT,
                width - RIGHT, y, y, e == 0 ? "#000" : "#ddd");
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%gx</text>\n", LEFT - 6,
                y + 4, v);
    }
    for (int i = 0; i < t->n; i++) {
        const bench_row *r = &t->rows[i];
        int x0 = LEFT + GROUP_GAP / 2 + i * group_w;
        for (int k = 0; k < n_shown; k++) {
            double s = bench_ratio(mode_ms(r, shown[k]), mode_ms(r, base));
            if (!(isfinite(s) && s > 0))
                continue;
            double y1 = Y(1.0), y = Y(s);
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\">"
                       "<title>%s %s: %.2fx (%.2f ms)</title></rect>\n",
                    x0 + k * BAR_W, y < y1 ? y : y1, BAR_W - 2, fabs(y1 - y), colours[shown[k]],
                    r->model, bench_mode_names[shown[k]], s, mode_ms(r, shown[k]));
        }
        int cx = x0 + n_shown * BAR_W / 2;
        fprintf(f, "<text transform=\"translate(%d,%d) rotate(-40)\" "
                   "text-anchor=\"end\">%s</text>\n",
                cx, TOP + PLOT_H + 14, r->model);
    }
    /* legend */
    int lx = LEFT;
    for (int k = 0; k < n_shown; k++, lx += 110) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx,
                height - 22, colours[shown[k]]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", lx + 16, height - 12,
                bench_mode_names[shown[k]]);
    }
    fprintf(f, "</svg>\n");
#undef Y
    return fclose(f) == 0 ? 0 : -1;
}
