/* The gauss conformance cases, and how each is checked.
 *
 * Error measure: max |y - ref| / max |x| over the field.
 * Tolerance: every RF pass is a convex combination (beta + alpha = 1, and
 * the constant boundary's start is one too), so a pass can add at most
 * about two rounding units of max|x| to the difference between two orders
 * of evaluation (FMA or not, another window start) and never amplifies an
 * earlier one. With 2K passes per filtered axis, and the exact-mode halo
 * chosen to keep window ends under a quarter unit, the bound is
 * (2K * axes + 4) * 2 * eps, eps the dtype's unit roundoff. Algorithmic
 * shortcuts (a short overlap, a truncated kernel) exceed it at once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/conform.h"

typedef struct gauss_case {
    const char *name;
    dk_dtype dtype;
    int ndim;
    size_t shape[3];
    unsigned axes;
    double sigma[3];
    int K;
    dk_boundary boundary;
    dk_gauss_mode mode;
    size_t overlap, blocks;
    int inplace;
    int quick;
    dk_gauss_method method; /* last, so the rf cases leave it 0 (rf) */
    int poles;
    double cval;
    int missing; /* NaN at every 13th value, filtered with nan policy ignore (host memory) */
    int order[3]; /* derivative order per axis */
} gauss_case;

#define Z DK_BOUNDARY_ZERO
#define C DK_BOUNDARY_CONSTANT
#define EX DK_GAUSS_EXACT
#define OV DK_GAUSS_OVERLAP
#define R DK_BOUNDARY_REFLECT
#define M DK_BOUNDARY_MIRROR
#define N DK_BOUNDARY_NEAREST
#define W DK_BOUNDARY_WRAP
#define V DK_BOUNDARY_CVAL
#define RF DK_GAUSS_RF
#define DE DK_GAUSS_DERICHE
#define VY DK_GAUSS_VYV
#define FIRST_MATRIX 53
#define MATRIX_METHODS 4
#define MATRIX_CASES (MATRIX_METHODS * DK_BOUNDARY_COUNT * 2)
#define FIRST_DERIVATIVE (FIRST_MATRIX + MATRIX_CASES + 4)
#define DERIVATIVE_CASES (2 * DK_BOUNDARY_COUNT * 2)

static gauss_case cases[] = {
    /* name                 dtype  nd shape              axes sigma          K   bnd mode ov  blk  inpl quick */
    {"1d_n1",               DK_F32, 1, {1},              1, {2},             4,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_n2_constant",      DK_F64, 1, {2},              1, {0.5},           1,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_odd_constant",     DK_F32, 1, {1001},           1, {3.3},           3,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_prime_sigma50",    DK_F64, 1, {7919},           1, {50},            8,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_sigma0.5_K2",      DK_F64, 1, {4099},           1, {0.5},           2,   C, EX, 0, 0,    1, 1, RF, 0, 0, 0, {0}},
    {"1d_short_wide",       DK_F32, 1, {10},             1, {30},            2,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_1e6",              DK_F32, 1, {1000000},        1, {2},             4,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"1d_1e6_f64_constant", DK_F64, 1, {1000003},        1, {5},             4,   C, EX, 0, 0,    1, 0, RF, 0, 0, 0, {0}},
    {"1d_K1000",            DK_F32, 1, {20011},          1, {2},             1000, C, EX, 0, 0,   0, 1, RF, 0, 0, 0, {0}},
    {"1d_K1000_f64",        DK_F64, 1, {5003},           1, {10},            1000, Z, EX, 0, 0,   0, 0, RF, 0, 0, 0, {0}},
    {"1d_2e6_sigma50",      DK_F32, 1, {2000000},        1, {50},            4,   C, EX, 0, 0,    0, 0, RF, 0, 0, 0, {0}},
    {"1d_sigma500_K1000",   DK_F64, 1, {30011},          1, {500},           1000, C, EX, 0, 0,   0, 0, RF, 0, 0, 0, {0}},
    {"2d_both",             DK_F32, 2, {257, 311},       3, {2, 5},          4,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"2d_axis0_f64",        DK_F64, 2, {300, 200},       1, {7},             3,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"2d_axis1",            DK_F32, 2, {128, 1000},      2, {0, 1.5},        6,   Z, EX, 0, 0,    1, 1, RF, 0, 0, 0, {0}},
    {"2d_1024_both",        DK_F32, 2, {1024, 1024},     3, {2, 2},          4,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"2d_tall_thin",        DK_F64, 2, {5000, 3},        3, {4, 1},          5,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"3d_all_f64",          DK_F64, 3, {17, 33, 65},     7, {1, 2, 3},       4,   C, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"3d_axes02",           DK_F32, 3, {40, 30, 50},     5, {3, 0, 2},       5,   Z, EX, 0, 0,    0, 1, RF, 0, 0, 0, {0}},
    {"3d_axis1_constant",   DK_F32, 3, {9, 100, 31},     2, {0, 20, 0},      2,   C, EX, 0, 0,    1, 1, RF, 0, 0, 0, {0}},
    {"3d_64cube_K1",        DK_F32, 3, {64, 64, 64},     7, {0.7, 0.7, 0.7}, 1,   Z, EX, 0, 0,    0, 0, RF, 0, 0, 0, {0}},
    {"overlap_seed_table2", DK_F32, 1, {100000},         1, {2},             500, Z, OV, 5, 3072, 0, 0, RF, 0, 0, 0, {0}},
    {"overlap_1d_small",    DK_F64, 1, {10007},          1, {2},             50,  C, OV, 5, 300,  0, 1, RF, 0, 0, 0, {0}},
    {"overlap_2d_axis1",    DK_F64, 2, {64, 5000},       2, {0, 3},          4,   C, OV, 10, 7,   0, 1, RF, 0, 0, 0, {0}},
    {"overlap_3d_axis0",    DK_F32, 3, {300, 7, 40},     1, {4},             3,   Z, OV, 8, 5,    1, 1, RF, 0, 0, 0, {0}},
    {"overlap_m0_single",   DK_F32, 1, {50},             1, {2},             4,   Z, OV, 0, 50,   0, 1, RF, 0, 0, 0, {0}},
    {"overlap_blocks1",     DK_F64, 1, {999},            1, {3},             4,   C, OV, 5, 1,    0, 1, RF, 0, 0, 0, {0}},
    /* parameters drawn at random (fixed seed, so every run and backend sees the same) */
    [27 ... 42] = {NULL, DK_F32, 0, {0}, 0, {0}, 0, Z, EX, 0, 0, 0, 1, RF, 0, 0, 0, {0}},
    /* deriche and vyv where their segments and continuations are stressed */
    {"deriche_1d_long",     DK_F32, 1, {300007},         1, {20},            0,  R, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"vyv_1d_long_f64",     DK_F64, 1, {200003},         1, {3},             0,  W, EX, 0, 0,    1, 1, VY, 5, 0, 0, {0}},
    {"vyv_short_wide",      DK_F64, 1, {7},              1, {40},            0,  R, EX, 0, 0,    0, 1, VY, 5, 0, 0, {0}},
    {"deriche_short_mirror",DK_F32, 1, {5},              1, {9},             0,  M, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"deriche_n1_wrap",     DK_F64, 1, {1},              1, {2},             0,  W, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"deriche_sigma1000",   DK_F64, 1, {5000},           1, {1000},          0,  V, EX, 0, 0,    0, 1, DE, 5, 2.5, 0, {0}},
    {"vyv4_2d_cval",        DK_F32, 2, {301, 77},        3, {2, 15},         0,  V, EX, 0, 0,    1, 1, VY, 4, -3, 0, {0}},
    {"rf_reflect_1d_long",  DK_F32, 1, {100003},         1, {4},             3,  R, EX, 0, 0,    0, 1, RF, 5, 0, 0, {0}},
    {"rf_wrap_K1000",       DK_F64, 1, {3001},           1, {2},             1000, W, EX, 0, 0,  0, 1, RF, 5, 0, 0, {0}},
    {"deriche_3d_all",      DK_F64, 3, {17, 33, 65},     7, {1, 2, 3},       0,  N, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    /* every method x scipy mode x dtype (filled in by draw_matrix_cases) */
    [FIRST_MATRIX ... FIRST_MATRIX + MATRIX_CASES - 1] = {NULL, DK_F32, 0, {0}, 0, {0}, 0, Z, EX, 0, 0, 0, 1, RF, 0, 0, 0, {0}},
    /* missing values: normalized convolution around NaN (dk_gauss_plan_set_nan) */
    {"missing_rf_2d",       DK_F32, 2, {200, 150},       3, {3, 2},          4,  Z, EX, 0, 0,    0, 1, RF, 0, 0, 1, {0}},
    {"missing_rf_reflect",  DK_F64, 2, {97, 300},        3, {2, 4},          3,  R, EX, 0, 0,    0, 1, RF, 5, 0, 1, {0}},
    {"missing_deriche_1d",  DK_F64, 1, {5000},           1, {5},             0,  N, EX, 0, 0,    0, 1, DE, 5, 0, 1, {0}},
    {"missing_vyv_cval",    DK_F32, 2, {120, 90},        3, {2, 3},          0,  V, EX, 0, 0,    0, 1, VY, 5, 1.5, 1, {0}},
    /* derivatives: deriche and vyv x scipy mode x dtype (filled in by draw_derivative_cases) */
    [FIRST_DERIVATIVE ... FIRST_DERIVATIVE + DERIVATIVE_CASES - 1] = {NULL, DK_F32, 0, {0}, 0, {0}, 0, Z, EX, 0, 0, 0, 1, RF, 0, 0, 0, {0}},
    /* strided axes of whole groups of 32 lines, long enough for interior segments */
    {"deriche_lines32",     DK_F32, 2, {700, 64},        3, {2, 3},          0,  R, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"vyv_lines32_f64",     DK_F64, 2, {500, 96},        3, {3, 2},          0,  W, EX, 0, 0,    1, 1, VY, 5, 0, 0, {1, 0}},
    /* both of the last two float32 axes in one pass where a backend fuses them (cuda's k_fused_iir) */
    {"deriche_2d_fused",    DK_F32, 2, {300, 257},       3, {2, 2},          0,  R, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"deriche_3d_fused_cval", DK_F32, 3, {3, 181, 90},   6, {0, 2, 1},       0,  V, EX, 0, 0,    0, 1, DE, 5, -3, 0, {0}},
    {"deriche_fused_small_wrap", DK_F32, 2, {7, 5},      3, {2, 2},          0,  W, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
    {"vyv4_2d_fused_mirror", DK_F32, 2, {200, 150},      3, {1, 0.7},        0,  M, EX, 0, 0,    0, 1, VY, 4, 0, 0, {0}},
    {"deriche_2d_fused_nearest", DK_F32, 2, {150, 160},  3, {1.5, 1},        0,  N, EX, 0, 0,    0, 1, DE, 5, 0, 0, {0}},
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define FIRST_RANDOM 27

static void draw_random_cases(void)
{
    static char names[NCASES][24];
    static const int Ks[] = {1, 2, 3, 4, 5, 8, 16, 50, 200};
    uint64_t st = 0xca5e5eedu;
    for (int i = FIRST_RANDOM; i < FIRST_RANDOM + 16; i++) {
        gauss_case *c = &cases[i];
        snprintf(names[i], sizeof names[i], "random_%02d", i - FIRST_RANDOM);
        c->name = names[i];
        c->dtype = cli_random(&st) < 0 ? DK_F32 : DK_F64;
        c->ndim = 1 + (int)((cli_random(&st) + 1) * 1.5);
        size_t budget = 200000;
        for (int a = 0; a < c->ndim; a++) {
            double room = pow((double)budget, 1.0 / (c->ndim - a));
            c->shape[a] = 1 + (size_t)((cli_random(&st) + 1) / 2 * room);
            budget /= c->shape[a];
            c->sigma[a] = 0.5 * pow(100.0, (cli_random(&st) + 1) / 2); /* 0.5 .. 50, log-uniform */
        }
        do
            c->axes = (unsigned)((cli_random(&st) + 1) / 2 * (1 << c->ndim)) & ((1u << c->ndim) - 1);
        while (!c->axes);
        c->K = Ks[(int)((cli_random(&st) + 1) / 2 * 9) % 9];
        c->boundary = cli_random(&st) < 0 ? Z : C;
        c->mode = cli_random(&st) < 0.5 ? EX : OV;
        c->overlap = (size_t)((cli_random(&st) + 1) * 10);
        c->blocks = 1 + (size_t)((cli_random(&st) + 1) * 40);
        c->inplace = cli_random(&st) < -0.5;
    }
}

typedef struct matrix_shape {
    int ndim;
    size_t shape[3];
    unsigned axes;
    double sigma[3];
    int order[3];
} matrix_shape;

/* One case of a matrix: method (named `label`) x boundary b x dtype (t 1:
 * float64) on shape sh; the caller sets inplace and quick. */
static void matrix_case(gauss_case *c, char *name, size_t len, const char *label, dk_gauss_method method,
                        int poles, int b, int t, const matrix_shape *sh, double cval)
{
    snprintf(name, len, "%s_%s_%s", label, dk_gauss_boundary_name((dk_boundary)b), t ? "f64" : "f32");
    c->name = name;
    c->dtype = t ? DK_F64 : DK_F32;
    c->ndim = sh->ndim;
    memcpy(c->shape, sh->shape, sizeof c->shape);
    c->axes = sh->axes;
    memcpy(c->sigma, sh->sigma, sizeof c->sigma);
    memcpy(c->order, sh->order, sizeof c->order);
    c->K = 3;
    c->boundary = (dk_boundary)b;
    c->mode = EX;
    c->method = method;
    c->poles = poles;
    c->cval = b == V ? cval : 0;
}

/* Method x boundary x dtype, each on a shape of its own so that 1-D, 2-D
 * and 3-D, strided and contiguous axes, in place and not, all come up. */
static void draw_matrix_cases(void)
{
    static char names[MATRIX_CASES][40];
    static const char *const method_names[MATRIX_METHODS] = {"rf", "deriche", "vyv5", "vyv3"};
    static const matrix_shape shapes[] = {
        {1, {1000}, 1, {3}, {0}},
        {2, {64, 81}, 3, {2.5, 6}, {0}},
        {3, {12, 40, 9}, 2, {0, 4, 0}, {0}},
        {2, {33, 500}, 2, {0, 30}, {0}},
        {1, {61}, 1, {12}, {0}},
    };
    int i = 0;
    for (int m = 0; m < MATRIX_METHODS; m++)
        for (int b = 0; b < DK_BOUNDARY_COUNT; b++)
            for (int t = 0; t < 2; t++, i++) {
                gauss_case *c = &cases[FIRST_MATRIX + i];
                int sh = (m + 2 * b + t) % (int)(sizeof shapes / sizeof shapes[0]);
                matrix_case(c, names[i], sizeof names[i], method_names[m], m == 0 ? RF : m == 1 ? DE : VY,
                            m == 3 ? 3 : 5, b, t, &shapes[sh], 1.5);
                c->inplace = (i % 3) == 0;
                c->quick = 1;
            }
}

/* Derivatives (order 1 or 2 on some axes, 0 on others) for deriche and vyv
 * under every boundary and dtype, on shapes that put a derivative on a
 * strided and on a contiguous axis. */
static void draw_derivative_cases(void)
{
    static char names[DERIVATIVE_CASES][48];
    static const matrix_shape shapes[] = {
        {1, {2000}, 1, {4}, {1}},
        {2, {70, 90}, 3, {3, 2}, {2, 1}},
        {1, {301}, 1, {25}, {2}},
        {2, {48, 300}, 3, {1.5, 8}, {0, 1}},
        {3, {10, 30, 20}, 7, {2, 3, 2}, {1, 0, 2}},
    };
    int i = 0;
    for (int m = 0; m < 2; m++)
        for (int b = 0; b < DK_BOUNDARY_COUNT; b++)
            for (int t = 0; t < 2; t++, i++) {
                gauss_case *c = &cases[FIRST_DERIVATIVE + i];
                int sh = (3 * m + 2 * b + t) % (int)(sizeof shapes / sizeof shapes[0]);
                matrix_case(c, names[i], sizeof names[i], m ? "derivative_vyv" : "derivative_deriche",
                            m ? VY : DE, 5, b, t, &shapes[sh], -0.5);
                c->inplace = (i % 4) == 1;
                c->quick = (i % 2) == 0;
            }
}

static struct {
    void *in, *ref, *out;
    double amplification; /* deriche / vyv: the reference's float32 rounding error, in units */
} prepared[NCASES];

/* deriche and vyv are not convex combinations: a section with poles near 1
 * (large sigma) amplifies rounding by far more than rf's passes do, so
 * their tolerance is measured, not derived: the float32 reference against
 * the float64 one on the same values gives the algorithm's own rounding
 * error A (in units of float32 roundoff times max|x|). Two correct
 * evaluations in another order are each that far from the exact result,
 * so they differ by up to 2A; the tolerance is 4 A units of the case's
 * dtype, never less than rf's formula. */
static void desc_of(const gauss_case *c, dk_gauss_desc *d);
static size_t count_of(const gauss_case *c);

static double measure_amplification(const gauss_case *c, const void *in)
{
    dk_gauss_desc d;
    desc_of(c, &d);
    size_t n = count_of(c);
    float *x32 = malloc(n * sizeof *x32), *y32 = malloc(n * sizeof *y32);
    double *x64 = malloc(n * sizeof *x64), *y64 = malloc(n * sizeof *y64);
    double amp = INFINITY;
    if (x32 && y32 && x64 && y64) {
        double maxin = 0, maxdiff = 0;
        for (size_t k = 0; k < n; k++) {
            x32[k] = (float)(c->dtype == DK_F32 ? ((const float *)in)[k] : ((const double *)in)[k]);
            x64[k] = x32[k];
            maxin = fmax(maxin, fabs(x64[k]));
        }
        d.dtype = DK_F32;
        dk_status st = dk_gauss_reference(&d, x32, y32);
        d.dtype = DK_F64;
        if (st == DK_OK && dk_gauss_reference(&d, x64, y64) == DK_OK) {
            for (size_t k = 0; k < n; k++)
                maxdiff = fmax(maxdiff, fabs((double)y32[k] - y64[k]));
            amp = maxin > 0 ? maxdiff / maxin / 0x1p-24 : 0;
        }
    }
    free(x32);
    free(y32);
    free(x64);
    free(y64);
    return amp;
}

static int gauss_count(void)
{
    if (!cases[FIRST_RANDOM].name) {
        draw_random_cases();
        draw_matrix_cases();
        draw_derivative_cases();
    }
    return NCASES;
}
static const char *gauss_name(int i) { return cases[i].name; }
static int gauss_quick(int i) { return cases[i].quick; }

static void desc_of(const gauss_case *c, dk_gauss_desc *d)
{
    dk_gauss_desc_init(d);
    d->dtype = c->dtype;
    d->ndim = c->ndim;
    for (int a = 0; a < c->ndim; a++) {
        d->shape[a] = c->shape[a];
        d->sigma[a] = c->sigma[a];
    }
    d->axes = c->axes;
    d->K = c->K ? c->K : d->K; /* deriche and vyv cases leave K alone */
    d->boundary = c->boundary;
    d->mode = c->mode;
    d->overlap = c->overlap;
    d->blocks = c->blocks;
    d->method = c->method;
    d->order_poles = c->method == DK_GAUSS_VYV ? c->poles : 5;
    d->cval = c->cval;
    for (int a = 0; a < c->ndim; a++)
        d->order[a] = c->order[a];
}

static size_t count_of(const gauss_case *c)
{
    size_t n = 1;
    for (int a = 0; a < c->ndim; a++)
        n *= c->shape[a];
    return n;
}

static dk_status gauss_prepare(int i, char *err, size_t len)
{
    const gauss_case *c = &cases[i];
    size_t bytes = count_of(c) * dk_dtype_size(c->dtype);
    prepared[i].in = malloc(bytes);
    prepared[i].ref = malloc(bytes);
    prepared[i].out = malloc(bytes);
    if (!prepared[i].in || !prepared[i].ref || !prepared[i].out) {
        snprintf(err, len, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    cli_fill_random(prepared[i].in, c->dtype, count_of(c), 0x5eed0000u + (uint64_t)i);
    if (c->method != DK_GAUSS_RF)
        prepared[i].amplification = measure_amplification(c, prepared[i].in);
    for (size_t k = 5; c->missing && k < count_of(c); k += 13) {
        if (c->dtype == DK_F32)
            ((float *)prepared[i].in)[k] = NAN;
        else
            ((double *)prepared[i].in)[k] = NAN;
    }
    dk_gauss_desc d;
    desc_of(c, &d);
    dk_status st = dk_gauss_reference_nan(&d, c->missing ? DK_GAUSS_NAN_IGNORE : DK_GAUSS_NAN_PROPAGATE,
                                          prepared[i].in, prepared[i].ref);
    if (st != DK_OK)
        snprintf(err, len, "%s", dk_last_error(NULL));
    return st;
}

static void gauss_release(int i)
{
    free(prepared[i].in);
    free(prepared[i].ref);
    free(prepared[i].out);
    memset(&prepared[i], 0, sizeof prepared[i]);
}

static double value(const void *p, dk_dtype t, size_t k)
{
    return t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
}

/* The case's tolerance: rf's is derived from K and the axes; deriche's and
 * vyv's are measured (above). */
static double tolerance_of(int i)
{
    const gauss_case *c = &cases[i];
    double eps = c->dtype == DK_F64 ? 0x1p-53 : 0x1p-24;
    int naxes = __builtin_popcount(c->axes);
    double plain = c->method == DK_GAUSS_RF
                       ? (2.0 * c->K * naxes + 4.0) * 2.0 * eps
                       : fmax((2.0 * naxes + 4.0) * 2.0 * eps, 4.0 * prepared[i].amplification * eps);
    /* missing values: three filtered fields (data, weights, ones) and a
     * quotient whose weights stay above 1/2 with one value in 13 missing */
    return c->missing ? 8.0 * plain : plain;
}

static void gauss_run(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const gauss_case *c = &cases[i];
    size_t n = count_of(c), bytes = n * dk_dtype_size(c->dtype);
    dk_gauss_desc d;
    desc_of(c, &d);
    d.variant = variant;
    r->tolerance = tolerance_of(i);
    r->error = INFINITY;
    r->passed = 0;

    dk_plan *plan = NULL;
    dk_buffer *bin = NULL, *bout = NULL;
    dk_status st;
    if ((st = dk_gauss_plan_create(ctx, &d, &plan)) != DK_OK ||
        (!c->missing && (st = dk_buffer_create(ctx, bytes, &bin)) != DK_OK) ||
        (!c->missing && !c->inplace && (st = dk_buffer_create(ctx, bytes, &bout)) != DK_OK)) {
        snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
        /* an optional method or mode the backend says it lacks (gauss_features) */
        r->not_implemented = !plan && st == DK_ERR_NOT_IMPLEMENTED &&
                             (c->method != DK_GAUSS_RF || c->boundary >= DK_BOUNDARY_REFLECT);
        goto done;
    }
    /* poison the output so an element the backend never wrote shows up */
    memset(prepared[i].out, 0xff, bytes);
    if (c->missing) { /* on host memory, where the nan policy applies */
        if ((st = dk_gauss_plan_set_nan(plan, DK_GAUSS_NAN_IGNORE)) != DK_OK ||
            (st = dk_gauss_execute_host(plan, prepared[i].in, prepared[i].out)) != DK_OK)
            goto fail;
    } else {
        if (!c->inplace && (st = dk_buffer_write(bout, prepared[i].out, bytes)) != DK_OK)
            goto fail;
        if ((st = dk_buffer_write(bin, prepared[i].in, bytes)) != DK_OK)
            goto fail;
        if ((st = dk_gauss_execute(plan, bin, c->inplace ? bin : bout)) != DK_OK)
            goto fail;
        if ((st = dk_buffer_read(c->inplace ? bin : bout, prepared[i].out, bytes)) != DK_OK)
            goto fail;
    }

    double maxdiff = 0, maxin = 0;
    size_t worst = 0;
    for (size_t k = 0; k < n; k++) {
        double y = value(prepared[i].out, c->dtype, k), ref = value(prepared[i].ref, c->dtype, k);
        double x = fabs(value(prepared[i].in, c->dtype, k));
        if (x > maxin)
            maxin = x;
        double diff = isnan(y) && isnan(ref) ? 0.0 : fabs(y - ref); /* no estimate on both sides agrees */
        if (!(diff <= maxdiff)) { /* NaN counts as the worst */
            maxdiff = isnan(diff) ? INFINITY : diff;
            worst = k;
        }
    }
    r->error = maxin > 0 ? maxdiff / maxin : maxdiff;
    r->passed = r->error <= r->tolerance;
    if (!r->passed)
        snprintf(r->detail, sizeof r->detail, "worst at element %zu: %.9g vs reference %.9g", worst,
                 value(prepared[i].out, c->dtype, worst), value(prepared[i].ref, c->dtype, worst));
    goto done;
fail:
    snprintf(r->detail, sizeof r->detail, "%s", dk_last_error(ctx));
done:
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);
    dk_plan_destroy(plan);
}

#ifdef DK_TOOLS_MPI
#include <dakit/mpi.h>

/* The values of box part (ndim axes of shape) of the C-order array src. */
static void box_of(const void *src, int ndim, const size_t *shape, const dk_mpi_part *part, size_t esize, char *dst)
{
    size_t lo[3] = {0, 0, 0}, ext[3] = {1, 1, 1}, sh[3] = {1, 1, 1};
    for (int a = 0; a < ndim; a++) {
        lo[a + 3 - ndim] = part->offset[a];
        ext[a + 3 - ndim] = part->extent[a];
        sh[a + 3 - ndim] = shape[a];
    }
    for (size_t i = 0; i < ext[0]; i++)
        for (size_t j = 0; j < ext[1]; j++) {
            size_t from = ((lo[0] + i) * sh[1] + lo[1] + j) * sh[2] + lo[2];
            memcpy(dst, (const char *)src + from * esize, ext[2] * esize);
            dst += ext[2] * esize;
        }
}

/* Exact mode: slabs along axis 0. Overlap mode splits no filtered axis: the
 * first unfiltered axis is cut, or rank 0 holds the whole field. */
static int gauss_run_ranks(dk_context *ctx, const char *variant, int i, conform_result *r)
{
    const gauss_case *c = &cases[i];
    size_t n = count_of(c), es = dk_dtype_size(c->dtype);
    dk_gauss_desc d;
    desc_of(c, &d);
    d.variant = variant;
    r->tolerance = tolerance_of(i);
    r->error = INFINITY;
    r->passed = 0;
    r->detail[0] = '\0';

    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (c->missing) {
        snprintf(r->detail, sizeof r->detail, "nan policy ignore (normalized convolution) is not distributed");
        return 1;
    }
    if (c->boundary == DK_BOUNDARY_WRAP && (c->axes & 1u) && size > 1) { /* axis 0 is the one cut */
        snprintf(r->detail, sizeof r->detail, "wrap on a split axis needs the far end's values: one process");
        return 1;
    }
    dk_mpi_part part;
    memset(&part, 0, sizeof part);
    int pieces[3] = {size, 1, 1}; /* slabs along axis 0, filtered or not, in either mode */
    dk_mpi_decompose(MPI_COMM_WORLD, c->ndim, c->shape, pieces, &part);
    size_t local = 1;
    for (int a = 0; a < c->ndim; a++)
        local *= part.extent[a];
    char *in = malloc(local * es + 1), *ref = malloc(local * es + 1), *out = c->inplace ? in : malloc(local * es + 1);
    dk_mpi_plan *plan = NULL;
    if (!in || !ref || !out) {
        snprintf(r->detail, sizeof r->detail, "rank %d: out of host memory", rank);
    } else {
        box_of(prepared[i].in, c->ndim, c->shape, &part, es, in);
        box_of(prepared[i].ref, c->ndim, c->shape, &part, es, ref);
        if (!c->inplace)
            memset(out, 0xff, local * es);
    }
    /* on the backend's buffers, as a caller whose field lives on the device
     * runs it: halos go device to device where every rank has its own */
    dk_buffer *bin = NULL, *bout = NULL;
    int ok = in && ref && out && dk_buffer_create(ctx, local * es + 1, &bin) == DK_OK &&
             (c->inplace || dk_buffer_create(ctx, local * es + 1, &bout) == DK_OK) &&
             dk_buffer_write(bin, in, local * es) == DK_OK;
    if (in && ref && out && !ok)
        snprintf(r->detail, sizeof r->detail, "rank %d: %s", rank, dk_last_error(ctx));
    int planned = dk_mpi_gauss_plan_create(ctx, MPI_COMM_WORLD, &d, &part, &plan) == DK_OK;
    if (!planned || dk_mpi_gauss_execute(plan, ok ? bin : NULL, ok ? (c->inplace ? bin : bout) : NULL) != DK_OK) {
        if (ok || !planned)
            snprintf(r->detail, sizeof r->detail, "%s", dk_mpi_last_error());
    } else if (ok && dk_buffer_read(c->inplace ? bin : bout, out, local * es) != DK_OK) {
        snprintf(r->detail, sizeof r->detail, "rank %d: %s", rank, dk_last_error(ctx));
    } else if (ok) {
        double maxdiff = 0, maxin = 0;
        for (size_t k = 0; k < n; k++)
            maxin = fmax(maxin, fabs(value(prepared[i].in, c->dtype, k)));
        for (size_t k = 0; k < local; k++) {
            double diff = fabs(value(out, c->dtype, k) - value(ref, c->dtype, k));
            maxdiff = diff <= maxdiff ? maxdiff : isnan(diff) ? INFINITY : diff;
        }
        r->error = maxin > 0 ? maxdiff / maxin : maxdiff;
        r->passed = r->error <= r->tolerance;
        snprintf(r->detail, sizeof r->detail, "rank %d of %d: its slab along axis 0, halos: %s", rank, size,
                 dk_mpi_plan_transport(plan));
    }
    dk_mpi_plan_destroy(plan);
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);
    if (out != in)
        free(out);
    free(in);
    free(ref);
    conform_ranks_agree(r);
    return 0;
}
#endif

const conform_suite conform_gauss = {
    .algo = "gauss",
    .measure = "max|y-ref|/max|x|",
    .count = gauss_count,
    .name = gauss_name,
    .quick = gauss_quick,
    .variants = dk_gauss_variants,
    .prepare = gauss_prepare,
    .run = gauss_run,
    .release = gauss_release,
#ifdef DK_TOOLS_MPI
    .run_ranks = gauss_run_ranks,
#endif
};
