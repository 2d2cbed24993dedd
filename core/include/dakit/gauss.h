/* dakit gauss: Gaussian convolution by the K-iterated first-order recursive
 * filter (RF), on a 1-D signal or along axes of a 2-D/3-D C-order field.
 *
 * With unit spacing, E = K/sigma^2, alpha = 1 + E - sqrt(E(E+2)),
 * beta = 1 - alpha. One iteration is the advancing pass
 * p_i = beta s_i + alpha p_{i-1}, then the backing pass
 * s_i = beta p_i + alpha s_{i+1}; the filter runs K iterations.
 * Axes are filtered one after another in increasing order. */
#ifndef DAKIT_GAUSS_H
#define DAKIT_GAUSS_H

#include <stddef.h>

#include <dakit/dakit.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DK_MAX_DIMS 3

typedef enum dk_boundary {
    DK_BOUNDARY_ZERO = 0,    /* each pass starts from zero: p_{-1} = 0, s_N = 0 */
    DK_BOUNDARY_CONSTANT = 1 /* steady state of the edge value extended outward:
                                p_{-1} = s_0; s_{N-1} = u + (p_{N-1} - u)/(1 + alpha),
                                u the last input of the advancing pass */
} dk_boundary;

typedef enum dk_gauss_mode {
    DK_GAUSS_EXACT = 0,  /* equals the serial reference to rounding */
    DK_GAUSS_OVERLAP = 1 /* the seed's decomposition: `blocks` blocks per line,
                            each filtered alone over a window widened by
                            `overlap` on each side (clipped at the line's ends);
                            approximate near block edges */
} dk_gauss_mode;

typedef struct dk_gauss_desc {
    dk_dtype dtype;
    int ndim;                  /* 1, 2 or 3 */
    size_t shape[DK_MAX_DIMS]; /* C order: the last axis is contiguous */
    unsigned axes;             /* bit a set: filter along axis a */
    double sigma[DK_MAX_DIMS]; /* per axis, in grid units; read where the axis bit is set */
    int K;                     /* iterations, >= 1 */
    dk_boundary boundary;
    dk_gauss_mode mode;
    size_t overlap;            /* overlap mode: m, elements on each side */
    size_t blocks;             /* overlap mode: blocks per line (clamped to the line length) */
    const char *variant;       /* NULL: the backend's fastest scheme; else one of
                                  dk_gauss_variants() (the cuda backend offers "dp",
                                  the seed's dynamic-parallelism scheme) */
} dk_gauss_desc;

/* Defaults: float32, K = 4, zero boundary, exact mode, overlap 5, 3072 blocks
 * (the seed's best configuration); the caller sets ndim, shape, axes, sigma. */
void dk_gauss_desc_init(dk_gauss_desc *desc);

dk_status dk_gauss_plan_create(dk_context *ctx, const dk_gauss_desc *desc, dk_plan **plan);
/* in and out are buffers of at least the field's size on the plan's
 * context; in == out filters in place. Returns when the result is in out. */
dk_status dk_gauss_execute(dk_plan *plan, const dk_buffer *in, dk_buffer *out);
/* The same on host memory; the plan copies through buffers it owns. */
dk_status dk_gauss_execute_host(dk_plan *plan, const void *in, void *out);

/* Variant names the context's backend offers (NULL-terminated, the first is
 * the default), or NULL when it has no gauss. */
const char *const *dk_gauss_variants(const dk_context *ctx);

/* The serial reference that defines the result (host memory, in == out
 * allowed). Errors go to dk_last_error(NULL). */
dk_status dk_gauss_reference(const dk_gauss_desc *desc, const void *in, void *out);

/* The RF coefficient alpha for sigma and K (unit spacing). */
double dk_gauss_alpha(double sigma, int K);

/* Exact mode: the overlap (elements on each side) beyond which a window's
 * artificial ends no longer change the result at the dtype's rounding. */
size_t dk_gauss_exact_halo(double alpha, int K, dk_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
