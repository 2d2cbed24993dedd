/* dakit-opencl letkf kernels: the definition of dakit/letkf.h in float64.
 *
 * letkf.c puts before this file the cl_khr_fp64 pragma, FP_CONTRACT OFF
 * (the reference is compiled without contraction, so weights tie where
 * its weights tie) and the text of dakit/kit/letkf/local.h, and builds it
 * with REAL (float or double: the ensembles' type, widened on reading and
 * rounded once on writing) and LK_KL: the largest k lk_transform's k x k
 * matrices are sized for in local memory, or 0 for matrices in global
 * scratch (a region per point of the batch).
 *
 * lk_count (plan time): per point, how many observations have rho > 0;
 * the largest sizes each point's candidate list.
 * lk_obs: per sorted observation, its perturbations, departure and 1 / r.
 * Then, per batch of points, a work-group per point:
 *   lk_search: the point's <= 81 bucket ranges flattened, a candidate per
 *     work-item per round, those with rho > 0 compacted by a scan into the
 *     point's list, in the reference's order (visit, then sorted position);
 *   lk_cap (with max_obs): with more than max_obs, the max_obs-th largest
 *     (rho, -original index) by a radix select on rho's bits (then on the
 *     index among equal rho), and the list compacted to those;
 *   lk_ab: A (lower triangle) and b summed in list order;
 *   lk_transform: cyclic Jacobi with the round-robin ordering, k/2
 *     disjoint rotations at a time (rows, then columns and eigenvectors);
 *     w = Q diag(1/(g+lam)) Q^T b and the perturbations a = W^T x as
 *     Q (diag(sqrt((k-1)/(g+lam))) Q^T x), RTPP and RTPS, then xa, nobs
 *     and the spread.
 * Four kernels rather than one: PoCL's work-group compiler takes minutes
 * over a kernel with this many barrier loops in sequence, seconds over
 * each part. Barriers sit in loops whose trip counts are uniform across
 * the group, never under an if. */

#define LK_WGMAX 256
#define LK_STAGE 2048 /* doubles of rows staged by lk_ab */
#define LK_VISITS 81 /* dk_letkf_visits's largest */
#define LK_SWEEPS 30 /* as DK_LETKF_JACOBI_SWEEPS */
/* Every barrier orders both memories: the candidate list (and in the
 * global variant the matrices) lives in global memory. */
#define LK_SYNC() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

#if LK_KL > 0
#define MSPACE __local
#else
#define MSPACE __global
#endif

/* The geometry from its integer and double fields (letkf.c packs them). */
static dk_letkf_geometry lk_geometry(__global const int *gi, __global const double *gd)
{
    dk_letkf_geometry g;
    g.metric = gi[0];
    g.ncoords = gi[1];
    g.hdims = gi[2];
    g.vertical = gi[3];
    g.dims = gi[4];
    g.pad_ = 0;
    g.radius = gd[0];
    g.vradius = gd[1];
    for (int a = 0; a < DK_LETKF_POS; a++) {
        g.ncell[a] = gi[5 + a];
        g.period[a] = gd[2 + a];
        g.origin[a] = gd[6 + a];
        g.cell[a] = gd[10 + a];
    }
    return g;
}

/* Index of key in the ascending keys[0 .. cells), or -1. */
static int lk_find_cell(__global const ulong *keys, int cells, ulong key)
{
    int lo = 0, hi = cells;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < cells && keys[lo] == key ? lo : -1;
}

static void lk_load_pos(__global const double *src, double *pos)
{
    for (int a = 0; a < DK_LETKF_POS; a++)
        pos[a] = src[a];
}

static double lk_weight_at(const dk_letkf_geometry *g, const double *pos, __global const double *opos, int j)
{
    double q[DK_LETKF_POS];
    lk_load_pos(opos + (ulong)j * DK_LETKF_POS, q);
    return dk_letkf_weight(g, pos, q);
}

/* Plan time, a work-item per point: the number of observations with
 * rho > 0; the largest goes to *most. */
__kernel void lk_count(__global const double *gpos, __global const double *opos, __global const ulong *cell_key,
                       __global const int *cell_start, int cells, __global const int *gi, __global const double *gd,
                       ulong n, __global int *most)
{
    ulong i = get_global_id(0);
    if (i >= n)
        return;
    dk_letkf_geometry g = lk_geometry(gi, gd);
    double pos[DK_LETKF_POS];
    lk_load_pos(gpos + i * DK_LETKF_POS, pos);
    int b[DK_LETKF_POS] = {0, 0, 0, 0};
    for (int a = 0; a < g.dims; a++)
        b[a] = dk_letkf_cell(&g, a, pos[a]);
    int visits = dk_letkf_visits(&g), count = 0;
    for (int t = 0; t < visits; t++) {
        dk_letkf_key_t key;
        if (!dk_letkf_visit_key(&g, b, t, &key))
            continue;
        int c = lk_find_cell(cell_key, cells, key);
        if (c < 0)
            continue;
        for (int j = cell_start[c]; j < cell_start[c + 1]; j++)
            count += lk_weight_at(&g, pos, opos, j) > 0.0;
    }
    atomic_max(most, count);
}

/* A work-item per sorted observation j: yp[j, :] = Yb[o, :] - mean,
 * dep[j] = yo[o] - mean, rinv[j] = 1 / r[o], o its original index; obs
 * holds yo then r (m each), in original order. */
__kernel void lk_obs(__global const REAL *yb, __global const double *obs, __global const int *order, int m, int k,
                     __global double *yp, __global double *dep, __global double *rinv)
{
    int j = get_global_id(0);
    if (j >= m)
        return;
    ulong o = (ulong)order[j];
    __global const REAL *y = yb + o * (ulong)k;
    __global double *out = yp + (ulong)j * (ulong)k;
    double mean = 0.0;
    for (int l = 0; l < k; l++)
        mean += (double)y[l];
    mean /= k;
    for (int l = 0; l < k; l++)
        out[l] = (double)y[l] - mean;
    dep[j] = obs[o] - mean;
    rinv[j] = 1.0 / obs[(ulong)m + o];
}

/* Exclusive prefix sum of flag over the group (buf: 2 * wg ints); *total
 * receives the sum. Every work-item calls it. */
static int lk_scan(int flag, __local int *buf, int lid, int wg, int *total)
{
    buf[lid] = flag;
    LK_SYNC();
    int from = 0;
    for (int off = 1; off < wg; off <<= 1) {
        int v = buf[from + lid];
        if (lid >= off)
            v += buf[from + lid - off];
        buf[(wg - from) + lid] = v;
        from = wg - from;
        LK_SYNC();
    }
    int inclusive = buf[from + lid];
    *total = buf[from + wg - 1];
    LK_SYNC();
    return inclusive - flag;
}

/* The sums of u and v over the group (buf: 2 * wg doubles, wg a power of 2). */
static void lk_sum2(double u, double v, __local double *buf, int lid, int wg, double *su, double *sv)
{
    buf[lid] = u;
    buf[wg + lid] = v;
    LK_SYNC();
    for (int step = wg / 2; step > 0; step >>= 1) {
        if (lid < step) {
            buf[lid] += buf[lid + step];
            buf[wg + lid] += buf[wg + lid + step];
        }
        LK_SYNC();
    }
    *su = buf[0];
    *sv = buf[wg];
    LK_SYNC();
}

/* Pair i of round r of the round-robin ordering of kk (even) indices:
 * p < q; q == kk - 1 may be the padding index of an odd k. */
static void lk_pair(int kk, int r, int i, int *p, int *q)
{
    int a, b, n1 = kk - 1;
    if (i == 0) {
        a = r;
        b = n1;
    } else {
        a = (r + i) % n1;
        b = (r - i + n1) % n1;
    }
    *p = a < b ? a : b;
    *q = a < b ? b : a;
}

/* The (l, m), m <= l, of entry p of the lower triangle in row order. */
static void lk_tri(int p, int *l, int *m)
{
    int r = (int)((sqrt(8.0 * p + 1.0) - 1.0) * 0.5);
    while (r * (r + 1) / 2 > p)
        r--;
    while ((r + 1) * (r + 2) / 2 <= p)
        r++;
    *l = r;
    *m = p - r * (r + 1) / 2;
}

/* The group's point, its scratch: a batch of points starts at point first,
 * group g handling point first + g with the g-th region of each array. */
#define LK_POINT() const int lid = get_local_id(0), wg = get_local_size(0), group = get_group_id(0); \
    const ulong i = first + (ulong)group

/* The point's observations with rho > 0, in the reference's order, into
 * the group's list (cidx, crho); counts[group] receives how many. */
__kernel void lk_search(__global const double *gpos, __global const double *opos, __global const ulong *cell_key,
                        __global const int *cell_start, int cells, __global const int *gi, __global const double *gd,
                        ulong first, __global int *cidx_all, __global double *crho_all, int capacity,
                        __global int *counts, __global int *status)
{
    LK_POINT();
    __local int iscan[2 * LK_WGMAX];
    __local int vstart[LK_VISITS], voff[LK_VISITS + 1];
    __global int *cidx = cidx_all + (ulong)group * (ulong)capacity;
    __global double *crho = crho_all + (ulong)group * (ulong)capacity;
    const dk_letkf_geometry g = lk_geometry(gi, gd);
    const int visits = dk_letkf_visits(&g);
    double pos[DK_LETKF_POS];
    lk_load_pos(gpos + i * DK_LETKF_POS, pos);
    int cb[DK_LETKF_POS] = {0, 0, 0, 0};
    for (int a = 0; a < g.dims; a++)
        cb[a] = dk_letkf_cell(&g, a, pos[a]);

    /* ---- search: the visits' ranges, then the candidates ---- */
    for (int v = lid; v < visits; v += wg) {
        dk_letkf_key_t key;
        int start = 0, len = 0;
        if (dk_letkf_visit_key(&g, cb, v, &key)) {
            int c = lk_find_cell(cell_key, cells, key);
            if (c >= 0) {
                start = cell_start[c];
                len = cell_start[c + 1] - start;
            }
        }
        vstart[v] = start;
        voff[v + 1] = len;
    }
    LK_SYNC();
    if (lid == 0) {
        voff[0] = 0;
        for (int v = 0; v < visits; v++)
            voff[v + 1] += voff[v];
    }
    LK_SYNC();
    const int total = voff[visits];
    int count = 0;
    for (int base = 0; base < total; base += wg) {
        int t = base + lid, flag = 0, j = 0;
        double rho = 0.0;
        if (t < total) {
            int lo = 0, hi = visits; /* the visit v with voff[v] <= t < voff[v + 1] */
            while (hi - lo > 1) {
                int mid = (lo + hi) / 2;
                if (voff[mid] <= t)
                    lo = mid;
                else
                    hi = mid;
            }
            j = vstart[lo] + (t - voff[lo]);
            rho = lk_weight_at(&g, pos, opos, j);
            flag = rho > 0.0;
        }
        int found;
        int at = count + lk_scan(flag, iscan, lid, wg, &found);
        if (flag && at < capacity) {
            cidx[at] = j;
            crho[at] = rho;
        }
        count += found;
    }
    if (lid == 0) {
        if (count > capacity)
            atomic_max(status, 1);
        counts[group] = count < capacity ? count : capacity;
    }

}

/* With more than cap observations, the group's list cut to the cap
 * largest (rho, -original index), in list order. */
__kernel void lk_cap(__global const int *obs_order, int cap, ulong first, __global int *cidx_all,
                     __global double *crho_all, int capacity, __global int *counts)
{
    LK_POINT();
    (void)i;
    __local uint hist[256];
    __local int iscan[2 * LK_WGMAX];
    __local int sh_digit, sh_need, sh_eq;
    __global int *cidx = cidx_all + (ulong)group * (ulong)capacity;
    __global double *crho = crho_all + (ulong)group * (ulong)capacity;
    const int count = counts[group];
    /* ---- cap: keep the cap largest (rho, -original index) ----
     * Barriers sit in loops whose trip counts are uniform (0 where
     * there is nothing to select), never under an if: PoCL's
     * work-group compiler replicates what follows a conditional
     * barrier. */
    const int selecting = cap > 0 && count > cap;
    ulong want = 0, mask = 0;
    int need = cap, eq = 0;
    for (int shift = selecting ? 56 : -8; shift >= 0; shift -= 8) {
        for (int d = lid; d < 256; d += wg)
            hist[d] = 0;
        LK_SYNC();
        for (int q = lid; q < count; q += wg) {
            ulong key = as_ulong(crho[q]);
            if ((key & mask) == want)
                atomic_inc(&hist[(key >> shift) & 255]);
        }
        LK_SYNC();
        if (lid == 0) {
            int cum = 0, d = 255;
            while (d > 0 && cum + (int)hist[d] < need)
                cum += (int)hist[d--];
            sh_digit = d;
            sh_need = need - cum;
            sh_eq = (int)hist[d];
        }
        LK_SYNC();
        want |= (ulong)sh_digit << shift;
        mask |= (ulong)255 << shift;
        need = sh_need;
        eq = sh_eq;
    }
    /* want is the threshold's rho; need of the eq candidates with that
     * rho are kept: those of the lowest original indices */
    uint owant = 0, omask = 0;
    for (int shift = selecting && need < eq ? 24 : -8; shift >= 0; shift -= 8) {
        LK_SYNC();
        for (int d = lid; d < 256; d += wg)
            hist[d] = 0;
        LK_SYNC();
        for (int q = lid; q < count; q += wg) {
            uint o = (uint)obs_order[cidx[q]];
            if (as_ulong(crho[q]) == want && (o & omask) == owant)
                atomic_inc(&hist[(o >> shift) & 255]);
        }
        LK_SYNC();
        if (lid == 0) {
            int cum = 0, d = 0;
            while (d < 255 && cum + (int)hist[d] < need)
                cum += (int)hist[d++];
            sh_digit = d;
            sh_need = need - cum;
        }
        LK_SYNC();
        owant |= (uint)sh_digit << shift;
        omask |= (uint)255 << shift;
        need = sh_need;
    }
    const int othr = selecting && need < eq ? (int)owant : INT_MAX;
    /* compact in place: a round writes only below where it reads */
    int kept = 0;
    for (int base = 0; selecting && base < count; base += wg) {
        int q = base + lid, flag = 0, j = 0;
        double rho = 0.0;
        if (q < count) {
            j = cidx[q];
            rho = crho[q];
            ulong key = as_ulong(rho);
            flag = key > want || (key == want && obs_order[j] <= othr);
        }
        int found;
        int at = kept + lk_scan(flag, iscan, lid, wg, &found);
        if (flag) {
            cidx[at] = j;
            crho[at] = rho;
        }
        kept += found;
    }
    if (selecting && lid == 0)
        counts[group] = kept;

}

/* A (lower triangle, row-major k x k) and b of the group's point, summed
 * in list order: rows staged in local memory, each entry owned by one
 * work-item, so A and b equal the reference's where no cap reorders the
 * list. */
__kernel void lk_ab(int k, __global const double *yp, __global const double *dep, __global const double *rinv,
                    ulong first, __global const int *cidx_all, __global const double *crho_all, int capacity,
                    __global const int *counts, __global double *ab)
{
    LK_POINT();
    (void)i;
    __local double stage[LK_STAGE];
    __global const int *cidx = cidx_all + (ulong)group * (ulong)capacity;
    __global const double *crho = crho_all + (ulong)group * (ulong)capacity;
    __global double *A = ab + (ulong)group * (ulong)(k * k + k), *bv = A + k * k;
    const int count = counts[group], tri = k * (k + 1) / 2;
    const int chunk = LK_STAGE / (k + 2); /* rows staged at a time: k values, weight, departure */
    for (int p = lid; p < tri + k; p += wg) {
        if (p < tri) {
            int l, m;
            lk_tri(p, &l, &m);
            A[l * k + m] = 0.0;
        } else {
            bv[p - tri] = 0.0;
        }
    }
    for (int base = 0; base < count; base += chunk) {
        int rows = count - base < chunk ? count - base : chunk;
        __local double *wgt = stage + rows * k, *dp = wgt + rows;
        LK_SYNC();
        for (int u = lid; u < rows * k; u += wg) {
            int e = u / k, l = u - e * k;
            stage[u] = yp[(ulong)cidx[base + e] * (ulong)k + l];
        }
        for (int e = lid; e < rows; e += wg) {
            int j = cidx[base + e];
            wgt[e] = crho[base + e] * rinv[j];
            dp[e] = dep[j];
        }
        LK_SYNC();
        for (int p = lid; p < tri + k; p += wg) {
            if (p < tri) {
                int l, m;
                lk_tri(p, &l, &m);
                double acc = A[l * k + m];
                for (int e = 0; e < rows; e++)
                    acc += (wgt[e] * stage[e * k + l]) * stage[e * k + m];
                A[l * k + m] = acc;
            } else {
                int l = p - tri;
                double acc = bv[l];
                for (int e = 0; e < rows; e++)
                    acc += (wgt[e] * stage[e * k + l]) * dp[e];
                bv[l] = acc;
            }
        }
    }
}

/* The group's point from its A and b: the eigen-decomposition, w, the
 * transform with RTPP and RTPS, xa (may be xb), nobs and the spread. */
__kernel void lk_transform(int k, double inflation, double rtpp, double rtps, ulong first,
                           __global const int *counts, __global double *ab, __global double *mats,
                           __global REAL *xb, __global REAL *xa, __global int *nobs, __global double *spread,
                           int outputs, __global double *tout)
{
    LK_POINT();
    __local double lsc[2 * LK_WGMAX];
    __local double sh_xm;
    __global double *gA = ab + (ulong)group * (ulong)(k * k + k), *gb = gA + k * k;
#if LK_KL > 0
    __local double A[LK_KL * LK_KL], Q[LK_KL * LK_KL];
    __local double vec[6 * LK_KL], rot[5 * (LK_KL / 2 + 1)];
    (void)mats;
#else
    const ulong region = (ulong)k * k + 6 * (ulong)k + 5 * (ulong)(k / 2 + 1);
    __global double *A = gA;
    __global double *Q = mats + (ulong)group * region;
    __global double *vec = Q + (ulong)k * k;
    __global double *rot = vec + 6 * k;
#endif
    MSPACE double *xv = vec, *bv = vec + k, *av = vec + 2 * k, *zv = vec + 3 * k, *wv = vec + 4 * k,
                  *pv = vec + 5 * k;
    const int kk = k + (k & 1), npairs = kk / 2;
    for (int l = lid; l < k; l += wg) {
        xv[l] = outputs & 4 ? 0.0 : (double)xb[i * (ulong)k + l];
        bv[l] = gb[l];
    }
    for (int u = lid; u < k * k; u += wg) {
        int l = u / k, m = u - l * k;
        A[u] = m > l ? gA[m * k + l] : gA[u];
        Q[u] = l == m ? 1.0 : 0.0;
    }
    LK_SYNC();
    if (lid == 0) {
        double xm = 0.0;
        for (int l = 0; l < k; l++)
            xm += xv[l];
        sh_xm = xm / k;
    }
    LK_SYNC();
    const double xm = sh_xm;
    for (int l = lid; l < k; l += wg)
        xv[l] -= xm;
    LK_SYNC();

    /* ---- eigen: A = Q diag(lam) Q^T by parallel cyclic Jacobi ---- */
    int go = 1;
    for (int sweep = 0; go && sweep <= LK_SWEEPS; sweep++) {
        /* converged when the off-diagonal part is negligible (the
         * reference's test, before each sweep) */
        double off = 0.0, diag = 0.0;
        for (int u = lid; u < k * k; u += wg) {
            int l = u / k, m = u - l * k;
            double a = A[u];
            if (m > l)
                off += a * a;
            else if (m == l)
                diag += a * a;
        }
        lk_sum2(off, diag, lsc, lid, wg, &off, &diag);
        go = sweep < LK_SWEEPS && !(off <= DBL_EPSILON * DBL_EPSILON * 1e-2 * diag || off < DBL_MIN);
        for (int r = 0; go && r < kk - 1; r++) {
            for (int pi = lid; pi < npairs; pi += wg) {
                int p, q;
                lk_pair(kk, r, pi, &p, &q);
                MSPACE double *ro = rot + 5 * pi;
                double apq = q < k ? A[p * k + q] : 0.0;
                if (apq == 0.0) {
                    ro[1] = 0.0; /* s = 0: no rotation */
                    continue;
                }
                double app = A[p * k + p], aqq = A[q * k + q];
                double theta = (aqq - app) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                ro[0] = c;
                ro[1] = s;
                ro[2] = s / (1.0 + c);
                ro[3] = app - t * apq;
                ro[4] = aqq + t * apq;
            }
            LK_SYNC();
            /* rows p and q of each pair: A <- J^T A */
            for (int u = lid; u < npairs * k; u += wg) {
                int pi = u / k, col = u - pi * k;
                MSPACE double *ro = rot + 5 * pi;
                double s = ro[1];
                if (s == 0.0)
                    continue;
                int p, q;
                lk_pair(kk, r, pi, &p, &q);
                double tau = ro[2], ap = A[p * k + col], aq = A[q * k + col];
                A[p * k + col] = ap - s * (aq + tau * ap);
                A[q * k + col] = aq + s * (ap - tau * aq);
            }
            LK_SYNC();
            /* columns p and q: A <- A J, the pair's own 2 x 2 block set
             * to its exact result; Q <- Q J */
            for (int u = lid; u < npairs * k; u += wg) {
                int pi = u / k, row = u - pi * k;
                MSPACE double *ro = rot + 5 * pi;
                double s = ro[1];
                if (s == 0.0)
                    continue;
                int p, q;
                lk_pair(kk, r, pi, &p, &q);
                double tau = ro[2];
                if (row == p) {
                    A[p * k + p] = ro[3];
                    A[p * k + q] = 0.0;
                } else if (row == q) {
                    A[q * k + p] = 0.0;
                    A[q * k + q] = ro[4];
                } else {
                    double ap = A[row * k + p], aq = A[row * k + q];
                    A[row * k + p] = ap - s * (aq + tau * ap);
                    A[row * k + q] = aq + s * (ap - tau * aq);
                }
                double vp = Q[row * k + p], vq = Q[row * k + q];
                Q[row * k + p] = vp - s * (vq + tau * vp);
                Q[row * k + q] = vq + s * (vp - tau * vq);
            }
            LK_SYNC();
        }
    }

    /* ---- transform ---- */
    const double gk = (double)(k - 1) / inflation;
    if (outputs & 4) {
        /* weight interpolation: T[l,m] = W[l,m] + w_l of the point, RTPS left to the apply */
        for (int e = lid; e < k; e += wg) {
            double lam = A[e * k + e], qb = 0.0;
            for (int l = 0; l < k; l++)
                qb += Q[l * k + e] * bv[l];
            av[e] = qb / (gk + lam);
            zv[e] = sqrt((double)(k - 1) / (gk + lam));
        }
        LK_SYNC();
        for (int l = lid; l < k; l += wg) {
            double w = 0.0;
            for (int e = 0; e < k; e++)
                w += Q[l * k + e] * av[e];
            wv[l] = w;
        }
        LK_SYNC();
        __global double *T = tout + i * (ulong)k * (ulong)k;
        for (int u = lid; u < k * k; u += wg) {
            int l = u / k, m = u - l * k;
            double sum = 0.0;
            for (int e = 0; e < k; e++)
                sum += Q[l * k + e] * zv[e] * Q[m * k + e];
            if (rtpp > 0.0)
                sum = (1.0 - rtpp) * sum + (l == m ? rtpp : 0.0);
            T[u] = sum + wv[l];
        }
        return;
    }
    for (int e = lid; e < k; e += wg) {
        double lam = A[e * k + e], qb = 0.0, qx = 0.0;
        for (int l = 0; l < k; l++) {
            double qle = Q[l * k + e];
            qb += qle * bv[l];
            qx += qle * xv[l];
        }
        av[e] = qb / (gk + lam);
        zv[e] = sqrt((double)(k - 1) / (gk + lam)) * qx;
    }
    LK_SYNC();
    for (int l = lid; l < k; l += wg) {
        double w = 0.0, a = 0.0;
        for (int e = 0; e < k; e++) {
            double qle = Q[l * k + e];
            w += qle * av[e];
            a += qle * zv[e];
        }
        if (rtpp > 0.0)
            a = (1.0 - rtpp) * a + rtpp * xv[l];
        wv[l] = w;
        pv[l] = a;
    }
    LK_SYNC();
    if (lid == 0) {
        double xam = xm, sb = 0.0, sa = 0.0;
        for (int l = 0; l < k; l++) {
            xam += xv[l] * wv[l];
            sb += xv[l] * xv[l];
            sa += pv[l] * pv[l];
        }
        sb = sqrt(sb / (k - 1));
        sa = sqrt(sa / (k - 1));
        double factor = rtps > 0.0 && sa > 0.0 ? 1.0 + rtps * (sb - sa) / sa : 1.0;
        double mean = 0.0;
        for (int m = 0; m < k; m++) {
            double v = xam + factor * pv[m];
            av[m] = v;
            mean += v;
        }
        mean /= k;
        double sd = 0.0;
        for (int m = 0; m < k; m++)
            sd += (av[m] - mean) * (av[m] - mean);
        if (outputs & 1)
            nobs[i] = counts[group];
        if (outputs & 2)
            spread[i] = sqrt(sd / (k - 1));
    }
    LK_SYNC();
    for (int m = lid; m < k; m += wg)
        xa[i * (ulong)k + m] = (REAL)av[m];
    LK_SYNC();
}

/* Weight interpolation's apply, a work-item per (point, member m): the
 * analysis perturbation a_m = sum_e c_e sum_l X_l T_e[l,m] into abuf. */
__kernel void lk_interp_a(ulong n, int k, __global const REAL *xb, __global const double *T,
                          __global const long *indptr, __global const long *indices, __global const double *values,
                          __global double *abuf)
{
    ulong g = get_global_id(0);
    if (g >= n * (ulong)k)
        return;
    ulong i = g / (ulong)k;
    int m = (int)(g - i * (ulong)k);
    __global const REAL *x = xb + i * (ulong)k;
    double xm = 0.0;
    for (int l = 0; l < k; l++)
        xm += (double)x[l];
    xm /= k;
    double a = 0.0;
    for (long e = indptr[i]; e < indptr[i + 1]; e++) {
        __global const double *Te = T + (ulong)indices[e] * (ulong)k * (ulong)k;
        double v = 0.0;
        for (int l = 0; l < k; l++)
            v += ((double)x[l] - xm) * Te[l * k + m];
        a += values[e] * v;
    }
    abuf[g] = a;
}

/* A work-item per point: the mean of a, RTPS, xa (may be xb) and the spread. */
__kernel void lk_interp_finish(ulong n, int k, double rtps, __global const REAL *xb, __global const double *abuf,
                               __global REAL *xa, __global double *spread, int want_spread)
{
    ulong i = get_global_id(0);
    if (i >= n)
        return;
    __global const REAL *x = xb + i * (ulong)k;
    __global const double *a = abuf + i * (ulong)k;
    double xm = 0.0, am = 0.0;
    for (int l = 0; l < k; l++) {
        xm += (double)x[l];
        am += a[l];
    }
    xm /= k;
    am /= k;
    double sb = 0.0, sa = 0.0;
    for (int l = 0; l < k; l++) {
        double xp = (double)x[l] - xm, ap = a[l] - am;
        sb += xp * xp;
        sa += ap * ap;
    }
    sb = sqrt(sb / (k - 1));
    sa = sqrt(sa / (k - 1));
    double factor = rtps > 0.0 && sa > 0.0 ? 1.0 + rtps * (sb - sa) / sa : 1.0;
    for (int m = 0; m < k; m++)
        xa[i * (ulong)k + m] = (REAL)(xm + am + factor * (a[m] - am));
    if (want_spread)
        spread[i] = factor * sa;
}
