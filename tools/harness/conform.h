/* Conformance: one shared set of cases per algorithm, run on backends
 * against the serial reference. The meson tests run these same cases. */
#ifndef DAKIT_TOOLS_HARNESS_CONFORM_H
#define DAKIT_TOOLS_HARNESS_CONFORM_H

#include <dakit/dakit.h>

typedef struct conform_result {
    double error;      /* the case's error measure */
    double tolerance;  /* pass when error <= tolerance */
    int passed;
    char detail[256];  /* why it failed, or what was measured */
    int not_implemented; /* an optional feature the backend does not offer: neither pass nor fail */
} conform_result;

typedef struct conform_suite {
    const char *algo;
    const char *measure; /* what `error` is, for the table header */
    int (*count)(void);
    const char *(*name)(int i);
    int (*quick)(int i); /* part of --quick */
    /* The backend's variants of this algorithm (NULL-terminated), or NULL. */
    const char *const *(*variants)(const dk_context *ctx);
    /* Prepares case i's input and reference on the host (once per case). */
    dk_status (*prepare)(int i, char *err, size_t len);
    /* Runs case i on ctx with variant (NULL: default) and compares. */
    void (*run)(dk_context *ctx, const char *variant, int i, conform_result *r);
    void (*release)(int i);
    /* `dakit conform --ranks P`: runs case i distributed over MPI_COMM_WORLD
     * (each rank on its part, through libdakit-mpi) and checks it against
     * the same reference and tolerance as run; collective, every rank gets
     * the same result (conform_ranks_agree). Returns 0, or 1 when the case
     * is not distributed (the reason in r->detail). NULL: none is. Set only
     * where libdakit-mpi was built. */
    int (*run_ranks)(dk_context *ctx, const char *variant, int i, conform_result *r);
} conform_suite;

/* Collective: the worst rank's result on every rank (the largest error, a
 * failure before a pass). */
void conform_ranks_agree(conform_result *r);

extern const conform_suite conform_gauss;
extern const conform_suite conform_gbees;
extern const conform_suite conform_enkf;
extern const conform_suite conform_kmeans;
extern const conform_suite conform_letkf;

#endif
