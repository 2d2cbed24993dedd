/* The distributed enkf's cost: dk_mpi_enkf_cov_host (or
 * dk_mpi_enkf_analysis_host) on slabs of state rows and, at one rank, the
 * plain single-process dk_enkf_cov_host (dk_enkf_analysis_host) on the same
 * problem and backend; medians of `reps` runs after one warm-up, each run
 * timed from a barrier to the slowest rank, the two calls alternating at
 * one rank (which goes first alternates too).
 * usage: mpirun -n P dakit-mpi-bench-enkf [backend [n [L [M [radius [reps [f32|f64 [cov|analysis]]]]]]]]
 * c is a linear taper that reaches 0 at `radius`; each row of H averages
 * 4 state points spread over the state. */
#include <stdint.h>
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

static double value(uint64_t k)
{
    uint64_t x = k * 0x9e3779b97f4a7c15u + 12345;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 29;
    return (double)(x >> 11) * 0x1p-52 - 1.0;
}

static void fill(void *p, dk_dtype t, size_t n, uint64_t base, double offset)
{
    for (size_t k = 0; k < n; k++) {
        double v = offset + value(base + k);
        if (t == DK_F32)
            ((float *)p)[k] = (float)v;
        else
            ((double *)p)[k] = v;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *backend = argc > 1 ? argv[1] : "cpu";
    size_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
    size_t L = argc > 3 ? strtoull(argv[3], NULL, 10) : 20;
    size_t M = argc > 4 ? strtoull(argv[4], NULL, 10) : 256;
    double radius = argc > 5 ? atof(argv[5]) : 50;
    int reps = argc > 6 ? atoi(argv[6]) : 10;
    dk_dtype dtype = argc > 7 && !strcmp(argv[7], "f32") ? DK_F32 : DK_F64;
    int analysis = argc > 8 && !strcmp(argv[8], "analysis");
    if (reps < 1)
        reps = 1;

    dk_context *ctx = NULL;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dk_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double *c = malloc(n * sizeof *c), *values = malloc(4 * M * sizeof *values);
    int64_t *indptr = malloc((M + 1) * sizeof *indptr), *indices = malloc(4 * M * sizeof *indices);
    for (size_t k = 0; k < n; k++)
        c[k] = (double)k < radius ? 1.0 - (double)k / radius : 0.0;
    indptr[0] = 0;
    for (size_t j = 0; j < M; j++) {
        size_t at = (size_t)((double)n * ((double)j + 0.5) / (double)M);
        for (size_t t = 0; t < 4; t++) {
            indices[4 * j + t] = (int64_t)(at + t < n ? at + t : n - 1 - t);
            values[4 * j + t] = 0.25;
        }
        indptr[j + 1] = (int64_t)(4 * j + 4);
    }
    dk_enkf_desc d;
    dk_enkf_desc_init(&d);
    d.dtype = dtype;
    d.n = n;
    d.members = L;
    d.loc = c;
    d.H = (dk_csr){M, n, indptr, indices, values};

    size_t shape[1] = {n};
    dk_mpi_part part;
    dk_mpi_plan *mplan = NULL;
    if (dk_mpi_decompose(MPI_COMM_WORLD, 1, shape, NULL, &part) != DK_OK ||
        dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &mplan) != DK_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dk_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t es = dk_dtype_size(dtype), own = part.extent[0];
    void *e = malloc((own ? own : 1) * L * es), *x = malloc((own ? own : 1) * L * es);
    void *pht = malloc((own ? own : 1) * M * es), *hpht = malloc(M * M * es);
    double *y = malloc(M * sizeof *y), *r = malloc(M * sizeof *r);
    for (size_t j = 0; j < M; j++) {
        y[j] = 2.0 + value(j);
        r[j] = 1.0;
    }
    fill(e, dtype, own * L, part.offset[0] * L, 0.0);
    dk_plan *plan = NULL;
    if (size == 1 && dk_enkf_plan_create(ctx, &d, &plan) != DK_OK) {
        fprintf(stderr, "%s\n", dk_last_error(ctx));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double *tm = malloc((size_t)reps * sizeof *tm), *tp = malloc((size_t)reps * sizeof *tp);
    double *td = malloc((size_t)reps * sizeof *td);
    for (int rep = -1; rep < reps; rep++) {
        for (int k = 0; k < (size == 1 ? 2 : 1); k++) {
            int distributed = size > 1 || (k == 0) == (rep % 2 == 0);
            if (analysis) /* the same forecast every time (not timed) */
                fill(x, dtype, own * L, part.offset[0] * L, 2.0);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            dk_status st;
            if (analysis)
                st = distributed ? dk_mpi_enkf_analysis_host(mplan, x, y, r, 7, 1.0)
                                 : dk_enkf_analysis_host(plan, x, y, r, 7, 1.0);
            else
                st = distributed ? dk_mpi_enkf_cov_host(mplan, e, pht, hpht) : dk_enkf_cov_host(plan, e, pht, hpht);
            if (st != DK_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, distributed ? dk_mpi_last_error() : dk_last_error(ctx));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            double t = MPI_Wtime() - t0, tmax;
            MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rep >= 0)
                (distributed ? tm : tp)[rep] = tmax;
        }
        if (rep >= 0 && size == 1)
            td[rep] = tm[rep] - tp[rep];
    }
    const char *op = analysis ? "analysis" : "cov";
    double plain = size == 1 ? median(tp, reps) : 0.0, diff = size == 1 ? median(td, reps) : 0.0;
    double dist = median(tm, reps);
    if (rank == 0) {
        printf("enkf %s n %zu L %zu M %zu %s, c zero from %g, variant %s, backend %s, %d rank(s), median of %d\n",
               op, n, L, M, dk_dtype_name(dtype), radius, plan ? dk_enkf_plan_variant(plan) : "(cost model)",
               dk_context_backend(ctx), size, reps);
        printf("  dk_mpi_enkf_%s_host: %.3f ms\n", op, 1e3 * dist);
        if (size == 1)
            printf("  dk_enkf_%s_host:     %.3f ms\n  overhead: median of the per-run differences %+.1f us "
                   "(%+.2f%% of the plain call)\n",
                   op, 1e3 * plain, 1e6 * diff, 100.0 * diff / plain);
    }
    dk_plan_destroy(plan);
    dk_mpi_plan_destroy(mplan);
    free(c);
    free(values);
    free(indptr);
    free(indices);
    free(e);
    free(x);
    free(pht);
    free(hpht);
    free(y);
    free(r);
    free(tm);
    free(tp);
    free(td);
    dk_context_destroy(ctx);
    MPI_Finalize();
    return 0;
}
