/* Keeps OpenMP's workers from spinning between kernels without any
 * environment variable (omp_quiet.c says how). */
#ifndef LZ_OMP_QUIET_H
#define LZ_OMP_QUIET_H

/* Started with the executor thread: unless OMP_WAIT_POLICY or
   GOMP_SPINCOUNT is set, or the team has one thread, parks enough sleeping
   OpenMP workers that libgomp's waits poll only briefly before sleeping. */
void lz_omp_quiet_start(void);
/* Ends the parked threads (lz_shutdown, after the executor stopped). */
void lz_omp_quiet_stop(void);
/* The workers parked now; 0 when none (tests). */
int  lz_omp_quiet_workers(void);

#endif
