/* Chapter 06 exercise: nonbonded forces over a full Verlet list.
 *
 * exercise_nb_kernel below is CORRECT BUT SLOW. One thread per atom i walks i's row of the
 * MD_NB_GPU_FULL_LIST plan's neighbour list (column-major ELL: neighbour k of atom i at
 * nb[k * stride + i], nbn[i] of them) and, for every pair inside the cutoff, adds the pair's
 * force on i to the global fixed-point force array with three 64-bit atomicAdds. It uses md.h's
 * float pair arithmetic and converts every pair force with md_fixed_from_float, so its sums are
 * bitwise those of md_nb_compute(MD_NB_CPU_FIXED) whatever it changes in the order: the harness
 * checks exactly that (tolerance 0), then times it beside the library's rungs.
 *
 * Make it fast without changing a bit of the result:
 *   1. keep the three sums in registers (md_fixed, unsigned 64-bit) and write them once at the
 *      end: only this thread ever writes atom i's force in this kernel, so no atomic is needed;
 *   2. replace the `if (r2 < rc2)` around the pair by a mask: compute every pair, then AND the
 *      force bits with 0 or ~0 (a NaN from a padding pair must not leak through: mask the
 *      bits, do not multiply by 0);
 *   3. let every thread of a warp run to the warp's longest row (shuffle a max), masking the
 *      steps past its own row, so the loop has no divergent exit.
 * The library's answer is md__nb_list_kernel<FLAGS, 0> in md_cuda.cu.h (section nb); compare the times in
 * the table the chapter prints. The harness runs the exercise with reaction-field Coulomb on a
 * water box, where excluded pairs get nothing, so the pair forces are the whole answer. */
#include "md_cuda.cu.h"

__global__ void exercise_nb_kernel(const float4 *__restrict__ xyzq, const int *__restrict__ type,
                                   const float2 *__restrict__ lj, int ntypes, const int *__restrict__ nb,
                                   const int *__restrict__ nbn, int stride, int n, const double *__restrict__ box,
                                   md_nb_coeffs k, md_fixed *force) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    md_nb_box_f32 b;
    float4 pi;
    if (i >= n) return;
    b = md_nb_box_f32_make(box);
    pi = xyzq[i];
    for (int m = 0; m < nbn[i]; m++) {
        const int j = nb[(size_t)m * stride + i];
        const float4 pj = xyzq[j];
        float d[3], elj, ec;
        const float r2 = md_nb_delta_f32(pi.x, pi.y, pi.z, pj.x, pj.y, pj.z, &b, d);
        if (r2 < k.rc2) {
            const float2 c = lj[type[i] * ntypes + type[j]];
            const float fs = md_nb_pair_f32(&k, r2, __fmul_rn(pi.w, pj.w), c.x, c.y, &elj, &ec);
            for (int x = 0; x < 3; x++)
                atomicAdd(&force[(size_t)x * stride + i],
                          md_fixed_from_float(__fmul_rn(fs, d[x]), (float)MD_FORCE_FIXED_SCALE));
        }
    }
}

/* Add the exercise's forces into s->d_force, on the state's stream, from plan p's neighbour list
 * (a MD_NB_GPU_FULL_LIST plan that has evaluated at least once, so its list is built). */
static md_status exercise_nb(const md_cuda_nb_plan *p, md_cuda_state *s) {
    const int block = 128;
    if (p->variant != MD_NB_GPU_FULL_LIST)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "exercise_nb", 0, "p", "must be a MD_NB_GPU_FULL_LIST plan");
    MD_CUDA_LAUNCH(exercise_nb_kernel, (s->n + block - 1) / block, block, 0, s->q.stream, s->d_xyzq, s->d_type,
                   s->d_lj, s->ntypes, p->d_nb, p->d_nbn, s->stride, s->n, s->d_box, p->coeffs, s->d_force);
    return MD_OK;
}
