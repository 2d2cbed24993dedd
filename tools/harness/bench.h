/* Benchmarks: one suite of cases per algorithm, timed side by side on the
 * selected backends by `dakit bench`. */
#ifndef DAKIT_TOOLS_HARNESS_BENCH_H
#define DAKIT_TOOLS_HARNESS_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include <dakit/dakit.h>

typedef struct bench_suite {
    const char *algo;
    int (*count)(void);
    const char *(*name)(int i);
    const char *(*what)(int i);  /* one line for --help */
    double (*bytes)(int i);      /* bytes that must move: the floor's numerator */
    const char *const *(*variants)(const dk_context *ctx);
    /* Makes case i ready on ctx with variant (plan, buffers, data); returns
     * its state, or NULL with the reason in err. */
    void *(*setup)(dk_context *ctx, int i, const char *variant, char *err, size_t len);
    dk_status (*run)(void *state); /* one timed execution, done when it returns */
    void (*teardown)(void *state);
} bench_suite;

/* dakit bench --ranks P (harness/bench_ranks.c): the distributed cases
 * under mpirun (relaunching the command, argv, under it when needed); the
 * exit status. */
int bench_ranks(int ranks, int argc, char **argv, const char *backend_s, const char *case_s, double min_time,
                int max_runs);
void bench_ranks_usage(FILE *f); /* its cases, for --help */

extern const bench_suite bench_gauss;
extern const bench_suite bench_enkf;
extern const bench_suite bench_kmeans;
extern const bench_suite bench_gbees;
extern const bench_suite bench_letkf;

#endif
