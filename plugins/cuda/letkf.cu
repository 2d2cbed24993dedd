/* dakit cuda plugin: the LETKF (dakit/letkf.h), one thread block per grid
 * point at a time in a persistent grid.
 *
 * Plan: the grid points' positions, the sorted observations' positions,
 * their original indices and the buckets go to the device once, and a
 * kernel counts every point's candidates (rho > 0), so the analysis knows
 * the longest candidate list and sizes its lists (shared memory, or
 * global scratch per block where they do not fit).
 * Analysis:
 *   k_obs_space  Y (perturbations), departures and 1 / r in sorted order,
 *                float64 whatever the dtype;
 *   k_points     per point: the bucket walk of kit/letkf/local.h with an
 *                ordered compaction (the reference's candidate order), the
 *                cap by rank (largest rho, ties to the lower original
 *                index: the reference's set), A and b by 2 x 2 register
 *                tiles over chunks of gathered Y rows, then
 *      "jacobi"  cyclic Jacobi with the round-robin (parallel) ordering:
 *                k/2 disjoint rotations a step, each 2 x 2 block of A
 *                rotated on both sides by one thread, so one step is two
 *                barriers; then w, the transform of the point's row
 *                (a = W x through Q^T x, never forming W), RTPP/RTPS;
 *      "syevj"   the same A for a batch of points written out, cuSOLVER's
 *                cusolverDnDsyevjBatched on the batch, then k_finish.
 * The distances and weights are compiled without FMA contraction
 * (-fmad=false for this file; the products that want it call fma()), so a
 * weight is the host's bit for bit where the positions are, and the cap
 * picks the reference's set at ties. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cusolverDn.h>

#define DK_LETKF_FN __host__ __device__ static inline
#include <dakit/letkf.h>

#include "cuda_internal.h"

namespace {

/* members up to this many (the Jacobi's A must fit a block's shared memory) */
const int MAX_K = 128;
const int MAX_VISITS = 81;
const int WARPS_MAX = 8;

/* Byte offsets of a block's shared memory; -1: not there (global scratch or unused). */
struct Layout {
    long long A, V, Y, WY, dch, xs, bs, ae, ze, ws, as, red, rc, rs, rt, scal;
    long long lrho, srho; /* doubles */
    long long pp, pq, vstart, vlen, voff, wcount, lidx, sidx; /* ints */
    long long bytes;
};

struct Args {
    dk_letkf_geometry geo;
    const double *grid_pos; /* n x DK_LETKF_POS */
    const double *obs_pos;  /* m x DK_LETKF_POS, sorted */
    const int32_t *order;   /* m */
    const uint64_t *ckey;   /* cells */
    const int32_t *cstart;  /* cells + 1 */
    long long cells;
    const double *yp, *dep, *rinv; /* sorted order */
    const void *xb;
    void *xa;
    int32_t *nobs;
    double *spread;
    long long i0, i1; /* the points [i0, i1) */
    int k, kp, cap, ch;
    long long lcap, scap; /* candidate and selection list capacities */
    double g, rtpp, rtps;
    Layout L;
    /* global scratch per block (NULL where shared memory holds it) */
    int32_t *g_lidx, *g_sidx;
    double *g_lrho, *g_srho, *g_v;
    /* syevj: A and b of the batch written out (build), Q, lambda read back (finish) */
    double *bat_A, *bat_b, *bat_lam;
    int *overflow;
    /* MODE 0 over a list of points instead of [i0, i1) where set (the warp variant's leftovers) */
    const int32_t *list;
    const int *list_count;
};

/* One compiled body for the counting and the analysis kernels, so both see
 * the same weights. */
__device__ __noinline__ double obs_weight(const dk_letkf_geometry *g, const double *p, const double *q)
{
    double qq[DK_LETKF_POS];
    for (int a = 0; a < DK_LETKF_POS; a++)
        qq[a] = q[a];
    return dk_letkf_weight(g, p, qq);
}

__device__ long long find_cell(const uint64_t *keys, long long cells, uint64_t key)
{
    long long lo = 0, hi = cells;
    while (lo < hi) {
        long long mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < cells && keys[lo] == key ? lo : -1;
}

template <typename T> __device__ __forceinline__ double load(const T *p, long long i) { return (double)p[i]; }

/* The visited buckets of the point at pos: their ranges and running offsets
 * in shared memory; returns the candidates to test (every thread). */
__device__ int visit_buckets(const Args &a, const dk_letkf_geometry *g, const double *pos, int *vstart, int *voff)
{
    int b[DK_LETKF_POS] = {0, 0, 0, 0};
    for (int d = 0; d < g->dims; d++)
        b[d] = dk_letkf_cell(g, d, pos[d]);
    int visits = dk_letkf_visits(g);
    for (int t = threadIdx.x; t < visits; t += blockDim.x) {
        dk_letkf_key_t key;
        int s = 0, len = 0;
        if (dk_letkf_visit_key(g, b, t, &key)) {
            long long c = find_cell(a.ckey, a.cells, key);
            if (c >= 0) {
                s = a.cstart[c];
                len = a.cstart[c + 1] - s;
            }
        }
        vstart[t] = s;
        voff[t + 1] = len;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        voff[0] = 0;
        for (int t = 0; t < visits; t++)
            voff[t + 1] += voff[t];
    }
    __syncthreads();
    return voff[visits];
}

/* The sorted observation of candidate c (0 .. total): the visit holding it
 * by binary search over the running offsets. */
__device__ __forceinline__ int candidate_obs(int c, const int *vstart, const int *voff, int visits)
{
    int lo = 0, hi = visits; /* voff[lo] <= c < voff[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (voff[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    return vstart[lo] + (c - voff[lo]);
}

/* Plan time: each point's count of observations with rho > 0, and the
 * largest count (atomicMax). One block per point at a time. */
__global__ void k_count(Args a, long long n, int32_t *count, unsigned *max_count)
{
    __shared__ int vstart[MAX_VISITS], voff[MAX_VISITS + 1], wsum[WARPS_MAX];
    __shared__ dk_letkf_geometry geo;
    if (threadIdx.x == 0)
        geo = a.geo;
    __syncthreads();
    const int visits = dk_letkf_visits(&geo);
    for (long long i = blockIdx.x; i < n; i += gridDim.x) {
        double pos[DK_LETKF_POS];
        for (int d = 0; d < DK_LETKF_POS; d++)
            pos[d] = a.grid_pos[i * DK_LETKF_POS + d];
        int total = visit_buckets(a, &geo, pos, vstart, voff);
        int mine = 0;
        for (int c = threadIdx.x; c < total; c += blockDim.x) {
            int j = candidate_obs(c, vstart, voff, visits);
            mine += obs_weight(&geo, pos, a.obs_pos + (long long)j * DK_LETKF_POS) > 0.0;
        }
        for (int o = 16; o > 0; o >>= 1)
            mine += __shfl_down_sync(0xffffffffu, mine, o);
        if (threadIdx.x % 32 == 0)
            wsum[threadIdx.x / 32] = mine;
        __syncthreads();
        if (threadIdx.x == 0) {
            int sum = 0;
            for (int w = 0; w < (int)(blockDim.x / 32); w++)
                sum += wsum[w];
            count[i] = sum;
            atomicMax(max_count, (unsigned)sum);
        }
        __syncthreads();
    }
}

/* Observation space in sorted order, one thread per observation. */
template <typename T>
__global__ void k_obs_space(const T *yb, const double *obs, const int32_t *order, long long m, int k, double *yp,
                            double *dep, double *rinv)
{
    long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (j >= m)
        return;
    long long o = order[j];
    double mean = 0.0;
    for (int l = 0; l < k; l++)
        mean += load(yb, o * k + l);
    mean /= (double)k;
    for (int l = 0; l < k; l++)
        yp[j * k + l] = load(yb, o * k + l) - mean;
    dep[j] = obs[o] - mean;
    rinv[j] = 1.0 / obs[m + o];
}

template <typename P> __device__ __forceinline__ P *at(char *smem, long long off) { return (P *)(smem + off); }

/* The cap: the candidates of rank below cap by (rho descending, original
 * index ascending) into sidx/srho at their rank, the work dealt from
 * thread t0 in steps of `step` (a block's threads or a warp's lanes). */
__device__ __forceinline__ void cap_by_rank(int t0, int step, int count, const int32_t *lidx, const double *lrho,
                                            const int32_t *order, int cap, int32_t *sidx, double *srho)
{
    for (int c = t0; c < count; c += step) {
        double rc = lrho[c];
        int32_t oc = order[lidx[c]];
        int rank = 0;
        for (int d = 0; d < count; d++) {
            double rd = lrho[d];
            rank += rd > rc || (rd == rc && order[lidx[d]] < oc);
        }
        if (rank < cap) {
            sidx[rank] = lidx[c];
            srho[rank] = rc;
        }
    }
}

/* The observations of the point at pos: sorted positions in *idx, weights
 * in *rho (the reference's set; in its order without a cap, by rank with
 * one). Returns how many. */
__device__ int select_obs(const Args &a, const dk_letkf_geometry *geo, char *smem, const double *pos,
                          const int32_t **idx, const double **rho)
{
    const Layout &L = a.L;
    int *vstart = at<int>(smem, L.vstart), *voff = at<int>(smem, L.voff), *wcount = at<int>(smem, L.wcount);
    int32_t *lidx = L.lidx >= 0 ? at<int32_t>(smem, L.lidx) : a.g_lidx + blockIdx.x * a.lcap;
    double *lrho = L.lrho >= 0 ? at<double>(smem, L.lrho) : a.g_lrho + blockIdx.x * a.lcap;
    const int visits = dk_letkf_visits(geo);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int total = visit_buckets(a, geo, pos, vstart, voff);
    long long count = 0;
    for (int base = 0; base < total; base += blockDim.x) {
        int c = base + threadIdx.x, j = -1;
        double r = 0.0;
        if (c < total) {
            j = candidate_obs(c, vstart, voff, visits);
            r = obs_weight(geo, pos, a.obs_pos + (long long)j * DK_LETKF_POS);
        }
        unsigned keep = __ballot_sync(0xffffffffu, r > 0.0);
        if (lane == 0)
            wcount[warp] = __popc(keep);
        __syncthreads();
        long long at_ = count;
        int step = 0;
        for (int w = 0; w < warps; w++) {
            if (w < warp)
                at_ += wcount[w];
            step += wcount[w];
        }
        at_ += __popc(keep & ((1u << lane) - 1u));
        if (r > 0.0) {
            if (at_ < a.lcap) {
                lidx[at_] = j;
                lrho[at_] = r;
            } else
                atomicExch(a.overflow, 1);
        }
        count += step;
        __syncthreads();
    }
    if (count > a.lcap)
        count = a.lcap;
    if (a.cap <= 0 || count <= a.cap) {
        *idx = lidx;
        *rho = lrho;
        return (int)count;
    }
    /* the cap: each candidate's rank by (rho descending, original index ascending) */
    int32_t *sidx = L.sidx >= 0 ? at<int32_t>(smem, L.sidx) : a.g_sidx + blockIdx.x * a.scap;
    double *srho = L.srho >= 0 ? at<double>(smem, L.srho) : a.g_srho + blockIdx.x * a.scap;
    cap_by_rank(threadIdx.x, blockDim.x, count, lidx, lrho, a.order, a.cap, sidx, srho);
    __syncthreads();
    *idx = sidx;
    *rho = srho;
    return a.cap;
}

/* The 2 x 2 tile t of the lower triangle (P >= Q) of h x h tiles. */
__device__ __forceinline__ void tile_of(int t, int *P, int *Q)
{
    int p = (int)((sqrt(8.0 * t + 1.0) - 1.0) * 0.5);
    while ((p + 1) * (p + 2) / 2 <= t)
        p++;
    while (p * (p + 1) / 2 > t)
        p--;
    *P = p;
    *Q = t - p * (p + 1) / 2;
}

/* One chunk of cnt gathered observations added into A's lower-triangle
 * tiles (row stride ld) and b's first nb entries, the work dealt from
 * thread t0 in steps of `step` (a block's threads or a warp's lanes): WY
 * holds w_j Y_j, Y the rows, dch the departures, each row kp apart. */
__device__ __forceinline__ void add_chunk(int t0, int step, int tiles, int nb, int kp, int ld, const double *WY,
                                          const double *Y, const double *dch, int cnt, double *A, double *bs)
{
    for (int t = t0; t < tiles + nb; t += step) {
        if (t >= tiles) {
            int l = t - tiles;
            double s = bs[l];
            for (int q = 0; q < cnt; q++)
                s = fma(WY[q * kp + l], dch[q], s);
            bs[l] = s;
            continue;
        }
        int P, Q;
        tile_of(t, &P, &Q);
        int r0 = 2 * P, c0 = 2 * Q;
        double a00 = A[r0 * ld + c0], a01 = A[r0 * ld + c0 + 1];
        double a10 = A[(r0 + 1) * ld + c0], a11 = A[(r0 + 1) * ld + c0 + 1];
        for (int q = 0; q < cnt; q++) {
            const double *w = WY + q * kp, *y = Y + q * kp;
            double w0 = w[r0], w1 = w[r0 + 1], y0 = y[c0], y1 = y[c0 + 1];
            a00 = fma(w0, y0, a00);
            a01 = fma(w0, y1, a01);
            a10 = fma(w1, y0, a10);
            a11 = fma(w1, y1, a11);
        }
        A[r0 * ld + c0] = a00;
        A[r0 * ld + c0 + 1] = a01;
        A[(r0 + 1) * ld + c0] = a10;
        A[(r0 + 1) * ld + c0 + 1] = a11;
    }
}

/* A = sum_j rho_j / r_j Y_j Y_j^T (kp x kp, zero past k) and b in shared
 * memory, over chunks of ch gathered rows. */
__device__ void accumulate(const Args &a, char *smem, int nsel, const int32_t *idx, const double *rho)
{
    const Layout &L = a.L;
    const int k = a.k, kp = a.kp, h = kp / 2, ch = a.ch;
    double *A = at<double>(smem, L.A), *Y = at<double>(smem, L.Y), *WY = at<double>(smem, L.WY);
    double *dch = at<double>(smem, L.dch), *bs = at<double>(smem, L.bs);
    for (int e = threadIdx.x; e < kp * kp; e += blockDim.x)
        A[e] = 0.0;
    for (int l = threadIdx.x; l < kp; l += blockDim.x)
        bs[l] = 0.0;
    const int tiles = h * (h + 1) / 2;
    for (int base = 0; base < nsel; base += ch) {
        const int cnt = nsel - base < ch ? nsel - base : ch;
        __syncthreads();
        for (int e = threadIdx.x; e < cnt * kp; e += blockDim.x) {
            int q = e / kp, l = e - q * kp;
            long long j = idx[base + q];
            double y = l < k ? a.yp[j * k + l] : 0.0;
            Y[e] = y;
            WY[e] = rho[base + q] * a.rinv[j] * y;
            if (l == 0)
                dch[q] = a.dep[j];
        }
        __syncthreads();
        add_chunk(threadIdx.x, blockDim.x, tiles, k, kp, kp, WY, Y, dch, cnt, A, bs);
    }
    __syncthreads();
    /* the upper triangle from the lower (the diagonal tiles are symmetric already) */
    for (int e = threadIdx.x; e < kp * kp; e += blockDim.x) {
        int r = e / kp, c = e - r * kp;
        if (r / 2 < c / 2)
            A[e] = A[c * kp + r];
    }
    __syncthreads();
}

/* Block-wide sum of v (every thread gets it); red holds WARPS_MAX doubles. */
__device__ double block_sum(double v, double *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < (int)(blockDim.x / 32); w++)
        s += red[w];
    __syncthreads();
    return s;
}

/* A (kp x kp, shared) = V diag(lambda) V^T: lambda on A's diagonal, V row-major kp x kp.
 * Cyclic Jacobi in the round-robin ordering: kp - 1 steps a sweep, each
 * rotating kp / 2 disjoint pairs at once. Rutishauser's formulas and the
 * stopping test of the host's dk_letkf_jacobi. */
__device__ void jacobi(const Args &a, char *smem, double *V)
{
    const Layout &L = a.L;
    const int kp = a.kp, h = kp / 2;
    double *A = at<double>(smem, L.A), *red = at<double>(smem, L.red);
    double *rc = at<double>(smem, L.rc), *rs = at<double>(smem, L.rs), *rt = at<double>(smem, L.rt);
    int *pp = at<int>(smem, L.pp), *pq = at<int>(smem, L.pq);
    for (int e = threadIdx.x; e < kp * kp; e += blockDim.x)
        V[e] = e / kp == e % kp ? 1.0 : 0.0;
    __syncthreads();
    const int tiles = h * (h + 1) / 2;
    for (int sweep = 0; sweep < 30; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int e = threadIdx.x; e < kp * kp; e += blockDim.x) {
            int r = e / kp, c = e - r * kp;
            double v = A[e];
            if (r == c)
                diag = fma(v, v, diag);
            else if (r < c)
                off = fma(v, v, off);
        }
        off = block_sum(off, red);
        diag = block_sum(diag, red);
        if (off <= DBL_EPSILON * DBL_EPSILON * 1e-2 * diag || off < DBL_MIN)
            break;
        for (int step = 0; step < kp - 1; step++) {
            for (int i = threadIdx.x; i < h; i += blockDim.x) {
                int p, q;
                if (i == 0)
                    p = step, q = kp - 1;
                else {
                    p = (step + i) % (kp - 1);
                    q = (step - i + (kp - 1)) % (kp - 1);
                }
                if (p > q) {
                    int t = p;
                    p = q, q = t;
                }
                double apq = A[p * kp + q], c = 1.0, s = 0.0, t = 0.0;
                if (apq != 0.0) {
                    double theta = (A[q * kp + q] - A[p * kp + p]) / (2.0 * apq);
                    t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                    c = 1.0 / sqrt(t * t + 1.0);
                    s = t * c;
                }
                pp[i] = p, pq[i] = q;
                rc[i] = c, rs[i] = s, rt[i] = t;
            }
            __syncthreads();
            /* A <- J^T A J block by block (pairs I >= J), and V <- V J */
            for (int task = threadIdx.x; task < tiles + kp * h; task += blockDim.x) {
                if (task >= tiles) {
                    int u = task - tiles, r = u / h, i = u - r * h;
                    int p = pp[i], q = pq[i];
                    double c = rc[i], s = rs[i], vp = V[r * kp + p], vq = V[r * kp + q];
                    V[r * kp + p] = c * vp - s * vq;
                    V[r * kp + q] = s * vp + c * vq;
                    continue;
                }
                int I, J;
                tile_of(task, &I, &J);
                int p1 = pp[I], q1 = pq[I];
                if (I == J) {
                    double apq = A[p1 * kp + q1], t = rt[I];
                    if (apq != 0.0) {
                        A[p1 * kp + p1] -= t * apq;
                        A[q1 * kp + q1] += t * apq;
                        A[p1 * kp + q1] = A[q1 * kp + p1] = 0.0;
                    }
                    continue;
                }
                int p2 = pp[J], q2 = pq[J];
                double c1 = rc[I], s1 = rs[I], c2 = rc[J], s2 = rs[J];
                double b00 = A[p1 * kp + p2], b01 = A[p1 * kp + q2], b10 = A[q1 * kp + p2], b11 = A[q1 * kp + q2];
                /* rows: (c1 r_p - s1 r_q, s1 r_p + c1 r_q); then columns with (c2, s2) */
                double r00 = c1 * b00 - s1 * b10, r01 = c1 * b01 - s1 * b11;
                double r10 = s1 * b00 + c1 * b10, r11 = s1 * b01 + c1 * b11;
                double n00 = c2 * r00 - s2 * r01, n01 = s2 * r00 + c2 * r01;
                double n10 = c2 * r10 - s2 * r11, n11 = s2 * r10 + c2 * r11;
                A[p1 * kp + p2] = A[p2 * kp + p1] = n00;
                A[p1 * kp + q2] = A[q2 * kp + p1] = n01;
                A[q1 * kp + p2] = A[p2 * kp + q1] = n10;
                A[q1 * kp + q2] = A[q2 * kp + q1] = n11;
            }
            __syncthreads();
        }
    }
}

/* The point's analysis from A = Q diag(lam) Q^T, Q(l, e) = Q[l * qr + e * qc],
 * lam[e * ls], b in bs and the perturbations X in xs (xm in scal[0]):
 * xa, nobs, spread. */
template <typename T>
__device__ void finish(const Args &a, char *smem, long long i, int nsel, const double *Q, long long qr, long long qc,
                       const double *lam, long long ls)
{
    const Layout &L = a.L;
    const int k = a.k;
    double *xs = at<double>(smem, L.xs), *bs = at<double>(smem, L.bs), *ae = at<double>(smem, L.ae);
    double *ze = at<double>(smem, L.ze), *ws = at<double>(smem, L.ws), *as = at<double>(smem, L.as);
    double *scal = at<double>(smem, L.scal);
    for (int e = threadIdx.x; e < k; e += blockDim.x) {
        double ev = a.g + lam[e * ls], qb = 0.0, qx = 0.0;
        for (int l = 0; l < k; l++) {
            double q = Q[l * qr + e * qc];
            qb = fma(q, bs[l], qb);
            qx = fma(q, xs[l], qx);
        }
        ae[e] = qb / ev;
        ze[e] = qx * sqrt((double)(k - 1) / ev);
    }
    __syncthreads();
    for (int l = threadIdx.x; l < k; l += blockDim.x) {
        double w = 0.0, am = 0.0;
        for (int e = 0; e < k; e++) {
            double q = Q[l * qr + e * qc];
            w = fma(q, ae[e], w);
            am = fma(q, ze[e], am);
        }
        if (a.rtpp > 0.0)
            am = (1.0 - a.rtpp) * am + a.rtpp * xs[l];
        ws[l] = w;
        as[l] = am;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double xam = scal[0], sb = 0.0, sa = 0.0;
        for (int l = 0; l < k; l++) {
            xam += xs[l] * ws[l];
            sb += xs[l] * xs[l];
            sa += as[l] * as[l];
        }
        sb = sqrt(sb / (k - 1));
        sa = sqrt(sa / (k - 1));
        double factor = a.rtps > 0.0 && sa > 0.0 ? 1.0 + a.rtps * (sb - sa) / sa : 1.0;
        double mean = 0.0;
        for (int m = 0; m < k; m++) {
            ws[m] = xam + factor * as[m];
            mean += ws[m];
        }
        mean /= k;
        double spread = 0.0;
        for (int m = 0; m < k; m++)
            spread += (ws[m] - mean) * (ws[m] - mean);
        if (a.spread)
            a.spread[i] = sqrt(spread / (k - 1));
        if (a.nobs)
            a.nobs[i] = nsel;
    }
    __syncthreads();
    T *xa = (T *)a.xa;
    for (int m = threadIdx.x; m < k; m += blockDim.x)
        xa[i * k + m] = (T)ws[m];
    __syncthreads();
}

/* The point's background row: X in xs (zero past k), xm in scal[0]. */
template <typename T> __device__ void load_row(const Args &a, char *smem, long long i)
{
    double *xs = at<double>(smem, a.L.xs), *scal = at<double>(smem, a.L.scal);
    const T *xb = (const T *)a.xb;
    for (int l = threadIdx.x; l < a.kp; l += blockDim.x)
        xs[l] = l < a.k ? (double)xb[i * a.k + l] : 0.0;
    __syncthreads();
    if (threadIdx.x == 0) {
        double xm = 0.0;
        for (int l = 0; l < a.k; l++)
            xm += xs[l];
        scal[0] = xm / a.k;
    }
    __syncthreads();
    for (int l = threadIdx.x; l < a.k; l += blockDim.x)
        xs[l] -= scal[0];
    __syncthreads();
}

/* MODE 0: the whole analysis (own Jacobi); 1: selection, A and b written to
 * the batch (syevj); 2: the analysis from the batch's eigenpairs. */
template <typename T, int MODE> __global__ void __launch_bounds__(256) k_points(Args a)
{
    extern __shared__ __align__(16) char smem[];
    /* the geometry in shared memory: the weight function takes its address */
    __shared__ dk_letkf_geometry geo;
    if (threadIdx.x == 0)
        geo = a.geo;
    __syncthreads();
    const long long todo = a.list ? (long long)*a.list_count : a.i1 - a.i0;
    for (long long t = blockIdx.x; t < todo; t += gridDim.x) {
        const long long i = a.list ? (long long)a.list[t] : a.i0 + t, slot = t;
        const int k = a.k, kp = a.kp;
        if constexpr (MODE == 2) {
            double *bs = at<double>(smem, a.L.bs);
            for (int l = threadIdx.x; l < k; l += blockDim.x)
                bs[l] = a.bat_b[slot * k + l];
            load_row<T>(a, smem, i);
            finish<T>(a, smem, i, a.nobs[i], a.bat_A + slot * k * k, 1, k, a.bat_lam + slot * k, 1);
        } else {
            double pos[DK_LETKF_POS];
            for (int d = 0; d < DK_LETKF_POS; d++)
                pos[d] = a.grid_pos[i * DK_LETKF_POS + d];
            const int32_t *idx;
            const double *rho;
            int nsel = select_obs(a, &geo, smem, pos, &idx, &rho);
            accumulate(a, smem, nsel, idx, rho);
            if constexpr (MODE == 1) {
                double *A = at<double>(smem, a.L.A), *bs = at<double>(smem, a.L.bs);
                for (int e = threadIdx.x; e < k * k; e += blockDim.x)
                    a.bat_A[slot * k * k + e] = A[(e / k) * kp + e % k];
                for (int l = threadIdx.x; l < k; l += blockDim.x)
                    a.bat_b[slot * k + l] = bs[l];
                if (threadIdx.x == 0)
                    a.nobs[i] = nsel;
                __syncthreads();
            } else {
                double *V = a.L.V >= 0 ? at<double>(smem, a.L.V) : a.g_v + blockIdx.x * (long long)kp * kp;
                jacobi(a, smem, V);
                load_row<T>(a, smem, i);
                finish<T>(a, smem, i, nsel, V, kp, 1, at<double>(smem, a.L.A), kp + 1);
            }
        }
    }
}

/* ---- the variant "warp": one warp per point, the eigenproblem by tridiagonalization and QL ----
 *
 * A batch of points goes through three kernels:
 *   k_warp_system  one warp per point: the selection (ballot compaction in
 *                  the reference's order; the cap by rank), A and b (on the
 *                  float64 tensor cores, 8 x 8 tiles), the Householder reduction A = H T H^T in the warp's shared
 *                  memory, H^T x and H^T b; T, those two vectors and the
 *                  reflectors go to the batch's arrays;
 *   k_warp_ql      one thread per point: implicit QL on T (T = G L G^T),
 *                  its rotations applied to the two vectors as they come and
 *                  logged; then xam, y = f(L) G^T H^T x and G y by the log
 *                  replayed backwards;
 *   k_warp_finish  one warp per point: a = H (G y), RTPP/RTPS, xa, spread.
 * Only W x and x . w are needed, never W itself, so no eigenvector is
 * formed. A point whose QL does not converge or outgrows its log is left to
 * the jacobi kernel (MODE 0 over a list), as are ensembles above W_MAX_K. */

const int W_MAX_K = 64;  /* members the warp kernels take */
const int W_WARPS = 2;   /* warps a block of the warp kernels */
const int W_QL_ITER = 30; /* QL iterations an eigenvalue before giving up */
const unsigned FULL = 0xffffffffu;

struct WArgs {
    dk_letkf_geometry geo;
    const double *grid_pos, *obs_pos;
    const int32_t *order;
    const uint64_t *ckey;
    const int32_t *cstart;
    long long cells;
    const double *yp, *dep, *rinv;
    const void *xb;
    void *xa;
    int32_t *nobs;
    double *spread;
    long long i0, i1, batch; /* the batch's points [i0, i1); its arrays hold batch slots */
    int k, kp, ld, cap, logcap;
    long long lcap, scap;
    double g, rtpp, rtps;
    /* per warp (global): candidate list and capped selection */
    int32_t *lidx, *sidx;
    double *lrho, *srho;
    /* per slot: reflectors (k x k: reflector j's v[r] at j * k + r for r > j + 1, tau_j at j * k + j) */
    double *refl;
    /* k x batch each, slot fastest: T's diagonal and subdiagonal, H^T x (then G y), H^T b */
    double *td, *te, *tu, *tb;
    double *xm, *xam; /* batch */
    int32_t *failed;  /* batch: 1 where the jacobi kernel takes the point */
    /* the QL log, each slot's own run: logcap packed rotations (pack_rotation),
     * and sweepcap sweeps' rows (lo, hi: the rotations of rows hi - 1 down to lo) */
    double *lv;
    uint8_t *li;
    int sweepcap;
    int32_t *redo; /* n: points for the jacobi kernel */
    int *redo_count;
    int *overflow;
};

/* Where element l (of rows) of batch slot s lies in the batch's per-point
 * arrays: 32 slots side by side, a group of 32 slots after another, so a
 * warp's accesses are one 256-byte line and a slot's rows stay near. */
__device__ __forceinline__ long long wslot(long long s, int rows) { return (s >> 5) * 32LL * rows + (s & 31); }
const int WS = 32; /* the stride between a slot's rows */
const int QL_B = 64; /* threads a block of the QL kernel */

/* The sum over the warp, the same bits in every lane (the butterfly adds
 * the same pair in each lane of a pair). */
__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* Per-warp shared memory, in doubles then ints. */
struct WLayout {
    int A, xs, bs, vs, ws; /* double offsets */
    int vstart, voff;                  /* int offsets past the doubles */
    int doubles, ints, bytes;
};

__host__ __device__ inline WLayout wlayout(int kp)
{
    WLayout L;
    int o = 0;
    L.A = o, o += kp * (kp + 1);
    L.xs = o, o += kp;
    L.bs = o, o += kp;
    L.vs = o, o += kp;
    L.ws = o, o += kp;
    L.doubles = o;
    L.vstart = 0;
    L.voff = MAX_VISITS;
    L.ints = 2 * MAX_VISITS + 2;
    L.bytes = (L.doubles * 8 + L.ints * 4 + 15) / 16 * 16;
    return L;
}

/* The observations of the point at pos (warp-wide): sorted positions in
 * *idx, weights in *rho, in the reference's order, or by rank under the cap.
 * gw: the warp's index among all warps (its global lists). */
__device__ int warp_select(const WArgs &a, const dk_letkf_geometry *geo, const double *pos, int *vstart, int *voff,
                           long long gw, const int32_t **idx, const double **rho)
{
    const int lane = threadIdx.x & 31;
    int b[DK_LETKF_POS] = {0, 0, 0, 0};
    for (int d = 0; d < geo->dims; d++)
        b[d] = dk_letkf_cell(geo, d, pos[d]);
    const int visits = dk_letkf_visits(geo);
    for (int t = lane; t < visits; t += 32) {
        dk_letkf_key_t key;
        int s = 0, len = 0;
        if (dk_letkf_visit_key(geo, b, t, &key)) {
            long long c = find_cell(a.ckey, a.cells, key);
            if (c >= 0) {
                s = a.cstart[c];
                len = a.cstart[c + 1] - s;
            }
        }
        vstart[t] = s;
        voff[t + 1] = len;
    }
    __syncwarp();
    /* running offsets by a warp scan, 32 visits at a time */
    int carry = 0;
    for (int t0 = 0; t0 < visits; t0 += 32) {
        const int t = t0 + lane;
        int v = t < visits ? voff[t + 1] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(FULL, v, o);
            if (lane >= o)
                v += u;
        }
        if (t < visits)
            voff[t + 1] = carry + v;
        carry += __shfl_sync(FULL, v, 31);
    }
    if (lane == 0)
        voff[0] = 0;
    __syncwarp();
    const int total = voff[visits];
    int32_t *lidx = a.lidx + gw * a.lcap;
    double *lrho = a.lrho + gw * a.lcap;
    long long count = 0;
    for (int base = 0; base < total; base += 32) {
        int c = base + lane, j = -1;
        double r = 0.0;
        if (c < total) {
            j = candidate_obs(c, vstart, voff, visits);
            r = obs_weight(geo, pos, a.obs_pos + (long long)j * DK_LETKF_POS);
        }
        unsigned keep = __ballot_sync(FULL, r > 0.0);
        long long at_ = count + __popc(keep & ((1u << lane) - 1u));
        if (r > 0.0) {
            if (at_ < a.lcap) {
                lidx[at_] = j;
                lrho[at_] = r;
            } else
                atomicExch(a.overflow, 1);
        }
        count += __popc(keep);
    }
    __syncwarp();
    if (count > a.lcap)
        count = a.lcap;
    if (a.cap <= 0 || count <= a.cap) {
        *idx = lidx;
        *rho = lrho;
        return (int)count;
    }
    /* the cap: each candidate's rank by (rho descending, original index ascending) */
    int32_t *sidx = a.sidx + gw * a.scap;
    double *srho = a.srho + gw * a.scap;
    cap_by_rank(lane, 32, count, lidx, lrho, a.order, a.cap, sidx, srho);
    __syncwarp();
    *idx = sidx;
    *rho = srho;
    return a.cap;
}

/* D += A B on the tensor cores: one 8 x 8 x 4 float64 product a warp (A's
 * element in each lane at row lane / 4, column lane % 4; B's at row lane % 4,
 * column lane / 4; D's two at row lane / 4, columns 2 (lane % 4) + 0, 1). */
__device__ __forceinline__ void mma_884(double *d, double a_, double b_)
{
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(d[0]), "+d"(d[1])
                 : "d"(a_), "d"(b_));
}

/* Selected row j's weight rho / r, departure and members 8 I + lane / 4
 * (zeros past the selection and past k). */
template <int T8>
__device__ __forceinline__ void gather_rows(const WArgs &a, int j, int nsel, const int32_t *idx, const double *rho,
                                            double *w, double *dep, double *y)
{
    const int r = (threadIdx.x & 31) >> 2, k = a.k;
    long long row = 0;
    if (j < nsel) {
        row = idx[j];
        *w = rho[j] * a.rinv[row];
        *dep = a.dep[row];
    }
#pragma unroll
    for (int I = 0; I < T8; I++) {
        const int c = 8 * I + r;
        y[I] = j < nsel && c < k ? a.yp[row * k + c] : 0.0;
    }
}

/* A = sum_j rho_j / r_j Y_j Y_j^T (8 T8 x 8 T8 in shared memory, leading
 * dimension ld, zero past k, both triangles) and b, four observations at a
 * time: lane (q, r) = (lane % 4, lane / 4) loads observation q's members
 * 8 I + r straight from the gathered ensemble, and each lower 8 x 8 tile of A
 * is one tensor-core product a step, kept in registers until the end. */
template <int T8>
__device__ void warp_accumulate(const WArgs &a, double *A, double *bs, int nsel, const int32_t *idx, const double *rho)
{
    const int lane = threadIdx.x & 31, q = lane & 3, r = lane >> 2, ld = a.ld;
    constexpr int TILES = T8 * (T8 + 1) / 2;
    double acc[TILES][2], bp[T8];
#pragma unroll
    for (int t = 0; t < TILES; t++)
        acc[t][0] = acc[t][1] = 0.0;
#pragma unroll
    for (int I = 0; I < T8; I++)
        bp[I] = 0.0;
    /* the next four rows are loaded while the tensor cores take these four */
    double w = 0.0, dep = 0.0, y[T8];
    gather_rows<T8>(a, q, nsel, idx, rho, &w, &dep, y);
    for (int base = 0; base < nsel; base += 4) {
        double wn = 0.0, depn = 0.0, yn[T8];
        gather_rows<T8>(a, base + 4 + q, nsel, idx, rho, &wn, &depn, yn);
        double wy[T8];
#pragma unroll
        for (int I = 0; I < T8; I++) {
            wy[I] = w * y[I];
            bp[I] = fma(wy[I], dep, bp[I]);
        }
        int t = 0;
#pragma unroll
        for (int I = 0; I < T8; I++)
#pragma unroll
            for (int J = 0; J <= I; J++)
                mma_884(acc[t++], y[I], wy[J]);
        w = wn, dep = depn;
#pragma unroll
        for (int I = 0; I < T8; I++)
            y[I] = yn[I];
    }
    /* the lower triangle, mirrored (a diagonal tile's upper half is the same sum in another order: dropped) */
    int t = 0;
#pragma unroll
    for (int I = 0; I < T8; I++)
#pragma unroll
        for (int J = 0; J <= I; J++, t++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = 8 * I + r, col = 8 * J + 2 * q + h;
                if (row >= col) {
                    A[row * ld + col] = acc[t][h];
                    A[col * ld + row] = acc[t][h];
                }
            }
#pragma unroll
    for (int I = 0; I < T8; I++) {
        double v = bp[I];
        v += __shfl_xor_sync(FULL, v, 1);
        v += __shfl_xor_sync(FULL, v, 2);
        if (q == 0)
            bs[8 * I + r] = v;
    }
    __syncwarp();
}

/* A (k x k, full, shared) = H T H^T, H = H_0 ... H_{k-3}, H_j = I - tau_j
 * v_j v_j^T acting on rows j + 1 .. (v_j[j + 1] = 1): T's diagonal into d,
 * its subdiagonal into e (global, element l at l * stride), v_j[r] for
 * r > j + 1 kept in A[r][j] and tau_j in A[j][j + 1] (both outside what later
 * steps touch). */
__device__ void warp_tridiagonal(int k, int ld, double *A, double *vs, double *ws, double *d, double *e,
                                 long long stride)
{
    const int lane = threadIdx.x & 31;
    for (int j = 0; j < k - 2; j++) {
        const int r0 = j + 1;
        double sig = 0.0;
        for (int r = r0 + 1 + lane; r < k; r += 32) {
            double x = A[r * ld + j];
            sig = fma(x, x, sig);
        }
        sig = warp_sum(sig);
        const double alpha = A[r0 * ld + j];
        if (lane == 0)
            d[j * stride] = A[j * ld + j];
        if (sig == 0.0) {
            /* the column is reduced already: H_j = I */
            if (lane == 0) {
                e[j * stride] = alpha;
                A[j * ld + r0] = 0.0;
            }
            continue;
        }
        const double norm = sqrt(fma(alpha, alpha, sig));
        const double beta = alpha >= 0.0 ? -norm : norm;
        const double tau = (beta - alpha) / beta, scale = 1.0 / (alpha - beta);
        for (int r = r0 + lane; r < k; r += 32) {
            double v = r == r0 ? 1.0 : A[r * ld + j] * scale;
            vs[r] = v;
            if (r > r0)
                A[r * ld + j] = v;
        }
        if (lane == 0) {
            e[j * stride] = beta;
            A[j * ld + r0] = tau;
        }
        __syncwarp();
        /* p = tau A22 v (column r of the symmetric A22 is its row r), w = p - (tau / 2)(p . v) v. The trailing
         * block is S wide: lanes take its columns in groups of cw (8, 16 or 32) and its rows 32 / cw at a time,
         * so a small block still keeps every lane busy. */
        const int S = k - r0, cw = S <= 8 ? 8 : S <= 16 ? 16 : 32, rstep = 32 / cw;
        const int lc = lane & (cw - 1), lr = lane / cw;
        double pv = 0.0;
        for (int c0 = r0; c0 < k; c0 += cw) {
            const int c = c0 + lc;
            double p0 = 0.0, p1 = 0.0;
            if (c < k) {
                int r = r0 + lr;
                for (; r + rstep < k; r += 2 * rstep) {
                    p0 = fma(A[r * ld + c], vs[r], p0);
                    p1 = fma(A[(r + rstep) * ld + c], vs[r + rstep], p1);
                }
                if (r < k)
                    p0 = fma(A[r * ld + c], vs[r], p0);
            }
            double p = p0 + p1;
            for (int o = cw; o < 32; o <<= 1)
                p += __shfl_xor_sync(FULL, p, o);
            p *= tau;
            if (c < k && lr == 0) {
                ws[c] = p;
                pv = fma(p, vs[c], pv);
            }
        }
        pv = warp_sum(pv);
        const double half = 0.5 * tau * pv;
        for (int r = r0 + lane; r < k; r += 32)
            ws[r] = fma(-half, vs[r], ws[r]);
        __syncwarp();
        /* A22 -= v w^T + w v^T */
        for (int c0 = r0; c0 < k; c0 += cw) {
            const int c = c0 + lc;
            if (c >= k)
                continue;
            const double vc = vs[c], wc = ws[c];
            int r = r0 + lr;
            for (; r + rstep < k; r += 2 * rstep) {
                const double v0 = vs[r], w0 = ws[r], v1 = vs[r + rstep], w1 = ws[r + rstep];
                const double a0 = A[r * ld + c], a1 = A[(r + rstep) * ld + c];
                A[r * ld + c] = a0 - fma(v0, wc, w0 * vc);
                A[(r + rstep) * ld + c] = a1 - fma(v1, wc, w1 * vc);
            }
            if (r < k)
                A[r * ld + c] -= fma(vs[r], wc, ws[r] * vc);
        }
        __syncwarp();
    }
    if (lane == 0) {
        d[(k - 2) * stride] = A[(k - 2) * ld + k - 2];
        d[(k - 1) * stride] = A[(k - 1) * ld + k - 1];
        e[(k - 2) * stride] = A[(k - 1) * ld + k - 2];
        e[(k - 1) * stride] = 0.0;
    }
    __syncwarp();
}

/* z <- H^T z = H_{k-3} ... H_0 z for the two shared vectors x and y, the
 * reflectors as warp_tridiagonal left them in A. */
__device__ void warp_reflect_t(int k, int ld, const double *A, double *x, double *y)
{
    const int lane = threadIdx.x & 31;
    for (int j = 0; j < k - 2; j++) {
        const double tau = A[j * ld + j + 1];
        if (tau == 0.0)
            continue;
        double sx = 0.0, sy = 0.0;
        for (int r = j + 1 + lane; r < k; r += 32) {
            double v = r == j + 1 ? 1.0 : A[r * ld + j];
            sx = fma(v, x[r], sx);
            sy = fma(v, y[r], sy);
        }
        sx = warp_sum(sx) * tau;
        sy = warp_sum(sy) * tau;
        for (int r = j + 1 + lane; r < k; r += 32) {
            double v = r == j + 1 ? 1.0 : A[r * ld + j];
            x[r] = fma(-sx, v, x[r]);
            y[r] = fma(-sy, v, y[r]);
        }
        __syncwarp();
    }
}

/* six blocks a multiprocessor: the tridiagonal reduction is a chain of short
 * steps, so more warps in flight hide it (at most 170 registers; 256 for
 * the larger tiles of more than 40 members) */
template <typename T, int T8> __global__ void __launch_bounds__(W_WARPS * 32, T8 <= 5 ? 6 : 4) k_warp_system(WArgs a)
{
    extern __shared__ __align__(16) char smem[];
    __shared__ dk_letkf_geometry geo;
    if (threadIdx.x == 0)
        geo = a.geo;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k;
    const WLayout L = wlayout(a.kp);
    double *base = (double *)(smem + (size_t)warp * L.bytes);
    int *ib = (int *)(base + L.doubles);
    double *A = base + L.A, *xs = base + L.xs, *bs = base + L.bs;
    const long long gw = (long long)blockIdx.x * W_WARPS + warp, nw = (long long)gridDim.x * W_WARPS;
    const long long cnt = a.i1 - a.i0;
    const T *xb = (const T *)a.xb;
    for (long long s = gw; s < cnt; s += nw) {
        const long long i = a.i0 + s;
        double pos[DK_LETKF_POS];
        for (int d = 0; d < DK_LETKF_POS; d++)
            pos[d] = a.grid_pos[i * DK_LETKF_POS + d];
        const int32_t *idx;
        const double *rho;
        int nsel = warp_select(a, &geo, pos, ib + L.vstart, ib + L.voff, gw, &idx, &rho);
        warp_accumulate<T8>(a, A, bs, nsel, idx, rho);
        double xsum = 0.0;
        for (int l = lane; l < k; l += 32) {
            double x = (double)xb[i * k + l];
            xs[l] = x;
            xsum += x;
        }
        const double xm = warp_sum(xsum) / k;
        for (int l = lane; l < k; l += 32)
            xs[l] -= xm;
        const long long o = wslot(s, k);
        warp_tridiagonal(k, a.ld, A, base + L.vs, base + L.ws, a.td + o, a.te + o, WS);
        warp_reflect_t(k, a.ld, A, xs, bs);
        for (int l = lane; l < k; l += 32) {
            a.tu[o + l * WS] = xs[l];
            a.tb[o + l * WS] = bs[l];
        }
        double *R = a.refl + s * k * k;
        for (int e = lane; e < k * k; e += 32) {
            int j = e / k, r = e - j * k;
            if (j < k - 2 && r > j + 1)
                R[e] = A[r * a.ld + j];
            else if (j < k - 2 && r == j)
                R[e] = A[j * a.ld + j + 1];
        }
        if (lane == 0) {
            a.xm[s] = xm;
            if (a.nobs)
                a.nobs[i] = nsel;
        }
        __syncwarp();
    }
}

/* The system kernel for 8 t8 padded members. */
template <typename T> const void *warp_system_of(int t8)
{
    switch (t8) {
    case 1: return (const void *)k_warp_system<T, 1>;
    case 2: return (const void *)k_warp_system<T, 2>;
    case 3: return (const void *)k_warp_system<T, 3>;
    case 4: return (const void *)k_warp_system<T, 4>;
    case 5: return (const void *)k_warp_system<T, 5>;
    case 6: return (const void *)k_warp_system<T, 6>;
    case 7: return (const void *)k_warp_system<T, 7>;
    default: return (const void *)k_warp_system<T, 8>;
    }
}

/* A rotation in one double: the smaller of |cs|, |sn| (at most 1/sqrt(2);
 * the other, sqrt(1 - v^2), loses nothing) plus 4 x code, code saying which
 * was kept and the other's sign. Subtracting 4 x code again is exact, so the
 * kept value is off by at most half an ulp of 12, 9e-16: a rotation's
 * error is absolute. */
__device__ __forceinline__ double pack_rotation(double cs, double sn)
{
    const bool keep_sn = fabs(sn) <= fabs(cs);
    const double v = keep_sn ? sn : cs, other = keep_sn ? cs : sn;
    return v + 4.0 * ((keep_sn ? 0 : 2) + (other < 0.0 ? 1 : 0));
}

__device__ __forceinline__ void unpack_rotation(double w, double *cs, double *sn)
{
    const int code = (int)floor((w + 2.0) * 0.25);
    const double v = w - 4.0 * code;
    const double other = copysign(sqrt(fmax(0.0, fma(-v, v, 1.0))), (code & 1) ? -1.0 : 1.0);
    *cs = (code & 2) ? v : other;
    *sn = (code & 2) ? other : v;
}

/* One thread per point: implicit QL with Wilkinson's shift on T (td, te),
 * each rotation applied to tu and tb and logged; then xam = xm + (G^T H^T
 * x) . (G^T H^T b) / (g + lambda), y = sqrt((k - 1) / (g + lambda)) G^T
 * H^T x, and G y (the log backwards) into tu. */
__global__ void __launch_bounds__(QL_B) k_warp_ql(WArgs a)
{
    /* T's diagonal and subdiagonal in shared memory: the convergence scans and the rotations read them in a
     * dependent chain */
    extern __shared__ double qsm[];
    const long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (s >= a.i1 - a.i0)
        return;
    const int n = a.k;
    const long long o = wslot(s, a.k);
    double *__restrict__ d = qsm + threadIdx.x, *__restrict__ e = qsm + (size_t)n * QL_B + threadIdx.x;
    double *__restrict__ u = a.tu + o, *__restrict__ b = a.tb + o;
    for (int l = 0; l < n; l++) {
        d[l * QL_B] = a.td[o + l * WS];
        e[l * QL_B] = a.te[o + l * WS];
    }
    double *__restrict__ lv = a.lv + s * a.logcap;
    uint8_t *__restrict__ li = a.li + s * 2 * a.sweepcap;
    int nsweep = 0;
    int nrot = 0;
    bool ok = true;
    /* an off-diagonal below eps ||T|| is negligible (the reduction to T left
     * errors of that size): without this floor, the noise eigenvalues of a
     * rank-deficient A (fewer observations than members) iterate long */
    double tnorm = 0.0;
    for (int l = 0; l < n; l++)
        tnorm = fmax(tnorm, fabs(d[l * QL_B]) + fabs(e[l * QL_B]));
    const double negligible = DBL_EPSILON * tnorm;
    for (int l = 0; l < n && ok; l++) {
        int iter = 0;
        for (;;) {
            int m = l;
            for (; m < n - 1; m++) {
                double dd = fabs(d[m * QL_B]) + fabs(d[(m + 1) * QL_B]);
                if (fabs(e[m * QL_B]) <= fmax(DBL_EPSILON * dd, negligible))
                    break;
            }
            if (m == l)
                break;
            if (++iter > W_QL_ITER || nrot + (m - l) > a.logcap || nsweep >= a.sweepcap) {
                ok = false;
                break;
            }
            const double dl = d[l * QL_B], el = e[l * QL_B];
            double g = (d[(l + 1) * QL_B] - dl) / (2.0 * el);
            double r = hypot(g, 1.0);
            g = d[m * QL_B] - dl + el / (g + (g >= 0.0 ? r : -r));
            double sn = 1.0, cs = 1.0, p = 0.0;
            bool restart = false;
            /* row i + 1's d, u and b ride in registers from one rotation to the next (dn, un, bn), and row i - 1's
             * inputs are loaded a rotation ahead: the chain of dependent arithmetic is then the rotation's latency */
            double dn = d[m * QL_B], un = u[m * WS], bn = b[m * WS];
            double ei = e[(m - 1) * QL_B], di = d[(m - 1) * QL_B], ui = u[(m - 1) * WS], bi = b[(m - 1) * WS];
            for (int i = m - 1; i >= l; i--) {
                double e_next = 0.0, d_next = 0.0, u_next = 0.0, b_next = 0.0;
                if (i > l) {
                    e_next = e[(i - 1) * QL_B];
                    d_next = d[(i - 1) * QL_B];
                    u_next = u[(i - 1) * WS];
                    b_next = b[(i - 1) * WS];
                }
                const double f = sn * ei, bb = cs * ei;
                const double r2 = fma(f, f, g * g);
                if (r2 < DBL_MIN) {
                    /* the rotation underflowed: split here and iterate again */
                    if (i + 1 < m) {
                        li[2 * nsweep] = (uint8_t)(i + 1);
                        li[2 * nsweep + 1] = (uint8_t)m;
                        nsweep++;
                    }
                    e[(i + 1) * QL_B] = 0.0;
                    d[(i + 1) * QL_B] = dn - p;
                    u[(i + 1) * WS] = un;
                    b[(i + 1) * WS] = bn;
                    e[m * QL_B] = 0.0;
                    restart = true;
                    break;
                }
                const double inv = rsqrt(r2);
                e[(i + 1) * QL_B] = r2 * inv;
                sn = f * inv;
                cs = g * inv;
                g = dn - p;
                r = fma(di - g, sn, 2.0 * cs * bb);
                p = sn * r;
                d[(i + 1) * QL_B] = g + p;
                g = fma(cs, r, -bb);
                u[(i + 1) * WS] = fma(sn, ui, cs * un);
                un = fma(cs, ui, -sn * un);
                b[(i + 1) * WS] = fma(sn, bi, cs * bn);
                bn = fma(cs, bi, -sn * bn);
                lv[nrot++] = pack_rotation(cs, sn);
                dn = di;
                ei = e_next, di = d_next, ui = u_next, bi = b_next;
            }
            if (restart)
                continue;
            li[2 * nsweep] = (uint8_t)l;
            li[2 * nsweep + 1] = (uint8_t)m;
            nsweep++;
            u[l * WS] = un;
            b[l * WS] = bn;
            d[l * QL_B] -= p;
            e[l * QL_B] = g;
            e[m * QL_B] = 0.0;
        }
    }
    a.failed[s] = !ok;
    if (!ok) {
        int at_ = atomicAdd(a.redo_count, 1);
        a.redo[at_] = (int32_t)(a.i0 + s);
        return;
    }
    double xam = a.xm[s];
    for (int l = 0; l < n; l++) {
        const double ev = a.g + d[l * QL_B];
        xam = fma(u[l * WS], b[l * WS] / ev, xam);
        u[l * WS] *= sqrt((double)(n - 1) / ev);
    }
    a.xam[s] = xam;
    /* G y: the sweeps backwards, each one's rotations up its rows (lo, lo + 1), (lo + 1, lo + 2), ...; the row
     * being rotated rides in c, the next row's value is loaded a rotation ahead */
    int pos = nrot;
    for (int t = nsweep - 1; t >= 0; t--) {
        const int lo = li[2 * t], hi = li[2 * t + 1];
        double c = u[lo * WS], y1 = u[(lo + 1) * WS];
        for (int i = lo; i < hi; i++) {
            const double y1_next = i + 2 <= hi ? u[(i + 2) * WS] : 0.0;
            double cs, sn;
            unpack_rotation(lv[--pos], &cs, &sn);
            u[i * WS] = fma(cs, c, sn * y1);
            c = fma(-sn, c, cs * y1);
            y1 = y1_next;
        }
        u[hi * WS] = c;
    }
}

template <typename T> __global__ void __launch_bounds__(W_WARPS * 32) k_warp_finish(WArgs a)
{
    __shared__ double sh[W_WARPS][2][W_MAX_K];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k;
    double *ys = sh[warp][0], *xs = sh[warp][1];
    const long long gw = (long long)blockIdx.x * W_WARPS + warp, nw = (long long)gridDim.x * W_WARPS;
    const long long cnt = a.i1 - a.i0;
    const T *xb = (const T *)a.xb;
    T *xa = (T *)a.xa;
    for (long long s = gw; s < cnt; s += nw) {
        if (a.failed[s])
            continue;
        const long long i = a.i0 + s;
        const double xm = a.xm[s], xam = a.xam[s];
        const double *R = a.refl + s * k * k;
        for (int l = lane; l < k; l += 32) {
            ys[l] = a.tu[wslot(s, k) + l * WS];
            xs[l] = (double)xb[i * k + l] - xm;
        }
        __syncwarp();
        for (int j = k - 3; j >= 0; j--) {
            const double tau = R[j * k + j];
            if (tau == 0.0)
                continue;
            double sy = 0.0;
            for (int r = j + 1 + lane; r < k; r += 32)
                sy = fma(r == j + 1 ? 1.0 : R[j * k + r], ys[r], sy);
            sy = warp_sum(sy) * tau;
            for (int r = j + 1 + lane; r < k; r += 32)
                ys[r] = fma(-sy, r == j + 1 ? 1.0 : R[j * k + r], ys[r]);
            __syncwarp();
        }
        double sb = 0.0, sa = 0.0;
        for (int l = lane; l < k; l += 32) {
            double v = ys[l];
            if (a.rtpp > 0.0)
                v = (1.0 - a.rtpp) * v + a.rtpp * xs[l];
            ys[l] = v;
            sb = fma(xs[l], xs[l], sb);
            sa = fma(v, v, sa);
        }
        sb = sqrt(warp_sum(sb) / (k - 1));
        sa = sqrt(warp_sum(sa) / (k - 1));
        const double factor = a.rtps > 0.0 && sa > 0.0 ? 1.0 + a.rtps * (sb - sa) / sa : 1.0;
        double mean = 0.0;
        for (int l = lane; l < k; l += 32) {
            double v = xam + factor * ys[l];
            ys[l] = v;
            mean += v;
        }
        mean = warp_sum(mean) / k;
        double sp = 0.0;
        for (int l = lane; l < k; l += 32)
            sp += (ys[l] - mean) * (ys[l] - mean);
        sp = warp_sum(sp);
        if (lane == 0 && a.spread)
            a.spread[i] = sqrt(sp / (k - 1));
        for (int l = lane; l < k; l += 32)
            xa[i * k + l] = (T)ys[l];
        __syncwarp();
    }
}

/* syevj: any nonzero info of the batch into *flag (the largest). */
__global__ void k_syevj_info(const int *info, int count, int *flag)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < count; t += gridDim.x * blockDim.x)
        if (info[t] != 0)
            atomicMax(flag, info[t] > 0 ? info[t] : 1 << 30);
}

/* ---- host side ---- */

struct Plan {
    dk_cuda_device *dev;
    dk_letkf_desc desc;
    int syevj; /* the variant */
    int warp;  /* the variant warp, with members <= W_MAX_K */
    Args a;    /* what every launch shares */
    int threads, blocks;
    long long count_max;
    double *d_grid_pos, *d_obs_pos, *d_yp, *d_dep, *d_rinv;
    int32_t *d_order, *d_cstart, *d_count;
    uint64_t *d_ckey;
    int *d_overflow;
    int32_t *d_lidx, *d_sidx, *d_nobs_tmp;
    double *d_lrho, *d_srho, *d_v;
    /* syevj */
    long long batch;
    double *d_batA, *d_batb, *d_batlam, *d_work;
    int *d_info;
    int lwork;
    cusolverDnHandle_t solver;
    syevjInfo_t params;
    /* warp */
    WArgs w;
    int w_blocks;
    size_t w_smem;
    int32_t *d_wlidx, *d_wsidx, *d_wfailed, *d_redo;
    double *d_wlrho, *d_wsrho, *d_refl, *d_td, *d_te, *d_tu, *d_tb, *d_wxm, *d_wxam, *d_lv;
    uint8_t *d_li;
};

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    if (cudaSetDevice(p->dev->ordinal) == cudaSuccess) {
        void *ptrs[] = {p->d_grid_pos, p->d_obs_pos, p->d_yp,   p->d_dep,   p->d_rinv, p->d_order,  p->d_cstart,
                        p->d_count,    p->d_ckey,    p->d_overflow, p->d_lidx, p->d_sidx, p->d_nobs_tmp, p->d_lrho,
                        p->d_srho,     p->d_v,       p->d_batA, p->d_batb,  p->d_batlam, p->d_work, p->d_info,
                        p->d_wlidx,    p->d_wsidx,   p->d_wfailed, p->d_redo, p->d_wlrho, p->d_wsrho, p->d_refl,
                        p->d_td,       p->d_te,      p->d_tu,   p->d_tb,    p->d_wxm,  p->d_wxam,   p->d_lv,
                        p->d_li};
        for (void *q : ptrs)
            if (q)
                cudaFree(q);
        if (p->params)
            cusolverDnDestroySyevjInfo(p->params);
        if (p->solver)
            cusolverDnDestroy(p->solver);
    }
    (void)cudaGetLastError();
    free(p);
}

/* The shared-memory layout for k members, chunks of ch rows, lists of lcap
 * and scap entries where lists_shared, V where v_shared (and wanted). */
Layout layout(int k, int ch, long long lcap, long long scap, bool lists_shared, bool v_shared)
{
    Layout L;
    const long long kp = k + (k & 1), h = kp / 2;
    long long o = 0;
    auto take = [&](long long bytes) {
        long long at_ = o;
        o = (o + bytes + 15) / 16 * 16;
        return at_;
    };
    L.A = take(kp * kp * 8);
    L.V = v_shared ? take(kp * kp * 8) : -1;
    L.Y = take(ch * kp * 8);
    L.WY = take(ch * kp * 8);
    L.dch = take(ch * 8);
    L.xs = take(kp * 8);
    L.bs = take(kp * 8);
    L.ae = take(kp * 8);
    L.ze = take(kp * 8);
    L.ws = take(kp * 8);
    L.as = take(kp * 8);
    L.red = take(WARPS_MAX * 8);
    L.rc = take(h * 8);
    L.rs = take(h * 8);
    L.rt = take(h * 8);
    L.scal = take(8 * 8);
    L.lrho = lists_shared ? take(lcap * 8) : -1;
    L.srho = lists_shared && scap ? take(scap * 8) : -1;
    L.pp = take(h * 4);
    L.pq = take(h * 4);
    L.vstart = take(MAX_VISITS * 4);
    L.vlen = -1;
    L.voff = take((MAX_VISITS + 1) * 4);
    L.wcount = take(WARPS_MAX * 4);
    L.lidx = lists_shared ? take(lcap * 4) : -1;
    L.sidx = lists_shared && scap ? take(scap * 4) : -1;
    L.bytes = o;
    return L;
}

template <typename T> const void *kernel_of(int mode)
{
    return mode == 0 ? (const void *)k_points<T, 0> : mode == 1 ? (const void *)k_points<T, 1> : (const void *)k_points<T, 2>;
}

/* Copies host data to a fresh device array, ordered on the device's
 * (non-blocking) stream before the plan's kernels. */
template <typename U>
dk_status upload(U **dst, const U *src, size_t count, cudaStream_t stream, const char *what, dk_msg *msg)
{
    CUDA_TRY(cudaMalloc((void **)dst, (count ? count : 1) * sizeof(U)), what);
    if (count)
        CUDA_TRY(cudaMemcpyAsync(*dst, src, count * sizeof(U), cudaMemcpyHostToDevice, stream), what);
    return DK_OK;
}

/* Layout, chunk, block count and the global scratch of the analysis kernels. */
dk_status size_kernels(Plan *p, dk_msg *msg)
{
    const int k = p->a.k;
    const long long lcap = p->count_max > 0 ? p->count_max : 1;
    const long long scap = p->desc.max_obs > 0 && (long long)p->desc.max_obs < lcap ? (long long)p->desc.max_obs : 0;
    const size_t limit = p->dev->smem_optin - 1024; /* the kernels' static shared memory */
    Layout L = {};
    bool found = false, lists_shared = true, v_shared = !p->syevj;
    int ch = 32;
    for (int attempt = 0; attempt < 3 && !found; attempt++) {
        /* first everything in shared memory, then the lists out, then V out */
        lists_shared = attempt == 0;
        v_shared = !p->syevj && attempt < 2;
        for (ch = 32; ch >= 4 && !found; ch /= 2) {
            L = layout(k, ch, lcap, scap, lists_shared, v_shared);
            found = (size_t)L.bytes <= limit;
        }
        if (found)
            ch *= 2; /* undo the loop's last halving */
    }
    if (!found) {
        dk_msg_set(msg, "cuda letkf: %d members need %lld bytes of shared memory a block; this device allows %zu", k,
                   (long long)layout(k, 4, 1, 0, false, false).bytes, limit);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->a.L = L;
    p->a.ch = ch;
    p->a.lcap = lcap;
    p->a.scap = scap;
    p->threads = p->a.kp <= 64 ? 128 : 256;
    int per_sm = 0;
    for (int mode = p->syevj ? 1 : 0; mode <= (p->syevj ? 2 : 0); mode++) {
        const void *kf = p->desc.dtype == DK_F32 ? kernel_of<float>(mode) : kernel_of<double>(mode);
        CUDA_TRY(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes),
                 "setting the letkf kernel's shared memory");
        int b = 0;
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kf, p->threads, (size_t)L.bytes),
                 "the letkf kernel's occupancy");
        per_sm = mode == (p->syevj ? 1 : 0) || b < per_sm ? b : per_sm;
    }
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda letkf: the analysis kernel does not fit a multiprocessor with %lld bytes of shared "
                        "memory and %d threads", (long long)L.bytes, p->threads);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    long long blocks = (long long)per_sm * p->dev->sm_count;
    if (blocks > (long long)p->desc.n)
        blocks = (long long)p->desc.n;
    /* global lists: at most 1 GiB of them; fewer blocks where they are long */
    long long per_block = (lists_shared ? 0 : (lcap + scap) * 12) + (v_shared || p->syevj ? 0 : (long long)p->a.kp * p->a.kp * 8);
    if (per_block > 0 && blocks * per_block > (1LL << 30))
        blocks = (1LL << 30) / per_block > 0 ? (1LL << 30) / per_block : 1;
    p->blocks = (int)blocks;
    if (!lists_shared) {
        CUDA_TRY(cudaMalloc((void **)&p->d_lidx, (size_t)(blocks * lcap) * sizeof(int32_t)), "the letkf candidate lists");
        CUDA_TRY(cudaMalloc((void **)&p->d_lrho, (size_t)(blocks * lcap) * sizeof(double)), "the letkf candidate lists");
        if (scap) {
            CUDA_TRY(cudaMalloc((void **)&p->d_sidx, (size_t)(blocks * scap) * sizeof(int32_t)), "the letkf selections");
            CUDA_TRY(cudaMalloc((void **)&p->d_srho, (size_t)(blocks * scap) * sizeof(double)), "the letkf selections");
        }
    }
    if (!v_shared && !p->syevj)
        CUDA_TRY(cudaMalloc((void **)&p->d_v, (size_t)(blocks * p->a.kp * p->a.kp) * sizeof(double)),
                 "the letkf eigenvectors");
    p->a.g_lidx = p->d_lidx, p->a.g_lrho = p->d_lrho;
    p->a.g_sidx = p->d_sidx, p->a.g_srho = p->d_srho;
    p->a.g_v = p->d_v;
    return DK_OK;
}

dk_status plan_syevj(Plan *p, dk_msg *msg)
{
    const long long k = p->a.k, n = (long long)p->desc.n;
    /* the batch: A (k x k), b and lambda of up to ~256 MiB of A */
    long long batch = (256LL << 20) / (k * k * 8);
    batch = batch < 1 ? 1 : batch > n ? n : batch;
    p->batch = batch;
    CUDA_TRY(cudaMalloc((void **)&p->d_batA, (size_t)(batch * k * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_batb, (size_t)(batch * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_batlam, (size_t)(batch * k) * sizeof(double)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_info, (size_t)batch * sizeof(int)), "the letkf syevj batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_nobs_tmp, (size_t)n * sizeof(int32_t)), "the letkf syevj batch");
    CUSOLVER_TRY(cusolverDnCreate(&p->solver), "cusolverDnCreate");
    CUSOLVER_TRY(cusolverDnSetStream(p->solver, p->dev->stream), "cusolverDnSetStream");
    CUSOLVER_TRY(cusolverDnCreateSyevjInfo(&p->params), "cusolverDnCreateSyevjInfo");
    cusolverStatus_t r = cusolverDnDsyevjBatched_bufferSize(p->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                                                            (int)k, p->d_batA, (int)k, p->d_batlam, &p->lwork, p->params,
                                                            (int)batch);
    if (r == CUSOLVER_STATUS_INVALID_VALUE) {
        /* its documented limit on the matrices' size, where this cuSOLVER keeps it */
        dk_msg_set(msg, "cuda letkf: cuSOLVER's syevjBatched refuses %lld x %lld matrices (members); the variant "
                        "jacobi takes them", k, k);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    CUSOLVER_TRY(r, "cusolverDnDsyevjBatched_bufferSize");
    CUDA_TRY(cudaMalloc((void **)&p->d_work, (size_t)(p->lwork > 0 ? p->lwork : 1) * sizeof(double)),
             "the letkf syevj workspace");
    p->a.bat_A = p->d_batA, p->a.bat_b = p->d_batb, p->a.bat_lam = p->d_batlam;
    return DK_OK;
}

/* The warp variant's kernels: shared memory, blocks, per-warp lists and the
 * batch's arrays. Called after size_kernels (the jacobi kernel takes the
 * leftovers). */
dk_status plan_warp(Plan *p, dk_msg *msg)
{
    const Args &a = p->a;
    WArgs &w = p->w;
    const int k = a.k;
    const long long n = (long long)p->desc.n;
    memset(&w, 0, sizeof w);
    w.geo = a.geo;
    w.grid_pos = a.grid_pos, w.obs_pos = a.obs_pos, w.order = a.order;
    w.ckey = a.ckey, w.cstart = a.cstart, w.cells = a.cells;
    w.yp = a.yp, w.dep = a.dep, w.rinv = a.rinv;
    /* the tensor-core tiles are 8 wide */
    w.k = k, w.kp = (k + 7) / 8 * 8, w.ld = w.kp + 1, w.cap = a.cap;
    w.lcap = a.lcap, w.scap = a.scap > 0 ? a.scap : 1;
    w.g = a.g, w.rtpp = a.rtpp, w.rtps = a.rtps;
    w.overflow = p->d_overflow;
    w.redo_count = p->d_overflow + 3;
    /* a QL iteration for eigenvalue l rotates at most k - 1 - l times; about k^2 / 2 in all is usual */
    w.logcap = 3 * k * k / 2 + 64;
    w.sweepcap = 4 * k + 16; /* about 1.5 QL iterations an eigenvalue is usual */
    const WLayout L = wlayout(w.kp);
    p->w_smem = (size_t)W_WARPS * L.bytes;
    if (p->w_smem > p->dev->smem_optin - 1024) {
        dk_msg_set(msg, "cuda letkf: the warp variant needs %zu bytes of shared memory a block; this device allows %zu",
                   p->w_smem, p->dev->smem_optin - 1024);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    const void *kf = p->desc.dtype == DK_F32 ? warp_system_of<float>(w.kp / 8) : warp_system_of<double>(w.kp / 8);
    CUDA_TRY(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->w_smem),
             "setting the letkf warp kernel's shared memory");
    int per_sm = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kf, W_WARPS * 32, p->w_smem),
             "the letkf warp kernel's occupancy");
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda letkf: the warp kernel does not fit a multiprocessor with %zu bytes of shared memory",
                   p->w_smem);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->w_blocks = per_sm * p->dev->sm_count;
    const long long warps = (long long)p->w_blocks * W_WARPS;
    CUDA_TRY(cudaMalloc((void **)&p->d_wlidx, (size_t)(warps * w.lcap) * sizeof(int32_t)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wlrho, (size_t)(warps * w.lcap) * sizeof(double)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wsidx, (size_t)(warps * w.scap) * sizeof(int32_t)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wsrho, (size_t)(warps * w.scap) * sizeof(double)), "the letkf warp lists");
    const long long per_point = (long long)k * k * 8 + 4LL * k * 8 + 2 * 8 + 4 + (long long)w.logcap * 8 + 2LL * w.sweepcap;
    /* the QL kernel is a thread a point: enough points for every multiprocessor's threads, in at most a quarter of
     * the free memory (at least 1 GiB) */
    size_t free_b = 0, total_b = 0;
    CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "asking the device's free memory");
    const long long budget = (long long)(free_b / 4 > (1ull << 30) ? free_b / 4 : (1ull << 30));
    long long batch = (long long)p->dev->sm_count * 1024;
    if (batch > budget / per_point)
        batch = budget / per_point;
    if (batch > n)
        batch = n;
    if (batch < 1)
        batch = 1;
    w.batch = batch;
    /* rounded up to whole groups of 32 slots (wslot) */
    const size_t bk = (size_t)((batch + 31) / 32 * 32 * k);
    CUDA_TRY(cudaMalloc((void **)&p->d_refl, bk * k * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_td, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_te, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_tu, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_tb, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_wxm, (size_t)batch * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_wxam, (size_t)batch * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_wfailed, (size_t)batch * sizeof(int32_t)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_lv, (size_t)batch * (size_t)w.logcap * sizeof(double)),
             "the letkf warp rotation log");
    CUDA_TRY(cudaMalloc((void **)&p->d_li, (size_t)batch * 2 * (size_t)w.sweepcap), "the letkf warp rotation log");
    CUDA_TRY(cudaMalloc((void **)&p->d_redo, (size_t)n * sizeof(int32_t)), "the letkf warp leftovers");
    w.lidx = p->d_wlidx, w.lrho = p->d_wlrho, w.sidx = p->d_wsidx, w.srho = p->d_wsrho;
    w.refl = p->d_refl, w.td = p->d_td, w.te = p->d_te, w.tu = p->d_tu, w.tb = p->d_tb;
    w.xm = p->d_wxm, w.xam = p->d_wxam, w.failed = p->d_wfailed;
    w.lv = p->d_lv, w.li = p->d_li;
    w.redo = p->d_redo;
    return DK_OK;
}

dk_status plan_fill(Plan *p, const dk_letkf_setup *s, dk_msg *msg)
{
    const dk_letkf_desc *d = &s->desc;
    const size_t n = d->n, m = d->m;
    Args &a = p->a;
    memset(&a, 0, sizeof a);
    a.geo = s->geo;
    a.k = (int)d->members;
    a.kp = a.k + (a.k & 1);
    a.cap = d->max_obs > 0 && d->max_obs < (size_t)INT32_MAX ? (int)d->max_obs : d->max_obs > 0 ? INT32_MAX : 0;
    a.g = (double)(d->members - 1) / d->inflation;
    a.rtpp = d->rtpp;
    a.rtps = d->rtps;
    a.cells = (long long)s->cells;
    double *gp = (double *)malloc(n * DK_LETKF_POS * sizeof(double));
    if (!gp) {
        dk_msg_set(msg, "cuda letkf: out of host memory for the grid's positions");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        dk_letkf_position(&s->geo, d->grid_coords + i * (size_t)d->ncoords, gp + i * DK_LETKF_POS);
    cudaStream_t sm = p->dev->stream;
    dk_status st = upload(&p->d_grid_pos, (const double *)gp, n * DK_LETKF_POS, sm, "copying the letkf grid", msg);
    /* the copies may read gp until the stream gets there */
    cudaError_t e = cudaStreamSynchronize(sm);
    free(gp);
    if (st != DK_OK)
        return st;
    CUDA_TRY(e, "copying the letkf grid");
    if ((st = upload(&p->d_obs_pos, s->obs_pos, m * DK_LETKF_POS, sm, "copying the letkf observations", msg)) ||
        (st = upload(&p->d_order, s->obs_order, m, sm, "copying the letkf observations", msg)) ||
        (st = upload(&p->d_ckey, s->cell_key, s->cells, sm, "copying the letkf buckets", msg)) ||
        (st = upload(&p->d_cstart, s->cell_start, s->cells + 1, sm, "copying the letkf buckets", msg)))
        return st;
    CUDA_TRY(cudaMalloc((void **)&p->d_yp, m * d->members * sizeof(double)), "the letkf observation ensemble");
    CUDA_TRY(cudaMalloc((void **)&p->d_dep, m * sizeof(double)), "the letkf departures");
    CUDA_TRY(cudaMalloc((void **)&p->d_rinv, m * sizeof(double)), "the letkf departures");
    CUDA_TRY(cudaMalloc((void **)&p->d_count, n * sizeof(int32_t)), "the letkf counts");
    /* d_overflow: [0] a list outgrown, [1] the longest list (plan), [2] syevj's worst info, [3] the warp variant's leftovers */
    CUDA_TRY(cudaMalloc((void **)&p->d_overflow, 4 * sizeof(int)), "the letkf counts");
    CUDA_TRY(cudaMemsetAsync(p->d_overflow, 0, 4 * sizeof(int), sm), "the letkf counts");
    a.grid_pos = p->d_grid_pos, a.obs_pos = p->d_obs_pos, a.order = p->d_order;
    a.ckey = p->d_ckey, a.cstart = p->d_cstart;
    a.yp = p->d_yp, a.dep = p->d_dep, a.rinv = p->d_rinv;
    a.overflow = p->d_overflow;
    /* each point's candidates, the longest list (d_overflow[1] holds the maximum) */
    int count_blocks = p->dev->sm_count * 8;
    if ((size_t)count_blocks > n)
        count_blocks = (int)n;
    k_count<<<count_blocks, 128, 0, sm>>>(a, (long long)n, p->d_count, (unsigned *)(p->d_overflow + 1));
    CUDA_TRY(cudaGetLastError(), "launching the letkf count kernel");
    unsigned maxc = 0;
    CUDA_TRY(cudaMemcpyAsync(&maxc, p->d_overflow + 1, sizeof maxc, cudaMemcpyDeviceToHost, sm),
             "counting the letkf candidates");
    CUDA_TRY(cudaStreamSynchronize(sm), "counting the letkf candidates");
    p->count_max = maxc;
    if ((st = size_kernels(p, msg)) != DK_OK)
        return st;
    if (p->syevj && (st = plan_syevj(p, msg)) != DK_OK)
        return st;
    if (p->warp && (st = plan_warp(p, msg)) != DK_OK)
        return st;
    return DK_OK;
}

const char *const variants[] = {"warp", "jacobi", "syevj", NULL};

dk_status plan_create(void *device, const dk_letkf_setup *setup, void **out, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    *out = NULL;
    if (setup->desc.members > (size_t)MAX_K) {
        dk_msg_set(msg, "cuda letkf: %zu members; this backend's local solver takes at most %d", setup->desc.members,
                   MAX_K);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda letkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->desc = setup->desc;
    p->syevj = setup->desc.variant && strcmp(setup->desc.variant, "syevj") == 0;
    /* warp: the default; above W_MAX_K members it runs the jacobi kernel */
    p->warp = (!setup->desc.variant || strcmp(setup->desc.variant, "warp") == 0) &&
              setup->desc.members <= (size_t)W_MAX_K;
    if ((st = plan_fill(p, setup, msg)) != DK_OK) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

template <typename T> dk_status run_analysis(Plan *p, dk_msg *msg)
{
    Args a = p->a;
    cudaStream_t sm = p->dev->stream;
    const long long n = (long long)p->desc.n;
    const size_t smem = (size_t)a.L.bytes;
    /* a kernel's shared-memory limit is the process's, not the plan's: another
     * plan made since (a smaller network) may have lowered it */
    for (int mode = p->syevj ? 1 : 0; mode <= (p->syevj ? 2 : 0); mode++)
        CUDA_TRY(cudaFuncSetAttribute(kernel_of<T>(mode), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                 "setting the letkf kernel's shared memory");
    if (p->warp)
        CUDA_TRY(cudaFuncSetAttribute(warp_system_of<T>(p->w.kp / 8), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)p->w_smem),
                 "setting the letkf warp kernel's shared memory");
    if (p->warp) {
        WArgs w = p->w;
        const size_t ql_smem = (size_t)2 * w.k * QL_B * sizeof(double);
        CUDA_TRY(cudaFuncSetAttribute((const void *)k_warp_ql, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)ql_smem),
                 "setting the letkf QL kernel's shared memory");
        w.xb = a.xb, w.xa = a.xa, w.nobs = a.nobs, w.spread = a.spread;
        CUDA_TRY(cudaMemsetAsync(w.redo_count, 0, sizeof(int), sm), "the letkf warp leftovers");
        for (long long i0 = 0; i0 < n; i0 += w.batch) {
            w.i0 = i0;
            w.i1 = i0 + w.batch < n ? i0 + w.batch : n;
            const long long count = w.i1 - w.i0;
            const long long wb = (count + W_WARPS - 1) / W_WARPS;
            const int blocks = (int)(wb < p->w_blocks ? wb : p->w_blocks);
            void *args[] = {&w};
            CUDA_TRY(cudaLaunchKernel(warp_system_of<T>(w.kp / 8), blocks, W_WARPS * 32, args, p->w_smem, sm),
                     "launching the letkf warp system kernel");
            CUDA_TRY(cudaGetLastError(), "launching the letkf warp system kernel");
            k_warp_ql<<<(int)((count + QL_B - 1) / QL_B), QL_B, ql_smem, sm>>>(w);
            CUDA_TRY(cudaGetLastError(), "launching the letkf QL kernel");
            k_warp_finish<T><<<blocks, W_WARPS * 32, 0, sm>>>(w);
            CUDA_TRY(cudaGetLastError(), "launching the letkf warp finishing kernel");
        }
        /* the points QL left (no convergence, or a longer log than planned) by the jacobi kernel */
        a.list = p->d_redo;
        a.list_count = w.redo_count;
        k_points<T, 0><<<p->blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf analysis kernel");
        return DK_OK;
    }
    if (!p->syevj) {
        a.i0 = 0, a.i1 = n;
        k_points<T, 0><<<p->blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf analysis kernel");
        return DK_OK;
    }
    /* syevj: the selections' counts go to nobs (or a scratch array) between the two kernels */
    if (!a.nobs)
        a.nobs = p->d_nobs_tmp;
    for (long long i0 = 0; i0 < n; i0 += p->batch) {
        a.i0 = i0;
        a.i1 = i0 + p->batch < n ? i0 + p->batch : n;
        const int count = (int)(a.i1 - a.i0);
        const int blocks = count < p->blocks ? count : p->blocks;
        k_points<T, 1><<<blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf selection kernel");
        CUSOLVER_TRY(cusolverDnDsyevjBatched(p->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, a.k, p->d_batA,
                                             a.k, p->d_batlam, p->d_work, p->lwork, p->d_info, p->params, count),
                     "cusolverDnDsyevjBatched");
        k_syevj_info<<<(count + 255) / 256, 256, 0, sm>>>(p->d_info, count, p->d_overflow + 2);
        CUDA_TRY(cudaGetLastError(), "launching the letkf syevj check");
        k_points<T, 2><<<blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf finishing kernel");
    }
    return DK_OK;
}

dk_status analysis(void *handle, const void *xb, const void *yb, const void *obs, void *xa, void *nobs, void *spread,
                   dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    const long long m = (long long)p->desc.m;
    const int k = p->a.k;
    const bool f32 = p->desc.dtype == DK_F32;
    const double *o = (const double *)((const dk_cuda_buffer *)obs)->ptr;
    const void *ybp = ((const dk_cuda_buffer *)yb)->ptr;
    cudaStream_t sm = p->dev->stream;
    const int ob = (int)((m + 255) / 256);
    if (f32)
        k_obs_space<float><<<ob, 256, 0, sm>>>((const float *)ybp, o, p->d_order, m, k, p->d_yp, p->d_dep, p->d_rinv);
    else
        k_obs_space<double><<<ob, 256, 0, sm>>>((const double *)ybp, o, p->d_order, m, k, p->d_yp, p->d_dep, p->d_rinv);
    CUDA_TRY(cudaGetLastError(), "launching the letkf observation kernel");
    if (p->syevj)
        CUDA_TRY(cudaMemsetAsync(p->d_overflow + 2, 0, sizeof(int), sm), "resetting the letkf syevj check");
    p->a.xb = ((const dk_cuda_buffer *)xb)->ptr;
    p->a.xa = ((dk_cuda_buffer *)xa)->ptr;
    p->a.nobs = nobs ? (int32_t *)((dk_cuda_buffer *)nobs)->ptr : NULL;
    p->a.spread = spread ? (double *)((dk_cuda_buffer *)spread)->ptr : NULL;
    st = f32 ? run_analysis<float>(p, msg) : run_analysis<double>(p, msg);
    if (st != DK_OK)
        return st;
    if ((st = dk_cuda_finish(p->dev, "the letkf analysis", msg)) != DK_OK)
        return st;
    if (!(p->dev->caller && p->dev->async)) {
        /* a candidate list longer than the plan counted would be a bug: say so rather than give a wrong answer */
        int flags[3] = {0, 0, 0};
        CUDA_TRY(cudaMemcpyAsync(flags, p->d_overflow, sizeof flags, cudaMemcpyDeviceToHost, p->dev->stream),
                 "checking the letkf lists");
        CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "checking the letkf lists");
        if (flags[0]) {
            dk_msg_set(msg, "cuda letkf: a point found more candidates than the plan counted (%lld); internal error",
                       p->count_max);
            return DK_ERR_BACKEND;
        }
        if (p->syevj && flags[2]) {
            /* syevj's info: i > 0 where a matrix did not converge; its results for that point are not eigenpairs */
            dk_msg_set(msg, "cuda letkf: cuSOLVER's syevjBatched did not converge for a point's %d x %d matrix "
                            "(info %d); the variants warp and jacobi solve it", k, k, flags[2]);
            return DK_ERR_BACKEND;
        }
    }
    return DK_OK;
}

} // namespace

extern "C" const dk_letkf_ops dk_cuda_letkf_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .analysis = analysis,
    .plan_destroy = plan_destroy,
};
