/* dakit bench --ranks P: the distributed layer timed under mpirun, per case
 * the time of each rank's execute and, inside it, its communication
 * (dk_mpi_plan_stats); at one rank also the plain single-process call on the
 * same problem, the two alternating run by run, and the layer's overhead as
 * the median of the per-run differences.
 *
 * The scaling cases (_weak: a fixed share per rank; _strong: a fixed
 * field) time at every P, alternating with the distributed runs, the plain
 * single-device call on device buffers: on one rank's share (weak) or on the
 * whole problem (strong), each rank on its own device. Their last column is
 * plain / distributed: the weak-scaling efficiency, or the speedup over one
 * device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/bench.h"

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

#include "cli/dist.h"

#define MAX_RUNS 200

typedef struct ranks_case {
    const char *name, *what;
} ranks_case;

static const ranks_case cases[] = {
    {"gauss_2d", "gauss 2048 x 2048 float32, sigma 4, K 4, both axes, slabs along axis 0"},
    {"enkf_cov", "enkf cov, n 100000, L 20, M 256, compact C (radius 50), float64, slabs of rows"},
    {"enkf_analysis", "enkf analysis, the same problem, float64"},
    {"kmeans", "kmeans 1000000 points, d 3, k 8, 10 iterations, float32, slabs of points"},
    {"gauss_weak", "gauss 8192 x 8192 float32 per rank (a field of 8192 P x 8192 in slabs), sigma 2, K 4, exact, "
                   "both axes, on device buffers (dk_mpi_gauss_execute)"},
    {"gauss_strong", "gauss 32768 x 32768 float32 (4 GiB) in slabs along axis 0, sigma 2, K 4, exact, both axes, "
                     "on device buffers"},
    {"kmeans_weak", "kmeans 3e6 points per rank, d 8, k 16, 20 iterations, tol 0, float32, the points on the "
                    "device (dk_mpi_kmeans_execute); plain: one rank's points on the device"},
    {"enkf_weak", "enkf cov, N 10^6 per rank, L 10, M 32, H density 0.05, compact C (radius 200), float64, on "
                  "device buffers (dk_mpi_enkf_cov); plain: on the device"},
    {"kmeans_weak_3e7", "kmeans_weak with 3e7 points per rank"},
    {"letkf_weak", "letkf, per rank a 1000 x 1000 slab of a 1000 P x 1000 unit grid with 10^5 observations at random "
                   "places in it, k 40, radius 21.9, float64, on device buffers (dk_mpi_letkf_execute); plain: one "
                   "rank's slab and observations alone"},
    {"gauss_huge", "gauss float32 square field of twice one device's memory (at most 0.45 of each rank's device "
                   "memory a rank; 2048 x 2048 on a CPU device), tiles of a near-square rank grid, sigma 2, K 4, "
                   "exact, constant boundary, both axes, in place on device buffers; no plain call (it does not "
                   "fit one device); checked against the serial reference on sampled rows and columns"},
    {"letkf_ocean", "letkf on the sphere, 1440 x 1080 x 75 points (lon, lat -80 to 90, level; DAKIT_BENCH_LETKF_OCEAN="
                    "LONxLATxZ for another grid), k 30, 10^6 observations (3000 profiles of every level, the rest "
                    "surface data at random places; scaled with the grid's columns), radius 300 km, vertical radius "
                    "10 levels, float64, diagonal R, latitude bands, in place on device buffers; plain (one rank): "
                    "dk_letkf_execute on the same buffers; checked against dk_letkf_reference on sampled points"},
    {"letkf_ocean80", "letkf_ocean with 80 members"},
    {"letkf_ocean_weak", "letkf_ocean grown with the ranks: per rank a band of 270 latitude rows (a quarter of the "
                         "grid's) and its observations; plain: one rank's band and observations alone"},
    {"letkf_cluster", "letkf, a 1000 x 1000 unit grid (DAKIT_BENCH_LETKF_CLUSTER=SIDE[xK]), k 40, 10^5 observations, "
                      "70 % of them in two swaths 8 % of the grid wide, radius 21.9, float64, slabs of equal points; "
                      "reports the work per rank (observations used summed over its points) and time, max / mean"},
    {"letkf_cluster_balanced", "letkf_cluster with the points cut by cost (dk_mpi_letkf_balance)"},
};
#define HUGE_CASE 10
#define OCEAN_CASE 11 /* 11 ocean, 12 ocean80, 13 ocean_weak, 14 cluster, 15 cluster_balanced */
#define FIRST_SCALING 4
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* One case's problem on this rank: the distributed plan over its part and,
 * at one rank, the plain plan over the same data. */
typedef struct state {
    int which;
    dk_mpi_plan *mplan;
    dk_plan *plan;
    void *in, *out, *aux, *x0;
    size_t local, width;
    double *c, *values, *y, *r, *gc, *oc;
    int64_t *indptr, *indices;
    float *init, *cent;
    int32_t *labels;
    dk_kmeans_desc kd;
    dk_buffer *din, *dout; /* the distributed call's device buffers (gauss) */
    dk_buffer *pb[5];      /* the plain call's device buffers */
    /* gauss_huge: the field's size and its check on sampled lines */
    size_t huge_shape[2];
    double huge_ratio, huge_err, huge_tol;
    int huge_rows, huge_cols;
    /* the letkf cases of OCEAN_CASE on: the check on sampled points, the work per rank */
    size_t lk_n, lk_m, lk_k, lk_points;
    double lk_err, lk_tol, lk_work;
    long lk_counts_bad;
    int lk_plain; /* whether the plain call runs */
} state;

static void release(state *s)
{
    dk_mpi_plan_destroy(s->mplan);
    dk_plan_destroy(s->plan);
    free(s->in), free(s->out), free(s->aux), free(s->x0);
    free(s->c), free(s->values), free(s->y), free(s->r), free(s->indptr), free(s->indices);
    free(s->init), free(s->cent), free(s->labels), free(s->gc), free(s->oc);
    dk_buffer_destroy(s->din), dk_buffer_destroy(s->dout);
    for (int b = 0; b < 5; b++)
        dk_buffer_destroy(s->pb[b]);
}

/* The plain call's device buffers: bytes[b] each (0: none), the first
 * written from `first`. */
static dk_status plain_buffers(dk_context *ctx, state *s, const size_t bytes[5], const void *first)
{
    for (int b = 0; b < 5; b++)
        if (bytes[b] && dk_buffer_create(ctx, bytes[b], &s->pb[b]) != DK_OK)
            return DK_ERR_OUT_OF_MEMORY;
    return dk_buffer_write(s->pb[0], first, bytes[0]);
}

/* gauss_weak and gauss_strong: the field in slabs along axis 0, on device
 * buffers; the plain plan over one rank's share or the whole field. */
static dk_status setup_gauss_scaling(dk_context *ctx, state *s, int weak, int size)
{
    dk_gauss_desc g;
    dk_gauss_desc_init(&g);
    g.method = DK_GAUSS_RF;
    g.boundary = DK_BOUNDARY_ZERO;
    g.dtype = DK_F32;
    g.ndim = 2;
    g.shape[0] = weak ? 8192 * (size_t)size : 32768;
    g.shape[1] = weak ? 8192 : 32768;
    g.axes = 3;
    g.sigma[0] = g.sigma[1] = 2;
    g.K = 4;
    dk_mpi_part part;
    int pieces[3] = {size, 1, 1};
    dk_status st = dk_mpi_decompose(MPI_COMM_WORLD, 2, g.shape, pieces, &part);
    if (st != DK_OK)
        return st;
    s->local = part.extent[0] * part.extent[1];
    dk_gauss_desc one = g;
    if (weak)
        one.shape[0] = part.extent[0];
    size_t whole = one.shape[0] * one.shape[1], fill = s->local > whole ? s->local : whole;
    s->in = malloc(fill * 4 + 1);
    if (!s->in)
        return DK_ERR_OUT_OF_MEMORY;
    cli_fill_random(s->in, DK_F32, fill, 41);
    size_t bytes[5] = {whole * 4, whole * 4, 0, 0, 0};
    if ((st = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, &g, &part, &s->mplan)) != DK_OK)
        return st;
    if (dk_buffer_create(ctx, s->local * 4 + 1, &s->din) != DK_OK ||
        dk_buffer_create(ctx, s->local * 4 + 1, &s->dout) != DK_OK ||
        dk_buffer_write(s->din, s->in, s->local * 4) != DK_OK || dk_gauss_plan_create(ctx, &one, &s->plan) != DK_OK ||
        plain_buffers(ctx, s, bytes, s->in) != DK_OK)
        return DK_ERR_BACKEND;
    return DK_OK;
}

/* ---- gauss_huge ----
 * The field is a sum of separable terms, x(i, j) = sum_t f_t(i) g_t(j),
 * with f_t and g_t pseudo-random per index. Filtering along each axis is
 * linear on every line (zero and constant boundaries alike), so the serial
 * reference of the whole field is sum_t (A0 f_t)(i) (A1 g_t)(j), where A0 f_t
 * and A1 g_t are the 1-D serial references of the factors: any row or
 * column of the expected result comes from 2 * HUGE_TERMS lines, never the
 * whole field, which no single device or process holds. */
#define HUGE_TERMS 2

static double huge_factor(uint64_t seed, size_t i)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53 * 2.0 - 1.0;
}

/* The device's memory as libdakit reports it (dakit info); 0 for a CPU
 * device or where unknown. */
static size_t device_memory(const dk_context *ctx)
{
    const char *backend = dk_context_backend(ctx), *device = dk_context_device(ctx);
    for (int b = 0; b < dk_backend_count(); b++) {
        dk_backend_info info;
        if (dk_backend_get(b, &info) != DK_OK || strcmp(info.name, backend))
            continue;
        for (int d = 0; d < info.device_count && d < DK_MAX_DEVICES; d++)
            if (!strcmp(info.devices[d].name, device))
                return info.devices[d].kind == DK_DEVICE_CPU ? 0 : info.devices[d].memory_bytes;
    }
    return 0;
}

/* The 1-D serial reference of every factor along its axis, in float64. */
static int huge_factors(const dk_gauss_desc *g, double *fr[2][HUGE_TERMS])
{
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < HUGE_TERMS; t++) {
            size_t n = g->shape[a];
            double *x = malloc(n * sizeof *x);
            fr[a][t] = malloc(n * sizeof *fr[a][t]);
            if (!x || !fr[a][t]) {
                free(x);
                return 0;
            }
            for (size_t i = 0; i < n; i++)
                x[i] = huge_factor(2 * (uint64_t)t + (uint64_t)a + 1, i);
            dk_gauss_desc line = *g;
            line.dtype = DK_F64;
            line.ndim = 1;
            line.shape[0] = n;
            line.axes = 1;
            line.sigma[0] = g->sigma[a];
            dk_status st = dk_gauss_reference(&line, x, fr[a][t]);
            free(x);
            if (st != DK_OK)
                return 0;
        }
    return 1;
}

/* After the first execute (its result read back into s->in): the largest
 * error on the sampled rows and columns that cross this rank's box,
 * relative to max |x|; the rows and columns sampled are every rank's first
 * and last (where the halos meet), the field's ends and its middle. */
static int huge_check(state *s, const dk_gauss_desc *g, const dk_mpi_part *part, double *err, int *rows, int *cols)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *fr[2][HUGE_TERMS] = {{0}};
    size_t mine[4] = {part->offset[0], part->offset[0] + part->extent[0] - 1, part->offset[1],
                      part->offset[1] + part->extent[1] - 1};
    size_t *all = malloc((size_t)size * 4 * sizeof *all);
    int ok = all && huge_factors(g, fr);
    if (all)
        MPI_Allgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, MPI_COMM_WORLD);
    double e = 0, xmax = 0;
    *rows = *cols = 0;
    for (int a = 0; ok && a < 2; a++) {
        size_t n = g->shape[a], lo = part->offset[a], hi = lo + part->extent[a];
        size_t count = (size_t)size * 2 + 3, *pick = malloc(count * sizeof *pick);
        if (!pick) {
            ok = 0;
            break;
        }
        for (int r = 0; r < size; r++)
            pick[2 * r] = all[4 * r + 2 * a], pick[2 * r + 1] = all[4 * r + 2 * a + 1];
        pick[2 * size] = 0, pick[2 * size + 1] = n - 1, pick[2 * size + 2] = n / 2 + 1;
        for (size_t k = 0; k < count; k++) {
            int seen = 0;
            for (size_t q = 0; q < k; q++)
                seen |= pick[q] == pick[k];
            if (seen)
                continue;
            *(a ? cols : rows) += 1;
            if (pick[k] < lo || pick[k] >= hi || !part->extent[1 - a])
                continue;
            /* the line pick[k] along the other axis, inside this box */
            size_t other = part->offset[1 - a], len = part->extent[1 - a];
            for (size_t q = 0; q < len; q++) {
                size_t i = a ? other + q : pick[k], j = a ? pick[k] : other + q;
                double want = 0, x = 0;
                for (int t = 0; t < HUGE_TERMS; t++) {
                    want += fr[0][t][i] * fr[1][t][j];
                    x += huge_factor(2 * (uint64_t)t + 1, i) * huge_factor(2 * (uint64_t)t + 2, j);
                }
                size_t at = (i - part->offset[0]) * part->extent[1] + (j - part->offset[1]);
                double d = fabs((double)((const float *)s->in)[at] - want);
                e = d > e || d != d ? d : e;
                xmax = fmax(xmax, fabs(x));
            }
        }
        free(pick);
    }
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < HUGE_TERMS; t++)
            free(fr[a][t]);
    free(all);
    double glob[2] = {e, xmax}, red[2];
    MPI_Allreduce(glob, red, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *err = red[1] > 0 ? red[0] / red[1] : red[0];
    return ok;
}

/* gauss_huge: a field of twice one device's memory, in tiles; one execute
 * checked on sampled lines, then timed in place. */
static dk_status setup_gauss_huge(dk_context *ctx, state *s, int size)
{
    size_t mem = device_memory(ctx), total;
    if (mem) {
        size_t each = (size_t)(0.45 * (double)mem);
        total = 2 * mem < each * (size_t)size ? 2 * mem : each * (size_t)size;
    } else {
        total = (size_t)2048 * 2048 * 4;
    }
    size_t n = (size_t)sqrt((double)(total / 4));
    n = n > 256 ? n & ~(size_t)255 : n;
    dk_gauss_desc g;
    dk_gauss_desc_init(&g);
    g.method = DK_GAUSS_RF;
    g.dtype = DK_F32;
    g.ndim = 2;
    g.shape[0] = g.shape[1] = n;
    g.axes = 3;
    g.sigma[0] = g.sigma[1] = 2;
    g.K = 4;
    g.boundary = DK_BOUNDARY_CONSTANT;
    s->huge_shape[0] = s->huge_shape[1] = n;
    s->huge_ratio = mem ? (double)(n * n * 4) / (double)mem : 0;
    int pieces[3] = {1, size, 1};
    for (int d = 1; d * d <= size; d++)
        if (size % d == 0)
            pieces[0] = d, pieces[1] = size / d;
    dk_mpi_part part;
    dk_status st = dk_mpi_decompose(MPI_COMM_WORLD, 2, g.shape, pieces, &part);
    if (st != DK_OK)
        return st;
    s->local = part.extent[0] * part.extent[1];
    s->in = malloc(s->local * 4 + 1);
    if (!s->in)
        return DK_ERR_OUT_OF_MEMORY;
    double *f[HUGE_TERMS], *gv[HUGE_TERMS];
    int made = 1;
    for (int t = 0; t < HUGE_TERMS; t++) {
        f[t] = malloc(part.extent[0] * sizeof *f[t] + 1);
        gv[t] = malloc(part.extent[1] * sizeof *gv[t] + 1);
        made &= f[t] && gv[t];
        for (size_t i = 0; made && i < part.extent[0]; i++)
            f[t][i] = huge_factor(2 * (uint64_t)t + 1, part.offset[0] + i);
        for (size_t j = 0; made && j < part.extent[1]; j++)
            gv[t][j] = huge_factor(2 * (uint64_t)t + 2, part.offset[1] + j);
    }
    float *x = s->in;
    for (size_t i = 0; made && i < part.extent[0]; i++)
        for (size_t j = 0; j < part.extent[1]; j++) {
            double v = 0;
            for (int t = 0; t < HUGE_TERMS; t++)
                v += f[t][i] * gv[t][j];
            x[i * part.extent[1] + j] = (float)v;
        }
    for (int t = 0; t < HUGE_TERMS; t++)
        free(f[t]), free(gv[t]);
    if (!made)
        return DK_ERR_OUT_OF_MEMORY;
    if ((st = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, &g, &part, &s->mplan)) != DK_OK)
        return st;
    if (dk_buffer_create(ctx, s->local * 4 + 1, &s->din) != DK_OK || dk_buffer_write(s->din, s->in, s->local * 4) != DK_OK)
        return DK_ERR_BACKEND;
    if ((st = dk_mpi_gauss_execute(s->mplan, s->din, s->din)) != DK_OK)
        return st;
    if (dk_buffer_read(s->din, s->in, s->local * 4) != DK_OK)
        return DK_ERR_BACKEND;
    /* as tests/test_mpi_gauss.c: K recursions a pass along 2 axes, each
     * rounding twice, and the input's rounding to float32 */
    s->huge_tol = (2.0 * g.K * 2 + 4.0) * 2.0 * 0x1p-24;
    if (!huge_check(s, &g, &part, &s->huge_err, &s->huge_rows, &s->huge_cols))
        return DK_ERR_OUT_OF_MEMORY;
    return DK_OK;
}

/* kmeans_weak: `per` points per rank on the device, as a user's loop keeps
 * them; the distributed and the plain call read the same points and init
 * (pb[0], pb[2]); the distributed call writes labels to dout and centroids
 * to din. plain: one rank's points. */
static dk_status setup_kmeans_weak(dk_context *ctx, state *s, int size, size_t per)
{
    dk_kmeans_desc *d = &s->kd;
    dk_kmeans_desc_init(d);
    d->n = per * (size_t)size;
    d->d = 8;
    d->k = 16;
    d->max_iters = 20;
    d->tol = 0;
    dk_mpi_part part;
    dk_status st = dk_mpi_decompose(MPI_COMM_WORLD, 1, &d->n, NULL, &part);
    if (st != DK_OK)
        return st;
    s->local = part.extent[0];
    s->in = malloc(s->local * 8 * sizeof(float) + 1);
    s->labels = malloc(s->local * sizeof *s->labels + 1);
    s->init = malloc(16 * 8 * sizeof *s->init);
    s->cent = malloc(16 * 8 * sizeof *s->cent);
    if (!s->in || !s->labels || !s->init || !s->cent)
        return DK_ERR_OUT_OF_MEMORY;
    cli_fill_random(s->in, DK_F32, s->local * 8, 51 + part.offset[0]);
    memcpy(s->init, s->in, 16 * 8 * sizeof *s->init); /* rank 0's first points on every rank */
    MPI_Bcast(s->init, 16 * 8, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if ((st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, d, &part, &s->mplan)) != DK_OK)
        return st;
    dk_kmeans_desc one = *d;
    one.n = s->local;
    size_t bytes[5] = {s->local * 8 * sizeof(float), 0, 16 * 8 * sizeof(float), s->local * sizeof(int32_t),
                       16 * 8 * sizeof(float)};
    if (dk_kmeans_plan_create(ctx, &one, &s->plan) != DK_OK || plain_buffers(ctx, s, bytes, s->in) != DK_OK ||
        dk_buffer_write(s->pb[2], s->init, bytes[2]) != DK_OK ||
        dk_buffer_create(ctx, bytes[3] ? bytes[3] : 4, &s->dout) != DK_OK ||
        dk_buffer_create(ctx, bytes[4], &s->din) != DK_OK)
        return DK_ERR_BACKEND;
    return DK_OK;
}

/* enkf_weak: N 10^6 per rank; H's M rows each pick 5 % of the global
 * states at random; plain: one rank's share on the device. */
static dk_status setup_enkf_weak(dk_context *ctx, state *s, int size)
{
    size_t per = 1000000, n = per * (size_t)size, L = 10, M = 32, per_row = n / 20, nnz = per_row * M;
    s->width = M;
    s->c = malloc(n * sizeof *s->c);
    s->values = malloc(nnz * sizeof *s->values);
    s->indptr = malloc((M + 1) * sizeof *s->indptr);
    s->indices = malloc(nnz * sizeof *s->indices);
    if (!s->c || !s->values || !s->indptr || !s->indices)
        return DK_ERR_OUT_OF_MEMORY;
    for (size_t k = 0; k < n; k++)
        s->c[k] = fmax(0.0, 1.0 - (double)k / 200.0);
    uint64_t rng = 0xbe7c4ull;
    for (size_t j = 0; j <= M; j++)
        s->indptr[j] = (int64_t)(j * per_row);
    for (size_t t = 0; t < nnz; t++) {
        s->indices[t] = (int64_t)((size_t)((cli_random(&rng) + 1) / 2 * (double)n) % n);
        s->values[t] = 1.0;
    }
    dk_enkf_desc d;
    dk_enkf_desc_init(&d);
    d.n = n;
    d.members = L;
    d.loc = s->c;
    d.H = (dk_csr){M, n, s->indptr, s->indices, s->values};
    dk_mpi_part part;
    dk_status st = dk_mpi_decompose(MPI_COMM_WORLD, 1, &n, NULL, &part);
    if (st != DK_OK)
        return st;
    s->local = part.extent[0];
    s->x0 = malloc(s->local * L * 8 + 1);
    s->out = malloc(s->local * M * 8 + 1);
    s->aux = malloc(M * M * 8);
    if (!s->x0 || !s->out || !s->aux)
        return DK_ERR_OUT_OF_MEMORY;
    cli_fill_random(s->x0, DK_F64, s->local * L, 61 + part.offset[0]);
    if ((st = dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &s->mplan)) != DK_OK)
        return st;
    /* the distributed call's data already on the device: e in din, PHT in dout, HPHT in pb[3] */
    if (dk_buffer_create(ctx, s->local * L * 8 + 1, &s->din) != DK_OK ||
        dk_buffer_create(ctx, s->local * M * 8 + 1, &s->dout) != DK_OK ||
        dk_buffer_create(ctx, M * M * 8, &s->pb[3]) != DK_OK || dk_buffer_write(s->din, s->x0, s->local * L * 8) != DK_OK)
        return DK_ERR_OUT_OF_MEMORY;
    /* one rank's share alone: its own H columns, renumbered */
    dk_enkf_desc one = d;
    one.n = s->local;
    size_t keep = 0;
    for (size_t t = 0; t < nnz; t++)
        if ((size_t)s->indices[t] >= part.offset[0] && (size_t)s->indices[t] < part.offset[0] + s->local)
            keep++;
    int64_t *ip = malloc((M + 1) * sizeof *ip), *ix = malloc((keep + 1) * sizeof *ix);
    double *v = malloc((keep + 1) * sizeof *v);
    if (!ip || !ix || !v) {
        free(ip), free(ix), free(v);
        return DK_ERR_OUT_OF_MEMORY;
    }
    size_t at = 0;
    ip[0] = 0;
    for (size_t j = 0; j < M; j++) {
        for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++)
            if ((size_t)s->indices[t] >= part.offset[0] && (size_t)s->indices[t] < part.offset[0] + s->local)
                ix[at] = s->indices[t] - (int64_t)part.offset[0], v[at++] = 1.0;
        ip[j + 1] = (int64_t)at;
    }
    one.H = (dk_csr){M, s->local, ip, ix, v};
    size_t bytes[5] = {s->local * L * 8, s->local * M * 8, M * M * 8, 0, 0};
    st = dk_enkf_plan_create(ctx, &one, &s->plan) != DK_OK || plain_buffers(ctx, s, bytes, s->x0) != DK_OK
             ? DK_ERR_BACKEND
             : DK_OK;
    free(ip), free(ix), free(v);
    return st;
}

/* letkf_weak: each rank's slab of grid rows and the observations that fall
 * in it; the distributed call gets the neighbours' observations within
 * the radius too, the plain call only its own. xb in din (analysed into
 * dout), yb in pb[1]; the plain call's xb in pb[0], xa in pb[2]. */
static dk_status setup_letkf_weak(dk_context *ctx, state *s, int rank)
{
    const size_t side = 1000, n = side * side, m = 100000, k = 40;
    s->local = n;
    s->width = m;
    s->gc = malloc(n * 2 * sizeof *s->gc);
    s->oc = malloc(m * 2 * sizeof *s->oc);
    s->x0 = malloc(n * k * 8);
    s->in = malloc(m * k * 8);
    s->y = malloc(m * sizeof *s->y);
    s->r = malloc(m * sizeof *s->r);
    if (!s->gc || !s->oc || !s->x0 || !s->in || !s->y || !s->r)
        return DK_ERR_OUT_OF_MEMORY;
    const double y0 = (double)side * rank;
    for (size_t i = 0; i < n; i++)
        s->gc[2 * i] = y0 + (double)(i / side), s->gc[2 * i + 1] = (double)(i % side);
    uint64_t rng = 0x1e7f0ull + (uint64_t)rank;
    for (size_t j = 0; j < m; j++) {
        s->oc[2 * j] = y0 + (cli_random(&rng) + 1) / 2 * (double)side;
        s->oc[2 * j + 1] = (cli_random(&rng) + 1) / 2 * (double)side;
        s->y[j] = cli_random(&rng), s->r[j] = 1.0;
    }
    cli_fill_random(s->x0, DK_F64, n * k, 71 + (uint64_t)rank);
    cli_fill_random(s->in, DK_F64, m * k, 81 + (uint64_t)rank);
    dk_letkf_desc d;
    dk_letkf_desc_init(&d);
    d.members = k;
    d.ncoords = 2;
    d.radius = 21.9;
    d.n = n, d.m = m, d.grid_coords = s->gc, d.obs_coords = s->oc;
    dk_status st = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &d, &s->mplan);
    if (st != DK_OK)
        return st;
    size_t bytes[5] = {n * k * 8, m * k * 8, n * k * 8, 0, 0};
    if (dk_letkf_plan_create(ctx, &d, &s->plan) != DK_OK || plain_buffers(ctx, s, bytes, s->x0) != DK_OK ||
        dk_buffer_write(s->pb[1], s->in, m * k * 8) != DK_OK || dk_buffer_create(ctx, n * k * 8, &s->din) != DK_OK ||
        dk_buffer_create(ctx, n * k * 8, &s->dout) != DK_OK || dk_buffer_write(s->din, s->x0, n * k * 8) != DK_OK)
        return DK_ERR_BACKEND;
    return DK_OK;
}


/* ---- letkf_ocean, letkf_ocean80, letkf_ocean_weak, letkf_cluster(_balanced) ----
 * Every value is a hash of its global index, so a rank makes its own part
 * and the check below remakes any point or observation without the rest. */
typedef struct lk_problem {
    int ocean;
    size_t nlon, nlat, nz;   /* ocean: points (row, lon, level), level fastest */
    double lat0, dlat;       /* ocean: the first row's latitude and the rows' spacing (degrees) */
    size_t ncol, nsurf;      /* ocean: profiles (every level) and surface observations */
    size_t side;             /* cluster: side x side unit grid */
    size_t n, m, k;
    double radius, vradius;
} lk_problem;

static double lk_u(uint64_t a, uint64_t b)
{
    return 0.5 * (huge_factor(a * 0x100000001b3ull + b + 7, (size_t)(a ^ (b << 40))) + 1.0);
}

static void lk_point(const lk_problem *pr, size_t i, double *c)
{
    if (pr->ocean) {
        size_t z = i % pr->nz, lon = i / pr->nz % pr->nlon, row = i / pr->nz / pr->nlon;
        c[0] = ((double)lon + 0.5) * 360.0 / (double)pr->nlon;
        c[1] = pr->lat0 + ((double)row + 0.5) * pr->dlat;
        c[2] = (double)z;
    } else
        c[0] = (double)(i / pr->side), c[1] = (double)(i % pr->side);
}

static void lk_obs(const lk_problem *pr, size_t j, double *c)
{
    if (pr->ocean) {
        /* uniform on the sphere between the grid's first and last rows */
        size_t col = j < pr->ncol * pr->nz ? j / pr->nz : j;
        const double deg = 3.14159265358979323846 / 180.0;
        double lo = sin(pr->lat0 * deg), hi = sin((pr->lat0 + (double)pr->nlat * pr->dlat) * deg);
        c[0] = 360.0 * lk_u(col, 1);
        c[1] = asin(lo + (hi - lo) * lk_u(col, 2)) / deg;
        c[2] = j < pr->ncol * pr->nz ? (double)(j % pr->nz) : 0.0;
        return;
    }
    double w = (double)pr->side;
    if (j % 10 < 7) /* two swaths along the grid's second axis, 8 % of the first wide */
        c[0] = w * (0.15 + 0.5 * (double)(j % 2) + 0.08 * lk_u(j, 1));
    else
        c[0] = w * lk_u(j, 1);
    c[1] = w * lk_u(j, 2);
    c[0] = fmin(c[0], w - 1), c[1] = fmin(c[1], w - 1);
}

static double lk_xb(size_t i, size_t l, size_t k) { return 2.0 * lk_u((uint64_t)(i * k + l), 3) - 1.0; }
static double lk_yb(size_t j, size_t l, size_t k) { return 2.0 * lk_u((uint64_t)(j * k + l), 4) - 1.0; }
static double lk_yo(size_t j) { return lk_u(j, 5) - 0.5; }
static double lk_r(size_t j) { return 0.5 + lk_u(j, 6); }

/* The problem of a case: the sizes from the environment where set. */
static lk_problem lk_make(int which, int size)
{
    lk_problem pr;
    memset(&pr, 0, sizeof pr);
    if (which >= OCEAN_CASE + 3) {
        size_t side = 1000, k = 40;
        const char *e = getenv("DAKIT_BENCH_LETKF_CLUSTER");
        if (e && *e)
            sscanf(e, "%zux%zu", &side, &k);
        pr.side = side < 8 ? 8 : side;
        pr.k = k < 2 ? 2 : k;
        pr.n = pr.side * pr.side;
        pr.m = (size_t)fmax(16.0, 1e5 * (double)pr.n / 1e6);
        pr.radius = 21.9;
        return pr;
    }
    size_t g[3] = {1440, 1080, 75};
    const char *e = getenv("DAKIT_BENCH_LETKF_OCEAN");
    if (e && *e)
        sscanf(e, "%zux%zux%zu", &g[0], &g[1], &g[2]);
    pr.ocean = 1;
    pr.nlon = g[0] < 4 ? 4 : g[0], pr.nz = g[2] < 1 ? 1 : g[2];
    size_t full = g[1] < 4 ? 4 : g[1];
    pr.dlat = 170.0 / (double)full;
    pr.lat0 = -80.0;
    pr.nlat = which == OCEAN_CASE + 2 ? (full / 4) * (size_t)size : full;
    double f = (double)(pr.nlon * pr.nlat) / (1440.0 * 1080.0);
    pr.ncol = (size_t)fmax(4.0, 3000.0 * f);
    pr.nsurf = (size_t)fmax(16.0, (1e6 - 3000.0 * 75.0) * f);
    pr.n = pr.nlon * pr.nlat * pr.nz;
    pr.m = pr.ncol * pr.nz + pr.nsurf;
    pr.k = which == OCEAN_CASE + 1 ? 80 : 30;
    pr.radius = 300.0;
    pr.vradius = 10.0;
    return pr;
}

static void lk_desc(const lk_problem *pr, dk_letkf_desc *d)
{
    dk_letkf_desc_init(d);
    d->members = pr->k;
    d->metric = pr->ocean ? DK_LETKF_SPHERE : DK_LETKF_CARTESIAN;
    d->ncoords = pr->ocean ? 3 : 2;
    d->radius = pr->radius;
    d->vertical_radius = pr->vradius;
}

/* The rank that holds observation j: the one whose points hold the point
 * nearest it (ocean: its latitude row; cluster: the nearest grid point). */
static int lk_holder(const lk_problem *pr, size_t j, const size_t *first, int size)
{
    double c[3];
    lk_obs(pr, j, c);
    size_t at;
    if (pr->ocean) {
        double row = floor((c[1] - pr->lat0) / pr->dlat);
        row = row < 0 ? 0 : row > (double)(pr->nlat - 1) ? (double)(pr->nlat - 1) : row;
        at = (size_t)row * pr->nlon * pr->nz;
    } else
        at = (size_t)lround(c[0]) * pr->side + (size_t)lround(c[1]);
    int lo = 0, hi = size - 1; /* the last rank whose first point is <= at */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* This rank's points [first[rank], first[rank + 1]) and the observations it
 * holds, in the form of a description (coordinates in s->gc, s->oc; their
 * global indices in *obs_index). */
static int lk_part(const lk_problem *pr, const size_t *first, int rank, int size, state *s, dk_letkf_desc *d,
                   size_t **obs_index)
{
    size_t p0 = first[rank], np = first[rank + 1] - p0, nc = pr->ocean ? 3 : 2, mo = 0;
    free(s->gc), free(s->oc);
    s->gc = malloc((np + 1) * nc * sizeof *s->gc);
    size_t *idx = malloc((pr->m + 1) * sizeof *idx);
    if (!s->gc || !idx) {
        free(idx);
        return 0;
    }
    for (size_t i = 0; i < np; i++)
        lk_point(pr, p0 + i, s->gc + i * nc);
    for (size_t j = 0; j < pr->m; j++)
        if (lk_holder(pr, j, first, size) == rank)
            idx[mo++] = j;
    s->oc = malloc((mo + 1) * nc * sizeof *s->oc);
    if (!s->oc) {
        free(idx);
        return 0;
    }
    for (size_t q = 0; q < mo; q++)
        lk_obs(pr, idx[q], s->oc + q * nc);
    lk_desc(pr, d);
    d->n = np, d->m = mo, d->grid_coords = s->gc, d->obs_coords = s->oc;
    *obs_index = idx;
    return 1;
}

/* The sampled points' check: dk_letkf_reference on them with every
 * observation within reach of any of them (in global order), against the
 * distributed analysis read back (xa, nobs); the largest error relative to
 * the ensemble's scale, as the conformance cases count it. */
static int lk_check(const lk_problem *pr, state *s, size_t p0, size_t np, const double *xa, const int32_t *nobs)
{
    const size_t k = pr->k, nc = pr->ocean ? 3 : 2, S = np < 48 ? np : 48;
    dk_letkf_desc d;
    lk_desc(pr, &d);
    dk_letkf_geometry g;
    memset(&g, 0, sizeof g);
    g.metric = (int)d.metric, g.ncoords = d.ncoords, g.vertical = d.vertical_radius > 0;
    g.hdims = pr->ocean ? 3 : 2, g.dims = g.hdims + g.vertical, g.radius = d.radius, g.vradius = d.vertical_radius;
    size_t *pick = malloc((S + 1) * sizeof *pick), *sel = malloc((pr->m + 1) * sizeof *sel), ms = 0;
    double *gc = malloc((S + 1) * nc * sizeof *gc), *pp = malloc((S + 1) * DK_LETKF_POS * sizeof *pp);
    if (!pick || !sel || !gc || !pp) {
        free(pick), free(sel), free(gc), free(pp);
        return 0;
    }
    for (size_t q = 0; q < S; q++) {
        pick[q] = q * np / S + (np / S) / 2;
        lk_point(pr, p0 + pick[q], gc + q * nc);
        dk_letkf_position(&g, gc + q * nc, pp + q * DK_LETKF_POS);
    }
    for (size_t j = 0; j < pr->m; j++) {
        double c[3], p[DK_LETKF_POS];
        lk_obs(pr, j, c);
        dk_letkf_position(&g, c, p);
        for (size_t q = 0; q < S; q++)
            if (dk_letkf_weight(&g, pp + q * DK_LETKF_POS, p) > 0) {
                sel[ms++] = j;
                break;
            }
    }
    double *oc = malloc((ms + 1) * nc * sizeof *oc), *xb = malloc((S * k + 1) * sizeof *xb);
    double *yb = malloc((ms * k + 1) * sizeof *yb), *yo = malloc((ms + 1) * sizeof *yo);
    double *r = malloc((ms + 1) * sizeof *r), *ref = malloc((S * k + 1) * sizeof *ref);
    int32_t *nref = malloc((S + 1) * sizeof *nref);
    int ok = oc && xb && yb && yo && r && ref && nref;
    for (size_t q = 0; ok && q < ms; q++) {
        lk_obs(pr, sel[q], oc + q * nc);
        for (size_t l = 0; l < k; l++)
            yb[q * k + l] = lk_yb(sel[q], l, k);
        yo[q] = lk_yo(sel[q]), r[q] = lk_r(sel[q]);
    }
    for (size_t q = 0; ok && q < S; q++)
        for (size_t l = 0; l < k; l++)
            xb[q * k + l] = lk_xb(p0 + pick[q], l, k);
    d.n = S, d.m = ms ? ms : 1, d.grid_coords = gc, d.obs_coords = oc;
    if (ok && ms == 0) { /* no observation near any sample: one far away, which weighs nothing */
        lk_obs(pr, 0, oc), yb[0] = 0, yo[0] = 0, r[0] = 1;
        for (size_t l = 0; l < k; l++)
            yb[l] = lk_yb(0, l, k);
    }
    ok = ok && dk_letkf_reference(&d, xb, yb, yo, r, ref, nref, NULL) == DK_OK;
    for (size_t q = 0; ok && q < S; q++) {
        double e = 0, scale = 0;
        for (size_t l = 0; l < k; l++) {
            e = fmax(e, fabs(xa[pick[q] * k + l] - ref[q * k + l]));
            scale = fmax(scale, fmax(fabs(xb[q * k + l]), fabs(ref[q * k + l])));
        }
        s->lk_err = fmax(s->lk_err, scale > 0 ? e / scale : e);
        s->lk_counts_bad += nobs[pick[q]] != nref[q];
    }
    s->lk_points += ok ? S : 0;
    free(pick), free(sel), free(gc), free(pp), free(oc), free(xb), free(yb), free(yo), free(r), free(ref), free(nref);
    return ok;
}

static dk_status setup_letkf_big(dk_context *ctx, state *s, int which, int rank, int size)
{
    lk_problem pr = lk_make(which, size);
    const size_t k = pr.k, rows = pr.ocean ? pr.nlat : pr.side, per_row = pr.ocean ? pr.nlon * pr.nz : pr.side;
    s->lk_n = pr.n, s->lk_m = pr.m, s->lk_k = k;
    s->lk_tol = 1e-10;
    size_t *first = malloc(((size_t)size + 1) * sizeof *first), *idx = NULL;
    if (!first)
        return DK_ERR_OUT_OF_MEMORY;
    for (int q = 0; q <= size; q++) /* bands of whole rows */
        first[q] = rows * (size_t)q / (size_t)size * per_row;
    dk_letkf_desc d;
    lk_desc(&pr, &d);
    dk_status st = DK_OK;
    if (!lk_part(&pr, first, rank, size, s, &d, &idx))
        st = DK_ERR_OUT_OF_MEMORY;
    if (st == DK_OK && which == OCEAN_CASE + 4) {
        /* the points cut again by cost: each rank's count of points per new owner, summed */
        int32_t *owner = malloc((d.n + 1) * sizeof *owner);
        uint64_t *per = calloc((size_t)size, sizeof *per);
        if (!owner || !per || (st = dk_mpi_letkf_balance(MPI_COMM_WORLD, &d, owner, NULL)) != DK_OK)
            st = st != DK_OK ? st : DK_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; st == DK_OK && i < d.n; i++)
            per[owner[i]]++;
        if (per)
            MPI_Allreduce(MPI_IN_PLACE, per, size, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        for (int q = 0; st == DK_OK && q < size; q++)
            first[q + 1] = first[q] + per[q];
        free(owner), free(per), free(idx);
        idx = NULL;
        if (st == DK_OK && !lk_part(&pr, first, rank, size, s, &d, &idx))
            st = DK_ERR_OUT_OF_MEMORY;
    }
    const size_t p0 = first[rank], np = d.n, mo = d.m;
    free(first);
    s->local = np;
    s->width = mo;
    s->x0 = malloc((np * k + 1) * sizeof(double));
    s->in = malloc((mo * k + 1) * sizeof(double));
    s->y = malloc((mo + 1) * sizeof *s->y);
    s->r = malloc((mo + 1) * sizeof *s->r);
    if (st == DK_OK && (!s->x0 || !s->in || !s->y || !s->r))
        st = DK_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; st == DK_OK && i < np; i++)
        for (size_t l = 0; l < k; l++)
            ((double *)s->x0)[i * k + l] = lk_xb(p0 + i, l, k);
    for (size_t q = 0; st == DK_OK && q < mo; q++) {
        for (size_t l = 0; l < k; l++)
            ((double *)s->in)[q * k + l] = lk_yb(idx[q], l, k);
        s->y[q] = lk_yo(idx[q]), s->r[q] = lk_r(idx[q]);
    }
    free(idx);
    /* every rank makes every collective call, whatever failed here */
    dk_status pst = dk_mpi_letkf_plan_create(ctx, MPI_COMM_WORLD, &d, &s->mplan);
    if (st == DK_OK)
        st = pst;
    if (st == DK_OK && (dk_buffer_create(ctx, np * k * 8 + 1, &s->din) != DK_OK ||
                        dk_buffer_create(ctx, mo * k * 8 + 1, &s->pb[1]) != DK_OK ||
                        dk_buffer_create(ctx, np * 4 + 1, &s->pb[3]) != DK_OK ||
                        dk_buffer_write(s->din, s->x0, np * k * 8) != DK_OK ||
                        dk_buffer_write(s->pb[1], s->in, mo * k * 8) != DK_OK))
        st = DK_ERR_OUT_OF_MEMORY;
    free(s->in);
    s->in = NULL;
    /* the plain call: one rank's part alone (ocean at one rank, ocean_weak at any) */
    s->lk_plain = (which == OCEAN_CASE && size == 1) || (which == OCEAN_CASE + 1 && size == 1) ||
                  which == OCEAN_CASE + 2;
    if (st == DK_OK && s->lk_plain && np && mo && dk_letkf_plan_create(ctx, &d, &s->plan) != DK_OK)
        st = DK_ERR_BACKEND;
    free(s->gc), free(s->oc);
    s->gc = s->oc = NULL;
    int bad = st != DK_OK, any;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any)
        return st != DK_OK ? st : DK_ERR_BACKEND;
    /* one analysis, checked on sampled points, and each rank's work from nobs */
    st = dk_mpi_letkf_execute(s->mplan, s->din, s->pb[1], s->y, s->r, s->din, s->pb[3], NULL);
    if (st != DK_OK)
        return st;
    int32_t *nobs = malloc((np + 1) * sizeof *nobs);
    bad = !nobs || dk_buffer_read(s->din, s->x0, np * k * 8) != DK_OK ||
          dk_buffer_read(s->pb[3], nobs, np * 4) != DK_OK || !lk_check(&pr, s, p0, np, s->x0, nobs);
    double work = 0;
    for (size_t i = 0; !bad && i < np; i++)
        work += nobs[i];
    s->lk_work = work;
    free(nobs);
    /* the analysis runs in place: the timed runs start from this analysis (the same cost) */
    free(s->x0);
    s->x0 = NULL;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return bad ? DK_ERR_OUT_OF_MEMORY : DK_OK;
}

/* Collective. 0, or 1 with the sentence in err (the same on every rank). */
static int setup(dk_context *ctx, int which, state *s, char *err, size_t len)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    memset(s, 0, sizeof *s);
    s->which = which;
    dk_mpi_part part;
    dk_status st;
    if (which >= FIRST_SCALING) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        st = which == 4 || which == 5 ? setup_gauss_scaling(ctx, s, which == 4, size)
             : which == 9             ? setup_letkf_weak(ctx, s, rank)
             : which == 6             ? setup_kmeans_weak(ctx, s, size, 3000000)
             : which == 8             ? setup_kmeans_weak(ctx, s, size, 30000000)
             : which == HUGE_CASE     ? setup_gauss_huge(ctx, s, size)
             : which >= OCEAN_CASE    ? setup_letkf_big(ctx, s, which, rank, size)
                                      : setup_enkf_weak(ctx, s, size);
        if (st != DK_OK)
            snprintf(err, len, "%s", dk_mpi_last_error()[0] ? dk_mpi_last_error() : dk_last_error(ctx));
    } else if (which == 0) {
        dk_gauss_desc g;
        dk_gauss_desc_init(&g);
        g.method = DK_GAUSS_RF;
        g.boundary = DK_BOUNDARY_ZERO;
        g.dtype = DK_F32;
        g.ndim = 2;
        g.shape[0] = g.shape[1] = 2048;
        g.axes = 3;
        g.sigma[0] = g.sigma[1] = 4;
        g.K = 4;
        dk_mpi_decompose(MPI_COMM_WORLD, 2, g.shape, NULL, &part);
        s->local = part.extent[0] * part.extent[1];
        s->in = malloc(s->local * 4 + 1);
        s->out = malloc(s->local * 4 + 1);
        cli_fill_random(s->in, DK_F32, s->local, 11 + part.offset[0]);
        st = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, &g, &part, &s->mplan);
        if (st == DK_OK && size == 1 && dk_gauss_plan_create(ctx, &g, &s->plan) != DK_OK)
            st = DK_ERR_BACKEND, snprintf(err, len, "%s", dk_last_error(ctx));
        else if (st != DK_OK)
            snprintf(err, len, "%s", dk_mpi_last_error());
    } else if (which == 1 || which == 2) {
        size_t n = 100000, L = 20, M = 256;
        double radius = 50;
        s->c = malloc(n * sizeof *s->c);
        s->values = malloc(4 * M * sizeof *s->values);
        s->indptr = malloc((M + 1) * sizeof *s->indptr);
        s->indices = malloc(4 * M * sizeof *s->indices);
        for (size_t k = 0; k < n; k++)
            s->c[k] = (double)k < radius ? 1.0 - (double)k / radius : 0.0;
        s->indptr[0] = 0;
        for (size_t j = 0; j < M; j++) { /* each observation averages 4 neighbouring points */
            size_t at = (size_t)((double)n * ((double)j + 0.5) / (double)M);
            for (size_t t = 0; t < 4; t++) {
                s->indices[4 * j + t] = (int64_t)(at + t < n ? at + t : n - 1 - t);
                s->values[4 * j + t] = 0.25;
            }
            s->indptr[j + 1] = (int64_t)(4 * j + 4);
        }
        dk_enkf_desc d;
        dk_enkf_desc_init(&d);
        d.n = n;
        d.members = L;
        d.loc = s->c;
        d.H = (dk_csr){M, n, s->indptr, s->indices, s->values};
        dk_mpi_decompose(MPI_COMM_WORLD, 1, &n, NULL, &part);
        s->local = part.extent[0];
        s->width = which == 1 ? M : L;
        s->x0 = malloc(s->local * L * 8 + 1);
        s->in = malloc(s->local * L * 8 + 1);
        s->out = malloc(s->local * M * 8 + 1);
        s->aux = malloc(M * M * 8);
        s->y = malloc(M * sizeof *s->y);
        s->r = malloc(M * sizeof *s->r);
        cli_fill_random(s->x0, DK_F64, s->local * L, 21 + part.offset[0]);
        for (size_t j = 0; j < M; j++)
            s->y[j] = 0.1 * (double)(j % 7), s->r[j] = 1.0;
        st = dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &s->mplan);
        if (st == DK_OK && size == 1 && dk_enkf_plan_create(ctx, &d, &s->plan) != DK_OK)
            st = DK_ERR_BACKEND, snprintf(err, len, "%s", dk_last_error(ctx));
        else if (st != DK_OK)
            snprintf(err, len, "%s", dk_mpi_last_error());
    } else {
        dk_kmeans_desc *d = &s->kd;
        dk_kmeans_desc_init(d);
        d->n = 1000000;
        d->d = 3;
        d->k = 8;
        d->max_iters = 10;
        dk_mpi_decompose(MPI_COMM_WORLD, 1, &d->n, NULL, &part);
        s->local = part.extent[0];
        s->in = malloc(s->local * 3 * sizeof(float) + 1);
        s->labels = malloc(s->local * sizeof *s->labels + 1);
        s->init = malloc(8 * 3 * sizeof *s->init);
        s->cent = malloc(8 * 3 * sizeof *s->cent);
        cli_fill_random(s->in, DK_F32, s->local * 3, 31 + part.offset[0]);
        for (int k = 0; k < 24; k++)
            s->init[k] = (float)(k / 3) / 4.0f - 1.0f + 0.01f * (float)(k % 3);
        st = dk_mpi_kmeans_plan_create(ctx, MPI_COMM_WORLD, d, &part, &s->mplan);
        if (st == DK_OK && size == 1 && dk_kmeans_plan_create(ctx, d, &s->plan) != DK_OK)
            st = DK_ERR_BACKEND, snprintf(err, len, "%s", dk_last_error(ctx));
        else if (st != DK_OK)
            snprintf(err, len, "%s", dk_mpi_last_error());
    }
    int bad = st != DK_OK, any;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !bad)
        snprintf(err, len, "the plain plan failed on another rank");
    return any;
}

/* One execute, distributed or plain; the analysis starts from the same
 * forecast each time (copied outside the timing by the caller's order). */
static dk_status run(state *s, int distributed)
{
    switch (s->which) {
    case 0:
        return distributed ? dk_mpi_gauss_execute_host(s->mplan, s->in, s->out)
                           : dk_gauss_execute_host(s->plan, s->in, s->out);
    case 1:
        return distributed ? dk_mpi_enkf_cov_host(s->mplan, s->x0, s->out, s->aux)
                           : dk_enkf_cov_host(s->plan, s->x0, s->out, s->aux);
    case 2:
        return distributed ? dk_mpi_enkf_analysis_host(s->mplan, s->in, s->y, s->r, 7, 1.0)
                           : dk_enkf_analysis_host(s->plan, s->in, s->y, s->r, 7, 1.0);
    case 3:
        return distributed ? dk_mpi_kmeans_execute_host(s->mplan, s->in, NULL, s->init, s->labels, s->cent, NULL)
                           : dk_kmeans_execute_host(s->plan, s->in, NULL, s->init, s->labels, s->cent, NULL);
    case 4:
    case 5:
        return distributed ? dk_mpi_gauss_execute(s->mplan, s->din, s->dout)
                           : dk_gauss_execute(s->plan, s->pb[0], s->pb[1]);
    case HUGE_CASE:
        return dk_mpi_gauss_execute(s->mplan, s->din, s->din);
    case 6:
    case 8:
        return distributed ? dk_mpi_kmeans_execute(s->mplan, s->pb[0], NULL, s->pb[2], s->dout, s->din, NULL)
                           : dk_kmeans_execute(s->plan, s->pb[0], NULL, s->pb[2], s->pb[3], s->pb[4], NULL);
    case OCEAN_CASE:
    case OCEAN_CASE + 1:
    case OCEAN_CASE + 2:
    case OCEAN_CASE + 3:
    case OCEAN_CASE + 4:
        if (!distributed)
            return s->plan ? dk_letkf_execute(s->plan, s->din, s->pb[1], s->y, s->r, s->din, NULL, NULL) : DK_OK;
        return dk_mpi_letkf_execute(s->mplan, s->din, s->pb[1], s->y, s->r, s->din, NULL, NULL);
    case 9:
        return distributed ? dk_mpi_letkf_execute(s->mplan, s->din, s->pb[1], s->y, s->r, s->dout, NULL, NULL)
                           : dk_letkf_execute(s->plan, s->pb[0], s->pb[1], s->y, s->r, s->pb[2], NULL, NULL);
    default:
        return distributed ? dk_mpi_enkf_cov(s->mplan, s->din, s->dout, s->pb[3])
                           : dk_enkf_cov(s->plan, s->pb[0], s->pb[1], s->pb[2]);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *t, int n)
{
    double c[MAX_RUNS];
    memcpy(c, t, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    return n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
}

static int bench_under_mpi(const char *backend, const char *case_s, double min_time, int max_runs)
{
    int own = 0, inited = 0, rank, size;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_Init(NULL, NULL);
        own = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    dist_choose_device(backend);
    dk_context *ctx = NULL;
    char err[4400] = "";
    int failed = dk_context_create(backend, &ctx) != DK_OK;
    if (failed)
        snprintf(err, sizeof err, "rank %d of %d: %s", rank, size, dk_last_error(NULL));
    if (dist_agree(failed, err, sizeof err)) {
        cli_error("bench", 1, "%s", err);
        dk_context_destroy(ctx);
        if (own)
            MPI_Finalize();
        return 1;
    }
    if (rank == 0) {
        printf("dakit bench --ranks %d: backend %s (rank 0: %s); per run the time from a barrier to the slowest "
               "rank's return\n",
               size, dk_context_backend(ctx), dk_context_device(ctx));
        printf("%-14s %5s %11s %11s %11s %9s\n", "case", "ranks", "median ms", "comm ms", "plain ms", "overhead");
    }
    int ran = 0, wrong = 0;
    for (int c = 0; c < NCASES; c++) {
        /* the scaling cases are large: they run when named */
        if (!cli_in_list(case_s, cases[c].name) || (c >= FIRST_SCALING && !case_s))
            continue;
        state s;
        if (setup(ctx, c, &s, err, sizeof err)) {
            if (rank == 0)
                printf("%-14s skipped: %s\n", cases[c].name, err);
            release(&s);
            continue;
        }
        double tm[MAX_RUNS], tp[MAX_RUNS], td[MAX_RUNS], mine[MAX_RUNS];
        int n = 0, bad = 0, stop = 0;
        double start = 0;
        dk_mpi_stats stats = {0, 0};
        for (int r = -1; !stop; r++) {
            int plain_too = c >= OCEAN_CASE ? s.lk_plain : c != HUGE_CASE && (size == 1 || c >= FIRST_SCALING);
            for (int k = 0; k < (plain_too ? 2 : 1); k++) {
                /* the two calls alternate, which goes first too */
                int distributed = !plain_too || (k == 0) == (r % 2 == 0);
                if (s.which == 2)
                    memcpy(s.in, s.x0, s.local * 20 * 8);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                bad |= run(&s, distributed) != DK_OK;
                double t = MPI_Wtime() - t0, tmax;
                MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (r >= 0) {
                    (distributed ? tm : tp)[r] = tmax;
                    if (distributed)
                        mine[r] = t;
                }
            }
            if (r < 0) { /* after the warm-up */
                dk_mpi_plan_stats_reset(s.mplan);
                start = MPI_Wtime();
            } else {
                td[r] = plain_too ? tm[r] - tp[r] : 0;
                n = r + 1;
            }
            /* rank 0 decides when to stop, so every rank runs as often */
            stop = bad || n >= max_runs || (n >= 3 && MPI_Wtime() - start >= min_time);
            MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
        }
        int any;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) {
            if (rank == 0)
                printf("%-14s failed: %s\n", cases[c].name, dk_mpi_last_error());
            release(&s);
            continue;
        }
        /* gauss and enkf on device buffers queue their collectives: their
         * own time comes from a few more runs with profile on (not in the
         * medians) */
        int profiled = c == 4 || c == 5 || c == 7 || c == HUGE_CASE, np = n < 5 ? n : 5;
        if (profiled) {
            dk_mpi_plan_set_profile(s.mplan, 1);
            dk_mpi_plan_stats_reset(s.mplan);
            for (int r = 0; r < np; r++)
                bad |= run(&s, 1) != DK_OK;
            dk_mpi_plan_set_profile(s.mplan, 0);
        }
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) {
            if (rank == 0)
                printf("%-14s failed: %s\n", cases[c].name, dk_mpi_last_error());
            release(&s);
            continue;
        }
        dk_mpi_plan_stats(s.mplan, &stats);
        int per = profiled ? np : n; /* the runs the communication was counted over */
        /* per rank: its own median execute and its communication per run */
        double row[4] = {median(mine, n), stats.comm_seconds / per, (double)stats.comm_calls / per, s.lk_work};
        double *all = rank == 0 ? malloc((size_t)size * 4 * sizeof *all) : NULL;
        MPI_Gather(row, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double lk[3] = {s.lk_err, (double)s.lk_counts_bad, (double)s.lk_points};
        if (c >= OCEAN_CASE) {
            MPI_Allreduce(MPI_IN_PLACE, &lk[0], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, &lk[1], 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        if (rank == 0) {
            double med = median(tm, n), commax = 0;
            for (int q = 0; q < size; q++)
                commax = fmax(commax, all[4 * q + 1]);
            if (c >= OCEAN_CASE && s.lk_plain) {
                double plain = median(tp, n);
                printf("%-14s %5d %11.3f %11.3f %11.3f %8.3f %s\n", cases[c].name, size, med * 1e3, commax * 1e3,
                       plain * 1e3, plain / med, c == OCEAN_CASE + 2 ? "efficiency" : "plain / distributed");
            } else if (c >= OCEAN_CASE) {
                printf("%-14s %5d %11.3f %11.3f %11s %9s\n", cases[c].name, size, med * 1e3, commax * 1e3, "-", "-");
            } else if (c == HUGE_CASE) {
                printf("%-14s %5d %11.3f %11.3f %11s %9s\n", cases[c].name, size, med * 1e3, commax * 1e3, "-", "-");
            } else if (c >= FIRST_SCALING) {
                double plain = median(tp, n);
                printf("%-14s %5d %11.3f %11.3f %11.3f %8.3f %s\n", cases[c].name, size, med * 1e3, commax * 1e3,
                       plain * 1e3, plain / med, c == 5 ? "speedup" : "efficiency");
            } else if (size == 1) {
                double plain = median(tp, n), diff = median(td, n);
                printf("%-14s %5d %11.3f %11.3f %11.3f %+8.2f%%\n", cases[c].name, size, med * 1e3, commax * 1e3,
                       plain * 1e3, 100.0 * diff / plain);
            } else
                printf("%-14s %5d %11.3f %11.3f %11s %9s\n", cases[c].name, size, med * 1e3, commax * 1e3, "-", "-");
            if (c >= OCEAN_CASE) {
                double wmax = 0, wsum = 0, tmax = 0, tsum = 0;
                for (int q = 0; q < size; q++) {
                    wmax = fmax(wmax, all[4 * q + 3]), wsum += all[4 * q + 3];
                    /* a rank's own work: its execute less its time in MPI calls, waiting for the others included */
                    double own = all[4 * q] - all[4 * q + 1];
                    tmax = fmax(tmax, own), tsum += own;
                }
                printf("  N %zu points, M %zu observations, k %zu; %.1f observations a point\n", s.lk_n, s.lk_m,
                       s.lk_k, wsum / (double)s.lk_n);
                printf("  work per rank (observations used summed over its points): max / mean %.3f; compute time "
                       "(execute less communication) max / mean %.3f\n",
                       wsum > 0 ? wmax / (wsum / size) : 0, tsum > 0 ? tmax / (tsum / size) : 0);
                printf("  check against dk_letkf_reference on %.0f sampled points: max error %.3g of the ensemble's "
                       "scale (tolerance %.3g), %.0f observation counts differ: %s\n",
                       lk[2], lk[0], s.lk_tol, lk[1],
                       lk[0] <= s.lk_tol && lk[1] == 0 && lk[2] > 0 ? "ok" : "FAILED, the distributed result is wrong");
            }
            printf("  crossing ranks: %s; split axes: %s\n", dk_mpi_plan_transport(s.mplan),
                   dk_mpi_gauss_plan_path(s.mplan) ? dk_mpi_gauss_plan_path(s.mplan) : "-");
            if (c == HUGE_CASE) {
                double gib = (double)(s.huge_shape[0] * s.huge_shape[1] * 4) / (1024.0 * 1024 * 1024);
                printf("  field %zu x %zu float32, %.2f GiB", s.huge_shape[0], s.huge_shape[1], gib);
                if (s.huge_ratio > 0)
                    printf(", %.2f times one device's memory", s.huge_ratio);
                else
                    printf(" (a CPU device: the small size)");
                printf("\n  check against the serial reference on %d rows and %d columns: max error %.3g of max |x| "
                       "(tolerance %.3g): %s\n",
                       s.huge_rows, s.huge_cols, s.huge_err, s.huge_tol,
                       s.huge_err <= s.huge_tol ? "ok" : "FAILED, the distributed result is wrong");
            }
            for (int q = 0; q < size; q++)
                printf("  rank %-3d execute %9.3f ms (median of %d runs), communication %9.3f ms a run (%.0f calls%s)%s",
                       q, all[4 * q] * 1e3, n, all[4 * q + 1] * 1e3, all[4 * q + 2],
                       profiled ? ", timed alone in more runs" : "", c >= OCEAN_CASE ? "" : "\n"),
                    c >= OCEAN_CASE ? printf(", work %.0f observations used\n", all[4 * q + 3]) : 0;
            fflush(stdout);
        }
        if (c == HUGE_CASE && !(s.huge_err <= s.huge_tol))
            wrong = 1;
        if (c >= OCEAN_CASE && !(lk[0] <= s.lk_tol && lk[1] == 0 && lk[2] > 0))
            wrong = 1;
        free(all);
        release(&s);
        ran++;
    }
    if (rank == 0)
        printf("%s\n", "overhead (one rank): the median over runs of (distributed - plain) / the plain median; "
                       "scaling cases: plain / distributed. comm ms: the slowest rank's time in communication a run; "
                       "gauss and enkf on device buffers queue their collectives on the device, so theirs is timed alone in "
                       "more runs (dk_mpi_plan_set_profile), not inside the medians");
    dk_context_destroy(ctx);
    if (own)
        MPI_Finalize();
    return ran && !wrong ? 0 : 1;
}

int bench_ranks(int ranks, int argc, char **argv, const char *backend_s, const char *case_s, double min_time,
                int max_runs)
{
    /* every name a distributed case, said before mpirun starts anything */
    for (const char *q = case_s; q && *q;) {
        size_t len = strcspn(q, ",");
        int known = 0;
        for (int c = 0; c < NCASES && !known; c++)
            known = strlen(cases[c].name) == len && !strncmp(q, cases[c].name, len);
        if (!known) {
            char names[1024] = "";
            for (int c = 0; c < NCASES; c++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", c ? ", " : "", cases[c].name);
            return cli_error("bench", 2, "--ranks: '%.*s' is not a distributed case; they are: %s", (int)len, q,
                             names);
        }
        q += len + (q[len] == ',');
    }
    int launched = dist_launched_size();
    if (!launched)
        return dist_relaunch("bench", ranks, argc, argv);
    if (launched != ranks)
        return cli_error("bench", 2, "--ranks %d but mpirun started %d ranks", ranks, launched);
    const char *backend = strcmp(backend_s, "all") ? backend_s : NULL;
    return bench_under_mpi(backend, case_s, min_time, max_runs > MAX_RUNS ? MAX_RUNS : max_runs);
}

void bench_ranks_usage(FILE *f)
{
    for (int c = 0; c < NCASES; c++)
        fprintf(f, "  --ranks %-13s %s\n", cases[c].name, cases[c].what);
}
#else
int bench_ranks(int ranks, int argc, char **argv, const char *backend_s, const char *case_s, double min_time,
                int max_runs)
{
    (void)ranks, (void)argc, (void)argv, (void)backend_s, (void)case_s, (void)min_time, (void)max_runs;
    return cli_error("bench", 77, "--ranks needs libdakit-mpi, which this build lacks (MPI was not found)");
}

void bench_ranks_usage(FILE *f) { (void)f; }
#endif
