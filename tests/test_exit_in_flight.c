/* A program may return from main while executions are in flight (most
 * tests do; so may any program that never calls lz_wait): it must exit
 * cleanly, not crash. exit() runs the libraries' destructors (oneDNN's
 * kernels are static objects), which an execution still running on the
 * executor thread would use: the runtime waits for the queue to drain at
 * exit (runtime/executor.c). Each child enqueues a few large products and
 * returns at once; every one must exit with status 0. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

static int child(void)
{
    const int64_t shape[2] = {768, 768};
    lz_tensor *a = lz_from_random(1, 0, -1, 1, 2, shape);
    for (int i = 0; i < 6; i++) {
        lz_tensor *b = lz_matmul(a, a);
        lz_free(a);
        a = lz_scale(b, 1e-3f);
        lz_free(b);
        lz_mark_step();   /* enqueued, never waited for */
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child")) return child();
    int clean = 0;
    const int runs = 12;
    for (int i = 0; i < runs; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", argv[0], "child", (char *)NULL);
            _exit(4);
        }
        int status = 0;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            clean++;
        else
            fprintf(stderr, "run %d: %s %d\n", i, WIFSIGNALED(status) ? "killed by signal" : "exit status",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    CHECK_EQ_I(clean, runs);
    return lz_test_done();
}
