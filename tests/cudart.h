/* The CUDA runtime through dlopen, for tests that must link nothing of CUDA
 * and run on machines without it: a cuda context and libcudart, or a line
 * saying which is absent. */
#ifndef DAKIT_TESTS_CUDART_H
#define DAKIT_TESTS_CUDART_H
#include <dlfcn.h>
#include <stdio.h>

#include <dakit/dakit.h>

/* A cuda context and libcudart's handle, or NULL (and *ctx NULL) with the
 * reason printed. */
static void *cudart_open(dk_context **ctx)
{
    if (dk_context_create("cuda", ctx) != DK_OK) {
        printf("cuda absent: %s\n", dk_last_error(NULL));
        *ctx = NULL;
        return NULL;
    }
    void *rt = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (!rt)
        rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        printf("cuda: no libcudart to allocate with; the cuda part is skipped\n");
        dk_context_destroy(*ctx);
        *ctx = NULL;
    }
    return rt;
}
#endif
