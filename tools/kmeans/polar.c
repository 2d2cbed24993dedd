/* The azimuth wrap: ray 0 and the last ray are neighbours, but the kmeans
 * plan's grid has edges. The sweep is therefore clustered with G rays on
 * each side copied from the other end (G = the contiguity window's half
 * width or three texture sigmas, whichever is larger), and the labels of the
 * sweep's own rays kept. A bin near north then sees its true neighbours
 * across the seam in both the texture smoothing and the contiguity window;
 * what remains approximate is that the copied rays also enter the feature
 * standardization and the centroid sums, a share 2G / nrays of the bins
 * (docs/formats.md). */
#include "kmeans/polar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kmeans/labels_nc.h"
#include "kmeans/odim.h"

int polar_wrap_rays(const radar_options *o, size_t nrays)
{
    int g = (int)ceil(3.0 * o->texture_sigma);
    if (g < o->window / 2)
        g = o->window / 2;
    if ((size_t)g > nrays)
        g = (int)nrays;
    return g;
}

/* The PPI: the sweep resampled onto a north-up Cartesian grid of side
 * 2 * max ground range (nearest bin), as a radolan-shaped picture input. */
static int draw_ppi(const odim_sweep *s, const int32_t *labels, const radar_result *res, const radar_options *o,
                    const char *source, const char *path, char *err, size_t len)
{
    const double cosel = cos(s->elangle * M_PI / 180.0);
    const double max_ground = (s->rstart_km * 1000.0 + (double)s->nbins * s->rscale_m) * cosel;
    int P = (int)(2 * s->nbins);
    if (P > 900)
        P = 900;
    if (P < 480) /* room for the legend beside it */
        P = 480;
    const double pix = 2 * max_ground / P; /* metres per pixel */
    dk_radolan pic;
    memset(&pic, 0, sizeof pic);
    memcpy(pic.product, "PP", 2);
    pic.rows = pic.cols = (size_t)P;
    snprintf(pic.unit, sizeof pic.unit, "%s", "dBZ");
    radar_result r = *res;
    pic.value = malloc((size_t)P * P * sizeof *pic.value);
    pic.has_data = malloc((size_t)P * P);
    r.labels = malloc((size_t)P * P * sizeof *r.labels);
    int rc = -1;
    if (!pic.value || !pic.has_data || !r.labels) {
        snprintf(err, len, "out of memory for the picture");
        goto done;
    }
    for (int i = 0; i < P; i++) /* row 0 at the south edge */
        for (int j = 0; j < P; j++) {
            double x = (j + 0.5) * pix - max_ground, y = (i + 0.5) * pix - max_ground;
            size_t at = (size_t)i * P + j;
            double ground = sqrt(x * x + y * y), slant = ground / cosel;
            double b = (slant - s->rstart_km * 1000.0) / s->rscale_m;
            pic.has_data[at] = 0;
            pic.value[at] = NAN;
            r.labels[at] = -1;
            if (b < 0 || b >= (double)s->nbins)
                continue;
            double az = atan2(x, y) * 180.0 / M_PI;
            if (az < 0)
                az += 360.0;
            size_t ray = (size_t)(az / 360.0 * (double)s->nrays) % s->nrays;
            size_t k = ray * s->nbins + (size_t)b;
            if (s->state[k] == 0)
                continue;
            pic.has_data[at] = 1;
            pic.value[at] = s->state[k] == 2 ? s->value[k] : -32.0f; /* undetect: below any threshold */
            r.labels[at] = labels[k];
        }
    char product[96];
    snprintf(product, sizeof product, "ODIM_H5 PPI, %s at %.2f deg", s->quantity, s->elangle);
    if (strlen(s->date) >= 8 && strlen(s->time) >= 4) /* ODIM: YYYYMMDD, HHMMSS */
        snprintf(pic.time, sizeof pic.time, "%.4s-%.2s-%.2s %.2s:%.2s UTC", s->date, s->date + 4, s->date + 6,
                 s->time, s->time + 2);
    /* the PPI's x/y are ground distances east and north of the radar: the azimuthal equidistant projection
     * around it, on the sphere labels_nc.c places the bins on */
    char proj[160];
    snprintf(proj, sizeof proj, "+proj=aeqd +lat_0=%.8f +lon_0=%.8f +R=6371000 +units=m", s->lat, s->lon);
    static const double ring_steps[] = {5, 10, 20, 25, 50, 100, 200};
    double ring = 250;
    for (int i = 6; i >= 0; i--)
        if (max_ground / 1000 / ring_steps[i] <= 5)
            ring = ring_steps[i];
    radar_frame f = {-max_ground / 1000, -max_ground / 1000, pix / 1000, "km east of the radar",
                     "km north of the radar", product, proj, ring};
    rc = radar_picture(&pic, &r, o, &f, source, path, err, len);
done:
    free(pic.value);
    free(pic.has_data);
    free(r.labels);
    return rc;
}

int polar_kmeans(dk_context *ctx, const char *path, const char *quantity, int sweep, const radar_options *o,
                 const char *labels_path, const char *png_path)
{
    const char *cmd = "kmeans";
    char err[4200];
    odim_sweep s;
    if (odim_read(path, quantity, sweep, &s, err, sizeof err) != DK_OK)
        return cli_error(cmd, 1, "%s", err);
    printf("%s: ODIM_H5 sweep %d, %s at %.2f deg elevation, %zu rays x %zu bins of %.0f m, %zu values, %zu "
           "undetect, %zu no data, max %.1f\n",
           path, sweep, s.quantity, s.elangle, s.nrays, s.nbins, s.rscale_m, s.values, s.undetect, s.nodata,
           (double)(s.values ? s.max_value : NAN));
    const size_t nr = s.nrays, nb = s.nbins;
    const int G = polar_wrap_rays(o, nr);
    dk_radolan padded;
    memset(&padded, 0, sizeof padded);
    padded.rows = nr + 2 * (size_t)G;
    padded.cols = nb;
    padded.value = malloc(padded.rows * nb * sizeof *padded.value);
    padded.has_data = malloc(padded.rows * nb);
    int32_t *labels = malloc(nr * nb * sizeof *labels);
    int rc = 1;
    radar_result out;
    memset(&out, 0, sizeof out);
    if (!padded.value || !padded.has_data || !labels) {
        cli_error(cmd, 1, "out of memory for %zu x %zu bins", nr, nb);
        goto done;
    }
    for (size_t i = 0; i < padded.rows; i++) {
        size_t ray = (i + nr * 2 - (size_t)G) % nr; /* padded row i is ray i - G, wrapped */
        memcpy(padded.value + i * nb, s.value + ray * nb, nb * sizeof *s.value);
        for (size_t j = 0; j < nb; j++)
            padded.has_data[i * nb + j] = s.state[ray * nb + j] == 2;
    }
    if (radar_cluster(ctx, &padded, o, &out, err, sizeof err) != DK_OK) {
        cli_error(cmd, 1, "%s", err);
        goto done;
    }
    memcpy(labels, out.labels + (size_t)G * nb, nr * nb * sizeof *labels);
    /* sizes and mean values over the sweep's own bins */
    for (int c = 0; c < out.k; c++)
        out.sizes[c] = 0, out.mean_value[c] = 0;
    for (size_t i = 0; i < nr * nb; i++)
        if (labels[i] >= 0) {
            out.sizes[labels[i]]++;
            out.mean_value[labels[i]] += s.value[i];
        }
    for (int c = 0; c < out.k; c++)
        if (out.sizes[c])
            out.mean_value[c] /= (double)out.sizes[c];
    printf("kmeans: %d iteration(s), objective %.6g over the sweep and %d wrapped rays each side, %.3f ms\n",
           out.kmeans.iterations, out.kmeans.objective, G, out.seconds * 1e3);
    if (out.dry[0])
        printf("%s: every label is -1\n", out.dry);
    for (int c = 0; c < out.k && !out.dry[0]; c++)
        printf("  cluster %d: %zu bins, mean %.1f %s\n", c, out.sizes[c], out.mean_value[c], s.quantity);
    rc = 0;
    if (labels_path && odim_labels_write(labels_path, path, &s, sweep, labels, &out, o, err, sizeof err) != DK_OK)
        rc = cli_error(cmd, 1, "%s", err);
    const char *base = strrchr(path, '/');
    if (png_path && draw_ppi(&s, labels, &out, o, base ? base + 1 : path, png_path, err, sizeof err) != 0)
        rc = cli_error(cmd, 1, "%s", err);
    else if (png_path)
        printf("wrote %s (PPI, north up)\n", png_path);
done:
    radar_result_free(&out);
    free(padded.value);
    free(padded.has_data);
    free(labels);
    odim_free(&s);
    return rc;
}
