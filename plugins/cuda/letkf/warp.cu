/* dakit cuda plugin, letkf: the variant "warp", the default: one warp per
 * point, A = H T H^T by Householder reflections, then shifted tridiagonal
 * solves (warp_solves, letkf.cuh) instead of an eigen-decomposition.
 *
 * Up to 40 members a batch of points goes through two kernels:
 *   k_warp_build    the selection (ballot compaction in the reference's
 *                   order; the cap by rank), A and b on the float64 tensor
 *                   cores (8 x 8 tiles), A's lower tiles to the batch;
 *   k_warp_system   A in registers (tiles_load), the reduction there
 *                   (warp_tridiagonal_regs), the solves, H
 *                   (warp_reflect_regs) and the finish (warp_finish).
 * Above 40 members A does not fit a warp's registers: k_warp_system
 * selects, forms A and reduces it in shared memory and writes T, H^T x,
 * H^T b and the reflectors to the batch, and k_warp_rational
 * (warp_rational.cu) does the solves and the finish.
 * An analysis needs only W x and x . w, so no eigenvector is formed. Weight
 * interpolation needs the transforms themselves: there k_warp_ql (warp_ql.cu,
 * a thread per point: implicit QL on T = G L G^T, its rotations logged) and
 * k_warp_transforms (the eigenvectors H G and the transform) follow the
 * system kernel instead. A point the solves cannot take or whose QL does not
 * converge is left to the jacobi kernel (MODE 0 over a list). */
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

const int W_WARPS = 2;   /* warps a block of the warp kernels */
const int REG_T8 = 5;    /* up to 8 REG_T8 padded members A stays in registers for its reduction */

/* A's lower 8 x 8 tiles of 8 t8 padded members, in doubles */
__host__ __device__ constexpr int tile_doubles(int t8) { return 64 * t8 * (t8 + 1) / 2; }

/* Per-warp shared memory of k_warp_system, in doubles then ints. Above 40
 * members: A (kp rows of kp + 1), the vectors x, b, v, w, then the
 * visits' offsets. Up to 40 (A in registers, the selection in
 * k_warp_build): the vectors, T (d, e), u, the reflectors' taus and
 * warp_solves' work, no ints. */
struct WLayout {
    int A, xs, bs, vs, ws, d, e, u, taus, work; /* double offsets */
    int vstart, voff;                           /* int offsets past the doubles */
    int doubles, ints, bytes;
};

__host__ __device__ inline WLayout wlayout(int kp)
{
    WLayout L;
    int o = 0;
    const bool regs = kp <= 8 * REG_T8;
    L.A = o, o += regs ? 0 : kp * (kp + 1);
    L.xs = o, o += kp;
    L.bs = o, o += kp;
    L.vs = o, o += kp;
    L.ws = o, o += kp;
    L.d = o, o += regs ? kp : 0;
    L.e = o, o += regs ? kp : 0;
    L.u = o, o += regs ? kp : 0;
    L.taus = o, o += regs ? kp : 0;
    L.work = o, o += regs ? solves_doubles(kp) : 0;
    L.doubles = o;
    L.vstart = 0;
    L.voff = MAX_VISITS;
    L.ints = regs ? 0 : 2 * MAX_VISITS + 2;
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

/* A = sum_j rho_j / r_j Y_j Y_j^T (8 t8 x 8 t8 in shared memory, leading
 * dimension ld, zero past k, both triangles) and b, four observations at a
 * time: lane (q, r) = (lane % 4, lane / 4) loads observation q's members
 * 8 I + r straight from the gathered ensemble, and each lower 8 x 8 tile of A
 * is one tensor-core product a step. Up to 64 members (SHARED false, t8 =
 * T8) the tiles' sums stay in registers until the end; above (SHARED, t8 =
 * kp / 8 up to T8) they are too many, so each tile's running sum stays in A
 * and is read and written around its product (the tridiagonal reduction's
 * k^3 shared traffic dwarfs this). Both give the same sums. */
template <int T8, bool SHARED>
__device__ void warp_accumulate(const WArgs &a, double *A, double *bs, int nsel, const int32_t *idx, const double *rho,
                                double *tiles = nullptr)
{
    const int lane = threadIdx.x & 31, q = lane & 3, r = lane >> 2, ld = a.ld, t8 = SHARED ? a.kp / 8 : T8;
    constexpr int TILES = SHARED ? 1 : T8 * (T8 + 1) / 2;
    double acc[TILES][2], bp[T8];
#pragma unroll
    for (int t = 0; t < TILES; t++)
        acc[t][0] = acc[t][1] = 0.0;
#pragma unroll
    for (int I = 0; I < T8; I++)
        bp[I] = 0.0;
    if (SHARED) {
        for (int e = lane; e < a.kp * ld; e += 32)
            A[e] = 0.0;
        __syncwarp();
    }
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
        for (int I = 0; I < T8; I++) {
            if (I >= t8)
                break;
#pragma unroll
            for (int J = 0; J <= I; J++) {
                if constexpr (SHARED) {
                    double *at = A + (8 * I + r) * ld + 8 * J + 2 * q;
                    double d[2] = {at[0], at[1]};
                    mma_884(d, y[I], wy[J]);
                    at[0] = d[0], at[1] = d[1];
                } else
                    mma_884(acc[t++], y[I], wy[J]);
            }
        }
        w = wn, dep = depn;
#pragma unroll
        for (int I = 0; I < T8; I++)
            y[I] = yn[I];
    }
    /* the lower triangle, mirrored (a diagonal tile's upper half is the same sum in another order: dropped) */
    if constexpr (SHARED) {
        __syncwarp();
        for (int e = lane; e < a.kp * a.kp; e += 32) {
            const int row = e / a.kp, col = e - row * a.kp;
            if (row < col)
                A[row * ld + col] = A[col * ld + row];
        }
    } else if (tiles) {
        /* the lower tiles as the registers hold them (tile t's lane l at 64 t + 2 l), for k_warp_system */
#pragma unroll
        for (int t = 0; t < TILES; t++)
            *(double2 *)(tiles + 64 * t + 2 * lane) = make_double2(acc[t][0], acc[t][1]);
    } else {
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
    }
#pragma unroll
    for (int I = 0; I < T8; I++) {
        double v = bp[I];
        v += __shfl_xor_sync(FULL, v, 1);
        v += __shfl_xor_sync(FULL, v, 2);
        if (q == 0 && I < t8)
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

/* A of 8 NT padded members in registers: lane (s, t) = (lane / 4, lane %
 * 4) holds rows 8 I + s, columns 8 J + 2 t + {0, 1} of every 8 x 8 tile
 * (I, J), both triangles (the tensor cores' accumulator layout), loaded from
 * the lower tiles k_warp_build wrote: an element above the diagonal is its
 * mirror's, which lane 4 (2 t + h) + s / 2 holds as its (s % 2)-th of tile
 * (J, I). */
template <int NT> __device__ __forceinline__ void tiles_load(double (&at)[NT][NT][2], const double *tiles)
{
    const int lane = threadIdx.x & 31, s = lane >> 2, t = lane & 3;
#pragma unroll
    for (int I = 0; I < NT; I++)
#pragma unroll
        for (int J = 0; J < NT; J++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int own = 64 * (I * (I + 1) / 2 + J) + 2 * lane + h;
                const int mirror = 64 * (J * (J + 1) / 2 + I) + 2 * (4 * (2 * t + h) + (s >> 1)) + (s & 1);
                const bool lower = I > J || (I == J && s >= 2 * t + h);
                at[I][J][h] = tiles[lower ? own : mirror];
            }
}

/* The reduction of warp_tridiagonal and warp_reflect_t in one pass with A
 * in registers (tiles_load's layout), so the product A v is a lane's own
 * sums across its columns and two shuffles, and the rank-2 update is a
 * lane's own. Step j's column comes from the lanes of t = (j % 8) / 2; v
 * and w pass through shared memory (vs, ws) from rows to columns. H^T x and
 * H^T b (xs, bs, shared) are updated as each H_j is found. T goes to d, e
 * (element l at l * dstride). KEEP: each reflector stays where its column
 * was (v_j[r] for r > j + 1 in at's column j; tau_j in taus[j]) for
 * warp_reflect_regs; else the reflectors go to R (v_j[r] at j k + r, tau_j
 * at j k + j) and H^T x, H^T b to tu, tb (stride WS) for the QL path. */
template <int NT, bool KEEP>
__device__ __forceinline__ void warp_tridiagonal_regs(double (&at)[NT][NT][2], int k, double *vs, double *ws,
                                                      double *xs, double *bs, double *d, double *e,
                                                      long long dstride, double *taus, double *tu, double *tb,
                                                      double *R)
{
    const int lane = threadIdx.x & 31, s = lane >> 2, t = lane & 3;
    for (int r = lane; r < 8 * NT; r += 32) {
        if (r >= k)
            xs[r] = bs[r] = 0.0;
        vs[r] = ws[r] = 0.0;
    }
    __syncwarp();
#pragma unroll
    for (int J = 0; J < NT; J++) {
        for (int jj = 0; jj < 8; jj++) {
            const int j = 8 * J + jj, r0 = j + 1;
            if (j >= k - 2)
                break;
            const int ct = jj >> 1, ch = jj & 1;
            /* column j below the diagonal block's row j: x_r = A[r][j] in the lanes of t = ct */
            double xv[NT], sig = 0.0;
#pragma unroll
            for (int I = 0; I < NT; I++) {
                xv[I] = 0.0;
                if (I >= J) {
                    const double val = ch ? at[I][J][1] : at[I][J][0];
                    xv[I] = t == ct ? val : 0.0;
                    if (8 * I + s > r0)
                        sig = fma(xv[I], xv[I], sig);
                }
            }
            /* the row r0 = j + 1 and the diagonal j sit in tile row J (or J + 1 for r0 when j % 8 = 7) */
            const double at_r0 = jj == 7 && J + 1 < NT ? xv[J + 1 < NT ? J + 1 : J] : xv[J];
            const double alpha = __shfl_sync(FULL, at_r0, 4 * ((jj + 1) & 7) + ct);
            const double dj = __shfl_sync(FULL, xv[J], 4 * jj + ct);
            /* the column's lanes differ in s alone */
#pragma unroll
            for (int o = 4; o < 32; o <<= 1)
                sig += __shfl_xor_sync(FULL, sig, o);
            sig = __shfl_sync(FULL, sig, ct);
            if (lane == 0)
                d[j * dstride] = dj;
            if (sig == 0.0) {
                /* the column is reduced already: H_j = I */
                if (lane == 0) {
                    e[j * dstride] = alpha;
                    if (KEEP)
                        taus[j] = 0.0;
                    else
                        R[j * k + j] = 0.0;
                }
                if (!KEEP)
                    for (int r = j + 2 + lane; r < k; r += 32)
                        R[j * k + r] = 0.0;
                continue;
            }
            const double norm = sqrt(fma(alpha, alpha, sig));
            const double beta = alpha >= 0.0 ? -norm : norm;
            const double tau = (beta - alpha) / beta, scale = 1.0 / (alpha - beta);
            if (lane == 0) {
                e[j * dstride] = beta;
                if (KEEP)
                    taus[j] = tau;
                else
                    R[j * k + j] = tau;
            }
            /* rows above r0 in the trailing tiles written as zeros: with those of the earlier tiles (zero since
             * their own steps) v is zero above r0 */
#pragma unroll
            for (int I = 0; I < NT; I++) {
                const int r = 8 * I + s;
                if (I >= J && t == ct) {
                    const double v = r < r0 ? 0.0 : r == r0 ? 1.0 : xv[I] * scale;
                    vs[r] = v;
                    if (KEEP && r > r0) {
                        /* column j is read no more: it keeps v_j */
                        if (ch)
                            at[I][J][1] = v;
                        else
                            at[I][J][0] = v;
                    }
                }
            }
            __syncwarp();
            /* v by rows and by columns; p = tau A v by rows (a lane's sums over its columns, then its row's four
             * lanes); and the dots of v with p, x and b */
            double vr[NT], pr[NT];
#pragma unroll
            for (int I = 0; I < NT; I++) {
                vr[I] = vs[8 * I + s];
                pr[I] = 0.0;
            }
#pragma unroll
            for (int J2 = 0; J2 < NT; J2++) {
                if (J2 < J)
                    continue;
                const double2 vc = *(const double2 *)(vs + 8 * J2 + 2 * t);
#pragma unroll
                for (int I = 0; I < NT; I++)
                    if (I >= J)
                        pr[I] = fma(at[I][J2][0], vc.x, fma(at[I][J2][1], vc.y, pr[I]));
            }
            double pv = 0.0, xv_ = 0.0, bv_ = 0.0;
#pragma unroll
            for (int I = 0; I < NT; I++) {
                if (I < J)
                    continue;
                pr[I] += __shfl_xor_sync(FULL, pr[I], 1);
                pr[I] += __shfl_xor_sync(FULL, pr[I], 2);
                pr[I] *= tau;
                pv = fma(pr[I], vr[I], pv);
                xv_ = fma(xs[8 * I + s], vr[I], xv_);
                bv_ = fma(bs[8 * I + s], vr[I], bv_);
            }
            /* the four lanes of a row hold the same sums: the rows' total over s alone */
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                pv += __shfl_xor_sync(FULL, pv, o);
                xv_ += __shfl_xor_sync(FULL, xv_, o);
                bv_ += __shfl_xor_sync(FULL, bv_, o);
            }
            const double half = 0.5 * tau * pv, cx = tau * xv_, cb = tau * bv_;
            double *wr = pr; /* w = p - (tau / 2)(p . v) v in place, zero above r0 */
#pragma unroll
            for (int I = 0; I < NT; I++) {
                wr[I] = 8 * I + s >= r0 ? fma(-half, vr[I], pr[I]) : 0.0;
                if (I >= J && t == 0) {
                    const int r = 8 * I + s;
                    ws[r] = wr[I];
                    xs[r] = fma(-cx, vr[I], xs[r]);
                    bs[r] = fma(-cb, vr[I], bs[r]);
                }
            }
            __syncwarp();
            /* A22 -= v w^T + w v^T on the trailing tiles (v and w are zero above row r0) */
#pragma unroll
            for (int J2 = 0; J2 < NT; J2++) {
                if (J2 < J)
                    continue;
                const double2 vc = *(const double2 *)(vs + 8 * J2 + 2 * t);
                const double2 wc = *(const double2 *)(ws + 8 * J2 + 2 * t);
#pragma unroll
                for (int I = 0; I < NT; I++) {
                    if (I < J)
                        continue;
                    at[I][J2][0] = fma(-vr[I], wc.x, fma(-wr[I], vc.x, at[I][J2][0]));
                    at[I][J2][1] = fma(-vr[I], wc.y, fma(-wr[I], vc.y, at[I][J2][1]));
                }
            }
            if (!KEEP)
                for (int r = j + 2 + lane; r < k; r += 32)
                    R[j * k + r] = vs[r];
            __syncwarp();
        }
    }
    /* the last 2 x 2 block, where no reflector is left to find */
    double last[3] = {0.0, 0.0, 0.0};
#pragma unroll
    for (int I = 0; I < NT; I++)
#pragma unroll
        for (int J = 0; J < NT; J++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = 8 * I + s, c = 8 * J + 2 * t + h;
                if (r == k - 2 && c == k - 2)
                    last[0] = at[I][J][h];
                if (r == k - 1 && c == k - 1)
                    last[1] = at[I][J][h];
                if (r == k - 1 && c == k - 2)
                    last[2] = at[I][J][h];
            }
#pragma unroll
    for (int q = 0; q < 3; q++)
        last[q] = warp_sum(last[q]);
    if (lane == 0) {
        d[(k - 2) * dstride] = last[0];
        d[(k - 1) * dstride] = last[1];
        e[(k - 2) * dstride] = last[2];
        e[(k - 1) * dstride] = 0.0;
    }
    if (!KEEP)
        for (int l = lane; l < k; l += 32) {
            tu[l * WS] = xs[l];
            tb[l * WS] = bs[l];
        }
    __syncwarp();
}

/* u <- H u = H_0 ... H_{k-3} u (shared), the reflectors where
 * warp_tridiagonal_regs<NT, true> kept them: v_j[r] in the lanes of t = (j %
 * 8) / 2 at column j, rows r > j + 1 (v_j[j + 1] = 1), tau_j in taus. */
template <int NT>
__device__ __forceinline__ void warp_reflect_regs(const double (&at)[NT][NT][2], int k, const double *taus, double *u)
{
    const int lane = threadIdx.x & 31, s = lane >> 2, t = lane & 3;
#pragma unroll
    for (int J = NT - 1; J >= 0; J--) {
        for (int jj = 7; jj >= 0; jj--) {
            const int j = 8 * J + jj, r0 = j + 1;
            if (j >= k - 2)
                continue;
            const double tau = taus[j];
            if (tau == 0.0)
                continue;
            const int ct = jj >> 1, ch = jj & 1;
            double vr[NT], dot = 0.0;
#pragma unroll
            for (int I = 0; I < NT; I++) {
                const int r = 8 * I + s;
                const double val = ch ? at[I][J][1] : at[I][J][0];
                vr[I] = I < J || t != ct || r < r0 ? 0.0 : r == r0 ? 1.0 : val;
                /* u's padding rows (k and up) are never written, and 0 x a NaN left in shared memory is NaN */
                if (I >= J && r < k)
                    dot = fma(vr[I], u[r], dot);
            }
#pragma unroll
            for (int o = 4; o < 32; o <<= 1)
                dot += __shfl_xor_sync(FULL, dot, o);
            const double c = tau * __shfl_sync(FULL, dot, ct);
#pragma unroll
            for (int I = 0; I < NT; I++)
                if (I >= J && t == ct && 8 * I + s >= r0 && 8 * I + s < k)
                    u[8 * I + s] = fma(-c, vr[I], u[8 * I + s]);
            __syncwarp();
        }
    }
}

/* The point's background members less their mean into xs (zeros for
 * transforms, which have none), warp-wide; returns the mean. */
template <typename T> __device__ double warp_centre(const WArgs &a, long long i, double *xs)
{
    const int lane = threadIdx.x & 31, k = a.k;
    const T *xb = (const T *)a.xb;
    double xsum = 0.0;
    for (int l = lane; l < k; l += 32) {
        const double x = xb ? (double)xb[i * k + l] : 0.0;
        xs[l] = x;
        xsum += x;
    }
    const double xm = warp_sum(xsum) / k;
    for (int l = lane; l < k; l += 32)
        xs[l] -= xm;
    return xm;
}

/* Slot s (point i) keeps its mean; the point's observation count for the caller */
__device__ inline void warp_record(const WArgs &a, long long s, long long i, double xm, int nsel)
{
    if ((threadIdx.x & 31) == 0) {
        a.xm[s] = xm;
        if (a.nobs)
            a.nobs[i] = nsel;
    }
    __syncwarp();
}

/* Per-warp shared memory of k_warp_build: the visits' offsets (ints), then
 * the centred background x and b (doubles). */
__host__ __device__ inline int build_bytes(int kp) { return (2 * MAX_VISITS + 2) * 4 + 2 * kp * 8 + 16; }

/* Up to 40 members the system's first half, one warp a point and no
 * reduction, so that its latency-bound search and gathers run in many
 * warps (the reduction needs about 250 registers a lane): the selection, A
 * and b on the tensor cores (A's lower tiles to the batch's tiles, as the
 * registers hold them), the centred x, the mean and nobs. */
template <typename T, int T8> __global__ void __launch_bounds__(W_WARPS * 32, 8) k_warp_build(WArgs a)
{
    extern __shared__ __align__(16) char smem[];
    __shared__ dk_letkf_geometry geo;
    if (threadIdx.x == 0)
        geo = a.geo;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k, warps = blockDim.x / 32;
    char *base = smem + (size_t)warp * build_bytes(a.kp);
    int *vstart = (int *)base, *voff = vstart + MAX_VISITS;
    double *xs = (double *)(base + ((2 * MAX_VISITS + 2) * 4 + 15) / 16 * 16), *bs = xs + a.kp;
    const long long gw = (long long)blockIdx.x * warps + warp, nw = (long long)gridDim.x * warps;
    const long long cnt = a.i1 - a.i0;
    for (long long s = gw; s < cnt; s += nw) {
        const long long i = a.i0 + s, o = wslot(s, k);
        double pos[DK_LETKF_POS];
        for (int d = 0; d < DK_LETKF_POS; d++)
            pos[d] = a.grid_pos[i * DK_LETKF_POS + d];
        const int32_t *idx;
        const double *rho;
        const int nsel = warp_select(a, &geo, pos, vstart, voff, gw, &idx, &rho);
        warp_accumulate<T8, false>(a, nullptr, bs, nsel, idx, rho, a.tiles + s * tile_doubles(T8));
        const double xm = warp_centre<T>(a, i, xs);
        for (int l = lane; l < k; l += 32) {
            a.tu[o + l * WS] = xs[l];
            a.tb[o + l * WS] = bs[l];
        }
        warp_record(a, s, i, xm, nsel);
    }
}

template <typename T> const void *warp_build_of(int t8)
{
    switch (t8) {
    case 1: return (const void *)k_warp_build<T, 1>;
    case 2: return (const void *)k_warp_build<T, 2>;
    case 3: return (const void *)k_warp_build<T, 3>;
    case 4: return (const void *)k_warp_build<T, 4>;
    case 5: return (const void *)k_warp_build<T, 5>;
    default: return nullptr;
    }
}

/* Six blocks a multiprocessor up to 32 members (at most 170 registers),
 * four above: the tridiagonal reduction of 40 members with A in registers
 * takes about 250, and is slower in fewer (more warps, but values spilled
 * or recomputed). T8 0: more than 64 members (warp_accumulate in shared
 * memory), where shared memory limits the blocks and a block may be one
 * warp (blockDim). */
template <typename T, int T8>
__global__ void __launch_bounds__(W_WARPS * 32, T8 == 0 ? 1 : T8 <= 4 ? 6 : 4) k_warp_system(WArgs a)
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
    const int warps = blockDim.x / 32;
    const long long gw = (long long)blockIdx.x * warps + warp, nw = (long long)gridDim.x * warps;
    const long long cnt = a.i1 - a.i0;
    for (long long s = gw; s < cnt; s += nw) {
        const long long i = a.i0 + s;
        const long long o = wslot(s, k);
        double *R = a.refl + s * k * k;
        if constexpr (T8 >= 1 && T8 <= REG_T8) {
            /* k_warp_build has selected, accumulated and centred */
            for (int l = lane; l < k; l += 32) {
                xs[l] = a.tu[o + l * WS];
                bs[l] = a.tb[o + l * WS];
            }
            double at[T8][T8][2];
            tiles_load<T8>(at, a.tiles + s * tile_doubles(T8));
            if (a.tout) {
                /* weight interpolation: T, H^T b and the reflectors for the QL path */
                warp_tridiagonal_regs<T8, false>(at, k, base + L.vs, base + L.ws, xs, bs, a.td + o, a.te + o, WS,
                                                 nullptr, a.tu + o, a.tb + o, R);
                continue;
            }
            double *d = base + L.d, *e = base + L.e, *u = base + L.u;
            warp_tridiagonal_regs<T8, true>(at, k, base + L.vs, base + L.ws, xs, bs, d, e, 1, base + L.taus,
                                            nullptr, nullptr, nullptr);
            const double xm = a.xm[s];
            double xam;
            if (!warp_solves(a, i, d, e, xs, bs, u, base + L.work, xm, &xam))
                continue;
            warp_reflect_regs<T8>(at, k, base + L.taus, u);
            warp_finish<T>(a, i, xm, xam, u, d);
        } else {
        double pos[DK_LETKF_POS];
        for (int d = 0; d < DK_LETKF_POS; d++)
            pos[d] = a.grid_pos[i * DK_LETKF_POS + d];
        const int32_t *idx;
        const double *rho;
        int nsel = warp_select(a, &geo, pos, ib + L.vstart, ib + L.voff, gw, &idx, &rho);
        if constexpr (T8 == 0)
            warp_accumulate<MAX_K / 8, true>(a, A, bs, nsel, idx, rho);
        else
            warp_accumulate<T8, false>(a, A, bs, nsel, idx, rho);
        const double xm = warp_centre<T>(a, i, xs);
        warp_tridiagonal(k, a.ld, A, base + L.vs, base + L.ws, a.td + o, a.te + o, WS);
        warp_reflect_t(k, a.ld, A, xs, bs);
        for (int l = lane; l < k; l += 32) {
            a.tu[o + l * WS] = xs[l];
            a.tb[o + l * WS] = bs[l];
        }
        for (int e = lane; e < k * k; e += 32) {
            int j = e / k, r = e - j * k;
            if (j < k - 2 && r > j + 1)
                R[e] = A[r * a.ld + j];
            else if (j < k - 2 && r == j)
                R[e] = A[j * a.ld + j + 1];
        }
        warp_record(a, s, i, xm, nsel);
        }
    }
}

/* The system kernel for 8 t8 padded members. */
template <typename T> const void *warp_system_of(int t8)
{
    if (t8 > 8)
        return (const void *)k_warp_system<T, 0>;
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

/* Shared doubles a warp of k_warp_transforms: V (k columns of k + 1), w and the factors. */
__host__ __device__ inline int transforms_doubles(int k) { return k * (k + 1) + 2 * k; }

/* Weight interpolation's transforms, one warp a point: w = H u (u from the
 * QL kernel), the eigenvectors V = H G formed a column a lane (the QL log
 * replayed on the identity, then the reflectors), and T[l, m] = (V F V^T)[l,
 * m] (RTPP applied) + w_l with F = diag(sqrt((k - 1) / ev)) from td. */
__global__ void __launch_bounds__(W_WARPS * 32) k_warp_transforms(WArgs a)
{
    extern __shared__ double tsm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k, ldv = k + 1, warps = blockDim.x / 32;
    double *V = tsm + (size_t)warp * transforms_doubles(k), *ws = V + k * ldv, *f = ws + k;
    const long long gw = (long long)blockIdx.x * warps + warp, nw = (long long)gridDim.x * warps;
    const long long cnt = a.i1 - a.i0;
    for (long long s = gw; s < cnt; s += nw) {
        if (a.failed[s])
            continue;
        const long long i = a.i0 + s, o = wslot(s, k);
        const double *R = a.refl + s * k * k;
        for (int l = lane; l < k; l += 32) {
            ws[l] = a.tu[o + l * WS];
            f[l] = a.td[o + l * WS];
        }
        for (int c = lane; c < k; c += 32)
            for (int r = 0; r < k; r++)
                V[c * ldv + r] = r == c ? 1.0 : 0.0;
        __syncwarp();
        warp_reflect(k, R, ws);
        /* G: the sweeps backwards, as k_warp_ql replays them, on each lane's columns (column c at V + c ldv) */
        const double *lv = a.lv + s * a.logcap;
        const uint8_t *li = a.li + s * 2 * a.sweepcap;
        const int nrot = a.nlog[2 * s];
        int pos = nrot, held = -1; /* the rotations are taken in descending order, 32 unpacked at a time */
        double cs_l = 1.0, sn_l = 0.0;
        for (int t = a.nlog[2 * s + 1] - 1; t >= 0; t--) {
            const int lo = li[2 * t], hi = li[2 * t + 1];
            pos -= hi - lo;
            for (int r = lo, q = pos + hi - lo - 1; r < hi; r++, q--) {
                if ((q & ~31) != held) {
                    held = q & ~31;
                    if (held + lane < nrot)
                        unpack_rotation(lv[held + lane], &cs_l, &sn_l);
                }
                const double cs = __shfl_sync(FULL, cs_l, q & 31), sn = __shfl_sync(FULL, sn_l, q & 31);
#pragma unroll
                for (int cc = 0; cc < MAX_K / 32; cc++) {
                    const int c = lane + 32 * cc;
                    if (c < k) {
                        double *vc = V + c * ldv;
                        const double v0 = vc[r], v1 = vc[r + 1];
                        vc[r] = fma(cs, v0, sn * v1);
                        vc[r + 1] = fma(-sn, v0, cs * v1);
                    }
                }
            }
        }
        /* then H, column by column */
        for (int c = lane; c < k; c += 32) {
            double *vc = V + c * ldv;
            for (int j = k - 3; j >= 0; j--) {
                const double tau = R[j * k + j];
                if (tau == 0.0)
                    continue;
                double sy = vc[j + 1];
                for (int r = j + 2; r < k; r++)
                    sy = fma(R[j * k + r], vc[r], sy);
                sy *= tau;
                vc[j + 1] -= sy;
                for (int r = j + 2; r < k; r++)
                    vc[r] = fma(-sy, R[j * k + r], vc[r]);
            }
            /* U = V F^(1/2), so that V F V^T = U U^T */
            const double h = sqrt(f[c]);
            for (int r = 0; r < k; r++)
                vc[r] *= h;
        }
        __syncwarp();
        /* T = U U^T by 8 x 8 tiles on the tensor cores (U's row l is (V[e ldv + l])_e; zeros past k) */
        double *Ti = a.tout + i * (long long)k * k;
        const int q = lane & 3, r = lane >> 2, t8 = (k + 7) / 8;
        for (int I = 0; I < t8; I++)
            for (int J = 0; J < t8; J++) {
                double acc[2] = {0.0, 0.0};
                const int ra = 8 * I + r, rb = 8 * J + r;
                for (int e0 = 0; e0 < k; e0 += 4) {
                    const int e = e0 + q;
                    const double ua = ra < k && e < k ? V[e * ldv + ra] : 0.0;
                    const double ub = rb < k && e < k ? V[e * ldv + rb] : 0.0;
                    mma_884(acc, ua, ub);
                }
                for (int hh = 0; hh < 2; hh++) {
                    const int l = ra, m = 8 * J + 2 * q + hh;
                    if (l < k && m < k) {
                        double sum = acc[hh];
                        if (a.rtpp > 0.0)
                            sum = (1.0 - a.rtpp) * sum + (l == m ? a.rtpp : 0.0);
                        Ti[l * k + m] = sum + ws[l];
                    }
                }
            }
        __syncwarp();
    }
}

} // namespace

namespace dk_cuda_letkf {

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
    plan_rational(&w, p->desc.inflation);
    w.overflow = p->d_overflow;
    w.redo_count = p->d_overflow + 3;
    /* a QL iteration for eigenvalue l rotates at most k - 1 - l times; about k^2 / 2 in all is usual */
    w.logcap = 3 * k * k / 2 + 64;
    w.sweepcap = 4 * k + 16; /* about 1.5 QL iterations an eigenvalue is usual */
    const WLayout L = wlayout(w.kp);
    /* a warp's A takes 137 KB at 128 members: then a block is one warp */
    p->w_warps = (size_t)W_WARPS * L.bytes <= p->dev->smem_optin - 1024 ? W_WARPS : 1;
    p->w_smem = (size_t)p->w_warps * L.bytes;
    if (p->w_smem > p->dev->smem_optin - 1024) {
        dk_msg_set(msg, "cuda letkf: the warp variant needs %zu bytes of shared memory a block; this device allows %zu",
                   p->w_smem, p->dev->smem_optin - 1024);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    const void *kf = p->desc.dtype == DK_F32 ? warp_system_of<float>(w.kp / 8) : warp_system_of<double>(w.kp / 8);
    CUDA_TRY(cudaFuncSetAttribute(kf, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->w_smem),
             "setting the letkf warp kernel's shared memory");
    int per_sm = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kf, p->w_warps * 32, p->w_smem),
             "the letkf warp kernel's occupancy");
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda letkf: the warp kernel does not fit a multiprocessor with %zu bytes of shared memory",
                   p->w_smem);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->w_blocks = per_sm * p->dev->sm_count;
    long long warps = (long long)p->w_blocks * p->w_warps;
    /* up to 40 members k_warp_build takes the selection (its warps use the lists too) */
    p->b_blocks = 0;
    if (w.kp <= 8 * REG_T8) {
        const void *kb = p->desc.dtype == DK_F32 ? warp_build_of<float>(w.kp / 8) : warp_build_of<double>(w.kp / 8);
        p->b_smem = (size_t)W_WARPS * build_bytes(w.kp);
        CUDA_TRY(cudaFuncSetAttribute(kb, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->b_smem),
                 "setting the letkf build kernel's shared memory");
        int b_per_sm = 0;
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b_per_sm, kb, W_WARPS * 32, p->b_smem),
                 "the letkf build kernel's occupancy");
        p->b_blocks = (b_per_sm > 0 ? b_per_sm : 1) * p->dev->sm_count;
        if ((long long)p->b_blocks * W_WARPS > warps)
            warps = (long long)p->b_blocks * W_WARPS;
    }
    CUDA_TRY(cudaMalloc((void **)&p->d_wlidx, (size_t)(warps * w.lcap) * sizeof(int32_t)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wlrho, (size_t)(warps * w.lcap) * sizeof(double)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wsidx, (size_t)(warps * w.scap) * sizeof(int32_t)), "the letkf warp lists");
    CUDA_TRY(cudaMalloc((void **)&p->d_wsrho, (size_t)(warps * w.scap) * sizeof(double)), "the letkf warp lists");
    const long long tiles_point = p->b_blocks ? tile_doubles(w.kp / 8) : 0;
    const long long per_point = (long long)k * k * 8 + 4LL * k * 8 + 2 * 8 + 4 + (long long)w.logcap * 8 + 2LL * w.sweepcap +
                                tiles_point * 8;
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
    if (tiles_point)
        CUDA_TRY(cudaMalloc((void **)&p->d_tiles, (size_t)(batch * tiles_point) * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_td, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_te, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_tu, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_tb, bk * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_wxm, (size_t)batch * sizeof(double)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_wfailed, (size_t)batch * sizeof(int32_t)), "the letkf warp batch");
    CUDA_TRY(cudaMalloc((void **)&p->d_lv, (size_t)batch * (size_t)w.logcap * sizeof(double)),
             "the letkf warp rotation log");
    CUDA_TRY(cudaMalloc((void **)&p->d_li, (size_t)batch * 2 * (size_t)w.sweepcap), "the letkf warp rotation log");
    CUDA_TRY(cudaMalloc((void **)&p->d_wnlog, (size_t)batch * 2 * sizeof(int32_t)), "the letkf warp rotation log");
    CUDA_TRY(cudaMalloc((void **)&p->d_redo, (size_t)n * sizeof(int32_t)), "the letkf warp leftovers");
    /* weight interpolation's transforms kernel: one warp a block where two do not fit (above about 116 members) */
    const size_t tw = (size_t)transforms_doubles(k) * sizeof(double);
    p->t_warps = W_WARPS * tw <= p->dev->smem_optin - 1024 ? W_WARPS : 1;
    p->t_smem = p->t_warps * tw;
    w.lidx = p->d_wlidx, w.lrho = p->d_wlrho, w.sidx = p->d_wsidx, w.srho = p->d_wsrho;
    w.refl = p->d_refl, w.tiles = p->d_tiles, w.td = p->d_td, w.te = p->d_te, w.tu = p->d_tu, w.tb = p->d_tb;
    w.xm = p->d_wxm, w.failed = p->d_wfailed;
    w.lv = p->d_lv, w.li = p->d_li, w.nlog = p->d_wnlog;
    w.redo = p->d_redo;
    return DK_OK;
}

template <typename T> dk_status run_warp(Plan *p, Args a, dk_msg *msg)
{
    cudaStream_t sm = p->dev->stream;
    const long long n = (long long)p->desc.n;
    CUDA_TRY(cudaFuncSetAttribute(warp_system_of<T>(p->w.kp / 8), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)p->w_smem),
             "setting the letkf warp kernel's shared memory");
    if (p->b_blocks)
        CUDA_TRY(cudaFuncSetAttribute(warp_build_of<T>(p->w.kp / 8), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)p->b_smem),
                 "setting the letkf build kernel's shared memory");
    WArgs w = p->w;
    /* up to 40 members (b_blocks) the system kernel finishes the analysis itself */
    dk_status st = a.tout ? warp_ql_prepare(w, msg) : p->b_blocks ? DK_OK : warp_rational_prepare<T>(p, msg);
    if (st != DK_OK)
        return st;
    w.xb = a.xb, w.xa = a.xa, w.nobs = a.nobs, w.spread = a.spread, w.tout = a.tout;
    if (w.tout)
        CUDA_TRY(cudaFuncSetAttribute((const void *)k_warp_transforms, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)p->t_smem),
                 "setting the letkf transforms kernel's shared memory");
    CUDA_TRY(cudaMemsetAsync(w.redo_count, 0, sizeof(int), sm), "the letkf warp leftovers");
    for (long long i0 = 0; i0 < n; i0 += w.batch) {
        w.i0 = i0;
        w.i1 = i0 + w.batch < n ? i0 + w.batch : n;
        const long long count = w.i1 - w.i0;
        const long long wb = (count + p->w_warps - 1) / p->w_warps;
        const int blocks = (int)(wb < p->w_blocks ? wb : p->w_blocks);
        void *args[] = {&w};
        if (p->b_blocks) {
            const int bblocks = (int)((count + W_WARPS - 1) / W_WARPS < p->b_blocks ? (count + W_WARPS - 1) / W_WARPS
                                                                                   : p->b_blocks);
            CUDA_TRY(cudaLaunchKernel(warp_build_of<T>(w.kp / 8), bblocks, W_WARPS * 32, args, p->b_smem, sm),
                     "launching the letkf warp build kernel");
        }
        CUDA_TRY(cudaLaunchKernel(warp_system_of<T>(w.kp / 8), blocks, p->w_warps * 32, args, p->w_smem, sm),
                 "launching the letkf warp system kernel");
        CUDA_TRY(cudaGetLastError(), "launching the letkf warp system kernel");
        if (w.tout) {
            if ((st = launch_warp_ql(w, count, sm, msg)) != DK_OK)
                return st;
            const int tblocks = (int)((count + p->t_warps - 1) / p->t_warps);
            k_warp_transforms<<<tblocks, p->t_warps * 32, p->t_smem, sm>>>(w);
            CUDA_TRY(cudaGetLastError(), "launching the letkf transforms kernel");
        } else if (!p->b_blocks && (st = launch_warp_rational<T>(p, w, count, msg)) != DK_OK)
            return st;
    }
    /* the points the solves or QL left (out of the approximation's range; no convergence, or a longer log than
     * planned) by the jacobi kernel */
    a.list = p->d_redo;
    a.list_count = w.redo_count;
    return launch_points<T>(p, a, 0, p->blocks, msg);
}

template dk_status run_warp<float>(Plan *p, Args a, dk_msg *msg);
template dk_status run_warp<double>(Plan *p, Args a, dk_msg *msg);

} // namespace dk_cuda_letkf
