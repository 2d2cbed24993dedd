/* dakit cuda plugin, letkf: what the variants' files share.
 *
 * The LETKF (dakit/letkf.h): every variant solves the points' local
 * analyses on the device, a point at a time per thread block or warp.
 *
 * Plan (plan.cu): the grid points' positions, the sorted observations'
 * positions, their original indices and the buckets go to the device once,
 * and k_count (points.cu, with the bucket walk of k_points) counts every
 * point's candidates (rho > 0), so the analysis knows the longest candidate
 * list and sizes its lists (shared memory, or global scratch per block
 * where they do not fit).
 * Analysis: k_obs_space (plan.cu) writes Y (perturbations), departures and
 * 1 / r in sorted order, float64 whatever the dtype; then the variant:
 *   points.cu   "jacobi": k_points, one block per point: the bucket walk of
 *               kit/letkf/local.h with an ordered compaction (the reference's
 *               candidate order), the cap by rank (largest rho, ties to the
 *               lower original index: the reference's set), A and b by 2 x 2
 *               register tiles over chunks of gathered Y rows, cyclic Jacobi
 *               with the round-robin (parallel) ordering (k/2 disjoint
 *               rotations a step, each 2 x 2 block of A rotated on both sides
 *               by one thread, so one step is two barriers), then w, the
 *               transform of the point's row (a = W x through Q^T x, never
 *               forming W), RTPP/RTPS. It takes the points warp.cu leaves;
 *   syevj.cu    "syevj": k_points' selection and A, b for a batch of points
 *               written out, cuSOLVER's cusolverDnDsyevjBatched on the batch,
 *               then k_points' finish;
 *   warp.cu     "warp" (the default): one warp per point, no eigenvectors
 *               in an analysis: A = H T H^T by Householder, then A^-1 and
 *               A^-1/2 on the point's vectors by shifted tridiagonal solves,
 *               a lane each (warp_solves). Up to 40 members k_warp_build
 *               (selection, A and b on the tensor cores) and k_warp_system
 *               (A in registers: the reduction, the solves, the finish);
 *               above, k_warp_system (selection and reduction in shared
 *               memory) and k_warp_rational (warp_rational.cu: the solves
 *               and the finish). Under weight interpolation k_warp_ql
 *               (warp_ql.cu: implicit QL, a thread per point) and
 *               k_warp_transforms follow the system kernel instead.
 * plan.cu lists the variants, picks one, holds the plan and the ops table.
 * Every file is compiled without FMA contraction (-fmad=false; the products
 * that want it call fma()), so a weight is the host's bit for bit where the
 * positions are, and the cap picks the reference's set at ties. */
#ifndef DAKIT_CUDA_LETKF_CUH
#define DAKIT_CUDA_LETKF_CUH

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cusolverDn.h>

#define DK_LETKF_FN __host__ __device__ static inline
#include <dakit/letkf.h>
#include <dakit/kit/letkf/inv_sqrt_host.h>
#include "../cuda_internal.h"

namespace dk_cuda_letkf {

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
    /* weight interpolation: where set, finish writes each point's transform (k x k) here instead of xa */
    double *tout;
};

/* One compiled body, never inlined, for the counting and every analysis
 * kernel, so all see the same weights (each file's copy is the same text
 * under the same flags). */
static __device__ __noinline__ double obs_weight(const dk_letkf_geometry *g, const double *p, const double *q)
{
    double qq[DK_LETKF_POS];
    for (int a = 0; a < DK_LETKF_POS; a++)
        qq[a] = q[a];
    return dk_letkf_weight(g, p, qq);
}

static __device__ long long find_cell(const uint64_t *keys, long long cells, uint64_t key)
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

/* The sorted observation of candidate c (0 .. total): the visit holding it
 * by binary search over the running offsets. */
static __device__ __forceinline__ int candidate_obs(int c, const int *vstart, const int *voff, int visits)
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

/* The cap: the candidates of rank below cap by (rho descending, original
 * index ascending) into sidx/srho at their rank, the work dealt from
 * thread t0 in steps of `step` (a block's threads or a warp's lanes). */
static __device__ __forceinline__ void cap_by_rank(int t0, int step, int count, const int32_t *lidx,
                                                   const double *lrho, const int32_t *order, int cap,
                                                   int32_t *sidx, double *srho)
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

/* the warp variant's (warp.cu, warp_ql.cu, warp_rational.cu) */

const unsigned FULL = 0xffffffffu;

/* The sum over the warp, the same bits in every lane (the butterfly adds
 * the same pair in each lane of a pair). */
static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* y <- H y = H_0 ... H_{k-3} y (shared), the reflectors as the batch keeps
 * them (R: reflector j's v[r] at j * k + r for r > j + 1, tau_j at j * k + j) */
static __device__ void warp_reflect(int k, const double *R, double *ys)
{
    const int lane = threadIdx.x & 31;
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
}

/* The shifted solves of warp_solves: lanes 0 .. R_POLES - 1 each solve
 * (T + shift) z = H^T x, the last lane (T + g) w = H^T b. */
const int R_POLES = DK_LETKF_POLES;
static_assert(R_POLES < 32, "a lane for each shift and one for the mean");
/* sqrt((k - 1) / (g + T)) ~ scale I + sum_l weight[l] (T + shift[l])^-1
 * for T's spectrum in [0, (DK_LETKF_KAPPA - 1) g] (kit/letkf/inv_sqrt_host.h's
 * dk_letkf_solves_setup) */
struct Rational {
    double shift[R_POLES], weight[R_POLES];
    double scale;
};

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
    /* per slot, up to 40 members: A's lower 8 x 8 tiles as k_warp_build's lanes hold them (warp.cu) */
    double *tiles;
    /* k x batch each, slot fastest: T's diagonal and subdiagonal, H^T x (then G y), H^T b */
    double *td, *te, *tu, *tb;
    double *xm; /* batch: the points' background means */
    int32_t *failed;  /* batch: 1 where the jacobi kernel takes the point */
    /* the QL log, each slot's own run: logcap packed rotations (pack_rotation),
     * and sweepcap sweeps' rows (lo, hi: the rotations of rows hi - 1 down to lo) */
    double *lv;
    uint8_t *li;
    int sweepcap;
    int32_t *nlog; /* batch x 2: the rotations and sweeps each slot's log holds */
    double *tout;  /* weight interpolation: the transforms (k x k a point), else NULL */
    Rational rat;  /* an analysis's (tout NULL) shifted solves */
    int32_t *redo; /* n: points for the jacobi kernel */
    int *redo_count;
    int *overflow;
};

/* Per-warp shared doubles of warp_solves' work: the lanes' reciprocal
 * pivots, and their eliminated right-hand sides then weighted solutions,
 * k rows of 32 each. */
__host__ __device__ inline int solves_doubles(int k) { return 2 * k * 32; }

/* The analysis from A = H T H^T without eigenvectors (warp-wide; d, e: T,
 * xh: H^T x, bh: H^T b, all shared): u = sqrt((k - 1) / (g + T)) H^T x
 * and *xam = xm + (H^T x) . (g + T)^-1 H^T b, each lane solving one shifted
 * system by elimination (T + shift is positive definite: no pivoting),
 * lanes 0 .. R_POLES - 1 the approximation's shifts, the last lane g.
 * Returns false, and lists point i for the jacobi kernel, where T reaches
 * beyond the approximation's interval (Gershgorin) or is not finite. */
static __device__ bool warp_solves(const WArgs &a, long long i, const double *d, const double *e, const double *xh,
                                   const double *bh, double *u, double *work, double xm, double *xam)
{
    const int lane = threadIdx.x & 31, k = a.k;
    double gersh = 0.0, total = 0.0;
    for (int l = lane; l < k; l += 32) {
        gersh = fmax(gersh, fabs(d[l]) + fabs(e[l]) + (l > 0 ? fabs(e[l - 1]) : 0.0));
        total += d[l] + e[l] + xh[l] + bh[l];
    }
    for (int o = 16; o > 0; o >>= 1)
        gersh = fmax(gersh, __shfl_xor_sync(FULL, gersh, o));
    /* fmax drops a NaN: a non-finite T counts through the sum */
    total = warp_sum(total);
    if (!(1.0 + gersh / a.g <= DK_LETKF_KAPPA) || !isfinite(total)) {
        if (lane == 0) {
            const int at_ = atomicAdd(a.redo_count, 1);
            a.redo[at_] = (int32_t)i;
        }
        __syncwarp();
        return false;
    }
    const bool exact = lane == R_POLES;
    const double shift = exact ? a.g : a.rat.shift[lane], weight = exact ? 0.0 : a.rat.weight[lane];
    const double *rhs = exact ? bh : xh;
    /* ip[l][lane]; zs[l][lane ^ l], so that the sum's reads down a row's lanes meet no bank twice */
    double *ip = work, *zs = work + k * 32;
    double q = 1.0 / (d[0] + shift), y = rhs[0];
    ip[lane] = q;
    zs[lane] = y;
    for (int l = 1; l < k; l++) {
        const double el = e[l - 1], m = el * q;
        const double piv = fma(-m, el, d[l] + shift);
        y = fma(-m, y, rhs[l]);
        q = 1.0 / piv;
        ip[l * 32 + lane] = q;
        zs[l * 32 + (lane ^ (l & 31))] = y;
    }
    double z = y * q, dot = xh[k - 1] * z;
    zs[(k - 1) * 32 + (lane ^ ((k - 1) & 31))] = weight * z;
    for (int l = k - 2; l >= 0; l--) {
        const int at_ = l * 32 + (lane ^ (l & 31));
        z = fma(-e[l], z, zs[at_]) * ip[l * 32 + lane];
        zs[at_] = weight * z;
        dot = fma(xh[l], z, dot);
    }
    *xam = xm + __shfl_sync(FULL, dot, R_POLES);
    __syncwarp();
    for (int l = lane; l < k; l += 32) {
        double sum = a.rat.scale * xh[l];
        for (int c = 0; c < R_POLES; c++)
            sum += zs[l * 32 + (c ^ (l & 31))];
        u[l] = sum;
    }
    __syncwarp();
    return true;
}

/* RTPP, RTPS, xa = xam + the perturbations u (shared, overwritten) and the
 * spread of point i; xs: k shared doubles of scratch. */
template <typename T>
static __device__ void warp_finish(const WArgs &a, long long i, double xm, double xam, double *u, double *xs)
{
    const int lane = threadIdx.x & 31, k = a.k;
    const T *xb = (const T *)a.xb;
    T *xa = (T *)a.xa;
    double sb = 0.0, sa = 0.0;
    for (int l = lane; l < k; l += 32) {
        const double xl = (double)xb[i * k + l] - xm;
        double v = u[l];
        if (a.rtpp > 0.0)
            v = (1.0 - a.rtpp) * v + a.rtpp * xl;
        xs[l] = xl;
        u[l] = v;
        sb = fma(xl, xl, sb);
        sa = fma(v, v, sa);
    }
    sb = sqrt(warp_sum(sb) / (k - 1));
    sa = sqrt(warp_sum(sa) / (k - 1));
    const double factor = a.rtps > 0.0 && sa > 0.0 ? 1.0 + a.rtps * (sb - sa) / sa : 1.0;
    double mean = 0.0;
    for (int l = lane; l < k; l += 32) {
        const double v = xam + factor * u[l];
        u[l] = v;
        mean += v;
    }
    mean = warp_sum(mean) / k;
    double sp = 0.0;
    for (int l = lane; l < k; l += 32)
        sp += (u[l] - mean) * (u[l] - mean);
    sp = warp_sum(sp);
    if (lane == 0 && a.spread)
        a.spread[i] = sqrt(sp / (k - 1));
    for (int l = lane; l < k; l += 32)
        xa[i * k + l] = (T)u[l];
    __syncwarp();
}

/* A rotation in one double: the smaller of |cs|, |sn| (at most 1/sqrt(2);
 * the other, sqrt(1 - v^2), loses nothing) plus 4 x code, code saying which
 * was kept and the other's sign. Subtracting 4 x code again is exact, so the
 * kept value is off by at most half an ulp of 12, 9e-16: a rotation's
 * error is absolute. */
static __device__ __forceinline__ double pack_rotation(double cs, double sn)
{
    const bool keep_sn = fabs(sn) <= fabs(cs);
    const double v = keep_sn ? sn : cs, other = keep_sn ? cs : sn;
    return v + 4.0 * ((keep_sn ? 0 : 2) + (other < 0.0 ? 1 : 0));
}

static __device__ __forceinline__ void unpack_rotation(double w, double *cs, double *sn)
{
    const int code = (int)floor((w + 2.0) * 0.25);
    const double v = w - 4.0 * code;
    const double other = copysign(sqrt(fmax(0.0, fma(-v, v, 1.0))), (code & 1) ? -1.0 : 1.0);
    *cs = (code & 2) ? v : other;
    *sn = (code & 2) ? other : v;
}

/* Where element l (of rows) of batch slot s lies in the batch's per-point
 * arrays: 32 slots side by side, a group of 32 slots after another, so a
 * warp's accesses are one 256-byte line and a slot's rows stay near. */
static __device__ __forceinline__ long long wslot(long long s, int rows) { return (s >> 5) * 32LL * rows + (s & 31); }
const int WS = 32; /* the stride between a slot's rows */

struct Plan {
    dk_cuda_device *dev;
    dk_letkf_desc desc;
    int syevj; /* the variant */
    int warp;  /* the variant warp */
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
    int w_blocks, w_warps; /* blocks of w_warps warps each */
    int b_blocks;          /* k_warp_build's (up to 40 members; else 0) */
    size_t b_smem;
    size_t w_smem;
    int32_t *d_wlidx, *d_wsidx, *d_wfailed, *d_redo, *d_wnlog;
    double *d_abuf;    /* apply_transforms' interpolated perturbations */
    size_t abuf_bytes;
    int t_warps;   /* warps a block of k_warp_transforms */
    size_t t_smem; /* its shared memory a block */
    double *d_wlrho, *d_wsrho, *d_refl, *d_td, *d_te, *d_tu, *d_tb, *d_wxm, *d_lv, *d_tiles;
    uint8_t *d_li;
};

/* ---- between the files ---- */

/* points.cu: k_count over the plan's points (p->d_count, the largest count
 * into d_overflow[1]); the jacobi kernel's layout, chunk, blocks and global
 * scratch; its shared-memory limit set again before a run (points_prepare);
 * a launch of k_points in mode 0 (the whole analysis), 1 (selection, A and b
 * to the syevj batch) or 2 (the analysis from the batch's eigenpairs) */
dk_status count_candidates(Plan *p, dk_msg *msg);
dk_status size_kernels(Plan *p, dk_msg *msg);
template <typename T> dk_status points_prepare(const Plan *p, dk_msg *msg);
template <typename T> dk_status launch_points(const Plan *p, const Args &a, int mode, int blocks, dk_msg *msg);

/* syevj.cu: the batch and cuSOLVER's handle; the batches of a run */
dk_status plan_syevj(Plan *p, dk_msg *msg);
template <typename T> dk_status run_syevj(Plan *p, Args a, dk_msg *msg);

/* warp.cu: the warp kernels' sizing, lists and batch; the batches of a run,
 * then the points QL left by the jacobi kernel */
dk_status plan_warp(Plan *p, dk_msg *msg);
template <typename T> dk_status run_warp(Plan *p, Args a, dk_msg *msg);

/* warp_ql.cu: k_warp_ql's shared-memory limit (before a run) and a launch
 * over the batch's count points */
dk_status warp_ql_prepare(const WArgs &w, dk_msg *msg);
dk_status launch_warp_ql(const WArgs &w, long long count, cudaStream_t sm, dk_msg *msg);

/* warp_rational.cu: the shifts and weights for the inflation (plan), k_warp_rational's
 * shared-memory limit (before a run) and a launch over the batch's count
 * points */
void plan_rational(WArgs *w, double inflation);
template <typename T> dk_status warp_rational_prepare(const Plan *p, dk_msg *msg);
template <typename T> dk_status launch_warp_rational(const Plan *p, const WArgs &w, long long count, dk_msg *msg);

} // namespace dk_cuda_letkf

#endif
