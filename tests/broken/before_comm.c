/* A plugin built before the comm slot was appended to dk_plugin: its
 * descriptor ends before the comm slot and says so in `size`. The slot past
 * that size holds a poison pointer that would crash the core if it were
 * read as a dk_comm_ops table, so the plugin must read as offering no
 * device-side communication. */
#include <stddef.h>

#include "common.h"

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN_SIZED("beforecomm", DK_PLUGIN_ABI_VERSION, b_probe_one,
                                                offsetof(dk_plugin, comm));
    desc.comm = (const dk_comm_ops *)(uintptr_t)0x10;
    return &desc;
}
