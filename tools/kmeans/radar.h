/* The radar pipeline of `dakit kmeans --radolan` and `dakit bench kmeans`:
 * texture features of a reflectivity composite (gauss on the device), then
 * contiguity-weighted k-means, and the picture. */
#ifndef DAKIT_TOOLS_KMEANS_RADAR_H
#define DAKIT_TOOLS_KMEANS_RADAR_H

#include <dakit/dakit.h>

#include <dakit/radolan.h>

typedef struct radar_options {
    int k;
    double lambda;
    int window;
    double min_value;     /* pixels below are masked (dBZ for RX) */
    double texture_sigma; /* pixels */
    int iters;
    double tol;
    const char *variant; /* the kmeans variant; NULL: the backend's default */
} radar_options;

#define RADAR_FEATURES 3 /* reflectivity, local mean, local standard deviation */

typedef struct radar_result {
    int k;
    int32_t *labels;         /* rows * cols, -1 masked */
    float *centroids;        /* k * RADAR_FEATURES, standardized units */
    dk_kmeans_result kmeans;
    double seconds, feature_seconds, cluster_seconds;
    size_t *sizes;                                   /* per cluster */
    double *mean_value, *mean_local, *mean_std;      /* per cluster, physical units */
    /* A dry scan (fewer pixels to cluster than k): every label -1, the
     * centroids NAN, and this sentence says why; "" when clustered. */
    char dry[160];
} radar_result;

/* Reusable state: plans and device buffers for one grid (the benchmark runs
 * it many times). ctx NULL: the serial references. */
typedef struct radar_pipeline radar_pipeline;
dk_status radar_pipeline_create(dk_context *ctx, size_t rows, size_t cols, const radar_options *o,
                                radar_pipeline **out, char *err, size_t len);
/* Decoded values (NAN = no data) in host memory to labels in host memory;
 * on a device only the values go over and the labels and centroids come
 * back (written there by the kernels where the backend can wrap that
 * memory: dk_host_alloc memory on cuda). On cuda the run queues its calls
 * with DK_QUEUE_ASYNC on the context's own stream and leaves the context
 * with no caller's queue. Fills labels/centroids and result->kmeans,
 * feature_seconds (upload and features), cluster_seconds (clustering and
 * the copies back). */
dk_status radar_pipeline_run(radar_pipeline *p, const float *value, int32_t *labels, float *centroids,
                             radar_result *result, char *err, size_t len);
void radar_pipeline_destroy(radar_pipeline *p);

/* One rank's share of the pipeline under mpirun (kmeans/cmd.c): the
 * features of rows [row0, row0 + nrows) of the rows x cols grid `value`
 * (every rank holds the whole grid), before standardization, point-major
 * (nrows * cols x RADAR_FEATURES), with the mask, and the band's unmasked
 * count and per-feature sums and sums of squares (double, pixel order) in
 * sums[0], sums[1 ..] and sums[1 + RADAR_FEATURES ..]. The planes are
 * smoothed over the band widened by the gauss halo (dk_gauss_window_halo),
 * so the values are those of the whole grid to rounding; the arithmetic is
 * dk_kmeans_texture_features_reference's. ctx NULL: the gauss reference. */
dk_status radar_band_features(dk_context *ctx, const float *value, size_t rows, size_t cols, size_t row0,
                              size_t nrows, const radar_options *o, float *feat, uint8_t *mask,
                              double sums[1 + 2 * RADAR_FEATURES], char *err, size_t len);
/* One call: pipeline, statistics per cluster. */
dk_status radar_cluster(dk_context *ctx, const dk_radolan *r, const radar_options *o, radar_result *out,
                        char *err, size_t len);
void radar_result_free(radar_result *r);
/* Where a picture's pixels lie: column 0's west edge and row 0's south edge
 * in km, the pixel's side in km, and what the data are for the title
 * ("ODIM_H5 PPI, DBZH, 0.5 deg"); the time is the radolan's. proj: the
 * PROJ string that turns the frame's x/y (in metres: km * 1000) into
 * longitude and latitude, for the graticule, coasts and borders; NULL: no
 * map, and the axes name xname/yname in km. ring_km > 0: range rings that
 * far apart around the radar at x = y = 0, and the radar's site marked. */
typedef struct radar_frame {
    double x0_km, y0_km, pixel_km;
    const char *xname, *yname;
    const char *product;
    const char *proj;
    double ring_km;
} radar_frame;
/* The picture (PNG, SVG or PDF by path's extension): the reflectivity with
 * its colour bar beside the cluster map, north up, with latitude and
 * longitude lines, coasts and borders where the frame has a projection.
 * The clusters are coloured by their mean value on a sequential palette,
 * and the legend lists them from the strongest down (each cluster's mean
 * and share, and what the greys mean); a dry scan says so on the map.
 * source names the input in the subtitle. frame NULL: a RADOLAN grid, its
 * projection when dakit knows the grid (900 x 900, 1100 x 900), else 1 km
 * pixels from its south-west corner. 0, or -1 with a sentence in err. */
int radar_picture(const dk_radolan *r, const radar_result *res, const radar_options *o, const radar_frame *frame,
                  const char *source, const char *path, char *err, size_t len);

#endif
