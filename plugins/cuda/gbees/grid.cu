/* dakit cuda plugin, gbees: the kernels every variant uses: the
 * initialization (cooperative, level by level), the index rebuild after
 * growth, the measurement update, the snapshot and the clearing of keys. */
#include "gbees.cuh"

using namespace dk_cuda_gbees;

namespace {

/* ---- initialization, rebuild, update, snapshot ---- */

/* Level by level from the root, as gb_init: the masses of one level, and
 * the face neighbours of those at or above the threshold; then links and
 * the sum. Resumable at a level after the host grew the arrays. */
template <class M, int D> __global__ void __launch_bounds__(THREADS) k_init(Dev g, InitArgs a)
{
    cg::grid_group grid = cg::this_grid();
    State *st = g.st;
    const Cells C = g.c[0];
    unsigned long long *table = g.table, *maxbits = &st->maxbits[0];
    const long long i0 = (long long)blockIdx.x * THREADS + threadIdx.x, stride = (long long)gridDim.x * THREADS;
    if (i0 == 0 && st->n_alloc == 0)
        insert_new<M, D>(g, C, table, maxbits, a.root);
    grid.sync();
    int lo = st->lo, hi = (int)vload(st->n_alloc);
    /* every block reads the counter before any block inserts again */
    grid.sync();
    while (lo < hi) {
        for (long long c = lo + i0; c < hi; c += stride) {
            int32_t k[D];
            double x[D], r[D], q = 0.0;
#pragma unroll
            for (int i = 0; i < D; i++)
                k[i] = C.key[c * D + i];
            centre<D>(g, k, x);
#pragma unroll
            for (int i = 0; i < D; i++)
                r[i] = x[i] - a.mean[i];
#pragma unroll
            for (int i = 0; i < D; i++) {
                double row = 0.0;
#pragma unroll
                for (int j = 0; j < D; j++)
                    row += a.inv[i * D + j] * r[j];
                q += r[i] * row;
            }
            double p = exp(a.lognorm - 0.5 * q);
            C.p[c] = p;
            if (p < g.thr)
                continue;
#pragma unroll 1
            for (int i = 0; i < 2 * D; i++) {
                int32_t kn[D];
#pragma unroll
                for (int j = 0; j < D; j++)
                    kn[j] = k[j] + (j == (i >> 1) ? ((i & 1) ? 1 : -1) : 0);
                insert_new<M, D>(g, C, table, maxbits, kn);
            }
        }
        grid.sync();
        const int next = (int)vload(st->n_alloc), over = vload(st->overflow);
        grid.sync();
        if (over) {
            /* the host grows the arrays, keeps the cells made so far and
             * runs this level again */
            if (i0 == 0) {
                st->lo = lo;
                st->status = ST_CAPACITY;
            }
            return;
        }
        lo = hi;
        hi = next;
    }
    for (long long w = i0; w < (long long)hi * 2 * D; w += stride) {
        const long long c = w / (2 * D);
        const int q = (int)(w - c * 2 * D);
        int32_t k[D];
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i] + (i == (q >> 1) ? ((q & 1) ? 1 : -1) : 0);
        C.nb[w] = find<D>(table, g.hmask, C.key, k);
    }
    double sum = 0.0;
    for (long long c = i0; c < hi; c += stride)
        sum += C.p[c];
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = sum;
    grid.sync();
    double total = sum_parts(st->part_sum, gridDim.x);
    if (i0 == 0) {
        st->n = hi;
        st->lo = hi;
        st->cur = 0;
        st->t = 0.0;
        st->dt = 0.0;
        st->steps = st->cell_steps = 0;
        if (!(total > 0.0) || !isfinite(total)) {
            st->status = ST_NOMASS;
        } else {
            st->scale = 1.0 / total;
            st->status = ST_OK;
        }
    }
}

/* The index of cells [0, n), and their maximum rate (slot cur). */
template <int D> __global__ void __launch_bounds__(THREADS) k_rebuild(Dev g, int cur, int n)
{
    const Cells C = g.c[0];
    double mx = 0.0;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < n; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
#pragma unroll
        for (int q = 0; q < D; q++)
            k[q] = C.key[c * D + q];
        place<D>(g.table, g.hmask, k, (int32_t)c);
        mx = C.rate[c] > mx ? C.rate[c] : mx;
    }
    if (mx > 0.0)
        atomicMax(&g.st->maxbits[cur], (unsigned long long)__double_as_longlong(mx));
}

/* gb_update: the likelihood of y through h, into the masses; block sums. */
template <class M, int D> __global__ void __launch_bounds__(THREADS) k_update(Dev g, UpdArgs a)
{
    State *st = g.st;
    const Cells C = g.c[0];
    const int n = st->n;
    const double sc = st->scale;
    double sum = 0.0;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < n; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
        double x[D], hx[DK_GBEES_MAX_DIM], r[DK_GBEES_MAX_DIM], q = 0.0;
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i];
        centre<D>(g, k, x);
        M::h(D, x, g.coef, hx);
        for (int i = 0; i < a.m; i++)
            r[i] = hx[i] - a.y[i];
        for (int i = 0; i < a.m; i++) {
            double row = 0.0;
            for (int j = 0; j < a.m; j++)
                row += a.rinv[i * a.m + j] * r[j];
            q += r[i] * row;
        }
        double p = C.p[c] * sc * exp(-0.5 * q);
        C.p[c] = p;
        sum += p;
    }
    sum = block_sum<THREADS>(sum);
    if (threadIdx.x == 0)
        st->part_sum[blockIdx.x] = sum;
}

/* KEY_NONE over key words [from, to). */
__global__ void __launch_bounds__(THREADS) k_clear_keys(int32_t *key, long long from, long long to)
{
    for (long long w = from + (long long)blockIdx.x * THREADS + threadIdx.x; w < to; w += (long long)gridDim.x * THREADS)
        key[w] = KEY_NONE;
}

template <int D> __global__ void __launch_bounds__(THREADS) k_snapshot(Dev g, double *out, int rows)
{
    const State *st = g.st;
    const Cells C = g.c[0];
    const double sc = st->scale;
    for (long long c = (long long)blockIdx.x * THREADS + threadIdx.x; c < rows; c += (long long)gridDim.x * THREADS) {
        int32_t k[D];
        double x[D];
#pragma unroll
        for (int i = 0; i < D; i++)
            k[i] = C.key[c * D + i];
        centre<D>(g, k, x);
#pragma unroll
        for (int i = 0; i < D; i++)
            out[c * (D + 1) + i] = x[i];
        out[c * (D + 1) + D] = C.p[c] * sc;
    }
}

template <class M, int D> struct Make {
    static const GridKernels *table()
    {
        static const GridKernels k = {
            .init = k_init<M, D>,
            .rebuild = k_rebuild<D>,
            .update = k_update<M, D>,
            .snapshot = k_snapshot<D>,
            .clear_keys = k_clear_keys,
        };
        return &k;
    }
};

} // namespace

const GridKernels *dk_cuda_gbees::grid_kernels(const char *model, int d)
{
    return pick<GridKernels, Make>(model, d);
}
