/* The built-in models. Adding one: its file beside this one (see model.h),
 * an #include line below and its name in GB_MODELS. */
#include "lorenz63.h"
#include "lorenz96.h"
#include "pcr3bp.h"
#include "cr3bp.h"

#define GB_MODELS(X) X(lorenz63) X(lorenz96) X(pcr3bp) X(cr3bp)
