/* Writes a small synthetic ODIM_H5 polar volume with the HDF5 C API, for
 * the tests of dakit kmeans --odim (provenance: made here, from the ODIM_H5
 * 2.x layout; no real radar's data). Two sweeps (0.5 and 1.5 degrees),
 * 360 rays x 120 bins of 500 m, DBZH as uint8 with gain 0.5, offset -32,
 * nodata 255, undetect 0, deflate-compressed in one chunk. Sweep 1 holds a
 * storm whose core straddles north (azimuth 0) at 30 km, a weaker one at
 * azimuth 180, light rain around, undetect elsewhere and no data past bin
 * 110 (a blocked sector).
 *   make_odim OUT.h5                 the volume
 *   make_odim OUT.h5 roll R          the same with ray i stored at ray i + R
 *   make_odim OUT.h5 corrupt         the same with sweep 1's compressed
 *                                    chunk overwritten (reading it fails)
 *   make_odim OUT.h5 plain           an HDF5 file without ODIM attributes
 * Hostile variants (sweep 1 changed; nothing of them is written to FILE):
 *   make_odim OUT.h5 where NAME V    sweep 1's where/NAME (elangle, rscale,
 *                                    rstart, ...) is V (strtod: inf, 1e308)
 *   make_odim OUT.h5 string          sweep 1's data are strings
 *   make_odim OUT.h5 external FILE   sweep 1's data live in FILE (HDF5
 *                                    external storage)
 *   make_odim OUT.h5 virtual FILE    sweep 1's data are a virtual dataset
 *                                    mapped from FILE:/dataset1/data1/data
 *   make_odim OUT.h5 hdf5-external FILE   no ODIM: a root dataset T, 4 x 5
 *                                    float64, stored in FILE (read by netCDF) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#define NRAYS 360
#define NBINS 120

static void attr_str(hid_t loc, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void attr_num(hid_t loc, const char *name, double v, int integer)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, integer ? H5T_STD_I64LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    long long i = (long long)v;
    H5Awrite(a, integer ? H5T_NATIVE_LLONG : H5T_NATIVE_DOUBLE, integer ? (void *)&i : (void *)&v);
    H5Aclose(a);
    H5Sclose(sp);
}

static hid_t group(hid_t loc, const char *name)
{
    return H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

/* dBZ of the synthetic scene at azimuth az (degrees) and range r (km). */
static double scene(double az, double r, int sweep)
{
    double d0 = fmin(fabs(az), 360 - fabs(az)), d180 = fabs(az - 180);
    double z = -40; /* undetect */
    if (r > 5 && r < 55)
        z = 12 + 4 * sin(az * 0.11) * cos(r * 0.3); /* light rain */
    z = fmax(z, 52 - 0.06 * (d0 * d0 * 0.8 + (r - 30) * (r - 30)) * 1.5);
    z = fmax(z, 35 - 0.08 * (d180 * d180 * 0.5 + (r - 20) * (r - 20)));
    return z - 3.0 * (sweep - 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: make_odim OUT.h5 [roll R | corrupt | plain | where NAME V | string | external FILE | "
                        "virtual FILE | hdf5-external FILE]\n");
        return 2;
    }
    const char *mode = argc > 2 ? argv[2] : "";
    int roll = argc > 3 && !strcmp(mode, "roll") ? atoi(argv[3]) : 0;
    int corrupt = !strcmp(mode, "corrupt"), plain = !strcmp(mode, "plain");
    int string = !strcmp(mode, "string");
    const char *external = argc > 3 && !strcmp(mode, "external") ? argv[3] : NULL;
    const char *virtual = argc > 3 && !strcmp(mode, "virtual") ? argv[3] : NULL;
    const char *where_name = argc > 4 && !strcmp(mode, "where") ? argv[3] : NULL;
    double where_value = where_name ? strtod(argv[4], NULL) : 0;
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return 1;
    if (argc > 3 && !strcmp(mode, "hdf5-external")) {
        hsize_t dims[2] = {4, 5};
        hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(pl, argv[3], 0, H5F_UNLIMITED);
        hid_t d = H5Dcreate2(f, "T", H5T_IEEE_F64LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
        int ok = d >= 0;
        H5Dclose(d);
        H5Pclose(pl);
        H5Sclose(sp);
        H5Fclose(f);
        return ok ? 0 : 1;
    }
    if (!plain) {
        attr_str(f, "Conventions", "ODIM_H5/V2_2");
        hid_t w = group(f, "what");
        attr_str(w, "object", "PVOL");
        attr_str(w, "version", "H5rad 2.2");
        attr_str(w, "date", "20140810");
        attr_str(w, "time", "205000");
        attr_str(w, "source", "NOD:detst,PLC:Synthetic test radar");
        H5Gclose(w);
        w = group(f, "where");
        attr_num(w, "lat", 50.0, 0);
        attr_num(w, "lon", 8.0, 0);
        attr_num(w, "height", 100.0, 0);
        H5Gclose(w);
    }
    static unsigned char raw[NRAYS][NBINS];
    for (int s = 1; s <= 2; s++) {
        for (int i = 0; i < NRAYS; i++)
            for (int j = 0; j < NBINS; j++) {
                double az = (i + 0.5), r = (j + 0.5) * 0.5;
                double z = scene(az, r, s);
                int v = z <= -32 ? 0 : (int)lround((z + 32) / 0.5);
                if (j >= 110 && i >= 100 && i < 130)
                    v = 255; /* not scanned */
                raw[((i + roll) % NRAYS + NRAYS) % NRAYS][j] = (unsigned char)(v < 1 && z > -32 ? 1 : v > 254 && v != 255 ? 254 : v);
            }
        char name[32];
        snprintf(name, sizeof name, "dataset%d", s);
        hid_t ds = group(f, name), w = group(ds, "where"), wt = group(ds, "what");
        attr_num(w, "elangle", s == 1 ? 0.5 : 1.5, 0);
        attr_num(w, "nbins", NBINS, 1);
        attr_num(w, "nrays", NRAYS, 1);
        attr_num(w, "rscale", 500.0, 0);
        attr_num(w, "rstart", 0.0, 0);
        attr_num(w, "a1gate", 0, 1);
        if (where_name && s == 1) {
            H5Adelete(w, where_name);
            attr_num(w, where_name, where_value, 0);
        }
        attr_str(wt, "product", "SCAN");
        attr_str(wt, "startdate", "20140810");
        attr_str(wt, "starttime", s == 1 ? "205000" : "205030");
        H5Gclose(w);
        H5Gclose(wt);
        hid_t d = group(ds, "data1"), dw = group(d, "what");
        attr_str(dw, "quantity", "DBZH");
        attr_num(dw, "gain", 0.5, 0);
        attr_num(dw, "offset", -32.0, 0);
        attr_num(dw, "nodata", 255, 0);
        attr_num(dw, "undetect", 0, 0);
        H5Gclose(dw);
        hsize_t dims[2] = {NRAYS, NBINS};
        hid_t sp = H5Screate_simple(2, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(pl, 2, dims);
        H5Pset_deflate(pl, 6);
        hid_t data;
        if (s == 1 && (string || external || virtual)) {
            H5Pclose(pl);
            pl = H5Pcreate(H5P_DATASET_CREATE);
            hid_t t = H5Tcopy(H5T_C_S1);
            H5Tset_size(t, 8);
            if (external)
                H5Pset_external(pl, external, 0, H5F_UNLIMITED);
            if (virtual) {
                hid_t src = H5Screate_simple(2, dims, NULL);
                H5Pset_virtual(pl, sp, virtual, "/dataset1/data1/data", src);
                H5Sclose(src);
            }
            data = H5Dcreate2(d, "data", string ? t : H5T_STD_U8LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
            if (string) {
                static char text[NRAYS][NBINS][8];
                for (int i = 0; i < NRAYS; i++)
                    for (int j = 0; j < NBINS; j++)
                        snprintf(text[i][j], 8, "%d", raw[i][j]);
                H5Dwrite(data, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text);
            }
            H5Tclose(t);
            if (data < 0)
                return 1;
        } else {
            data = H5Dcreate2(d, "data", H5T_STD_U8LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
            H5Dwrite(data, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
        }
        H5Dflush(data);
        haddr_t addr = 0;
        hsize_t size = 0;
        if (corrupt && s == 1) {
            hsize_t off[2] = {0, 0};
            unsigned mask;
            H5Dget_chunk_info_by_coord(data, off, &mask, &addr, &size);
        }
        H5Dclose(data);
        H5Pclose(pl);
        H5Sclose(sp);
        H5Gclose(d);
        H5Gclose(ds);
        if (corrupt && s == 1 && size > 16) {
            H5Fflush(f, H5F_SCOPE_GLOBAL);
            FILE *raw_file = fopen(argv[1], "r+b");
            if (!raw_file || fseek(raw_file, (long)addr + 8, SEEK_SET) != 0)
                return 1;
            for (hsize_t b = 8; b < size; b++)
                fputc(0xA5, raw_file);
            fclose(raw_file);
        }
    }
    H5Fclose(f);
    return 0;
}
