/* dakit kmeans: Lloyd's k-means on n points of d float32 features, with the
 * optional contiguity-weighted cost of radar reflectivity clustering
 * (Lakshmanan et al.; Algorithm 1 of the GPU radar k-means paper).
 *
 * The definition every backend computes:
 * - Point i's feature f is points[i * stride_point + f * stride_feature]
 *   (point-major: stride_point = d, stride_feature = 1; feature-major, d
 *   planes of n values: stride_point = 1, stride_feature = n). A mask byte of
 *   0 excludes a point: label -1, in no sum, no neighbour.
 * - Plain cost: D(x, c) = sum_f (x_f - C_cf)^2, in float, f ascending.
 * - Contiguity cost (grid given and lambda < 1): the points are the pixels of
 *   a rows x cols image (i = row * cols + col), and
 *   cost(x, c) = lambda * D(x, c) / d + (1 - lambda) * (m - s_c) / m,
 *   m the number of unmasked pixels other than x in the w x w window around
 *   x (inside the image), s_c how many of them had label c in the previous
 *   labels; when m = 0 the second term is 0. Labels update synchronously: the
 *   previous labels of iteration 1 are the plain nearest-centroid labels of
 *   the initial centroids.
 * - Iteration t: every unmasked point takes the label of least cost (ties to
 *   the lowest index) under centroids C_{t-1}; C_t[c] is the mean (summed in
 *   double or better, rounded to float) of the points labelled c, or
 *   C_{t-1}[c] when there are none. move_t = max_c |C_t[c] - C_{t-1}[c]|
 *   (Euclidean, double). Stop after iteration t when move_t < tol, or at
 *   t = max_iters.
 * - Results: the last labels and centroids, the iterations run, and the
 *   objective sum_i D(x_i, C[label_i]) over unmasked points (double).
 *
 * The initial centroids C_0 are the caller's (init = DK_KMEANS_INIT_GIVEN,
 * the default), or seeded from the points by the random stream of `seed`
 * (the definition is dk_kmeans_seed's, below).
 *
 * Sample weights (scikit-learn's sample_weight; the _weighted calls): point
 * i has weight w_i, finite and >= 0 (no weights: every w_i = 1, the
 * definition above). C_t[c] = sum w_i x_i / sum w_i over the points
 * labelled c (each product and the sums in double, rounded to float), or
 * C_{t-1}[c] when that sum of weights is 0; the objective is
 * sum_i w_i D(x_i, C[label_i]) (double). Labels, costs and moves are as
 * above: a weight changes no distance. The seeding draws by weights, see
 * dk_kmeans_seed_weighted. */
#ifndef DAKIT_KMEANS_H
#define DAKIT_KMEANS_H

#include <stddef.h>
#include <stdint.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_KMEANS_MAX_D 64
/* The largest k with the contiguity cost (and of libdakit-mpi's plans);
 * plain k-means takes any k up to n that the device's memory holds. */
#define DK_KMEANS_MAX_K 256
#define DK_KMEANS_MAX_WINDOW 31
/* Points per block of the seeding's distance sums (dk_kmeans_ops.seed_distance). */
#define DK_KMEANS_SEED_BLOCK 1024

typedef enum dk_kmeans_layout {
    DK_KMEANS_POINT_MAJOR = 0,  /* n rows of d features (a .npy of shape (n, d)) */
    DK_KMEANS_FEATURE_MAJOR = 1 /* d planes of n values (image feature planes) */
} dk_kmeans_layout;

typedef enum dk_kmeans_init {
    DK_KMEANS_INIT_GIVEN = 0,    /* the caller's initial centroids */
    DK_KMEANS_INIT_PLUSPLUS = 1, /* greedy k-means++ (Arthur & Vassilvitskii; scikit-learn's form) */
    DK_KMEANS_INIT_RANDOM = 2    /* k distinct unmasked points, uniformly */
} dk_kmeans_init;

typedef struct dk_kmeans_desc {
    size_t n;          /* points, >= 1 */
    int d;             /* features per point, 1 .. DK_KMEANS_MAX_D */
    int k;             /* clusters, 1 .. n (1 .. DK_KMEANS_MAX_K with the contiguity cost) */
    int max_iters;     /* >= 1 */
    double tol;        /* stop when the largest centroid move is below it; 0: run max_iters */
    dk_kmeans_layout layout;
    /* Contiguity: rows * cols == n and lambda < 1 switch it on. */
    size_t rows, cols; /* 0, 0: the points are no image */
    double lambda;     /* weight of the feature distance, 0 .. 1; 1 = plain k-means */
    int window;        /* w, odd, 1 .. DK_KMEANS_MAX_WINDOW */
    const char *variant; /* NULL: the backend's default; else one of dk_kmeans_variants() */
    dk_kmeans_init init; /* where C_0 comes from; GIVEN: the init buffer of execute */
    uint64_t seed;       /* the random stream of the seeded inits */
    int trials;          /* k-means++ candidates per centroid; 0: 2 + floor(ln k) */
} dk_kmeans_desc;

typedef struct dk_kmeans_result {
    int iterations;
    double objective;     /* sum of squared distances to the final centroids */
    double last_move;     /* largest centroid move of the last iteration */
    size_t valid;         /* unmasked points */
    /* Time the backend spent in the assignment (with the per-block partial
     * sums it makes on the way) and in the reduction that forms the new
     * centroids, summed over iterations; 0 where the backend does not
     * measure it. */
    double assign_seconds, update_seconds;
} dk_kmeans_result;

/* Defaults: point-major, 20 iterations, tol 0, no grid, lambda 1, window 5,
 * init GIVEN, seed 0, trials 0; the caller sets n, d, k. */
void dk_kmeans_desc_init(dk_kmeans_desc *desc);

dk_status dk_kmeans_plan_create(dk_context *ctx, const dk_kmeans_desc *desc, dk_plan **plan);
/* Variant names the context's backend offers (NULL-terminated, the first is
 * the default), or NULL when it has no kmeans. */
const char *const *dk_kmeans_variants(const dk_context *ctx);

/* Buffers on the plan's context: points (n*d float32), mask (n bytes, or
 * NULL: every point counts), init (k*d float32 initial centroids; ignored,
 * and may be NULL, when desc.init seeds them), labels
 * (n int32, written), centroids (k*d float32, written; may be init).
 * result may be NULL. The data are not checked for NaN here (that would read
 * them back); dk_kmeans_execute_host and dk_kmeans_check_points do. */
dk_status dk_kmeans_execute(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                            const dk_buffer *init, dk_buffer *labels, dk_buffer *centroids,
                            dk_kmeans_result *result);
/* The same on host memory; refuses NaN or infinite features and k larger
 * than the number of unmasked points. init may be NULL when desc.init seeds. */
dk_status dk_kmeans_execute_host(dk_plan *plan, const float *points, const uint8_t *mask,
                                 const float *init, int32_t *labels, float *centroids,
                                 dk_kmeans_result *result);
/* With sample weights (the definition above): weights is n float32 on the
 * plan's context, or NULL (every weight 1: dk_kmeans_execute). The
 * backend runs the iterations through its phases (dk_kmeans_ops
 * assign_weighted, update, objective_weighted); a backend without them
 * refuses weights with a sentence. */
dk_status dk_kmeans_execute_weighted(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                     const dk_buffer *weights, const dk_buffer *init, dk_buffer *labels,
                                     dk_buffer *centroids, dk_kmeans_result *result);
/* The same on host memory; also refuses a weight that is negative or not
 * finite, and unmasked weights that sum to 0. */
dk_status dk_kmeans_execute_host_weighted(dk_plan *plan, const float *points, const uint8_t *mask,
                                          const float *weights, const float *init, int32_t *labels,
                                          float *centroids, dk_kmeans_result *result);

/* Checks host points: finite features, at least k unmasked points. Errors go
 * to dk_last_error(NULL). *valid (may be NULL) gets the unmasked count. */
dk_status dk_kmeans_check_points(const dk_kmeans_desc *desc, const float *points,
                                 const uint8_t *mask, size_t *valid);
/* Checks host weights (n floats): each finite and >= 0, and those of the
 * unmasked points summing to more than 0. Errors go to dk_last_error(NULL). */
dk_status dk_kmeans_check_weights(const dk_kmeans_desc *desc, const float *weights, const uint8_t *mask);

/* The paper's initial centroids: the range [lo, hi] of feature `feature` over
 * the unmasked points is cut into k equal intervals, each point goes to the
 * interval its value lies in (the top value to the last), and centroid c is
 * the mean of the points of interval c; an empty interval gets the mean of
 * all points with feature `feature` set to the interval's middle. */
dk_status dk_kmeans_initial_centroids(const dk_kmeans_desc *desc, const float *points,
                                      const uint8_t *mask, int feature, float *centroids);

/* The seeded initial centroids of the plan's desc.init (PLUSPLUS or
 * RANDOM) into centroids (k*d float32), on the device: the distance passes
 * run in the plugin, the random draws on the host. With a random stream
 * u_1, u_2, ... of doubles in [0, 1) from desc.seed (splitmix64, 53 bits),
 * "a draw by weights w" is the first unmasked point i whose running sum
 * w_0 + ... + w_i exceeds u * sum(w), summed block by block
 * (DK_KMEANS_SEED_BLOCK points; each block's sum in double, the blocks in
 * order, then the points of the chosen block in order).
 * - PLUSPLUS: C_0[0] is a draw by w = 1; then for c = 1 .. k-1, with
 *   near_i = min over the chosen centroids of D(x_i, C_0[j]), `trials`
 *   candidates are drawn by w = near, and the one whose potential
 *   sum_i min(near_i, D(x_i, cand)) is least (the first of equals) becomes
 *   C_0[c]. Where every near_i is 0 the draws are by w = 1.
 * - RANDOM: k distinct ranks among the unmasked points by Floyd's
 *   algorithm (for j = m - k .. m - 1: t = floor(u (j + 1)); j if t was
 *   taken, else t), the points of those ranks in that order.
 * dk_kmeans_execute calls it first when desc.init seeds. */
dk_status dk_kmeans_seed(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask, dk_buffer *centroids);
/* The same with sample weights w (n float32, or NULL: dk_kmeans_seed), as
 * scikit-learn seeds with sample_weight:
 * - PLUSPLUS: as above with every weight of a draw and of a potential
 *   multiplied by w_i: C_0[0] a draw by w, the candidates drawn by
 *   w_i near_i, the potential sum_i w_i min(near_i, D(x_i, cand)), each
 *   w_i D a float product (so w_i min(a, b) = min(w_i a, w_i b) exactly).
 * - RANDOM: k draws without replacement, draw j by the weights of the
 *   unmasked points not drawn before it: the first point whose running
 *   sum of those weights exceeds u times their total (host arithmetic in
 *   double over a binary indexed tree); at least k unmasked points must
 *   have a positive weight.
 * dk_kmeans_execute_weighted calls it first when desc.init seeds. */
dk_status dk_kmeans_seed_weighted(dk_plan *plan, const dk_buffer *points, const dk_buffer *mask,
                                  const dk_buffer *weights, dk_buffer *centroids);

/* The serial reference that defines the result (host memory); init may be
 * NULL when desc.init seeds, which it then does on the host. */
dk_status dk_kmeans_reference(const dk_kmeans_desc *desc, const float *points,
                              const uint8_t *mask, const float *init, int32_t *labels,
                              float *centroids, dk_kmeans_result *result);
/* The same with sample weights (n floats, or NULL: every weight 1). */
dk_status dk_kmeans_reference_weighted(const dk_kmeans_desc *desc, const float *points, const uint8_t *mask,
                                       const float *weights, const float *init, int32_t *labels,
                                       float *centroids, dk_kmeans_result *result);

/* ---- texture features of an image (the radar pipeline), on the device ----
 *
 * For a feature-major plan with d = DK_KMEANS_TEXTURE_D over a grid (rows x
 * cols = n), the features are computed where the clustering runs, so the
 * image goes to the device once and only the labels come back:
 * 1. dk_kmeans_texture_planes: value (n float32; a value that is not finite
 *    is no data) -> planes (3n float32): z m, z^2 m, m, with m = 1 where
 *    there is data, else 0, and z = value there, else 0.
 * 2. The caller smooths the three planes (a gauss plan over (3, rows, cols),
 *    axes 1 and 2), in place or not.
 * 3. dk_kmeans_texture_features: from value and the smoothed planes (a, b, w)
 *    each pixel gets z, mean = a / w and std = sqrt(max(b / w - mean^2, 0))
 *    (mean = z, std = 0 where w <= 1e-6; float arithmetic); mask (n bytes) =
 *    has data and z >= min_value; each feature is standardized over the
 *    unmasked pixels, (float)((x - mu) / sd) with mu and sd their mean and
 *    standard deviation in double (sd = 1 when the variance is <= 1e-12), 0 at
 *    masked pixels; init (k * 3) gets dk_kmeans_initial_centroids on feature 0
 *    of the standardized points. The sums run in double in an order of the
 *    backend's choosing, so a backend may differ from the reference by a
 *    float rounding unit. Fails (stats still filled) when fewer than k pixels
 *    are unmasked. Backends without device code for it run the reference on
 *    the host between a buffer read and write. */
#define DK_KMEANS_TEXTURE_D 3

typedef struct dk_kmeans_texture_stats {
    size_t valid;                      /* unmasked pixels */
    double mean[DK_KMEANS_TEXTURE_D];  /* mu of z, local mean, local std */
    double sd[DK_KMEANS_TEXTURE_D];
} dk_kmeans_texture_stats;

dk_status dk_kmeans_texture_planes(dk_plan *plan, const dk_buffer *value, dk_buffer *planes);
dk_status dk_kmeans_texture_features(dk_plan *plan, const dk_buffer *value, const dk_buffer *smoothed,
                                     double min_value, dk_buffer *points, dk_buffer *mask, dk_buffer *init,
                                     dk_kmeans_texture_stats *stats);
/* The serial references (host memory); desc as the plan's. */
dk_status dk_kmeans_texture_planes_reference(const dk_kmeans_desc *desc, const float *value, float *planes);
dk_status dk_kmeans_texture_features_reference(const dk_kmeans_desc *desc, const float *value,
                                               const float *smoothed, double min_value, float *points,
                                               uint8_t *mask, float *init, dk_kmeans_texture_stats *stats);

/* ---- plugin ops: what a backend implements (docs/plugins.md) ---- */

struct dk_msg; /* dakit/plugin.h */

/* What a kmeans plan receives: the validated description and the
 * quantities every backend derives from it alike. */
typedef struct dk_kmeans_setup {
    dk_kmeans_desc desc;                  /* desc.variant is one of ops->variants
                                             (the plugin's own string), never NULL */
    int contiguity;                       /* the contiguity cost applies */
    size_t stride_point, stride_feature;  /* from the layout */
} dk_kmeans_setup;

typedef struct dk_kmeans_ops {
    /* Required. NULL-terminated variant names; the first is the default. */
    const char *const *variants;
    /* Required. Called once per plan. `setup` stays valid until plan_destroy
     * returns: the plugin may keep the pointer. */
    dk_status (*plan_create)(void *device, const dk_kmeans_setup *setup, void **plan,
                             struct dk_msg *msg);
    /* Required. Runs the iterations of the definition above. Handles from
     * buffer_alloc; mask may be NULL; centroids may equal init. Fills result
     * (iterations, objective, last_move, valid, timings). */
    dk_status (*execute)(void *plan, const void *points, const void *mask, const void *init,
                         void *labels, void *centroids, dk_kmeans_result *result,
                         struct dk_msg *msg);
    /* Required. Frees the plan. */
    void (*plan_destroy)(void *plan);
    /* Optional (NULL: the core runs the references on the host): the
     * texture features above, on handles from buffer_alloc, for a plan the
     * core has checked is feature-major with d = 3 over a grid. */
    dk_status (*texture_planes)(void *plan, const void *value, void *planes, struct dk_msg *msg);
    dk_status (*texture_features)(void *plan, const void *value, const void *smoothed, double min_value,
                                  void *points, void *mask, void *init, dk_kmeans_texture_stats *stats,
                                  struct dk_msg *msg);

    /* Optional, all three or none (libdakit-mpi's dk_mpi_kmeans_execute):
     * one Lloyd iteration split in two phases, so that the ranks' sums can
     * be added by a collective queued between them on the device's queue.
     * The plan is then one rank's part: n may be 0 and smaller than k; with
     * the contiguity cost its rows are a band of the image. Each entry
     * queues its work after the work queued before it and returns without
     * waiting for it. Handles from buffer_alloc; doubles are float64.
     *
     * sums: DK_KMEANS_SUMS_LEN(k, d) doubles: [c d + f] the sum of feature f
     * over the points labelled c, [k d + c] their count, [k d + k] a flag
     * that the plugin only reads (nonzero: a rank failed). state:
     * DK_KMEANS_STATE_LEN doubles: [0] iterations run, [1] stop (nonzero:
     * every later assign_partial and update does nothing), [2] the last
     * move, [3] failed (update found the flag set). The caller zeroes both
     * before the first iteration.
     *
     * assign_partial: unless state[1] is set, labels every point of the
     * plan under centroids (k d float) into labels (-1 where masked) and
     * writes sums[0 .. k d + k) from this plan's points alone, in an order
     * fixed by the plan. prev NULL: the plain cost (also on a contiguity
     * plan: the first labels). Else the contiguity cost with prev holding
     * the previous labels of the rows [-r, rows + r), r = window / 2, cols
     * each (-1: masked, or outside the image); next, when not NULL, has the
     * same shape and gets the new labels at rows [0, rows) (offset r cols);
     * prev and next are distinct buffers. */
    dk_status (*assign_partial)(void *plan, const void *points, const void *mask, const void *centroids,
                                const void *prev, void *next, void *labels, void *sums, const void *state,
                                struct dk_msg *msg);
    /* update: unless state[1] is set: when sums' flag is nonzero, sets
     * state[3] and state[1] and leaves centroids; else each centroid with a
     * count becomes (float)(sum / count) (the others keep theirs), state[0]
     * counts the iteration, state[2] = move (dakit/kmeans.h) and state[1] is
     * set when move < desc.tol. sums are the ranks' reduced sums, the same
     * bits on every rank, so every rank forms the same centroids. */
    dk_status (*update)(void *plan, const void *sums, void *centroids, void *state, struct dk_msg *msg);
    /* objective: out[0] = sum over the points with a label >= 0 of
     * D(x, centroids[label]) (double), out[1] = their count, whatever
     * state says. */
    dk_status (*objective)(void *plan, const void *points, const void *labels, const void *centroids, void *out,
                           struct dk_msg *msg);

    /* Optional, both or none (NULL: dk_kmeans_seed reads the points back
     * and seeds on the host): the seeding's device side.
     * seed_distance: for every point i of the plan, out[i] (float) = 0
     * where masked, else D(x_i, centre) (centre: d floats; NULL: 1), or
     * min(near[i], that) when near is not NULL; and blocks[b] (double) =
     * the sum of out over the points of block b (DK_KMEANS_SEED_BLOCK points
     * each, the last one short), in an order of the plugin's choosing.
     * near and out may be the same buffer. Finished when it returns. */
    dk_status (*seed_distance)(void *plan, const void *points, const void *mask, const void *centre,
                               const void *near, void *out, void *blocks, struct dk_msg *msg);
    /* seed_read: copies count (<= DK_KMEANS_SEED_BLOCK) values of dist from
     * point first on into values (host), and, when x (host, d floats) is
     * not NULL, the features of point `point` into x. Finished when it
     * returns. */
    dk_status (*seed_read)(void *plan, const void *points, const void *dist, size_t first, size_t count,
                           float *values, size_t point, float *x, struct dk_msg *msg);

    /* Optional, all three or none (generation 3; NULL: the core refuses
     * sample weights on this backend): the weighted forms, on any plan of
     * the backend (a whole problem's, any k it took, or a part's).
     * weights: n floats, or NULL (every weight 1).
     * assign_weighted: assign_partial, with sums[c d + f] = sum of
     * (double) w_i * x_if and sums[k d + c] = sum of w_i (double) over the
     * points labelled c; update then forms the weighted means. */
    dk_status (*assign_weighted)(void *plan, const void *points, const void *mask, const void *weights,
                                 const void *centroids, const void *prev, void *next, void *labels, void *sums,
                                 const void *state, struct dk_msg *msg);
    /* objective_weighted: objective with out[0] = sum of (double) w_i *
     * D(x, centroids[label]) (out[1] still the count). */
    dk_status (*objective_weighted)(void *plan, const void *points, const void *labels, const void *weights,
                                    const void *centroids, void *out, struct dk_msg *msg);
    /* seed_distance_weighted: seed_distance with out[i] = w_i * D(x_i,
     * centre) (a float product; centre NULL: w_i) before the min with
     * near[i]; 0 where masked. */
    dk_status (*seed_distance_weighted)(void *plan, const void *points, const void *mask, const void *weights,
                                        const void *centre, const void *near, void *out, void *blocks,
                                        struct dk_msg *msg);
} dk_kmeans_ops;

/* The lengths, in doubles, of the phases' sums and state buffers. */
#define DK_KMEANS_SUMS_LEN(k, d) ((size_t)(k) * (size_t)(d) + (size_t)(k) + 1)
#define DK_KMEANS_STATE_LEN 4

#ifdef __cplusplus
}
#endif

#endif
