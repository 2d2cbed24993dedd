#include "cli/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int dist_parse_decomp(const char *cmd, const char *s, int decomp[DK_MAX_DIMS], int *n)
{
    *n = 0;
    for (const char *p = s;;) {
        size_t len = strcspn(p, "x");
        char piece[32], msg[256];
        long long v;
        if (*n == DK_MAX_DIMS || len == 0 || len >= sizeof piece)
            return cli_error(cmd, 2, "--decomp must be the pieces per axis joined by x (4, 2x2, 1x4), "
                                     "each an integer from 1 to 1000000, not '%s'", s);
        memcpy(piece, p, len);
        piece[len] = '\0';
        if (cli_parse_integer("--decomp", piece, 1, 1000000, &v, msg, sizeof msg) != 0)
            return cli_error(cmd, 2, "--decomp must be the pieces per axis joined by x (4, 2x2, 1x4), "
                                     "each an integer from 1 to 1000000, not '%s'", s);
        decomp[(*n)++] = (int)v;
        if (!p[len])
            return 0;
        p += len + 1;
    }
}

int dist_single_process(const char *cmd, const char *s, const int *decomp, int n)
{
    long long pieces = 1;
    for (int k = 0; k < n; k++)
        pieces *= decomp[k];
    if (s && pieces != 1)
        return cli_error(cmd, 2, "--decomp %s asks for %lld ranks but this is a single process (start it with "
                                 "mpirun -n %lld)", s, pieces, pieces);
    return 0;
}

#ifdef DK_TOOLS_MPI
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "cli/netcdf.h"
#include "cli/npy.h"
#include "cli/output.h"

int dist_launched_size(void)
{
    static const char *size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"};
    long world = 0;
    for (size_t k = 0; k < sizeof size_vars / sizeof size_vars[0]; k++) {
        const char *e = getenv(size_vars[k]);
        if (e && atol(e) > world)
            world = atol(e);
    }
    return (int)world;
}

int dist_relaunch(const char *cmd, int ranks, int argc, char **argv)
{
    char self[4096], nbuf[16], launcher[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_error(cmd, 1, "cannot find this program's path to start it under mpirun: %s", strerror(errno));
    self[n] = '\0';
    const char *l = getenv("DAKIT_MPIRUN");
    snprintf(launcher, sizeof launcher, "%s", l && *l ? l : "mpirun");
    char **args = calloc((size_t)argc + 64, sizeof *args);
    if (!args)
        return cli_error(cmd, 1, "out of memory");
    int k = 0;
    for (char *w = strtok(launcher, " \t"); w && k < 56; w = strtok(NULL, " \t"))
        args[k++] = w;
    snprintf(nbuf, sizeof nbuf, "%d", ranks);
    args[k++] = "-n";
    args[k++] = nbuf;
    args[k++] = self;
    for (int i = 0; i < argc; i++)
        args[k++] = argv[i];
    fflush(stdout);
    execvp(args[0], args);
    int e = errno;
    free(args);
    return cli_error(cmd, 1, "cannot start %s (DAKIT_MPIRUN names the launcher): %s", launcher, strerror(e));
}

int dist_begin(int *own)
{
    /* started by a launcher with more than one rank: the distributed path;
     * otherwise (no launcher, one rank) exactly the single-process one */
    long world = dist_launched_size();
    int inited = 0, size = 1;
    *own = 0;
    MPI_Initialized(&inited);
    if (world <= 1 && !inited)
        return 0;
    if (!inited) {
        MPI_Init(NULL, NULL);
        *own = 1;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1)
        return size;
    dist_end(*own);
    *own = 0;
    return 0;
}

void dist_end(int own)
{
    if (own)
        MPI_Finalize();
}

int dist_agree(int failed, char *msg, size_t len)
{
    int rank, size, low;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = failed ? rank : size;
    MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (low == size)
        return 0;
    MPI_Bcast(msg, (int)len, MPI_CHAR, low, MPI_COMM_WORLD);
    msg[len - 1] = '\0';
    return 1;
}

int dist_decompose(const char *cmd, const char *path, int ndim, const size_t *shape, const int *decomp, int ndecomp,
                   dk_mpi_part *part)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (ndecomp) {
        long long pieces = 1;
        for (int k = 0; k < ndecomp; k++)
            pieces *= decomp[k];
        if (ndecomp != ndim)
            return cli_error(cmd, 2, "--decomp gives pieces along %d axes but %s has %d", ndecomp, path, ndim);
        if (pieces != size)
            return cli_error(cmd, 2, "--decomp makes %lld pieces but the job has %d ranks; their number must be "
                                     "the product", pieces, size);
    }
    if (dk_mpi_decompose(MPI_COMM_WORLD, ndim, shape, ndecomp ? decomp : NULL, part) != DK_OK)
        return cli_error(cmd, 2, "%s", dk_mpi_last_error());
    return 0;
}

/* This rank's rank among the processes of its node. Collective where the
 * launcher does not say. */
static int local_rank(void)
{
    const char *e = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!e)
        e = getenv("MPI_LOCALRANKID");
    if (e && *e)
        return atoi(e);
    MPI_Comm node;
    int r = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &r);
        MPI_Comm_free(&node);
    }
    return r;
}

void dist_choose_device(const char *backend)
{
    const char *dev = getenv("DAKIT_DEVICE");
    int lr = local_rank(); /* every rank calls it: it may be collective */
    if (dev && *dev)
        return;
    if (!backend || !*backend)
        backend = getenv("DAKIT_BACKEND");
    if (backend && !strcmp(backend, "cpu"))
        return;
    int most = 0, n = dk_backend_count();
    for (int i = 0; i < n; i++) {
        dk_backend_info info;
        if (dk_backend_get(i, &info) != DK_OK || !info.usable || !strcmp(info.name, "cpu"))
            continue;
        if (backend && *backend && strcmp(backend, "auto") && !cli_in_list(backend, info.name))
            continue;
        if (info.device_count > most)
            most = info.device_count;
    }
    if (most < 1)
        return;
    char v[16];
    snprintf(v, sizeof v, "%d", lr % most);
    setenv("DAKIT_DEVICE", v, 1);
}

#define FAILED(...) (snprintf(msg, len, __VA_ARGS__), 1)

int dist_write_npy(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape, int vdim,
                   const size_t *vshape, const size_t *offset, const size_t *extent, const void *box, char *msg,
                   size_t len)
{
    int rank, size, failed = 0, fd = -1, have_output = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char err[4200], tmp[4096] = "";
    output o;
    /* npy_write_box places rows by the element size alone: a 4- or 8-byte
     * type of any kind (int32 labels) is written as float32 or float64 */
    npy_array hdr = {.dtype = esize == 8 ? DK_F64 : DK_F32, .ndim = vdim};
    size_t count = 1;
    for (int a = 0; a < vdim; a++)
        count *= (hdr.shape[a] = vshape[a]);
    hdr.count = count;
    unsigned char header[1024];
    size_t hbytes = npy_format_header(descr, ndim, shape, header, sizeof header);
    if (esize != 4 && esize != 8)
        failed = FAILED("writing %s: elements of %zu bytes are not supported", path, esize);
    else if (rank == 0) {
        if (output_open(&o, path, err, sizeof err) != 0)
            failed = FAILED("%s", err);
        else {
            have_output = 1;
            fd = o.fd;
            errno = 0;
            if (!o.tmp[0])
                failed = FAILED("cannot write %s under mpirun: the ranks write their parts at offsets, which "
                                "needs a regular file", path);
            else if (pwrite(o.fd, header, hbytes, 0) != (ssize_t)hbytes ||
                     ftruncate(o.fd, (off_t)(hbytes + count * esize)) != 0)
                failed = FAILED("writing %s failed: %s", path, strerror(errno ? errno : EIO));
            snprintf(tmp, sizeof tmp, "%s", o.tmp);
        }
    }
    if (dist_agree(failed, msg, len))
        goto fail;
    MPI_Bcast(tmp, sizeof tmp, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0 && (fd = open(tmp, O_WRONLY | O_CLOEXEC)) < 0)
        failed = FAILED("rank %d of %d: cannot open %s's temporary file %s: %s", rank, size, path, tmp,
                        strerror(errno));
    else if (npy_write_box(fd, path, &hdr, hbytes, offset, extent, box, err, sizeof err) != DK_OK)
        failed = FAILED("rank %d of %d: %s", rank, size, err);
    else if (rank != 0 && fsync(fd) != 0)
        failed = FAILED("rank %d of %d: writing %s failed: %s", rank, size, path, strerror(errno));
    if (rank != 0 && fd >= 0) {
        if (close(fd) != 0 && !failed)
            failed = FAILED("rank %d of %d: writing %s failed: %s", rank, size, path, strerror(errno));
        fd = -1;
    }
    if (dist_agree(failed, msg, len))
        goto fail;
    if (rank == 0) {
        have_output = 0;
        if (output_commit(&o, err, sizeof err) != 0)
            failed = FAILED("%s", err);
    }
    if (dist_agree(failed, msg, len))
        goto fail;
    return 0;
fail:
    if (have_output)
        output_abort(&o);
    return 1;
}

int dist_write_npy_root(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                        const void *data, char *msg, size_t len)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    size_t offset[NPY_MAX_DIMS] = {0}, extent[NPY_MAX_DIMS] = {0};
    for (int a = 0; a < ndim && rank == 0; a++)
        extent[a] = shape[a];
    return dist_write_npy(path, descr, esize, ndim, shape, ndim, shape, offset, extent, data, msg, len);
}

static const char *dtype_name(dk_dtype t)
{
    return t == DK_F32 ? "float32" : t == DK_F64 ? "float64" : "of an unknown type";
}

static void shape_text(char *out, size_t len, int ndim, const unsigned long long *shape)
{
    size_t at = (size_t)snprintf(out, len, "(");
    for (int a = 0; a < ndim && a < NPY_MAX_DIMS && at < len; a++)
        at += (size_t)snprintf(out + at, len - at, "%s%llu", a ? ", " : "", shape[a]);
    if (at < len)
        snprintf(out + at, len - at, "%s)", ndim == 1 ? "," : "");
}

int dist_same_header(const char *path, dk_dtype dtype, int ndim, const size_t *shape, char *msg, size_t len)
{
    int rank, size, failed = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long long mine[2 + NPY_MAX_DIMS] = {(unsigned long long)dtype, (unsigned long long)ndim};
    unsigned long long root[2 + NPY_MAX_DIMS];
    for (int a = 0; a < ndim && a < NPY_MAX_DIMS; a++)
        mine[2 + a] = shape[a];
    memcpy(root, mine, sizeof root);
    MPI_Bcast(root, 2 + NPY_MAX_DIMS, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (memcmp(root, mine, sizeof root) != 0) {
        char a[256], b[256];
        shape_text(a, sizeof a, (int)mine[1], mine + 2);
        shape_text(b, sizeof b, (int)root[1], root + 2);
        snprintf(msg, len, "rank %d of %d: its %s is %s %s but rank 0's is %s %s; every rank must read the same "
                 "file (node-local copies must be identical)", rank, size, path, dtype_name((dk_dtype)mine[0]), a,
                 dtype_name((dk_dtype)root[0]), b);
        failed = 1;
    }
    return dist_agree(failed, msg, len);
}

/* FNV-1a: a change anywhere in the bytes changes it */
static unsigned long long hash_bytes(const void *data, size_t n)
{
    const unsigned char *p = data;
    unsigned long long h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

int dist_same_bytes(const char *what, const void *data, size_t n, char *msg, size_t len)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long long mine[2] = {n, hash_bytes(data, n)}, root[2] = {mine[0], mine[1]};
    MPI_Bcast(root, 2, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    int failed = root[0] != mine[0] || root[1] != mine[1];
    if (failed)
        snprintf(msg, len, "rank %d of %d: its %s differs from rank 0's (%llu bytes against %llu%s); every rank "
                 "must read the same file (node-local copies must be identical)", rank, size, what, mine[0], root[0],
                 root[0] == mine[0] ? ", other values" : "");
    return dist_agree(failed, msg, len);
}

/* Copies a box (C order) into its place in the whole array, a row of the
 * last axis at a time. */
static void place_box(unsigned char *whole, size_t esize, int vdim, const size_t *vshape, const size_t *offset,
                      const size_t *extent, const unsigned char *box)
{
    size_t rows = 1, row_bytes = extent[vdim - 1] * esize;
    for (int a = 0; a < vdim; a++)
        if (extent[a] == 0)
            return;
    for (int a = 0; a < vdim - 1; a++)
        rows *= extent[a];
    for (size_t r = 0; r < rows; r++) {
        size_t rest = r, at = 0, stride = 1, idx[NPY_MAX_DIMS];
        for (int a = vdim - 2; a >= 0; a--) {
            idx[a] = offset[a] + rest % extent[a];
            rest /= extent[a];
        }
        for (int a = vdim - 1; a >= 0; a--) {
            at += (a == vdim - 1 ? offset[a] : idx[a]) * stride;
            stride *= vshape[a];
        }
        memcpy(whole + at * esize, box + r * row_bytes, row_bytes);
    }
}

#define CHUNK ((size_t)1 << 30) /* MPI counts are ints */

int dist_gather_box(size_t esize, int vdim, const size_t *vshape, const size_t *offset, const size_t *extent,
                    const void *box, void **whole, char *msg, size_t len)
{
    int rank, size, failed = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t total = 1, mine = 1;
    for (int a = 0; a < vdim; a++) {
        total *= vshape[a];
        mine *= extent[a];
    }
    *whole = NULL;
    unsigned char *part = NULL;
    if (rank == 0 && !(*whole = malloc(total ? total * esize : 1)))
        failed = FAILED("rank 0 of %d: out of memory for the whole %zu values it writes", size, total);
    if (dist_agree(failed, msg, len))
        return 1;
    if (rank != 0) {
        unsigned long long geo[2 * NPY_MAX_DIMS] = {0};
        for (int a = 0; a < vdim; a++) {
            geo[a] = offset[a];
            geo[NPY_MAX_DIMS + a] = extent[a];
        }
        MPI_Send(geo, 2 * NPY_MAX_DIMS, MPI_UNSIGNED_LONG_LONG, 0, 0, MPI_COMM_WORLD);
        for (size_t at = 0; at < mine * esize; at += CHUNK) {
            size_t n = mine * esize - at < CHUNK ? mine * esize - at : CHUNK;
            MPI_Send((const unsigned char *)box + at, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    } else {
        place_box(*whole, esize, vdim, vshape, offset, extent, box);
        for (int r = 1; r < size; r++) {
            unsigned long long geo[2 * NPY_MAX_DIMS];
            size_t off[NPY_MAX_DIMS], ext[NPY_MAX_DIMS], count = 1;
            MPI_Recv(geo, 2 * NPY_MAX_DIMS, MPI_UNSIGNED_LONG_LONG, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int a = 0; a < vdim; a++) {
                off[a] = geo[a];
                ext[a] = geo[NPY_MAX_DIMS + a];
                count *= ext[a];
            }
            /* a part that cannot be held is still received, so that its rank does not wait forever */
            unsigned char *grown = count && !failed ? realloc(part, count * esize) : part;
            if (count && !grown)
                failed = FAILED("rank 0 of %d: out of memory for rank %d's part", size, r);
            else
                part = grown;
            unsigned char sink[4096];
            for (size_t at = 0; at < count * esize; at += CHUNK) {
                size_t n = count * esize - at < CHUNK ? count * esize - at : CHUNK;
                if (failed)
                    for (size_t got = 0; got < n; got += sizeof sink)
                        MPI_Recv(sink, (int)(n - got < sizeof sink ? n - got : sizeof sink), MPI_BYTE, r, 1,
                                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                else
                    MPI_Recv(part + at, (int)n, MPI_BYTE, r, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            if (!failed)
                place_box(*whole, esize, vdim, vshape, off, ext, part);
        }
    }
    free(part);
    if (dist_agree(failed, msg, len)) {
        free(*whole);
        *whole = NULL;
        return 1;
    }
    return 0;
}

int dist_writes_in_parts(const char *path)
{
    return !array_is_netcdf_name(path) && !strchr(path, '{');
}

int dist_write(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape, int vdim,
               const size_t *vshape, const size_t *offset, const size_t *extent, const void *box,
               dist_root_writer write, void *arg, char *msg, size_t len)
{
    if (dist_writes_in_parts(path))
        return dist_write_npy(path, descr, esize, ndim, shape, vdim, vshape, offset, extent, box, msg, len);
    int rank, failed = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    void *whole = NULL;
    if (dist_gather_box(esize, vdim, vshape, offset, extent, box, &whole, msg, len))
        return 1;
    if (rank == 0 && write(path, whole, arg, msg, len) != 0)
        failed = 1;
    free(whole);
    return dist_agree(failed, msg, len);
}

int dist_write_root(const char *path, const char *descr, size_t esize, int ndim, const size_t *shape,
                    const void *data, dist_root_writer write, void *arg, char *msg, size_t len)
{
    int rank, failed = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (dist_writes_in_parts(path))
        return dist_write_npy_root(path, descr, esize, ndim, shape, data, msg, len);
    if (rank == 0 && write(path, data, arg, msg, len) != 0)
        failed = 1;
    return dist_agree(failed, msg, len);
}
#endif
