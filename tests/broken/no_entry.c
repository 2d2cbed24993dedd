#include "common.h"
/* A real plugin whose author misspelt the entry symbol. */
static const dk_plugin desc = BROKEN_PLUGIN("noentry", DK_PLUGIN_ABI_VERSION, b_probe_one);
DK_PLUGIN_EXPORT const dk_plugin *dakit_plugin_entyr(void) { return &desc; }
