/* The built-in models. Adding one: its file beside this one (see model.h),
 * an #include line below and its name in GB_MODELS. */
#include "lorenz63.c"
#include "lorenz96.c"
#include "pcr3bp.c"
#include "cr3bp.c"

#define GB_MODELS(X) X(lorenz63) X(lorenz96) X(pcr3bp) X(cr3bp)
