/* The device memory a cuda gauss plan holds (measured as the drop in the
 * device's free memory while the plan exists, after a first plan has loaded
 * the kernels): rf in exact mode needs no work buffer as large as the field,
 * only its runs' edges, so it stays under a quarter of the field for 8192 x
 * 8192 and 10^8 float32. A plan that cannot get its memory fails with a
 * sentence and leaves the context usable. Skips without a GPU. */
#include <stdio.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"
#include "cudart.h"

typedef int (*mem_info_fn)(size_t *free_b, size_t *total_b);

static dk_status make(dk_context *ctx, int ndim, const size_t *shape, dk_gauss_method method, dk_plan **plan)
{
    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.ndim = ndim;
    for (int a = 0; a < ndim; a++) {
        d.shape[a] = shape[a];
        d.sigma[a] = 2;
    }
    d.axes = (1u << ndim) - 1;
    d.K = 4;
    d.method = method;
    d.boundary = method == DK_GAUSS_RF ? DK_BOUNDARY_ZERO : DK_BOUNDARY_REFLECT;
    return dk_gauss_plan_create(ctx, &d, plan);
}

/* The plan's device bytes, or 0 with a failure counted. */
static size_t plan_bytes(dk_context *ctx, mem_info_fn mem_info, const char *name, int ndim, const size_t *shape)
{
    size_t f0, f1, total;
    dk_plan *plan = NULL;
    if (mem_info(&f0, &total) != 0 || make(ctx, ndim, shape, DK_GAUSS_RF, &plan) != DK_OK ||
        mem_info(&f1, &total) != 0) {
        CHECK(0, "%s: %s", name, dk_last_error(ctx));
        dk_plan_destroy(plan);
        return 0;
    }
    dk_plan_destroy(plan);
    size_t field = 4;
    for (int a = 0; a < ndim; a++)
        field *= shape[a];
    size_t held = f0 > f1 ? f0 - f1 : 0;
    printf("%s f32 rf exact: the plan holds %zu bytes of device memory (%.2f %% of the %zu-byte field)\n", name,
           held, 100.0 * (double)held / (double)field, field);
    CHECK(held < field / 4, "%s: the plan holds %zu bytes, the field is %zu", name, held, field);
    return held;
}

int main(void)
{
    dk_context *ctx;
    void *rt = cudart_open(&ctx);
    if (!rt)
        return 77;
    mem_info_fn mem_info = (mem_info_fn)dlsym(rt, "cudaMemGetInfo");
    CHECK(mem_info != NULL, "no cudaMemGetInfo in libcudart");
    if (!mem_info)
        return 1;

    const size_t square[2] = {8192, 8192}, line[1] = {100000000};
    dk_plan *warm = NULL;
    CHECK(make(ctx, 2, square, DK_GAUSS_RF, &warm) == DK_OK, "warm-up plan: %s", dk_last_error(ctx));
    dk_plan_destroy(warm);
    warm = NULL;
    CHECK(make(ctx, 1, line, DK_GAUSS_RF, &warm) == DK_OK, "warm-up plan: %s", dk_last_error(ctx));
    dk_plan_destroy(warm);
    plan_bytes(ctx, mem_info, "8192 x 8192", 2, square);
    plan_bytes(ctx, mem_info, "10^8", 1, line);

    /* deriche still filters through a field-sized work buffer: one larger
     * than the free memory must fail cleanly, and a small plan run after */
    size_t free_b, total;
    if (mem_info(&free_b, &total) == 0) {
        const size_t big[2] = {free_b / 4 / 8192 + 8192, 8192};
        dk_plan *plan = NULL;
        dk_status st = make(ctx, 2, big, DK_GAUSS_DERICHE, &plan);
        const char *why = dk_last_error(ctx);
        printf("deriche %zu x 8192 f32 plan: %s\n", big[0], st == DK_OK ? "made" : why);
        CHECK(st == DK_OK || (st == DK_ERR_OUT_OF_MEMORY && strstr(why, "cuda gauss")), "status %d: %s", (int)st,
              why);
        dk_plan_destroy(plan);
        const size_t small[1] = {4096};
        float x[4096];
        for (int i = 0; i < 4096; i++)
            x[i] = (float)(i % 17);
        plan = NULL;
        CHECK(make(ctx, 1, small, DK_GAUSS_RF, &plan) == DK_OK && dk_gauss_execute_host(plan, x, x) == DK_OK,
              "after the failed plan: %s", dk_last_error(ctx));
        dk_plan_destroy(plan);
    }
    dk_context_destroy(ctx);
    dlclose(rt);
    return failures ? 1 : 0;
}
