/* A host-memory plugin that notices when the core enters it from two
 * threads at once: its gauss execute marks itself busy, lingers, and fails
 * with "entered concurrently" when it finds the mark already set. The
 * threads test shares one context of it between threads. */
#include <stdatomic.h>
#include <time.h>

#include "common.h"

static atomic_int busy;

static dk_status w_plan_create(void *device, const dk_gauss_setup *setup, void **plan, dk_msg *msg)
{
    (void)device;
    (void)msg;
    *plan = (void *)setup; /* the setup outlives the plan (plugin.h) */
    return DK_OK;
}

static dk_status w_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    const dk_gauss_setup *s = plan;
    if (atomic_exchange(&busy, 1)) {
        dk_msg_set(msg, "watchdog: entered concurrently");
        return DK_ERR_BACKEND;
    }
    struct timespec linger = {0, 50000};
    nanosleep(&linger, NULL);
    memmove(out, in, s->count * (s->desc.dtype == DK_F64 ? 8 : 4));
    atomic_store(&busy, 0);
    return DK_OK;
}

static void w_plan_destroy(void *plan) { (void)plan; }

static const char *const w_variants[] = {"copy", NULL};
static const dk_gauss_ops w_gauss = {
    .variants = w_variants,
    .plan_create = w_plan_create,
    .execute = w_execute,
    .plan_destroy = w_plan_destroy,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN("watchdog", DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.gauss = &w_gauss;
    return &desc;
}
