/* OpenMP's worker threads spin after each parallel region by default. On
 * a 2-core machine they then steal the core that records the next step,
 * and a small step runs 5-40x slower (docs/threads.md, "OpenMP").
 * libgomp reads its wait policy once, when it is loaded, before main runs;
 * so a program that wants blocking workers re-executes itself once with
 * OMP_WAIT_POLICY=passive set, unless the user chose a policy. */
#ifndef LZ_OPENMP_ENV_H
#define LZ_OPENMP_ENV_H

#include <stdlib.h>
#include <unistd.h>

static inline void lz_use_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: run on with the default policy */
}

#endif
