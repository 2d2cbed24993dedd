/* dakit cuda plugin, letkf: k_warp_ql, the warp variant's (warp.cu) middle
 * kernel under weight interpolation, which needs every eigenvector: one
 * thread per point, implicit QL on the tridiagonal T that k_warp_system
 * left, its rotations logged (pack_rotation) for k_warp_transforms and
 * replayed backwards for G diag(1 / ev) G^T H^T b. A point that does not
 * converge or outgrows its log is flagged for the jacobi kernel. */
#include "letkf.cuh"

using namespace dk_cuda_letkf;

namespace {

const int W_QL_ITER = 30; /* QL iterations an eigenvalue before giving up */
const int QL_B = 64; /* threads a block of the QL kernel */

/* One thread per point: implicit QL with Wilkinson's shift on T (td, te),
 * each rotation applied to tu and tb and logged; then y = G^T H^T b / (g +
 * lambda) and G y (the log backwards) into tu, the factors sqrt((k - 1) /
 * (g + lambda)) into td. */
__global__ void __launch_bounds__(QL_B) k_warp_ql(WArgs a)
{
    /* T's diagonal and subdiagonal in shared memory: the convergence scans and the rotations read them in a
     * dependent chain */
    extern __shared__ double qsm[];
    const long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (s >= a.i1 - a.i0)
        return;
    const int n = a.k;
    const long long o = wslot(s, a.k);
    double *__restrict__ d = qsm + threadIdx.x, *__restrict__ e = qsm + (size_t)n * QL_B + threadIdx.x;
    double *__restrict__ u = a.tu + o, *__restrict__ b = a.tb + o;
    for (int l = 0; l < n; l++) {
        d[l * QL_B] = a.td[o + l * WS];
        e[l * QL_B] = a.te[o + l * WS];
    }
    double *__restrict__ lv = a.lv + s * a.logcap;
    uint8_t *__restrict__ li = a.li + s * 2 * a.sweepcap;
    int nsweep = 0;
    int nrot = 0;
    bool ok = true;
    /* an off-diagonal below eps ||T|| is negligible (the reduction to T left
     * errors of that size): without this floor, the noise eigenvalues of a
     * rank-deficient A (fewer observations than members) iterate long */
    double tnorm = 0.0;
    for (int l = 0; l < n; l++)
        tnorm = fmax(tnorm, fabs(d[l * QL_B]) + fabs(e[l * QL_B]));
    const double negligible = DBL_EPSILON * tnorm;
    for (int l = 0; l < n && ok; l++) {
        int iter = 0;
        for (;;) {
            int m = l;
            for (; m < n - 1; m++) {
                double dd = fabs(d[m * QL_B]) + fabs(d[(m + 1) * QL_B]);
                if (fabs(e[m * QL_B]) <= fmax(DBL_EPSILON * dd, negligible))
                    break;
            }
            if (m == l)
                break;
            if (++iter > W_QL_ITER || nrot + (m - l) > a.logcap || nsweep >= a.sweepcap) {
                ok = false;
                break;
            }
            const double dl = d[l * QL_B], el = e[l * QL_B];
            double g = (d[(l + 1) * QL_B] - dl) / (2.0 * el);
            double r = hypot(g, 1.0);
            g = d[m * QL_B] - dl + el / (g + (g >= 0.0 ? r : -r));
            double sn = 1.0, cs = 1.0, p = 0.0;
            bool restart = false;
            /* row i + 1's d, u and b ride in registers from one rotation to the next (dn, un, bn), and row i - 1's
             * inputs are loaded a rotation ahead: the chain of dependent arithmetic is then the rotation's latency */
            double dn = d[m * QL_B], un = u[m * WS], bn = b[m * WS];
            double ei = e[(m - 1) * QL_B], di = d[(m - 1) * QL_B], ui = u[(m - 1) * WS], bi = b[(m - 1) * WS];
            for (int i = m - 1; i >= l; i--) {
                double e_next = 0.0, d_next = 0.0, u_next = 0.0, b_next = 0.0;
                if (i > l) {
                    e_next = e[(i - 1) * QL_B];
                    d_next = d[(i - 1) * QL_B];
                    u_next = u[(i - 1) * WS];
                    b_next = b[(i - 1) * WS];
                }
                const double f = sn * ei, bb = cs * ei;
                const double r2 = fma(f, f, g * g);
                if (r2 < DBL_MIN) {
                    /* the rotation underflowed: split here and iterate again */
                    if (i + 1 < m) {
                        li[2 * nsweep] = (uint8_t)(i + 1);
                        li[2 * nsweep + 1] = (uint8_t)m;
                        nsweep++;
                    }
                    e[(i + 1) * QL_B] = 0.0;
                    d[(i + 1) * QL_B] = dn - p;
                    u[(i + 1) * WS] = un;
                    b[(i + 1) * WS] = bn;
                    e[m * QL_B] = 0.0;
                    restart = true;
                    break;
                }
                const double inv = rsqrt(r2);
                e[(i + 1) * QL_B] = r2 * inv;
                sn = f * inv;
                cs = g * inv;
                g = dn - p;
                r = fma(di - g, sn, 2.0 * cs * bb);
                p = sn * r;
                d[(i + 1) * QL_B] = g + p;
                g = fma(cs, r, -bb);
                u[(i + 1) * WS] = fma(sn, ui, cs * un);
                un = fma(cs, ui, -sn * un);
                b[(i + 1) * WS] = fma(sn, bi, cs * bn);
                bn = fma(cs, bi, -sn * bn);
                lv[nrot++] = pack_rotation(cs, sn);
                dn = di;
                ei = e_next, di = d_next, ui = u_next, bi = b_next;
            }
            if (restart)
                continue;
            li[2 * nsweep] = (uint8_t)l;
            li[2 * nsweep + 1] = (uint8_t)m;
            nsweep++;
            u[l * WS] = un;
            b[l * WS] = bn;
            d[l * QL_B] -= p;
            e[l * QL_B] = g;
            e[m * QL_B] = 0.0;
        }
    }
    a.failed[s] = !ok;
    if (!ok) {
        int at_ = atomicAdd(a.redo_count, 1);
        a.redo[at_] = (int32_t)(a.i0 + s);
        return;
    }
    /* G diag(1 / ev) G^T H^T b (for w) into u, and the factors sqrt((k - 1) / ev) into td for k_warp_transforms,
     * which forms H G from the log */
    for (int l = 0; l < n; l++) {
        const double ev = a.g + d[l * QL_B];
        u[l * WS] = b[l * WS] / ev;
        a.td[o + l * WS] = sqrt((double)(n - 1) / ev);
    }
    a.nlog[2 * s] = nrot;
    a.nlog[2 * s + 1] = nsweep;
    /* G y: the sweeps backwards, each one's rotations up its rows (lo, lo + 1), (lo + 1, lo + 2), ...; the row
     * being rotated rides in c, the next row's value is loaded a rotation ahead */
    int pos = nrot;
    for (int t = nsweep - 1; t >= 0; t--) {
        const int lo = li[2 * t], hi = li[2 * t + 1];
        double c = u[lo * WS], y1 = u[(lo + 1) * WS];
        for (int i = lo; i < hi; i++) {
            const double y1_next = i + 2 <= hi ? u[(i + 2) * WS] : 0.0;
            double cs, sn;
            unpack_rotation(lv[--pos], &cs, &sn);
            u[i * WS] = fma(cs, c, sn * y1);
            c = fma(-sn, c, cs * y1);
            y1 = y1_next;
        }
        u[hi * WS] = c;
    }
}

/* T's diagonal and subdiagonal for each of a block's QL_B points */
size_t ql_smem(int k) { return (size_t)2 * k * QL_B * sizeof(double); }

} // namespace

dk_status dk_cuda_letkf::warp_ql_prepare(const WArgs &w, dk_msg *msg)
{
    CUDA_TRY(cudaFuncSetAttribute((const void *)k_warp_ql, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)ql_smem(w.k)),
             "setting the letkf QL kernel's shared memory");
    return DK_OK;
}

dk_status dk_cuda_letkf::launch_warp_ql(const WArgs &w, long long count, cudaStream_t sm, dk_msg *msg)
{
    k_warp_ql<<<(int)((count + QL_B - 1) / QL_B), QL_B, ql_smem(w.k), sm>>>(w);
    CUDA_TRY(cudaGetLastError(), "launching the letkf QL kernel");
    return DK_OK;
}
