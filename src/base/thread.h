/* The recording thread: the one thread allowed to touch tensors, scopes,
 * pending IR, the cache and the counters. */
#ifndef LZ_THREAD_H
#define LZ_THREAD_H

/* 0 on the recording thread (the first thread to call claims the role and
   keeps it until lz_shutdown or its exit); on any other thread -1 with
   "op: called from thread X but tensors are recorded on thread Y" set. */
int  lz_owner_check(const char *op);
/* Gives the role up (lz_shutdown): the next thread to call claims it. */
void lz_owner_release(void);

#endif
