/* Smooths an impulse with dakit's gauss on the cpu backend and checks it:
 * what a program built against an installed dakit does. install_check.sh
 * builds it with pkg-config and with CMake's find_package(dakit). */
#include <math.h>
#include <stdio.h>

#include <dakit/dakit.h>

int main(void)
{
    dk_context *ctx;
    if (dk_context_create("cpu", &ctx) != DK_OK) {
        fprintf(stderr, "smooth: %s\n", dk_last_error(NULL));
        return 1;
    }
    enum { N = 101 };
    float x[N] = {0};
    x[N / 2] = 1;
    dk_gauss_desc desc;
    dk_gauss_desc_init(&desc);
    desc.method = DK_GAUSS_RF; /* the K-iterated recursive filter, K 4 */
    desc.boundary = DK_BOUNDARY_ZERO;
    desc.ndim = 1;
    desc.shape[0] = N;
    desc.axes = 1;
    desc.sigma[0] = 5;
    dk_plan *plan;
    if (dk_gauss_plan_create(ctx, &desc, &plan) != DK_OK || dk_gauss_execute_host(plan, x, x) != DK_OK) {
        fprintf(stderr, "smooth: %s\n", dk_last_error(ctx));
        return 1;
    }
    double sum = 0, var = 0;
    for (int i = 0; i < N; i++) {
        sum += x[i];
        var += (double)(i - N / 2) * (i - N / 2) * x[i];
    }
    printf("smooth: dakit %s on %s: an impulse smoothed with sigma 5: sum %.6f, variance %.4f\n",
           dk_context_backend(ctx), dk_context_device(ctx), sum, var);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    return fabs(sum - 1) < 1e-4 && fabs(var - 25) < 0.05 ? 0 : 1;
}
