/* The sparse grid's hash table: insert, lookup, remove, growth, and
 * collisions (many keys forced into a small table, and keys that differ
 * only by a permutation). */
#include <stdint.h>
#include <stdlib.h>

#include <dakit/kit/gbees/hash.h>
#include "check.h"

#define DIM 4
#define N 20000

int main(void)
{
    static int32_t keys[N * DIM];
    gb_hash t;
    CHECK(gb_hash_init(&t, DIM, 1) == 0, "init");
    size_t cap0 = t.cap;
    /* a 4-D block of indices, negatives included, plus permutations */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < DIM; i++)
            keys[n * DIM + i] = (n / (i == 0 ? 1 : i == 1 ? 20 : i == 2 ? 400 : 8000)) % 20 - 10 + (i == 3 ? n / 8000 : 0);
    int inserted = 0;
    for (int n = 0; n < N; n++) {
        int r = gb_hash_insert(&t, keys, n);
        CHECK(r >= 0, "insert %d failed", n);
        inserted += r == 1;
    }
    CHECK(t.cap > cap0, "the table grew (capacity %zu from %zu)", t.cap, cap0);
    CHECK(2 * t.count <= t.cap, "occupancy at most one half: %zu in %zu", t.count, t.cap);
    CHECK((size_t)inserted == t.count, "count %zu, inserted %d", t.count, inserted);
    /* every key found at a position holding the same key */
    for (int n = 0; n < N; n++) {
        int32_t pos = gb_hash_find(&t, keys, keys + n * DIM);
        CHECK(pos >= 0 && memcmp(keys + pos * DIM, keys + n * DIM, sizeof(int32_t) * DIM) == 0, "find %d", n);
    }
    /* a duplicate is refused, an absent key not found */
    CHECK(inserted == N, "all %d keys distinct and inserted (%d)", N, inserted);
    CHECK(gb_hash_insert(&t, keys, 0) == 0, "duplicate refused");
    int32_t absent[DIM] = {1000, -1000, 7, 7};
    CHECK(gb_hash_find(&t, keys, absent) == -1, "absent key not found");
    /* permutations of one key are distinct keys */
    int32_t perm[4 * DIM] = {1, 2, 3, 4, 4, 3, 2, 1, 2, 1, 4, 3, 3, 4, 1, 2};
    uint64_t h0 = gb_hash_key(perm, DIM);
    for (int p = 1; p < 4; p++)
        CHECK(gb_hash_key(perm + p * DIM, DIM) != h0, "permutation %d hashes alike", p);
    /* remove every other key; the rest stay reachable across the shifted runs */
    for (int n = 0; n < N; n += 2)
        CHECK(gb_hash_remove(&t, keys, keys + n * DIM) == 1, "remove %d", n);
    CHECK(gb_hash_remove(&t, keys, absent) == 0, "removing an absent key");
    for (int n = 0; n < N; n++) {
        int32_t pos = gb_hash_find(&t, keys, keys + n * DIM);
        if (n % 2)
            CHECK(pos == n, "kept key %d found at %d", n, pos);
        else
            CHECK(pos == -1, "removed key %d still found", n);
    }
    CHECK(t.count == N / 2, "count after removal %zu", t.count);
    gb_hash_free(&t);

    /* collisions: a table kept small (no growth) with every key in one
     * cluster still finds each; then removal from the middle of the run */
    gb_hash s;
    CHECK(gb_hash_init(&s, 1, 32) == 0, "init small");
    int32_t k1[40];
    for (int n = 0; n < 40; n++) {
        k1[n] = n * 1000003;
        gb_hash_place(&s, k1, n);
    }
    for (int n = 0; n < 40; n++)
        CHECK(gb_hash_find(&s, k1, &k1[n]) == n, "crowded find %d", n);
    for (int n = 0; n < 40; n += 3)
        gb_hash_remove(&s, k1, &k1[n]);
    for (int n = 0; n < 40; n++)
        CHECK(gb_hash_find(&s, k1, &k1[n]) == (n % 3 ? n : -1), "crowded after removal %d", n);
    gb_hash_free(&s);

    /* placement by many threads at once (the index rebuild after pruning):
     * every key findable at its own position, none lost to a race */
    {
        enum { M = 200000 };
        int32_t *mk = malloc(sizeof(int32_t) * M * DIM);
        CHECK(mk != NULL, "alloc");
        for (int n = 0; n < M; n++)
            for (int i = 0; i < DIM; i++)
                mk[n * DIM + i] = (n >> (5 * i)) % 32 - 16 + i;
        gb_hash m;
        CHECK(gb_hash_init(&m, DIM, M) == 0, "init shared");
#pragma omp parallel for schedule(dynamic, 64)
        for (int n = 0; n < M; n++)
            gb_hash_place_shared(&m, mk, n);
        m.count = M;
        int lost = 0;
        for (int n = 0; n < M; n++)
            lost += gb_hash_find(&m, mk, mk + n * DIM) != n;
        CHECK(lost == 0, "%d of %d keys placed together not found at their position", lost, M);
        gb_hash_free(&m);
        free(mk);
    }
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
