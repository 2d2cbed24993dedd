/* dakit cuda plugin, enkf: the fft solver. Column j of PHT is
 * 1/(L-1) sum_l e_l o C (e_l o h_j): the L*M sparse vectors are scattered,
 * two to a complex signal (batched, chunks of whole observations sized to a
 * memory budget), cuFFT Z2Z forward, times C's spectrum, inverse, and a
 * gather that multiplies by e_l and sums over l. States of up to 16 blocks
 * of <= 4096 points (1-D C) are embedded block by block, C as a 16 x 16
 * block Toeplitz product of the blocks' spectra (k_block_toeplitz):
 * transforms of one cuFFT pass each. Longer states and 2-D C (block
 * Toeplitz) take one embedding of the whole signal. fft_apply runs the
 * same transforms on dense vectors: the lowrank solver's C at plan time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

const size_t FFT_BUDGET = (size_t)1 << 30; /* bytes of batched transform data */
/* blocked embedding: at most BLOCKS_MAX blocks (k_block_toeplitz keeps a
 * signal's blocks and 2*BLOCKS_MAX - 1 spectra in registers), of at most
 * BLOCK_MAX points; longer signals take the whole-signal embedding */
const int BLOCKS_MAX = 16;
const long long BLOCK_MAX = 4096;

/* Vector v = (j - j0)*L + l of the chunk gets e_l o h_j in the embedding:
 * the real part of signal v/2 when v is even, the imaginary part when odd.
 * C's spectrum is real, so both parts go through the transforms unmixed.
 * Repeated columns of a row are summed by the first of their run. */
__global__ void k_scatter(const double *G, const int *indices, const int *indptr, const int *row_of, double *buf,
                          long long t_begin, long long t_end, long long j0, long long L, long long ny, long long P1,
                          long long P, int two_d)
{
    long long count = (t_end - t_begin) * L;
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count;
         q += (long long)gridDim.x * blockDim.x) {
        long long t = t_begin + q / L, l = q % L;
        int j = row_of[t];
        int k = indices[t];
        if (t > indptr[j] && indices[t - 1] == k)
            continue;
        double sum = 0;
        for (long long u = t; u < indptr[j + 1] && indices[u] == k; u++)
            sum += G[u * L + l];
        long long at = two_d ? ((long long)k / ny) * P1 + k % ny : k;
        long long v = (j - j0) * L + l;
        buf[(v / 2) * 2 * P + 2 * at + (v & 1)] = sum;
    }
}

__global__ void k_spectrum_multiply(cufftDoubleComplex *freq, const double *spectrum, long long P, long long count)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count;
         q += (long long)gridDim.x * blockDim.x) {
        double s = spectrum[q % P];
        freq[q].x *= s;
        freq[q].y *= s;
    }
}

/* The blocked embedding splits each signal into nb blocks x_q of b points
 * and writes C as nb x nb Toeplitz blocks T_{p-q}, each embedded in a
 * circulant of 2b points with spectrum Chat_{p-q}. Then y_p = sum_q
 * T_{p-q} x_q is, per frequency f, a small Toeplitz product of spectra:
 * Y_p[f] = sum_q Chat_{p-q}[f] X_q[f], with y_p the first half of Y_p's
 * inverse. One pass over the spectra does what a whole-signal embedding
 * needs a second transform pass each way and a multiply pass for; the
 * transforms of 2b points are each one cuFFT kernel.
 * The forward transforms read overlapping windows [x_q; x_{q+1}] (the
 * signal holds a zero block x_nb after its last), not zero-padded copies:
 * shifting by half the window multiplies the spectrum by (-1)^f, so the
 * window's spectrum is W_q = X_q + (-1)^f X_{q+1}, undone from the last
 * block backwards. In place: spec[(s*(nb+1) + q)*F + f], F = 2b. */
template <int NB>
__global__ void __launch_bounds__(128) k_block_toeplitz(cufftDoubleComplex *spec, const cufftDoubleComplex *chat,
                                                         long long F, int nb, long long signals, int per_thread)
{
    const long long f = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (f >= F)
        return;
    double2 c[2 * NB - 1];
#pragma unroll
    for (int d = 0; d < 2 * NB - 1; d++) {
        int dd = d - (NB - 1);
        c[d] = (dd > -nb && dd < nb) ? chat[(dd + nb - 1) * F + f] : make_double2(0.0, 0.0);
    }
    const double sign = (f & 1) ? -1.0 : 1.0;
    const long long s_end = min(signals, (blockIdx.y + 1ll) * per_thread);
    for (long long s = blockIdx.y * (long long)per_thread; s < s_end; s++) {
        cufftDoubleComplex *base = spec + s * (nb + 1) * F + f;
        double2 x[NB];
#pragma unroll
        for (int q = 0; q < NB; q++)
            x[q] = q < nb ? base[q * F] : make_double2(0.0, 0.0);
#pragma unroll
        for (int q = NB - 2; q >= 0; q--) {
            x[q].x -= sign * x[q + 1].x;
            x[q].y -= sign * x[q + 1].y;
        }
#pragma unroll
        for (int p = 0; p < NB; p++) {
            double re = 0.0, im = 0.0;
#pragma unroll
            for (int q = 0; q < NB; q++) {
                const double2 w = c[p - q + NB - 1];
                re = fma(w.x, x[q].x, fma(-w.y, x[q].y, re));
                im = fma(w.x, x[q].y, fma(w.y, x[q].x, im));
            }
            if (p < nb)
                base[p * F] = make_double2(re, im);
        }
    }
}

/* pht[i, j] = 1/(L-1) sum_l e[i,l] (C v_jl)[i] for the chunk's rows. With
 * the blocked embedding (blk > 0) point i = p*blk + r sits at r in the
 * inverse of block p, whose windows are 2*blk apart. */
__global__ void __launch_bounds__(256) k_gather(const double *e, const double *buf, double *pht, long long N,
                                                long long L, long long M, long long j0, long long nj, long long ny,
                                                long long P1, long long P, int two_d, long long blk, double inv_lm1)
{
    /* 32 points x 32 observations: read along the points (the signals'
     * order), written along the observations (PHT's rows) */
    __shared__ double tile[32][33];
    const long long i0 = blockIdx.x * 32ll, jj0 = blockIdx.y * 32ll, i = i0 + threadIdx.x;
    if (i < N) {
        long long at = two_d ? (i / ny) * P1 + i % ny : blk ? i + (i / blk) * blk : i;
        for (int r = threadIdx.y; r < 32 && jj0 + r < nj; r += 8) {
            double v = 0;
            for (long long l = 0; l < L; l++) {
                long long vec = (jj0 + r) * L + l;
                v = fma(e[i * L + l], buf[(vec / 2) * 2 * P + 2 * at + (vec & 1)], v);
            }
            tile[r][threadIdx.x] = v * inv_lm1;
        }
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        long long ii = i0 + r, jj = jj0 + threadIdx.x;
        if (ii < N && jj < nj)
            pht[ii * M + j0 + jj] = tile[threadIdx.x][r];
    }
}

/* The smallest 2^a 3^b 5^c 7^d >= n: cuFFT's fast sizes. */
long long fft_size(long long n)
{
    for (long long m = n;; m++) {
        long long r = m;
        for (long long f : {2, 3, 5, 7})
            while (r % f == 0)
                r /= f;
        if (r == 1)
            return m;
    }
}

/* A batched Z2Z plan on the plan's stream: transforms of n[0] (x n[1])
 * points, idist and odist apart (idist < n: overlapping input windows). */
dk_status make_plan(Plan *p, cufftHandle *h, int *have, int rank, const int *n, long long idist, long long odist,
                    long long batch, dk_msg *msg)
{
    int embed[2] = {n[0], rank == 2 ? n[1] : 1};
    CUFFT_TRY(cufftCreate(h), "cufftCreate");
    *have = 1;
    size_t work = 0;
    CUFFT_TRY(cufftMakePlanMany(*h, rank, (int *)n, embed, 1, (int)idist, embed, 1, (int)odist, CUFFT_Z2Z, (int)batch,
                              &work),
            "planning");
    CUFFT_TRY(cufftSetStream(*h, p->dev->stream), "cufftSetStream");
    return DK_OK;
}

/* The whole-signal embedding's transforms, contiguous. */
dk_status make_transform(Plan *p, cufftHandle *h, int *have, long long batch, dk_msg *msg)
{
    int n[2] = {(int)p->P0, (int)p->P1};
    return make_plan(p, h, have, p->two_d ? 2 : 1, n, p->P, p->P, batch, msg);
}

/* col (bytes of it) through the forward transform h, by way of dev. */
dk_status forward_on_device(Plan *p, cufftHandle h, cufftDoubleComplex *dev, cufftDoubleComplex *col, size_t bytes,
                            dk_msg *msg)
{
    const char *what = "transforming C's embedding";
    CUDA_TRY(cudaMemcpyAsync(dev, col, bytes, cudaMemcpyDefault, p->dev->stream), what);
    CUFFT_TRY(cufftExecZ2Z(h, dev, dev, CUFFT_FORWARD), what);
    CUDA_TRY(cudaMemcpyAsync(col, dev, bytes, cudaMemcpyDefault, p->dev->stream), what);
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), what);
    return DK_OK;
}

/* The forward transforms of `batch` embeddings of n[0] (x n[1]) points held
 * in col, on the device array dev, back into col, divided by their size:
 * the spectra of C, made once a plan. */
dk_status spectra(Plan *p, int rank, const int *n, long long batch, cufftDoubleComplex *dev, cufftDoubleComplex *col,
                  dk_msg *msg)
{
    const long long size = (long long)n[0] * (rank == 2 ? n[1] : 1);
    const size_t bytes = (size_t)(size * batch) * sizeof *col;
    cufftHandle h;
    int have = 0;
    dk_status st = make_plan(p, &h, &have, rank, n, size, size, batch, msg);
    if (st == DK_OK)
        st = forward_on_device(p, h, dev, col, bytes, msg);
    if (have)
        cufftDestroy(h);
    for (long long q = 0; st == DK_OK && q < size * batch; q++)
        col[q] = make_cuDoubleComplex(cuCreal(col[q]) / (double)size, cuCimag(col[q]) / (double)size);
    return st;
}

/* The embedding's first column (per axis in 2-D): C[i,k] = col[(i-k) mod P]. */
double embedded(const dk_enkf_setup *s, long long P0, long long P1, long long a, long long b)
{
    long long n0 = s->desc.loc_ndim == 1 ? (long long)s->desc.n : (long long)s->desc.nx;
    long long n1 = s->desc.loc_ndim == 1 ? 1 : (long long)s->desc.ny;
    long long da = a < n0 ? a : (P0 - a < n0 ? P0 - a : -1);
    long long db = s->desc.loc_ndim == 1 ? 0 : (b < n1 ? b : (P1 - b < n1 ? P1 - b : -1));
    if (da < 0 || db < 0)
        return 0.0;
    return s->loc[da * n1 + db];
}

/* Observations per chunk for an embedding of P points within the budget
 * (8 P bytes a vector, two vectors a signal), and the chunk's signals. */
void chunking(const Plan *p, long long P, size_t budget, long long *rows, long long *signals)
{
    long long r = (long long)(budget / (size_t)(8 * P)) / p->L;
    r = r < 1 ? 1 : r > p->M ? p->M : r;
    *rows = r;
    *signals = (r * p->L + 1) / 2;
}

/* Sizes 2^a r >= n with 2^a >= 256 and r a small odd 7-smooth factor:
 * sizes that cuFFT splits into few passes, most of them radix 2. Writes the
 * `want` smallest distinct ones, ascending, into out; returns how many. */
int pow2_sizes(long long n, long long *out, int want)
{
    const long long odd[] = {1, 3, 5, 7, 9, 15, 21, 25, 27, 45, 49};
    long long all[sizeof odd / sizeof odd[0]];
    int count = 0;
    for (long long r : odd) {
        long long m = 256 * r;
        while (m < n)
            m *= 2;
        all[count++] = m;
    }
    std::sort(all, all + count);
    int have = 0;
    for (int i = 0; i < count && have < want; i++)
        if (have == 0 || all[i] != out[have - 1])
            out[have++] = all[i];
    return have;
}

long long pow2_size(long long n)
{
    long long m;
    pow2_sizes(n, &m, 1);
    return m;
}

/* Times the transform pairs of time_transform on h; the caller destroys
 * the events it finds made. */
dk_status time_pairs(Plan *p, cufftHandle h, cufftDoubleComplex *scratch, cudaEvent_t *a, cudaEvent_t *b, float *ms,
                     dk_msg *msg)
{
    const char *what = "timing a transform size";
    CUDA_TRY(cudaEventCreate(a), what);
    CUDA_TRY(cudaEventCreate(b), what);
    for (int rep = 0; rep < 4; rep++) {
        if (rep == 1)
            CUDA_TRY(cudaEventRecord(*a, p->dev->stream), what);
        CUFFT_TRY(cufftExecZ2Z(h, scratch, scratch, CUFFT_FORWARD), what);
        CUFFT_TRY(cufftExecZ2Z(h, scratch, scratch, CUFFT_INVERSE), what);
    }
    CUDA_TRY(cudaEventRecord(*b, p->dev->stream), what);
    CUDA_TRY(cudaEventSynchronize(*b), what);
    CUDA_TRY(cudaEventElapsedTime(ms, *a, *b), what);
    return DK_OK;
}

/* Milliseconds of three forward and inverse transform pairs of a chunk with
 * an embedding of P points (after one pair as a warm-up), on a zeroed
 * scratch array. */
dk_status time_transform(Plan *p, long long P, size_t budget, cufftDoubleComplex *scratch, float *ms, dk_msg *msg)
{
    long long rows, signals;
    chunking(p, P, budget, &rows, &signals);
    p->P0 = P;
    p->P = P;
    cufftHandle h;
    int have = 0;
    dk_status st = make_transform(p, &h, &have, signals, msg);
    cudaEvent_t a = nullptr, b = nullptr;
    if (st == DK_OK)
        st = time_pairs(p, h, scratch, &a, &b, ms, msg);
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    if (have)
        cufftDestroy(h);
    return st;
}

/* cuFFT's time depends on how the embedding's size factors as much as on
 * the size: a slightly larger 2^a r size, done in fewer passes, can beat the
 * smallest 7-smooth size, and which wins depends on N and the device. So
 * the plan times one chunk's transforms at the smooth size and at the three
 * smallest 2^a r sizes within a quarter above it, as FFTW's planner would,
 * and keeps the fastest. */
void pick_fft_size(Plan *p, size_t budget)
{
    long long n = 2 * p->N - 1, smooth = fft_size(n), cand[4] = {smooth};
    int ncand = 1 + pow2_sizes(n, cand + 1, 3);
    p->P0 = smooth;
    long long rows, most = 0;
    int keep = 0;
    for (int c = 0; c < ncand; c++) {
        if (cand[c] > smooth + smooth / 4 || cand[c] > INT32_MAX || (c > 0 && cand[c] == smooth))
            continue;
        cand[keep++] = cand[c];
        long long sig;
        chunking(p, cand[c], budget, &rows, &sig);
        most = sig * cand[c] > most ? sig * cand[c] : most;
    }
    if (keep < 2)
        return;
    cufftDoubleComplex *scratch = nullptr;
    size_t bytes = (size_t)most * sizeof(cufftDoubleComplex);
    if (dk_cuda_failed(cudaMalloc(&scratch, bytes)))
        return; /* no room to compare: the smooth size */
    /* a size that cannot be timed (no room for cuFFT's work area, say) is
     * not taken; the smooth size, first, is the plan's if none can be */
    dk_msg scratch_msg;
    float best = 0;
    long long pick = smooth;
    int timed = 0;
    if (!dk_cuda_failed(cudaMemsetAsync(scratch, 0, bytes, p->dev->stream)))
        for (int c = 0; c < keep; c++) {
            float ms = 0;
            if (time_transform(p, cand[c], budget, scratch, &ms, &scratch_msg) == DK_OK && (!timed || ms < best)) {
                best = ms;
                pick = cand[c];
                timed = 1;
            }
        }
    (void)cudaGetLastError();
    cudaFree(scratch);
    p->P0 = pick;
    p->P = pick;
}

/* The block size of the blocked embedding: the smallest power of two that
 * cuts the state into at most BLOCKS_MAX blocks, or 0 (the whole-signal
 * embedding) for 2-D C, long states or DAKIT_ENKF_CUDA_FFT_BLOCK=off.
 * Powers of two rather than other smooth sizes: cuFFT's fastest. */
long long pick_block(const Plan *p)
{
    if (p->two_d)
        return 0;
    const char *force = dk_tuning_string("DAKIT_ENKF_CUDA_FFT_BLOCK"); /* tuning: off, or a block size */
    long long least = (p->N + BLOCKS_MAX - 1) / BLOCKS_MAX;
    if (force && (!strcmp(force, "off") || !strcmp(force, "0")))
        return 0;
    long long forced = dk_tuning_long("DAKIT_ENKF_CUDA_FFT_BLOCK", 0, least, BLOCK_MAX);
    if (forced)
        return forced;
    long long b = 64;
    while (b < least)
        b *= 2;
    return b <= BLOCK_MAX ? b : 0;
}

/* The blocked embedding (k_block_toeplitz): buffers, the 2 nb - 1 blocks'
 * spectra and the window transforms. */
dk_status make_blocked(Plan *p, long long b, size_t budget, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    const long long nb = (p->N + b - 1) / b, F = 2 * b, nd = 2 * nb - 1;
    p->blk = b;
    p->nb = nb;
    p->P0 = p->P = (nb + 1) * F;
    p->P1 = 1;
    long long signals, last;
    chunking(p, p->P, budget, &p->rows_per_chunk, &signals);
    last = ((p->M % p->rows_per_chunk) * p->L + 1) / 2;
    CUDA_TRY(cudaMalloc(&p->buf, (size_t)(signals * p->P) * sizeof(cufftDoubleComplex)),
             "allocating the FFT work array");
    CUDA_TRY(cudaMalloc(&p->blocks, (size_t)(signals * (nb + 1) * b) * sizeof(cufftDoubleComplex)),
             "allocating the FFT input array");
    CUDA_TRY(cudaMalloc(&p->blk_spectrum, (size_t)(nd * F) * sizeof(cufftDoubleComplex)),
             "allocating C's block spectra");

    /* block T_d (d = p - q) of C: T_d[r, s] = c[|d b + r - s|], embedded in
     * a circulant of F points whose first column holds distances d b + m */
    cufftDoubleComplex *col = (cufftDoubleComplex *)malloc((size_t)(nd * F) * sizeof *col);
    if (!col) {
        dk_msg_set(msg, "cuda enkf: out of host memory for C's block spectra");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long d = -(nb - 1); d < nb; d++)
        for (long long m = 0; m < F; m++) {
            long long dist = m < b ? d * b + m : d * b + m - F;
            dist = dist < 0 ? -dist : dist;
            double v = (m != b && dist < p->N) ? s->loc[dist] : 0.0;
            col[(d + nb - 1) * F + m] = make_cuDoubleComplex(v, 0.0);
        }
    const int n = (int)F;
    dk_status st = spectra(p, 1, &n, nd, p->blk_spectrum, col, msg);
    if (st == DK_OK)
        st = copy_in(p->blk_spectrum, col, (size_t)(nd * F), "copying C's block spectra", msg);
    free(col);
    if (st != DK_OK)
        return st;
    /* forward: the windows [x_q; x_{q+1}] b apart, the last one of a chunk
     * ending at its last signal's zero block; inverse: in place */
    if ((st = make_plan(p, &p->fwd_whole, &p->have_fwd_whole, 1, &n, b, F, signals * (nb + 1) - 1, msg)) != DK_OK ||
        (st = make_plan(p, &p->whole, &p->have_whole, 1, &n, F, F, signals * (nb + 1), msg)) != DK_OK)
        return st;
    if (last > 0 &&
        ((st = make_plan(p, &p->fwd_last, &p->have_fwd_last, 1, &n, b, F, last * (nb + 1) - 1, msg)) != DK_OK ||
         (st = make_plan(p, &p->last, &p->have_last, 1, &n, F, F, last * (nb + 1), msg)) != DK_OK))
        return st;
    return DK_OK;
}

dk_status make_fft(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    /* tuning: chunk size (L2-sized chunks) */
    size_t budget = (size_t)dk_tuning_long("DAKIT_ENKF_CUDA_FFT_BUDGET_MB", (long)(FFT_BUDGET >> 20), 1, 4096) << 20;
    long long b = pick_block(p);
    if (b)
        return make_blocked(p, b, budget, msg);
    if (p->two_d) {
        p->P0 = fft_size(2 * (long long)s->desc.nx - 1);
        p->P1 = fft_size(2 * (long long)s->desc.ny - 1);
    } else {
        p->P1 = 1;
        /* tuning: a fixed embedding size instead of the timed choice (a
         * size; "pow2"/"p2", the 2^a r size; "smooth", the 7-smooth one) */
        const char *size = dk_tuning_string("DAKIT_ENKF_CUDA_FFT_SIZE");
        long long fixed = dk_tuning_long("DAKIT_ENKF_CUDA_FFT_SIZE", 0, 2 * p->N - 1, 4 * p->N);
        if (size && (!strcmp(size, "pow2") || !strcmp(size, "p2")))
            p->P0 = pow2_size(2 * p->N - 1);
        else if (size && !strcmp(size, "smooth"))
            p->P0 = fft_size(2 * p->N - 1);
        else if (fixed)
            p->P0 = fixed;
        else
            pick_fft_size(p, budget);
    }
    p->P = p->P0 * p->P1;
    if (p->P > INT32_MAX) {
        dk_msg_set(msg, "cuda enkf: the circulant embedding (%lld points) is too large for one cuFFT transform", p->P);
        return DK_ERR_INVALID_ARGUMENT;
    }
    long long signals, last;
    chunking(p, p->P, budget, &p->rows_per_chunk, &signals);
    last = ((p->M % p->rows_per_chunk) * p->L + 1) / 2;
    CUDA_TRY(cudaMalloc(&p->buf, (size_t)(signals * p->P) * sizeof(cufftDoubleComplex)),
             "allocating the FFT work array");
    CUDA_TRY(cudaMalloc(&p->spectrum, (size_t)p->P * sizeof(double)), "allocating C's spectrum");

    /* C's spectrum: one transform of the embedding, real by symmetry. */
    cufftDoubleComplex *col = (cufftDoubleComplex *)malloc((size_t)p->P * sizeof *col);
    double *re = (double *)malloc((size_t)p->P * sizeof *re);
    if (!col || !re) {
        free(col), free(re);
        dk_msg_set(msg, "cuda enkf: out of host memory for C's embedding (%lld points)", p->P);
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (long long a = 0; a < p->P0; a++)
        for (long long b = 0; b < p->P1; b++)
            col[a * p->P1 + b] = make_cuDoubleComplex(embedded(s, p->P0, p->P1, a, b), 0.0);
    const int n[2] = {(int)p->P0, (int)p->P1};
    dk_status st = spectra(p, p->two_d ? 2 : 1, n, 1, p->buf, col, msg);
    if (st == DK_OK) {
        for (long long q = 0; q < p->P; q++)
            re[q] = cuCreal(col[q]);
        st = copy_in(p->spectrum, re, (size_t)p->P, "copying C's spectrum", msg);
    }
    free(col), free(re);
    if (st != DK_OK)
        return st;
    if ((st = make_transform(p, &p->whole, &p->have_whole, signals, msg)) != DK_OK)
        return st;
    if (last > 0 && (st = make_transform(p, &p->last, &p->have_last, last, msg)) != DK_OK)
        return st;
    return DK_OK;
}

/* The chunk's signals, scattered into `in`, times C: forward, C's spectrum
 * (block Toeplitz or pointwise), inverse, into p->buf. */
dk_status convolve_chunk(Plan *p, cufftDoubleComplex *in, int whole, long long signals, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    cufftHandle inverse = whole ? p->whole : p->last;
    cufftHandle forward = p->blk ? (whole ? p->fwd_whole : p->fwd_last) : inverse;
    CUFFT_TRY(cufftExecZ2Z(forward, in, p->buf, CUFFT_FORWARD), "forward transform");
    if (p->blk) {
        const long long F = 2 * p->blk;
        /* two signals a thread: the spectra of C it holds in
         * registers serve both */
        const int per_thread = 2;
        dim3 grid(blocks_for(F, 128), (unsigned)((signals + per_thread - 1) / per_thread));
        k_block_toeplitz<BLOCKS_MAX><<<grid, 128, 0, st>>>(p->buf, p->blk_spectrum, F, (int)p->nb, signals,
                                                           per_thread);
        CUDA_TRY(cudaGetLastError(), "the block Toeplitz kernel");
    } else {
        k_spectrum_multiply<<<blocks_for(signals * p->P, THREADS), THREADS, 0, st>>>(p->buf, p->spectrum, p->P,
                                                                                   signals * p->P);
        CUDA_TRY(cudaGetLastError(), "the spectrum kernel");
    }
    CUFFT_TRY(cufftExecZ2Z(inverse, p->buf, p->buf, CUFFT_INVERSE), "inverse transform");
    return DK_OK;
}

/* Dense vector c0 + v (N points) into vector v of the chunk's input, as
 * k_scatter places them. */
__global__ void k_scatter_dense(const double *w, double *in, long long N, long long count, long long c0, long long ny,
                                long long P1, long long in_len, int two_d)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count * N;
         q += (long long)gridDim.x * blockDim.x) {
        long long v = q / N, i = q % N;
        long long at = two_d ? (i / ny) * P1 + i % ny : i;
        in[(v / 2) * 2 * in_len + 2 * at + (v & 1)] = w[(c0 + v) * N + i];
    }
}

/* Vector v of the transformed chunk back to dense vector c0 + v, as
 * k_gather reads them. */
__global__ void k_gather_dense(const double *buf, double *y, long long N, long long count, long long c0, long long ny,
                               long long P1, long long P, int two_d, long long blk)
{
    for (long long q = blockIdx.x * (long long)blockDim.x + threadIdx.x; q < count * N;
         q += (long long)gridDim.x * blockDim.x) {
        long long v = q / N, i = q % N;
        long long at = two_d ? (i / ny) * P1 + i % ny : blk ? i + (i / blk) * blk : i;
        y[(c0 + v) * N + i] = buf[(v / 2) * 2 * P + 2 * at + (v & 1)];
    }
}

dk_status fft_cov(Plan *p, const double *e, double *pht, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    /* the signals' input: the whole embedding, or nb + 1 blocks (see k_block_toeplitz) */
    cufftDoubleComplex *in = p->blk ? p->blocks : p->buf;
    long long in_len = p->blk ? (p->nb + 1) * p->blk : p->P;
    for (long long j0 = 0; j0 < p->M; j0 += p->rows_per_chunk) {
        long long nj = p->M - j0 < p->rows_per_chunk ? p->M - j0 : p->rows_per_chunk;
        long long signals = (nj * p->L + 1) / 2;
        int whole = nj == p->rows_per_chunk;
        long long t_begin = p->s->indptr[j0], t_end = p->s->indptr[j0 + nj];
        CUDA_TRY(cudaMemsetAsync(in, 0, (size_t)(signals * in_len) * sizeof(cufftDoubleComplex), st),
                 "clearing the FFT input");
        if (t_end > t_begin) {
            k_scatter<<<blocks_for((t_end - t_begin) * p->L, THREADS), THREADS, 0, st>>>(
                p->G, p->indices, p->indptr, p->row_of, (double *)in, t_begin, t_end, j0, p->L, p->ny, p->P1, in_len,
                p->two_d);
            CUDA_TRY(cudaGetLastError(), "the scatter kernel");
        }
        dk_status rc = convolve_chunk(p, in, whole, signals, msg);
        if (rc != DK_OK)
            return rc;
        k_gather<<<dim3(blocks_for(p->N, 32), (unsigned)((nj + 31) / 32)), dim3(32, 8), 0, st>>>(
            e, (const double *)p->buf, pht, p->N, p->L, p->M, j0, nj, p->ny, p->P1, p->P, p->two_d, p->blk,
            1.0 / (double)(p->L - 1));
        CUDA_TRY(cudaGetLastError(), "the gather kernel");
    }
    return DK_OK;
}

bool applicable(const dk_enkf_setup *s, const dk_cuda_device *)
{
    return s->scheme == DK_ENKF_FFT;
}

} // namespace

/* y_c = C w_c for `count` dense vectors of N points (device, vector c at
 * w + c N), through full chunks of the plan's transforms (a short last
 * chunk is padded with zero vectors). */
dk_status dk_cuda_enkf::fft_apply(Plan *p, const double *w, double *y, long long count, dk_msg *msg)
{
    cudaStream_t st = p->dev->stream;
    cufftDoubleComplex *in = p->blk ? p->blocks : p->buf;
    long long in_len = p->blk ? (p->nb + 1) * p->blk : p->P;
    long long signals = (p->rows_per_chunk * p->L + 1) / 2, per_chunk = 2 * signals;
    for (long long c0 = 0; c0 < count; c0 += per_chunk) {
        long long n = count - c0 < per_chunk ? count - c0 : per_chunk;
        CUDA_TRY(cudaMemsetAsync(in, 0, (size_t)(signals * in_len) * sizeof(cufftDoubleComplex), st),
                 "clearing the FFT input");
        k_scatter_dense<<<blocks_for(n * p->N, THREADS), THREADS, 0, st>>>(w, (double *)in, p->N, n, c0, p->ny, p->P1,
                                                                          in_len, p->two_d);
        CUDA_TRY(cudaGetLastError(), "the dense scatter kernel");
        dk_status rc = convolve_chunk(p, in, 1, signals, msg);
        if (rc != DK_OK)
            return rc;
        k_gather_dense<<<blocks_for(n * p->N, THREADS), THREADS, 0, st>>>((const double *)p->buf, y, p->N, n, c0,
                                                                         p->ny, p->P1, p->P, p->two_d, p->blk);
        CUDA_TRY(cudaGetLastError(), "the dense gather kernel");
    }
    return DK_OK;
}

dk_status dk_cuda_enkf::fft_make(Plan *p, dk_msg *msg) { return make_fft(p, msg); }

/* What make_fft allocated, released once the lowrank solver is done with it. */
void dk_cuda_enkf::fft_release(Plan *p)
{
    cufftDoubleComplex *arrays[] = {p->buf, p->blocks, p->blk_spectrum};
    for (cufftDoubleComplex *a : arrays)
        if (a)
            cudaFree(a);
    if (p->spectrum)
        cudaFree(p->spectrum);
    p->buf = p->blocks = p->blk_spectrum = nullptr;
    p->spectrum = nullptr;
    cufftHandle *plans[] = {&p->whole, &p->last, &p->fwd_whole, &p->fwd_last};
    int *have[] = {&p->have_whole, &p->have_last, &p->have_fwd_whole, &p->have_fwd_last};
    for (int k = 0; k < 4; k++)
        if (*have[k]) {
            cufftDestroy(*plans[k]);
            *have[k] = 0;
        }
}

const Solver dk_cuda_enkf::solver_fft = {
    .name = "fft",
    .applicable = applicable,
    .make = make_fft,
    .cov = fft_cov,
    .reads_g = true,
};
