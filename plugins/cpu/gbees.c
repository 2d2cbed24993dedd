/* gbees on the cpu backend: the shared engine with its per-cell loops
 * spread over the host's cores by OpenMP. Growth and initialization find
 * missing neighbours in parallel over fixed blocks and append them block
 * by block (only that append is serial); the index rebuild after pruning
 * places cells concurrently; every other loop writes only its own cell,
 * and the engine's sums go through fixed chunks, so the result equals the
 * serial reference bit for bit whatever the thread count. */
#include <dakit/kit/gbees/engine.h>

static const char *const cpu_gbees_variants[] = {"openmp", NULL};
GB_DEFINE_OPS(dk_cpu_gbees_ops, cpu_gbees_variants)
