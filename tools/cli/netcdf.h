/* Array files of the dakit command: NumPy .npy (cli/npy.h) or netCDF (CF),
 * read and written in this one place, so that every command that takes a
 * .npy takes a netCDF variable too.
 *
 * An input is named by a spec:
 *   X.npy                     a .npy file
 *   X.nc:VAR                  the variable VAR of a netCDF file (classic or
 *                             netCDF-4); X.nc alone when it holds one data
 *                             variable, or with the variable given apart
 *   X.nc:VAR[time=3,y=0:50]   a hyperslab: a dimension given one index is
 *                             dropped, one given start:stop keeps [start, stop);
 *                             dimensions not named are read whole
 *   mem_{:03d}.nc:VAR         ensembles only: one file per member, numbered
 *                             from 0 (or from 1 when no file 0 exists) up to
 *                             the first number with no file; {} {:d} {:3d}
 *                             {:03d} as Python's str.format spells them
 * The format of an input is told by its first bytes, so a misnamed file gets
 * the right sentence; an output's format follows its name: .nc (netCDF-4)
 * or anything else (.npy). A netCDF output written "like" a netCDF input
 * keeps that input's dimension names, their coordinate variables (cut to the
 * hyperslab), the global attributes and, where the result is the same
 * quantity, the variable's attributes; it prepends a line to the global
 * `history` attribute. Outputs are written whole or not at all
 * (cli/output.h).
 *
 * Without netCDF-C at build time (meson's netcdf option) a netCDF name is
 * refused with a sentence that says so. */
#ifndef DAKIT_TOOLS_CLI_NETCDF_H
#define DAKIT_TOOLS_CLI_NETCDF_H

#include <stddef.h>
#include <stdint.h>

#include "cli/npy.h"
#include "cli/output.h"

#define ARRAY_NAME_MAX 256

/* Where an array came from: what a netCDF output copies. */
typedef struct array_origin {
    int netcdf;                  /* 0: a .npy file (or nothing) */
    char path[4096];             /* the file (for a pattern: its first member) */
    char var[ARRAY_NAME_MAX];
    int ndim;                    /* the kept dimensions, in the file's order */
    char dim[NPY_MAX_DIMS][ARRAY_NAME_MAX];
    size_t start[NPY_MAX_DIMS], count[NPY_MAX_DIMS]; /* of each kept dimension in the file */
    /* ensembles: the kept dimension that numbers the members (-1: none; a
     * pattern: the members are the files) */
    int member;
    char pattern[4096];          /* ensembles split over files: the spec's file pattern; "" otherwise */
    int first;                   /* the pattern's first member number */
} array_origin;

/* 1 when this dakit reads and writes netCDF. */
int array_have_netcdf(void);

/* Reads an array (float32 stays float32, other types become float64;
 * scale_factor and add_offset are applied and _FillValue/missing_value
 * become NaN). var: the variable when the spec names none (--var), or
 * NULL. origin may be NULL. */
dk_status array_read(const char *spec, const char *var, npy_array *out, array_origin *origin, char *err,
                     size_t len);

/* An ensemble as an N x L array (state, member), float64 or float32:
 * a .npy as it is (it must be 2-D); a netCDF variable with its member
 * dimension (named member, members, ens, ensemble, realization, number or
 * mem, or whose coordinate has standard_name realization) moved last and the
 * others flattened in order, so (member, y, x) and (y, x, member) both give
 * (y*x, member); a 2-D variable without one is taken as (N, L); a pattern
 * stacks one flattened variable per file. */
dk_status array_read_ensemble(const char *spec, const char *var, npy_array *out, array_origin *origin, char *err,
                              size_t len);

typedef enum array_kind { ARRAY_F32, ARRAY_F64, ARRAY_I32 } array_kind;

/* Writes data (C order, shape[ndim]) to path, netCDF when path ends in .nc.
 * name: the netCDF variable. like: an input whose dimensions a netCDF output
 * takes where ndim and the sizes agree (else dim0, dim1, ...), with their
 * coordinates and the global attributes; same_quantity: also the input
 * variable's attributes (units, long_name). For I32 a netCDF variable gets
 * _FillValue -1. */
dk_status array_write(const char *path, const char *name, array_kind kind, int ndim, const size_t *shape,
                      const void *data, const array_origin *like, int same_quantity, char *err, size_t len);

/* An N x L ensemble result (float64) written in the layout of the ensemble
 * it came from: a netCDF output takes like's dimension order (member first,
 * last or between), or one file per member when path holds a {} pattern;
 * a .npy output is N x L. */
dk_status array_write_ensemble(const char *path, const double *data, size_t N, size_t L, const array_origin *like,
                               char *err, size_t len);

/* An N x M result over the state of an ensemble (enkf cov's PHT): a netCDF
 * output takes like's state dimensions (without the member one) and a last
 * dimension called second_dim. */
dk_status array_write_state_by(const char *path, const char *name, const double *data, size_t N, size_t M,
                               const array_origin *like, const char *second_dim, char *err, size_t len);

/* 1 when path names a netCDF output (ends in .nc, .nc4 or .netcdf). */
int array_is_netcdf_name(const char *path);
/* A spec's file and what follows its ':' (*rest NULL when nothing does):
 * the longest prefix that names a file, else the part before the first ':'. */
void array_split_spec(const char *spec, char *path, size_t plen, const char **rest);
/* What a file's first bytes say: 'n' .npy, 'c' netCDF (classic or HDF5-based), 0 neither or unreadable. */
int array_sniff(const char *path);

/* For writers of their own netCDF layouts (kmeans/labels_nc.c): a netCDF-4
 * file made at a temporary name, with Conventions CF-1.8 and the history
 * line; array_nc_finish(w, st) renames it when st is DK_OK and everything was
 * written, else removes it, and returns the final status. */
typedef struct array_nc {
    output o;
    int ncid, open, have_output;
} array_nc;
dk_status array_nc_create(array_nc *w, const char *path, char *err, size_t len);
dk_status array_nc_finish(array_nc *w, dk_status st, char *err, size_t len);

/* 1 with a sentence in why when the HDF5 file at path (netCDF-4, ODIM_H5)
 * would make a reader open other files: a dataset with external storage,
 * a virtual dataset or an external link. 0 otherwise, also when path is not
 * HDF5 or this dakit has no HDF5. The readers refuse such files: following
 * them reads files the user did not name (and hangs on a FIFO). */
int hdf5_points_elsewhere(const char *path, char *why, size_t len);

/* The history line a netCDF output gets: "<UTC time>: dakit <args>" of the
 * running command (set by dakit_main). */
void array_set_command_line(int argc, char **argv);

#endif
