/* Bad input to the gauss API gets a clear status and sentence, never a
 * crash or a hang; NaN in the data propagates. Runs on every usable backend
 * and on the serial reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"

static void good_desc(dk_gauss_desc *d)
{
    dk_gauss_desc_init(d);
    d->method = DK_GAUSS_RF;
    d->boundary = DK_BOUNDARY_ZERO;
    d->ndim = 2;
    d->shape[0] = 20;
    d->shape[1] = 30;
    d->axes = 3;
    d->sigma[0] = d->sigma[1] = 2;
}

typedef struct bad_case {
    const char *what, *expect;
    void (*spoil)(dk_gauss_desc *d);
} bad_case;

static void sigma_zero(dk_gauss_desc *d) { d->sigma[1] = 0; }
static void sigma_negative(dk_gauss_desc *d) { d->sigma[0] = -1; }
static void sigma_nan(dk_gauss_desc *d) { d->sigma[0] = NAN; }
static void sigma_inf(dk_gauss_desc *d) { d->sigma[0] = INFINITY; }
static void k_zero(dk_gauss_desc *d) { d->K = 0; }
static void k_negative(dk_gauss_desc *d) { d->K = -3; }
static void zero_size(dk_gauss_desc *d) { d->shape[1] = 0; }
static void axis_out_of_range(dk_gauss_desc *d) { d->axes = 1u << 2; }
static void no_axis(dk_gauss_desc *d) { d->axes = 0; }
static void ndim_zero(dk_gauss_desc *d) { d->ndim = 0; }
static void ndim_four(dk_gauss_desc *d) { d->ndim = 4; }
static void bad_dtype(dk_gauss_desc *d) { d->dtype = (dk_dtype)9; }
static void bad_boundary(dk_gauss_desc *d) { d->boundary = (dk_boundary)DK_BOUNDARY_COUNT; }
static void bad_method(dk_gauss_desc *d) { d->method = (dk_gauss_method)7; }
static void vyv_six_poles(dk_gauss_desc *d) { d->method = DK_GAUSS_VYV; d->order_poles = 6; }
static void cval_nan(dk_gauss_desc *d) { d->boundary = DK_BOUNDARY_CVAL; d->cval = NAN; }
static void deriche_overlap(dk_gauss_desc *d) { d->method = DK_GAUSS_DERICHE; d->mode = DK_GAUSS_OVERLAP; }
static void overlap_reflect(dk_gauss_desc *d) { d->boundary = DK_BOUNDARY_REFLECT; d->mode = DK_GAUSS_OVERLAP; }
static void bad_mode(dk_gauss_desc *d) { d->mode = (dk_gauss_mode)5; }
static void zero_blocks(dk_gauss_desc *d) { d->mode = DK_GAUSS_OVERLAP; d->blocks = 0; }

static const bad_case bad[] = {
    {"sigma 0", "sigma for axis 1", sigma_zero},
    {"sigma < 0", "sigma for axis 0", sigma_negative},
    {"sigma NaN", "sigma for axis 0", sigma_nan},
    {"sigma inf", "finite", sigma_inf},
    {"K 0", "K is 0", k_zero},
    {"K < 0", "K is -3", k_negative},
    {"zero size", "shape[1] is 0", zero_size},
    {"axis out of range", "beyond the field", axis_out_of_range},
    {"no axis", "no axis", no_axis},
    {"ndim 0", "ndim is 0", ndim_zero},
    {"ndim 4", "ndim is 4", ndim_four},
    {"dtype", "dtype", bad_dtype},
    {"boundary", "boundary", bad_boundary},
    {"method", "method 7", bad_method},
    {"vyv 6 poles", "6 poles", vyv_six_poles},
    {"cval NaN", "cval", cval_nan},
    {"deriche overlap", "exact mode only", deriche_overlap},
    {"overlap reflect", "needs exact mode", overlap_reflect},
    {"mode", "mode", bad_mode},
    {"blocks 0", "blocks", zero_blocks},
};

/* The description's defaults: deriche with scipy's 'reflect', so that the
 * plainest call is scipy.ndimage.gaussian_filter's to the method's accuracy. */
static void check_defaults(dk_context *ctx, const char *name)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.ndim = 2;
    d.shape[0] = 20;
    d.shape[1] = 30;
    d.axes = 3;
    d.sigma[0] = 2;
    d.sigma[1] = 3;
    float x[600], y[600] = {0};
    double xd[600], want[600], direct[600];
    for (int i = 0; i < 600; i++)
        x[i] = (float)(xd[i] = (i % 11) - 3.0 * (i % 7 == 0));
    dk_plan *plan = NULL;
    CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_OK && dk_gauss_execute_host(plan, x, y) == DK_OK,
          "%s: the defaults: %s", name, dk_last_error(ctx));
    dk_plan_destroy(plan);
    dk_gauss_desc e = d;
    e.dtype = DK_F64;
    e.method = DK_GAUSS_DERICHE;
    e.boundary = DK_BOUNDARY_REFLECT;
    CHECK(dk_gauss_reference(&e, xd, want) == DK_OK && dk_gauss_direct(&e, xd, direct) == DK_OK, "%s",
          dk_last_error(NULL));
    double worst = 0, from_direct = 0;
    for (int i = 0; i < 600; i++) {
        worst = fmax(worst, fabs(y[i] - want[i]));
        from_direct = fmax(from_direct, fabs(want[i] - direct[i]));
    }
    /* 64 float32 rounding units of max|x| (10); rf or another boundary is 1e-2 or more away */
    CHECK(worst <= 64 * 0x1p-24 * 10, "%s: the defaults are not deriche with reflect (%.2e from it)", name, worst);
    CHECK(from_direct <= 1e-3, "%s: deriche with reflect is %.2e from the sampled Gaussian with reflect", name,
          from_direct);
    printf("%s: the defaults give deriche + reflect to %.1e; %.1e from the sampled Gaussian (max|x| 10)\n", name,
           worst, from_direct);
}

static void check_backend(const char *name)
{
    dk_context *ctx;
    if (dk_context_create(name, &ctx) != DK_OK) {
        printf("backend %s absent, its part skipped: %s\n", name, dk_last_error(NULL));
        return;
    }
    printf("backend %s (%s)\n", name, dk_context_device(ctx));
    check_defaults(ctx, name);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        dk_gauss_desc d;
        good_desc(&d);
        bad[k].spoil(&d);
        dk_plan *plan = (dk_plan *)&d; /* must be reset to NULL */
        dk_status st = dk_gauss_plan_create(ctx, &d, &plan);
        CHECK(st == DK_ERR_INVALID_ARGUMENT && plan == NULL, "%s: %s accepted (status %d)", name, bad[k].what, st);
        CHECK(strstr(dk_last_error(ctx), bad[k].expect), "%s: %s: message '%s' lacks '%s'", name, bad[k].what,
              dk_last_error(ctx), bad[k].expect);
    }
    dk_gauss_desc d;
    good_desc(&d);
    d.variant = "warp-drive";
    dk_plan *plan;
    CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_ERR_NOT_IMPLEMENTED, "unknown variant accepted");
    CHECK(strstr(dk_last_error(ctx), "offers"), "the message lists the variants: %s", dk_last_error(ctx));

    /* buffers too small, or NULL */
    good_desc(&d);
    CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_OK, "good plan: %s", dk_last_error(ctx));
    dk_buffer *small, *big;
    CHECK(dk_buffer_create(ctx, 16, &small) == DK_OK, "small buffer");
    CHECK(dk_buffer_create(ctx, 600 * sizeof(float), &big) == DK_OK, "big buffer");
    dk_buffer_destroy(big);
    CHECK(dk_buffer_create(ctx, 0, &big) == DK_ERR_INVALID_ARGUMENT && !big, "a 0-byte buffer is refused");
    CHECK(dk_buffer_create(ctx, 600 * sizeof(float), &big) == DK_OK, "big buffer");
    CHECK(dk_gauss_execute(plan, small, big) == DK_ERR_INVALID_ARGUMENT, "a short input buffer is refused");
    CHECK(strstr(dk_last_error(ctx), "bytes"), "%s", dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, big, NULL) == DK_ERR_INVALID_ARGUMENT, "NULL output refused");
    CHECK(dk_buffer_write(small, "0123456789abcdefXYZ", 19) == DK_ERR_INVALID_ARGUMENT, "overlong write refused");

    /* NaN: refused by default, with where it is, and the data untouched */
    float x[600], keep[600], plain[600], y[600];
    for (int i = 0; i < 600; i++)
        x[i] = (float)(i % 7);
    CHECK(dk_gauss_execute_host(plan, x, plain) == DK_OK, "plain: %s", dk_last_error(ctx));
    x[20 * 15 + 10] = NAN;
    memcpy(keep, x, sizeof x);
    CHECK(dk_gauss_execute_host(plan, x, x) == DK_ERR_INVALID_ARGUMENT, "NaN refused by default");
    CHECK(strstr(dk_last_error(ctx), "1 NaN value (the first at [10, 10])"), "%s", dk_last_error(ctx));
    CHECK(!memcmp(keep, x, sizeof x), "a refused call leaves the data as it was");
    CHECK(dk_gauss_plan_set_nan(plan, (dk_gauss_nan)7) == DK_ERR_INVALID_ARGUMENT, "policy 7 refused");
    /* ignore: every point has an estimate, and a field without NaN comes out
     * as the plain filter gives it */
    CHECK(dk_gauss_plan_set_nan(plan, DK_GAUSS_NAN_IGNORE) == DK_OK, "ignore: %s", dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, big, big) == DK_ERR_NOT_IMPLEMENTED, "ignore on device buffers refused");
    CHECK(dk_gauss_execute_host(plan, x, y) == DK_OK, "ignore: %s", dk_last_error(ctx));
    int finite = 1;
    for (int i = 0; i < 600; i++)
        finite &= isfinite(y[i]) != 0;
    CHECK(finite, "ignore leaves no NaN");
    CHECK(fabsf(y[20 * 15 + 10] - plain[20 * 15 + 10]) < 1.0f, "the gap filled from its neighbours: %g vs %g",
          y[20 * 15 + 10], plain[20 * 15 + 10]);
    for (int i = 0; i < 600; i++)
        y[i] = (float)(i % 7);
    CHECK(dk_gauss_execute_host(plan, y, y) == DK_OK, "ignore without NaN: %s", dk_last_error(ctx));
    float worst = 0;
    for (int i = 0; i < 600; i++)
        worst = fmaxf(worst, fabsf(y[i] - plain[i]));
    CHECK(worst <= 4e-6f, "ignore without NaN is the plain filter (to %g)", worst);
    /* propagate: NaN in, NaN out; how far it spreads differs (the serial
     * recursion carries it to the whole line, windowed backends to the
     * halo) */
    CHECK(dk_gauss_plan_set_nan(plan, DK_GAUSS_NAN_PROPAGATE) == DK_OK, "propagate: %s", dk_last_error(ctx));
    CHECK(dk_gauss_execute_host(plan, x, x) == DK_OK, "NaN data: %s", dk_last_error(ctx));
    CHECK(isnan(x[20 * 15 + 10]) && isnan(x[20 * 15 + 11]) && isnan(x[21 * 15 + 10]),
          "NaN propagates to its neighbours");
    dk_buffer_destroy(small);
    dk_buffer_destroy(big);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
}

int main(void)
{
    dk_gauss_desc init;
    dk_gauss_desc_init(&init);
    CHECK(init.method == DK_GAUSS_DERICHE && init.boundary == DK_BOUNDARY_REFLECT && init.mode == DK_GAUSS_EXACT &&
              init.dtype == DK_F32 && init.K == 4 && init.order[0] == 0 && init.cval == 0 && !init.variant,
          "dk_gauss_desc_init: method %s, boundary %s; deriche and reflect expected",
          dk_gauss_method_name(init.method), dk_gauss_boundary_name(init.boundary));

    /* the serial reference validates the same way */
    dk_gauss_desc d;
    good_desc(&d);
    d.K = 0;
    float x[600] = {0};
    CHECK(dk_gauss_reference(&d, x, x) == DK_ERR_INVALID_ARGUMENT, "reference accepts K 0");
    CHECK(strstr(dk_last_error(NULL), "K is 0"), "%s", dk_last_error(NULL));
    good_desc(&d);
    CHECK(dk_gauss_reference(&d, NULL, x) == DK_ERR_INVALID_ARGUMENT, "reference accepts NULL");
    CHECK(dk_gauss_plan_create(NULL, &d, NULL) == DK_ERR_INVALID_ARGUMENT, "NULL context refused");

    /* degenerate parameters: bounded precomputation, no NaN, or a sentence */
    {
        double ten[10], out[10];
        for (int i = 0; i < 10; i++)
            ten[i] = i;
        dk_gauss_desc g;
        dk_gauss_desc_init(&g);
        g.method = DK_GAUSS_RF;
        g.boundary = DK_BOUNDARY_ZERO;
        g.dtype = DK_F64;
        g.ndim = 1;
        g.shape[0] = 10;
        g.axes = 1;
        g.sigma[0] = 1000;
        g.K = 1000000; /* the halo comes from the Chernoff bound, capped by the line */
        CHECK(dk_gauss_reference(&g, ten, out) == DK_OK, "sigma 1000, K 10^6: %s", dk_last_error(NULL));
        int finite = 1;
        for (int i = 0; i < 10; i++)
            finite &= isfinite(out[i]);
        CHECK(finite, "sigma 1000, K 10^6 gives finite values");
        g.K = 4;
        g.sigma[0] = 1e-80; /* K/sigma^2 overflows: the identity filter */
        CHECK(dk_gauss_reference(&g, ten, out) == DK_OK && out[3] == 3.0 && out[9] == 9.0,
              "sigma 1e-80 leaves the field unchanged (out[3] = %g)", out[3]);
        g.sigma[0] = 1e9;
        CHECK(dk_gauss_reference(&g, ten, out) == DK_ERR_INVALID_ARGUMENT &&
                  strstr(dk_last_error(NULL), "at most 1e+07"),
              "sigma 1e9 refused: %s", dk_last_error(NULL));
        CHECK(dk_gauss_exact_halo(dk_gauss_alpha(2.0, 4), 4, DK_F32) > 0, "an ordinary halo");
    }

    int n = dk_backend_count();
    for (int i = 0; i < n; i++) {
        dk_backend_info b;
        if (dk_backend_get(i, &b) == DK_OK && b.usable && strstr(b.algorithms, "gauss"))
            check_backend(b.name);
    }
    check_backend("cuda"); /* reports its absence plainly when there is no GPU */
    return failures ? 1 : 0;
}
