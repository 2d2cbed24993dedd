/* dk_host_alloc: on each backend present, memory from it carries data to
 * the device and back unchanged (1 MiB and one odd size); cpu's is 64-byte
 * aligned; cuda's is page-locked (the cuda plugin names it so when it is
 * offered as device memory) and can be wrapped as host memory, pageable
 * memory not; k-means writing its labels and centroids into wrapped host
 * memory gives the bits it gives into device buffers (plain, and masked
 * with contiguity); bad arguments are refused with a sentence and
 * dk_host_free takes NULL. opencl runs where its plugin is built (PoCL in
 * CI); cuda is skipped without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>
#include <dakit/kmeans.h>

#include "check.h"

static void round_trip(dk_context *ctx, const char *name, size_t bytes)
{
    unsigned char *src = NULL, *dst = NULL;
    CHECK(dk_host_alloc(ctx, bytes, (void **)&src) == DK_OK && src, "%s: %zu bytes: %s", name, bytes,
          dk_last_error(ctx));
    CHECK(dk_host_alloc(ctx, bytes, (void **)&dst) == DK_OK && dst, "%s: %zu bytes: %s", name, bytes,
          dk_last_error(ctx));
    if (!src || !dst)
        return;
    for (size_t i = 0; i < bytes; i++) {
        src[i] = (unsigned char)(i * 131 + 7);
        dst[i] = 0;
    }
    dk_buffer *b = NULL;
    CHECK(dk_buffer_create(ctx, bytes, &b) == DK_OK, "%s: buffer: %s", name, dk_last_error(ctx));
    CHECK(dk_buffer_write(b, src, bytes) == DK_OK && dk_buffer_read(b, dst, bytes) == DK_OK, "%s: copies: %s",
          name, dk_last_error(ctx));
    CHECK(memcmp(src, dst, bytes) == 0, "%s: %zu bytes came back changed", name, bytes);
    if (bytes >= 4 && !strcmp(name, "cuda")) {
        dk_buffer *w = NULL;
        CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, src, bytes, &w) == DK_ERR_INVALID_ARGUMENT &&
                  strstr(dk_last_error(ctx), "pinned host memory"),
              "cuda: the memory is page-locked host memory: %s", dk_last_error(ctx));
    }
    if (!strcmp(name, "cpu"))
        CHECK((uintptr_t)src % 64 == 0 && (uintptr_t)dst % 64 == 0, "cpu: 64-byte aligned");
    dk_buffer_destroy(b);
    dk_host_free(ctx, src);
    dk_host_free(ctx, dst);
    printf("%s: %zu bytes through dk_host_alloc memory and back\n", name, bytes);
}

/* One k-means run into device buffers (read back) and one into wrapped
 * dk_host_alloc memory: the same labels and centroids. `image`: a 40 x 50
 * grid, feature-major, every seventh point masked, contiguity on. */
static void kmeans_into_host(dk_context *ctx, const char *name, int image)
{
    dk_kmeans_desc d;
    dk_kmeans_desc_init(&d);
    d.n = 2000;
    d.d = image ? 3 : 4;
    d.k = 5;
    if (image) {
        d.layout = DK_KMEANS_FEATURE_MAJOR;
        d.rows = 40;
        d.cols = 50;
        d.lambda = 0.7;
    }
    const size_t nd = d.n * d.d, kd = (size_t)d.k * d.d;
    float *x = malloc(nd * sizeof *x), init[20], *cent_dev = malloc(kd * sizeof *cent_dev);
    int32_t *lab_dev = malloc(d.n * sizeof *lab_dev), *lab_host = NULL;
    float *cent_host = NULL;
    uint8_t *mask = malloc(d.n);
    uint64_t st = 5;
    for (size_t i = 0; i < nd; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((st >> 40) % 1000) / 100.0f + (float)(i % 5);
    }
    for (size_t i = 0; i < d.n; i++)
        mask[i] = i % 7 != 0;
    for (size_t j = 0; j < kd; j++)
        init[j] = x[j * 37 % nd];
    dk_plan *plan = NULL;
    dk_buffer *bx = NULL, *bm = NULL, *bi = NULL, *bl = NULL, *bc = NULL, *wl = NULL, *wc = NULL;
    dk_kmeans_result r1, r2;
    int ok = x && cent_dev && lab_dev && mask && dk_kmeans_plan_create(ctx, &d, &plan) == DK_OK &&
             dk_buffer_create(ctx, nd * sizeof *x, &bx) == DK_OK && dk_buffer_write(bx, x, nd * sizeof *x) == DK_OK &&
             dk_buffer_create(ctx, d.n, &bm) == DK_OK && dk_buffer_write(bm, mask, d.n) == DK_OK &&
             dk_buffer_create(ctx, sizeof init, &bi) == DK_OK && dk_buffer_write(bi, init, kd * sizeof *init) == DK_OK &&
             dk_buffer_create(ctx, d.n * sizeof(int32_t), &bl) == DK_OK &&
             dk_buffer_create(ctx, kd * sizeof(float), &bc) == DK_OK &&
             dk_host_alloc(ctx, d.n * sizeof *lab_host, (void **)&lab_host) == DK_OK &&
             dk_host_alloc(ctx, kd * sizeof *cent_host, (void **)&cent_host) == DK_OK;
    CHECK(ok, "%s: kmeans setup: %s", name, dk_last_error(ctx));
    if (ok) {
        memset(lab_host, 0x55, d.n * sizeof *lab_host);
        const dk_buffer *m = image ? bm : NULL;
        CHECK(dk_kmeans_execute(plan, bx, m, bi, bl, bc, &r1) == DK_OK &&
                  dk_buffer_read(bl, lab_dev, d.n * sizeof *lab_dev) == DK_OK &&
                  dk_buffer_read(bc, cent_dev, kd * sizeof *cent_dev) == DK_OK,
              "%s: kmeans into device buffers: %s", name, dk_last_error(ctx));
        CHECK(dk_buffer_wrap(ctx, DK_MEMORY_HOST, lab_host, d.n * sizeof *lab_host, &wl) == DK_OK &&
                  dk_buffer_wrap(ctx, DK_MEMORY_HOST, cent_host, kd * sizeof *cent_host, &wc) == DK_OK,
              "%s: wrapping dk_host_alloc memory: %s", name, dk_last_error(ctx));
        if (wl && wc) {
            CHECK(dk_kmeans_execute(plan, bx, m, bi, wl, wc, &r2) == DK_OK, "%s: kmeans into host memory: %s", name,
                  dk_last_error(ctx));
            CHECK(!memcmp(lab_dev, lab_host, d.n * sizeof *lab_host) && !memcmp(cent_dev, cent_host, kd * sizeof *cent_host) &&
                      r1.objective == r2.objective,
                  "%s: kmeans (%s) into host memory differs from device buffers", name, image ? "image" : "plain");
            printf("%s: kmeans (%s) into wrapped host memory: the device buffers' labels and centroids\n", name,
                   image ? "masked image, contiguity" : "plain");
        }
    }
    dk_buffer_destroy(wl);
    dk_buffer_destroy(wc);
    dk_buffer_destroy(bx);
    dk_buffer_destroy(bm);
    dk_buffer_destroy(bi);
    dk_buffer_destroy(bl);
    dk_buffer_destroy(bc);
    dk_plan_destroy(plan);
    dk_host_free(ctx, lab_host);
    dk_host_free(ctx, cent_host);
    free(x);
    free(cent_dev);
    free(lab_dev);
    free(mask);
}

static void backend(const char *name)
{
    dk_context *ctx;
    if (dk_context_create(name, &ctx) != DK_OK) {
        printf("%s absent: %s\n", name, dk_last_error(NULL));
        return;
    }
    round_trip(ctx, name, 1 << 20);
    round_trip(ctx, name, 1001);
    if (strcmp(name, "opencl")) { /* opencl does not wrap host memory */
        kmeans_into_host(ctx, name, 0);
        kmeans_into_host(ctx, name, 1);
    }
    if (!strcmp(name, "cuda")) {
        char pageable[64];
        dk_buffer *w = NULL;
        CHECK(dk_buffer_wrap(ctx, DK_MEMORY_HOST, pageable, sizeof pageable, &w) == DK_ERR_INVALID_ARGUMENT &&
                  strstr(dk_last_error(ctx), "pageable host memory"),
              "cuda: pageable memory is refused: %s", dk_last_error(ctx));
    }
    void *m = (void *)1;
    CHECK(dk_host_alloc(ctx, 0, &m) == DK_ERR_INVALID_ARGUMENT && m == NULL &&
              strstr(dk_last_error(ctx), "0 bytes"),
          "%s: 0 bytes refused: %s", name, dk_last_error(ctx));
    CHECK(dk_host_alloc(ctx, 16, NULL) == DK_ERR_INVALID_ARGUMENT, "%s: NULL out refused", name);
    dk_host_free(ctx, NULL);
    dk_context_destroy(ctx);
}

int main(void)
{
    CHECK(dk_host_alloc(NULL, 16, &(void *){NULL}) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "must not be NULL"),
          "no context: %s", dk_last_error(NULL));
    backend("cpu");
    backend("opencl");
    backend("cuda");
    return failures ? 1 : 0;
}
