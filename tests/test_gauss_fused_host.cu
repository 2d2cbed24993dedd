/* The cuda plugin's k_fused (plugins/cuda/gauss/fused.cu) on the host: its
 * own tile, column and row functions, run for every thread and tile in
 * turn, against the serial reference within conformance's rf tolerance.
 * Shapes cover edge tiles, windows shifted inside the field, leading axes,
 * both boundary rules, each K and several sigma per axis, each compiled W, and
 * values near float32's largest (the scaled recursions must not overflow).
 * Needs no GPU: the kernel runs on one. */
#include "../plugins/cuda/gauss/fused.cu"

#include <stdio.h>

#include <random>
#include <vector>

template <int W, int K> void emulate(const FusedGeo &g, const float *src, float *dst)
{
    constexpr int P = fused_pitch<W>();
    std::vector<float> sm((size_t)W * P);
    for (i64 o = 0; o < g.outer; o++)
        for (i64 ty = 0; ty < ceil_div(g.ny, g.Ly); ty++)
            for (i64 tx = 0; tx < ceil_div(g.nx, g.Lx); tx++) {
                const FTile t = fused_tile(g, W, ty, tx);
                const float *s = src + o * g.ny * g.nx;
                for (int c = 0; c < W; c++)
                    fused_column<W, P, K>(s, g, t, c, sm.data());
                for (int r = 0; r < t.ny; r++)
                    fused_row<W, P, K>(g, t, r, sm.data());
                for (int lane = 0; lane < 32; lane++)
                    fused_write<P>(g, t, sm.data(), dst + o * g.ny * g.nx + t.y0 * g.nx + t.x0, 0, 1, lane);
            }
}

static int failures = 0;

static void check(int W, size_t outer, size_t ny, size_t nx, double sy, double sx, int K, dk_boundary b, float amp)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.dtype = DK_F32;
    d.method = DK_GAUSS_RF;
    d.mode = DK_GAUSS_EXACT;
    d.boundary = b;
    d.K = K;
    d.ndim = outer > 1 ? 3 : 2;
    const int a = d.ndim - 2;
    if (outer > 1)
        d.shape[0] = outer;
    d.shape[a] = ny, d.shape[a + 1] = nx;
    d.axes = (1u << a) | (1u << (a + 1));
    d.sigma[a] = sy, d.sigma[a + 1] = sx;
    const size_t n = outer * ny * nx;
    std::vector<float> in(n), ref(n), out(n, NAN);
    std::mt19937 rng((unsigned)(ny * 131 + nx));
    std::uniform_real_distribution<float> U(-amp, amp);
    for (float &v : in)
        v = U(rng);
    if (dk_gauss_reference(&d, in.data(), ref.data()) != DK_OK) {
        printf("FAIL: the reference refused %zux%zux%zu\n", outer, ny, nx);
        failures++;
        return;
    }
    const double ay = dk_gauss_alpha(sy, K), ax = dk_gauss_alpha(sx, K);
    FusedGeo g;
    g.ny = (i64)ny, g.nx = (i64)nx, g.outer = (i64)outer;
    g.hy = (i64)dk_gauss_exact_halo(ay, K, DK_F32), g.hx = (i64)dk_gauss_exact_halo(ax, K, DK_F32);
    g.Ly = W - 2 * g.hy, g.Lx = W - 2 * g.hx;
    g.cy = scaled_of(ay, &d), g.cx = scaled_of(ax, &d);
    g.scale = fused_scale(g, K);
    void (*run)(const FusedGeo &, const float *, float *) = NULL;
#define CASE(w, k)                                                                                                     \
    if (W == w && K == k)                                                                                              \
        run = emulate<w, k>;
    CASE(127, 1) CASE(127, 2) CASE(127, 3) CASE(127, 4) CASE(95, 1) CASE(95, 2) CASE(95, 3) CASE(95, 4)
#undef CASE
    run(g, in.data(), out.data());
    double err = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)out[i] - ref[i]));
        err = isfinite(out[i]) ? err : INFINITY;
        mx = fmax(mx, fabs((double)in[i]));
    }
    /* conformance's rf tolerance (tools/gauss/conform.c) */
    const double tol = (2.0 * K * 2 + 4.0) * 2.0 * 0x1p-24;
    const bool ok = err / mx <= tol;
    failures += !ok;
    printf("%s: W %d, %zu x %zu x %zu, sigma %g/%g, K %d, %s, |x| < %g: tiles %lld x %lld, max error %.2f eps of "
           "max|x| (tolerance %.0f)\n",
           ok ? "ok" : "FAIL", W, outer, ny, nx, sy, sx, K, b == DK_BOUNDARY_CONSTANT ? "constant" : "zero",
           (double)amp, (long long)g.Ly, (long long)g.Lx, err / mx / 0x1p-24, tol / 0x1p-24);
}

int main(void)
{
    check(127, 1, 700, 900, 2, 2, 4, DK_BOUNDARY_CONSTANT, 1);
    check(127, 1, 700, 900, 2, 2, 4, DK_BOUNDARY_ZERO, 1);
    check(95, 3, 300, 257, 1.5, 3, 4, DK_BOUNDARY_CONSTANT, 1);
    check(95, 1, 200, 129, 1, 2, 3, DK_BOUNDARY_ZERO, 1);
    check(95, 2, 1000, 700, 1.5, 1, 2, DK_BOUNDARY_CONSTANT, 1);
    check(127, 1, 127, 130, 4, 5, 4, DK_BOUNDARY_CONSTANT, 1);
    check(127, 1, 1000, 333, 2, 2, 1, DK_BOUNDARY_CONSTANT, 1);
    check(127, 1, 400, 1000, 3, 1, 4, DK_BOUNDARY_ZERO, 1);
    check(127, 1, 300, 300, 2, 2, 4, DK_BOUNDARY_CONSTANT, 1e38f);
    check(127, 1, 300, 300, 2, 2, 4, DK_BOUNDARY_ZERO, 1e-30f);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
