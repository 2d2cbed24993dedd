/* The cuda plugin's k_fused_iir (plugins/cuda/gauss/fused_iir.cu) on the
 * host: its own tile, column and row functions, run for every thread and
 * tile in turn, against the serial reference within conformance's deriche
 * and vyv tolerance (4 A units of max|x|, A the float32 reference's own
 * error against the float64 one). Shapes cover edge tiles, every boundary
 * (the continuation past the field on both axes, folded where the field is
 * shorter than a window), leading axes, each compiled reach, vyv's two-section
 * filters and different sigma per axis. Needs no GPU. */
#include "../plugins/cuda/gauss/fused_iir.cu"

#include <stdio.h>

#include <random>
#include <vector>

extern "C" dk_status dk_gauss_iir_make(dk_gauss_method method, int order_poles, int order, double sigma,
                                       dk_dtype dtype, dk_gauss_iir *iir, size_t *reach);
/* recursive.c reports its failures through the core's dk_fail */
extern "C" dk_status dk_fail(dk_context *, dk_status status, const char *, ...) { return status; }

template <int R, int SC> void emulate(const FusedIir &g, const float *src, float *dst)
{
    std::vector<float> sm((size_t)kIirW * iir_pitch());
    for (i64 o = 0; o < g.outer; o++)
        for (i64 ty = 0; ty < ceil_div(g.ny, g.L); ty++)
            for (i64 tx = 0; tx < ceil_div(g.nx, g.L); tx++) {
                const ITile t = iir_tile_of<R>(g, ty, tx);
                const float *s = src + o * g.ny * g.nx;
                for (int c = 0; c < kIirW; c++)
                    iir_column<R, SC>(s, g, t, c, sm.data());
                for (int r = 0; r < t.ny; r++)
                    iir_row<R, SC>(g, r, sm.data());
                for (int lane = 0; lane < 32; lane++)
                    iir_write<R>(g, t, sm.data(), dst + o * g.ny * g.nx + t.y0 * g.nx + t.x0, 0, 1, lane);
            }
}

static Iir<float> sections_of(const dk_gauss_iir &s)
{
    Iir<float> f;
    memset(&f, 0, sizeof f);
    f.count = s.count;
    for (int k = 0; k < s.count; k++) {
        f.b0[k] = (float)s.b0[k], f.b1[k] = (float)s.b1[k], f.a1[k] = (float)s.a1[k];
        f.a2[k] = (float)s.a2[k], f.c1[k] = (float)s.c1[k], f.c2[k] = (float)s.c2[k];
    }
    return f;
}

static int failures = 0;

static const char *const boundary_names[] = {"zero", "constant", "reflect", "mirror", "nearest", "wrap", "cval"};

static void check(dk_gauss_method method, int poles, size_t outer, size_t ny, size_t nx, double sy, double sx,
                  int oy, int ox, dk_boundary b)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.dtype = DK_F32;
    d.method = method;
    d.order_poles = poles;
    d.boundary = b;
    d.cval = -3.0;
    d.ndim = outer > 1 ? 3 : 2;
    const int a = d.ndim - 2;
    if (outer > 1)
        d.shape[0] = outer;
    d.shape[a] = ny, d.shape[a + 1] = nx;
    d.axes = (1u << a) | (1u << (a + 1));
    d.sigma[a] = sy, d.sigma[a + 1] = sx;
    d.order[a] = oy, d.order[a + 1] = ox;
    const size_t n = outer * ny * nx;
    std::vector<float> in(n), ref(n), out(n, NAN);
    std::vector<double> in64(n), ref64(n);
    std::mt19937 rng((unsigned)(ny * 131 + nx));
    std::uniform_real_distribution<float> U(-1, 1);
    for (size_t i = 0; i < n; i++)
        in64[i] = in[i] = U(rng);
    dk_gauss_desc d64 = d;
    d64.dtype = DK_F64;
    if (dk_gauss_reference(&d, in.data(), ref.data()) != DK_OK ||
        dk_gauss_reference(&d64, in64.data(), ref64.data()) != DK_OK) {
        printf("FAIL: the reference refused %zux%zux%zu\n", outer, ny, nx);
        failures++;
        return;
    }
    dk_gauss_iir iy, ix;
    size_t ry, rx;
    if (dk_gauss_iir_make(method, poles, oy, sy, DK_F32, &iy, &ry) != DK_OK ||
        dk_gauss_iir_make(method, poles, ox, sx, DK_F32, &ix, &rx) != DK_OK) {
        printf("FAIL: no sections for sigma %g/%g\n", sy, sx);
        failures++;
        return;
    }
    const int sections = iy.count > ix.count ? iy.count : ix.count; /* zero sections on the other axis */
    int R = 0;
    for (int r : kIirR)
        if (!R && (size_t)r >= (ry > rx ? ry : rx))
            R = r;
    FusedIir g;
    g.ny = (i64)ny, g.nx = (i64)nx, g.outer = (i64)outer;
    g.L = kIirW - 2 * R - 3;
    g.boundary = (int)b;
    g.cval = (float)d.cval;
    g.fy = sections_of(iy), g.fx = sections_of(ix);
    void (*run)(const FusedIir &, const float *, float *) = NULL;
#define CASE(r, sc)                                                                                                    \
    if (R == r && sections == sc)                                                                                      \
        run = emulate<r, sc>;
    CASE(19, 2) CASE(25, 2)
#undef CASE
    if (!run) {
        printf("FAIL: reach %zu/%zu, %d sections: no compiled kernel\n", ry, rx, sections);
        failures++;
        return;
    }
    run(g, in.data(), out.data());
    double err = 0, own = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)out[i] - ref[i]));
        err = isfinite(out[i]) ? err : INFINITY;
        own = fmax(own, fabs((double)ref[i] - ref64[i]));
        mx = fmax(mx, fabs((double)in[i]));
    }
    /* conformance's deriche and vyv tolerance (tools/gauss/conform.c) */
    const double eps = 0x1p-24, A = own / mx / eps, tol = fmax((2.0 * 2 + 4.0) * 2.0, 4.0 * A);
    const bool ok = err / mx / eps <= tol;
    failures += !ok;
    printf("%s: %s%s, %zu x %zu x %zu, sigma %g/%g, order %d/%d, %s: reach %zu/%zu as %d, tiles %lld, max error "
           "%.2f eps of max|x| (tolerance %.1f)\n",
           ok ? "ok" : "FAIL", method == DK_GAUSS_DERICHE ? "deriche" : "vyv", method == DK_GAUSS_VYV
           ? (poles == 5 ? "5" : poles == 4 ? "4" : "3") : "", outer, ny, nx, sy, sx, oy, ox, boundary_names[b], ry, rx,
           R, (long long)g.L, err / mx / eps, tol);
}

int main(void)
{
    const dk_gauss_method DE = DK_GAUSS_DERICHE, VY = DK_GAUSS_VYV;
    check(DE, 5, 1, 300, 257, 2, 2, 0, 0, DK_BOUNDARY_REFLECT);
    check(DE, 5, 1, 181, 90, 2, 1, 0, 0, DK_BOUNDARY_CVAL);
    check(DE, 5, 3, 100, 140, 1.5, 2, 0, 0, DK_BOUNDARY_MIRROR);
    check(DE, 5, 1, 75, 200, 1, 1, 0, 0, DK_BOUNDARY_NEAREST);
    check(DE, 5, 1, 130, 80, 2, 1.5, 0, 0, DK_BOUNDARY_WRAP);
    check(DE, 5, 1, 90, 120, 2, 2, 0, 0, DK_BOUNDARY_ZERO);
    check(DE, 5, 1, 110, 100, 0.5, 2, 0, 0, DK_BOUNDARY_CONSTANT);
    check(DE, 5, 1, 7, 5, 2, 2, 0, 0, DK_BOUNDARY_WRAP); /* shorter than a window: folded */
    check(DE, 5, 1, 20, 9, 1.5, 2, 0, 0, DK_BOUNDARY_REFLECT);
    check(VY, 3, 2, 120, 130, 1, 0.5, 0, 0, DK_BOUNDARY_CVAL);
    check(VY, 4, 1, 100, 101, 1, 1, 0, 0, DK_BOUNDARY_REFLECT);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
