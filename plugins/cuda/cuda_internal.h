/* dakit cuda plugin: what plugin.cu and gauss.cu share. */
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
} dk_cuda_device;

/* A buffer handle: device memory of `bytes` bytes (ptr NULL when bytes == 0). */
typedef struct dk_cuda_buffer {
    void *ptr;
    size_t bytes;
} dk_cuda_buffer;

/* Turns a failed CUDA call into a status and a sentence in msg. */
dk_status dk_cuda_fail(dk_msg *msg, cudaError_t err, const char *what);

/* Makes the device current on the calling thread (the core may call from
 * different threads, one at a time). */
dk_status dk_cuda_enter(const dk_cuda_device *dev, dk_msg *msg);

extern const dk_gauss_ops dk_cuda_gauss_ops;

#endif
