#define _GNU_SOURCE
/* dakit letkf on the command line: small cases (cartesian 2-D with a
 * periodic axis, Yb from a sparse H, the sphere with a vertical coordinate
 * and a cap, float32) run through the command on a backend and checked
 * against the serial reference computed here, with the diagnostics (nobs,
 * spread, O-B, O-A) against their definitions; then every kind of bad
 * input refused with a sentence and a non-zero exit, writing nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dakit/dakit.h>

#include "check.h"
#include "cli/npy.h"

static char dir[256];
static const char *dakit, *backend;
static char output[16384];

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static const char *at(const char *name)
{
    static char paths[8][512];
    static int slot;
    char *p = paths[slot++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void put(const char *name, int ndim, size_t r, size_t c, const double *v)
{
    char err[512];
    size_t shape[2] = {r, c};
    if (npy_write_typed(at(name), "<f8", 8, ndim, shape, v, err, sizeof err) != DK_OK) {
        printf("cannot write %s: %s\n", name, err);
        exit(1);
    }
}

static double *get(const char *name, size_t count)
{
    npy_array a;
    char err[512];
    if (npy_read(at(name), &a, err, sizeof err) != DK_OK || a.count != count || a.dtype != DK_F64) {
        printf("FAIL cannot read %s as %zu float64 values: %s\n", name, count, err);
        failures++;
        return NULL;
    }
    return a.data;
}

/* An int32 .npy (npy_read takes floats only): the values after the header. */
static int32_t *get_i32(const char *name, size_t count)
{
    FILE *f = fopen(at(name), "rb");
    unsigned char head[10];
    int32_t *v = malloc(count * sizeof *v);
    int ok = f && v && fread(head, 1, 10, f) == 10 && head[6] == 1;
    if (ok) {
        size_t hl = (size_t)head[8] | (size_t)head[9] << 8;
        char dict[512] = {0};
        ok = hl < sizeof dict && fread(dict, 1, hl, f) == hl && strstr(dict, "'<i4'") &&
             fread(v, sizeof *v, count, f) == count && fgetc(f) == EOF;
    }
    if (f)
        fclose(f);
    if (!ok) {
        printf("FAIL cannot read %s as %zu int32 values\n", name, count);
        failures++;
        free(v);
        return NULL;
    }
    return v;
}

static int run(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd %s && %s letkf %s 2>&1", dir, dakit, args);
    FILE *p = popen(cmd, "r");
    size_t n = fread(output, 1, sizeof output - 1, p);
    output[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static double max_rel(const double *a, const double *b, size_t n)
{
    double e = 0, s = 1e-300;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    return e / s;
}

/* A case: sizes, coordinates, ensembles, and the description the command
 * gets through its options. */
typedef struct lcase {
    const char *name;
    size_t n, k, m;
    int d;
    dk_letkf_desc desc;
    double *grid, *obs, *xb, *yb, *yo, *r;
    /* H: each observation a weighted sum of two points (CSR) */
    int64_t *indptr, *indices;
    double *values;
} lcase;

static void make_case(lcase *c, uint64_t seed)
{
    uint64_t s = seed;
    const size_t n = c->n, k = c->k, m = c->m;
    const int d = c->d;
    c->grid = malloc(n * d * sizeof(double));
    c->obs = malloc(m * d * sizeof(double));
    c->xb = malloc(n * k * sizeof(double));
    c->yb = malloc(m * k * sizeof(double));
    c->yo = malloc(m * sizeof(double));
    c->r = malloc(m * sizeof(double));
    c->indptr = malloc((m + 1) * sizeof(int64_t));
    c->indices = malloc(2 * m * sizeof(int64_t));
    c->values = malloc(2 * m * sizeof(double));
    int sphere = c->desc.metric == DK_LETKF_SPHERE;
    for (size_t i = 0; i < n; i++)
        for (int a = 0; a < d; a++)
            c->grid[i * d + a] = sphere ? (a == 0 ? 360 * urand(&s) - 180 : a == 1 ? 60 * urand(&s) + 20 : 10 * urand(&s))
                                        : 10 * urand(&s);
    for (size_t i = 0; i < n * k; i++)
        c->xb[i] = sin(0.1 * (double)i) + urand(&s) - 0.5;
    for (size_t j = 0; j < m; j++) {
        /* near point p, a mix of p and q */
        size_t p = (size_t)(urand(&s) * n), q = (size_t)(urand(&s) * n);
        for (int a = 0; a < d; a++)
            c->obs[j * d + a] = c->grid[p * d + a] + (sphere && a < 2 ? 0.5 : 0.3) * (urand(&s) - 0.5);
        if (sphere)
            c->obs[j * d + 1] = fmin(90, fmax(-90, c->obs[j * d + 1]));
        c->indptr[j] = (int64_t)(2 * j);
        c->indices[2 * j] = (int64_t)p;
        c->indices[2 * j + 1] = (int64_t)q;
        c->values[2 * j] = 0.75;
        c->values[2 * j + 1] = 0.25;
        for (size_t l = 0; l < k; l++)
            c->yb[j * k + l] = 0.75 * c->xb[p * k + l] + 0.25 * c->xb[q * k + l];
        c->yo[j] = c->yb[j * k] + urand(&s) - 0.5;
        c->r[j] = 0.2 + urand(&s);
    }
    c->indptr[m] = (int64_t)(2 * m);
    c->desc.n = n;
    c->desc.members = k;
    c->desc.m = m;
    c->desc.ncoords = d;
    c->desc.grid_coords = c->grid;
    c->desc.obs_coords = c->obs;
}

static void free_case(lcase *c)
{
    free(c->grid), free(c->obs), free(c->xb), free(c->yb), free(c->yo), free(c->r);
    free(c->indptr), free(c->indices), free(c->values);
}

static void write_case(const lcase *c)
{
    put("xb.npy", 2, c->n, c->k, c->xb);
    put("yb.npy", 2, c->m, c->k, c->yb);
    put("yo.npy", 1, c->m, 1, c->yo);
    put("r.npy", 1, c->m, 1, c->r);
    put("grid.npy", c->d == 1 ? 1 : 2, c->n, (size_t)c->d, c->grid);
    put("obs.npy", c->d == 1 ? 1 : 2, c->m, (size_t)c->d, c->obs);
    FILE *f = fopen(at("H.mtx"), "w");
    fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n%zu %zu %zu\n", c->m, c->n, 2 * c->m);
    for (size_t e = 0; e < 2 * c->m; e++)
        fprintf(f, "%zu %lld %.17g\n", e / 2 + 1, (long long)c->indices[e] + 1, c->values[e]);
    fclose(f);
}

/* The command on a case against the reference: Xa, nobs, spread and the
 * departures. with_h: Yb from --H (and --oma) instead of --yb. */
static void check_case(lcase *c, const char *options, int with_h, const char *r_option)
{
    write_case(c);
    char args[4096];
    snprintf(args, sizeof args,
             "--xb xb.npy %s --yo yo.npy %s --grid-coords grid.npy --obs-coords obs.npy --out xa.npy --nobs "
             "nobs.npy --spread spread.npy --omb omb.npy %s --backend %s %s",
             with_h ? "--H H.mtx" : "--yb yb.npy", r_option, with_h ? "--oma oma.npy" : "", backend, options);
    int rc = run(args);
    CHECK(rc == 0, "%s: dakit letkf %s exited %d:\n%s", c->name, args, rc, output);
    if (rc != 0)
        return;
    CHECK(strstr(output, "observations per point"), "%s: no summary line:\n%s", c->name, output);
    const size_t n = c->n, k = c->k, m = c->m;
    double *r = c->r;
    double rv;
    if (sscanf(r_option, "--r-value %lf", &rv) == 1) {
        r = malloc(m * sizeof *r);
        for (size_t j = 0; j < m; j++)
            r[j] = rv;
    }
    /* the reference in the case's dtype, from the same float64 inputs */
    int f32 = c->desc.dtype == DK_F32;
    void *xb = c->xb, *yb = c->yb, *xa = malloc(n * k * 8);
    if (f32) {
        float *x = malloc(n * k * 4), *y = malloc(m * k * 4);
        for (size_t i = 0; i < n * k; i++)
            x[i] = (float)c->xb[i];
        for (size_t i = 0; i < m * k; i++)
            y[i] = (float)c->yb[i];
        xb = x, yb = y;
    }
    int32_t *nobs = malloc(n * sizeof *nobs);
    double *spread = malloc(n * sizeof *spread), *xa64 = malloc(n * k * sizeof *xa64);
    dk_status st = dk_letkf_reference(&c->desc, xb, yb, c->yo, r, xa, nobs, spread);
    CHECK(st == DK_OK, "%s: the reference failed: %s", c->name, dk_last_error(NULL));
    for (size_t i = 0; i < n * k; i++)
        xa64[i] = f32 ? (double)((float *)xa)[i] : ((double *)xa)[i];
    double tol = f32 ? 1e-6 : 1e-12;
    double *got = get("xa.npy", n * k), *gs = get("spread.npy", n);
    int32_t *gn = get_i32("nobs.npy", n);
    if (got)
        CHECK(max_rel(got, xa64, n * k) <= tol, "%s: Xa differs from the reference by %.3g (relative)", c->name,
              max_rel(got, xa64, n * k));
    if (gs)
        CHECK(max_rel(gs, spread, n) <= tol, "%s: the spread differs from the reference by %.3g", c->name,
              max_rel(gs, spread, n));
    long used = 0, differ = 0;
    for (size_t i = 0; gn && i < n; i++) {
        used += nobs[i];
        differ += gn[i] != nobs[i];
    }
    CHECK(gn && differ == 0, "%s: nobs differs from the reference at %ld points", c->name, differ);
    CHECK(used > (long)n, "%s: the case is too sparse to test anything (%ld observations used in all)", c->name, used);
    /* O-B and O-A from their definition: yo - the member mean of Yb, of H Xa */
    double *omb = malloc(m * sizeof *omb), *oma = malloc(m * sizeof *oma);
    for (size_t j = 0; j < m; j++) {
        double sb = 0, sa = 0;
        for (size_t l = 0; l < k; l++) {
            sb += f32 ? (double)((float *)yb)[j * k + l] : c->yb[j * k + l];
            for (int64_t e = c->indptr[j]; e < c->indptr[j + 1]; e++)
                sa += c->values[e] * xa64[(size_t)c->indices[e] * k + l];
        }
        omb[j] = c->yo[j] - sb / (double)k;
        oma[j] = c->yo[j] - sa / (double)k;
    }
    double *gomb = get("omb.npy", m);
    if (gomb)
        CHECK(max_rel(gomb, omb, m) <= tol, "%s: O-B differs by %.3g", c->name, max_rel(gomb, omb, m));
    if (with_h) {
        double *goma = get("oma.npy", m);
        if (goma) {
            CHECK(max_rel(goma, oma, m) <= tol, "%s: O-A differs by %.3g", c->name, max_rel(goma, oma, m));
            double ssb = 0, ssa = 0;
            for (size_t j = 0; j < m; j++)
                ssb += omb[j] * omb[j], ssa += oma[j] * oma[j];
            CHECK(ssa < ssb, "%s: the analysis is no closer to the observations than the background (%g >= %g)",
                  c->name, ssa, ssb);
        }
        free(goma);
    }
    printf("%s %s: Xa, nobs (%.1f a point), spread, O-B%s agree with the reference\n", failures ? "    " : "ok  ",
           c->name, (double)used / (double)n, with_h ? ", O-A" : "");
    free(gomb), free(omb), free(oma), free(got), free(gs), free(gn);
    free(nobs), free(spread), free(xa64), free(xa);
    if (f32)
        free(xb), free(yb);
    if (r != c->r)
        free(r);
}

static int exists(const char *name)
{
    struct stat sb;
    return stat(at(name), &sb) == 0;
}

/* A bad run: non-zero exit, the sentence holds needle, no output written. */
static void refused(const char *args, const char *needle, const char *what)
{
    unlink(at("bad.npy"));
    int rc = run(args);
    char *last = output + strlen(output);
    while (last > output && last[-1] == '\n')
        *--last = '\0';
    int ok = rc != 0 && rc != 128 && output[0] && strstr(output, needle) && !exists("bad.npy");
    CHECK(ok, "%s: expected a refusal holding '%s' (exit %d):\n%s", what, needle, rc, output);
    if (ok)
        printf("ok   refused %s: %s\n", what, strrchr(output, '\n') ? strrchr(output, '\n') + 1 : output);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: test_letkf_cli PATH-TO-dakit BACKEND\n");
        return 2;
    }
    static char dakit_path[4096];
    if (!realpath(argv[1], dakit_path)) {
        printf("cannot find %s\n", argv[1]);
        return 2;
    }
    dakit = dakit_path;
    backend = argv[2];
    snprintf(dir, sizeof dir, "/tmp/dakit-letkf-cli-%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        printf("cannot make %s\n", dir);
        return 1;
    }
    dk_context *ctx = NULL;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        printf("SKIP: no %s backend here: %s\n", backend, dk_last_error(NULL));
        return 77;
    }
    dk_plan *probe = NULL;
    {
        double g = 0;
        dk_letkf_desc d;
        dk_letkf_desc_init(&d);
        d.n = d.m = 1, d.members = 2, d.ncoords = 1, d.radius = 1, d.grid_coords = d.obs_coords = &g;
        if (dk_letkf_plan_create(ctx, &d, &probe) == DK_ERR_NOT_IMPLEMENTED) {
            printf("SKIP: the %s backend has no letkf: %s\n", backend, dk_last_error(ctx));
            dk_context_destroy(ctx);
            return 77;
        }
        dk_plan_destroy(probe);
        dk_context_destroy(ctx);
    }

    /* 2-D cartesian, x periodic with period 10, RTPS, inflation */
    lcase a = {.name = "cartesian 2-D, periodic x, rtps", .n = 120, .k = 8, .m = 60, .d = 2};
    dk_letkf_desc_init(&a.desc);
    a.desc.radius = 3.5;
    a.desc.period[0] = 10;
    a.desc.inflation = 1.1;
    a.desc.rtps = 0.5;
    make_case(&a, 1);
    check_case(&a, "--radius 3.5 --period 10,0 --inflation 1.1 --rtps 0.5", 0, "--r r.npy");
    /* the same through the serial reference of the command */
    {
        int rc = run("--xb xb.npy --yb yb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy "
                     "--radius 3.5 --period 10,0 --inflation 1.1 --rtps 0.5 --out xa_ref.npy --reference");
        CHECK(rc == 0, "--reference exited %d:\n%s", rc, output);
        double *x1 = get("xa.npy", a.n * a.k), *x2 = get("xa_ref.npy", a.n * a.k);
        if (x1 && x2)
            CHECK(max_rel(x1, x2, a.n * a.k) <= 1e-12, "--reference and --backend differ by %.3g",
                  max_rel(x1, x2, a.n * a.k));
        free(x1), free(x2);
    }
    free_case(&a);

    /* Yb = H Xb from a MatrixMarket H, one variance for all, RTPP, 1-D */
    lcase b = {.name = "1-D, Yb from --H, --r-value, rtpp", .n = 50, .k = 5, .m = 30, .d = 1};
    dk_letkf_desc_init(&b.desc);
    b.desc.radius = 2.0;
    b.desc.rtpp = 0.3;
    make_case(&b, 2);
    check_case(&b, "--radius 2 --rtpp 0.3", 1, "--r-value 0.5");
    free_case(&b);

    /* the sphere with a vertical coordinate, a cap, float32 */
    lcase c = {.name = "sphere + vertical, max-obs 6, float32", .n = 80, .k = 12, .m = 200, .d = 3};
    dk_letkf_desc_init(&c.desc);
    c.desc.metric = DK_LETKF_SPHERE;
    c.desc.radius = 3000;
    c.desc.vertical_radius = 6;
    c.desc.max_obs = 6;
    c.desc.dtype = DK_F32;
    make_case(&c, 3);
    check_case(&c, "--metric sphere --radius 3000 --vertical-radius 6 --max-obs 6 --dtype f32", 1, "--r r.npy");

    /* bad input: every one a sentence, a non-zero exit and no output */
    char good[1024], args[2048];
    snprintf(good, sizeof good,
             "--xb xb.npy --yb yb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --metric "
             "sphere --radius 3000 --vertical-radius 6 --backend %s",
             backend);
#define BAD(extra, needle, what)                                                                                  \
    do {                                                                                                          \
        snprintf(args, sizeof args, "%s %s --out bad.npy", good, extra);                                           \
        refused(args, needle, what);                                                                              \
    } while (0)
    refused("--xb xb.npy --out bad.npy", "required", "missing options");
    refused("--xb xb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --radius 1 --out bad.npy",
            "--yb", "neither --yb nor --H");
    BAD("--r-value 1", "exactly one", "both --r and --r-value");
    BAD("--oma o.npy", "--oma needs --H", "--oma without --H");
    BAD("--rtpp 0.5 --rtps 0.5", "choose one", "--rtpp with --rtps");
    BAD("--rtpp 1.5", "--rtpp must be", "--rtpp above 1");
    BAD("--metric flat", "--metric must be", "an unknown metric");
    BAD("--radius 0", "--radius must be", "a zero radius");
    BAD("--radius nan", "--radius must be", "a NaN radius");
    BAD("--inflation -1", "--inflation must be", "a negative inflation");
    BAD("--max-obs -3", "--max-obs must be", "a negative cap");
    BAD("--dtype f16", "--dtype must be", "an unknown dtype");
    BAD("--period 1,x", "--period must be", "a malformed period");
    BAD("--frobnicate 1", "unknown option", "an unknown option");
    snprintf(args, sizeof args, "%s --out bad.npy --radius", good);
    refused(args, "needs a value", "an option without its value");
    BAD("--reference", "no --backend", "--reference with --backend");
    /* files that do not fit */
    double v[600];
    for (int i = 0; i < 600; i++)
        v[i] = 0.1 * i;
    put("x1.npy", 1, c.n, 1, c.xb);
    BAD("--xb x1.npy", "N x k", "a 1-D Xb");
    put("xk1.npy", 2, c.n, 1, c.xb);
    BAD("--xb xk1.npy", "k = 1 members", "Xb with one member");
    put("ybshort.npy", 2, c.m - 1, c.k, c.yb);
    BAD("--yb ybshort.npy", "M x k", "Yb with too few rows");
    put("yo2.npy", 2, c.m, 1, c.yo);
    BAD("--yo yo2.npy", "is a vector", "a 2-D yo");
    put("rshort.npy", 1, c.m - 1, 1, c.r);
    BAD("--r rshort.npy", "one per observation", "r of the wrong length");
    double *r0 = malloc(c.m * sizeof *r0);
    memcpy(r0, c.r, c.m * sizeof *r0);
    r0[7] = 0;
    put("r0.npy", 1, c.m, 1, r0);
    BAD("--r r0.npy", "observation 7 is 0", "a zero variance");
    r0[7] = NAN;
    put("rnan.npy", 1, c.m, 1, r0);
    BAD("--r rnan.npy", "finite", "a NaN variance");
    free(r0);
    double *ynan = malloc(c.m * sizeof *ynan);
    memcpy(ynan, c.yo, c.m * sizeof *ynan);
    ynan[3] = INFINITY;
    put("yonan.npy", 1, c.m, 1, ynan);
    BAD("--yo yonan.npy", "finite", "an infinite observation");
    free(ynan);
    double *xnan = malloc(c.n * c.k * sizeof *xnan);
    memcpy(xnan, c.xb, c.n * c.k * sizeof *xnan);
    xnan[100] = NAN;
    put("xbnan.npy", 2, c.n, c.k, xnan);
    BAD("--xb xbnan.npy", "value 100", "NaN in Xb");
    free(xnan);
    put("gshort.npy", 2, c.n - 1, 3, c.grid);
    BAD("--grid-coords gshort.npy", "one per grid point", "grid coordinates of the wrong length");
    put("o2.npy", 2, c.m, 2, v);
    BAD("--obs-coords o2.npy", "share their columns", "observation coordinates with other columns");
    put("g4.npy", 2, 100, 4, v);
    BAD("--grid-coords g4.npy", "d from 1 to 3", "four coordinate columns");
    double *lat = malloc(c.n * 3 * sizeof *lat);
    memcpy(lat, c.grid, c.n * 3 * sizeof *lat);
    lat[3 * 5 + 1] = 95;
    put("glat.npy", 2, c.n, 3, lat);
    BAD("--grid-coords glat.npy", "[-90, 90]", "a latitude of 95 degrees");
    free(lat);
    snprintf(good, sizeof good,
             "--xb xb.npy --yb yb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --metric "
             "sphere --radius 3000 --backend %s",
             backend);
    BAD("", "lon, lat", "three columns on the sphere without --vertical-radius");
    snprintf(good, sizeof good,
             "--xb xb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --metric sphere --radius "
             "3000 --vertical-radius 6 --backend %s",
             backend);
    FILE *f = fopen(at("Hwide.mtx"), "w");
    fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n%zu %zu 1\n1 1 1.0\n", c.m, c.n + 1);
    fclose(f);
    BAD("--H Hwide.mtx", "M x N", "H of the wrong width");
    f = fopen(at("Hjunk.mtx"), "w");
    fprintf(f, "%%%%MatrixMarket matrix coordinate real general\n%zu %zu 2\n1 1 1.0\n2 x\n", c.m, c.n);
    fclose(f);
    BAD("--H Hjunk.mtx", "line 4", "a malformed MatrixMarket file");
    BAD("--H nosuch.mtx", "nosuch.mtx", "a missing H");
    snprintf(good, sizeof good,
             "--yb yb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --metric sphere --radius "
             "3000 --vertical-radius 6 --backend %s",
             backend);
    BAD("--xb missing.npy", "missing.npy", "a missing Xb");
    f = fopen(at("junk.npy"), "w");
    fputs("not an array\n", f);
    fclose(f);
    BAD("--xb junk.npy", "junk.npy", "a file that is no array");
    BAD("--xb xb.npy --weight-stride 2", "needs --grid-shape", "--weight-stride without --grid-shape");
    BAD("--xb xb.npy --weight-stride 2 --grid-shape 7,9", "holds 63 points", "a --grid-shape of the wrong size");
    BAD("--xb xb.npy --weight-stride 2,2,2 --grid-shape 7,9", "one per axis", "more strides than axes");
    BAD("--weight-stride 0 --grid-shape 7,9", "integer >= 1", "a stride of 0");
    BAD("--xb xb.npy --weight-stride 2 --grid-shape 7,9 --nobs n.npy", "not available with --weight-stride",
        "--nobs with --weight-stride");
    snprintf(good, sizeof good,
             "--xb xb.npy --yb yb.npy --yo yo.npy --r r.npy --grid-coords grid.npy --obs-coords obs.npy --metric "
             "sphere --radius 3000 --vertical-radius 6");
    BAD("--backend nosuch", "nosuch", "an unknown backend");
    snprintf(args, sizeof args, "%s --backend %s --out nofolder/xa.npy", good, backend);
    refused(args, "nofolder", "an output in a missing folder");
    snprintf(args, sizeof args, "%s --backend %s --out bad.npy --spread nofolder/s.npy", good, backend);
    refused(args, "nofolder", "a diagnostic output in a missing folder");
    free_case(&c);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("could not remove %s\n", dir);
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
