/* dakit cuda plugin, enkf: the tiled and banded solver on the float64
 * tensor cores (DMMA, mma.sync m16n8k4), for 1-D C and L <= 16.
 *
 * For 16 state points i and a chunk of 8 nonzeros t of one row j, one
 * m16n8k4 product per 4 members gives D[i][t] = sum_l e[i][l] G[t][l]
 * (G = H_t e[k_t], formed from the staged anomaly rows, the members padded
 * to 4 KS); the epilogue adds c[|i - k_t|] D[i][t] into the thread's sums,
 * and at the end of the row the 4 lanes that share a point add theirs. So
 * each (point, nonzero) pair costs 4 KS tensor FMAs and one vector FMA
 * instead of L vector FMAs, and one shared load of c.
 *
 * The nonzeros sit on the mma's 8-wide side: a row has few nonzeros within
 * a warp's reach, and padding them to chunks of 8 rather than 16 wastes
 * fewer slots.
 *
 * A block takes mma_tile(MT) consecutive points (MT m-tiles of 16 per
 * warp: 2 for a short C, where a wider warp reaches more nonzeros it does
 * not need; 4 for segments of a wide C, where two blocks share an SM and
 * each warp needs four independent mma chains to hide their latency) and
 * every row; its nonzeros are those within C's reach (rx) of the tile and,
 * for a wide C, within one segment of the state (blockIdx.y), so that c's
 * window (signed, zero-padded: cw[x] = c[|d|], d = x + i0 - khi,
 * x = (i - i0) + (khi - k)) fits in shared memory. With several segments
 * each writes its own partial PHT, summed in a fixed order by k_mma_sum.
 * Each row's nonzeros are staged in chunks of 8 (the last one padded with
 * zero weights), so a chunk never spans rows; a pipeline of asynchronous
 * copies stages them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

const int MMA_WARPS = 4;
const int MMA_THREADS = MMA_WARPS * 32;
__host__ __device__ constexpr int mma_tile(int mt) { return MMA_WARPS * mt * 16; } /* points per block */
const int MMA_CHUNK = 8;                       /* nonzeros per chunk (the mma's n) */
const int MMA_CAPC = MMA_THREADS / MMA_CHUNK;  /* chunks per batch: one nonzero slot per thread */
const int MMA_CAP = MMA_CAPC * MMA_CHUNK;
const int MMA_ROWS = 32;                       /* observation rows per group */
const int MMA_WMAX = 2048;                     /* entries of c's window (64 KiB, all four copies) */
const int MMA_MAX_KS = 4;                      /* L <= 16 */

struct MmaArgs {
    const double *e, *values, *loc;
    const int *indptr, *indices;
    const int *range_lo, *range_hi; /* per (segment, tile, row); NULL: bisect */
    double *out; /* pht, or partial[seg][i][j] with several segments */
    int N, L, M, rx, seg_len, wcap; /* seg_len 0: one segment, the tile's reach */
    int row_lo, row_hi; /* the points written: [row_lo, row_hi) */
    int row_base;       /* point i's row in out: seg N + i - row_base */
    int vec16; /* the anomaly rows can be copied 16 bytes at a time */
    double inv_lm1;
};

/* Staged anomaly rows: one per nonzero slot, 4 KS members rounded to 4 mod
 * 8 doubles, so the four rows of a half-warp's B-fragment load (4 members
 * each) land in four different 32-byte bank groups. Slot t holds member l
 * at l ^ mma_gswap(t): with rows 4 mod 8 doubles long, slots t and t + 4
 * would start on the same 16-byte bank group, so the 8 slots of a quarter
 * warp's 16-byte copies hit only 4 groups (2-way conflicts); swapping the
 * 16-byte pairs of the slots 4..7 mod 8 puts them on the other 4. A
 * half-warp's B load covers slots of one kind only, so it stays
 * conflict-free. */
__host__ __device__ constexpr int mma_gstride(int ks) { return (ks & 1) ? 4 * ks : 4 * ks + 4; }
__host__ __device__ constexpr int mma_gswap(int t) { return (t & 4) >> 1; }
/* c's window is held four times, copy s shifted by s banks (its length is
 * 1 mod 16 doubles); each lane picks the copy that puts its value on a bank
 * congruent to its column q mod 4 (below), so a half-warp's 16 loads of c
 * never share a bank, whatever the nonzeros' columns. */
__host__ __device__ constexpr int mma_wpad(int wcap) { return ((wcap + 14) & ~15) + 1; }

/* Row r of an m-tile (r = g and g + 8 of the fragment) holds point
 * 4 (r & 3) + (r >> 2) + 2 (r >> 3) of its 16: the four lanes g = 0..3 of a
 * column q then read c at x, x + 4, x + 8, x + 12, one bank class mod 4. */
__host__ __device__ constexpr int mma_point(int r) { return 4 * (r & 3) + ((r >> 2) & 1) + 2 * (r >> 3); }

/* Each warp collects the rows it finishes MMA_OUT at a time (MMA_OUT x 32
 * points, in shared memory past everything else), so that its stores of PHT
 * fill whole 32-byte sectors instead of writing 8 bytes into each of 32.
 * 4.5 KiB a block (MT = 2) still lets 4 blocks share an SM. */
const int MMA_OUT = 4;
/* The staging rows are 16 MT + 4 doubles apart and point p sits at
 * p ^ (its m-tile mod 4), so that neither a half-warp's writes (points
 * congruent mod 4 in different m-tiles) nor the reads of rows r and r + 2
 * of 8 points meet on a bank (rows 16 MT apart with p in place would
 * conflict 2-way on both). */
__host__ __device__ constexpr int mma_stg_row(int mt) { return 16 * mt + 4; }
__host__ __device__ constexpr int mma_stg_at(int p) { return p ^ ((p >> 4) & 3); }
__host__ __device__ constexpr size_t mma_out_at(int ks, int wcap)
{
    return ((4 * (size_t)mma_wpad(wcap) * 8 + 2 * (size_t)MMA_CAP * mma_gstride(ks) * 8 + 3 * (size_t)MMA_CAP * 8 +
             3 * (size_t)MMA_CAP * 4 + 3 * (size_t)MMA_CAPC * 16 + (size_t)(3 * MMA_ROWS + 1) * 4) +
            15) &
           ~(size_t)15;
}

size_t mma_shared(int ks, int mt, int wcap)
{
    return mma_out_at(ks, wcap) + (size_t)MMA_WARPS * MMA_OUT * mma_stg_row(mt) * 8;
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async8(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* The 4 lanes of a row group (lanes 4g .. 4g+3) hold partial sums of the
 * same 2 MT points (two rows of each m-tile); a butterfly over them leaves
 * lane q with the whole sums of MT / 2 of them (3 shuffles for MT = 2),
 * which go into the warp's staging rows stg; every MMA_OUT rows (and at
 * the group's last row, jlast) they are written out. Rows come in order,
 * each once. Clears the sums. */
template <int MT>
__device__ __forceinline__ void mma_flush(double (&o)[MT][2], const MmaArgs &a, int seg, int ibase, int j, int jfirst,
                                          int jlast, double *stg, int lane)
{
    constexpr int NV = 2 * MT, WP = 16 * MT, SR = mma_stg_row(MT); /* values per lane, points per warp */
    const int g = lane >> 2, q = lane & 3;
    const bool h1 = q & 2, h0 = q & 1;
    double v2[NV / 2], v1[NV / 4];
#pragma unroll
    for (int u = 0; u < NV / 2; u++) { /* value v is o[v >> 1][v & 1] */
        const int lo = u, hi = NV / 2 + u;
        double other = __shfl_xor_sync(0xffffffffu, h1 ? o[lo >> 1][lo & 1] : o[hi >> 1][hi & 1], 2);
        v2[u] = (h1 ? o[hi >> 1][hi & 1] : o[lo >> 1][lo & 1]) + other;
    }
#pragma unroll
    for (int u = 0; u < NV / 4; u++) {
        double other = __shfl_xor_sync(0xffffffffu, h0 ? v2[u] : v2[NV / 4 + u], 1);
        v1[u] = (h0 ? v2[NV / 4 + u] : v2[u]) + other;
    }
    /* lane q now holds values (q >> 1) NV/2 + (q & 1) NV/4 + u */
    const int r = (j - jfirst) % MMA_OUT;
#pragma unroll
    for (int u = 0; u < NV / 4; u++) {
        const int v = (q >> 1) * (NV / 2) + (q & 1) * (NV / 4) + u;
        stg[r * SR + mma_stg_at(16 * (v >> 1) + mma_point(g + 8 * (v & 1)))] = v1[u] * a.inv_lm1;
    }
#pragma unroll
    for (int n = 0; n < MT; n++)
        o[n][0] = o[n][1] = 0.0;
    if (r != MMA_OUT - 1 && j != jlast)
        return;
    /* rows j - r .. j of the warp's points: lane pairs (2p, 2p+1) write
     * point p's rows, two each */
    __syncwarp();
    const int jb = j - r, half = lane & 1;
#pragma unroll
    for (int h = 0; h < WP / 16; h++) {
        const int p = 16 * h + (lane >> 1), i = ibase + p;
        const int r0 = 2 * half;
        if (i >= a.row_lo && i < a.row_hi && r0 <= r) {
            double *dst = a.out + ((size_t)seg * a.N + i - a.row_base) * a.M + jb + r0;
            double v0 = stg[r0 * SR + mma_stg_at(p)];
            if (r0 + 1 <= r && !(a.M & 1)) {
                *(double2 *)dst = make_double2(v0, stg[(r0 + 1) * SR + mma_stg_at(p)]);
            } else {
                dst[0] = v0;
                if (r0 + 1 <= r)
                    dst[1] = stg[(r0 + 1) * SR + mma_stg_at(p)];
            }
        }
    }
    __syncwarp();
}

/* The staging is a three-step pipeline of asynchronous copies, one nonzero
 * slot per thread: columns and weights of batch b+2 and the anomaly rows
 * of batch b+1 (whose columns arrived one step earlier) are in flight
 * while batch b is multiplied, so no global latency sits between barriers.
 * Padding slots copy no anomaly row: their weight is 0 and the staging
 * area holds only finite values (zeroed first). Registers are bounded for
 * 4 blocks an SM with MT = 2, 2 with MT = 4 (a wide C's segments). */
template <int KS, int MT>
__global__ void __launch_bounds__(MMA_THREADS, MT == 2 ? 4 : 2) k_mma(MmaArgs a)
{
    constexpr int GS = mma_gstride(KS), MMA_TILE = mma_tile(MT), WP = 16 * MT;
    extern __shared__ double smem[];
    const int wpad = mma_wpad(a.wcap);
    double *cw = smem, *er = smem + 4 * wpad;
    double *wt = er + 2 * MMA_CAP * GS;
    int *col = (int *)(wt + 3 * MMA_CAP);
    int4 *cinfo = (int4 *)(col + 3 * MMA_CAP); /* (row, first column, last column) */
    int *rlo = (int *)(cinfo + 3 * MMA_CAPC), *rhi = rlo + MMA_ROWS, *rfirst = rhi + MMA_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    double *stg = (double *)((char *)smem + mma_out_at(KS, a.wcap)) + warp * MMA_OUT * mma_stg_row(MT);
    const int tile = blockIdx.x, i0 = tile * MMA_TILE, seg = blockIdx.y;
    if (i0 + MMA_TILE <= a.row_lo || i0 >= a.row_hi)
        return;
    int klo = i0 - a.rx, khi = i0 + MMA_TILE - 1 + a.rx;
    if (a.seg_len) {
        klo = max(klo, seg * a.seg_len);
        khi = min(khi, seg * a.seg_len + a.seg_len - 1);
    }
    klo = max(klo, 0);
    khi = min(khi, a.N - 1);
    if (khi < klo) { /* no column of this segment within reach: zeros */
        for (int u = tid; u < MMA_TILE * a.M; u += MMA_THREADS) {
            int i = i0 + u / a.M;
            if (i >= a.row_lo && i < a.row_hi)
                a.out[((size_t)seg * a.N + i - a.row_base) * a.M + u % a.M] = 0.0;
        }
        return;
    }
    const int win = MMA_TILE + khi - klo;
    for (int x = tid; x < win; x += MMA_THREADS) {
        int d = x + i0 - khi;
        d = d < 0 ? -d : d;
        double v = d <= a.rx ? a.loc[d] : 0.0;
#pragma unroll
        for (int s = 0; s < 4; s++)
            cw[s * wpad + x] = v;
    }
    for (int u = tid; u < 2 * MMA_CAP * GS; u += MMA_THREADS)
        er[u] = 0.0;
    const int ibase = i0 + warp * WP;
    const int wklo = ibase - a.rx, wkhi = ibase + WP - 1 + a.rx; /* columns within this warp's reach */
    double af[MT][KS][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int i = ibase + 16 * m + mma_point(g + 8 * h), l = 4 * s + q;
                af[m][s][h] = (i < a.N && l < a.L) ? a.e[(size_t)i * a.L + l] : 0.0;
            }
    double o[MT][2];
#pragma unroll
    for (int n = 0; n < MT; n++)
        o[n][0] = o[n][1] = 0.0;
    /* c's index of this lane's fragment row g, less the column */
    const int xl = khi + warp * WP + mma_point(g);
    const size_t range_at = ((size_t)seg * gridDim.x + tile) * a.M;
    for (int j0 = 0; j0 < a.M; j0 += MMA_ROWS) {
        const int nr = min(MMA_ROWS, a.M - j0);
        __syncthreads();
        if (a.range_lo) {
            if (tid < nr)
                rlo[tid] = a.range_lo[range_at + j0 + tid];
            else if (tid >= 64 && tid - 64 < nr)
                rhi[tid - 64] = a.range_hi[range_at + j0 + tid - 64];
        } else {
            if (tid < nr)
                rlo[tid] = lower_bound32(a.indices, a.indptr[j0 + tid], a.indptr[j0 + tid + 1], klo);
            else if (tid >= 64 && tid - 64 < nr)
                rhi[tid - 64] = lower_bound32(a.indices, a.indptr[j0 + tid - 64], a.indptr[j0 + tid - 63], khi + 1);
        }
        __syncthreads();
        if (warp == 0) { /* chunks per row (at least one: every row is written), scanned */
            int count = lane < nr ? max(1, (rhi[lane] - rlo[lane] + MMA_CHUNK - 1) / MMA_CHUNK) : 0, incl = count;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                int v = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= d)
                    incl += v;
            }
            if (lane < nr)
                rfirst[lane] = incl - count;
            if (lane == nr - 1)
                rfirst[nr] = incl;
        }
        __syncthreads();
        const int total = rfirst[nr], batches = (total + MMA_CAPC - 1) / MMA_CAPC;
        /* step 1 of batch bb: this thread's slot's column and weight */
        auto stage_columns = [&](int bb) {
            int st = bb % 3, c = bb * MMA_CAPC + tid / MMA_CHUNK;
            if (c >= total)
                return;
            int r = 0;
#pragma unroll
            for (int step = MMA_ROWS / 2; step; step >>= 1)
                if (r + step < nr && rfirst[r + step] <= c)
                    r += step;
            int t = rlo[r] + (c - rfirst[r]) * MMA_CHUNK + tid % MMA_CHUNK;
            int *kd = col + st * MMA_CAP + tid;
            double *wd = wt + st * MMA_CAP + tid;
            if (t < rhi[r]) {
                cp_async4(kd, a.indices + t);
                cp_async8(wd, a.values + t);
            } else {
                /* padding: the row's last column (chunks stay sorted), weight 0 */
                if (rhi[r] > rlo[r])
                    cp_async4(kd, a.indices + rhi[r] - 1);
                else
                    *kd = klo;
                *wd = 0.0;
            }
            if (tid % MMA_CHUNK == 0)
                cinfo[st * MMA_CAPC + tid / MMA_CHUNK].x = r;
        };
        /* step 2: the anomaly row of the slot's column */
        auto stage_rows = [&](int bb) {
            int st = bb % 3, c = tid / MMA_CHUNK;
            if (bb * MMA_CAPC + c >= total)
                return;
            int k = col[st * MMA_CAP + tid];
            if (tid % MMA_CHUNK == 0) {
                cinfo[st * MMA_CAPC + c].y = k;
                cinfo[st * MMA_CAPC + c].z = col[st * MMA_CAP + tid + MMA_CHUNK - 1];
            }
            if (wt[st * MMA_CAP + tid] == 0.0)
                return; /* padding (or a zero of H): nothing to weigh */
            const double *src = a.e + (size_t)k * a.L;
            double *dst = er + ((bb & 1) * MMA_CAP + tid) * GS;
            const int sw = mma_gswap(tid);
            if (a.vec16) {
                for (int l = 0; l < a.L; l += 2)
                    cp_async16(dst + (l ^ sw), src + l);
            } else {
                for (int l = 0; l < a.L; l++)
                    cp_async8(dst + (l ^ sw), src + l);
            }
        };
        stage_columns(0);
        cp_async_wait_all();
        __syncthreads();
        for (int bb = 0; bb < batches; bb++) {
            if (bb == 0) {
                stage_rows(0);
                if (batches > 1)
                    stage_columns(1);
            }
            cp_async_wait_all();
            __syncthreads();
            if (bb + 1 < batches)
                stage_rows(bb + 1);
            if (bb + 2 < batches)
                stage_columns(bb + 2);
            const int nc = min(MMA_CAPC, total - bb * MMA_CAPC);
            const double *ers = er + (bb & 1) * MMA_CAP * GS, *wts = wt + (bb % 3) * MMA_CAP;
            const int *cols = col + (bb % 3) * MMA_CAP;
            const int4 *cis = cinfo + (bb % 3) * MMA_CAPC;
            auto chunk = [&](int c) {
                const double w = wts[c * MMA_CHUNK + g];
                const int2 kk = *(const int2 *)(cols + c * MMA_CHUNK + 2 * q);
                const double *ep = ers + (c * MMA_CHUNK + g) * GS + (q ^ mma_gswap(g));
                double bf[KS];
#pragma unroll
                for (int s = 0; s < KS; s++)
                    bf[s] = w * ep[4 * s];
                /* c of (row g, column 2q), (row g + 8, 2q), (g, 2q+1), (g + 8, 2q+1);
                 * row g + 8 is 2 points on, so its copy is the other of the pair */
                const int xa = xl - kk.x, xb = xl - kk.y;
                const int sa = (q - xa) & 3, sb = (q - xb) & 3;
                const double *ca0 = cw + sa * wpad + xa, *ca8 = cw + (sa ^ 2) * wpad + xa + 2;
                const double *cb0 = cw + sb * wpad + xb, *cb8 = cw + (sb ^ 2) * wpad + xb + 2;
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    double d[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
                    for (int s = 0; s < KS; s++)
                        dmma(d, af[m][s], bf[s]);
                    o[m][0] = fma(ca0[16 * m], d[0], fma(cb0[16 * m], d[1], o[m][0]));
                    o[m][1] = fma(ca8[16 * m], d[2], fma(cb8[16 * m], d[3], o[m][1]));
                }
            };
            /* row by row: a row's chunks are in column order, so those
             * within the warp's reach are consecutive; two at a time, so
             * that one chunk's loads overlap the other's mma chain */
            const int b0 = bb * MMA_CAPC;
            for (int r = cis[0].x;; r++) {
                int cb = max(rfirst[r], b0) - b0, ce = min(rfirst[r + 1], b0 + nc) - b0;
                while (cb < ce && cis[cb].z < wklo)
                    cb++;
                while (ce > cb && cis[ce - 1].y > wkhi)
                    ce--;
                int c = cb;
                for (; c + 1 < ce; c += 2) {
                    chunk(c);
                    chunk(c + 1);
                }
                if (c < ce)
                    chunk(c);
                if (rfirst[r + 1] <= b0 + nc) /* the row ends in this batch */
                    mma_flush(o, a, seg, ibase, j0 + r, j0, j0 + nr - 1, stg, lane);
                if (rfirst[r + 1] >= b0 + nc)
                    break;
            }
            __syncthreads();
        }
    }
}

/* pht[i, j] = the segments' partial sums, added in segment order, for
 * the `count` values from partial's value `first` on. */
__global__ void k_mma_sum(const double *partial, double *pht, long long NM, long long first, long long count, int nseg)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count;
         q += (long long)gridDim.x * blockDim.x) {
        double v = 0.0;
        for (int s = 0; s < nseg; s++)
            v += partial[s * NM + first + q];
        pht[q] = v;
    }
}

/* Each (segment, tile, row)'s nonzeros within reach, as k_mma computes its
 * column range [klo, khi], so the kernel reads them instead of bisecting. */
dk_status mma_ranges(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    const long long MMA_TILE = mma_tile(p->mma_mt);
    long long tiles = (p->N + MMA_TILE - 1) / MMA_TILE, count = p->mma_nseg * tiles * p->M;
    if (count > (1ll << 26))
        return DK_OK; /* too many to keep: the kernel bisects */
    int *lo = (int *)malloc((size_t)count * sizeof(int)), *hi = (int *)malloc((size_t)count * sizeof(int));
    if (!lo || !hi) {
        free(lo), free(hi);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    auto bound = [&](long long j, long long key) {
        int64_t b = s->indptr[j], e = s->indptr[j + 1];
        while (b < e) {
            int64_t mid = b + (e - b) / 2;
            if (s->indices[mid] < key)
                b = mid + 1;
            else
                e = mid;
        }
        return (int)b;
    };
    long long at = 0;
    for (long long seg = 0; seg < p->mma_nseg; seg++)
        for (long long tile = 0; tile < tiles; tile++) {
            long long i0 = tile * MMA_TILE, klo = i0 - p->mma_rx, khi = i0 + MMA_TILE - 1 + p->mma_rx;
            if (p->mma_seg_len) {
                klo = max(klo, seg * p->mma_seg_len);
                khi = min(khi, seg * p->mma_seg_len + p->mma_seg_len - 1);
            }
            klo = max(klo, 0ll);
            khi = min(khi, p->N - 1);
            for (long long j = 0; j < p->M; j++, at++) {
                lo[at] = bound(j, klo);
                hi[at] = khi < klo ? lo[at] : bound(j, khi + 1);
            }
        }
    dk_status st = upload(&p->range_lo, lo, (size_t)count, "copying the nonzero ranges", msg);
    if (st == DK_OK)
        st = upload(&p->range_hi, hi, (size_t)count, "copying the nonzero ranges", msg);
    free(lo), free(hi);
    return st;
}

/* k_mma's shape for a problem: m-tiles per warp, c's reach, and the window
 * (one, or segments of the state with partial sums). */
struct Shape {
    int mt;
    long long rx, seg_len, wcap, nseg;
};

/* The variants "tiled-simt" and "banded-simt" ask for the vector kernels. */
bool wants_simt(const dk_enkf_setup *s)
{
    const char *dash = strchr(s->desc.variant, '-');
    return dash && !strcmp(dash, "-simt");
}

/* k_mma takes tiled and banded with 1-D C and L <= 16 (not the "-simt"
 * variants): c's window is the tile's reach when it fits in shared memory,
 * else segments of the state with partial sums (at most 1 GiB of them;
 * beyond, the vector kernels). False where it does not apply. */
bool shape(const dk_enkf_setup *s, Shape *out)
{
    const long long N = (long long)s->desc.n, L = (long long)s->desc.members, M = (long long)s->desc.H.rows;
    if (s->desc.loc_ndim == 2 || L > 4 * MMA_MAX_KS || 2 * N + 4 * mma_tile(4) >= INT32_MAX || wants_simt(s) ||
        (s->scheme != DK_ENKF_TILED && s->scheme != DK_ENKF_BANDED))
        return false;
    long long rx = s->scheme == DK_ENKF_TILED ? N - 1 : min((long long)s->rx, N - 1);
    /* tuning: c's window, 1024 to 4096 entries */
    long long wmax = dk_tuning_long("DAKIT_ENKF_CUDA_MMA_WMAX", MMA_WMAX, 1024, 4096);
    /* m-tiles per warp: 2 when the tile's reach fits the window, else 4 */
    int mt = 2 * mma_tile(2) + 2 * rx > wmax ? 4 : 2;
    long m = dk_tuning_long("DAKIT_ENKF_CUDA_MMA_MT", 0, 2, 4); /* tuning: 2 or 4 */
    if (m == 2 || m == 4)
        mt = (int)m;
    const long long MMA_TILE = mma_tile(mt);
    long long seg_len = 0, wcap = 2 * MMA_TILE + 2 * rx, nseg = 1;
    if (wcap > wmax) {
        seg_len = wmax - MMA_TILE;
        wcap = wmax;
        nseg = (N + seg_len - 1) / seg_len;
        if ((double)nseg * (double)N * (double)M * 8.0 > (double)(1ll << 30))
            return false;
    }
    *out = Shape{mt, rx, seg_len, wcap, nseg};
    return true;
}

bool applicable(const dk_enkf_setup *s, const dk_cuda_device *)
{
    Shape sh;
    return shape(s, &sh);
}

dk_status make(Plan *p, dk_msg *msg)
{
    Shape sh;
    if (!shape(p->s, &sh)) {
        dk_msg_set(msg, "cuda enkf: the tensor-core kernel does not apply to this problem");
        return DK_ERR_NOT_IMPLEMENTED;
    }
    p->mma_mt = sh.mt;
    p->mma_rx = (int)sh.rx;
    p->mma_seg_len = (int)sh.seg_len;
    p->mma_wcap = (int)sh.wcap;
    p->mma_nseg = (int)sh.nseg;
    if (sh.nseg > 1) {
        dk_status st = ensure(&p->mma_partial, sh.nseg * p->N * p->M, "allocating the partial sums", msg);
        if (st != DK_OK)
            return st;
    }
    return mma_ranges(p, msg);
}

template <int KS, int MT>
dk_status launch_mma(const MmaArgs &a, unsigned nseg, size_t shared, cudaStream_t stream, dk_msg *msg)
{
    const char *what = "the tensor-core covariance kernel";
    CUDA_TRY(cudaFuncSetAttribute(k_mma<KS, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared), what);
    unsigned tiles = (unsigned)((a.N + mma_tile(MT) - 1) / mma_tile(MT));
    k_mma<KS, MT><<<dim3(tiles, nseg), MMA_THREADS, shared, stream>>>(a);
    CUDA_TRY(cudaGetLastError(), what);
    return DK_OK;
}

/* PHT's rows [lo, hi): the tiles outside skipped, row i written at pht +
 * (i - lo) M (through the segments' partials, kept at their own rows, where
 * there are several) */
dk_status mma_cov_range(Plan *p, const double *e, double *pht, long long lo, long long hi, dk_msg *msg)
{
    const bool summed = p->mma_nseg > 1;
    MmaArgs a = {e, p->values, p->loc, p->indptr, p->indices, p->range_lo, p->range_hi,
                 summed ? p->mma_partial : pht, (int)p->N, (int)p->L, (int)p->M, p->mma_rx,
                 p->mma_seg_len, p->mma_wcap, (int)lo, (int)hi, summed ? 0 : (int)lo,
                 !(p->L & 1) && !((uintptr_t)e & 15), 1.0 / (double)(p->L - 1)};
    unsigned nseg = (unsigned)p->mma_nseg;
    int ks = (int)((p->L + 3) / 4), wide = p->mma_mt == 4;
    size_t shared = mma_shared(ks, p->mma_mt, p->mma_wcap);
    cudaStream_t st = p->dev->stream;
    dk_status rc;
    switch (ks) {
    case 1: rc = wide ? launch_mma<1, 4>(a, nseg, shared, st, msg) : launch_mma<1, 2>(a, nseg, shared, st, msg); break;
    case 2: rc = wide ? launch_mma<2, 4>(a, nseg, shared, st, msg) : launch_mma<2, 2>(a, nseg, shared, st, msg); break;
    case 3: rc = wide ? launch_mma<3, 4>(a, nseg, shared, st, msg) : launch_mma<3, 2>(a, nseg, shared, st, msg); break;
    default: rc = wide ? launch_mma<4, 4>(a, nseg, shared, st, msg) : launch_mma<4, 2>(a, nseg, shared, st, msg); break;
    }
    if (rc != DK_OK || nseg == 1)
        return rc;
    k_mma_sum<<<blocks_for((hi - lo) * p->M, THREADS), THREADS, 0, st>>>(p->mma_partial, pht, p->N * p->M, lo * p->M,
                                                                       (hi - lo) * p->M, (int)nseg);
    CUDA_TRY(cudaGetLastError(), "the tensor-core covariance kernel");
    return DK_OK;
}

dk_status mma_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    return mma_cov_range(p, e, pht, 0, p->N, msg);
}

} // namespace

const Solver dk_cuda_enkf::solver_mma = {
    .name = "mma",
    .applicable = applicable,
    .make = make,
    .cov = mma_cov,
    .reads_g = false,
    .cov_range = mma_cov_range,
};
