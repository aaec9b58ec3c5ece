/* exercise.cu - chapter 05: your RDF histogram kernel.
 *
 * The harness (main.cu) gathers the frame's positions with the library
 * (md_cuda_rdf_plan_gather: wrapped into the box, atom index in .w, into p->d_a and p->d_b),
 * then calls exercise_rdf() on the 97,556-atom frame, checks that your counts equal the CPU
 * reference EXACTLY (integer counts) and times it next to the library's rungs.
 *
 * The stub below is the starting rung: one shared-memory histogram per block, one
 * thread per A atom, every B atom read from global memory. It is correct. Make it fast:
 *   1. stage tiles of B in shared memory (blockIdx.y picks the tile),
 *   2. privatize further: one histogram per warp (fewer threads collide on a bin),
 *   3. A = B: skip the tiles that lie wholly below the diagonal,
 * and compare with md__rdf_kernel<2> in md_cuda.cu.h (the solution). Keep
 * md_cuda_rdf_bin as the pair rule: it is what makes the counts equal the CPU's.
 * Counters are 32-bit: the harness checks that no bin of this frame can reach 2^32
 * (see the tutorial for what the library does when one could). Only the public API of
 * md_cuda.cu.h is used here. */
#include "md_cuda.cu.h"

#define EXERCISE_BLOCK 256

__global__ void exercise_rdf_kernel(md_cuda_rdf_geom g, const float4 *a, int na, const float4 *b, int nb, int same,
                                    unsigned int *hist) {
    extern __shared__ unsigned int exercise_hist[];
    const int i = blockIdx.x * EXERCISE_BLOCK + threadIdx.x;
    int k, j;
    for (k = threadIdx.x; k < g.nbins; k += EXERCISE_BLOCK) exercise_hist[k] = 0u;
    __syncthreads();
    if (i < na) {
        const float4 ai = a[i];
        for (j = same ? i + 1 : 0; j < nb; j++) {
            const float4 bj = b[j];
            if (!same && __float_as_int(bj.w) == __float_as_int(ai.w)) continue; /* the same atom */
            k = md_cuda_rdf_bin(&g, ai, bj);
            if (k >= 0) atomicAdd(&exercise_hist[k], 1u);
        }
    }
    __syncthreads();
    for (k = threadIdx.x; k < g.nbins; k += EXERCISE_BLOCK)
        if (exercise_hist[k]) atomicAdd(&hist[k], exercise_hist[k]);
}

/* Count every pair of the plan's gathered frame (geometry g) into d_hist (g->nbins 32-bit
 * counters, zeroed here). Enqueue on stream and return without waiting. The harness gives a
 * histogram that fits in one block's shared memory (48 KB: 12288 bins) without opting in. */
static md_status exercise_rdf(const md_cuda_rdf_plan *p, const md_cuda_rdf_geom *g, unsigned int *d_hist,
                              cudaStream_t stream) {
    const size_t smem = (size_t)g->nbins * sizeof(unsigned int);
    MD_CUDA_TRY(cudaMemsetAsync(d_hist, 0, smem, stream));
    MD_CUDA_LAUNCH(exercise_rdf_kernel, (p->na + EXERCISE_BLOCK - 1) / EXERCISE_BLOCK, EXERCISE_BLOCK, smem, stream,
                   *g, (const float4 *)p->d_a, p->na, (const float4 *)p->d_b, p->nb, p->same, d_hist);
    return MD_OK;
}
