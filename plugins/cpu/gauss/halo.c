/* dakit cpu plugin, gauss: execute_halo, an axis split across ranks
 * (libdakit-mpi), its lines continued by the neighbours' halos. */
#include "gauss.h"

/* execute_halo: LANES whole lines at a time, each read from the lower halo,
 * the box and the upper halo into the lane buffer, filtered there as one
 * line (the boundary rule at its ends) and its box part written out. Lane
 * t is line (t / inner, t % inner), so along a strided axis the lanes are
 * adjacent lines and each row is a contiguous run. */
#define DEFINE_HALO_AXIS(NAME, T, LANES, RF_AVX2, RF_BASE)                             \
    static void NAME(const cpu_gauss_plan *p, const dk_gauss_halo *h, const T *src,    \
                     const T *lower, const T *upper, T *dst)                           \
    {                                                                                  \
        const dk_gauss_desc *d = &p->setup.desc;                                       \
        const dk_axis_view v = dk_axis_view_of(d, h->axis);                            \
        const size_t lc = h->lower_count, uc = h->upper_count, m = lc + v.n + uc;      \
        const size_t lines = v.outer * v.inner, groups = div_up(lines, LANES);        \
        const T alpha = (T)p->setup.alpha[h->axis];                                    \
        void (*rf)(T *, size_t, size_t, T, int, dk_boundary) = p->avx2 ? RF_AVX2 : RF_BASE; \
        _Pragma("omp parallel num_threads(p->threads)")                                \
        {                                                                              \
            T *buf = (T *)p->halo_buffers + (size_t)thread_index() * p->halo_elems;    \
            _Pragma("omp for schedule(dynamic, 1)")                                    \
            for (size_t g = 0; g < groups; g++) {                                      \
                size_t t0 = g * LANES, cnt = lines - t0 < LANES ? lines - t0 : LANES;  \
                for (size_t k = 0; k < LANES; k++) {                                   \
                    size_t t = t0 + (k < cnt ? k : 0), o = t / v.inner, j = t % v.inner; \
                    const T *lo = lower + o * lc * v.inner + j;                        \
                    const T *mid = src + o * v.n * v.inner + j;                        \
                    const T *up = upper + o * uc * v.inner + j;                        \
                    size_t i = 0;                                                      \
                    for (; i < lc; i++)                                                \
                        buf[i * LANES + k] = lo[i * v.inner];                          \
                    for (; i < lc + v.n; i++)                                          \
                        buf[i * LANES + k] = mid[(i - lc) * v.inner];                  \
                    for (; i < m; i++)                                                 \
                        buf[i * LANES + k] = up[(i - lc - v.n) * v.inner];             \
                }                                                                      \
                rf(buf, m, LANES, alpha, d->K, d->boundary);                           \
                for (size_t k = 0; k < cnt; k++) {                                     \
                    size_t t = t0 + k, o = t / v.inner, j = t % v.inner;               \
                    T *y = dst + o * v.n * v.inner + j;                                \
                    for (size_t i = 0; i < v.n; i++)                                   \
                        y[i * v.inner] = buf[(lc + i) * LANES + k];                    \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }

DEFINE_HALO_AXIS(halo_axis_f32, float, LANES_F32, rf_lanes_f32_avx2, rf_lanes_f32_base)
DEFINE_HALO_AXIS(halo_axis_f64, double, LANES_F64, rf_lanes_f64_avx2, rf_lanes_f64_base)

dk_status cpu_gauss_execute_halo(void *plan, const dk_gauss_halo *h, const void *in, void *out, dk_msg *msg)
{
    cpu_gauss_plan *p = plan;
    if (!p || !h || !in || !out || in == out || h->axis < 0 || h->axis >= p->setup.desc.ndim ||
        !p->setup.halo_max[h->axis] || h->lower_count > p->setup.halo_max[h->axis] ||
        h->upper_count > p->setup.halo_max[h->axis] || (h->lower_count && !h->lower) ||
        (h->upper_count && !h->upper) || p->setup.extended[h->axis] || p->setup.desc.mode != DK_GAUSS_EXACT) {
        dk_msg_set(msg, "gauss execute_halo: a plan made for halos along the axis, distinct in and out, and "
                        "halos within its halo_max are needed");
        return DK_ERR_INVALID_ARGUMENT;
    }
    size_t es = element_size(p->setup.desc.dtype);
    const char *lower = (const char *)h->lower + h->lower_offset * es;
    const char *upper = (const char *)h->upper + h->upper_offset * es;
    if (p->setup.desc.dtype == DK_F32)
        halo_axis_f32(p, h, in, (const float *)lower, (const float *)upper, out);
    else
        halo_axis_f64(p, h, in, (const double *)lower, (const double *)upper, out);
    return DK_OK;
}
