/* Device-side communication on one device: a one-rank communicator of the
 * backend named (default cuda, through NCCL), made as libdakit-mpi makes
 * it (core/comm.h), an in-place all-reduce of float32 and float64 on part
 * of a buffer, and a grouped send to itself and receive from itself.
 * Exits 77 with the reason when the backend cannot open (no GPU, no
 * driver), offers no device-side communication (built without NCCL), or
 * cannot load its library (libnccl missing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/comm.h"
#include "check.h"

static void all_reduce_keeps(dk_comm *comm, dk_context *ctx, dk_dtype t)
{
    const size_t n = 1000, off = 10, count = 500;
    size_t es = dk_dtype_size(t);
    unsigned char *h = malloc(n * es), *back = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        if (t == DK_F64)
            ((double *)h)[i] = 0.1 * (double)i - 3.0;
        else
            ((float *)h)[i] = 0.25f * (float)i - 7.0f;
    }
    dk_buffer *b = NULL;
    CHECK(dk_buffer_create(ctx, n * es, &b) == DK_OK, "buffer: %s", dk_last_error(ctx));
    if (b) {
        CHECK(dk_buffer_write(b, h, n * es) == DK_OK, "write: %s", dk_last_error(ctx));
        dk_status st = dk_comm_all_reduce_sum(comm, b, off, count, t);
        CHECK(st == DK_OK, "all-reduce %s: %s", dk_dtype_name(t), dk_last_error(ctx));
        CHECK(dk_buffer_read(b, back, n * es) == DK_OK, "read: %s", dk_last_error(ctx));
        /* one rank: the sum of one contribution is the value itself, bit for bit */
        CHECK(!memcmp(h, back, n * es), "a one-rank all-reduce of %s changed the buffer", dk_dtype_name(t));
        st = dk_comm_all_reduce_sum(comm, b, n - 5, 10, t);
        CHECK(st == DK_ERR_INVALID_ARGUMENT, "an all-reduce past the buffer's end is refused: %s",
              dk_last_error(ctx));
        dk_buffer_destroy(b);
    }
    free(h);
    free(back);
}

static void self_exchange(dk_comm *comm, dk_context *ctx)
{
    enum { BYTES = 4096, FROM = 128, TO = 512, LEN = 1024 };
    unsigned char a[BYTES], z[BYTES], got[BYTES];
    for (int i = 0; i < BYTES; i++)
        a[i] = (unsigned char)(i * 37 + 11);
    memset(z, 0, sizeof z);
    dk_buffer *src = NULL, *dst = NULL;
    CHECK(dk_buffer_create(ctx, BYTES, &src) == DK_OK && dk_buffer_create(ctx, BYTES, &dst) == DK_OK,
          "buffers: %s", dk_last_error(ctx));
    if (src && dst) {
        CHECK(dk_buffer_write(src, a, BYTES) == DK_OK && dk_buffer_write(dst, z, BYTES) == DK_OK, "write: %s",
              dk_last_error(ctx));
        /* the receive first: a group has no order */
        dk_comm_move m[2] = {{0, 1, dst, TO, LEN}, {0, 0, src, FROM, LEN}};
        dk_status st = dk_comm_exchange(comm, m, 2);
        CHECK(st == DK_OK, "self send/recv: %s", dk_last_error(ctx));
        CHECK(dk_buffer_read(dst, got, BYTES) == DK_OK, "read: %s", dk_last_error(ctx));
        CHECK(!memcmp(got + TO, a + FROM, LEN), "the received bytes are the sent ones");
        CHECK(!memcmp(got, z, TO) && !memcmp(got + TO + LEN, z, BYTES - TO - LEN),
              "nothing outside the received range was written");
        dk_comm_move bad = {1, 0, src, 0, 16};
        CHECK(dk_comm_exchange(comm, &bad, 1) == DK_ERR_INVALID_ARGUMENT, "peer 1 of a one-rank communicator is "
              "refused: %s", dk_last_error(ctx));
    }
    dk_buffer_destroy(src);
    dk_buffer_destroy(dst);
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "cuda";
    dk_context *ctx = NULL;
    if (dk_context_create(backend, &ctx) != DK_OK) {
        printf("skipped: backend %s cannot open here: %s\n", backend, dk_last_error(NULL));
        return 77;
    }
    if (!dk_comm_name(ctx)) {
        printf("skipped: backend %s offers no device-side communication (the cuda plugin without nccl.h at "
               "build time)\n", backend);
        dk_context_destroy(ctx);
        return 77;
    }
    char key[DK_COMM_KEY_LEN];
    dk_status st = dk_comm_device_key(ctx, key);
    if (st == DK_ERR_NOT_IMPLEMENTED) {
        printf("skipped: %s\n", dk_last_error(ctx));
        dk_context_destroy(ctx);
        return 77;
    }
    CHECK(st == DK_OK && key[0], "device key: %s", dk_last_error(ctx));
    printf("backend %s, device %s, communication %s, device key %s\n", backend, dk_context_device(ctx),
           dk_comm_name(ctx), key);
    size_t id_size = dk_comm_id_size(ctx);
    CHECK(id_size > 0 && id_size <= DK_COMM_ID_MAX, "id size %zu", id_size);
    unsigned char id[DK_COMM_ID_MAX];
    CHECK(dk_comm_make_id(ctx, id) == DK_OK, "make id: %s", dk_last_error(ctx));
    dk_comm *comm = NULL;
    CHECK(dk_comm_create(ctx, id, 1, 1, &comm) == DK_ERR_INVALID_ARGUMENT && !comm, "rank 1 of 1 is refused");
    st = dk_comm_create(ctx, id, 1, 0, &comm);
    CHECK(st == DK_OK && comm, "a one-rank communicator: %s", dk_last_error(ctx));
    if (comm) {
        all_reduce_keeps(comm, ctx, DK_F32);
        all_reduce_keeps(comm, ctx, DK_F64);
        self_exchange(comm, ctx);
        dk_comm_destroy(comm);
    }
    dk_context_destroy(ctx);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
