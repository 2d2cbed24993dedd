/* The caller's own queue (dk_context_set_queue, dk_context_wait).
 *
 * Every backend: flags other than DK_QUEUE_ASYNC are refused; NULL is always
 * accepted; a backend without queues refuses a non-NULL one with a sentence
 * and waits for nothing.
 * (The opencl backend's queue: test_queue_opencl.c.)
 * cuda (skipped without a GPU): on the caller's stream, a 512 MB device copy
 * writes the field, dakit filters it in place with DK_QUEUE_ASYNC, and a
 * second copy reads the result, all queued without the host waiting: dakit
 * must wait for the first copy on the device, return before its work is
 * done, and the second copy must see its result. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dakit/dakit.h>

#include "check.h"
#include "cudart.h"

static void refuses_what_it_must(const char *backend, int takes_queues)
{
    dk_context *ctx;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        printf("%s absent: %s\n", backend, dk_last_error(NULL));
        return;
    }
    CHECK(dk_context_set_queue(ctx, NULL, 0) == DK_OK, "%s: NULL queue: %s", backend, dk_last_error(ctx));
    CHECK(dk_context_set_queue(ctx, NULL, 6) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "DK_QUEUE_ASYNC"),
          "%s: bad flags refused: %s", backend, dk_last_error(ctx));
    if (!takes_queues) {
        int dummy;
        CHECK(dk_context_set_queue(ctx, &dummy, DK_QUEUE_ASYNC) == DK_ERR_NOT_IMPLEMENTED &&
                  strstr(dk_last_error(ctx), "cannot order its work"),
              "%s: a queue refused: %s", backend, dk_last_error(ctx));
    }
    CHECK(dk_context_wait(ctx) == DK_OK, "%s: wait: %s", backend, dk_last_error(ctx));
    CHECK(dk_context_set_queue(NULL, NULL, 0) == DK_ERR_INVALID_ARGUMENT, "NULL context refused");
    printf("%s: queue arguments checked\n", backend);
    dk_context_destroy(ctx);
}

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*stream_create_fn)(void **);
typedef int (*stream_fn)(void *);

static void cuda(void)
{
    dk_context *ctx;
    void *rt = cudart_open(&ctx);
    if (!rt)
        return;
    malloc_fn cuda_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    free_fn cuda_free = (free_fn)dlsym(rt, "cudaFree");
    memcpy_fn cuda_memcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
    memcpy_async_fn cuda_memcpy_async = (memcpy_async_fn)dlsym(rt, "cudaMemcpyAsync");
    stream_create_fn stream_create = (stream_create_fn)dlsym(rt, "cudaStreamCreate");
    stream_fn stream_sync = (stream_fn)dlsym(rt, "cudaStreamSynchronize");
    stream_fn stream_query = (stream_fn)dlsym(rt, "cudaStreamQuery");
    stream_fn stream_destroy = (stream_fn)dlsym(rt, "cudaStreamDestroy");
    CHECK(cuda_malloc && cuda_memcpy_async && stream_create && stream_query, "libcudart's entry points");

    const size_t n = (size_t)1 << 27; /* 512 MB of float */
    const size_t bytes = n * sizeof(float);
    float *host = malloc(bytes);
    CHECK(host != NULL, "host memory");
    for (size_t i = 0; i < n; i++)
        host[i] = (float)((i * 37) % 101) - 50.0f;
    void *source, *field, *result, *stream;
    CHECK(cuda_malloc(&source, bytes) == 0 && cuda_malloc(&field, bytes) == 0 && cuda_malloc(&result, bytes) == 0,
          "cudaMalloc of 3 x 512 MB");
    CHECK(cuda_memcpy(source, host, bytes, 1) == 0, "cudaMemcpy to the device");
    CHECK(stream_create(&stream) == 0, "cudaStreamCreate");

    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF;
    d.boundary = DK_BOUNDARY_ZERO;
    d.ndim = 1;
    d.shape[0] = n;
    d.axes = 1;
    d.sigma[0] = 3;
    dk_plan *plan;
    CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_OK, "plan: %s", dk_last_error(ctx));
    dk_buffer *b;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_CUDA, field, bytes, &b) == DK_OK, "wrap: %s", dk_last_error(ctx));
    CHECK(dk_context_set_queue(ctx, stream, DK_QUEUE_ASYNC) == DK_OK, "set_queue: %s", dk_last_error(ctx));

    CHECK(cuda_memcpy_async(field, source, bytes, 3, stream) == 0, "the copy before");
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "execute on the caller's stream: %s", dk_last_error(ctx));
    int pending = stream_query(stream) != 0; /* cudaErrorNotReady */
    CHECK(cuda_memcpy_async(result, field, bytes, 3, stream) == 0, "the copy after");
    CHECK(pending, "dk_gauss_execute with DK_QUEUE_ASYNC returned before the caller's stream was done");
    CHECK(stream_sync(stream) == 0, "cudaStreamSynchronize");
    CHECK(dk_context_wait(ctx) == DK_OK, "wait: %s", dk_last_error(ctx));

    float *got = malloc(bytes);
    CHECK(got && cuda_memcpy(got, result, bytes, 2) == 0, "cudaMemcpy back");
    dk_gauss_reference(&d, host, host);
    double err = 0;
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fabs((double)got[i] - host[i]));
    CHECK(err < 1e-4, "cuda: max error %g against the reference: the work was not ordered with the stream", err);
    printf("cuda: copy, gauss and copy queued on the caller's stream, returned early, max error %.2e\n", err);

    /* back to blocking calls: the result is there when execute returns */
    CHECK(dk_context_set_queue(ctx, NULL, 0) == DK_OK, "set_queue(NULL): %s", dk_last_error(ctx));
    CHECK(dk_gauss_execute(plan, b, b) == DK_OK, "blocking execute: %s", dk_last_error(ctx));
    CHECK(stream_query(stream) == 0, "the caller's stream has nothing pending");

    dk_buffer_destroy(b);
    dk_plan_destroy(plan);
    stream_destroy(stream);
    cuda_free(source);
    cuda_free(field);
    cuda_free(result);
    free(host);
    free(got);
    dk_context_destroy(ctx);
}

int main(void)
{
    refuses_what_it_must("cpu", 0);
    refuses_what_it_must("opencl", 1);
    refuses_what_it_must("cuda", 1);
    cuda();
    return failures ? 1 : 0;
}
