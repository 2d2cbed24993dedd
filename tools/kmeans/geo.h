/* Radar products placed on the earth: projections through PROJ (latitude
 * and longitude of a product's x/y, the graticule of a picture) and the
 * coastlines and national borders of GSHHG's binned netCDF files (GMT's
 * format, as Debian's gmt-gshhg packages install them). Built without PROJ
 * (libproj-dev), geo_open fails with a sentence; without GSHHG files or
 * without netCDF, geo_shorelines finds nothing. */
#ifndef DAKIT_TOOLS_KMEANS_GEO_H
#define DAKIT_TOOLS_KMEANS_GEO_H

#include <stddef.h>

/* DWD's RADOLAN grid: polar stereographic on a sphere of radius 6370.04 km,
 * true at 60 N, central meridian 10 E; x/y in metres. */
#define GEO_RADOLAN_PROJ "+proj=stere +lat_0=90 +lat_ts=60 +lon_0=10 +R=6370040 +x_0=0 +y_0=0 +units=m"

typedef struct geo_proj geo_proj;

/* 1 when this dakit was built with PROJ. */
int geo_available(void);
/* A projection from a PROJ string whose x/y are metres; NULL with a
 * sentence in err. */
geo_proj *geo_open(const char *definition, char *err, size_t len);
void geo_close(geo_proj *g);
/* In place, n points: longitude/latitude in degrees to x/y in metres
 * (forward) or back (inverse); NAN where a point has no image. */
void geo_forward(geo_proj *g, double *lon_x, double *lat_y, size_t n);
void geo_inverse(geo_proj *g, double *x_lon, double *y_lat, size_t n);
/* The definition as OGC WKT 2 (CF's crs_wkt), or "" when PROJ cannot say. */
const char *geo_wkt(geo_proj *g);

/* Polylines in longitude/latitude (degrees): line i is points start[i] ..
 * start[i + 1] - 1. */
typedef struct geo_lines {
    size_t nlines, npoints;
    size_t *start; /* nlines + 1 */
    double *lon, *lat;
} geo_lines;

/* The shorelines (kind 0: coasts and lake shores) or national borders
 * (kind 1) that reach into the box lon0 .. lon1, lat0 .. lat1, from the
 * GSHHG files in DAKIT_GSHHG_DIR (when set, the only place looked in) or
 * else /usr/share/gmt-gshhg, at the finest
 * resolution installed that suits a box of about span_km across. 0 with
 * the lines (none when no file is installed), -1 when memory ran out or a
 * file is damaged. */
int geo_shorelines(int kind, double lon0, double lon1, double lat0, double lat1, double span_km, geo_lines *out);
void geo_lines_free(geo_lines *l);

#endif
