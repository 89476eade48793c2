/* The CPU backend's first compile of a program with a product has a
 * thread make oneDNN's sgemm kernels while it prepares the executable
 * (backends/cpu/backend.c), and joins it before the compile returns: no
 * thread of lazyc's is left running by a compile, so a program may exit
 * right after one. Counted on Linux, from /proc/self/task.
 *
 * `test_compile_threads stopped` (ctest test_compile_threads_stopped):
 * the same when that first compile stops after the kernels are prepared
 * (its arena's allocation fails), and the next compile then works. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/fault.h"
#include "compile/executable.h"
#include "engine/tensor.h"
#include "ir/graph.h"
#include "testlib.h"

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The process's first compile, of a graph with an arena (the product is
   a temporary), stopped by its arena's allocation failing. */
static void first_compile_stopped(void)
{
    const int64_t s[2] = {16, 16};
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, s), *b = lz_test_rand(2, -1, 1, 2, s);
    lz_tensor *c = lz_matmul(a, b), *d = lz_add(c, a);
    lz_node *root = d->node;
    lz_graph g;
    lz_graph_cut(&g, &root, 1);
    const int before = threads_now();
    lz_fault_set(LZ_FAULT_ALLOC, 1);   /* the compile's only device allocation: the arena */
    lz_executable *e = lz_compile(&g);
    CHECK(e == NULL);
    CHECK(lz_fault_fired(LZ_FAULT_ALLOC) == 1);
    CHECK(strstr(lz_last_error(), "arena") != NULL);
    CHECK_EQ_I(threads_now(), before);
    lz_fault_reset();
    e = lz_compile(&g);
    CHECK(e != NULL);
    CHECK_EQ_I(threads_now(), before);
    lz_executable_unref(e);
    lz_graph_release(&g);
    float vd[256];
    CHECK(lz_to_host(d, vd, sizeof vd) == 0);
    lz_free(a);
    lz_free(b);
    lz_free(c);
    lz_free(d);
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv)
{
    if (threads_now() < 0) {
        fprintf(stderr, "test_compile_threads: NOT CHECKED: no /proc/self/task\n");
        return lz_test_done();
    }
    /* ThreadSanitizer starts a thread of its own with the process's second
       thread: one started and joined here puts it among those counted
       before (make check-tsan runs this test) */
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) == 0) pthread_join(t, NULL);
    if (argc > 1 && !strcmp(argv[1], "stopped")) {
        first_compile_stopped();
        return lz_test_done();
    }
    const int64_t s[2] = {16, 16};
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, s), *b = lz_test_rand(2, -1, 1, 2, s);
    lz_tensor *c = lz_matmul(a, b), *d = lz_add(c, c);
    lz_node *root = d->node;   /* c is a temporary: the executable has an arena to touch */
    lz_graph g;
    lz_graph_cut(&g, &root, 1);
    const int before = threads_now();
    lz_executable *e = lz_compile(&g);   /* the process's first: it starts the thread */
    CHECK(e != NULL);
    CHECK_EQ_I(threads_now(), before);
    lz_executable_unref(e);
    lz_graph_release(&g);
    /* and the product is right afterwards (the kernels are made) */
    float va[256], vb[256], vd[256];
    CHECK(lz_to_host(a, va, sizeof va) == 0 && lz_to_host(b, vb, sizeof vb) == 0);
    CHECK(lz_to_host(d, vd, sizeof vd) == 0);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double want = 0;
            for (int k = 0; k < 16; k++) want += (double)va[i * 16 + k] * vb[k * 16 + j];
            double err = 2 * want - vd[i * 16 + j];
            if (err < 0) err = -err;
            if (err > worst) worst = err;
        }
    CHECK(worst < 2e-5);
    lz_free(a);
    lz_free(b);
    lz_free(c);
    lz_free(d);
    return lz_test_done();
}
