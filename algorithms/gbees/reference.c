/* The serial reference: the engine built without OpenMP. It defines the
 * result that every backend must reproduce. */
#include "gbees_internal.h"

#include <dakit/kit/gbees/engine.h>

static const char *const reference_variants[] = {"serial", NULL};
GB_DEFINE_OPS(dk_gbees_reference_ops, reference_variants)
