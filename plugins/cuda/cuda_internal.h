/* dakit cuda plugin: what its files share (the device record, the buffer
 * handle, the error checks). */
#ifndef DAKIT_CUDA_INTERNAL_H
#define DAKIT_CUDA_INTERNAL_H

#include <cuda_runtime.h>

#include <dakit/plugin.h>

/* One opened device: its ordinal, the stream every entry works on, and the
 * properties the kernels are sized by. */
typedef struct dk_cuda_device {
    int ordinal;
    cudaStream_t stream;
    int sm_count;
    size_t smem_optin;  /* largest dynamic shared memory a block may ask for */
    size_t smem_block;  /* without opting in */
    /* dk_context_set_queue: the caller's stream (NULL: none), whether work
     * may be left running on return, and the events that order the two */
    cudaStream_t caller;
    bool async;
    cudaEvent_t caller_ready, work_done;
} dk_cuda_device;

/* A buffer handle: device memory of `bytes` bytes (ptr NULL when bytes == 0);
 * `wrapped`: the caller's memory, never freed here; `host`: that memory is
 * page-locked host memory, which kernels reach across the bus at ptr (its
 * device address). */
typedef struct dk_cuda_buffer {
    void *ptr;
    size_t bytes;
    int wrapped;
    int host;
} dk_cuda_buffer;

/* Turns a failed CUDA call into a status and a sentence in msg ("cuda:
 * <what> failed: <reason>"), clearing the runtime's last error so that the
 * next call does not report it again. */
dk_status dk_cuda_fail(dk_msg *msg, cudaError_t err, const char *what);

/* A cuFFT, cuSOLVER or cuBLAS status other than success as a sentence
 * ("cuda: <lib> <what> failed (<kind> <status>)"); oom: the status means the
 * library could not allocate. */
dk_status dk_cuda_lib_fail(dk_msg *msg, const char *lib, const char *kind, int status, bool oom,
                           const char *what);

/* ---- error checks: every CUDA call whose failure matters goes through one ----
 * Each expects `dk_msg *msg` in scope; `what` names the operation in the
 * sentence. */

/* True when the call failed; the last error is cleared. For a caller that
 * writes its own sentence (an allocation with its size) or that goes on
 * without the result (a best-effort query). */
static inline bool dk_cuda_failed(cudaError_t err)
{
    if (err == cudaSuccess)
        return false;
    (void)cudaGetLastError();
    return true;
}

/* On failure, returns the status from the enclosing function. */
#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return dk_cuda_fail(msg, e_, what);                                                    \
    } while (0)

/* On failure, sets `st` (a dk_status in scope) and jumps to label, for the
 * callers that release what they made so far. */
#define CUDA_TRY_GOTO(call, what, label)                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = dk_cuda_fail(msg, e_, what);                                                      \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* An expression, true when the call succeeded, for functions that return
 * something other than a dk_status. */
#define CUDA_OK(call, what) dk_cuda_ok((call), msg, what)
static inline bool dk_cuda_ok(cudaError_t err, dk_msg *msg, const char *what)
{
    if (err == cudaSuccess)
        return true;
    dk_cuda_fail(msg, err, what);
    return false;
}

/* The libraries' statuses (the caller includes the library's header). */
#define CUFFT_TRY(call, what)                                                                      \
    do {                                                                                           \
        cufftResult r_ = (call);                                                                   \
        if (r_ != CUFFT_SUCCESS)                                                                   \
            return dk_cuda_lib_fail(msg, "cuFFT", "cufftResult", (int)r_,                          \
                                    r_ == CUFFT_ALLOC_FAILED, what);                               \
    } while (0)

#define CUSOLVER_TRY(call, what)                                                                   \
    do {                                                                                           \
        cusolverStatus_t r_ = (call);                                                              \
        if (r_ != CUSOLVER_STATUS_SUCCESS)                                                         \
            return dk_cuda_lib_fail(msg, "cuSOLVER", "status", (int)r_,                            \
                                    r_ == CUSOLVER_STATUS_ALLOC_FAILED, what);                     \
    } while (0)

#define CUBLAS_TRY(call, what)                                                                     \
    do {                                                                                           \
        cublasStatus_t r_ = (call);                                                                \
        if (r_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return dk_cuda_lib_fail(msg, "cuBLAS", "status", (int)r_,                              \
                                    r_ == CUBLAS_STATUS_ALLOC_FAILED, what);                       \
    } while (0)

/* Makes the device current on the calling thread (the core may call from
 * different threads, one at a time). */
dk_status dk_cuda_enter(const dk_cuda_device *dev, dk_msg *msg);
/* The end of an entry whose results are all in device memory: waits for
 * dev->stream, or, with an asynchronous caller's stream, makes that stream
 * wait for it on the device and returns at once. */
dk_status dk_cuda_finish(const dk_cuda_device *dev, const char *what, dk_msg *msg);

extern const dk_gauss_ops dk_cuda_gauss_ops;

#ifdef __CUDACC__
/* D (16 x 8) += A (16 x 4) B (4 x 8) across the warp on the float64 tensor
 * cores, in mma.m16n8k4's fragment layout: lane (g, q) = (lane / 4,
 * lane % 4) holds A[g][q], A[g+8][q], B[q][g] and D[g][2q], D[g][2q+1],
 * D[g+8][2q], D[g+8][2q+1]. On sm_80 (-Dnvcc_arch=80) two m8n8k4 products
 * give the same layout. */
static __device__ __forceinline__ void dmma(double (&d)[4], const double (&a)[2], double b)
{
#if __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(b));
#else /* sm_80 (the plugin needs cp.async, so nothing older) */
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d[0]), "+d"(d[1])
        : "d"(a[0]), "d"(b));
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
        : "+d"(d[2]), "+d"(d[3])
        : "d"(a[1]), "d"(b));
#endif
}

/* D (16 x 8) = A (16 x 8) B (8 x 8) + C across the warp on the TF32 tensor
 * cores (mma.m16n8k8, float accumulators): lane (g, q) holds A[g][q],
 * A[g+8][q], A[g][q+4], A[g+8][q+4], B[q][g], B[q+4][g] (float bit patterns,
 * of which the tensor cores read the top 19) and C, D[g][2q], D[g][2q+1],
 * D[g+8][2q], D[g+8][2q+1]. */
static __device__ __forceinline__ void tf32mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                               const float (&c)[4])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}
#endif

#endif
