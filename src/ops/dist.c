/* Data-parallel training (lz_dist_*): joining the job, and the sums over
 * ranks recorded as ops of the graph (ALLREDUCE_START/WAIT, base/op.h), so
 * a step's communication runs inside its one execution and a captured step
 * replays it. The compiler moves each start to where its gradients are
 * ready and each wait to where the sum is first read
 * (compile/schedule_comm.c); MPI itself lives in src/comm. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/settings.h"
#include "comm/comm.h"
#include "ops/ops_util.h"

int lz_dist_init(void) { return lz_comm_init(); }
int lz_dist_rank(void) { return lz_comm_rank(); }
int lz_dist_size(void) { return lz_comm_size(); }

void lz_dist_finalize(void)
{
    if (!lz_comm_initialised()) return;
    lz_wait();   /* no execution may still be communicating */
    lz_comm_finalize();
}

lz_dist_stats lz_dist_stats_get(void)
{
    lz_comm_stats s = lz_comm_stats_get();
    return (lz_dist_stats){s.all_reduces, s.bytes, s.comm_ms, s.wait_ms, s.overlapped_kernels};
}

void lz_dist_stats_reset(void) { lz_comm_stats_reset(); }

/* 0 when the job can communicate; else -1 naming who asked and why not. */
static int ready(const char *who)
{
    if (!lz_comm_built())
        return lz_errorf_int("%s: lazyc was built without MPI support (install libopenmpi-dev "
                             "and rebuild)", who);
    if (!lz_comm_initialised()) return lz_errorf_int("%s: call lz_dist_init first", who);
    return 0;
}

/* The flat sum (mean) over ranks of the tensors in[0..n), f32, as one
   START/WAIT pair: a new [total] tensor. */
static lz_tensor *record_sum(lz_tensor *const *in, int n, int64_t total, int mean)
{
    lz_tensor *started = lz_record(LZ_OP_ALLREDUCE_START, LZ_F32, 1, &total, n, in, NULL);
    lz_attrs a = {.n_iattr = 1, .iattr = {mean != 0}};
    lz_tensor *sum = started ? lz_record(LZ_OP_ALLREDUCE_WAIT, LZ_F32, 1, &total, 1, &started, &a) : NULL;
    lz_free(started);
    return sum;
}

lz_tensor *lz_dist_all_reduce(lz_tensor *x, int mean)
{
    if (ready("lz_dist_all_reduce")) return NULL;
    lz_tensor *in[1] = {x};
    if (lz_check_operands("lz_dist_all_reduce", 1, in)) return NULL;
    if (!lz_require_f32("lz_dist_all_reduce", x)) return NULL;
    lz_no_grad_begin();
    lz_tensor *sum = record_sum(in, 1, lz_numel(x), mean);
    lz_tensor *r = sum ? lz_reshape(sum, lz_t_ndim(x), lz_t_shape(x)) : NULL;
    lz_free(sum);
    lz_no_grad_end();
    return r;
}

/* Replaces the gradients grads[0..n) by their mean over the ranks: one
   sum over them all, sliced back. */
static int average_bucket(lz_tensor **grads, int n, int64_t total)
{
    lz_scope_begin();
    lz_tensor *sum = record_sum(grads, n, total, 1);
    int rc = sum ? 0 : -1;
    int64_t off = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const int64_t k = lz_numel(grads[i]);
        lz_tensor *part = lz_reshape(lz_slice(sum, 0, off, off + k), lz_t_ndim(grads[i]),
                                     lz_t_shape(grads[i]));
        rc = part ? lz_assign(grads[i], part) : -1;
        off += k;
    }
    lz_scope_end();
    return rc;
}

/* A NULL entry is the caller's error at any job size, not only under
   mpirun: -1 naming it, or 0. */
static int null_entry(const char *fn, const char *what, lz_tensor *const *ts, int n)
{
    for (int i = 0; i < n; i++)
        if (!ts[i]) return lz_errorf_int("%s: %s %d is NULL", fn, what, i);
    return 0;
}

int lz_dist_average_grads(lz_tensor *const *params, int n)
{
    if (ready("lz_dist_average_grads")) return -1;
    if (n < 0 || (n > 0 && !params))
        return lz_errorf_int("lz_dist_average_grads: %d parameters at %p", n, (const void *)params);
    if (null_entry("lz_dist_average_grads", "parameter", params, n)) return -1;
    if (lz_comm_size() == 1) return 0;   /* the mean over one rank: nothing to do */
    lz_tensor **grads = malloc(sizeof *grads * (size_t)(n ? n : 1));
    if (!grads) return lz_errorf_int("lz_dist_average_grads: out of memory for %d parameters", n);
    const int64_t cap = lz_setting_int(LZ_SETTING_DIST_BUCKET_KIB) << 8;   /* floats */
    int rc = 0, k = 0;
    int64_t total = 0;
    lz_no_grad_begin();
    /* the last parameters first: backward makes their gradients first, so
       the first buckets can be summed while it computes the others */
    for (int i = n - 1; rc == 0 && i >= 0; i--) {
        lz_tensor *g = lz_grad(params[i]);
        if (!g) continue;   /* no gradient at this step: as the optimizers skip it */
        if (lz_t_dtype(g) != LZ_F32) {
            rc = lz_errorf_int("lz_dist_average_grads: parameter %d's gradient is not f32", i);
            break;
        }
        grads[k++] = g;
        total += lz_numel(g);
        if (total >= cap) {
            rc = average_bucket(grads, k, total);
            k = 0;
            total = 0;
        }
    }
    if (rc == 0 && k) rc = average_bucket(grads, k, total);
    lz_no_grad_end();
    free(grads);
    return rc;
}

int lz_dist_broadcast(lz_tensor *const *ts, int n)
{
    if (ready("lz_dist_broadcast")) return -1;
    if (n < 0 || (n > 0 && !ts))
        return lz_errorf_int("lz_dist_broadcast: %d tensors at %p", n, (const void *)ts);
    if (null_entry("lz_dist_broadcast", "tensor", ts, n)) return -1;
    if (lz_comm_size() == 1) return 0;
    /* the executor must be idle: this thread communicates now */
    if (lz_wait()) return -1;
    for (int i = 0; i < n; i++) {
        const size_t nbytes = (size_t)lz_numel(ts[i]) * lz_dtype_size(lz_tensor_dtype(ts[i]));
        void *host = malloc(nbytes ? nbytes : 1);
        if (!host) return lz_errorf_int("lz_dist_broadcast: out of memory for tensor %d (%zu bytes)",
                                        i, nbytes);
        int rc = lz_to_host(ts[i], host, nbytes);
        if (rc == 0) rc = lz_comm_broadcast(host, nbytes);
        if (rc == 0 && lz_comm_rank() != 0) rc = lz_copy_from_host(ts[i], host, nbytes);
        free(host);
        if (rc) return -1;
    }
    return 0;
}
