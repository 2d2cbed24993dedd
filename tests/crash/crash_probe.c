/* A plugin whose probe crashes the process, as a broken vendor driver can.
 * Nothing may probe it unless the user asks for it by name or for auto
 * selection; `dakit info` probes it in a child process. */
#include <signal.h>

#include "../broken/common.h"

static int crash_probe(dk_device_info *devices, int max, dk_msg *msg)
{
    (void)devices;
    (void)max;
    (void)msg;
    raise(SIGSEGV);
    return 0;
}

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static const dk_plugin desc = BROKEN_PLUGIN("crashprobe", DK_PLUGIN_ABI_VERSION, crash_probe);
    return &desc;
}
