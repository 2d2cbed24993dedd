/* dk_host_alloc: on each backend present, memory from it carries data to
 * the device and back unchanged (1 MiB and one odd size); cpu's is 64-byte
 * aligned; cuda's is page-locked (the cuda plugin names it so when it is
 * offered as device memory); bad arguments are refused with a sentence and
 * dk_host_free takes NULL. opencl runs where its plugin is built (PoCL in
 * CI); cuda is skipped without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <dakit/dakit.h>

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

static void backend(const char *name)
{
    dk_context *ctx;
    if (dk_context_create(name, &ctx) != DK_OK) {
        printf("%s absent: %s\n", name, dk_last_error(NULL));
        return;
    }
    round_trip(ctx, name, 1 << 20);
    round_trip(ctx, name, 1001);
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
