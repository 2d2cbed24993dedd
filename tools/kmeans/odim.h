/* ODIM_H5 polar volumes (OPERA Data Information Model, EUMETNET OPERA,
 * version 2.x): one sweep of one quantity, read with the HDF5 C API.
 * /datasetN is sweep N (from 1); /datasetN/dataM/what/quantity names the
 * quantity; raw values become physical ones as value = offset + gain * raw,
 * raw == nodata is "not scanned" and raw == undetect "scanned, no echo";
 * /datasetN/where gives elangle (degrees), nbins, nrays, rscale (m between
 * bins) and rstart (km to the first bin); row i of the data is the ray
 * centred at azimuth (i + 0.5) * 360 / nrays degrees from north. what/ and
 * where/ may sit at the data or the dataset level; the data level wins. */
#ifndef DAKIT_TOOLS_KMEANS_ODIM_H
#define DAKIT_TOOLS_KMEANS_ODIM_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

typedef struct odim_sweep {
    size_t nrays, nbins;
    double elangle, rscale_m, rstart_km;
    double lat, lon, height_m;     /* the radar, from /where */
    char quantity[32], date[16], time[16], source[256];
    float *value;                  /* nrays * nbins, ray-major; NAN: nodata or undetect */
    uint8_t *state;                /* per bin: 0 nodata, 1 undetect, 2 a value */
    size_t values, undetect, nodata;
    float max_value;
} odim_sweep;

/* 1 when this dakit reads ODIM_H5 (built with HDF5). */
int odim_available(void);
/* Reads sweep (1-based) of quantity from path; DK_ERR_IO/FORMAT/INVALID_ARGUMENT with a sentence. */
dk_status odim_read(const char *path, const char *quantity, int sweep, odim_sweep *out, char *err, size_t len);
void odim_free(odim_sweep *s);

#endif
