/* A host-memory plugin ("mpifaulty") whose gauss plans are made but whose
 * device fails at every execute: the distributed test gives it to one rank
 * to show that a device error there becomes the same error on every rank.
 * Built a second time with FAULTY_HALO ("mpihalofaulty"): it offers
 * execute_halo (which fails too) and copies boxes between its buffers, so
 * that the layer takes the halo path, whose outcome is agreed after the
 * exchanges rather than by a round trip of its own. */
#include <string.h>

#include "broken/common.h"

#ifdef FAULTY_HALO
#define FAULTY_NAME "mpihalofaulty"
#else
#define FAULTY_NAME "mpifaulty"
#endif

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
    dk_msg_set(msg, FAULTY_NAME ": the device failed (simulated)");
    return DK_ERR_BACKEND;
}

#ifdef FAULTY_HALO
static dk_status f_execute_halo(void *plan, const dk_gauss_halo *halo, const void *in, void *out, dk_msg *msg)
{
    (void)halo;
    return f_execute(plan, in, out, msg);
}

/* Row by row, as the cpu plugin: the exchange packs and unpacks with it. */
static dk_status f_copy_box(void *device, void *dst, const void *src, const dk_box_copy *b, dk_msg *msg)
{
    (void)device;
    (void)msg;
    size_t row = b->count[2] * b->esize;
    for (size_t i = 0; i < b->count[0]; i++)
        for (size_t j = 0; j < b->count[1]; j++) {
            size_t s = ((b->src_lo[0] + i) * b->src_shape[1] + b->src_lo[1] + j) * b->src_shape[2] + b->src_lo[2];
            size_t d = ((b->dst_lo[0] + i) * b->dst_shape[1] + b->dst_lo[1] + j) * b->dst_shape[2] + b->dst_lo[2];
            memcpy((char *)dst + b->dst_offset + d * b->esize, (const char *)src + b->src_offset + s * b->esize, row);
        }
    return DK_OK;
}
#endif

static void f_plan_destroy(void *plan) { (void)plan; }

static const char *const f_variants[] = {"fail", NULL};
static const dk_gauss_ops f_gauss = {
    .variants = f_variants,
    .plan_create = f_plan_create,
    .execute = f_execute,
    .plan_destroy = f_plan_destroy,
#ifdef FAULTY_HALO
    .execute_halo = f_execute_halo,
#endif
};

DK_PLUGIN_EXPORT const dk_plugin *DK_PLUGIN_ENTRY(void)
{
    static dk_plugin desc = BROKEN_PLUGIN(FAULTY_NAME, DK_PLUGIN_ABI_VERSION, b_probe_one);
    desc.priority = 0;
    desc.gauss = &f_gauss;
#ifdef FAULTY_HALO
    desc.ops_generation = DK_PLUGIN_OPS_GENERATION;
    desc.buffer_copy_box = f_copy_box;
#endif
    return &desc;
}
