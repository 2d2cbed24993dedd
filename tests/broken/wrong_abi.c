#include "common.h"
static const dk_plugin desc = BROKEN_PLUGIN("wrongabi", DK_PLUGIN_ABI_VERSION + 41, b_probe_one);
DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void) { return &desc; }
