#include "common.h"
static int probe_none(dk_device_info *devices, int max, dk_msg *msg)
{
    (void)devices; (void)max;
    dk_msg_set(msg, "no test widget is attached");
    return 0;
}
static const dk_plugin desc = BROKEN_PLUGIN("nodevice", DK_PLUGIN_ABI_VERSION, probe_none);
DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void) { return &desc; }
