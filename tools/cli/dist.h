/* The dakit command under mpirun (docs/distributed.md, "Command line"):
 * what gauss, enkf and kmeans share when each rank works on its own part of
 * the files. The MPI parts exist only where libdakit-mpi was built
 * (DK_TOOLS_MPI); --decomp parsing is there always, so that a single process
 * can refuse a split it cannot make. */
#ifndef DAKIT_TOOLS_CLI_DIST_H
#define DAKIT_TOOLS_CLI_DIST_H

#include <stddef.h>

#include <dakit/dakit.h>

/* "4", "2x2", "1x1x3": the pieces per axis (each 1 to 1000000, at most
 * DK_MAX_DIMS of them). 0 with *n set, or 2 with the sentence printed as
 * "dakit CMD: ..." (the usage status). */
int dist_parse_decomp(const char *cmd, const char *s, int decomp[DK_MAX_DIMS], int *n);
/* A single process: 0 when decomp asks for one piece, else 2 with a sentence
 * that says to start it with mpirun. */
int dist_single_process(const char *cmd, const char *s, const int *decomp, int n);

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

/* Whether this process is one of several ranks: started by an MPI launcher
 * with more than one process, or MPI already initialized with more than one.
 * Initializes MPI where needed and returns the number of ranks (> 1), with
 * *own set when this call initialized MPI (pass it to dist_end); returns 0
 * (and leaves MPI finalized again) for a single process. */
int dist_begin(int *own);
void dist_end(int own);

/* For `dakit conform|bench --ranks P`: the number of ranks the launcher
 * started (from its environment), or 0 when this process was not started by
 * one. */
int dist_launched_size(void);
/* Not under a launcher: runs this same command under mpirun with P ranks
 * (argv: the subcommand's, argv[0] its name), replacing this process. The
 * launcher is DAKIT_MPIRUN, words split at blanks (default "mpirun"; say
 * "mpirun --oversubscribe" to start more ranks than cores). Returns only on
 * failure, with the sentence printed: 1. */
int dist_relaunch(const char *cmd, int ranks, int argc, char **argv);

/* Collective on MPI_COMM_WORLD: 0 when no rank failed; else 1 on every rank
 * with the sentence of the lowest failing rank in msg (len bytes on every
 * rank). */
int dist_agree(int failed, char *msg, size_t len);

/* This rank's part of a field of ndim axes and shape (the file `path`, for
 * the sentences): decomp (ndecomp pieces per axis, their product the number
 * of ranks) or, with ndecomp 0, slabs along axis 0. 0, or 2 with the
 * sentence printed (the same on every rank). */
int dist_decompose(const char *cmd, const char *path, int ndim, const size_t *shape, const int *decomp, int ndecomp,
                   dk_mpi_part *part);

/* Each rank its own GPU by its node-local rank, unless DAKIT_DEVICE is set;
 * the cpu backend is left alone. The index wraps around the devices of the
 * backend, so several ranks may share one. Collective. */
void dist_choose_device(const char *backend);

/* Collective: writes the .npy at path (descr as NumPy spells it, esize its
 * bytes, ndim and shape for its header) of which this rank holds a box in C
 * order: [offset, offset + extent) of the same values seen as an array of
 * vdim axes and shape vshape (the enkf state N seen as nx x ny, say; vshape
 * may be shape). An empty box writes nothing. Rank 0 makes the temporary
 * file and its header, each rank writes its rows at their offsets, and the
 * file gets its name only when every rank succeeded; on failure it is
 * removed. 0, or 1 on every rank with the same sentence. */
int dist_write_npy(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape, int vdim,
                   const size_t *vshape, const size_t *offset, const size_t *extent, const void *box, char *msg,
                   size_t len);

/* Writes a whole array held by rank 0 (the others pass anything): the same
 * as dist_write_npy with rank 0 owning everything. */
int dist_write_npy_root(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                        const void *data, char *msg, size_t len);

/* Every rank-dependent check agreed: each rank reads its own copy of the
 * inputs (node-local files), and a rank whose copy differs from rank 0's
 * would leave the others waiting in a collective. Both are collective and
 * return 0, or 1 on every rank with the sentence of the lowest rank that
 * differs. dist_same_header compares an array's dtype and shape (the header
 * of the file path); dist_same_bytes n bytes of data (by length and a 64-bit
 * hash), for inputs every rank reads whole (what names them). */
int dist_same_header(const char *path, dk_dtype dtype, int ndim, const size_t *shape, char *msg, size_t len);
int dist_same_bytes(const char *what, const void *data, size_t n, char *msg, size_t len);

/* Collective: the array of vdim axes and shape vshape of which each rank
 * holds the box [offset, offset + extent) in C order (esize bytes a value),
 * assembled on rank 0 in *whole (a new allocation; NULL elsewhere). 0, or 1
 * on every rank with the same sentence. */
int dist_gather_box(size_t esize, int vdim, const size_t *vshape, const size_t *offset, const size_t *extent,
                    const void *box, void **whole, char *msg, size_t len);

/* Whether the ranks write path together, each its box at its offsets: a
 * .npy name without a member pattern. Any other output (netCDF, one file
 * per member) is written by rank 0 alone, by the writer of one process. */
int dist_writes_in_parts(const char *path);

/* An output's one-process writer: writes the whole array at path (from
 * dist_gather_box) with what arg carries; 0, or nonzero with the sentence
 * in err. */
typedef int (*dist_root_writer)(const char *path, const void *whole, void *arg, char *err, size_t len);

/* Collective: writes the output path in the format its name says. A
 * dist_writes_in_parts name: dist_write_npy (descr, esize, ndim, shape as
 * there); else the boxes gathered on rank 0, which calls write. 0, or 1 on
 * every rank with the same sentence and no file made. */
int dist_write(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape, int vdim,
               const size_t *vshape, const size_t *offset, const size_t *extent, const void *box,
               dist_root_writer write, void *arg, char *msg, size_t len);
/* The same for a whole array that rank 0 holds (the others pass anything). */
int dist_write_root(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                    const void *data, dist_root_writer write, void *arg, char *msg, size_t len);
#endif

#endif
