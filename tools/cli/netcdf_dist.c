#define _GNU_SOURCE
#include "cli/netcdf_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef DK_HAVE_NETCDF
#include <netcdf.h>
#endif

#define FAIL(st, ...) (snprintf(err, len, __VA_ARGS__), (st))

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* array_read's own sentence for a spec it refuses (it refuses before
 * reading values); a generic one if it reads it after all. */
static dk_status refusal(const char *spec, const char *var, const char *why, char *err, size_t len)
{
    npy_array a;
    dk_status st = array_read(spec, var, &a, NULL, err, len);
    if (st == DK_OK) {
        npy_free(&a);
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: %s", spec, why);
    }
    return st;
}

#ifdef DK_HAVE_NETCDF
/* The one variable with dimensions that is not a coordinate, or -1. */
static int only_variable(int ncid)
{
    int nvars = 0, found = -1;
    nc_inq_nvars(ncid, &nvars);
    for (int v = 0; v < nvars; v++) {
        char name[NC_MAX_NAME + 1];
        int nd = 0, dimid;
        nc_inq_varname(ncid, v, name);
        nc_inq_varndims(ncid, v, &nd);
        if (nd == 0 || (nd == 1 && nc_inq_dimid(ncid, name, &dimid) == NC_NOERR))
            continue;
        if (found >= 0)
            return -1;
        found = v;
    }
    return found;
}

static int nameable(const char *name)
{
    return !strpbrk(name, ",=[]:");
}

static dk_status open_netcdf(array_source *s, const char *spec, const char *rest, const char *var_opt,
                             array_origin *o, char *err, size_t len)
{
    int ncid, varid = -1, nd = 0, dimids[NC_MAX_VAR_DIMS];
    char var[NC_MAX_NAME + 1] = "";
    const char *slab = NULL;
    if (nc_open(s->path, NC_NOWRITE, &ncid) != NC_NOERR)
        return refusal(spec, var_opt, "cannot be opened", err, len);
    if (rest && *rest) {
        size_t n = strcspn(rest, "[");
        if (n <= NC_MAX_NAME) {
            memcpy(var, rest, n);
            var[n] = '\0';
        }
        slab = rest[n] == '[' ? rest + n + 1 : NULL;
    }
    if (!var[0] && var_opt && strlen(var_opt) <= NC_MAX_NAME)
        snprintf(var, sizeof var, "%s", var_opt);
    if (var[0] ? nc_inq_varid(ncid, var, &varid) != NC_NOERR : (varid = only_variable(ncid)) < 0)
        varid = -1;
    if (varid < 0 || nc_inq_var(ncid, varid, var, NULL, &nd, dimids, NULL) != NC_NOERR || nd < 1 ||
        nd > NPY_MAX_DIMS) {
        nc_close(ncid);
        return refusal(spec, var_opt, "no variable of 1 to 8 dimensions to read", err, len);
    }
    char dim[NPY_MAX_DIMS][NC_MAX_NAME + 1];
    size_t size[NPY_MAX_DIMS], start[NPY_MAX_DIMS], count[NPY_MAX_DIMS];
    int keep[NPY_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        nc_inq_dimname(ncid, dimids[d], dim[d]);
        nc_inq_dimlen(ncid, dimids[d], &size[d]);
        start[d] = 0;
        count[d] = size[d];
        keep[d] = 1;
    }
    nc_close(ncid);
    if (!nameable(var) || strlen(var) >= sizeof s->var)
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: the variable name '%s' cannot be read in parts under mpirun (it "
                                             "holds one of , = [ ] :)", s->path, var);
    snprintf(s->var, sizeof s->var, "%s", var);
    /* the spec's items: ranges narrow a kept dimension, indices drop one */
    char probe[1024] = "";
    size_t at = 0;
    int bad = 0;
    for (const char *p = slab; p && *p && *p != ']' && !bad;) {
        char name[NC_MAX_NAME + 1];
        unsigned long long a, b;
        int used = 0;
        size_t nlen = strcspn(p, "=");
        if (nlen == 0 || nlen > NC_MAX_NAME || !p[nlen]) {
            bad = 1;
            break;
        }
        memcpy(name, p, nlen);
        name[nlen] = '\0';
        int d = -1;
        for (int k = 0; k < nd; k++)
            if (!strcmp(dim[k], name))
                d = k;
        if (d < 0 || p[nlen + 1] == '-')
            bad = 1;
        else if (sscanf(p + nlen + 1, "%llu:%llu%n", &a, &b, &used) == 2 && used > 0) {
            if (b <= a || b > size[d])
                bad = 1;
            start[d] = (size_t)a;
            count[d] = (size_t)(b - a);
            at += (size_t)snprintf(probe + at, at < sizeof probe ? sizeof probe - at : 0, "%s=%llu,", name, a);
        } else if (sscanf(p + nlen + 1, "%llu%n", &a, &used) == 1 && used > 0) {
            start[d] = (size_t)a;
            count[d] = 1;
            keep[d] = 0;
            size_t fl = strlen(s->fixed);
            snprintf(s->fixed + fl, sizeof s->fixed - fl, "%s=%llu,", name, a);
            at += (size_t)snprintf(probe + at, at < sizeof probe ? sizeof probe - at : 0, "%s=%llu,", name, a);
        } else
            bad = 1;
        p += nlen + 1 + (size_t)used;
        if (*p == ',')
            p++;
        else if (*p != ']')
            bad = 1;
    }
    if (bad || at >= sizeof probe)
        return refusal(spec, var_opt, "the hyperslab cannot be read in parts", err, len);
    /* one value, read by array_read: the spec's checks and its decoded type */
    for (int d = 0; d < nd; d++) {
        if (!nameable(dim[d]))
            return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: the dimension name '%s' cannot be read in parts under mpirun "
                                                 "(it holds one of , = [ ] :)", s->path, dim[d]);
        int named = 0;
        for (const char *q = strstr(probe, dim[d]); q && !named; q = strstr(q + 1, dim[d]))
            named = (q == probe || q[-1] == ',') && q[strlen(dim[d])] == '=';
        if (!named)
            at += (size_t)snprintf(probe + at, at < sizeof probe ? sizeof probe - at : 0, "%s=0,", dim[d]);
    }
    if (at >= sizeof probe)
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: too many dimensions to read in parts", s->path, var);
    if (at)
        probe[at - 1] = '\0';
    char one[8192];
    snprintf(one, sizeof one, "%s:%s[%s]", s->path, var, probe);
    npy_array v;
    dk_status st = array_read(one, NULL, &v, NULL, err, len);
    if (st != DK_OK)
        return st;
    s->hdr.dtype = v.dtype;
    npy_free(&v);
    if (o) {
        memset(o, 0, sizeof *o);
        o->netcdf = 1;
        o->member = -1;
        snprintf(o->path, sizeof o->path, "%s", s->path);
        snprintf(o->var, sizeof o->var, "%s", var);
    }
    s->hdr.count = 1;
    for (int d = 0; d < nd; d++) {
        s->hdr.count *= count[d];
        if (!keep[d])
            continue;
        if (o) {
            snprintf(o->dim[o->ndim], sizeof o->dim[o->ndim], "%s", dim[d]);
            o->start[o->ndim] = start[d];
            o->count[o->ndim++] = count[d];
        }
        s->hdr.shape[s->hdr.ndim++] = count[d];
    }
    if (s->hdr.ndim == 0) {
        s->hdr.ndim = 1;
        s->hdr.shape[0] = 1;
    }
    /* where each kept axis starts in the file, for the boxes */
    for (int d = 0, k = 0; d < nd; d++)
        if (keep[d]) {
            s->start[k] = start[d];
            snprintf(s->dim[k++], sizeof s->dim[0], "%s", dim[d]);
        }
    return DK_OK;
}
#endif

dk_status array_source_open(array_source *s, const char *spec, const char *var, array_origin *origin, char *err,
                            size_t len)
{
    memset(s, 0, sizeof *s);
    if (origin) {
        memset(origin, 0, sizeof *origin);
        origin->member = -1;
    }
    if (strchr(spec, '{'))
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s: a {} pattern names an ensemble's member files; it is taken only "
                                             "where an ensemble is read", spec);
    const char *rest;
    array_split_spec(spec, s->path, sizeof s->path, &rest);
    if (array_sniff(s->path) == 'c' || (rest && is_file(s->path))) {
#ifdef DK_HAVE_NETCDF
        s->netcdf = 1;
        return open_netcdf(s, spec, rest, var, origin, err, len);
#else
        return refusal(spec, var, "is netCDF", err, len);
#endif
    }
    if (!is_file(s->path) && array_is_netcdf_name(s->path))
        return refusal(spec, var, "does not exist", err, len);
    return npy_read_header(s->path, &s->hdr, &s->npy_offset, err, len);
}

dk_status array_source_read_box(const array_source *s, const size_t *offset, const size_t *extent, void *dst,
                                char *err, size_t len)
{
    size_t count = 1;
    for (int a = 0; a < s->hdr.ndim; a++)
        count *= extent[a];
    if (count == 0)
        return DK_OK;
    if (!s->netcdf)
        return npy_read_box(s->path, &s->hdr, s->npy_offset, offset, extent, dst, err, len);
    char slab[4096];
    size_t at = (size_t)snprintf(slab, sizeof slab, "%s", s->fixed);
    for (int k = 0; k < s->hdr.ndim && s->dim[k][0]; k++)
        at += (size_t)snprintf(slab + at, at < sizeof slab ? sizeof slab - at : 0, "%s=%zu:%zu,", s->dim[k],
                               s->start[k] + offset[k], s->start[k] + offset[k] + extent[k]);
    if (at >= sizeof slab)
        return FAIL(DK_ERR_INVALID_ARGUMENT, "%s:%s: the part's hyperslab is too long", s->path, s->var);
    if (at)
        slab[at - 1] = '\0';
    char spec[8192];
    snprintf(spec, sizeof spec, "%s:%s[%s]", s->path, s->var, slab);
    npy_array v;
    dk_status st = array_read(spec, NULL, &v, NULL, err, len);
    if (st != DK_OK)
        return st;
    if (v.count != count || v.dtype != s->hdr.dtype) {
        npy_free(&v);
        return FAIL(DK_ERR_FORMAT, "%s:%s changed while it was read", s->path, s->var);
    }
    memcpy(dst, v.data, count * (v.dtype == DK_F32 ? 4 : 8));
    npy_free(&v);
    return DK_OK;
}
