/* kmeans: blobs recovered exactly, integer sample weights equal to repeated
 * points, the RADOLAN reader on the real composite and on broken copies of
 * it, and bad input refused with a sentence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/kmeans.h>

#include "check.h"
#include <dakit/radolan.h>

/* stops the test where going on would only crash */
#define REQUIRE(cond)                                                                                      \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                          \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static void blobs(dk_context *ctx)
{
    /* 5 blobs of radius 0.5 whose centres are >= 10 apart: every point must
     * land with its own blob, and each centroid on its blob's mean */
    const int k = 5, d = 3;
    const size_t n = 5000;
    float *x = malloc(n * d * sizeof *x), init[15], cent[15];
    int32_t *lab = malloc(n * sizeof *lab);
    double mean[5][3] = {{0}};
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++)
        for (int f = 0; f < d; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
            x[i * d + f] = (float)(12.0 * (double)(i % k) * (f == 0 ? 1 : -0.5) + u);
            mean[i % k][f] += x[i * d + f] / (double)(n / k);
        }
    dk_kmeans_desc desc;
    dk_kmeans_desc_init(&desc);
    desc.n = n;
    desc.d = d;
    desc.k = k;
    REQUIRE(dk_kmeans_initial_centroids(&desc, x, NULL, 0, init) == DK_OK);
    dk_plan *plan = NULL;
    dk_kmeans_result r;
    REQUIRE(dk_kmeans_plan_create(ctx, &desc, &plan) == DK_OK);
    REQUIRE(dk_kmeans_execute_host(plan, x, NULL, init, lab, cent, &r) == DK_OK);
    for (size_t i = 0; i < n; i++)
        CHECK(lab[i] == (int32_t)(i % k), "point %zu labelled %d, blob %zu", i, lab[i], i % k);
    for (int c = 0; c < k; c++)
        for (int f = 0; f < d; f++)
            CHECK(fabs(cent[c * d + f] - mean[c][f]) < 1e-4, "centroid %d feature %d: %g vs %g", c, f,
                   cent[c * d + f], mean[c][f]);
    CHECK(r.iterations == 20 && r.valid == n, "iterations %d valid %zu", r.iterations, r.valid);

    /* bad input: NaN, k > valid points, d = 0, even window, lambda without grid */
    x[7] = NAN;
    CHECK(dk_kmeans_execute_host(plan, x, NULL, init, lab, cent, &r) == DK_ERR_INVALID_ARGUMENT &&
               strstr(dk_last_error(ctx), "finite"),
           "NaN accepted: %s", dk_last_error(ctx));
    x[7] = 0;
    uint8_t *mask = calloc(n, 1);
    mask[0] = mask[1] = 1;
    CHECK(dk_kmeans_execute_host(plan, x, mask, init, lab, cent, &r) == DK_ERR_INVALID_ARGUMENT &&
               strstr(dk_last_error(ctx), "unmasked"),
           "k > valid accepted: %s", dk_last_error(ctx));
    dk_plan_destroy(plan);
    dk_kmeans_desc bad = desc;
    bad.d = 0;
    CHECK(dk_kmeans_plan_create(ctx, &bad, &plan) == DK_ERR_INVALID_ARGUMENT, "d = 0 accepted");
    bad = desc;
    bad.k = (int)n + 1;
    CHECK(dk_kmeans_reference(&bad, x, NULL, init, lab, cent, &r) == DK_ERR_INVALID_ARGUMENT, "k > n accepted");
    bad = desc;
    bad.lambda = 0.5;
    CHECK(dk_kmeans_plan_create(ctx, &bad, &plan) == DK_ERR_INVALID_ARGUMENT, "lambda without a grid accepted");
    bad = desc;
    bad.rows = 50;
    bad.cols = 100;
    bad.lambda = 0.5;
    bad.window = 4;
    CHECK(dk_kmeans_plan_create(ctx, &bad, &plan) == DK_ERR_INVALID_ARGUMENT, "even window accepted");
    bad.window = 5;
    bad.cols = 99;
    CHECK(dk_kmeans_plan_create(ctx, &bad, &plan) == DK_ERR_INVALID_ARGUMENT &&
               strstr(dk_last_error(ctx), "grid"),
           "grid that does not hold n accepted");
    free(mask);
    free(x);
    free(lab);
}

static unsigned char *slurp_gz(const char *path, size_t *size)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 2 << 20;
    unsigned char *b = malloc(cap);
    *size = fread(b, 1, cap, p);
    pclose(p);
    return b;
}

static void write_file(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void reader(const char *path, const char *tmpdir)
{
    dk_radolan r;
    char p[1024];
#define err dk_last_error(NULL)
    REQUIRE(dk_radolan_read(path, &r) == DK_OK);
    CHECK(!strcmp(r.product, "RX") && r.rows == 900 && r.cols == 900, "%s %zu x %zu", r.product, r.rows, r.cols);
    CHECK(r.data_pixels == 633455, "pixels with data %zu", r.data_pixels);
    CHECK(fabsf(r.max_value - 56.5f) < 1e-6f, "max %g", (double)r.max_value);
    size_t ge5 = 0;
    for (size_t i = 0; i < r.rows * r.cols; i++)
        ge5 += r.has_data[i] && r.value[i] >= 5;
    CHECK(ge5 == 149569, "pixels >= 5 dBZ %zu", ge5);
    dk_radolan_free(&r);

    size_t size = 0;
    unsigned char *b = slurp_gz(path, &size);
    REQUIRE(b && size == 810138);
    /* the plain (uncompressed) file reads the same */
    snprintf(p, sizeof p, "%s/plain.bin", tmpdir);
    write_file(p, b, size);
    CHECK(dk_radolan_read(p, &r) == DK_OK && r.data_pixels == 633455, "plain file: %s", err);
    dk_radolan_free(&r);
    /* truncated */
    CHECK(dk_radolan_parse(b, size - 1000, &r) == DK_ERR_FORMAT && strstr(err, "truncated"),
           "truncated: %s", err);
    /* a grid that disagrees with the byte count (BY removed so the size check speaks) */
    unsigned char *c = malloc(size);
    memcpy(c, b, size);
    memcpy(strstr((char *)c, "BY"), "XX", 2);
    CHECK(dk_radolan_parse(c, size - 900, &r) == DK_ERR_FORMAT && strstr(err, "truncated"),
           "short data: %s", err);
    memcpy(strstr((char *)c, "GP") + 3, "899", 3);
    CHECK(dk_radolan_parse(c, size, &r) == DK_ERR_FORMAT && strstr(err, "needs"), "grid: %s", err);
    /* unknown product */
    memcpy(c, b, size);
    c[0] = 'Q';
    c[1] = 'Q';
    CHECK(dk_radolan_parse(c, size, &r) == DK_ERR_FORMAT && strstr(err, "unknown"), "product: %s",
           err);
    /* no header end */
    memset(c, 'A', 9000);
    CHECK(dk_radolan_parse(c, 9000, &r) == DK_ERR_FORMAT, "no header: %s", err);
    /* a corrupt gzip stream */
    FILE *f = fopen(path, "rb");
    unsigned char gz[4096];
    size_t gn = fread(gz, 1, sizeof gz, f);
    fclose(f);
    for (size_t i = 100; i < gn; i += 7)
        gz[i] ^= 0x5a;
    snprintf(p, sizeof p, "%s/corrupt.gz", tmpdir);
    write_file(p, gz, gn);
    CHECK(dk_radolan_read(p, &r) == DK_ERR_FORMAT, "corrupt gzip: %s", err);
    CHECK(dk_radolan_read(p, &r) == DK_ERR_FORMAT && strstr(err, "corrupt") && strstr(err, "corrupt.gz"),
          "corrupt gzip sentence: %s", err);
    snprintf(p, sizeof p, "%s/absent.gz", tmpdir);
    CHECK(dk_radolan_read(p, &r) == DK_ERR_IO && strstr(err, "cannot open") && strstr(err, "absent.gz"),
          "missing file: %s", err);
    double x0 = 0, y0 = 0;
    CHECK(dk_radolan_grid_origin(900, 900, &x0, &y0) == DK_OK && x0 == -523.4622 && y0 == -4658.645,
          "900 x 900 origin %g %g", x0, y0);
    CHECK(dk_radolan_grid_origin(1, 3, &x0, &y0) == DK_ERR_INVALID_ARGUMENT && strstr(err, "1 x 3"),
          "unknown grid: %s", err);
    /* a two-byte product: RW, precision 0.1, one value, one no-data, one clutter */
    const char *fmt = "RW102050100000814BY%7zuVS 3SW   2.13.1PR E-01INT  60GP   1x   3MS 10<boo,ros> \x03";
    char hdr[200];
    size_t hl = (size_t)snprintf(hdr, sizeof hdr, fmt, (size_t)0);
    snprintf(hdr, sizeof hdr, fmt, hl + 6);
    unsigned char two[200];
    memcpy(two, hdr, hl);
    unsigned short px[3] = {123, 0x2000 | 29, 0x8000 | 5};
    memcpy(two + hl, px, sizeof px);
    CHECK(dk_radolan_parse(two, hl + 6, &r) == DK_OK && r.bytes_per_pixel == 2 && r.cols == 3 &&
               fabsf(r.value[0] - 12.3f) < 1e-5f && r.data_pixels == 1 && r.clutter_pixels == 1,
           "two-byte product: %s", err);
    dk_radolan_free(&r);
    free(c);
    free(b);
#undef err
}

/* Integer weights mean repeated points (scikit-learn's sample_weight): a
 * weighted run must give the centroids and objective of the unweighted run
 * over the points repeated that often, and the same labels; then bad
 * weights are refused with a sentence. */
static void weights(dk_context *ctx)
{
    const int k = 4, d = 2;
    const size_t n = 3000;
    float *x = malloc(n * d * sizeof *x), *w = malloc(n * sizeof *w), init[8], c1[8], c2[8];
    float *rep = malloc(3 * n * d * sizeof *rep);
    int32_t *l1 = malloc(n * sizeof *l1), *l2 = malloc(3 * n * sizeof *l2);
    REQUIRE(x && w && rep && l1 && l2);
    uint64_t s = 11;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        for (int f = 0; f < d; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * d + f] = (float)((double)(s >> 11) / 9007199254740992.0 * 10.0);
        }
        w[i] = (float)(i % 4); /* 0 to 3 copies */
        for (int r = 0; r < (int)w[i]; r++, m++)
            for (int f = 0; f < d; f++)
                rep[m * d + f] = x[i * d + f];
    }
    for (int j = 0; j < k * d; j++)
        init[j] = (float)(1.0 + 2.5 * j);
    dk_kmeans_desc desc;
    dk_kmeans_desc_init(&desc);
    desc.n = n;
    desc.d = d;
    desc.k = k;
    desc.max_iters = 30;
    dk_kmeans_desc drep = desc;
    drep.n = m;
    dk_plan *plan = NULL, *prep = NULL;
    dk_kmeans_result r1, r2;
    REQUIRE(dk_kmeans_plan_create(ctx, &desc, &plan) == DK_OK && dk_kmeans_plan_create(ctx, &drep, &prep) == DK_OK);
    REQUIRE(dk_kmeans_execute_host_weighted(plan, x, NULL, w, init, l1, c1, &r1) == DK_OK);
    REQUIRE(dk_kmeans_execute_host(prep, rep, NULL, init, l2, c2, &r2) == DK_OK);
    for (int j = 0; j < k * d; j++)
        CHECK(fabsf(c1[j] - c2[j]) <= 1e-5f * 10.0f, "centroid value %d: %g weighted, %g repeated", j, (double)c1[j],
              (double)c2[j]);
    CHECK(fabs(r1.objective - r2.objective) <= 1e-6 * r2.objective && r1.iterations == r2.iterations,
          "objective %.9g weighted, %.9g repeated; iterations %d, %d", r1.objective, r2.objective, r1.iterations,
          r2.iterations);
    size_t differ = 0;
    for (size_t i = 0, at = 0; i < n; at += (size_t)w[i], i++)
        differ += w[i] > 0 && l1[i] != l2[at];
    CHECK(differ == 0, "%zu labels differ between the weighted and the repeated points", differ);

    w[5] = -1.0f;
    CHECK(dk_kmeans_execute_host_weighted(plan, x, NULL, w, init, l1, c1, &r1) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "point 5") && strstr(dk_last_error(ctx), ">= 0"),
          "negative weight: %s", dk_last_error(ctx));
    w[5] = NAN;
    CHECK(dk_kmeans_reference_weighted(&desc, x, NULL, w, init, l1, c1, &r1) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(NULL), "finite"),
          "NaN weight: %s", dk_last_error(NULL));
    for (size_t i = 0; i < n; i++)
        w[i] = 0.0f;
    CHECK(dk_kmeans_execute_host_weighted(plan, x, NULL, w, init, l1, c1, &r1) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "sum to 0"),
          "zero weights: %s", dk_last_error(ctx));
    dk_plan_destroy(plan);
    /* random seeding needs k points of positive weight */
    w[0] = w[1] = w[2] = 1.0f;
    desc.init = DK_KMEANS_INIT_RANDOM;
    REQUIRE(dk_kmeans_plan_create(ctx, &desc, &plan) == DK_OK);
    CHECK(dk_kmeans_execute_host_weighted(plan, x, NULL, w, NULL, l1, c1, &r1) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "positive weight"),
          "random seeding with 3 weighted points for k 4: %s", dk_last_error(ctx));
    /* k-means++ never seeds on a point of weight 0 */
    desc.init = DK_KMEANS_INIT_PLUSPLUS;
    desc.k = 3;
    REQUIRE(dk_kmeans_reference_weighted(&desc, x, NULL, w, NULL, l1, c1, &r1) == DK_OK);
    for (int c = 0; c < 3; c++) {
        int found = 0;
        for (int i = 0; i < 3; i++)
            found |= c1[c * d] == x[i * d] && c1[c * d + 1] == x[i * d + 1];
        CHECK(found, "centroid %d is not one of the three weighted points", c);
    }
    dk_plan_destroy(plan);
    dk_plan_destroy(prep);
    free(x), free(w), free(rep), free(l1), free(l2);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_kmeans RADOLAN_FILE TMPDIR\n");
        return 2;
    }
    dk_context *ctx;
    REQUIRE(dk_context_create("cpu", &ctx) == DK_OK);
    blobs(ctx);
    weights(ctx);
    dk_context_destroy(ctx);
    reader(argv[1], argv[2]);
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
