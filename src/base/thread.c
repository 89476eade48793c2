/* One recording thread.
 *
 * The live registry, scopes, pending IR, reference counts, the executable
 * cache and the counters are process-global and unlocked: the hot path of
 * recording an op is a few pointer writes, and a lock around it would not
 * be enough anyway, since a handle read on one thread can be materialised,
 * re-pointed (lz_assign) or freed by a step on another. So the rule is made
 * explicit and checked instead: the first thread that calls the API owns it
 * until lz_shutdown or until it exits, and a call from any other thread
 * fails cleanly before touching anything. Handing the role over at either
 * point is safe: the old owner has stopped touching the state. The check is
 * a thread-local read and one atomic load at each entry point that reaches
 * shared state (the operand check every op starts with, data creation,
 * reads, step barriers, scopes, lz_free), so no call site needs a lock. */
#include "base/thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/error.h"

static atomic_uint owner;            /* thread number, 0 when unclaimed */
static atomic_uint next_number;
static _Thread_local unsigned self;  /* this thread's number, 0 until asked */
static pthread_key_t exit_key;       /* its destructor releases a dead owner's role */
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void release_number(unsigned n)
{
    atomic_compare_exchange_strong_explicit(&owner, &n, 0, memory_order_acq_rel, memory_order_relaxed);
}

static void on_thread_exit(void *number) { release_number((unsigned)(uintptr_t)number); }
static void make_exit_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

static unsigned self_number(void)
{
    if (!self) self = atomic_fetch_add_explicit(&next_number, 1, memory_order_relaxed) + 1;
    return self;
}

int lz_owner_check(const char *op)
{
    unsigned me = self_number();
    unsigned cur = atomic_load_explicit(&owner, memory_order_acquire);
    if (cur == me) return 0;
    if (cur == 0 && atomic_compare_exchange_strong_explicit(&owner, &cur, me, memory_order_acq_rel,
                                                            memory_order_acquire)) {
        pthread_once(&exit_key_once, make_exit_key);
        pthread_setspecific(exit_key, (void *)(uintptr_t)me);
        return 0;
    }
    return lz_errorf_int("%s: called from thread %u but tensors are recorded on thread %u; "
                         "lazyc records on one thread (see docs/threads.md)", op, me, cur);
}

void lz_owner_release(void)
{
    release_number(self_number());
}
