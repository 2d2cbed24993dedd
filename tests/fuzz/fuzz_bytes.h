/* The structure-aware fuzz targets' reader of their input: numbers taken
 * from the front of the bytes, zeros once they run out. */
#ifndef DAKIT_FUZZ_BYTES_H
#define DAKIT_FUZZ_BYTES_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct fuzz_bytes {
    const uint8_t *p;
    size_t left;
} fuzz_bytes;

static uint8_t fb_u8(fuzz_bytes *b)
{
    if (!b->left)
        return 0;
    b->left--;
    return *b->p++;
}

static uint16_t fb_u16(fuzz_bytes *b)
{
    return (uint16_t)(fb_u8(b) | fb_u8(b) << 8);
}

/* A double: mostly small numbers, sometimes the hostile ones (inf, NaN,
 * 1e308, -0, huge integers), sometimes any bit pattern. */
static double fb_double(fuzz_bytes *b)
{
    static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, 1e-308, 4294967296.0,
                                     9.2233720368547758e18, 1.8446744073709552e19, 9.969209968386869e36,
                                     -127, 255, -32767, 65535};
    uint8_t k = fb_u8(b);
    if (k < 128)
        return (double)(int8_t)fb_u8(b) + fb_u8(b) / 256.0;
    if (k < 200)
        return special[k % (sizeof special / sizeof special[0])];
    if (k < 220)
        return k & 1 ? (double)INFINITY : -(double)INFINITY;
    if (k < 235)
        return (double)NAN;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits |= (uint64_t)fb_u8(b) << (8 * i);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}
#endif
