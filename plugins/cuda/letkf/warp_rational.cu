/* dakit cuda plugin, letkf: k_warp_rational, the warp variant's (warp.cu)
 * last kernel of an analysis above 40 members (up to 40 k_warp_system does
 * the same in its registers): one warp a point, no eigen-decomposition.
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
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

const int R_WARPS = 2;      /* warps a block */

/* Per-warp shared doubles: d, e, H^T x, H^T b and the result u (k each),
 * then warp_solves' work, which the reflectors reuse where they fit. */
__host__ __device__ inline int rational_doubles(int k) { return 5 * k + solves_doubles(k); }

template <typename T> __global__ void __launch_bounds__(R_WARPS * 32) k_warp_rational(WArgs a)
{
    extern __shared__ double rsm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, k = a.k, warps = blockDim.x / 32;
    double *d = rsm + (size_t)warp * rational_doubles(k), *e = d + k, *xh = e + k, *bh = xh + k, *u = bh + k;
    double *work = u + k;
    const long long gw = (long long)blockIdx.x * warps + warp, nw = (long long)gridDim.x * warps;
    const long long cnt = a.i1 - a.i0;
    const bool reflectors_here = k * k <= solves_doubles(k);
    for (long long s = gw; s < cnt; s += nw) {
        const long long i = a.i0 + s, o = wslot(s, k);
        for (int l = lane; l < k; l += 32) {
            d[l] = a.td[o + l * WS];
            e[l] = a.te[o + l * WS];
            xh[l] = a.tu[o + l * WS];
            bh[l] = a.tb[o + l * WS];
        }
        __syncwarp();
        const double xm = a.xm[s];
        double xam;
        if (!warp_solves(a, i, d, e, xh, bh, u, work, xm, &xam))
            continue;
        /* u <- H u, the reflectors brought into shared memory first where they fit (every load in flight at once) */
        const double *R = a.refl + s * k * k;
        if (reflectors_here) {
            for (int t = lane; t < k * k; t += 32)
                work[t] = R[t];
            __syncwarp();
            R = work;
        }
        warp_reflect(k, R, u);
        warp_finish<T>(a, i, xm, xam, u, d);
    }
}

size_t rational_smem(int k) { return (size_t)R_WARPS * rational_doubles(k) * sizeof(double); }

} // namespace

void dk_cuda_letkf::plan_rational(WArgs *w, double inflation)
{
    dk_letkf_solves_setup(w->k, inflation, w->rat.shift, w->rat.weight, &w->rat.scale);
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
