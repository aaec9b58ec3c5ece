/* exercise.cu - chapter 08: your integrate kernel for rigid water.
 *
 * The harness (main.cu) makes a GPU run of a TIP3P box (md_cuda_sim, NVE, no centre-of-mass
 * removal), and for 20 steps calls exercise_integrate() where the library would launch its
 * integrate kernel, then md_cuda_sim_enqueue_forces() for the forces of the new positions. It
 * checks the positions and velocities against md.h's CPU step (md_sim, double) and times a step
 * beside the library's (the `exercise` row of the ladder).
 *
 * One leapfrog step for a rigid water (md.h's sim section has the equations; F read from the
 * fixed-point forces, m the masses, dt the time step):
 *     v += dt F / m;   D = dt v;   x' = x + D, SETTLE'd against x;   v += (x' - x - D) / dt;
 *     x = x';  write the float4 the force kernels read (wrapped into the box);  zero F.
 *
 * The stub below is correct, and it is the slow rung: three kernels with the positions going
 * through global memory between them (a kick-and-drift kernel per atom, a SETTLE kernel per
 * water, a finishing kernel per atom). Make it fast and measure each step:
 *   1. fuse the three kernels into one, one thread per water: load the molecule's three atoms
 *      once, do the whole step in registers, store once. (Count the launches and the bytes moved
 *      per step before and after.)
 *   2. the forces are read once per step and must be zero before the next evaluation adds into
 *      them: zero them in the same kernel instead of a memset (one launch fewer, one pass over
 *      3 x 8 bytes per atom fewer);
 *   3. add the kinetic energy of v(t) = v(t - dt/2) + dt/2 F / m (velocity-constrained with
 *      md_settle_velocities) as a fixed-point block sum: why not a double atomicAdd per thread?
 *      (run it twice and compare the bits).
 * The solution is md_cuda.cu.h's md__step_integrate_kernel (its water path, md__step_unit<3, 0>);
 * keep md_settle_water: the CPU and GPU steps share it, which is what makes them comparable. */
#ifndef MD_IMPLEMENTATION
#define MD_IMPLEMENTATION
#endif
#ifndef MD_CUDA_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#endif
#include "md_cuda.cu.h"

#ifdef __CUDACC__
#define EXERCISE_BLOCK 128

/* Kick and drift, one thread per atom: the new positions go to xn (3 n doubles). */
__global__ void exercise_kick_drift_kernel(int n, const double *__restrict__ x, double *__restrict__ v,
                                           const double *__restrict__ inv_mass, const md_fixed *__restrict__ force,
                                           int stride, const int *__restrict__ rank, double dt, double *__restrict__ xn) {
    const int i = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    if (i >= n) return;
    for (int a = 0; a < 3; a++) {
        const double f = md_fixed_to_double(force[(size_t)a * stride + rank[i]], MD_FORCE_FIXED_SCALE);
        v[3 * i + a] += dt * f * inv_mass[i];
        xn[3 * i + a] = x[3 * i + a] + dt * v[3 * i + a];
    }
}

/* SETTLE, one thread per water, positions relative to the reference oxygen. */
__global__ void exercise_settle_kernel(int nwater, const int4 *__restrict__ water, const double *__restrict__ x,
                                       double *__restrict__ xn, const double *__restrict__ box, double mo, double mh,
                                       double doh, double dhh, unsigned long long *flags) {
    const int w = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    double r[9], y[9], org[3];
    int at[3];
    if (w >= nwater) return;
    at[0] = water[w].x, at[1] = water[w].y, at[2] = water[w].z;
    for (int a = 0; a < 3; a++) org[a] = x[3 * at[0] + a];
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < 3; a++) {
            double d = x[3 * at[k] + a] - org[a], e = xn[3 * at[k] + a] - org[a];
            r[3 * k + a] = d - box[a] * rint(d / box[a]);
            y[3 * k + a] = e - box[a] * rint(e / box[a]);
        }
    if (md_settle_water(r, y, mo, mh, doh, dhh)) md_cuda_flag_raise(flags, MD_CUDA_FLAG_OVERFLOW, (unsigned long long)at[0] + 1);
    for (int k = 0; k < 3; k++)
        for (int a = 0; a < 3; a++) xn[3 * at[k] + a] = org[a] + y[3 * k + a];
}

/* Velocity correction, new positions, the float4 mirror, zeroed forces; one thread per atom. */
__global__ void exercise_finish_kernel(int n, double *__restrict__ x, double *__restrict__ v,
                                       const double *__restrict__ xn, const int *__restrict__ rank,
                                       const double *__restrict__ box, const float *__restrict__ charge, double dt,
                                       float4 *__restrict__ xyzq, md_fixed *__restrict__ force, int stride) {
    const int i = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    float4 q;
    if (i >= n) return;
    for (int a = 0; a < 3; a++) {
        const double D = dt * v[3 * i + a], dc = xn[3 * i + a] - x[3 * i + a];
        v[3 * i + a] += (dc - D) / dt;
        x[3 * i + a] = xn[3 * i + a];
        force[(size_t)a * stride + rank[i]] = 0;
    }
    /* the mirror moves continuously between sorts (not wrapped into the box): the neighbour
     * list stores a periodic shift per entry, see md_cuda_mirror_coord */
    q = xyzq[rank[i]];
    q.x = md_cuda_mirror_coord(x[3 * i], q.x, box[0]);
    q.y = md_cuda_mirror_coord(x[3 * i + 1], q.y, box[1]);
    q.z = md_cuda_mirror_coord(x[3 * i + 2], q.z, box[2]);
    q.w = charge[i];
    xyzq[rank[i]] = q;
}

/* One step of the run's waters with the three kernels above; xn is 3 n doubles of scratch. The
 * run must be all rigid water, NVE, without centre-of-mass removal (the harness makes it so). */
static md_status exercise_integrate(md_cuda_sim *s, double *xn) {
    const md_cuda_step_plan *p = &s->step;
    const cudaStream_t st = s->state.q.stream;
    const int n = p->n, blocks = (n + EXERCISE_BLOCK - 1) / EXERCISE_BLOCK;
    exercise_kick_drift_kernel<<<blocks, EXERCISE_BLOCK, 0, st>>>(n, p->d_x, p->d_v, p->d_inv_mass, s->state.d_force,
                                                                  s->state.stride, s->state.d_rank, s->desc.dt, xn);
    MD_CUDA_TRY_LAUNCH("exercise_kick_drift_kernel");
    exercise_settle_kernel<<<(p->nwater + EXERCISE_BLOCK - 1) / EXERCISE_BLOCK, EXERCISE_BLOCK, 0, st>>>(
        p->nwater, p->d_water, p->d_x, xn, s->state.d_box, p->mass_o, p->mass_h, p->doh, p->dhh, p->d_flags);
    MD_CUDA_TRY_LAUNCH("exercise_settle_kernel");
    exercise_finish_kernel<<<blocks, EXERCISE_BLOCK, 0, st>>>(n, p->d_x, p->d_v, xn, s->state.d_rank, s->state.d_box,
                                                              p->d_charge, s->desc.dt, s->state.d_xyzq, s->state.d_force,
                                                              s->state.stride);
    MD_CUDA_TRY_LAUNCH("exercise_finish_kernel");
    return MD_OK;
}
#endif /* __CUDACC__ */
