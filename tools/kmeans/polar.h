/* dakit kmeans --odim: one sweep of an ODIM_H5 volume clustered on its
 * polar grid (rays x bins), the contiguity window and the texture wrapping
 * in azimuth, the labels written and a PPI picture drawn. */
#ifndef DAKIT_TOOLS_KMEANS_POLAR_H
#define DAKIT_TOOLS_KMEANS_POLAR_H

#include <dakit/dakit.h>

#include "kmeans/radar.h"

/* The exit status of the command (messages printed). ctx NULL: the serial references. */
int polar_kmeans(dk_context *ctx, const char *path, const char *quantity, int sweep, const radar_options *o,
                 const char *labels_path, const char *png_path);

/* Rays added before ray 0 and after the last one, copies of the sweep's
 * other end, so that windows and smoothing reach across north. */
int polar_wrap_rays(const radar_options *o, size_t nrays);

#endif
