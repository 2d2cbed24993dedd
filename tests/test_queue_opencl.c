/* The opencl backend on the caller's own cl_command_queue
 * (dk_context_set_queue, dk_context_wait); skips (77) without an OpenCL
 * device.
 *
 * The caller makes a queue in the context's cl_context and queues the write
 * of the input on it behind a user event it holds. With DK_QUEUE_ASYNC,
 * dk_gauss_execute must return without waiting for that queue (an alarm
 * fails the test if it waits), must not run before the write (the output
 * still holds what it was filled with while the event is held), and a read
 * queued on the caller's queue after it must see its result, bit for bit
 * the blocking call's. Then: an ordered but blocking queue (flags 0), a
 * queue of another cl_context refused with a sentence, and NULL back to
 * blocking calls that no longer wait for the caller's queue. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dakit/dakit.h>

#include "check.h"

#define ROWS 384
#define COLS 512
#define COUNT ((size_t)ROWS * COLS)
#define BYTES (COUNT * sizeof(float))
#define SENTINEL -7.0f

static void waited_on_the_host(int sig)
{
    (void)sig;
    static const char text[] = "FAIL: a dakit call waited on the host for the caller's held queue\n";
    if (write(STDOUT_FILENO, text, sizeof text - 1) < 0)
        _exit(1);
    _exit(1);
}

static void field(float *x)
{
    for (size_t i = 0; i < COUNT; i++)
        x[i] = (float)((i * 37) % 101) - 50.0f;
}

/* Every element equal to v (read with a queue that dakit does not wait for). */
static int all_equal(cl_command_queue q, cl_mem mem, float *scratch, float v)
{
    if (clEnqueueReadBuffer(q, mem, CL_TRUE, 0, BYTES, scratch, 0, NULL, NULL) != CL_SUCCESS)
        return 0;
    for (size_t i = 0; i < COUNT; i++)
        if (scratch[i] != v)
            return 0;
    return 1;
}

static int fill(cl_command_queue q, cl_mem mem, float v)
{
    return clEnqueueFillBuffer(q, mem, &v, sizeof v, 0, BYTES, 0, NULL, NULL) == CL_SUCCESS &&
           clFinish(q) == CL_SUCCESS;
}

int main(void)
{
    dk_context *ctx;
    if (dk_context_create("opencl", &ctx) != DK_OK) {
        printf("skipped: no OpenCL device: %s\n", dk_last_error(NULL));
        return 77;
    }
    signal(SIGALRM, waited_on_the_host);
    dk_native nat;
    CHECK(dk_context_native(ctx, &nat) == DK_OK && nat.memory == DK_MEMORY_OPENCL && nat.context,
          "opencl's handles: %s", dk_last_error(ctx));
    cl_context clctx = (cl_context)nat.context;
    cl_device_id device;
    CHECK(clGetContextInfo(clctx, CL_CONTEXT_DEVICES, sizeof device, &device, NULL) == CL_SUCCESS,
          "the context's device");

    dk_gauss_desc d;
    dk_gauss_desc_init(&d);
    d.method = DK_GAUSS_RF;
    d.boundary = DK_BOUNDARY_ZERO;
    d.ndim = 2;
    d.shape[0] = ROWS;
    d.shape[1] = COLS;
    d.axes = 3;
    d.sigma[0] = 3;
    d.sigma[1] = 5;
    dk_plan *plan;
    CHECK(dk_gauss_plan_create(ctx, &d, &plan) == DK_OK, "plan: %s", dk_last_error(ctx));

    float *input = malloc(BYTES), *want = malloc(BYTES), *got = malloc(BYTES), *scratch = malloc(BYTES);
    CHECK(input && want && got && scratch, "host memory");
    field(input);

    /* the blocking result, on dakit's own buffers and queue */
    dk_buffer *bin, *bout;
    CHECK(dk_buffer_create(ctx, BYTES, &bin) == DK_OK && dk_buffer_create(ctx, BYTES, &bout) == DK_OK,
          "buffers: %s", dk_last_error(ctx));
    CHECK(dk_buffer_write(bin, input, BYTES) == DK_OK && dk_gauss_execute(plan, bin, bout) == DK_OK &&
              dk_buffer_read(bout, want, BYTES) == DK_OK,
          "blocking gauss: %s", dk_last_error(ctx));
    dk_buffer_destroy(bin);
    dk_buffer_destroy(bout);

    /* the caller's queue and memory; `other` is a queue dakit never waits for */
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(clctx, device, 0, &err);
    CHECK(err == CL_SUCCESS, "clCreateCommandQueue: %d", err);
    cl_command_queue other = clCreateCommandQueue(clctx, device, 0, &err);
    CHECK(err == CL_SUCCESS, "clCreateCommandQueue: %d", err);
    cl_mem in_mem = clCreateBuffer(clctx, CL_MEM_READ_WRITE, BYTES, NULL, &err);
    CHECK(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    cl_mem out_mem = clCreateBuffer(clctx, CL_MEM_READ_WRITE, BYTES, NULL, &err);
    CHECK(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    CHECK(fill(q, in_mem, 0.0f) && fill(q, out_mem, SENTINEL), "filling the caller's buffers");
    dk_buffer *win, *wout;
    CHECK(dk_buffer_wrap(ctx, DK_MEMORY_OPENCL, in_mem, BYTES, &win) == DK_OK &&
              dk_buffer_wrap(ctx, DK_MEMORY_OPENCL, out_mem, BYTES, &wout) == DK_OK,
          "wrapping the caller's cl_mem: %s", dk_last_error(ctx));

    /* DK_QUEUE_ASYNC: queued between the caller's write and read */
    CHECK(dk_context_set_queue(ctx, q, DK_QUEUE_ASYNC) == DK_OK, "set_queue: %s", dk_last_error(ctx));
    cl_event hold = clCreateUserEvent(clctx, &err);
    CHECK(err == CL_SUCCESS, "clCreateUserEvent: %d", err);
    CHECK(clEnqueueWriteBuffer(q, in_mem, CL_FALSE, 0, BYTES, input, 1, &hold, NULL) == CL_SUCCESS,
          "the caller's write, held");
    alarm(60);
    CHECK(dk_gauss_execute(plan, win, wout) == DK_OK, "execute on the caller's queue: %s", dk_last_error(ctx));
    alarm(0);
    cl_event read;
    CHECK(clEnqueueReadBuffer(q, out_mem, CL_FALSE, 0, BYTES, got, 0, NULL, &read) == CL_SUCCESS,
          "the caller's read after");
    CHECK(clFlush(q) == CL_SUCCESS, "clFlush");
    cl_int state = CL_COMPLETE;
    clGetEventInfo(read, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    CHECK(state != CL_COMPLETE, "the caller's read finished while its write was held");
    CHECK(all_equal(other, out_mem, scratch, SENTINEL),
          "dakit's kernels wrote the output before the caller's write was released");
    CHECK(clSetUserEventStatus(hold, CL_COMPLETE) == CL_SUCCESS, "releasing the caller's write");
    CHECK(clFinish(q) == CL_SUCCESS, "clFinish on the caller's queue");
    CHECK(dk_context_wait(ctx) == DK_OK, "wait: %s", dk_last_error(ctx));
    CHECK(memcmp(got, want, BYTES) == 0, "the caller's read differs from the blocking result");
    if (!failures)
        printf("opencl: write (held), gauss and read queued on the caller's queue; execute returned early; "
           "bit for bit the blocking result\n");
    clReleaseEvent(read);
    clReleaseEvent(hold);

    /* flags 0: ordered after the caller's queue, and done when it returns */
    CHECK(fill(q, in_mem, 0.0f) && fill(q, out_mem, SENTINEL), "filling the caller's buffers");
    CHECK(dk_context_set_queue(ctx, q, 0) == DK_OK, "set_queue, flags 0: %s", dk_last_error(ctx));
    CHECK(clEnqueueWriteBuffer(q, in_mem, CL_FALSE, 0, BYTES, input, 0, NULL, NULL) == CL_SUCCESS &&
              clFlush(q) == CL_SUCCESS,
          "the caller's write");
    CHECK(dk_gauss_execute(plan, win, wout) == DK_OK, "ordered blocking execute: %s", dk_last_error(ctx));
    CHECK(clEnqueueReadBuffer(other, out_mem, CL_TRUE, 0, BYTES, got, 0, NULL, NULL) == CL_SUCCESS &&
              memcmp(got, want, BYTES) == 0,
          "flags 0: the result was not there, or not after the caller's write, when execute returned");
    CHECK(clFinish(q) == CL_SUCCESS, "clFinish");

    /* a queue of another cl_context: refused, with a sentence */
    cl_context foreign = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err == CL_SUCCESS, "clCreateContext: %d", err);
    cl_command_queue foreign_q = clCreateCommandQueue(foreign, device, 0, &err);
    CHECK(err == CL_SUCCESS, "clCreateCommandQueue: %d", err);
    CHECK(dk_context_set_queue(ctx, foreign_q, DK_QUEUE_ASYNC) == DK_ERR_INVALID_ARGUMENT &&
              strstr(dk_last_error(ctx), "another cl_context"),
          "a queue of another cl_context refused: %s", dk_last_error(ctx));
    printf("opencl: a queue of another cl_context refused: %s\n", dk_last_error(ctx));
    clReleaseCommandQueue(foreign_q);
    clReleaseContext(foreign);

    /* NULL: blocking again, and the caller's held queue is waited for no more */
    CHECK(dk_context_set_queue(ctx, NULL, 0) == DK_OK, "set_queue(NULL): %s", dk_last_error(ctx));
    CHECK(fill(other, out_mem, SENTINEL), "filling the output");
    hold = clCreateUserEvent(clctx, &err);
    CHECK(err == CL_SUCCESS, "clCreateUserEvent: %d", err);
    CHECK(clEnqueueFillBuffer(q, in_mem, &(float){1.0f}, sizeof(float), 0, BYTES, 1, &hold, NULL) == CL_SUCCESS &&
              clFlush(q) == CL_SUCCESS,
          "the caller's fill, held");
    alarm(60);
    CHECK(dk_gauss_execute(plan, win, wout) == DK_OK, "blocking execute: %s", dk_last_error(ctx));
    alarm(0);
    CHECK(clEnqueueReadBuffer(other, out_mem, CL_TRUE, 0, BYTES, got, 0, NULL, NULL) == CL_SUCCESS &&
              memcmp(got, want, BYTES) == 0,
          "queue NULL: the result was not there when execute returned");
    CHECK(clSetUserEventStatus(hold, CL_COMPLETE) == CL_SUCCESS && clFinish(q) == CL_SUCCESS,
          "releasing the caller's fill");
    clReleaseEvent(hold);
    if (!failures)
        printf("opencl: queue NULL: blocking calls, not ordered with the caller's queue\n");

    dk_buffer_destroy(win);
    dk_buffer_destroy(wout);
    dk_plan_destroy(plan);
    dk_context_destroy(ctx);
    clReleaseMemObject(in_mem);
    clReleaseMemObject(out_mem);
    clReleaseCommandQueue(q);
    clReleaseCommandQueue(other);
    free(input);
    free(want);
    free(got);
    free(scratch);
    return failures ? 1 : 0;
}
