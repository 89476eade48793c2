/* Minimal test harness: CHECK records a failure and goes on; a test
 * program ends with `return lz_test_done();`, which prints
 * "N passed, N failed" and returns non-zero on any failure. */
#ifndef LZ_TESTLIB_H
#define LZ_TESTLIB_H

#include <stdio.h>
#include "lazyc.h"
#include "lazyc_nn.h"

extern int lz_test_passed, lz_test_failed;

#define CHECK(cond) do { if (cond) lz_test_passed++; else { lz_test_failed++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
            lz_last_error() ? lz_last_error() : "none"); } } while (0)
#define CHECK_EQ_I(a, b) do { long long va_ = (long long)(a), vb_ = (long long)(b); \
    if (va_ == vb_) lz_test_passed++; else { lz_test_failed++; \
    fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, va_, vb_); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double va_ = (a), vb_ = (b); \
    if (fabs(va_ - vb_) <= (tol)) lz_test_passed++; else { lz_test_failed++; \
    fprintf(stderr, "%s:%d: |%s - %s| <= %g failed: %.9g vs %.9g\n", __FILE__, __LINE__, #a, #b, (double)(tol), va_, vb_); } } while (0)

int lz_test_done(void);
/* The VmFlags line of the mapping that holds p (/proc/self/smaps), "" when
   none is found: " hg" in it is an madvise(MADV_HUGEPAGE). */
void lz_test_vm_flags(const void *p, char *flags, size_t cap);
/* Whether the kernel has transparent huge pages (else madvise refuses
   MADV_HUGEPAGE and no mapping gets the flag). */
int lz_test_thp_kernel(void);
/* Deterministic uniform floats in [lo, hi) from a seed. */
void lz_test_fill_uniform(float *x, int64_t n, unsigned seed, float lo, float hi);
/* Max |a-b| / max(max|b|, 1e-12): the relative error the parity tests use. */
double lz_test_rel_err(const float *a, const float *b, int64_t n);
/* Kernels of op (an IR op's name) in the kernel profile since its reset;
   _by: only those a library ran (1) or lazyc's own kernels (0). */
int64_t lz_test_kernel_calls(const char *op);
int64_t lz_test_kernel_calls_by(const char *op, int library);
/* A new f32 tensor of the given shape with uniform values in [lo, hi). */
lz_tensor *lz_test_rand(unsigned seed, float lo, float hi, int ndim, const int64_t *shape);
/* Copies a tensor to a malloc'ed float array (caller frees); NULL on error. */
float *lz_test_read(lz_tensor *t);
/* Step `step`'s batch of the capture tests' MLP: *x [b, in] uniform in
   [-1, 1) from seed 100 + step, *y [b] i64 labels (step*7 + i*3) % classes. */
void lz_test_mlp_batch(int step, int64_t b, int64_t in, int64_t classes, lz_tensor **x,
                       lz_tensor **y);
/* The lazy reference of the capture tests: fn (x, y) -> loss called on that
   batch inside a scope, then a barrier; returns the loss (NAN on failure,
   also counted as a failed check). */
float lz_test_lazy_step(lz_step_fn fn, void *ctx, int step, int64_t b, int64_t in,
                        int64_t classes);
/* Reorders a 4-d [N, C, H, W] f32 array between plain and channel-blocked
   [N, C/b, H, W, b] (lz_value.block): plain -> blocked when to_blocked,
   else back. C must be a multiple of b. */
void lz_test_reblock(const float *from, float *to, const int64_t *shape, int b, int to_blocked);


/* Gradient check by central finite differences. f builds an output from
   the inputs; the check compares d(sum(f(in) * w))/d(in[i]) from
   lz_backward against differences in f64 of the same scalar, for every
   f32 input whose requires-grad flag the caller set. w is a fixed random
   weighting, so every output element matters. Returns the worst relative
   error (max-abs error over max-abs gradient), or INFINITY on an error. */
typedef lz_tensor *(*lz_test_fn)(void *ctx, lz_tensor *const *in);
double lz_test_gradcheck(lz_test_fn f, void *ctx, int n_in, lz_tensor *const *in);

/* A zoo model and its SGD optimizer, and the training step the model tests
   capture: zero_grad, the model's training loss on (in[0], in[1]), backward,
   the SGD step; out[0] is the loss. */
typedef struct lz_test_trainer {
    lz_model *m;
    lz_sgd *opt;
} lz_test_trainer;
int lz_test_sgd_step(void *ctx, lz_tensor *const *in, lz_tensor **out);
/* Runs fn in a child process, with checks of its own, then lz_shutdown;
   prints "name: ok" or "name: FAILED". 1 when it failed. For cases that
   need a fresh library (settings read once, a device chosen once). */
int lz_test_case_in_child(const char *name, void (*fn)(void));
/* SGD (momentum 0.9) over the model's trainable parameters. */
lz_sgd *lz_test_model_sgd(lz_model *m, float lr);
/* A batch of the model's spec: inputs uniform in [-1, 1] (or token ids),
   labels spread over the classes, both fixed by seed. */
void lz_test_model_batch(const lz_model_spec *s, unsigned seed, lz_tensor **x, lz_tensor **y);

#endif
