/* A plugin built before the gbees slot was appended to dk_plugin: its
 * descriptor ends after the kmeans slot and says so in `size`. The slot
 * past that size holds a poison pointer that would crash the core if it
 * were read as the gbees table, so the loader must stop at the plugin's
 * size. */
#include <stddef.h>

#include "common.h"

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN_SIZED("older", DK_PLUGIN_ABI_VERSION, b_probe_one,
                                                offsetof(dk_plugin, gbees));
    desc.gbees = (const struct dk_gbees_ops *)(uintptr_t)0x10;
    return &desc;
}
