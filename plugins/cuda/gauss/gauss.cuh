/* dakit cuda plugin, gauss: what the solver files share.
 *
 * The K-iterated first-order recursive filter. Every scheme cuts each line
 * into items and filters each item alone over a window, keeping the item's
 * own values:
 *   exact mode    items are chunks of L values; the window reaches at least
 *                 h = setup->halo[axis] beyond the chunk on each side (clipped
 *                 at the line's ends), so its artificial ends change nothing
 *                 at the dtype's rounding and the result equals the serial
 *                 reference to rounding;
 *   overlap mode  items are the blocks (dk_gauss_block) and windows
 *                 (dk_gauss_window), exactly as the reference cuts them.
 * The boundary rule applies at both ends of every window, as in the
 * reference.
 *
 * Each pass (one filtered axis) runs one solver, each in its own file with
 * the kernels it launches:
 *   reg.cu       k_reg: a thread's window in registers;
 *   tile.cu      k_tile (and k_edges, k_tile_ip in place): exact mode's
 *                chunks staged through shared memory by persistent blocks;
 *   gen.cu       k_gen: windows of any length, in shared or global memory;
 *   extended.cu  k_extended: deriche, vyv and rf with scipy's modes, a
 *                segment of a line per thread;
 *   ext_tile.cu  k_ext_tile: deriche and vyv staged through shared memory.
 * Where rf filters both of the last two axes of a float32 field in exact
 * mode, fused.cu's k_fused does both axes in one pass instead (out of place);
 * fused_iir.cu's k_fused_iir does the same for deriche and vyv.
 * plan.cu picks the solver of each pass (plan_pass, plan_extended), makes
 * the plan and runs it, and holds the ops table; halo.cu holds
 * execute_halo (libdakit-mpi's split axes) and its kernels, beside tile.cu's
 * k_tile, which it runs on strided axes.
 * Variant "dp" (dynamic parallelism): the host launches a parent grid; each
 * parent thread launches, on the device, the child grid that filters its
 * slice of the blocks of the same kernel (reg, tile and gen).
 *
 * DAKIT_CUDA_WINDOW=W (31, 47, 63, 95, 127) forces the register window of
 * exact mode's chunked schemes, for tuning; an unusable W falls back to k_gen.
 *
 * Passes (one per filtered axis, increasing order) run in place on out where
 * their kernel allows it: k_tile through k_edges + k_tile_ip (the values a
 * run of tiles reads beyond what it writes are kept in a small scratch
 * first), k_reg, k_gen and the extended kernels where a thread's window is
 * its whole line. Only a plan with another pass owns a field-sized buffer to
 * ping-pong through, so that no such pass reads what it writes. */
#ifndef DAKIT_CUDA_GAUSS_CUH
#define DAKIT_CUDA_GAUSS_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda_internal.h"

typedef long long i64;

namespace dk_cuda_gauss {

enum { GEO_CHUNK = 0, GEO_CLIP = 1, GEO_BLOCKS = 2 };
enum { PATH_REG = 0, PATH_REG_FULL = 1, PATH_ROW = 2, PATH_TILE = 3, PATH_GEN_SMEM = 4, PATH_GEN_GLOBAL = 5 };

/* Where the items of one axis pass lie. */
struct Geo {
    i64 n, inner, outer; /* the axis view */
    int mode;            /* GEO_* */
    i64 L, h;            /* chunk modes: chunk length, halo */
    i64 blocks, m;       /* GEO_BLOCKS: blocks per line, overlap */
    i64 ipl;             /* items per line */
    int JT, KT;          /* a thread block: JT adjacent lines x KT items */
    i64 nj, nk;          /* ceil(inner / JT), ceil(ipl / KT) */
    i64 nblocks;         /* thread blocks of one pass (k_reg, k_gen) */
    i64 lc, uc;          /* execute_halo's chunk modes: halo rows before and after the n box rows
                            of the filtered line (item_span<true>) */
};

template <typename T> struct Coef {
    T alpha, beta, opa; /* opa = 1 + alpha, as the reference rounds it */
    int K;
    int constant;
};

/* The item's kept span [ks, ke) and window [ws, we) on its line. W > 0: the
 * fixed window length of GEO_CHUNK. HALO (chunk modes): on execute_halo's
 * line of g.lc + n + g.uc rows, the box's rows from g.lc on (a template flag,
 * so that the single-device kernels keep their code). */
template <bool HALO = false>
__host__ __device__ __forceinline__ void item_span(const Geo &g, i64 k, int W, i64 &ks, i64 &ke,
                                                   i64 &ws, i64 &we)
{
    if (g.mode == GEO_BLOCKS) { /* dk_gauss_block + dk_gauss_window */
        i64 d = g.n / g.blocks, r = g.n % g.blocks;
        ks = k * d + (k < r ? k : r);
        ke = ks + d + (k < r ? 1 : 0);
        ws = ks > g.m ? ks - g.m : 0;
        we = ke + g.m < g.n ? ke + g.m : g.n;
    } else {
        const i64 lc = HALO ? g.lc : 0, m = HALO ? g.lc + g.n + g.uc : g.n;
        ks = lc + k * g.L;
        ke = ks + g.L < lc + g.n ? ks + g.L : lc + g.n;
        if (g.mode == GEO_CHUNK) {
            ws = ks - g.h;
            if (ws > m - W)
                ws = m - W;
            if (ws < 0)
                ws = 0;
            we = ws + W;
        } else {
            ws = ks > g.h ? ks - g.h : 0;
            we = ke + g.h < m ? ke + g.h : m;
        }
    }
}

/* execute_halo's line (o, j) on a strided axis: row r of lower halo | box |
 * upper halo (lc + n + uc rows), each part in its own buffer. */
template <typename T>
__host__ __device__ __forceinline__ const T *halo_at(const T *lo, const T *box, const T *up, i64 lc, i64 n, i64 uc,
                                                     i64 inner, i64 o, i64 j, i64 r)
{
    if (r < lc)
        return lo + (o * lc + r) * inner + j;
    if (r < lc + n)
        return box + (o * n + r - lc) * inner + j;
    return up + (o * uc + r - lc - n) * inner + j;
}

/* Thread block b: the line (o, j) and item k of the calling thread. */
__device__ __forceinline__ bool item_of_thread(const Geo &g, i64 b, i64 &o, i64 &j, i64 &k)
{
    i64 jb = b % g.nj, r = b / g.nj;
    i64 kb = r % g.nk;
    o = r / g.nk;
    j = jb * g.JT + (int)threadIdx.x % g.JT;
    k = kb * g.KT + (int)threadIdx.x / g.JT;
    return j < g.inner && k < g.ipl && o < g.outer;
}

/* ---- the filter on a window held in registers ---- */

template <typename T, int W, bool FULL>
__device__ __forceinline__ void rf_regs(T (&x)[W], int len, const Coef<T> &c)
{
    const T alpha = c.alpha, beta = c.beta;
    for (int it = 0; it < c.K; it++) {
        if (FULL) {
            T u = x[W - 1];
            T p = c.constant ? x[0] : T(0);
#pragma unroll
            for (int i = 0; i < W; i++) {
                p = fma(alpha, p, beta * x[i]);
                x[i] = p;
            }
            T s = c.constant ? u + (p - u) / c.opa : beta * p;
            x[W - 1] = s;
#pragma unroll
            for (int i = W - 2; i >= 0; i--) {
                s = fma(alpha, s, beta * x[i]);
                x[i] = s;
            }
        } else {
            T u = T(0), pl = T(0);
            T p = c.constant ? x[0] : T(0);
#pragma unroll
            for (int i = 0; i < W; i++) {
                if (i < len) {
                    if (i == len - 1)
                        u = x[i];
                    p = fma(alpha, p, beta * x[i]);
                    x[i] = p;
                    if (i == len - 1)
                        pl = p;
                }
            }
            T s0 = c.constant ? u + (pl - u) / c.opa : beta * pl;
            T s = s0;
#pragma unroll
            for (int i = W - 1; i >= 0; i--) {
                if (i < len) {
                    s = i == len - 1 ? s0 : fma(alpha, s, beta * x[i]);
                    x[i] = s;
                }
            }
        }
    }
}

/* ---- the filter on a window in memory, element i at w[i * st] ---- */

template <typename T>
__device__ __forceinline__ void rf_mem(T *w, i64 st, int len, const Coef<T> &c)
{
    const T alpha = c.alpha, beta = c.beta;
    const int last = len - 1;
    for (int it = 0; it < c.K; it++) {
        T u = w[last * st];
        T p = c.constant ? w[0] : T(0);
        for (int i = 0; i < len; i++) {
            p = fma(alpha, p, beta * w[i * st]);
            w[i * st] = p;
        }
        T s = c.constant ? u + (p - u) / c.opa : beta * p;
        w[last * st] = s;
        for (int i = last - 1; i >= 0; i--) {
            s = fma(alpha, s, beta * w[i * st]);
            w[i * st] = s;
        }
    }
}

/* ---- 16-byte vectors and asynchronous copies (tile.cu, ext_tile.cu) ---- */

template <typename T> struct Vec;
template <> struct Vec<float> { typedef float4 type; };
template <> struct Vec<double> { typedef double2 type; };
__device__ __forceinline__ float4 vec_add(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ double2 vec_add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

/* Asynchronous global -> shared copies (cp.async): a block stages its next
 * tile while it filters the current one. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
template <int BYTES> __device__ __forceinline__ void cp_async_small(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* ---- dp parents: thread s launches the child grid for blocks
 * [s * per, min((s + 1) * per, nblocks)) ---- */

__device__ __forceinline__ bool dp_slice(i64 nblocks, i64 per, i64 &b0, unsigned &cnt)
{
    i64 s = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    b0 = s * per;
    if (b0 >= nblocks)
        return false;
    cnt = (unsigned)(nblocks - b0 < per ? nblocks - b0 : per);
    return true;
}

/* k_tile in place: the runs of tiles one block filters in order (tile.cu). */
struct Runs {
    i64 M;      /* tiles a run */
    i64 nruns;  /* runs of the pass */
    i64 rps;    /* strided: runs a strip of 32 lines */
    i64 ntiles; /* contiguous: tiles of the pass */
    i64 EL, E;  /* elements of a run's left edge, of both (the run's stride in scratch) */
};

/* ---- extended axes (deriche, vyv; rf with scipy's modes): one thread per
 * (line, segment), the line index fastest, as plugins/opencl/gauss.cl's
 * extended_segments and algorithms/gauss/reference.c ---- */

template <typename T> struct Iir {
    T b0[DK_GAUSS_MAX_SECTIONS], b1[DK_GAUSS_MAX_SECTIONS], a1[DK_GAUSS_MAX_SECTIONS];
    T a2[DK_GAUSS_MAX_SECTIONS], c1[DK_GAUSS_MAX_SECTIONS], c2[DK_GAUSS_MAX_SECTIONS];
    int count;
};

struct ExtGeo {
    i64 n, inner, items, segments, keep, reach;
    int boundary;
};

__host__ __device__ __forceinline__ i64 extend_index(i64 j, i64 n, int boundary)
{
    if (j >= 0 && j < n)
        return j;
    i64 m;
    switch (boundary) {
    case DK_BOUNDARY_REFLECT:
        m = j % (2 * n);
        m = m < 0 ? m + 2 * n : m;
        return m < n ? m : 2 * n - 1 - m;
    case DK_BOUNDARY_MIRROR:
        if (n == 1)
            return 0;
        m = j % (2 * n - 2);
        m = m < 0 ? m + 2 * n - 2 : m;
        return m < n ? m : 2 * n - 2 - m;
    case DK_BOUNDARY_WRAP:
        m = j % n;
        return m < 0 ? m + n : m;
    case DK_BOUNDARY_NEAREST:
    case DK_BOUNDARY_CONSTANT:
        return j < 0 ? 0 : n - 1;
    default:
        return -1;
    }
}

/* One step of the parallel sections: each section's recursion on the inputs
 * in0 and in1 (u and w: the causal or anti-causal feed-forward), their sum.
 * Exactly SC sections, known at compile time (ext_tile.cu, fused_iir.cu). */
template <typename T, int SC>
__host__ __device__ __forceinline__ T sections_step(const T *u, const T *w, const Iir<T> &f, T in0, T in1, T *s1,
                                                    T *s2)
{
    T sum;
#pragma unroll
    for (int k = 0; k < SC; k++) {
        T v = u[k] * in0 + w[k] * in1 - f.a1[k] * s1[k] - f.a2[k] * s2[k];
        s2[k] = s1[k];
        s1[k] = v;
        sum = k == 0 ? v : sum + v; /* 0 + v is v, up to the sign of a zero */
    }
    return sum;
}

/* ---- k_fused (fused.cu): both of the last two axes in one pass ---- */

/* One axis's recursion on values scaled by 1/beta per sweep. */
struct Scaled {
    float alpha, rbeta, beta, opa;
    int K, constant;
};

struct FusedGeo {
    i64 ny, nx, outer; /* the two axes; the field's leading axes flattened */
    i64 hy, hx;        /* their halos */
    i64 Ly, Lx;        /* a tile's rows and columns: W - 2 h */
    Scaled cy, cx;
    float scale;       /* both axes' beta^(2K), applied to the input as it is read */
};

/* ---- k_fused_iir (fused_iir.cu): deriche and vyv over both of the last two
 * axes in one pass ---- */
struct FusedIir {
    i64 ny, nx, outer; /* the two axes; the field's leading axes flattened */
    i64 L;             /* a tile's rows and columns (the kernel's compiled W - 2 R - 3) */
    int boundary;      /* dk_boundary: the continuation past the field's edges */
    float cval;
    Iir<float> fy, fx; /* each axis's sections */
};

/* ---- host side ---- */

/* Compile-time window lengths, odd (so that k_tile's contiguous chunks are odd:
 * the staged windows are then read free of bank conflicts). */
static const int kW32[] = {31, 47, 63, 95, 127};
static const int kW64[] = {31, 47, 63};

struct Pass {
    int axis;
    int path; /* PATH_* */
    int W;
    Geo g;
    double alpha;
    unsigned threads;
    size_t smem;
    i64 grid;        /* blocks of the direct launch (slot blocks for k_gen) */
    i64 ntiles;      /* k_tile: tiles of the pass */
    i64 buf;         /* k_tile: elements of one of its two shared buffers */
    i64 dp_per;      /* dp: child blocks per parent thread */
    i64 dp_parents;  /* dp: parent threads */
    size_t scratch_bytes; /* PATH_GEN_GLOBAL: the windows' global scratch */
    bool extended;   /* k_extended instead of the rf schemes */
    ExtGeo eg;
    i64 batch;       /* extended: items per launch (rf: bounded by scratch) */
    bool ext_tile;   /* extended: k_ext_tile (ntiles blocks, smem bytes) */
    bool ext_strided;
    int ext_S, ext_So; /* k_ext_tile: row lengths of its buffers */
    bool ip;         /* may run in place (src == dst) */
    Runs runs;       /* k_tile in place: its runs and their edges */
    i64 ip_grid;     /* k_tile_ip: persistent blocks */
    size_t edge_bytes; /* k_tile in place: the runs' edges in scratch */
    i64 maxwin;      /* k_gen: the longest window */
    const struct Solver *solver; /* the pass's kernels */
};

struct Plan {
    dk_cuda_device *dev;
    dk_gauss_setup setup;
    bool dp;
    int npass;
    Pass pass[DK_MAX_DIMS];
    void *tmp;     /* one field, only for passes that cannot run in place */
    void *scratch; /* k_gen's global windows, k_tile's edges in place */
    size_t work_bytes; /* device memory the plan holds (tmp and scratch) */
    void *aligned; /* one field, made for the first caller's memory that is not 16-byte aligned */
    size_t esize;
    /* execute_halo: its axis, k_halo_reg's window (0: none), k_halo_row's
     * or k_halo_gen's block and shared memory (gen: chunk length halo_L;
     * no block: k_halo_line) and k_halo_line's scratch for the halos */
    int halo_axis, halo_W;
    unsigned halo_threads;
    size_t halo_smem;
    i64 halo_L;
    void *halo_scratch;
    Pass halo_tile; /* execute_halo's k_tile on a strided axis (PATH_TILE; W 0: none) */
    int fused_W;    /* k_fused's or k_fused_iir's window where one applies (out of place), else 0 */
    FusedGeo fused;
    void *fused_kernel; /* k_fused<W, K>, its block and shared memory */
    unsigned fused_block;
    size_t fused_smem;
    bool fused_iir; /* fused_kernel is k_fused_iir (its geometry fiir), not k_fused */
    FusedIir fiir;
};

inline i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

/* A window length for the register schemes and k_fused, from
 * DAKIT_CUDA_WINDOW (tuning); 0: the plan's choice. */
inline int forced_window(void) { return (int)dk_tuning_long("DAKIT_CUDA_WINDOW", 0, 1, INT_MAX); }

/* What a solver's launch needs for one pass from src to dst (the same only
 * where the pass may run in place). */
template <typename T> struct Launch {
    const Pass &ps;
    const T *src;
    T *dst;
    T *scratch;
    Coef<T> c;
    cudaStream_t st;
    bool dp;
    const Plan *p;

    unsigned parent_grid() const { return (unsigned)ceil_div(ps.dp_parents, 32); }
};

/* Raises a kernel's dynamic shared-memory limit where it needs more than the
 * default 48 KB. */
template <typename F> cudaError_t allow_smem(F *kernel, size_t bytes)
{
    if (bytes <= 48 * 1024)
        return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#define DK_W_CASES(X)                                                                          \
    X(31) X(47) X(63) X(95) X(127)

template <typename T> constexpr bool w_built(int W)
{
    return sizeof(T) == 4 ? true : W <= 63;
}

/* The extended pass's recursions (setup.iir) in the dtype. */
template <typename T> Iir<T> iir_of(const Plan *p, int axis)
{
    const dk_gauss_iir &iir = p->setup.iir[axis];
    Iir<T> f;
    memset(&f, 0, sizeof f);
    f.count = iir.count;
    for (int k = 0; k < iir.count; k++) {
        f.b0[k] = (T)iir.b0[k], f.b1[k] = (T)iir.b1[k];
        f.a1[k] = (T)iir.a1[k], f.a2[k] = (T)iir.a2[k];
        f.c1[k] = (T)iir.c1[k], f.c2[k] = (T)iir.c2[k];
    }
    return f;
}

/* One way of filtering a pass: its kernels, what it adds to the pass's
 * plan, and the launch. */
struct Solver {
    const char *name;
    /* Once the chooser has set the pass's path, window, geometry and block:
     * its shared memory, buffers, grid and scratch (NULL: nothing to add). */
    void (*size)(const Plan *p, Pass *ps);
    /* Its kernels' shared-memory limits and persistent grid, for the
     * plan's dtype (NULL: nothing to prepare). */
    dk_status (*prepare)(const Plan *p, Pass &ps, dk_msg *msg);
    /* The pass, on l.st, not waiting. */
    cudaError_t (*launch_f32)(const Launch<float> &l);
    cudaError_t (*launch_f64)(const Launch<double> &l);
};

extern const Solver solver_reg;      /* reg.cu: PATH_REG, PATH_REG_FULL */
extern const Solver solver_tile;     /* tile.cu: PATH_ROW, PATH_TILE */
extern const Solver solver_gen;      /* gen.cu: PATH_GEN_SMEM, PATH_GEN_GLOBAL */
extern const Solver solver_extended; /* extended.cu */
extern const Solver solver_ext_tile; /* ext_tile.cu */

/* ext_tile.cu: plans the extended pass for k_ext_tile where it applies;
 * false (the pass unchanged) where it does not. */
bool plan_ext_tile(Plan *p, Pass *ps, i64 lines);

/* tile.cu: execute_halo's k_tile on a strided axis, the line lower halo |
 * box | upper halo staged row by row from its three buffers (ps: a PATH_TILE
 * pass over the box's chunks, its window the plan's halo_W). prepare: sizes
 * its tiles and persistent grid; false where the device cannot run it. */
bool prepare_tile_halo(const Plan *p, Pass &ps);
template <typename T>
cudaError_t launch_tile_halo(const Pass &ps, i64 lc, i64 uc, const T *lo, const T *box, const T *up, T *dst,
                             const Coef<T> &c, cudaStream_t st);

/* fused.cu: plans k_fused where it applies (true: p->fused_W set), and
 * runs it from src to dst (not the same). */
bool plan_fused(Plan *p);
cudaError_t launch_fused(const Plan *p, const float *src, float *dst, cudaStream_t st);

/* fused_iir.cu: plans k_fused_iir for deriche and vyv where it applies
 * (true: p->fused_W and p->fused_iir set), and runs it from src to dst. */
bool plan_fused_iir(Plan *p);
cudaError_t launch_fused_iir(const Plan *p, const float *src, float *dst, cudaStream_t st);

/* halo.cu: execute_halo's kernel and buffers for the plan, and the entry. */
dk_status plan_halo(Plan *p, dk_msg *msg);
dk_status cuda_gauss_execute_halo(void *plan, const dk_gauss_halo *hl, const void *in, void *out, dk_msg *msg);

} // namespace dk_cuda_gauss

#endif
