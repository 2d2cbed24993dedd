#include "kmeans/odim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/netcdf.h"

#define FAIL(st, ...) (snprintf(err, len, __VA_ARGS__), (st))

void odim_free(odim_sweep *s)
{
    free(s->value);
    free(s->state);
    memset(s, 0, sizeof *s);
}

#ifdef DK_HAVE_HDF5
#include <hdf5.h>

int odim_available(void)
{
    return 1;
}

/* A numeric scalar attribute of a group (NAN when absent or not a number). */
static double attr_double(hid_t file, const char *group, const char *name)
{
    double v = NAN;
    if (H5Lexists(file, group, H5P_DEFAULT) <= 0 || H5Aexists_by_name(file, group, name, H5P_DEFAULT) <= 0)
        return NAN;
    hid_t a = H5Aopen_by_name(file, group, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0)
        return NAN;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t c = H5Tget_class(t);
    if (!((c == H5T_FLOAT || c == H5T_INTEGER) && H5Sget_simple_extent_npoints(sp) == 1 &&
          H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0))
        v = NAN;
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return v;
}

/* A string attribute of a group into buf ("" when absent). */
static void attr_string(hid_t file, const char *group, const char *name, char *buf, size_t n)
{
    buf[0] = '\0';
    if (H5Lexists(file, group, H5P_DEFAULT) <= 0 || H5Aexists_by_name(file, group, name, H5P_DEFAULT) <= 0)
        return;
    hid_t a = H5Aopen_by_name(file, group, name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0)
        return;
    hid_t t = H5Aget_type(a);
    if (H5Tget_class(t) == H5T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(t) > 0) {
            char *s = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(buf, n, "%s", s);
                H5free_memory(s);
            }
        } else {
            size_t sz = H5Tget_size(t);
            char *s = calloc(sz + 1, 1);
            H5Tset_size(mt, sz + 1);
            if (s && H5Aread(a, mt, s) >= 0)
                snprintf(buf, n, "%s", s);
            free(s);
        }
        H5Tclose(mt);
    }
    H5Tclose(t);
    H5Aclose(a);
}

/* The data-level attribute, else the dataset-level one. */
static double level_double(hid_t f, const char *data_group, const char *set_group, const char *name)
{
    double v = attr_double(f, data_group, name);
    return isnan(v) ? attr_double(f, set_group, name) : v;
}

dk_status odim_read(const char *path, const char *quantity, int sweep, odim_sweep *out, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    dk_status st = DK_OK;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures become sentences here, not HDF5's stack dumps */
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return FAIL(DK_ERR_IO, "cannot open %s", path);
    fclose(probe);
    if (H5Fis_hdf5(path) <= 0)
        return FAIL(DK_ERR_FORMAT, "%s is not an HDF5 file, so not an ODIM_H5 volume", path);
    char why[1024];
    if (hdf5_points_elsewhere(path, why, sizeof why))
        return FAIL(DK_ERR_FORMAT, "%s", why);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), ds = -1, space = -1;
    if (file < 0)
        return FAIL(DK_ERR_FORMAT, "%s: HDF5 could not open it (damaged?)", path);
    char conv[64], object[16];
    attr_string(file, "/", "Conventions", conv, sizeof conv);
    attr_string(file, "/what", "object", object, sizeof object);
    if (strncmp(conv, "ODIM_H5", 7) != 0) {
        st = FAIL(DK_ERR_FORMAT, "%s is HDF5 but not ODIM_H5 (its root has no Conventions attribute 'ODIM_H5/...')",
                  path);
        goto done;
    }
    if (object[0] && strcmp(object, "PVOL") && strcmp(object, "SCAN")) {
        st = FAIL(DK_ERR_FORMAT, "%s is an ODIM_H5 %s; dakit kmeans --odim reads polar volumes (PVOL) and scans "
                  "(SCAN)", path, object);
        goto done;
    }
    char set[64], group[96], name[128];
    snprintf(set, sizeof set, "/dataset%d", sweep);
    if (H5Lexists(file, set, H5P_DEFAULT) <= 0) {
        int n = 0;
        char g[64];
        for (;;) {
            snprintf(g, sizeof g, "/dataset%d", n + 1);
            if (H5Lexists(file, g, H5P_DEFAULT) <= 0)
                break;
            n++;
        }
        st = FAIL(DK_ERR_INVALID_ARGUMENT, "%s has no sweep %d (it has /dataset1 to /dataset%d)", path, sweep, n);
        goto done;
    }
    /* the dataM that holds the quantity */
    char found[96] = "", have[512] = "";
    for (int m = 1; m < 100; m++) {
        snprintf(group, sizeof group, "%s/data%d", set, m);
        if (H5Lexists(file, group, H5P_DEFAULT) <= 0)
            break;
        char q[32], wg[128];
        snprintf(wg, sizeof wg, "%s/what", group);
        attr_string(file, wg, "quantity", q, sizeof q);
        size_t at = strlen(have);
        snprintf(have + at, sizeof have - at, "%s%s", at ? ", " : "", q[0] ? q : "?");
        if (!strcmp(q, quantity)) {
            snprintf(found, sizeof found, "%s", group);
            break;
        }
    }
    if (!found[0]) {
        st = FAIL(DK_ERR_INVALID_ARGUMENT, "%s: sweep %d has no quantity %s (it has: %s)", path, sweep, quantity,
                  have[0] ? have : "none");
        goto done;
    }
    char what[128], swhat[96], where[96];
    snprintf(what, sizeof what, "%s/what", found);
    snprintf(swhat, sizeof swhat, "%s/what", set);
    snprintf(where, sizeof where, "%s/where", set);
    double gain = level_double(file, what, swhat, "gain"), offset = level_double(file, what, swhat, "offset");
    double nodata = level_double(file, what, swhat, "nodata"), undetect = level_double(file, what, swhat, "undetect");
    double nbins = attr_double(file, where, "nbins"), nrays = attr_double(file, where, "nrays");
    out->elangle = attr_double(file, where, "elangle");
    out->rscale_m = attr_double(file, where, "rscale");
    out->rstart_km = attr_double(file, where, "rstart");
    if (isnan(out->rstart_km))
        out->rstart_km = 0;
    out->lat = attr_double(file, "/where", "lat");
    out->lon = attr_double(file, "/where", "lon");
    out->height_m = attr_double(file, "/where", "height");
    if (isnan(gain) || isnan(offset) || isnan(nbins) || isnan(nrays) || isnan(out->rscale_m) ||
        isnan(out->elangle) || isnan(out->lat) || isnan(out->lon) || isnan(out->height_m)) {
        st = FAIL(DK_ERR_FORMAT, "%s: sweep %d lacks what/gain, offset, where/elangle, nbins, nrays, rscale or the "
                  "radar's /where lat, lon, height", path, sweep);
        goto done;
    }
    /* every number that becomes geometry or a value: finite and in range
     * (an infinite elangle or rscale passed the NaN check and made NaN
     * coordinates and a picture indexed out of bounds) */
    static const struct { const char *name; double lo, hi; } limits[] = {
        {"where/nbins", 1, 100000}, {"where/nrays", 1, 100000}, {"where/elangle (degrees)", -90, 90},
        {"where/rscale (m)", 0, 100000}, {"where/rstart (km)", 0, 10000}, {"/where/lat", -90, 90},
        {"/where/lon", -360, 360}, {"/where/height (m)", -1000, 100000}, {"what/gain", -1e30, 1e30},
        {"what/offset", -1e30, 1e30}, {"what/nodata", -1e300, 1e300}, {"what/undetect", -1e300, 1e300}};
    double value[] = {nbins, nrays, out->elangle, out->rscale_m, out->rstart_km, out->lat, out->lon, out->height_m,
                      gain, offset, isnan(nodata) ? 0 : nodata, isnan(undetect) ? 0 : undetect};
    for (size_t k = 0; k < sizeof limits / sizeof limits[0]; k++)
        if (!(value[k] >= limits[k].lo && value[k] <= limits[k].hi)) {
            st = FAIL(DK_ERR_FORMAT, "%s: sweep %d has %s = %g; it must be a finite number from %g to %g", path,
                      sweep, limits[k].name, value[k], limits[k].lo, limits[k].hi);
            goto done;
        }
    if (out->rscale_m == 0 || gain == 0) {
        st = FAIL(DK_ERR_FORMAT, "%s: sweep %d has %s 0; ODIM needs it non-zero", path, sweep,
                  gain == 0 ? "gain" : "rscale");
        goto done;
    }
    out->nbins = (size_t)nbins;
    out->nrays = (size_t)nrays;
    snprintf(name, sizeof name, "%s/data", found);
    if ((ds = H5Dopen2(file, name, H5P_DEFAULT)) < 0) {
        st = FAIL(DK_ERR_FORMAT, "%s: %s cannot be opened as a dataset", path, name);
        goto done;
    }
    space = H5Dget_space(ds);
    hsize_t dims[2];
    if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, NULL) != 2 ||
        dims[0] != out->nrays || dims[1] != out->nbins) {
        st = FAIL(DK_ERR_FORMAT, "%s: %s is not nrays x nbins (%zu x %zu) as %s says", path, name, out->nrays,
                  out->nbins, where);
        goto done;
    }
    hid_t dtype = H5Dget_type(ds);
    H5T_class_t dclass = dtype >= 0 ? H5Tget_class(dtype) : H5T_NO_CLASS;
    if (dtype >= 0)
        H5Tclose(dtype);
    if (dclass != H5T_INTEGER && dclass != H5T_FLOAT) {
        st = FAIL(DK_ERR_FORMAT, "%s: %s holds %s, not numbers; ODIM data are integers or floats", path, name,
                  dclass == H5T_STRING ? "text (strings)" : "values of another HDF5 class (compound, enum, ...)");
        goto done;
    }
    size_t nb[2] = {out->nrays, out->nbins}, n, bytes;
    double gib = 0;
    if (size_product(nb, 2, sizeof(double) + sizeof(float) + 1, &n, &bytes) != 0 || !size_fits_memory(bytes, &gib)) {
        st = FAIL(DK_ERR_FORMAT, "%s: %s's %zu x %zu bins need more than this machine's memory (%.3g GiB)", path,
                  name, out->nrays, out->nbins, gib);
        goto done;
    }
    double *raw = malloc(n * sizeof *raw);
    out->value = malloc(n * sizeof *out->value);
    out->state = malloc(n);
    if (!raw || !out->value || !out->state) {
        free(raw);
        st = FAIL(DK_ERR_OUT_OF_MEMORY, "out of memory for %zu x %zu bins", out->nrays, out->nbins);
        goto done;
    }
    if (H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
        free(raw);
        st = FAIL(DK_ERR_FORMAT, "%s: reading %s failed: the dataset is damaged (or compressed with a filter this "
                  "HDF5 lacks)", path, name);
        goto done;
    }
    out->max_value = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (raw[i] == nodata) {
            out->state[i] = 0, out->value[i] = NAN, out->nodata++;
        } else if (raw[i] == undetect) {
            out->state[i] = 1, out->value[i] = NAN, out->undetect++;
        } else {
            out->state[i] = 2;
            out->value[i] = (float)(offset + gain * raw[i]);
            if (!isfinite(out->value[i])) {
                st = FAIL(DK_ERR_FORMAT, "%s: %s at ray %zu, bin %zu holds %g, which gives %g (offset + gain * "
                          "value): not a finite number", path, name, i / out->nbins, i % out->nbins, raw[i],
                          offset + gain * raw[i]);
                free(raw);
                goto done;
            }
            out->values++;
            if (out->value[i] > out->max_value)
                out->max_value = out->value[i];
        }
    }
    free(raw);
    snprintf(out->quantity, sizeof out->quantity, "%s", quantity);
    attr_string(file, swhat, "startdate", out->date, sizeof out->date);
    attr_string(file, swhat, "starttime", out->time, sizeof out->time);
    if (!out->date[0])
        attr_string(file, "/what", "date", out->date, sizeof out->date);
    if (!out->time[0])
        attr_string(file, "/what", "time", out->time, sizeof out->time);
    attr_string(file, "/what", "source", out->source, sizeof out->source);
done:
    if (space >= 0)
        H5Sclose(space);
    if (ds >= 0)
        H5Dclose(ds);
    H5Fclose(file);
    if (st != DK_OK)
        odim_free(out);
    return st;
}

#else

int odim_available(void)
{
    return 0;
}

dk_status odim_read(const char *path, const char *quantity, int sweep, odim_sweep *out, char *err, size_t len)
{
    (void)quantity, (void)sweep;
    memset(out, 0, sizeof *out);
    return FAIL(DK_ERR_NOT_IMPLEMENTED, "cannot read %s: this dakit was built without HDF5, so without ODIM_H5 "
                "support (install libhdf5-dev, e.g. by tools/setup, and build again)", path);
}

#endif
