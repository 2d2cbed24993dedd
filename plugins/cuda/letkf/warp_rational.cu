/* dakit cuda plugin, letkf: k_warp_rational, the warp variant's (warp.cu)
 * second and last kernel of an analysis: one warp a point, no
 * eigen-decomposition.
 *
 * k_warp_system left A = H T H^T (T tridiagonal, the reflectors of H in the
 * batch), H^T x and H^T b. The analysis needs only x . A_g^-1 b (the mean's
 * increment) and sqrt((k - 1) / A_g) x (the perturbations), A_g = g I + A,
 * so each lane solves one shifted tridiagonal system by elimination (T +
 * shift is positive definite: no pivoting): lanes 0 .. R_POLES - 1 the
 * shifts of the rational approximation of the inverse square root
 * (kit/letkf/inv_sqrt_host.h, at most 2e-14 relative on T's spectrum), the
 * last lane T + g itself. The weighted sum goes back through H, then
 * RTPP/RTPS, xa and the spread. A point whose T reaches beyond the
 * approximation's interval (Gershgorin), or is not finite, is left to the
 * jacobi kernel. Weight interpolation, which needs every eigenvector, takes
 * the QL path instead (warp_ql.cu). */
#include <dakit/kit/letkf/inv_sqrt_host.h>

#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

const int R_WARPS = 2;  /* warps a block */
const int R_LD = 33;    /* a row of the lanes' solves in shared memory (padded: the sum reads it down a column) */
const double R_KAPPA = 1e7; /* the approximation's interval [1, kappa] in units of g */

/* Per-warp shared doubles: d, e, H^T x, H^T b and the result u (k each),
 * then the solves' reciprocal pivots and their right-hand sides and
 * solutions (k rows of R_LD each), which the reflectors reuse when they
 * fit there. */
__host__ __device__ inline int rational_work(int k) { return 2 * k * R_LD; }
__host__ __device__ inline int rational_doubles(int k) { return 5 * k + rational_work(k); }

__device__ __forceinline__ double warp_max(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmax(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

template <typename T> __global__ void __launch_bounds__(R_WARPS * 32) k_warp_rational(WArgs a)
{
    extern __shared__ double rsm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k, warps = blockDim.x / 32;
    double *d = rsm + (size_t)warp * rational_doubles(k), *e = d + k, *xh = e + k, *bh = xh + k, *u = bh + k;
    double *ip = u + k, *zs = ip + k * R_LD;
    const long long gw = (long long)blockIdx.x * warps + warp, nw = (long long)gridDim.x * warps;
    const long long cnt = a.i1 - a.i0;
    const T *xb = (const T *)a.xb;
    T *xa = (T *)a.xa;
    const bool exact = lane == R_POLES;
    const double shift = exact ? a.g : a.rat.shift[lane], weight = exact ? 0.0 : a.rat.weight[lane];
    const double *rhs = exact ? bh : xh;
    const bool reflectors_here = k * k <= rational_work(k);
    for (long long s = gw; s < cnt; s += nw) {
        const long long i = a.i0 + s, o = wslot(s, k);
        double gersh = 0.0;
        for (int l = lane; l < k; l += 32) {
            const double dl = a.td[o + l * WS], el = a.te[o + l * WS];
            const double ep = l > 0 ? a.te[o + (l - 1) * WS] : 0.0;
            d[l] = dl;
            e[l] = el;
            xh[l] = a.tu[o + l * WS];
            bh[l] = a.tb[o + l * WS];
            gersh = fmax(gersh, fabs(dl) + fabs(el) + fabs(ep));
        }
        /* fmax drops a NaN: a non-finite T counts as out of range through the sum */
        double total = 0.0;
        for (int l = lane; l < k; l += 32)
            total += d[l] + e[l] + xh[l] + bh[l];
        gersh = warp_max(gersh);
        total = warp_sum(total);
        if (!(1.0 + gersh / a.g <= a.rat.kappa) || !isfinite(total)) {
            if (lane == 0) {
                const int at_ = atomicAdd(a.redo_count, 1);
                a.redo[at_] = (int32_t)i;
            }
            continue;
        }
        __syncwarp();
        /* each lane's (T + shift) z = rhs: forward elimination, the reciprocal pivots and the eliminated
         * right-hand side kept a row apiece, then back substitution */
        double q = 1.0 / (d[0] + shift), y = rhs[0];
        ip[lane] = q;
        zs[lane] = y;
        for (int l = 1; l < k; l++) {
            const double el = e[l - 1], m = el * q;
            const double piv = fma(-m, el, d[l] + shift);
            y = fma(-m, y, rhs[l]);
            q = 1.0 / piv;
            ip[l * R_LD + lane] = q;
            zs[l * R_LD + lane] = y;
        }
        double z = y * q, dot = xh[k - 1] * z;
        zs[(k - 1) * R_LD + lane] = weight * z;
        for (int l = k - 2; l >= 0; l--) {
            z = fma(-e[l], z, zs[l * R_LD + lane]) * ip[l * R_LD + lane];
            zs[l * R_LD + lane] = weight * z;
            dot = fma(xh[l], z, dot);
        }
        /* the mean's increment x . A_g^-1 b = (H^T x) . (T + g)^-1 (H^T b), from the last lane */
        const double xam = a.xm[s] + __shfl_sync(FULL, dot, R_POLES);
        __syncwarp();
        for (int l = lane; l < k; l += 32) {
            double sum = a.rat.scale * xh[l];
            for (int c = 0; c < R_POLES; c++)
                sum += zs[l * R_LD + c];
            u[l] = sum;
        }
        __syncwarp();
        /* u <- H u, the reflectors brought into shared memory first where they fit (every load in flight at once) */
        const double *R = a.refl + s * k * k;
        if (reflectors_here) {
            for (int t = lane; t < k * k; t += 32)
                ip[t] = R[t];
            __syncwarp();
            R = ip;
        }
        warp_reflect(k, R, u);
        /* RTPP, RTPS, xa and the spread; the centred background in d */
        double *xs = d;
        const double xm = a.xm[s];
        double sb = 0.0, sa = 0.0;
        for (int l = lane; l < k; l += 32) {
            const double xl = (double)xb[i * k + l] - xm;
            double v = u[l];
            if (a.rtpp > 0.0)
                v = (1.0 - a.rtpp) * v + a.rtpp * xl;
            xs[l] = xl;
            u[l] = v;
            sb = fma(xl, xl, sb);
            sa = fma(v, v, sa);
        }
        sb = sqrt(warp_sum(sb) / (k - 1));
        sa = sqrt(warp_sum(sa) / (k - 1));
        const double factor = a.rtps > 0.0 && sa > 0.0 ? 1.0 + a.rtps * (sb - sa) / sa : 1.0;
        double mean = 0.0;
        for (int l = lane; l < k; l += 32) {
            const double v = xam + factor * u[l];
            u[l] = v;
            mean += v;
        }
        mean = warp_sum(mean) / k;
        double sp = 0.0;
        for (int l = lane; l < k; l += 32)
            sp += (u[l] - mean) * (u[l] - mean);
        sp = warp_sum(sp);
        if (lane == 0 && a.spread)
            a.spread[i] = sqrt(sp / (k - 1));
        for (int l = lane; l < k; l += 32)
            xa[i * k + l] = (T)u[l];
        __syncwarp();
    }
}

size_t rational_smem(int k) { return (size_t)R_WARPS * rational_doubles(k) * sizeof(double); }

} // namespace

void dk_cuda_letkf::plan_rational(WArgs *w)
{
    double shift[R_POLES], weight[R_POLES], scale;
    w->rat.error = dk_letkf_inv_sqrt_poles(R_POLES, R_KAPPA, shift, weight, &scale);
    /* sqrt(k - 1) (g + t)^(-1/2) = sqrt((k - 1) / g) x^(-1/2) at x = 1 + t / g, and 1 / (x + c) = g / (t + g (1 +
     * c)) */
    const double g = w->g, outer = sqrt((double)(w->k - 1) / g) * scale;
    for (int l = 0; l < R_POLES; l++) {
        w->rat.shift[l] = g * (1.0 + shift[l]);
        w->rat.weight[l] = outer * g * weight[l];
    }
    w->rat.scale = outer;
    w->rat.kappa = R_KAPPA;
}

template <typename T> dk_status dk_cuda_letkf::warp_rational_prepare(const Plan *p, dk_msg *msg)
{
    const size_t bytes = rational_smem(p->w.k);
    if (bytes > p->dev->smem_optin - 1024) {
        dk_msg_set(msg, "cuda letkf: the warp variant's solves need %zu bytes of shared memory a block; this device "
                        "allows %zu", bytes, p->dev->smem_optin - 1024);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    CUDA_TRY(cudaFuncSetAttribute((const void *)k_warp_rational<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)bytes),
             "setting the letkf solves kernel's shared memory");
    return DK_OK;
}

template <typename T>
dk_status dk_cuda_letkf::launch_warp_rational(const Plan *p, const WArgs &w, long long count, dk_msg *msg)
{
    const long long blocks = (count + R_WARPS - 1) / R_WARPS;
    k_warp_rational<T><<<(int)blocks, R_WARPS * 32, rational_smem(w.k), p->dev->stream>>>(w);
    CUDA_TRY(cudaGetLastError(), "launching the letkf solves kernel");
    return DK_OK;
}

template dk_status dk_cuda_letkf::warp_rational_prepare<float>(const Plan *p, dk_msg *msg);
template dk_status dk_cuda_letkf::warp_rational_prepare<double>(const Plan *p, dk_msg *msg);
template dk_status dk_cuda_letkf::launch_warp_rational<float>(const Plan *p, const WArgs &w, long long count,
                                                              dk_msg *msg);
template dk_status dk_cuda_letkf::launch_warp_rational<double>(const Plan *p, const WArgs &w, long long count,
                                                               dk_msg *msg);
