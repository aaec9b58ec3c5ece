/* gpu_split_tu.cu - md_cuda.cu.h's implementation in a file without md.h's.
 *
 * This file defines MD_CUDA_IMPLEMENTATION but not MD_IMPLEMENTATION: md.h's implementation
 * is compiled as C11 on its own (tests/split_tu_md.c) and linked in (the Makefile's rule for
 * build/tests/gpu_split_tu). That it builds at all is the main check: md_cuda.cu.h's
 * implementation uses md.h's public API only, never its private md__ helpers. The tests then
 * call across the two files: errors recorded by md.h's md_set_error, the CPU references of
 * md.h against the GPU plans, and a kernel of this file launched with MD_CUDA_LAUNCH.
 * Seeds: 31 (DCS), 32 (RDF). Without a GPU the device tests print SKIP. */
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* Host only: an argument error of md_cuda.cu.h comes back through md.h's error state (the
 * other file), and the JSON writer needs nothing of md.h's private code. */
static void errors_and_json_across_files(void) {
    md_cuda_dcs_plan p;
    md_cuda_ceilings c;
    char json[1024];
    md_grid g;
    double origin[3] = {0, 0, 0}, h[3] = {0.1, 0.1, 0.1};
    MD_CHECK_OK(md_grid_alloc(&g, 4, 4, 4, origin, h));
    MD_CHECK_ERROR(md_cuda_dcs_plan_create(&p, MD_DCS_CPU_SIMPLE, 10, &g), MD_ERR_INVALID_ARGUMENT,
                   "md_cuda_dcs_plan_create: field variant: cpu_simple is not a GPU rung");
    md_clear_error();
    MD_CHECK(md_last_error()[0] == '\0');
    memset(&c, 0, sizeof c);
    snprintf(c.device, sizeof c.device, "split");
    c.sm_count = 2;
    c.rsqrt_per_s = c.fma_per_s = c.dram_bytes_per_s = c.memcpy_bytes_per_s = NAN;
    c.smem_atomic_per_s = c.launch_s = c.graph_node_s = NAN;
    MD_CHECK(md_cuda_ceilings_json(json, sizeof json, &c) > 0);
    MD_CHECK(strstr(json, "\"device\":\"split\",\"sm_count\":2,\"clock_mhz\":null,") != NULL);
    md_grid_free(&g);
}

__global__ void scale_kernel(float *x, int n, float a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

static md_status scale(float *d, int n, float a, cudaStream_t s) {
    MD_CUDA_LAUNCH(scale_kernel, (n + 127) / 128, 128, 0, s, d, n, a);
    return MD_OK;
}

/* The one-call DCS (gather) against md.h's md_dcs_simple; then this file's own kernel,
 * launched through the registry, scales a plan's map by 2 (exactly, in float). Tolerance
 * 1e-4 as in tests/gpu_dcs.cu. */
static void dcs_across_files(void) {
    md_system sys;
    md_grid ref, out;
    md_cuda_dcs_plan p;
    double box[3] = {2.0, 2.0, 2.0}, origin[3] = {0.05, 0.05, 0.05}, h[3] = {0.1, 0.1, 0.1};
    size_t k;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&sys, 777, box, 1.0, 31));
    MD_CHECK_OK(md_grid_alloc(&ref, 19, 17, 13, origin, h));
    MD_CHECK_OK(md_grid_alloc(&out, 19, 17, 13, origin, h));
    MD_CHECK_OK(md_dcs_simple(sys.xyzq, sys.n, &ref));
    for (k = 0; k < md_grid_count(&out); k++) out.data[k] = NAN;
    MD_CHECK_OK(md_cuda_dcs(MD_DCS_GPU_GATHER, sys.xyzq, sys.n, &out));
    MD_CHECK(md_max_rel_error(out.data, ref.data, md_grid_count(&ref)) <= 1e-4);
    MD_CHECK_OK(md_cuda_dcs_plan_create(&p, MD_DCS_GPU_SHARED, sys.n, &ref));
    MD_CHECK_OK(md_cuda_dcs_plan_upload(&p, sys.xyzq, sys.n));
    MD_CHECK_OK(md_cuda_dcs_plan_enqueue(&p));
    MD_CHECK_OK(scale(p.d_out, (int)p.out_count, 2.0f, p.queue.stream));
    MD_CHECK_OK(md_cuda_dcs_plan_sync(&p, &out));
    for (k = 0; k < md_grid_count(&ref); k++) ref.data[k] *= 2.0f;
    MD_CHECK(md_max_rel_error(out.data, ref.data, md_grid_count(&ref)) <= 1e-4);
    MD_CHECK(md_cuda_kernel_name((const void *)scale_kernel) != NULL &&
             strcmp(md_cuda_kernel_name((const void *)scale_kernel), "scale_kernel") == 0);
    md_cuda_dcs_plan_destroy(&p);
    md_grid_free(&ref);
    md_grid_free(&out);
    md_system_free(&sys);
}

/* Two frames through an RDF plan (enqueue, enqueue, one sync) equal md.h's md_rdf_accumulate of
 * the same frames exactly. */
static void rdf_across_files(void) {
    md_system s;
    md_rdf ref, g;
    md_cuda_rdf_plan p;
    md_float4 *d = NULL;
    double box[3] = {2.9, 3.1, 3.0}, box2[3] = {3.0, 3.0, 3.2};
    int k;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, 900, box, 1.0, 32));
    MD_CHECK_OK(md_rdf_init(&ref, 1.4, 50));
    MD_CHECK_OK(md_rdf_init(&g, 1.4, 50));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, s.n, NULL, s.n, NULL, 0, box));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, s.n, NULL, s.n, NULL, 0, box2));
    MD_CHECK(cudaMalloc((void **)&d, (size_t)s.n * sizeof *d) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d, s.xyzq, (size_t)s.n * sizeof *d, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaDeviceSynchronize() == cudaSuccess); /* landed before the plan's stream reads it */
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, s.n, NULL, s.n, NULL, 0, 50, NULL));
    MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_WARP, &p, &g, d, box));
    MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_WARP, &p, &g, d, box2));
    MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g));
    for (k = 0; k < 50; k++) MD_CHECKF(g.counts[k] == ref.counts[k], "bin %d", k);
    MD_CHECK(g.frames == 2 && g.sum_pair_density == ref.sum_pair_density && g.sum_centers == ref.sum_centers);
    md_cuda_rdf_plan_destroy(&p);
    MD_CHECK(cudaFree(d) == cudaSuccess);
    md_rdf_free(&ref);
    md_rdf_free(&g);
    md_system_free(&s);
}

int main(void) {
    MD_RUN(errors_and_json_across_files);
    MD_RUN(dcs_across_files);
    MD_RUN(rdf_across_files);
    return md_test_summary();
}
