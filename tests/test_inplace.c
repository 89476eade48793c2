/* The in-place tail (src/compile/inplace.c), on compiled programs: an
 * update whose result could take its input's memory moves behind every
 * other step, and lz_program_may_overwrite allows a pair only when no step
 * reads the input after the element it writes. Fusion on: only fused
 * element-wise steps may write over an input. What a replay then does with
 * it (donated buffers, failed steps) is tested in test_capture_memory and
 * test_fault. */
#include <stdlib.h>

#include "compile/executable.h"
#include "core/graph.h"
#include "core/tensor.h"
#include "testlib.h"

typedef struct compiled {
    lz_graph g;
    lz_executable *exe;
} compiled;

static compiled compile_roots(lz_tensor *const *roots, int n)
{
    lz_node *nodes[8];
    for (int i = 0; i < n; i++) nodes[i] = roots[i]->node;
    compiled c;
    lz_graph_cut(&c.g, nodes, n);
    c.exe = lz_compile(&c.g);
    CHECK(c.exe != NULL);
    return c;
}

static void release(compiled *c)
{
    lz_executable_unref(c->exe);
    lz_graph_release(&c->g);
}

static int out_slot(const compiled *c, const lz_tensor *t)
{
    for (int o = 0; o < c->g.n_outputs; o++)
        if (c->g.outputs[o] == t->node) return o;
    return -1;
}

static int in_slot(const compiled *c, const lz_tensor *t)
{
    for (int k = 0; k < c->g.n_inputs; k++)
        if (c->g.inputs[k] == t->node) return k;
    return -1;
}

static int may(const compiled *c, const lz_tensor *out, const lz_tensor *in)
{
    int o = out_slot(c, out), k = in_slot(c, in);
    CHECK(o >= 0 && k >= 0);
    return lz_program_may_overwrite(&c->exe->prog, o, k);
}

static void free_all(lz_tensor **ts, int n)
{
    for (int i = 0; i < n; i++) lz_free(ts[i]);
}

/* p' = p - lr * g, with a matmul reading p recorded after it: the update
   moves behind the matmul and may write over p (or over g); the matmul's
   result may not write over anything. */
static void check_update_sinks(void)
{
    const int64_t ps[2] = {4, 3}, xs[2] = {3, 2};
    lz_tensor *p = lz_test_rand(1, -1, 1, 2, ps), *g = lz_test_rand(2, -1, 1, 2, ps);
    lz_tensor *x = lz_test_rand(3, -1, 1, 2, xs), *lr = lz_scalar(0.1f);
    lz_tensor *step = lz_mul(lr, g), *upd = lz_sub(p, step), *y = lz_matmul(p, x);
    lz_tensor *roots[2] = {upd, y};
    compiled c = compile_roots(roots, 2);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->n_steps, 2);
    CHECK_EQ_I(prog->commit_from, 1);
    CHECK_EQ_I(prog->steps[1].op, LZ_OP_FUSED_ELEMENTWISE);
    CHECK_EQ_I(prog->steps[0].op, LZ_OP_MATMUL);
    CHECK(may(&c, upd, p));
    CHECK(may(&c, upd, g));
    CHECK(!may(&c, upd, x));      /* another size */
    CHECK(!may(&c, y, x));        /* not in the tail */
    release(&c);
    lz_tensor *all[7] = {p, g, x, lr, step, upd, y};
    free_all(all, 7);
}

/* An update whose result a matmul reads in the same graph stays where it
   is: the tail holds only kernels that cannot fail, so nothing may write
   over an input. */
static void check_fallible_reader_keeps_order(void)
{
    const int64_t ps[2] = {3, 3};
    lz_tensor *p = lz_test_rand(4, -1, 1, 2, ps), *g = lz_test_rand(5, -1, 1, 2, ps);
    lz_tensor *lr = lz_scalar(0.1f);
    lz_tensor *step = lz_mul(lr, g), *upd = lz_sub(p, step), *z = lz_matmul(upd, g);
    lz_tensor *roots[2] = {upd, z};
    compiled c = compile_roots(roots, 2);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->commit_from, prog->n_steps);
    CHECK(!may(&c, upd, p));
    release(&c);
    lz_tensor *all[6] = {p, g, lr, step, upd, z};
    free_all(all, 6);
}

/* One fused step writes a = p * 2, reads p again for b = a + p, then
   writes c = b + r: b and c may take p's memory (written at or after p's
   last read), a may not (b would read a where p was); an operand of
   another size never may. */
static void check_reads_after_the_write(void)
{
    const int64_t ps[2] = {4, 3}, row[2] = {1, 3};
    lz_tensor *p = lz_test_rand(6, -1, 1, 2, ps), *r = lz_test_rand(7, -1, 1, 2, row);
    lz_tensor *two = lz_scalar(2.0f);
    lz_tensor *a = lz_mul(p, two), *b = lz_add(a, p), *c2 = lz_add(b, r);
    lz_tensor *roots[3] = {a, b, c2};
    compiled c = compile_roots(roots, 3);
    const lz_program *prog = &c.exe->prog;
    CHECK_EQ_I(prog->n_steps, 1);
    CHECK_EQ_I(prog->commit_from, 0);
    CHECK(!may(&c, a, p));
    CHECK(may(&c, b, p));
    CHECK(may(&c, c2, p));        /* written after both reads of p */
    CHECK(!may(&c, c2, r));       /* broadcast, another size */
    release(&c);
    lz_tensor *all[6] = {p, r, two, a, b, c2};
    free_all(all, 6);
}

int main(void)
{
    lz_fusion_set(1);
    check_update_sinks();
    check_fallible_reader_keeps_order();
    check_reads_after_the_write();
    return lz_test_done();
}
