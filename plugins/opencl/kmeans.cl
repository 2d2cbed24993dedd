/* dakit-opencl kmeans kernels: the definition of dakit/kmeans.h.
 *
 * One Lloyd iteration is two launches, enqueued without waiting:
 *   km_assign_DM  each work-group takes tiles of points (T contiguous points,
 *                 or with contiguity a TH x TW block of pixels whose window
 *                 labels it stages in local memory first). Each work-item
 *                 labels one point of the tile (centroids in local memory,
 *                 rows padded to DM floats with zeros) and leaves its label
 *                 and features in local memory; then work-item (c, s) adds
 *                 the points of slice s of the tile that carry label c to
 *                 its own private sums (double). After its last tile the
 *                 group sums the slices in a fixed order and writes one
 *                 partial per (cluster, feature or count) pair: no atomics,
 *                 so the sums do not depend on scheduling.
 *   km_update     one work-group per (cluster, feature) sums that pair's
 *                 partials over the groups (pair-major, read coalesced),
 *                 writes the new coordinate (the old one for an empty
 *                 cluster) and its squared move; group 0 counts the
 *                 iteration (state[0]).
 * The convergence test of iteration t is made at the start of iteration
 * t + 1 from the moves, when tol > 0; a group that finds it met sets the stop
 * flag (state[1]), and every kernel after that does nothing, so the host can
 * enqueue iterations ahead and look at the flag only now and then. (Nothing
 * returns early: every work-item still passes every barrier, which PoCL's
 * work-group loops require.)
 * DM is the feature count rounded up to 4, 8, 16 or 32; the kernels are
 * instantiated once per DM so that points and sums live in registers.
 * Distances and costs are float with contraction off, rounded operation by
 * operation as the reference rounds them; the zero padding adds exact
 * zeros. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

/* always: the kernels rely on DM being a constant after inlining, so that
 * the DM-sized private arrays live in registers (a call left out of line
 * takes DM at run time and puts them in stack memory) */
#define INLINE static inline __attribute__((always_inline))
/* private arrays are declared this long; only their first DM entries are used */
#define MAX_DM 32

/* M(f) for each feature f < MAX_DM, each with a constant index: where a
 * DM-sized private array is touched inside a loop that runs a run-time
 * count, this keeps its indices constants whatever the compiler unrolls
 * (M guards itself with f < DM, which folds away). */
#define EACH_FEATURE(M)                                                                                        \
    M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) M(16) M(17) M(18)    \
    M(19) M(20) M(21) M(22) M(23) M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)

typedef struct {
    ulong n, sp, sf, rows, cols;
    int d, k, window, contig;
    float lambda;
} km_shape;

/* The shape travels in a small buffer of ulongs (n, sp, sf, rows, cols, d,
 * k, window, contig, lambda's bits) rather than as a struct argument, whose
 * passing by value some drivers get wrong. */
INLINE km_shape shape_of(__global const ulong *v)
{
    km_shape s;
    s.n = v[0];
    s.sp = v[1];
    s.sf = v[2];
    s.rows = v[3];
    s.cols = v[4];
    s.d = (int)v[5];
    s.k = (int)v[6];
    s.window = (int)v[7];
    s.contig = (int)v[8];
    s.lambda = as_float((uint)v[9]);
    return s;
}

/* Work-item 0's verdict, the same in every work-item. */
INLINE int broadcast(int v, __local int *slot)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        *slot = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return *slot;
}

/* The centroids into local memory, rows padded to DM floats with zeros. */
INLINE void stage_centroids(const int DM, __global const float *C, __local float *Cs, int k, int d)
{
    for (int j = get_local_id(0); j < k * DM; j += get_local_size(0))
        Cs[j] = j % DM < d ? C[j / DM * d + j % DM] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Point i's features (zeros past d); 16-byte loads where the rows allow
 * (vec4: point-major, d and the row stride multiples of 4). The loads are
 * unconditional (clamped to the last feature) and the padding selected, so
 * that the loops unroll fully and x stays in registers. */
INLINE void load_point(const int DM, __global const float *X, ulong i, km_shape s, int vec4, float *x)
{
    if (vec4) {
        __global const float4 *row = (__global const float4 *)(X + i * s.sp);
#pragma unroll
        for (int q = 0; q < DM / 4; q++) {
            const float4 v = row[min(q, s.d / 4 - 1)];
            const int in = 4 * q < s.d;
            x[4 * q] = in ? v.x : 0.0f;
            x[4 * q + 1] = in ? v.y : 0.0f;
            x[4 * q + 2] = in ? v.z : 0.0f;
            x[4 * q + 3] = in ? v.w : 0.0f;
        }
        return;
    }
#pragma unroll
    for (int f = 0; f < DM; f++) {
        const float v = X[i * s.sp + (ulong)min(f, s.d - 1) * s.sf];
        x[f] = f < s.d ? v : 0.0f;
    }
}

/* The reference's squared distance to the padded row c (16-byte reads). */
INLINE float distance2(const int DM, const float *x, __local const float4 *c)
{
    float dist = 0.0f;
#pragma unroll
    for (int q = 0; q < DM / 4; q++) {
        const float4 v = c[q];
        float t = x[4 * q] - v.x;
        dist += t * t;
        t = x[4 * q + 1] - v.y;
        dist += t * t;
        t = x[4 * q + 2] - v.z;
        dist += t * t;
        t = x[4 * q + 3] - v.w;
        dist += t * t;
    }
    return dist;
}

/* Nearest centroid by the plain cost, ties to the lowest index. */
INLINE int nearest(const int DM, const float *x, __local const float4 *Cs, int k)
{
    int best = 0;
    float best_dist = 0.0f;
    for (int c = 0; c < k; c++) {
        const float dist = distance2(DM, x, Cs + c * (DM / 4));
        if (c == 0 || dist < best_dist) {
            best = c;
            best_dist = dist;
        }
    }
    return best;
}

/* The contiguity cost's least-cost label: halo holds the previous labels of
 * the tile's window (-1 outside the image or masked), hw wide, and (hy, hx)
 * is this pixel in it. */
INLINE int contig_label(const int DM, km_shape s, const float *x, __local const float4 *Cs,
                        __local const short *halo, int hw, int hy, int hx)
{
    const int r = s.window / 2;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++)
            m += (y || c) && halo[(hy + y) * hw + hx + c] >= 0;
    const float inv_d = 1.0f / (float)s.d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < s.k; c++) {
        const float dist = distance2(DM, x, Cs + c * (DM / 4));
        int same = 0;
        if (m)
            for (int y = -r; y <= r; y++)
                for (int cx = -r; cx <= r; cx++)
                    same += (y || cx) && halo[(hy + y) * hw + hx + cx] == c;
        const float share = m ? (float)(m - same) / (float)m : 0.0f;
        const float a = s.lambda * (dist * inv_d);
        const float b = (1.0f - s.lambda) * share;
        const float cost = a + b;
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

/* Work-item (c, s) = (l % k, l / k) adds the points of slice s of the tile
 * (T points, labels ls, features xs with rows DM + 1 floats apart) that carry
 * label c. */
INLINE void add_tile(const int DM, __local const int *ls, __local const float *xs, int T, int k, double *acc,
                     uint *cnt)
{
    const int l = get_local_id(0), slices = get_local_size(0) / k;
    const int c = l % k, s = l / k;
    if (s >= slices)
        return;
    const int len = (T + slices - 1) / slices, end = min(T, (s + 1) * len);
    for (int j = s * len; j < end; j++)
        if (ls[j] == c) {
#pragma unroll
            for (int f = 0; f < DM; f++)
                acc[f] += (double)xs[j * (DM + 1) + f];
            *cnt += 1;
        }
}

/* The slices' sums in slice order into partial[pair * groups + group],
 * pair = c * (d + 1) + f, f = d for the count. red holds one double per
 * work-item. */
INLINE void write_partials(const int DM, const double *acc, uint cnt, int k, int d, int active,
                           __local double *red, __global double *partial, ulong groups)
{
    const int l = get_local_id(0), slices = get_local_size(0) / k;
    const ulong g = get_group_id(0);
#pragma unroll
    for (int f = 0; f <= DM; f++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        red[l] = f < DM ? acc[f] : (double)cnt;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int col = f < DM ? f : d;
        if (active && l < k && (f < d || f == DM)) {
            double t = 0.0;
            for (int s = 0; s < slices; s++)
                t += red[s * k + l];
            partial[((ulong)l * (ulong)(d + 1) + (ulong)col) * groups + g] = t;
        }
    }
}

/* Whether iteration t's test stops the run: the largest move of iteration
 * t - 1 below tol (each cluster's squared move summed over its features in
 * order, as the reference); never for tol <= 0, without reading the moves.
 * Every work-item calls it. */
INLINE int converged(__global const double *move2, int k, int d, double tol, __local double *red)
{
    double mx = 0.0;
    for (int c = get_local_id(0); tol > 0 && c < k; c += get_local_size(0)) {
        double m2 = 0.0;
        for (int f = 0; f < d; f++)
            m2 += move2[c * d + f];
        mx = fmax(mx, m2);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    red[get_local_id(0)] = mx;
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (get_local_id(0) < h)
            red[get_local_id(0)] = fmax(red[get_local_id(0)], red[get_local_id(0) + h]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return sqrt(red[0]) < tol;
}

/* Ch[c] = -|c|^2 / 2 for the screening (see screened_nearest); every
 * work-item gets the largest |c|^2. Centroids staged first. */
INLINE float stage_halves(const int DM, __local const float4 *Cs, __local float *Ch, int k)
{
    for (int c = get_local_id(0); c < k; c += get_local_size(0)) {
        float q = 0.0f;
#pragma unroll
        for (int j = 0; j < DM / 4; j++) {
            const float4 v = Cs[c * (DM / 4) + j];
            q = fma(v.x, v.x, q);
            q = fma(v.y, v.y, q);
            q = fma(v.z, v.z, q);
            q = fma(v.w, v.w, q);
        }
        Ch[c] = -0.5f * q;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float rmax2 = 0.0f;
    for (int c = 0; c < k; c++)
        rmax2 = fmax(rmax2, -2.0f * Ch[c]);
    return rmax2;
}

/* Plain nearest centroid, screened. The nearest centroid maximizes
 * B_c = x.c - |c|^2 / 2: DM fused multiply-adds per centroid from Ch[c]
 * instead of the exact distance's 3 DM separately rounded operations. With
 * s2 = |x|^2 the exact float distance is D_c = s2 - 2 B_c + e_c,
 * |e_c| <= 3 (d + 2) u R^2 to first order (u = 2^-24, R = |x| + max|c|,
 * R^2 <= 2 (s2 + rmax2)), so when the best B beats the second by more than
 * eps = 12 (d + 2) u (s2 + rmax2) (twice the bound: second-order terms and
 * the test's own rounding) the best is the strict exact minimum, the
 * reference's label; otherwise (a near-tie, or inf / NaN from huge values:
 * then s2 + rmax2 is inf too) the exact distances decide. The zero padding
 * adds exact zeros; a tiny absolute term covers subnormal rounding. */
INLINE int screened_nearest(const int DM, const float *x, __local const float4 *Cs, __local const float *Ch, int k,
                            float rmax2, float eps_coef)
{
    float b1 = -INFINITY, b2 = -INFINITY;
    int i1 = 0;
    for (int c = 0; c < k; c++) {
        float B = Ch[c];
#pragma unroll
        for (int j = 0; j < DM / 4; j++) {
            const float4 v = Cs[c * (DM / 4) + j];
            B = fma(x[4 * j], v.x, B);
            B = fma(x[4 * j + 1], v.y, B);
            B = fma(x[4 * j + 2], v.z, B);
            B = fma(x[4 * j + 3], v.w, B);
        }
        i1 = B > b1 ? c : i1;
        b2 = fmin(b1, fmax(b2, B));
        b1 = fmax(b1, B);
    }
    float s2 = 0.0f;
#pragma unroll
    for (int f = 0; f < DM; f++)
        s2 = fma(x[f], x[f], s2);
    const float eps = fma(eps_coef, s2 + rmax2, 1e-37f);
    return b1 - b2 > eps ? i1 : nearest(DM, x, Cs, k);
}

/* The tile's points ordered by label (then by index), as doubles, rows DM + 1
 * apart (odd: fewer bank conflicts), so that summing them by cluster takes
 * every work-item at once instead of one per label. book holds, per cluster,
 * W = ceil(T / 32) words of which of the tile's points carry it (bits), W
 * words of where its points of each word start in the order (pre), its
 * count (cnt) and the end of its run (end). The tile's work-item l holds
 * point l: its label (-1 for none) and features x. Every work-item calls it;
 * bits and cnt must be zero on entry, and are again on return. */
INLINE void order_tile(const int DM, int label, const float *x, int k, int W, __local uint *book,
                       __local double *sorted)
{
    const int l = get_local_id(0), G = get_local_size(0);
    __local uint *bits = book, *pre = book + k * W, *cnt = book + 2 * k * W, *end = cnt + k;
    if (label >= 0) {
        atomic_or(bits + label * W + l / 32, 1u << (l % 32));
        atomic_inc(cnt + label);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = l; c < k; c += G) {
        uint at = 0;
        for (int b = 0; b < c; b++)
            at += cnt[b];
        for (int w = 0; w < W; w++) {
            pre[c * W + w] = at;
            at += popcount(bits[c * W + w]);
        }
        end[c] = at;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (label >= 0) {
        const int w = l / 32;
        const uint at = pre[label * W + w] + popcount(bits[label * W + w] & ((1u << (l % 32)) - 1u));
#define KM_STORE(f)                                                                                            \
    if (f < DM)                                                                                                \
        sorted[at * (DM + 1) + f] = (double)x[f];
        EACH_FEATURE(KM_STORE)
#undef KM_STORE
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = l; j < k * W; j += G)
        bits[j] = 0;
    for (int c = l; c < k; c += G)
        cnt[c] = 0;
}

/* Work-item (c, s) = (l % k, l / k) adds points s, s + S, ... of cluster c's
 * run in the ordered tile (S = the work-group size / k slices). */
INLINE void add_ordered(const int DM, int k, int W, __local const uint *book, __local const double *sorted,
                        double *acc, uint *count)
{
    const int l = get_local_id(0), S = get_local_size(0) / k;
    const int c = l % k, s = l / k;
    if (s >= S)
        return;
    const uint last = book[2 * k * W + k + c];
    for (uint j = book[k * W + c * W] + s; j < last; j += S) {
#define KM_ADD(f)                                                                                              \
    if (f < DM)                                                                                                \
        acc[f] += sorted[j * (DM + 1) + f];
        EACH_FEATURE(KM_ADD)
#undef KM_ADD
        *count += 1;
    }
}

/* Iteration t: labels under C into cur (prev: the previous labels, with
 * contiguity) and the group's partial sums. T points per tile (with
 * contiguity TH x TW = T pixels); Cs k * DM floats, Ch k, book
 * 2 k (ceil(T / 32) + 1) uints, sorted T * (DM + 1) doubles, halo
 * (TH + 2r) x (TW + 2r) with contiguity, red one double per work-item. */
INLINE void assign(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                   __global const float *C, __global const int *prev, __global int *cur, __global double *partial,
                   __global int *state, __global const double *move2, __global const ulong *shape, int t,
                   double tol, int vec4, int T, int TW, __local float4 *Cs, __local float *Ch, __local uint *book,
                   __local double *sorted, __local short *halo, __local double *red, __local int *flag)
{
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0), W = (T + 31) / 32;
    const ulong g = get_group_id(0), groups = get_num_groups(0);
    /* stopped before, or this iteration's test says stop */
    int done = broadcast(l == 0 && t > 0 ? state[1] : 0, flag);
    const int stop = converged(move2, s.k, s.d, t > 0 && !done ? tol : 0.0, red);
    if (stop && g == 0 && l == 0)
        state[1] = 1;
    done = done || stop;
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    const float rmax2 = s.contig ? 0.0f : stage_halves(DM, Cs, Ch, s.k);
    const float eps_coef = 12.0f * (float)(s.d + 2) * 0x1p-24f;
    for (int j = l; j < 2 * s.k * (W + 1); j += get_local_size(0))
        book[j] = 0;
    const int r = s.window / 2, TH = T / TW, hw = TW + 2 * r, hh = TH + 2 * r;
    const ulong tiles_x = (s.cols + TW - 1) / TW;
    const ulong tiles = done ? 0 : s.contig ? tiles_x * ((s.rows + TH - 1) / TH) : (s.n + T - 1) / T;
    double acc[MAX_DM];
#define KM_ZERO(f)                                                                                             \
    if (f < DM)                                                                                                \
        acc[f] = 0.0;
    EACH_FEATURE(KM_ZERO)
#undef KM_ZERO
    uint cnt = 0;
    for (ulong tile = g; tile < tiles; tile += groups) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
        ulong row0 = 0, col0 = 0;
        if (s.contig) {
            row0 = tile / tiles_x * TH;
            col0 = tile % tiles_x * TW;
            for (int j = l; j < hh * hw; j += get_local_size(0)) {
                const long y = (long)row0 - r + j / hw, c = (long)col0 - r + j % hw;
                halo[j] = y >= 0 && y < (long)s.rows && c >= 0 && c < (long)s.cols
                              ? (short)prev[(ulong)y * s.cols + (ulong)c]
                              : (short)-1;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        float x[MAX_DM];
#pragma unroll
        for (int f = 0; f < DM; f++)
            x[f] = 0.0f;
        int label = -1;
        if (l < T) {
            ulong i;
            int inside;
            if (s.contig) {
                const ulong row = row0 + l / TW, col = col0 + l % TW;
                i = row * s.cols + col;
                inside = row < s.rows && col < s.cols;
            } else {
                i = tile * T + l;
                inside = i < s.n;
            }
            if (inside && (!has_mask || mask[i])) {
                load_point(DM, X, i, s, vec4, x);
                label = s.contig ? contig_label(DM, s, x, Cs, halo, hw, l / TW + r, l % TW + r)
                                 : screened_nearest(DM, x, Cs, Ch, s.k, rmax2, eps_coef);
            }
            if (inside)
                cur[i] = label;
        }
        order_tile(DM, label, x, s.k, W, book, sorted);
        add_ordered(DM, s.k, W, book, sorted, acc, &cnt);
    }
    write_partials(DM, acc, cnt, s.k, s.d, !done, red, partial, groups);
}

/* The labels of iteration 0 under contiguity: plain nearest centroid. */
INLINE void first_labels(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                         __global const float *C, __global int *out, __global const ulong *shape, int vec4,
                         __local float4 *Cs)
{
    const km_shape s = shape_of(shape);
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        if (has_mask && !mask[i]) {
            out[i] = -1;
            continue;
        }
        float x[MAX_DM];
        load_point(DM, X, i, s, vec4, x);
        out[i] = nearest(DM, x, Cs, s.k);
    }
}

/* Tree sum of the work-group's values in scratch (the size a power of two);
 * the total ends in scratch[0]. */
INLINE void tree_sum(__local double *scratch)
{
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (get_local_id(0) < h)
            scratch[get_local_id(0)] += scratch[get_local_id(0) + h];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Per work-group: the objective under the final centroids and the unmasked
 * count, into partial[2 g] and partial[2 g + 1]. The final labels are
 * lab[0] or lab[1] by the parity of the iterations run; with contiguity they
 * are copied to labels on the way. */
INLINE void objective(const int DM, __global const float *X, __global const int *lab0, __global const int *lab1,
                      __global int *labels, __global const float *C, __global double *partial,
                      __global const int *state, __global const ulong *shape, int vec4, __local float4 *Cs,
                      __local double *scratch)
{
    const km_shape s = shape_of(shape);
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    __global const int *fin = state[0] & 1 ? lab1 : lab0;
    double obj = 0.0, valid = 0.0;
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        const int l = fin[i];
        if (s.contig)
            labels[i] = l;
        if (l < 0)
            continue;
        float x[MAX_DM];
        load_point(DM, X, i, s, vec4, x);
        obj += (double)distance2(DM, x, Cs + l * (DM / 4));
        valid += 1.0;
    }
    scratch[get_local_id(0)] = obj;
    tree_sum(scratch);
    if (get_local_id(0) == 0)
        partial[2 * get_group_id(0)] = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[get_local_id(0)] = valid;
    tree_sum(scratch);
    if (get_local_id(0) == 0)
        partial[2 * get_group_id(0) + 1] = scratch[0];
}

#define KM_KERNELS(DM)                                                                                             \
    __kernel void km_assign_##DM(__global const float *X, __global const uchar *mask, int has_mask,              \
                                 __global const float *C, __global const int *prev, __global int *cur,            \
                                 __global double *partial, __global int *state, __global const double *move2,     \
                                 __global const ulong *shape, int t, double tol, int vec4, int T, int TW,         \
                                 __local float4 *Cs, __local float *Ch, __local uint *book,                       \
                                 __local double *sorted, __local short *halo, __local double *red)                \
    {                                                                                                             \
        __local int flag;                                                                                         \
        assign(DM, X, mask, has_mask, C, prev, cur, partial, state, move2, shape, t, tol, vec4, T, TW, Cs, Ch,    \
               book, sorted, halo, red, &flag);                                                                   \
    }                                                                                                             \
    __kernel void km_first_labels_##DM(__global const float *X, __global const uchar *mask, int has_mask,        \
                                       __global const float *C, __global int *out, __global const ulong *shape,   \
                                       int vec4, __local float4 *Cs)                                              \
    {                                                                                                             \
        first_labels(DM, X, mask, has_mask, C, out, shape, vec4, Cs);                                             \
    }                                                                                                             \
    __kernel void km_objective_##DM(__global const float *X, __global const int *lab0, __global const int *lab1, \
                                    __global int *labels, __global const float *C, __global double *partial,      \
                                    __global const int *state, __global const ulong *shape, int vec4,             \
                                    __local float4 *Cs, __local double *scratch)                                  \
    {                                                                                                             \
        objective(DM, X, lab0, lab1, labels, C, partial, state, shape, vec4, Cs, scratch);                        \
    }

KM_KERNELS(4)
KM_KERNELS(8)
KM_KERNELS(16)
KM_KERNELS(32)

/* Work-group w forms coordinate w = (c, f) of the new centroids C from the
 * groups' partials (a fixed order: strided sums, then a tree) and Cold (the
 * initial centroids in iteration 0, else C itself), and its squared move;
 * group 0 counts the iterations (state[0]) and, in iteration 0, clears the
 * stop flag of an earlier run. scratch: two doubles per work-item. */
__kernel void km_update(__global const double *partial, ulong groups, __global const float *Cold,
                        __global float *C, __global int *state, __global double *move2,
                        __global const ulong *shape, int t, __local double *scratch, __local double *count)
{
    const km_shape s = shape_of(shape);
    const int done = t > 0 && state[1];
    const int w = get_group_id(0), c = w / s.d, f = w % s.d, l = get_local_id(0);
    const ulong at = ((ulong)c * (ulong)(s.d + 1) + (ulong)f) * groups;
    const ulong at_count = ((ulong)c * (ulong)(s.d + 1) + (ulong)s.d) * groups;
    double sum = 0.0, cnt = 0.0;
    for (ulong g = l; !done && g < groups; g += get_local_size(0)) {
        sum += partial[at + g];
        cnt += partial[at_count + g];
    }
    scratch[l] = sum;
    count[l] = cnt;
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < h) {
            scratch[l] += scratch[l + h];
            count[l] += count[l + h];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!done && l == 0) {
        const float old = Cold[w];
        const float next = count[0] > 0 ? (float)(scratch[0] / count[0]) : old;
        const double diff = (double)next - (double)old;
        C[w] = next;
        move2[w] = diff * diff;
        if (w == 0) {
            state[0] = t + 1;
            if (t == 0)
                state[1] = 0;
        }
    }
}

/* One work-group: the result for the host, out = iterations, objective,
 * largest squared move, unmasked count, from the groups' objective partials
 * (strided sums, then a tree: a fixed order) and the last moves. scratch:
 * a double per work-item. */
__kernel void km_result(__global const double *obj, ulong groups, __global const double *move2,
                        __global const int *state, __global const ulong *shape, __global double *out,
                        __local double *scratch)
{
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0);
    double total = 0.0, valid = 0.0;
    for (ulong g = l; g < groups; g += get_local_size(0)) {
        total += obj[2 * g];
        valid += obj[2 * g + 1];
    }
    scratch[l] = total;
    tree_sum(scratch);
    total = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[l] = valid;
    tree_sum(scratch);
    if (l == 0) {
        double mx = 0.0;
        for (int c = 0; c < s.k; c++) {
            double m2 = 0.0;
            for (int f = 0; f < s.d; f++)
                m2 += move2[c * s.d + f];
            mx = fmax(mx, m2);
        }
        out[0] = state[0];
        out[1] = total;
        out[2] = mx;
        out[3] = scratch[0];
    }
}

/* ---- texture features (dakit/kmeans.h): the planes; the features with
 * per-group statistics; the statistics in group order (one work-item); the
 * standardization with the initial centroids' interval sums per group (as
 * the assignment's partials, label = interval); the initial centroids. ---- */

#define TEX_STATS 9 /* per group: sum[3], sq[3], count, min z, max z */

__kernel void km_tex_planes(__global const float *value, __global float *planes, ulong n)
{
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float v = value[i];
        const int has = isfinite(v);
        const float z = has ? v : 0.0f;
        planes[i] = z;
        planes[n + i] = z * z;
        planes[2 * n + i] = has ? 1.0f : 0.0f;
    }
}

/* Tree min and max of the work-group's values (the size a power of two);
 * the results end in lo[0] and hi[0]. */
INLINE void tree_min_max(__local float *lo, __local float *hi)
{
    const uint l = get_local_id(0);
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < h) {
            lo[l] = fmin(lo[l], lo[l + h]);
            hi[l] = fmax(hi[l], hi[l + h]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* min_value arrives as the float nearest at or above it: z >= that float
 * exactly when z >= min_value. */
__kernel void km_tex_features(__global const float *value, __global const float *sm, float min_value,
                              __global float *points, __global uchar *mask, __global double *part, ulong n,
                              __local double *scratch, __local float *lo_s, __local float *hi_s)
{
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0}, cnt = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (ulong i = get_global_id(0); i < n; i += get_global_size(0)) {
        const float v = value[i];
        const int has = isfinite(v);
        const float z = has ? v : 0.0f;
        const float a = sm[i], b = sm[n + i], w = sm[2 * n + i];
        const float mean = w > 1e-6f ? a / w : z;
        const float var = w > 1e-6f ? b / w - mean * mean : 0.0f;
        const float f[3] = {z, mean, var > 0 ? sqrt(var) : 0.0f};
        const int in = has && z >= min_value;
        mask[i] = (uchar)in;
        for (int j = 0; j < 3; j++) {
            points[j * n + i] = f[j];
            if (in) {
                sum[j] += f[j];
                sq[j] += (double)f[j] * f[j];
            }
        }
        if (in) {
            cnt += 1;
            lo = fmin(lo, z);
            hi = fmax(hi, z);
        }
    }
    const double vals[7] = {sum[0], sum[1], sum[2], sq[0], sq[1], sq[2], cnt};
    const ulong g = get_group_id(0);
    for (int j = 0; j < 7; j++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        scratch[get_local_id(0)] = vals[j];
        tree_sum(scratch);
        if (get_local_id(0) == 0)
            part[g * TEX_STATS + j] = scratch[0];
    }
    lo_s[get_local_id(0)] = lo;
    hi_s[get_local_id(0)] = hi;
    tree_min_max(lo_s, hi_s);
    if (get_local_id(0) == 0) {
        part[g * TEX_STATS + 7] = lo_s[0];
        part[g * TEX_STATS + 8] = hi_s[0];
    }
}

/* One work-group: the partials (strided sums, then a tree: a fixed order)
 * -> st = valid, mu[3], sd[3], lo, width (standardized feature 0, the
 * initial centroids' intervals). scratch: a double per work-item; lo, hi: a
 * float each. */
__kernel void km_tex_stats(__global const double *part, ulong groups, int k, __global double *st,
                           __local double *scratch, __local float *lo_s, __local float *hi_s)
{
    const int l = get_local_id(0);
    double t[TEX_STATS];
    for (int j = 0; j < 7; j++) {
        double v = 0;
        for (ulong g = l; g < groups; g += get_local_size(0))
            v += part[g * TEX_STATS + j];
        barrier(CLK_LOCAL_MEM_FENCE);
        scratch[l] = v;
        tree_sum(scratch);
        t[j] = scratch[0];
    }
    float lo = INFINITY, hi = -INFINITY;
    for (ulong g = l; g < groups; g += get_local_size(0)) {
        lo = fmin(lo, (float)part[g * TEX_STATS + 7]);
        hi = fmax(hi, (float)part[g * TEX_STATS + 8]);
    }
    lo_s[l] = lo;
    hi_s[l] = hi;
    tree_min_max(lo_s, hi_s);
    if (l)
        return;
    t[7] = lo_s[0];
    t[8] = hi_s[0];
    const double valid = t[6];
    st[0] = valid;
    for (int j = 0; j < 3; j++) {
        const double mu = valid > 0 ? t[j] / valid : 0.0;
        const double var = valid > 0 ? t[3 + j] / valid - mu * mu : 0.0;
        st[1 + j] = mu;
        st[4 + j] = var > 1e-12 ? sqrt(var) : 1.0;
    }
    /* standardizing is monotonic, so the standardized range is the range's */
    const float flo = valid > 0 ? (float)((t[7] - st[1]) / st[4]) : 0.0f;
    const float fhi = valid > 0 ? (float)((t[8] - st[1]) / st[4]) : 0.0f;
    st[7] = flo;
    st[8] = ((double)fhi - (double)flo) / k;
}

/* Standardizes in place and forms, per group, the interval sums of the
 * standardized points as km_assign_4 forms its partials (tiles of T points,
 * one per work-item). */
__kernel void km_tex_standardize(__global float *points, __global const uchar *mask, __global const double *st,
                                 __global double *partial, int k, ulong n, int T, __local float *xs,
                                 __local int *ls, __local double *red)
{
    const int l = get_local_id(0);
    const ulong g = get_group_id(0), groups = get_num_groups(0), tiles = (n + T - 1) / T;
    const double mu[3] = {st[1], st[2], st[3]}, sd[3] = {st[4], st[5], st[6]};
    const double lo = st[7], width = st[8];
    double acc[4] = {0, 0, 0, 0};
    uint cnt = 0;
    for (ulong tile = g; tile < tiles; tile += groups) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < T) {
            const ulong i = tile * T + l;
            float f[3] = {0.0f, 0.0f, 0.0f};
            int label = -1;
            if (i < n) {
                const int in = mask[i];
                for (int j = 0; j < 3; j++) {
                    f[j] = in ? (float)(((double)points[j * n + i] - mu[j]) / sd[j]) : 0.0f;
                    points[j * n + i] = f[j];
                }
                if (in) {
                    const int c = width > 0 ? (int)(((double)f[0] - lo) / width) : 0;
                    label = c < 0 ? 0 : c >= k ? k - 1 : c;
                }
            }
            ls[l] = label;
            for (int j = 0; j < 3; j++)
                xs[l * 5 + j] = f[j];
            xs[l * 5 + 3] = 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        add_tile(4, ls, xs, T, k, acc, &cnt);
    }
    write_partials(4, acc, cnt, k, 3, 1, red, partial, groups);
}

/* One work-group: the initial centroids from the interval partials (each
 * of the 4k sums strided over the groups, then a tree; an empty interval:
 * its middle for feature 0, the mean of all points for the others); the
 * statistics for the host go to out = valid, mu[3], sd[3]. scratch: a
 * double per work-item; sums: 4k doubles. */
__kernel void km_tex_init(__global const double *partial, ulong groups, int k, __global const double *st,
                          __global float *init, __global double *out, __local double *scratch,
                          __local double *sums)
{
    const int l = get_local_id(0);
    for (int p = 0; p < 4 * k; p++) {
        double v = 0;
        for (ulong g = l; g < groups; g += get_local_size(0))
            v += partial[(ulong)p * groups + g];
        barrier(CLK_LOCAL_MEM_FENCE);
        scratch[l] = v;
        tree_sum(scratch);
        if (l == 0)
            sums[p] = scratch[0];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    double all[4] = {0, 0, 0, 0};
    for (int c = 0; c < k; c++)
        for (int f = 0; f < 4; f++)
            all[f] += sums[c * 4 + f];
    const double lo = st[7], width = st[8];
    for (int j = l; j < 3 * k; j += get_local_size(0)) {
        const int c = j / 3, f = j % 3;
        const double s = sums[c * 4 + f], cnt = sums[c * 4 + 3];
        float v;
        if (cnt > 0)
            v = (float)(s / cnt);
        else if (f == 0)
            v = (float)(lo + (c + 0.5) * width);
        else
            v = all[3] > 0 ? (float)(all[f] / all[3]) : 0.0f;
        init[c * 3 + f] = v;
    }
    if (l < 7)
        out[l] = st[l];
}
