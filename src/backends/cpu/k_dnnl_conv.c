/* oneDNN convolution primitives for the conv2d steps where they beat
 * im2col + sgemm (k_conv.c). A primitive is created once per step when an
 * executable is compiled and reused on every run.
 *
 * The primitive picks its own (blocked) layouts (format_tag_any); the step's
 * plain NCHW / OIHW memory is reordered in and out around it on every run,
 * into the step's scratch (lz_instr.scratch_bytes, placed in the
 * executable's arena by the memory plan, live for this step alone) that
 * also holds the primitive's user-mode scratchpad. An activation the compiler keeps
 * channel-blocked (lz_value.block, compile/layout_plan.c) is handed to the
 * primitive as it is, with no reorder: such steps always run here, since
 * im2col reads plain layouts only. On plain layouts oneDNN itself runs gemm
 * (x64:gemm:jit), no faster than k_conv.
 *
 * Rules choose the way per step shape, because each way wins somewhere:
 * on plain layouts the reorders are fixed costs, so oneDNN takes only
 * steps from 32 MFLOP, never 1x1, forward and grad weight while the
 * weight has at most 8x the elements of the activations, grad input with
 * 16+ channels a group, grad weight with 128+ output pixels, and only jit
 * kernels; every depthwise step but 5x5 weight gradients (k_conv.c's
 * loops pay per row and tap); on blocked layouts a weight gradient over
 * at most 256 pixels runs on rows (lz_cpu_conv_rows), where oneDNN runs
 * far from peak; a 3x3 stride-1 step by Winograd where its tiles fill
 * (winograd_fits). The figures: docs/performance.md, "Convolutions" and
 * "Winograd". LZ_DNNL_CONV=tune times each shape once per machine instead
 * (conv_choices.c); off by default, since timed choices make values differ
 * between machines. LZ_DNNL_CONV=0 turns oneDNN off, LZ_WINOGRAD=0 keeps
 * steps direct.
 *
 * The ways differ by rounding: a batch that puts a ReLU input at its kink,
 * or a max-pool window within rounding of a tie, then takes another
 * gradient on one unit (tests/reference/model_parity.py measures that). */
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/bf16_isa.h"
#include "backends/cpu/conv_choices.h"
#include "backends/cpu/conv_wgrad_cols.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/weight_unblock.h"
#include "base/bf16.h"
#include "base/metrics.h"
#include "base/op.h"
#include "base/settings.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int live;             /* prepared steps: the engine outlives them */
static int64_t created;      /* steps prepared with a primitive, ever (tests) */
static int64_t winograd;     /* of which by Winograd's algorithm */
static int forced = -1;

int lz_dnnl_conv_enabled(void)
{
    static int from_env = -1, deterministic = -1;
    /* the choices "0|1|2|tune" are read as their index: tune is 3 */
    if (from_env < 0) from_env = (int)lz_setting_int(LZ_SETTING_DNNL_CONV);
    if (deterministic < 0) deterministic = (int)lz_setting_int(LZ_SETTING_DETERMINISTIC);
    const int mode = forced >= 0 ? forced : from_env;
    /* deterministic: the rules, never a timing */
    return mode == LZ_DNNL_CONV_TUNE && deterministic ? 1 : mode;
}

void lz_dnnl_conv_set(int on) { forced = on < 0 ? -1 : on > LZ_DNNL_CONV_TUNE ? LZ_DNNL_CONV_TUNE : on; }

int lz_cpu_layout_block(void)
{
    if (!lz_dnnl_conv_enabled()) return 0;   /* im2col reads plain layouts only */
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return 16;
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return 8;
    return 0;
}

/* A counter below, read under the lock that guards its updates. */
static int64_t locked_read(const int64_t *counter)
{
    pthread_mutex_lock(&lock);
    int64_t n = *counter;
    pthread_mutex_unlock(&lock);
    return n;
}

int64_t lz_dnnl_conv_created(void) { return locked_read(&created); }
static int64_t bf16_by_library, bf16_widened;   /* bf16 steps run, ever (tests) */
int64_t lz_cpu_bf16_conv_count(int library) { return locked_read(library ? &bf16_by_library : &bf16_widened); }
int64_t lz_dnnl_conv_winograd(void) { return locked_read(&winograd); }

void lz_dnnl_conv_trim(void)
{
    pthread_mutex_lock(&lock);
    if (!live) {
        if (stream) dnnl_stream_destroy(stream);
        if (engine) dnnl_engine_destroy(engine);
        stream = NULL;
        engine = NULL;
    }
    pthread_mutex_unlock(&lock);
}

/* A step's state: a oneDNN primitive, or (prim NULL) the k_conv.c path
   that measured fastest. Operand k: 0 and 1 are the step's inputs, 2 its
   output. */
typedef struct dnnl_conv {
    dnnl_primitive_t prim;
    lz_conv_path path;             /* without a primitive */
    int rows;                      /* runs on k_conv.c's rows (lz_cpu_conv_rows) */
    int winograd;                  /* prim runs Winograd's algorithm */
    int engine;                    /* holds a reference on the engine */
    dnnl_primitive_t reorder[3];   /* plain <-> blocked; NULL when the layouts agree */
    int unblock;                   /* the weight gradient's block: weight_unblock.c, not reorder[2] */
    dnnl_memory_t plain[3], inner[3], scratchpad;
    size_t offset[5], bytes;       /* inner[0..2], the scratchpad, strided rows: the step's scratch */
    int arg[3], value[3];
    int widen;                     /* bf16 operands widened into the scratch, k_conv.c runs */
    int bf16;                      /* prim is a bf16 primitive (counted when run) */
    lz_wgrad_cols *cols;           /* a bf16 weight gradient over columns (conv_wgrad_cols.c) */
    int strided;                   /* a strided 1x1 product: x's pixels as rows at offset[4] */
} dnnl_conv;

static int take_engine(void)
{
    int ok = 1;
    pthread_mutex_lock(&lock);
    if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
    if (engine && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        stream = NULL;
    if (!engine || !stream) ok = 0;
    else live++;
    pthread_mutex_unlock(&lock);
    return ok;
}

static void give_engine(void)
{
    pthread_mutex_lock(&lock);
    live--;
    pthread_mutex_unlock(&lock);
}

/* Frees the primitive and its memories; the state then runs k_conv.c. */
static void drop_primitive(dnnl_conv *c)
{
    if (c->prim) dnnl_primitive_destroy(c->prim);
    for (int k = 0; k < 3; k++) {
        if (c->reorder[k]) dnnl_primitive_destroy(c->reorder[k]);
        if (c->inner[k] && c->inner[k] != c->plain[k]) dnnl_memory_destroy(c->inner[k]);
        if (c->plain[k]) dnnl_memory_destroy(c->plain[k]);
    }
    if (c->scratchpad) dnnl_memory_destroy(c->scratchpad);
    lz_cpu_wgrad_cols_free(c->cols);
    if (c->engine) give_engine();
    const lz_conv_path path = c->path;
    memset(c, 0, sizeof *c);
    c->path = path;
}

static void conv_release(void *state)
{
    if (!state) return;
    drop_primitive(state);
    free(state);
}


/* A weight gradient, or a 1x1 forward or grad input, on blocked
   activations with at most this many output pixels over the batch runs on
   k_conv.c's rows instead of oneDNN (see the top comment). */
#define ROWS_MAX_PIXELS 256

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

static double conv_flops(const int64_t *x, const int64_t *w, const int64_t *y, int64_t G)
{
    return 2.0 * (double)(y[0] * y[1] * y[2] * y[3]) * (double)(x[1] / G * w[2] * w[3]);
}

/* Whether oneDNN measured faster for this step on the machine the rules
   were written on (see the top comment): the choice for steps too small
   to time. */
static int worth_it(lz_op op, const int64_t *x, const int64_t *w, const int64_t *y, int64_t G)
{
    if (lz_dnnl_conv_enabled() == 2) return 1;
    int64_t Cg = x[1] / G, taps = w[2] * w[3];
    double flops = conv_flops(x, w, y, G);
    if (Cg == 1 && G > 1) return 1;   /* depthwise: see the top comment */
    if (taps == 1 || flops < 3.2e7) return 0;
    if (op == LZ_OP_CONV2D_GRAD_INPUT) return Cg >= 16;
    int64_t wn = w[0] * w[1] * taps, act = x[0] * x[1] * x[2] * x[3] + y[0] * y[1] * y[2] * y[3];
    if (wn > 8 * act) return 0;   /* the weight's reorder costs more than it saves */
    if (op == LZ_OP_CONV2D_GRAD_WEIGHT) return y[0] * y[2] * y[3] >= 128;
    return 1;
}

static const char *impl_of(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return "";
    return impl;
}

/* oneDNN's generated kernels: "jit..." and the brgemm-based "brg..."
   (AMX's convolutions are mostly brgconv) and "brdgmm..." (a depthwise
   forward on channels-last), not its reference loops or im2col with a
   gemm. */
static int jit_impl(const_dnnl_primitive_desc_t pd)
{
    const char *impl = impl_of(pd);
    if (strncmp(impl, "brdgmm", 6) == 0) return 1;
    return (strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0) && !strstr(impl, "gemm");
}

/* The primitive desc of the step's direction (NULL if oneDNN has none):
   backward ones need the forward one as a hint. */
static dnnl_primitive_desc_t make_pd(lz_op op, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *x,
                                     const dnnl_memory_desc_t *w, const dnnl_memory_desc_t *y,
                                     const dnnl_dims_t st, const dnnl_dims_t dil,
                                     const dnnl_dims_t pl, const dnnl_dims_t pr,
                                     const_dnnl_primitive_attr_t attr)
{
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    /* a bf16 backward step's hint is the bf16 forward (bf16 in, bf16 out:
       the forward with an f32 source oneDNN has not) */
    dnnl_memory_desc_t xh = *x, wh = *w, yh = *y;
    const int bf16 = x->data_type == dnnl_bf16 || w->data_type == dnnl_bf16 ||
                     y->data_type == dnnl_bf16;
    if (bf16 && op != LZ_OP_CONV2D) xh.data_type = wh.data_type = yh.data_type = dnnl_bf16;
    if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg,
                                                   op == LZ_OP_CONV2D ? x : &xh,
                                                   op == LZ_OP_CONV2D ? w : &wh, NULL,
                                                   op == LZ_OP_CONV2D ? y : &yh,
                                                   st, dil, pl, pr) != dnnl_success ||
        dnnl_primitive_desc_create(&fpd, &fd, attr, engine, NULL) != dnnl_success)
        return NULL;
    if (op == LZ_OP_CONV2D) return fpd;
    dnnl_status_t s = op == LZ_OP_CONV2D_GRAD_INPUT
        ? dnnl_dilated_convolution_backward_data_desc_init(&bd, alg, x, w, y, st, dil, pl, pr)
        : dnnl_dilated_convolution_backward_weights_desc_init(&bd, alg, x, w, NULL, y, st, dil,
                                                              pl, pr);
    if (s != dnnl_success || dnnl_primitive_desc_create(&pd, &bd, attr, engine, fpd) != dnnl_success)
        pd = NULL;
    dnnl_primitive_desc_destroy(fpd);
    return pd;
}

/* Builds operand k: plain memory, and when the primitive wants another
   layout, its own memory and the reorder between them (for a weight
   gradient weight_unblock.c's where it fits). */
static int make_operand(dnnl_conv *c, int k, const dnnl_memory_desc_t *plain,
                        const dnnl_memory_desc_t *inner, int weight_grad)
{
    if (dnnl_memory_create(&c->plain[k], plain, engine, DNNL_MEMORY_NONE) != dnnl_success) {
        c->plain[k] = NULL;
        return 1;
    }
    if (dnnl_memory_desc_equal(plain, inner)) {
        c->inner[k] = c->plain[k];
        return 0;
    }
    if (dnnl_memory_create(&c->inner[k], inner, engine, DNNL_MEMORY_NONE) != dnnl_success) {
        c->inner[k] = NULL;
        return 1;
    }
    c->offset[k] = c->bytes;
    c->bytes += align64(dnnl_memory_desc_get_size(inner));
    c->unblock = weight_grad && plain->data_type == dnnl_f32 ? lz_cpu_unblock_fits(inner) : 0;
    if (c->unblock) return 0;
    dnnl_primitive_desc_t rpd;
    const dnnl_memory_desc_t *from = k < 2 ? plain : inner, *to = k < 2 ? inner : plain;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) != dnnl_success)
        return 1;
    dnnl_status_t s = dnnl_primitive_create(&c->reorder[k], rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (s != dnnl_success) c->reorder[k] = NULL;
    return s != dnnl_success;
}

/* The step's operands as (x, w, y), whichever direction; 0 if it is not
   a 4-d f32 convolution with work to do. */
static int conv_operands(const lz_program *p, const lz_instr *s, const lz_value **X,
                         const lz_value **W, const lz_value **Y)
{
    int vx, vw, vy;
    if (s->op == LZ_OP_CONV2D) { vx = s->in[0]; vw = s->in[1]; vy = s->out; }
    else if (s->op == LZ_OP_CONV2D_GRAD_INPUT) { vy = s->in[0]; vw = s->in[1]; vx = s->out; }
    else { vx = s->in[0]; vy = s->in[1]; vw = s->out; }
    *X = &p->values[vx];
    *W = &p->values[vw];
    *Y = &p->values[vy];
    const lz_value *v[3] = {*X, *W, *Y};
    for (int k = 0; k < 3; k++)
        if ((v[k]->dtype != LZ_F32 && v[k]->dtype != LZ_BF16) || v[k]->ndim != 4 ||
            v[k]->numel == 0)
            return 0;
    return s->iattr[6] >= 1;
}

/* An autocast step: some operand of the convolution is bf16. */
static int any_bf16(const lz_value *X, const lz_value *W, const lz_value *Y)
{
    return X->dtype == LZ_BF16 || W->dtype == LZ_BF16 || Y->dtype == LZ_BF16;
}

int lz_cpu_conv_is_bf16(const lz_program *p, const lz_instr *s)
{
    const lz_value *X, *W, *Y;
    return lz_cpu_dnnl_conv_kernel((lz_op)s->op) && conv_operands(p, s, &X, &W, &Y) &&
           any_bf16(X, W, Y);
}

/* The tag of a value of C channels in block b (lz_value.block), or
   undef: channels-last where b is C on a channels-last step (one block
   of 16 or 8 channels is the same bytes both ways, and oneDNN wants both
   activations in one kind of layout), else the channel-blocked tag of b. */
static dnnl_format_tag_t blocked_tag(int b, int64_t C, int nhwc_step)
{
    if (b == C && nhwc_step) return dnnl_nhwc;
    return b == 16 ? dnnl_nChw16c : b == 8 ? dnnl_nChw8c : dnnl_format_tag_undef;
}

/* Whether a step with activations in blocks block[0] (x) and block[2]
   (y) is a channels-last one: AMX's bf16 kernels read no other layout
   (lz_cpu_program_block gives their programs channels-last), and a block
   wider than 16 is a whole value's channels. */
static int nhwc_step(const lz_value *X, const lz_value *W, const lz_value *Y, const int *block)
{
    return (any_bf16(X, W, Y) && lz_cpu_bf16_amx()) ||
           (block[0] > 16 && block[0] == X->shape[1]) || (block[2] > 16 && block[2] == Y->shape[1]);
}

/* The descs of a step's operands: plain[] in the layout the program keeps
   them (x, w, y order), and what the primitive is asked for: a blocked
   activation as it is (no reorder if oneDNN takes it, as its jit kernels
   do), the rest in whatever layout oneDNN prefers (`any`). */
typedef struct conv_descs {
    dnnl_memory_desc_t plain[3], ask[3];
    dnnl_dims_t st, dil, pl, pr;
} conv_descs;

/* 0 on success. block[k]: the layout of x, w, y (w is always plain). */
static int make_descs(conv_descs *d, const lz_instr *s, const lz_value *X, const lz_value *W,
                      const lz_value *Y, const int *block)
{
    const int64_t G = s->iattr[6];
    d->st[0] = s->iattr[0]; d->st[1] = s->iattr[1];
    d->dil[0] = s->iattr[4] - 1; d->dil[1] = s->iattr[5] - 1;
    d->pl[0] = s->iattr[2]; d->pl[1] = s->iattr[3];
    for (int k = 0; k < 2; k++)   /* what makes oneDNN's output size the step's */
        d->pr[k] = (Y->shape[2 + k] - 1) * d->st[k] + (W->shape[2 + k] - 1) * s->iattr[4 + k] + 1 -
                   X->shape[2 + k] - d->pl[k];
    dnnl_dims_t dims[3], wg = {G, W->shape[0] / G, W->shape[1], W->shape[2], W->shape[3]};
    const lz_value *v[3] = {X, W, Y};
    const int nhwc = nhwc_step(X, W, Y, block);
    for (int k = 0; k < 3; k++)   /* dnnl_dims_t is longer than a value's shape */
        for (int a = 0; a < 4; a++) dims[k][a] = v[k]->shape[a];
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        const int weight = k == 1, nd = weight && G > 1 ? 5 : 4;
        const int64_t *dm = weight && G > 1 ? wg : dims[k];
        const dnnl_format_tag_t tag = weight ? (G > 1 ? dnnl_goihw : dnnl_oihw)
                                    : block[k] ? blocked_tag(block[k], v[k]->shape[1], nhwc)
                                               : dnnl_nchw;
        const dnnl_data_type_t dt = v[k]->dtype == LZ_BF16 ? dnnl_bf16 : dnnl_f32;
        bad |= tag == dnnl_format_tag_undef ||
               dnnl_memory_desc_init_by_tag(&d->plain[k], nd, dm, dt, tag) != dnnl_success;
        if (!bad && !weight && block[k]) d->ask[k] = d->plain[k];
        else bad |= dnnl_memory_desc_init_by_tag(&d->ask[k], nd, dm, dt,
                                                 dnnl_format_tag_any) != dnnl_success;
    }
    return bad;
}

/* Whether a step may run by Winograd's algorithm (oneDNN's F(4x4, 3x3)):
   3x3, stride 1, not dilated, not grouped; its 4x4 output tiles 85% or
   more filled (a 7x7 plane's four tiles are 77%), at least 32 input and
   output channels, and 64 tiles over the batch, or 32 with 256 channels
   (docs/performance.md, "Winograd"). oneDNN refuses the rest (channels
   not a multiple of 16, no AVX-512). */
static int winograd_shape(const int64_t *x, const int64_t *w, const int64_t *y, int ndims_w,
                          const int64_t *st, const int64_t *dil)
{
    if (!lz_winograd_enabled() || ndims_w != 4 || w[2] != 3 || w[3] != 3 || st[0] != 1 ||
        st[1] != 1 || dil[0] || dil[1])
        return 0;
    const int64_t per_image = ((y[2] + 3) / 4) * ((y[3] + 3) / 4);
    const int64_t tiles = y[0] * per_image;
    const int64_t channels = x[1] < y[1] ? x[1] : y[1];
    const int filled = 100 * y[2] * y[3] >= 85 * 16 * per_image;
    return filled && channels >= 32 && (tiles >= 64 || (tiles >= 32 && channels >= 256));
}

static int winograd_fits(const conv_descs *d)
{
    const dnnl_memory_desc_t *x = &d->plain[0], *w = &d->plain[1], *y = &d->plain[2];
    return w->data_type == dnnl_f32 &&
           winograd_shape(x->dims, w->dims, y->dims, w->ndims, d->st, d->dil);
}

/* Under autocast, a convolution Winograd's algorithm runs in float32 with
   output planes of 16x16 or more stays float32: oneDNN has no bf16
   Winograd, and its f32 one, a quarter of the multiplications, beats bf16
   direct there; it saves the casts too. Without native bf16 every
   convolution does (widened operands would run k_conv.c on plain layouts,
   slower than f32). So does a 1x1 convolution neither of whose channel
   counts fills whole blocks: in float32 its activations stay plain and
   lazyc's sgemm runs it, in bf16 only oneDNN's kernel can, with reorders
   into blocks and back. With AMX (bf16_isa.h) the program keeps its
   activations channels-last, as oneDNN's AMX kernels read them
   (lz_cpu_program_block), and every convolution takes bf16 but grouped and
   depthwise ones (no AMX kernel for them). The figures:
   docs/performance.md, "bf16 convolutions" and "bf16 on AMX". */
int lz_cpu_conv_f32_faster(const int64_t *x, const int64_t *w, const int64_t *y,
                           const int *stride, const int *dilation, int groups)
{
    if (lz_cpu_bf16_way() != LZ_BF16_NATIVE) {
        lz_cpu_bf16_notice();
        return 1;
    }
    if (!lz_dnnl_conv_enabled()) return 0;
    if (lz_cpu_bf16_amx()) return groups != 1;
    if (groups != 1) return 0;
    const int b = lz_cpu_layout_block();
    if (w[2] * w[3] == 1 && b && x[1] % b && w[0] % b) return 1;
    if (y[2] < 16 || y[3] < 16) return 0;
    const int64_t st[2] = {stride[0], stride[1]}, dil[2] = {dilation[0] - 1, dilation[1] - 1};
    return winograd_shape(x, w, y, 4, st, dil);
}

/* The step's primitive desc on d (see make_pd), Winograd's where it fits
   and oneDNN has it, or NULL; jit_only: NULL unless it is a jit
   implementation. */
static dnnl_primitive_desc_t descs_pd(lz_op op, const conv_descs *d, int jit_only)
{
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success) {
        if (winograd_fits(d))
            pd = make_pd(op, dnnl_convolution_winograd, &d->ask[0], &d->ask[1], &d->ask[2], d->st,
                         d->dil, d->pl, d->pr, attr);
        if (!pd)
            pd = make_pd(op, dnnl_convolution_direct, &d->ask[0], &d->ask[1], &d->ask[2], d->st,
                         d->dil, d->pl, d->pr, attr);
    }
    dnnl_primitive_attr_destroy(attr);
    if (pd && jit_only && !jit_impl(pd)) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    return pd;
}

int lz_cpu_dnnl_conv_takes_blocked(const lz_program *p, const lz_instr *s, int b)
{
    const lz_value *X, *W, *Y;
    if (!lz_dnnl_conv_enabled() || !conv_operands(p, s, &X, &W, &Y)) return 0;
    /* bf16 operands only where oneDNN has bf16 kernels: widened ones run
       k_conv.c, which reads plain layouts */
    if (any_bf16(X, W, Y) && lz_cpu_bf16_way() == LZ_BF16_WIDENED) return 0;
    if (lz_cpu_conv_dw_grad_weight_blocked(p, s)) return 1;   /* k_conv.c's loops read any block */
    /* an image's 3 channels stay plain; the first conv's output need not
       (channels-last: every activation is whole blocks) */
    const int cl = b == LZ_BLOCK_CHANNELS_LAST;
    const int block[3] = {cl ? (int)X->shape[1] : X->shape[1] % b ? 0 : b, 0,
                          cl ? (int)Y->shape[1] : Y->shape[1] % b ? 0 : b};
    if ((!block[0] && !block[2]) || !take_engine()) return 0;
    conv_descs d;
    dnnl_primitive_desc_t pd = make_descs(&d, s, X, W, Y, block) ? NULL
                                                                 : descs_pd((lz_op)s->op, &d, 1);
    if (pd) dnnl_primitive_desc_destroy(pd);
    give_engine();
    return pd != NULL;
}

/* Lets oneDNN pick the layouts of the activations (x and y) not kept
   blocked (all of them: block NULL); 0 on success. */
static int ask_any_activations(conv_descs *d, const int *block)
{
    int bad = 0;
    for (int k = 0; k < 3; k += 2)
        if (!block || !block[k])
            bad |= dnnl_memory_desc_init_by_tag(&d->ask[k], 4, d->plain[k].dims,
                                                d->plain[k].data_type,
                                                dnnl_format_tag_any) != dnnl_success;
    return bad;
}

/* Builds the step's oneDNN primitive into c; 0 on success, else c is left
   without one (no jit kernel, or oneDNN failed). With a blocked operand
   any implementation will do: the other kernels read plain layouts only. */
static int build_primitive(dnnl_conv *c, const lz_program *p, const lz_instr *s)
{
    const lz_op op = (lz_op)s->op;
    const lz_value *X, *W, *Y;
    if (!conv_operands(p, s, &X, &W, &Y) || !take_engine()) return 1;
    c->engine = 1;
    const int block[3] = {X->block, 0, Y->block}, blocked = X->block || Y->block;
    conv_descs d;
    int bad = make_descs(&d, s, X, W, Y, block);
    /* AMX's kernels take channels-last activations only (lz_cpu_program_block
       keeps them so): a bf16 step asks for oneDNN's layout of a plain one
       and pays a reorder for it (bf16_isa.h) */
    if (!bad && any_bf16(X, W, Y) && lz_cpu_bf16_amx()) bad = ask_any_activations(&d, block);
    dnnl_primitive_desc_t pd = bad ? NULL : descs_pd(op, &d, 1);
    if (!bad && !pd && blocked) {   /* oneDNN picks every layout; reorders around it */
        bad = ask_any_activations(&d, NULL);
        if (!bad) pd = descs_pd(op, &d, 0);
    }
    bad = bad || !pd;
    /* operands in step order: in[0], in[1], out */
    const dnnl_memory_desc_t *plain[3];
    dnnl_query_t q[3];
    if (op == LZ_OP_CONV2D) {
        plain[0] = &d.plain[0]; plain[1] = &d.plain[1]; plain[2] = &d.plain[2];
        q[0] = dnnl_query_src_md; q[1] = dnnl_query_weights_md; q[2] = dnnl_query_dst_md;
        c->arg[0] = DNNL_ARG_SRC; c->arg[1] = DNNL_ARG_WEIGHTS; c->arg[2] = DNNL_ARG_DST;
    } else if (op == LZ_OP_CONV2D_GRAD_INPUT) {
        plain[0] = &d.plain[2]; plain[1] = &d.plain[1]; plain[2] = &d.plain[0];
        q[0] = dnnl_query_diff_dst_md; q[1] = dnnl_query_weights_md; q[2] = dnnl_query_diff_src_md;
        c->arg[0] = DNNL_ARG_DIFF_DST; c->arg[1] = DNNL_ARG_WEIGHTS; c->arg[2] = DNNL_ARG_DIFF_SRC;
    } else {
        plain[0] = &d.plain[0]; plain[1] = &d.plain[2]; plain[2] = &d.plain[1];
        q[0] = dnnl_query_src_md; q[1] = dnnl_query_diff_dst_md; q[2] = dnnl_query_diff_weights_md;
        c->arg[0] = DNNL_ARG_SRC; c->arg[1] = DNNL_ARG_DIFF_DST; c->arg[2] = DNNL_ARG_DIFF_WEIGHTS;
    }
    c->value[0] = s->in[0];
    c->value[1] = s->in[1];
    c->value[2] = s->out;
    for (int k = 0; k < 3 && !bad; k++) {
        const dnnl_memory_desc_t *inner = dnnl_primitive_desc_query_md(pd, q[k], 0);
        bad = !inner || make_operand(c, k, plain[k], inner, k == 2 && op == LZ_OP_CONV2D_GRAD_WEIGHT);
    }
    if (!bad) {
        const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        c->offset[3] = c->bytes;
        if (sp) c->bytes += align64(dnnl_memory_desc_get_size(sp));
        bad = !sp || dnnl_memory_create(&c->scratchpad, sp, engine, DNNL_MEMORY_NONE) != dnnl_success;
        if (bad) c->scratchpad = NULL;
    }
    if (!bad && dnnl_primitive_create(&c->prim, pd) != dnnl_success) {
        c->prim = NULL;
        bad = 1;
    }
    if (!bad) c->winograd = strstr(impl_of(pd), "wino") != NULL;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (bad) drop_primitive(c);
    return bad;
}

/* A bf16 step where oneDNN has no bf16 kernel: its bf16 operands widened
   (exactly) into the scratch, then k_conv.c's float32 path. */
static size_t widened_bytes(const lz_program *p, const lz_instr *s)
{
    size_t n = 0;
    for (int k = 0; k < s->n_in; k++)
        if (p->values[s->in[k]].dtype == LZ_BF16) n += align64(sizeof(float) * (size_t)p->values[s->in[k]].numel);
    return n;
}

static const char *run_widened(const lz_program *p, const lz_instr *s, void *const *ptrs,
                               void *scratch)
{
    void **wp = malloc(sizeof *wp * (size_t)p->n_values);
    if (!wp) return "lz_conv2d: out of memory widening bf16 operands";
    if (!scratch) {
        free(wp);
        return "lz_conv2d: no scratch for widened bf16 operands (the memory plan gave none)";
    }
    memcpy(wp, ptrs, sizeof *wp * (size_t)p->n_values);
    char *at = scratch;
    for (int k = 0; k < s->n_in; k++) {
        const lz_value *v = &p->values[s->in[k]];
        if (v->dtype != LZ_BF16) continue;
        const uint16_t *h = ptrs[s->in[k]];
        float *f = (float *)at;
        LZ_PAR_FOR(v->numel > 65536, i, v->numel, { f[i] = lz_bf16_to_f32(h[i]); });
        wp[s->in[k]] = f;
        at += align64(sizeof(float) * (size_t)v->numel);
    }
    const char *err = lz_cpu_conv_run(p, s, wp, LZ_CONV_BY_RULE);
    free(wp);
    pthread_mutex_lock(&lock);
    bf16_widened++;
    pthread_mutex_unlock(&lock);
    return err;
}

static int reorder(dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(r, stream, 2, a) != dnnl_success;
}

/* x [N, H, W, C] of es-byte elements at the pixels (sh*oh, sw*ow) and rows
   [N*OH*OW, C]: to_rows 1 gathers them, 0 scatters the rows back and
   zeroes every pixel no row lands on (a strided 1x1 grad input). */
static void strided_pixels(char *x, char *rows, const int64_t *xs, int64_t OH, int64_t OW,
                           int64_t sh, int64_t sw, size_t es, int to_rows)
{
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    const size_t px = (size_t)C * es;
    #pragma omp parallel for schedule(static) if ((double)N * H * W * C > 65536)
    for (int64_t nh = 0; nh < N * H; nh++) {
        const int64_t n = nh / H, h = nh % H, oh = h / sh;
        char *xrow = x + (size_t)nh * (size_t)W * px;
        const int on_row = h % sh == 0 && oh < OH;
        if (!to_rows && !on_row) {
            memset(xrow, 0, (size_t)W * px);
            continue;
        }
        if (!on_row) continue;
        char *r = rows + (size_t)((n * OH + oh) * OW) * px;
        for (int64_t w = 0; w < W; w++) {
            const int on = w % sw == 0 && w / sw < OW;
            if (to_rows && on) memcpy(r + (size_t)(w / sw) * px, xrow + (size_t)w * px, px);
            else if (!to_rows && on) memcpy(xrow + (size_t)w * px, r + (size_t)(w / sw) * px, px);
            else if (!to_rows) memset(xrow + (size_t)w * px, 0, px);
        }
    }
}

/* Which of a 1x1 product's operands (step order) is x */
static int x_operand(const lz_instr *s) { return s->op == LZ_OP_CONV2D_GRAD_INPUT ? 2 : 0; }

/* A strided 1x1 product's x and its rows in the step's scratch block:
   gathered before the product (to_rows 1) or scattered after it. */
static void strided_rows(const dnnl_conv *c, const lz_program *p, const lz_instr *s,
                         void *const *ptrs, char *block, int to_rows)
{
    const lz_value *X, *W, *Y;
    conv_operands(p, s, &X, &W, &Y);
    strided_pixels(ptrs[c->value[x_operand(s)]], block + c->offset[4], X->shape, Y->shape[2],
                   Y->shape[3], s->iattr[0], s->iattr[1], X->nbytes / (size_t)X->numel, to_rows);
}

static const char *conv_run(void *state, const lz_program *p, const lz_instr *s, void *const *ptrs,
                            void *scratch)
{
    dnnl_conv *c = state;
    if (c->cols) {
        const char *err = lz_cpu_wgrad_cols_run(c->cols, ptrs[s->in[0]], ptrs[s->in[1]],
                                                ptrs[s->out], scratch, stream);
        if (!err) {
            pthread_mutex_lock(&lock);
            bf16_by_library++;
            pthread_mutex_unlock(&lock);
        }
        return err;
    }
    if (c->widen) return run_widened(p, s, ptrs, scratch);
    if (c->rows) return lz_cpu_conv_rows(p, s, ptrs, scratch);
    if (!c->prim) return lz_cpu_conv_run(p, s, ptrs, c->path);
    char *block = scratch;
    if (c->bytes && !block) return "lz_conv2d: no scratch for oneDNN's buffers (the memory plan gave none)";
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        bad |= dnnl_memory_set_data_handle(c->plain[k], ptrs[c->value[k]]) != dnnl_success;
        if (c->inner[k] != c->plain[k])
            bad |= dnnl_memory_set_data_handle(c->inner[k], block + c->offset[k]) != dnnl_success;
    }
    bad |= dnnl_memory_set_data_handle(c->scratchpad, block ? block + c->offset[3] : NULL) != dnnl_success;
    if (c->strided && !bad) {
        bad = dnnl_memory_set_data_handle(c->plain[x_operand(s)], block + c->offset[4]) != dnnl_success;
        if (!bad && x_operand(s) == 0) strided_rows(c, p, s, ptrs, block, 1);
    }
    for (int k = 0; k < 2 && !bad; k++)
        if (c->reorder[k]) bad = reorder(c->reorder[k], c->plain[k], c->inner[k]);
    if (!bad) {
        dnnl_exec_arg_t a[4] = {{c->arg[0], c->inner[0]}, {c->arg[1], c->inner[1]},
                                {c->arg[2], c->inner[2]}, {DNNL_ARG_SCRATCHPAD, c->scratchpad}};
        bad = dnnl_primitive_execute(c->prim, stream, 4, a) != dnnl_success;
    }
    if (c->bf16) {
        pthread_mutex_lock(&lock);
        bf16_by_library++;
        pthread_mutex_unlock(&lock);
    }
    if (!bad && c->reorder[2]) bad = reorder(c->reorder[2], c->inner[2], c->plain[2]);
    if (!bad) bad = dnnl_stream_wait(stream) != dnnl_success;
    if (!bad && c->strided && x_operand(s) == 2) strided_rows(c, p, s, ptrs, block, 0);
    if (!bad && c->unblock) {
        const int64_t *w = p->values[c->value[2]].shape;   /* OIHW: 4-d, as unblock_fits saw */
        lz_cpu_weight_unblock((const float *)(block + c->offset[2]), ptrs[c->value[2]], w[0], w[1],
                              w[2] * w[3], c->unblock);
    }
    return bad ? "lz_conv2d: a oneDNN primitive failed" : NULL;
}

/* ---- the choice, measured on this machine -------------------------------- */

enum { PER_IMAGE, GATHERED, ONEDNN, ROWS, N_WAYS };
/* Steps are timed between these sizes; outside, the rules above choose:
   below, timing costs more than it could save; above, oneDNN (the rules'
   choice) won nearly every step, and timing them slows the first compile
   by seconds (docs/performance.md, "Convolution measurements"). */
#define TUNE_MIN_FLOPS 2e7
#define TUNE_MAX_FLOPS 1e9
#define KEY_LEN LZ_CONV_KEY_LEN
_Static_assert(N_WAYS == LZ_CONV_WAYS, "conv_choices.h counts the ways");

/* What each step shape measured fastest is kept (conv_choices.c) for the
   process and, across processes, in a file: every executable with that
   step makes the same choice, so compiling a graph twice gives the same
   values, and it is timed once per machine. */
static int64_t timed;   /* steps timed, ever (tests) */

int64_t lz_dnnl_conv_timed(void) { return locked_read(&timed); }

static void step_key(const lz_instr *s, const lz_value *X, const lz_value *W, const lz_value *Y,
                     int64_t *key)
{
    key[0] = s->op;
    for (int d = 0; d < 4; d++) {
        key[1 + d] = X->shape[d];
        key[5 + d] = W->shape[d];
        key[9 + d] = Y->shape[d];
    }
    for (int a = 0; a < 7; a++) key[13 + a] = s->iattr[a];
    key[20] = X->block;
    key[21] = Y->block;
    key[22] = lz_winograd_enabled();
}

static int tuned_way(const int64_t *key) { return lz_conv_choice_find(key); }

static void remember_way(const int64_t *key, int way)
{
    lz_conv_choice_put(key, way);
    pthread_mutex_lock(&lock);
    timed++;
    pthread_mutex_unlock(&lock);
}

/* Runs the step on made-up operands each way it can go and returns the
   fastest: twice each after a warm-up, interleaved, best of the two (the
   machine's noise only adds). way_ok[w]: whether way w can run. */
static int fastest_way(dnnl_conv *c, const lz_program *p, const lz_instr *s, const int *way_ok,
                       int prior)
{
    void **ptrs = calloc((size_t)p->n_values, sizeof *ptrs);
    const int v[3] = {s->in[0], s->in[1], s->out};
    const size_t rows_bytes = way_ok[ROWS] ? align64(lz_cpu_conv_rows_bytes(p, s)) : 0;
    const size_t bytes = c->bytes > rows_bytes ? c->bytes : rows_bytes;   /* c->bytes: align64'd */
    void *scratch = bytes ? aligned_alloc(64, bytes) : NULL;
    int ok = ptrs != NULL && (scratch || !bytes);
    for (int k = 0; k < 3 && ok; k++) {
        const lz_value *val = &p->values[v[k]];
        float *f = ptrs[v[k]] = malloc(val->nbytes);
        ok = f != NULL;
        for (int64_t i = 0; ok && i < val->numel; i++) f[i] = (float)(i % 17) * 0.0625f - 0.5f;
    }
    double best[N_WAYS], first[N_WAYS], fastest_first = 1e300;
    for (int w = 0; w < N_WAYS; w++) best[w] = first[w] = 1e300;
    for (int rep = 0; rep < 2 && ok; rep++)
        for (int w = 0; w < N_WAYS && ok; w++) {
            /* a way half as fast again as another at the warm-up is out */
            if (!way_ok[w] || (rep > 0 && first[w] > 1.5 * fastest_first)) continue;
            dnnl_primitive_t prim = c->prim;
            if (w != ONEDNN) c->prim = NULL;   /* conv_run takes k_conv.c's path */
            c->path = w == GATHERED ? LZ_CONV_GATHERED : LZ_CONV_PER_IMAGE;
            c->rows = w == ROWS;
            const double t0 = lz_now_ms();
            ok = conv_run(c, p, s, ptrs, scratch) == NULL;
            const double t = lz_now_ms() - t0;
            c->prim = prim;
            c->rows = 0;
            if (rep == 0) {
                first[w] = t;
                if (t < fastest_first) fastest_first = t;
            } else if (t < best[w]) {
                best[w] = t;
            }
        }
    for (int k = 0; ptrs && k < 3; k++) free(ptrs[v[k]]);
    free(ptrs);
    free(scratch);
    if (!ok) return prior;
    int way = prior;
    for (int w = 0; w < N_WAYS; w++)   /* the prior keeps ties within 3% */
        if (way_ok[w] && best[w] < best[way] / 1.03) way = w;
    return way;
}

/* Whether c's primitive is one of oneDNN's depthwise kernels ("jit_dw",
   "brdgmm_dw"): for a depthwise weight gradient on blocked activations
   they beat k_conv.c's loops, but oneDNN has them up to 3x3 only and runs
   larger kernels as 16x16-blocked groups, far slower than the loops
   (docs/performance.md, "Depthwise weight gradients"). */
static int runs_depthwise_kernel(const dnnl_conv *c)
{
    const_dnnl_primitive_desc_t pd = NULL;
    if (!c->prim || dnnl_primitive_get_primitive_desc(c->prim, &pd) != dnnl_success) return 0;
    return strstr(impl_of(pd), "_dw") != NULL;
}

static void count_created(const dnnl_conv *c)
{
    pthread_mutex_lock(&lock);
    created++;
    winograd += c->winograd;
    pthread_mutex_unlock(&lock);
}

/* A step on blocked activations: only oneDNN reads them, or the rows
   (by the rule, or timed in tune mode). Without a primitive or rows,
   k_conv.c fails the step. */
static void *prepare_blocked(dnnl_conv *c, const lz_program *p, const lz_instr *s, int mode)
{
    const lz_value *X, *W, *Y;
    conv_operands(p, s, &X, &W, &Y);
    const int rows_may = mode != 2 && lz_cpu_conv_rows_apply(p, s);
    int way = rows_may && Y->shape[0] * Y->shape[2] * Y->shape[3] <= ROWS_MAX_PIXELS ? ROWS : ONEDNN;
    const double flops = conv_flops(X->shape, W->shape, Y->shape, s->iattr[6]);
    if (rows_may && mode == LZ_DNNL_CONV_TUNE && flops >= TUNE_MIN_FLOPS && flops <= TUNE_MAX_FLOPS) {
        int64_t key[KEY_LEN];
        step_key(s, X, W, Y, key);
        const int known = tuned_way(key);
        if (known == ROWS || known == ONEDNN) {   /* a file's other ways do not apply here */
            way = known;
        } else {
            const int way_ok[N_WAYS] = {0, 0, build_primitive(c, p, s) == 0, 1};
            way = fastest_way(c, p, s, way_ok, way_ok[way] ? way : ROWS);
            remember_way(key, way);
        }
    }
    if (way == ROWS) {
        drop_primitive(c);
        c->rows = 1;
        c->bytes = align64(lz_cpu_conv_rows_bytes(p, s));
        return c;
    }
    if (c->prim || build_primitive(c, p, s) == 0) count_created(c);
    return c;
}

/* A 1x1 bf16 convolution on channels-last activations without padding:
   x is [N*H*W, C] and y [N*H*W, O] as they lie and the weight [O, C], so
   each direction is one matrix product: y = x w^T, dx = dy w,
   dw = dy^T x, which oneDNN's AMX matmul runs faster than its 1x1
   convolution kernels, weight gradients over few pixels most of all
   (docs/performance.md, "Channels-last on AMX"). With a stride (resnet's
   downsampling), x's pixels at the stride are copied into rows first
   (strided_pixels). Whether the step is one. */
static int is_1x1_product(const lz_program *p, const lz_instr *s)
{
    const lz_value *X, *W, *Y;
    if (!conv_operands(p, s, &X, &W, &Y)) return 0;
    const int64_t *a = s->iattr;   /* stride, padding, dilation, groups */
    /* autocast's: bf16 operands, an f32 result */
    const lz_value *res = &p->values[s->out];
    int operands_bf16 = res->dtype == LZ_F32;
    for (int k = 0; k < s->n_in; k++) operands_bf16 &= p->values[s->in[k]].dtype == LZ_BF16;
    return operands_bf16 && X->block == X->shape[1] && Y->block == Y->shape[1] &&
           W->shape[2] == 1 && W->shape[3] == 1 && a[0] >= 1 && a[1] >= 1 && a[2] == 0 &&
           a[3] == 0 && a[4] == 1 && a[5] == 1 && a[6] == 1;
}


/* That step's matmul in c, its operands in step order; 0 on success. */
static int build_1x1_product(dnnl_conv *c, const lz_program *p, const lz_instr *s)
{
    const lz_value *X, *W, *Y;
    conv_operands(p, s, &X, &W, &Y);
    if (!take_engine()) return 1;
    c->engine = 1;
    /* strided: x's pixels at the stride are rows in the scratch (strided_pixels) */
    const int64_t NP = Y->shape[0] * Y->shape[2] * Y->shape[3], C = X->shape[1], O = Y->shape[1];
    /* per step operand: dims, strides, the matmul's argument */
    dnnl_dims_t dims[3], st[3];
    int arg[3];
#define OPERAND(k, r, cl, sr, sc, a) \
    (dims[k][0] = (r), dims[k][1] = (cl), st[k][0] = (sr), st[k][1] = (sc), arg[k] = (a))
    if (s->op == LZ_OP_CONV2D) {   /* y[NP, O] = x[NP, C] w^T: w as [C, O] */
        OPERAND(0, NP, C, C, 1, DNNL_ARG_SRC);
        OPERAND(1, C, O, 1, C, DNNL_ARG_WEIGHTS);
        OPERAND(2, NP, O, O, 1, DNNL_ARG_DST);
    } else if (s->op == LZ_OP_CONV2D_GRAD_INPUT) {   /* dx[NP, C] = dy[NP, O] w[O, C] */
        OPERAND(0, NP, O, O, 1, DNNL_ARG_SRC);
        OPERAND(1, O, C, C, 1, DNNL_ARG_WEIGHTS);
        OPERAND(2, NP, C, C, 1, DNNL_ARG_DST);
    } else {   /* dw[O, C] = dy^T x: dy as [O, NP] */
        OPERAND(0, NP, C, C, 1, DNNL_ARG_WEIGHTS);
        OPERAND(1, O, NP, 1, O, DNNL_ARG_SRC);
        OPERAND(2, O, C, C, 1, DNNL_ARG_DST);
    }
#undef OPERAND
    dnnl_memory_desc_t md[3];
    const dnnl_memory_desc_t *by_arg[3] = {NULL, NULL, NULL};   /* src, weights, dst */
    int bad = 0;
    for (int k = 0; k < 3 && !bad; k++) {
        bad = dnnl_memory_desc_init_by_strides(&md[k], 2, dims[k], k == 2 ? dnnl_f32 : dnnl_bf16,
                                               st[k]) != dnnl_success;
        by_arg[arg[k] == DNNL_ARG_SRC ? 0 : arg[k] == DNNL_ARG_WEIGHTS ? 1 : 2] = &md[k];
    }
    dnnl_primitive_desc_t pd = bad ? NULL : lz_cpu_bf16_matmul_pd(engine, by_arg[0], by_arg[1], by_arg[2]);
    bad = bad || !pd;
    for (int k = 0; k < 3 && !bad; k++) {
        c->arg[k] = arg[k];
        c->value[k] = k < 2 ? s->in[k] : s->out;
        bad = dnnl_memory_create(&c->plain[k], &md[k], engine, DNNL_MEMORY_NONE) != dnnl_success;
        if (bad) c->plain[k] = NULL;
        c->inner[k] = c->plain[k];
    }
    const dnnl_memory_desc_t *sp = bad ? NULL : dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    bad = bad || !sp || dnnl_memory_create(&c->scratchpad, sp, engine, DNNL_MEMORY_NONE) != dnnl_success;
    if (!bad) c->bytes = align64(dnnl_memory_desc_get_size(sp));
    c->strided = s->iattr[0] > 1 || s->iattr[1] > 1;
    if (!bad && c->strided) {
        c->offset[4] = c->bytes;
        c->bytes += align64((size_t)(NP * C) * (X->nbytes / (size_t)X->numel));
    }
    if (!bad && dnnl_primitive_create(&c->prim, pd) != dnnl_success) {
        c->prim = NULL;
        bad = 1;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (bad) drop_primitive(c);
    return bad;
}

/* A step on bf16 operands (autocast) runs on oneDNN's bf16 primitive,
   whatever LZ_DNNL_CONV says (lazyc's own kernels are float32), or where
   oneDNN has no jit one for bf16, widened to float32. */
static void *prepare_bf16(const lz_program *p, const lz_instr *s)
{
    dnnl_conv *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    lz_cpu_bf16_notice();
    /* oneDNN 2.6's bf16 weight gradient of a kernel larger than 1x1 on
       plain layouts (jit_bf16, and on AMX too) is far slower than widening
       to f32 for k_conv.c (docs/performance.md, "bf16 convolutions") */
    const lz_value *X, *W, *Y;
    conv_operands(p, s, &X, &W, &Y);
    const int blocked = X->block || Y->block;   /* only a primitive reads them */
    const int slow = !blocked && s->op == LZ_OP_CONV2D_GRAD_WEIGHT && W->shape[2] * W->shape[3] > 1;
    const int native = lz_cpu_bf16_way() != LZ_BF16_WIDENED;
    if (native && take_engine()) {   /* a weight gradient over columns */
        c->engine = 1;
        c->cols = lz_cpu_wgrad_cols_make(p, s, engine);
        if (c->cols) {
            c->bytes = lz_cpu_wgrad_cols_bytes(c->cols);
            count_created(c);
            return c;
        }
        give_engine();
        c->engine = 0;
    }
    if (native && is_1x1_product(p, s) && build_1x1_product(c, p, s) == 0) {
        c->bf16 = 1;
        count_created(c);
        return c;
    }
    if (!slow && native && build_primitive(c, p, s) == 0) {
        c->bf16 = 1;
        count_created(c);
        return c;
    }
    drop_primitive(c);
    c->widen = 1;
    c->bytes = widened_bytes(p, s);
    return c;
}

static void *conv_prepare(const lz_program *p, const lz_instr *s)
{
    const lz_value *X, *W, *Y;
    if (!conv_operands(p, s, &X, &W, &Y)) return NULL;
    if (any_bf16(X, W, Y)) return prepare_bf16(p, s);
    const lz_op op = (lz_op)s->op;
    const int64_t G = s->iattr[6], Cg = X->shape[1] / G, taps = W->shape[2] * W->shape[3];
    const int mode = lz_dnnl_conv_enabled(), depthwise = Cg == 1 && G > 1;
    dnnl_conv *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if ((X->block || Y->block) && lz_cpu_conv_dw_grad_weight_blocked(p, s)) {
        if (build_primitive(c, p, s) == 0 && runs_depthwise_kernel(c)) {
            count_created(c);
            return c;
        }
        conv_release(c);   /* k_conv.c's direct loops read the blocks (kernels.h) */
        return NULL;
    }
    if (X->block || Y->block) return prepare_blocked(c, p, s, mode);
    const int rule_dnnl = mode && worth_it(op, X->shape, W->shape, Y->shape, G);
    const int rule_gathers = lz_cpu_conv_by_rule_gathers(p, s);
    const int prior = rule_dnnl ? ONEDNN : rule_gathers ? GATHERED : PER_IMAGE;
    int64_t key[KEY_LEN];
    step_key(s, X, W, Y, key);
    int way = mode != LZ_DNNL_CONV_TUNE || depthwise ? prior : tuned_way(key);
    /* a recorded way this step cannot take (the file was edited) */
    if (way == ROWS || (way == GATHERED && !lz_cpu_conv_can_gather(p, s))) way = prior;
    const double flops = conv_flops(X->shape, W->shape, Y->shape, G);
    if (way < 0 && (flops < TUNE_MIN_FLOPS || flops > TUNE_MAX_FLOPS)) way = prior;
    if (way < 0) {
        /* 1x1: oneDNN's reorders measured slower everywhere; the 3-channel
           grad input kernel too (see the top comment) */
        const int dnnl_may = mode && taps > 1 && (op != LZ_OP_CONV2D_GRAD_INPUT || Cg >= 16);
        const int way_ok[N_WAYS] = {1, lz_cpu_conv_can_gather(p, s),
                                    dnnl_may && build_primitive(c, p, s) == 0};
        way = fastest_way(c, p, s, way_ok, way_ok[prior] ? prior : PER_IMAGE);
        remember_way(key, way);
    }
    if (way == ONEDNN && !c->prim && build_primitive(c, p, s)) way = rule_gathers ? GATHERED : PER_IMAGE;
    if (way != ONEDNN) drop_primitive(c);
    c->path = way == GATHERED ? LZ_CONV_GATHERED : LZ_CONV_PER_IMAGE;
    if (way != ONEDNN && (way == GATHERED) == rule_gathers) {
        free(c);   /* the plain kernel does just this */
        return NULL;
    }
    if (way == ONEDNN) count_created(c);
    return c;
}

static int runs_library(const void *state)
{
    const dnnl_conv *c = state;
    return c->prim != NULL || c->cols != NULL;
}

static size_t scratch_bytes(const void *state)
{
    const dnnl_conv *c = state;
    return c->prim || c->rows || c->widen || c->cols ? c->bytes : 0;
}

const lz_stateful_kernel *lz_cpu_dnnl_conv_kernel(lz_op op)
{
    static const lz_stateful_kernel k = {conv_prepare, scratch_bytes, conv_run, conv_release,
                                         runs_library};
    switch (op) {
    case LZ_OP_CONV2D:
    case LZ_OP_CONV2D_GRAD_INPUT:
    case LZ_OP_CONV2D_GRAD_WEIGHT: return &k;
    default: return NULL;
    }
}
