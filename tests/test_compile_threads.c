/* The CPU backend's first compile of a program with a product has a
 * thread make oneDNN's sgemm kernels while it prepares the executable
 * (backend/cpu/backend.c), and joins it before the compile returns: no
 * thread of lazyc's is left running by a compile, so a program may exit
 * right after one. Counted on Linux, from /proc/self/task. */
#include <dirent.h>
#include <stdio.h>

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

int main(void)
{
    if (threads_now() < 0) {
        fprintf(stderr, "test_compile_threads: NOT CHECKED: no /proc/self/task\n");
        return lz_test_done();
    }
    const int64_t s[2] = {16, 16};
    lz_tensor *a = lz_test_rand(1, -1, 1, 2, s), *b = lz_test_rand(2, -1, 1, 2, s);
    lz_tensor *c = lz_matmul(a, b);
    lz_node *root = c->node;
    lz_graph g;
    lz_graph_cut(&g, &root, 1);
    const int before = threads_now();
    lz_executable *e = lz_compile(&g);   /* the process's first: it starts the thread */
    CHECK(e != NULL);
    CHECK_EQ_I(threads_now(), before);
    lz_executable_unref(e);
    lz_graph_release(&g);
    /* and the product is right afterwards (the kernels are made) */
    float va[256], vb[256], vc[256];
    CHECK(lz_to_host(a, va, sizeof va) == 0 && lz_to_host(b, vb, sizeof vb) == 0);
    CHECK(lz_to_host(c, vc, sizeof vc) == 0);
    double worst = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double want = 0;
            for (int k = 0; k < 16; k++) want += (double)va[i * 16 + k] * vb[k * 16 + j];
            double err = want - vc[i * 16 + j];
            if (err < 0) err = -err;
            if (err > worst) worst = err;
        }
    CHECK(worst < 1e-5);
    lz_free(a);
    lz_free(b);
    lz_free(c);
    return lz_test_done();
}
