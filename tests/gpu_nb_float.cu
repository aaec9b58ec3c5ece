/* The float arithmetic md.h shares between its fixed-point rung (MD_NB_CPU_FIXED) and the
 * GPU nonbonded rungs gives the same bits on the device as on the host: md_expf, md_erfcf,
 * md_erff, md_nb_delta_f32, md_nb_pair_f32 (every LJ and Coulomb mode), md_nb_excl_f32,
 * md_nb_pair14_f32 and md_fixed_from_float, on random pairs. This is what lets a GPU rung
 * that follows MD_NB_CPU_FIXED's recipe match it bitwise.
 * Seed used: 606 (pairs). Without a device every test prints SKIP. MD_SANITIZE=1 (set under
 * compute-sanitizer) uses 4096 pairs instead of 262144; outputs are poisoned (NaN) first. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"

enum { NIN = 10, NOUT = 16, NCOEF = 6 };

/* Everything a pair gives, as 16 floats (the md_fixed value's 8 bytes in two of them). */
static __host__ __device__ void pair_outputs(const md_nb_coeffs *co, const md_nb_box_f32 *box, const float *in,
                                             float *out) {
    float d[3], r2, elj = 0, ec = 0, fs = 0, e2 = 0, fs2, l14, c14, fs14, x;
    md_fixed q;
    int k;
    for (k = 0; k < NOUT; k++) out[k] = 0.0f;
    r2 = md_nb_delta_f32(in[0], in[1], in[2], in[3], in[4], in[5], box, d);
    if (r2 < co->rc2 && r2 > 0.0f) fs = md_nb_pair_f32(co, r2, md__fmul(in[6], in[7]), in[8], in[9], &elj, &ec);
    fs2 = md_nb_excl_f32(co, r2, md__fmul(in[6], in[7]), &e2);
    fs14 = r2 > 0.0f ? md_nb_pair14_f32(co, r2, in[6], in[8], in[9], &l14, &c14) : 0.0f;
    if (!(r2 > 0.0f)) l14 = c14 = 0.0f;
    q = md_fixed_from_float(md__fmul(fs, d[0]), (float)MD_FORCE_FIXED_SCALE);
    x = in[0] * 0.3f; /* in [0, 0.75]: erfc, erf and exp of the arguments the kernels see */
    out[0] = r2;
    out[1] = d[0];
    out[2] = d[1];
    out[3] = d[2];
    out[4] = fs;
    out[5] = elj;
    out[6] = ec;
    out[7] = fs2;
    out[8] = e2;
    out[9] = fs14 + l14 + c14;
    out[10] = md_erfcf(4.0f * x);
    out[11] = md_erff(4.0f * x);
    out[12] = md_expf(fmaf(-40.0f, x, 10.0f)); /* explicit fma: a plain a * b + c would be fused on the device only */
    memcpy(out + 13, &q, sizeof q); /* the fixed-point value's bits in outputs 13 and 14 */
    out[15] = md_erfcf(x);
}

__global__ void pairs_kernel(const md_nb_coeffs *co, md_nb_box_f32 box, const float *in, float *out, int n) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) pair_outputs(&co[t % NCOEF], &box, in + (size_t)t * NIN, out + (size_t)t * NOUT);
}

static void shared_pair_arithmetic_device_bits(void) {
    static const md_lj_mode ljm[NCOEF] = {MD_LJ_POTENTIAL_SHIFT, MD_LJ_TRUNCATE, MD_LJ_FORCE_SWITCH,
                                          MD_LJ_POTENTIAL_SHIFT, MD_LJ_FORCE_SWITCH, MD_LJ_NONE};
    static const md_coul_mode cm[NCOEF] = {MD_COUL_EWALD, MD_COUL_CUTOFF, MD_COUL_REACTION_FIELD,
                                           MD_COUL_REACTION_FIELD, MD_COUL_EWALD, MD_COUL_EWALD};
    const double boxd[3] = {2.5, 2.6, 2.7};
    const char *san = getenv("MD_SANITIZE");
    const int n = (san && san[0] == '1') ? 4096 : 262144;
    md_nb_coeffs co[NCOEF], *d_co = NULL;
    md_nb_box_f32 box = md_nb_box_f32_make(boxd);
    md_rng rng;
    float *in = NULL, *out = NULL, *d_in = NULL, *d_out = NULL, host[NOUT];
    long long differ = 0, first = -1;
    int i, k;
    if (!md_cuda_available()) MD_SKIP("no CUDA device: %.400s", md_last_error());
    for (k = 0; k < NCOEF; k++) {
        md_nb_params p;
        memset(&p, 0, sizeof p);
        p.lj = ljm[k];
        p.coul = cm[k];
        p.cutoff = 1.0;
        p.epsilon_rf = k == 3 ? 0.0 : 78.3;
        MD_CHECK_OK(md_nb_coeffs_make(&p, &co[k]));
    }
    in = (float *)malloc(sizeof(float) * NIN * (size_t)n);
    out = (float *)malloc(sizeof(float) * NOUT * (size_t)n);
    MD_CHECK(in && out);
    md_rng_seed(&rng, 606);
    for (i = 0; i < n; i++) {
        float *p = in + (size_t)i * NIN;
        for (k = 0; k < 3; k++) p[k] = (float)(boxd[k] * md_rng_uniform(&rng));
        for (k = 0; k < 3; k++) p[3 + k] = (float)(p[k] + 1.2 * (md_rng_uniform(&rng) - 0.5) + (k == 0 ? 2.5 : 0.0));
        p[6] = (float)(2 * md_rng_uniform(&rng) - 1);
        p[7] = (float)(2 * md_rng_uniform(&rng) - 1);
        p[8] = (float)(4e-3 * md_rng_uniform(&rng));  /* c6 */
        p[9] = (float)(8e-6 * md_rng_uniform(&rng));  /* c12 */
    }
    MD_CHECK(cudaMalloc((void **)&d_co, sizeof co) == cudaSuccess);
    MD_CHECK(cudaMalloc((void **)&d_in, sizeof(float) * NIN * (size_t)n) == cudaSuccess);
    MD_CHECK(cudaMalloc((void **)&d_out, sizeof(float) * NOUT * (size_t)n) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d_co, co, sizeof co, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK(cudaMemcpy(d_in, in, sizeof(float) * NIN * (size_t)n, cudaMemcpyHostToDevice) == cudaSuccess);
    MD_CHECK_OK(md_cuda_poison(d_out, NOUT * (size_t)n, 0));
    pairs_kernel<<<(n + 127) / 128, 128>>>(d_co, box, d_in, d_out, n);
    MD_CHECK(cudaGetLastError() == cudaSuccess);
    MD_CHECK(cudaMemcpy(out, d_out, sizeof(float) * NOUT * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (i = 0; i < n; i++) {
        pair_outputs(&co[i % NCOEF], &box, in + (size_t)i * NIN, host);
        if (memcmp(host, out + (size_t)i * NOUT, sizeof host) != 0) {
            if (first < 0) first = i;
            differ++;
        }
    }
    printf("  %d pairs in %d parameter sets: device and host differ on %lld\n", n, NCOEF, differ);
    if (first >= 0) {
        for (k = 0; k < NOUT; k++) {
            pair_outputs(&co[first % NCOEF], &box, in + (size_t)first * NIN, host);
            printf("    pair %lld output %d: host %.9g device %.9g\n", first, k, host[k], out[(size_t)first * NOUT + k]);
        }
    }
    MD_CHECKF(differ == 0, "%lld of %d pairs differ between the device and the host build", differ, n);
    MD_CHECK(cudaFree(d_co) == cudaSuccess && cudaFree(d_in) == cudaSuccess && cudaFree(d_out) == cudaSuccess);
    free(in);
    free(out);
}

int main(void) {
    MD_RUN(shared_pair_arithmetic_device_bits);
    return md_test_summary();
}
