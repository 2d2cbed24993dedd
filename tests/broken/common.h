/* Shared pieces of the deliberately broken plugins the loader tests use:
 * host-memory buffers, so each file differs from a good plugin only in the
 * one defect it exists to show. */
#include <stdlib.h>
#include <string.h>

#include <dakit/plugin.h>

static dk_status b_open(int index, void **device, dk_msg *msg)
{
    (void)index;
    (void)msg;
    *device = malloc(1);
    return DK_OK;
}
static void b_close(void *device) { free(device); }
static dk_status b_alloc(void *device, size_t bytes, void **buffer, dk_msg *msg)
{
    (void)device;
    *buffer = malloc(bytes);
    if (!*buffer) {
        dk_msg_set(msg, "out of memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    return DK_OK;
}
static void b_free(void *device, void *buffer) { (void)device; free(buffer); }
static dk_status b_write(void *device, void *buffer, const void *src, size_t bytes, dk_msg *msg)
{
    (void)device; (void)msg;
    memcpy(buffer, src, bytes);
    return DK_OK;
}
static dk_status b_read(void *device, const void *buffer, void *dst, size_t bytes, dk_msg *msg)
{
    (void)device; (void)msg;
    memcpy(dst, buffer, bytes);
    return DK_OK;
}
static dk_status b_copy(void *device, void *dst, const void *src, size_t bytes, dk_msg *msg)
{
    (void)device; (void)msg;
    memcpy(dst, src, bytes);
    return DK_OK;
}
__attribute__((unused)) static int b_probe_one(dk_device_info *devices, int max, dk_msg *msg)
{
    (void)msg;
    if (max > 0)
        strcpy(devices[0].name, "test device");
    return 1;
}
#define BROKEN_PLUGIN_SIZED(NAME, ABI, PROBE, SIZE)                                    \
    {                                                                                  \
        .abi_version = ABI, .size = SIZE, .name = NAME, .version = "0.0",              \
        .priority = 100, .probe = PROBE, .device_open = b_open,                        \
        .device_close = b_close, .buffer_alloc = b_alloc, .buffer_free = b_free,       \
        .buffer_write = b_write, .buffer_read = b_read, .buffer_copy = b_copy,         \
        .gauss = NULL                                                                  \
    }
#define BROKEN_PLUGIN(NAME, ABI, PROBE) BROKEN_PLUGIN_SIZED(NAME, ABI, PROBE, DK_PLUGIN_SIZE)
