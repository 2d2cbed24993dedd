/* libFuzzer target: the syntax of array specs (tools/cli/netcdf.c): the
 * hyperslab after a variable (X.nc:VAR[dim=i,dim=a:b]) and the member
 * pattern of an ensemble split over files (mem_{:03d}.nc:VAR). The input is
 * the text after the folder: files f.nc (T over time 3, y 4, x 5) and
 * m_0.nc .. m_2.nc, m_000.nc .. m_001.nc, m_  1.nc (4 x 5 each) lie there.
 * Any spec is read or refused with a sentence; a result's shape multiplies
 * out to its count, and at most the file's 60 values are read. */
#include <netcdf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/netcdf.h"

static char dir[64];

static void make(const char *name, int with_time)
{
    char p[128];
    int id, dims[3], v;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (nc_create(p, NC_CLOBBER | NC_NETCDF4, &id) != NC_NOERR)
        abort();
    int nd = 0;
    if (with_time)
        nc_def_dim(id, "time", 3, &dims[nd++]);
    nc_def_dim(id, "y", 4, &dims[nd++]);
    nc_def_dim(id, "x", 5, &dims[nd++]);
    nc_def_var(id, "T", NC_DOUBLE, nd, dims, &v);
    nc_enddef(id);
    double x[60];
    for (int i = 0; i < 60; i++)
        x[i] = i;
    nc_put_var_double(id, v, x);
    nc_close(id);
}

/* The folder and its files go when the fuzzer ends. */
static void clean_up(void)
{
    static const char *const names[] = {"f.nc", "m_0.nc", "m_1.nc", "m_2.nc", "m_000.nc", "m_001.nc", "m_  1.nc"};
    for (int k = 0; k < 7; k++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(dir, sizeof dir, "/tmp/dakit-fuzz-spec-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    atexit(clean_up);
    make("f.nc", 1);
    static const char *const members[] = {"m_0.nc", "m_1.nc", "m_2.nc", "m_000.nc", "m_001.nc", "m_  1.nc"};
    for (int k = 0; k < 6; k++)
        make(members[k], 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 400 || memchr(data, 0, size))
        return 0;
    char spec[512], err[1024];
    snprintf(spec, sizeof spec, "%s/%.*s", dir, (int)size, (const char *)data);
    if (strstr(spec, "/.."))
        return 0; /* stay in the folder */
    npy_array a;
    array_origin o;
    dk_status st = strchr(spec, '{') ? array_read_ensemble(spec, NULL, &a, &o, err, sizeof err)
                                     : array_read(spec, NULL, &a, &o, err, sizeof err);
    if (st == DK_OK) {
        size_t count = 1;
        if (a.ndim < 1 || a.ndim > NPY_MAX_DIMS || !a.data)
            abort();
        for (int i = 0; i < a.ndim; i++)
            count *= a.shape[i];
        if (count != a.count || count > 60 * 6)
            abort();
        npy_free(&a);
    } else if (!err[0] || a.data) {
        abort();
    }
    return 0;
}
