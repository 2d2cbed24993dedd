/* A descriptor whose size does not even reach the buffer entries every
 * plugin must have: refused with the sizes in the reason. */
#include "common.h"
static const dk_plugin desc = BROKEN_PLUGIN_SIZED("shortdesc", DK_PLUGIN_ABI_VERSION, b_probe_one, 24);
DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void) { return &desc; }
