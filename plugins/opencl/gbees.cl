/* dakit-opencl gbees kernels: the scheme of algorithms/gbees/engine.h as a
 * sequence of kernels per step (OpenCL has no grid-wide barrier).
 *
 * gbees.c prepends the model: the cl_khr_fp64 pragma, GB_DIM (the grid's
 * dimension, so per-cell loops have fixed trip counts), the text of the
 * model file and gb_f / gb_h naming its functions. Model functions take
 * private pointers, so their arguments are copied into private arrays.
 *
 * Storage as in the engine: per cell position c, key[c*D + i], v[c*D + i]
 * (velocity i at the forward face i), nb[c*2D + 2i] / [.. + 1] (back and
 * forward neighbour along i, -1 when absent), p[c], rate[c]; per step
 * scratch wave, back, flux. par holds centre (D), dx (D), the model's
 * coefficients (GB_NCOEF) and the threshold.
 *
 * The index is an open-addressing table of 32-bit slots (linear probing,
 * occupancy at most one half): -1 empty, c >= 0 a cell, -2 - q this
 * step's candidate q, which became cell cand_cell[q]. New cells come in
 * three launches, none of which waits on another work-item:
 *   gb_grow / gb_init_level  cells write the keys of missing neighbours
 *              into a candidate list (atomic_inc; the table is read-only);
 *   gb_insert  each candidate claims a slot by atomic_cmpxchg with the
 *              value -2 - candidate, whose key is already in the list, so
 *              a racing candidate compares keys at once; a candidate that
 *              meets its own key is a duplicate and drops out; a winner
 *              takes a cell position (atomic_inc) and writes its key,
 *              leaving the slot's value as it is (another work-item could
 *              see a new position before its key);
 *   gb_link_new  each new cell puts its position in its slot, reading
 *              the others' slots through cand_cell meanwhile.
 * Only 32-bit atomics are used (64-bit ones are not on every device).
 *
 * Steps run without the host: each launch is sized by an upper bound and
 * reads what it needs from two small arrays the host writes once per
 * batch of steps and reads after it:
 *   ctr  int:    0 candidates, 1 new cells, 2 cells kept, 3 n (cells),
 *                4 steps done in the batch, 5 status (GB_RUN, GB_STALL:
 *                the growth needs more room than the batch was given, or
 *                an error), 6 t reached the target; 7, 8, 9: 3, 5, 6 as
 *                gb_waves leaves them (gb_fluxes copies them over), 10 the
 *                candidates of a stalled step, 11 gb_apply finishes a
 *                step cut at the last target (from its start in wave);
 *   clk  double: 0 largest rate, 1 t, 2 dt, 3 target, 4 cfl, 5 the
 *                normalization's pending 1 / total (0: none), 6 cell-steps
 *                in the batch, 7 the dt that collapsed; 8, 9: 0, 1 as
 *                gb_waves leaves them; 10 the part of the step's fluxes
 *                gb_apply takes (gb_step_part: below 1, the step is cut
 *                at the target), 11 the time the step started.
 * A step's launches after a stall or an error, or once t reached the
 * target, return at once, so the host may enqueue more steps than run.
 * The normalization's scaling waits for the next launch that touches
 * every cell anyway (gb_grow, gb_prune_move or gb_settle); gb_grow also
 * takes the step's total itself (from gb_apply's partial sums) where the
 * grid is small, saving gb_total's launch.
 *
 * Every sum and maximum goes through gb_reduce (work-groups stride over
 * the cells, then a tree in local memory) and gb_reduce_final (one group
 * over the partials): fixed order for a given cell order. The cell order
 * itself follows the atomics, so sums may round differently from the
 * reference's; the conformance suite allows for that. */

#define D GB_DIM
#define P_CENTER 0
#define P_DX D
#define P_COEF (2 * D)
#define P_THR (2 * D + GB_NCOEF)
#define MAXM 8 /* DK_GBEES_MAX_DIM: measurement components */

/* ctr[5] */
#define GB_RUN 0
#define GB_STALL 2
#define GB_COLLAPSED 3
#define GB_LEFT 4
#define GB_PRUNED 5

/* a step's growth may run: no stall or error, t short of the target */
static inline int gb_may_grow(__global const int *ctr)
{
    return ctr[5] == GB_RUN && ctr[6] == 0;
}

/* the candidates do not fit the room the batch was given */
static inline int gb_stalled(__global const int *ctr, int room, int n_bound)
{
    return ctr[0] > room || ctr[3] + ctr[0] > n_bound;
}

/* step `step` of the batch ran and nothing failed since */
static inline int gb_ran(__global const int *ctr, int step)
{
    return ctr[4] == step && ctr[5] == GB_RUN;
}

/* ... and was not cut at the target: pruning may follow it */
static inline int gb_whole(__global const int *ctr, __global const double *clk, int step)
{
    return gb_ran(ctr, step) && !(clk[10] < 1.0);
}

/* gb_pos, gb_neg and gb_mc come from algorithms/gbees/flux.h, ahead of
 * this file in the program (gbees.c) */

static inline ulong gb_mix64(ulong z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9UL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebUL;
    return z ^ (z >> 31);
}

/* the cyclic-polynomial hash of hash.h */
static inline ulong gb_hash_key(const int *k)
{
    ulong h = 0x9e3779b97f4a7c15UL * (ulong)(D + 1);
    for (int i = 0; i < D; i++) {
        h = (h << 7) | (h >> 57);
        h ^= gb_mix64((ulong)(uint)k[i] + 0x632be59bd9b4e019UL * (ulong)(i + 1));
    }
    return gb_mix64(h);
}

static inline int gb_key_eq(__global const int *a, const int *b)
{
    for (int i = 0; i < D; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static inline void gb_load_key(__global const int *key, int c, int *k)
{
    for (int i = 0; i < D; i++)
        k[i] = key[(size_t)c * D + i];
}

static int gb_find(__global const int *slot, uint mask, __global const int *key, const int *k)
{
    uint s = (uint)gb_hash_key(k) & mask;
    for (;;) {
        int pos = slot[s];
        if (pos < 0)
            return -1;
        if (gb_key_eq(key + (size_t)pos * D, k))
            return pos;
        s = (s + 1) & mask;
    }
}

/* gb_find in gb_link_new, where slots may still hold this step's
 * candidates (-2 - q: candidate q, now cell cand_cell[q]); *at: the slot. */
static int gb_find_new(__global const int *slot, uint mask, __global const int *key, __global const int *cand,
                       __global const int *cand_cell, const int *k, uint *at)
{
    uint s = (uint)gb_hash_key(k) & mask;
    for (;;) {
        int pos = slot[s];
        if (pos == -1)
            return -1;
        if (gb_key_eq(pos >= 0 ? key + (size_t)pos * D : cand + (size_t)(-2 - pos) * D, k)) {
            *at = s;
            return pos >= 0 ? pos : cand_cell[-2 - pos];
        }
        s = (s + 1) & mask;
    }
}

static inline void gb_center(__global const double *par, const int *k, double *x)
{
    for (int i = 0; i < D; i++)
        x[i] = par[P_CENTER + i] + par[P_DX + i] * k[i];
}

static double gb_quad(int m, const double *x, __global const double *mean, __global const double *inv)
{
    double r[MAXM], q = 0.0;
    for (int i = 0; i < m; i++)
        r[i] = x[i] - mean[i];
    for (int i = 0; i < m; i++) {
        double row = 0.0;
        for (int j = 0; j < m; j++)
            row += inv[i * m + j] * r[j];
        q += r[i] * row;
    }
    return q;
}

/* The work-group's sum (op 0) or maximum (op 1) of each item's acc, left
 * in tmp[0] (a power-of-two group size). */
static void gb_reduce_group(__local double *tmp, double acc, int op)
{
    size_t lid = get_local_id(0);
    tmp[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t h = get_local_size(0) / 2; h > 0; h /= 2) {
        if (lid < h)
            tmp[lid] = op == 0 ? tmp[lid] + tmp[lid + h] : fmax(tmp[lid], tmp[lid + h]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Appends key k to the candidate list; past cand_cap only the count grows:
 * the launches that follow see the overflow in counters[0] and insert
 * nothing (gb_stalled), and the host enlarges the list and runs the step
 * again, the grid being unchanged. */
static inline void gb_push(__global int *cand, __global int *counters, int cand_cap, const int *k)
{
    int at = atomic_inc(&counters[0]);
    if (at < cand_cap)
        for (int i = 0; i < D; i++)
            cand[(size_t)at * D + i] = k[i];
}

/* Initialization, one breadth-first level: the Gaussian masses of cells
 * [from, to), and the missing face neighbours of those at or above the
 * threshold. gauss: mean (D), then the inverse covariance (D x D). */
__kernel void gb_init_level(int from, int to, double lognorm, __global const double *par,
                            __global const double *gauss, __global const int *key,
                            __global double *p, __global const int *slot, uint mask,
                            __global int *cand, __global int *counters, int cand_cap)
{
    int c = from + (int)get_global_id(0);
    if (c >= to)
        return;
    int k[D];
    double x[D];
    gb_load_key(key, c, k);
    gb_center(par, k, x);
    double mass = exp(lognorm - 0.5 * gb_quad(D, x, gauss, gauss + D));
    p[c] = mass;
    if (mass < par[P_THR])
        return;
    for (int i = 0; i < D; i++)
        for (int s = -1; s <= 1; s += 2) {
            k[i] += s;
            if (gb_find(slot, mask, key, k) < 0)
                gb_push(cand, counters, cand_cap, k);
            k[i] -= s;
        }
}

/* Directional growth as gb_grow decides it: a cell at or above the
 * threshold asks for its downwind face neighbour along each axis with a
 * non-zero velocity and for the downwind edge neighbours of each pair of
 * such axes. Links are complete among existing cells, so a missing link is
 * a missing cell; only an edge neighbour behind a missing face cell needs
 * the index. */
__kernel void gb_grow(int step, __global const double *par, __global const int *key,
                      __global const double *v, __global const int *nb, __global double *p,
                      __global const int *slot, uint mask, __global int *cand,
                      __global int *ctr, int cand_cap, __global const double *clk,
                      int sum_groups, __global const double *sum_part, __local double *tmp)
{
    int c = (int)get_global_id(0);
    int go = gb_may_grow(ctr);
    /* the last normalization's scaling, pending: in clk[5], or (sum_groups
     * > 0) the sum of step - 1, when it ran, in sum_part, reduced here by
     * every work-group alike, as gb_total would (also when t reached the
     * target at that step and nothing grows now) */
    double inv = clk[5];
    if (sum_groups > 0) {
        int ran = gb_ran(ctr, step - 1);
        double acc = 0.0;
        if (ran)
            for (size_t i = get_local_id(0); i < (size_t)sum_groups; i += get_local_size(0))
                acc += sum_part[i];
        gb_reduce_group(tmp, acc, 0);
        double total = tmp[0];
        if (!ran)
            return;
        if (!(total > 0.0) || isinf(total)) {
            if (c == 0)
                ctr[5] = GB_LEFT;
            return;
        }
        inv = 1.0 / total;
    }
    if (c >= ctr[3] || !(go || (sum_groups > 0 && inv != 0.0)))
        return;
    double pc = p[c];
    if (inv != 0.0) {
        pc *= inv;
        p[c] = pc;
    }
    if (!go || pc < par[P_THR])
        return;
    double vc[D];
    for (int i = 0; i < D; i++)
        vc[i] = v[(size_t)c * D + i];
    __global const int *nbc = nb + (size_t)c * 2 * D;
    int k[D];
    for (int i = 0; i < D; i++) {
        if (vc[i] == 0.0)
            continue;
        int si = vc[i] > 0.0;
        int face = nbc[2 * i + si];
        gb_load_key(key, c, k);
        k[i] += si ? 1 : -1;
        if (face < 0)
            gb_push(cand, ctr, cand_cap, k);
        for (int j = 0; j < D; j++) {
            if (j == i || vc[j] == 0.0)
                continue;
            int sj = vc[j] > 0.0;
            if (face >= 0 && nb[(size_t)face * 2 * D + 2 * j + sj] >= 0)
                continue;
            k[j] += sj ? 1 : -1;
            if (face >= 0 || gb_find(slot, mask, key, k) < 0)
                gb_push(cand, ctr, cand_cap, k);
            k[j] -= sj ? 1 : -1;
        }
    }
}

/* Each candidate claims a slot or finds its key already there (a cell, or
 * a candidate that claimed first); a winner becomes cell n + ctr[1]++
 * (n = ctr[3]): key, zero mass, cand_cell[c] (-1 for the others). Room: at
 * most `room` candidates and n_bound cells, else the step stalls. */
__kernel void gb_insert(int room, int n_bound, __global int *ctr, __global const int *cand,
                        __global int *key, __global double *p, __global int *slot, uint mask,
                        __global int *cand_cell)
{
    int c = (int)get_global_id(0);
    if (c >= ctr[0] || !gb_may_grow(ctr) || gb_stalled(ctr, room, n_bound))
        return;
    int k[D];
    gb_load_key(cand, c, k);
    uint s = (uint)gb_hash_key(k) & mask;
    volatile __global int *vs = slot;
    for (;;) {
        int cur = vs[s];
        if (cur == -1) {
            int prev = atomic_cmpxchg(&slot[s], -1, -2 - c);
            if (prev == -1) {
                int at = ctr[3] + atomic_inc(&ctr[1]);
                for (int i = 0; i < D; i++)
                    key[(size_t)at * D + i] = k[i];
                p[at] = 0.0;
                cand_cell[c] = at;
                return;
            }
            cur = prev;
        }
        __global const int *other = cur >= 0 ? key + (size_t)cur * D : cand + (size_t)(-2 - cur) * D;
        if (gb_key_eq(other, k)) {
            cand_cell[c] = -1;
            return;
        }
        s = (s + 1) & mask;
    }
}

/* Cells [n, n + ctr[1]) (n = ctr[3]) put their positions in their slots,
 * find their face neighbours, tell the older ones about themselves (each
 * older cell's face slot has exactly one cell across it, so no two writes
 * meet) and get their velocities: f at
 * the centre moved half a cell along each axis, once per cell. The
 * work-group's largest new rate goes to rate_part[group]. */
__kernel void gb_link_new(int room, int n_bound, __global const int *ctr, __global const double *par,
                          __global const int *key, __global int *slot, uint mask, __global const int *cand,
                          __global const int *cand_cell, __global int *nb, __global double *v,
                          __global double *rate, __global double *rate_part, __local double *tmp)
{
    int from = ctr[3];
    int c = from + (int)get_global_id(0);
    double r = 0.0;
    if (c < from + ctr[1] && gb_may_grow(ctr) && !gb_stalled(ctr, room, n_bound)) {
        int k[D];
        uint at = 0, unused;
        gb_load_key(key, c, k);
        gb_find_new(slot, mask, key, cand, cand_cell, k, &at);
        slot[at] = c;
        for (int i = 0; i < D; i++) {
            k[i]--;
            int b = gb_find_new(slot, mask, key, cand, cand_cell, k, &unused);
            k[i] += 2;
            int f = gb_find_new(slot, mask, key, cand, cand_cell, k, &unused);
            k[i]--;
            nb[(size_t)c * 2 * D + 2 * i] = b;
            nb[(size_t)c * 2 * D + 2 * i + 1] = f;
            if (b >= 0 && b < from)
                nb[(size_t)b * 2 * D + 2 * i + 1] = c;
            if (f >= 0 && f < from)
                nb[(size_t)f * 2 * D + 2 * i] = c;
        }
        double coef[GB_NCOEF], x[D], fx[D];
        for (int m = 0; m < GB_NCOEF; m++)
            coef[m] = par[P_COEF + m];
        for (int i = 0; i < D; i++) {
            gb_center(par, k, x);
            x[i] += 0.5 * par[P_DX + i];
            gb_f(D, x, coef, fx);
            v[(size_t)c * D + i] = fx[i];
            r += fabs(fx[i]) / par[P_DX + i];
        }
        rate[c] = r;
    }
    gb_reduce_group(tmp, r, 1);
    if (get_local_id(0) == 0)
        rate_part[get_group_id(0)] = tmp[0];
}

/* Stage one of a sum (op 0) or maximum (op 1) of x[0, n): partial[group]. */
__kernel void gb_reduce(int n, __global const double *x, int op, __global double *partial,
                        __local double *tmp)
{
    double acc = 0.0;
    for (size_t i = get_global_id(0); i < (size_t)n; i += get_global_size(0)) {
        double y = x[i];
        acc = op == 0 ? acc + y : fmax(acc, y);
    }
    gb_reduce_group(tmp, acc, op);
    if (get_local_id(0) == 0)
        partial[get_group_id(0)] = tmp[0];
}

/* Stage two, one work-group: out[at] = the reduction of partial[0, groups). */
__kernel void gb_reduce_final(int groups, __global const double *partial, int op,
                              __global double *out, int at, __local double *tmp)
{
    size_t lid = get_local_id(0), size = get_local_size(0);
    double acc = 0.0;
    for (size_t i = lid; i < (size_t)groups; i += size)
        acc = op == 0 ? acc + partial[i] : fmax(acc, partial[i]);
    gb_reduce_group(tmp, acc, op);
    if (lid == 0)
        out[at] = tmp[0];
}

/* p /= scalars[at], when that is a positive finite total (the host checks
 * it and reports a run whose mass vanished). */
__kernel void gb_scale(int n, __global double *p, __global const double *scalars, int at)
{
    int c = (int)get_global_id(0);
    double total = scalars[at];
    if (c >= n || !(total > 0.0) || isinf(total))
        return;
    double scale = 1.0 / total;
    p[c] *= scale;
}

/* Each face's wave (half the jump across it, times dt/dx) and what the
 * back face brings in: the back neighbour's max(v_i, 0) and the back
 * face's wave. */
__kernel void gb_waves(int step, int room, int n_bound, int link_groups, __global int *ctr,
                       __global double *clk, __global const double *rate_part, __local double *tmp,
                       __global const double *par, __global const int *nb,
                       __global const double *v, __global const double *p,
                       __global double *wave, __global double *back)
{
    /* the clock, in every work-group alike: takes the new cells in, keeps
     * the largest rate (a cell's rate never changes, so only new cells can
     * raise it), and chooses dt exactly as the engine does (CFL limit; a
     * step that passes the target is cut there, gb_step_part); a growth
     * that did not fit stalls
     * the batch instead. Work-item 0 writes the outcome into the words
     * that no work-item reads here (ctr[7..10], clk[8, 9] and those the
     * step's later launches read), and gb_fluxes publishes it. */
    int c = (int)get_global_id(0);
    int go = gb_may_grow(ctr), stalled = gb_stalled(ctr, room, n_bound);
    int grows = go && !stalled;
    double acc = 0.0;
    if (grows)
        for (size_t i = get_local_id(0); i < (size_t)link_groups; i += get_local_size(0))
            acc = fmax(acc, rate_part[i]);
    gb_reduce_group(tmp, acc, 1);
    int added = ctr[1], n = ctr[3] + (grows ? added : 0);
    double rate = clk[0];
    if (grows && added > 0 && tmp[0] > rate)
        rate = tmp[0];
    double t = clk[1], target = clk[3];
    double dt = rate > 0.0 ? clk[4] / rate : target - t;
    int collapsed = grows && !(dt > 1e-12 * (1.0 + fabs(target)));
    int run = grows && !collapsed;
    int last = dt >= target - t;
    if (c == 0) {
        ctr[7] = n;
        ctr[8] = !go ? ctr[5] : stalled ? GB_STALL : collapsed ? GB_COLLAPSED : GB_RUN;
        ctr[9] = run ? last : ctr[6];
        clk[8] = rate;
        clk[9] = run ? gb_step_time(t, dt, target) : t;
        if (go && stalled)
            ctr[10] = ctr[0]; /* the host makes room for them */
        if (collapsed)
            clk[7] = dt;
        if (go)
            clk[5] = 0.0; /* gb_grow applied the scaling */
        if (run) {
            clk[2] = dt;
            clk[6] += (double)n;
            clk[10] = gb_step_part(t, dt, target);
            clk[11] = t;
            ctr[4] = step;
        }
    }
    if (!run || c >= n)
        return;
    double pc = p[c];
    for (int i = 0; i < D; i++) {
        int fwd = nb[(size_t)c * 2 * D + 2 * i + 1], a = nb[(size_t)c * 2 * D + 2 * i];
        double dxi = par[P_DX + i];
        wave[(size_t)c * D + i] = fwd >= 0 ? dt * (p[fwd] - pc) / (2.0 * dxi) : 0.0;
        back[(size_t)c * 2 * D + 2 * i] = a >= 0 ? gb_pos(v[(size_t)a * D + i]) : 0.0;
        back[(size_t)c * 2 * D + 2 * i + 1] = a >= 0 ? dt * (pc - p[a]) / (2.0 * dxi) : 0.0;
    }
}

/* The flux through each forward face of cell c, times dt / dx_j: donor
 * cell, the MC-limited high-resolution correction, and the
 * corner-transport terms of the transverse waves (engine.h, gb_fluxes). */
__kernel void gb_fluxes(int step, __global int *ctr, __global double *clk,
                        __global const double *par, __global const int *nbs,
                        __global const double *vv, __global const double *p,
                        __global const double *wave, __global const double *back,
                        __global double *flux)
{
    int c = (int)get_global_id(0);
    /* gb_waves' outcome: read here from its own words, published by
     * work-item 0 for the launches that follow */
    int n = ctr[7], ran = ctr[4] == step && ctr[8] == GB_RUN;
    if (c == 0) {
        ctr[3] = n;
        ctr[5] = ctr[8];
        ctr[6] = ctr[9];
        clk[0] = clk[8];
        clk[1] = clk[9];
        ctr[0] = 0;
        ctr[1] = 0;
    }
    if (c >= n || !ran)
        return;
    double dt = clk[2];
    double v[D];
    int nb[2 * D];
    for (int i = 0; i < D; i++)
        v[i] = vv[(size_t)c * D + i];
    for (int i = 0; i < 2 * D; i++)
        nb[i] = nbs[(size_t)c * 2 * D + i];
    double pc = p[c];
    for (int j = 0; j < D; j++) {
        double u = v[j], dxj = par[P_DX + j];
        int fwd = nb[2 * j + 1];
        double F = gb_pos(u) * pc + (fwd >= 0 ? gb_neg(u) * p[fwd] : 0.0);
        double corr = 0.0;
        if (fwd >= 0) {
            double jump = p[fwd] - pc;
            if (jump != 0.0) {
                double up;
                if (u > 0.0) {
                    int bk = nb[2 * j];
                    up = bk >= 0 ? pc - p[bk] : pc;
                } else {
                    int ff = nbs[(size_t)fwd * 2 * D + 2 * j + 1];
                    up = ff >= 0 ? p[ff] - p[fwd] : -p[fwd];
                }
                double au = fabs(u);
                corr += au * (dxj / dt - au) * wave[(size_t)c * D + j] * gb_mc(up / jump);
            }
        }
        double vj_out = gb_pos(v[j]), vj_in = gb_neg(v[j]);
        for (int i = 0; i < D; i++) {
            if (i == j)
                continue;
            int a = nb[2 * i], b = nb[2 * i + 1];
            if (a >= 0 && vj_out != 0.0)
                corr -= back[(size_t)c * 2 * D + 2 * i] * vj_out * back[(size_t)c * 2 * D + 2 * i + 1];
            if (b >= 0 && vj_out != 0.0)
                corr -= gb_neg(v[i]) * vj_out * wave[(size_t)c * D + i];
            if (fwd >= 0 && vj_in != 0.0) {
                __global const int *fnb = nbs + (size_t)fwd * 2 * D;
                int fa = fnb[2 * i], fb = fnb[2 * i + 1];
                __global const double *fback = back + (size_t)fwd * 2 * D;
                if (fa >= 0)
                    corr -= fback[2 * i] * vj_in * fback[2 * i + 1];
                if (fb >= 0)
                    corr -= gb_neg(vv[(size_t)fwd * D + i]) * vj_in * wave[(size_t)fwd * D + i];
            }
        }
        flux[(size_t)c * D + j] = (F + corr) * dt / dxj;
    }
}

/* p minus the part clk[10] of the net flux out, and the work-group's sum
 * of the new p in sum_part[group] (the normalization's first stage). A
 * step cut at the target first keeps its start in wave (free once the
 * fluxes are made); finishing it (ctr[11]) starts from there. */
__kernel void gb_apply(int step, __global const int *ctr, __global const double *clk,
                       __global const int *nb, __global const double *flux, __global double *p,
                       __global double *wave, __global double *sum_part, __local double *tmp)
{
    int c = (int)get_global_id(0);
    double q = 0.0;
    if (c < ctr[3] && gb_ran(ctr, step)) {
        double part = clk[10];
        int resume = ctr[11];
        q = resume ? wave[c] : p[c];
        if (!resume && part < 1.0)
            wave[c] = q;
        for (int j = 0; j < D; j++) {
            int bk = nb[(size_t)c * 2 * D + 2 * j];
            q -= part * (flux[(size_t)c * D + j] - (bk >= 0 ? flux[(size_t)bk * D + j] : 0.0));
        }
        q = gb_pos(q);
        p[c] = q;
    }
    gb_reduce_group(tmp, q, 0);
    if (get_local_id(0) == 0)
        sum_part[get_group_id(0)] = tmp[0];
}

/* One work-group: the total of sum_part[0, groups) after step `step`; its
 * inverse becomes the pending scaling, or the batch stops with status
 * `fail` when it is not a positive finite number. */
__kernel void gb_total(int step, int groups, int fail, __global int *ctr, __global double *clk,
                       __global const double *sum_part, __local double *tmp)
{
    size_t lid = get_local_id(0);
    int go = gb_ran(ctr, step);
    double acc = 0.0;
    if (go)
        for (size_t i = lid; i < (size_t)groups; i += get_local_size(0))
            acc += sum_part[i];
    gb_reduce_group(tmp, acc, 0);
    if (lid != 0 || !go)
        return;
    double total = tmp[0];
    if (!(total > 0.0) || isinf(total))
        ctr[5] = fail;
    else
        clk[5] = 1.0 / total;
}

/* p *= the pending scaling, which the host then drops: the last launch of
 * a batch. */
__kernel void gb_settle(__global const int *ctr, __global const double *clk, __global double *p)
{
    int c = (int)get_global_id(0);
    double inv = clk[5];
    if (c < ctr[3] && inv != 0.0)
        p[c] *= inv;
}

/* Pruning after step `step`. A cell below the threshold survives when
 * some cell at or above it would grow into it (engine.h, gb_fed), the
 * masses taken with the pending scaling. keep[c]: 1 kept, 0 removed
 * (every cell is kept when the step did not run whole: it did not run,
 * or it was cut at the target and is pruned once finished);
 * blocks[group]: the kept cells of the work-group's stretch. */
static inline double gb_scaled(__global const double *p, int c, double inv)
{
    return inv != 0.0 ? p[c] * inv : p[c];
}

__kernel void gb_prune_mark(int step, __global const int *ctr, __global const double *clk,
                            __global const double *par, __global const int *nb,
                            __global const double *v, __global const double *p,
                            __global int *keep, __global int *blocks, __local int *tmp)
{
    int c = (int)get_global_id(0);
    int n = ctr[3], fed = 0;
    if (c < n && !gb_whole(ctr, clk, step))
        fed = 1;
    else if (c < n) {
        double thr = par[P_THR], inv = clk[5];
        fed = gb_scaled(p, c, inv) >= thr;
        for (int i = 0; i < D && !fed; i++)
            for (int si = 0; si < 2 && !fed; si++) {
                int a = nb[(size_t)c * 2 * D + 2 * i + si];
                if (a < 0)
                    continue;
                double vai = v[(size_t)a * D + i];
                if (!(si == 0 ? vai > 0.0 : vai < 0.0))
                    continue;
                if (gb_scaled(p, a, inv) >= thr) {
                    fed = 1;
                    break;
                }
                for (int j = 0; j < D && !fed; j++) {
                    if (j == i)
                        continue;
                    for (int sj = 0; sj < 2; sj++) {
                        int e = nb[(size_t)a * 2 * D + 2 * j + sj];
                        if (e < 0 || gb_scaled(p, e, inv) < thr)
                            continue;
                        double vei = v[(size_t)e * D + i], vej = v[(size_t)e * D + j];
                        if ((si == 0 ? vei > 0.0 : vei < 0.0) && (sj == 0 ? vej > 0.0 : vej < 0.0)) {
                            fed = 1;
                            break;
                        }
                    }
                }
            }
    }
    if (c < n)
        keep[c] = fed;
    size_t lid = get_local_id(0);
    tmp[lid] = fed;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t h = get_local_size(0) / 2; h > 0; h /= 2) {
        if (lid < h)
            tmp[lid] += tmp[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        blocks[get_group_id(0)] = tmp[0];
}

/* Exclusive scan of tmp[0, size) in place (size a power of two); returns
 * the total. Every work-item of the group calls it. */
static int gb_scan_local(__local int *tmp)
{
    size_t lid = get_local_id(0), size = get_local_size(0);
    for (size_t off = 1; off < size; off *= 2) {
        int add = lid >= off ? tmp[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    int total = tmp[size - 1];
    int mine = lid > 0 ? tmp[lid - 1] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    tmp[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

/* One work-group: blocks[] becomes each block's first new position, and
 * ctr[2] the number of cells kept. */
__kernel void gb_scan_top(int nblocks, __global int *blocks, __global int *ctr, __local int *tmp)
{
    size_t lid = get_local_id(0), size = get_local_size(0);
    int carry = 0;
    for (size_t at = 0; at < (size_t)nblocks; at += size) {
        tmp[lid] = at + lid < (size_t)nblocks ? blocks[at + lid] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        int total = gb_scan_local(tmp);
        if (at + lid < (size_t)nblocks)
            blocks[at + lid] = carry + tmp[lid];
        carry += total;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        ctr[2] = carry;
}

/* remap[c]: the kept cell's new position (order kept), or -1. */
__kernel void gb_scan_remap(__global const int *ctr, __global const int *keep, __global const int *blocks,
                            __global int *remap, __local int *tmp)
{
    size_t c = get_global_id(0), lid = get_local_id(0);
    int n = ctr[3];
    int k = c < (size_t)n ? keep[c] : 0;
    tmp[lid] = k;
    barrier(CLK_LOCAL_MEM_FENCE);
    gb_scan_local(tmp);
    if (c < (size_t)n)
        remap[c] = k ? blocks[get_group_id(0)] + tmp[lid] : -1;
}

/* Kept cells move to their new positions in the second set of arrays,
 * links carried through remap (a removed neighbour becomes -1), masses
 * scaled by the pending scaling when step `step` ran whole; each work-group's
 * sum of the kept masses and largest kept rate go to sum_part and
 * max_part. */
__kernel void gb_prune_move(int step, __global const int *ctr, __global const double *clk,
                            __global const int *remap,
                            __global const int *key, __global const double *v,
                            __global const int *nb, __global const double *p,
                            __global const double *rate,
                            __global int *key2, __global double *v2, __global int *nb2,
                            __global double *p2, __global double *rate2,
                            __global double *sum_part, __global double *max_part, __local double *tmp)
{
    int c = (int)get_global_id(0);
    double q = 0.0, r = 0.0;
    int to = c < ctr[3] ? remap[c] : -1;
    if (to >= 0) {
        double inv = gb_whole(ctr, clk, step) ? clk[5] : 0.0;
        for (int i = 0; i < D; i++) {
            key2[(size_t)to * D + i] = key[(size_t)c * D + i];
            v2[(size_t)to * D + i] = v[(size_t)c * D + i];
        }
        for (int m = 0; m < 2 * D; m++) {
            int b = nb[(size_t)c * 2 * D + m];
            nb2[(size_t)to * 2 * D + m] = b >= 0 ? remap[b] : -1;
        }
        q = gb_scaled(p, c, inv);
        r = rate[c];
        p2[to] = q;
        rate2[to] = r;
    }
    gb_reduce_group(tmp, q, 0);
    if (get_local_id(0) == 0)
        sum_part[get_group_id(0)] = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    gb_reduce_group(tmp, r, 1);
    if (get_local_id(0) == 0)
        max_part[get_group_id(0)] = tmp[0];
}

/* One work-group after gb_prune_move: n becomes the cells kept, the
 * largest rate is taken again (removed cells may have held it), and the
 * kept mass's inverse becomes the pending scaling, or the batch stops
 * with GB_PRUNED. Nothing when step `step` did not run whole. */
__kernel void gb_prune_total(int step, int groups, __global int *ctr, __global double *clk,
                             __global const double *sum_part, __global const double *max_part,
                             __local double *tmp)
{
    size_t lid = get_local_id(0);
    int go = gb_whole(ctr, clk, step);
    double acc = 0.0, most = 0.0;
    if (go)
        for (size_t i = lid; i < (size_t)groups; i += get_local_size(0)) {
            acc += sum_part[i];
            most = fmax(most, max_part[i]);
        }
    gb_reduce_group(tmp, acc, 0);
    double total = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    gb_reduce_group(tmp, most, 1);
    if (lid != 0 || !go)
        return;
    ctr[3] = ctr[2];
    clk[0] = tmp[0];
    clk[5] = 0.0;
    if (!(total > 0.0) || isinf(total))
        ctr[5] = GB_PRUNED;
    else
        clk[5] = 1.0 / total;
}

/* Places cells [from, n) (n < 0: ctr[3]), whose keys are distinct, into
 * an index whose slots hold -1 or other cells. */
__kernel void gb_hash_place(int from, int n, __global const int *ctr, __global const int *key,
                            __global int *slot, uint mask)
{
    int c = from + (int)get_global_id(0);
    if (c >= (n < 0 ? ctr[3] : n))
        return;
    int k[D];
    gb_load_key(key, c, k);
    uint s = (uint)gb_hash_key(k) & mask;
    while (atomic_cmpxchg(&slot[s], -1, c) != -1)
        s = (s + 1) & mask;
}

/* The measurement update: p *= exp(-(h(x) - y)' R^-1 (h(x) - y) / 2).
 * gauss: y (m), then R^-1 (m x m). */
__kernel void gb_update(int n, int m, __global const double *par, __global const double *gauss,
                        __global const int *key, __global double *p)
{
    int c = (int)get_global_id(0);
    if (c >= n)
        return;
    int k[D];
    double x[D], hx[MAXM], coef[GB_NCOEF];
    for (int i = 0; i < GB_NCOEF; i++)
        coef[i] = par[P_COEF + i];
    gb_load_key(key, c, k);
    gb_center(par, k, x);
    gb_h(D, x, coef, hx);
    p[c] *= exp(-0.5 * gb_quad(m, hx, gauss, gauss + m));
}
