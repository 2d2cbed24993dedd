/* dakit cuda plugin, enkf: the plan (what every solver shares: H, c, G and
 * HPHT's tables), the list of solvers and the chooser, the ops table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enkf.cuh"

using namespace dk_cuda_enkf;

namespace {

/* "tiled" and "banded" run on the tensor cores where k_mma applies, else
 * on the vector kernels; "-simt" forces the vector kernels (for comparison
 * and where the tensor-core kernel is not wanted). */
const char *const variants[] = {"tiled", "banded", "fft", "tiled-simt", "banded-simt", "lowrank", NULL};

/* Every solver, in the order the chooser tries them: the tensor cores
 * first, then the vector kernels from the narrowest to the most general. */
const Solver *const solvers[] = {&solver_mma, &solver_band, &solver_direct, &solver_fft, &solver_lowrank};

/* The first solver that applies to the setup's variant, or NULL. */
const Solver *choose(const dk_enkf_setup *s, const dk_cuda_device *dev)
{
    for (const Solver *v : solvers)
        if (v->applicable(s, dev))
            return v;
    return NULL;
}

void plan_free(Plan *p)
{
    if (!p)
        return;
    if (cudaSetDevice(p->dev->ordinal) == cudaSuccess) {
        prof_report(p);
        for (int k = 0; k < PROF_MARKS; k++)
            if (p->prof.ev[k])
                cudaEventDestroy(p->prof.ev[k]);
        void *ptrs[] = {p->loc,    p->indptr, p->indices,  p->row_of, p->values, p->G,    p->e64,
                        p->pht64,  p->hpht64, p->x64,      p->spectrum, p->buf, p->blocks, p->blk_spectrum, p->partial, p->A,
                        p->D,      p->d_host_copy, p->r_dev, p->work,  p->info, p->range_lo, p->range_hi, p->mma_partial, p->hpht_seg,
                        p->lr_Q, p->lr_T, p->lr_U, p->lr_G2, p->lr_S, p->lr_part, p->lr_seg, p->lr_row_seg};
        for (void *q : ptrs)
            if (q)
                cudaFree(q);
        if (p->have_whole)
            cufftDestroy(p->whole);
        if (p->have_last)
            cufftDestroy(p->last);
        if (p->have_fwd_whole)
            cufftDestroy(p->fwd_whole);
        if (p->have_fwd_last)
            cufftDestroy(p->fwd_last);
        if (p->cusolver)
            cusolverDnDestroy(p->cusolver);
        if (p->lr_solver)
            cusolverDnDestroy(p->lr_solver);
        if (p->lr_blas)
            cublasDestroy(p->lr_blas);
        if (p->blas)
            cublasDestroy(p->blas);
    }
    (void)cudaGetLastError();
    free(p);
}

/* H (32-bit indices, and each nonzero's row), c and G on the device. */
dk_status plan_fill(Plan *p, dk_msg *msg)
{
    const dk_enkf_setup *s = p->s;
    size_t nnz = s->nnz, rows = s->desc.H.rows;
    int *indptr = (int *)malloc((rows + 1) * sizeof(int)), *indices = (int *)malloc((nnz ? nnz : 1) * sizeof(int)),
        *row_of = (int *)malloc((nnz ? nnz : 1) * sizeof(int));
    if (!indptr || !indices || !row_of) {
        free(indptr), free(indices), free(row_of);
        dk_msg_set(msg, "cuda enkf: out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t j = 0; j <= rows; j++)
        indptr[j] = (int)s->indptr[j];
    for (size_t j = 0; j < rows; j++)
        for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++) {
            indices[t] = (int)s->indices[t];
            row_of[t] = (int)j;
        }
    dk_status st;
    if ((st = upload(&p->indptr, indptr, rows + 1, "copying H", msg)) == DK_OK &&
        (st = upload(&p->indices, indices, nnz, "copying H", msg)) == DK_OK &&
        (st = upload(&p->row_of, row_of, nnz, "copying H", msg)) == DK_OK &&
        (st = upload(&p->values, (const double *)s->values, nnz, "copying H", msg)) == DK_OK)
        st = upload(&p->loc, (const double *)s->loc, s->loc_count, "copying the localization", msg);
    free(indptr), free(indices), free(row_of);
    if (st == DK_OK)
        st = ensure(&p->G, (long long)(nnz ? nnz : 1) * p->L, "allocating the weighted anomalies", msg);
    return st;
}

dk_status plan_create(void *device, const dk_enkf_setup *s, void **plan, dk_msg *msg)
{
    dk_cuda_device *dev = (dk_cuda_device *)device;
    dk_status st = dk_cuda_enter(dev, msg);
    if (st != DK_OK)
        return st;
    const Solver *solver = choose(s, dev);
    if (!solver) {
        dk_msg_set(msg, "cuda enkf: no solver computes variant '%s' for this problem", s->desc.variant);
        return DK_ERR_NOT_IMPLEMENTED;
    }
    Plan *p = (Plan *)calloc(1, sizeof *p);
    if (!p) {
        dk_msg_set(msg, "cuda enkf: cannot allocate the plan");
        return DK_ERR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->s = s;
    p->solver = solver;
    p->N = (long long)s->desc.n;
    p->L = (long long)s->desc.members;
    p->M = (long long)s->desc.H.rows;
    p->nnz = (long long)s->nnz;
    p->two_d = s->desc.loc_ndim == 2;
    p->ny = p->two_d ? (long long)s->desc.ny : 1;
    p->rx = (long long)s->rx;
    p->ry = (long long)s->ry;
    p->window = (long long)s->window;
    const char *profile = dk_tuning_string("DAKIT_ENKF_CUDA_PROFILE");
    p->prof.on = profile && strcmp(profile, "0");
    if ((st = plan_fill(p, msg)) == DK_OK && (st = hpht_make(p, msg)) == DK_OK)
        st = solver->make(p, msg);
    if (st != DK_OK) {
        plan_free(p);
        return st;
    }
    *plan = p;
    return DK_OK;
}

void plan_destroy(void *plan) { plan_free((Plan *)plan); }

} // namespace

unsigned dk_cuda_enkf::blocks_for(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : (b > (1ll << 30) ? (1ll << 30) : b));
}

/* The last product's phase times into the totals (its events are done:
 * the product waited for them, or waits now where the caller's stream is
 * asynchronous). */
static void prof_collect(Plan *p)
{
    Profile *f = &p->prof;
    if (!f->pending || cudaEventSynchronize(f->ev[f->marks - 1]) != cudaSuccess) {
        (void)cudaGetLastError();
        f->pending = 0;
        return;
    }
    for (int k = 1; k < f->marks; k++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, f->ev[k - 1], f->ev[k]) != cudaSuccess)
            break;
        int x = 0;
        while (x < PROF_PHASES && f->phase[x] && strcmp(f->phase[x], f->label[k]))
            x++;
        if (x == PROF_PHASES)
            continue;
        if (!f->phase[x]) {
            f->phase[x] = f->label[k];
            f->min_ms[x] = ms;
        }
        f->total_ms[x] += ms;
        f->min_ms[x] = ms < f->min_ms[x] ? ms : f->min_ms[x];
        f->count[x]++;
    }
    (void)cudaGetLastError();
    f->products++;
    f->pending = 0;
}

void dk_cuda_enkf::prof_begin(Plan *p)
{
    Profile *f = &p->prof;
    if (!f->on)
        return;
    prof_collect(p);
    for (int k = 0; k < PROF_MARKS; k++)
        if (!f->ev[k] && cudaEventCreate(&f->ev[k]) != cudaSuccess) {
            (void)cudaGetLastError();
            f->on = 0;
            return;
        }
    f->marks = 0;
    prof_mark(p, "start");
    f->pending = 1;
}

void dk_cuda_enkf::prof_mark(Plan *p, const char *phase)
{
    Profile *f = &p->prof;
    if (!f->on || f->marks == PROF_MARKS || cudaEventRecord(f->ev[f->marks], p->dev->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    f->label[f->marks++] = phase;
}

void dk_cuda_enkf::prof_report(Plan *p)
{
    Profile *f = &p->prof;
    if (!f->on)
        return;
    prof_collect(p);
    fprintf(stderr, "dakit cuda enkf profile: variant %s, N %lld, L %lld, M %lld, %lld calls (cudaEvent ms, mean / min (times))\n",
            p->solver->name, p->N, p->L, p->M, f->products);
    double sum = 0;
    for (int x = 0; x < PROF_PHASES && f->phase[x]; x++) {
        double mean = f->total_ms[x] / (double)f->count[x];
        sum += mean;
        fprintf(stderr, "  %-22s %9.4f / %9.4f ms (%lld)\n", f->phase[x], mean, f->min_ms[x], f->count[x]);
    }
    fprintf(stderr, "  %-22s %9.4f ms\n", "sum of means", sum);
}

dk_status dk_cuda_enkf::ensure(double **ptr, long long count, const char *what, dk_msg *msg)
{
    if (!*ptr)
        CUDA_TRY(cudaMalloc(ptr, (size_t)(count ? count : 1) * sizeof(double)), what);
    return DK_OK;
}

extern "C" const dk_enkf_ops dk_cuda_enkf_ops = {
    .variants = variants,
    .plan_create = plan_create,
    .cov = dk_cuda_enkf::cov,
    .analysis = dk_cuda_enkf::analysis,
    .plan_destroy = plan_destroy,
    .cov_rows = dk_cuda_enkf::cov_rows,
    .inflate = dk_cuda_enkf::inflate,
    .update = dk_cuda_enkf::update,
};
