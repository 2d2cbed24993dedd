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

int gbees_snap_draw(const gbees_snap *s, int panel, image *img, char *err, size_t len)
{
    memset(img, 0, sizeof *img);
    int d = s->dim;
    size_t n = s->cells;
    const double *rows = s->rows;
    if (d < 2 || d > DK_GBEES_MAX_DIM) {
        snprintf(err, len, "%s, no 2-D marginal to draw", d < 2 ? "one-dimensional" : "too many dimensions");
        return -1;
    }
    if (panel < 20 || panel > 2000) {
        snprintf(err, len, "a panel of %d pixels; 20 to 2000 are drawn", panel);
        return -1;
    }
    double lo[DK_GBEES_MAX_DIM], hi[DK_GBEES_MAX_DIM], step[DK_GBEES_MAX_DIM];
    for (int i = 0; i < d; i++) {
        lo[i] = INFINITY;
        hi[i] = -INFINITY;
        step[i] = INFINITY;
    }
    for (size_t c = 0; c < n; c++)
        for (int i = 0; i < d; i++) {
            lo[i] = fmin(lo[i], rows[c * (d + 1) + i]);
            hi[i] = fmax(hi[i], rows[c * (d + 1) + i]);
        }
    /* cell size: the smallest non-zero gap to the lowest coordinate */
    for (size_t c = 0; c < n; c++)
        for (int i = 0; i < d; i++) {
            double gap = rows[c * (d + 1) + i] - lo[i];
            if (gap > 1e-12 * (1 + fabs(lo[i])) && gap < step[i])
                step[i] = gap;
        }
    int cols = d - 1, border = 4;
    if (image_create(img, cols * (panel + border) + border, cols * (panel + border) + border, 255) != 0) {
        snprintf(err, len, "out of memory for the picture");
        return -1;
    }
    double *bins = malloc((size_t)panel * panel * sizeof *bins);
    if (!bins) {
        image_free(img);
        snprintf(err, len, "out of memory for the picture");
        return -1;
    }
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++) {
            /* lattice points along each axis; at most `panel` bins across */
            double nx = lattice(hi[i], lo[i], step[i]) + 1, ny = lattice(hi[j], lo[j], step[j]) + 1;
            double span = fmax(nx, ny);
            double per_bin = span > panel ? span / panel : 1.0; /* lattice points per bin */
            int scale = span > panel ? 1 : (int)(panel / span);  /* pixels per bin */
            memset(bins, 0, (size_t)panel * panel * sizeof *bins);
            double top = 0.0;
            for (size_t c = 0; c < n; c++) {
                double fx = floor(lattice(rows[c * (d + 1) + i], lo[i], step[i]) / per_bin);
                double fy = floor(lattice(rows[c * (d + 1) + j], lo[j], step[j]) / per_bin);
                if (!(fx * scale < panel) || !(fy * scale < panel))
                    continue;
                double *b = &bins[(size_t)fy * panel + (size_t)fx];
                *b += fmax(rows[c * (d + 1) + d], 0.0);
                top = fmax(top, *b);
            }
            int x0 = border + (j - 1) * (panel + border), y0 = border + i * (panel + border);
            for (int y = 0; y < panel; y++)
                for (int x = 0; x < panel; x++) {
                    int bx = x / scale, by = (panel - 1 - y) / scale;
                    double v = top > 0 ? bins[(size_t)by * panel + bx] / top : 0;
                    v = v < 0 ? 0 : v > 1 ? 1 : v;
                    unsigned char shade = (unsigned char)lround(255.0 * (1.0 - sqrt(v)));
                    unsigned char rgb[3] = {shade, shade, (unsigned char)(v > 0 ? 255 : shade)};
                    image_set(img, x0 + x, y0 + y, rgb);
                }
        }
    free(bins);
    return 0;
}
