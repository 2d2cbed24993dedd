/* The built-in models. Adding one: a file beside this one defining
 * dk_gbees_model_<name>, its name in the list below, and in meson.build. */
#include <string.h>

#include "../../../core/internal.h"

#define GB_MODELS(X) X(lorenz63) X(lorenz96) X(pcr3bp) X(cr3bp)

#define GB_DECLARE(name) extern const dk_gbees_model dk_gbees_model_##name;
GB_MODELS(GB_DECLARE)
#define GB_ENTRY(name) &dk_gbees_model_##name,
static const dk_gbees_model *const models[] = {GB_MODELS(GB_ENTRY) NULL};

DK_API const dk_gbees_model *const *dk_gbees_models(void)
{
    return models;
}

DK_API const dk_gbees_model *dk_gbees_model_find(const char *name)
{
    for (int i = 0; name && models[i]; i++)
        if (strcmp(models[i]->name, name) == 0)
            return models[i];
    return NULL;
}
