/* dakit gauss: Gaussian convolution by recursive filters (Deriche's by
 * default, the K-iterated first-order filter RF, or van Vliet-Young-Verbeek's),
 * on a 1-D signal or along axes of a 2-D/3-D C-order field.
 *
 * RF, with unit spacing, E = K/sigma^2, alpha = 1 + E - sqrt(E(E+2)),
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
#define DK_GAUSS_MAX_SIGMA 1e7 /* grid units */
/* deriche and vyv: the sigma they are made for (grid units) */
#define DK_GAUSS_IIR_MIN_SIGMA 0.5
#define DK_GAUSS_IIR_MAX_SIGMA 1e4

/* How a line is continued past its ends. ZERO and CONSTANT are the GPU RF
 * paper's per-pass rules of the rf method (kept as they were); the others are
 * scipy.ndimage's modes, applied to the input itself, for every method.
 * For deriche and vyv (one causal and one anti-causal pass) ZERO is CVAL
 * with cval 0 and CONSTANT is NEAREST. */
typedef enum dk_boundary {
    DK_BOUNDARY_ZERO = 0,     /* each pass starts from zero: p_{-1} = 0, s_N = 0 */
    DK_BOUNDARY_CONSTANT = 1, /* steady state of the edge value extended outward:
                                 p_{-1} = s_0; s_{N-1} = u + (p_{N-1} - u)/(1 + alpha),
                                 u the last input of the advancing pass (for K = 1
                                 this is NEAREST) */
    DK_BOUNDARY_REFLECT = 2,  /* scipy 'reflect' (its default): d c b a | a b c d | d c b a */
    DK_BOUNDARY_MIRROR = 3,   /* scipy 'mirror': d c b | a b c d | c b a */
    DK_BOUNDARY_NEAREST = 4,  /* scipy 'nearest': a a a | a b c d | d d d */
    DK_BOUNDARY_WRAP = 5,     /* scipy 'wrap': a b c d | a b c d | a b c d */
    DK_BOUNDARY_CVAL = 6      /* scipy 'constant': k k k | a b c d | k k k, k = desc.cval */
} dk_boundary;
#define DK_BOUNDARY_COUNT 7

/* What approximates the Gaussian along each axis. */
typedef enum dk_gauss_method {
    DK_GAUSS_RF = 0,      /* the GPU RF paper's K-iterated first-order filter (alpha, K) */
    DK_GAUSS_DERICHE = 1, /* Deriche's fourth-order recursive Gaussian (1993) */
    DK_GAUSS_VYV = 2      /* Young / van Vliet / Verbeek poles, order_poles 3..5 (1998) */
} dk_gauss_method;

typedef enum dk_gauss_mode {
    DK_GAUSS_EXACT = 0,  /* equals the serial reference to rounding */
    DK_GAUSS_OVERLAP = 1 /* the GPU RF paper's decomposition: `blocks` blocks per line,
                            each filtered alone over a window widened by
                            `overlap` on each side (clipped at the line's ends);
                            approximate near block edges */
} dk_gauss_mode;

typedef struct dk_gauss_desc {
    dk_dtype dtype;
    int ndim;                  /* 1, 2 or 3 */
    size_t shape[DK_MAX_DIMS]; /* C order: the last axis is contiguous */
    unsigned axes;             /* bit a set: filter along axis a */
    double sigma[DK_MAX_DIMS]; /* per axis, in grid units, > 0 and <= DK_GAUSS_MAX_SIGMA; read
                                  where the axis bit is set (a sigma so small that K/sigma^2
                                  overflows leaves the field unchanged) */
    int K;                     /* iterations, >= 1 */
    dk_boundary boundary;
    dk_gauss_mode mode;
    size_t overlap;            /* overlap mode: m, elements on each side */
    size_t blocks;             /* overlap mode: blocks per line (clamped to the line length) */
    const char *variant;       /* NULL: the backend's default; else one of
                                  dk_gauss_variants() */
    /* Appended after the rf fields (ABI order); dk_gauss_desc_init gives deriche. */
    dk_gauss_method method;
    int order_poles;           /* vyv: 3, 4 or 5 poles (read only for vyv) */
    double cval;               /* DK_BOUNDARY_CVAL: the value outside the field */
    int order[DK_MAX_DIMS];    /* per axis: 0 smooths, 1 and 2 give the first and second
                                  derivative of the smoothed field, as scipy.ndimage's
                                  gaussian_filter(order=...) (deriche and vyv only) */
} dk_gauss_desc;

/* Defaults: float32, deriche (within 5e-4 of the sampled Gaussian's peak;
 * sigma 0.5 to 1e4) with the reflect boundary, as scipy.ndimage's
 * gaussian_filter; exact mode, order 0 (smoothing) on every axis, cval 0,
 * order_poles 5; for rf: K = 4, overlap 5, 3072 blocks (the GPU RF paper's
 * best configuration). The paper's filter is method = DK_GAUSS_RF with
 * boundary = DK_BOUNDARY_ZERO. The caller sets ndim, shape, axes, sigma. */
void dk_gauss_desc_init(dk_gauss_desc *desc);

dk_status dk_gauss_plan_create(dk_context *ctx, const dk_gauss_desc *desc, dk_plan **plan);
/* in and out are buffers of at least the field's size on the plan's
 * context; in == out filters in place. Returns when the result is in out. */
dk_status dk_gauss_execute(dk_plan *plan, const dk_buffer *in, dk_buffer *out);
/* The same on host memory; the plan copies through buffers it owns, except
 * on a backend whose buffers are host memory (cpu), which reads in and
 * writes out where they are. */
dk_status dk_gauss_execute_host(dk_plan *plan, const void *in, void *out);

/* Missing values (docs/gauss.md, "Missing data"): what a plan does with NaN
 * in its input on host memory. A plan starts with DK_GAUSS_NAN_ERROR. */
typedef enum dk_gauss_nan {
    DK_GAUSS_NAN_ERROR = 0,     /* refused: DK_ERR_INVALID_ARGUMENT, with how many and where the first is */
    DK_GAUSS_NAN_PROPAGATE = 1, /* filtered as numbers: each NaN spreads over the filter's reach */
    DK_GAUSS_NAN_IGNORE = 2     /* normalized convolution: the data with NaN as 0 and the weights
                                   (1 where valid) filtered alike and divided, each point scaled by
                                   the filter's response to a field of ones, so that a field without
                                   NaN comes out as the plain filter gives it; NaN where less than
                                   1e-6 of the filter's weight falls on valid values */
} dk_gauss_nan;
/* Sets the plan's NaN policy. dk_gauss_execute_host applies it;
 * dk_gauss_execute does not read device data back, so there NaN propagates
 * under ERROR, and IGNORE is refused (DK_ERR_NOT_IMPLEMENTED). */
dk_status dk_gauss_plan_set_nan(dk_plan *plan, dk_gauss_nan policy);
/* The serial reference with a NaN policy (dk_gauss_reference is
 * DK_GAUSS_NAN_PROPAGATE). Errors go to dk_last_error(NULL). */
dk_status dk_gauss_reference_nan(const dk_gauss_desc *desc, dk_gauss_nan policy, const void *in, void *out);

/* Variant names the context's backend offers (NULL-terminated, the first is
 * the default), or NULL when it has no gauss. */
const char *const *dk_gauss_variants(const dk_context *ctx);

/* The serial reference that defines the result (host memory, in == out
 * allowed). Errors go to dk_last_error(NULL). */
dk_status dk_gauss_reference(const dk_gauss_desc *desc, const void *in, void *out);

/* Direct convolution with the sampled Gaussian, exp(-i^2 / (2 sigma^2))
 * normalized to sum 1 over |i| <= ceil(12 sigma) (the rest is below 1e-31),
 * in double whatever the dtype, with the description's boundary (ZERO is
 * CVAL 0, CONSTANT is NEAREST); with desc.order 1 or 2 the kernel is the
 * Gaussian's derivative, sampled the same way (scipy.ndimage's kernel). The
 * yardstick the methods' accuracy is measured against; O(sigma) work per value. Errors go to dk_last_error(NULL). */
dk_status dk_gauss_direct(const dk_gauss_desc *desc, const void *in, void *out);

/* The name of a method or a boundary ("rf", "reflect", ...), or "?". */
const char *dk_gauss_method_name(dk_gauss_method method);
const char *dk_gauss_boundary_name(dk_boundary boundary);

/* The RF coefficient alpha for sigma and K (unit spacing). */
double dk_gauss_alpha(double sigma, int K);

/* Exact mode: the overlap (elements on each side) beyond which a window's
 * artificial ends no longer change the result at the dtype's rounding. */
size_t dk_gauss_exact_halo(double alpha, int K, dk_dtype dtype);
/* The same for any method and boundary of a description, along `axis`:
 * the values per side a window of the field needs so that its artificial
 * ends change nothing at the dtype's rounding (rf: dk_gauss_exact_halo;
 * deriche and vyv: how far their recursions reach). Not clipped to the
 * line; 0 for an axis that is not filtered or an invalid description. */
size_t dk_gauss_window_halo(const dk_gauss_desc *desc, int axis);

/* ---- plugin ops: what a backend implements (docs/plugins.md) ---- */

/* dk_plugin.gauss_features: what a backend's gauss implements besides rf
 * with the zero and constant boundaries. */
#define DK_GAUSS_FEATURE_RECURSIVE 1u /* methods deriche and vyv */
#define DK_GAUSS_FEATURE_MODES 2u     /* boundaries reflect, mirror, nearest, wrap, cval */

/* deriche and vyv along one axis, in parallel form: y = y+ + y-, each the
 * sum over `count` sections s of a causal and an anti-causal recursion
 *   y+_s[i] = b0 x[i] + b1 x[i-1] - a1 y+_s[i-1] - a2 y+_s[i-2]
 *   y-_s[i] = c1 x[i+1] + c2 x[i+2] - a1 y-_s[i+1] - a2 y-_s[i+2]
 * (a first-order section has b1 = c2 = a2 = 0). The input x is the line
 * continued by the boundary mode (dk_gauss_extend); the causal recursion
 * starts from zero `reach` values before the first value it keeps, the
 * anti-causal one `reach` values after the last, and the part of the
 * response that start leaves out is under a quarter of the dtype's rounding
 * unit. So any stretch [k0, k1) of a line is computed alone from
 * x[k0 - reach .. k1 + reach), and equals the whole line's result to
 * rounding. */
#define DK_GAUSS_MAX_SECTIONS 3
typedef struct dk_gauss_iir {
    int count;
    double b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS];
    double a1[DK_GAUSS_MAX_SECTIONS], a2[DK_GAUSS_MAX_SECTIONS];
    double c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];
} dk_gauss_iir;

/* Index of x[j] in a line of n values continued by `boundary` (ZERO and
 * CVAL: -1, the value is cval or 0; CONSTANT: as NEAREST). Any j. */
static inline long long dk_gauss_extend(long long j, long long n, int boundary)
{
    if (j >= 0 && j < n)
        return j;
    switch (boundary) {
    case DK_BOUNDARY_REFLECT: {
        long long m = j % (2 * n);
        m = m < 0 ? m + 2 * n : m;
        return m < n ? m : 2 * n - 1 - m;
    }
    case DK_BOUNDARY_MIRROR: {
        if (n == 1)
            return 0;
        long long m = j % (2 * n - 2);
        m = m < 0 ? m + 2 * n - 2 : m;
        return m < n ? m : 2 * n - 2 - m;
    }
    case DK_BOUNDARY_WRAP: {
        long long m = j % n;
        return m < 0 ? m + n : m;
    }
    case DK_BOUNDARY_NEAREST:
    case DK_BOUNDARY_CONSTANT:
        return j < 0 ? 0 : n - 1;
    default:
        return -1;
    }
}

struct dk_msg; /* dakit/plugin.h */

/* What a gauss plan receives: the caller's description, validated (shape,
 * sigma, K, axes, mode all checked), plus the precomputation every backend
 * shares so that all compute the same function. */
typedef struct dk_gauss_setup {
    dk_gauss_desc desc;          /* desc.variant is one of ops->variants (the
                                    plugin's own string), never NULL */
    double alpha[DK_MAX_DIMS];   /* per filtered axis; 0 elsewhere */
    size_t halo[DK_MAX_DIMS];    /* exact mode: the least overlap per side that a
                                    window needs (dk_gauss_exact_halo) */
    size_t count;                /* elements in the field */
    /* Appended with the methods and modes of docs/gauss.md. */
    int extended[DK_MAX_DIMS];   /* this axis reads its input continued by the
                                    boundary mode over `reach` values past each
                                    end of whatever it computes: deriche and
                                    vyv always; rf with the scipy modes, whose
                                    window is then filtered with the zero rule */
    size_t reach[DK_MAX_DIMS];   /* extended axes: values per side (not clipped
                                    to the line; the continuation repeats) */
    dk_gauss_iir iir[DK_MAX_DIMS]; /* deriche and vyv: the sections */
    /* Appended for execute_halo (libdakit-mpi): the most halo values per
     * side that execute_halo passes along each axis; 0 everywhere for a
     * plan that is never executed with halos. */
    size_t halo_max[DK_MAX_DIMS];
} dk_gauss_setup;

/* execute_halo's halos: the plan's field is a box of a longer field, cut
 * along `axis`; each line along it goes on before the box's first value
 * with lower_count values and after its last with upper_count values, held
 * in their own buffers as arrays of the box's shape but with lower_count
 * (upper_count) values along `axis`, C order, starting lower_offset
 * (upper_offset) elements into the buffer. A count of 0: no halo on that
 * side (the buffer is then NULL and not read). */
typedef struct dk_gauss_halo {
    int axis;
    const void *lower, *upper;         /* buffer handles */
    size_t lower_offset, upper_offset; /* elements */
    size_t lower_count, upper_count;   /* values per line, <= setup->halo_max[axis] */
} dk_gauss_halo;

typedef struct dk_gauss_ops {
    /* Required. NULL-terminated variant names; the first is the default. */
    const char *const *variants;
    /* Required. Called once per plan, before any execute. Allocate here
     * everything execute needs (scratch buffers, compiled kernels): execute
     * runs inside the caller's loop. `setup` stays valid until plan_destroy
     * returns: the plugin may keep the pointer. */
    dk_status (*plan_create)(void *device, const dk_gauss_setup *setup, void **plan,
                             struct dk_msg *msg);
    /* Required. in, out: handles from buffer_alloc holding setup->count
     * elements; in == out is allowed. Filters the axes one after another in
     * increasing order and returns when the result is in out. */
    dk_status (*execute)(void *plan, const void *in, void *out, struct dk_msg *msg);
    /* Required. Frees the plan; called once, also after a failed execute. */
    void (*plan_destroy)(void *plan);
    /* Optional (appended in the ops tables' generation 1, DK_PLUGIN_OPS_GENERATION;
     * without it libdakit-mpi filters a widened copy of the box instead). Filters along halo->axis alone the line made of the
     * lower halo, the box's line and the upper halo, as one line of that
     * length (the boundary rule at its two ends), and writes the box's part
     * to out; the halos are read where they lie, never copied into a
     * widened field. Called only for plans whose setup->halo_max[axis] is
     * set, whose desc.axes is that one axis, in exact mode with method rf
     * and the zero or constant boundary; in and out are distinct. Returns
     * when the result is in out, or sooner under DK_QUEUE_ASYNC, as
     * execute. */
    dk_status (*execute_halo)(void *plan, const dk_gauss_halo *halo, const void *in, void *out,
                              struct dk_msg *msg);
} dk_gauss_ops;

/* Helpers every backend shares, so that all decompose alike. */

typedef struct dk_span {
    size_t begin, end; /* [begin, end) */
} dk_span;

/* The field seen along one axis: `outer` groups of `n` values `inner` apart;
 * line (o, j) starts at element o*n*inner + j. */
typedef struct dk_axis_view {
    size_t outer, n, inner;
} dk_axis_view;

static inline dk_axis_view dk_axis_view_of(const dk_gauss_desc *d, int axis)
{
    dk_axis_view v = {1, d->shape[axis], 1};
    for (int a = 0; a < axis; a++)
        v.outer *= d->shape[a];
    for (int a = axis + 1; a < d->ndim; a++)
        v.inner *= d->shape[a];
    return v;
}

/* Overlap mode: the number of blocks a line of n values is cut into. */
static inline size_t dk_gauss_line_blocks(size_t n, size_t blocks)
{
    if (blocks < 1)
        return 1;
    return blocks > n ? n : blocks;
}

/* Block b of `blocks` over n values, as overlap mode cuts it: d = n / blocks,
 * r = n % blocks, the first r blocks one value longer. */
static inline dk_span dk_gauss_block(size_t n, size_t blocks, size_t b)
{
    size_t d = n / blocks, r = n % blocks;
    dk_span s;
    s.begin = b * d + (b < r ? b : r);
    s.end = s.begin + d + (b < r ? 1 : 0);
    return s;
}

/* A block widened by m on each side, clipped to [0, n). */
static inline dk_span dk_gauss_window(dk_span block, size_t m, size_t n)
{
    dk_span w;
    w.begin = block.begin > m ? block.begin - m : 0;
    w.end = block.end + m < n ? block.end + m : n;
    return w;
}

#ifdef __cplusplus
}
#endif

#endif
