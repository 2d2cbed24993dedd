/* The built-in models' descriptors (the model files, compiled for the
 * host here) and lookup by name. The list is all.h. */
#include <string.h>

#include "../../core/internal.h"
#include <dakit/kit/gbees/models/model.h>
#include <dakit/kit/gbees/models/all.h>

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
