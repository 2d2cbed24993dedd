/* gbees on the cpu backend: the shared engine with its per-cell loops
 * spread over the host's cores by OpenMP. Growth and the index rebuild
 * stay serial (they insert into one hash table); every loop that writes
 * only its own cell runs in parallel, and the engine's sums go through
 * fixed chunks, so the result equals the serial reference bit for bit. */
#include "../../algorithms/gbees/engine.h"

static const char *const cpu_gbees_variants[] = {"openmp", NULL};
GB_DEFINE_OPS(dk_cpu_gbees_ops, cpu_gbees_variants)
