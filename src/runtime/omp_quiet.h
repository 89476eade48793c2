/* Keeps OpenMP's workers from spinning between kernels without any
 * environment variable, except while long programs run (omp_quiet.c says
 * how). */
#ifndef LZ_OMP_QUIET_H
#define LZ_OMP_QUIET_H

/* Started with the executor thread: unless OMP_WAIT_POLICY or
   GOMP_SPINCOUNT is set, or the team has one thread, parks enough sleeping
   OpenMP workers that libgomp's waits poll only briefly before sleeping. */
void lz_omp_quiet_start(void);
/* Ends the parked threads (lz_shutdown, after the executor stopped). */
void lz_omp_quiet_stop(void);
/* The executor thread, before each program: no parked workers (they poll
   between kernels) while a program that took LZ_OMP_LONG_RUN_MS or more
   ended less than LZ_OMP_LINGER_MS ago, or for a program's first run when
   its products come to LZ_OMP_LONG_FLOPS or more; else parked ones. */
void lz_omp_quiet_before_run(int first_run, double flops);
/* The executor thread, after each program, with the ms it took. */
void lz_omp_quiet_after_run(double ms);
#define LZ_OMP_LONG_RUN_MS 20.0
#define LZ_OMP_LINGER_MS 200.0
#define LZ_OMP_LONG_FLOPS 1e9
/* The workers parked now; 0 when none (tests). */
int  lz_omp_quiet_workers(void);

#endif
