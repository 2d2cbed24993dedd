/* dakit cuda plugin, letkf: one thread block a point. k_points is the
 * variant "jacobi"; its selection and A, b
 * (mode 1) and its finish from given eigenpairs (mode 2) serve syevj.cu;
 * mode 0 over a list takes the points the warp variant's QL leaves. k_count,
 * the plan's count of each point's candidates, walks the buckets as
 * k_points does. */
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

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

template <typename P> __device__ __forceinline__ P *at(char *smem, long long off) { return (P *)(smem + off); }

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
    if (a.tout) {
        /* weight interpolation: T[l,m] = W[l,m] + w_l, RTPS left to the apply */
        for (int e = threadIdx.x; e < k; e += blockDim.x) {
            double ev = a.g + lam[e * ls], qb = 0.0;
            for (int l = 0; l < k; l++)
                qb = fma(Q[l * qr + e * qc], bs[l], qb);
            ae[e] = qb / ev;
            ze[e] = sqrt((double)(k - 1) / ev);
        }
        __syncthreads();
        for (int l = threadIdx.x; l < k; l += blockDim.x) {
            double w = 0.0;
            for (int e = 0; e < k; e++)
                w = fma(Q[l * qr + e * qc], ae[e], w);
            ws[l] = w;
        }
        __syncthreads();
        double *Ti = a.tout + i * (long long)k * k;
        for (int u = threadIdx.x; u < k * k; u += blockDim.x) {
            int l = u / k, m = u - l * k;
            double sum = 0.0;
            for (int e = 0; e < k; e++)
                sum = fma(Q[l * qr + e * qc] * ze[e], Q[m * qr + e * qc], sum);
            if (a.rtpp > 0.0)
                sum = (1.0 - a.rtpp) * sum + (l == m ? a.rtpp : 0.0);
            Ti[u] = sum + ws[l];
        }
        __syncthreads();
        return;
    }
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
        xs[l] = l < a.k && xb ? (double)xb[i * a.k + l] : 0.0; /* no xb: the transforms only */
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

} // namespace

namespace dk_cuda_letkf {

dk_status count_candidates(Plan *p, dk_msg *msg)
{
    const size_t n = p->desc.n;
    int count_blocks = p->dev->sm_count * 8;
    if ((size_t)count_blocks > n)
        count_blocks = (int)n;
    k_count<<<count_blocks, 128, 0, p->dev->stream>>>(p->a, (long long)n, p->d_count,
                                                      (unsigned *)(p->d_overflow + 1));
    CUDA_TRY(cudaGetLastError(), "launching the letkf count kernel");
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

/* A kernel's shared-memory limit is the process's, not the plan's: another
 * plan made since (a smaller network) may have lowered it. */
template <typename T> dk_status points_prepare(const Plan *p, dk_msg *msg)
{
    for (int mode = p->syevj ? 1 : 0; mode <= (p->syevj ? 2 : 0); mode++)
        CUDA_TRY(cudaFuncSetAttribute(kernel_of<T>(mode), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)p->a.L.bytes),
                 "setting the letkf kernel's shared memory");
    return DK_OK;
}

template <typename T> dk_status launch_points(const Plan *p, const Args &a, int mode, int blocks, dk_msg *msg)
{
    const size_t smem = (size_t)a.L.bytes;
    cudaStream_t sm = p->dev->stream;
    if (mode == 0) {
        k_points<T, 0><<<blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf analysis kernel");
    } else if (mode == 1) {
        k_points<T, 1><<<blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf selection kernel");
    } else {
        k_points<T, 2><<<blocks, p->threads, smem, sm>>>(a);
        CUDA_TRY(cudaGetLastError(), "launching the letkf finishing kernel");
    }
    return DK_OK;
}

template dk_status points_prepare<float>(const Plan *p, dk_msg *msg);
template dk_status points_prepare<double>(const Plan *p, dk_msg *msg);
template dk_status launch_points<float>(const Plan *p, const Args &a, int mode, int blocks, dk_msg *msg);
template dk_status launch_points<double>(const Plan *p, const Args &a, int mode, int blocks, dk_msg *msg);

} // namespace dk_cuda_letkf
