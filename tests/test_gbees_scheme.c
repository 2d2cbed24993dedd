/* The GBEES scheme on problems with known answers: a Gaussian carried by a
 * constant velocity keeps its mass at 1 and moves its mean at that velocity;
 * a rigid rotation turns the mean by the angle and keeps the spread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"

static void translate_f(int dim, const double *x, const double *c, double *v)
{
    (void)x;
    for (int i = 0; i < dim; i++)
        v[i] = c[i];
}

static void rotate_f(int dim, const double *x, const double *c, double *v)
{
    (void)dim;
    v[0] = -c[0] * x[1];
    v[1] = c[0] * x[0];
}

static void identity_h(int dim, const double *x, const double *c, double *y)
{
    (void)c;
    for (int i = 0; i < dim; i++)
        y[i] = x[i];
}

/* Runs to t and returns mass, mean and standard deviations of the last snapshot. */
static int run(const dk_gbees_model *m, const dk_gbees_meas *z, double *mass, double *mean, double *sd)
{
    dk_gbees_desc d;
    dk_gbees_desc_init(&d);
    d.model = m;
    d.threshold = 1e-7;
    d.snapshots = 2;
    dk_plan *plan = NULL;
    if (dk_gbees_plan_create(NULL, &d, z, 1, &plan) != DK_OK) {
        printf("plan: %s\n", dk_last_error(NULL));
        return -1;
    }
    dk_gbees_event ev;
    dk_gbees_snapshot s = {0};
    while (dk_gbees_run(plan, 0, &ev) == DK_OK && ev != DK_GBEES_DONE)
        if (ev == DK_GBEES_SNAPSHOT)
            dk_gbees_snapshot_get(plan, &s);
    int dim = z->dim;
    *mass = 0;
    for (int i = 0; i < dim; i++)
        mean[i] = sd[i] = 0;
    for (size_t c = 0; c < s.cells; c++) {
        const double *r = s.data + c * (dim + 1);
        *mass += r[dim];
        for (int i = 0; i < dim; i++)
            mean[i] += r[dim] * r[i];
    }
    for (size_t c = 0; c < s.cells; c++) {
        const double *r = s.data + c * (dim + 1);
        for (int i = 0; i < dim; i++)
            sd[i] += r[dim] * (r[i] - mean[i]) * (r[i] - mean[i]);
    }
    for (int i = 0; i < dim; i++)
        sd[i] = sqrt(sd[i]);
    dk_plan_destroy(plan);
    return 0;
}

int main(void)
{
    /* translation in 2-D and 3-D: dx = sigma/2, so the second-order scheme
     * should move the mean exactly (the flux is symmetric about it) and
     * widen the Gaussian only a little */
    for (int dim = 2; dim <= 3; dim++) {
        dk_gbees_model m = {.name = "translate", .about = "", .dim = dim, .min_dim = dim, .meas_dim = 0,
                            .ncoef = 3, .coef = {1.0, -0.5, 0.25}, .f = translate_f, .h = identity_h};
        dk_gbees_meas z = {.dim = dim, .period = 2.0};
        for (int i = 0; i < dim; i++)
            z.cov[i * dim + i] = 1.0;
        double mass, mean[3], sd[3];
        CHECK(run(&m, &z, &mass, mean, sd) == 0, "translation run failed");
        CHECK(fabs(mass - 1.0) < 1e-12, "mass %.15f", mass);
        for (int i = 0; i < dim; i++) {
            double want = 2.0 * m.coef[i];
            printf("translate %dD axis %d: mean %.5f (want %.5f), sd %.5f (initial 1)\n", dim, i, mean[i], want, sd[i]);
            CHECK(fabs(mean[i] - want) < 0.02, "translation %dD axis %d: mean %.5f, want %.5f", dim, i, mean[i], want);
            CHECK(sd[i] > 0.97 && sd[i] < 1.15, "translation %dD axis %d: sd %.5f, want about 1", dim, i, sd[i]);
        }
    }
    /* rotation by a quarter turn of a Gaussian centred at (3, 0): mean to (0, 3) */
    {
        dk_gbees_model m = {.name = "rotate", .about = "", .dim = 2, .min_dim = 2, .meas_dim = 0,
                            .ncoef = 1, .coef = {1.0}, .f = rotate_f, .h = identity_h};
        dk_gbees_meas z = {.dim = 2, .mean = {3.0, 0.0}, .cov = {0.25, 0, 0, 0.25}, .period = M_PI / 2};
        double mass, mean[2], sd[2];
        CHECK(run(&m, &z, &mass, mean, sd) == 0, "rotation run failed");
        printf("rotate: mass %.12f mean (%.4f, %.4f) want (0, 3), sd (%.4f, %.4f) initial 0.5\n", mass, mean[0], mean[1],
               sd[0], sd[1]);
        CHECK(fabs(mass - 1.0) < 1e-12, "mass %.15f", mass);
        CHECK(fabs(mean[0]) < 0.05 && fabs(mean[1] - 3.0) < 0.05, "rotation: mean (%.4f, %.4f), want (0, 3)", mean[0],
              mean[1]);
        CHECK(sd[0] < 0.6 && sd[1] < 0.6 && sd[0] > 0.45 && sd[1] > 0.45, "rotation: sd (%.4f, %.4f)", sd[0], sd[1]);
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
