/* lazyc train's progress line. On a terminal one line is redrawn in
 * place and never reaches the terminal's last column (80 at most), so it
 * does not wrap; elsewhere (a log file) a few whole lines per epoch. The
 * rate counts the steps whose loss was read, which have finished, not the
 * steps enqueued ahead of them; the ETA covers every remaining step and
 * evaluation of the run. */
#include <stdio.h>
#include <string.h>

#include "train.h"

static void eta_str(double s, char *buf, size_t cap)
{
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

int train_progress_format(const train_progress *p, long epoch, int64_t b, int have_loss, double loss,
                          char *buf, int cap)
{
    char l[32] = "-", rate[32] = "-", eta[32] = "-", right[160], left[64];
    if (have_loss) snprintf(l, sizeof l, loss < 1e5 && loss > -1e5 ? "%.4f" : "%.3g", loss);
    if (p->finished > 0 && p->finished_s > 0) {
        double ips = (double)(p->finished * p->batch) / p->finished_s;
        snprintf(rate, sizeof rate, "%.0f", ips);
        double left_steps = (double)(p->run_steps - p->finished);
        eta_str(left_steps * (double)p->batch / ips + (double)p->evals_left * p->eval_s, eta, sizeof eta);
    }
    snprintf(left, sizeof left, "epoch %ld/%ld", epoch, p->epochs);
    snprintf(right, sizeof right, "%lld/%lld loss %s %s img/s ETA %s", (long long)b, (long long)p->per_epoch, l,
             rate, eta);
    int width = (p->cols > 80 || p->cols <= 0 ? 80 : p->cols) - 1;
    int n;
    if (p->tty) {
        /* the bar keeps one width for the run: what the widest line of
           the right part (steps, a loss like -1.23e+08, 7-digit rate,
           h:mm:ss) leaves, up to 30 cells */
        int digits = snprintf(NULL, 0, "%lld", (long long)p->per_epoch);
        int widest_left = snprintf(NULL, 0, "epoch %ld/%ld", p->epochs, p->epochs);
        int bar = width - widest_left - (2 * digits + 43) - 4;
        if (bar > 30) bar = 30;
        if (bar >= 5) {
            char cells[31];
            int fill = p->per_epoch ? (int)(bar * b / p->per_epoch) : bar;
            for (int i = 0; i < bar; i++) cells[i] = i < fill ? '#' : '.';
            cells[bar] = 0;
            n = snprintf(buf, (size_t)cap, "%s [%s] %s", left, cells, right);
        } else {
            n = snprintf(buf, (size_t)cap, "%s %s", left, right);
        }
    } else {
        n = snprintf(buf, (size_t)cap, "%s step %s", left, right);
    }
    if (n >= width && width < cap) { buf[width] = 0; n = width; }   /* never wrap */
    return n < cap ? n : cap - 1;
}

void train_progress_show(const train_progress *p, long epoch, int64_t b, int have_loss, double loss)
{
    char line[256];
    train_progress_format(p, epoch, b, have_loss, loss, line, sizeof line);
    /* \033[K clears what a longer previous line left */
    if (p->tty) printf("\r%s\033[K", line);
    else printf("%s\n", line);
    fflush(stdout);
}
