/* What a model file builds on. A model is one file here: its vector field
 * <name>_f and measurement function <name>_h, written with GB_MODEL_FN,
 * and one GB_MODEL(...) line describing it; all.h lists the files.
 *
 * The same file is compiled three ways, so every backend evaluates the very
 * same expressions: on the host (registry.c; GB_MODEL becomes the
 * dk_gbees_model descriptor), in the cuda plugin (GB_MODEL_FN is device
 * code, GB_MODEL is empty) and in the opencl plugin (the file's text goes
 * into the OpenCL program). Model code therefore keeps to what C99, CUDA
 * C++ and OpenCL C share: double arithmetic and the math functions all
 * three have (sqrt, pow, exp, log, sin, cos, fabs), no other calls.
 * Device builds define GB_MODEL_FN and GB_MODEL before including a model
 * file, which is why each file includes this header only when GB_MODEL_FN
 * is not yet defined. */
#ifndef DAKIT_GBEES_MODEL_H
#define DAKIT_GBEES_MODEL_H

#include <math.h>

#include <dakit/gbees.h>

#define GB_MODEL_FN static

/* GB_MODEL(name, about, dim, min_dim, meas_dim, ncoef, coefficients...):
 * dim 0 takes the dimension from the measurement files (at least min_dim);
 * meas_dim 0 measures the whole state. */
#define GB_MODEL(name_, about_, dim_, min_dim_, meas_dim_, ncoef_, ...)                     \
    const dk_gbees_model dk_gbees_model_##name_ = {                                          \
        .name = #name_, .about = about_, .dim = dim_, .min_dim = min_dim_,                   \
        .meas_dim = meas_dim_, .ncoef = ncoef_, .coef = {__VA_ARGS__},                       \
        .f = name_##_f, .h = name_##_h,                                                      \
    };

#endif
