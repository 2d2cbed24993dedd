/* dakit-opencl kmeans kernels: the definition of dakit/kmeans.h.
 *
 * One Lloyd iteration is three launches, enqueued without waiting:
 *   km_assign  a work-group takes a contiguous chunk of points; each
 *              work-item labels points of it (centroids in local memory),
 *              then the group forms its partial sums (double) of every
 *              (cluster, feature) pair and the counts from the labels it
 *              just wrote: one pair per work-item at a time, no atomics, so
 *              the sums do not depend on scheduling;
 *   km_reduce  one work-group per pair sums the groups' partials by a tree
 *              in local memory;
 *   km_update  one work-group forms the new centroids (the old one for an
 *              empty cluster), the largest move and the stop flag.
 * Every kernel first reads state[1] (done) and does nothing when it is
 * set, so the host can enqueue iterations ahead and look at the flag only
 * now and then. (Nothing returns early: every work-item still passes every
 * barrier, which PoCL's work-group loops require.) Distances and costs are float with contraction off, as in the
 * reference. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define MAX_D 32

typedef struct {
    ulong n, sp, sf, rows, cols;
    int d, k, window, contig;
    float lambda;
} km_shape;

/* The shape travels in a small buffer of ulongs (n, sp, sf, rows, cols, d,
 * k, window, contig, lambda's bits) rather than as a struct argument, whose
 * passing by value some drivers get wrong. */
static km_shape shape_of(__global const ulong *v)
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

static float distance2(const float *x, __local const float *c, int d)
{
    float dist = 0.0f;
    for (int f = 0; f < d; f++) {
        float diff = x[f] - c[f];
        dist += diff * diff;
    }
    return dist;
}

static void load_point(__global const float *X, ulong i, km_shape s, float *x)
{
    for (int f = 0; f < s.d; f++)
        x[f] = X[i * s.sp + (ulong)f * s.sf];
}

/* The least-cost label of point i (ties to the lowest index); prev is NULL
 * for the plain cost. */
static int best_label(km_shape s, ulong i, const float *x, __local const float *C,
                      __global const int *prev)
{
    const long r = s.window / 2;
    long row = 0, col = 0;
    int m = 0;
    if (prev) {
        row = (long)(i / s.cols);
        col = (long)(i % s.cols);
        for (long y = row - r; y <= row + r; y++) {
            if (y < 0 || y >= (long)s.rows)
                continue;
            for (long c = col - r; c <= col + r; c++)
                if (c >= 0 && c < (long)s.cols && !(y == row && c == col) &&
                    prev[(ulong)y * s.cols + (ulong)c] >= 0)
                    m++;
        }
    }
    const float inv_d = 1.0f / (float)s.d;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < s.k; c++) {
        float dist = distance2(x, C + c * s.d, s.d);
        float cost = dist;
        if (prev) {
            int same = 0;
            if (m)
                for (long y = row - r; y <= row + r; y++) {
                    if (y < 0 || y >= (long)s.rows)
                        continue;
                    for (long cx = col - r; cx <= col + r; cx++)
                        if (cx >= 0 && cx < (long)s.cols && !(y == row && cx == col) &&
                            prev[(ulong)y * s.cols + (ulong)cx] == c)
                            same++;
                }
            float share = m ? (float)(m - same) / (float)m : 0.0f;
            float a = s.lambda * (dist * inv_d);
            float b = (1.0f - s.lambda) * share;
            cost = a + b;
        }
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

static void stage_centroids(__global const float *C, __local float *Cs, int kd)
{
    for (int j = get_local_id(0); j < kd; j += get_local_size(0))
        Cs[j] = C[j];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The labels of iteration 0 under contiguity: plain nearest centroid. */
__kernel void km_first_labels(__global const float *X, __global const uchar *mask, int has_mask,
                              __global const float *C, __global int *out, __global const ulong *shape,
                              __local float *Cs)
{
    const km_shape s = shape_of(shape);
    stage_centroids(C, Cs, s.k * s.d);
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        if (has_mask && !mask[i]) {
            out[i] = -1;
            continue;
        }
        float x[MAX_D];
        load_point(X, i, s, x);
        out[i] = best_label(s, i, x, Cs, 0);
    }
}

__kernel void km_assign(__global const float *X, __global const uchar *mask, int has_mask,
                        __global const float *C, __global const int *prev, __global int *cur,
                        __global double *partial, __global const int *state, __global const ulong *shape,
                        ulong chunk, __local float *Cs)
{
    const km_shape s = shape_of(shape);
    const int done = state[1];
    stage_centroids(C, Cs, s.k * s.d);
    const ulong g = get_group_id(0), L = get_local_size(0), l = get_local_id(0);
    const ulong begin = g * chunk, end = done ? begin : min(s.n, begin + chunk);
    for (ulong i = begin + l; i < end; i += L) {
        if (has_mask && !mask[i]) {
            cur[i] = -1;
            continue;
        }
        float x[MAX_D];
        load_point(X, i, s, x);
        cur[i] = best_label(s, i, x, Cs, s.contig ? prev : 0);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    const int stride = s.d + 1, pairs = done ? 0 : s.k * stride;
    for (int p = (int)l; p < pairs; p += (int)L) {
        const int c = p / stride, f = p % stride;
        double sum = 0.0;
        for (ulong i = begin; i < end; i++)
            if (cur[i] == c)
                sum += f < s.d ? (double)X[i * s.sp + (ulong)f * s.sf] : 1.0;
        partial[g * (ulong)pairs + (ulong)p] = sum;
    }
}

/* Tree sum of the work-group's values in scratch (the size a power of two);
 * the total ends in scratch[0]. */
static void tree_sum(__local double *scratch)
{
    for (uint h = get_local_size(0) / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (get_local_id(0) < h)
            scratch[get_local_id(0)] += scratch[get_local_id(0) + h];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Work-group p sums pair p over the groups of km_assign. */
__kernel void km_reduce(__global const double *partial, __global double *total,
                        __global const int *state, ulong groups, int pairs,
                        __local double *scratch)
{
    const int done = state[1];
    const ulong p = get_group_id(0);
    double sum = 0.0;
    for (ulong g = get_local_id(0); !done && g < groups; g += get_local_size(0))
        sum += partial[g * (ulong)pairs + p];
    scratch[get_local_id(0)] = sum;
    tree_sum(scratch);
    if (!done && get_local_id(0) == 0)
        total[p] = scratch[0];
}

/* One work-group: work-item c forms centroid c; then the largest move, the
 * iteration count (state[0]) and the stop flag (state[1]). */
__kernel void km_update(__global const double *total, __global float *C, __global int *state,
                        __global double *move, double tol, __global const ulong *shape, __local double *move2)
{
    const km_shape s = shape_of(shape);
    const int done = state[1];
    const int stride = s.d + 1;
    for (int c = get_local_id(0); !done && c < s.k; c += get_local_size(0)) {
        double count = total[c * stride + s.d], m2 = 0.0;
        if (count > 0)
            for (int f = 0; f < s.d; f++) {
                float next = (float)(total[c * stride + f] / count);
                double diff = (double)next - (double)C[c * s.d + f];
                m2 += diff * diff;
                C[c * s.d + f] = next;
            }
        move2[c] = m2;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!done && get_local_id(0) == 0) {
        double mx = 0.0;
        for (int c = 0; c < s.k; c++)
            mx = fmax(mx, move2[c]);
        move[0] = sqrt(mx);
        state[0] += 1;
        state[1] = sqrt(mx) < tol;
    }
}

/* Per work-group: the objective under the final centroids and the unmasked
 * count, into partial[2 g] and partial[2 g + 1]. */
__kernel void km_objective(__global const float *X, __global const int *labels,
                           __global const float *C, __global double *partial, __global const ulong *shape,
                           __local float *Cs, __local double *scratch)
{
    const km_shape s = shape_of(shape);
    stage_centroids(C, Cs, s.k * s.d);
    double obj = 0.0, valid = 0.0;
    for (ulong i = get_global_id(0); i < s.n; i += get_global_size(0)) {
        int l = labels[i];
        if (l < 0)
            continue;
        float x[MAX_D];
        load_point(X, i, s, x);
        obj += (double)distance2(x, Cs + l * s.d, s.d);
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

