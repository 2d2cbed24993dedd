/* dakit letkf: the local ensemble transform Kalman filter (Hunt, Kostelich
 * & Szunyogh 2007, Physica D 230), with the options operational systems
 * use: Gaspari-Cohn localization by distance (cartesian with periodic axes,
 * or great circles on the sphere, with an optional vertical coordinate of
 * its own radius), a cap on the observations per point, multiplicative
 * prior inflation, and relaxation to prior perturbations (RTPP) or spread
 * (RTPS).
 *
 * The definition every backend computes. Xb is N x k (state x member,
 * member fastest, as enkf), Yb = H(Xb) is M x k, computed by the caller's
 * own observation operator; yo (M) the observations, r (M) their error
 * variances (diagonal R). For each grid point i independently:
 * - Its observations: every j with rho_ij > 0, where rho_ij =
 *   GC(2 dh / radius) * GC(2 dz / vertical_radius) (the second factor only
 *   with a vertical coordinate), GC Gaspari & Cohn 1999 eq. 4.10 (0 for
 *   arguments >= 2, so rho is 0 at and beyond the radius), dh the
 *   horizontal distance (cartesian: Euclidean over the horizontal columns,
 *   each periodic column taking the shorter way round; sphere: the great
 *   circle on a sphere of DK_LETKF_EARTH_RADIUS_KM, from lon, lat in
 *   degrees), dz = |z_i - z_j|. With max_obs > 0 only the max_obs of
 *   largest rho are used (ties to the lower observation index).
 * - Means and perturbations: xm = mean_l Xb[i,l], X_l = Xb[i,l] - xm;
 *   ym_j = mean_l Yb[j,l], Y_jl = Yb[j,l] - ym_j; d_j = yo_j - ym_j.
 * - A = sum_j (rho_ij / r_j) Y_j Y_j^T (k x k), b = sum_j (rho_ij / r_j) d_j Y_j;
 *   A = Q diag(lambda) Q^T; g = (k - 1) / inflation;
 *   Pa = Q diag(1 / (g + lambda)) Q^T; w = Pa b;
 *   W = Q diag(sqrt((k - 1) / (g + lambda))) Q^T (the symmetric square root);
 *   RTPP (alpha): W <- (1 - alpha) W + alpha I.
 * - a_m = sum_l X_l W[l,m] (analysis perturbations), xam = xm + sum_l X_l w_l;
 *   RTPS (alpha): with sb, sa the standard deviations (k - 1 divisor) of X
 *   and a, a_m <- a_m (1 + alpha (sb - sa) / sa) where sa > 0.
 *   Xa[i,m] = xam + a_m.
 * A point without observations gets g + lambda = g throughout: its
 * perturbations are inflated by sqrt(inflation), its mean unchanged.
 * The local k x k problem is solved in float64 whatever the dtype; float32
 * data are widened on reading and rounded once on writing.
 *
 * Diagnostics: per point the number of observations used (int32) and the
 * analysis spread (float64, the standard deviation of Xa[i,:] with the
 * k - 1 divisor); per observation the departures yo - mean(Y) with Y = Yb
 * (O-B) or Y = H(Xa) (O-A, from the caller's operator or dk_letkf_apply_csr). */
#ifndef DAKIT_LETKF_H
#define DAKIT_LETKF_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_LETKF_MAX_MEMBERS 1024
#define DK_LETKF_MAX_COORDS 3
/* The sphere's radius for great-circle distances, km (the mean Earth radius). */
#define DK_LETKF_EARTH_RADIUS_KM 6371.0

typedef enum dk_letkf_metric {
    DK_LETKF_CARTESIAN = 0, /* Euclidean in the coordinates' units, period[] per column */
    DK_LETKF_SPHERE = 1     /* columns lon, lat (degrees) [, vertical]; radius in km */
} dk_letkf_metric;

typedef struct dk_letkf_desc {
    dk_dtype dtype;          /* of Xb, Yb and Xa; default float64 */
    size_t n;                /* grid points N >= 1 */
    size_t members;          /* k, 2 .. DK_LETKF_MAX_MEMBERS */
    size_t m;                /* observations M >= 1 (at most 2^31 - 1) */
    int ncoords;             /* columns of the coordinates: 1 .. 3 (sphere: 2, or 3 with a vertical) */
    dk_letkf_metric metric;
    double radius;           /* horizontal distance where the taper reaches 0, > 0 (km on the sphere) */
    double vertical_radius;  /* > 0: the last column is a vertical coordinate with this radius; 0: none */
    double period[DK_LETKF_MAX_COORDS]; /* cartesian: each column's period, 0 for none */
    double inflation;        /* multiplicative prior inflation, > 0; default 1 */
    double rtpp, rtps;       /* relaxation weights in [0, 1]; at most one of them > 0 */
    size_t max_obs;          /* 0: every observation within the radius; else at most this many a point */
    const double *grid_coords; /* n x ncoords, copied by the plan */
    const double *obs_coords;  /* m x ncoords, copied by the plan */
    const char *variant;     /* NULL: the backend's default; else one of dk_letkf_variants() */
} dk_letkf_desc;

/* Defaults: float64, cartesian, inflation 1, no relaxation, no cap, no
 * vertical, no period; the caller sets n, members, m, ncoords, radius and
 * the two coordinate arrays. */
void dk_letkf_desc_init(dk_letkf_desc *desc);

/* Validates the description and the coordinates (finite; latitudes in
 * [-90, 90]), copies them and sorts the observations into buckets of the
 * radius's size once, so that repeated analyses on the same grid and
 * observation network cost only the analysis. */
dk_status dk_letkf_plan_create(dk_context *ctx, const dk_letkf_desc *desc, dk_plan **plan);
const char *const *dk_letkf_variants(const dk_context *ctx);

/* Buffers on the plan's context: xb (n*k, dtype), yb (m*k, dtype), xa
 * (n*k, dtype; may be xb: in place); nobs (n int32) and spread (n float64)
 * may be NULL. yo and r are host arrays of m float64 (finite; r > 0),
 * checked and copied to the device. The ensembles are not checked for NaN
 * here (that would read them back); dk_letkf_execute_host does. */
dk_status dk_letkf_execute(dk_plan *plan, const dk_buffer *xb, const dk_buffer *yb, const double *yo,
                           const double *r, dk_buffer *xa, dk_buffer *nobs, dk_buffer *spread);
/* The same on host memory; refuses values that are not finite. On failure
 * xa is unchanged (also where xa == xb). */
dk_status dk_letkf_execute_host(dk_plan *plan, const void *xb, const void *yb, const double *yo, const double *r,
                                void *xa, int32_t *nobs, double *spread);

/* The serial reference that defines the result (host memory); refuses
 * values that are not finite, as dk_letkf_execute_host does. */
dk_status dk_letkf_reference(const dk_letkf_desc *desc, const void *xb, const void *yb, const double *yo,
                             const double *r, void *xa, int32_t *nobs, double *spread);

/* Departures out_j = yo_j - mean_l y[j, l] (m x k of dtype, host): O-B from
 * Yb, O-A from H(Xa). */
dk_status dk_letkf_departures(dk_dtype dtype, size_t m, size_t members, const void *y, const double *yo,
                              double *out);

/* The convenience for a linear observation operator: y = H x (H sparse
 * M x N in CSR as in dakit/enkf.h; x N x k and y M x k of dtype, host),
 * summed in float64 in H's order. */
struct dk_csr; /* dakit/enkf.h */
dk_status dk_letkf_apply_csr(const struct dk_csr *H, dk_dtype dtype, size_t members, const void *x, void *y);

/* ---- weight interpolation (NICAM/SCALE-LETKF) ----
 * The transforms T (k x k, T[l,m] = W[l,m] + w_l, RTPP included, RTPS
 * not) are computed only at nw "weight points", the grid points of a plan
 * made for them, and each of the N grid points takes T_i = sum_s C[i,s] T_s
 * with C sparse N x nw (CSR, rows summing to 1): xa_i[m] = xm_i + sum_l
 * X_l T_i[l,m]; then, with xam the mean of xa_i and a_m = xa_i[m] - xam,
 * RTPS of the plan's desc acts as in the definition above. Where C is the
 * identity this is the plain analysis (RTPS included) up to rounding. */

/* Checks C for n rows and nw columns: indptr from 0, not decreasing;
 * indices in range; values finite; each row's sum within 1e-12 of 1. */
dk_status dk_letkf_interp_check(const struct dk_csr *C, size_t n, size_t nw);

/* The interpolation for a regular grid of ndims (1 .. 3) axes, shape[0]
 * slowest (row-major), coarsened by stride[a] >= 1 on each axis: the weight
 * points are the grid points whose index on every axis is a multiple of its
 * stride or the axis's last; C is their (bi/tri)linear interpolation.
 * weight_index (at least n values) receives the nw weight points' grid
 * indices, ascending; indptr (n + 1), indices and values (n * 2^ndims each)
 * receive C. */
dk_status dk_letkf_interp_grid(int ndims, const size_t *shape, const size_t *stride, size_t *nw,
                               size_t *weight_index, int64_t *indptr, int64_t *indices, double *values);

/* The analysis with weight interpolation on buffers of the plan's context:
 * plan is a letkf plan whose grid points are the nw weight points (its
 * rtps, dtype, members apply), C (n x nw, host) the interpolation, copied
 * to the device on each call (C may differ from call to call); the device
 * copy of C and the transforms' nw k^2 float64 of scratch stay with the
 * plan for its next call (grown where C has more entries) until
 * dk_plan_destroy. xb, xa (n*k of the plan's dtype; xa may be xb), spread
 * (n float64) may be NULL. Needs a backend with the transforms and
 * apply_transforms ops (else DK_ERR_NOT_IMPLEMENTED naming it). */
dk_status dk_letkf_execute_interp(dk_plan *plan, const struct dk_csr *C, const dk_buffer *xb, const dk_buffer *yb,
                                  const double *yo, const double *r, dk_buffer *xa, dk_buffer *spread);
/* The same on host memory (xa may be xb); refuses values that are not
 * finite. On failure xa is unchanged. */
dk_status dk_letkf_execute_interp_host(dk_plan *plan, const struct dk_csr *C, const void *xb, const void *yb,
                                       const double *yo, const double *r, void *xa, double *spread);

/* The serial reference of the same: desc describes the weight points
 * (n = nw, grid_coords their coordinates), C the n x nw interpolation. */
dk_status dk_letkf_reference_interp(const dk_letkf_desc *desc, const struct dk_csr *C, const void *xb,
                                    const void *yb, const double *yo, const double *r, void *xa, double *spread);

/* ---- plugin ops: what a backend implements (docs/plugins.md) ---- */

struct dk_msg; /* dakit/plugin.h */

#include <dakit/kit/letkf/local.h>

/* What a letkf plan receives: the validated description and the
 * observation search structure the core built (the observations sorted by
 * bucket; dakit/kit/letkf/local.h walks it). Everything stays valid until
 * plan_destroy returns. */
typedef struct dk_letkf_setup {
    dk_letkf_desc desc;         /* variant: the plugin's own string; grid_coords and obs_coords: the plan's copies */
    dk_letkf_geometry geo;      /* the metric and the buckets' shape */
    const int32_t *obs_order;   /* m: the original index of the j-th sorted observation */
    const double *obs_pos;      /* m x DK_LETKF_POS: the sorted observations' positions (dk_letkf_position) */
    const uint64_t *cell_key;   /* cells: the key of each non-empty bucket, ascending */
    const int32_t *cell_start;  /* cells + 1: bucket c holds sorted observations [cell_start[c], cell_start[c + 1]) */
    size_t cells;
} dk_letkf_setup;

typedef struct dk_letkf_ops {
    /* Required. NULL-terminated variant names; the first is the default. */
    const char *const *variants;
    /* Required. Called once per plan; may copy the grid, the sorted
     * observations and the buckets to the device. */
    dk_status (*plan_create)(void *device, const dk_letkf_setup *setup, void **plan, struct dk_msg *msg);
    /* Required. The analysis of the definition above on buffer handles: xb
     * (n*k), yb (m*k) and xa (n*k) of the plan's dtype, xa possibly equal
     * to xb; obs holds 2m float64, yo then r, in the ORIGINAL observation
     * order; nobs (n int32) and spread (n float64) may be NULL. */
    dk_status (*analysis)(void *plan, const void *xb, const void *yb, const void *obs, void *xa, void *nobs,
                          void *spread, struct dk_msg *msg);
    /* Required. Frees the plan. */
    void (*plan_destroy)(void *plan);
    /* Optional (weight interpolation; ops generation 4). T: n x k x k float64, the
     * transform of each of the plan's points (T[l,m] = W[l,m] + w_l, RTPP
     * applied, RTPS not); yb and obs as in analysis. */
    dk_status (*transforms)(void *plan, const void *yb, const void *obs, void *T, struct dk_msg *msg);
    /* Optional (ops generation 4). For rows i < n of C (indptr n + 1 int64, indices
     * int64 into the plan's points, values float64): xa[i,:] from xb[i,:]
     * (n x k of the plan's dtype, xa possibly xb) with T_i = sum_e
     * values[e] T[indices[e]], then the plan's RTPS; spread (n float64) may
     * be NULL. */
    dk_status (*apply_transforms)(void *plan, size_t n, const void *xb, const void *T, const void *indptr,
                                  const void *indices, const void *values, void *xa, void *spread,
                                  struct dk_msg *msg);
} dk_letkf_ops;

/* ---- the buckets' span: plans that bucket alike (libdakit-mpi's letkf) ---- */

/* dk_letkf_plan_create, with the observation buckets cut over the span
 * [lo[a], hi[a]] of each position component a (DK_LETKF_POS values each, in
 * the position space of dakit/kit/letkf/local.h: the coordinates, on the
 * sphere x, y, z in km, then the vertical) instead of over the bounds of
 * desc's own observations; components past the position's, and periodic
 * ones, are not read. Plans of equal spans and shared fields bucket alike
 * whatever observations each holds, so a point finds its observations, and
 * sums them, in the same order: a plan over any subset of a network, in the
 * network's order, holding every observation within reach of its points,
 * gives those points the whole network's analysis bit for bit (the
 * distributed letkf passes the whole network's span on every rank). Every
 * observation must lie inside the span. lo and hi both NULL: the plain
 * dk_letkf_plan_create. */
dk_status dk_letkf_plan_create_span(dk_context *ctx, const dk_letkf_desc *desc, const double *lo, const double *hi,
                                    dk_plan **plan);

/* The geometry such a plan takes (metric, reach, and the buckets' origin,
 * cell and ncell), from desc's shared fields (n, m and the coordinates are
 * not read) and the span: which cell each position falls in, as the plan
 * will see it (dk_letkf_cell, dk_letkf_visit_key). */
dk_status dk_letkf_bucket_shape(const dk_letkf_desc *desc, const double *lo, const double *hi,
                                dk_letkf_geometry *geo);

#ifdef __cplusplus
}
#endif

#endif
