/* The GBEES scheme on one sparse grid, shared by the serial reference (in
 * libdakit, compiled without OpenMP) and the cpu plugin (compiled with it).
 * Every parallel loop writes only its own cell (or a link slot that only
 * it writes), new cells are appended in a fixed order (see GB_BLOCK), the
 * index is rebuilt by compare-and-swap (which moves where a key sits in the
 * table, not what a lookup returns), and every sum is taken in fixed
 * chunks added in order, so both builds give bit-identical results
 * whatever the thread count.
 *
 * Storage is structure-of-arrays over cell positions 0..n-1: key (dim int32),
 * v (velocity component i at the cell's forward face in i), nb (2 dim
 * neighbour positions: backward then forward per axis, -1 when absent), p
 * (probability mass), flux (per axis, the total flux through the forward
 * face, times dt). A hash table maps keys to positions.
 *
 * A step that would pass the time a run stops at (a snapshot, a
 * measurement, the end) is cut there (gb_step_part): it keeps its start in
 * the wave array (free once the fluxes are made) and takes that part of its
 * fluxes from it; the next advance finishes it from the same start with
 * the same fluxes, which gives the uncut step's result bit for bit, and it
 * counts as one step, pruned once it is finished. A measurement update
 * ends a cut step where it was cut instead (gb_close_step). */
#ifndef DAKIT_GBEES_ENGINE_H
#define DAKIT_GBEES_ENGINE_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/plugin.h>

#include "hash.h"

#ifdef _OPENMP
#include <omp.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#define GB_OMP(x) _Pragma(#x)
#else
#define GB_OMP(x)
#endif

/* Sums run over fixed chunks of this many cells, then add the chunk sums in
 * order: the same rounding serially and in parallel. */
#define GB_CHUNK 2048

/* Growth and initialization look for missing neighbours in parallel over
 * fixed blocks of this many cells, each block listing its finds in cell
 * order; the lists are then added block by block, so new cells land in the
 * same order as a serial pass, whatever the thread count. */
#define GB_BLOCK 4096

typedef struct gb_cand {
    int32_t *key; /* dim int32 per candidate */
    size_t n, cap;
} gb_cand;

typedef struct gb_grid {
    dk_gbees_setup s;
    int d;
    size_t n, cap;
    int32_t *key;
    double *v;
    int32_t *nb;
    double *p;
    double *flux;
    double *wave;    /* per axis, the wave on the forward face (gb_wave) */
    double *back;    /* per axis, the back neighbour's max(v_i, 0) and the
                      * wave on the back face: a cell's row holds what the
                      * corner terms would otherwise fetch from d cells */
    double *rate;    /* sum_i |v_i| / dx_i: the cell's CFL rate */
    uint8_t *mark;
    int32_t *remap;  /* pruning: a cell's new position, or -1 */
    double *partial; /* chunk sums */
    gb_cand *cand;   /* per block: keys of cells to add */
    size_t ncand;
    gb_hash ht;
    double t, dt;    /* dt: the last step's whole time step */
    double t0;       /* where the open step started */
    int open;        /* a step was cut at the last target: its start is in wave */
    uint64_t steps, cell_steps;
    int threads;     /* for the parallel loops (gb_pick_threads) */
    int threads_max, adapt;
    double picked_at; /* monotonic seconds of the last pick */
} gb_grid;

static int gb_reserve(gb_grid *g, size_t want)
{
    if (want <= g->cap)
        return 0;
    size_t cap = g->cap ? g->cap : 1024;
    while (cap < want)
        cap *= 2;
    if (cap > (size_t)INT32_MAX)
        return -1;
    int d = g->d;
    void *k = realloc(g->key, cap * d * sizeof *g->key);
    if (k) g->key = k;
    void *v = realloc(g->v, cap * d * sizeof *g->v);
    if (v) g->v = v;
    void *nb = realloc(g->nb, cap * 2 * d * sizeof *g->nb);
    if (nb) g->nb = nb;
    void *p = realloc(g->p, cap * sizeof *g->p);
    if (p) g->p = p;
    void *f = realloc(g->flux, cap * d * sizeof *g->flux);
    if (f) g->flux = f;
    void *w = realloc(g->wave, cap * d * sizeof *g->wave);
    if (w) g->wave = w;
    void *bk = realloc(g->back, cap * 2 * d * sizeof *g->back);
    if (bk) g->back = bk;
    void *r = realloc(g->rate, cap * sizeof *g->rate);
    if (r) g->rate = r;
    void *m = realloc(g->mark, cap);
    if (m) g->mark = m;
    void *rm = realloc(g->remap, cap * sizeof *g->remap);
    if (rm) g->remap = rm;
    void *pa = realloc(g->partial, (cap / GB_CHUNK + 1) * sizeof *g->partial);
    if (pa) g->partial = pa;
    if (!k || !v || !nb || !p || !f || !w || !bk || !r || !m || !rm || !pa)
        return -1;
    g->cap = cap;
    return 0;
}

static void gb_free(gb_grid *g)
{
    free(g->key);
    free(g->v);
    free(g->nb);
    free(g->p);
    free(g->flux);
    free(g->wave);
    free(g->back);
    free(g->rate);
    free(g->mark);
    free(g->remap);
    free(g->partial);
    for (size_t b = 0; b < g->ncand; b++)
        free(g->cand[b].key);
    free(g->cand);
    gb_hash_free(&g->ht);
    free(g);
}

static gb_grid *gb_create(const dk_gbees_setup *setup)
{
    gb_grid *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->s = *setup;
    g->d = setup->dim;
    g->threads = g->threads_max = 1;
#ifdef _OPENMP
    g->threads = g->threads_max = omp_get_max_threads();
    /* the runnable count below is the whole machine's: adapt only where
     * this process may run on every online CPU; never under active
     * waiting, whose idle threads would count as other work */
    const char *wait = dk_tuning_string("OMP_WAIT_POLICY");
    g->adapt = dk_tuning_long("DAKIT_CPU_THREADS_ADAPT", 1, 0, 1) && g->threads_max > 1 &&
               omp_get_num_procs() == sysconf(_SC_NPROCESSORS_ONLN) && !(wait && (wait[0] == 'a' || wait[0] == 'A'));
#endif
    if (gb_reserve(g, 4096) != 0 || gb_hash_init(&g->ht, g->d, 4096) != 0) {
        gb_free(g);
        return NULL;
    }
    return g;
}

static inline void gb_center(const gb_grid *g, size_t c, double *x)
{
    for (int i = 0; i < g->d; i++)
        x[i] = g->s.center[i] + g->s.dx[i] * g->key[c * g->d + i];
}

/* Velocities at the forward faces: component i of f at the centre moved
 * half a cell along i. Fixed in time (the models are autonomous), so they
 * are computed once, when the cell is made. */
static void gb_velocity(gb_grid *g, size_t c)
{
    int d = g->d;
    double x[DK_GBEES_MAX_DIM], f[DK_GBEES_MAX_DIM], rate = 0.0;
    for (int i = 0; i < d; i++) {
        gb_center(g, c, x);
        x[i] += 0.5 * g->s.dx[i];
        g->s.model->f(d, x, g->s.model->coef, f);
        g->v[c * d + i] = f[i];
        rate += fabs(f[i]) / g->s.dx[i];
    }
    g->rate[c] = rate;
}

/* Appends a cell with key k and mass p (no velocity or links yet);
 * returns its position, or -1 when memory ran out. Present: its position. */
static int32_t gb_add(gb_grid *g, const int32_t *k, double p)
{
    int32_t found = gb_hash_find(&g->ht, g->key, k);
    if (found >= 0)
        return found;
    if (gb_reserve(g, g->n + 1) != 0)
        return -1;
    size_t c = g->n;
    memcpy(g->key + c * g->d, k, g->d * sizeof *k);
    g->p[c] = p;
    if (2 * (g->ht.count + 1) > g->ht.cap && gb_hash_grow(&g->ht, g->key) != 0)
        return -1;
    gb_hash_place(&g->ht, g->key, (int32_t)c);
    g->n++;
    return (int32_t)c;
}

/* Empties the candidate lists of blocks [0, nblocks), making them exist. */
static int gb_cand_reset(gb_grid *g, size_t nblocks)
{
    if (nblocks > g->ncand) {
        gb_cand *more = realloc(g->cand, nblocks * sizeof *more);
        if (!more)
            return -1;
        memset(more + g->ncand, 0, (nblocks - g->ncand) * sizeof *more);
        g->cand = more;
        g->ncand = nblocks;
    }
    for (size_t b = 0; b < nblocks; b++)
        g->cand[b].n = 0;
    return 0;
}

/* 0, or 1 when memory ran out. */
static int gb_cand_push(gb_cand *l, const int32_t *k, int d)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        int32_t *more = realloc(l->key, cap * d * sizeof *more);
        if (!more)
            return 1;
        l->key = more;
        l->cap = cap;
    }
    memcpy(l->key + l->n * d, k, d * sizeof *k);
    l->n++;
    return 0;
}

/* Adds the candidates of blocks [0, nblocks) in block order, skipping keys
 * already present (a cell is often found by several neighbours). */
static int gb_cand_merge(gb_grid *g, size_t nblocks)
{
    for (size_t b = 0; b < nblocks; b++) {
        const gb_cand *l = &g->cand[b];
        for (size_t m = 0; m < l->n; m++)
            if (gb_add(g, l->key + m * g->d, 0.0) < 0)
                return -1;
    }
    return 0;
}

/* Links cells [from, n) to their face neighbours, both ways, and gives them
 * velocities. */
static void gb_link_new(gb_grid *g, size_t from)
{
    int d = g->d;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = from; c < g->n; c++) {
        int32_t k[DK_GBEES_MAX_DIM];
        memcpy(k, g->key + c * d, d * sizeof *k);
        for (int i = 0; i < d; i++) {
            k[i]--;
            g->nb[c * 2 * d + 2 * i] = gb_hash_find(&g->ht, g->key, k);
            k[i] += 2;
            g->nb[c * 2 * d + 2 * i + 1] = gb_hash_find(&g->ht, g->key, k);
            k[i]--;
        }
        gb_velocity(g, c);
    }
    /* old cells learn of new neighbours: a new cell's back neighbour, if
     * old, points forward to it. Each old cell's face slot is written only
     * by the one cell across that face, so no two writes meet. */
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = from; c < g->n; c++)
        for (int i = 0; i < d; i++) {
            int32_t b = g->nb[c * 2 * d + 2 * i], f = g->nb[c * 2 * d + 2 * i + 1];
            if (b >= 0 && (size_t)b < from)
                g->nb[(size_t)b * 2 * d + 2 * i + 1] = (int32_t)c;
            if (f >= 0 && (size_t)f < from)
                g->nb[(size_t)f * 2 * d + 2 * i] = (int32_t)c;
        }
}

static double gb_sum(gb_grid *g)
{
    size_t chunks = (g->n + GB_CHUNK - 1) / GB_CHUNK;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t b = 0; b < chunks; b++) {
        size_t end = (b + 1) * GB_CHUNK < g->n ? (b + 1) * GB_CHUNK : g->n;
        double s = 0.0;
        for (size_t c = b * GB_CHUNK; c < end; c++)
            s += g->p[c];
        g->partial[b] = s;
    }
    double total = 0.0;
    for (size_t b = 0; b < chunks; b++)
        total += g->partial[b];
    return total;
}

static int gb_normalize(gb_grid *g)
{
    double total = gb_sum(g);
    if (!(total > 0.0) || !isfinite(total))
        return -1;
    double scale = 1.0 / total;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++)
        g->p[c] *= scale;
    return 0;
}

static double gb_gauss_quad(int d, const double *x, const double *mean, const double *inv)
{
    double r[DK_GBEES_MAX_DIM], q = 0.0;
    for (int i = 0; i < d; i++)
        r[i] = x[i] - mean[i];
    for (int i = 0; i < d; i++) {
        double row = 0.0;
        for (int j = 0; j < d; j++)
            row += inv[i * d + j] * r[j];
        q += r[i] * row;
    }
    return q;
}

/* Breadth-first from the mean's cell: every cell whose mass is at or above
 * the threshold adds its face neighbours. Masses are the Gaussian density
 * at the centre times the cell volume. */
static dk_status gb_init(gb_grid *g, const double *mean, const double *inv, double lognorm, dk_msg *msg)
{
    int d = g->d;
    g->n = 0;
    gb_hash_clear(&g->ht);
    int32_t k[DK_GBEES_MAX_DIM];
    for (int i = 0; i < d; i++)
        k[i] = (int32_t)lround((mean[i] - g->s.center[i]) / g->s.dx[i]);
    if (gb_add(g, k, 0.0) < 0)
        goto nomem;
    /* level by level: the masses of one level and its missing neighbours in
     * parallel, then the neighbours appended in order, as a queue would */
    for (size_t level = 0; level < g->n;) {
        size_t end = g->n, nblocks = (end - level + GB_BLOCK - 1) / GB_BLOCK;
        if (gb_cand_reset(g, nblocks) != 0)
            goto nomem;
        int failed = 0;
        GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 1) reduction(| : failed))
        for (size_t b = 0; b < nblocks; b++) {
            size_t last = level + (b + 1) * GB_BLOCK < end ? level + (b + 1) * GB_BLOCK : end;
            for (size_t c = level + b * GB_BLOCK; c < last; c++) {
                double x[DK_GBEES_MAX_DIM];
                gb_center(g, c, x);
                g->p[c] = exp(lognorm - 0.5 * gb_gauss_quad(d, x, mean, inv));
                if (g->p[c] < g->s.threshold)
                    continue;
                int32_t kn[DK_GBEES_MAX_DIM];
                for (int i = 0; i < d; i++)
                    for (int s = -1; s <= 1; s += 2) {
                        memcpy(kn, g->key + c * d, d * sizeof *kn);
                        kn[i] += s;
                        if (gb_hash_find(&g->ht, g->key, kn) < 0)
                            failed |= gb_cand_push(&g->cand[b], kn, d);
                    }
            }
        }
        if (failed || gb_cand_merge(g, nblocks) != 0)
            goto nomem;
        level = end;
    }
    gb_link_new(g, 0);
    if (gb_normalize(g) != 0) {
        dk_msg_set(msg, "the initial density has no mass on the grid");
        return DK_ERR_INVALID_ARGUMENT;
    }
    g->t = 0.0;
    g->open = 0;
    return DK_OK;
nomem:
    dk_msg_set(msg, "out of memory growing the grid to %zu cells", g->n);
    return DK_ERR_OUT_OF_MEMORY;
}

/* Directional growth: each cell at or above the threshold adds, where
 * absent, its downwind face neighbour along each axis with a non-zero
 * velocity and the downwind edge neighbours of each pair of such axes. */
static dk_status gb_grow(gb_grid *g, dk_msg *msg)
{
    int d = g->d;
    size_t old = g->n, nblocks = (old + GB_BLOCK - 1) / GB_BLOCK;
    double thr = g->s.threshold;
    if (gb_cand_reset(g, nblocks) != 0)
        goto nomem;
    int failed = 0;
    /* The grid is read-only here: links are complete among the old cells,
     * so a missing link is a missing cell, and only an edge neighbour seen
     * through a missing face cell needs the index. */
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 1) reduction(| : failed))
    for (size_t b = 0; b < nblocks; b++) {
        gb_cand *l = &g->cand[b];
        size_t last = (b + 1) * GB_BLOCK < old ? (b + 1) * GB_BLOCK : old;
        for (size_t c = b * GB_BLOCK; c < last; c++) {
            if (g->p[c] < thr)
                continue;
            const double *v = g->v + c * d;
            const int32_t *nb = g->nb + c * 2 * d;
            for (int i = 0; i < d; i++) {
                if (v[i] == 0.0)
                    continue;
                int si = v[i] > 0.0;
                int32_t face = nb[2 * i + si];
                int32_t k[DK_GBEES_MAX_DIM];
                memcpy(k, g->key + c * d, d * sizeof *k);
                k[i] += si ? 1 : -1;
                if (face < 0)
                    failed |= gb_cand_push(l, k, d);
                for (int j = 0; j < d; j++) {
                    if (j == i || v[j] == 0.0)
                        continue;
                    int sj = v[j] > 0.0;
                    if (face >= 0 && g->nb[(size_t)face * 2 * d + 2 * j + sj] >= 0)
                        continue;
                    k[j] += sj ? 1 : -1;
                    if (face >= 0 || gb_hash_find(&g->ht, g->key, k) < 0)
                        failed |= gb_cand_push(l, k, d);
                    k[j] -= sj ? 1 : -1;
                }
            }
        }
    }
    if (failed || gb_cand_merge(g, nblocks) != 0)
        goto nomem;
    if (g->n > old)
        gb_link_new(g, old);
    return DK_OK;
nomem:
    dk_msg_set(msg, "out of memory growing the grid to %zu cells", g->n);
    return DK_ERR_OUT_OF_MEMORY;
}

#include "flux.h"

/* Mass through the face between a (behind) and b = a's forward neighbour
 * along i, per unit dt/dx_i: donor-cell upwind plus the MC-limited
 * second-order correction, then the corner-transport terms that this face's
 * wave sends to the transverse faces. Gathered from the point of view of
 * cell c's forward faces so that each cell writes only its own fluxes. */
static inline double gb_wave(const gb_grid *g, int32_t a, int32_t b, int i)
{
    /* half the jump across the face, times dt/dx_i */
    return g->dt * (g->p[b] - g->p[a]) / (2.0 * g->s.dx[i]);
}

static void gb_fluxes(gb_grid *g)
{
    int d = g->d;
    const double *p = g->p, *vv = g->v;
    const int32_t *nbs = g->nb;
    double dt = g->dt, *wave = g->wave, *back = g->back;
    /* each face's wave once (the loop below reads every one up to
     * 4 (d - 1) + 1 times), and beside it what the back face brings in */
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++)
        for (int i = 0; i < d; i++) {
            int32_t fwd = nbs[c * 2 * d + 2 * i + 1], a = nbs[c * 2 * d + 2 * i];
            wave[c * d + i] = fwd >= 0 ? gb_wave(g, (int32_t)c, fwd, i) : 0.0;
            back[c * 2 * d + 2 * i] = a >= 0 ? gb_pos(vv[(size_t)a * d + i]) : 0.0;
            back[c * 2 * d + 2 * i + 1] = a >= 0 ? gb_wave(g, a, (int32_t)c, i) : 0.0;
        }
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++) {
        const double *v = vv + c * d;
        const int32_t *nb = nbs + c * 2 * d;
        for (int j = 0; j < d; j++) {
            double u = v[j];
            int32_t fwd = nb[2 * j + 1];
            /* donor cell */
            double F = gb_pos(u) * p[c] + (fwd >= 0 ? gb_neg(u) * p[fwd] : 0.0);
            double corr = 0.0;
            if (fwd >= 0) {
                /* high resolution: the limited slope of the upwind side */
                double jump = p[fwd] - p[c];
                if (jump != 0.0) {
                    double up;
                    if (u > 0.0) {
                        int32_t back = nb[2 * j];
                        up = back >= 0 ? p[c] - p[back] : p[c];
                    } else {
                        int32_t ff = nbs[(size_t)fwd * 2 * d + 2 * j + 1];
                        up = ff >= 0 ? p[ff] - p[fwd] : -p[fwd];
                    }
                    double au = fabs(u);
                    corr += au * (g->s.dx[j] / dt - au) * wave[c * d + j] * gb_mc(up / jump);
                }
            }
            /* corner transport: waves on faces along i != j that touch this
             * face's cells push part of their mass across it */
            double vj_out = gb_pos(v[j]), vj_in = gb_neg(v[j]);
            for (int i = 0; i < d; i++) {
                if (i == j)
                    continue;
                int32_t a = nb[2 * i], b = nb[2 * i + 1];
                if (a >= 0 && vj_out != 0.0) /* wave on c's back face along i, moving in */
                    corr -= back[c * 2 * d + 2 * i] * vj_out * back[c * 2 * d + 2 * i + 1];
                if (b >= 0 && vj_out != 0.0) /* wave on c's front face along i, moving in */
                    corr -= gb_neg(v[i]) * vj_out * wave[c * d + i];
                if (fwd >= 0 && vj_in != 0.0) {
                    const int32_t *fnb = nbs + (size_t)fwd * 2 * d;
                    int32_t fa = fnb[2 * i], fb = fnb[2 * i + 1];
                    const double *fback = back + (size_t)fwd * 2 * d;
                    if (fa >= 0)
                        corr -= fback[2 * i] * vj_in * fback[2 * i + 1];
                    if (fb >= 0)
                        corr -= gb_neg(vv[(size_t)fwd * d + i]) * vj_in * wave[(size_t)fwd * d + i];
                }
            }
            g->flux[c * d + j] = (F + corr) * dt / g->s.dx[j];
        }
    }
}

/* p = the masses `from` minus `part` of the net flux out (part 1: the
 * whole step). keep: a cut step first keeps its start, p, in wave. */
static void gb_apply(gb_grid *g, const double *from, double part, int keep)
{
    int d = g->d;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++) {
        double q = from[c];
        if (keep)
            g->wave[c] = q;
        const int32_t *nb = g->nb + c * 2 * d;
        for (int j = 0; j < d; j++) {
            int32_t back = nb[2 * j];
            q -= part * (g->flux[c * d + j] - (back >= 0 ? g->flux[(size_t)back * d + j] : 0.0));
        }
        g->p[c] = gb_pos(q);
    }
}

static double gb_max_rate(gb_grid *g)
{
    size_t chunks = (g->n + GB_CHUNK - 1) / GB_CHUNK;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t b = 0; b < chunks; b++) {
        size_t end = (b + 1) * GB_CHUNK < g->n ? (b + 1) * GB_CHUNK : g->n;
        double m = 0.0;
        for (size_t c = b * GB_CHUNK; c < end; c++)
            m = fmax(m, g->rate[c]);
        g->partial[b] = m;
    }
    double m = 0.0;
    for (size_t b = 0; b < chunks; b++)
        m = fmax(m, g->partial[b]);
    return m;
}

/* A cell below the threshold survives when some cell at or above it would
 * grow into it: a face or edge neighbour whose velocity signs point here. */
static int gb_fed(const gb_grid *g, size_t c)
{
    int d = g->d;
    double thr = g->s.threshold;
    const int32_t *nb = g->nb + c * 2 * d;
    for (int i = 0; i < d; i++)
        for (int si = 0; si < 2; si++) {
            int32_t a = nb[2 * i + si]; /* si 0: behind, must move forward */
            if (a < 0)
                continue;
            double vai = g->v[(size_t)a * d + i];
            if (!(si == 0 ? vai > 0.0 : vai < 0.0))
                continue;
            if (g->p[a] >= thr)
                return 1;
            for (int j = 0; j < d; j++) {
                if (j == i)
                    continue;
                for (int sj = 0; sj < 2; sj++) {
                    int32_t e = g->nb[(size_t)a * 2 * d + 2 * j + sj];
                    if (e < 0 || g->p[e] < thr)
                        continue;
                    const double *ve = g->v + (size_t)e * d;
                    if ((si == 0 ? ve[i] > 0.0 : ve[i] < 0.0) && (sj == 0 ? ve[j] > 0.0 : ve[j] < 0.0))
                        return 1;
                }
            }
        }
    return 0;
}

/* Removes unfed cells below the threshold, keeping the order of the rest,
 * then rebuilds the index. Links are carried over through the old-to-new
 * positions (a removed neighbour becomes -1), which gives what looking
 * every neighbour up again would, without 2 d hash probes per cell. */
static dk_status gb_prune(gb_grid *g, dk_msg *msg)
{
    int d = g->d;
    double thr = g->s.threshold;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++)
        g->mark[c] = g->p[c] < thr && !gb_fed(g, c);
    size_t w = 0;
    for (size_t c = 0; c < g->n; c++)
        g->remap[c] = g->mark[c] ? -1 : (int32_t)w++;
    if (w == g->n)
        return DK_OK;
    /* in order, so a cell never moves onto one not yet moved (w <= c) */
    for (size_t c = 0; c < g->n; c++) {
        int32_t to = g->remap[c];
        if (to < 0)
            continue;
        for (int k = 0; k < 2 * d; k++) {
            int32_t b = g->nb[c * 2 * d + k];
            g->nb[(size_t)to * 2 * d + k] = b >= 0 ? g->remap[b] : -1;
        }
        if ((size_t)to != c) {
            memmove(g->key + (size_t)to * d, g->key + c * d, d * sizeof *g->key);
            memmove(g->v + (size_t)to * d, g->v + c * d, d * sizeof *g->v);
            g->p[to] = g->p[c];
            g->rate[to] = g->rate[c];
        }
    }
    g->n = w;
    gb_hash_clear(&g->ht);
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++)
        gb_hash_place_shared(&g->ht, g->key, (int32_t)c);
    g->ht.count = g->n;
    (void)msg;
    return DK_OK;
}

static dk_status gb_prune_normalize(gb_grid *g, dk_msg *msg)
{
    dk_status st = gb_prune(g, msg);
    if (st == DK_OK && gb_normalize(g) != 0) {
        dk_msg_set(msg, "all probability was pruned at t = %g", g->t);
        return DK_ERR_INVALID_ARGUMENT;
    }
    return st;
}

/* Threads for the next steps: as many as the cores other work leaves.
 * Every loop of a step ends by waiting for all its threads, so a thread
 * whose core another process holds delays each loop by the scheduler's time
 * slice, and fewer threads than cores run faster. Other work is the
 * machine's runnable tasks (/proc/loadavg's instant count) less this
 * thread (the loops' threads sleep between loops); read at most every 20
 * ms. The result does not depend on the thread count. */
static void gb_pick_threads(gb_grid *g)
{
#ifdef _OPENMP
    if (!g->adapt)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (now - g->picked_at < 0.02)
        return;
    g->picked_at = now;
    FILE *f = fopen("/proc/loadavg", "r");
    int running = 0, total = 0;
    if (!f)
        return;
    const int got = fscanf(f, "%*s %*s %*s %d/%d", &running, &total);
    fclose(f);
    if (got != 2 || running < 1)
        return;
    const long free_cpus = sysconf(_SC_NPROCESSORS_ONLN) - (running - 1);
    g->threads = free_cpus < 1 ? 1 : free_cpus > g->threads_max ? g->threads_max : (int)free_cpus;
#else
    (void)g;
#endif
}

static dk_status gb_advance(gb_grid *g, double t_target, int max_steps, dk_msg *msg)
{
    for (int done = 0; g->t < t_target;) {
        int resume = g->open; /* finish the step cut at the last target */
        if (!resume) {
            if (max_steps > 0 && done == max_steps)
                break;
            gb_pick_threads(g);
            dk_status st = gb_grow(g, msg);
            if (st != DK_OK)
                return st;
            double rate = gb_max_rate(g);
            double dt = rate > 0.0 ? g->s.cfl / rate : t_target - g->t;
            if (!(dt > 1e-12 * (1.0 + fabs(t_target)))) {
                dk_msg_set(msg, "the time step collapsed to %g at t = %g (velocities too large for the grid)",
                           dt, g->t);
                return DK_ERR_INVALID_ARGUMENT;
            }
            g->dt = dt;
            g->t0 = g->t;
            gb_fluxes(g);
            g->cell_steps += g->n;
            g->steps++;
            done++;
        }
        double part = gb_step_part(g->t0, g->dt, t_target);
        gb_apply(g, resume ? g->wave : g->p, part, !resume && part < 1.0);
        g->open = part < 1.0;
        g->t = gb_step_time(g->t0, g->dt, t_target);
        if (gb_normalize(g) != 0) {
            dk_msg_set(msg, "all probability left the grid at t = %g", g->t);
            return DK_ERR_INVALID_ARGUMENT;
        }
        if (!g->open && g->steps % (uint64_t)g->s.del_step == 0) {
            dk_status st = gb_prune_normalize(g, msg);
            if (st != DK_OK)
                return st;
        }
    }
    return DK_OK;
}

/* A measurement update ends a cut step where it was cut: the next step
 * grows for the updated density and takes a fresh CFL step. It is pruned
 * first when it is a del_step-th step. */
static dk_status gb_close_step(gb_grid *g, dk_msg *msg)
{
    if (!g->open)
        return DK_OK;
    g->open = 0;
    return g->steps % (uint64_t)g->s.del_step == 0 ? gb_prune_normalize(g, msg) : DK_OK;
}

static dk_status gb_update(gb_grid *g, const double *y, const double *r_inv, int m, dk_msg *msg)
{
    int d = g->d;
    const dk_gbees_model *model = g->s.model;
    dk_status st = gb_close_step(g, msg);
    if (st != DK_OK)
        return st;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < g->n; c++) {
        double x[DK_GBEES_MAX_DIM], hx[DK_GBEES_MAX_DIM];
        gb_center(g, c, x);
        model->h(d, x, model->coef, hx);
        g->p[c] *= exp(-0.5 * gb_gauss_quad(m, hx, y, r_inv));
    }
    if (gb_normalize(g) != 0) {
        dk_msg_set(msg, "the measurement at t = %g has no support on the grid (likelihood zero everywhere)", g->t);
        return DK_ERR_INVALID_ARGUMENT;
    }
    return DK_OK;
}

static dk_status gb_snapshot(gb_grid *g, double *out, size_t max, size_t *cells, dk_msg *msg)
{
    (void)msg;
    int d = g->d;
    *cells = g->n;
    size_t rows = max < g->n ? max : g->n;
    GB_OMP(omp parallel for num_threads(g->threads) schedule(dynamic, 64))
    for (size_t c = 0; c < rows; c++) {
        gb_center(g, c, out + c * (d + 1));
        out[c * (d + 1) + d] = g->p[c];
    }
    return DK_OK;
}

static void gb_stats(gb_grid *g, dk_gbees_stats *st)
{
    st->t = g->t;
    st->steps = g->steps;
    st->cell_steps = g->cell_steps;
    st->cells = g->n;
    st->dt = g->dt;
}

/* The ops table over this engine; the includer names it. */
#define GB_DEFINE_OPS(NAME, VARIANTS) /* VARIANTS: a NULL-terminated array's name */                                                              \
    static dk_status NAME##_plan_create(void *device, const dk_gbees_setup *setup, void **plan,   \
                                        dk_msg *msg)                                               \
    {                                                                                              \
        (void)device;                                                                              \
        gb_grid *g = gb_create(setup);                                                             \
        if (!g) {                                                                                  \
            dk_msg_set(msg, "out of memory making a gbees grid");                                  \
            return DK_ERR_OUT_OF_MEMORY;                                                           \
        }                                                                                          \
        *plan = g;                                                                                 \
        return DK_OK;                                                                              \
    }                                                                                              \
    static dk_status NAME##_init(void *p, const double *m, const double *ci, double ln, dk_msg *msg) \
    {                                                                                              \
        return gb_init(p, m, ci, ln, msg);                                                         \
    }                                                                                              \
    static dk_status NAME##_advance(void *p, double t, int n, dk_msg *msg)                         \
    {                                                                                              \
        return gb_advance(p, t, n, msg);                                                           \
    }                                                                                              \
    static dk_status NAME##_update(void *p, const double *y, const double *r, int m, dk_msg *msg)  \
    {                                                                                              \
        return gb_update(p, y, r, m, msg);                                                         \
    }                                                                                              \
    static dk_status NAME##_snapshot(void *p, double *o, size_t mx, size_t *n, dk_msg *msg)        \
    {                                                                                              \
        return gb_snapshot(p, o, mx, n, msg);                                                      \
    }                                                                                              \
    static void NAME##_stats(void *p, dk_gbees_stats *s) { gb_stats(p, s); }                       \
    static void NAME##_destroy(void *p) { gb_free(p); }                                            \
    const dk_gbees_ops NAME = {.variants = VARIANTS,                                               \
                               .plan_create = NAME##_plan_create,                                  \
                               .init = NAME##_init,                                                \
                               .advance = NAME##_advance,                                          \
                               .update = NAME##_update,                                            \
                               .snapshot = NAME##_snapshot,                                        \
                               .stats = NAME##_stats,                                              \
                               .plan_destroy = NAME##_destroy};

#endif
