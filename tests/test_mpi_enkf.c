/* Distributed enkf (libdakit-mpi) against the single-process reference.
 * Run under mpirun with any number of ranks:
 *   mpirun -n P test_mpi_enkf BACKEND
 * Every rank computes dk_enkf_cov_reference / dk_enkf_analysis_reference on
 * the whole problem and compares its own rows of the distributed result.
 *
 * Tolerances. cov: error = max |PHT - ref| / S, where S is the largest sum
 * of the magnitudes of the terms one entry of PHT adds,
 * S_ij = 1/(L-1) sum_t |C[i,k_t]| sum_l |e_il e_k_t,l| |H_t| (and for HPHT
 * the same magnitudes carried through H). Evaluating a sum of n terms in
 * another order changes it by at most (n-1) eps S (Higham, ch. 4), and the
 * bounds of nested sums add (HPHT: its own row's terms plus those of the
 * PHT entries it sums); here n <= L * (nonzeros of a row of H, at most 81)
 * + 81 + ranks < 1750, so reordering (other variants on the windows, the
 * ranks' partial sums added by MPI) stays below 1750 * 1.1e-16 = 1.9e-13
 * of S, and the float64 bound asked of the layer, 1e-12 of S, holds with a
 * margin of 5; a missing term (a halo one point short) costs its own size,
 * c[rx] times its products, far above that in these data. analysis: error =
 * max |Xa - ref| / max |Xa_ref - X|, the update's size; the M x M solve
 * multiplies rounding by cond(HPHT + R) <= 1 + max_a HPHT_aa / min r, so
 * rounding gives at most about 256 eps cond, which each case prints; the
 * data keep cond below 35, where that is below 1e-12, the tolerance used.
 * float32 data: the tolerances of the single-process conformance cases
 * (tools/enkf/conform.c): 64 eps32 of S for cov, 256 eps32 cond for the
 * analysis, whose error is divided by max(update, 1) since the rounding of
 * float32 states is relative to the state, not to the update.
 *
 * Then bad input on one rank (or mismatched ranks) must give every rank the
 * same status and the same sentence, without a hang (an alarm ends a rank
 * that waits too long; meson's timeout ends mpirun).
 * `test_mpi_enkf --skip REASON` prints the reason and exits 77. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_check.h"


typedef enum { SLABS, UNEVEN, TILES, SLABS_Y } layout;
static const char *const layout_names[] = {"slabs", "uneven slabs (1, 3, 5, ... rows, the last the rest)",
                                           "tiles", "slabs along ny"};

typedef enum { LINEAR, WENDLAND, GAUSSIAN } taper;

typedef struct tcase {
    const char *name;
    int ndim;
    size_t n, nx, ny; /* 1-D: n; 2-D: nx x ny */
    size_t L, M;
    taper shape;
    double radius; /* LINEAR, WENDLAND: c = 0 from this distance on; GAUSSIAN: the length scale */
    layout lay;
    const char *variant;
} tcase;

static const tcase cases[] = {
    {"1d_n50_L2_M1", 1, 50, 0, 0, 2, 1, LINEAR, 6, SLABS, NULL},
    /* fewer rows than ranks at 4 ranks: an empty part */
    {"1d_n3_empty_part", 1, 3, 0, 0, 3, 4, LINEAR, 2, SLABS, NULL},
    {"1d_n400_L5_M16", 1, 400, 0, 0, 5, 16, WENDLAND, 13, SLABS, NULL},
    {"1d_n2000_L20_M64", 1, 2000, 0, 0, 20, 64, WENDLAND, 41, SLABS, NULL},
    /* ranks of 1, 3, 5 rows under a halo of 30: the window spans ranks */
    {"1d_thin_parts_r30", 1, 600, 0, 0, 8, 24, LINEAR, 31, UNEVEN, NULL},
    {"1d_banded_r20", 1, 1000, 0, 0, 10, 32, WENDLAND, 21, SLABS, "banded"},
    {"1d_tiled_r5", 1, 120, 0, 0, 3, 9, LINEAR, 6, SLABS, "tiled"},
    /* full support: every window is the whole state (single-rank work) */
    {"1d_full_gaussian", 1, 300, 0, 0, 6, 10, GAUSSIAN, 20, SLABS, NULL},
    {"2d_tiles_24x30", 2, 0, 24, 30, 8, 20, WENDLAND, 5, TILES, NULL},
    {"2d_tiles_12x14_wide", 2, 0, 12, 14, 4, 12, WENDLAND, 9, TILES, NULL},
    {"2d_slabs_y_16x40", 2, 0, 16, 40, 6, 12, LINEAR, 4, SLABS_Y, NULL},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- data ---- */

static uint64_t next(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15u);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static double uniform(uint64_t *s) /* [-1, 1) */
{
    return (double)(next(s) >> 11) * 0x1p-52 - 1.0;
}

static double taper_at(const tcase *c, double d)
{
    double q = d / c->radius;
    switch (c->shape) {
    case LINEAR:
        return q < 1 ? 1 - q : 0;
    case WENDLAND: /* (1 - q)^4 (1 + 4q), zero from q = 1 on */
        return q < 1 ? (1 - q) * (1 - q) * (1 - q) * (1 - q) * (1 + 4 * q) : 0;
    case GAUSSIAN:
        return exp(-0.5 * q * q);
    }
    return 0;
}

typedef struct problem {
    dk_enkf_desc d;
    double *loc, *values;
    int64_t *indptr, *indices;
    size_t N;
} problem;

/* State rows that fall on the parts' edges for 1 to 4 ranks in the
 * layouts used (slabs, uneven slabs, tiles), and the ends. */
static size_t edges(const tcase *c, size_t *out)
{
    size_t k = 0, N = c->ndim == 1 ? c->n : c->nx * c->ny;
    out[k++] = 0;
    out[k++] = N - 1;
    if (c->ndim == 1) {
        for (size_t p = 2; p <= 4; p++)
            for (size_t q = 1; q < p; q++) {
                size_t b = q * (N / p) + (q < N % p ? q : N % p);
                out[k++] = b - 1;
                out[k++] = b;
            }
        for (size_t b = 1, step = 3; b < N && step < 9; b += step, step += 2) {
            out[k++] = b - 1;
            out[k++] = b;
        }
    } else {
        for (size_t p = 2; p <= 4; p++)
            for (size_t q = 1; q < p; q++) {
                size_t bx = q * (c->nx / p) + (q < c->nx % p ? q : c->nx % p);
                size_t by = q * (c->ny / p) + (q < c->ny % p ? q : c->ny % p);
                out[k++] = (bx - 1) * c->ny + by - 1; /* the corner of four tiles */
                out[k++] = bx * c->ny + by;
                out[k++] = bx * c->ny + c->ny / 3;
                out[k++] = (c->nx / 3) * c->ny + by;
            }
    }
    return k;
}

/* c (or c2) and a sparse H of M rows: empty rows, single points on the
 * parts' edges, pairs that straddle an edge, interpolation weights between
 * neighbours, repeated entries, random rows, and footprints (averages over
 * the 81 state rows around an edge, clipped, which meet the far end of
 * C's support from many rows). The same on every rank and for every rank
 * count. */
static void make_problem(const tcase *c, dk_dtype t, problem *p)
{
    memset(p, 0, sizeof *p);
    size_t N = c->ndim == 1 ? c->n : c->nx * c->ny, M = c->M;
    p->N = N;
    p->loc = malloc(N * sizeof *p->loc);
    if (c->ndim == 1)
        for (size_t k = 0; k < N; k++)
            p->loc[k] = taper_at(c, (double)k);
    else
        for (size_t a = 0; a < c->nx; a++)
            for (size_t b = 0; b < c->ny; b++)
                p->loc[a * c->ny + b] = taper_at(c, sqrt((double)(a * a + b * b)));
    size_t edge[64], nedge = edges(c, edge);
    p->indptr = malloc((M + 1) * sizeof *p->indptr);
    p->indices = malloc(M * 81 * sizeof *p->indices);
    p->values = malloc(M * 81 * sizeof *p->values);
    uint64_t s = 0x5eed0000u + (uint64_t)N * 131 + M;
    size_t u = 0;
    p->indptr[0] = 0;
#define ADD(col, val) (p->indices[u] = (int64_t)(col), p->values[u++] = (val))
    for (size_t j = 0; j < M; j++) {
        size_t e = edge[(j * 7) % nedge], r = next(&s) % N;
        switch (M == 1 ? 2 : j % 7) {
        case 0: /* empty */
            break;
        case 1:
            ADD(e, 1.0);
            break;
        case 2: /* a pair straddling an edge */
            ADD(e > 0 ? e - 1 : e + 1, 0.5 + 0.25 * uniform(&s));
            ADD(e, 0.5 + 0.25 * uniform(&s));
            break;
        case 3: { /* interpolation between neighbours */
            double w = 0.5 + 0.5 * uniform(&s);
            ADD(r, w);
            ADD(r + 1 < N ? r + 1 : r - 1, 1 - w);
            break;
        }
        case 4: /* a repeated entry (they add), in unsorted order */
            ADD(r, 0.7);
            ADD(e, uniform(&s));
            ADD(r, -0.3);
            break;
        case 5: /* random columns */
            for (size_t k = 1 + next(&s) % 5; k > 0; k--)
                ADD(next(&s) % N, uniform(&s));
            break;
        default: { /* a footprint */
            size_t w = 40, lo = e > w ? e - w : 0, hi = e + w < N ? e + w : N - 1;
            for (size_t k = lo; k <= hi; k++)
                ADD(k, 1.0 / (double)(hi - lo + 1));
        }
        }
        p->indptr[j + 1] = (int64_t)u;
    }
#undef ADD
    dk_enkf_desc_init(&p->d);
    p->d.dtype = t;
    p->d.n = N;
    p->d.members = c->L;
    p->d.loc_ndim = c->ndim;
    p->d.nx = c->nx;
    p->d.ny = c->ny;
    p->d.loc = p->loc;
    p->d.H = (dk_csr){M, N, p->indptr, p->indices, p->values};
    p->d.variant = c->variant;
}

static void free_problem(problem *p)
{
    free(p->loc);
    free(p->values);
    free(p->indptr);
    free(p->indices);
}

static double get(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

static void put(void *p, dk_dtype t, size_t k, double v)
{
    if (t == DK_F32)
        ((float *)p)[k] = (float)v;
    else
        ((double *)p)[k] = v;
}

/* ---- parts ---- */

static int largest_divisor_below_sqrt(int n)
{
    int p = 1;
    for (int d = 1; d * d <= n; d++)
        if (n % d == 0)
            p = d;
    return p;
}

static void part_of(const tcase *c, dk_mpi_part *part)
{
    memset(part, 0, sizeof *part);
    if (c->lay == UNEVEN) {
        size_t off = 0;
        for (int r = 0; r < size; r++) {
            size_t e = r == size - 1 ? c->n - off : (size_t)(1 + 2 * r);
            if (r == rank) {
                part->offset[0] = off;
                part->extent[0] = e;
            }
            off += e;
        }
        return;
    }
    int grid[2] = {size, 1};
    size_t shape[2] = {c->ndim == 1 ? c->n : c->nx, c->ny};
    if (c->lay == TILES) {
        grid[1] = largest_divisor_below_sqrt(size);
        grid[0] = size / grid[1];
    } else if (c->lay == SLABS_Y) {
        grid[0] = 1;
        grid[1] = size;
    }
    if (dk_mpi_decompose(MPI_COMM_WORLD, c->ndim, shape, grid, part) != DK_OK) {
        fprintf(stderr, "rank %d: dk_mpi_decompose: %s\n", rank, dk_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* The global state rows of this rank's points, in the local order. */
static size_t *rows_of(const tcase *c, const dk_mpi_part *part, size_t *count)
{
    size_t n0 = part->extent[0], n1 = c->ndim == 1 ? 1 : part->extent[1];
    size_t count0 = n0 * n1, *rows = malloc((count0 ? count0 : 1) * sizeof *rows);
    for (size_t a = 0; a < n0; a++)
        for (size_t b = 0; b < n1; b++)
            rows[a * n1 + b] = c->ndim == 1 ? part->offset[0] + a
                                            : (part->offset[0] + a) * c->ny + part->offset[1] + b;
    *count = n0 * n1;
    return rows;
}

static void gather_rows(void *local, const void *global, const size_t *rows, size_t count, size_t width,
                        size_t esize)
{
    for (size_t k = 0; k < count; k++)
        memcpy((char *)local + k * width * esize, (const char *)global + rows[k] * width * esize, width * esize);
}

static double max_all(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* ---- the scales of the sums (see the top) ---- */

static double loc_of(const problem *p, size_t i, size_t k)
{
    if (p->d.loc_ndim == 1)
        return p->loc[i > k ? i - k : k - i];
    size_t ny = p->d.ny, ix = i / ny, iy = i % ny, kx = k / ny, ky = k % ny;
    return p->loc[(ix > kx ? ix - kx : kx - ix) * ny + (iy > ky ? iy - ky : ky - iy)];
}

static void scales(const problem *p, const void *e, double *s_pht, double *s_hpht)
{
    size_t N = p->N, L = p->d.members, M = p->d.H.rows;
    dk_dtype t = p->d.dtype;
    double *S = calloc(N * M, sizeof *S), smax = 0, hmax = 0;
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t q = p->indptr[j]; q < p->indptr[j + 1]; q++) {
                size_t k = (size_t)p->indices[q];
                double c = fabs(loc_of(p, i, k));
                if (c == 0)
                    continue;
                double dot = 0;
                for (size_t l = 0; l < L; l++)
                    dot += fabs(get(e, t, i * L + l) * get(e, t, k * L + l));
                sum += c * dot * fabs(p->values[q]);
            }
            S[i * M + j] = sum / (double)(L - 1);
            smax = fmax(smax, S[i * M + j]);
        }
    for (size_t a = 0; a < M; a++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t q = p->indptr[a]; q < p->indptr[a + 1]; q++)
                sum += fabs(p->values[q]) * S[(size_t)p->indices[q] * M + j];
            hmax = fmax(hmax, sum);
        }
    free(S);
    *s_pht = smax > 0 ? smax : 1;
    *s_hpht = hmax > 0 ? hmax : 1;
}

/* ---- one case ---- */

static void report(int ok, const char *name, dk_dtype t, const char *what, double err, double tol, const char *why)
{
    ok = all_ranks(ok && !isnan(err) && err <= tol);
    if (rank == 0)
        printf("%-4s %-22s %s %-22s error %.3g (tolerance %.3g)%s%s\n", ok ? "ok" : "FAIL", name, dk_dtype_name(t),
               what, err, tol, why[0] ? " " : "", why);
    else if (!ok && why[0])
        fprintf(stderr, "rank %d: %s %s: %s\n", rank, name, what, why);
    failures += !ok;
}

static void run_case(dk_context *ctx, const tcase *c, dk_dtype t)
{
    problem p;
    make_problem(c, t, &p);
    size_t N = p.N, L = c->L, M = c->M, es = dk_dtype_size(t);
    double eps = t == DK_F64 ? 0x1p-53 : 0x1p-24;
    dk_mpi_part part;
    part_of(c, &part);
    size_t own, *rows = rows_of(c, &part, &own);

    /* anomalies (zero member mean is not required by the definition) and a
     * forecast ensemble */
    void *E = malloc(N * L * es), *X = malloc(N * L * es);
    uint64_t s = 0xe0000u + N + 17 * M;
    for (size_t k = 0; k < N * L; k++) {
        put(E, t, k, 0.6 * uniform(&s));
        put(X, t, k, 2.0 + 1.5 * uniform(&s) + 0.3 * sin((double)(k / L) * 0.05));
    }
    double *y = malloc(M * sizeof *y), *r = malloc(M * sizeof *r);
    for (size_t j = 0; j < M; j++) {
        y[j] = 2.0 + uniform(&s);
        r[j] = 1.0 + 0.5 * uniform(&s);
    }

    void *pht_ref = malloc(N * M * es), *hpht_ref = malloc(M * M * es);
    int ok = dk_enkf_cov_reference(&p.d, E, pht_ref, hpht_ref) == DK_OK;
    double s_pht = 1, s_hpht = 1;
    scales(&p, E, &s_pht, &s_hpht);

    void *e_loc = malloc((own ? own : 1) * L * es), *pht = malloc((own ? own : 1) * M * es);
    void *mine = malloc((own ? own : 1) * M * es), *hpht = malloc(M * M * es);
    gather_rows(e_loc, E, rows, own, L, es);
    gather_rows(mine, pht_ref, rows, own, M, es);

    dk_mpi_plan *plan = NULL;
    char why[1200] = "";
    dk_status st = dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, &p.d, &part, &plan);
    if (st != DK_OK) {
        snprintf(why, sizeof why, "plan: %s", dk_mpi_last_error());
        ok = 0;
    }
    double cov_tol = t == DK_F64 ? 1e-12 : 64 * eps;

    /* cov, with HPHT and without (poisoned outputs: a value never written
     * shows up) */
    for (int with = 1; with >= 0 && plan; with--) {
        memset(pht, 0xff, (own ? own : 1) * M * es);
        memset(hpht, 0xff, M * M * es);
        double e1 = INFINITY, e2 = 0;
        st = dk_mpi_enkf_cov_host(plan, e_loc, pht, with ? hpht : NULL);
        if (st != DK_OK) {
            snprintf(why, sizeof why, "cov: %s", dk_mpi_last_error());
        } else {
            e1 = 0;
            for (size_t k = 0; k < own * M; k++) {
                double d = fabs(get(pht, t, k) - get(mine, t, k));
                e1 = d > e1 || isnan(d) ? d : e1;
            }
            for (size_t k = 0; with && k < M * M; k++) {
                double d = fabs(get(hpht, t, k) - get(hpht_ref, t, k));
                e2 = d > e2 || isnan(d) ? d : e2;
            }
        }
        double err = max_all(fmax(e1 / s_pht, e2 / s_hpht));
        report(ok && st == DK_OK, c->name, t, with ? "cov (PHT and HPHT)" : "cov (PHT, hpht NULL)", err, cov_tol,
               why);
    }

    /* the device-buffer entry points give the host ones' bits */
    if (plan) {
        dk_buffer *be = NULL, *bp = NULL, *bh = NULL, *bx = NULL;
        size_t ob = (own ? own : 1) * es;
        void *back = malloc(ob * (M > L ? M : L)), *hback = malloc(M * M * es), *xh = malloc(ob * L);
        int same = dk_buffer_create(ctx, ob * L, &be) == DK_OK && dk_buffer_create(ctx, ob * M, &bp) == DK_OK &&
                   dk_buffer_create(ctx, M * M * es, &bh) == DK_OK && dk_buffer_create(ctx, ob * L, &bx) == DK_OK &&
                   dk_buffer_write(be, e_loc, ob * L) == DK_OK;
        st = dk_mpi_enkf_cov(plan, be, bp, bh);
        same &= st == DK_OK && dk_mpi_enkf_cov_host(plan, e_loc, pht, hpht) == DK_OK &&
                dk_buffer_read(bp, back, ob * M) == DK_OK && dk_buffer_read(bh, hback, M * M * es) == DK_OK &&
                !memcmp(back, pht, own * M * es) && !memcmp(hback, hpht, M * M * es);
        gather_rows(xh, X, rows, own, L, es);
        same &= dk_buffer_write(bx, xh, ob * L) == DK_OK &&
                dk_mpi_enkf_analysis(plan, bx, y, r, 5, 1.02) == DK_OK &&
                dk_mpi_enkf_analysis_host(plan, xh, y, r, 5, 1.02) == DK_OK && dk_buffer_read(bx, back, ob * L) == DK_OK &&
                !memcmp(back, xh, own * L * es);
        report(same, c->name, t, "device = host entries", same ? 0 : 1, 0, st == DK_OK ? "" : dk_mpi_last_error());
        dk_buffer_destroy(be), dk_buffer_destroy(bp), dk_buffer_destroy(bh), dk_buffer_destroy(bx);
        free(back), free(hback), free(xh);
    }

    /* analysis with inflation 1 and 1.05 */
    double cond = 1, rmin = INFINITY;
    for (size_t j = 0; j < M; j++)
        rmin = fmin(rmin, r[j]);
    static const double inflations[2] = {1.0, 1.05};
    for (int k = 0; k < 2 && plan; k++) {
        double infl = inflations[k];
        uint64_t seed = 1000 + 77 * (uint64_t)k;
        /* cond(HPHT + R) of the inflated forecast: HPHT from its anomalies */
        void *xref = malloc(N * L * es), *a = malloc(N * L * es), *h = malloc(M * M * es),
             *ph = malloc(N * M * es);
        memcpy(xref, X, N * L * es);
        for (size_t i = 0; i < N; i++) {
            double mean = 0;
            for (size_t l = 0; l < L; l++)
                mean += get(X, t, i * L + l);
            mean /= (double)L;
            for (size_t l = 0; l < L; l++)
                put(a, t, i * L + l, infl * (get(X, t, i * L + l) - mean));
        }
        int good = ok && dk_enkf_cov_reference(&p.d, a, ph, h) == DK_OK &&
                   dk_enkf_analysis_reference(&p.d, xref, y, r, seed, infl) == DK_OK;
        for (size_t j = 0; j < M; j++)
            cond = fmax(cond, 1 + fabs(get(h, t, j * M + j)) / rmin);
        double upd = 0;
        for (size_t q = 0; q < N * L; q++)
            upd = fmax(upd, fabs(get(xref, t, q) - get(X, t, q)));
        if (upd == 0)
            upd = 1;
        void *x_loc = malloc((own ? own : 1) * L * es), *x_mine = malloc((own ? own : 1) * L * es);
        gather_rows(x_loc, X, rows, own, L, es);
        gather_rows(x_mine, xref, rows, own, L, es);
        st = dk_mpi_enkf_analysis_host(plan, x_loc, y, r, seed, infl);
        double err = INFINITY;
        if (st != DK_OK) {
            snprintf(why, sizeof why, "analysis: %s", dk_mpi_last_error());
        } else {
            err = 0;
            for (size_t q = 0; q < own * L; q++) {
                double d = fabs(get(x_loc, t, q) - get(x_mine, t, q));
                err = d > err || isnan(d) ? d : err;
            }
            err /= t == DK_F32 ? fmax(upd, 1.0) : upd;
        }
        err = max_all(err);
        double tol = t == DK_F64 ? 1e-12 : 256 * eps * cond;
        char what[64];
        snprintf(what, sizeof what, "analysis infl %.2f", infl);
        char detail[1300];
        snprintf(detail, sizeof detail, "(cond <= %.3g)%s%s", cond, why[0] ? " " : "", why);
        if (t == DK_F64 && 256 * eps * cond > 1e-12) {
            snprintf(detail, sizeof detail, "cond %.3g is too large for the tolerance of 1e-12: fix the data", cond);
            good = 0;
        }
        report(good && st == DK_OK, c->name, t, what, err, tol, detail);
        free(xref);
        free(a);
        free(h);
        free(ph);
        free(x_loc);
        free(x_mine);
    }
    dk_mpi_plan_destroy(plan);
    free(rows);
    free(E);
    free(X);
    free(y);
    free(r);
    free(pht_ref);
    free(hpht_ref);
    free(e_loc);
    free(pht);
    free(mine);
    free(hpht);
    free_problem(&p);
}

/* ---- failures: the same status and sentence on every rank ---- */

static dk_mpi_plan *make_or_report(dk_context *ctx, const dk_enkf_desc *d, const dk_mpi_part *p, dk_status *st)
{
    dk_mpi_plan *plan = NULL;
    *st = dk_mpi_enkf_plan_create(ctx, MPI_COMM_WORLD, d, p, &plan);
    if ((*st == DK_OK) != (plan != NULL)) {
        fprintf(stderr, "rank %d: status %d but plan %p\n", rank, (int)*st, (void *)plan);
        failures++;
    }
    return plan;
}

static void expect_ok(const char *name, dk_status st)
{
    int ok = all_ranks(st == DK_OK);
    if (rank == 0)
        printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", name, ok ? "" : ": ", ok ? "" : dk_mpi_last_error());
    failures += !ok;
}

static void bad_input(dk_context *ctx)
{
    const int last = rank == size - 1;
    const tcase line = {"line", 1, 100, 0, 0, 4, 6, LINEAR, 6, SLABS, NULL};
    problem p;
    make_problem(&line, DK_F64, &p);
    dk_mpi_part part;
    part_of(&line, &part);
    size_t own = part.extent[0], L = line.L, M = line.M;
    double *e = calloc(own * L + 1, sizeof *e), *pht = calloc(own * M + 1, sizeof *pht);
    double *hpht = calloc(M * M, sizeof *hpht), *y = calloc(M, sizeof *y), *r = malloc(M * sizeof *r);
    for (size_t k = 0; k < own * L; k++)
        e[k] = (double)((part.offset[0] * L + k) % 7) - 3.0;
    for (size_t j = 0; j < M; j++)
        r[j] = 1.0;
    char who[64];
    snprintf(who, sizeof who, "rank %d of %d: ", size - 1, size);
    dk_status st;

    if (size > 1) {
        dk_enkf_desc d = p.d;
        double *v = malloc(p.indptr[M] * sizeof *v);
        memcpy(v, p.values, p.indptr[M] * sizeof *v);
        if (last)
            v[1] += 1e-9;
        d.H.values = v;
        dk_mpi_plan_destroy(make_or_report(ctx, &d, &part, &st));
        expect_failure("one value of H differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "H's values");
        free(v);

        double *c = malloc(p.N * sizeof *c);
        memcpy(c, p.loc, p.N * sizeof *c);
        if (last)
            c[3] *= 0.5;
        d = p.d;
        d.loc = c;
        dk_mpi_plan_destroy(make_or_report(ctx, &d, &part, &st));
        expect_failure("c differs on the last rank", st, DK_ERR_INVALID_ARGUMENT, "the localization");
        free(c);

        d = p.d;
        if (last)
            d.variant = "banded";
        dk_mpi_plan_destroy(make_or_report(ctx, &d, &part, &st));
        expect_failure("variant named on the last rank only", st, DK_ERR_INVALID_ARGUMENT, "the variant");

        dk_mpi_part q = part;
        if (rank == 0)
            q.extent[0]++;
        dk_mpi_plan_destroy(make_or_report(ctx, &p.d, &q, &st));
        expect_failure("parts overlap", st, DK_ERR_INVALID_ARGUMENT, "overlaps the part of rank 1");
    }
    dk_mpi_part q = part;
    if (last)
        q.extent[0]--;
    dk_mpi_plan_destroy(make_or_report(ctx, &p.d, &q, &st));
    expect_failure("parts leave a gap", st, DK_ERR_INVALID_ARGUMENT, "gap");

    q = part;
    if (last)
        q.offset[0] = 101;
    char outside[96];
    snprintf(outside, sizeof outside, "%sits part lies outside", who);
    dk_mpi_plan_destroy(make_or_report(ctx, &p.d, &q, &st));
    expect_failure("part outside the state on the last rank", st, DK_ERR_INVALID_ARGUMENT, outside);

    dk_enkf_desc d = p.d;
    if (last)
        d.members = 1;
    dk_mpi_plan_destroy(make_or_report(ctx, &d, &part, &st));
    expect_failure("one member on the last rank", st, DK_ERR_INVALID_ARGUMENT, "at least 2 are needed");

    dk_mpi_plan_destroy(make_or_report(ctx, last ? NULL : &p.d, &part, &st));
    expect_failure("NULL description on the last rank", st, DK_ERR_INVALID_ARGUMENT, "must not be NULL");

    /* execute-time failures on one plan, which stays usable */
    dk_mpi_plan *plan = make_or_report(ctx, &p.d, &part, &st);
    expect_ok("plan for the execute-time failures", st);
    if (plan) {
        st = dk_mpi_enkf_cov_host(plan, last ? NULL : e, pht, hpht);
        expect_failure("cov with NULL anomalies on the last rank", st, DK_ERR_INVALID_ARGUMENT, "must not be NULL");
        expect_ok("the same plan computes afterwards", dk_mpi_enkf_cov_host(plan, e, pht, hpht));

        double saved = e[0];
        if (last)
            e[0] = NAN;
        char row[96];
        snprintf(row, sizeof row, "state row %zu, member 0 is not finite", part.offset[0]);
        st = dk_mpi_enkf_cov_host(plan, e, pht, hpht);
        /* one rank: libdakit's own check and sentence (a value's index) */
        expect_failure("a NaN anomaly on the last rank", st, DK_ERR_INVALID_ARGUMENT,
                       last && size > 1 ? row : "not finite");
        e[0] = saved;

        if (size > 1) {
            /* hpht may differ between ranks: the rank that asks gets the one of every rank */
            double *h2 = calloc(M * M, sizeof *h2);
            st = dk_mpi_enkf_cov_host(plan, e, pht, last ? NULL : h2);
            int same = 1;
            dk_mpi_enkf_cov_host(plan, e, pht, hpht);
            for (size_t k = 0; !last && k < M * M; k++)
                same &= h2[k] == hpht[k];
            expect_ok("hpht NULL on the last rank only", same ? st : DK_ERR_BACKEND);
            free(h2);
            /* found from the reduction: x_local is then unspecified */
            double *xs = malloc((own * L + 1) * sizeof *xs);
            memcpy(xs, e, (own * L + 1) * sizeof *xs);
            st = dk_mpi_enkf_analysis_host(plan, xs, y, r, last ? 8 : 7, 1.0);
            expect_failure("another seed on the last rank", st, DK_ERR_INVALID_ARGUMENT, "is not the same on every rank");
            double *y2 = calloc(M, sizeof *y2);
            y2[M - 1] = last ? 1e-3 : 0;
            memcpy(xs, e, (own * L + 1) * sizeof *xs);
            st = dk_mpi_enkf_analysis_host(plan, xs, y2, r, 7, 1.0);
            expect_failure("another y on the last rank", st, DK_ERR_INVALID_ARGUMENT, "is not the same on every rank");
            free(y2);
            memcpy(xs, e, (own * L + 1) * sizeof *xs);
            st = dk_mpi_enkf_analysis_host(plan, xs, y, r, 7, last ? 1.05 : 1.0);
            expect_failure("another inflation on the last rank", st, DK_ERR_INVALID_ARGUMENT,
                           "is not the same on every rank");
            free(xs);
        }
        double *r2 = malloc(M * sizeof *r2);
        memcpy(r2, r, M * sizeof *r2);
        if (last)
            r2[2] = -1;
        st = dk_mpi_enkf_analysis_host(plan, e, y, r2, 7, 1.0);
        expect_failure("a negative r on the last rank", st, DK_ERR_INVALID_ARGUMENT, "variance 2 is -1");
        free(r2);
        expect_ok("the same plan analyses afterwards", dk_mpi_enkf_analysis_host(plan, e, y, r, 7, 1.0));

        /* a gauss call on an enkf plan: refused at once, alike on every rank */
        st = dk_mpi_gauss_execute_host(plan, e, e);
        expect_failure("gauss execute on an enkf plan", st, DK_ERR_INVALID_ARGUMENT, "is an enkf plan");
    }
    dk_mpi_plan_destroy(plan);

    /* a backend without enkf on the last rank */
    dk_context *other = NULL;
    st = last ? open_test_plugin("mpifaulty", &other) : DK_OK;
    if (!all_ranks(st == DK_OK)) {
        if (rank == 0)
            printf("FAIL the test plugin mpifaulty could not be opened on the last rank (DAKIT_PLUGIN_PATH must "
                   "name the build's tests folder)\n");
        failures++;
    } else {
        dk_mpi_plan_destroy(make_or_report(last ? other : ctx, &p.d, &part, &st));
        expect_failure("backend without enkf on the last rank", st, DK_ERR_NOT_IMPLEMENTED, who);
    }
    dk_context_destroy(other);
    free(e);
    free(pht);
    free(hpht);
    free(y);
    free(r);
    free_problem(&p);
}

int main(int argc, char **argv)
{
    int code;
    dk_context *ctx = mpi_test_begin(&argc, &argv, dk_enkf_variants, &code);
    if (!ctx)
        return code;
    static const dk_dtype dtypes[] = {DK_F64, DK_F32};
    for (int ci = 0; ci < NCASES; ci++) {
        const tcase *c = &cases[ci];
        if (rank == 0)
            printf("-- %s: %s, %s c %s %g%s%s\n", c->name, layout_names[c->lay], c->ndim == 1 ? "1-D" : "2-D",
                   c->shape == LINEAR ? "linear taper, zero from" : c->shape == WENDLAND ? "Wendland taper, zero from"
                                                                                          : "Gaussian, full support, scale",
                   c->radius, c->variant ? ", variant " : "", c->variant ? c->variant : "");
        for (int ti = 0; ti < 2; ti++)
            run_case(ctx, c, dtypes[ti]);
    }
    if (rank == 0)
        printf("-- bad input\n");
    bad_input(ctx);

    return mpi_test_end(ctx);
}
