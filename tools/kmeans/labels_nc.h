/* Cluster labels as CF netCDF, placed on the earth:
 * - a RADOLAN composite's labels on DWD's polar-stereographic grid, with
 *   x/y in metres, lat/lon per pixel and a grid_mapping, the product, time
 *   and unit as attributes;
 * - an ODIM_H5 sweep's labels on its polar grid (azimuth, range), with the
 *   radar's position, elevation and lat/lon per bin.
 * Latitude and longitude come from PROJ (kmeans/geo.h); a dakit built
 * without it writes no lat/lon variables.
 * A name not ending in .nc gets the int32 .npy of before. */
#ifndef DAKIT_TOOLS_KMEANS_LABELS_NC_H
#define DAKIT_TOOLS_KMEANS_LABELS_NC_H

#include <dakit/dakit.h>

#include "kmeans/odim.h"
#include "kmeans/radar.h"
#include <dakit/radolan.h>

/* The time in the header of the composite at path (gzip or plain) as ISO
 * 8601 "YYYY-MM-DDThh:mmZ"; 0, or -1 when it cannot be read. */
int radolan_time(const char *path, char *iso, size_t n);

dk_status radolan_labels_write(const char *path, const char *source, const dk_radolan *r, const radar_result *res,
                               const radar_options *o, char *err, size_t len);
dk_status odim_labels_write(const char *path, const char *source, const odim_sweep *s, int sweep,
                            const int32_t *labels, const radar_result *res, const radar_options *o, char *err,
                            size_t len);

#endif
