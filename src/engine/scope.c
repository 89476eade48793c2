/* Scopes: a training step makes hundreds of intermediate handles; a scope
 * drops every one it made at its end, except those kept. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fault.h"
#include "base/thread.h"
#include "engine/tensor.h"

/* offset of a kept tensor's scope level */
#define KEPT 1000000

typedef struct scope {
    lz_tensor **items;       /* each holds a bookkeeping reference */
    int n, cap;
} scope;

static scope *scopes;
static int depth, depth_cap;
static int failed_begins;    /* begins that found no memory: their ends close nothing */

int lz_scope_open(const char *who)
{
    if (depth == depth_cap) {
        int cap = depth_cap ? depth_cap * 2 : 8;
        scope *bigger = lz_host_realloc(scopes, sizeof *scopes * (size_t)cap);
        if (!bigger) return lz_errorf_int("%s: out of memory opening a scope", who);
        scopes = bigger;
        depth_cap = cap;
    }
    scopes[depth++] = (scope){0};
    return 0;
}

void lz_scope_begin(void)
{
    if (lz_owner_check("lz_scope_begin")) return;
    /* on failure the matching lz_scope_end closes nothing; what is made in
       between belongs to the enclosing scope, if any */
    if (lz_scope_open("lz_scope_begin") != 0) failed_begins++;
}

static int scope_push(scope *s, lz_tensor *t)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        lz_tensor **items = lz_host_realloc(s->items, sizeof *s->items * (size_t)cap);
        if (!items) return lz_errorf_int("out of memory registering a tensor in its scope");
        s->items = items, s->cap = cap;
    }
    s->items[s->n++] = t;
    lz_tensor_ref(t);
    return 0;
}

int lz_scope_register(lz_tensor *t)
{
    if (!depth) return 0;
    t->scope_level = depth;
    return scope_push(&scopes[depth - 1], t);
}

/* Moves t's creation handle into the open scope at level (depth after the
   pop). Short of memory it is left to the caller, unowned (a leak, never a
   double free): -1 with the error set. */
static int hand_over(lz_tensor *t, int level)
{
    t->scope_level = level;
    if (scope_push(&scopes[depth - 1], t) == 0) return 0;
    t->scope_level = 0;
    return -1;
}

void lz_scope_end(void)
{
    if (lz_owner_check("lz_scope_end")) return;
    if (failed_begins) {
        failed_begins--;
        return;
    }
    if (!depth) return;
    scope s = scopes[--depth];
    for (int i = 0; i < s.n; i++) {
        lz_tensor *t = s.items[i];
        if (t->scope_level == depth + 1 + KEPT) {
            /* kept: the creation handle moves to the enclosing scope */
            if (depth) hand_over(t, depth);
            else t->scope_level = 0;
        } else if (t->scope_level == depth + 1) {
            t->scope_level = 0;
            lz_tensor_unref(t);
        }
        lz_tensor_unref(t);
    }
    free(s.items);
}

static int out_index(lz_tensor *t, lz_tensor *const *out, int n_out)
{
    for (int j = 0; j < n_out; j++)
        if (out[j] == t) return j;
    return -1;
}

/* The caller's scope (depth after the pop) receives what a direct call made
   there would have left in it. A kept tensor is marked kept there too, so
   it lands where the step's lz_keep would have put it. */
int lz_scope_end_call(lz_tensor *const *out, int n_out, char *kept_out)
{
    int rc = 0;
    if (kept_out) memset(kept_out, 0, (size_t)n_out);
    if (!depth) return 0;
    scope s = scopes[--depth];
    for (int i = 0; i < s.n; i++) {
        lz_tensor *t = s.items[i];
        int j = out_index(t, out, n_out);
        if (t->scope_level == depth + 1 + KEPT) {
            if (j >= 0 && kept_out) kept_out[j] = 1;
            if (depth && hand_over(t, depth + KEPT) != 0) rc = -1;
            else if (!depth) t->scope_level = 0;
        } else if (t->scope_level == depth + 1) {
            if (j >= 0 && depth) {
                if (hand_over(t, depth) != 0) rc = -1;
            } else if (j >= 0) {
                t->scope_level = 0;
            } else {
                t->scope_level = 0;
                lz_tensor_unref(t);
            }
        }
        lz_tensor_unref(t);
    }
    free(s.items);
    return rc;
}

/* A kept tensor is marked by an offset level, so lz_scope_end can tell it
   from one the scope still owns without a second list. */
lz_tensor *lz_keep(lz_tensor *t)
{
    if (!t || lz_owner_check("lz_keep")) return NULL;
    if (t->scope_level == depth && depth) t->scope_level = depth + KEPT;
    return t;
}

void lz_scope_release(lz_tensor *t)
{
    if (t->scope_level == depth && depth) t->scope_level = 0;
}

void lz_scope_forget(lz_tensor *t)
{
    if (t->scope_level) t->scope_level = 0;
}

void lz_scope_shutdown(void)
{
    while (depth) lz_scope_end();
    free(scopes);
    scopes = NULL;
    depth_cap = 0;
    failed_begins = 0;
}
