/* The distributed layer's cost: dk_mpi_gauss_execute_host on slabs along
 * axis 0 and, at one rank, the plain single-process dk_gauss_execute_host
 * on the same field and backend; medians of `reps` runs after one warm-up,
 * each run timed from a barrier to the slowest rank.
 * usage: mpirun -n P dakit-mpi-bench [backend [n0 n1 [sigma [K [reps [f32|f64]]]]]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/mpi.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *backend = argc > 1 ? argv[1] : "cpu";
    size_t n0 = argc > 3 ? strtoull(argv[2], NULL, 10) : 4096, n1 = argc > 3 ? strtoull(argv[3], NULL, 10) : 4096;
    double sigma = argc > 4 ? atof(argv[4]) : 4.0;
    int K = argc > 5 ? atoi(argv[5]) : 4, reps = argc > 6 ? atoi(argv[6]) : 10;
    dk_dtype dtype = argc > 7 && !strcmp(argv[7], "f64") ? DK_F64 : DK_F32;
    if (reps < 1)
        reps = 1;

    dk_context *ctx = NULL;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dk_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dk_gauss_desc g;
    dk_gauss_desc_init(&g);
    g.method = DK_GAUSS_RF;
    g.boundary = DK_BOUNDARY_ZERO;
    g.dtype = dtype;
    g.ndim = 2;
    g.shape[0] = n0;
    g.shape[1] = n1;
    g.axes = 3;
    g.sigma[0] = g.sigma[1] = sigma;
    g.K = K;
    dk_mpi_part part;
    dk_mpi_plan *mplan = NULL;
    if (dk_mpi_decompose(MPI_COMM_WORLD, 2, g.shape, NULL, &part) != DK_OK ||
        dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, &g, &part, &mplan) != DK_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dk_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t es = dk_dtype_size(dtype), local = part.extent[0] * part.extent[1];
    size_t bytes = local ? local * es : 1;
    void *in = malloc(bytes), *out = malloc(bytes);
    for (size_t k = 0; k < local; k++) {
        double v = (double)((k * 2654435761u) % 1000) / 500.0 - 1.0;
        if (dtype == DK_F32)
            ((float *)in)[k] = (float)v;
        else
            ((double *)in)[k] = v;
    }
    double *tm = malloc((size_t)reps * sizeof *tm), *tp = malloc((size_t)reps * sizeof *tp);
    double *td = malloc((size_t)reps * sizeof *td);
    dk_plan *plan = NULL;
    if (size == 1 && dk_gauss_plan_create(ctx, &g, &plan) != DK_OK) {
        fprintf(stderr, "%s\n", dk_last_error(ctx));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* At one rank the two calls alternate (which goes first alternates too),
     * so that a load that drifts on a shared machine weighs on both. */
    for (int r = -1; r < reps; r++) {
        for (int k = 0; k < (size == 1 ? 2 : 1); k++) {
            int distributed = size > 1 || (k == 0) == (r % 2 == 0);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            dk_status st = distributed ? dk_mpi_gauss_execute_host(mplan, in, out)
                                       : dk_gauss_execute_host(plan, in, out);
            if (st != DK_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, distributed ? dk_mpi_last_error() : dk_last_error(ctx));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            double t = MPI_Wtime() - t0, tmax;
            MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (r >= 0)
                (distributed ? tm : tp)[r] = tmax;
        }
        if (r >= 0 && size == 1)
            td[r] = tm[r] - tp[r];
    }
    dk_plan_destroy(plan);
    double plain = size == 1 ? median(tp, reps) : 0.0, diff = size == 1 ? median(td, reps) : 0.0;
    double dist = median(tm, reps);
    if (rank == 0) {
        printf("gauss %zux%zu %s sigma %g K %d, backend %s, %d rank(s), median of %d\n", n0, n1,
               dk_dtype_name(dtype), sigma, K, dk_context_backend(ctx), size, reps);
        printf("  dk_mpi_gauss_execute_host: %.3f ms\n", 1e3 * dist);
        if (size == 1)
            printf("  dk_gauss_execute_host:     %.3f ms\n  overhead: median of the per-run differences %+.1f us "
                   "(%+.2f%% of the plain call)\n",
                   1e3 * plain, 1e6 * diff, 100.0 * diff / plain);
    }
    free(in);
    free(out);
    free(tm);
    free(tp);
    free(td);
    dk_mpi_plan_destroy(mplan);
    dk_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
