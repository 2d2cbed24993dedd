/* enkf on the host's cores (OpenMP): the four schemes in float64 (float32
 * data is widened on the way in and rounded on the way out), FFTW for the
 * fft scheme and for applying C while the lowrank plan factors it, LAPACKE
 * for the lowrank basis's QR (dgeqrf, dorgqr) and the M x M solve of the
 * analysis (dposv). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include <dakit/plugin.h>

#include <dakit/kit/enkf/lowrank.h>
#include <dakit/kit/enkf/lowrank_host.h>
#include <dakit/kit/enkf/solve_host.h>

/* Below this much work a loop runs on the calling thread: waking and
 * joining a team costs more than small problems (a Lorenz-96 cycle, N = 40)
 * take, and many plans in one process would spin their threads against
 * each other. */
#define PARALLEL_MIN_WORK 32768

typedef struct cpu_enkf {
    const dk_enkf_setup *s;
    size_t P;                /* circulant embedding: 2N (1-D) or 2nx * 2ny (2-D) */
    size_t Pc;               /* complex outputs of the r2c transform */
    fftw_complex *spectrum;  /* of C's circulant embedding, / P */
    fftw_plan forward, backward;
    dk_lowrank low;          /* lowrank: C ~= Q T Q^T, Q column-major N x R */
} cpu_enkf;

static const char *const variants[] = {"tiled", "banded", "fft", "lowrank", NULL};

static void cpu_enkf_destroy(void *p)
{
    cpu_enkf *q = p;
    if (!q)
        return;
    if (q->forward) {
#pragma omp critical(dk_fftw_planner)
        {
            fftw_destroy_plan(q->forward);
            fftw_destroy_plan(q->backward);
        }
    }
    fftw_free(q->spectrum);
    free(q->low.Q);
    free(q->low.T);
    free(q);
}

/* The first column of the circulant that embeds C: C[i,k] is col[(i-k) mod P]
 * for i, k < N, per axis in 2-D. */
static double embedded(const dk_enkf_setup *s, size_t a, size_t b)
{
    if (s->desc.loc_ndim == 1) {
        size_t N = s->desc.n;
        if (a < N)
            return s->loc[a];
        return a == N ? 0.0 : s->loc[2 * N - a];
    }
    size_t nx = s->desc.nx, ny = s->desc.ny;
    if (a == nx || b == ny)
        return 0.0;
    size_t da = a < nx ? a : 2 * nx - a, db = b < ny ? b : 2 * ny - b;
    return s->loc[da * ny + db];
}

static dk_status make_fft(cpu_enkf *q, dk_msg *msg)
{
    const dk_enkf_setup *s = q->s;
    int two_d = s->desc.loc_ndim == 2;
    size_t n0 = two_d ? 2 * s->desc.nx : 2 * s->desc.n, n1 = two_d ? 2 * s->desc.ny : 1;
    q->P = n0 * n1;
    q->Pc = two_d ? n0 * (n1 / 2 + 1) : n0 / 2 + 1;
    double *real = fftw_malloc(q->P * sizeof *real);
    q->spectrum = fftw_malloc(q->Pc * sizeof *q->spectrum);
    if (!real || !q->spectrum) {
        fftw_free(real);
        dk_msg_set(msg, "out of host memory for the FFT scheme (%zu points)", q->P);
        return DK_ERR_OUT_OF_MEMORY;
    }
#pragma omp critical(dk_fftw_planner)
    {
        if (two_d) {
            q->forward = fftw_plan_dft_r2c_2d((int)n0, (int)n1, real, q->spectrum, FFTW_ESTIMATE);
            q->backward = fftw_plan_dft_c2r_2d((int)n0, (int)n1, q->spectrum, real, FFTW_ESTIMATE);
        } else {
            q->forward = fftw_plan_dft_r2c_1d((int)n0, real, q->spectrum, FFTW_ESTIMATE);
            q->backward = fftw_plan_dft_c2r_1d((int)n0, q->spectrum, real, FFTW_ESTIMATE);
        }
    }
    if (!q->forward || !q->backward) {
        fftw_free(real);
        dk_msg_set(msg, "FFTW could not plan a transform of %zu points", q->P);
        return DK_ERR_BACKEND;
    }
    for (size_t a = 0; a < n0; a++)
        for (size_t b = 0; b < n1; b++)
            real[a * n1 + b] = embedded(s, a, b);
    fftw_execute_dft_r2c(q->forward, real, q->spectrum);
    for (size_t t = 0; t < q->Pc; t++) {
        q->spectrum[t][0] /= (double)q->P;
        q->spectrum[t][1] /= (double)q->P;
    }
    fftw_free(real);
    return DK_OK;
}

/* State point i's place in the embedding. */
static size_t embed_at(const dk_enkf_setup *s, size_t i)
{
    size_t ny = s->desc.ny;
    return s->desc.loc_ndim == 2 ? (i / ny) * 2 * ny + i % ny : i;
}

/* v <- C v on the embedding's P points (V: Pc values of scratch). */
static void circulant_apply(const cpu_enkf *q, double *v, fftw_complex *V)
{
    fftw_execute_dft_r2c(q->forward, v, V);
    for (size_t t = 0; t < q->Pc; t++) {
        double re = V[t][0] * q->spectrum[t][0] - V[t][1] * q->spectrum[t][1];
        double im = V[t][0] * q->spectrum[t][1] + V[t][1] * q->spectrum[t][0];
        V[t][0] = re;
        V[t][1] = im;
    }
    fftw_execute_dft_c2r(q->backward, V, v);
}

/* ---- lowrank: the linear algebra dk_lowrank_make runs on (host memory) ---- */

static double *low_alloc(void *self, size_t columns)
{
    const cpu_enkf *q = self;
    return malloc((columns ? columns : 1) * q->s->desc.n * sizeof(double));
}

static void low_release(void *self, double *a)
{
    (void)self;
    free(a);
}

static dk_status low_copy(void *self, const double *src, double *dst, size_t columns, dk_msg *msg)
{
    (void)msg;
    memcpy(dst, src, columns * ((const cpu_enkf *)self)->s->desc.n * sizeof *dst);
    return DK_OK;
}

static dk_status low_apply(void *self, const double *w, double *y, size_t columns, dk_msg *msg)
{
    const cpu_enkf *q = self;
    size_t N = q->s->desc.n;
    int failed = 0;
#pragma omp parallel if (columns > 1 && q->P > 4096)
    {
        double *v = fftw_malloc(q->P * sizeof *v);
        fftw_complex *V = fftw_malloc(q->Pc * sizeof *V);
        if (!v || !V)
            failed = 1;
#pragma omp for schedule(dynamic, 1)
        for (size_t c = 0; c < columns; c++) {
            if (!v || !V)
                continue;
            memset(v, 0, q->P * sizeof *v);
            for (size_t i = 0; i < N; i++)
                v[embed_at(q->s, i)] = w[c * N + i];
            circulant_apply(q, v, V);
            for (size_t i = 0; i < N; i++)
                y[c * N + i] = v[embed_at(q->s, i)];
        }
        fftw_free(v);
        fftw_free(V);
    }
    if (failed) {
        dk_msg_set(msg, "out of host memory for the FFT work arrays");
        return DK_ERR_OUT_OF_MEMORY;
    }
    return DK_OK;
}

static dk_status low_gram(void *self, const double *A, size_t a, const double *B, size_t b, double *S, dk_msg *msg)
{
    (void)msg;
    dk_lowrank_host_gram(((const cpu_enkf *)self)->s->desc.n, A, a, B, b, S);
    return DK_OK;
}

static dk_status low_subtract(void *self, const double *A, size_t a, const double *S, double *B, size_t b,
                              dk_msg *msg)
{
    (void)msg;
    dk_lowrank_host_subtract(((const cpu_enkf *)self)->s->desc.n, A, a, S, B, b);
    return DK_OK;
}

static dk_status low_orthonormalize(void *self, double *B, size_t b, dk_msg *msg)
{
    return dk_lowrank_host_orthonormalize(((const cpu_enkf *)self)->s->desc.n, B, b, msg);
}

/* Q and T (dakit/kit/enkf/lowrank.h), C applied through the fft scheme's
 * embedding. */
static dk_status make_lowrank(cpu_enkf *q, dk_msg *msg)
{
    dk_status rc = make_fft(q, msg);
    if (rc != DK_OK)
        return rc;
    dk_lowrank_ops ops = {
        .self = q,
        .n = q->s->desc.n,
        .alloc = low_alloc,
        .release = low_release,
        .upload = low_copy,
        .copy = low_copy,
        .apply_c = low_apply,
        .gram = low_gram,
        .subtract = low_subtract,
        .orthonormalize = low_orthonormalize,
    };
    return dk_lowrank_make(&ops, &q->low, msg);
}

static dk_status cpu_enkf_create(void *device, const dk_enkf_setup *s, void **plan, dk_msg *msg)
{
    (void)device;
    cpu_enkf *q = calloc(1, sizeof *q);
    if (!q) {
        dk_msg_set(msg, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    q->s = s;
    if (s->scheme == DK_ENKF_FFT || s->scheme == DK_ENKF_LOWRANK) {
        dk_status rc = s->scheme == DK_ENKF_FFT ? make_fft(q, msg) : make_lowrank(q, msg);
        if (rc != DK_OK) {
            cpu_enkf_destroy(q);
            return rc;
        }
    }
    *plan = q;
    return DK_OK;
}

/* G[t*L + l] = H_t e[k_t, l]: the weighted anomalies every scheme sums. */
static void weigh(const dk_enkf_setup *s, const double *e, double *G)
{
    size_t L = s->desc.members;
#pragma omp parallel for schedule(static) if (s->nnz * L > PARALLEL_MIN_WORK)
    for (size_t t = 0; t < s->nnz; t++)
        for (size_t l = 0; l < L; l++)
            G[t * L + l] = s->values[t] * e[(size_t)s->indices[t] * L + l];
}

static double finish(const double *ei, const double *acc, size_t L)
{
    double v = 0;
    for (size_t l = 0; l < L; l++)
        v += ei[l] * acc[l];
    return v / (double)(L - 1);
}

static void tiled(const dk_enkf_setup *s, const double *e, const double *G, double *pht)
{
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
#pragma omp parallel if (N * M > PARALLEL_MIN_WORK)
    {
        double *acc = malloc(L * sizeof *acc);
#pragma omp for schedule(dynamic, 16)
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < M; j++) {
                memset(acc, 0, L * sizeof *acc);
                for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++) {
                    double c = dk_enkf_c(s, i, (size_t)s->indices[t]);
                    const double *g = G + (size_t)t * L;
                    for (size_t l = 0; l < L; l++)
                        acc[l] += c * g[l];
                }
                pht[i * M + j] = finish(e + i * L, acc, L);
            }
        free(acc);
    }
}

/* The first entry of indices[b, e) that is >= key. */
static int64_t lower_bound(const int64_t *indices, int64_t b, int64_t e, int64_t key)
{
    while (b < e) {
        int64_t mid = b + (e - b) / 2;
        if (indices[mid] < key)
            b = mid + 1;
        else
            e = mid;
    }
    return b;
}

static void banded(const dk_enkf_setup *s, const double *e, const double *G, double *pht)
{
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    int64_t w = (int64_t)s->window;
#pragma omp parallel if (N * M > PARALLEL_MIN_WORK)
    {
        double *acc = malloc(L * sizeof *acc);
#pragma omp for schedule(dynamic, 64)
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < M; j++) {
                memset(acc, 0, L * sizeof *acc);
                int64_t b = lower_bound(s->indices, s->indptr[j], s->indptr[j + 1], (int64_t)i - w);
                for (int64_t t = b; t < s->indptr[j + 1] && s->indices[t] <= (int64_t)i + w; t++) {
                    double c = dk_enkf_c(s, i, (size_t)s->indices[t]);
                    if (c == 0)
                        continue;
                    const double *g = G + (size_t)t * L;
                    for (size_t l = 0; l < L; l++)
                        acc[l] += c * g[l];
                }
                pht[i * M + j] = finish(e + i * L, acc, L);
            }
        free(acc);
    }
}

/* Column j = 1/(L-1) sum_l e_l o C (e_l o h_j), C applied through the
 * circulant embedding. Columns go to threads whole, so no two threads add
 * into one column. */
static dk_status fft(const cpu_enkf *q, const double *e, const double *G, double *pht)
{
    const dk_enkf_setup *s = q->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    int failed = 0;
#pragma omp parallel if (q->P * M * L > PARALLEL_MIN_WORK)
    {
        double *v = fftw_malloc(q->P * sizeof *v), *col = malloc(N * sizeof *col);
        fftw_complex *V = fftw_malloc(q->Pc * sizeof *V);
        if (!v || !col || !V)
            failed = 1;
#pragma omp for schedule(dynamic, 1)
        for (size_t j = 0; j < M; j++) {
            if (!v || !col || !V)
                continue;
            memset(col, 0, N * sizeof *col);
            for (size_t l = 0; l < L; l++) {
                memset(v, 0, q->P * sizeof *v);
                for (int64_t t = s->indptr[j]; t < s->indptr[j + 1]; t++)
                    v[embed_at(s, (size_t)s->indices[t])] += G[(size_t)t * L + l];
                circulant_apply(q, v, V);
                for (size_t i = 0; i < N; i++)
                    col[i] += e[i * L + l] * v[embed_at(s, i)];
            }
            for (size_t i = 0; i < N; i++)
                pht[i * M + j] = col[i] / (double)(L - 1);
        }
        fftw_free(v);
        fftw_free(V);
        free(col);
    }
    return failed ? DK_ERR_OUT_OF_MEMORY : DK_OK;
}

/* With C ~= Q T Q^T, column m of PHT is
 *   1/(L-1) sum_l e_l o Q T Q^T (e_l o h_m):
 * U[m][r][l] = sum_t Q[k_t, r] G[t, l] over row m of H, G2 = T U, then
 * PHT[i, m] = 1/(L-1) sum_r Q[i, r] sum_l e[i, l] G2[m][r][l]: about
 * nnz L R + M R^2 L + N M R L multiply-adds, no transform. Observations go
 * in chunks that keep U within 64 MiB.
 * Error: with ||C - Q T Q^T||_2 <= d ||C||_2 (d = DK_LOWRANK_TOL, the plan's
 * guarantee), |PHT[i,m] - exact| <= d ||C||_2 1/(L-1) sum_l |e_il|
 * ||e_l o h_m||_2, beside the rounding of the sums. */
static dk_status lowrank(const cpu_enkf *q, const double *e, const double *G, double *pht)
{
    const dk_enkf_setup *s = q->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows, R = q->low.rank;
    const double *Q = q->low.Q, *T = q->low.T;
    size_t chunk = ((size_t)64 << 20) / (R * L * sizeof(double));
    chunk = chunk < 1 ? 1 : chunk > M ? M : chunk;
    int failed = 0;
    double *U = malloc(chunk * R * L * sizeof *U), *G2 = malloc(chunk * R * L * sizeof *G2);
    if (!U || !G2) {
        free(U);
        free(G2);
        return DK_ERR_OUT_OF_MEMORY;
    }
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t mc = M - m0 < chunk ? M - m0 : chunk;
#pragma omp parallel for schedule(dynamic, 1) if (s->nnz * R * L > PARALLEL_MIN_WORK)
        for (size_t m = m0; m < m0 + mc; m++) {
            double *u = U + (m - m0) * R * L, *g2 = G2 + (m - m0) * R * L;
            memset(u, 0, R * L * sizeof *u);
            for (int64_t t = s->indptr[m]; t < s->indptr[m + 1]; t++) {
                size_t k = (size_t)s->indices[t];
                const double *g = G + (size_t)t * L;
                for (size_t r = 0; r < R; r++) {
                    double qk = Q[r * N + k];
                    for (size_t l = 0; l < L; l++)
                        u[r * L + l] += qk * g[l];
                }
            }
            for (size_t r = 0; r < R; r++)
                for (size_t l = 0; l < L; l++) {
                    double sum = 0;
                    for (size_t a = 0; a < R; a++)
                        sum += T[r * R + a] * u[a * L + l];
                    g2[r * L + l] = sum;
                }
        }
#pragma omp parallel if (N * mc * R * L > PARALLEL_MIN_WORK)
        {
            double *qi = malloc(R * sizeof *qi);
            if (!qi)
                failed = 1;
#pragma omp for schedule(static)
            for (size_t i = 0; i < N; i++) {
                if (!qi)
                    continue;
                const double *ei = e + i * L;
                for (size_t r = 0; r < R; r++)
                    qi[r] = Q[r * N + i];
                for (size_t m = m0; m < m0 + mc; m++) {
                    const double *g2 = G2 + (m - m0) * R * L;
                    double sum = 0;
                    for (size_t r = 0; r < R; r++) {
                        double dot = 0;
                        for (size_t l = 0; l < L; l++)
                            dot += ei[l] * g2[r * L + l];
                        sum += qi[r] * dot;
                    }
                    pht[i * M + m] = sum / (double)(L - 1);
                }
            }
            free(qi);
        }
    }
    free(U);
    free(G2);
    return failed ? DK_ERR_OUT_OF_MEMORY : DK_OK;
}

static void hpht_of(const dk_enkf_setup *s, const double *pht, double *hpht)
{
    size_t M = s->desc.H.rows;
#pragma omp parallel for schedule(static) if (M * M > PARALLEL_MIN_WORK)
    for (size_t a = 0; a < M; a++)
        for (size_t j = 0; j < M; j++) {
            double sum = 0;
            for (int64_t t = s->indptr[a]; t < s->indptr[a + 1]; t++)
                sum += s->values[t] * pht[(size_t)s->indices[t] * M + j];
            hpht[a * M + j] = sum;
        }
}

/* PHT (and HPHT when asked) in float64 from float64 anomalies. */
static dk_status cov64(const cpu_enkf *q, const double *e, double *pht, double *hpht, dk_msg *msg)
{
    const dk_enkf_setup *s = q->s;
    double *G = malloc((s->nnz ? s->nnz : 1) * s->desc.members * sizeof *G);
    if (!G) {
        dk_msg_set(msg, "out of host memory");
        return DK_ERR_OUT_OF_MEMORY;
    }
    weigh(s, e, G);
    dk_status rc = DK_OK;
    if (s->scheme == DK_ENKF_TILED)
        tiled(s, e, G, pht);
    else if (s->scheme == DK_ENKF_BANDED)
        banded(s, e, G, pht);
    else if (s->scheme == DK_ENKF_LOWRANK)
        rc = lowrank(q, e, G, pht);
    else
        rc = fft(q, e, G, pht);
    free(G);
    if (rc != DK_OK) {
        dk_msg_set(msg, "out of host memory for the %s work arrays", s->scheme == DK_ENKF_LOWRANK ? "lowrank" : "FFT");
        return rc;
    }
    if (hpht)
        hpht_of(s, pht, hpht);
    return DK_OK;
}

static double *widen(const void *p, dk_dtype t, size_t count)
{
    double *d = malloc((count ? count : 1) * sizeof *d);
    if (d)
        for (size_t k = 0; k < count; k++)
            d[k] = t == DK_F32 ? (double)((const float *)p)[k] : ((const double *)p)[k];
    return d;
}

static void narrow(const double *d, void *p, dk_dtype t, size_t count)
{
    if (t == DK_F64)
        memcpy(p, d, count * sizeof *d);
    else
        for (size_t k = 0; k < count; k++)
            ((float *)p)[k] = (float)d[k];
}

static dk_status cpu_enkf_cov(void *plan, const void *e, void *pht, void *hpht, dk_msg *msg)
{
    const cpu_enkf *q = plan;
    const dk_enkf_setup *s = q->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    dk_dtype t = s->desc.dtype;
    if (t == DK_F64)
        return cov64(q, e, pht, hpht, msg);
    double *e64 = widen(e, t, N * L), *p64 = malloc(N * M * sizeof *p64), *h64 = malloc(M * M * sizeof *h64);
    dk_status rc = DK_ERR_OUT_OF_MEMORY;
    if (!e64 || !p64 || !h64)
        dk_msg_set(msg, "out of host memory");
    else if ((rc = cov64(q, e64, p64, hpht ? h64 : NULL, msg)) == DK_OK) {
        narrow(p64, pht, t, N * M);
        if (hpht)
            narrow(h64, hpht, t, M * M);
    }
    free(e64);
        free(p64);
        free(h64);
    return rc;
}

static dk_status cpu_enkf_analysis(void *plan, void *x, const double *d, const double *r, double inflation,
                                   dk_msg *msg)
{
    const cpu_enkf *q = plan;
    const dk_enkf_setup *s = q->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    dk_dtype t = s->desc.dtype;
    double *X = widen(x, t, N * L), *e = malloc(N * L * sizeof *e), *pht = malloc(N * M * sizeof *pht),
           *A = malloc(M * M * sizeof *A), *D = malloc(M * L * sizeof *D);
    dk_status rc = DK_ERR_OUT_OF_MEMORY;
    if (!X || !e || !pht || !A || !D) {
        dk_msg_set(msg, "out of host memory");
        goto done;
    }
#pragma omp parallel for schedule(static) if (N * L > PARALLEL_MIN_WORK)
    for (size_t i = 0; i < N; i++) {
        double mean = 0;
        for (size_t l = 0; l < L; l++)
            mean += X[i * L + l];
        mean /= (double)L;
        for (size_t l = 0; l < L; l++) {
            e[i * L + l] = inflation * (X[i * L + l] - mean);
            X[i * L + l] = mean + e[i * L + l];
        }
    }
    if ((rc = cov64(q, e, pht, A, msg)) != DK_OK)
        goto done;
    for (size_t j = 0; j < M; j++) {
        for (size_t l = 0; l < L; l++) {
            double hx = 0;
            for (int64_t u = s->indptr[j]; u < s->indptr[j + 1]; u++)
                hx += s->values[u] * X[(size_t)s->indices[u] * L + l];
            D[j * L + l] = d[j * L + l] - hx;
        }
    }
    if ((rc = dk_enkf_solve_host(M, L, A, r, D, msg)) != DK_OK)
        goto done;
#pragma omp parallel for schedule(static) if (N * L > PARALLEL_MIN_WORK)
    for (size_t i = 0; i < N; i++)
        for (size_t l = 0; l < L; l++) {
            double v = X[i * L + l];
            for (size_t j = 0; j < M; j++)
                v += pht[i * M + j] * D[j * L + l];
            X[i * L + l] = v;
        }
    narrow(X, x, t, N * L);
    rc = DK_OK;
done:
    free(X);
    free(e);
    free(pht);
    free(A);
    free(D);
    return rc;
}

/* ---- the phases of the distributed analysis and covariance ---- */

/* Point k of box b (C order) as a row of a grid whose rows are ny long. */
static size_t box_row(const dk_enkf_box *b, size_t ny, size_t k)
{
    size_t w = b->hi[1] - b->lo[1];
    return (b->lo[0] + k / w) * ny + b->lo[1] + k % w;
}

/* Row i's place in box b, or SIZE_MAX outside it. */
static size_t in_box(const dk_enkf_box *b, size_t ny, size_t i)
{
    size_t ix = i / ny, iy = i % ny;
    if (ix < b->lo[0] || ix >= b->hi[0] || iy < b->lo[1] || iy >= b->hi[1])
        return SIZE_MAX;
    return (ix - b->lo[0]) * (b->hi[1] - b->lo[1]) + iy - b->lo[1];
}

static dk_status cpu_enkf_cov_rows(void *plan, const void *e, const dk_enkf_box *own, void *pht, void *part,
                                   size_t at, const void *x, dk_msg *msg)
{
    const cpu_enkf *q = plan;
    const dk_enkf_setup *s = q->s;
    size_t N = s->desc.n, L = s->desc.members, M = s->desc.H.rows;
    size_t ny = s->desc.loc_ndim == 2 ? s->desc.ny : N;
    size_t count = (own->hi[0] - own->lo[0]) * (own->hi[1] - own->lo[1]);
    dk_dtype t = s->desc.dtype;
    const size_t es = t == DK_F64 ? sizeof(double) : sizeof(float);
    double *e64 = t == DK_F64 ? (double *)e : widen(e, t, N * L), *p64 = malloc(N * M * sizeof *p64);
    dk_status rc = DK_ERR_OUT_OF_MEMORY;
    if (!e64 || !p64)
        dk_msg_set(msg, "out of host memory");
    else if ((rc = cov64(q, e64, p64, NULL, msg)) == DK_OK) {
        for (size_t k = 0; k < count; k++)
            narrow(p64 + box_row(own, ny, k) * M, (char *)pht + k * M * es, t, M);
        for (size_t a = 0; part && a < M; a++) {
            double *h = calloc(M + L, sizeof *h), *hx = h + M;
            if (!h) {
                dk_msg_set(msg, "out of host memory");
                rc = DK_ERR_OUT_OF_MEMORY;
                break;
            }
            for (int64_t u = s->indptr[a]; u < s->indptr[a + 1]; u++) {
                size_t i = (size_t)s->indices[u], k = in_box(own, ny, i);
                if (k == SIZE_MAX)
                    continue;
                for (size_t b = 0; b < M; b++)
                    h[b] += s->values[u] * p64[i * M + b];
                for (size_t l = 0; x && l < L; l++)
                    hx[l] += s->values[u] * (t == DK_F32 ? (double)((const float *)x)[k * L + l]
                                                          : ((const double *)x)[k * L + l]);
            }
            narrow(h, (char *)part + (at + a * M) * es, t, M);
            if (x)
                narrow(hx, (char *)part + (at + M * M + a * L) * es, t, L);
            free(h);
        }
    }
    if (e64 != e)
        free(e64);
    free(p64);
    return rc;
}

static dk_status cpu_enkf_inflate(void *plan, const void *x, dk_dtype xt, size_t count, double inflation, void *X_,
                                  void *e_, dk_msg *msg)
{
    (void)msg;
    size_t L = ((const cpu_enkf *)plan)->s->desc.members;
    double *X = X_, *e = e_;
#pragma omp parallel for schedule(static) if (count * L > PARALLEL_MIN_WORK)
    for (size_t i = 0; i < count; i++) {
        double mean = 0;
        for (size_t l = 0; l < L; l++)
            mean += xt == DK_F32 ? (double)((const float *)x)[i * L + l] : ((const double *)x)[i * L + l];
        mean /= (double)L;
        for (size_t l = 0; l < L; l++) {
            double v = xt == DK_F32 ? (double)((const float *)x)[i * L + l] : ((const double *)x)[i * L + l];
            e[i * L + l] = inflation * (v - mean);
            X[i * L + l] = mean + e[i * L + l];
        }
    }
    return DK_OK;
}

static dk_status cpu_enkf_update(void *plan, const void *sums_, size_t at, const double *d, const double *r,
                                 const void *pht_, const void *X_, size_t count, void *x, dk_dtype xt, dk_msg *msg)
{
    const dk_enkf_setup *s = ((const cpu_enkf *)plan)->s;
    size_t L = s->desc.members, M = s->desc.H.rows;
    const double *sums = sums_, *pht = pht_, *X = X_;
    if (sums[0] != 0)
        return DK_OK;
    double *A = malloc(M * M * sizeof *A), *D = malloc(M * L * sizeof *D), *out = malloc((count ? count : 1) * L * sizeof *out);
    dk_status rc = DK_ERR_OUT_OF_MEMORY;
    if (!A || !D || !out) {
        dk_msg_set(msg, "out of host memory");
        goto done;
    }
    memcpy(A, sums + at, M * M * sizeof *A);
    for (size_t k = 0; k < M * L; k++)
        D[k] = d[k] - sums[at + M * M + k];
    if ((rc = dk_enkf_solve_host(M, L, A, r, D, msg)) != DK_OK)
        goto done;
#pragma omp parallel for schedule(static) if (count * L > PARALLEL_MIN_WORK)
    for (size_t i = 0; i < count; i++)
        for (size_t l = 0; l < L; l++) {
            double v = X[i * L + l];
            for (size_t j = 0; j < M; j++)
                v += pht[i * M + j] * D[j * L + l];
            out[i * L + l] = v;
        }
    narrow(out, x, xt, count * L);
done:
    free(A);
    free(D);
    free(out);
    return rc;
}

const dk_enkf_ops dk_cpu_enkf_ops = {
    .variants = variants,
    .plan_create = cpu_enkf_create,
    .cov = cpu_enkf_cov,
    .analysis = cpu_enkf_analysis,
    .plan_destroy = cpu_enkf_destroy,
    .cov_rows = cpu_enkf_cov_rows,
    .inflate = cpu_enkf_inflate,
    .update = cpu_enkf_update,
};
