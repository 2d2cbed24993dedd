/* dakit cuda plugin, enkf: HPHT = H PHT from the PHT any solver made,
 * the upper triangle in two stages (partial sums over segments of each row
 * of H, then their sum), mirrored into the lower. */
#include <stdlib.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

/* partial[(a*S + s)*M + j], j >= a: row a of H times PHT over the columns
 * of segment s, [s*width, (s+1)*width). A warp takes nonzeros, its lanes 32
 * consecutive j (one coalesced row of PHT); the 8 warps' sums are added in
 * a fixed order, so results repeat exactly. HPHT is symmetric, so only its
 * upper triangle is summed: row a reads the sectors of PHT's rows from
 * column a on. The launch bounds give a full SM of warps (32 registers
 * each), each with four rows of PHT in flight, to hide the loads' latency. */
__global__ void __launch_bounds__(THREADS, 8) k_hpht_partial(const double *pht, const int *seg, const int *indices,
                                                          const double *values, double *partial, long long M,
                                                          long long S)
{
    __shared__ double red[THREADS / 32][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = THREADS / 32;
    const long long s = blockIdx.y;
    for (long long a = blockIdx.x; a < M; a += gridDim.x) {
        long long sb = seg[a * (S + 1) + s], se = seg[a * (S + 1) + s + 1];
        for (long long j0 = a & ~31ll; j0 < M; j0 += 32) {
            long long j = j0 + lane;
            double acc = 0;
            if (j < M && j >= a) {
                long long t = sb + warp;
                for (; t + 3 * warps < se; t += 4 * warps) {
                    double rows[4];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        rows[u] = pht[(long long)indices[t + u * warps] * M + j];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        acc = fma(values[t + u * warps], rows[u], acc);
                }
                for (; t < se; t += warps)
                    acc = fma(values[t], pht[(long long)indices[t] * M + j], acc);
            }
            red[warp][lane] = acc;
            __syncthreads();
            if (warp == 0 && j < M && j >= a) {
                double sum = 0;
                for (int w = 0; w < warps; w++)
                    sum += red[w][lane];
                partial[(a * S + s) * M + j] = sum;
            }
            __syncthreads();
        }
    }
}

/* One warp per entry of the upper triangle, written to both triangles:
 * the lanes sum strided segments, then a shuffle tree (a thread per entry
 * would wait on S dependent loads). */
__global__ void k_hpht_sum(const double *partial, double *hpht, long long M, long long S)
{
    const int lane = threadIdx.x & 31;
    for (long long q = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; q < M * M;
         q += (long long)gridDim.x * blockDim.x / 32) {
        long long a = q / M, j = q % M;
        if (j < a)
            continue;
        double sum = 0;
        for (long long s = lane; s < S; s += 32)
            sum += partial[(a * S + s) * M + j];
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, o);
        if (lane == 0)
            hpht[q] = hpht[j * M + a] = sum;
    }
}

/* HPHT's segments are column ranges of width ceil(N / S), the same for
 * every row, so that the blocks in flight (rows fastest) share the rows of
 * PHT they read; their bounds in each row are found here once. */
dk_status make_hpht_segments(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    long long width = p->seg_width, count = p->M * (p->S + 1);
    int *seg = (int *)malloc((size_t)count * sizeof(int));
    if (!seg) {
        dk_msg_set(msg, "cuda enkf: out of host memory for HPHT's segments");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long a = 0; a < p->M; a++) {
        long long t = (long long)s->indptr[a];
        for (long long q = 0; q <= p->S; q++) {
            while (t < (long long)s->indptr[a + 1] && (long long)s->indices[t] < q * width)
                t++;
            seg[a * (p->S + 1) + q] = (int)(q == p->S ? (long long)s->indptr[a + 1] : t);
        }
    }
    dk_status st = upload(&p->hpht_seg, seg, (size_t)count, "copying HPHT's segments", msg);
    free(seg);
    return st;
}

} // namespace

dk_status dk_cuda_enkf::hpht_make(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    /* HPHT's segments: enough blocks to fill the device, about 256 nonzeros
     * of the longest row each (at most 512 segments), partial sums within
     * 256 MiB */
    long long most = 0;
    for (long long j = 0; j < p->M; j++)
        most = max(most, (long long)(s->indptr[j + 1] - s->indptr[j]));
    p->S = min(512ll, max(1ll, most / 256));
    p->S = max(1ll, min(p->S, (1ll << 25) / (p->M * p->M)));
    p->seg_width = (p->N + p->S - 1) / p->S;
    dk_status st = ensure(&p->partial, p->M * p->M * p->S, "allocating the HPHT partial sums", msg);
    if (st == DK_OK)
        st = make_hpht_segments(p, msg);
    return st;
}

dk_status dk_cuda_enkf::hpht_cov(Plan *p, const double *pht, double *hpht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    /* rows of H the fastest: the blocks in flight share a segment's
     * columns, so each row of PHT comes from DRAM about once */
    dim3 grid((unsigned)(p->M < 65535 ? p->M : 65535), (unsigned)p->S);
    k_hpht_partial<<<grid, THREADS, 0, st>>>(pht, p->hpht_seg, p->indices, p->values, p->partial, p->M, p->S);
    k_hpht_sum<<<blocks_for(p->M * p->M * 32, THREADS), THREADS, 0, st>>>(p->partial, hpht, p->M, p->S);
    CUDA_TRY(cudaGetLastError(), "the HPHT kernels");
    return DK_OK;
}
