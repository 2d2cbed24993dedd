/* gauss on the cpu backend: the K-iterated recursive filter of
 * algorithms/gauss/reference.c and deriche / vyv, run on many lines at once.
 *
 * The recursion along a line is serial, so the speed comes from running
 * LANES lines in lockstep: their values are gathered into a small buffer laid
 * out [i][lane], filtered there (the lane loop vectorizes and the buffer stays
 * in cache for all K iterations) and scattered back. Along a strided axis the
 * lanes are adjacent lines, so a gather reads contiguous rows; along the
 * contiguous axis the gather is a transpose of LANES rows.
 *
 * One solver a file, each saying when it applies; plan.c picks them:
 *   lines.c     any axis: lines or overlap-mode blocks in lanes (filter_axis);
 *   exact.c     exact mode with dakit's boundary rules: few pieces a line,
 *               walked with short windows whose kept values lie at least
 *               setup->halo from any artificial end (choose_exact_path);
 *   fused.c     the same with exactly the last two axes filtered and
 *               in != out: both in one pass over tiles (choose_fused);
 *   extended.c  scipy's modes and deriche / vyv: each segment's continued
 *               window (choose_extended_segments);
 *   halo.c      execute_halo (libdakit-mpi's split axes);
 *   kernels.c   the lockstep rf recursion and the AVX2 transposes they share.
 * Where pieces or blocks of a line overlap and the pass is in place, the
 * result goes to another buffer than the one the windows read (the plan's
 * scratch). */
#ifndef DAKIT_CPU_GAUSS_H
#define DAKIT_CPU_GAUSS_H
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <dakit/plugin.h>

/* Defined in plugin.c. */
void dk_cpu_copy(void *dst, const void *src, size_t bytes);

/* Lines filtered in lockstep: a row of the lane buffer is 128 bytes, two
 * cache lines, and several SIMD vectors whose recursions are independent,
 * so the FMA latency is hidden behind the other vectors' work. */
#define ROW_BYTES 128
#define LANES_F32 (ROW_BYTES / 4)
#define LANES_F64 (ROW_BYTES / 8)

/* deriche and vyv: a row of lanes is one cache line, a few vectors (the
 * sections' states for every vector stay in the registers). */
#define IIR_ROW_BYTES 64
#define IIR_LANES_F32 (IIR_ROW_BYTES / 4)
#define IIR_LANES_F64 (IIR_ROW_BYTES / 8)
/* A strided axis reads IIR_RUNS rows of lanes from each row of the field. */
#define IIR_RUNS 4

/* A window's lane buffer should stay in the core's L2 for all 2K passes. */
#define LANE_BUFFER_BYTES ((size_t)1 << 20)
/* Beyond this a buffer of LANES windows is not worth it: lines that long are
 * filtered one at a time (overlap mode with few blocks on a huge line). */
#define LANE_BUFFER_LIMIT ((size_t)64 << 20)
/* Exact-mode windows shorter than this spend more time starting than filtering. */
#define MIN_WINDOW 1024
/* Exact mode's own path: a window of a row of the lane buffer (ROW_BYTES)
 * in L1, and a group of adjacent lines' window in L2. */
#define EXACT_WINDOW_BYTES ((size_t)32 << 10)
#define EXACT_BLOCK_BYTES ((size_t)128 << 10)
/* The fused pass's tile: rows of a window, and its bytes (in L2); past the
 * limit (huge halos) the axes go one at a time. */
#define FUSED_ROWS 384
#define FUSED_TILE_BYTES ((size_t)512 << 10)
#define FUSED_LIMIT ((size_t)4 << 20)
/* Extended axes: a segment keeps at most this many values (unless four
 * reaches are longer), so that a batch's lane buffers stay in L2. */
#define EXTENDED_KEEP 8192
/* Exact mode: enough segments that each thread gets this many batches. */
#define BATCHES_PER_THREAD 4

#define CACHE_LINE 64

/* On x86-64 the lockstep kernel is built twice, for AVX2 with FMA and for
 * the baseline, and the plan picks one when it is made; -march stays
 * portable. Each build uses its own native vector width, because GCC splits
 * vectors wider than the target's registers badly. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNEL 1
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

typedef struct cpu_gauss_plan {
    dk_gauss_setup setup;
    int threads;
    size_t lanes;                 /* lines per batch for the dtype */
    int avx2;                     /* use the AVX2+FMA kernel */
    size_t segments[DK_MAX_DIMS]; /* segments per line along each filtered axis */
    size_t window[DK_MAX_DIMS];   /* exact mode with several segments: their common length */
    int lockstep;                 /* 0: windows are too long, filter one line at a time */
    size_t buffer_elems;          /* per thread */
    void *buffers;                /* threads * buffer_elems elements */
    void *scratch;                /* setup.count elements, or NULL when no segments overlap */
    size_t keep[DK_MAX_DIMS];     /* extended axes: the values each segment keeps */
    int exact[DK_MAX_DIMS];       /* exact mode's own path (choose_exact_path) */
    int rows[DK_MAX_DIMS];        /* on it: groups of adjacent lines, read as rows */
    size_t width[DK_MAX_DIMS];    /* on it: lane buffer row, in elements */
    int fused;                    /* the last two axes in one pass (choose_fused) */
    size_t fuse_pieces, fuse_rows, fuse_tiles, fuse_stride, fuse_need;
    size_t halo_elems;            /* execute_halo: per thread, a lane buffer of the longest line */
    void *halo_buffers;           /* threads * halo_elems elements, or NULL */
} cpu_gauss_plan;

static inline int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline int thread_index(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* The plugin's own, so that it needs no symbol of libdakit. */
static inline size_t element_size(dk_dtype dtype)
{
    return dtype == DK_F32 ? sizeof(float) : sizeof(double);
}

static inline size_t div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* floor(k * span / parts) without overflowing k * span. */
static inline size_t spread(size_t k, size_t span, size_t parts)
{
    return k * (span / parts) + k * (span % parts) / parts;
}

/* Segment `seg` of a line of n values along `axis`: the window filtered and
 * the part kept. The kept parts of a line's segments tile [0, n). */
static inline void segment_of(const cpu_gauss_plan *p, int axis, size_t seg, dk_span *window,
                       dk_span *keep)
{
    const dk_gauss_desc *d = &p->setup.desc;
    size_t n = d->shape[axis], count = p->segments[axis];
    if (d->mode == DK_GAUSS_OVERLAP) {
        *keep = dk_gauss_block(n, count, seg);
        *window = dk_gauss_window(*keep, d->overlap, n);
        return;
    }
    if (count == 1) {
        window->begin = keep->begin = 0;
        window->end = keep->end = n;
        return;
    }
    /* Equal windows of length L spread evenly from 0 to n - L; neighbours
     * start at most L - 2 halo apart, so the boundary between two kept parts,
     * `halo` past the next window's start, is at least `halo` inside both. */
    size_t L = p->window[axis], halo = p->setup.halo[axis];
    size_t start = spread(seg, n - L, count - 1), next = spread(seg + 1, n - L, count - 1);
    window->begin = start;
    window->end = start + L;
    keep->begin = seg == 0 ? 0 : start + halo;
    keep->end = seg == count - 1 ? n : next + halo;
}

/* Exact mode's own path (rf, one of dakit's boundary rules): a line is cut
 * into `pieces` of kept values, few (one where the lines alone keep the
 * threads busy) so that a lane owns its piece and walks it with windows of
 * one length L, short enough that a window of LANES lines stays in L1 for
 * all 2K passes. A window keeps only values at least `halo` from its
 * artificial ends, where their effect is below rounding. The next window
 * is gathered before this one's kept values are written, so a piece is
 * filtered in place as well as out of place. */
typedef struct exact_lane {
    size_t first;           /* element index of the line's value 0 */
    size_t begin, end;      /* the piece: values kept */
    size_t lo, span, count; /* count windows of length len spread over [lo, lo + span) */
    size_t len, halo;
} exact_lane;

/* Piece `piece` of `pieces` of a line of n values, in windows of at most L. */
static inline exact_lane exact_piece(size_t n, size_t pieces, size_t L, size_t h, size_t first,
                              size_t piece)
{
    exact_lane l = {first, spread(piece, n, pieces), spread(piece + 1, n, pieces), 0, 0, 1, 0, h};
    l.lo = l.begin >= h ? l.begin - h : 0;
    l.span = (n - l.end > h ? l.end + h : n) - l.lo;
    l.len = l.span < L ? l.span : L;
    if (l.span > l.len)
        l.count = 1 + div_up(l.span - l.len, l.len - 2 * h);
    return l;
}

static inline exact_lane exact_lane_of(const cpu_gauss_plan *p, int axis, size_t first, size_t piece)
{
    return exact_piece(p->setup.desc.shape[axis], p->segments[axis], p->window[axis],
                       p->setup.halo[axis], first, piece);
}

/* Window s of a lane: where it starts and the values it keeps. */
static inline void exact_window(const exact_lane *l, size_t s, size_t *start, dk_span *keep)
{
    size_t last = l->count - 1, gap = l->span - l->len;
    *start = l->lo + (last ? spread(s, gap, last) : 0);
    keep->begin = s == 0 ? l->begin : *start + l->halo;
    keep->end = s == last ? l->end : l->lo + spread(s + 1, gap, last) + l->halo;
}

/* ---- kernels.c ---- */
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));

/* K iterations of the RF on n rows of lanes (`stride` elements apart):
 * rows of ROW_BYTES (rf_lanes_*), of IIR_ROW_BYTES (rf_rows_*) or one value
 * (rf_single_*). */
#define DECLARE_RF(NAME, T, ATTR) ATTR void NAME(T *buf, size_t n, size_t stride, T alpha, int K, dk_boundary boundary);
DECLARE_RF(rf_lanes_f32_base, float, )
DECLARE_RF(rf_lanes_f64_base, double, )
DECLARE_RF(rf_single_f32, float, )
DECLARE_RF(rf_single_f64, double, )
DECLARE_RF(rf_rows_f32_base, float, )
DECLARE_RF(rf_rows_f64_base, double, )
#ifdef HAVE_AVX2_KERNEL
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
DECLARE_RF(rf_lanes_f32_avx2, float, TARGET_AVX2)
DECLARE_RF(rf_lanes_f64_avx2, double, TARGET_AVX2)
DECLARE_RF(rf_rows_f32_avx2, float, TARGET_AVX2)
DECLARE_RF(rf_rows_f64_avx2, double, TARGET_AVX2)
/* G contiguous lines, values [0, m) of each, into G lanes of buf's rows
 * (`stride` apart), and back, through 8 x 8 (float) or 4 x 4 (double) transposes. */
TARGET_AVX2 void gather_f32_avx2(const float *const *line, size_t m, float *buf, size_t stride);
TARGET_AVX2 void scatter_f32_avx2(const float *buf, size_t stride, size_t m, float *const *line);
TARGET_AVX2 void gather_f64_avx2(const double *const *line, size_t m, double *buf, size_t stride);
TARGET_AVX2 void scatter_f64_avx2(const double *buf, size_t stride, size_t m, double *const *line);
#define TRANSPOSE_F32 8
#define TRANSPOSE_F64 4
#else
#define rf_lanes_f32_avx2 rf_lanes_f32_base
#define rf_lanes_f64_avx2 rf_lanes_f64_base
#define rf_rows_f32_avx2 rf_rows_f32_base
#define rf_rows_f64_avx2 rf_rows_f64_base
#define TRANSPOSE_F32 1 /* unused: no transposing kernel */
#define TRANSPOSE_F64 1
#define gather_f32_avx2 NULL
#define scatter_f32_avx2 NULL
#define gather_f64_avx2 NULL
#define scatter_f64_avx2 NULL
#endif
#undef DECLARE_RF

/* ---- the solvers: each filters one axis (fused: both last two) from src to dst ---- */
void filter_axis_f32(const cpu_gauss_plan *p, int axis, const float *src, float *dst);   /* lines.c */
void filter_axis_f64(const cpu_gauss_plan *p, int axis, const double *src, double *dst);
int choose_exact_path(cpu_gauss_plan *p, int axis, size_t esize);                     /* exact.c */
void exact_axis_f32(const cpu_gauss_plan *p, int axis, const float *src, float *dst);
void exact_axis_f64(const cpu_gauss_plan *p, int axis, const double *src, double *dst);
int choose_fused(cpu_gauss_plan *p, size_t esize);                                     /* fused.c */
void fused_f32(const cpu_gauss_plan *p, const float *src, float *dst);
void fused_f64(const cpu_gauss_plan *p, const double *src, double *dst);
void choose_extended_segments(cpu_gauss_plan *p, int axis);                            /* extended.c */
void extended_axis_f32(const cpu_gauss_plan *p, int axis, const float *src, float *dst);
void extended_axis_f64(const cpu_gauss_plan *p, int axis, const double *src, double *dst);
dk_status cpu_gauss_execute_halo(void *plan, const dk_gauss_halo *h, const void *in, void *out,
                                 dk_msg *msg);                                         /* halo.c */

#endif
