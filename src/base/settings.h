/* Every LZ_* environment variable lazyc reads, declared once: the table
 * below gives each its name, kind, default, accepted values and meaning.
 * The library reads them only through lz_setting_int / lz_setting_text,
 * which parse a variable on its first read and keep the result; a value
 * that does not parse is never taken silently: one warning on stderr names
 * the variable, what it accepts, and the default used instead. lz_settings_get
 * (lazyc.h) lists the table, as `lazyc env` does.
 *
 * Adding a variable is one line in LZ_SETTINGS:
 *     X(NAME, KIND, "default", min, max, choices, "meaning")
 * declares LZ_NAME, read with lz_setting_int(LZ_SETTING_NAME) (or
 * lz_setting_text). KIND is BOOL ("0" or "1"), INT (an integer in
 * [min, max]), CHOICE (one of the "|"-separated choices; the value is its
 * index) or TEXT (any string). An empty value counts as unset.
 *
 * Ground floor: settings.c depends on nothing but the error module. */
#ifndef LZ_SETTINGS_H
#define LZ_SETTINGS_H

#include <stdint.h>

#define LZ_SETTINGS(X) \
    X(EAGER,          BOOL,   "0",    0, 1, NULL, "1: every op executes as soon as it is recorded (lz_set_eager overrides)") \
    X(DEVICE,         TEXT,   "cpu",  0, 0, NULL, "the device tensors live on: cpu, or NAME for a backend loaded from liblazyc_NAME.so (lz_device_use overrides, before the first tensor)") \
    X(FUSION,         BOOL,   "1",    0, 1, NULL, "0: no fusion of element-wise chains and batch norm with its activation") \
    X(BLOCKED,        CHOICE, "1",    0, 0, "0|1|nhwc", "layouts between oneDNN convolutions: 0 plain, 1 the backend's (channel blocks; channels-last for bf16 on AMX), nhwc: channels-last everywhere") \
    X(WINOGRAD,       BOOL,   "1",    0, 1, NULL, "0: no 3x3 convolution by Winograd's algorithm (direct kernels only)") \
    X(DNNL_CONV,      CHOICE, "1",    0, 0, "0|1|2|tune", "oneDNN convolutions: 0 never, 1 where they measured faster, 2 wherever oneDNN has a jit kernel, tune: time each shape once and keep the choice (see LZ_CONV_CACHE)") \
    X(CONV_CACHE,     BOOL,   "1",    0, 1, NULL, "0: the choices timed (LZ_DNNL_CONV=tune, autocast's products) are kept for the process only, not in ${XDG_CACHE_HOME:-~/.cache}/lazyc") \
    X(DETERMINISTIC,  BOOL,   "0",    0, 1, NULL, "1: nothing is chosen by timing (LZ_DNNL_CONV=tune takes the rules, reads no cached choice; autocast's products follow the ISA's rule): the same results on every run and machine of one ISA") \
    X(AUTOCAST_PRODUCTS, CHOICE, "measure", 0, 0, "measure|rule|bf16|f32", "autocast's products: measure: each shape in bf16 only where it measured faster than float32 (once per machine, kept with LZ_CONV_CACHE's choices), rule: as the two peaks predict, bf16: all, f32: none") \
    X(CACHE_CAPACITY, INT,    "512",  1, INT32_MAX, NULL, "compiled executables kept in the cache (least recently used dropped first)") \
    X(POOL_MIB,       INT,    "4096", 0, INT32_MAX, NULL, "MiB of freed device buffers kept for reuse (0: keep none)") \
    X(HUGE_PAGES,     BOOL,   "0",    0, 1, NULL, "1: device buffers of 2 MiB and more are advised for transparent huge pages (steadier steps; a slower first step where fresh memory is slow)") \
    X(FAULT_ALLOC,    INT,    "0",    0, INT32_MAX, NULL, "tests: N fails the N-th device allocation (0: never)") \
    X(FAULT_KERNEL,   INT,    "0",    0, INT32_MAX, NULL, "tests: N fails the N-th kernel call (0: never)") \
    X(FAULT_HOST,     INT,    "0",    0, INT32_MAX, NULL, "tests: N fails the N-th checked host allocation (0: never)") \
    X(FAULT_SCRATCH,  INT,    "0",    0, INT32_MAX, NULL, "tests: N fails the N-th growth of a kernel's scratch buffer (0: never)") \
    X(EXPLAIN_COMPILES, BOOL, "0",    0, 1, NULL, "1: one line on stderr per compile, with the graph's size and why the cache missed") \
    X(CAPTURE_CHECK,  INT,    "0",    0, INT32_MAX, NULL, "N: a captured function traces every N-th call again and fails it if the graph or a constant differs (0: never)") \
    X(TORCH_PYTHON,   TEXT,   "/usr/bin/python3", 0, 0, NULL, "lazyc bench: the Python interpreter that runs the PyTorch reference") \
    X(BENCH_TORCH_SCRIPT, TEXT, "", 0, 0, NULL, "lazyc bench: path of torch_reference.py (empty: found next to the program)") \
    X(TORCH_OMP_WAIT_POLICY, TEXT, "", 0, 0, NULL, "lazyc bench: OMP_WAIT_POLICY for the PyTorch reference (empty: its default)") \
    X(DIST_TIMEOUT,   INT,    "300",  1, 86400, NULL, "data-parallel: seconds a rank waits for the others in a collective before failing the step") \
    X(DIST_BUCKET_KIB, INT,   "25600", 1, 4194304, NULL, "data-parallel: KiB of gradients summed by one all-reduce (lz_dist_average_grads)") \
    X(DIST_OVERLAP,   BOOL,   "1",    0, 1, NULL, "0: all-reduces run where they were recorded, not as soon as their gradients are ready (to measure the overlap)") \
    X(CUDA_DEVICE,    INT,    "0",    0, 1024, NULL, "the CUDA device (GPU index) LZ_DEVICE=cuda uses") \
    X(CUDA_TF32,      BOOL,   "0",    0, 1, NULL, "1: float32 products and convolutions on the CUDA device may use TF32 tensor cores (10-bit mantissa); 0: float32 means float32") \
    X(CUDA_GRAPHS,    BOOL,   "1",    0, 1, NULL, "0: every execution on the CUDA device goes kernel by kernel; 1: an executable's runs from the second on are one CUDA graph launch") \
    X(CUDA_GRAPH_COPY_MIB, INT, "1024", 0, INT32_MAX, NULL, "CUDA graphs: the most MiB of inputs and outputs whose buffers change between runs a graph copies through its fixed buffers; beyond it runs go kernel by kernel") \
    X(CUDA_CACHE,     BOOL,   "1",    0, 1, NULL, "0: the CUDA kernels NVRTC compiles are kept for the process only, not in ${XDG_CACHE_HOME:-~/.cache}/lazyc/cuda") \
    X(CUDA_STAGING_MIB, INT,  "128",  0, 65536, NULL, "MiB of pinned host memory host-to-device copies on the CUDA device go through (0: none, copies from pageable memory)")

typedef enum {
#define LZ_SETTING_ID(id, kind, def, lo, hi, choices, help) LZ_SETTING_##id,
    LZ_SETTINGS(LZ_SETTING_ID)
#undef LZ_SETTING_ID
    LZ_SETTING_COUNT
} lz_setting_id;

/* The value of a BOOL, INT or CHOICE setting: the environment's, parsed on
   the first call, or the default when unset or invalid (warned once). */
int64_t     lz_setting_int(lz_setting_id id);
/* The value of a TEXT setting (the environment's now, else the default). */
const char *lz_setting_text(lz_setting_id id);

#endif
