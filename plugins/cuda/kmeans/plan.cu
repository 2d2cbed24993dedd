/* dakit cuda plugin, kmeans: the plan, the choice of kernels and the ops
 * table. big.cu's k_big_* launches for plain k-means with k > DK_KMEANS_MAX_K,
 * else lloyd.cu's cooperative kernel with the variant's flags, plus the
 * texture (tex.cu) and phase (part.cu) kernels' scratch. */
#include "kmeans.cuh"

using namespace dk_cuda_kmeans;

namespace {

void plan_destroy(void *handle)
{
    Plan *p = (Plan *)handle;
    if (!p)
        return;
    cudaSetDevice(p->dev->ordinal);
    if (p->scratch)
        cudaFree(p->scratch);
    if (p->tex_scratch)
        cudaFree(p->tex_scratch);
    if (p->tex_stats_read)
        cudaEventDestroy(p->tex_stats_read);
    if (p->part_partial && !p->big)
        cudaFree(p->part_partial);
    if (p->label_stage)
        cudaFree(p->label_stage);
    if (p->minus_ones)
        cudaFree(p->minus_ones);
    if (p->side_start)
        cudaEventDestroy(p->side_start);
    if (p->side_done)
        cudaEventDestroy(p->side_done);
    if (p->side)
        cudaStreamDestroy(p->side);
    if (p->host_out)
        cudaFreeHost(p->host_out);
    free(p);
}

/* The plan's kernels, grids and scratch; the caller destroys p on failure. */
dk_status plan_fill(Plan *p, const dk_kmeans_setup *setup, dk_msg *msg)
{
    const dk_kmeans_desc &d = setup->desc;
    size_t kd = (size_t)d.k * d.d;
    /* Every variant gives the reference's labels (cuda_kmeans_variants). */
    const char *variant = setup->desc.variant;
    bool wsum = kd <= 512 && strcmp(variant, "atomic") != 0;
    bool screen = strcmp(variant, "exact") != 0;
    bool mma = !strcmp(variant, "mma");
    bool prefetch = mma || !strcmp(variant, "prefetch");
    dk_status st = lloyd_plan(p, setup, wsum, screen, prefetch, mma, msg);
    if (st == DK_OK && d.layout == DK_KMEANS_FEATURE_MAJOR && d.d == DK_KMEANS_TEXTURE_D && d.rows)
        st = tex_plan(p, msg);
    if (st == DK_OK)
        st = part_plan(p, msg);
    return st;
}

dk_status plan_create(void *device, const dk_kmeans_setup *setup, void **out, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda kmeans: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = *setup;
    /* the few results read back each call, page-locked: a shorter copy */
    if (cudaMallocHost((void **)&p->host_out, 8 * sizeof(double)) != cudaSuccess) {
        (void)cudaGetLastError();
        free(p);
        dk_msg_set(msg, "cuda kmeans: 64 bytes of page-locked host memory are not available");
        return DK_ERR_OUT_OF_MEMORY;
    }
    st = !setup->contiguity && setup->desc.k > DK_KMEANS_MAX_K ? big_plan(p, setup, msg)
                                                           : plan_fill(p, setup, msg);
    if (st != DK_OK) {
        plan_destroy(p);
        return st;
    }
    *out = p;
    return DK_OK;
}

dk_status execute(void *handle, const void *points, const void *mask, const void *init, void *labels,
                  void *centroids, dk_kmeans_result *res, dk_msg *msg)
{
    Plan *p = (Plan *)handle;
    dk_status st = dk_cuda_enter(p->dev, msg);
    if (st != DK_OK)
        return st;
    if (p->big)
        return big_execute(p, points, mask, init, labels, centroids, res, msg);
    return lloyd_execute(p, points, mask, init, labels, centroids, res, msg);
}

} // namespace

/* "mma": plain k-means with k <= 16 and d <= 8 in point-major rows and
 * no mask screened and summed on the tensor cores (lloyd.cu, mma_assign),
 * else as "prefetch"; "prefetch":
 * screened labels (screened_labels), the next step's points
 * loaded ahead, per-warp copies of the sums; "screen": the same without the
 * loads ahead; "exact": the exact distance to every centroid; "atomic": the
 * block's one copy of the sums with shared atomics (also taken by the others
 * when per-warp copies would be large, k * d > 512). */
static const char *const cuda_kmeans_variants[] = {"mma", "prefetch", "screen", "exact", "atomic", NULL};

extern "C" const dk_kmeans_ops dk_cuda_kmeans_ops = {
    .variants = cuda_kmeans_variants,
    .plan_create = plan_create,
    .execute = execute,
    .plan_destroy = plan_destroy,
    .texture_planes = texture_planes,
    .texture_features = texture_features,
    .assign_partial = assign_partial,
    .update = update,
    .objective = objective,
    .seed_distance = seed_distance,
    .seed_read = seed_read,
    .assign_weighted = assign_weighted,
    .objective_weighted = objective_weighted,
    .seed_distance_weighted = seed_distance_weighted,
};
