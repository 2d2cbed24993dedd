/* The flux scheme's small functions, one definition for every backend, as
 * the model files are (models/model.h): engine.h includes this file for
 * the host, the cuda plugin with GB_FLUX_FN set to device code, and the
 * opencl plugin carries its text into each gbees program ahead of
 * gbees.cl. It keeps to what C99, CUDA C++ and OpenCL C share. */
#ifndef DAKIT_GBEES_FLUX_H
#define DAKIT_GBEES_FLUX_H

#ifndef GB_FLUX_FN
#define GB_FLUX_FN static inline
#endif

/* max(x, 0) and min(x, 0) written out: libm's fmax and fmin are calls
 * that the compiler may not inline (their NaN rules), and the flux loop
 * makes dozens per cell. */
GB_FLUX_FN double gb_pos(double x) { return x > 0.0 ? x : 0.0; }
GB_FLUX_FN double gb_neg(double x) { return x < 0.0 ? x : 0.0; }

/* MC (monotonized central) limiter. */
GB_FLUX_FN double gb_mc(double th)
{
    double m = 0.5 * (1.0 + th);
    m = m < 2.0 ? m : 2.0;
    return gb_pos(m < 2.0 * th ? m : 2.0 * th);
}

/* Where a run stops inside a step: the step that starts at t0 with time
 * step dt and would pass t_target is cut there, taking the part
 * (t_target - t0) / dt of its fluxes from its start; 1: the step ends at
 * or before t_target and is taken whole. Every backend cuts by this rule
 * and finishes a cut step later from its start, with the same fluxes, so
 * that where a run stops never changes the steps it makes. */
GB_FLUX_FN double gb_step_part(double t0, double dt, double t_target)
{
    if (!(dt >= t_target - t0))
        return 1.0;
    double part = (t_target - t0) / dt;
    return part < 1.0 ? part : 1.0;
}

/* The time that step reaches: t_target when it gets there, else its end. */
GB_FLUX_FN double gb_step_time(double t0, double dt, double t_target)
{
    return dt >= t_target - t0 ? t_target : t0 + dt;
}

#endif
