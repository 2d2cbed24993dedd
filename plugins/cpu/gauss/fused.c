/* dakit cpu plugin, gauss: exact rf over exactly the last two axes, out of
 * place, both in one pass over tiles, where choose_fused says it applies. */
#include "gauss.h"

/* Exact mode, the last two axes filtered and nothing else: the tiles of
 * the fused pass (DEFINE_FUSED), or 0 where a tile would not fit in L2. */
int choose_fused(cpu_gauss_plan *p, size_t esize)
{
    const dk_gauss_desc *d = &p->setup.desc;
    if (d->mode != DK_GAUSS_EXACT || d->ndim < 2)
        return 0;
    int a0 = d->ndim - 2, a1 = d->ndim - 1;
    if (d->axes != ((1u << a0) | (1u << a1)) || p->setup.extended[a0] || p->setup.extended[a1])
        return 0;
    size_t n0 = d->shape[a0], n1 = d->shape[a1], h0 = p->setup.halo[a0], h1 = p->setup.halo[a1];
    size_t outer = p->setup.count / (n0 * n1), lanes = p->lanes;
    size_t rows = FUSED_ROWS > 4 * h0 ? FUSED_ROWS : 4 * h0;
    if (rows > n0)
        rows = n0;
    size_t width = FUSED_TILE_BYTES / (rows * esize) / lanes * lanes;
    if (width < 4 * h1)
        width = 4 * h1;
    if (width >= n1)
        width = n1;
    size_t stride = div_up(width, lanes) * lanes;
    if ((rows * stride + width * lanes) * esize > FUSED_LIMIT)
        return 0;
    /* pieces of rows for the threads, each at least a halo on either side long */
    size_t pieces = div_up(2 * (size_t)p->threads, outer), most = n0 / (2 * h0 + 1);
    if (pieces > most)
        pieces = most ? most : 1;
    p->fused = 1;
    p->fuse_pieces = pieces;
    p->fuse_rows = rows;
    p->fuse_tiles = width == n1 ? 1 : div_up(n1, width - 2 * h1);
    p->fuse_stride = stride;
    p->fuse_need = rows * stride + width * lanes;
    return 1;
}

/* Exact mode with exactly the last two axes filtered, out of place: both in
 * one pass over tiles, so the field is read and written once instead of
 * twice. A tile is a window of rows (axis n-2) by a window of columns (axis
 * n-1), each with its halo: the rows are filtered down the columns (all of
 * the tile's columns, adjacent lanes), then its kept rows along themselves
 * (LANES rows transposed at a time), and its kept part is written. Each
 * value goes through the reference's two passes in its order; the tile's
 * artificial ends lie at least a halo away from what it keeps. */
#define DEFINE_FUSED(NAME, T, LANES, G, GATHER_G, SCATTER_G, RF_AVX2, RF_BASE)         \
    void NAME(const cpu_gauss_plan *p, const T *src, T *dst)                           \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        const int a0 = d->ndim - 2, a1 = d->ndim - 1;                                  \
        const size_t n0 = d->shape[a0], n1 = d->shape[a1], h1 = p->setup.halo[a1];     \
        const size_t pieces = p->fuse_pieces, tiles = p->fuse_tiles;                   \
        const size_t Ws = p->fuse_stride, units = p->setup.count / (n0 * n1) * pieces; \
        const T alpha0 = (T)p->setup.alpha[a0], alpha1 = (T)p->setup.alpha[a1];         \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        void (*const gather)(const T *const *, size_t, T *, size_t) = p->avx2 ? GATHER_G : NULL; \
        void (*const scatter)(const T *, size_t, size_t, T *const *) = p->avx2 ? SCATTER_G : NULL; \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *tile = (T *)p->buffers + (size_t)thread_index() * p->buffer_elems;      \
            T *lanes = tile + p->fuse_rows * Ws;                                       \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t u = 0; u < units; u++) {                                       \
                size_t base = u / pieces * n0 * n1;                                    \
                exact_lane l = exact_piece(n0, pieces, p->fuse_rows, p->setup.halo[a0], \
                                           base, u % pieces);                          \
                for (size_t s = 0; s < l.count; s++) {                                 \
                    size_t start;                                                      \
                    dk_span keep;                                                      \
                    exact_window(&l, s, &start, &keep);                                \
                    for (size_t ct = 0; ct < tiles; ct++) {                            \
                        size_t c0 = spread(ct, n1, tiles), c1 = spread(ct + 1, n1, tiles); \
                        size_t w0 = c0 >= h1 ? c0 - h1 : 0;                            \
                        size_t wt = (n1 - c1 > h1 ? c1 + h1 : n1) - w0;                \
                        const T *in = src + base + start * n1 + w0;                    \
                        for (size_t i = 0; i < l.len; i++)                             \
                            memcpy(tile + i * Ws, in + i * n1, wt * sizeof(T));        \
                        for (size_t c = 0; c < wt; c += LANES)                         \
                            rf(tile + c, l.len, Ws, alpha0, d->K, d->boundary);        \
                        for (size_t r = keep.begin - start; r < keep.end - start; r += LANES) { \
                            size_t rc = keep.end - start - r < LANES ? keep.end - start - r : LANES; \
                            size_t k = 0;                                              \
                            for (; gather && k + G <= rc; k += G) {                    \
                                const T *line[G];                                      \
                                for (int j = 0; j < G; j++)                            \
                                    line[j] = tile + (r + k + j) * Ws;                 \
                                gather(line, wt, lanes + k, LANES);                    \
                            }                                                          \
                            for (; k < rc; k++)                                        \
                                for (size_t i = 0; i < wt; i++)                        \
                                    lanes[i * LANES + k] = tile[(r + k) * Ws + i];     \
                            rf(lanes, wt, LANES, alpha1, d->K, d->boundary);           \
                            T *out = dst + base + (start + r) * n1 + c0;               \
                            const T *kept = lanes + (c0 - w0) * LANES;                 \
                            k = 0;                                                     \
                            for (; scatter && k + G <= rc; k += G) {                   \
                                T *line[G];                                            \
                                for (int j = 0; j < G; j++)                            \
                                    line[j] = out + (k + j) * n1;                      \
                                scatter(kept + k, LANES, c1 - c0, line);               \
                            }                                                          \
                            for (; k < rc; k++)                                        \
                                for (size_t i = 0; i < c1 - c0; i++)                   \
                                    out[k * n1 + i] = kept[i * LANES + k];             \
                        }                                                              \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_FUSED(fused_f32, float, LANES_F32, TRANSPOSE_F32, gather_f32_avx2, scatter_f32_avx2,
             rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_FUSED(fused_f64, double, LANES_F64, TRANSPOSE_F64, gather_f64_avx2, scatter_f64_avx2,
             rf_lanes_f64_avx2, rf_lanes_f64_base)
