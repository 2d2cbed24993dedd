/* dakit cuda plugin, enkf: the tiled and banded solvers on the vector
 * units (where k_mma does not apply: 2-D C, L > 16, the "-simt" variants).
 *   G[t*L + l] = H_t e[k_t, l]  (k_weigh) is what both sum.
 *   tiled   k_direct over every nonzero of row j: one fused kernel, C
 *           read from its first row (or the 2-D table), H in CSR, each
 *           block a tile of state points x one observation, G staged in
 *           shared memory, the member sums in registers.
 *   banded  C applied as a short convolution of the sparse vectors
 *           e_l o h_j: for 1-D C with radius up to 1,920, k_band (c staged
 *           in shared memory as a zero-padded signed window, 4 points per
 *           thread, G formed while staging, 32-bit indices); otherwise
 *           k_direct restricted to the nonzeros within C's support of the
 *           tile, warps skipping nonzeros out of their reach. */
#include <stdint.h>
#include <stdlib.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

const int DIRECT_THREADS = 128;
const int DIRECT_R = 2; /* state points per thread: G's shared loads serve both */
const int DIRECT_TILE = DIRECT_THREADS * DIRECT_R;
/* banded, 1-D C: each warp owns 32*BAND_R consecutive state points (lane +
 * 32 r), so a nonzero's c values sit in shared memory at consecutive
 * addresses across the warp (no bank conflicts) and one staged G row serves
 * BAND_R points; all index arithmetic is 32-bit. */
const int BAND_THREADS = 128;
const int BAND_R = 4;
const int BAND_TILE = BAND_THREADS * BAND_R;
const int BAND_CHUNK = 128;    /* nonzeros staged at a time */
const int BAND_MAX_LB = 12;    /* members per pass: acc[BAND_R][LB] stays in registers */
const int BAND_MAX_W = 2047;   /* c staged as 2W+1 values: at most 32 KiB of shared memory */

struct DirectArgs {
    const double *e, *G, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (row, tile); NULL: bisect */
    double *pht;
    long long N, L, M, ny, rx, ry, window;
    int two_d, banded;
    double inv_lm1;
};

__device__ __forceinline__ int lower_bound(const int *indices, int b, int e, long long key)
{
    while (b < e) {
        int mid = b + (e - b) / 2;
        if (indices[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

/* C[i,k] from the state points' grid coordinates; zero outside the support. */
__device__ __forceinline__ double c_value(const DirectArgs &a, long long ix, long long iy, int kx, int ky)
{
    long long dx = ix > kx ? ix - kx : kx - ix;
    if (!a.two_d)
        return dx <= a.rx ? __ldg(a.loc + dx) : 0.0;
    long long dy = iy > ky ? iy - ky : ky - iy;
    return (dx <= a.rx && dy <= a.ry) ? __ldg(a.loc + dx * a.ny + dy) : 0.0;
}

/* One block: DIRECT_TILE state points x observation rows j = blockIdx.y,
 * blockIdx.y + gridDim.y, ...; members in groups of LB held in registers. */
template <int LB>
__global__ void __launch_bounds__(DIRECT_THREADS) k_direct(DirectArgs a)
{
    /* nonzeros staged at a time: G's slice stays within 32 KiB of shared memory */
    constexpr int CHUNK = LB <= 16 ? 256 : 128;
    __shared__ double gs[CHUNK * LB];
    __shared__ int kxs[CHUNK], kys[CHUNK], kflat[CHUNK];
    __shared__ int range[2];
    const int tid = threadIdx.x;
    const long long i0 = (long long)blockIdx.x * DIRECT_TILE;
    const long long ilast = min(i0 + DIRECT_TILE, a.N) - 1;
    long long ix[DIRECT_R], iy[DIRECT_R], wlo[DIRECT_R];
    for (int r = 0; r < DIRECT_R; r++) {
        long long i = i0 + r * DIRECT_THREADS + tid;
        ix[r] = a.two_d ? i / a.ny : i;
        iy[r] = a.two_d ? i % a.ny : 0;
        wlo[r] = i0 + r * DIRECT_THREADS + (tid & ~31);
    }
    for (long long j = blockIdx.y; j < a.M; j += gridDim.y) {
        int tb = a.indptr[j], te = a.indptr[j + 1];
        if (a.banded && a.range_lo) {
            long long at = j * gridDim.x + blockIdx.x;
            tb = a.range_lo[at];
            te = a.range_hi[at];
        } else if (a.banded) {
            __syncthreads();
            if (tid == 0)
                range[0] = lower_bound(a.indices, tb, te, i0 - a.window);
            if (tid == 32)
                range[1] = lower_bound(a.indices, tb, te, ilast + a.window + 1);
            __syncthreads();
            tb = range[0];
            te = range[1];
        }
        double out[DIRECT_R];
        for (int r = 0; r < DIRECT_R; r++)
            out[r] = 0.0;
        for (long long l0 = 0; l0 < a.L; l0 += LB) {
            double acc[DIRECT_R][LB];
#pragma unroll
            for (int r = 0; r < DIRECT_R; r++)
#pragma unroll
                for (int l = 0; l < LB; l++)
                    acc[r][l] = 0.0;
            for (int c0 = tb; c0 < te; c0 += CHUNK) {
                int cn = min(CHUNK, te - c0);
                __syncthreads();
                for (int q = tid; q < cn * LB; q += DIRECT_THREADS) {
                    int tt = q / LB, l = q % LB;
                    gs[q] = l0 + l < a.L ? a.G[(long long)(c0 + tt) * a.L + l0 + l] : 0.0;
                }
                for (int q = tid; q < cn; q += DIRECT_THREADS) {
                    int k = a.indices[c0 + q];
                    kflat[q] = k;
                    kxs[q] = a.two_d ? (int)(k / a.ny) : k;
                    kys[q] = a.two_d ? (int)(k % a.ny) : 0;
                }
                __syncthreads();
                for (int tt = 0; tt < cn; tt++) {
                    long long k = kflat[tt];
                    int kx = kxs[tt], ky = kys[tt];
                    double g[LB];
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        g[l] = gs[tt * LB + l];
#pragma unroll
                    for (int r = 0; r < DIRECT_R; r++) {
                        /* the warp's 32 points all lie out of reach: skip together */
                        if (a.banded && (k + a.window < wlo[r] || k - a.window > wlo[r] + 31))
                            continue;
                        double c = c_value(a, ix[r], iy[r], kx, ky);
#pragma unroll
                        for (int l = 0; l < LB; l++)
                            acc[r][l] = fma(c, g[l], acc[r][l]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < DIRECT_R; r++) {
                long long i = i0 + r * DIRECT_THREADS + tid;
                if (i < a.N)
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        if (l0 + l < a.L)
                            out[r] = fma(a.e[i * a.L + l0 + l], acc[r][l], out[r]);
            }
        }
        for (int r = 0; r < DIRECT_R; r++) {
            long long i = i0 + r * DIRECT_THREADS + tid;
            if (i < a.N)
                a.pht[i * a.M + j] = out[r] * a.inv_lm1;
        }
    }
}

struct BandArgs {
    const double *e, *values, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (row, tile); NULL: bisect */
    double *pht;
    int N, L, M, rx, W;
    double inv_lm1;
};

/* 1-D C with support rx: pht[i, j] = 1/(L-1) sum_l e[i,l] sum_t c[|i-k_t|]
 * values[t] e[k_t,l]. c is staged once per block as a signed, zero-padded
 * window cs[d + W] (d = i - k in [-W, W]), so the inner loop has no
 * branch and no bounds test: one shared load of c and LB FMAs per point.
 * The weighted anomalies G are formed while staging (no separate pass).
 * Each warp walks only the staged nonzeros within reach of its points. */
template <int LB>
__global__ void __launch_bounds__(BAND_THREADS) k_band(BandArgs a)
{
    extern __shared__ double cs[];
    __shared__ double2 gs2[BAND_CHUNK * LB / 2]; /* 16-byte loads in the inner loop */
    double *gs = (double *)gs2;
    __shared__ int ks[BAND_CHUNK];
    __shared__ int range[2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int W = a.W;
    for (int q = tid; q <= 2 * W; q += BAND_THREADS) {
        int d = q > W ? q - W : W - q;
        cs[q] = d <= a.rx ? a.loc[d] : 0.0;
    }
    const int i0 = blockIdx.x * BAND_TILE;
    const int wbase = i0 + warp * 32 * BAND_R;
    const int klo = wbase - a.rx, khi = wbase + 32 * BAND_R - 1 + a.rx;
    const int cbase = wbase + lane + W;
    for (int j = blockIdx.y; j < a.M; j += gridDim.y) {
        int tb, te;
        if (a.range_lo) {
            int at = j * gridDim.x + blockIdx.x;
            tb = a.range_lo[at];
            te = a.range_hi[at];
        } else {
            __syncthreads();
            if (tid == 0)
                range[0] = lower_bound32(a.indices, a.indptr[j], a.indptr[j + 1], i0 - a.rx);
            if (tid == 32)
                range[1] = lower_bound32(a.indices, a.indptr[j], a.indptr[j + 1], i0 + BAND_TILE + a.rx);
            __syncthreads();
            tb = range[0];
            te = range[1];
        }
        double out[BAND_R];
#pragma unroll
        for (int r = 0; r < BAND_R; r++)
            out[r] = 0.0;
        for (int l0 = 0; l0 < a.L; l0 += LB) {
            double acc[BAND_R][LB];
#pragma unroll
            for (int r = 0; r < BAND_R; r++)
#pragma unroll
                for (int l = 0; l < LB; l++)
                    acc[r][l] = 0.0;
            for (int c0 = tb; c0 < te; c0 += BAND_CHUNK) {
                int cn = min(BAND_CHUNK, te - c0);
                __syncthreads();
                for (int q = tid; q < cn * LB; q += BAND_THREADS) {
                    int tt = q / LB, l = q - tt * LB;
                    int k = a.indices[c0 + tt];
                    gs[q] = l0 + l < a.L ? a.values[c0 + tt] * a.e[(size_t)k * a.L + l0 + l] : 0.0;
                    if (l == 0)
                        ks[tt] = k;
                }
                __syncthreads();
                int lo = lower_bound32(ks, 0, cn, klo), hi = lower_bound32(ks, lo, cn, khi + 1);
                for (int tt = lo; tt < hi; tt++) {
                    const double *c = cs + (cbase - ks[tt]);
                    double g[LB];
#pragma unroll
                    for (int h = 0; h < LB / 2; h++) {
                        double2 v = gs2[tt * (LB / 2) + h];
                        g[2 * h] = v.x;
                        g[2 * h + 1] = v.y;
                    }
#pragma unroll
                    for (int r = 0; r < BAND_R; r++) {
                        double cr = c[32 * r];
#pragma unroll
                        for (int l = 0; l < LB; l++)
                            acc[r][l] = fma(cr, g[l], acc[r][l]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < BAND_R; r++) {
                int i = wbase + 32 * r + lane;
                if (i < a.N)
#pragma unroll
                    for (int l = 0; l < LB; l++)
                        if (l0 + l < a.L)
                            out[r] = fma(a.e[(size_t)i * a.L + l0 + l], acc[r][l], out[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < BAND_R; r++) {
            int i = wbase + 32 * r + lane;
            if (i < a.N)
                a.pht[(size_t)i * a.M + j] = out[r] * a.inv_lm1;
        }
    }
}

/* For each tile of tile_points state points and each row j, the nonzeros
 * whose column is within the window of the tile: [lo, hi). */
dk_status make_ranges(Plan *p, long long tile_points, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long tiles = (p->N + tile_points - 1) / tile_points, w = p->window;
    if (tiles * p->M > (1ll << 26))
        return DK_OK; /* too many to keep: the kernel bisects instead */
    int *lo = (int *)malloc((size_t)(tiles * p->M) * sizeof(int)), *hi = (int *)malloc((size_t)(tiles * p->M) * sizeof(int));
    if (!lo || !hi) {
        free(lo), free(hi);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long j = 0; j < p->M; j++) {
        int64_t a = s->indptr[j], b = s->indptr[j];
        for (long long tile = 0; tile < tiles; tile++) {
            long long first = tile * tile_points, lastp = min(first + tile_points, p->N) - 1;
            while (a < s->indptr[j + 1] && s->indices[a] < first - w)
                a++;
            if (b < a)
                b = a;
            while (b < s->indptr[j + 1] && s->indices[b] <= lastp + w)
                b++;
            lo[j * tiles + tile] = (int)a;
            hi[j * tiles + tile] = (int)b;
        }
    }
    dk_status st = upload(&p->range_lo, lo, (size_t)(tiles * p->M), "copying the band ranges", msg);
    if (st == DK_OK)
        st = upload(&p->range_hi, hi, (size_t)(tiles * p->M), "copying the band ranges", msg);
    free(lo), free(hi);
    return st;
}

template <int LB>
cudaError_t launch_direct(const DirectArgs &a, cudaStream_t stream)
{
    /* banded, with tiles enough to fill the device: one block takes every
     * row of its tile, so the rows of PHT it writes are whole while still in
     * L2 */
    long long tiles = (a.N + DIRECT_TILE - 1) / DIRECT_TILE;
    dim3 grid((unsigned)tiles, (a.banded && tiles >= 1024) ? 1u : (unsigned)(a.M < 65535 ? a.M : 65535));
    k_direct<LB><<<grid, DIRECT_THREADS, 0, stream>>>(a);
    return cudaGetLastError();
}

template <int LB>
cudaError_t launch_band(const BandArgs &a, cudaStream_t stream)
{
    /* one block takes every row of its tile when tiles fill the device, so
     * the rows of PHT it writes are whole while still in L2 */
    unsigned tiles = (unsigned)((a.N + BAND_TILE - 1) / BAND_TILE);
    dim3 grid(tiles, tiles >= 1024 ? 1u : (unsigned)(a.M < 65535 ? a.M : 65535));
    size_t shared = (size_t)(2 * a.W + 1) * sizeof(double);
    k_band<LB><<<grid, BAND_THREADS, shared, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t band(const Plan *p, const double *e, double *pht)
{
    int W = (int)p->rx + 32 * BAND_R - 1;
    BandArgs a = {e, p->values, p->loc, p->indptr, p->indices, p->range_lo, p->range_hi, pht, (int)p->N, (int)p->L,
                  (int)p->M, (int)p->rx, W, 1.0 / (double)(p->L - 1)};
    /* members in equal passes of at most BAND_MAX_LB, rounded up to even */
    int passes = (int)((p->L + BAND_MAX_LB - 1) / BAND_MAX_LB);
    int lb = (int)((p->L + passes - 1) / passes);
    cudaStream_t st = p->dev->stream;
    switch ((lb + 1) / 2) {
    case 1: return launch_band<2>(a, st);
    case 2: return launch_band<4>(a, st);
    case 3: return launch_band<6>(a, st);
    case 4: return launch_band<8>(a, st);
    case 5: return launch_band<10>(a, st);
    default: return launch_band<12>(a, st);
    }
}

cudaError_t direct(const Plan *p, const double *e, double *pht, int banded)
{
    DirectArgs a = {e, p->G, p->loc, p->indptr, p->indices, banded ? p->range_lo : NULL, banded ? p->range_hi : NULL,
                    pht, p->N, p->L, p->M, p->ny, p->rx, p->two_d ? p->ry : 0, p->window, p->two_d, banded,
                    1.0 / (double)(p->L - 1)};
    if (!banded)
        a.window = p->N; /* every nonzero of the row */
    cudaStream_t st = p->dev->stream;
    switch (p->L) {
    case 2: return launch_direct<2>(a, st);
    case 3: case 4: return launch_direct<4>(a, st);
    case 5: case 6: return launch_direct<6>(a, st);
    case 7: case 8: return launch_direct<8>(a, st);
    case 9: case 10: return launch_direct<10>(a, st);
    case 11: case 12: return launch_direct<12>(a, st);
    case 13: case 14: case 15: case 16: return launch_direct<16>(a, st);
    case 17: case 18: case 19: case 20: return launch_direct<20>(a, st);
    case 21: case 22: case 23: case 24: return launch_direct<24>(a, st);
    default: return launch_direct<32>(a, st);
    }
}

/* k_band: banded, 1-D C whose window fits in shared memory, 32-bit indices. */
bool band_applicable(const dk_enkf_setup *s, const dk_cuda_device *)
{
    return s->scheme == DK_ENKF_BANDED && s->desc.loc_ndim != 2 &&
           (long long)s->rx + 32 * BAND_R - 1 <= BAND_MAX_W &&
           (long long)s->desc.n + BAND_TILE + BAND_MAX_W < INT32_MAX;
}

dk_status band_make(Plan *p, dk_msg *msg) { return make_ranges(p, BAND_TILE, msg); }

dk_status band_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    CUDA_TRY(band(p, e, pht), "the banded covariance kernel");
    return DK_OK;
}

/* k_direct: tiled and banded, any C. */
bool direct_applicable(const dk_enkf_setup *s, const dk_cuda_device *)
{
    return s->scheme == DK_ENKF_TILED || s->scheme == DK_ENKF_BANDED;
}

dk_status direct_make(Plan *p, dk_msg *msg)
{
    return p->s->scheme == DK_ENKF_BANDED ? make_ranges(p, DIRECT_TILE, msg) : DK_OK;
}

dk_status direct_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    CUDA_TRY(direct(p, e, pht, p->s->scheme == DK_ENKF_BANDED), "the covariance kernel");
    return DK_OK;
}

} // namespace

const Solver dk_cuda_enkf::solver_band = {
    .name = "band",
    .applicable = band_applicable,
    .make = band_make,
    .cov = band_cov,
    .reads_g = false,
};

const Solver dk_cuda_enkf::solver_direct = {
    .name = "direct",
    .applicable = direct_applicable,
    .make = direct_make,
    .cov = direct_cov,
    .reads_g = true,
};
