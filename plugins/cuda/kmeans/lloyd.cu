/* dakit cuda plugin, kmeans: the whole Lloyd loop in one cooperative kernel
 * (k_lloyd), for every plan with contiguity or k <= DK_KMEANS_MAX_K; the
 * variants are its template flags, picked in plan.cu.
 *
 * A persistent grid (as many blocks as fit on the device at once) runs every
 * iteration; grid-wide syncs separate the phases, and the convergence test is
 * made on the device, so the host launches once and reads the result once.
 *   A  each thread takes points in a grid-stride loop (whole warps step
 *      together), two at a time for d <= 8, holds their features in
 *      registers (two 16-byte loads for point-major d = 8, and so on), finds
 *      each one's least-cost centroid (centroids in shared memory, rows
 *      padded to DMAX so they are read 16 bytes at a time; contiguity reads
 *      the previous labels of the w x w window) and writes the label. Labels
 *      are the reference's bit for bit: every distance and cost that decides
 *      a label is rounded operation by operation as the reference rounds it
 *      (_rn intrinsics, no FMA contraction), and plain k-means first screens
 *      the centroids by a cheaper bound and recomputes exactly where two are
 *      close (screened_labels). The lanes of a warp with the same label then
 *      sum their points by shuffles (__match_any_sync groups them), and one
 *      lane per distinct label adds into its warp's partial sums in shared
 *      memory: no two lanes hit the same address, so no atomics (or the
 *      block's one copy with shared atomics, when per-warp copies would not
 *      fit). No global atomic at all. The block then writes its partial sums
 *      and counts to global memory.
 *   B  one warp per (cluster, feature) reduces the partials of every block,
 *      in double and in a fixed order, and writes the new centroid
 *      coordinate (the old one when the cluster is empty) and its move.
 *   C  every block reads all moves and stops when the largest is below tol.
 * After the loop: the objective (double) and, with contiguity, the final
 * labels copied out of the ping-pong buffers; plain k-means run to max_iters
 * gets its objective from the last iteration instead (see the kernel's end).
 * Data written by other blocks in the same launch are read with __ldcg (L2),
 * since L1 is not coherent across SMs.
 * Thread 0 of block 0 stamps %globaltimer at the phase boundaries, which gives
 * the assignment / update split without a second launch. Variant mma's
 * assignment (tensor cores, Hamerly's bounds) is in mma.cuh. */
#include <cooperative_groups.h>

#include "kmeans.cuh"
#include "mma.cuh"

using namespace dk_cuda_kmeans;

namespace cg = cooperative_groups;

namespace {

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int DMAX>
__device__ __forceinline__ void load_point(const Args &a, long long i, float *x)
{
    load_row<DMAX>(a.x, a.sp, a.sf, a.d, a.vec4, i, x);
}

/* Adds the lane's point x (label l, -1 for none) into the partial sums:
 * lanes with the same label first sum by shuffles, then the lowest of them
 * adds. WSUM: sums and counts are this warp's own copy, and the adding lanes
 * hold distinct labels, so plain adds suffice (and the order is fixed);
 * otherwise the block's one copy takes shared atomics. Rows are ds = d | 1
 * floats apart: an odd stride puts the same feature of different labels in
 * different banks (with 8 the adding lanes of 16 labels met in 4 banks).
 * UNIFORM: a warp of one label (common in contiguous images) sums by a
 * butterfly, and a warp of none returns at once. Every lane calls it. */
template <int DMAX, bool WSUM, bool UNIFORM = false>
__device__ __forceinline__ void accumulate(int l, float *x, int d, int ds, float *sums, unsigned *counts)
{
    const int lane = threadIdx.x & 31;
    unsigned peers = __match_any_sync(0xffffffffu, l);
    if (UNIFORM && peers == 0xffffffffu) { /* one label in the whole warp: a butterfly, or nothing to add */
        if (l < 0)
            return;
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < d)
                for (int o = 16; o > 0; o >>= 1)
                    x[f] += __shfl_xor_sync(0xffffffffu, x[f], o);
    } else {
        sum_peers<DMAX>(peers, x, d);
    }
    if (l >= 0 && lane == __ffs(peers) - 1) {
#pragma unroll
        for (int f = 0; f < DMAX; f++)
            if (f < d) {
                if (WSUM)
                    sums[l * ds + f] += x[f];
                else
                    atomicAdd(&sums[l * ds + f], x[f]);
            }
        if (WSUM)
            counts[l] += (unsigned)__popc(peers);
        else
            atomicAdd(&counts[l], (unsigned)__popc(peers));
    }
    if (WSUM)
        __syncwarp();
}

/* The contiguity cost with the previous labels of the window staged in
 * shared memory: halo holds the labels of a (TILE_H + 2r) x (32 + 2r) patch
 * (-1 outside the image or masked), and (hy, hx) is this pixel in it. The
 * arithmetic is the reference's, rounded as it rounds. For plans whose
 * counts do not pack (see ContigShape); table as in best_label_packed. */
template <int DMAX>
__device__ __forceinline__ int best_label_tile(const Args &a, const float *x, const float *Cs, const short *halo,
                                               int hw, int hy, int hx, const float *table, float inv_d)
{
    const int r = a.window / 2;
    int m = 0;
    for (int y = -r; y <= r; y++)
        for (int c = -r; c <= r; c++)
            m += (y || c) && halo[(hy + y) * hw + hx + c] >= 0;
    const float *row = table ? table + m * a.window * a.window : nullptr;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < a.k; c++) {
        const float dist = distance2<DMAX>(x, Cs + c * DMAX);
        int same = 0;
        if (m)
            for (int y = -r; y <= r; y++)
                for (int cx = -r; cx <= r; cx++)
                    same += (y || cx) && halo[(hy + y) * hw + hx + cx] == c;
        const float cost = contig_cost_with(a.lambda, dist, inv_d, row ? row[same] : contig_term(a.lambda, m, same));
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

const int TILE_H = THREADS / 32; /* contiguity tiles: one warp per row of 32 pixels */

/* Tiles across an image of cols columns, and in an image. */
__host__ __device__ inline long long tiles_across(long long cols) { return (cols + 31) / 32; }
__host__ __device__ inline long long tile_count(long long rows, long long cols)
{
    return tiles_across(cols) * ((rows + TILE_H - 1) / TILE_H);
}

/* How the window's label counts are made. Packed: each previous label
 * becomes one word with a field of `bits` bits per cluster (1 in its
 * label's field; 32-bit words where k fields fit, else 64-bit); a window's
 * counts are then sums of words: each warp sums along the patch's rows by
 * shuffles, from the labels it loaded, into shared memory, and each pixel
 * sums 2r + 1 of those down its column (2w words a pixel instead of w^2
 * labels, and one barrier a tile). The fields hold w^2, so no sum carries
 * into the next field. Otherwise the labels themselves are staged (shorts)
 * and counted per pixel. Table: the reference's (1 - lambda) (m - same) / m
 * for every m and same of the window, computed once a launch with the same
 * roundings, so no division is left in the loop over the clusters. */
struct ContigShape {
    int bits, packed, table; /* packed: the word's bits, 32 or 64, or 0 */
};

__host__ __device__ inline ContigShape contig_shape(int window, int k)
{
    const int full = window * window;
    int bits = 0;
    while ((1 << bits) <= full)
        bits++;
    ContigShape s;
    s.bits = bits;
    s.packed = k * bits <= 32 ? 32 : k * bits <= 64 ? 64 : 0;
    s.table = full <= 49;
    return s;
}

/* Shared memory of the contiguity tiles, in bytes: the row sums (two
 * buffers, alternating by tile) or the staged labels, then the cost table. */
__host__ __device__ inline size_t contig_smem(int window, int k)
{
    const ContigShape s = contig_shape(window, k);
    const int r = window / 2, hw = 32 + 2 * r, hh = TILE_H + 2 * r;
    const size_t staged = s.packed ? (size_t)2 * hh * 32 * (s.packed / 8) : (size_t)hh * hw * sizeof(short);
    return staged + (s.table ? (size_t)window * window * window * window * sizeof(float) : 0);
}

/* The least-cost label from the packed counts of the pixel's window (its
 * own label already taken out); m, the valid neighbours, is their sum.
 * table (or NULL): contig_term for every m and same of the window. */
template <int DMAX, typename W>
__device__ __forceinline__ int best_label_packed(const Args &a, const float *x, const float *Cs, W counts, int bits,
                                                 const float *table, float inv_d)
{
    const W field = (W(1) << bits) - W(1);
    int m = 0;
    W rest = counts;
    for (int c = 0; c < a.k; c++, rest >>= bits)
        m += (int)(rest & field);
    const float *row = table ? table + m * a.window * a.window : nullptr;
    int best = 0;
    float best_cost = 0.0f;
    for (int c = 0; c < a.k; c++, counts >>= bits) {
        const int same = (int)(counts & field);
        const float dist = distance2<DMAX>(x, Cs + c * DMAX);
        const float cost = contig_cost_with(a.lambda, dist, inv_d, row ? row[same] : contig_term(a.lambda, m, same));
        if (c == 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}


/* What a tile costs, in about a valid pixel's work: one without valid
 * pixels is skipped but for its labels. */
__device__ __forceinline__ long long tile_cost(int valid) { return valid ? 128 + valid : 16; }

/* The block's tiles, [*lo, *hi) in raster order: the tiles are dealt out
 * in contiguous runs of about equal cost (tile_cost of the valid pixels
 * counted before the first iteration). Every block computes the same deal
 * from the same counts, so which block sums which pixels does not depend on
 * timing. Each block scans all the counts: once a launch. */
__device__ void tile_range(const Args &a, long long tiles, long long *lo, long long *hi)
{
    __shared__ long long part[THREADS];
    __shared__ long long edge[2];
    const long long chunk = (tiles + THREADS - 1) / THREADS;
    const long long t0 = min(tiles, (long long)threadIdx.x * chunk), t1 = min(tiles, t0 + chunk);
    long long mine = 0;
    for (long long t = t0; t < t1; t++)
        mine += tile_cost(__ldcg(a.tile_valid + t));
    part[threadIdx.x] = mine;
    if (threadIdx.x < 2)
        edge[threadIdx.x] = tiles;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) { /* inclusive scan */
        const long long v = threadIdx.x >= off ? part[threadIdx.x - off] : 0;
        __syncthreads();
        part[threadIdx.x] += v;
        __syncthreads();
    }
    const long long total = part[THREADS - 1];
    long long run = part[threadIdx.x] - mine;
    for (long long t = t0; t < t1; t++) {
        const long long c = tile_cost(__ldcg(a.tile_valid + t));
        const long long owner = (run + c / 2) * gridDim.x / total;
        if (owner >= blockIdx.x)
            atomicMin(&edge[0], t);
        if (owner > blockIdx.x) {
            atomicMin(&edge[1], t);
            break;
        }
        run += c;
    }
    __syncthreads();
    *lo = edge[0];
    *hi = edge[1];
    __syncthreads(); /* edge is read before any thread may call again */
}

/* Tiles t in [lo, hi) as tile rows and columns, stepped without a division. */
struct TileWalk {
    long long t, end, ty, tx, tiles_x;
    __device__ TileWalk(const Args &a, long long lo, long long hi) : t(lo), end(hi)
    {
        tiles_x = tiles_across(a.cols);
        ty = lo / tiles_x;
        tx = lo % tiles_x;
    }
    __device__ bool more() const { return t < end; }
    __device__ void next()
    {
        t++;
        if (++tx == tiles_x) {
            tx = 0;
            ty++;
        }
    }
};

/* The pixel's point and validity in a tile (zeros where there is none). */
template <int DMAX>
__device__ __forceinline__ bool tile_point(const Args &a, long long row, long long col, float *x)
{
#pragma unroll
    for (int f = 0; f < DMAX; f++)
        x[f] = 0.0f;
    if (row >= a.rows || col >= a.cols)
        return false;
    const long long i = row * a.cols + col;
    if (a.mask && !a.mask[i])
        return false;
    load_point<DMAX>(a, i, x);
    return true;
}

/* One iteration's contiguity labels over the block's tiles, packed counts
 * (ContigShape): a warp loads a patch row's labels (32 lanes plus 2r more
 * in the lanes below 2r), sums their words along the row by shuffles into
 * rowsum, and after one barrier each pixel sums its column of 2r + 1 row
 * sums less its own word. rowsum has two buffers, alternating by tile: a
 * tile's writes cannot meet the last tile's reads, and the next barrier
 * keeps the one after from meeting them. */
template <int DMAX, bool WSUM, typename W>
__device__ __forceinline__ void contig_tiles_packed(const Args &a, long long lo, long long hi, int bits,
                                                    const int32_t *prev, int32_t *cur,
                                                    const float *Cs, W *rowsum, const float *table, float inv_d,
                                                    float *my_sums, unsigned *my_counts, int ds)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int r = a.window / 2, hh = TILE_H + 2 * r;
    auto word = [&](int l) { return l >= 0 ? W(1) << (bits * l) : W(0); };
    int buf = 0;
    for (TileWalk w(a, lo, hi); w.more(); w.next()) {
        const long long row0 = w.ty * TILE_H, col0 = w.tx * 32;
        const long long row = row0 + warp, col = col0 + lane;
        if (!__ldcg(a.tile_valid + w.t)) { /* no valid pixel: labels -1, nothing to sum */
            if (row < a.rows && col < a.cols)
                cur[row * a.cols + col] = -1;
            continue;
        }
        float x[DMAX];
        const bool valid = tile_point<DMAX>(a, row, col, x);
        const int own = valid ? __ldcg(prev + row * a.cols + col) : -1;
        W *rs = rowsum + buf * hh * 32;
        for (int y = warp; y < hh; y += TILE_H) {
            const long long gy = row0 - r + y, c0 = col0 - r + lane, c1 = c0 + 32;
            const bool row_in = gy >= 0 && gy < a.rows;
            const W here = word(row_in && c0 >= 0 && c0 < a.cols ? __ldcg(prev + gy * a.cols + c0) : -1);
            const W past = word(row_in && lane < 2 * r && c1 < a.cols ? __ldcg(prev + gy * a.cols + c1) : -1);
            W sum = here;
            for (int dc = 1; dc <= 2 * r; dc++) {
                const int from = (lane + dc) & 31;
                const W w0 = __shfl_sync(0xffffffffu, here, from), w1 = __shfl_sync(0xffffffffu, past, from);
                sum += lane + dc < 32 ? w0 : w1;
            }
            rs[y * 32 + lane] = sum;
        }
        __syncthreads();
        int l = -1;
        if (valid) {
            W counts = 0;
            for (int y = 0; y <= 2 * r; y++)
                counts += rs[(warp + y) * 32 + lane];
            l = best_label_packed<DMAX, W>(a, x, Cs, counts - word(own), bits, table, inv_d);
        }
        if (row < a.rows && col < a.cols)
            cur[row * a.cols + col] = l;
        accumulate<DMAX, WSUM, true>(l, x, a.d, ds, my_sums, my_counts);
        buf ^= 1;
    }
}

/* The same where the counts do not pack: the patch's labels staged as
 * shorts (-1 outside the image or masked) and counted per pixel. */
template <int DMAX, bool WSUM>
__device__ __forceinline__ void contig_tiles_halo(const Args &a, long long lo, long long hi, const int32_t *prev,
                                                  int32_t *cur, const float *Cs, short *halo, const float *table,
                                                  float inv_d, float *my_sums, unsigned *my_counts, int ds)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int r = a.window / 2, hw = 32 + 2 * r, hh = TILE_H + 2 * r;
    for (TileWalk w(a, lo, hi); w.more(); w.next()) {
        const long long row0 = w.ty * TILE_H, col0 = w.tx * 32;
        const long long row = row0 + warp, col = col0 + lane;
        if (!__ldcg(a.tile_valid + w.t)) {
            if (row < a.rows && col < a.cols)
                cur[row * a.cols + col] = -1;
            continue;
        }
        float x[DMAX];
        const bool valid = tile_point<DMAX>(a, row, col, x);
        __syncthreads(); /* the last tile's readers are done with halo */
        for (int y = warp; y < hh; y += TILE_H)
            for (int c = lane; c < hw; c += 32) {
                const long long gy = row0 - r + y, gc = col0 - r + c;
                halo[y * hw + c] =
                    gy >= 0 && gy < a.rows && gc >= 0 && gc < a.cols ? (short)__ldcg(prev + gy * a.cols + gc) : (short)-1;
            }
        __syncthreads();
        const int l = valid ? best_label_tile<DMAX>(a, x, Cs, halo, hw, warp + r, lane + r, table, inv_d) : -1;
        if (row < a.rows && col < a.cols)
            cur[row * a.cols + col] = l;
        accumulate<DMAX, WSUM, true>(l, x, a.d, ds, my_sums, my_counts);
    }
}

/* WSUM per-warp partial sums without atomics (see accumulate); SCREEN the
 * plain labels through screened_labels (else exact_labels for every point);
 * PF the plain path loads the next step's points before it labels this
 * step's. The plain path takes P points per thread per step (2 for d <= 8:
 * each centroid row read from shared memory serves both). MMA (with WSUM,
 * SCREEN and PF, k <= 16, d <= 8) labels and sums on the tensor cores
 * (mma_assign) where the rows allow 16-byte copies (vec4) and no mask is
 * given, but in the last iteration's fold, which takes the plain path's
 * exact distances. */
template <int DMAX, bool CONTIG, bool WSUM, bool SCREEN, bool PF = false, bool MMA = false>
__global__ void __launch_bounds__(THREADS, DMAX <= 8 ? (CONTIG ? 4 : 3) : 1) k_lloyd(Args a)
{
    constexpr int P = DMAX <= 8 ? 2 : 1;
    cg::grid_group grid = cg::this_grid();
    extern __shared__ __align__(16) unsigned char smem[];
    const int kd = a.k * a.d;
    const int ds = a.d | 1;
    const int kdpad = a.k * DMAX;
    const int copies = WSUM ? THREADS / 32 : 1;
    float *Cs = (float *)smem;
    float *Ch = Cs + kdpad;
    float *sums = Ch + a.k;
    unsigned *counts = (unsigned *)(sums + copies * a.k * ds);
    /* contiguity: the row sums or the staged labels, then the cost table
     * (see ContigShape) */
    const ContigShape shape = contig_shape(a.window, a.k);
    unsigned char *staged = (unsigned char *)(((uintptr_t)(counts + copies * a.k) + 7) & ~(uintptr_t)7);
    float *table = shape.table ? (float *)(staged + contig_smem(a.window, a.k)) - a.window * a.window * a.window * a.window
                               : nullptr;
    const float inv_d = __fdiv_rn(1.0f, (float)a.d);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *my_sums = WSUM ? sums + warp * a.k * ds : sums;
    unsigned *my_counts = WSUM ? counts + warp * a.k : counts;
    __shared__ double scratch[THREADS / 32];
    __shared__ int stop, rmax_bits, shift_max_bits;
    __shared__ float shift[MMA ? 16 : 1]; /* mma: Bounds.shift */
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool timer = blockIdx.x == 0 && threadIdx.x == 0;
    unsigned long long assign_ns = 0, update_ns = 0;
    /* screened_labels' bound, see there */
    const float eps_coef = 12.0f * (float)(a.d + 2) * 0x1p-24f;
    if (threadIdx.x == 0)
        stop = 0; /* read first after phase A's __syncthreads */

    long long tile_lo = 0, tile_hi = 0; /* contiguity: this block's tiles (tile_range) */
    if (CONTIG) {
        /* labels of iteration 0: plain nearest centroid to the initial ones */
        for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
            Cs[j] = j % DMAX < a.d ? a.init[j / DMAX * a.d + j % DMAX] : 0.0f;
        if (shape.table) {
            const int full = a.window * a.window;
            for (int j = threadIdx.x; j < full * full; j += blockDim.x)
                table[j] = contig_term(a.lambda, j / full, j % full);
        }
        __syncthreads();
        /* whole warps step together (see the plain path), for the vote */
        const long long tiles_x = tiles_across(a.cols);
        for (long long base = first - lane; base < a.n; base += stride) {
            const long long i = base + lane;
            const bool valid = i < a.n && (!a.mask || a.mask[i]);
            int l = -1;
            if (valid) {
                float x[1][DMAX];
                load_point<DMAX>(a, i, x[0]);
                exact_labels<DMAX, 1>(x, Cs, a.k, &l);
            }
            if (i < a.n)
                a.lab[0][i] = l;
            /* the tiles' valid pixels, one atomic per tile the warp meets */
            const long long row = i / a.cols, tile = row / TILE_H * tiles_x + (i - row * a.cols) / 32;
            const unsigned peers = __match_any_sync(0xffffffffu, (unsigned long long)tile);
            const unsigned hits = peers & __ballot_sync(0xffffffffu, valid);
            if (hits && lane == __ffs(peers) - 1)
                atomicAdd(a.tile_valid + tile, __popc(hits));
        }
        grid.sync();
        tile_range(a, tile_count(a.rows, a.cols), &tile_lo, &tile_hi);
    }

    int it = 0;
    double move = 0;
    while (it < a.max_iters) {
        unsigned long long t0 = timer ? globaltimer() : 0;
        const float *Cprev = it == 0 ? a.init : a.cent[(it - 1) & 1];
        float *Cnext = a.cent[it & 1];
        const int32_t *prev = CONTIG ? a.lab[it & 1] : nullptr;
        int32_t *cur = CONTIG ? a.lab[(it + 1) & 1] : a.labels;
        /* plain k-means, last iteration: each point's exact distance to its
         * centroid, for the objective without another pass (see below) */
        const bool fold = !CONTIG && it == a.max_iters - 1;
        /* A: assignment and block partial sums */
        for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
            Cs[j] = j % DMAX < a.d ? __ldcg(Cprev + j / DMAX * a.d + j % DMAX) : 0.0f;
        for (int j = threadIdx.x; j < copies * a.k * ds; j += blockDim.x)
            sums[j] = 0.0f;
        for (int j = threadIdx.x; j < copies * a.k; j += blockDim.x)
            counts[j] = 0;
        if (threadIdx.x == 0) {
            rmax_bits = 0;
            shift_max_bits = 0;
        }
        __syncthreads();
        float rmax2 = 0.0f;
        /* the tensor-core screen, and from the second iteration its bounds */
        const bool mma_it = MMA && !fold && a.vec4 && !a.mask, moves = mma_it && it > 0;
        Bounds bd = {shift, 0.0f, 0.0f};
        if (SCREEN && !CONTIG) {
            screen_terms<DMAX>(Cs, Ch, a.k, &rmax_bits);
            if (moves)
                for (int c = threadIdx.x; c < a.k; c += blockDim.x) {
                    double m2 = 0.0;
                    for (int f = 0; f < a.d; f++)
                        m2 = __dadd_rn(m2, __ldcg(a.move2 + c * a.d + f));
                    const float sh = __fmul_rn((float)sqrt(m2), 1.0f + 0x1p-20f);
                    shift[c] = sh;
                    atomicMax(&shift_max_bits, sh == sh ? __float_as_int(sh) : 0x7fffffff);
                }
            __syncthreads();
            rmax2 = __int_as_float(rmax_bits);
            bd.max = __int_as_float(shift_max_bits);
            bd.tol = __fmul_ru(4.0f * (float)(a.d + 3) * 0x1p-24f, __fsqrt_ru(rmax2));
        }
        if (CONTIG) {
            /* tiles of TILE_H rows x 32 columns, their window's labels
             * staged in shared memory instead of read k + 1 times per pixel */
            if (shape.packed == 32)
                contig_tiles_packed<DMAX, WSUM, unsigned>(a, tile_lo, tile_hi, shape.bits, prev, cur, Cs, (unsigned *)staged, table,
                                                          inv_d, my_sums, my_counts, ds);
            else if (shape.packed == 64)
                contig_tiles_packed<DMAX, WSUM, unsigned long long>(a, tile_lo, tile_hi, shape.bits, prev, cur, Cs,
                                                                    (unsigned long long *)staged, table, inv_d,
                                                                    my_sums, my_counts, ds);
            else
                contig_tiles_halo<DMAX, WSUM>(a, tile_lo, tile_hi, prev, cur, Cs, (short *)staged, table, inv_d, my_sums,
                                              my_counts, ds);
        } else if (mma_it) {
            /* the warps' stages after the counts, 16-byte aligned, indexed from smem (shared loads, not generic) */
            const size_t at = ((size_t)((unsigned char *)(counts + copies * a.k) - smem) + 15) & ~(size_t)15;
            float *stage = (float *)(smem + at) + warp * MMA_STAGE;
            if (moves)
                mma_assign<DMAX, true>(a, cur, Cs, Ch, rmax2, eps_coef + 256.0f * 0x1p-24f, my_sums, my_counts, ds, stage, bd);
            else
                mma_assign<DMAX, false>(a, cur, Cs, Ch, rmax2, eps_coef + 256.0f * 0x1p-24f, my_sums, my_counts, ds, stage,
                                        bd);
        } else {
            /* P points per thread, all loads issued before any is used;
             * whole warps step together (stride and first - lane are
             * multiples of 32), so every lane takes part in the shuffles */
            double obj = 0.0;
            /* PF: the next step's points are loaded before this step's
             * labels are computed, so their latency hides behind the work */
            float xn[PF ? P : 1][DMAX];
            if (PF)
#pragma unroll
                for (int p = 0; p < P; p++) {
                    const long long i = first - lane + p * stride + lane;
#pragma unroll
                    for (int f = 0; f < DMAX; f++)
                        xn[PF ? p : 0][f] = 0.0f;
                    if (i < a.n)
                        load_point<DMAX>(a, i, xn[PF ? p : 0]);
                }
            for (long long base = first - lane; base < a.n; base += P * stride) {
                float x[P][DMAX];
                long long idx[P];
                int l[P];
#pragma unroll
                for (int p = 0; p < P; p++) {
                    idx[p] = base + p * stride + lane;
                    if (PF) {
                        const long long i = idx[p] + P * stride;
#pragma unroll
                        for (int f = 0; f < DMAX; f++) {
                            x[p][f] = xn[PF ? p : 0][f];
                            xn[PF ? p : 0][f] = 0.0f;
                        }
                        if (i < a.n)
                            load_point<DMAX>(a, i, xn[PF ? p : 0]);
                    } else {
#pragma unroll
                        for (int f = 0; f < DMAX; f++)
                            x[p][f] = 0.0f;
                        if (idx[p] < a.n)
                            load_point<DMAX>(a, idx[p], x[p]);
                    }
                }
                if (SCREEN)
                    screened_labels<DMAX, P>(x, Cs, Ch, a.k, rmax2, eps_coef, l);
                else
                    exact_labels<DMAX, P>(x, Cs, a.k, l);
#pragma unroll
                for (int p = 0; p < P; p++) {
                    const bool valid = idx[p] < a.n && (!a.mask || a.mask[idx[p]]);
                    if (!valid) {
                        l[p] = -1;
#pragma unroll
                        for (int f = 0; f < DMAX; f++)
                            x[p][f] = 0.0f;
                    }
                    if (idx[p] < a.n)
                        cur[idx[p]] = l[p];
                    if (fold && valid)
                        obj += distance2<DMAX>(x[p], Cs + l[p] * DMAX);
                }
#pragma unroll
                for (int p = 0; p < P; p++)
                    accumulate<DMAX, WSUM>(l[p], x[p], a.d, ds, my_sums, my_counts);
            }
            if (fold) {
                obj = block_sum(obj, scratch);
                if (threadIdx.x == 0)
                    a.pobj[blockIdx.x] = obj;
            }
        }
        __syncthreads();
        /* the warps' copies in a fixed order */
        for (int j = threadIdx.x; j < kd; j += blockDim.x) {
            const int c = j / a.d, f = j % a.d;
            float t = 0.0f;
            for (int w = 0; w < copies; w++)
                t += sums[(w * a.k + c) * ds + f];
            a.psum[(size_t)blockIdx.x * kd + j] = t;
        }
        for (int j = threadIdx.x; j < a.k; j += blockDim.x) {
            unsigned t = 0;
            for (int w = 0; w < copies; w++)
                t += counts[w * a.k + j];
            a.pcount[(size_t)blockIdx.x * a.k + j] = t;
        }
        grid.sync();
        unsigned long long t1 = timer ? globaltimer() : 0;

        /* B: one warp per (cluster, feature), spread over the blocks first so
         * the partials' reads come from many SMs at once; each lane sums a
         * fixed set of blocks in double, then a fixed shuffle tree: the
         * result does not depend on timing. The count is summed again by
         * each of the cluster's warps (integers: exact; a block's count is
         * read as signed, for mma's changes). mma's sums and counts are the
         * changes since the last iteration's, kept in tot. */
        for (int w = blockIdx.x + gridDim.x * warp; w < kd; w += gridDim.x * (THREADS / 32)) {
            const int c = w / a.d;
            /* mma: the last sums, read before the partials' sum needs them */
            const double s_last = moves && lane == 0 ? __ldcg(a.tot[(it - 1) & 1] + w) : 0.0;
            const long long cnt_last = moves && lane == 0 ? __ldcg(a.tot_count[(it - 1) & 1] + c) : 0;
            double s = 0.0;
            long long cnt = 0;
            for (int b = lane; b < (int)gridDim.x; b += 32) {
                s += (double)__ldcg(a.psum + (size_t)b * kd + w);
                cnt += (int)__ldcg(a.pcount + (size_t)b * a.k + c);
            }
            for (int o = 16; o > 0; o >>= 1) {
                s += __shfl_down_sync(0xffffffffu, s, o);
                cnt += __shfl_down_sync(0xffffffffu, cnt, o);
            }
            if (lane == 0) {
                if (mma_it) {
                    s += s_last;
                    cnt += cnt_last;
                    a.tot[it & 1][w] = s;
                    if (w % a.d == 0)
                        a.tot_count[it & 1][c] = cnt;
                }
                const float old = __ldcg(Cprev + w);
                const float next = cnt > 0 ? (float)(s / (double)cnt) : old;
                const double diff = (double)next - (double)old;
                Cnext[w] = next;
                a.move2[w] = __dmul_rn(diff, diff);
                if (fold) {
                    /* sum over the cluster's points of |x - next|^2 - |x - old|^2
                     * = cnt (|m - next|^2 - |m - old|^2), m their mean; this
                     * feature's share */
                    const double m = cnt > 0 ? s / (double)cnt : 0.0, e = m - (double)next, g = m - (double)old;
                    a.corr[w] = (double)cnt * (e * e - g * g);
                    a.corr_old[w] = (double)cnt * g * g;
                    if (w % a.d == 0)
                        a.ccount[c] = cnt;
                }
            }
        }
        grid.sync();
        it++;
        /* C: the convergence test, the same in every block: each cluster's
         * move^2 summed over its features in order as the reference does,
         * the largest by a block reduction (max: any order). With tol <= 0
         * nothing stops early, so only the last move (for the result) is
         * needed. */
        if (a.tol > 0 || it == a.max_iters) {
            double mx = 0.0;
            for (int c = threadIdx.x; c < a.k; c += blockDim.x) {
                double m2 = 0.0;
                for (int f = 0; f < a.d; f++)
                    m2 = __dadd_rn(m2, __ldcg(a.move2 + c * a.d + f));
                mx = fmax(mx, m2);
            }
            mx = block_max(mx, scratch);
            if (threadIdx.x == 0) {
                move = sqrt(mx);
                stop = move < a.tol;
            }
            __syncthreads();
        }
        if (timer) {
            unsigned long long t2 = globaltimer();
            assign_ns += t1 - t0;
            update_ns += t2 - t1;
        }
        if (stop)
            break;
    }

    const float *Cfin = a.cent[(it - 1) & 1];
    /* Plain k-means that ran to max_iters: the objective is the sum over the
     * points of the exact distance to the centroid they were assigned to in
     * the last iteration (pobj), plus the correction to the final centroids
     * (corr), which is small when the centroids have settled. When it is not
     * (a large old-centroid term: cancellation), or with contiguity (the
     * labels are copied out anyway), or after an early stop, one more pass
     * computes it directly. The decision is the same in every block. */
    bool direct = true;
    if (!CONTIG && it == a.max_iters) {
        double t = 0, cn = 0, co = 0, nv = 0;
        for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
            t += __ldcg(a.pobj + b);
        for (int j = threadIdx.x; j < kd; j += blockDim.x) {
            cn += __ldcg(a.corr + j);
            co += __ldcg(a.corr_old + j);
        }
        for (int c = threadIdx.x; c < a.k; c += blockDim.x)
            nv += (double)__ldcg(a.ccount + c);
        t = block_sum(t, scratch);
        cn = block_sum(cn, scratch);
        co = block_sum(co, scratch);
        nv = block_sum(nv, scratch);
        if (threadIdx.x == 0) {
            const double total = t + cn;
            stop = co <= total; /* reused as the verdict */
            if (stop && blockIdx.x == 0) {
                a.result[0] = it;
                a.result[1] = total;
                a.result[2] = move;
                a.result[3] = nv;
                a.result[4] = (double)assign_ns;
                a.result[5] = (double)update_ns;
            }
        }
        __syncthreads();
        direct = !stop;
    }
    if (!direct) {
        if (blockIdx.x == 0)
            for (int j = threadIdx.x; j < kd; j += blockDim.x)
                a.out_centroids[j] = __ldcg(Cfin + j);
        return;
    }

    /* the objective under the final centroids, and the final labels */
    for (int j = threadIdx.x; j < kdpad; j += blockDim.x)
        Cs[j] = j % DMAX < a.d ? __ldcg(Cfin + j / DMAX * a.d + j % DMAX) : 0.0f;
    __syncthreads();
    const int32_t *fin = CONTIG ? a.lab[it & 1] : a.labels;
    double obj = 0;
    unsigned long long valid = 0;
    for (long long i = first; i < a.n; i += stride) {
        int32_t l = __ldcg(fin + i);
        if (CONTIG)
            a.labels[i] = l;
        if (l < 0)
            continue;
        valid++;
        float x[DMAX];
        load_point<DMAX>(a, i, x);
        obj += distance2<DMAX>(x, Cs + l * DMAX);
    }
    obj = block_sum(obj, scratch);
    double v = block_sum((double)valid, scratch);
    if (threadIdx.x == 0) {
        a.pobj[blockIdx.x] = obj;
        a.pvalid[blockIdx.x] = (unsigned long long)v;
    }
    if (blockIdx.x == 0)
        for (int j = threadIdx.x; j < kd; j += blockDim.x)
            a.out_centroids[j] = Cs[j / a.d * DMAX + j % a.d];
    grid.sync();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double total = 0;
        unsigned long long nv = 0;
        for (int b = 0; b < (int)gridDim.x; b++) {
            total += __ldcg(a.pobj + b);
            nv += __ldcg(a.pvalid + b);
        }
        a.result[0] = it;
        a.result[1] = total;
        a.result[2] = move;
        a.result[3] = (double)nv;
        a.result[4] = (double)assign_ns;
        a.result[5] = (double)update_ns;
    }
}

template <int DMAX>
kernel_fn pick_d(bool contig, bool wsum, bool screen, bool prefetch, bool mma)
{
    if (mma) /* lloyd_plan checked its conditions; DMAX > 8 never asks */
        return k_lloyd<DMAX, false, true, true, true, DMAX <= 8>;
    if (contig)
        return wsum ? k_lloyd<DMAX, true, true, false> : k_lloyd<DMAX, true, false, false>;
    if (screen && wsum && prefetch)
        return k_lloyd<DMAX, false, true, true, true>;
    if (screen)
        return wsum ? k_lloyd<DMAX, false, true, true> : k_lloyd<DMAX, false, false, true>;
    return wsum ? k_lloyd<DMAX, false, true, false> : k_lloyd<DMAX, false, false, false>;
}

kernel_fn pick(int d, bool contig, bool wsum, bool screen, bool prefetch, bool mma)
{
    if (d <= 4)
        return pick_d<4>(contig, wsum, screen, prefetch, mma);
    if (d <= 8)
        return pick_d<8>(contig, wsum, screen, prefetch, mma);
    if (d <= 16)
        return pick_d<16>(contig, wsum, screen, prefetch, false);
    if (d <= 32)
        return pick_d<32>(contig, wsum, screen, prefetch, false);
    return pick_d<64>(contig, wsum, screen, prefetch, false);
}

/* The labels into the caller's host memory, across the bus: with `all`
 * every one, else those of the warps' 32-label runs that hold any label but
 * -1 (the host memory holds -1 already). Whole runs go as whole 128-byte
 * writes, which the bus moves faster than scattered ones. */
__global__ void k_put_labels(const int32_t *__restrict__ lab, int32_t *host, long long n, bool all)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i - (threadIdx.x & 31) < n; i += stride) {
        const int32_t l = i < n ? __ldcs(lab + i) : -1;
        if ((all || __any_sync(0xffffffffu, l >= 0)) && i < n)
            host[i] = l;
    }
}

/* Labels for page-locked host memory: the kernel labels device memory
 * (label_stage) and, with a mask, the copy engine meanwhile fills the host
 * labels with -1 on a side stream, so that only the unmasked points' labels
 * cross the bus after the kernel (host_labels_finish). */
dk_status host_labels_start(Plan *p, int32_t *host, bool masked, dk_msg *msg)
{
    const size_t bytes = p->s.desc.n * sizeof(int32_t);
    cudaStream_t sm = p->dev->stream;
    if (!p->label_stage) {
        void *m = NULL;
        CUDA_TRY(cudaMalloc(&m, bytes), "allocating the kmeans labels' device copy");
        p->label_stage = (int32_t *)m;
    }
    if (!masked)
        return DK_OK;
    if (!p->minus_ones) {
        void *m = NULL;
        CUDA_TRY(cudaMalloc(&m, bytes), "allocating the masked points' labels");
        p->minus_ones = (int32_t *)m;
        CUDA_TRY(cudaMemsetAsync(m, 0xff, bytes, sm), "filling the masked points' labels");
    }
    if (!p->side) {
        CUDA_TRY(cudaStreamCreateWithFlags(&p->side, cudaStreamNonBlocking), "creating the kmeans side stream");
        CUDA_TRY(cudaEventCreateWithFlags(&p->side_start, cudaEventDisableTiming), "cudaEventCreate");
        CUDA_TRY(cudaEventCreateWithFlags(&p->side_done, cudaEventDisableTiming), "cudaEventCreate");
    }
    /* after what the stream holds, which may still use the host labels */
    CUDA_TRY(cudaEventRecord(p->side_start, sm), "ordering the labels' fill");
    CUDA_TRY(cudaStreamWaitEvent(p->side, p->side_start, 0), "ordering the labels' fill");
    CUDA_TRY(cudaMemcpyAsync(host, p->minus_ones, bytes, cudaMemcpyDefault, p->side), "filling the host labels");
    CUDA_TRY(cudaEventRecord(p->side_done, p->side), "ordering the labels' fill");
    return DK_OK;
}

dk_status host_labels_finish(Plan *p, int32_t *host, bool masked, dk_msg *msg)
{
    cudaStream_t sm = p->dev->stream;
    if (masked)
        CUDA_TRY(cudaStreamWaitEvent(sm, p->side_done, 0), "waiting for the labels' fill");
    k_put_labels<<<p->blocks, THREADS, 0, sm>>>(p->label_stage, host, (long long)p->s.desc.n, !masked);
    CUDA_TRY(cudaGetLastError(), "writing the labels to host memory");
    return DK_OK;
}

} // namespace

namespace dk_cuda_kmeans {

/* The cooperative kernel of the variant's flags, its grid and scratch, and
 * its arguments; the caller destroys p on failure. */
dk_status lloyd_plan(Plan *p, const dk_kmeans_setup *setup, bool wsum, bool screen, bool prefetch, bool mma,
                     dk_msg *msg)
{
    const dk_cuda_device *dev = p->dev;
    const dk_kmeans_desc &d = setup->desc;
    size_t kd = (size_t)d.k * d.d;
    int dmax = d.d <= 4 ? 4 : d.d <= 8 ? 8 : d.d <= 16 ? 16 : d.d <= 32 ? 32 : 64; /* as pick() */
    /* the tensor-core screen's conditions (see mma_assign) */
    mma = mma && d.k <= 16 && d.d <= 8 && !setup->contiguity && wsum && screen;
    p->kernel = pick(d.d, setup->contiguity != 0, wsum, screen, prefetch, mma);
    size_t copies = wsum ? THREADS / 32 : 1;
    size_t ds = (size_t)(d.d | 1);
    size_t halo = setup->contiguity ? 8 + contig_smem(d.window, d.k) : 0; /* 8: the words' alignment */
    size_t stage = mma ? 16 + (size_t)(THREADS / 32) * MMA_STAGE * sizeof(float) : 0; /* 16: the stage's alignment */
    p->smem = ((size_t)d.k * dmax + d.k + copies * d.k * ds) * sizeof(float) + copies * d.k * sizeof(unsigned) + halo +
              stage;
    int per_sm = 0;
    if (p->smem > 48 * 1024)
        CUDA_TRY(cudaFuncSetAttribute(p->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->smem),
                 "sizing the kmeans kernel");
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p->kernel, THREADS, p->smem),
             "sizing the kmeans kernel");
    if (per_sm < 1) {
        dk_msg_set(msg, "cuda kmeans: no block of the kmeans kernel fits on an SM (k %d, d %d)", d.k, d.d);
        return DK_ERR_BACKEND;
    }
    long long wanted = ((long long)d.n + THREADS - 1) / THREADS;
    long long resident = (long long)per_sm * dev->sm_count;
    p->blocks = (int)(wanted < resident ? wanted : resident);
    if (p->blocks < 1)
        p->blocks = 1;

    size_t B = (size_t)p->blocks;
    size_t lab = setup->contiguity ? align256(d.n * sizeof(int32_t)) : 0;
    size_t tiles = setup->contiguity ? (size_t)tile_count((long long)d.rows, (long long)d.cols) : 0;
    size_t sizes[] = {lab, lab, align256(kd * sizeof(float)), align256(kd * sizeof(float)),
                      align256(B * kd * sizeof(float)), align256(B * d.k * sizeof(unsigned)),
                      align256(kd * sizeof(double)), align256(B * sizeof(double)),
                      align256(B * sizeof(unsigned long long)), align256(8 * sizeof(double)),
                      align256(kd * sizeof(double)), align256(kd * sizeof(double)),
                      align256(d.k * sizeof(unsigned long long)), align256(tiles * sizeof(int)),
                      align256(mma ? d.n * sizeof(float) : 0), align256(mma ? 2 * kd * sizeof(double) : 0),
                      align256(mma ? 2 * (size_t)d.k * sizeof(long long) : 0)};
    const int nptr = (int)(sizeof sizes / sizeof sizes[0]);
    size_t total = 0;
    for (size_t s : sizes)
        total += s;
    void *scratch = NULL;
    CUDA_TRY(cudaMalloc(&scratch, total), "allocating the kmeans plan's scratch");
    p->scratch = scratch;
    char *at = (char *)p->scratch;
    void *ptr[nptr];
    for (int j = 0; j < nptr; j++) {
        ptr[j] = at;
        at += sizes[j];
    }
    Args &a = p->a;
    a.lab[0] = (int32_t *)ptr[0];
    a.lab[1] = (int32_t *)ptr[1];
    a.cent[0] = (float *)ptr[2];
    a.cent[1] = (float *)ptr[3];
    a.psum = (float *)ptr[4];
    a.pcount = (unsigned *)ptr[5];
    a.move2 = (double *)ptr[6];
    a.pobj = (double *)ptr[7];
    a.pvalid = (unsigned long long *)ptr[8];
    a.result = (double *)ptr[9];
    a.corr = (double *)ptr[10];
    a.corr_old = (double *)ptr[11];
    a.ccount = (unsigned long long *)ptr[12];
    a.tile_valid = tiles ? (int *)ptr[13] : nullptr;
    a.gap = (float *)ptr[14];
    a.tot[0] = (double *)ptr[15];
    a.tot[1] = a.tot[0] + kd;
    a.tot_count[0] = (long long *)ptr[16];
    a.tot_count[1] = a.tot_count[0] + d.k;
    a.n = (long long)d.n;
    a.sp = (long long)setup->stride_point;
    a.sf = (long long)setup->stride_feature;
    a.d = d.d;
    a.k = d.k;
    a.max_iters = d.max_iters;
    a.window = d.window;
    a.vec4 = setup->stride_feature == 1 && setup->stride_point % 4 == 0 && d.d % 4 == 0;
    a.rows = (long long)d.rows;
    a.cols = (long long)d.cols;
    a.lambda = (float)d.lambda;
    a.tol = d.tol;
    return DK_OK;
}

/* One launch runs every iteration; the caller has entered the device. */
dk_status lloyd_execute(Plan *p, const void *points, const void *mask, const void *init, void *labels,
                        void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    Args a = p->a;
    a.x = (const float *)((const dk_cuda_buffer *)points)->ptr;
    a.vec4 = a.vec4 && (uintptr_t)a.x % 16 == 0;
    a.mask = mask ? (const uint8_t *)((const dk_cuda_buffer *)mask)->ptr : nullptr;
    a.init = (const float *)((const dk_cuda_buffer *)init)->ptr;
    const dk_cuda_buffer *lb = (const dk_cuda_buffer *)labels;
    a.labels = (int32_t *)lb->ptr;
    a.out_centroids = (float *)((dk_cuda_buffer *)centroids)->ptr;
    dk_status st;
    if (lb->host) {
        if ((st = host_labels_start(p, a.labels, mask != nullptr, msg)) != DK_OK)
            return st;
        a.labels = p->label_stage;
    }
    if (a.tile_valid)
        CUDA_TRY(cudaMemsetAsync(a.tile_valid, 0, (size_t)tile_count(a.rows, a.cols) * sizeof(int), p->dev->stream),
                 "clearing the tile counts");
    void *args[] = {&a};
    CUDA_TRY(cudaLaunchCooperativeKernel((const void *)p->kernel, dim3(p->blocks), dim3(THREADS), args, p->smem,
                                         p->dev->stream),
             "launching the cooperative kmeans kernel");
    if (lb->host && (st = host_labels_finish(p, (int32_t *)lb->ptr, mask != nullptr, msg)) != DK_OK)
        return st;
    double *r = p->host_out;
    CUDA_TRY(cudaMemcpyAsync(r, a.result, 6 * sizeof *r, cudaMemcpyDefault, p->dev->stream),
             "running the kmeans kernel");
    CUDA_TRY(cudaStreamSynchronize(p->dev->stream), "running the kmeans kernel");
    res->iterations = (int)r[0];
    res->objective = r[1];
    res->last_move = r[2];
    res->valid = (size_t)r[3];
    res->assign_seconds = r[4] * 1e-9;
    res->update_seconds = r[5] * 1e-9;
    return DK_OK;
}

} // namespace dk_cuda_kmeans
