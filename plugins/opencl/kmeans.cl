/* dakit-opencl kmeans kernels: the definition of dakit/kmeans.h.
 *
 * One Lloyd iteration is two launches, enqueued without waiting:
 *   km_assign_DM  each work-group takes tiles of points (T contiguous points,
 *                 or with contiguity a TH x TW block of pixels whose window
 *                 labels it stages in local memory first). Each work-item
 *                 labels one point of the tile (centroids in local memory,
 *                 rows padded to DM floats with zeros; plain k-means
 *                 screens them first, nearest()) and leaves its label and
 *                 features in local memory; then work-item (slice,
 *                 feature) adds its slice's points to that feature's sums
 *                 per cluster in local memory (add_lanes; where those do
 *                 not fit, work-item (c, s) adds the points of slice s
 *                 that carry label c, add_tile). After its last tile the
 *                 group sums the slices in a fixed order, in double, and
 *                 writes one partial per (cluster, feature or count) pair:
 *                 no atomics, so the sums do not depend on scheduling.
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
 * DM is the feature count rounded up to 4, 8, 16, 32 or 64; the kernels are
 * instantiated once per DM so that points and sums live in registers.
 * Distances and costs are float with contraction off, rounded operation by
 * operation as the reference rounds them; the zero padding adds exact
 * zeros. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define INLINE static inline
/* private arrays are declared this long; only their first DM entries are used */
#define MAX_DM 64

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

/* The centroids into local memory, rows padded to DM floats with zeros,
 * then nearest()'s screening terms after the rows: h[c] = -|c|^2 / 2 and
 * h[k] the largest |c|^2 (NaN if any is NaN). Cs holds k DM + k + 1 floats. */
INLINE void stage_centroids(const int DM, __global const float *C, __local float *Cs, int k, int d)
{
    for (int j = get_local_id(0); j < k * DM; j += get_local_size(0))
        Cs[j] = j % DM < d ? C[j / DM * d + j % DM] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    __local float *h = Cs + k * DM;
    for (int c = get_local_id(0); c < k; c += get_local_size(0)) {
        float q = 0.0f;
        for (int f = 0; f < DM; f++)
            q = fma(Cs[c * DM + f], Cs[c * DM + f], q);
        h[c] = -0.5f * q;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        float most = 0.0f;
        for (int c = 0; c < k; c++) {
            const float q = -2.0f * h[c];
            most = isnan(most) || q <= most ? most : q;
        }
        h[k] = most;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Point i's features (zeros past d); 16-byte loads where the rows allow
 * (vec4: point-major, d and the row stride multiples of 4). */
INLINE void load_point(const int DM, __global const float *X, ulong i, km_shape s, int vec4, float *x)
{
    if (vec4) {
#pragma unroll
        for (int q = 0; q < DM / 4; q++) {
            const float4 v = 4 * q < s.d ? ((__global const float4 *)(X + i * s.sp))[q] : (float4)(0.0f);
            x[4 * q] = v.x;
            x[4 * q + 1] = v.y;
            x[4 * q + 2] = v.z;
            x[4 * q + 3] = v.w;
        }
        return;
    }
#pragma unroll
    for (int f = 0; f < DM; f++)
        x[f] = f < s.d ? X[i * s.sp + (ulong)f * s.sf] : 0.0f;
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
INLINE int exact_nearest(const int DM, const float *x, __local const float4 *Cs, int k)
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

/* exact_nearest's label, screened: the nearest centroid maximizes
 * B_c = x.c - |c|^2 / 2, a chain of DM FMAs from h[c], where the exact
 * distance takes 3 d separately rounded operations. With s2 = |x|^2 the
 * float distance is s2 - 2 B_c + e_c, |e_c| <= 3 (d + 2) u R^2 to first
 * order (u = 2^-24, R^2 <= 2 (s2 + max|c|^2)); so where the best B beats
 * the second by more than eps = 12 (d + 2) u (s2 + max|c|^2) it is the
 * strict exact minimum. Otherwise (a near tie, inf or NaN) the exact
 * distances decide. The tiny absolute term covers subnormal rounding. */
INLINE int nearest(const int DM, const float *x, __local const float4 *Cs, int k, int d)
{
    __local const float *h = (__local const float *)Cs + k * DM;
    float b1 = -INFINITY, b2 = -INFINITY, s2 = 0.0f;
    int i1 = 0;
    for (int c = 0; c < k; c++) {
        float B = h[c];
#pragma unroll
        for (int q = 0; q < DM / 4; q++) {
            const float4 v = Cs[c * (DM / 4) + q];
            B = fma(x[4 * q], v.x, B);
            B = fma(x[4 * q + 1], v.y, B);
            B = fma(x[4 * q + 2], v.z, B);
            B = fma(x[4 * q + 3], v.w, B);
        }
        i1 = B > b1 ? c : i1;
        b2 = fmin(b1, fmax(b2, B));
        b1 = fmax(b1, B);
    }
#pragma unroll
    for (int f = 0; f < DM; f++)
        s2 = fma(x[f], x[f], s2);
    const float eps = fma(12.0f * (float)(d + 2) * 0x1p-24f, s2 + h[k], 1e-37f);
    return b1 - b2 > eps ? i1 : exact_nearest(DM, x, Cs, k);
}

/* The contiguity cost's least-cost label: halo holds the previous labels of
 * the tile's window (-1 outside the image or masked), hw wide, and (hy, hx)
 * is this pixel in it. Where a field of `bits` bits per cluster (enough for
 * the window's count) fits k times in a ulong, one pass over the window
 * counts every cluster's neighbours at once; otherwise each cluster scans
 * the window. */
INLINE int contig_label(const int DM, km_shape s, const float *x, __local const float4 *Cs,
                        __local const short *halo, int hw, int hy, int hx)
{
    const int r = s.window / 2;
    const int bits = 32 - clz(s.window * s.window - 1), packed = bits * s.k <= 64;
    int m = 0;
    ulong counts = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++) {
            const int l = halo[(hy + y) * hw + hx + c];
            if ((y || c) && l >= 0) {
                m++;
                counts += packed ? (ulong)1 << (bits * l) : 0;
            }
        }
    const float inv_d = 1.0f / (float)s.d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < s.k; c++) {
        const float dist = distance2(DM, x, Cs + c * (DM / 4));
        int same = packed ? (int)(counts >> (bits * c)) & ((1 << bits) - 1) : 0;
        if (m && !packed)
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

/* A tile's rows in xs: a point's DM features, then its weight, in float4s. */
#define XS_ROW(DM) ((DM) + 4)

/* Adds rows [j0, j1) of a tile (labels ls, rows xs) that carry label c to
 * acc, each feature times the weight, and their weights to cnt, in double:
 * products and sums of floats are exact there at the usual magnitudes, so
 * the sums do not depend on how the points fall into tiles (a masked point
 * changes nothing). */
INLINE void add_rows(const int DM, __local const int *ls, __local const float4 *xs, int j0, int j1, int c,
                     double *acc, double *cnt)
{
    for (int j = j0; j < j1; j++)
        if (ls[j] == c) {
            __local const float4 *row = xs + j * (XS_ROW(DM) / 4);
            const double w = (double)row[DM / 4].x;
#pragma unroll
            for (int q = 0; q < DM / 4; q++) {
                const float4 v = row[q];
                acc[4 * q] = fma(w, (double)v.x, acc[4 * q]);
                acc[4 * q + 1] = fma(w, (double)v.y, acc[4 * q + 1]);
                acc[4 * q + 2] = fma(w, (double)v.z, acc[4 * q + 2]);
                acc[4 * q + 3] = fma(w, (double)v.w, acc[4 * q + 3]);
            }
            *cnt += w;
        }
}

/* Work-item (c, s) = (l % k, l / k) adds the points of slice s of the tile
 * (T points) that carry label c. */
INLINE void add_tile(const int DM, __local const int *ls, __local const float4 *xs, int T, int k, double *acc,
                     double *cnt)
{
    const int l = get_local_id(0), slices = get_local_size(0) / k;
    const int c = l % k, s = l / k;
    if (s >= slices)
        return;
    const int len = (T + slices - 1) / slices;
    add_rows(DM, ls, xs, s * len, min(T, (s + 1) * len), c, acc, cnt);
}

/* The slices' sums in slice order into partial[pair * groups + group],
 * pair = c * (d + 1) + f, f = d for the count. red holds one double per
 * work-item. */
INLINE void write_partials(const int DM, const double *acc, double cnt, int k, int d, int active,
                           __local double *red, __global double *partial, ulong groups)
{
    const int l = get_local_id(0), slices = get_local_size(0) / k;
    const ulong g = get_group_id(0);
#pragma unroll
    for (int f = 0; f <= DM; f++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        red[l] = f < DM ? acc[f] : cnt;
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

/* The lanes' sums, where the host gives them LS > 0 slices of local memory:
 * work-item (s, f) = (l / (DM + 1), l % (DM + 1)) keeps the sums (double,
 * as add_rows') of feature f (f = DM: the weights) of slice s's points, per
 * cluster, in sums[(s (DM + 1) + f) (k + 1) + c] (rows k + 1 apart: a
 * slice's lanes fall in distinct banks). Every lane then adds one term a
 * point, where add_tile's work-items test each point against their own
 * cluster. weighted: the rows' weights may differ from 1. */
INLINE void zero_lane_sums(const int DM, int k, int LS, __local double *sums)
{
    for (int j = get_local_id(0); j < LS * (DM + 1) * (k + 1); j += get_local_size(0))
        sums[j] = 0.0;
}

INLINE void add_lanes(const int DM, __local const int *ls, __local const float *xs, int T, int k, int LS,
                      int weighted, __local double *sums)
{
    const int l = get_local_id(0), s = l / (DM + 1), f = l % (DM + 1);
    if (s >= LS)
        return;
    const int len = (T + LS - 1) / LS, end = min(T, (s + 1) * len);
    __local double *row = sums + (s * (DM + 1) + f) * (k + 1);
    for (int j = s * len; j < end; j++) {
        const int c = ls[j];
        if (c >= 0) {
            const double v = f < DM ? (double)xs[j * XS_ROW(DM) + f] : 1.0;
            row[c] += weighted ? (double)xs[j * XS_ROW(DM) + DM] * v : v;
        }
    }
}

/* write_partials from the lanes' sums: each (cluster, feature or count)
 * pair summed over the slices in order, in double. */
INLINE void write_lane_partials(const int DM, __local const double *sums, int k, int d, int LS, int active,
                                __global double *partial, ulong groups)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong g = get_group_id(0);
    for (int q = get_local_id(0); active && q < k * (d + 1); q += get_local_size(0)) {
        const int c = q / (d + 1), f = q % (d + 1), lane = f < d ? f : DM;
        double t = 0.0;
        for (int s = 0; s < LS; s++)
            t += sums[(s * (DM + 1) + lane) * (k + 1) + c];
        partial[(ulong)q * groups + g] = t;
    }
}

/* A tile's sums by add_lanes (LS > 0) or add_tile, and the group's partials
 * from them. */
INLINE void add_sums(const int DM, __local const int *ls, __local const float4 *xs4, int T, int k, int LS,
                     int weighted, __local double *sums, double *acc, double *cnt)
{
    if (LS)
        add_lanes(DM, ls, (__local const float *)xs4, T, k, LS, weighted, sums);
    else
        add_tile(DM, ls, xs4, T, k, acc, cnt);
}

INLINE void write_sums(const int DM, const double *acc, double cnt, int k, int d, int LS, __local const double *sums,
                       int active, __local double *red, __global double *partial, ulong groups)
{
    if (LS)
        write_lane_partials(DM, sums, k, d, LS, active, partial, groups);
    else
        write_partials(DM, acc, cnt, k, d, active, red, partial, groups);
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

/* Iteration t: labels under C into cur (prev: the previous labels, with
 * contiguity) and the group's partial sums. T points per tile (with
 * contiguity TH x TW = T pixels); Cs as stage_centroids fills it, xs T *
 * XS_ROW(DM), ls T, halo (TH + 2r) x (TW + 2r) with contiguity, red one
 * double per work-item, sums LS (DM + 1) (k + 1) doubles (add_lanes). */
INLINE void assign(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                   __global const float *C, __global const int *prev, __global int *cur, __global double *partial,
                   __global int *state, __global const double *move2, __global const ulong *shape, int t,
                   double tol, int vec4, int T, int TW, __local float4 *Cs, __local float4 *xs4, __local int *ls,
                   __local short *halo, __local double *red, __local int *flag, int LS, __local double *sums)
{
    __local float *xs = (__local float *)xs4; /* rows of XS_ROW(DM) floats */
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0);
    const ulong g = get_group_id(0), groups = get_num_groups(0);
    /* stopped before, or this iteration's test says stop */
    int done = broadcast(l == 0 ? state[1] : 0, flag);
    const int stop = converged(move2, s.k, s.d, t > 0 && !done ? tol : 0.0, red);
    if (stop && g == 0 && l == 0)
        state[1] = 1;
    done = done || stop;
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    const int r = s.window / 2, TH = T / TW, hw = TW + 2 * r, hh = TH + 2 * r;
    const ulong tiles_x = (s.cols + TW - 1) / TW;
    const ulong tiles = done ? 0 : s.contig ? tiles_x * ((s.rows + TH - 1) / TH) : (s.n + T - 1) / T;
    double acc[MAX_DM];
#pragma unroll
    for (int f = 0; f < DM; f++)
        acc[f] = 0.0;
    double cnt = 0.0;
    zero_lane_sums(DM, s.k, LS, sums);
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
        if (l < T) {
            float x[MAX_DM];
#pragma unroll
            for (int f = 0; f < DM; f++)
                x[f] = 0.0f;
            int label = -1;
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
                                 : nearest(DM, x, Cs, s.k, s.d);
            }
            if (inside)
                cur[i] = label;
            ls[l] = label;
#pragma unroll
            for (int f = 0; f < DM; f++)
                xs[l * XS_ROW(DM) + f] = x[f];
            xs[l * XS_ROW(DM) + DM] = 1.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        add_sums(DM, ls, xs4, T, s.k, LS, 0, sums, acc, &cnt);
    }
    write_sums(DM, acc, cnt, s.k, s.d, LS, sums, !done, red, partial, groups);
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
        out[i] = nearest(DM, x, Cs, s.k, s.d);
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

/* The work-group's objective and count into partial[2 g] and partial[2 g + 1]. */
INLINE void objective_partials(double obj, double valid, __local double *scratch, __global double *partial)
{
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

/* The phases' layout of the objective partials: the group's objective into
 * partial[g], its count into partial[groups + g]. */
INLINE void part_objective_partials(double obj, double valid, __local double *scratch, __global double *partial)
{
    scratch[get_local_id(0)] = obj;
    tree_sum(scratch);
    if (get_local_id(0) == 0)
        partial[get_group_id(0)] = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[get_local_id(0)] = valid;
    tree_sum(scratch);
    if (get_local_id(0) == 0)
        partial[get_num_groups(0) + get_group_id(0)] = scratch[0];
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
    objective_partials(obj, valid, scratch, partial);
}

#define KM_KERNELS(DM)                                                                                             \
    __kernel void km_assign_##DM(__global const float *X, __global const uchar *mask, int has_mask,              \
                                 __global const float *C, __global const int *prev, __global int *cur,            \
                                 __global double *partial, __global int *state, __global const double *move2,     \
                                 __global const ulong *shape, int t, double tol, int vec4, int T, int TW,         \
                                 __local float4 *Cs, __local float4 *xs4, __local int *ls, __local short *halo,     \
                                 __local double *red, int LS, __local double *sums)                                \
    {                                                                                                             \
        __local int flag;                                                                                         \
        assign(DM, X, mask, has_mask, C, prev, cur, partial, state, move2, shape, t, tol, vec4, T, TW, Cs, xs4,   \
               ls, halo, red, &flag, LS, sums);                                                                   \
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
KM_KERNELS(64)

/* Work-group w forms coordinate w = (c, f) of the new centroids from the
 * groups' partials (a fixed order: strided sums, then a tree), its squared
 * move, and group 0 counts the iteration. scratch: two doubles per
 * work-item. */
__kernel void km_update(__global const double *partial, ulong groups, __global float *C, __global int *state,
                        __global double *move2, __global const ulong *shape, __local double *scratch,
                        __local double *count)
{
    const km_shape s = shape_of(shape);
    const int done = state[1];
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
        const float old = C[w];
        const float next = count[0] > 0 ? (float)(scratch[0] / count[0]) : old;
        const double diff = (double)next - (double)old;
        C[w] = next;
        move2[w] = diff * diff;
        if (w == 0)
            state[0] += 1;
    }
}

/* ---- the phases of a distributed iteration (dakit/kmeans.h): the same
 * tiles and partials as km_assign, the partials summed per (cluster,
 * feature or count) into the sums by km_part_sums, and the centroids
 * formed from the ranks' reduced sums by km_part_update. state is the
 * layer's (doubles: iterations, stop, move, failed); once stop is set
 * every phase does nothing. ---- */

/* Labels and the group's partials of a band or range of points: prev
 * (has_prev) holds the previous labels of rows [-r, rows + r); next
 * (has_next) gets the new labels at rows [0, rows). */
INLINE void part_assign(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                        __global const float *C, __global const int *prev, __global int *next, int has_prev,
                        int has_next, __global int *cur, __global double *partial, __global const double *state,
                        __global const ulong *shape, int vec4, int T, int TW, __local float4 *Cs, __local float4 *xs4,
                        __local int *ls, __local short *halo, __local double *red, __local int *flag,
                        __global const float *wts, int has_w, int LS, __local double *sums)
{
    __local float *xs = (__local float *)xs4; /* rows of XS_ROW(DM) floats */
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0);
    const ulong groups = get_num_groups(0);
    const int done = broadcast(l == 0 ? state[1] != 0.0 : 0, flag);
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    const int r = s.window / 2, TH = T / TW, hw = TW + 2 * r, hh = TH + 2 * r;
    const ulong tiles_x = (s.cols + TW - 1) / TW;
    const ulong tiles = done ? 0 : s.contig ? tiles_x * ((s.rows + TH - 1) / TH) : (s.n + T - 1) / T;
    const int window = s.contig && has_prev;
    double acc[MAX_DM];
#pragma unroll
    for (int f = 0; f < DM; f++)
        acc[f] = 0.0;
    double cnt = 0.0;
    zero_lane_sums(DM, s.k, LS, sums);
    for (ulong tile = get_group_id(0); tile < tiles; tile += groups) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
        ulong row0 = 0, col0 = 0;
        if (s.contig) {
            row0 = tile / tiles_x * TH;
            col0 = tile % tiles_x * TW;
        }
        if (window) {
            for (int j = l; j < hh * hw; j += get_local_size(0)) {
                const long y = (long)row0 - r + j / hw, c = (long)col0 - r + j % hw;
                halo[j] = y >= -r && y < (long)s.rows + r && c >= 0 && c < (long)s.cols
                              ? (short)prev[(ulong)(y + r) * s.cols + (ulong)c]
                              : (short)-1;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (l < T) {
            float x[MAX_DM];
#pragma unroll
            for (int f = 0; f < DM; f++)
                x[f] = 0.0f;
            int label = -1;
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
                label = window ? contig_label(DM, s, x, Cs, halo, hw, l / TW + r, l % TW + r)
                               : nearest(DM, x, Cs, s.k, s.d);
            }
            if (inside) {
                cur[i] = label;
                if (has_next)
                    next[i + (ulong)r * s.cols] = label;
            }
            ls[l] = label;
#pragma unroll
            for (int f = 0; f < DM; f++)
                xs[l * XS_ROW(DM) + f] = x[f];
            xs[l * XS_ROW(DM) + DM] = has_w && label >= 0 ? wts[i] : 1.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        add_sums(DM, ls, xs4, T, s.k, LS, has_w, sums, acc, &cnt);
    }
    write_sums(DM, acc, cnt, s.k, s.d, LS, sums, !done, red, partial, groups);
}

/* Per work-group: the objective and the count of labelled points into
 * partial[g] and partial[groups + g]. */
INLINE void part_objective(const int DM, __global const float *X, __global const int *labels,
                           __global const float *C, __global double *partial, __global const ulong *shape, int vec4,
                           __local float4 *Cs, __local double *scratch, __global const float *wts, int has_w)
{
    const km_shape s = shape_of(shape);
    stage_centroids(DM, C, (__local float *)Cs, s.k, s.d);
    double obj = 0.0, valid = 0.0;
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        const int l = labels[i];
        if (l < 0)
            continue;
        float x[MAX_DM];
        load_point(DM, X, i, s, vec4, x);
        obj += (has_w ? (double)wts[i] : 1.0) * (double)distance2(DM, x, Cs + l * (DM / 4));
        valid += 1.0;
    }
    part_objective_partials(obj, valid, scratch, partial);
}

#define KM_PART_KERNELS(DM)                                                                                        \
    __kernel void km_part_assign_##DM(__global const float *X, __global const uchar *mask, int has_mask,         \
                                      __global const float *C, __global const int *prev, __global int *next,     \
                                      int has_prev, int has_next, __global int *cur, __global double *partial,    \
                                      __global const double *state, __global const ulong *shape, int vec4, int T, \
                                      int TW, __local float4 *Cs, __local float4 *xs4, __local int *ls,             \
                                      __local short *halo, __local double *red, __global const float *wts,        \
                                      int has_w, int LS, __local double *sums)                                     \
    {                                                                                                             \
        __local int flag;                                                                                         \
        part_assign(DM, X, mask, has_mask, C, prev, next, has_prev, has_next, cur, partial, state, shape, vec4,   \
                    T, TW, Cs, xs4, ls, halo, red, &flag, wts, has_w, LS, sums);                                   \
    }                                                                                                             \
    __kernel void km_part_objective_##DM(__global const float *X, __global const int *labels,                    \
                                         __global const float *C, __global double *partial,                      \
                                         __global const ulong *shape, int vec4, __local float4 *Cs,               \
                                         __local double *scratch, __global const float *wts, int has_w)           \
    {                                                                                                             \
        part_objective(DM, X, labels, C, partial, shape, vec4, Cs, scratch, wts, has_w);                          \
    }

KM_PART_KERNELS(4)
KM_PART_KERNELS(8)
KM_PART_KERNELS(16)
KM_PART_KERNELS(32)
KM_PART_KERNELS(64)

/* Work-group w sums pair w = c (d + 1) + f of the groups' partials (strided
 * sums, then a tree: a fixed order) into out[c d + f], or out[k d + c] for
 * the count (f = d). always 0: nothing once state's stop is set. */
__kernel void km_part_sums(__global const double *partial, ulong groups, int k, int d, __global double *out,
                           __global const double *state, int always, __local double *scratch)
{
    const int w = get_group_id(0), l = get_local_id(0), c = w / (d + 1), f = w % (d + 1);
    /* no early return: PoCL's work-group loops need every work-item at every barrier */
    const int done = !always && state[1] != 0.0;
    double sum = 0.0;
    for (ulong g = l; !done && g < groups; g += get_local_size(0))
        sum += partial[(ulong)w * groups + g];
    scratch[l] = sum;
    tree_sum(scratch);
    if (l == 0 && !done)
        out[f < d ? c * d + f : k * d + c] = scratch[0];
}

/* One work-group: the centroids from the reduced sums (in place), the move
 * and the stop rule; the failure flag (sums[k d + k]) stops every rank. */
__kernel void km_part_update(__global const double *sums, __global float *C, __global double *state,
                             __global const ulong *shape, double tol, __local double *red)
{
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0), kd = s.k * s.d;
    /* every work-item reads the flags before any writes them; no early
     * return (PoCL's work-group loops need every work-item at every barrier) */
    const int stopped = state[1] != 0.0, failed = sums[kd + s.k] != 0.0, done = stopped || failed;
    barrier(CLK_GLOBAL_MEM_FENCE);
    double mx = 0.0;
    for (int c = l; !done && c < s.k; c += get_local_size(0)) {
        const double count = sums[kd + c];
        if (count == 0.0)
            continue;
        double m2 = 0.0;
        for (int f = 0; f < s.d; f++) {
            const float next = (float)(sums[c * s.d + f] / count);
            const double diff = (double)next - (double)C[c * s.d + f];
            m2 += diff * diff;
            C[c * s.d + f] = next;
        }
        mx = fmax(mx, m2);
    }
    red[l] = mx;
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (l < h)
            red[l] = fmax(red[l], red[l + h]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l == 0 && !stopped && failed)
        state[3] = 1.0, state[1] = 1.0;
    if (l == 0 && !done) {
        const double move = sqrt(red[0]);
        state[0] += 1.0;
        state[2] = move;
        if (move < tol)
            state[1] = 1.0;
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
                                 __global double *partial, int k, ulong n, int T, __local float4 *xs4,
                                 __local int *ls, __local double *red)
{
    __local float *xs = (__local float *)xs4; /* rows of XS_ROW(DM) floats */
    const int l = get_local_id(0);
    const ulong g = get_group_id(0), groups = get_num_groups(0), tiles = (n + T - 1) / T;
    const double mu[3] = {st[1], st[2], st[3]}, sd[3] = {st[4], st[5], st[6]};
    const double lo = st[7], width = st[8];
    double acc[4] = {0, 0, 0, 0};
    double cnt = 0.0;
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
                xs[l * XS_ROW(4) + j] = f[j];
            xs[l * XS_ROW(4) + 3] = 0.0f;
            xs[l * XS_ROW(4) + 4] = 1.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        add_tile(4, ls, xs4, T, k, acc, &cnt);
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

/* ---- plain k-means with more clusters than a work-group has work-items
 * (k > the group size G), or more centroids than local memory holds:
 *   km_big_assign_DM  each work-item labels one point per pass; the group
 *                     walks the centroids in tiles of CT rows staged in
 *                     local memory (ascending, strict <: ties to the lowest
 *                     index, as nearest()).
 *   km_big_sums_DM    group g takes a contiguous chunk of the points; for
 *                     each block of G clusters, work-item l owns cluster
 *                     c0 + l and adds the chunk's points of that label,
 *                     staged tile by tile in local memory, in point order.
 *                     The partials have km_assign's layout, so km_update
 *                     forms the centroids as before.
 *   km_big_objective_DM  km_objective with the centroid rows read from
 *                     global memory. ---- */

/* Labels of every point under C (k rows, CT per local-memory tile), -1
 * where masked; nothing when done. */
INLINE void big_label(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                      __global const float *C, __global int *labels, const km_shape s, int vec4, int CT,
                      __local float4 *Cs, int done)
{
    const int l = get_local_id(0), G = get_local_size(0);
    const ulong g = get_group_id(0), groups = get_num_groups(0);
    const ulong end = done ? 0 : s.n;
    for (ulong base = g * (ulong)G; base < end; base += groups * (ulong)G) {
        const ulong i = base + l;
        const int live = i < s.n && (!has_mask || mask[i]);
        float x[MAX_DM];
#pragma unroll
        for (int f = 0; f < DM; f++)
            x[f] = 0.0f;
        if (live)
            load_point(DM, X, i, s, vec4, x);
        int best = 0;
        float best_dist = 0.0f;
        for (int c0 = 0; c0 < s.k; c0 += CT) {
            const int rows = min(CT, s.k - c0);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int j = l; j < rows * DM; j += G)
                ((__local float *)Cs)[j] = j % DM < s.d ? C[(c0 + j / DM) * s.d + j % DM] : 0.0f;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int c = 0; live && c < rows; c++) {
                const float dist = distance2(DM, x, Cs + c * (DM / 4));
                if (c0 + c == 0 || dist < best_dist) {
                    best = c0 + c;
                    best_dist = dist;
                }
            }
        }
        if (i < s.n)
            labels[i] = live ? best : -1;
    }
}

INLINE void big_assign(const int DM, __global const float *X, __global const uchar *mask, int has_mask,
                       __global const float *C, __global int *labels, __global int *state,
                       __global const double *move2, __global const ulong *shape, int t, double tol, int vec4,
                       int CT, __local float4 *Cs, __local double *red, __local int *flag)
{
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0);
    const ulong g = get_group_id(0);
    int done = broadcast(l == 0 ? state[1] : 0, flag);
    const int stop = converged(move2, s.k, s.d, t > 0 && !done ? tol : 0.0, red);
    if (stop && g == 0 && l == 0)
        state[1] = 1;
    big_label(DM, X, mask, has_mask, C, labels, s, vec4, CT, Cs, done || stop);
}

/* Group g's partials of its contiguous chunk of the points: per cluster the
 * sums of w x_f and of w (w = 1 without weights), in point order (add_rows);
 * nothing when done. */
INLINE void big_sums(const int DM, __global const float *X, __global const int *labels, __global double *partial,
                     int done, __global const ulong *shape, int vec4, int T, __local float4 *xs4, __local int *ls,
                     __global const float *wts, int has_w)
{
    __local float *xs = (__local float *)xs4; /* rows of XS_ROW(DM) floats */
    const km_shape s = shape_of(shape);
    const int l = get_local_id(0), G = get_local_size(0);
    const ulong g = get_group_id(0), groups = get_num_groups(0);
    const ulong chunk = (s.n + groups - 1) / groups, first = g * chunk;
    const ulong last = done ? first : min(s.n, first + chunk);
    for (int c0 = 0; c0 < s.k; c0 += G) {
        const int c = c0 + l;
        double acc[MAX_DM];
#pragma unroll
        for (int f = 0; f < DM; f++)
            acc[f] = 0.0;
        double cnt = 0.0;
        for (ulong at = first; at < last; at += T) {
            barrier(CLK_LOCAL_MEM_FENCE);
            if (l < T) {
                const ulong i = at + l;
                float x[MAX_DM];
                int label = -1;
                if (i < last) {
                    label = labels[i];
                    if (label >= 0)
                        load_point(DM, X, i, s, vec4, x);
                }
#pragma unroll
                for (int f = 0; f < DM; f++)
                    xs[l * XS_ROW(DM) + f] = label >= 0 ? x[f] : 0.0f;
                xs[l * XS_ROW(DM) + DM] = has_w && label >= 0 ? wts[i] : 1.0f;
                ls[l] = label;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            add_rows(DM, ls, xs4, 0, (int)min((ulong)T, last - at), c, acc, &cnt);
        }
        if (!done && c < s.k) {
            for (int f = 0; f < s.d; f++)
                partial[((ulong)c * (ulong)(s.d + 1) + (ulong)f) * groups + g] = acc[f];
            partial[((ulong)c * (ulong)(s.d + 1) + (ulong)s.d) * groups + g] = cnt;
        }
    }
}

/* This work-item's share of the objective (w D, w = 1 without weights) and
 * of the count of labelled points, the centroid rows read from global
 * memory. */
INLINE void big_objective(const int DM, __global const float *X, __global const int *labels,
                          __global const float *C, __global const ulong *shape, int vec4, __global const float *wts,
                          int has_w, double *obj, double *valid)
{
    const km_shape s = shape_of(shape);
    *obj = 0.0;
    *valid = 0.0;
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        const int l = labels[i];
        if (l < 0)
            continue;
        float x[MAX_DM];
        load_point(DM, X, i, s, vec4, x);
        float dist = 0.0f;
        for (int f = 0; f < s.d; f++) {
            const float t = x[f] - C[l * s.d + f];
            dist += t * t;
        }
        *obj += (has_w ? (double)wts[i] : 1.0) * (double)dist;
        *valid += 1.0;
    }
}

/* km_big_part_*: the phases (state the layer's doubles) and sample weights
 * on a plan with the km_big_* kernels; km_part_sums and km_part_update
 * then serve any k. */
#define KM_BIG_KERNELS(DM)                                                                                         \
    __kernel void km_big_assign_##DM(__global const float *X, __global const uchar *mask, int has_mask,          \
                                     __global const float *C, __global int *labels, __global int *state,          \
                                     __global const double *move2, __global const ulong *shape, int t,            \
                                     double tol, int vec4, int CT, __local float4 *Cs, __local double *red)       \
    {                                                                                                             \
        __local int flag;                                                                                         \
        big_assign(DM, X, mask, has_mask, C, labels, state, move2, shape, t, tol, vec4, CT, Cs, red, &flag);    \
    }                                                                                                             \
    __kernel void km_big_sums_##DM(__global const float *X, __global const int *labels,                          \
                                   __global double *partial, __global const int *state,                           \
                                   __global const ulong *shape, int vec4, int T, __local float4 *xs4,              \
                                   __local int *ls)                                                               \
    {                                                                                                             \
        big_sums(DM, X, labels, partial, state[1], shape, vec4, T, xs4, ls, X, 0);                                 \
    }                                                                                                             \
    __kernel void km_big_objective_##DM(__global const float *X, __global const int *labels,                     \
                                        __global const float *C, __global double *partial,                        \
                                        __global const ulong *shape, int vec4, __local double *scratch)           \
    {                                                                                                             \
        double obj, valid;                                                                                        \
        big_objective(DM, X, labels, C, shape, vec4, X, 0, &obj, &valid);                                         \
        objective_partials(obj, valid, scratch, partial);                                                         \
    }                                                                                                             \
    __kernel void km_big_part_assign_##DM(__global const float *X, __global const uchar *mask, int has_mask,     \
                                          __global const float *C, __global int *labels,                          \
                                          __global const double *state, __global const ulong *shape, int vec4,    \
                                          int CT, __local float4 *Cs)                                             \
    {                                                                                                             \
        big_label(DM, X, mask, has_mask, C, labels, shape_of(shape), vec4, CT, Cs, state[1] != 0.0);            \
    }                                                                                                             \
    __kernel void km_big_part_sums_##DM(__global const float *X, __global const int *labels,                     \
                                        __global double *partial, __global const double *state,                   \
                                        __global const ulong *shape, int vec4, int T, __local float4 *xs4,         \
                                        __local int *ls, __global const float *wts, int has_w)                   \
    {                                                                                                             \
        big_sums(DM, X, labels, partial, state[1] != 0.0, shape, vec4, T, xs4, ls, wts, has_w);                   \
    }                                                                                                             \
    __kernel void km_big_part_objective_##DM(__global const float *X, __global const int *labels,                \
                                             __global const float *C, __global double *partial,                   \
                                             __global const ulong *shape, int vec4, __local double *scratch,      \
                                             __global const float *wts, int has_w)                                \
    {                                                                                                             \
        double obj, valid;                                                                                        \
        big_objective(DM, X, labels, C, shape, vec4, wts, has_w, &obj, &valid);                                   \
        part_objective_partials(obj, valid, scratch, partial);                                                    \
    }

KM_BIG_KERNELS(4)
KM_BIG_KERNELS(8)
KM_BIG_KERNELS(16)
KM_BIG_KERNELS(32)
KM_BIG_KERNELS(64)

/* ---- the seeding's distance pass (dakit/kmeans.h seed_distance): one
 * work-group per block of DK_KMEANS_SEED_BLOCK points, its work-items
 * striding through the block; the reference's float distance, then a tree
 * sum in double. ---- */
#define SEED_BLOCK 1024

__kernel void km_seed_distance(__global const float *X, __global const uchar *mask, int has_mask,
                               __global const float *centre, int has_centre, __global const float *near,
                               int has_near, __global float *out, __global double *blocks,
                               __global const ulong *shape, __local double *scratch, __global const float *wts,
                               int has_w)
{
    const km_shape s = shape_of(shape);
    const ulong b = get_group_id(0), first = b * SEED_BLOCK;
    double sum = 0.0;
    for (ulong i = first + get_local_id(0); i < first + SEED_BLOCK && i < s.n; i += get_local_size(0)) {
        float v = 0.0f;
        if (!has_mask || mask[i]) {
            if (has_centre) {
                for (int f = 0; f < s.d; f++) {
                    const float t = X[i * s.sp + (ulong)f * s.sf] - centre[f];
                    v += t * t;
                }
            } else {
                v = 1.0f;
            }
            if (has_w)
                v = wts[i] * v;
            if (has_near && near[i] < v)
                v = near[i];
        }
        out[i] = v;
        sum += (double)v;
    }
    scratch[get_local_id(0)] = sum;
    tree_sum(scratch);
    if (get_local_id(0) == 0)
        blocks[b] = scratch[0];
}
