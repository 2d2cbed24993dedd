/* A host-memory plugin ("mpifaulty") whose gauss plans are made but whose
 * device fails at every execute: the distributed test gives it to one rank
 * to show that a device error there becomes the same error on every rank. */
#include "broken/common.h"

static dk_status f_plan_create(void *device, const dk_gauss_setup *setup, void **plan, dk_msg *msg)
{
    (void)device;
    (void)msg;
    *plan = (void *)setup;
    return DK_OK;
}

static dk_status f_execute(void *plan, const void *in, void *out, dk_msg *msg)
{
    (void)plan;
    (void)in;
    (void)out;
    dk_msg_set(msg, "mpifaulty: the device failed (simulated)");
    return DK_ERR_BACKEND;
}

static void f_plan_destroy(void *plan) { (void)plan; }

static const char *const f_variants[] = {"fail", NULL};
static const dk_gauss_ops f_gauss = {
    .variants = f_variants,
    .plan_create = f_plan_create,
    .execute = f_execute,
    .plan_destroy = f_plan_destroy,
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN("mpifaulty", DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.gauss = &f_gauss;
    return &desc;
}
