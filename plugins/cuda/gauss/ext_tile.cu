/* dakit cuda plugin, gauss: k_ext_tile, the extended axes of deriche and
 * vyv staged through shared memory (plan_ext_tile says when it applies). */
#include "gauss.cuh"

using namespace dk_cuda_gauss;

namespace {

/* ---- extended axes, tiled (deriche, vyv): a block of 2 EXT_ROWS threads
 * filters EXT_ROWS rows, one (line, segment) each, from shared memory. The
 * block copies the rows' windows x[k0 - R - 1 .. k0 + keep + R + 2) in with
 * asynchronous copies (the values past the line's ends from extend_index),
 * runs k_extended's recursions with the same operations in the same order,
 * one warp the causal ones and the other the anti-causal ones, each into a
 * buffer of its own, and writes their sums back.
 * Contiguous axis: a row's window is one run of memory, copied and written
 * by the whole block along it, laid out [row][i] with an odd row length (no
 * bank conflicts); the rows are consecutive items, segments of a line
 * fastest. Strided axis: the rows are adjacent lines on one segment, laid
 * out [i][row], so every copy and store of a warp is one run of lines. ---- */

enum { EXT_ROWS = 32 };

/* The line's value at position p (extended past its ends) into *to. */
template <typename T>
__device__ __forceinline__ void ext_stage(T *to, const T *line, i64 p, const ExtGeo &g, T cval)
{
    if (p >= 0 && p < g.n) {
        cp_async_small<sizeof(T)>(to, line + p * g.inner);
        return;
    }
    i64 k = extend_index(p, g.n, g.boundary);
    *to = k >= 0 ? line[k * g.inner] : g.boundary == DK_BOUNDARY_CVAL ? cval : T(0);
}

/* The recursions of one row: x(i) = window value i (line position ws + i,
 * ws = k0 - R - 1), len kept values (position k0 + i). The causal one
 * writes its sums to o(i), the anti-causal one to a(i); o(i) + a(i) is the
 * result. Each first runs over the R values that only warm it up. */
template <typename T, int SC>
__device__ __forceinline__ void ext_causal(const T *x, int xs, T *o, int os, int len, int R, const Iir<T> &f)
{
    T s1[SC] = {}, s2[SC] = {};
    T prev = x[0];
    for (int i = 1; i <= R; i++) {
        T cur = x[i * xs];
        sections_step<T, SC>(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
    }
    for (int i = R + 1; i <= R + len; i++) {
        T cur = x[i * xs];
        o[(i - R - 1) * os] = sections_step<T, SC>(f.b0, f.b1, f, cur, prev, s1, s2);
        prev = cur;
    }
}

template <typename T, int SC>
__device__ __forceinline__ void ext_anticausal(const T *x, int xs, T *a, int os, int len, int R,
                                               const Iir<T> &f)
{
    T s1[SC] = {}, s2[SC] = {};
    T next = x[(len + 2 * R + 1) * xs], after = x[(len + 2 * R + 2) * xs];
    for (int i = len + 2 * R; i > len + R; i--) {
        sections_step<T, SC>(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
    for (int i = len + R; i > R; i--) {
        a[(i - R - 1) * os] = sections_step<T, SC>(f.c1, f.c2, f, next, after, s1, s2);
        after = next;
        next = x[i * xs];
    }
}

/* Block block0 + blockIdx.x, of 2 EXT_ROWS threads: thread r of the first
 * warp runs row r's causal recursion while thread r of the second runs its
 * anti-causal one, so each dependency chain is half a row long and an SM
 * holds twice the warps. S, So (contiguous axis): the elements of the
 * staged span and of each sum buffer. */
template <typename T, bool STRIDED, int SC>
__global__ void __launch_bounds__(2 * EXT_ROWS)
    k_ext_tile(const T *__restrict__ src, T *__restrict__ dst, ExtGeo g, Iir<T> f, T cval, int S,
               int So, i64 block0)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef typename Vec<T>::type V;
    constexpr int VEC = (int)(sizeof(V) / sizeof(T));
    const int tid = (int)threadIdx.x, r = tid % EXT_ROWS, half = tid / EXT_ROWS, R = (int)g.reach;
    const int W = (int)g.keep + 2 * R + 3;
    const i64 b = block0 + blockIdx.x;
    T *win = reinterpret_cast<T *>(smem_raw);

    if (STRIDED) {
        /* rows: 32 adjacent lines on one segment, laid out [i][row] */
        T *causal = win + (i64)EXT_ROWS * W, *anti = causal + (i64)EXT_ROWS * g.keep;
        const i64 lines = g.items / g.segments, seg = b % g.segments, line = (b / g.segments) * EXT_ROWS + r;
        const bool valid = line < lines;
        const i64 k0 = seg * g.keep, k1 = k0 + g.keep < g.n ? k0 + g.keep : g.n;
        const i64 base = (line / g.inner) * g.n * g.inner + line % g.inner;
        const int len = valid ? (int)(k1 - k0) : 0;
        const i64 ws = k0 - R - 1;
        /* 32 whole lines side by side in memory (inner a multiple of 32),
         * the window inside the line: 16-byte copies, a row of the window
         * PER_ROW of them; else the two warps copy alternate window values */
        constexpr int PER_ROW = EXT_ROWS / VEC;
        const bool wide = g.inner % EXT_ROWS == 0 && ws >= 0 && ws + W <= g.n;
        const T *x = src + base;
        if (wide) {
            const T *x0 = src + (base - r);
            for (int v = tid; v < W * PER_ROW; v += 2 * EXT_ROWS) {
                const int i = v / PER_ROW, c = v % PER_ROW * VEC;
                cp_async16(win + i * EXT_ROWS + c, x0 + (ws + i) * g.inner + c);
            }
        } else if (valid) {
            for (int i = half; i < W; i += 2)
                ext_stage(win + i * EXT_ROWS + r, x, ws + i, g, cval);
        }
        cp_wait_all();
        __syncthreads();
        if (valid) {
            if (half == 0)
                ext_causal<T, SC>(win + r, EXT_ROWS, causal + r, EXT_ROWS, len, R, f);
            else
                ext_anticausal<T, SC>(win + r, EXT_ROWS, anti + r, EXT_ROWS, len, R, f);
        }
        __syncthreads();
        if (g.inner % EXT_ROWS == 0) {
            T *y0 = dst + (base - r) + k0 * g.inner;
            for (int v = tid; v < len * PER_ROW; v += 2 * EXT_ROWS) {
                const int i = v / PER_ROW, c = v % PER_ROW * VEC;
                V cs = *reinterpret_cast<const V *>(causal + i * EXT_ROWS + c);
                V as = *reinterpret_cast<const V *>(anti + i * EXT_ROWS + c);
                *reinterpret_cast<V *>(y0 + i * g.inner + c) = vec_add(cs, as);
            }
            return;
        }
        T *y = dst + base + k0 * g.inner;
        for (int i = half; i < len; i += 2)
            y[i * g.inner] = causal[i * EXT_ROWS + r] + anti[i * EXT_ROWS + r];
        return;
    }

    /* contiguous axis: rows are 32 consecutive segments of one line, whose
     * windows overlap into one span [k0 - R - 1, kend + R + 2), staged once;
     * row q's window starts q keep values into it, keep odd so that the 32
     * rows' reads fall in 32 banks. The kept values of the rows are one span
     * of the line too: [k0, kend). */
    T *causal = win + S, *anti = causal + So;
    const i64 groups = (g.segments + EXT_ROWS - 1) / EXT_ROWS, line = b / groups, seg0 = (b % groups) * EXT_ROWS;
    const i64 k0 = seg0 * g.keep, kend = (seg0 + EXT_ROWS) * g.keep < g.n ? (seg0 + EXT_ROWS) * g.keep : g.n;
    const i64 s0 = k0 - R - 1, s1 = kend + R + 2;
    const i64 a0 = s0 >= 0 ? s0 - s0 % VEC : s0 - ((s0 % VEC) + VEC) % VEC; /* rounded down to VEC */
    const T *x = src + line * g.n;
    const bool aligned = (line * g.n) % VEC == 0;
    for (i64 p = a0 + (i64)tid * VEC; p < s1; p += 2 * EXT_ROWS * VEC) {
        T *to = win + (p - a0);
        if (aligned && p >= 0 && p + VEC <= g.n) {
            cp_async16(to, x + p);
            continue;
        }
        for (int e = 0; e < VEC; e++)
            if (p + e >= s0 && p + e < s1)
                ext_stage(to + e, x, p + e, g, cval);
    }
    cp_wait_all();
    __syncthreads();
    const i64 kr = k0 + (i64)r * g.keep;
    const int len = kr < kend ? (int)((kend - kr) < g.keep ? kend - kr : g.keep) : 0;
    const T *row = win + (s0 - a0) + (i64)r * g.keep;
    if (len > 0) {
        if (half == 0)
            ext_causal<T, SC>(row, 1, causal + (i64)r * g.keep, 1, len, R, f);
        else
            ext_anticausal<T, SC>(row, 1, anti + (i64)r * g.keep, 1, len, R, f);
    }
    __syncthreads();
    T *y = dst + line * g.n + k0;
    const i64 total = kend - k0;
    if ((line * g.n + k0) % VEC == 0) {
        const i64 nvec = total / VEC;
        for (i64 v = tid; v < nvec; v += 2 * EXT_ROWS) {
            V cs = *reinterpret_cast<const V *>(causal + v * VEC);
            V as = *reinterpret_cast<const V *>(anti + v * VEC);
            *reinterpret_cast<V *>(y + v * VEC) = vec_add(cs, as);
        }
        for (i64 i = nvec * VEC + tid; i < total; i += 2 * EXT_ROWS)
            y[i] = causal[i] + anti[i];
    } else {
        for (i64 i = tid; i < total; i += 2 * EXT_ROWS)
            y[i] = causal[i] + anti[i];
    }
}

/* k_ext_tile: raises its shared-memory limit. */
template <typename T> dk_status prepare_ext_tile(const Pass &ps, dk_msg *msg)
{
    /* always: its static shared memory counts against the limit too */
    const char *what = "setting a kernel's shared-memory limit";
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    const void *kernels[2][DK_GAUSS_MAX_SECTIONS] = {
        {(const void *)k_ext_tile<T, false, 1>, (const void *)k_ext_tile<T, false, 2>,
         (const void *)k_ext_tile<T, false, 3>},
        {(const void *)k_ext_tile<T, true, 1>, (const void *)k_ext_tile<T, true, 2>,
         (const void *)k_ext_tile<T, true, 3>}};
    for (int k = 0; k < DK_GAUSS_MAX_SECTIONS; k++)
        CUDA_TRY(cudaFuncSetAttribute(kernels[ps.ext_strided][k], a, (int)ps.smem), what);
    return DK_OK;
}

static_assert(DK_GAUSS_MAX_SECTIONS == 3, "launch_ext_tile instantiates 1 to 3 sections");
/* k_ext_tile for the sections' count, 1 to DK_GAUSS_MAX_SECTIONS. */
template <typename T, bool STRIDED>
void launch_ext_tile(int sections, unsigned blocks, size_t smem, cudaStream_t stream, const T *src, T *dst,
                     const ExtGeo &g, const Iir<T> &f, T cval, int S, int So, i64 b0)
{
    if (sections == 1)
        k_ext_tile<T, STRIDED, 1><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
    else if (sections == 2)
        k_ext_tile<T, STRIDED, 2><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
    else
        k_ext_tile<T, STRIDED, 3><<<blocks, 2 * EXT_ROWS, smem, stream>>>(src, dst, g, f, cval, S, So, b0);
}

dk_status prepare(const Plan *p, Pass &ps, dk_msg *msg)
{
    return p->setup.desc.dtype == DK_F32 ? prepare_ext_tile<float>(ps, msg) : prepare_ext_tile<double>(ps, msg);
}

/* The pass, at most 2^30 blocks a launch. */
template <typename T> cudaError_t launch(const Launch<T> &l)
{
    const Plan *p = l.p;
    const Pass &ps = l.ps;
    const Iir<T> f = iir_of<T>(p, ps.axis);
    T cval = (T)p->setup.desc.cval;
    const i64 most = (i64)1 << 30; /* blocks of one launch */
    for (i64 b0 = 0; b0 < ps.ntiles; b0 += most) {
        unsigned blocks = (unsigned)(ps.ntiles - b0 < most ? ps.ntiles - b0 : most);
        if (ps.ext_strided)
            launch_ext_tile<T, true>(f.count, blocks, ps.smem, l.st, l.src, l.dst, ps.eg, f, cval, ps.ext_S,
                                     ps.ext_So, b0);
        else
            launch_ext_tile<T, false>(f.count, blocks, ps.smem, l.st, l.src, l.dst, ps.eg, f, cval, ps.ext_S,
                                      ps.ext_So, b0);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

} // namespace

/* deriche and vyv through k_ext_tile, unless DAKIT_GAUSS_CUDA_EXTENDED=simple
 * (every axis) or =contiguous (the strided axes) asks for k_extended, or the
 * rows do not fit in shared memory. Segments of
 * `keep` values (DAKIT_GAUSS_CUDA_EXTENDED_KEEP, else as many as leave a
 * block's buffers within 48 KB, at least 64): the window is keep + 2 reach +
 * 3 values, so a longer segment reads less twice but fits fewer blocks. */
bool dk_cuda_gauss::plan_ext_tile(Plan *p, Pass *ps, i64 lines)
{
    const dk_gauss_setup *s = &p->setup;
    const char *kernel = dk_tuning_string("DAKIT_GAUSS_CUDA_EXTENDED");
    ExtGeo &g = ps->eg;
    if ((kernel && strcmp(kernel, "simple") == 0) || s->desc.method == DK_GAUSS_RF)
        return false;
    if (kernel && strcmp(kernel, "contiguous") == 0 && g.inner > 1)
        return false; /* tiled on the contiguous axis only */
    const i64 R = g.reach, esize = (i64)p->esize;
    if (R > INT_MAX / 4 || g.n < 1)
        return false;
    /* segments of `keep` values: the block's buffers within 55 KB, so that
     * four blocks fit an SM's 228 KB; longer segments read less twice, and
     * beyond 128 measured no faster on an H100 (docs/gauss.md). Strided
     * axis: per row a window (keep + 2 R + 3) and two sums (2 keep);
     * contiguous axis: the 32 rows' windows are one span (32 keep + 2 R +
     * 3), and keep is odd */
    const i64 values = ((55 << 10) - 1024) / esize, vec = 16 / esize;
    const bool strided = g.inner > 1;
    i64 most = strided ? (values / EXT_ROWS - 2 * R - 3) / 3 : (values - 2 * R - 3 - 3 * vec) / (3 * EXT_ROWS);
    i64 keep = dk_tuning_long("DAKIT_GAUSS_CUDA_EXTENDED_KEEP", 0, 1, 1 << 20);
    if (keep == 0)
        keep = most > 128 ? 128 : most < 64 ? 64 : most;
    else
        most = keep;
    if (keep > g.n)
        keep = g.n;
    i64 segments = ceil_div(g.n, keep);
    if (!strided && segments > EXT_ROWS && segments % EXT_ROWS && ceil_div(g.n, segments / EXT_ROWS * EXT_ROWS) < most)
        segments = segments / EXT_ROWS * EXT_ROWS; /* whole blocks of 32 rows */
    keep = ceil_div(g.n, segments); /* even segments */
    if (!strided)
        keep |= 1; /* odd: the rows' reads fall in 32 banks (k_ext_tile) */
    segments = ceil_div(g.n, keep);
    const i64 W = keep + 2 * R + 3;
    i64 S, So, smem;
    if (strided) {
        S = W;
        So = keep;
        smem = (i64)EXT_ROWS * (W + 2 * keep) * esize; /* window, causal and anti-causal sums */
    } else {
        /* the span of 32 rows' windows (rounded down to 16 bytes at its
         * start), and the two sums of their kept values */
        S = ceil_div((i64)EXT_ROWS * keep + 2 * R + 3 + vec, vec) * vec;
        So = ceil_div((i64)EXT_ROWS * keep, vec) * vec;
        smem = (S + 2 * So) * esize;
    }
    /* past 96 KB a block runs alone on its SM: k_extended, unless asked */
    const i64 cap = dk_tuning_string("DAKIT_GAUSS_CUDA_EXTENDED_KEEP") ? (i64)p->dev->smem_optin : (i64)96 << 10;
    if (smem > cap || smem > (i64)p->dev->smem_optin || S > INT_MAX || So > INT_MAX)
        return false;
    g.keep = keep;
    g.segments = segments;
    g.items = lines * segments;
    ps->ext_tile = true;
    ps->ext_strided = g.inner > 1;
    ps->ext_S = (int)S;
    ps->ext_So = (int)So;
    ps->smem = (size_t)smem;
    ps->ntiles = ps->ext_strided ? ceil_div(lines, EXT_ROWS) * segments : lines * ceil_div(segments, EXT_ROWS);
    ps->batch = g.items;
    return true;
}

const Solver dk_cuda_gauss::solver_ext_tile = {
    .name = "ext_tile",
    .size = NULL,
    .prepare = prepare,
    .launch_f32 = launch<float>,
    .launch_f64 = launch<double>,
};
