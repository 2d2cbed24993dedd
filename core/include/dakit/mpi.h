/* dakit over MPI: the distributed layer (libdakit-mpi, pkg-config dakit-mpi).
 *
 * libdakit itself stays free of MPI; this header and its library are built
 * only where MPI was found (meson option `mpi`). A distributed plan is made
 * from an MPI communicator, the global description of the problem and this
 * rank's part of it; it is created and executed collectively: every rank of
 * the communicator makes the same calls in the same order. Each rank brings
 * its own context (its own backend and device). docs/distributed.md has the
 * whole story.
 *
 * Errors: every call returns a dk_status. The layer's sentence is read with
 * dk_mpi_last_error() (per thread), not dk_last_error(): a collective call
 * that failed on any rank fails on every rank with the same status and the
 * same sentence, which names the first (lowest) failing rank and, where the
 * failure came from libdakit on that rank, carries libdakit's sentence.
 * Communication failures follow the communicator's MPI error handler (by
 * default MPI aborts the job); the layer never waits for a rank that has
 * given up. */
#ifndef DAKIT_MPI_H
#define DAKIT_MPI_H

#include <mpi.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

/* This rank's box of the global field: along each axis a (a < ndim) the
 * global indices [offset[a], offset[a] + extent[a]). The local data is the
 * box in C order (the last axis contiguous). The parts of all ranks must
 * tile the global field: no overlap, no gap. A part may be empty (an extent
 * of 0): that rank holds nothing but still takes part in every call. */
typedef struct dk_mpi_part {
    size_t offset[DK_MAX_DIMS], extent[DK_MAX_DIMS];
} dk_mpi_part;

/* A distributed plan: validated parameters, local plans, the exchange
 * pattern and the buffers execute needs. */
typedef struct dk_mpi_plan dk_mpi_plan;

/* The sentence describing the calling thread's last failure of a dk_mpi_
 * call ("no error" when there was none). Never NULL. */
const char *dk_mpi_last_error(void);

/* Cuts a field of `shape` into a grid of boxes and gives this rank's.
 * ranks_per_axis: NULL cuts slabs along axis 0 (one per rank); else the
 * number of pieces along each of the ndim axes, whose product must be the
 * communicator's size. Ranks are placed on the grid in C order (the last
 * axis varies fastest); along an axis of n values cut into p pieces, the
 * first n % p pieces are one value longer. More pieces than values leaves
 * empty parts. Not collective: it only reads the rank and the size. */
dk_status dk_mpi_decompose(MPI_Comm comm, int ndim, const size_t shape[], const int ranks_per_axis[],
                           dk_mpi_part *part);

/* Collective. global: the description of the whole field (the same on every
 * rank; checked); part: this rank's box. Every rank checks that all passed
 * the same description and that the parts tile the field, and makes its
 * local plans on ctx; if anything fails on any rank, every rank returns the
 * same status and sentence and *plan is NULL.
 *
 * Exact mode is distributed along any axis (slabs, tiles, any tiling by
 * boxes): the result equals the single-process result to rounding,
 * whatever the number of ranks. Overlap mode is accepted only where no
 * filtered axis is split between ranks (docs/distributed.md). The plan
 * duplicates comm for its own messages; comm may be freed afterwards. */
dk_status dk_mpi_gauss_plan_create(dk_context *ctx, MPI_Comm comm, const dk_gauss_desc *global,
                                   const dk_mpi_part *part, dk_mpi_plan **plan);

/* Collective. in_local, out_local: host memory holding this rank's box in C
 * order (the part's volume, in the plan's dtype); in_local == out_local
 * filters in place. Returns when this rank's result is in out_local. */
dk_status dk_mpi_gauss_execute_host(dk_mpi_plan *plan, const void *in_local, void *out_local);

/* Collective. The same on device buffers of the plan's context, where the
 * field already lives: in_local and out_local hold this rank's box in C
 * order (at least the part's volume); in_local == out_local filters in
 * place. Halos go device to device through the plan's device communicator
 * where there is one (dk_mpi_plan_transport), else through host memory and
 * MPI. The first call makes the plan's device scratch (about its part's
 * volume, twice where an axis is exchanged) and, collectively, the device
 * communicator. Needs a backend that copies boxes between its buffers
 * (every one in dakit does). */
dk_status dk_mpi_gauss_execute(dk_mpi_plan *plan, const dk_buffer *in_local, dk_buffer *out_local);

/* The plan's NaN policy (dk_gauss_nan in dakit/gauss.h): a plan starts
 * with DK_GAUSS_NAN_ERROR, under which dk_mpi_gauss_execute_host refuses
 * NaN in any rank's part (every rank returns the sentence of the lowest
 * such rank, with the global index of its first NaN); PROPAGATE filters
 * them as numbers. IGNORE is not distributed (DK_ERR_NOT_IMPLEMENTED).
 * dk_mpi_gauss_execute does not read device data back: there NaN
 * propagates. Local: call it on every rank with the same policy. */
dk_status dk_mpi_gauss_plan_set_nan(dk_mpi_plan *plan, dk_gauss_nan policy);

/* How a distributed gauss plan filters the axes that are split between
 * ranks: "halo" where every rank's plugin filters its box in place with
 * the received halos in their own buffers (dk_gauss_ops.execute_halo),
 * "widened" where a widened copy of the box is filtered instead, "local"
 * where no filtered axis is split (nothing is exchanged); NULL for a plan
 * that is not a distributed gauss plan. The same on every rank. Local. */
const char *dk_mpi_gauss_plan_path(const dk_mpi_plan *plan);

/* How the plan's reductions cross ranks: "device (nccl)" where every rank's
 * backend offers device-side communication on a device of its own, else
 * "host (MPI): " and the reason (docs/distributed.md, "Device-side
 * communication"). The same on every rank. Never NULL. */
const char *dk_mpi_plan_transport(const dk_mpi_plan *plan);

/* Collective (it frees the plan's communicator). NULL is ignored. Frees
 * gauss and enkf plans alike. */
void dk_mpi_plan_destroy(dk_mpi_plan *plan);

/* What a plan's executes spent communicating on this rank, since it was
 * made or last reset: the wall time inside the MPI calls that move data or
 * agree on an outcome (waiting for a slower rank included), and their
 * number. Not collective. Computation time is the caller's execute time
 * minus comm_seconds. */
typedef struct dk_mpi_stats {
    double comm_seconds;
    uint64_t comm_calls;
} dk_mpi_stats;

dk_status dk_mpi_plan_stats(const dk_mpi_plan *plan, dk_mpi_stats *stats);
/* Zeroes the plan's counts (between a warm-up and the timed runs, say). */
dk_status dk_mpi_plan_stats_reset(dk_mpi_plan *plan);
/* Where a plan queues its collectives on the device's queue (gauss on
 * device buffers with a device communicator, dk_mpi_plan_transport), the
 * stats count only the time to queue them, and the wait that ends the call
 * waits for the filtering too. With profile on (1), an execute first waits
 * for the work queued before each collective and then for the collective
 * itself, so that comm_seconds is the collectives' own time; that wait
 * costs what queueing saves, so time executes with it off (0, the start).
 * Blocking collectives are counted either way. Local. */
dk_status dk_mpi_plan_set_profile(dk_mpi_plan *plan, int on);

/* ---- enkf (docs/distributed.md, "enkf") ----
 *
 * The state's points are split between ranks: with a 1-D localization
 * (loc_ndim 1) each rank owns the rows [part->offset[0], part->offset[0] +
 * part->extent[0]); with a 2-D one (loc_ndim 2) a box of the nx x ny grid
 * (axis 0 along nx, axis 1 along ny; the point (ix, iy) is state row
 * ix * ny + iy). The parts tile the state; a part may be empty. This rank's
 * data are its points in C order of its box, each with its L members (E
 * and X: points x L) or its M observations (PHT: points x M). */

/* Collective. global: the whole problem (n, nx, ny, the global c or c2 and
 * the global H over all n columns), the same on every rank: its scalars are
 * compared and c and H's three arrays are compared by hash, value for
 * value. Each rank makes a local enkf plan on ctx over its window (its
 * points and those within C's support of them); global->variant is passed
 * to it. If anything fails on any rank, every rank returns the same status
 * and sentence and *plan is NULL. */
dk_status dk_mpi_enkf_plan_create(dk_context *ctx, MPI_Comm comm, const dk_enkf_desc *global,
                                  const dk_mpi_part *part, dk_mpi_plan **plan);

/* Collective. e_local: this rank's anomalies (points x L), pht_local: its
 * rows of PHT (points x M), buffers of the plan's context in the plan's
 * dtype, where the data already live. hpht: M x M, the whole HPHT, or NULL
 * (ranks may differ: HPHT's M x M partial sums are reduced on every call).
 * The halo rows go device to device and the partial sums are all-reduced
 * on the device (through the plan's device communicator, queued on the
 * device's stream where the plugin can; else only those small pieces are
 * staged through host memory and MPI). A failure on any rank travels with
 * the reduction: every rank returns the same status and sentence, with no
 * round trip when nothing failed. Needs the plugin's enkf entries cov_rows,
 * inflate and update (checked at plan creation). Returns when the result
 * is in pht_local (and hpht). */
dk_status dk_mpi_enkf_cov(dk_mpi_plan *plan, const dk_buffer *e_local, dk_buffer *pht_local, dk_buffer *hpht);
/* The same from host memory (uploads, dk_mpi_enkf_cov, reads back). */
dk_status dk_mpi_enkf_cov_host(dk_mpi_plan *plan, const void *e_local, void *pht_local, void *hpht);

/* Collective. x_local: this rank's rows of the forecast ensemble (points x
 * L, a buffer of the plan's context in the plan's dtype), replaced by the
 * analysis. y, r: host arrays of M float64, seed and inflation as in
 * dk_mpi_enkf_analysis_host. HPHT and H X are all-reduced on the device
 * with a failure flag and a check that every rank passed the same y, r,
 * seed and inflation; every GPU then solves the M x M system itself and
 * updates its own rows. On failure x_local is unchanged, except after a
 * mismatch of y, r, seed or inflation (found from the reduction, after the
 * update): then it is unspecified. */
dk_status dk_mpi_enkf_analysis(dk_mpi_plan *plan, dk_buffer *x_local, const double *y, const double *r,
                               uint64_t seed, double inflation);

/* Collective. x_local: this rank's rows of the forecast ensemble (points x
 * L, host, the plan's dtype), replaced by the analysis. y, r (M values,
 * float64), seed and inflation as in dk_enkf_analysis, the same on every
 * rank (checked). The perturbations are dk_enkf_perturbations(seed, ...),
 * keyed by member and observation, so the result does not depend on the
 * number of ranks. On failure x_local is unchanged on every rank. */
dk_status dk_mpi_enkf_analysis_host(dk_mpi_plan *plan, void *x_local, const double *y, const double *r,
                                    uint64_t seed, double inflation);

/* ---- kmeans (docs/distributed.md, "kmeans") ----
 *
 * The n points (point-major, d features each) are split between ranks:
 * each rank owns the points [part->offset[0], part->offset[0] +
 * part->extent[0]). With the contiguity cost (rows * cols == n and
 * lambda < 1) the part counts whole image rows instead: the rank owns rows
 * [offset[0], offset[0] + extent[0]), all cols pixels of each. The parts
 * tile the points (or rows); a part may be empty. The iterations of
 * dakit/kmeans.h run as phases of the backend's plugin; each needs one
 * reduction of the per-cluster sums (and, with contiguity, the previous
 * labels of the window/2 rows on either side from the neighbouring
 * ranks). */

/* Collective. global: the whole problem, the same on every rank (its
 * scalars are compared; variant is passed to the local plans). Point-major
 * layout only. If anything fails on any rank, every rank returns the same
 * status and sentence and *plan is NULL. Destroy with dk_mpi_plan_destroy. */
dk_status dk_mpi_kmeans_plan_create(dk_context *ctx, MPI_Comm comm, const dk_kmeans_desc *global,
                                    const dk_mpi_part *part, dk_mpi_plan **plan);

/* Collective. points_local: this rank's points (extent x d float32, host);
 * mask_local: their mask bytes, or NULL (NULL or not may differ between
 * ranks); init: the k x d initial centroids, bit for bit the same on every
 * rank (checked); labels_local: this rank's labels (written); centroids:
 * k x d, written with the same bits on every rank (may be init). result
 * (may be NULL) gets the global iterations, objective, last move and
 * unmasked count (no timings). The labels equal dk_kmeans_reference's on
 * the whole problem; the centroids equal them to the rounding of the sums'
 * order (docs/distributed.md). */
dk_status dk_mpi_kmeans_execute_host(dk_mpi_plan *plan, const float *points_local, const uint8_t *mask_local,
                                     const float *init, int32_t *labels_local, float *centroids,
                                     dk_kmeans_result *result);

/* Collective. The same on device buffers of the plan's context, where the
 * points already live (a user's loop keeps them there): points_local
 * (extent x d float32), mask_local (bytes, or NULL), labels_local (int32,
 * written), init and centroids (k x d float32; centroids may be init and
 * gets the same bits on every rank). points_local and labels_local may be
 * NULL on an empty part. With more than one rank each iteration is queued
 * on the device as assign + partial sums, an all-reduce of the k d + k
 * sums (through the plan's device communicator, dk_mpi_plan_transport, or
 * staged through the host), and the centroid update; with the contiguity
 * cost the window's label halos follow, device to device. With tol 0
 * nothing waits on the host until the end; with tol > 0 the host reads the
 * device's stop flag every 8 iterations. The buffers' sizes are checked;
 * their data are not (that would read them back): init must be the same
 * on every rank and the points finite, as dk_mpi_kmeans_execute_host
 * checks. A failure on any rank rides with the sums, so every rank returns
 * the same status and sentence. Needs a backend with the kmeans phases
 * (docs/plugins.md); every one in dakit has them. */
dk_status dk_mpi_kmeans_execute(dk_mpi_plan *plan, const dk_buffer *points_local, const dk_buffer *mask_local,
                                const dk_buffer *init, dk_buffer *labels_local, dk_buffer *centroids,
                                dk_kmeans_result *result);

/* ---- letkf (docs/distributed.md, "letkf") ----
 *
 * Each rank owns any set of grid points (slabs, tiles or any list: its rows
 * of Xb) and holds any set of observations (its rows of Yb, yo and r). The
 * observations' global order is rank 0's, then rank 1's, and so on. Every
 * rank's points are analysed with every observation within the radius,
 * whichever rank holds it: the plan cuts the whole network into buckets of
 * the radius's size, and each rank receives the observations in the
 * buckets its points visit (Yb device to device through the plan's device
 * communicator where there is one, else staged through MPI; yo and r by
 * MPI). Each point then sums the same observations in the same order as
 * one process: the result is the single-process analysis bit for bit on
 * the same backend. */

/* Collective. local: this rank's points (n, grid_coords; n may be 0) and
 * observations (m, obs_coords; m may be 0), every other field the same on
 * every rank (checked). At least one rank holds an observation. If
 * anything fails on any rank, every rank returns the same status and
 * sentence and *plan is NULL. */
dk_status dk_mpi_letkf_plan_create(dk_context *ctx, MPI_Comm comm, const dk_letkf_desc *local, dk_mpi_plan **plan);

/* Collective, on buffers of the plan's context: xb_local and xa_local (n x k
 * of the plan's dtype; xa may be xb), yb_local (m x k), nobs_local (n int32)
 * and spread_local (n float64) or NULL; yo_local and r_local host arrays of
 * this rank's m observations. Buffers of a rank with n = 0 (or m = 0) may be
 * NULL. Invalid yo or r on any rank is refused on every rank before any data
 * moves. */
dk_status dk_mpi_letkf_execute(dk_mpi_plan *plan, const dk_buffer *xb_local, const dk_buffer *yb_local,
                               const double *yo_local, const double *r_local, dk_buffer *xa_local,
                               dk_buffer *nobs_local, dk_buffer *spread_local);

/* Collective. The same on host memory; refuses values that are not finite on
 * any rank; on failure xa_local is unchanged on every rank. */
dk_status dk_mpi_letkf_execute_host(dk_mpi_plan *plan, const void *xb_local, const void *yb_local,
                                    const double *yo_local, const double *r_local, void *xa_local,
                                    int32_t *nobs_local, double *spread_local);

/* Local. The observation halo of this rank's plan: how many observations
 * it receives from other ranks and sends to them at each execute (their
 * rows of Yb, yo and r; the coordinates moved once, at plan time). */
dk_status dk_mpi_letkf_halo(const dk_mpi_plan *plan, uint64_t *received, uint64_t *sent);

/* Collective. Points assigned by cost, for observations that crowd some
 * ranks' points (satellite swaths, radar): local is this rank's points and
 * observations as for dk_mpi_letkf_plan_create (only n, m, members,
 * ncoords, metric, radius, vertical_radius, period, max_obs and the
 * coordinates are read). Each point's work is estimated from the
 * observations within the radius of it (every rank's, found as a plan finds
 * them; at most max_obs) as p + 5.5 k (A and b cost 2 k^2 p, the k x k
 * eigenproblem and W some 11 k^3), 1 for a point without any. The points,
 * in the order rank 0's, rank 1's, ..., are cut into P contiguous runs of
 * about equal summed work: owner[i] (n values) is the rank that should
 * analyse this rank's point i (non-decreasing along the ranks' order, so a
 * decomposition into slabs stays slabs). cost (n values) or NULL: each
 * point's estimate. The caller moves the points (their rows of Xb and
 * their coordinates) and makes the plan on the new sets. */
dk_status dk_mpi_letkf_balance(MPI_Comm comm, const dk_letkf_desc *local, int32_t *owner, double *cost);

#ifdef __cplusplus
}
#endif

#endif
