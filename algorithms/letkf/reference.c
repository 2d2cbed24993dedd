/* The serial LETKF that defines the result: every point in order, each
 * through the kit's one-point analysis (dakit/kit/letkf/analysis_host.h). */
#include <stdlib.h>
#include <string.h>

#include <dakit/enkf.h>
#include <dakit/kit/letkf/analysis_host.h>

#include "letkf_internal.h"

/* Observation perturbations, departures and 1 / r in sorted order. */
static dk_status obs_space(const dk_letkf_setup *s, const void *yb, const double *yo, const double *r, double **yp,
                           double **dep, double **rinv)
{
    const size_t m = s->desc.m, k = s->desc.members;
    *yp = malloc(m * k * sizeof **yp);
    *dep = malloc(m * sizeof **dep);
    *rinv = malloc(m * sizeof **rinv);
    if (!*yp || !*dep || !*rinv)
        return dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory for the observation ensemble");
    for (size_t j = 0; j < m; j++)
        dk_letkf_obs_row(s, yb, yo, r, j, *yp + j * k, *dep + j, *rinv + j);
    return DK_OK;
}

DK_API dk_status dk_letkf_reference(const dk_letkf_desc *desc, const void *xb, const void *yb, const double *yo,
                                    const double *r, void *xa, int32_t *nobs, double *spread)
{
    if (!xb || !yb || !xa)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "letkf: xb, yb and xa must not be NULL");
    dk_letkf_setup *s = NULL;
    dk_status st = dk_letkf_setup_build(desc, NULL, NULL, &s);
    if (st != DK_OK)
        return st;
    const dk_letkf_desc *d = &s->desc;
    const size_t k = d->members;
    if ((st = dk_letkf_check_finite(d->dtype, xb, d->n * k, "xb")) != DK_OK ||
        (st = dk_letkf_check_finite(d->dtype, yb, d->m * k, "yb")) != DK_OK ||
        (st = dk_letkf_check_obs(d->m, yo, r)) != DK_OK) {
        free(s);
        return st;
    }
    double *yp = NULL, *dep = NULL, *rinv = NULL, *x = malloc(k * sizeof *x);
    dk_letkf_scratch sc;
    memset(&sc, 0, sizeof sc);
    size_t cap = d->m < 1024 ? d->m : 1024;
    if ((st = obs_space(s, yb, yo, r, &yp, &dep, &rinv)) == DK_OK && (!x || dk_letkf_scratch_make(&sc, (int)k, cap)))
        st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    for (size_t i = 0; st == DK_OK && i < d->n; i++) {
        double pos[DK_LETKF_POS];
        dk_letkf_position(&s->geo, d->grid_coords + i * (size_t)d->ncoords, pos);
        long nsel = dk_letkf_select_grown(s, pos, &sc);
        if (nsel < 0) {
            st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
            break;
        }
        for (size_t l = 0; l < k; l++)
            x[l] = d->dtype == DK_F32 ? (double)((const float *)xb)[i * k + l] : ((const double *)xb)[i * k + l];
        double sd = dk_letkf_point(s, &sc, nsel, yp, dep, rinv, x, x);
        for (size_t l = 0; l < k; l++) {
            if (d->dtype == DK_F32)
                ((float *)xa)[i * k + l] = (float)x[l];
            else
                ((double *)xa)[i * k + l] = x[l];
        }
        if (nobs)
            nobs[i] = (int32_t)nsel;
        if (spread)
            spread[i] = sd;
    }
    if (sc.k)
        dk_letkf_scratch_free(&sc);
    free(yp), free(dep), free(rinv), free(x), free(s);
    return st;
}

/* Weight interpolation's reference: the transforms at the weight points
 * through the same one-point analysis, then each grid point's transform
 * interpolated in float64 and applied (dakit/letkf.h). */
DK_API dk_status dk_letkf_reference_interp(const dk_letkf_desc *desc, const dk_csr *C, const void *xb,
                                           const void *yb, const double *yo, const double *r, void *xa,
                                           double *spread)
{
    if (!desc || !C || !xb || !yb || !xa)
        return dk_fail(NULL, DK_ERR_INVALID_ARGUMENT, "letkf: desc, C, xb, yb and xa must not be NULL");
    dk_status st = dk_letkf_interp_check(C, C->rows, desc->n);
    if (st != DK_OK)
        return st;
    dk_letkf_setup *s = NULL;
    if ((st = dk_letkf_setup_build(desc, NULL, NULL, &s)) != DK_OK)
        return st;
    const dk_letkf_desc *d = &s->desc;
    const size_t k = d->members, kk = k * k, n = C->rows;
    if ((st = dk_letkf_check_finite(d->dtype, xb, n * k, "xb")) != DK_OK ||
        (st = dk_letkf_check_finite(d->dtype, yb, d->m * k, "yb")) != DK_OK ||
        (st = dk_letkf_check_obs(d->m, yo, r)) != DK_OK) {
        free(s);
        return st;
    }
    double *yp = NULL, *dep = NULL, *rinv = NULL, *x = malloc(k * sizeof *x), *Ti = malloc(kk * sizeof *Ti);
    double *T = malloc(d->n * kk * sizeof *T);
    dk_letkf_scratch sc;
    memset(&sc, 0, sizeof sc);
    size_t cap = d->m < 1024 ? d->m : 1024;
    if ((st = obs_space(s, yb, yo, r, &yp, &dep, &rinv)) == DK_OK &&
        (!x || !Ti || !T || dk_letkf_scratch_make(&sc, (int)k, cap)))
        st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
    for (size_t i = 0; st == DK_OK && i < d->n; i++) {
        double pos[DK_LETKF_POS];
        dk_letkf_position(&s->geo, d->grid_coords + i * (size_t)d->ncoords, pos);
        long nsel = dk_letkf_select_grown(s, pos, &sc);
        if (nsel < 0) {
            st = dk_fail(NULL, DK_ERR_OUT_OF_MEMORY, "letkf: out of host memory");
            break;
        }
        for (size_t l = 0; l < k; l++)
            x[l] = 0.0; /* the background only enters the application below */
        dk_letkf_point_system(&sc, nsel, yp, dep, rinv, x);
        dk_letkf_jacobi((int)k, sc.A, sc.Q, sc.lam);
        dk_letkf_point_weights(s, &sc);
        dk_letkf_point_transform(&sc, T + i * kk);
    }
    for (size_t i = 0; st == DK_OK && i < n; i++) {
        memset(Ti, 0, kk * sizeof *Ti);
        for (int64_t e = C->indptr[i]; e < C->indptr[i + 1]; e++)
            for (size_t q = 0; q < kk; q++)
                Ti[q] += C->values[e] * T[(size_t)C->indices[e] * kk + q];
        for (size_t l = 0; l < k; l++)
            x[l] = d->dtype == DK_F32 ? (double)((const float *)xb)[i * k + l] : ((const double *)xb)[i * k + l];
        double sd = dk_letkf_apply_transform((int)k, d->rtps, x, Ti, x);
        for (size_t l = 0; l < k; l++) {
            if (d->dtype == DK_F32)
                ((float *)xa)[i * k + l] = (float)x[l];
            else
                ((double *)xa)[i * k + l] = x[l];
        }
        if (spread)
            spread[i] = sd;
    }
    if (sc.k)
        dk_letkf_scratch_free(&sc);
    free(yp), free(dep), free(rinv), free(x), free(Ti), free(T), free(s);
    return st;
}
