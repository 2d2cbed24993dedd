/* An input read a part at a time, for the dakit command under mpirun: the
 * header of the array that array_read would return for a spec (.npy, or a
 * netCDF variable with its hyperslab), then any box of it. A netCDF box is
 * read by array_read itself, through a hyperslab made from the box, so its
 * values are decoded exactly as one process decodes them. Member patterns
 * (ensembles split over files) are not taken. */
#ifndef DAKIT_TOOLS_CLI_NETCDF_DIST_H
#define DAKIT_TOOLS_CLI_NETCDF_DIST_H

#include <stddef.h>

#include "cli/netcdf.h"

typedef struct array_source {
    npy_array hdr;            /* dtype (as array_read gives it), ndim, shape, count; data NULL */
    int netcdf;
    size_t npy_offset;        /* a .npy: where its data start */
    char path[4096];          /* the file */
    char var[ARRAY_NAME_MAX]; /* netCDF: the variable */
    char fixed[1024];         /* netCDF: the spec's single-index items ("time=3,"), kept in every box */
    char dim[NPY_MAX_DIMS][ARRAY_NAME_MAX]; /* netCDF: the kept dimensions */
    size_t start[NPY_MAX_DIMS];             /* and where the array starts along each in the file */
} array_source;

/* Reads the header (and, for netCDF, checks the spec as array_read does by
 * reading one value). origin: as array_read fills it (member -1), or NULL.
 * DK_OK, or a status with the sentence in err. */
dk_status array_source_open(array_source *s, const char *spec, const char *var, array_origin *origin, char *err,
                            size_t len);
/* Reads the box [offset, offset + extent) of the array (C order, axes of
 * s->hdr) into dst, values of s->hdr.dtype. */
dk_status array_source_read_box(const array_source *s, const size_t *offset, const size_t *extent, void *dst,
                                char *err, size_t len);

#endif
