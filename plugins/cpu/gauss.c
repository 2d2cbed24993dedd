/* gauss on the cpu backend: the K-iterated recursive filter of
 * algorithms/gauss/reference.c, run on many lines at once.
 *
 * The recursion along a line is serial, so the speed comes from running
 * LANES lines in lockstep: their values are gathered into a small buffer laid
 * out [i][lane], filtered there (the lane loop vectorizes and the buffer stays
 * in cache for all K iterations) and scattered back. Along a strided axis the
 * lanes are adjacent lines, so a gather reads contiguous rows; along the
 * contiguous axis the gather is a transpose of LANES rows.
 *
 * Exact mode (rf with dakit's boundary rules) cuts a line into few pieces,
 * one per lane, walked with short windows whose kept values lie at least
 * setup->halo from any artificial end, where that end's effect is below
 * rounding (choose_exact_path); with exactly the last two axes filtered and
 * in != out, both go in one pass over tiles (choose_fused). Overlap mode
 * cuts lines into the blocks of dk_gauss_block and dk_gauss_window, as the
 * reference does; scipy's modes and deriche / vyv take the extended path,
 * in lanes as well (DEFINE_IIR_AXIS).
 * Where pieces or blocks of a line overlap and the pass is in place, the
 * result goes to another buffer than the one the windows read (the plan's
 * scratch). */
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

static const char *const variants[] = {"lines", NULL};

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

static int max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_index(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* The plugin's own, so that it needs no symbol of libdakit. */
static size_t element_size(dk_dtype dtype)
{
    return dtype == DK_F32 ? sizeof(float) : sizeof(double);
}

static size_t div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* floor(k * span / parts) without overflowing k * span. */
static size_t spread(size_t k, size_t span, size_t parts)
{
    return k * (span / parts) + k * (span % parts) / parts;
}

/* Segment `seg` of a line of n values along `axis`: the window filtered and
 * the part kept. The kept parts of a line's segments tile [0, n). */
static void segment_of(const cpu_gauss_plan *p, int axis, size_t seg, dk_span *window,
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

/* Exact mode: how many segments a line gets and how long they are. */
static void choose_exact_segments(cpu_gauss_plan *p, int axis, size_t esize)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t n = v.n, halo = p->setup.halo[axis], lines = v.outer * v.inner;
    size_t cache_window = LANE_BUFFER_BYTES / (p->lanes * esize);
    size_t wanted = (size_t)p->threads * p->lanes * BATCHES_PER_THREAD;

    size_t L = n;
    if (lines < wanted)
        L = n / div_up(wanted, lines) + 2 * halo;
    if (L > cache_window)
        L = cache_window;
    if (L < MIN_WINDOW)
        L = MIN_WINDOW;
    if (halo < n && L < 4 * halo) /* at most half of each window is overlap */
        L = 4 * halo;
    if (halo >= n / 2 || L >= n) {
        p->segments[axis] = 1;
        p->window[axis] = n;
        return;
    }
    p->segments[axis] = 1 + div_up(n - L, L - 2 * halo);
    p->window[axis] = L;
}

/* Extended axes: segments of `keep` values, each computed alone from its
 * stretch of the continued input (dk_gauss_iir); several per line only
 * when the lines are too few to share among the threads, and then at least
 * four reaches long, so that at most a third of the work is repeated. */
static void choose_extended_segments(cpu_gauss_plan *p, int axis)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t lines = v.outer * v.inner, reach = p->setup.reach[axis];
    size_t wanted = (size_t)p->threads * BATCHES_PER_THREAD;
    size_t shortest = 4 * reach > MIN_WINDOW ? 4 * reach : MIN_WINDOW;
    size_t segments = lines >= wanted ? 1 : div_up(wanted, lines);
    if (segments > v.n / shortest)
        segments = v.n / shortest;
    if (segments < 1)
        segments = 1;
    /* a batch's buffers (two rows of lanes per kept value) stay within a core's caches */
    size_t longest = EXTENDED_KEEP > shortest ? EXTENDED_KEEP : shortest;
    if (div_up(v.n, segments) > longest)
        segments = div_up(v.n, longest);
    p->keep[axis] = div_up(v.n, segments);
    p->segments[axis] = div_up(v.n, p->keep[axis]); /* every segment holds values: none starts past the end */
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
static exact_lane exact_piece(size_t n, size_t pieces, size_t L, size_t h, size_t first,
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

static exact_lane exact_lane_of(const cpu_gauss_plan *p, int axis, size_t first, size_t piece)
{
    return exact_piece(p->setup.desc.shape[axis], p->segments[axis], p->window[axis],
                       p->setup.halo[axis], first, piece);
}

/* Window s of a lane: where it starts and the values it keeps. */
static void exact_window(const exact_lane *l, size_t s, size_t *start, dk_span *keep)
{
    size_t last = l->count - 1, gap = l->span - l->len;
    *start = l->lo + (last ? spread(s, gap, last) : 0);
    keep->begin = s == 0 ? l->begin : *start + l->halo;
    keep->end = s == last ? l->end : l->lo + spread(s + 1, gap, last) + l->halo;
}

/* Exact mode: where this path applies, and the windows, pieces and lanes
 * per group along `axis`. Along a strided axis with at least LANES adjacent
 * lines, a group is `width` adjacent lines (several rows of the lane buffer
 * side by side: long runs to read); otherwise LANES lines, transposed. */
static int choose_exact_path(cpu_gauss_plan *p, int axis, size_t esize)
{
    dk_axis_view v = dk_axis_view_of(&p->setup.desc, axis);
    size_t n = v.n, h = p->setup.halo[axis], lanes = p->lanes;
    size_t L = EXACT_WINDOW_BYTES / ROW_BYTES;
    if (L < 4 * h)
        L = 4 * h;
    if (L >= n)
        L = n;
    if (2 * L * lanes * esize > LANE_BUFFER_LIMIT)
        return 0;
    size_t width = lanes;
    p->rows[axis] = v.inner >= lanes;
    if (p->rows[axis]) {
        size_t fit = EXACT_BLOCK_BYTES / (L * esize) / lanes * lanes;
        size_t most = div_up(v.inner, lanes) * lanes;
        width = fit < lanes ? lanes : fit > most ? most : fit;
    }
    size_t lines = v.outer * v.inner, wanted = (size_t)p->threads * BATCHES_PER_THREAD;
    size_t groups = p->rows[axis] ? v.outer * div_up(v.inner, width) : div_up(lines, lanes);
    size_t pieces = 1;
    if (groups < wanted)
        pieces = p->rows[axis] ? div_up(wanted, groups) : div_up(wanted * lanes, lines);
    if (pieces > n / (2 * L)) /* a piece is at least two windows long */
        pieces = n / (2 * L) ? n / (2 * L) : 1;
    p->exact[axis] = 1;
    p->window[axis] = L;
    p->segments[axis] = pieces;
    p->width[axis] = width;
    return 1;
}

/* Exact mode, the last two axes filtered and nothing else: the tiles of
 * the fused pass (DEFINE_FUSED), or 0 where a tile would not fit in L2. */
static int choose_fused(cpu_gauss_plan *p, size_t esize)
{
    const dk_gauss_desc *d = &p->setup.desc;
    if (d->mode != DK_GAUSS_EXACT || d->ndim < 2)
        return 0;
    int a0 = d->ndim - 2, a1 = d->ndim - 1;
    if (d->axes != ((1u << a0) | (1u << a1)) || p->setup.extended[a0] || p->setup.extended[a1])
        return 0;
    size_t n0 = d->shape[a0], n1 = d->shape[a1], h0 = p->setup.halo[a0], h1 = p->setup.halo[a1];
    size_t outer = p->setup.count / (n0 * n1), lanes = p->lanes;
    size_t rows = FUSED_ROWS > 4 * h0 ? FUSED_ROWS : 4 * h0;
    if (rows > n0)
        rows = n0;
    size_t width = FUSED_TILE_BYTES / (rows * esize) / lanes * lanes;
    if (width < 4 * h1)
        width = 4 * h1;
    if (width >= n1)
        width = n1;
    size_t stride = div_up(width, lanes) * lanes;
    if ((rows * stride + width * lanes) * esize > FUSED_LIMIT)
        return 0;
    /* pieces of rows for the threads, each at least a halo on either side long */
    size_t pieces = div_up(2 * (size_t)p->threads, outer), most = n0 / (2 * h0 + 1);
    if (pieces > most)
        pieces = most ? most : 1;
    p->fused = 1;
    p->fuse_pieces = pieces;
    p->fuse_rows = rows;
    p->fuse_tiles = width == n1 ? 1 : div_up(n1, width - 2 * h1);
    p->fuse_stride = stride;
    p->fuse_need = rows * stride + width * lanes;
    return 1;
}

/* The longest window along `axis`. */
static size_t longest_window(const cpu_gauss_plan *p, int axis)
{
    const dk_gauss_desc *d = &p->setup.desc;
    size_t n = d->shape[axis];
    if (d->mode == DK_GAUSS_EXACT)
        return p->window[axis];
    size_t longest_block = div_up(n, p->segments[axis]);
    size_t w = longest_block + 2 * d->overlap;
    return w < n && w >= longest_block ? w : n;
}

static void *alloc_aligned(size_t bytes)
{
    void *ptr = NULL;
    size_t rounded = (bytes + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    if (rounded < bytes || posix_memalign(&ptr, CACHE_LINE, rounded ? rounded : CACHE_LINE) != 0)
        return NULL;
    return ptr;
}

static void cpu_gauss_plan_destroy(void *plan)
{
    cpu_gauss_plan *p = plan;
    if (!p)
        return;
    free(p->buffers);
    free(p->scratch);
    free(p->halo_buffers);
    free(p);
}

static dk_status cpu_gauss_plan_create(void *device, const dk_gauss_setup *setup, void **plan,
                                       dk_msg *msg)
{
    (void)device;
    const dk_gauss_desc *d = &setup->desc;
    if (d->dtype != DK_F32 && d->dtype != DK_F64) {
        dk_msg_set(msg, "the cpu backend's gauss supports float32 and float64 only");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    cpu_gauss_plan *p = calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cannot allocate a gauss plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->setup = *setup;
    p->setup.desc.variant = NULL; /* the caller's string need not outlive the plan */
    p->threads = max_threads();
    p->lanes = d->dtype == DK_F32 ? LANES_F32 : LANES_F64;
#ifdef HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    p->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    size_t esize = element_size(d->dtype);

    size_t longest = 0, extended_need = 0, exact_need = 0;
    int overlapping = 0;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        if (setup->extended[a]) {
            choose_extended_segments(p, a);
            if (p->segments[a] > 1)
                overlapping = 1;
            /* gathered input and causal sums, a line at a time (rf) or in lanes */
            size_t w = (2 * p->keep[a] + 2 * setup->reach[a] + 3) * IIR_RUNS *
                       (d->dtype == DK_F32 ? IIR_LANES_F32 : IIR_LANES_F64);
            if (w > extended_need)
                extended_need = w;
            continue;
        }
        if (d->mode == DK_GAUSS_EXACT && choose_exact_path(p, a, esize)) {
            if (p->segments[a] > 1)
                overlapping = 1;
            size_t w = 2 * p->window[a] * p->width[a]; /* two windows' buffers */
            if (w > exact_need)
                exact_need = w;
            continue;
        }
        if (d->mode == DK_GAUSS_OVERLAP)
            p->segments[a] = dk_gauss_line_blocks(d->shape[a], d->blocks);
        else
            choose_exact_segments(p, a, esize);
        if (p->segments[a] > 1)
            overlapping = 1;
        size_t w = longest_window(p, a);
        if (w > longest)
            longest = w;
    }

    p->lockstep = longest <= LANE_BUFFER_LIMIT / (p->lanes * esize);
    p->buffer_elems = p->lockstep ? longest * p->lanes : longest;
    if (p->buffer_elems < extended_need)
        p->buffer_elems = extended_need;
    if (p->buffer_elems < exact_need)
        p->buffer_elems = exact_need;
    if (choose_fused(p, esize) && p->buffer_elems < p->fuse_need)
        p->buffer_elems = p->fuse_need;
    /* Whole cache lines per thread, so threads never share one. */
    p->buffer_elems = div_up(p->buffer_elems * esize, CACHE_LINE) * CACHE_LINE / esize;
    size_t buffer_bytes = (size_t)p->threads * p->buffer_elems * esize;
    p->buffers = alloc_aligned(buffer_bytes);
    if (overlapping)
        p->scratch = alloc_aligned(setup->count * esize);
    if (!p->buffers || (overlapping && !p->scratch)) {
        dk_msg_set(msg, "cannot allocate %zu bytes of gauss work memory",
                   buffer_bytes + (overlapping ? setup->count * esize : 0));
        cpu_gauss_plan_destroy(p);
        return DK_ERR_OUT_OF_MEMORY;
    }
    /* Lanes a short batch leaves unused still get filtered; zeros keep them
     * free of denormals and NaN until real data has passed through. */
    memset(p->buffers, 0, buffer_bytes);
    for (int a = 0; a < d->ndim; a++)
        if (setup->halo_max[a]) {
            size_t m = (d->shape[a] + 2 * setup->halo_max[a]) * p->lanes;
            p->halo_elems = m > p->halo_elems ? m : p->halo_elems;
        }
    if (p->halo_elems) {
        p->halo_elems = div_up(p->halo_elems * esize, CACHE_LINE) * CACHE_LINE / esize;
        size_t bytes = (size_t)p->threads * p->halo_elems * esize;
        if (!(p->halo_buffers = alloc_aligned(bytes))) {
            dk_msg_set(msg, "cannot allocate %zu bytes of gauss work memory for halos", bytes);
            cpu_gauss_plan_destroy(p);
            return DK_ERR_OUT_OF_MEMORY;
        }
    }
    *plan = p;
    return DK_OK;
}

/* One line's part in a batch: where its values start and its segment. */
typedef struct lane {
    size_t first; /* element index of the line's value 0 */
    dk_span window, keep;
} lane;

/* Lanes [t0, t0 + count) of the axis; lane t is segment `seg` of line
 * (o, j), numbered t = (o * segments + seg) * inner + j so that neighbouring
 * lanes are adjacent lines along a strided axis. */
static void lanes_of(const cpu_gauss_plan *p, int axis, dk_axis_view v, size_t t0, size_t count,
                     lane *out)
{
    size_t segments = p->segments[axis];
    for (size_t w = 0; w < count; w++) {
        size_t t = t0 + w;
        size_t j = t % v.inner, rest = t / v.inner;
        size_t seg = rest % segments, o = rest / segments;
        out[w].first = o * v.n * v.inner + j;
        segment_of(p, axis, seg, &out[w].window, &out[w].keep);
    }
}

/* Lanes that are adjacent lines with one segment: their values at each i are
 * one contiguous run in memory. */
static int lanes_contiguous(const lane *l, size_t count)
{
    for (size_t w = 1; w < count; w++)
        if (l[w].first != l[0].first + w || l[w].window.begin != l[0].window.begin ||
            l[w].window.end != l[0].window.end || l[w].keep.begin != l[0].keep.begin ||
            l[w].keep.end != l[0].keep.end)
            return 0;
    return 1;
}

/* K iterations of the RF on n rows of ROW bytes, `stride` elements apart, in
 * the reference's order of operations (FMA contraction aside). A row is R
 * vectors V (or one scalar, for a single lane); `alpha * p + beta * x` keeps
 * one FMA, not a multiply and an FMA, on the recursion's critical path. */
#define DEFINE_RF(NAME, T, V, ROW, ATTR)                                               \
    ATTR static void NAME(T *buf, size_t n, size_t stride, T alpha, int K,             \
                          dk_boundary boundary)                                        \
    {                                                                                  \
        enum { R = (ROW) / sizeof(V) };                                                \
        const T beta = (T)1 - alpha;                                                   \
        const size_t S = stride / (sizeof(V) / sizeof(T)); /* row stride in V */       \
        V *rows = (V *)buf, *last = rows + (n - 1) * S;                                \
        for (int k = 0; k < K; k++) {                                                  \
            V u[R], p[R];                                                              \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                     \
                const V zero = {0};                                                    \
                u[r] = last[r];                                                        \
                p[r] = boundary == DK_BOUNDARY_CONSTANT ? rows[r] : zero;              \
            }                                                                          \
            for (size_t i = 0; i < n; i++) {                                           \
                V *row = rows + i * S;                                                 \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                 \
                    p[r] = alpha * p[r] + beta * row[r];                               \
                    row[r] = p[r];                                                     \
                }                                                                      \
            }                                                                          \
            V *s = p; /* the backing pass starts from the advancing pass's end */      \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                     \
                s[r] = boundary == DK_BOUNDARY_CONSTANT                                \
                           ? u[r] + (s[r] - u[r]) / ((T)1 + alpha)                     \
                           : beta * s[r];                                              \
                last[r] = s[r];                                                        \
            }                                                                          \
            for (size_t i = n - 1; i-- > 0;) {                                         \
                V *row = rows + i * S;                                                 \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                 \
                    s[r] = alpha * s[r] + beta * row[r];                               \
                    row[r] = s[r];                                                     \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));
DEFINE_RF(rf_lanes_f32_base, float, f32x4, ROW_BYTES, )
DEFINE_RF(rf_lanes_f64_base, double, f64x2, ROW_BYTES, )
DEFINE_RF(rf_single_f32, float, float, sizeof(float), )
DEFINE_RF(rf_single_f64, double, double, sizeof(double), )

/* The same on the extended path's rows of IIR_ROW_BYTES (rf with scipy's modes). */
DEFINE_RF(rf_rows_f32_base, float, f32x4, IIR_ROW_BYTES, )
DEFINE_RF(rf_rows_f64_base, double, f64x2, IIR_ROW_BYTES, )

#ifdef HAVE_AVX2_KERNEL
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
DEFINE_RF(rf_lanes_f32_avx2, float, f32x8, ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_lanes_f64_avx2, double, f64x4, ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_rows_f32_avx2, float, f32x8, IIR_ROW_BYTES, TARGET_AVX2)
DEFINE_RF(rf_rows_f64_avx2, double, f64x4, IIR_ROW_BYTES, TARGET_AVX2)
#else
#define rf_lanes_f32_avx2 rf_lanes_f32_base
#define rf_lanes_f64_avx2 rf_lanes_f64_base
#define rf_rows_f32_avx2 rf_rows_f32_base
#define rf_rows_f64_avx2 rf_rows_f64_base
#endif

/* Lanes [0, count) of a batch, all with windows of one length L: gathered
 * into buf (`width` lanes to a row), filtered by rf, and their kept parts
 * scattered to dst. */
#define DEFINE_FILTER_LANES(NAME, T)                                                   \
    static void NAME(const lane *l, size_t count, size_t width, size_t inner,          \
                     const T *src, T *dst, T *buf, T alpha, const dk_gauss_desc *d,    \
                     void (*rf)(T *, size_t, size_t, T, int, dk_boundary))             \
    {                                                                                  \
        size_t L = l[0].window.end - l[0].window.begin;                                \
        int rows = inner > 1 && lanes_contiguous(l, count);                            \
        if (rows) {                                                                    \
            const T *in = src + l[0].first + l[0].window.begin * inner;                \
            for (size_t i = 0; i < L; i++)                                             \
                memcpy(buf + i * width, in + i * inner, count * sizeof(T));            \
        } else {                                                                       \
            for (size_t w = 0; w < count; w++) {                                       \
                const T *in = src + l[w].first + l[w].window.begin * inner;            \
                for (size_t i = 0; i < L; i++)                                         \
                    buf[i * width + w] = in[i * inner];                                \
            }                                                                          \
        }                                                                              \
        rf(buf, L, width, alpha, d->K, d->boundary);                                   \
        if (rows) {                                                                    \
            T *out = dst + l[0].first;                                                 \
            size_t shift = l[0].window.begin;                                          \
            for (size_t i = l[0].keep.begin; i < l[0].keep.end; i++)                   \
                memcpy(out + i * inner, buf + (i - shift) * width, count * sizeof(T)); \
        } else {                                                                       \
            for (size_t w = 0; w < count; w++) {                                       \
                T *out = dst + l[w].first;                                             \
                size_t shift = l[w].window.begin;                                      \
                for (size_t i = l[w].keep.begin; i < l[w].keep.end; i++)               \
                    out[i * inner] = buf[(i - shift) * width + w];                     \
            }                                                                          \
        }                                                                              \
    }

/* One axis: batches of W lanes, shared among the threads. A batch never
 * straddles two groups of adjacent lines when there are at least W of them,
 * so its gather stays contiguous. */
#define DEFINE_FILTER_AXIS(NAME, T, W, FILTER_LANES, RF_AVX2, RF_BASE, RF_SINGLE)       \
    static void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)          \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        T alpha = (T)p->setup.alpha[axis];                                             \
        size_t lanes_total = v.outer * p->segments[axis] * v.inner;                    \
        size_t group = v.inner >= W ? v.inner : lanes_total;                           \
        size_t per_group = div_up(group, W);                                           \
        size_t batches = lanes_total / group * per_group;                              \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;       \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t b = 0; b < batches; b++) {                                     \
                size_t in_group = (b % per_group) * W;                                 \
                size_t t0 = b / per_group * group + in_group;                          \
                size_t count = group - in_group < W ? group - in_group : W;            \
                lane l[W];                                                             \
                lanes_of(p, axis, v, t0, count, l);                                    \
                /* runs of lanes whose windows have one length */                      \
                for (size_t w0 = 0, w1; w0 < count; w0 = w1) {                         \
                    size_t L = l[w0].window.end - l[w0].window.begin;                  \
                    for (w1 = w0 + 1; w1 < count; w1++)                                \
                        if (l[w1].window.end - l[w1].window.begin != L)                \
                            break;                                                     \
                    if (p->lockstep) {                                                 \
                        FILTER_LANES(l + w0, w1 - w0, W, v.inner, src, dst, buf, alpha, \
                                     d, p->avx2 ? RF_AVX2 : RF_BASE);                  \
                    } else {                                                           \
                        for (size_t w = w0; w < w1; w++)                               \
                            FILTER_LANES(l + w, 1, 1, v.inner, src, dst, buf, alpha,   \
                                         d, RF_SINGLE);                                \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_FILTER_LANES(filter_lanes_f32, float)
DEFINE_FILTER_LANES(filter_lanes_f64, double)

DEFINE_FILTER_AXIS(filter_axis_f32, float, LANES_F32, filter_lanes_f32, rf_lanes_f32_avx2,
                   rf_lanes_f32_base, rf_single_f32)
DEFINE_FILTER_AXIS(filter_axis_f64, double, LANES_F64, filter_lanes_f64, rf_lanes_f64_avx2,
                   rf_lanes_f64_base, rf_single_f64)

#ifdef HAVE_AVX2_KERNEL
#include <immintrin.h>

/* Transposes an 8 x 8 block: r[k] becomes the k-th values of r[0..7]. */
TARGET_AVX2 static inline void transpose_f32x8(__m256 r[8])
{
    __m256 t[8], s[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        s[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        s[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
        s[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        s[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x20);
        r[k + 4] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x31);
    }
}

/* Transposes a 4 x 4 block of doubles. */
TARGET_AVX2 static inline void transpose_f64x4(__m256d r[4])
{
    __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
    __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    r[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    r[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    r[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

/* G contiguous lines, values [0, m) of each, into G lanes of buf's rows
 * (`stride` apart), and back; blocks of G values, the rest one by one. */
#define DEFINE_TRANSPOSE(GATHER, SCATTER, T, VT, G, LOAD, STORE, TRANSPOSE)            \
    TARGET_AVX2 static void GATHER(const T *const *line, size_t m, T *buf, size_t stride) \
    {                                                                                  \
        size_t i = 0;                                                                  \
        for (; i + G <= m; i += G) {                                                   \
            VT r[G];                                                                   \
            for (int k = 0; k < G; k++)                                                \
                r[k] = LOAD(line[k] + i);                                              \
            TRANSPOSE(r);                                                              \
            for (int k = 0; k < G; k++)                                                \
                STORE(buf + (i + k) * stride, r[k]);                                   \
        }                                                                              \
        for (; i < m; i++)                                                             \
            for (int k = 0; k < G; k++)                                                \
                buf[i * stride + k] = line[k][i];                                      \
    }                                                                                  \
    TARGET_AVX2 static void SCATTER(const T *buf, size_t stride, size_t m, T *const *line) \
    {                                                                                  \
        size_t i = 0;                                                                  \
        for (; i + G <= m; i += G) {                                                   \
            VT r[G];                                                                   \
            for (int k = 0; k < G; k++)                                                \
                r[k] = LOAD(buf + (i + k) * stride);                                   \
            TRANSPOSE(r);                                                              \
            for (int k = 0; k < G; k++)                                                \
                STORE(line[k] + i, r[k]);                                              \
        }                                                                              \
        for (; i < m; i++)                                                             \
            for (int k = 0; k < G; k++)                                                \
                line[k][i] = buf[i * stride + k];                                      \
    }

DEFINE_TRANSPOSE(gather_f32_avx2, scatter_f32_avx2, float, __m256, 8, _mm256_loadu_ps,
                 _mm256_storeu_ps, transpose_f32x8)
DEFINE_TRANSPOSE(gather_f64_avx2, scatter_f64_avx2, double, __m256d, 4, _mm256_loadu_pd,
                 _mm256_storeu_pd, transpose_f64x4)
#define TRANSPOSE_F32 8
#define TRANSPOSE_F64 4
#else
#define TRANSPOSE_F32 1 /* unused: no transposing kernel */
#define TRANSPOSE_F64 1
#define gather_f32_avx2 NULL
#define scatter_f32_avx2 NULL
#define gather_f64_avx2 NULL
#define scatter_f64_avx2 NULL
#endif

/* Window s of the lanes l[0, count) into buf (LANES to a row): lanes past
 * their last window are left as they are. Contiguous lines go through the
 * AVX2 transpose, G at a time, where all G have a window s. */
#define DEFINE_EXACT_LANES_IO(GATHER_NAME, SCATTER_NAME, T, LANES, G, GATHER_G, SCATTER_G) \
    static void GATHER_NAME(const cpu_gauss_plan *p, int axis, const exact_lane *l,    \
                            size_t count, size_t s, const T *src, T *buf)              \
    {                                                                                  \
        size_t L = p->window[axis];                                                    \
        size_t inner = dk_axis_view_of(&p->setup.desc, axis).inner;                    \
        void (*const gather)(const T *const *, size_t, T *, size_t) = GATHER_G;        \
        size_t w = 0;                                                                  \
        if (gather && p->avx2 && inner == 1) {                                         \
            for (; w + G <= count; w += G) {                                           \
                const T *line[G];                                                      \
                int all = 1;                                                           \
                for (int k = 0; k < G; k++) {                                          \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    all &= s < l[w + k].count;                                         \
                    if (!all)                                                          \
                        break;                                                         \
                    exact_window(&l[w + k], s, &start, &keep);                   \
                    line[k] = src + l[w + k].first + start;                            \
                }                                                                      \
                if (!all)                                                              \
                    break;                                                             \
                gather(line, L, buf + w, LANES);                                       \
            }                                                                          \
        }                                                                              \
        for (; w < count; w++) {                                                       \
            if (s >= l[w].count)                                                       \
                continue;                                                              \
            size_t start;                                                              \
            dk_span keep;                                                              \
            exact_window(&l[w], s, &start, &keep);                               \
            const T *in = src + l[w].first + start * inner;                            \
            for (size_t i = 0; i < L; i++)                                             \
                buf[i * LANES + w] = in[i * inner];                                    \
        }                                                                              \
    }                                                                                  \
    static void SCATTER_NAME(const cpu_gauss_plan *p, int axis, const exact_lane *l,   \
                             size_t count, size_t s, const T *buf, T *dst)             \
    {                                                                                  \
        size_t inner = dk_axis_view_of(&p->setup.desc, axis).inner;                    \
        void (*const scatter)(const T *, size_t, size_t, T *const *) = SCATTER_G;      \
        size_t w = 0;                                                                  \
        if (scatter && p->avx2 && inner == 1) {                                        \
            for (; w + G <= count; w += G) {                                           \
                T *line[G];                                                            \
                size_t from = 0, to = 0;                                               \
                int same = 1;                                                          \
                for (int k = 0; k < G && same; k++) {                                  \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    same = s < l[w + k].count;                                         \
                    if (!same)                                                         \
                        break;                                                         \
                    exact_window(&l[w + k], s, &start, &keep);                   \
                    if (k == 0)                                                        \
                        from = keep.begin - start, to = keep.end - start;              \
                    same = keep.begin - start == from && keep.end - start == to;       \
                    line[k] = dst + l[w + k].first + keep.begin;                       \
                }                                                                      \
                if (!same)                                                             \
                    break;                                                             \
                scatter(buf + from * LANES + w, LANES, to - from, line);               \
            }                                                                          \
        }                                                                              \
        for (; w < count; w++) {                                                       \
            if (s >= l[w].count)                                                       \
                continue;                                                              \
            size_t start;                                                              \
            dk_span keep;                                                              \
            exact_window(&l[w], s, &start, &keep);                               \
            T *out = dst + l[w].first;                                                 \
            for (size_t i = keep.begin; i < keep.end; i++)                             \
                out[i * inner] = buf[(i - start) * LANES + w];                         \
        }                                                                              \
    }

DEFINE_EXACT_LANES_IO(exact_gather_f32, exact_scatter_f32, float, LANES_F32, TRANSPOSE_F32,
                      gather_f32_avx2, scatter_f32_avx2)
DEFINE_EXACT_LANES_IO(exact_gather_f64, exact_scatter_f64, double, LANES_F64, TRANSPOSE_F64,
                      gather_f64_avx2, scatter_f64_avx2)

/* One axis in exact mode: groups of lanes shared among the threads, each
 * walking its pieces window by window through two buffers (the next window
 * is read before this one is written). */
#define DEFINE_EXACT_AXIS(NAME, T, LANES, GATHER, SCATTER, RF_AVX2, RF_BASE)            \
    static void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)          \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        const T alpha = (T)p->setup.alpha[axis];                                       \
        const size_t L = p->window[axis];                                              \
        const size_t pieces = p->segments[axis], width = p->width[axis];               \
        const int rows = p->rows[axis];                                                \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        size_t blocks = div_up(v.inner, width), lanes_total = v.outer * v.inner * pieces; \
        size_t groups = rows ? v.outer * pieces * blocks : div_up(lanes_total, LANES); \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf[2];                                                                 \
            buf[0] = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;       \
            buf[1] = buf[0] + L * width;                                               \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t g = 0; g < groups; g++) {                                      \
                if (rows) {                                                            \
                    /* adjacent lines: window s is L runs of `count` values */        \
                    size_t cb = g % blocks, rest = g / blocks;                         \
                    size_t piece = rest % pieces, o = rest / pieces;                   \
                    size_t count = v.inner - cb * width < width ? v.inner - cb * width : width; \
                    exact_lane l = exact_lane_of(p, axis, o * v.n * v.inner + cb * width, piece); \
                    size_t start, next;                                                \
                    dk_span keep, unused;                                              \
                    exact_window(&l, 0, &start, &keep);                          \
                    for (size_t i = 0; i < L; i++)                                     \
                        memcpy(buf[0] + i * width, src + l.first + (start + i) * v.inner, \
                               count * sizeof(T));                                     \
                    for (size_t s = 0; s < l.count; s++) {                             \
                        T *cur = buf[s & 1], *other = buf[(s & 1) ^ 1];                \
                        for (size_t c = 0; c < count; c += LANES)                      \
                            rf(cur + c, L, width, alpha, d->K, d->boundary);           \
                        if (s + 1 < l.count) {                                         \
                            exact_window(&l, s + 1, &next, &unused);             \
                            for (size_t i = 0; i < L; i++)                             \
                                memcpy(other + i * width,                              \
                                       src + l.first + (next + i) * v.inner,           \
                                       count * sizeof(T));                             \
                        }                                                              \
                        for (size_t i = keep.begin; i < keep.end; i++)                 \
                            memcpy(dst + l.first + i * v.inner, cur + (i - start) * width, \
                                   count * sizeof(T));                                 \
                        if (s + 1 < l.count)                                           \
                            exact_window(&l, s + 1, &start, &keep);              \
                    }                                                                  \
                    continue;                                                          \
                }                                                                      \
                /* LANES lines or pieces, transposed */                               \
                size_t t0 = g * LANES;                                                 \
                size_t count = lanes_total - t0 < LANES ? lanes_total - t0 : LANES;    \
                exact_lane l[LANES];                                                   \
                size_t windows = 0;                                                    \
                for (size_t w = 0; w < count; w++) {                                   \
                    size_t t = t0 + w, line = t / pieces;                              \
                    size_t o = line / v.inner, j = line % v.inner;                     \
                    l[w] = exact_lane_of(p, axis, o * v.n * v.inner + j, t % pieces);  \
                    if (l[w].count > windows)                                          \
                        windows = l[w].count;                                          \
                }                                                                      \
                GATHER(p, axis, l, count, 0, src, buf[0]);                             \
                for (size_t s = 0; s < windows; s++) {                                 \
                    T *cur = buf[s & 1], *other = buf[(s & 1) ^ 1];                    \
                    rf(cur, L, LANES, alpha, d->K, d->boundary);                       \
                    if (s + 1 < windows)                                               \
                        GATHER(p, axis, l, count, s + 1, src, other);                  \
                    SCATTER(p, axis, l, count, s, cur, dst);                           \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_EXACT_AXIS(exact_axis_f32, float, LANES_F32, exact_gather_f32, exact_scatter_f32,
                  rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_EXACT_AXIS(exact_axis_f64, double, LANES_F64, exact_gather_f64, exact_scatter_f64,
                  rf_lanes_f64_avx2, rf_lanes_f64_base)

/* Exact mode with exactly the last two axes filtered, out of place: both in
 * one pass over tiles, so the field is read and written once instead of
 * twice. A tile is a window of rows (axis n-2) by a window of columns (axis
 * n-1), each with its halo: the rows are filtered down the columns (all of
 * the tile's columns, adjacent lanes), then its kept rows along themselves
 * (LANES rows transposed at a time), and its kept part is written. Each
 * value goes through the reference's two passes in its order; the tile's
 * artificial ends lie at least a halo away from what it keeps. */
#define DEFINE_FUSED(NAME, T, LANES, G, GATHER_G, SCATTER_G, RF_AVX2, RF_BASE)         \
    static void NAME(const cpu_gauss_plan *p, const T *src, T *dst)                    \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        const int a0 = d->ndim - 2, a1 = d->ndim - 1;                                  \
        const size_t n0 = d->shape[a0], n1 = d->shape[a1], h1 = p->setup.halo[a1];     \
        const size_t pieces = p->fuse_pieces, tiles = p->fuse_tiles;                   \
        const size_t Ws = p->fuse_stride, units = p->setup.count / (n0 * n1) * pieces; \
        const T alpha0 = (T)p->setup.alpha[a0], alpha1 = (T)p->setup.alpha[a1];         \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        void (*const gather)(const T *const *, size_t, T *, size_t) = p->avx2 ? GATHER_G : NULL; \
        void (*const scatter)(const T *, size_t, size_t, T *const *) = p->avx2 ? SCATTER_G : NULL; \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *tile = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;      \
            T *lanes = tile + p->fuse_rows * Ws;                                       \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t u = 0; u < units; u++) {                                       \
                size_t base = u / pieces * n0 * n1;                                    \
                exact_lane l = exact_piece(n0, pieces, p->fuse_rows, p->setup.halo[a0], \
                                           base, u % pieces);                          \
                for (size_t s = 0; s < l.count; s++) {                                 \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    exact_window(&l, s, &start, &keep);                                \
                    for (size_t ct = 0; ct < tiles; ct++) {                            \
                        size_t c0 = spread(ct, n1, tiles), c1 = spread(ct + 1, n1, tiles); \
                        size_t w0 = c0 >= h1 ? c0 - h1 : 0;                            \
                        size_t wt = (n1 - c1 > h1 ? c1 + h1 : n1) - w0;                \
                        const T *in = src + base + start * n1 + w0;                    \
                        for (size_t i = 0; i < l.len; i++)                             \
                            memcpy(tile + i * Ws, in + i * n1, wt * sizeof(T));        \
                        for (size_t c = 0; c < wt; c += LANES)                         \
                            rf(tile + c, l.len, Ws, alpha0, d->K, d->boundary);        \
                        for (size_t r = keep.begin - start; r < keep.end - start; r += LANES) { \
                            size_t rc = keep.end - start - r < LANES ? keep.end - start - r : LANES; \
                            size_t k = 0;                                              \
                            for (; gather && k + G <= rc; k += G) {                    \
                                const T *line[G];                                      \
                                for (int j = 0; j < G; j++)                            \
                                    line[j] = tile + (r + k + j) * Ws;                 \
                                gather(line, wt, lanes + k, LANES);                    \
                            }                                                          \
                            for (; k < rc; k++)                                        \
                                for (size_t i = 0; i < wt; i++)                        \
                                    lanes[i * LANES + k] = tile[(r + k) * Ws + i];     \
                            rf(lanes, wt, LANES, alpha1, d->K, d->boundary);           \
                            T *out = dst + base + (start + r) * n1 + c0;               \
                            const T *kept = lanes + (c0 - w0) * LANES;                 \
                            k = 0;                                                     \
                            for (; scatter && k + G <= rc; k += G) {                   \
                                T *line[G];                                            \
                                for (int j = 0; j < G; j++)                            \
                                    line[j] = out + (k + j) * n1;                      \
                                scatter(kept + k, LANES, c1 - c0, line);               \
                            }                                                          \
                            for (; k < rc; k++)                                        \
                                for (size_t i = 0; i < c1 - c0; i++)                   \
                                    out[k * n1 + i] = kept[i * LANES + k];             \
                        }                                                              \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_FUSED(fused_f32, float, LANES_F32, TRANSPOSE_F32, gather_f32_avx2, scatter_f32_avx2,
             rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_FUSED(fused_f64, double, LANES_F64, TRANSPOSE_F64, gather_f64_avx2, scatter_f64_avx2,
             rf_lanes_f64_avx2, rf_lanes_f64_base)

/* deriche and vyv in lockstep over IIR_ROW_BYTES of lanes (a cache line),
 * each lane a line's segment: the window buf (keep + 2 R + 3 rows, row i the
 * segment's value k0 - R - 1 + i) runs the sections' causal recursions into
 * acc (keep rows), then the anti-causal ones are added there, with the
 * reference's operations in its order (FMA contraction aside). A row is a
 * few vectors whose recursions are independent, so each section's
 * dependency chain waits behind the others' work; the section count is a
 * constant in each inlined copy, so its loop unrolls. */
#define DEFINE_IIR(NAME, T, V, ATTR)                                                   \
    /* one row: each section's recursion on the inputs in0, in1 (u and w its \
     * causal or anti-causal feed-forward), their sum into sum */             \
    ATTR static inline __attribute__((always_inline)) void NAME##_row(                \
        const V *in0, const V *in1, const T *u, const T *w, const T *a1, const T *a2,   \
        V (*s1)[IIR_ROW_BYTES / sizeof(V)], V (*s2)[IIR_ROW_BYTES / sizeof(V)], V *sum, \
        const int n)                                                                   \
    {                                                                                  \
        enum { NV = IIR_ROW_BYTES / sizeof(V) };                                       \
        const V zero = {0};                                                            \
        _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++) sum[r] = zero;            \
        _Pragma("GCC unroll 3") for (int k = 0; k < n; k++)                            \
            _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++) {                     \
                V val = u[k] * in0[r] + w[k] * in1[r] - a1[k] * s1[k][r] - a2[k] * s2[k][r]; \
                s2[k][r] = s1[k][r];                                                   \
                s1[k][r] = val;                                                        \
                sum[r] += val;                                                         \
            }                                                                          \
    }                                                                                  \
    ATTR static inline __attribute__((always_inline)) void NAME##_n(                  \
        const T *buf, T *acc, size_t keep, size_t R, const dk_gauss_iir *f, const int n) \
    {                                                                                  \
        enum { NV = IIR_ROW_BYTES / sizeof(V) };                                       \
        const V *rows = (const V *)buf;                                                \
        V *out = (V *)acc;                                                             \
        T b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS];                        \
        T a1[DK_GAUSS_MAX_SECTIONS], a2[DK_GAUSS_MAX_SECTIONS];                        \
        T c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];                        \
        for (int k = 0; k < n; k++) {                                                  \
            b0[k] = (T)f->b0[k], b1[k] = (T)f->b1[k];                                  \
            a1[k] = (T)f->a1[k], a2[k] = (T)f->a2[k];                                  \
            c1[k] = (T)f->c1[k], c2[k] = (T)f->c2[k];                                  \
        }                                                                              \
        const V zero = {0};                                                            \
        V s1[DK_GAUSS_MAX_SECTIONS][NV], s2[DK_GAUSS_MAX_SECTIONS][NV], sum[NV];        \
        for (int k = 0; k < n; k++)                                                    \
            for (int r = 0; r < NV; r++)                                               \
                s1[k][r] = s2[k][r] = zero;                                            \
        for (size_t i = 1; i <= R + keep; i++) {                                       \
            NAME##_row(rows + i * NV, rows + (i - 1) * NV, b0, b1, a1, a2, s1, s2, sum, n); \
            if (i > R)                                                                 \
                _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++)                   \
                    out[(i - R - 1) * NV + r] = sum[r];                                \
        }                                                                              \
        for (int k = 0; k < n; k++)                                                    \
            for (int r = 0; r < NV; r++)                                               \
                s1[k][r] = s2[k][r] = zero;                                            \
        for (size_t i = keep + 2 * R; i > R; i--) {                                    \
            NAME##_row(rows + (i + 1) * NV, rows + (i + 2) * NV, c1, c2, a1, a2, s1, s2, sum, n); \
            if (i <= R + keep)                                                         \
                _Pragma("GCC unroll 8") for (int r = 0; r < NV; r++)                   \
                    out[(i - R - 1) * NV + r] += sum[r];                               \
        }                                                                              \
    }                                                                                  \
    ATTR static void NAME(const T *buf, T *acc, size_t keep, size_t R, const dk_gauss_iir *f) \
    {                                                                                  \
        switch (f->count) {                                                            \
        case 1: NAME##_n(buf, acc, keep, R, f, 1); break;                              \
        case 2: NAME##_n(buf, acc, keep, R, f, 2); break;                              \
        default: NAME##_n(buf, acc, keep, R, f, 3); break;                             \
        }                                                                              \
    }

DEFINE_IIR(iir_lanes_f32_base, float, f32x4, )
DEFINE_IIR(iir_lanes_f64_base, double, f64x2, )
#ifdef HAVE_AVX2_KERNEL
DEFINE_IIR(iir_lanes_f32_avx2, float, f32x8, TARGET_AVX2)
DEFINE_IIR(iir_lanes_f64_avx2, double, f64x4, TARGET_AVX2)
#else
#define iir_lanes_f32_avx2 iir_lanes_f32_base
#define iir_lanes_f64_avx2 iir_lanes_f64_base
#endif

/* An extended axis (deriche, vyv, rf with scipy's modes), in batches of
 * IIR_RUNS x W lanes (lanes_of's numbering: adjacent lines of one segment
 * along a strided axis, else consecutive segments). Each lane's continued
 * window is gathered into a buffer of W lanes (a row per value), filtered
 * (deriche and vyv: IIR into acc; rf: the zero rule on the window
 * [k0 - R, k1 + R) in place, as algorithms/gauss/reference.c), and its kept
 * values scattered to dst. Adjacent lines of one segment are one run of
 * memory per row, read IIR_RUNS buffers wide so that each page of the field
 * is touched once a row for 256 bytes of lines (the strided axis is bound by
 * those touches); other lanes go W at a time, G lines of the contiguous axis
 * through the AVX2 transpose where their windows lie inside the line. Every
 * lane runs keep values; a line's last, shorter segment computes past the
 * line's end on its continuation and keeps only its own. */
/* A gathered buffer filtered, and where its kept values then lie. */
#define FILTER(buf)                                                                    \
    (rf ? rf((buf) + LW, (size_t)(keep + 2 * R), LW, alpha, d->K, DK_BOUNDARY_ZERO)    \
        : iir((buf), (buf) + M * LW, (size_t)keep, (size_t)R, f))
#define RESULT(buf) (rf ? (buf) + (R + 1) * LW : (buf) + M * LW)
#define DEFINE_IIR_AXIS(NAME, T, W, G, GATHER_G, SCATTER_G, IIR_AVX2, IIR_BASE, RF_AVX2, RF_BASE) \
    static void NAME(const cpu_gauss_plan *p, int axis, const T *src, T *dst)          \
    {                                                                                  \
        enum { B = W * IIR_RUNS, LW = W };                                             \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        dk_axis_view v = dk_axis_view_of(d, axis);                                     \
        const long long N = (long long)v.n, R = (long long)p->setup.reach[axis];       \
        const long long keep = (long long)p->keep[axis], M = keep + 2 * R + 3;         \
        const size_t segments = p->segments[axis], inner = v.inner;                    \
        const size_t lanes_total = v.outer * segments * inner;                         \
        const size_t group = inner >= B ? inner : lanes_total;                         \
        const size_t per_group = div_up(group, B);                                     \
        const size_t batches = lanes_total / group * per_group;                        \
        const size_t stride = (size_t)(M + keep) * W; /* one buffer and its acc */     \
        const int bnd = d->boundary;                                                   \
        const T outside = bnd == DK_BOUNDARY_CVAL ? (T)d->cval : (T)0;                 \
        const dk_gauss_iir *f = &p->setup.iir[axis];                                   \
        void (*const iir)(const T *, T *, size_t, size_t, const dk_gauss_iir *) =      \
            p->avx2 ? IIR_AVX2 : IIR_BASE;                                             \
        void (*const rf)(T *, size_t, size_t, T, int, dk_boundary) =                   \
            d->method != DK_GAUSS_RF ? NULL : p->avx2 ? RF_AVX2 : RF_BASE;             \
        const T alpha = (T)p->setup.alpha[axis];                                       \
        void (*const gather)(const T *const *, size_t, T *, size_t) =                  \
            p->avx2 && inner == 1 ? GATHER_G : NULL;                                   \
        void (*const scatter)(const T *, size_t, size_t, T *const *) =                 \
            p->avx2 && inner == 1 ? SCATTER_G : NULL;                                  \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *work = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;      \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t b = 0; b < batches; b++) {                                     \
                size_t in_group = (b % per_group) * B;                                 \
                size_t t0 = b / per_group * group + in_group;                          \
                size_t count = group - in_group < B ? group - in_group : B;            \
                size_t first[B];  /* the segment's first value */                      \
                long long g0[B], n[B]; /* the window's first position, values kept */  \
                for (size_t w = 0; w < count; w++) {                                   \
                    size_t t = t0 + w, j = t % inner, rest = t / inner;                \
                    long long k0 = (long long)(rest % segments) * keep;                \
                    first[w] = rest / segments * v.n * inner + j + (size_t)k0 * inner; \
                    g0[w] = k0 - R - 1;                                                \
                    n[w] = N - k0 < keep ? N - k0 : keep;                              \
                }                                                                      \
                size_t subs = div_up(count, W);                                        \
                for (size_t s = 0; s < subs; s++) /* lanes a short batch leaves */     \
                    for (size_t w = count - s * W < W ? count - s * W : W; w < W; w++) \
                        for (long long i = 0; i < M; i++)                              \
                            work[s * stride + i * W + w] = (T)0;                       \
                if (inner > 1 && t0 % inner + count <= inner) {                        \
                    /* adjacent lines of one segment: each row one run of memory */   \
                    const T *x = src + first[0] - (size_t)(g0[0] + R + 1) * inner;     \
                    for (long long i = 0; i < M; i++) {                                \
                        long long k = dk_gauss_extend(g0[0] + i, N, bnd);              \
                        for (size_t s = 0; s < subs; s++) {                            \
                            T *row = work + s * stride + i * W;                        \
                            size_t c = count - s * W < W ? count - s * W : W;          \
                            if (k >= 0 && c == W)                                      \
                                memcpy(row, x + k * (long long)inner + s * W, W * sizeof(T)); \
                            else if (k >= 0)                                           \
                                memcpy(row, x + k * (long long)inner + s * W, c * sizeof(T)); \
                            else                                                       \
                                for (size_t w = 0; w < c; w++)                         \
                                    row[w] = outside;                                  \
                        }                                                              \
                    }                                                                  \
                    for (size_t s = 0; s < subs; s++)                                  \
                        FILTER(work + s * stride);                                     \
                    for (long long i = 0; i < n[0]; i++)                               \
                        for (size_t s = 0; s < subs; s++) {                            \
                            T *out = dst + first[0] + i * (long long)inner + s * W;    \
                            const T *row = RESULT(work + s * stride) + i * W;          \
                            size_t c = count - s * W < W ? count - s * W : W;          \
                            if (c == W)                                                \
                                memcpy(out, row, W * sizeof(T));                       \
                            else                                                       \
                                memcpy(out, row, c * sizeof(T));                       \
                        }                                                              \
                    continue;                                                          \
                }                                                                      \
                for (size_t s = 0; s < subs; s++) {                                    \
                    T *buf = work + s * stride, *acc = RESULT(buf);                    \
                    size_t w0 = s * W, c = count - w0 < W ? count - w0 : W, w = 0;     \
                    long long lo = 0, hi = M; /* rows inside every lane's line */      \
                    for (size_t u = 0; u < c; u++) {                                   \
                        lo = -g0[w0 + u] > lo ? -g0[w0 + u] : lo;                      \
                        hi = N - g0[w0 + u] < hi ? N - g0[w0 + u] : hi;                \
                    }                                                                  \
                    if (gather && hi > lo)                                             \
                        for (; w + G <= c; w += G) {                                   \
                            const T *line[G];                                          \
                            for (int k = 0; k < G; k++)                                \
                                line[k] = src + ((long long)first[w0 + w + k] - R - 1 + lo); \
                            gather(line, (size_t)(hi - lo), buf + lo * W + w, W);      \
                        }                                                              \
                    for (size_t u = 0; u < c; u++) {                                   \
                        const T *x = src + first[w0 + u] - (size_t)(g0[w0 + u] + R + 1) * inner; \
                        for (long long i = 0; i < M; i++) {                            \
                            if (u < w && i == lo) { /* transposed above */             \
                                i = hi - 1;                                            \
                                continue;                                              \
                            }                                                          \
                            long long k = dk_gauss_extend(g0[w0 + u] + i, N, bnd);     \
                            buf[i * W + u] = k >= 0 ? x[k * (long long)inner] : outside; \
                        }                                                              \
                    }                                                                  \
                    FILTER(buf);                                                       \
                    w = 0;                                                             \
                    if (scatter)                                                       \
                        for (; w + G <= c; w += G) {                                   \
                            T *line[G];                                                \
                            int same = 1;                                              \
                            for (int k = 0; k < G; k++) {                              \
                                line[k] = dst + first[w0 + w + k];                     \
                                same &= n[w0 + w + k] == n[w0 + w];                    \
                            }                                                          \
                            if (!same)                                                 \
                                break;                                                 \
                            scatter(acc + w, W, (size_t)n[w0 + w], line);              \
                        }                                                              \
                    for (; w < c; w++)                                                 \
                        for (long long i = 0; i < n[w0 + w]; i++)                      \
                            dst[first[w0 + w] + (size_t)i * inner] = acc[i * W + w];   \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_IIR_AXIS(extended_axis_f32, float, IIR_LANES_F32, TRANSPOSE_F32, gather_f32_avx2, scatter_f32_avx2,
                iir_lanes_f32_avx2, iir_lanes_f32_base, rf_rows_f32_avx2, rf_rows_f32_base)
DEFINE_IIR_AXIS(extended_axis_f64, double, IIR_LANES_F64, TRANSPOSE_F64, gather_f64_avx2, scatter_f64_avx2,
                iir_lanes_f64_avx2, iir_lanes_f64_base, rf_rows_f64_avx2, rf_rows_f64_base)
#undef FILTER
#undef RESULT

/* execute_halo: LANES whole lines at a time, each read from the lower halo,
 * the box and the upper halo into the lane buffer, filtered there as one
 * line (the boundary rule at its ends) and its box part written out. Lane
 * t is line (t / inner, t % inner), so along a strided axis the lanes are
 * adjacent lines and each row is a contiguous run. */
#define DEFINE_HALO_AXIS(NAME, T, LANES, RF_AVX2, RF_BASE)                             \
    static void NAME(const cpu_gauss_plan *p, const dk_gauss_halo *h, const T *src,    \
                     const T *lower, const T *upper, T *dst)                           \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        const dk_axis_view v = dk_axis_view_of(d, h->axis);                            \
        const size_t lc = h->lower_count, uc = h->upper_count, m = lc + v.n + uc;      \
        const size_t lines = v.outer * v.inner, groups = div_up(lines, LANES);        \
        const T alpha = (T)p->setup.alpha[h->axis];                                    \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf = (T *)p->halo_buffers + (size_t)thread_index() * p->halo_elems;    \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t g = 0; g < groups; g++) {                                      \
                size_t t0 = g * LANES, cnt = lines - t0 < LANES ? lines - t0 : LANES;  \
                for (size_t k = 0; k < LANES; k++) {                                   \
                    size_t t = t0 + (k < cnt ? k : 0), o = t / v.inner, j = t % v.inner; \
                    const T *lo = lower + o * lc * v.inner + j;                        \
                    const T *mid = src + o * v.n * v.inner + j;                        \
                    const T *up = upper + o * uc * v.inner + j;                        \
                    size_t i = 0;                                                      \
                    for (; i < lc; i++)                                                \
                        buf[i * LANES + k] = lo[i * v.inner];                          \
                    for (; i < lc + v.n; i++)                                          \
                        buf[i * LANES + k] = mid[(i - lc) * v.inner];                  \
                    for (; i < m; i++)                                                 \
                        buf[i * LANES + k] = up[(i - lc - v.n) * v.inner];             \
                }                                                                      \
                rf(buf, m, LANES, alpha, d->K, d->boundary);                           \
                for (size_t k = 0; k < cnt; k++) {                                     \
                    size_t t = t0 + k, o = t / v.inner, j = t % v.inner;               \
                    T *y = dst + o * v.n * v.inner + j;                                \
                    for (size_t i = 0; i < v.n; i++)                                   \
                        y[i * v.inner] = buf[(lc + i) * LANES + k];                    \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_HALO_AXIS(halo_axis_f32, float, LANES_F32, rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_HALO_AXIS(halo_axis_f64, double, LANES_F64, rf_lanes_f64_avx2, rf_lanes_f64_base)

static dk_status cpu_gauss_execute_halo(void *plan, const dk_gauss_halo *h, const void *in, void *out, dk_msg *msg)
{
    cpu_gauss_plan *p = plan;
    if (!p || !h || !in || !out || in == out || h->axis < 0 || h->axis >= p->setup.desc.ndim ||
        !p->setup.halo_max[h->axis] || h->lower_count > p->setup.halo_max[h->axis] ||
        h->upper_count > p->setup.halo_max[h->axis] || (h->lower_count && !h->lower) ||
        (h->upper_count && !h->upper) || p->setup.extended[h->axis] || p->setup.desc.mode != DK_GAUSS_EXACT) {
        dk_msg_set(msg, "gauss execute_halo: a plan made for halos along the axis, distinct in and out, and "
                        "halos within its halo_max are needed");
        return DK_ERR_INVALID_ARGUMENT;
    }
    size_t es = element_size(p->setup.desc.dtype);
    const char *lower = (const char *)h->lower + h->lower_offset * es;
    const char *upper = (const char *)h->upper + h->upper_offset * es;
    if (p->setup.desc.dtype == DK_F32)
        halo_axis_f32(p, h, in, (const float *)lower, (const float *)upper, out);
    else
        halo_axis_f64(p, h, in, (const double *)lower, (const double *)upper, out);
    return DK_OK;
}

static dk_status cpu_gauss_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    cpu_gauss_plan *p = plan;
    if (!p || !in || !out) {
        dk_msg_set(msg, "gauss execute: plan, in and out must not be NULL");
        return DK_ERR_INVALID_ARGUMENT;
    }
    const dk_gauss_desc *d = &p->setup.desc;
    /* Axes in increasing order. An axis whose segments overlap must not
     * write over values that another window still reads, so it writes to
     * the scratch buffer when its input is already out. */
    if (p->fused && in != out) {
        if (d->dtype == DK_F32)
            fused_f32(p, in, out);
        else
            fused_f64(p, in, out);
        return DK_OK;
    }
    const void *current = in;
    for (int a = 0; a < d->ndim; a++) {
        if (!(d->axes & (1u << a)))
            continue;
        void *target = p->segments[a] > 1 && current == out ? p->scratch : out;
        if (p->setup.extended[a] && d->dtype == DK_F32)
            extended_axis_f32(p, a, current, target);
        else if (p->setup.extended[a])
            extended_axis_f64(p, a, current, target);
        else if (p->exact[a] && d->dtype == DK_F32)
            exact_axis_f32(p, a, current, target);
        else if (p->exact[a])
            exact_axis_f64(p, a, current, target);
        else if (d->dtype == DK_F32)
            filter_axis_f32(p, a, current, target);
        else
            filter_axis_f64(p, a, current, target);
        current = target;
    }
    if (current != out)
        dk_cpu_copy(out, current, p->setup.count * element_size(d->dtype));
    return DK_OK;
}

const dk_gauss_ops dk_cpu_gauss_ops = {
    .variants = variants,
    .plan_create = cpu_gauss_plan_create,
    .execute = cpu_gauss_execute,
    .plan_destroy = cpu_gauss_plan_destroy,
    .execute_halo = cpu_gauss_execute_halo,
};
