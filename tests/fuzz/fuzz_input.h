/* The fuzz targets' one helper: dakit's parsers read files by path, so each
 * input goes to a private temporary file first. */
#ifndef DAKIT_FUZZ_INPUT_H
#define DAKIT_FUZZ_INPUT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Writes data to a new temporary file; its path is in path (size 64).
 * Returns 0, or -1 when the file could not be written. */
static int fuzz_input_file(const uint8_t *data, size_t size, char *path)
{
    snprintf(path, 64, "/tmp/dakit-fuzz-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        done += (size_t)w;
    }
    close(fd);
    return 0;
}
#endif
