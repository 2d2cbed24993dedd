/* The caller's own memory as dakit buffers (dk_buffer_wrap): on each
 * backend present, a gauss filter runs in place on memory the test owns,
 * with no copy, and equals the serial reference; the wrapper's destruction
 * leaves the memory alone (the sanitizer job would see a double free);
 * memory of a kind the backend cannot use is refused with a sentence.
 * cpu wraps a host array, opencl a cl_mem made in its cl_context
 * (dk_context_native), cuda a cudaMalloc'ed pointer (skipped without a GPU). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>
#ifdef DK_TEST_OPENCL
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#endif

#include "check.h"
#include "cudart.h"

#define N 4096

static void field(float *x)
{
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 101) - 50.0f;
}

static dk_plan *plan_on(dk_context *ctx, dk_gauss_desc *d)
{
    dk_gauss_desc_init(d);
    d->method = DK_GAUSS_RF;
    d->boundary = DK_BOUNDARY_ZERO;
    d->ndim = 1;
    d->shape[0] = N;
    d->axes = 1;
    d->sigma[0] = 3;
    dk_plan *plan = NULL;
    CHECK(dk_gauss_plan_create(ctx, d, &plan) == DK_OK, "plan: %s", dk_last_error(ctx));
    return plan;
}

static void compare(const char *who, const float *got, const dk_gauss_desc *d)
{
    float want[N];
    field(want);
    dk_gauss_reference(d, want, want);
    double err = 0;
    for (int i = 0; i < N; i++)
        err = fmax(err, fabs((double)got[i] - want[i]));
    CHECK(err < 1e-4, "%s: max error %g against the reference", who, err);
    printf("%s: gauss on wrapped memory, max error %.2e\n", who, err);
}

static void host(void)
{
    dk_context *ctx;
    if (dk_context_create("cpu", &ctx) != DK_OK)
        return;
    dk_gauss_desc d;
    dk_plan *plan = plan_on(ctx, &d);
    float *x = malloc(N * sizeof *x);
    field(x);
    dk_buffer *b = NULL;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_HOST, x, N * sizeof *x, &b) == DK_OK, "cpu wraps host memory: %s",
          dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "in place on the wrapper: %s", dk_last_error(ctx));
    dk_buffer_destroy(b);
    compare("cpu", x, &d); /* x was written where it is, and is still ours */
    free(x);
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, &d, 8, &b) == DK_ERR_NOT_IMPLEMENTED && !b &&
              strstr(dk_last_error(ctx), "only host memory"),
          "cpu refuses device memory: %s", dk_last_error(ctx));
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_HOST, NULL, 8, &b) == DK_ERR_INVALID_ARGUMENT, "NULL memory refused");
    dk_native nat;
    CHECK(dk_context_native(ctx, &nat) == DK_OK && nat.memory == DK_MEMORY_HOST, "cpu's native kind");
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
}

#ifdef DK_TEST_OPENCL
static void opencl(void)
{
    dk_context *ctx;
    if (dk_context_create("opencl", &ctx) != DK_OK) {
        printf("opencl absent: %s\n", dk_last_error(NULL));
        return;
    }
    dk_native nat;
    CHECK(dk_context_native(ctx, &nat) == DK_OK && nat.memory == DK_MEMORY_OPENCL && nat.context && nat.queue,
          "opencl's handles: %s", dk_last_error(ctx));
    dk_gauss_desc d;
    dk_plan *plan = plan_on(ctx, &d);
    float x[N];
    field(x);
    cl_int err;
    cl_mem mem = clCreateBuffer((cl_context)nat.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof x, x, &err);
    CHECK(err == CL_SUCCESS, "clCreateBuffer %d", err);
    dk_buffer *b = NULL;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_OPENCL, mem, sizeof x, &b) == DK_OK, "opencl wraps a cl_mem: %s",
          dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "in place on the wrapper: %s", dk_last_error(ctx));
    dk_buffer_destroy(b);
    CHECK(clEnqueueReadBuffer((cl_command_queue)nat.queue, mem, CL_TRUE, 0, sizeof x, x, 0, NULL, NULL) ==
              CL_SUCCESS, "the cl_mem is still the caller's after the wrapper is gone");
    compare("opencl", x, &d);
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_OPENCL, mem, sizeof x + 4, &b) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "holds"),
          "a cl_mem smaller than asked is refused: %s", dk_last_error(ctx));
    clReleaseMemObject(mem);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
}
#endif

/* cudaMalloc and friends through dlopen, so that the test links nothing of
 * CUDA and runs on machines without it */
static void cuda(void)
{
    dk_context *ctx;
    void *rt = cudart_open(&ctx);
    if (!rt)
        return;
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(rt, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(rt, "cudaFree");
    int (*cuda_memcpy)(void *, const void *, size_t, int) = (int (*)(void *, const void *, size_t, int))dlsym(rt, "cudaMemcpy");
    dk_native nat;
    CHECK(dk_context_native(ctx, &nat) == DK_OK && nat.memory == DK_MEMORY_CUDA, "cuda's handles");
    dk_gauss_desc d;
    dk_plan *plan = plan_on(ctx, &d);
    float x[N];
    field(x);
    void *dev = NULL;
    CHECK(cuda_malloc(&dev, sizeof x) == 0 && cuda_memcpy(dev, x, sizeof x, 1) == 0, "cudaMalloc/cudaMemcpy");
    dk_buffer *b = NULL;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, dev, sizeof x, &b) == DK_OK, "cuda wraps device memory: %s",
          dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "in place on the wrapper: %s", dk_last_error(ctx));
    dk_buffer_destroy(b);
    CHECK(cuda_memcpy(x, dev, sizeof x, 2) == 0, "the device memory is still the caller's");
    compare("cuda", x, &d);
    /* memory 4 bytes past an aligned address (an OpenACC data region packs
     * its arrays so), in place and out of place onto an aligned one */
    void *odd = NULL;
    field(x);
    CHECK(cuda_malloc(&odd, sizeof x + 4) == 0 && cuda_memcpy((char *)odd + 4, x, sizeof x, 1) == 0,
          "cudaMalloc/cudaMemcpy");
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, (char *)odd + 4, sizeof x, &b) == DK_OK, "wrap: %s", dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "in place, 4-byte aligned: %s", dk_last_error(ctx));
    CHECK(cuda_memcpy(x, (char *)odd + 4, sizeof x, 2) == 0, "read back");
    compare("cuda, 4-byte aligned, in place", x, &d);
    field(x);
    CHECK(cuda_memcpy((char *)odd + 4, x, sizeof x, 1) == 0, "rewrite");
    dk_buffer *aligned = NULL;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, dev, sizeof x, &aligned) == DK_OK, "wrap: %s", dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, aligned) == DK_OK, "out of place from 4-byte aligned: %s", dk_last_error(ctx));
    CHECK(cuda_memcpy(x, dev, sizeof x, 2) == 0, "read back");
    compare("cuda, from 4-byte aligned", x, &d);
    dk_buffer_destroy(b);
    dk_buffer_destroy(aligned);
    cuda_free(odd);
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, x, sizeof x, &b) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "not CUDA device memory"),
          "a host pointer claimed as device memory is refused: %s", dk_last_error(ctx));
    cuda_free(dev);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
}

int main(void)
{
    host();
#ifdef DK_TEST_OPENCL
    opencl();
#endif
    cuda();
    return failures ? 1 : 0;
}
