/* dakit opencl gauss kernels. plugin.c builds this source once per
 * precision: -DREAL=float, and where the device has cl_khr_fp64,
 * -DREAL=double -DDK_FP64. -DLANES=L (1, 2, 4, 8 or 16) sets how many
 * windows one work-item filters side by side as one vector: CPUs get SIMD
 * and independent dependency chains that way; GPUs use 1.
 *
 * The arithmetic follows algorithms/gauss/reference.c step for step, so
 * that a window covering a whole line gives the reference's result. */
#ifdef DK_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* The reference does a separate multiply and add; a fused one would round
 * differently. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef LANES
#define LANES 1
#endif

#define GLUE2(a, b) a##b
#define GLUE(a, b) GLUE2(a, b)
#if LANES == 1
typedef REAL VEC;
#define LOADV(p) (*(p))
#define STOREV(v, p) (*(p) = (v))
#else
typedef GLUE(REAL, LANES) VEC;
#define LOADV(p) GLUE(vload, LANES)(0, p)
#define STOREV(v, p) GLUE(vstore, LANES)(v, 0, p)
#endif

/* One K-iterated RF over n values x[0], x[stride], ... in place, with the
 * boundary rule at both ends of the span (see dk_boundary). */
static void rf_span(__global REAL *x, ulong n, ulong stride, REAL alpha, int K,
                    int constant_boundary)
{
    const REAL beta = (REAL)1 - alpha;
    const ulong last = (n - 1) * stride;
    for (int k = 0; k < K; k++) {
        REAL u = x[last];
        REAL p = constant_boundary ? x[0] : (REAL)0;
        for (ulong i = 0; i <= last; i += stride) {
            p = beta * x[i] + alpha * p;
            x[i] = p;
        }
        REAL s = constant_boundary ? u + (p - u) / ((REAL)1 + alpha) : beta * p;
        x[last] = s;
        for (ulong i = last; i > 0;) {
            i -= stride;
            s = beta * x[i] + alpha * s;
            x[i] = s;
        }
    }
}

/* rf_span on LANES spans of the same length at once: value i of lane l is
 * x[i * stride + l]. */
static void rf_lanes(__global REAL *x, ulong n, ulong stride, REAL alpha, int K,
                     int constant_boundary)
{
    const VEC a = (VEC)alpha;
    const VEC beta = (VEC)((REAL)1 - alpha);
    const ulong last = (n - 1) * stride;
    for (int k = 0; k < K; k++) {
        VEC u = LOADV(x + last);
        VEC p = constant_boundary ? LOADV(x) : (VEC)0;
        for (ulong i = 0; i <= last; i += stride) {
            p = beta * LOADV(x + i) + a * p;
            STOREV(p, x + i);
        }
        VEC s = constant_boundary ? u + (p - u) / ((VEC)1 + a) : beta * p;
        STOREV(s, x + last);
        for (ulong i = last; i > 0;) {
            i -= stride;
            s = beta * LOADV(x + i) + a * s;
            STOREV(s, x + i);
        }
    }
}

/* Where one (line, block) work sits: the line's first element, the block
 * [begin, end) as dk_gauss_block cuts it, and its window [wbegin, wbegin +
 * wn) widened by m and clipped as dk_gauss_window does. */
typedef struct window {
    ulong first, begin, end, wbegin, wn;
} window;

/* Item id -> (o, b, j) with j fastest, so that neighbouring items touch
 * neighbouring addresses when the axis is strided. */
static window window_of(ulong id, ulong n, ulong inner, ulong blocks, ulong m)
{
    const ulong j = id % inner;
    const ulong t = id / inner;
    const ulong b = t % blocks;
    const ulong o = t / blocks;
    const ulong d = n / blocks, r = n % blocks;
    window w;
    w.first = o * n * inner + j;
    w.begin = b * d + (b < r ? b : r);
    w.end = w.begin + d + (b < r ? 1 : 0);
    w.wbegin = w.begin > m ? w.begin - m : 0;
    w.wn = (w.end + m < n ? w.end + m : n) - w.wbegin;
    return w;
}

/* Filters one axis from src into dst (distinct buffers). The axis is seen
 * as `outer` groups of n values `inner` apart (dk_axis_view); each line is
 * cut into `blocks` blocks, block b is filtered over its window and only
 * the block's own values reach dst. That makes `items` = lines * blocks
 * items; work-item g takes items g*LANES .. g*LANES + LANES - 1.
 *
 * Work area: in dst itself when LANES is 1 and the window is the whole line
 * (in_dst); else this work-item's slot of scratch, lane l's value i at
 * slot * slot_stride + i * value_stride + l. Launches may cover a part of
 * the work-items (a global offset, and `stop`, the first work-item past
 * this launch); slots count from the launch's first work-item. */
__kernel void rf_windows(__global const REAL *src, __global REAL *dst,
                         __global REAL *scratch, ulong n, ulong inner, ulong items,
                         ulong stop, ulong blocks, ulong m, REAL alpha, int K,
                         int constant_boundary, int in_dst, ulong slot_stride,
                         ulong value_stride)
{
    const ulong g = get_global_id(0);
    if (g >= stop)
        return;

    if (in_dst) {
        window w = window_of(g, n, inner, 1, 0);
        __global REAL *line = dst + w.first;
        for (ulong i = 0; i < n; i++)
            line[i * inner] = src[w.first + i * inner];
        rf_span(line, n, inner, alpha, K, constant_boundary);
        return;
    }

    const ulong id0 = g * LANES;
    const int lanes = items - id0 < LANES ? (int)(items - id0) : LANES;
    window win[LANES];
    ulong longest = 0;
    /* uniform: all lanes' windows have one length, so they filter as one
     * vector. side_by_side: moreover the lanes are neighbouring lines of a
     * strided axis with the same block, so they also move as one vector. */
    int uniform = lanes == LANES;
    int side_by_side = uniform;
    for (int l = 0; l < lanes; l++) {
        win[l] = window_of(id0 + l, n, inner, blocks, m);
        longest = win[l].wn > longest ? win[l].wn : longest;
        uniform = uniform && win[l].wn == win[0].wn;
        side_by_side = side_by_side && win[l].first == win[0].first + l &&
                       win[l].begin == win[0].begin && win[l].wbegin == win[0].wbegin;
    }
    side_by_side = side_by_side && uniform;

    __global REAL *w = scratch + (g - get_global_offset(0)) * slot_stride;
    if (side_by_side) {
        const window v = win[0];
        for (ulong i = 0; i < v.wn; i++)
            STOREV(LOADV(src + v.first + (v.wbegin + i) * inner), w + i * value_stride);
        rf_lanes(w, v.wn, value_stride, alpha, K, constant_boundary);
        for (ulong i = v.begin; i < v.end; i++)
            STOREV(LOADV(w + (i - v.wbegin) * value_stride), dst + v.first + i * inner);
        return;
    }

    for (ulong i = 0; i < longest; i++)
        for (int l = 0; l < lanes; l++)
            if (i < win[l].wn)
                w[i * value_stride + l] = src[win[l].first + (win[l].wbegin + i) * inner];

    if (uniform) {
        rf_lanes(w, win[0].wn, value_stride, alpha, K, constant_boundary);
    } else {
        for (int l = 0; l < lanes; l++)
            rf_span(w + l, win[l].wn, value_stride, alpha, K, constant_boundary);
    }

    ulong widest = 0;
    for (int l = 0; l < lanes; l++)
        widest = win[l].end - win[l].begin > widest ? win[l].end - win[l].begin : widest;
    for (ulong i = 0; i < widest; i++)
        for (int l = 0; l < lanes; l++)
            if (win[l].begin + i < win[l].end)
                dst[win[l].first + (win[l].begin + i) * inner] =
                    w[(win[l].begin - win[l].wbegin + i) * value_stride + l];
}

/* Overlap mode in registers (variant "tiled"): work-item g filters item g
 * (window_of's order, so adjacent lines of a strided axis sit side by side)
 * over its window of at most W values held in registers, every loop
 * unrolled with the window's length as a predicate; the arithmetic and the
 * boundary rule are rf_span's. One kernel a W (rf_reg_blocks31 to 95): the
 * plan takes the shortest that holds its longest window. Launches may
 * cover a part of the groups: group0 is the first's index. */
#define DEFINE_RF_REG_BLOCKS(W)                                                                    \
    __kernel void rf_reg_blocks##W(__global const REAL *src, __global REAL *dst, ulong n, ulong inner, \
                                   ulong items, ulong blocks, ulong m, REAL alpha, int K,          \
                                   int constant_boundary, ulong group0)                            \
    {                                                                                              \
        const ulong g = (group0 + get_group_id(0)) * get_local_size(0) + get_local_id(0);          \
        if (g >= items)                                                                            \
            return;                                                                                \
        const window w = window_of(g, n, inner, blocks, m);                                        \
        const int len = (int)w.wn;                                                                 \
        const REAL beta = (REAL)1 - alpha;                                                         \
        REAL x[W];                                                                                 \
        _Pragma("unroll") for (int i = 0; i < W; i++) x[i] =                                       \
            i < len ? src[w.first + (w.wbegin + (ulong)i) * inner] : (REAL)0;                      \
        for (int k = 0; k < K; k++) {                                                              \
            REAL u = (REAL)0;                                                                      \
            REAL p = constant_boundary ? x[0] : (REAL)0;                                           \
            _Pragma("unroll") for (int i = 0; i < W; i++) if (i < len) {                           \
                u = i == len - 1 ? x[i] : u;                                                       \
                p = beta * x[i] + alpha * p;                                                       \
                x[i] = p;                                                                          \
            }                                                                                      \
            REAL s = constant_boundary ? u + (p - u) / ((REAL)1 + alpha) : beta * p;               \
            _Pragma("unroll") for (int i = W - 1; i >= 0; i--) if (i < len) {                      \
                s = i == len - 1 ? s : beta * x[i] + alpha * s;                                    \
                x[i] = s;                                                                          \
            }                                                                                      \
        }                                                                                          \
        const int a = (int)(w.begin - w.wbegin), e = (int)(w.end - w.wbegin);                      \
        _Pragma("unroll") for (int i = 0; i < W; i++) if (i >= a && i < e)                         \
            dst[w.first + (w.wbegin + (ulong)i) * inner] = x[i];                                   \
    }
DEFINE_RF_REG_BLOCKS(31)
DEFINE_RF_REG_BLOCKS(47)
DEFINE_RF_REG_BLOCKS(63)
#ifndef DK_FP64
DEFINE_RF_REG_BLOCKS(95)
#endif

/* ---- extended axes (deriche, vyv; rf with scipy's modes) ----
 * Boundary codes as dk_boundary: 0 zero, 1 constant (as nearest here),
 * 2 reflect, 3 mirror, 4 nearest, 5 wrap, 6 cval. */
static long extend_index(long j, long n, int boundary)
{
    if (j >= 0 && j < n)
        return j;
    long m;
    switch (boundary) {
    case 2:
        m = j % (2 * n);
        m = m < 0 ? m + 2 * n : m;
        return m < n ? m : 2 * n - 1 - m;
    case 3:
        if (n == 1)
            return 0;
        m = j % (2 * n - 2);
        m = m < 0 ? m + 2 * n - 2 : m;
        return m < n ? m : 2 * n - 2 - m;
    case 5:
        m = j % n;
        return m < 0 ? m + n : m;
    case 1:
    case 4:
        return j < 0 ? 0 : n - 1;
    default:
        return -1;
    }
}

static REAL extended_value(__global const REAL *x, long j, long n, ulong inner, int boundary,
                           REAL cval)
{
    long k = extend_index(j, n, boundary);
    return k >= 0 ? x[k * inner] : boundary == 6 ? cval : (REAL)0;
}

/* One work-item per (line, segment), the line index fastest: segment s
 * keeps [s keep, min((s+1) keep, n)) and reads the continued input `reach`
 * values past it on each side (dk_gauss_iir). deriche / vyv: the sections'
 * causal sums go to dst, the anti-causal ones are added, in the order of
 * algorithms/gauss/reference.c. rf: the window is gathered into this
 * work-item's slot of scratch (value i at i * value_stride) and filtered
 * with the zero rule. coef: per section b0, b1, a1, a2, c1, c2. */
__kernel void extended_segments(__global const REAL *src, __global REAL *dst,
                                __global REAL *scratch, __global const REAL *coef, int sections,
                                ulong n, ulong inner, ulong items, ulong stop, ulong segments,
                                ulong keep, ulong reach, int boundary, REAL cval, int rf,
                                REAL alpha, int K, ulong value_stride)
{
    const ulong g = get_global_id(0);
    if (g >= stop || g >= items)
        return;
    const ulong j = g % inner, rest = g / inner;
    const ulong seg = rest % segments, o = rest / segments;
    __global const REAL *x = src + o * n * inner + j;
    __global REAL *y = dst + o * n * inner + j;
    const long N = (long)n, R = (long)reach;
    const long k0 = (long)(seg * keep);
    const long k1 = k0 + (long)keep < N ? k0 + (long)keep : N;

    if (rf) {
        __global REAL *w = scratch + (g - get_global_offset(0));
        const long L = k1 - k0 + 2 * R;
        for (long i = 0; i < L; i++)
            w[i * value_stride] = extended_value(x, k0 - R + i, N, inner, boundary, cval);
        rf_span(w, (ulong)L, value_stride, alpha, K, 0);
        for (long i = k0; i < k1; i++)
            y[i * inner] = w[(i - k0 + R) * value_stride];
        return;
    }

    REAL b0[3], b1[3], a1[3], a2[3], c1[3], c2[3], s1[3], s2[3];
    for (int k = 0; k < 3; k++) {
        int on = k < sections;
        b0[k] = on ? coef[6 * k] : (REAL)0;
        b1[k] = on ? coef[6 * k + 1] : (REAL)0;
        a1[k] = on ? coef[6 * k + 2] : (REAL)0;
        a2[k] = on ? coef[6 * k + 3] : (REAL)0;
        c1[k] = on ? coef[6 * k + 4] : (REAL)0;
        c2[k] = on ? coef[6 * k + 5] : (REAL)0;
        s1[k] = s2[k] = (REAL)0;
    }
    REAL prev = extended_value(x, k0 - R - 1, N, inner, boundary, cval);
    for (long i = k0 - R; i < k1; i++) {
        REAL cur = extended_value(x, i, N, inner, boundary, cval), sum = (REAL)0;
        for (int k = 0; k < sections; k++) {
            REAL v = b0[k] * cur + b1[k] * prev - a1[k] * s1[k] - a2[k] * s2[k];
            s2[k] = s1[k];
            s1[k] = v;
            sum += v;
        }
        prev = cur;
        if (i >= k0)
            y[i * inner] = sum;
    }
    for (int k = 0; k < 3; k++)
        s1[k] = s2[k] = (REAL)0;
    REAL next = extended_value(x, k1 + R, N, inner, boundary, cval);
    REAL after = extended_value(x, k1 + R + 1, N, inner, boundary, cval);
    for (long i = k1 - 1 + R; i >= k0; i--) {
        REAL sum = (REAL)0;
        for (int k = 0; k < sections; k++) {
            REAL v = c1[k] * next + c2[k] * after - a1[k] * s1[k] - a2[k] * s2[k];
            s2[k] = s1[k];
            s1[k] = v;
            sum += v;
        }
        after = next;
        next = extended_value(x, i, N, inner, boundary, cval);
        if (i < k1)
            y[i * inner] = y[i * inner] + sum;
    }
}

/* ---- GPU kernels (variant "tiled"): exact mode's chunks in registers ----
 * A line is cut into chunks of L values; chunk k keeps [k L, min(k L + L, n))
 * and is filtered over a window of RW values that reaches at least the halo
 * h = (RW - L) / 2 past it, shifted inside the line at its ends (so n >= RW;
 * where the window meets the line's end, the boundary rule is the
 * reference's own). RW is a compile-time constant so that the window lives
 * in registers: every loop over it is unrolled. */
#ifdef DK_FP64
#define RW 63
#else
#define RW 95
#endif

/* The window's first position on its line for the chunk starting at ks. */
static long chunk_window(long ks, long h, long n)
{
    long ws = ks - h;
    if (ws > n - RW)
        ws = n - RW;
    return ws < 0 ? 0 : ws;
}

/* rf_span on x[0 .. RW) in registers. */
static void rf_regs(REAL *x, REAL alpha, int K, int constant_boundary)
{
    const REAL beta = (REAL)1 - alpha;
    for (int k = 0; k < K; k++) {
        REAL u = x[RW - 1];
        REAL p = constant_boundary ? x[0] : (REAL)0;
#pragma unroll
        for (int i = 0; i < RW; i++) {
            p = beta * x[i] + alpha * p;
            x[i] = p;
        }
        REAL s = constant_boundary ? u + (p - u) / ((REAL)1 + alpha) : beta * p;
        x[RW - 1] = s;
#pragma unroll
        for (int i = RW - 2; i >= 0; i--) {
            s = beta * x[i] + alpha * s;
            x[i] = s;
        }
    }
}

/* A strided axis (inner > 1): work-group b is JT adjacent lines by KT
 * consecutive chunks of them (JT * KT work-items, line fastest), the groups
 * nj = ceil(inner / JT) across, then ceil(ipl / KT) along the axis, then
 * `outer`. Each work-item loads its window straight into registers: the JT
 * lines of a row are JT neighbouring addresses, so every load and store of a
 * warp is one contiguous run. */
__kernel void rf_reg_strided(__global const REAL *src, __global REAL *dst, ulong n, ulong inner,
                             ulong L, ulong h, ulong ipl, int JT, ulong nj, ulong nk, REAL alpha,
                             int K, int constant_boundary, ulong group0)
{
    const ulong b = group0 + get_group_id(0);
    const int lid = (int)get_local_id(0);
    const ulong jb = b % nj, r = b / nj;
    const ulong kb = r % nk, o = r / nk;
    const ulong j = jb * JT + lid % JT;
    const ulong k = kb * (get_local_size(0) / JT) + lid / JT;
    if (j >= inner || k >= ipl)
        return;
    const long N = (long)n;
    const long ks = (long)(k * L);
    const long ke = ks + (long)L < N ? ks + (long)L : N;
    const long ws = chunk_window(ks, (long)h, N);
    const ulong base = (o * n + (ulong)ws) * inner + j;
    REAL x[RW];
#pragma unroll
    for (int i = 0; i < RW; i++)
        x[i] = src[base + (ulong)i * inner];
    rf_regs(x, alpha, K, constant_boundary);
    const int a = (int)(ks - ws), e = (int)(ke - ws);
#pragma unroll
    for (int i = 0; i < RW; i++)
        if (i >= a && i < e)
            dst[base + (ulong)i * inner] = x[i];
}

/* The flat index of the window of chunk q (q = line * ipl + k) of a
 * contiguous axis, and of its kept span. */
static long row_window(long q, long n, long L, long h, long ipl, long *keep_begin, long *keep_end)
{
    const long o = q / ipl, k = q % ipl;
    const long ks = k * L;
    const long ke = ks + L < n ? ks + L : n;
    *keep_begin = o * n + ks;
    *keep_end = o * n + ke;
    return o * n + chunk_window(ks, h, n);
}

/* How many loads a work-item of rf_reg_rows issues before it stores their
 * values in local memory: the copy then keeps that many loads in flight
 * (a loop storing each value as it comes keeps few). */
#define STAGE_LOADS 32

/* A contiguous axis (inner 1): work-group t takes the get_local_size(0)
 * consecutive chunks from t * that on (across lines, flat). It copies the
 * flat span their windows cover into `sm` with coalesced loads; each
 * work-item copies its window into registers (windows start L apart, and L
 * odd reads them free of bank conflicts), filters it and puts its kept
 * values back; then the group writes the tile's kept span [K0, K1) with
 * coalesced stores. sm holds at least local_size * L + 2 L + 4 h values.
 * Launches may cover a part of the groups: group0 is the first's index. */
__kernel void rf_reg_rows(__global const REAL *src, __global REAL *dst, ulong n, ulong L,
                          ulong h, ulong ipl, ulong chunks, REAL alpha, int K,
                          int constant_boundary, ulong group0, __local REAL *sm)
{
    const long tq = (long)get_local_size(0), lid = (long)get_local_id(0);
    const long q0 = (long)(group0 + get_group_id(0)) * tq;
    const long Q = (long)chunks;
    const long q1 = (q0 + tq < Q ? q0 + tq : Q) - 1;
    const long N = (long)n, Lc = (long)L, H = (long)h, I = (long)ipl;
    long K0, K1, unused;
    const long G0 = row_window(q0, N, Lc, H, I, &K0, &unused);
    const long G1 = row_window(q1, N, Lc, H, I, &unused, &K1) + RW;
    const long span = G1 - G0;
    for (long i0 = lid; i0 < span; i0 += STAGE_LOADS * tq) {
        REAL v[STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++)
            if (i0 + u * tq < span)
                v[u] = src[G0 + i0 + u * tq];
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++)
            if (i0 + u * tq < span)
                sm[i0 + u * tq] = v[u];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const long q = q0 + lid;
    const int active = q <= q1;
    REAL x[RW];
    long off = 0;
    int a = 0, e = 0;
    if (active) {
        long kb, kend;
        off = row_window(q, N, Lc, H, I, &kb, &kend) - G0;
        a = (int)(kb - G0 - off);
        e = (int)(kend - G0 - off);
#pragma unroll
        for (int i = 0; i < RW; i++)
            x[i] = sm[off + i];
        rf_regs(x, alpha, K, constant_boundary);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (active) {
#pragma unroll
        for (int i = 0; i < RW; i++)
            if (i >= a && i < e)
                sm[off + i] = x[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long i = K0 + lid; i < K1; i += tq)
        dst[i] = sm[i - G0];
}

/* ---- GPU kernels (variant "tiled"): deriche / vyv, segments staged in
 * local memory ----
 * A work-group of 2 EXT_ROWS work-items filters EXT_ROWS rows, each a (line,
 * segment) item as extended_segments has them, with the same operations in
 * the same order: work-item r of the first side runs row r's causal
 * recursion into `causal`, work-item r of the second side its anti-causal
 * one into `anti` (each dependency chain is side a row long); the result is
 * causal + anti, the reference's sum. The section count is a literal in each
 * kernel (extended_rows1 .. 3, extended_cols1 .. 3), so that once inlined a
 * step has no per-section test; the first R steps of each recursion, whose
 * sums are not kept, run in a loop of their own. */
#define EXT_ROWS 32

/* One step of every section, the sums added from the first section on
 * (0 + v is v but for the sign of a zero). */
static REAL sections_step(const REAL *u, const REAL *w, const REAL *a1, const REAL *a2,
                          const int sections, REAL in0, REAL in1, REAL *s1, REAL *s2)
{
    REAL sum = (REAL)0;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        if (k < sections) {
            REAL v = u[k] * in0 + w[k] * in1 - a1[k] * s1[k] - a2[k] * s2[k];
            s2[k] = s1[k];
            s1[k] = v;
            sum = k == 0 ? v : sum + v;
        }
    }
    return sum;
}

/* Coefficient c (0 b0, 1 b1, 2 a1, 3 a2, 4 c1, 5 c2) of every section. */
static void load_coef(__global const REAL *coef, int c, const int sections, REAL *to)
{
#pragma unroll
    for (int k = 0; k < 3; k++)
        to[k] = k < sections ? coef[6 * k + c] : (REAL)0;
}

/* The recursions of one row from local memory: x[i * xs] is the window
 * value at line position k0 - R - 1 + i, len kept values (positions k0 + i).
 * The causal one writes its sums to o[i * os], the anti-causal one to
 * a[i * os]. */
static void ext_causal(__local const REAL *x, int xs, __local REAL *o, int os, int len, int R,
                       __global const REAL *coef, const int sections)
{
    REAL b0[3], b1[3], a1[3], a2[3], s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0};
    load_coef(coef, 0, sections, b0);
    load_coef(coef, 1, sections, b1);
    load_coef(coef, 2, sections, a1);
    load_coef(coef, 3, sections, a2);
    REAL prev = x[0];
    for (int i = 1; i <= R; i++) {
        REAL cur = x[i * xs];
        sections_step(b0, b1, a1, a2, sections, cur, prev, s1, s2);
        prev = cur;
    }
    for (int i = R + 1; i <= R + len; i++) {
        REAL cur = x[i * xs];
        o[(i - R - 1) * os] = sections_step(b0, b1, a1, a2, sections, cur, prev, s1, s2);
        prev = cur;
    }
}

static void ext_anticausal(__local const REAL *x, int xs, __local REAL *a, int os, int len, int R,
                           __global const REAL *coef, const int sections)
{
    REAL c1[3], c2[3], a1[3], a2[3], s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0};
    load_coef(coef, 4, sections, c1);
    load_coef(coef, 5, sections, c2);
    load_coef(coef, 2, sections, a1);
    load_coef(coef, 3, sections, a2);
    REAL next = x[(len + 2 * R + 1) * xs], after = x[(len + 2 * R + 2) * xs];
    for (int i = len + 2 * R; i > len + R; i--) {
        sections_step(c1, c2, a1, a2, sections, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
    for (int i = len + R; i > R; i--) {
        a[(i - R - 1) * os] = sections_step(c1, c2, a1, a2, sections, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
}

/* 16 bytes of REALs, the vector of the staging copies and of the stores. */
#ifdef DK_FP64
typedef double2 EXT_WIDE;
#define EXT_W 2
#else
typedef float4 EXT_WIDE;
#define EXT_W 4
#endif
/* How many 16-byte loads a work-item issues before it stores their values. */
#define EXT_VLOADS 16

/* A contiguous axis: group b takes EXT_ROWS consecutive segments of one line
 * (line b / groups, groups = segments / EXT_ROWS rounded up), whose windows
 * [k0q - R - 1, k0q + keep + R + 2) overlap into one span [k0 - R - 1,
 * kend + R + 2) of the line, staged once into win from a0, its start rounded
 * down to EXT_W: 16-byte copies inside an aligned line (loaded at clamped
 * positions, so unconditionally, before any is stored), the boundary rule's
 * values one by one elsewhere. Row q's window starts q keep values into the
 * span, keep odd so that the 32 rows' reads fall in 32 banks; its sums go to
 * causal / anti [q keep ..], so the rows' kept values are one span [k0, kend)
 * of the line, written back 16 bytes at a time. */
static void ext_rows(__global const REAL *src, __global REAL *dst, __global const REAL *coef,
                     ulong n, ulong segments, ulong keep, ulong reach, int boundary, REAL cval,
                     ulong group0, __local REAL *win, __local REAL *causal, __local REAL *anti,
                     const int sections)
{
    const int tid = (int)get_local_id(0), r = tid % EXT_ROWS, side = tid / EXT_ROWS;
    const long N = (long)n, K = (long)keep, R = (long)reach;
    const ulong b = group0 + get_group_id(0), groups = (segments + EXT_ROWS - 1) / EXT_ROWS;
    const ulong line = b / groups;
    const long k0 = (long)(b % groups) * EXT_ROWS * K;
    const long kend = k0 + EXT_ROWS * K < N ? k0 + EXT_ROWS * K : N;
    const long s0 = k0 - R - 1, s1 = kend + R + 2;
    const long a0 = s0 - ((s0 % EXT_W) + EXT_W) % EXT_W;
    __global const REAL *x = src + line * n;
    const long step = 2 * EXT_ROWS * EXT_W;
    if ((line * n) % EXT_W == 0 && N >= EXT_W) {
        const long last = (N / EXT_W - 1) * EXT_W; /* the last whole vector's start */
        for (long p0 = a0 + (long)tid * EXT_W; p0 < s1; p0 += EXT_VLOADS * step) {
            EXT_WIDE v[EXT_VLOADS];
#pragma unroll
            for (int u = 0; u < EXT_VLOADS; u++) {
                const long p = p0 + u * step, c = p < 0 ? 0 : p > last ? last : p;
                v[u] = *(__global const EXT_WIDE *)(x + c);
            }
#pragma unroll
            for (int u = 0; u < EXT_VLOADS; u++) {
                const long p = p0 + u * step;
                if (p >= s1)
                    break;
                if (p >= 0 && p + EXT_W <= N) {
                    *(__local EXT_WIDE *)(win + (p - a0)) = v[u];
                    continue;
                }
                for (int e = 0; e < EXT_W; e++)
                    if (p + e >= s0 && p + e < s1)
                        win[p - a0 + e] = extended_value(x, p + e, N, 1, boundary, cval);
            }
        }
    } else {
        for (long p = s0 + tid; p < s1; p += 2 * EXT_ROWS)
            win[p - a0] = extended_value(x, p, N, 1, boundary, cval);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const long kr = k0 + r * K;
    const int len = kr < kend ? (int)(kend - kr < K ? kend - kr : K) : 0;
    __local const REAL *row = win + (s0 - a0) + r * K;
    if (len > 0) {
        if (side == 0)
            ext_causal(row, 1, causal + r * K, 1, len, (int)R, coef, sections);
        else
            ext_anticausal(row, 1, anti + r * K, 1, len, (int)R, coef, sections);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    __global REAL *y = dst + line * n + k0;
    const long total = kend - k0;
    long done = 0;
    if ((line * n + k0) % EXT_W == 0) {
        const long nvec = total / EXT_W;
        for (long v = tid; v < nvec; v += 2 * EXT_ROWS)
            *(__global EXT_WIDE *)(y + v * EXT_W) =
                *(__local const EXT_WIDE *)(causal + v * EXT_W) + *(__local const EXT_WIDE *)(anti + v * EXT_W);
        done = nvec * EXT_W;
    }
    for (long i = done + tid; i < total; i += 2 * EXT_ROWS)
        y[i] = causal[i] + anti[i];
}

/* How many loads a work-item of extended_cols issues before it stores
 * their values (clamped positions: every load is inside the line). */
#define EXT_LOADS 32
/* 16-byte vectors in a row of EXT_ROWS values. */
#define EXT_PER_ROW (EXT_ROWS / EXT_W)

/* A strided axis: group b takes EXT_ROWS adjacent lines (lines
 * (b / segments) EXT_ROWS + r) on segment b % segments, laid out [i][row]
 * in win (W values), causal and anti (keep values), so that every copy and
 * store of EXT_ROWS work-items is one run of lines. Where inner is a
 * multiple of EXT_ROWS the group's lines are EXT_ROWS adjacent addresses:
 * a window inside the line is copied 16 bytes at a time (EXT_PER_ROW
 * work-items a window row) and the sums are stored so; elsewhere the two
 * halves copy and store alternate positions. */
static void ext_cols(__global const REAL *src, __global REAL *dst, __global const REAL *coef,
                     ulong n, ulong inner, ulong lines, ulong segments, ulong keep, ulong reach,
                     int boundary, REAL cval, ulong group0, __local REAL *win,
                     __local REAL *causal, __local REAL *anti, const int sections)
{
    const int tid = (int)get_local_id(0), r = tid % EXT_ROWS, side = tid / EXT_ROWS;
    const ulong b = group0 + get_group_id(0);
    const ulong line0 = (b / segments) * EXT_ROWS, line = line0 + (ulong)r;
    const int valid = line < lines;
    const long N = (long)n, I = (long)inner;
    const int R = (int)reach, W = (int)keep + 2 * R + 3;
    const long k0 = (long)((b % segments) * keep);
    const int len = (int)((k0 + (long)keep < N ? k0 + (long)keep : N) - k0);
    const long ws = k0 - R - 1;
    const ulong base = (line / inner) * n * inner + line % inner;
    const int whole = inner % EXT_ROWS == 0; /* then line0 .. + EXT_ROWS - 1 are all lines */
    const ulong base0 = (line0 / inner) * n * inner + line0 % inner;
    __global const REAL *x = src + base;
    if (whole && ws >= 0 && ws + W <= N) {
        __global const REAL *x0 = src + base0 + ws * I;
        const int count = W * EXT_PER_ROW;
        for (int v0 = tid; v0 < count; v0 += EXT_VLOADS * 2 * EXT_ROWS) {
            EXT_WIDE v[EXT_VLOADS];
#pragma unroll
            for (int u = 0; u < EXT_VLOADS; u++) {
                const int c = v0 + u * 2 * EXT_ROWS < count ? v0 + u * 2 * EXT_ROWS : count - 1;
                v[u] = *(__global const EXT_WIDE *)(x0 + (c / EXT_PER_ROW) * I + c % EXT_PER_ROW * EXT_W);
            }
#pragma unroll
            for (int u = 0; u < EXT_VLOADS; u++) {
                const int c = v0 + u * 2 * EXT_ROWS;
                if (c < count)
                    *(__local EXT_WIDE *)(win + (c / EXT_PER_ROW) * EXT_ROWS + c % EXT_PER_ROW * EXT_W) = v[u];
            }
        }
    } else if (valid) {
        for (int i0 = side; i0 < W; i0 += 2 * EXT_LOADS) {
            REAL v[EXT_LOADS];
#pragma unroll
            for (int u = 0; u < EXT_LOADS; u++) {
                long p = ws + i0 + 2 * u;
                p = p < 0 ? 0 : p >= N ? N - 1 : p;
                v[u] = x[p * I];
            }
#pragma unroll
            for (int u = 0; u < EXT_LOADS; u++)
                if (i0 + 2 * u < W)
                    win[(i0 + 2 * u) * EXT_ROWS + r] = v[u];
        }
        if (ws < 0 || ws + W > N)
            for (int i = side; i < W; i += 2)
                if (ws + i < 0 || ws + i >= N)
                    win[i * EXT_ROWS + r] = extended_value(x, ws + i, N, inner, boundary, cval);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (valid) {
        if (side == 0)
            ext_causal(win + r, EXT_ROWS, causal + r, EXT_ROWS, len, R, coef, sections);
        else
            ext_anticausal(win + r, EXT_ROWS, anti + r, EXT_ROWS, len, R, coef, sections);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (whole) {
        __global REAL *y0 = dst + base0 + k0 * I;
        for (int v = tid; v < len * EXT_PER_ROW; v += 2 * EXT_ROWS) {
            const int i = v / EXT_PER_ROW, c = v % EXT_PER_ROW * EXT_W;
            *(__global EXT_WIDE *)(y0 + i * I + c) = *(__local const EXT_WIDE *)(causal + i * EXT_ROWS + c) +
                                                    *(__local const EXT_WIDE *)(anti + i * EXT_ROWS + c);
        }
    } else if (valid) {
        __global REAL *y = dst + base;
        for (int i = side; i < len; i += 2)
            y[(k0 + i) * I] = causal[i * EXT_ROWS + r] + anti[i * EXT_ROWS + r];
    }
}

/* The kernels, one per section count (gauss.c picks by setup->iir's). */
/* The local buffers are declared as 16-byte vectors, so that they are
 * aligned for the vector copies. */
#define EXT_KERNELS(SC)                                                                          \
    __kernel void extended_rows##SC(__global const REAL *src, __global REAL *dst,                \
                                    __global const REAL *coef, ulong n, ulong segments,          \
                                    ulong keep, ulong reach, int boundary, REAL cval,            \
                                    ulong group0, __local EXT_WIDE *win,                         \
                                    __local EXT_WIDE *causal, __local EXT_WIDE *anti)            \
    {                                                                                            \
        ext_rows(src, dst, coef, n, segments, keep, reach, boundary, cval, group0,               \
                 (__local REAL *)win, (__local REAL *)causal, (__local REAL *)anti, SC);         \
    }                                                                                            \
    __kernel void extended_cols##SC(__global const REAL *src, __global REAL *dst,                \
                                    __global const REAL *coef, ulong n, ulong inner,             \
                                    ulong lines, ulong segments, ulong keep, ulong reach,        \
                                    int boundary, REAL cval, ulong group0,                       \
                                    __local EXT_WIDE *win, __local EXT_WIDE *causal,             \
                                    __local EXT_WIDE *anti)                                      \
    {                                                                                            \
        ext_cols(src, dst, coef, n, inner, lines, segments, keep, reach, boundary, cval, group0, \
                 (__local REAL *)win, (__local REAL *)causal, (__local REAL *)anti, SC);         \
    }

EXT_KERNELS(1)
EXT_KERNELS(2)
EXT_KERNELS(3)

/* execute_halo: one work-item per line (line t = o * inner + j), filtered as
 * the line lower halo | box | upper halo (lc + n + uc values) with the
 * boundary rule at its two ends. The box's values live in dst and the
 * halos' in scratch, value i of the lower halo at scratch[i * lines + t]
 * and value i of the upper one at scratch[(lc + i) * lines + t]; the
 * arithmetic is rf_span's. */
#define HALO_AT(i)                                                                                 \
    (*((i) < lc ? scratch + (i) * lines + t                                                        \
       : (i) < lc + n ? dst + (o * n + (i) - lc) * inner + j                                       \
                      : scratch + ((i) - n) * lines + t))
__kernel void rf_halo(__global const REAL *src, __global REAL *dst, __global const REAL *lower,
                      ulong lower_offset, __global const REAL *upper, ulong upper_offset,
                      __global REAL *scratch, ulong n, ulong inner, ulong lines, ulong lc, ulong uc,
                      REAL alpha, int K, int constant_boundary)
{
    const ulong t = get_global_id(0);
    if (t >= lines)
        return;
    const ulong o = t / inner, j = t % inner, m = lc + n + uc, last = m - 1;
    for (ulong i = 0; i < lc; i++)
        HALO_AT(i) = lower[lower_offset + (o * lc + i) * inner + j];
    for (ulong i = 0; i < n; i++)
        dst[(o * n + i) * inner + j] = src[(o * n + i) * inner + j];
    for (ulong i = 0; i < uc; i++)
        HALO_AT(lc + n + i) = upper[upper_offset + (o * uc + i) * inner + j];
    const REAL beta = (REAL)1 - alpha;
    for (int k = 0; k < K; k++) {
        REAL u = HALO_AT(last);
        REAL p = constant_boundary ? HALO_AT(0) : (REAL)0;
        for (ulong i = 0; i <= last; i++) {
            p = beta * HALO_AT(i) + alpha * p;
            HALO_AT(i) = p;
        }
        REAL s = constant_boundary ? u + (p - u) / ((REAL)1 + alpha) : beta * p;
        HALO_AT(last) = s;
        for (ulong i = last; i > 0;) {
            i--;
            s = beta * HALO_AT(i) + alpha * s;
            HALO_AT(i) = s;
        }
    }
}
#undef HALO_AT
