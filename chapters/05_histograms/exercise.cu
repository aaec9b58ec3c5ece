/* exercise.cu - chapter 05: your RDF histogram kernel.
 *
 * The harness (main.cu) gathers the frame's positions with the library (wrapped into the
 * box, atom index in .w: p->d_a, p->d_b), then calls exercise_rdf() on the 97,556-atom
 * frame, checks that your counts equal the CPU reference EXACTLY (integer counts) and
 * times it next to the library's rungs.
 *
 * The stub below is the starting rung: one shared-memory histogram per block, one
 * thread per A atom, every B atom read from global memory. It is correct. Make it fast:
 *   1. stage tiles of B in shared memory (blockIdx.y picks the tile),
 *   2. privatize further: one histogram per warp (fewer threads collide on a bin),
 *   3. A = B: skip the tiles that lie wholly below the diagonal,
 * and compare with md__rdf_kernel<2> in md_cuda.cu.h (the solution). Keep
 * md__rdf_bin_dev as the pair rule: it is what makes the counts equal the CPU's.
 * Counters are 32-bit: the harness checks that no bin of this frame can reach 2^32
 * (see the tutorial for what the library does when one could). */
#ifndef MD_IMPLEMENTATION
#define MD_IMPLEMENTATION
#endif
#ifndef MD_CUDA_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#endif
#include "md_cuda.cu.h"

#define EXERCISE_BLOCK 256

__global__ void exercise_rdf_kernel(md__rdf_kp p) {
    extern __shared__ unsigned int exercise_hist[];
    const int i = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    int k, j;
    for (k = threadIdx.x; k < p.nbins; k += EXERCISE_BLOCK) exercise_hist[k] = 0u;
    __syncthreads();
    if (i < p.a1) {
        const float4 a = p.a[i];
        for (j = p.same ? i + 1 : 0; j < p.nb; j++) {
            const float4 b = p.b[j];
            if (!p.same && __float_as_int(b.w) == __float_as_int(a.w)) continue;
            k = md__rdf_bin_dev(p, a, b);
            if (k >= 0) atomicAdd(&exercise_hist[k], 1u);
        }
    }
    __syncthreads();
    for (k = threadIdx.x; k < p.nbins; k += EXERCISE_BLOCK)
        if (exercise_hist[k]) atomicAdd(&p.hist[k], exercise_hist[k]);
}

/* Count every pair of the plan's gathered frame into d_hist (nbins 32-bit counters,
 * zeroed here). The geometry comes from the box and the accumulator as in md.h. */
static md_status exercise_rdf(const md_cuda_rdf_plan *plan, const md_rdf *r, const double box[3],
                              unsigned int *d_hist, cudaStream_t stream) {
    md__rdf_kp p;
    int d;
    size_t smem = (size_t)r->nbins * sizeof(unsigned int);
    memset(&p, 0, sizeof p);
    for (d = 0; d < 3; d++) {
        p.L[d] = (float)box[d];
        p.iL[d] = (float)(1.0 / box[d]);
    }
    p.rmax2 = (float)(r->rmax * r->rmax);
    p.inv_w = (float)((double)r->nbins / r->rmax);
    p.nbins = p.bin_n = r->nbins;
    p.a = (const float4 *)plan->d_a;
    p.b = (const float4 *)plan->d_b;
    p.hist = d_hist;
    p.a1 = plan->na;
    p.nb = plan->nb;
    p.same = plan->same;
    if (smem > 48 * 1024)
        MD_CUDA_TRY(cudaFuncSetAttribute(exercise_rdf_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    MD_CUDA_TRY(cudaMemsetAsync(d_hist, 0, (size_t)r->nbins * sizeof(unsigned int), stream));
    exercise_rdf_kernel<<<(plan->na + EXERCISE_BLOCK - 1) / EXERCISE_BLOCK, EXERCISE_BLOCK, smem, stream>>>(p);
    MD_CUDA_TRY_LAUNCH("exercise_rdf_kernel");
    return MD_OK;
}
