/* How a distributed plan's data crosses ranks when device-side
 * communication is offered but cannot be had: on the test plugin
 * "commfaulty" (test_mpi_commfaulty.c) the communicator fails on the last
 * rank, or every rank's device carries the same key. Every rank must then
 * say the same host-staging reason (dk_mpi_plan_transport), without a
 * hang, and the plan must still give the reference's labels.
 *   mpirun -n P test_mpi_comm
 * `test_mpi_comm --skip REASON` prints the reason and exits 77. */
#include <stdlib.h>

#include "mpi_check.h"

/* A small contiguity problem: two stripes of values, rows split by rank. */
static void plan_and_run(dk_context *ctx, const char *name, const char *want)
{
    enum { ROWS = 12, COLS = 10, K = 2 };
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = ROWS * COLS, d.d = 1, d.k = K, d.max_iters = 10;
    d.rows = ROWS, d.cols = COLS, d.lambda = 0.5, d.window = 3;
    float x[ROWS * COLS], init[K] = {0.0f, 10.0f}, cent[K], cref[K];
    int32_t lref[ROWS * COLS], lm[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)((i % COLS < COLS / 2 ? 1 : 9) + (i * 7 % 5) * 0.1);
    dk_kmeans_result r;
    int ok = dk_kmeans_reference(&d, x, NULL, init, lref, cref, &r) == DK_OK;
    size_t rows = ROWS;
    dk_mpi_part part;
    dk_mpi_plan *plan = NULL;
    ok = ok && dk_mpi_decompose(MPI_COMM_WORLD, 1, &rows, NULL, &part) == DK_OK;
    dk_status st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan);
    ok = ok && st == DK_OK;
    const char *t = plan ? dk_mpi_plan_transport(plan) : dk_mpi_last_error();
    uint64_t v[2] = {mpi_check_hash(t), ~mpi_check_hash(t)}, h[2];
    MPI_Allreduce(v, h, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ok = ok && !strncmp(t, "host (MPI): ", 12) && strstr(t, want) && h[0] == ~h[1];
    if (plan) {
        size_t lo = part.offset[0] * COLS, np = part.extent[0] * COLS;
        st = dk_mpi_kmeans_execute_host(plan, x + lo, NULL, init, lm, cent, NULL);
        ok = ok && st == DK_OK && !memcmp(lm, lref + lo, np * sizeof *lm);
    }
    ok = all_ranks(ok);
    if (rank == 0)
        printf("%-4s %s: %s\n", ok ? "ok" : "FAIL", name, t);
    failures += !ok;
    dk_mpi_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    int code;
    const char *backend[] = {argv[0], "commfaulty", NULL};
    if (argc > 2 && !strcmp(argv[1], "--skip"))
        backend[1] = argv[1], backend[2] = argv[2];
    int bargc = argc > 2 ? 3 : 2;
    char **bargv = (char **)backend;
    dk_context *ctx = mpi_test_begin(&bargc, &bargv, dk_kmeans_variants, &code);
    if (!ctx)
        return code;
    unsetenv("DAKIT_MPI_COMM");
    unsetenv("DAKIT_TEST_COMM_KEY");
    char last[192];
    snprintf(last, sizeof last, "rank %d of %d: creating a device communicator: commfaulty: the communicator failed on the last rank", size - 1,
             size);
    if (size > 1) {
        plan_and_run(ctx, "the communicator fails on the last rank", last);
        setenv("DAKIT_TEST_COMM_KEY", "same", 1);
        plan_and_run(ctx, "every rank on one device", "ranks 0 and 1 share one device (commfaulty-one-device)");
        unsetenv("DAKIT_TEST_COMM_KEY");
    } else {
        plan_and_run(ctx, "one rank", "one rank, nothing crosses ranks");
        setenv("DAKIT_MPI_COMM", "device", 1);
        plan_and_run(ctx, "one rank, DAKIT_MPI_COMM=device, the communicator fails", last);
    }
    setenv("DAKIT_MPI_COMM", "host", 1);
    plan_and_run(ctx, "DAKIT_MPI_COMM=host", "DAKIT_MPI_COMM=host");
    return mpi_test_end(ctx);
}
