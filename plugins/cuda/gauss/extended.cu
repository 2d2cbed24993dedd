/* dakit cuda plugin, gauss: k_extended, the extended axes (deriche, vyv;
 * rf with scipy's modes): a segment of a line per thread, straight from
 * global memory. Applies (plan_extended) to rf with scipy's modes always,
 * and to deriche and vyv where k_ext_tile does not (its rows do not fit in
 * shared memory, or DAKIT_GAUSS_CUDA_EXTENDED asks for it). */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* One step of every section of a recursion (causal: b0, b1 on the input
 * and the one before; anti-causal: c1, c2 on the two after), the sections'
 * states s1, s2 advanced; returns the sum of the sections' outputs. */
template <typename T>
__device__ __forceinline__ T section_step(const T *u, const T *w, const Iir<T> &f, T in0, T in1,
                                          T *s1, T *s2)
{
    T sum = T(0);
#pragma unroll
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++) {
        if (k < f.count) {
            T v = u[k] * in0 + w[k] * in1 - f.a1[k] * s1[k] - f.a2[k] * s2[k];
            s2[k] = s1[k];
            s1[k] = v;
            sum += v;
        }
    }
    return sum;
}

template <typename T>
__device__ __forceinline__ T extended_value(const T *x, i64 j, const ExtGeo &g, T cval)
{
    i64 k = extend_index(j, g.n, g.boundary);
    return k >= 0 ? x[k * g.inner] : g.boundary == DK_BOUNDARY_CVAL ? cval : T(0);
}

/* Items [first, first + count). rf: the window goes to scratch, value i of
 * the thread's slot at i * count, and is filtered with the zero rule. */
template <typename T>
__global__ void k_extended(const T *__restrict__ src, T *__restrict__ dst, T *scratch, ExtGeo g,
                           Iir<T> f, Coef<T> c, int rf, T cval, i64 first, i64 count)
{
    i64 slot = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (slot >= count)
        return;
    i64 t = first + slot;
    i64 j = t % g.inner, rest = t / g.inner;
    i64 seg = rest % g.segments, o = rest / g.segments;
    const T *x = src + o * g.n * g.inner + j;
    T *y = dst + o * g.n * g.inner + j;
    const i64 N = g.n, R = g.reach;
    const i64 k0 = seg * g.keep, k1 = k0 + g.keep < N ? k0 + g.keep : N;

    if (rf) {
        T *w = scratch + slot;
        const i64 L = k1 - k0 + 2 * R, st = count;
        for (i64 i = 0; i < L; i++)
            w[i * st] = extended_value(x, k0 - R + i, g, cval);
        for (int it = 0; it < c.K; it++) {
            T p = T(0);
            for (i64 i = 0; i < L; i++) {
                p = fma(c.alpha, p, c.beta * w[i * st]);
                w[i * st] = p;
            }
            T s = c.beta * p;
            w[(L - 1) * st] = s;
            for (i64 i = L - 2; i >= 0; i--) {
                s = fma(c.alpha, s, c.beta * w[i * st]);
                w[i * st] = s;
            }
        }
        for (i64 i = k0; i < k1; i++)
            y[i * g.inner] = w[(i - k0 + R) * st];
        return;
    }

    T s1[DK_GAUSS_MAX_SECTIONS] = {}, s2[DK_GAUSS_MAX_SECTIONS] = {};
    T prev = extended_value(x, k0 - R - 1, g, cval);
    for (i64 i = k0 - R; i < k1; i++) {
        T cur = extended_value(x, i, g, cval);
        T sum = section_step(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
        if (i >= k0)
            y[i * g.inner] = sum;
    }
#pragma unroll
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++)
        s1[k] = s2[k] = T(0);
    T next = extended_value(x, k1 + R, g, cval), after = extended_value(x, k1 + R + 1, g, cval);
    for (i64 i = k1 - 1 + R; i >= k0; i--) {
        T sum = section_step(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = extended_value(x, i, g, cval);
        if (i < k1)
            y[i * g.inner] = y[i * g.inner] + sum;
    }
}

/* rf: the windows' scratch, in batches of items that keep it within the
 * field's size (at least 64 MiB). */
void size(const Plan *p, Pass *ps)
{
    const dk_gauss_setup *s = &p->setup;
    const ExtGeo &g = ps->eg;
    if (s->desc.method == DK_GAUSS_RF) {
        i64 window = g.keep + 2 * g.reach;
        i64 budget = (i64)(s->count * p->esize) > ((i64)64 << 20) ? (i64)(s->count * p->esize) : ((i64)64 << 20);
        i64 fit = budget / (window * (i64)p->esize);
        if (fit < 1)
            fit = 1;
        if (ps->batch > fit)
            ps->batch = fit;
        ps->scratch_bytes = (size_t)(ps->batch * window) * p->esize;
    }
}

/* The pass in batches of ps.batch items. */
template <typename T> cudaError_t launch(const Launch<T> &l)
{
    const Plan *p = l.p;
    const Pass &ps = l.ps;
    const Iir<T> f = iir_of<T>(p, ps.axis);
    int rf = p->setup.desc.method == DK_GAUSS_RF;
    T cval = (T)p->setup.desc.cval;
    const unsigned threads = 128;
    for (i64 first = 0; first < ps.eg.items; first += ps.batch) {
        i64 count = ps.eg.items - first < ps.batch ? ps.eg.items - first : ps.batch;
        k_extended<T><<<(unsigned)ceil_div(count, threads), threads, 0, l.st>>>(
            l.src, l.dst, l.scratch, ps.eg, f, l.c, rf, cval, first, count);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

} // namespace

const Solver dk_cuda_gauss::solver_extended = {
    .name = "extended",
    .size = size,
    .prepare = NULL,
    .launch_f32 = launch<float>,
    .launch_f64 = launch<double>,
};
