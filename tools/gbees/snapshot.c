#include "gbees/snapshot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dk_status gbees_snap_read(const char *path, gbees_snap *s, char *err, size_t len)
{
    memset(s, 0, sizeof *s);
    dk_status st = npy_read(path, &s->array, err, len);
    if (st != DK_OK)
        return st;
    const npy_array *a = &s->array;
    if (a->ndim != 2 || a->dtype != DK_F64 || a->shape[1] < 2) {
        snprintf(err, len, "%s: expected a float64 array of shape (cells, d + 1), d >= 1", path);
        gbees_snap_free(s);
        return DK_ERR_FORMAT;
    }
    if (a->shape[1] > DK_GBEES_MAX_DIM + 1) {
        snprintf(err, len, "%s: %zu columns means d = %zu dimensions; GBEES has at most %d", path, a->shape[1],
                 a->shape[1] - 1, DK_GBEES_MAX_DIM);
        gbees_snap_free(s);
        return DK_ERR_FORMAT;
    }
    if (a->shape[0] == 0) {
        snprintf(err, len, "%s: the snapshot has no cells", path);
        gbees_snap_free(s);
        return DK_ERR_FORMAT;
    }
    s->cells = a->shape[0];
    s->dim = (int)a->shape[1] - 1;
    s->rows = a->data;
    for (size_t k = 0; k < a->count; k++)
        if (!isfinite(s->rows[k])) {
            size_t c = k / a->shape[1], j = k % a->shape[1];
            snprintf(err, len, "%s: cell %zu's %s is not finite (%g)", path, c,
                     j < (size_t)s->dim ? "centre" : "probability", s->rows[k]);
            gbees_snap_free(s);
            return DK_ERR_FORMAT;
        }
    return DK_OK;
}

void gbees_snap_free(gbees_snap *s)
{
    npy_free(&s->array);
    s->rows = NULL;
    s->cells = 0;
}

/* The lattice index of x along an axis starting at lo with step: in double,
 * so a snapshot whose cells span a huge range (or whose step is tiny) gives a
 * large number, never an integer overflow. */
static double lattice(double x, double lo, double step)
{
    if (!isfinite(step))
        return 0.0;
    double i = floor((x - lo) / step + 0.5);
    return isfinite(i) && i > 0 ? i : (i > 0 ? INFINITY : 0.0);
}

/* The data values at the edges of n lattice points from lo with step,
 * finite and increasing whatever the coordinates. */
static void edges(double lo, double hi, double step, double n, double *a, double *b)
{
    *a = lo - 0.5 * step;
    *b = lo + (n - 0.5) * step;
    if (!isfinite(*a) || !isfinite(*b) || !(*b > *a)) {
        *a = lo;
        *b = hi;
    }
    if (!(*b > *a)) { /* one value: a small span around it, finite at the ends of the doubles too */
        double w = fabs(lo) > 1 ? fabs(lo) * 1e-3 : 1;
        *a = isfinite(lo - w) ? lo - w : lo;
        *b = isfinite(lo + w) ? lo + w : lo;
        if (!(*b > *a))
            *a = nextafter(lo, -INFINITY), *b = lo;
    }
}

int gbees_snap_marginal(const gbees_snap *s, int i, int j, int bins, gbees_marginal *m, char *err, size_t len)
{
    memset(m, 0, sizeof *m);
    int d = s->dim;
    size_t n = s->cells;
    const double *rows = s->rows;
    if (i < 0 || j < 0 || i >= d || j >= d || i == j) {
        snprintf(err, len, "axes %d and %d of a %d-dimensional snapshot: no 2-D marginal", i, j, d);
        return -1;
    }
    if (bins < 1 || bins > 4096) {
        snprintf(err, len, "%d bins across; 1 to 4096 are drawn", bins);
        return -1;
    }
    int ax[2] = {i, j};
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY}, step[2] = {INFINITY, INFINITY};
    for (size_t c = 0; c < n; c++)
        for (int a = 0; a < 2; a++) {
            lo[a] = fmin(lo[a], rows[c * (d + 1) + ax[a]]);
            hi[a] = fmax(hi[a], rows[c * (d + 1) + ax[a]]);
        }
    /* cell size: the smallest non-zero gap to the lowest coordinate */
    for (size_t c = 0; c < n; c++)
        for (int a = 0; a < 2; a++) {
            double gap = rows[c * (d + 1) + ax[a]] - lo[a];
            if (gap > 1e-12 * (1 + fabs(lo[a])) && gap < step[a])
                step[a] = gap;
        }
    double points[2], per_bin[2];
    int nb[2];
    for (int a = 0; a < 2; a++) {
        points[a] = lattice(hi[a], lo[a], step[a]) + 1;
        per_bin[a] = points[a] > bins ? points[a] / bins : 1.0; /* lattice points per bin */
        nb[a] = points[a] > bins ? bins : (int)points[a];
    }
    m->nx = nb[0];
    m->ny = nb[1];
    m->p = calloc((size_t)m->nx * (size_t)m->ny, sizeof *m->p);
    if (!m->p) {
        snprintf(err, len, "out of memory for the marginal");
        return -1;
    }
    for (size_t c = 0; c < n; c++) {
        double fx = floor(lattice(rows[c * (d + 1) + i], lo[0], step[0]) / per_bin[0]);
        double fy = floor(lattice(rows[c * (d + 1) + j], lo[1], step[1]) / per_bin[1]);
        if (!(fx < m->nx) || !(fy < m->ny))
            continue;
        double *b = &m->p[(size_t)fy * (size_t)m->nx + (size_t)fx];
        *b += fmax(rows[c * (d + 1) + d], 0.0);
        m->top_p = fmax(m->top_p, *b);
    }
    edges(lo[0], hi[0], isfinite(step[0]) ? step[0] : 1.0, isfinite(step[0]) ? points[0] : 1, &m->left, &m->right);
    edges(lo[1], hi[1], isfinite(step[1]) ? step[1] : 1.0, isfinite(step[1]) ? points[1] : 1, &m->bottom, &m->top);
    return 0;
}

void gbees_marginal_free(gbees_marginal *m)
{
    free(m->p);
    m->p = NULL;
}
