#include "common.h"
/* A working plugin that implements no algorithm at all. */
static const dk_plugin desc = BROKEN_PLUGIN("nogauss", DK_PLUGIN_ABI_VERSION, b_probe_one);
DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void) { return &desc; }
