/* Distributed gauss (libdakit-mpi) against the single-process reference.
 * Run under mpirun with any number of ranks:
 *   mpirun -n P test_mpi_gauss BACKEND
 * Every rank computes dk_gauss_reference on the whole field and compares
 * its own box of the distributed result with it, with the tolerance of the
 * conformance cases (tools/gauss/conform.c): max|y - ref| / max|x| at most
 * (2K * filtered axes + 4) * 2 * eps, eps the dtype's unit roundoff.
 * Then bad input on one rank (or mismatched ranks) must give every rank the
 * same status and the same sentence, without a hang (an alarm ends a rank
 * that waits too long; meson's timeout ends mpirun).
 * `test_mpi_gauss --skip REASON` prints the reason and exits 77 (the build
 * found no mpirun). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_check.h"


typedef enum { SLABS, TILES, TILES12, UNEVEN, BRICK } layout;
static const char *const layout_names[] = {"slabs", "tiles", "tiles(1-2)", "uneven slabs", "bricks"};

typedef struct geom {
    const char *name;
    int ndim;
    size_t shape[3];
    unsigned axes;
    double sigma[3];
    layout lay;
    int axis; /* SLABS: the split axis */
} geom;

static const geom geoms[] = {
    {"1d_slabs", 1, {1000}, 1, {3}, SLABS, 0},
    /* sigma 10 on 2000 values: the halo is a few hundred values, wider
     * than most ranks' parts below (1, 3, 5 values ...) */
    {"1d_uneven_sigma10", 1, {2000}, 1, {10}, UNEVEN, 0},
    /* sigma 40: the halo spans the whole line and every rank */
    {"1d_slabs_sigma40", 1, {600}, 1, {40}, SLABS, 0},
    /* fewer values than ranks at 4 ranks: a rank with an empty part */
    {"1d_tiny", 1, {3}, 1, {5}, SLABS, 0},
    {"2d_split0", 2, {120, 90}, 3, {4, 2.5}, SLABS, 0},
    {"2d_split1", 2, {70, 150}, 3, {2, 6}, SLABS, 1},
    {"2d_tiles", 2, {64, 80}, 3, {3, 3}, TILES, 0},
    {"2d_bricks", 2, {50, 60}, 3, {5, 4}, BRICK, 0},
    {"2d_split0_filter1", 2, {40, 100}, 2, {0, 3}, SLABS, 0},
    {"2d_split1_filter0", 2, {100, 40}, 1, {3, 0}, SLABS, 1},
    {"3d_slabs", 3, {20, 24, 30}, 7, {2, 3, 1.5}, SLABS, 0},
    {"3d_split2_axes02", 3, {12, 16, 40}, 5, {2, 0, 4}, SLABS, 2},
    {"3d_tiles12", 3, {10, 30, 28}, 7, {1.5, 3, 2}, TILES12, 0},
    /* parts long enough for the compiled windows of cuda's execute_halo:
     * a strided split axis of 64 lines (k_halo_reg, k_halo_gen in float64)
     * and a contiguous one (k_halo_row) */
    {"2d_split0_long", 2, {600, 64}, 3, {2, 2}, SLABS, 0},
    {"2d_split1_long", 2, {8, 700}, 3, {2, 3}, SLABS, 1},
};
#define NGEOMS ((int)(sizeof geoms / sizeof geoms[0]))

/* ---- helpers ---- */

static size_t count_of(int ndim, const size_t *shape)
{
    size_t n = 1;
    for (int a = 0; a < ndim; a++)
        n *= shape[a];
    return n;
}

static double value_at(size_t k)
{
    uint64_t x = (uint64_t)k * 0x9e3779b97f4a7c15u + 0x5eed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 29;
    return (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void fill(void *p, dk_dtype t, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (t == DK_F32)
            ((float *)p)[k] = (float)value_at(k);
        else
            ((double *)p)[k] = value_at(k);
    }
}

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

/* Copies between the global field and this rank's box (C order). */
static void box_copy(void *local, const void *global, const dk_gauss_desc *d, const dk_mpi_part *p, int to_local)
{
    size_t es = dk_dtype_size(d->dtype);
    size_t sh[3] = {1, 1, 1}, off[3] = {0, 0, 0}, ext[3] = {1, 1, 1};
    for (int a = 0; a < d->ndim; a++) {
        sh[a + 3 - d->ndim] = d->shape[a];
        off[a + 3 - d->ndim] = p->offset[a];
        ext[a + 3 - d->ndim] = p->extent[a];
    }
    if (!ext[0] || !ext[1] || !ext[2])
        return;
    for (size_t i = 0; i < ext[0]; i++)
        for (size_t j = 0; j < ext[1]; j++) {
            size_t g = ((off[0] + i) * sh[1] + off[1] + j) * sh[2] + off[2];
            size_t l = (i * ext[1] + j) * ext[2];
            if (to_local)
                memcpy((char *)local + l * es, (const char *)global + g * es, ext[2] * es);
            else
                memcpy((char *)global + g * es, (const char *)local + l * es, ext[2] * es);
        }
}

static int largest_divisor_below_sqrt(int n)
{
    int p = 1;
    for (int d = 1; d * d <= n; d++)
        if (n % d == 0)
            p = d;
    return p;
}

/* This rank's part of the geometry's field. */
static void part_of(const geom *g, dk_mpi_part *part)
{
    memset(part, 0, sizeof *part);
    int grid[3] = {1, 1, 1};
    switch (g->lay) {
    case SLABS:
        grid[g->axis] = size;
        break;
    case TILES: {
        int p = largest_divisor_below_sqrt(size);
        grid[0] = size / p;
        grid[1] = p;
        break;
    }
    case TILES12: {
        int p = largest_divisor_below_sqrt(size);
        grid[1] = size / p;
        grid[2] = p;
        break;
    }
    case UNEVEN: { /* ranks 0..P-2 hold 1, 3, 5, ... values; the last the rest */
        size_t off = 0;
        for (int r = 0; r < size; r++) {
            size_t e = r == size - 1 ? g->shape[0] - off : (size_t)(1 + 2 * r);
            if (r == rank) {
                part->offset[0] = off;
                part->extent[0] = e;
            }
            off += e;
        }
        return;
    }
    case BRICK: { /* two rows of boxes whose column cuts do not line up */
        int top = (size + 1) / 2, bottom = size / 2;
        size_t half = bottom ? g->shape[0] / 2 : g->shape[0], n1 = g->shape[1];
        int row = rank < top ? 0 : 1, col = row ? rank - top : rank, cols = row ? bottom : top;
        part->offset[0] = row ? half : 0;
        part->extent[0] = row ? g->shape[0] - half : half;
        size_t c0 = row ? (col ? (col * n1 + n1 / 2) / cols : 0) : col * n1 / cols;
        size_t c1 = row ? (col + 1 == cols ? n1 : ((col + 1) * n1 + n1 / 2) / cols) : (col + 1) * n1 / cols;
        part->offset[1] = c0;
        part->extent[1] = c1 - c0;
        return;
    }
    }
    if (dk_mpi_decompose(MPI_COMM_WORLD, g->ndim, g->shape, grid, part) != DK_OK) {
        fprintf(stderr, "rank %d: dk_mpi_decompose: %s\n", rank, dk_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void desc_of(const geom *g, dk_dtype t, dk_boundary b, int K, dk_gauss_desc *d)
{
    dk_gauss_desc_init(d);
    d->method = DK_GAUSS_RF;
    d->dtype = t;
    d->ndim = g->ndim;
    d->axes = g->axes;
    d->K = K;
    d->boundary = b;
    for (int a = 0; a < g->ndim; a++) {
        d->shape[a] = g->shape[a];
        d->sigma[a] = g->sigma[a];
    }
}

static double tolerance_of(const dk_gauss_desc *d)
{
    double eps = d->dtype == DK_F64 ? 0x1p-53 : 0x1p-24;
    return (2.0 * d->K * __builtin_popcount(d->axes) + 4.0) * 2.0 * eps;
}

/* dk_mpi_gauss_execute on device buffers holding this rank's part of x
 * (out of place from `in`, or in place when in is NULL): 1 when its result
 * has the bits of `expect`, the host path's. */
static int device_matches(dk_context *ctx, dk_mpi_plan *plan, const void *in, const void *expect, const void *x,
                          const dk_gauss_desc *d, const dk_mpi_part *part, char *why, size_t len)
{
    size_t es = dk_dtype_size(d->dtype), local = count_of(d->ndim, part->extent), bytes = local * es;
    void *host = malloc(bytes ? bytes : 1);
    dk_buffer *bin = NULL, *bout = NULL;
    int ok = host && dk_buffer_create(ctx, bytes ? bytes : 1, &bout) == DK_OK &&
             (!in || dk_buffer_create(ctx, bytes ? bytes : 1, &bin) == DK_OK);
    if (ok) {
        if (in)
            memcpy(host, in, bytes);
        else
            box_copy(host, x, d, part, 1);
        ok = dk_buffer_write(in ? bin : bout, host, bytes) == DK_OK;
    }
    if (!ok)
        snprintf(why, len, "device buffers: %s", dk_last_error(ctx));
    /* every rank calls execute, whatever failed on it: it is collective */
    dk_status st = dk_mpi_gauss_execute(plan, in ? bin : bout, bout);
    if (ok && st != DK_OK) {
        snprintf(why, len, "dk_mpi_gauss_execute: %s", dk_mpi_last_error());
        ok = 0;
    }
    if (ok) {
        memset(host, 0xff, bytes);
        ok = dk_buffer_read(bout, host, bytes) == DK_OK && memcmp(host, expect, bytes) == 0;
        if (!ok)
            snprintf(why, len, "dk_mpi_gauss_execute on device buffers differs from the host path");
    }
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);
    free(host);
    return ok;
}

/* The path dk_mpi_gauss_plan_path must report: every in-tree backend
 * filters exact rf with the zero or constant boundary with halos in place;
 * anything else split goes through a widened copy. Collective. */
static const char *expected_path(const dk_gauss_desc *d, const dk_mpi_part *part)
{
    int mine = 0, split;
    for (int a = 0; a < d->ndim; a++)
        if ((d->axes & (1u << a)) && part->extent[a] && part->extent[a] < d->shape[a])
            mine = 1;
    MPI_Allreduce(&mine, &split, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int halo = d->mode == DK_GAUSS_EXACT && d->method == DK_GAUSS_RF &&
               (d->boundary == DK_BOUNDARY_ZERO || d->boundary == DK_BOUNDARY_CONSTANT);
    return !split ? "local" : halo ? "halo" : "widened";
}

/* Runs the distributed filter on d with this rank's part and compares with
 * the reference on the whole field; reports on rank 0. */
static void check_case(dk_context *ctx, const char *name, const dk_gauss_desc *d, const dk_mpi_part *part,
                       int inplace)
{
    size_t n = count_of(d->ndim, d->shape), es = dk_dtype_size(d->dtype);
    size_t local = count_of(d->ndim, part->extent);
    void *x = malloc(n * es), *ref = malloc(n * es);
    void *in = malloc(local ? local * es : 1), *out = malloc(local ? local * es : 1);
    fill(x, d->dtype, n);
    int ok = dk_gauss_reference(d, x, ref) == DK_OK;
    double xmax = 0;
    for (size_t k = 0; k < n; k++)
        xmax = fmax(xmax, fabs(get(x, d->dtype, k)));
    box_copy(in, x, d, part, 1);
    dk_mpi_plan *plan = NULL;
    dk_status st = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, d, part, &plan);
    double err = 0.0;
    char why[1200] = "";
    const char *path = expected_path(d, part), *taken = dk_mpi_gauss_plan_path(plan);
    if (st != DK_OK) {
        snprintf(why, sizeof why, "plan: %s", dk_mpi_last_error());
        ok = 0;
    } else if (!taken || strcmp(taken, path)) {
        /* a silent fall-back from the halo path would pass every value check */
        snprintf(why, sizeof why, "the plan takes the %s path, %s expected", taken ? taken : "(NULL)", path);
        ok = 0;
    } else {
        /* twice: the plan is reused */
        for (int rep = 0; rep < 2 && ok; rep++) {
            if (inplace)
                box_copy(out, x, d, part, 1);
            else /* poison: a value never written shows up */
                memset(out, 0xff, local * es);
            st = dk_mpi_gauss_execute_host(plan, inplace ? out : in, out);
            if (st != DK_OK) {
                snprintf(why, sizeof why, "execute: %s", dk_mpi_last_error());
                ok = 0;
            }
        }
        /* the same plan on device buffers: the same bits as on host memory */
        if (ok && !device_matches(ctx, plan, inplace ? NULL : in, out, x, d, part, why, sizeof why))
            ok = 0;
        if (ok) {
            void *mine = malloc(local ? local * es : 1);
            box_copy(mine, ref, d, part, 1);
            for (size_t k = 0; k < local; k++) {
                double e = fabs(get(out, d->dtype, k) - get(mine, d->dtype, k));
                err = e > err || isnan(e) ? e : err;
            }
            err /= xmax;
            free(mine);
        }
    }
    dk_mpi_plan_destroy(plan);
    double worst;
    MPI_Allreduce(&err, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double tol = tolerance_of(d);
    ok = all_ranks(ok && !isnan(err) && err <= tol);
    if (rank == 0)
        printf("%-4s %-22s %s %-8s K=%d %s: error %.3g (tolerance %.3g, %.2f of it)%s%s\n", ok ? "ok" : "FAIL",
               name, dk_dtype_name(d->dtype), d->boundary == DK_BOUNDARY_ZERO ? "zero" : "constant", d->K,
               inplace ? "in place" : "        ", worst, tol, worst / tol, why[0] ? " " : "", why);
    else if (!ok && why[0])
        fprintf(stderr, "rank %d: %s: %s\n", rank, name, why);
    failures += !ok;
    free(x);
    free(ref);
    free(in);
    free(out);
}

/* ---- failures: the same status and sentence on every rank ---- */

static dk_mpi_plan *make_or_report(dk_context *ctx, const dk_gauss_desc *d, const dk_mpi_part *p,
                                   dk_status *st)
{
    dk_mpi_plan *plan = NULL;
    *st = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, d, p, &plan);
    if ((*st == DK_OK) != (plan != NULL)) {
        fprintf(stderr, "rank %d: status %d but plan %p\n", rank, (int)*st, (void *)plan);
        failures++;
    }
    return plan;
}

static void bad_input(dk_context *ctx)
{
    const int last = rank == size - 1;
    const geom line = {"line", 1, {100}, 1, {3}, SLABS, 0};
    dk_gauss_desc d;
    dk_mpi_part part;
    dk_status st;
    desc_of(&line, DK_F32, DK_BOUNDARY_ZERO, 4, &d);
    part_of(&line, &part);

    if (size > 1) {
        dk_gauss_desc e = d;
        if (last)
            e.sigma[0] = 4.5;
        dk_mpi_plan_destroy(make_or_report(ctx, &e, &part, &st));
        expect_failure("sigma differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "sigma[0]");

        e = d;
        if (last)
            e.boundary = DK_BOUNDARY_CONSTANT;
        dk_mpi_plan_destroy(make_or_report(ctx, &e, &part, &st));
        expect_failure("boundary differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "boundary");

        dk_mpi_part q = part;
        if (rank == 0)
            q.extent[0]++;
        dk_mpi_plan_destroy(make_or_report(ctx, &d, &q, &st));
        expect_failure("parts overlap", st, DK_ERR_INVALID_ARGUMENT, "overlaps the part of rank 1");

    }
    dk_mpi_part q = part;
    if (last)
        q.extent[0]--;
    dk_mpi_plan_destroy(make_or_report(ctx, &d, &q, &st));
    expect_failure("parts leave a gap", st, DK_ERR_INVALID_ARGUMENT, "gap");

    q = part;
    if (last)
        q.offset[0] = 101;
    char who[64];
    snprintf(who, sizeof who, "rank %d of %d: its part lies outside", size - 1, size);
    dk_mpi_plan_destroy(make_or_report(ctx, &d, &q, &st));
    expect_failure("part outside the field on the last rank", st, DK_ERR_INVALID_ARGUMENT, who);

    dk_mpi_plan_destroy(make_or_report(ctx, last ? NULL : &d, &part, &st));
    expect_failure("NULL description on the last rank", st, DK_ERR_INVALID_ARGUMENT, "must not be NULL");

    dk_gauss_desc e = d;
    if (last)
        e.K = 0;
    dk_mpi_plan_destroy(make_or_report(ctx, &e, &part, &st));
    expect_failure("K = 0 on the last rank", st, DK_ERR_INVALID_ARGUMENT, "K is 0");

    e = d;
    e.variant = last ? "no-such-variant" : NULL;
    dk_mpi_plan_destroy(make_or_report(ctx, &e, &part, &st));
    expect_failure(size > 1 ? "variant named on the last rank only" : "unknown variant", st,
                   size > 1 ? DK_ERR_INVALID_ARGUMENT : DK_ERR_NOT_IMPLEMENTED,
                   size > 1 ? "variant" : "no-such-variant");

    /* execute: NULL input on the last rank, then the same plan still works */
    dk_mpi_plan *plan = make_or_report(ctx, &d, &part, &st);
    float *buf = calloc(part.extent[0] + 1, sizeof *buf);
    st = dk_mpi_gauss_execute_host(plan, last ? NULL : buf, buf);
    expect_failure("execute with NULL input on the last rank", st, DK_ERR_INVALID_ARGUMENT, "must not be NULL");
    st = dk_mpi_gauss_execute_host(plan, buf, buf);
    int ok = all_ranks(st == DK_OK);
    if (rank == 0)
        printf("%-4s the same plan executes again afterwards\n", ok ? "ok" : "FAIL");
    failures += !ok;

    /* NaN on the last rank: refused on every rank with its global index;
     * under propagate the call goes through */
    for (size_t k = 0; k < part.extent[0]; k++)
        buf[k] = 1.0f;
    if (last)
        buf[part.extent[0] - 1] = NAN;
    char nan_at[64];
    /* every rank's copy of the expected text names the last rank's index */
    size_t last_index = part.offset[0] + part.extent[0] - 1;
    MPI_Bcast(&last_index, 1, MPI_UINT64_T, size - 1, MPI_COMM_WORLD);
    snprintf(nan_at, sizeof nan_at, "1 NaN value (the first at [%zu]", last_index);
    st = dk_mpi_gauss_execute_host(plan, buf, buf);
    expect_failure("NaN on the last rank", st, DK_ERR_INVALID_ARGUMENT, nan_at);
    ok = all_ranks(dk_mpi_gauss_plan_set_nan(plan, DK_GAUSS_NAN_IGNORE) == DK_ERR_NOT_IMPLEMENTED &&
                   dk_mpi_gauss_plan_set_nan(plan, DK_GAUSS_NAN_PROPAGATE) == DK_OK);
    st = dk_mpi_gauss_execute_host(plan, buf, buf);
    ok = all_ranks(ok && st == DK_OK);
    if (rank == 0)
        printf("%-4s nan policy: ignore is not distributed, propagate goes through\n", ok ? "ok" : "FAIL");
    failures += !ok;
    dk_mpi_gauss_plan_set_nan(plan, DK_GAUSS_NAN_ERROR);
    for (size_t k = 0; k < part.extent[0]; k++)
        buf[k] = 0.0f;

    /* the same on device buffers: one too small on the last rank, then fine */
    size_t bytes = part.extent[0] * sizeof *buf;
    dk_buffer *dbuf = NULL;
    if (dk_buffer_create(ctx, bytes + sizeof *buf, &dbuf) != DK_OK)
        dbuf = NULL;
    dk_buffer *small = NULL;
    if (last && dk_buffer_create(ctx, bytes > 4 ? bytes - 4 : 1, &small) != DK_OK)
        small = NULL;
    st = dk_mpi_gauss_execute(plan, last && small ? small : dbuf, dbuf);
    expect_failure("device execute with a buffer too small on the last rank", st, DK_ERR_INVALID_ARGUMENT,
                   "holds");
    st = dk_mpi_gauss_execute(plan, dbuf, dbuf);
    ok = all_ranks(st == DK_OK);
    if (rank == 0)
        printf("%-4s the same plan executes on device buffers afterwards\n", ok ? "ok" : "FAIL");
    failures += !ok;
    /* profile on: the collectives waited for one by one, the same bits */
    float *r0 = malloc(bytes + sizeof *buf), *r1 = malloc(bytes + sizeof *buf);
    for (size_t k = 0; k < part.extent[0]; k++)
        buf[k] = (float)((k * 7 + part.offset[0]) % 11);
    dk_mpi_stats stats = {0, 0};
    st = dk_buffer_write(dbuf, buf, bytes);
    st = st == DK_OK ? dk_mpi_gauss_execute(plan, dbuf, dbuf) : st;
    st = st == DK_OK ? dk_buffer_read(dbuf, r0, bytes) : st;
    st = st == DK_OK ? dk_mpi_plan_stats_reset(plan) : st;
    st = st == DK_OK ? dk_mpi_plan_set_profile(plan, 1) : st;
    st = st == DK_OK ? dk_buffer_write(dbuf, buf, bytes) : st;
    st = st == DK_OK ? dk_mpi_gauss_execute(plan, dbuf, dbuf) : st;
    st = st == DK_OK ? dk_buffer_read(dbuf, r1, bytes) : st;
    dk_mpi_plan_stats(plan, &stats);
    dk_mpi_plan_set_profile(plan, 0);
    ok = all_ranks(st == DK_OK && r0 && r1 && !memcmp(r0, r1, bytes) && stats.comm_calls > 0 &&
                   dk_mpi_plan_set_profile(NULL, 1) == DK_ERR_INVALID_ARGUMENT);
    if (rank == 0)
        printf("%-4s profile on: the same result, its communication counted\n", ok ? "ok" : "FAIL");
    failures += !ok;
    free(r0);
    free(r1);
    for (size_t k = 0; k < part.extent[0]; k++)
        buf[k] = 0.0f;
    dk_buffer_destroy(small);
    dk_buffer_destroy(dbuf);
    dk_mpi_plan_destroy(plan);
    plan = NULL;

    /* overlap mode where only an unfiltered axis is split: allowed, and
     * equal to the single-process overlap result */
    const geom og = {"overlap_split0_filter1", 2, {40, 300}, 2, {0, 3}, SLABS, 0};
    dk_gauss_desc od;
    desc_of(&og, DK_F64, DK_BOUNDARY_CONSTANT, 4, &od);
    od.mode = DK_GAUSS_OVERLAP;
    od.overlap = 10;
    od.blocks = 7;
    part_of(&og, &part);
    check_case(ctx, "overlap_split0_filter1", &od, &part, 0);
    /* overlap mode on split filtered axes: each split axis is gathered
     * whole, so the blocks are the single process's */
    od.axes = 3;
    od.sigma[0] = 2;
    check_case(ctx, "overlap_split0_filter01", &od, &part, 0);
    od.overlap = 3;
    od.blocks = 3072; /* more blocks than values: one value a block */
    check_case(ctx, "overlap_split0_many_blocks", &od, &part, 1);

    /* a backend that fails on one rank: no gauss at all (plan creation),
     * then a device that fails at every execute */
    part_of(&line, &part);
    snprintf(who, sizeof who, "rank %d of %d: ", size - 1, size);
    const char *names[3] = {"nogauss", "mpifaulty", "mpihalofaulty"};
    for (int k = 0; k < 3; k++) {
        dk_context *other = NULL;
        st = last ? open_test_plugin(names[k], &other) : DK_OK;
        if (!all_ranks(st == DK_OK)) {
            if (rank == 0)
                printf("FAIL the test plugin %s could not be opened on the last rank (DAKIT_PLUGIN_PATH must "
                       "name the build's tests folder)\n", names[k]);
            if (last)
                fprintf(stderr, "rank %d: %s\n", rank, dk_last_error(NULL));
            failures++;
            dk_context_destroy(other);
            continue;
        }
        plan = make_or_report(last ? other : ctx, &d, &part, &st);
        if (k == 0) {
            expect_failure("backend without gauss on the last rank", st, DK_ERR_NOT_IMPLEMENTED, who);
        } else {
            ok = all_ranks(st == DK_OK);
            if (rank == 0 && !ok)
                printf("FAIL plan on the faulty device: %s\n", dk_mpi_last_error());
            failures += !ok;
            /* mpihalofaulty offers execute_halo: the split line goes the halo
             * path, whose outcome is agreed after the exchanges */
            const char *path = dk_mpi_gauss_plan_path(plan), *want = size == 1 ? "local"
                                                                 : k == 2   ? "halo"
                                                                            : "widened";
            ok = all_ranks(path && !strcmp(path, want));
            if (rank == 0)
                printf("%-4s %s on the last rank: the plan takes the %s path\n", ok ? "ok" : "FAIL", names[k],
                       want);
            failures += !ok;
            st = dk_mpi_gauss_execute_host(plan, buf, buf);
            expect_failure(k == 2 ? "device failure at execute_halo on the last rank"
                                  : "device failure at execute on the last rank",
                           st, DK_ERR_BACKEND, "(simulated)");
            /* and again: the failure leaves no rank behind in a later call */
            st = dk_mpi_gauss_execute_host(plan, buf, buf);
            expect_failure("the same failure on the next call", st, DK_ERR_BACKEND, "(simulated)");
        }
        dk_mpi_plan_destroy(plan);
        dk_context_destroy(other);
    }
    free(buf);
}

/* ---- the queued device path without a GPU (tests/test_mpi_queue.c) ---- */

/* The plugin mpiqueue on every rank: its communicator queues, so halos go
 * straight from the box and land in place, and dk_mpi_gauss_execute agrees
 * while the queued work runs, as cuda with NCCL does. Every geometry against
 * the reference, every plan on the one communicator the context keeps (the
 * plugin refuses a second); then an execute_halo that fails on the last
 * rank only. */
static void queued_path(void)
{
    setenv("DAKIT_TEST_QUEUE_ONE_COMM", "1", 1);
    dk_context *q = NULL;
    dk_status st = open_test_plugin("mpiqueue", &q);
    if (!all_ranks(st == DK_OK)) {
        if (rank == 0)
            printf("FAIL the test plugin mpiqueue could not be opened (DAKIT_PLUGIN_PATH must name the build's "
                   "tests folder): %s\n", dk_last_error(NULL));
        failures++;
        dk_context_destroy(q);
        return;
    }
    static const dk_dtype dtypes[] = {DK_F32, DK_F64};
    static const dk_boundary bounds[] = {DK_BOUNDARY_ZERO, DK_BOUNDARY_CONSTANT};
    int combo = 0;
    for (int gi = 0; gi < NGEOMS; gi++)
        for (int ti = 0; ti < 2; ti++)
            for (int bi = 0; bi < 2; bi++) {
                dk_mpi_part part;
                dk_gauss_desc d;
                part_of(&geoms[gi], &part);
                desc_of(&geoms[gi], dtypes[ti], bounds[bi], 4, &d);
                check_case(q, geoms[gi].name, &d, &part, combo++ % 3 == 0);
            }

    /* 2-D tiles: the queued transport, then a failure on the last rank */
    const geom *g = &geoms[6];
    dk_mpi_part part;
    dk_gauss_desc d;
    part_of(g, &part);
    desc_of(g, DK_F64, DK_BOUNDARY_CONSTANT, 4, &d);
    size_t n = count_of(d.ndim, d.shape), local = count_of(d.ndim, part.extent), bytes = local * sizeof(double);
    double *x = malloc(n * sizeof *x), *in = malloc(bytes + 8), *r0 = malloc(bytes + 8), *r1 = malloc(bytes + 8);
    fill(x, DK_F64, n);
    box_copy(in, x, &d, &part, 1);
    dk_mpi_plan *plan = NULL;
    dk_buffer *bin = NULL, *bout = NULL;
    st = dk_mpi_gauss_plan_create(q, MPI_COMM_WORLD, &d, &part, &plan);
    if (st == DK_OK && (dk_buffer_create(q, bytes + 8, &bin) != DK_OK || dk_buffer_create(q, bytes + 8, &bout) != DK_OK ||
                        dk_buffer_write(bin, in, bytes) != DK_OK))
        st = DK_ERR_BACKEND;
    int ok = all_ranks(st == DK_OK);
    if (ok) {
        st = dk_mpi_gauss_execute(plan, bin, bout);
        ok = all_ranks(st == DK_OK && dk_buffer_read(bout, r0, bytes) == DK_OK);
    }
    const char *transport = plan ? dk_mpi_plan_transport(plan) : "";
    int queued = size == 1 || !strncmp(transport, "device (mpiqueue)", 17);
    ok = all_ranks(ok && queued);
    if (rank == 0)
        printf("%-4s mpiqueue on every rank: 2d_tiles through %s\n", ok ? "ok" : "FAIL", transport);
    failures += !ok;
    if (ok && size > 1) {
        char who[64];
        snprintf(who, sizeof who, "rank %d of %d", size - 1, size);
        if (rank == size - 1)
            setenv("DAKIT_TEST_QUEUE_FAIL", "1", 1);
        st = dk_mpi_gauss_execute(plan, bin, bout);
        unsetenv("DAKIT_TEST_QUEUE_FAIL");
        /* the sentence is the failing rank's own there, a pointer to it elsewhere */
        uint64_t v[2] = {(uint64_t)st, ~(uint64_t)st}, r[2];
        MPI_Allreduce(v, r, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        ok = all_ranks(st == DK_ERR_BACKEND && strstr(dk_mpi_last_error(), who) &&
                       (rank != size - 1 || strstr(dk_mpi_last_error(), "(simulated)"))) &&
             r[0] == ~r[1];
        if (rank == 0)
            printf("%-4s execute_halo failing on the last rank, agreed while queued: every rank: %s: %s\n",
                   ok ? "ok" : "FAIL", dk_status_string(st), dk_mpi_last_error());
        else if (!ok)
            fprintf(stderr, "rank %d: %s: %s\n", rank, dk_status_string(st), dk_mpi_last_error());
        failures += !ok;
        st = dk_mpi_gauss_execute(plan, bin, bout);
        ok = all_ranks(st == DK_OK && dk_buffer_read(bout, r1, bytes) == DK_OK && !memcmp(r0, r1, bytes));
        if (rank == 0)
            printf("%-4s the next execute: the same bits as before the failure\n", ok ? "ok" : "FAIL");
        failures += !ok;

        /* an exchange that fails aborts the communicator: the plan fails on
         * every rank, and a later plan gets a new communicator rather than
         * the aborted one the context kept */
        setenv("DAKIT_TEST_QUEUE_COMM_FAIL", "1", 1);
        st = dk_mpi_gauss_execute(plan, bin, bout);
        unsetenv("DAKIT_TEST_QUEUE_COMM_FAIL");
        ok = all_ranks(st == DK_ERR_BACKEND && strstr(dk_mpi_last_error(), "(simulated)"));
        dk_mpi_plan *again = NULL;
        unsetenv("DAKIT_TEST_QUEUE_ONE_COMM");
        dk_status made = dk_mpi_gauss_plan_create(q, MPI_COMM_WORLD, &d, &part, &again);
        st = made == DK_OK ? dk_mpi_gauss_execute(again, bin, bout) : made;
        ok = all_ranks(ok && st == DK_OK && dk_buffer_read(bout, r1, bytes) == DK_OK && !memcmp(r0, r1, bytes));
        if (rank == 0)
            printf("%-4s an exchange failing on every rank aborts the communicator; a new plan gets a new one: %s\n",
                   ok ? "ok" : "FAIL", st == DK_OK ? "the same bits" : dk_mpi_last_error());
        failures += !ok;
        dk_mpi_plan_destroy(again);
    }
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);
    dk_mpi_plan_destroy(plan);
    free(x), free(in), free(r0), free(r1);
    dk_context_destroy(q);
    unsetenv("DAKIT_TEST_QUEUE_ONE_COMM");
}

int main(int argc, char **argv)
{
    int code;
    dk_context *ctx = mpi_test_begin(&argc, &argv, NULL, &code);
    if (!ctx)
        return code;
    static const dk_dtype dtypes[] = {DK_F32, DK_F64};
    static const dk_boundary bounds[] = {DK_BOUNDARY_ZERO, DK_BOUNDARY_CONSTANT};
    static const int Ks[] = {1, 4};
    int combo = 0;
    for (int gi = 0; gi < NGEOMS; gi++) {
        const geom *g = &geoms[gi];
        dk_mpi_part part;
        part_of(g, &part);
        if (rank == 0)
            printf("-- %s: %s\n", g->name, layout_names[g->lay]);
        for (int ti = 0; ti < 2; ti++)
            for (int bi = 0; bi < 2; bi++)
                for (int ki = 0; ki < 2; ki++) {
                    dk_gauss_desc d;
                    desc_of(g, dtypes[ti], bounds[bi], Ks[ki], &d);
                    check_case(ctx, g->name, &d, &part, combo++ % 3 == 0);
                }
    }
    if (rank == 0)
        printf("-- bad input\n");
    bad_input(ctx);
    /* once, beside the cpu backend's run: it does not depend on the backend */
    if (!strcmp(dk_context_backend(ctx), "cpu")) {
        if (rank == 0)
            printf("-- the queued device path (plugin mpiqueue)\n");
        queued_path();
    }

    return mpi_test_end(ctx);
}
