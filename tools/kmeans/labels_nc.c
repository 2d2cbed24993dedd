#define _GNU_SOURCE
#include "kmeans/labels_nc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "cli/netcdf.h"
#include "kmeans/geo.h"

#define FAIL(st, ...) (snprintf(err, len, __VA_ARGS__), (st))

int radolan_time(const char *path, char *iso, size_t n)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return -1;
    char h[24];
    int got = gzread(f, h, 17);
    gzclose(f);
    /* product (2), DDhhmm, WMO number (5), MMYY */
    if (got < 17)
        return -1;
    for (int i = 2; i < 17; i++)
        if (h[i] < '0' || h[i] > '9')
            return -1;
    int day = (h[2] - '0') * 10 + h[3] - '0', hour = (h[4] - '0') * 10 + h[5] - '0';
    int minute = (h[6] - '0') * 10 + h[7] - '0', month = (h[13] - '0') * 10 + h[14] - '0';
    int year = 2000 + (h[15] - '0') * 10 + h[16] - '0';
    if (day < 1 || day > 31 || hour > 23 || minute > 59 || month < 1 || month > 12)
        return -1;
    snprintf(iso, n, "%04d-%02d-%02dT%02d:%02dZ", year, month, day, hour, minute);
    return 0;
}

#ifdef DK_HAVE_NETCDF
#include <netcdf.h>

#define NC_TRY(call)                                                                                              \
    do {                                                                                                          \
        int nc_rc_ = (call);                                                                                      \
        if (nc_rc_ != NC_NOERR) {                                                                                 \
            st = FAIL(DK_ERR_IO, "writing %s: %s", path, nc_strerror(nc_rc_));                                   \
            goto done;                                                                                            \
        }                                                                                                         \
    } while (0)

static int put_text(int id, int var, const char *name, const char *text)
{
    return nc_put_att_text(id, var, name, strlen(text), text);
}

/* Attributes of the labels variable: what the values mean and the options. */
static int label_attrs(int id, int var, const radar_result *res, const radar_options *o, const char *unit)
{
    int rc, fill = -1;
    char means[2048] = "";
    for (int c = 0; c < res->k; c++) {
        size_t at = strlen(means);
        snprintf(means + at, sizeof means - at, "%s%d: %.2f %s", c ? "; " : "", c,
                 res->sizes && res->sizes[c] ? res->mean_value[c] : NAN, unit);
    }
    int values[DK_KMEANS_MAX_K];
    for (int c = 0; c < res->k; c++)
        values[c] = c;
    double opts[5] = {o->k, o->lambda, o->window, o->min_value, o->texture_sigma};
    if ((rc = nc_put_att_int(id, var, "_FillValue", NC_INT, 1, &fill)) ||
        (rc = put_text(id, var, "long_name", "k-means cluster of radar reflectivity texture")) ||
        (rc = put_text(id, var, "comment", "-1: not clustered (no data, or below min_value)")) ||
        (rc = nc_put_att_int(id, var, "flag_values", NC_INT, (size_t)res->k, values)) ||
        (rc = put_text(id, var, "cluster_mean", means)) ||
        (rc = nc_put_att_double(id, var, "kmeans_k_lambda_window_min_value_texture_sigma", NC_DOUBLE, 5, opts)))
        return rc;
    return NC_NOERR;
}

dk_status radolan_labels_write(const char *path, const char *source, const dk_radolan *r, const radar_result *res,
                               const radar_options *o, char *err, size_t len)
{
    if (!array_is_netcdf_name(path)) {
        size_t shape[2] = {r->rows, r->cols};
        return npy_write_typed(path, "<i4", 4, 2, shape, res->labels, err, len);
    }
    double x0, y0;
    if (dk_radolan_grid_origin(r->rows, r->cols, &x0, &y0) != DK_OK)
        return FAIL(DK_ERR_FORMAT, "%s: the RADOLAN grid %zu x %zu is not one whose geolocation dakit knows "
                    "(900 x 900, 1100 x 900); write the labels as .npy", source, r->rows, r->cols);
    char when[32] = "";
    radolan_time(source, when, sizeof when);
    size_t rows = r->rows, cols = r->cols;
    double *x = malloc(cols * sizeof *x), *y = malloc(rows * sizeof *y);
    double *lat = malloc(rows * cols * sizeof *lat), *lon = malloc(rows * cols * sizeof *lon);
    array_nc w = {0};
    dk_status st = DK_OK;
    char why[256];
    geo_proj *g = geo_open(GEO_RADOLAN_PROJ, why, sizeof why); /* NULL: no lat/lon variables */
    if (!x || !y || !lat || !lon) {
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    /* pixel centres in metres: the corner (km) plus half a 1 km pixel */
    for (size_t j = 0; j < cols; j++)
        x[j] = (x0 + (double)j + 0.5) * 1000.0;
    for (size_t i = 0; i < rows; i++)
        y[i] = (y0 + (double)i + 0.5) * 1000.0;
    for (size_t i = 0; g && i < rows; i++) {
        memcpy(lon + i * cols, x, cols * sizeof *x);
        for (size_t j = 0; j < cols; j++)
            lat[i * cols + j] = y[i];
        geo_inverse(g, lon + i * cols, lat + i * cols, cols);
    }
    if ((st = array_nc_create(&w, path, err, len)) != DK_OK)
        goto done;
    int id = w.ncid, dy, dx, vx, vy, vlat = -1, vlon = -1, vcrs, vl, vt, dims[2];
    NC_TRY(nc_def_dim(id, "y", rows, &dy));
    NC_TRY(nc_def_dim(id, "x", cols, &dx));
    dims[0] = dy, dims[1] = dx;
    NC_TRY(nc_def_var(id, "x", NC_DOUBLE, 1, &dx, &vx));
    NC_TRY(nc_def_var(id, "y", NC_DOUBLE, 1, &dy, &vy));
    if (g) {
        NC_TRY(nc_def_var(id, "lat", NC_DOUBLE, 2, dims, &vlat));
        NC_TRY(nc_def_var(id, "lon", NC_DOUBLE, 2, dims, &vlon));
        NC_TRY(nc_def_var_deflate(id, vlat, 1, 1, 4));
        NC_TRY(nc_def_var_deflate(id, vlon, 1, 1, 4));
        NC_TRY(put_text(id, vlat, "standard_name", "latitude"));
        NC_TRY(put_text(id, vlat, "units", "degrees_north"));
        NC_TRY(put_text(id, vlon, "standard_name", "longitude"));
        NC_TRY(put_text(id, vlon, "units", "degrees_east"));
    }
    NC_TRY(nc_def_var(id, "crs", NC_INT, 0, NULL, &vcrs));
    NC_TRY(nc_def_var(id, "time", NC_DOUBLE, 0, NULL, &vt));
    NC_TRY(nc_def_var(id, "labels", NC_INT, 2, dims, &vl));
    NC_TRY(nc_def_var_deflate(id, vl, 1, 1, 4));
    NC_TRY(put_text(id, vx, "standard_name", "projection_x_coordinate"));
    NC_TRY(put_text(id, vx, "units", "m"));
    NC_TRY(put_text(id, vx, "long_name", "x of the pixel centre on the RADOLAN grid"));
    NC_TRY(put_text(id, vy, "standard_name", "projection_y_coordinate"));
    NC_TRY(put_text(id, vy, "units", "m"));
    NC_TRY(put_text(id, vy, "long_name", "y of the pixel centre on the RADOLAN grid (row 0 at the south edge)"));
    double lon0 = 10.0, lat0 = 90.0, ts = 60.0, radius = 6370040.0, zero = 0.0; /* GEO_RADOLAN_PROJ */
    NC_TRY(put_text(id, vcrs, "grid_mapping_name", "polar_stereographic"));
    NC_TRY(nc_put_att_double(id, vcrs, "straight_vertical_longitude_from_pole", NC_DOUBLE, 1, &lon0));
    NC_TRY(nc_put_att_double(id, vcrs, "latitude_of_projection_origin", NC_DOUBLE, 1, &lat0));
    NC_TRY(nc_put_att_double(id, vcrs, "standard_parallel", NC_DOUBLE, 1, &ts));
    NC_TRY(nc_put_att_double(id, vcrs, "false_easting", NC_DOUBLE, 1, &zero));
    NC_TRY(nc_put_att_double(id, vcrs, "false_northing", NC_DOUBLE, 1, &zero));
    NC_TRY(nc_put_att_double(id, vcrs, "earth_radius", NC_DOUBLE, 1, &radius));
    NC_TRY(put_text(id, vcrs, "proj4_params", GEO_RADOLAN_PROJ));
    if (g && *geo_wkt(g))
        NC_TRY(put_text(id, vcrs, "crs_wkt", geo_wkt(g)));
    NC_TRY(put_text(id, vt, "standard_name", "time"));
    NC_TRY(put_text(id, vt, "units", "minutes since 1970-01-01 00:00:00"));
    NC_TRY(put_text(id, vl, "grid_mapping", "crs"));
    NC_TRY(put_text(id, vl, "coordinates", g ? "time lat lon" : "time"));
    NC_TRY(label_attrs(id, vl, res, o, r->unit));
    char title[256];
    snprintf(title, sizeof title, "k-means clusters of the DWD RADOLAN %s composite%s%s", r->product,
             when[0] ? " of " : "", when);
    NC_TRY(put_text(id, NC_GLOBAL, "title", title));
    NC_TRY(put_text(id, NC_GLOBAL, "source", source));
    NC_TRY(put_text(id, NC_GLOBAL, "radolan_product", r->product));
    NC_TRY(put_text(id, NC_GLOBAL, "radolan_time", when[0] ? when : "unknown"));
    NC_TRY(put_text(id, NC_GLOBAL, "radolan_units", r->unit));
    NC_TRY(put_text(id, NC_GLOBAL, "grid",
                    "DWD RADOLAN polar stereographic grid: sphere R = 6370.04 km, true at 60N, central meridian 10E, "
                    "1 km pixels, lower-left corner from DWD's RADOLAN/RADVOR-OP composite format description"));
    NC_TRY(nc_enddef(id));
    NC_TRY(nc_put_var_double(id, vx, x));
    NC_TRY(nc_put_var_double(id, vy, y));
    if (g) {
        NC_TRY(nc_put_var_double(id, vlat, lat));
        NC_TRY(nc_put_var_double(id, vlon, lon));
    }
    int crs = 0;
    NC_TRY(nc_put_var_int(id, vcrs, &crs));
    if (when[0]) {
        struct tm tm = {0};
        sscanf(when, "%4d-%2d-%2dT%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min);
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        double minutes = (double)timegm(&tm) / 60.0;
        NC_TRY(nc_put_var_double(id, vt, &minutes));
    }
    NC_TRY(nc_put_var_int(id, vl, res->labels));
done:
    st = array_nc_finish(&w, st, err, len);
    geo_close(g);
    free(x), free(y), free(lat), free(lon);
    return st;
}

dk_status odim_labels_write(const char *path, const char *source, const odim_sweep *s, int sweep,
                            const int32_t *labels, const radar_result *res, const radar_options *o, char *err,
                            size_t len)
{
    size_t nr = s->nrays, nb = s->nbins;
    if (!array_is_netcdf_name(path)) {
        size_t shape[2] = {nr, nb};
        return npy_write_typed(path, "<i4", 4, 2, shape, labels, err, len);
    }
    double *az = malloc(nr * sizeof *az), *rg = malloc(nb * sizeof *rg);
    double *lat = malloc(nr * nb * sizeof *lat), *lon = malloc(nr * nb * sizeof *lon);
    array_nc w = {0};
    dk_status st = DK_OK;
    geo_proj *g = NULL;
    if (!az || !rg || !lat || !lon) {
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nr; i++)
        az[i] = (i + 0.5) * 360.0 / (double)nr;
    for (size_t j = 0; j < nb; j++)
        rg[j] = s->rstart_km * 1000.0 + (j + 0.5) * s->rscale_m;
    /* bin positions by the 4/3 effective earth radius model (standard refraction): the ground distance
     * of a bin from its height, then the azimuthal equidistant projection around the radar (PROJ) */
    char def[160], why[256];
    snprintf(def, sizeof def, "+proj=aeqd +lat_0=%.8f +lon_0=%.8f +R=6371000 +units=m", s->lat, s->lon);
    g = geo_open(def, why, sizeof why); /* NULL: no lat/lon variables */
    const double d2r = M_PI / 180.0, a_earth = 6371000.0, ke = 4.0 / 3.0, el = s->elangle * d2r;
    for (size_t i = 0; g && i < nr; i++) {
        for (size_t j = 0; j < nb; j++) {
            double r = rg[j];
            double h = sqrt(r * r + ke * a_earth * ke * a_earth + 2 * r * ke * a_earth * sin(el)) - ke * a_earth;
            double ground = ke * a_earth * asin(r * cos(el) / (ke * a_earth + h));
            lon[i * nb + j] = ground * sin(az[i] * d2r);
            lat[i * nb + j] = ground * cos(az[i] * d2r);
        }
        geo_inverse(g, lon + i * nb, lat + i * nb, nb);
    }
    if ((st = array_nc_create(&w, path, err, len)) != DK_OK)
        goto done;
    int id = w.ncid, da, dr, va, vr, vlat = -1, vlon = -1, vl, dims[2];
    NC_TRY(nc_def_dim(id, "azimuth", nr, &da));
    NC_TRY(nc_def_dim(id, "range", nb, &dr));
    dims[0] = da, dims[1] = dr;
    NC_TRY(nc_def_var(id, "azimuth", NC_DOUBLE, 1, &da, &va));
    NC_TRY(nc_def_var(id, "range", NC_DOUBLE, 1, &dr, &vr));
    if (g) {
        NC_TRY(nc_def_var(id, "lat", NC_DOUBLE, 2, dims, &vlat));
        NC_TRY(nc_def_var(id, "lon", NC_DOUBLE, 2, dims, &vlon));
        NC_TRY(put_text(id, vlat, "standard_name", "latitude"));
        NC_TRY(put_text(id, vlat, "units", "degrees_north"));
        NC_TRY(put_text(id, vlon, "standard_name", "longitude"));
        NC_TRY(put_text(id, vlon, "units", "degrees_east"));
    }
    NC_TRY(nc_def_var(id, "labels", NC_INT, 2, dims, &vl));
    NC_TRY(nc_def_var_deflate(id, vl, 1, 1, 4));
    NC_TRY(put_text(id, va, "units", "degrees"));
    NC_TRY(put_text(id, va, "long_name", "azimuth of the ray centre, clockwise from north"));
    NC_TRY(put_text(id, vr, "units", "m"));
    NC_TRY(put_text(id, vr, "long_name", "slant range to the bin centre"));
    if (g)
        NC_TRY(put_text(id, vl, "coordinates", "lat lon"));
    NC_TRY(label_attrs(id, vl, res, o, s->quantity));
    double el_deg = s->elangle;
    NC_TRY(nc_put_att_double(id, NC_GLOBAL, "elevation_angle", NC_DOUBLE, 1, &el_deg));
    NC_TRY(nc_put_att_int(id, NC_GLOBAL, "sweep", NC_INT, 1, &sweep));
    NC_TRY(nc_put_att_double(id, NC_GLOBAL, "radar_latitude", NC_DOUBLE, 1, &s->lat));
    NC_TRY(nc_put_att_double(id, NC_GLOBAL, "radar_longitude", NC_DOUBLE, 1, &s->lon));
    NC_TRY(nc_put_att_double(id, NC_GLOBAL, "radar_height", NC_DOUBLE, 1, &s->height_m));
    NC_TRY(put_text(id, NC_GLOBAL, "odim_quantity", s->quantity));
    NC_TRY(put_text(id, NC_GLOBAL, "odim_source", s->source));
    char when[40];
    snprintf(when, sizeof when, "%.4s-%.2s-%.2sT%.2s:%.2s:%.2sZ", s->date, s->date + 4, s->date + 6, s->time,
             s->time + 2, s->time + 4);
    NC_TRY(put_text(id, NC_GLOBAL, "time", strlen(s->date) == 8 && strlen(s->time) == 6 ? when : "unknown"));
    NC_TRY(put_text(id, NC_GLOBAL, "source", source));
    NC_TRY(nc_enddef(id));
    NC_TRY(nc_put_var_double(id, va, az));
    NC_TRY(nc_put_var_double(id, vr, rg));
    if (g) {
        NC_TRY(nc_put_var_double(id, vlat, lat));
        NC_TRY(nc_put_var_double(id, vlon, lon));
    }
    NC_TRY(nc_put_var_int(id, vl, labels));
done:
    st = array_nc_finish(&w, st, err, len);
    geo_close(g);
    free(az), free(rg), free(lat), free(lon);
    return st;
}

#else

dk_status radolan_labels_write(const char *path, const char *source, const dk_radolan *r, const radar_result *res,
                               const radar_options *o, char *err, size_t len)
{
    (void)source, (void)o;
    if (!array_is_netcdf_name(path)) {
        size_t shape[2] = {r->rows, r->cols};
        return npy_write_typed(path, "<i4", 4, 2, shape, res->labels, err, len);
    }
    return FAIL(DK_ERR_NOT_IMPLEMENTED, "%s: this dakit was built without netCDF support; write the labels as .npy",
                path);
}

dk_status odim_labels_write(const char *path, const char *source, const odim_sweep *s, int sweep,
                            const int32_t *labels, const radar_result *res, const radar_options *o, char *err,
                            size_t len)
{
    (void)source, (void)sweep, (void)res, (void)o;
    if (!array_is_netcdf_name(path)) {
        size_t shape[2] = {s->nrays, s->nbins};
        return npy_write_typed(path, "<i4", 4, 2, shape, labels, err, len);
    }
    return FAIL(DK_ERR_NOT_IMPLEMENTED, "%s: this dakit was built without netCDF support; write the labels as .npy",
                path);
}

#endif
