/* The K-iterated RF approaches the exact Gaussian: against the sampled
 * kernel, away from the boundaries, the error falls as K grows. */
#include <math.h>

#include <dakit/dakit.h>

#include "check.h"
#include "harness/accuracy.h"

int main(void)
{
    static const double sigmas[] = {2, 5, 12};
    static const int Ks[] = {1, 2, 4, 8, 16, 32, 64};
    for (size_t s = 0; s < sizeof sigmas / sizeof sigmas[0]; s++) {
        double prev = INFINITY, first = 0;
        size_t m = (size_t)(20 * sigmas[s]) + 32;
        printf("sigma %g:", sigmas[s]);
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++) {
            double e = gauss_error_vs_exact(sigmas[s], DK_GAUSS_RF, Ks[k], m, NULL);
            printf("  K=%d %.2e", Ks[k], e);
            CHECK(e >= 0, "sigma %g K %d failed", sigmas[s], Ks[k]);
            CHECK(e < prev, "sigma %g: error did not fall from K=%d to K=%d (%.3e -> %.3e)", sigmas[s], Ks[k - 1],
                  Ks[k], prev, e);
            prev = e;
            if (k == 0)
                first = e;
        }
        printf("\n");
        /* The cascade converges like 1/K towards the discrete Gaussian of
         * variance sigma^2, which differs from the sampled kernel by a few
         * percent at sigma 2 (its peak is e^-4 I0(4) = 0.207, not 0.199). */
        CHECK(prev < 0.1 * first, "sigma %g: K=64 error %.3e is not a tenth of K=1's %.3e", sigmas[s], prev, first);
    }
    return failures ? 1 : 0;
}
