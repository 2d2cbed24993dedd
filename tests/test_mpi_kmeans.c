/* Distributed kmeans (libdakit-mpi) against the single-process reference.
 * Run under mpirun with any number of ranks:
 *   mpirun -n P test_mpi_kmeans BACKEND
 * Every rank runs dk_kmeans_reference on the whole problem and compares its
 * own points' labels (exactly), the centroids (to 1e-5 of max(1, |c|)), the
 * iterations and the objective (1e-6 relative).
 *
 * The centroids' tolerance: the layer adds the points of a cluster in
 * another order than the reference (each rank its own points, then MPI
 * adds the ranks' sums), in double, except that the cuda plugin, where
 * k > 16 or d > 8, first adds the up to 32 points of one label in a warp in
 * float (at most 5 float roundings, about 3e-7 of the sum of magnitudes); so the float mean may
 * move by a few float units; 1e-5 is the conformance tolerance of the
 * single-process backends. The labels are compared exactly: in these data
 * no point lies within a float rounding unit of a tie. The objective agrees
 * to 1e-6 where the layer iterates (a few float units of the centroids
 * moved it by up to 3.2e-9 on cuda); at one rank the layer hands the whole
 * problem to the backend's own kmeans, which may sum in float on a GPU, and
 * the single-process conformance tolerance, 1e-4, applies.
 *
 * Then bad input on one rank must give every rank the same status and the
 * same sentence, without a hang (an alarm ends a rank that waits too long;
 * meson's timeout ends mpirun).
 * `test_mpi_kmeans --skip REASON` prints the reason and exits 77. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_check.h"


typedef enum { EVEN, UNEVEN, EMPTY_FIRST, THIN } layout;
static const char *const layout_names[] = {"even", "uneven", "rank 0 empty", "thin bands (1 unit each, the last the rest)"};

typedef struct tcase {
    const char *name;
    size_t n;
    int d, k, max_iters;
    double tol;
    int masked;
    layout lay;
    size_t rows, cols; /* contiguity when set */
    double lambda;
    int window;
    int far; /* the last initial centroid far from every point: an empty cluster keeps it */
} tcase;

static const tcase cases[] = {
    {"blobs_n1000_d2_k3", 1000, 2, 3, 30, 0, 0, EVEN, 0, 0, 1, 5, 0},
    {"blobs_n5000_d1_k2", 5000, 1, 2, 20, 1e-6, 0, UNEVEN, 0, 0, 1, 5, 0},
    {"blobs_n20000_d8_k16", 20000, 8, 16, 25, 1e-5, 0, UNEVEN, 0, 0, 1, 5, 0},
    {"blobs_n50000_d4_k8", 50000, 4, 8, 15, 0, 0, EVEN, 0, 0, 1, 5, 0},
    {"blobs_n3000_d3_k5_masked", 3000, 3, 5, 20, 0, 1, EVEN, 0, 0, 1, 5, 0},
    {"blobs_n2000_d5_k7_empty_part", 2000, 5, 7, 20, 0, 1, EMPTY_FIRST, 0, 0, 1, 5, 0},
    /* fewer points than k on some ranks: the layer labels them on the host */
    {"blobs_n40_d2_k6_thin", 40, 2, 6, 20, 0, 0, THIN, 0, 0, 1, 5, 0},
    {"grid_40x30_d3_k4_w5", 1200, 3, 4, 15, 0, 0, EVEN, 40, 30, 0.5, 5, 0},
    {"grid_40x30_d3_k4_w5_thin_masked", 1200, 3, 4, 15, 0, 1, THIN, 40, 30, 0.5, 5, 0},
    {"grid_23x17_d2_k3_w7_uneven", 391, 2, 3, 10, 0, 0, UNEVEN, 23, 17, 0.3, 7, 0},
    {"blobs_n4000_d3_k6_empty_cluster", 4000, 3, 6, 20, 0, 1, UNEVEN, 0, 0, 1, 5, 1},
    {"grid_30x20_d2_k4_w3_empty_cluster", 600, 2, 4, 10, 0, 0, THIN, 30, 20, 0.7, 3, 1},
    /* tol > 0 under contiguity, rank 0 empty: the stop flag read between batches */
    {"grid_50x24_d2_k3_w5_tol_empty_part", 1200, 2, 3, 40, 1e-7, 1, EMPTY_FIRST, 50, 24, 0.9, 5, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static uint64_t rng;
static double uniform(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void check(const char *what, int ok)
{
    if (!all_ranks(ok)) {
        if (rank == 0)
            printf("FAIL %s\n", what);
        failures++;
    }
}

/* [lo, hi) of units for this rank */
static void cut(layout lay, size_t units, size_t *lo, size_t *hi)
{
    size_t b[65];
    for (int j = 0; j <= size; j++) {
        if (lay == EVEN)
            b[j] = units * (size_t)j / (size_t)size;
        else if (lay == UNEVEN)
            b[j] = (size_t)((double)units * j * j / ((double)size * size));
        else if (lay == EMPTY_FIRST)
            b[j] = j == 0 ? 0 : (size == 1 ? units : units * (size_t)(j - 1) / (size_t)(size - 1));
        else
            b[j] = j < size ? (size_t)j : units;
    }
    b[size] = units;
    *lo = b[rank], *hi = b[rank + 1];
}

static void run_case(dk_context *ctx, const tcase *c)
{
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = c->n, d.d = c->d, d.k = c->k, d.max_iters = c->max_iters, d.tol = c->tol;
    d.rows = c->rows, d.cols = c->cols, d.lambda = c->lambda, d.window = c->window;
    size_t n = c->n, dd = (size_t)c->d, kd = (size_t)c->k * dd;
    float *x = malloc(n * dd * sizeof *x), *cref = malloc(kd * sizeof *cref), *cm = malloc(kd * sizeof *cm);
    float *init = malloc(kd * sizeof *init);
    uint8_t *mask = c->masked ? malloc(n) : NULL;
    int32_t *lref = malloc(n * sizeof *lref);
    double centre[16][8];
    rng = 0x9e3779b97f4a7c15u ^ (uint64_t)n * 31 ^ (uint64_t)c->k;
    for (int j = 0; j < c->k; j++)
        for (size_t f = 0; f < dd; f++)
            centre[j][f] = 20 * uniform() - 10;
    for (size_t i = 0; i < n; i++) {
        /* grids: blobs in vertical stripes, so neighbours agree */
        int j = c->rows ? (int)((i % c->cols) * (size_t)c->k / c->cols) : (int)(uniform() * c->k);
        for (size_t f = 0; f < dd; f++)
            x[i * dd + f] = (float)(centre[j][f] + 3 * (uniform() - 0.5) + (uniform() - 0.5));
        if (mask)
            mask[i] = (i % 7) != 3;
    }
    dk_kmeans_desc plain = d;
    dk_kmeans_initial_centroids(&plain, x, mask, 0, init);
    if (c->far)
        for (size_t f = 0; f < dd; f++)
            init[kd - dd + f] = 1000.0f;
    dk_kmeans_result rref, rm;
    dk_status st = dk_kmeans_reference(&d, x, mask, init, lref, cref, &rref);
    if (st != DK_OK) {
        if (rank == 0)
            printf("FAIL %s: reference: %s\n", c->name, dk_last_error(NULL));
        failures++;
        goto out;
    }
    size_t lo, hi, units = c->rows ? c->rows : n, per = c->rows ? c->cols : 1;
    cut(c->lay, units, &lo, &hi);
    dk_mpi_part part;
    memset(&part, 0, sizeof part);
    part.offset[0] = lo, part.extent[0] = hi - lo;
    dk_mpi_plan *plan = NULL;
    st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan);
    if (!all_ranks(st == DK_OK)) {
        if (rank == 0)
            printf("FAIL %s: plan: %s\n", c->name, dk_mpi_last_error());
        failures++;
        goto out;
    }
    static int transport_checked;
    if (!transport_checked++)
        check_transport(ctx, plan);
    size_t np = (hi - lo) * per;
    int32_t *lm = malloc((np + 1) * sizeof *lm);
    /* the host entry, then the device-buffer entry on the same plan */
    for (int dev = 0; dev < 2; dev++) {
        const float *xl = x + lo * per * dd;
        const uint8_t *ml = mask ? mask + lo * per : NULL;
        if (!dev) {
            st = dk_mpi_kmeans_execute_host(plan, xl, ml, init, lm, cm, &rm);
        } else {
            /* empty parts pass no points and no labels; odd cases update init in place */
            dk_buffer *bx = NULL, *bm = NULL, *bi = NULL, *bl = NULL, *bc = NULL;
            int in_place = (int)(c - cases) % 2;
            st = DK_OK;
            if (np && st == DK_OK)
                st = dk_buffer_create(ctx, np * dd * sizeof(float), &bx);
            if (np && st == DK_OK)
                st = dk_buffer_create(ctx, np * sizeof(int32_t), &bl);
            if (np && st == DK_OK)
                st = dk_buffer_write(bx, xl, np * dd * sizeof(float));
            if (np && ml && st == DK_OK)
                st = dk_buffer_create(ctx, np, &bm);
            if (np && ml && st == DK_OK)
                st = dk_buffer_write(bm, ml, np);
            if (st == DK_OK)
                st = dk_buffer_create(ctx, kd * sizeof(float), &bi);
            if (st == DK_OK)
                st = dk_buffer_write(bi, init, kd * sizeof(float));
            if (!in_place && st == DK_OK)
                st = dk_buffer_create(ctx, kd * sizeof(float), &bc);
            if (all_ranks(st == DK_OK)) {
                st = dk_mpi_kmeans_execute(plan, bx, bm, bi, bl, in_place ? bi : bc, &rm);
                if (st == DK_OK && np)
                    st = dk_buffer_read(bl, lm, np * sizeof *lm);
                if (st == DK_OK)
                    st = dk_buffer_read(in_place ? bi : bc, cm, kd * sizeof *cm);
            } else if (st == DK_OK) {
                st = DK_ERR_OUT_OF_MEMORY;
            }
            dk_buffer_destroy(bx), dk_buffer_destroy(bm), dk_buffer_destroy(bi), dk_buffer_destroy(bl),
                dk_buffer_destroy(bc);
        }
        const char *entry = dev ? "device buffers" : "host arrays";
        int ok = st == DK_OK;
        if (!all_ranks(ok)) {
            if (rank == 0)
                printf("FAIL %s, %s: execute: %s\n", c->name, entry, dk_mpi_last_error());
            failures++;
            continue;
        }
        size_t bad = 0;
        for (size_t i = 0; i < np; i++)
            bad += lm[i] != lref[lo * per + i];
        double err = 0;
        for (size_t i = 0; i < kd; i++) {
            double e = fabs((double)cm[i] - cref[i]) / fmax(1.0, fabs(cref[i]));
            err = fmax(err, e);
        }
        double oerr = fabs(rm.objective - rref.objective) / fmax(1.0, fabs(rref.objective));
        double errmax, oerrmax;
        unsigned long long b = bad, bsum;
        MPI_Allreduce(&err, &errmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&oerr, &oerrmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&b, &bsum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        /* the far centroid's cluster stayed empty, and kept it */
        int pass = (!c->far || cref[kd - 1] == 1000.0f) && bsum == 0 && errmax <= 1e-5 &&
                   oerrmax <= (size == 1 ? 1e-4 : 1e-6) && all_ranks(rm.iterations == rref.iterations) &&
                   all_ranks(rm.valid == rref.valid);
        /* centroids bit-identical across ranks */
        float *c0 = malloc(kd * sizeof *c0);
        memcpy(c0, cm, kd * sizeof *c0);
        MPI_Bcast(c0, (int)kd, MPI_FLOAT, 0, MPI_COMM_WORLD);
        pass = pass && all_ranks(!memcmp(c0, cm, kd * sizeof *c0));
        free(c0);
        if (rank == 0)
            printf("%s %s (%s, %s): %llu label(s) differ, centroid err %.2e, objective err %.2e, %d iterations "
                   "(reference %d)\n",
                   pass ? "ok  " : "FAIL", c->name, layout_names[c->lay], entry, bsum, errmax, oerrmax,
                   rm.iterations, rref.iterations);
        if (!pass)
            failures++;
    }
    free(lm);
    dk_mpi_plan_destroy(plan);
out:
    free(x), free(cref), free(cm), free(init), free(mask), free(lref);
}

static void bad_input(dk_context *ctx)
{
    const int last = rank == size - 1;
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = 200, d.d = 2, d.k = 3;
    dk_mpi_part part;
    dk_mpi_decompose(MPI_COMM_WORLD, 1, &d.n, NULL, &part);
    dk_mpi_plan *plan = NULL;
    if (size > 1) {
        dk_kmeans_desc b = d;
        if (last)
            b.k = 4;
        dk_status st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &b, &part, &plan);
        check("no plan after a different k", plan == NULL);
        expect_failure("k differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "k is not the same");
    }
    dk_kmeans_desc b = d;
    if (last)
        b.k = 0;
    dk_status st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &b, &part, &plan);
    /* with more ranks rank 0 sees the mismatch first: the lowest failing rank speaks */
    expect_failure("k = 0 on the last rank", st, DK_ERR_INVALID_ARGUMENT, size > 1 ? "k is not the same" : "k is 0");
    b = d;
    b.init = DK_KMEANS_INIT_PLUSPLUS;
    st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &b, &part, &plan);
    check("no plan for a seeded init", plan == NULL);
    expect_failure("init k-means++", st, DK_ERR_INVALID_ARGUMENT, "caller's centroids only");
    b = d;
    b.n = 2000;
    b.k = DK_KMEANS_MAX_K + 1;
    dk_mpi_part wide;
    dk_mpi_decompose(MPI_COMM_WORLD, 1, &b.n, NULL, &wide);
    st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &b, &wide, &plan);
    check("no plan for k above the cap", plan == NULL);
    expect_failure("k = DK_KMEANS_MAX_K + 1", st, DK_ERR_INVALID_ARGUMENT, "DK_KMEANS_MAX_K");
    dk_mpi_part q = part;
    if (last)
        q.extent[0]--;
    st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &q, &plan);
    expect_failure("parts leave a gap", st, DK_ERR_INVALID_ARGUMENT, "gap");

    st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan);
    check("plan for the execute-time failures", st == DK_OK);
    if (st != DK_OK)
        return;
    size_t np = part.extent[0];
    float *x = malloc((np + 1) * 2 * sizeof *x), init[6] = {0, 0, 1, 1, 2, 2}, cent[6];
    int32_t *l = malloc((np + 1) * sizeof *l);
    for (size_t i = 0; i < np * 2; i++)
        x[i] = (float)((part.offset[0] * 2 + i) % 13);
    if (size > 1) {
        init[5] = last ? 2.5f : 2.0f;
        st = dk_mpi_kmeans_execute_host(plan, x, NULL, init, l, cent, NULL);
        expect_failure("init differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "init is not the same");
        init[5] = 2;
    }
    float saved = x[0];
    if (last && np)
        x[0] = NAN;
    st = dk_mpi_kmeans_execute_host(plan, x, NULL, init, l, cent, NULL);
    expect_failure("a NaN point on the last rank", st, DK_ERR_INVALID_ARGUMENT, "not finite");
    x[0] = saved;
    dk_kmeans_result r;
    st = dk_mpi_kmeans_execute_host(plan, x, NULL, init, l, cent, &r);
    check("the same plan computes afterwards", st == DK_OK);
    /* the device-buffer entry: a labels buffer too small on the last rank
     * rides with the sums; every rank returns its sentence, then computes */
    dk_buffer *bx = NULL, *bi = NULL, *bl = NULL, *bc = NULL;
    int made = dk_buffer_create(ctx, (np + 1) * 2 * sizeof(float), &bx) == DK_OK &&
               dk_buffer_create(ctx, sizeof init, &bi) == DK_OK &&
               dk_buffer_create(ctx, (last && np ? np - 1 : np + 1) * sizeof(int32_t), &bl) == DK_OK &&
               dk_buffer_create(ctx, sizeof cent, &bc) == DK_OK && dk_buffer_write(bx, x, np * 2 * sizeof(float)) == DK_OK &&
               dk_buffer_write(bi, init, sizeof init) == DK_OK;
    check("device buffers for the bad input", all_ranks(made));
    if (all_ranks(made)) {
        st = dk_mpi_kmeans_execute(plan, bx, NULL, bi, bl, bc, NULL);
        expect_failure("a labels buffer too small on the last rank (device buffers)", st, DK_ERR_INVALID_ARGUMENT,
                       "too small");
        st = dk_mpi_kmeans_execute(plan, bx, NULL, bi, NULL, bc, NULL);
        expect_failure("labels NULL on every rank (device buffers)", st, DK_ERR_INVALID_ARGUMENT, "must not be NULL");
        dk_buffer_destroy(bl);
        bl = NULL;
        int again = dk_buffer_create(ctx, (np + 1) * sizeof(int32_t), &bl) == DK_OK;
        dk_kmeans_result rd;
        st = again ? dk_mpi_kmeans_execute(plan, bx, NULL, bi, bl, bc, &rd) : DK_ERR_OUT_OF_MEMORY;
        float cd[6];
        int same = st == DK_OK && dk_buffer_read(bc, cd, sizeof cd) == DK_OK && !memcmp(cd, cent, sizeof cd) &&
                   rd.iterations == r.iterations;
        check("the device-buffer entry computes afterwards, as the host entry", all_ranks(same));
    }
    dk_buffer_destroy(bx), dk_buffer_destroy(bi), dk_buffer_destroy(bl), dk_buffer_destroy(bc);
    st = dk_mpi_gauss_execute_host(plan, x, x);
    check("a gauss execute on a kmeans plan is refused",
          st == DK_ERR_INVALID_ARGUMENT && strstr(dk_mpi_last_error(), "kmeans plan") != NULL);
    free(x), free(l);
    dk_mpi_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    int code;
    dk_context *ctx = mpi_test_begin(&argc, &argv, dk_kmeans_variants, &code);
    if (!ctx)
        return code;
    for (int ci = 0; ci < NCASES; ci++)
        run_case(ctx, &cases[ci]);
    if (rank == 0)
        printf("-- bad input\n");
    bad_input(ctx);
    return mpi_test_end(ctx);
}
