/* The cpu plugin's screened labels (variant "screen": x.c - |c|^2/2 by FMA,
 * exact distances only near ties) against dk_kmeans_reference, bit for bit,
 * on points built to tie: coordinates on a coarse lattice (exact ties
 * between centroids on it) and points a rounding step off the midpoint of
 * two centroids (near ties), d 1 to 10, 12 and 13, point- and
 * feature-major, k 3 to 130, every eleventh point masked (the screen takes
 * d <= 12 and k <= 128), and the same for variant "simd". The
 * screen decides most points alone; a near tie it got wrong would change a
 * label. Longer runs check the bounds by which a label stands from one
 * iteration to the next without its distances. Skipped where the cpu
 * plugin has no AVX2 and FMA (the variant is then the exact path).
 * The GPU plugins' long runs (cuda's mma keeps such bounds too) must give
 * the reference's labels as well, their centroids within 1e-6 of it (their
 * sums run in another order); each is skipped where its plugin or device
 * is not there. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>
#include <dakit/kmeans.h>

#include "check.h"

static uint64_t rng = 0x5eed;
static double uniform(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) * 0x1p-53;
}

static void one_case(dk_context *ctx, const char *variant, int d, int k, int feature_major, size_t n, int iters,
                     int masked)
{
    dk_kmeans_desc desc;
    dk_kmeans_desc_init(&desc);
    desc.n = n;
    desc.d = d;
    desc.k = k;
    desc.max_iters = iters;
    desc.layout = feature_major ? DK_KMEANS_FEATURE_MAJOR : DK_KMEANS_POINT_MAJOR;
    desc.variant = variant;
    const size_t nd = n * (size_t)d, kd = (size_t)k * d;
    float *x = malloc(nd * sizeof *x), *init = malloc(kd * sizeof *init), *c_ref = malloc(kd * sizeof *c_ref),
          *c_got = malloc(kd * sizeof *c_got);
    int32_t *l_ref = malloc(n * sizeof *l_ref), *l_got = malloc(n * sizeof *l_got);
    uint8_t *mask = malloc(n);
    if (!x || !init || !c_ref || !c_got || !l_ref || !l_got || !mask) {
        CHECK(0, "out of memory");
        return;
    }
    for (size_t j = 0; j < kd; j++)
        init[j] = (float)(int)(uniform() * 5) * 0.5f;
#define AT(i, f) (feature_major ? (size_t)(f) * n + (i) : (i) * (size_t)d + (f))
    for (size_t i = 0; i < n; i++) {
        mask[i] = !masked || i % 11 != 5;
        const int kind = (int)(uniform() * 3);
        const int a = (int)(uniform() * k), b = (int)(uniform() * k);
        for (int f = 0; f < d; f++) {
            float v;
            if (kind == 0) /* on the lattice */
                v = (float)(int)(uniform() * 5) * 0.5f;
            else if (kind == 1) /* the midpoint of two initial centroids, nudged by an ulp or two */
                v = nextafterf(0.5f * (init[(size_t)a * d + f] + init[(size_t)b * d + f]),
                               uniform() < 0.5 ? -INFINITY : INFINITY);
            else
                v = (float)(uniform() * 2.5);
            x[AT(i, f)] = v;
        }
    }
#undef AT
    dk_kmeans_result rr, rg;
    dk_plan *plan = NULL;
    dk_buffer *bx = NULL, *bm = NULL, *bi = NULL, *bl = NULL, *bc = NULL;
    int ok = dk_kmeans_reference(&desc, x, mask, init, l_ref, c_ref, &rr) == DK_OK &&
             dk_kmeans_plan_create(ctx, &desc, &plan) == DK_OK &&
             dk_buffer_create(ctx, nd * sizeof *x, &bx) == DK_OK && dk_buffer_write(bx, x, nd * sizeof *x) == DK_OK &&
             dk_buffer_create(ctx, n, &bm) == DK_OK && dk_buffer_write(bm, mask, n) == DK_OK &&
             dk_buffer_create(ctx, kd * sizeof *init, &bi) == DK_OK &&
             dk_buffer_write(bi, init, kd * sizeof *init) == DK_OK &&
             dk_buffer_create(ctx, n * sizeof *l_got, &bl) == DK_OK &&
             dk_buffer_create(ctx, kd * sizeof *c_got, &bc) == DK_OK &&
             dk_kmeans_execute(plan, bx, bm, bi, bl, bc, &rg) == DK_OK &&
             dk_buffer_read(bl, l_got, n * sizeof *l_got) == DK_OK &&
             dk_buffer_read(bc, c_got, kd * sizeof *c_got) == DK_OK;
    CHECK(ok, "%s d %d k %d: %s", variant, d, k, dk_last_error(ctx));
    if (ok) {
        size_t differ = 0;
        for (size_t i = 0; i < n; i++)
            differ += l_got[i] != l_ref[i];
        /* the cpu plugin sums in the reference's order, the GPU plugins not */
        const int same_order = !strcmp(dk_context_backend(ctx), "cpu");
        double worst = 0.0;
        for (size_t j = 0; j < kd; j++)
            worst = fmax(worst, fabs((double)c_got[j] - (double)c_ref[j]));
        const int centroids_ok = same_order ? !memcmp(c_got, c_ref, kd * sizeof *c_ref) : worst <= 1e-6;
        CHECK(differ == 0 && centroids_ok, "%s %s d %d k %d %s: %zu of %zu labels differ from the reference's%s",
              dk_context_backend(ctx), variant ? variant : "(default)", d, k,
              feature_major ? "feature-major" : "point-major", differ, n, centroids_ok ? "" : ", and the centroids");
    }
    dk_plan_destroy(plan);
    dk_buffer_destroy(bx);
    dk_buffer_destroy(bm);
    dk_buffer_destroy(bi);
    dk_buffer_destroy(bl);
    dk_buffer_destroy(bc);
    free(x), free(init), free(c_ref), free(c_got), free(l_ref), free(l_got), free(mask);
}

int main(void)
{
    dk_context *ctx;
    if (dk_context_create("cpu", &ctx) != DK_OK) {
        printf("SKIP: the cpu backend is not there: %s\n", dk_last_error(NULL));
        return 77;
    }
    const int dims[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13}, ks[] = {3, 8, 17, 40, 130};
    int cases = 0;
    for (size_t a = 0; a < sizeof dims / sizeof *dims; a++)
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++)
            for (int fm = 0; fm < 2; fm++) {
                one_case(ctx, "screen", dims[a], ks[b], fm, 3001, 4, 1);
                one_case(ctx, "simd", dims[a], ks[b], fm, 3001, 4, 1);
                cases += 2;
            }
    /* longer runs, where most labels stand by the screen's bounds (Hamerly's)
     * from one iteration to the next while the centroids settle */
    for (int d = 2; d <= 8; d += 3)
        for (int k = 5; k <= 17; k += 12) {
            one_case(ctx, "screen", d, k, 0, 20003, 30, 1);
            cases++;
        }
    dk_context_destroy(ctx);
    /* the GPU plugins' bounds, their default variants, with and without a
     * mask (cuda's mma takes unmasked rows of 4 or 8 floats) */
    const char *gpus[] = {"opencl", "cuda"};
    for (int g = 0; g < 2; g++) {
        if (dk_context_create(gpus[g], &ctx) != DK_OK) {
            printf("%s: skipped (%s)\n", gpus[g], dk_last_error(NULL));
            continue;
        }
        for (int d = 4; d <= 8; d += 4)
            for (int k = 5; k <= 16; k += 11)
                for (int masked = 0; masked < 2; masked++) {
                    one_case(ctx, NULL, d, k, 0, 20003, 30, masked);
                    cases++;
                }
        dk_context_destroy(ctx);
    }
    printf("%d cases of screened and bounded labels against the reference%s\n", cases,
           failures ? "" : ": every label the same");
    return failures ? 1 : 0;
}
