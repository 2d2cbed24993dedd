/* The sparse grid's index: an open-addressing hash table (linear probing,
 * occupancy at most one half) from a cell's multi-index to its position in
 * the cell arrays. Slots hold positions; the multi-indices live in the
 * caller's key array (dim int32 per cell), so the table stays small and a
 * probe compares keys only on a matching 32-bit tag. Capacity doubles when
 * needed: no cell is ever refused. Deletion shifts later entries back, so
 * there are no tombstones. Header-only: the library and the plugins share
 * it. */
#ifndef DAKIT_GBEES_HASH_H
#define DAKIT_GBEES_HASH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb_hash {
    int dim;
    size_t cap;      /* power of two */
    size_t count;
    int32_t *slot;   /* position in the key array, or -1 */
    uint32_t *tag;   /* the hash's high bits, to skip most key compares */
} gb_hash;

static inline uint64_t gb_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A cyclic-polynomial hash: each component, mixed, is folded in after
 * rotating the running value, so permuted indices hash apart; a final mix
 * spreads the bits the mask keeps. */
static inline uint64_t gb_hash_key(const int32_t *k, int dim)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)(dim + 1);
    for (int i = 0; i < dim; i++) {
        h = (h << 7) | (h >> 57);
        h ^= gb_mix64((uint64_t)(uint32_t)k[i] + 0x632be59bd9b4e019ull * (uint64_t)(i + 1));
    }
    return gb_mix64(h);
}

/* Written out rather than memcmp: keys are a few ints, and a library call
 * per probe costs more than the compare. */
static inline int gb_key_eq(const int32_t *a, const int32_t *b, int dim)
{
    for (int i = 0; i < dim; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static inline int gb_hash_init(gb_hash *t, int dim, size_t min_cap)
{
    size_t cap = 64;
    while (cap < 2 * min_cap)
        cap *= 2;
    t->dim = dim;
    t->cap = cap;
    t->count = 0;
    t->slot = malloc(cap * sizeof *t->slot);
    t->tag = malloc(cap * sizeof *t->tag);
    if (!t->slot || !t->tag) {
        free(t->slot);
        free(t->tag);
        t->slot = NULL;
        t->tag = NULL;
        return -1;
    }
    memset(t->slot, 0xff, cap * sizeof *t->slot);
    return 0;
}

static inline void gb_hash_free(gb_hash *t)
{
    free(t->slot);
    free(t->tag);
    t->slot = NULL;
    t->tag = NULL;
    t->cap = t->count = 0;
}

static inline void gb_hash_clear(gb_hash *t)
{
    memset(t->slot, 0xff, t->cap * sizeof *t->slot);
    t->count = 0;
}

/* Position of key, or -1. keys: the caller's key array. */
static inline int32_t gb_hash_find(const gb_hash *t, const int32_t *keys, const int32_t *key)
{
    uint64_t h = gb_hash_key(key, t->dim);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t mask = t->cap - 1, s = (size_t)h & mask;
    for (;;) {
        int32_t pos = t->slot[s];
        if (pos < 0)
            return -1;
        if (t->tag[s] == tag && gb_key_eq(keys + (size_t)pos * t->dim, key, t->dim))
            return pos;
        s = (s + 1) & mask;
    }
}

/* Places pos (whose key is keys[pos]) without checking for a duplicate. */
static inline void gb_hash_place(gb_hash *t, const int32_t *keys, int32_t pos)
{
    uint64_t h = gb_hash_key(keys + (size_t)pos * t->dim, t->dim);
    size_t mask = t->cap - 1, s = (size_t)h & mask;
    while (t->slot[s] >= 0)
        s = (s + 1) & mask;
    t->slot[s] = pos;
    t->tag[s] = (uint32_t)(h >> 32);
    t->count++;
}

/* gb_hash_place for many threads at once over distinct keys: a slot is
 * claimed by compare-and-swap. Which slot a key takes may depend on the
 * threads' timing, but lookups do not; count is the caller's to add. */
static inline void gb_hash_place_shared(gb_hash *t, const int32_t *keys, int32_t pos)
{
    uint64_t h = gb_hash_key(keys + (size_t)pos * t->dim, t->dim);
    size_t mask = t->cap - 1, s = (size_t)h & mask;
    for (;;) {
        int32_t empty = -1;
        if (__atomic_load_n(&t->slot[s], __ATOMIC_RELAXED) < 0 &&
            __atomic_compare_exchange_n(&t->slot[s], &empty, pos, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            t->tag[s] = (uint32_t)(h >> 32);
            return;
        }
        s = (s + 1) & mask;
    }
}

static inline int gb_hash_grow(gb_hash *t, const int32_t *keys)
{
    gb_hash bigger;
    if (gb_hash_init(&bigger, t->dim, t->cap) != 0)
        return -1;
    for (size_t s = 0; s < t->cap; s++)
        if (t->slot[s] >= 0)
            gb_hash_place(&bigger, keys, t->slot[s]);
    gb_hash_free(t);
    *t = bigger;
    return 0;
}

/* Adds pos under keys[pos]; 1 when added, 0 when the key was present,
 * -1 when the table could not grow. */
static inline int gb_hash_insert(gb_hash *t, const int32_t *keys, int32_t pos)
{
    if (gb_hash_find(t, keys, keys + (size_t)pos * t->dim) >= 0)
        return 0;
    if (2 * (t->count + 1) > t->cap && gb_hash_grow(t, keys) != 0)
        return -1;
    gb_hash_place(t, keys, pos);
    return 1;
}

/* Removes key; 1 when it was present. Later entries of the probe run move
 * back into the hole when their home allows it. */
static inline int gb_hash_remove(gb_hash *t, const int32_t *keys, const int32_t *key)
{
    uint64_t h = gb_hash_key(key, t->dim);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t mask = t->cap - 1, s = (size_t)h & mask;
    for (;;) {
        int32_t pos = t->slot[s];
        if (pos < 0)
            return 0;
        if (t->tag[s] == tag && gb_key_eq(keys + (size_t)pos * t->dim, key, t->dim))
            break;
        s = (s + 1) & mask;
    }
    size_t hole = s;
    for (size_t j = (hole + 1) & mask; t->slot[j] >= 0; j = (j + 1) & mask) {
        size_t home = (size_t)gb_hash_key(keys + (size_t)t->slot[j] * t->dim, t->dim) & mask;
        /* j's entry may fill the hole when its home is not cyclically in (hole, j] */
        int stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            t->slot[hole] = t->slot[j];
            t->tag[hole] = t->tag[j];
            hole = j;
        }
    }
    t->slot[hole] = -1;
    t->count--;
    return 1;
}

#endif
