/* Device selection and the backend contract's transfers (issue 44):
 * lz_device_use / lz_device_name and LZ_DEVICE choose the backend before
 * the first tensor, with an error naming why when they cannot; the bytes
 * moved each way are counted (fills are not transfers); and on the guarded
 * backend (liblazyc_guarded.so) a tensor's device memory really is
 * unreadable and unwritable to the host: a read or a memcpy through a
 * buffer's address kills the process with SIGSEGV, where on the CPU the
 * same access works. Each case runs in its own process: a process chooses
 * its device once. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "backends/cpu/random_fill.h"
#include "backend/buffer.h"
#include "base/bf16.h"
#include "engine/tensor.h"

static const int64_t shape4[1] = {4};

/* Whether a child that reads (write: memcpy into) the memory at p dies of
   SIGSEGV. */
static int access_faults(void *p, int write)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);   /* a sanitizer's handler would report and abort */
        if (write) {
            const char junk[16] = "the engine's";
            memcpy(p, junk, sizeof junk);
        } else {
            volatile const char *c = p;
            if (c[0] == 42) _exit(3);
        }
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

/* A tensor's device address (tests may look inside). */
static void *address_of(lz_tensor *t) { return lz_tensor_of(t)->node->buf->data; }

static void case_unknown(void)
{
    CHECK(!strcmp(lz_device_name(), "cpu"));
    CHECK(lz_device_use("nonesuch") == -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_device_use: no backend 'nonesuch'") &&
          strstr(lz_last_error(), "liblazyc_nonesuch.so not found"));
    CHECK(lz_device_use("../lib/evil") == -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "'../lib/evil' is not a device name"));
    CHECK(lz_device_use(NULL) == -1);
    CHECK(!strcmp(lz_device_name(), "cpu"));   /* nothing was started */
    CHECK(lz_device_use("cpu") == 0);
    lz_tensor *t = lz_full(LZ_F32, 1, shape4, 2.5);
    CHECK(t && lz_item(lz_sum(t)) == 10.0f);
}

static void case_env(void)
{
    setenv("LZ_DEVICE", "nonesuch", 1);
    CHECK(!strcmp(lz_device_name(), "nonesuch"));
    CHECK(lz_zeros(LZ_F32, 1, shape4) == NULL);
    CHECK(lz_last_error() && strstr(lz_last_error(), "lz_zeros: LZ_DEVICE=nonesuch: no backend 'nonesuch'"));
    unsetenv("LZ_DEVICE");   /* nothing started: the default applies now */
    lz_tensor *t = lz_zeros(LZ_F32, 1, shape4);
    CHECK(t != NULL);
    CHECK(!strcmp(lz_device_name(), "cpu"));
    setenv("LZ_DEVICE", "guarded", 1);   /* too late: tensors live on the CPU */
    CHECK(!strcmp(lz_device_name(), "cpu"));
    lz_free(t);
}

static void case_after_first_tensor(void)
{
    lz_tensor *t = lz_zeros(LZ_F32, 1, shape4);
    CHECK(lz_device_use("guarded") == -1);
    CHECK(lz_last_error() && strstr(lz_last_error(), "tensors already live on device 'cpu'"));
    CHECK(lz_device_use("cpu") == 0);
    lz_free(t);
}

/* Values made every way the engine makes data, read back, and the bytes
   each way. */
static void check_values_and_bytes(void)
{
    lz_metrics_reset();
    const float x[4] = {1, -2, 3.5f, 4};
    lz_tensor *a = lz_from_host(x, LZ_F32, 1, shape4);
    lz_metrics m = lz_metrics_get();
    CHECK_EQ_I(m.bytes_to_device, 16);
    CHECK_EQ_I(m.transfers_to_device, 1);
    lz_tensor *z = lz_zeros(LZ_I64, 1, shape4);
    lz_tensor *f = lz_full(LZ_BF16, 1, shape4, 1.5);
    lz_tensor *g = lz_full(LZ_I32, 1, shape4, -7);
    lz_tensor *r = lz_from_random(9, 1, 0.5f, 2.0f, 1, (int64_t[]){1000});
    m = lz_metrics_get();
    CHECK_EQ_I(m.bytes_to_device, 16);          /* fills and draws run on the device */
    CHECK_EQ_I(m.transfers_to_device, 1);
    float back[4];
    CHECK(lz_to_host(a, back, sizeof back) == 0 && !memcmp(back, x, sizeof x));
    int64_t zb[4] = {1, 1, 1, 1};
    CHECK(lz_to_host(z, zb, sizeof zb) == 0 && zb[0] == 0 && zb[3] == 0);
    uint16_t fb[4];
    CHECK(lz_to_host(f, fb, sizeof fb) == 0 && fb[0] == lz_f32_to_bf16(1.5f) && fb[3] == fb[0]);
    int32_t gb[4];
    CHECK(lz_to_host(g, gb, sizeof gb) == 0 && gb[0] == -7 && gb[3] == -7);
    float rb[1000], want[1000];
    lz_cpu_fill_random(want, 1000, 9, 1, 0.5f, 2.0f);   /* the reference draws */
    CHECK(lz_to_host(r, rb, sizeof rb) == 0 && !memcmp(rb, want, sizeof rb));
    CHECK(lz_copy_from_host(a, x, sizeof x) == 0);
    m = lz_metrics_get();
    CHECK_EQ_I(m.bytes_to_device, 32);
    CHECK_EQ_I(m.bytes_from_device, 16 + 32 + 8 + 16 + 4000);
    CHECK_EQ_I(m.transfers_from_device, 5);
    char *rep = lz_metrics_report();
    CHECK(rep && strstr(rep, "bytes_to_device       32\n") && strstr(rep, "bytes_from_device     4072\n"));
    free(rep);
    /* a computed result: executions read and write device memory */
    lz_tensor *aa = lz_mul(a, a), *s = lz_sum(aa);
    CHECK_NEAR(lz_item(s), 1 + 4 + 12.25 + 16, 1e-5);
    lz_free(a); lz_free(z); lz_free(f); lz_free(g); lz_free(r); lz_free(aa); lz_free(s);
}

static void case_cpu(void)
{
    CHECK(!strcmp(lz_device_name(), "cpu"));
    check_values_and_bytes();
    /* the control: on the CPU the host may touch device memory */
    lz_tensor *t = lz_zeros(LZ_F32, 1, shape4);
    CHECK(!access_faults(address_of(t), 0));
    CHECK(!access_faults(address_of(t), 1));
    lz_free(t);
}

static void case_guarded(void)
{
    CHECK(lz_device_use("guarded") == 0);
    CHECK(!strcmp(lz_device_name(), "guarded"));
    CHECK(lz_device_use("guarded") == 0);   /* the same again: fine */
    check_values_and_bytes();
    lz_tensor *t = lz_zeros(LZ_F32, 1, shape4);
    lz_tensor *u = lz_relu(lz_add(t, t));
    CHECK(lz_sync(&u, 1, 1) == 0);
    CHECK(access_faults(address_of(t), 0));   /* data made from the host */
    CHECK(access_faults(address_of(t), 1));
    CHECK(access_faults(address_of(u), 0));   /* an execution's result */
    CHECK(access_faults(address_of(u), 1));
    lz_tensor *su = lz_sum(u);
    CHECK_NEAR(lz_item(su), 0.0, 0);   /* and the backend's own reads still work */
    lz_free(su);
    lz_free(t);
    lz_free(u);
}

int main(void)
{
    unsetenv("LZ_DEVICE");   /* each case chooses its device (ctest -L guarded sets one) */
    int failed = lz_test_case_in_child("unknown", case_unknown) + lz_test_case_in_child("env", case_env) +
                 lz_test_case_in_child("after first tensor", case_after_first_tensor) +
                 lz_test_case_in_child("cpu", case_cpu) + lz_test_case_in_child("guarded", case_guarded);
    printf("%s\n", failed ? "FAILED" : "all cases passed");
    return failed != 0;
}
