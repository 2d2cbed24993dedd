#ifndef DAKIT_GBEES_INTERNAL_H
#define DAKIT_GBEES_INTERNAL_H

#include <dakit/plugin.h>

#include "../../core/internal.h"

extern const dk_gbees_ops dk_gbees_reference_ops;

#endif
