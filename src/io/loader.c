/* Batches of a data set. A worker thread gathers and normalises batch k+1
 * into one of two host buffers while the caller's step k runs; the caller's
 * thread only copies the finished buffer into tensors (tensor calls stay on
 * the recording thread). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "io/dataset.h"

typedef struct slot {
    float   *x;
    int64_t *y;
    int64_t  batch;          /* which batch it holds, -1 when none */
    int64_t  rows;
} slot;

struct lz_loader {
    const lz_dataset *ds;
    lz_loader_opts o;
    int64_t *order;          /* this epoch's permutation */
    int64_t  n_batches, pos;
    slot     slots[2];
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t  want;           /* batch the worker should prepare next, -1 none */
    int      quit;
    float    value[256];     /* normalised value of each pixel byte */
};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void prepare(lz_loader *l, int64_t b, slot *s)
{
    const lz_dataset *ds = l->ds;
    int64_t first = b * l->o.batch, rows = ds->n - first < l->o.batch ? ds->n - first : l->o.batch;
    int64_t px = ds->h * ds->w;
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = l->order[first + r];
        const uint8_t *src = ds->images + i * px;
        float *dst = s->x + r * px;
        for (int64_t k = 0; k < px; k++) dst[k] = l->value[src[k]];
        s->y[r] = ds->labels[i];
    }
    s->rows = rows;
}

static void *worker_main(void *arg)
{
    lz_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (l->want < 0 && !l->quit) pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit) break;
        int64_t b = l->want;
        slot *s = &l->slots[b % 2];
        pthread_mutex_unlock(&l->mu);
        prepare(l, b, s);
        pthread_mutex_lock(&l->mu);
        s->batch = b;
        if (l->want == b) l->want = -1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Asks for batch b unless it is past the end. Caller holds mu. */
static void request(lz_loader *l, int64_t b)
{
    if (b >= l->n_batches || l->slots[b % 2].batch == b) return;
    l->want = b;
    pthread_cond_broadcast(&l->cv);
}

/* Waits until the worker is idle, so the order and slots may change. */
static void quiesce(lz_loader *l)
{
    while (l->want >= 0) pthread_cond_wait(&l->cv, &l->mu);
}

lz_loader *lz_loader_new(const lz_dataset *ds, lz_loader_opts o)
{
    if (!ds) return lz_errorf("lz_loader_new: data set is NULL");
    if (o.batch <= 0) return lz_errorf("lz_loader_new: batch size %lld must be positive", (long long)o.batch);
    if (!isfinite(o.mean) || !isfinite(o.std))
        return lz_errorf("lz_loader_new: mean %g and std %g must be finite", (double)o.mean, (double)o.std);
    if (o.std == 0) o.std = 1;
    lz_loader *l = calloc(1, sizeof *l);
    if (!l) return lz_errorf("lz_loader_new: out of memory");
    l->ds = ds;
    l->o = o;
    /* torchvision's ToTensor then Normalize, in float32 and in that order
       ((p / 255 - mean) / std), so lazyc and a PyTorch program given the same
       bytes see bit-identical inputs; a table also costs less than the
       arithmetic per pixel. */
    for (int p = 0; p < 256; p++) l->value[p] = ((float)p / 255.0f - o.mean) / o.std;
    /* no batch holds more rows than the data set: a huge batch size costs
       no memory and its sizes cannot overflow */
    int64_t rows = o.batch < ds->n ? o.batch : ds->n;
    l->n_batches = o.drop_last ? ds->n / o.batch : ds->n / o.batch + (ds->n % o.batch != 0);
    l->order = malloc(sizeof *l->order * (size_t)(ds->n ? ds->n : 1));
    size_t px = (size_t)(ds->h * ds->w);
    for (int i = 0; i < 2; i++) {
        l->slots[i].x = malloc(sizeof(float) * px * (size_t)(rows ? rows : 1));
        l->slots[i].y = malloc(sizeof(int64_t) * (size_t)(rows ? rows : 1));
        l->slots[i].batch = -1;
    }
    if (!l->order || !l->slots[0].x || !l->slots[1].x || !l->slots[0].y || !l->slots[1].y) {
        for (int i = 0; i < 2; i++) { free(l->slots[i].x); free(l->slots[i].y); }
        free(l->order);
        free(l);
        return lz_errorf("lz_loader_new: out of memory for batches of %lld", (long long)o.batch);
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->want = -1;
    pthread_create(&l->worker, NULL, worker_main, l);
    lz_loader_start_epoch(l, 0);
    return l;
}

int64_t lz_loader_batches(const lz_loader *l)
{
    return l ? l->n_batches : lz_errorf_int("lz_loader_batches: loader is NULL");
}

int lz_loader_start_epoch(lz_loader *l, int epoch)
{
    if (!l) return lz_errorf_int("lz_loader_start_epoch: loader is NULL");
    pthread_mutex_lock(&l->mu);
    quiesce(l);
    int64_t n = l->ds->n;
    for (int64_t i = 0; i < n; i++) l->order[i] = i;
    if (l->o.shuffle) {
        uint64_t s = l->o.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)epoch;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(splitmix(&s) % (uint64_t)(i + 1));
            int64_t t = l->order[i]; l->order[i] = l->order[j]; l->order[j] = t;
        }
    }
    l->slots[0].batch = l->slots[1].batch = -1;
    l->pos = 0;
    request(l, 0);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int lz_loader_skip(lz_loader *l, int64_t n)
{
    if (!l) return lz_errorf_int("lz_loader_skip: loader is NULL");
    if (n < 0 || n > l->n_batches - l->pos)
        return lz_errorf_int("lz_loader_skip: cannot skip %lld of the %lld batches left", (long long)n,
                             (long long)(l->n_batches - l->pos));
    pthread_mutex_lock(&l->mu);
    quiesce(l);
    l->pos += n;
    request(l, l->pos);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int lz_loader_next(lz_loader *l, lz_tensor **x, lz_tensor **y)
{
    if (!l || !x || !y) return lz_errorf_int("lz_loader_next: NULL argument");
    *x = *y = NULL;
    if (l->pos >= l->n_batches) return 0;
    pthread_mutex_lock(&l->mu);
    slot *s = &l->slots[l->pos % 2];
    if (s->batch != l->pos && l->want != l->pos) {
        quiesce(l);
        request(l, l->pos);
    }
    while (s->batch != l->pos) pthread_cond_wait(&l->cv, &l->mu);
    int64_t rows = s->rows;
    pthread_mutex_unlock(&l->mu);
    const int64_t xs[4] = {rows, 1, l->ds->h, l->ds->w}, ys[1] = {rows};
    *x = lz_from_host(s->x, LZ_F32, 4, xs);
    *y = lz_from_host(s->y, LZ_I64, 1, ys);
    pthread_mutex_lock(&l->mu);
    s->batch = -1;
    l->pos++;
    if (l->want < 0) request(l, l->pos);
    pthread_mutex_unlock(&l->mu);
    if (!*x || !*y) {
        lz_free(*x); lz_free(*y);
        *x = *y = NULL;
        return -1;
    }
    return 1;
}

void lz_loader_free(lz_loader *l)
{
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->worker, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    for (int i = 0; i < 2; i++) { free(l->slots[i].x); free(l->slots[i].y); }
    free(l->order);
    free(l);
}
