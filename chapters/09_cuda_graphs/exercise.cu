/* exercise.cu - chapter 09: add a kernel to the graph comparator registry.
 *
 * exercise_rescale_kernel is a velocity-rescaling thermostat: every step it multiplies each
 * velocity by lambda, a factor the host computes from the last temperature it read, so lambda
 * is a new kernel argument at every step. The harness (main.cu) captures the kernel's enqueue
 * once per step, hands each capture to an md_cuda_graph_cache (policy COMPARE) and launches
 * it, for 200 steps, then checks the velocities bitwise against a host reference and prints
 * how many captures were instantiated anew and how many the comparison turned into a
 * cudaGraphExecUpdate.
 *
 * The stub below registers the kernel with every argument MD_CUDA_PARAM_MUST_MATCH: safe (any
 * difference instantiates a new graph) and, as the harness shows, an instantiation every step.
 *   1. Register the rules the kernel really needs: which argument may differ between steps
 *      without a new instantiation, which must not (ask: if it changed, would the launch shape
 *      or the buffers the graph was built for still be right?). Run the chapter: instantiations
 *      should drop to 1 and the time per step with them; the check must still pass.
 *   2. Change n between two captures (the harness does it once, on purpose, at step 100): your
 *      rules must make that capture instantiate anew. Why is that the right answer even though
 *      cudaGraphExecUpdate would accept it?
 *   3. Add a second kernel, exercise_rescale_energy_kernel, that also sums the kinetic energy,
 *      and launch it every tenth step instead: which md_cuda_graph_family call lets the
 *      comparison update the node rather than instantiate a new graph?
 * Registration makes no CUDA call; the rule letters are checked against cudaFuncGetParamInfo
 * when the comparison first looks the kernel up (a wrong count is an error naming the kernel).
 * The solution's pattern is the header's own registrations, e.g. md_cuda_graph_loop's kernels
 * (MD_CUDA_GRAPH_RULES beside MD_CUDA_LAUNCH in md_cuda.cu.h). Only the public API is used. */
#include "md_cuda.cu.h"

/* v *= lambda for the n velocities (x, y, z; w holds 1/m and is kept). */
__global__ void exercise_rescale_kernel(float4 *vel, int n, float lambda) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = vel[i];
        v.x = __fmul_rn(v.x, lambda);
        v.y = __fmul_rn(v.y, lambda);
        v.z = __fmul_rn(v.z, lambda);
        vel[i] = v;
    }
}

/* Register exercise_rescale_kernel's comparator rules: one letter per parameter (vel, n,
 * lambda): M must match, D may differ, I ignore; then the rule of the launch shape. */
static md_status exercise_register(void) {
    return md_cuda_graph_register((const void *)exercise_rescale_kernel, "MMM", MD_CUDA_PARAM_MUST_MATCH);
}

/* One step of the thermostat: what the harness captures. */
static md_status exercise_enqueue(float4 *d_vel, int n, float lambda, cudaStream_t stream) {
    MD_CUDA_LAUNCH(exercise_rescale_kernel, (n + 255) / 256, 256, 0, stream, d_vel, n, lambda);
    return MD_OK;
}
