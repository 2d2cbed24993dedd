/* dakit-opencl enkf, the lowrank scheme's product (built into the enkf
 * program after enkf.cl). With C ~= Q T Q^T (Q: N x R, kept row-major with
 * its columns padded with zeros to RP, a multiple of 16):
 *   ek_lr_u, ek_lr_usum  U[r, l, m] = sum over row m of H of Q[k_t, r] H_t e[k_t, l]
 *   ek_lr_g2             G2 = T U
 *   ek_lr_pht            PHT[i, m] = 1/(L-1) sum_(l,r) e[i, l] Q[i, r] G2[r, l, m]
 *   ek_lr_hpht           HPHT = 1/(L-1) U^T G2, exactly symmetric
 * Every sum runs in a fixed order: the results repeat exactly. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

/* ek_lr_u: LR_UW work-items a segment of a row of H, LR_LU members a pass,
 * LR_CH nonzeros staged at a time (LR_CH * LR_LU = 16 * 256, the size of
 * the parts' reduction, which reuses the staging array) */
#define LR_UW 256
#define LR_LU 16
#define LR_CH 256

/* part[(s L + l) RP + r] = sum over segment s's nonzeros t of Q[k_t, r] H_t e[k_t, l].
 * Work-item (pt, r): rank r of the nonzeros pt, pt + parts, ... of each
 * staged chunk, so a part's loads of Q are one row (coalesced); the parts'
 * sums are added in part order. seg[2 s], seg[2 s + 1]: the segment's
 * nonzeros. */
__kernel __attribute__((reqd_work_group_size(LR_UW, 1, 1))) void
ek_lr_u(__global const double *Q, __global const double *e, __global const long *indices,
        __global const double *values, __global const long *seg, __global double *part, ulong RP, ulong L)
{
    __local double he[LR_CH * LR_LU]; /* H_t e[k_t, l0 + u]; then the reduction */
    __local long kt[LR_CH];
    const ulong s = get_group_id(0);
    const int lid = (int)get_local_id(0), rp = (int)RP, parts = LR_UW / rp;
    const int r = lid % rp, pt = lid / rp;
    const long b = seg[2 * s], end = seg[2 * s + 1];
    for (ulong l0 = 0; l0 < L; l0 += LR_LU) {
        double acc[LR_LU];
        for (int u = 0; u < LR_LU; u++)
            acc[u] = 0.0;
        for (long c0 = b; c0 < end; c0 += LR_CH) {
            const int cn = end - c0 < LR_CH ? (int)(end - c0) : LR_CH;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int f = lid; f < LR_CH * LR_LU; f += LR_UW) {
                const int tt = f / LR_LU, u = f % LR_LU;
                double v = 0.0;
                if (tt < cn && l0 + u < L) {
                    const long t = c0 + tt;
                    v = values[t] * e[(ulong)indices[t] * L + l0 + u];
                }
                he[f] = v;
            }
            for (int f = lid; f < LR_CH; f += LR_UW)
                kt[f] = f < cn ? indices[c0 + f] : 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (pt < parts)
                for (int tt = pt; tt < cn; tt += parts) {
                    const double q = Q[(ulong)kt[tt] * RP + r];
#pragma unroll
                    for (int u = 0; u < LR_LU; u++)
                        acc[u] += q * he[tt * LR_LU + u];
                }
        }
        for (int p = 0; p < parts; p++) {
            barrier(CLK_LOCAL_MEM_FENCE);
            if (pt == p)
                for (int u = 0; u < LR_LU; u++)
                    he[u * rp + r] = p ? he[u * rp + r] + acc[u] : acc[u];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int f = lid; f < LR_LU * rp; f += LR_UW) {
            const int u = f / rp;
            if (l0 + u < L)
                part[(s * L + l0 + u) * RP + f % rp] = he[f];
        }
    }
}

/* U[(m L + l) R + r] (R x M L, column m L + l) from row m's segments'
 * partial sums, in order */
__kernel void ek_lr_usum(__global const double *part, __global const long *row_seg, __global double *U, ulong R,
                         ulong RP, ulong L, ulong M)
{
    const ulong q = get_global_id(0);
    if (q >= M * L * R)
        return;
    const ulong m = q / (L * R), l = (q / R) % L, r = q % R;
    double sum = 0.0;
    for (long s = row_seg[m]; s < row_seg[m + 1]; s++)
        sum += part[((ulong)s * L + l) * RP + r];
    U[q] = sum;
}

/* G2[(l RP + r) M + m] = sum_k T[r, k] U[k, l, m], zero for r >= R: the
 * layout ek_lr_pht stages (a tile's observations together) */
__kernel void ek_lr_g2(__global const double *T, __global const double *U, __global double *G2, ulong R,
                       ulong RP, ulong L, ulong M)
{
    const ulong m = get_global_id(0), lr = get_global_id(1);
    if (m >= M || lr >= L * RP)
        return;
    const ulong l = lr / RP, r = lr % RP;
    double sum = 0.0;
    if (r < R) {
        __global const double *t = T + r * R, *u = U + (m * L + l) * R;
        for (ulong k = 0; k < R; k++)
            sum += t[k] * u[k];
    }
    G2[lr * M + m] = sum;
}

/* ek_lr_pht: LR_PW work-items of LR_TI points each (points lid, lid + LR_PW,
 * ...), LR_TM observations a work-group (dimension 1); a work-item keeps
 * its points' Q values of LR_RC ranks in registers, the work-group stages
 * G2's slice of LR_LC members x LR_RC ranks x LR_TM observations */
#define LR_PW 128
#define LR_TI 2
#define LR_TM 16
#define LR_RC 8
#define LR_LC 16

__kernel __attribute__((reqd_work_group_size(LR_PW, 1, 1))) void
ek_lr_pht(__global const double *Q, __global const double *e, __global const double *G2, __global double *pht,
          ulong N, ulong R, ulong RP, ulong L, ulong M, double inv_lm1)
{
    __local double2 Bs[LR_LC * LR_RC * LR_TM / 2];
    __local double *bs = (__local double *)Bs;
    const int lid = (int)get_local_id(0);
    const ulong m0 = get_group_id(1) * LR_TM;
    ulong i[LR_TI];
    for (int ti = 0; ti < LR_TI; ti++)
        i[ti] = get_group_id(0) * (LR_PW * LR_TI) + ti * LR_PW + lid;
    double acc[LR_TI][LR_TM];
    for (int ti = 0; ti < LR_TI; ti++)
        for (int mm = 0; mm < LR_TM; mm++)
            acc[ti][mm] = 0.0;
    /* Q's and G2's columns past R are zeros: only up to R's chunk */
    for (ulong r0 = 0; r0 < R; r0 += LR_RC) {
        double q[LR_TI][LR_RC];
#pragma unroll
        for (int ti = 0; ti < LR_TI; ti++) {
            /* RP is a multiple of 16 and r0 of LR_RC: 16-byte aligned */
            __global const double2 *row = (__global const double2 *)(Q + i[ti] * RP + r0);
#pragma unroll
            for (int h = 0; h < LR_RC / 2; h++) {
                const double2 v = i[ti] < N ? row[h] : (double2)(0.0, 0.0);
                q[ti][2 * h] = v.x;
                q[ti][2 * h + 1] = v.y;
            }
        }
        for (ulong l0 = 0; l0 < L; l0 += LR_LC) {
            const int lc = L - l0 < LR_LC ? (int)(L - l0) : LR_LC;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int f = lid; f < LR_LC * LR_RC * LR_TM; f += LR_PW) {
                const int mm = f % LR_TM, lr = f / LR_TM, ll = lr / LR_RC, rr = lr % LR_RC;
                bs[f] = ll < lc && m0 + mm < M ? G2[((l0 + ll) * RP + r0 + rr) * M + m0 + mm] : 0.0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int ll = 0; ll < lc; ll++) {
                double ev[LR_TI];
#pragma unroll
                for (int ti = 0; ti < LR_TI; ti++)
                    ev[ti] = i[ti] < N ? e[i[ti] * L + l0 + ll] : 0.0;
#pragma unroll
                for (int rr = 0; rr < LR_RC; rr++) {
                    double a[LR_TI];
#pragma unroll
                    for (int ti = 0; ti < LR_TI; ti++)
                        a[ti] = ev[ti] * q[ti][rr];
                    __local const double2 *b = Bs + (ll * LR_RC + rr) * (LR_TM / 2);
#pragma unroll
                    for (int h = 0; h < LR_TM / 2; h++) {
                        const double2 g = b[h];
#pragma unroll
                        for (int ti = 0; ti < LR_TI; ti++) {
                            acc[ti][2 * h] = fma(a[ti], g.x, acc[ti][2 * h]);
                            acc[ti][2 * h + 1] = fma(a[ti], g.y, acc[ti][2 * h + 1]);
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int ti = 0; ti < LR_TI; ti++) {
        if (i[ti] >= N)
            continue;
#pragma unroll
        for (int mm = 0; mm < LR_TM; mm++)
            if (m0 + mm < M)
                pht[i[ti] * M + m0 + mm] = acc[ti][mm] * inv_lm1;
    }
}

/* hpht[a, b] = 1/(L-1) (S[a, b] + S[b, a]) / 2, S[a, b] = sum_(l,r) U[r, l, a] G2[r, l, b],
 * a work-group of LR_HW a pair: work-item w sums the terms k = w, w + LR_HW,
 * ... of both orders, then a fixed tree adds the work-items' sums, so
 * hpht[a, b] and hpht[b, a] are the same number */
#define LR_HW 64

__kernel __attribute__((reqd_work_group_size(LR_HW, 1, 1))) void
ek_lr_hpht(__global const double *U, __global const double *G2, __global double *hpht, ulong R, ulong RP, ulong L,
           ulong M, double inv_lm1)
{
    __local double sums[2][LR_HW];
    const int w = (int)get_local_id(0);
    const ulong b = get_group_id(0), a = get_group_id(1);
    double ab = 0.0, ba = 0.0;
    for (ulong k = (ulong)w; k < L * R; k += LR_HW) {
        const ulong l = k / R, r = k % R, g = (l * RP + r) * M;
        ab += U[a * L * R + k] * G2[g + b];
        ba += U[b * L * R + k] * G2[g + a];
    }
    sums[0][w] = ab;
    sums[1][w] = ba;
    for (int h = LR_HW / 2; h > 0; h /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (w < h) {
            sums[0][w] += sums[0][w + h];
            sums[1][w] += sums[1][w + h];
        }
    }
    if (w == 0)
        hpht[a * M + b] = 0.5 * (sums[0][0] + sums[1][0]) * inv_lm1;
}
