/* Tests of md_cuda.cu.h's pme section against md.h's CPU PME (double): every stage on its own
 * (spread, forward FFT, solve, backward FFT, gather) for spline orders 4, 5 and 6 and both
 * spread rungs; the two spread rungs bitwise equal (the same fixed-point terms); the whole
 * evaluation repeatable to the bit; forces, energy and virial ADDED into the caller's SoA
 * fixed-point buffers (pre-filled values and the padding beyond n survive); a captured CUDA graph
 * replayed after the box and the positions changed in device memory; a non-finite atom reported
 * by the flags; bad input. Seeds used: 41 (salt water), 43 (random charges), 7 (water).
 *
 * Tolerances (GPU float against CPU double, both from the same float coordinates): grids and
 * forces 1e-4 of their largest magnitude (float B-spline weights and cuFFT in float carry
 * ~1e-6 relative error; 1e-4 leaves margin without hiding a wrong index, which is O(1)); energy
 * 1e-5 relative (fixed-point terms of 2^-24 kJ/mol); virial 1e-4 of its largest entry.
 *
 * Without a GPU the device tests print SKIP with md_last_error() as the reason; the host check
 * of md_cuda_pme_bspline runs anyway. MD_SANITIZE=1 (compute-sanitizer) shrinks the systems and
 * grids and drops the benchmark-size case. Device work without it: well under 1 s. */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include <algorithm>
#include <utility>
#include <vector>
#include "md_test.h"

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

/* Largest |a - b| over the largest |b| (float a, double b); NaN in a gives infinity. */
static double grid_err(const float *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN propagates */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

static double vec_err(const double *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= num)) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* Salt water (290 TIP3P molecules + 5 NaCl pairs, 880 atoms) with three atoms moved out of the
 * box by whole edges (the kernels must wrap), or 100 molecules under the sanitizer. */
static md_status salt_system(md_system *s) {
    md_topology t;
    md_lj_table lj;
    md_salt_water_desc d;
    md_status st;
    memset(&d, 0, sizeof d);
    d.water.molecules = sanitize ? 100 : 300;
    d.water.seed = 41;
    d.pairs = sanitize ? 2 : 5;
    if ((st = md_build_salt_water(s, &t, &lj, &d)) != MD_OK) return st;
    s->xyzq[1].x -= (float)s->box[0];
    s->xyzq[5].y += (float)(2.0 * s->box[1]);
    s->xyzq[9].z += (float)s->box[2];
    md_topology_free(&t);
    md_lj_table_free(&lj);
    return MD_OK;
}

/* The host path of md_cuda_pme_bspline (the kernels' weights) against md.h's md_pme_bspline,
 * written independently (explicit recursion in double): 3e-7 absolute for weights and
 * derivatives (float rounding of a dozen operations on values below 1). Needs no GPU. */
static void bspline_matches_md_h(void) {
    int o, k, j;
    for (o = 4; o <= 6; o++)
        for (k = 0; k < 200; k++) {
            float dr = (float)k / 200.0f, w[6], dw[6];
            double rw[6], rdw[6];
            md_pme_bspline(3.0 + dr, o, rw, rdw);
            if (o == 4) md_cuda_pme_bspline<4>(dr, w, dw);
            else if (o == 5) md_cuda_pme_bspline<5>(dr, w, dw);
            else md_cuda_pme_bspline<6>(dr, w, dw);
            for (j = 0; j < o; j++) {
                MD_CHECKF(fabs(w[j] - rw[j]) < 3e-7, "order %d dr %g j %d: w %.9g, md.h %.9g", o, dr, j, w[j], rw[j]);
                MD_CHECKF(fabs(dw[j] - rdw[j]) < 3e-7, "order %d dr %g j %d: dw %.9g, md.h %.9g", o, dr, j, dw[j], rdw[j]);
            }
        }
}

/* Every stage against the CPU plan's same stage, fed the same input (the GPU's own output of the
 * previous stage; the CPU's stages run in double on the same float coordinates). Device grids
 * are poisoned (NaN) before each stage, so an element a stage fails to write fails the check. */
static void stages_match_cpu(void) {
    md_system s;
    int o, sp;
    NEED_GPU();
    MD_CHECK_OK(salt_system(&s));
    for (o = 4; o <= 6; o++)
        for (sp = 0; sp < MD_CUDA_PME_SPREAD_COUNT; sp++) {
            md_pme_params pp;
            md_cuda_pme_plan g;
            md_pme_plan c;
            md_energy ec, eg;
            size_t npts, ncp;
            float *hr = NULL, *hc = NULL;
            double *fc, *fg;
            int i;
            memset(&pp, 0, sizeof pp);
            pp.order = o;
            pp.cutoff = 0.9;
            pp.grid[0] = 20, pp.grid[1] = 18, pp.grid[2] = 27; /* odd last axis; not multiples of 8 */
            if (sanitize) pp.grid[0] = 12, pp.grid[1] = 10, pp.grid[2] = 9;
            MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, NULL, s.n));
            MD_CHECK_OK(md_pme_plan_create(&c, &g.params, NULL, s.n));
            npts = (size_t)pp.grid[0] * pp.grid[1] * pp.grid[2];
            ncp = (size_t)pp.grid[0] * pp.grid[1] * g.nh;
            hr = (float *)malloc(npts * sizeof(float));
            hc = (float *)malloc(2 * ncp * sizeof(float));
            fc = (double *)calloc(3 * (size_t)s.n, sizeof(double));
            fg = (double *)calloc(3 * (size_t)s.n, sizeof(double));
            MD_CHECK(hr && hc && fc && fg);
            MD_CHECK_OK(md_cuda_pme_plan_set_spread(&g, (md_cuda_pme_spread)sp));
            MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, s.n, s.box));
            /* spread */
            MD_CHECK_OK(md_cuda_poison(g.d_real, npts, g.queue.stream));
            MD_CHECK_OK(md_cuda_pme_enqueue_spread(&g, (md_cuda_pme_spread)sp, g.d_xyzq, s.n, g.d_box));
            MD_CHECK_OK(md_pme_spread(&c, s.xyzq, s.n, s.box));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, hr));
            MD_CHECKF(grid_err(hr, c.grid, npts) < 1e-4, "order %d %s: spread error %.3g", o,
                      md_cuda_pme_spread_name((md_cuda_pme_spread)sp), grid_err(hr, c.grid, npts));
            for (i = 0; i < (int)npts; i++) c.grid[i] = hr[i]; /* the CPU continues from the GPU's grid */
            /* forward */
            MD_CHECK_OK(md_cuda_poison((float *)g.d_complex, 2 * ncp, g.queue.stream));
            MD_CHECK_OK(md_cuda_pme_enqueue_forward(&g));
            MD_CHECK_OK(md_pme_forward(&c));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_COMPLEX, hc));
            MD_CHECKF(grid_err(hc, c.cgrid, 2 * ncp) < 1e-4, "order %d: forward FFT error %.3g", o,
                      grid_err(hc, c.cgrid, 2 * ncp));
            { /* the transform as the plan's captured graph (above) and as a direct cuFFT call: the same bits */
                float *hd = (float *)malloc(2 * ncp * sizeof(float));
                MD_CHECK(hd != NULL);
                MD_CHECK((g.fft_exec[0] != NULL) == (MD_CUDA_PME_FFT_GRAPH != 0));
                MD_CHECK_OK(md_cuda_poison((float *)g.d_complex, 2 * ncp, g.queue.stream));
                MD_CHECK(cufftExecR2C(g.fft_forward, (cufftReal *)g.d_real, (cufftComplex *)g.d_complex) == CUFFT_SUCCESS);
                MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_COMPLEX, hd));
                MD_CHECKF(memcmp(hd, hc, 2 * ncp * sizeof(float)) == 0, "order %d: forward graph and cuFFT call differ", o);
                free(hd);
            }
            for (i = 0; i < (int)(2 * ncp); i++) c.cgrid[i] = hc[i];
            /* solve */
            MD_CHECK(cudaMemsetAsync(g.d_out, 0, (3 * (size_t)g.capacity + 10) * sizeof(md_fixed), g.queue.stream) ==
                     cudaSuccess);
            MD_CHECK_OK(md_cuda_pme_enqueue_solve(&g, g.d_box, g.d_out + 3 * (size_t)g.capacity,
                                                  g.d_out + 3 * (size_t)g.capacity + 1));
            MD_CHECK_OK(md_pme_solve(&c, s.box));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_COMPLEX, hc));
            MD_CHECKF(grid_err(hc, c.cgrid, 2 * ncp) < 1e-4, "order %d: solve error %.3g", o,
                      grid_err(hc, c.cgrid, 2 * ncp));
            { /* forces only (no energy pointer): the same grid bits, nothing summed; a virial
               * without an energy is refused */
                float *hn = (float *)malloc(2 * ncp * sizeof(float));
                MD_CHECK(hn != NULL);
                MD_CHECK_OK(md_cuda_poison((float *)g.d_complex, 2 * ncp, g.queue.stream));
                MD_CHECK_OK(md_cuda_pme_enqueue_forward(&g)); /* out of place: d_real still holds the spread */
                MD_CHECK_OK(md_cuda_pme_enqueue_solve(&g, g.d_box, NULL, NULL));
                MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_COMPLEX, hn));
                MD_CHECKF(memcmp(hn, hc, 2 * ncp * sizeof(float)) == 0, "order %d: forces-only solve differs", o);
                MD_CHECK(md_cuda_pme_enqueue_solve(&g, g.d_box, NULL, g.d_out) == MD_ERR_INVALID_ARGUMENT);
                free(hn); /* d_complex holds the solved grid again (hn == hc): the stages below continue from it */
            }
            for (i = 0; i < (int)(2 * ncp); i++) c.cgrid[i] = hc[i];
            /* backward */
            MD_CHECK_OK(md_cuda_poison(g.d_real, npts, g.queue.stream));
            MD_CHECK_OK(md_cuda_pme_enqueue_backward(&g));
            MD_CHECK_OK(md_pme_backward(&c));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, hr));
            MD_CHECKF(grid_err(hr, c.grid, npts) < 1e-4, "order %d: backward FFT error %.3g", o,
                      grid_err(hr, c.grid, npts));
            { /* backward as a direct cuFFT call (C2R overwrites its input, so from a copy of the solved grid) */
                float *hd = (float *)malloc(npts * sizeof(float));
                MD_CHECK(hd != NULL);
                MD_CHECK(cudaMemcpyAsync(g.d_complex, hc, 2 * ncp * sizeof(float), cudaMemcpyHostToDevice,
                                         g.queue.stream) == cudaSuccess);
                MD_CHECK_OK(md_cuda_poison(g.d_real, npts, g.queue.stream));
                MD_CHECK(cufftExecC2R(g.fft_backward, (cufftComplex *)g.d_complex, (cufftReal *)g.d_real) == CUFFT_SUCCESS);
                MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, hd));
                MD_CHECKF(memcmp(hd, hr, npts * sizeof(float)) == 0, "order %d: backward graph and cuFFT call differ", o);
                free(hd);
            }
            for (i = 0; i < (int)npts; i++) c.grid[i] = hr[i];
            /* gather; then the energy and virial of the solve, the self energy */
            MD_CHECK_OK(md_cuda_pme_enqueue_gather(&g, g.d_xyzq, s.n, g.d_box, g.d_out, g.capacity));
            MD_CHECK_OK(md_pme_gather(&c, s.xyzq, s.n, s.box, fc));
            memset(&eg, 0, sizeof eg);
            MD_CHECK_OK(md_cuda_pme_plan_sync(&g, fg, &eg));
            MD_CHECKF(vec_err(fg, fc, 3 * (size_t)s.n) < 1e-4, "order %d: gather error %.3g", o,
                      vec_err(fg, fc, 3 * (size_t)s.n));
            memset(&ec, 0, sizeof ec);
            ec.coul_recip = c.energy;
            MD_CHECK_CLOSE(eg.coul_recip, c.energy, 1e-5, 1e-3);
            MD_CHECK_CLOSE(eg.coul_self, -MD_COULOMB * c.params.alpha / sqrt(3.14159265358979323846) * c.charge2, 1e-6, 0);
            MD_CHECKF(vec_err(eg.virial, c.virial, 9) < 1e-4, "order %d: virial error %.3g", o, vec_err(eg.virial, c.virial, 9));
            free(hr), free(hc), free(fc), free(fg);
            md_pme_plan_free(&c);
            md_cuda_pme_plan_destroy(&g);
        }
    md_system_free(&s);
}

/* Whole evaluations: GPU (both rungs) against md_pme_compute on the same system, including a
 * charged one (its neutralising background), and every spread rung gives the atomic rung's bitwise equal
 * grids for grids that are tiny (the order itself: every brick wraps onto itself), odd and large;
 * two runs give bitwise equal outputs. */
static void whole_evaluation(void) {
    md_system s;
    md_cuda_pme_plan g;
    md_pme_plan c;
    md_pme_params pp;
    md_energy ec, eg, eg2;
    double *fc, *fg, *fg2;
    float *ha, *hb;
    static const int grids[3][3] = {{6, 6, 6}, {15, 21, 17}, {40, 32, 36}};
    int k, o;
    NEED_GPU();
    MD_CHECK_OK(salt_system(&s));
    s.xyzq[0].w += 1.5f; /* net charge */
    fc = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    fg = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    fg2 = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    ha = (float *)malloc(40 * 32 * 36 * sizeof(float));
    hb = (float *)malloc(40 * 32 * 36 * sizeof(float));
    MD_CHECK(fc && fg && fg2 && ha && hb);
    for (k = 0; k < (sanitize ? 2 : 3); k++)
        for (o = 4; o <= 6; o++) {
            size_t npts = (size_t)grids[k][0] * grids[k][1] * grids[k][2];
            memset(&pp, 0, sizeof pp);
            pp.order = o;
            memcpy(pp.grid, grids[k], sizeof pp.grid);
            MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, NULL, s.n));
            MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, s.n, s.box));
            MD_CHECK_OK(md_cuda_pme_enqueue_spread(&g, MD_CUDA_PME_SPREAD_ATOMIC, g.d_xyzq, s.n, g.d_box));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, ha));
            for (int sp = MD_CUDA_PME_SPREAD_GATHER; sp < MD_CUDA_PME_SPREAD_COUNT; sp++) {
                MD_CHECK_OK(md_cuda_poison(g.d_real, npts, g.queue.stream));
                MD_CHECK_OK(md_cuda_pme_enqueue_spread(&g, (md_cuda_pme_spread)sp, g.d_xyzq, s.n, g.d_box));
                MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, hb));
                MD_CHECKF(memcmp(ha, hb, npts * sizeof(float)) == 0, "grid %d %d %d order %d: %s differs from spread_atomic",
                          grids[k][0], grids[k][1], grids[k][2], o, md_cuda_pme_spread_name((md_cuda_pme_spread)sp));
            }
            if (k == 1) {
                int sp;
                MD_CHECK_OK(md_pme_plan_create(&c, &g.params, NULL, s.n));
                memset(fc, 0, 3 * (size_t)s.n * sizeof(double));
                memset(&ec, 0, sizeof ec);
                MD_CHECK_OK(md_pme_compute(&c, s.xyzq, s.n, s.box, fc, &ec));
                for (sp = 0; sp < 2; sp++) {
                    MD_CHECK_OK(md_cuda_pme_plan_set_spread(&g, (md_cuda_pme_spread)sp));
                    memset(fg, 0, 3 * (size_t)s.n * sizeof(double));
                    memset(fg2, 0, 3 * (size_t)s.n * sizeof(double));
                    memset(&eg, 0, sizeof eg);
                    memset(&eg2, 0, sizeof eg2);
                    MD_CHECK_OK(md_cuda_pme_plan_enqueue_own(&g));
                    MD_CHECK_OK(md_cuda_pme_plan_sync(&g, fg, &eg));
                    MD_CHECK_OK(md_cuda_pme_plan_enqueue_own(&g));
                    MD_CHECK_OK(md_cuda_pme_plan_sync(&g, fg2, &eg2));
                    MD_CHECK(memcmp(fg, fg2, 3 * (size_t)s.n * sizeof(double)) == 0);
                    MD_CHECK(memcmp(&eg, &eg2, sizeof eg) == 0);
                    MD_CHECKF(vec_err(fg, fc, 3 * (size_t)s.n) < 1e-4, "order %d %s: forces %.3g", o,
                              md_cuda_pme_spread_name((md_cuda_pme_spread)sp), vec_err(fg, fc, 3 * (size_t)s.n));
                    MD_CHECK_CLOSE(eg.coul_recip, ec.coul_recip, 1e-5, 1e-3);
                    MD_CHECK_CLOSE(eg.coul_self, ec.coul_self, 1e-6, 0);
                    MD_CHECKF(vec_err(eg.virial, ec.virial, 9) < 1e-4, "virial %.3g", vec_err(eg.virial, ec.virial, 9));
                }
                md_pme_plan_free(&c);
            }
            md_cuda_pme_plan_destroy(&g);
        }
    free(fc), free(fg), free(fg2), free(ha), free(hb);
    md_system_free(&s);
}

/* The windowed spread (MD_CUDA_PME_SPREAD_WINDOW) against the atomic rung, bitwise, where its
 * windows do the work: the salt box's atoms sorted by 0.5 nm cells (consecutive atoms close
 * together, as md_cuda_sim's sorted atoms are: windows filled and replaced), a crowd of 200
 * atoms within 0.05 nm with charges of either sign up to 90 e (every term of a batch on the
 * same few points: the 32-bit halves' sums and their carries, negative terms), and the same
 * crowd with six charges of 2^14 e and more in its second batch (that batch goes to the global
 * grid term by term, between batches that add into windows). */
static void window_spread_sorted_and_crowded(void) {
    md_system s;
    int o, k;
    NEED_GPU();
    MD_CHECK_OK(salt_system(&s));
    std::vector<md_float4> sorted(s.xyzq, s.xyzq + s.n), crowd(200), heavy;
    {
        std::vector<std::pair<long long, int> > key((size_t)s.n);
        for (int i = 0; i < s.n; i++) {
            long long c[3];
            const float x[3] = {s.xyzq[i].x, s.xyzq[i].y, s.xyzq[i].z};
            for (int a = 0; a < 3; a++) {
                const double f = x[a] / s.box[a] - floor(x[a] / s.box[a]);
                c[a] = (long long)(f * s.box[a] / 0.5);
            }
            key[(size_t)i] = std::make_pair((c[0] * 64 + c[1]) * 64 + c[2], i);
        }
        std::sort(key.begin(), key.end());
        for (int i = 0; i < s.n; i++) sorted[(size_t)i] = s.xyzq[key[(size_t)i].second];
    }
    {
        uint64_t r = 77;
        for (k = 0; k < 200; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            crowd[(size_t)k].x = (float)(1.0 + 0.05 * (double)((r >> 11) & 1023) / 1024.0);
            crowd[(size_t)k].y = (float)(1.2 + 0.05 * (double)((r >> 21) & 1023) / 1024.0);
            crowd[(size_t)k].z = (float)(0.9 + 0.05 * (double)((r >> 31) & 1023) / 1024.0);
            crowd[(size_t)k].w = (float)(((double)((r >> 41) & 4095) / 4095.0 - 0.5) * 180.0);
        }
        heavy = crowd;
        for (k = 40; k < 46; k++) heavy[(size_t)k].w = (k % 2 ? -1.0f : 1.0f) * (16384.0f + 1000.0f * (float)(k - 40));
    }
    for (k = 0; k < 3; k++)
        for (o = 4; o <= 6; o++) {
            static const int grids[3][3] = {{40, 32, 36}, {21, 25, 19}, {21, 25, 19}};
            static const char *const names[3] = {"sorted", "crowded", "heavy"};
            const md_float4 *x = k == 0 ? sorted.data() : (k == 1 ? crowd.data() : heavy.data());
            const int n = k == 0 ? s.n : 200;
            const size_t npts = (size_t)grids[k][0] * grids[k][1] * grids[k][2];
            std::vector<float> ha(npts), hb(npts);
            md_pme_params pp;
            md_cuda_pme_plan g;
            memset(&pp, 0, sizeof pp);
            pp.order = o;
            memcpy(pp.grid, grids[k], sizeof pp.grid);
            MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, NULL, n));
            MD_CHECK_OK(md_cuda_pme_plan_upload(&g, x, n, s.box));
            MD_CHECK_OK(md_cuda_pme_enqueue_spread(&g, MD_CUDA_PME_SPREAD_ATOMIC, g.d_xyzq, n, g.d_box));
            MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, ha.data()));
            for (int wa = 32; wa <= 256; wa *= 2) { /* atoms per block: one batch, two, ..., eight */
                MD_CHECK_OK(md_cuda_pme_plan_set_window_atoms(&g, wa));
                MD_CHECK_OK(md_cuda_poison(g.d_real, npts, g.queue.stream));
                MD_CHECK_OK(md_cuda_pme_enqueue_spread(&g, MD_CUDA_PME_SPREAD_WINDOW, g.d_xyzq, n, g.d_box));
                MD_CHECK_OK(md_cuda_pme_plan_read(&g, MD_CUDA_PME_REAL, hb.data()));
                MD_CHECKF(memcmp(ha.data(), hb.data(), npts * sizeof(float)) == 0,
                          "%s atoms, order %d, %d atoms per block: spread_window differs", names[k], o, wa);
            }
            {
                double q = 0.0, sum = 0.0;
                for (int i = 0; i < n; i++) q += x[i].w;
                for (size_t i = 0; i < npts; i++) sum += hb[i];
                MD_CHECKF(fabs(sum - q) < 1e-3 * (1.0 + fabs(q)), "%s atoms, order %d: grid sum %.6g, charge %.6g",
                          names[k], o, sum, q);
            }
            md_cuda_pme_plan_destroy(&g);
        }
    md_system_free(&s);
}

/* md_cuda_pme_plan_enqueue ADDS into the caller's SoA buffers: forces pre-filled with random
 * fixed-point values come back as those values plus exactly what a zeroed buffer receives; the
 * padding between n and stride is untouched; energy and virial likewise. Then the same enqueue,
 * captured into a CUDA graph, is replayed after the box (in device memory) and the positions
 * changed: it gives what a direct enqueue gives for the new box. */
static void adds_and_replays(void) {
    md_system s;
    md_cuda_pme_plan g;
    md_pme_params pp;
    md_rng rng;
    md_fixed *d_f = NULL, *h0, *h1, *hp;
    double box2[3];
    md_fixed e_old;
    int n, stride, i;
    size_t nf;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    NEED_GPU();
    MD_CHECK_OK(salt_system(&s));
    n = s.n;
    stride = n + 37;
    nf = 3 * (size_t)stride + 10;
    memset(&pp, 0, sizeof pp);
    MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, s.box, n));
    h0 = (md_fixed *)malloc(nf * sizeof(md_fixed));
    h1 = (md_fixed *)malloc(nf * sizeof(md_fixed));
    hp = (md_fixed *)malloc(nf * sizeof(md_fixed));
    MD_CHECK(h0 && h1 && hp && cudaMalloc((void **)&d_f, nf * sizeof(md_fixed)) == cudaSuccess);
    MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, n, s.box));
    /* into zeros (every copy and memset on the plan's stream: it does not wait for the legacy one) */
    MD_CHECK(cudaMemsetAsync(d_f, 0, nf * sizeof(md_fixed), g.queue.stream) == cudaSuccess);
    MD_CHECK_OK(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, d_f, stride, d_f + 3 * stride, d_f + 3 * stride + 1));
    MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "zeros", NULL));
    MD_CHECK(cudaMemcpy(h0, d_f, nf * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    /* into random values */
    md_rng_seed(&rng, 43);
    for (i = 0; i < (int)nf; i++) hp[i] = md_rng_next(&rng) >> 8;
    MD_CHECK(cudaMemcpyAsync(d_f, hp, nf * sizeof(md_fixed), cudaMemcpyHostToDevice, g.queue.stream) == cudaSuccess);
    MD_CHECK_OK(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, d_f, stride, d_f + 3 * stride, d_f + 3 * stride + 1));
    MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "adds", NULL));
    MD_CHECK(cudaMemcpy(h1, d_f, nf * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    for (i = 0; i < (int)nf; i++) {
        int pad = i < 3 * stride && i % stride >= n;
        MD_CHECKF(h1[i] - hp[i] == (pad ? 0ull : h0[i]), "element %d (padding %d): added %llu, alone %llu", i, pad,
                  h1[i] - hp[i], h0[i]);
    }
    MD_CHECK(h0[3 * stride] != 0ull && h0[0] != 0ull);
    e_old = h0[3 * stride];
    /* capture, then change the box and the positions in device memory, replay */
    MD_CHECK(cudaMemsetAsync(d_f, 0, nf * sizeof(md_fixed), g.queue.stream) == cudaSuccess);
    MD_CHECK(cudaStreamBeginCapture(g.queue.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    {
        md_status cs = md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, d_f, stride, d_f + 3 * stride,
                                                d_f + 3 * stride + 1);
        cudaError_t ce = cudaStreamEndCapture(g.queue.stream, &graph);
        MD_CHECKF(cs == MD_OK, "enqueue under capture: %s", md_last_error());
        MD_CHECK(ce == cudaSuccess && graph);
    }
    MD_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (i = 0; i < 3; i++) box2[i] = s.box[i] * (1.0 + 0.01 * (i + 1));
    for (i = 0; i < n; i++) s.xyzq[i].x += 0.05f;
    MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, n, box2));
    MD_CHECK(cudaGraphLaunch(exec, g.queue.stream) == cudaSuccess);
    MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "replay", NULL));
    MD_CHECK(cudaMemcpy(h1, d_f, nf * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    MD_CHECK(cudaMemsetAsync(d_f, 0, nf * sizeof(md_fixed), g.queue.stream) == cudaSuccess);
    MD_CHECK_OK(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, d_f, stride, d_f + 3 * stride, d_f + 3 * stride + 1));
    MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "direct", NULL));
    MD_CHECK(cudaMemcpy(h0, d_f, nf * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    MD_CHECK(memcmp(h0, h1, nf * sizeof(md_fixed)) == 0);
    MD_CHECK(h0[3 * stride] != e_old); /* the new box really changed the energy */
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    (void)cudaFree(d_f);
    free(h0), free(h1), free(hp);
    md_cuda_pme_plan_destroy(&g);
    md_system_free(&s);
}

/* MD_CUDA_PME_GRAPH: md_cuda_pme_plan_enqueue keeps one graph with and one without energies,
 * captured with the call's arguments; a call with other arguments captures again. Into a second
 * buffer with another stride, then back into the first, then without energies: every call gives
 * the forces (and energy) of the stages run one by one (the plan's stream captured by the caller,
 * which makes md_cuda_pme_plan_enqueue enqueue the stages), bit for bit. Then the windowed spread
 * with 64 and with 128 atoms per block: the plan's settings are part of the key too (the same
 * grid, so the same bits). */
static void graph_follows_arguments(void) {
    md_system s;
    md_cuda_pme_plan g;
    md_pme_params pp;
    md_fixed *d_a = NULL, *d_b = NULL, *ref, *ha, *hb;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int n, sa, sb, i, d, k;
    size_t na, nb;
    NEED_GPU();
    MD_CHECK_OK(salt_system(&s));
    n = s.n;
    sa = n;
    sb = n + 11;
    na = 3 * (size_t)sa + 10;
    nb = 3 * (size_t)sb + 10;
    memset(&pp, 0, sizeof pp);
    MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, s.box, n));
    ref = (md_fixed *)malloc(na * sizeof(md_fixed));
    ha = (md_fixed *)malloc(na * sizeof(md_fixed));
    hb = (md_fixed *)malloc(nb * sizeof(md_fixed));
    MD_CHECK(ref && ha && hb && cudaMalloc((void **)&d_a, na * sizeof(md_fixed)) == cudaSuccess &&
             cudaMalloc((void **)&d_b, nb * sizeof(md_fixed)) == cudaSuccess);
    MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, n, s.box));
    /* the reference: the stages, captured by the caller and launched */
    MD_CHECK(cudaMemsetAsync(d_a, 0, na * sizeof(md_fixed), g.queue.stream) == cudaSuccess);
    MD_CHECK(cudaStreamBeginCapture(g.queue.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    {
        md_status cs = md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, d_a, sa, d_a + 3 * sa, NULL);
        cudaError_t ce = cudaStreamEndCapture(g.queue.stream, &graph);
        MD_CHECKF(cs == MD_OK, "enqueue under capture: %s", md_last_error());
        MD_CHECK(ce == cudaSuccess && graph);
    }
    MD_CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    MD_CHECK(cudaGraphLaunch(exec, g.queue.stream) == cudaSuccess);
    MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "stages", NULL));
    MD_CHECK(cudaMemcpy(ref, d_a, na * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
    MD_CHECK(ref[3 * sa] != 0ull);
    /* A, B (another pointer and stride), A again, A without energies, A windowed 64 and 128 */
    for (k = 0; k < 6; k++) {
        const int into_b = k == 1, energy = k != 3, st = into_b ? sb : sa;
        md_fixed *out = into_b ? d_b : d_a, *h = into_b ? hb : ha;
        const size_t nf = into_b ? nb : na;
        if (k >= 4) {
            MD_CHECK_OK(md_cuda_pme_plan_set_spread(&g, MD_CUDA_PME_SPREAD_WINDOW));
            MD_CHECK_OK(md_cuda_pme_plan_set_window_atoms(&g, k == 4 ? 64 : 128));
        }
        MD_CHECK(cudaMemsetAsync(out, 0, nf * sizeof(md_fixed), g.queue.stream) == cudaSuccess);
        MD_CHECK_OK(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, n, g.d_box, out, st, energy ? out + 3 * st : NULL, NULL));
        MD_CHECK_OK(md_cuda_queue_sync(&g.queue, "graph", NULL));
        MD_CHECK(cudaMemcpy(h, out, nf * sizeof(md_fixed), cudaMemcpyDeviceToHost) == cudaSuccess);
        for (i = 0; i < n; i++)
            for (d = 0; d < 3; d++)
                MD_CHECKF(h[(size_t)d * st + i] == ref[(size_t)d * sa + i], "call %d atom %d axis %d: %llu, stages %llu", k,
                          i, d, h[(size_t)d * st + i], ref[(size_t)d * sa + i]);
        MD_CHECKF(h[3 * (size_t)st] == (energy ? ref[3 * sa] : 0ull), "call %d: energy %llu", k, h[3 * (size_t)st]);
#if MD_CUDA_PME_GRAPH && MD_CUDA_PME_FFT_GRAPH
        MD_CHECKF(g.graph[energy] != NULL && g.graph_key[energy].force == (const void *)out && g.graph_key[energy].stride == st &&
                      g.graph_key[energy].spread == (long long)g.spread &&
                      g.graph_key[energy].window_atoms == g.window_atoms,
                  "call %d: the kept graph is not the one of this call's arguments", k);
#endif
    }
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    (void)cudaFree(d_a);
    (void)cudaFree(d_b);
    free(ref), free(ha), free(hb);
    md_cuda_pme_plan_destroy(&g);
    md_system_free(&s);
}

/* The benchmark-size box (23,568 atoms, OpenMM's 56^3 grid at 5e-4 and 0.9 nm, order 5): GPU
 * against CPU. Under the sanitizer a 300-molecule box with the same defaults (grid from the
 * same tolerance, order 5) takes its place. */
static void benchmark_box_matches_cpu(void) {
    md_system s;
    md_topology t;
    md_lj_table lj;
    md_water_desc wd;
    md_pme_plan c;
    md_energy ec, eg;
    double *fc, *fg;
    NEED_GPU();
    memset(&wd, 0, sizeof wd);
    wd.molecules = sanitize ? 300 : 7856;
    wd.edge = sanitize ? 2.1 : 6.2;
    wd.seed = 7;
    MD_CHECK_OK(md_build_water_box(&s, &t, &lj, &wd));
    MD_CHECK_OK(md_pme_plan_create(&c, NULL, s.box, s.n));
    MD_CHECK(c.params.order == 5 && (sanitize || c.params.grid[0] == 56));
    fc = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    fg = (double *)calloc(3 * (size_t)s.n, sizeof(double));
    MD_CHECK(fc && fg);
    memset(&ec, 0, sizeof ec);
    memset(&eg, 0, sizeof eg);
    MD_CHECK_OK(md_pme_compute(&c, s.xyzq, s.n, s.box, fc, &ec));
    MD_CHECK_OK(md_cuda_pme(NULL, s.xyzq, s.n, s.box, fg, &eg));
    MD_CHECKF(vec_err(fg, fc, 3 * (size_t)s.n) < 1e-4, "forces %.3g", vec_err(fg, fc, 3 * (size_t)s.n));
    MD_CHECK_CLOSE(eg.coul_recip, ec.coul_recip, 1e-5, 1e-2);
    free(fc), free(fg);
    md_pme_plan_free(&c);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&lj);
}

/* A NaN coordinate is reported by the sync (MD_ERR_RANGE naming xyzq and the atom) and the
 * outputs stay untouched; host-side argument errors come at once. */
static void bad_input(void) {
    md_system s;
    md_cuda_pme_plan g, zero;
    md_pme_params pp;
    md_energy e;
    double f[6] = {7, 7, 7, 7, 7, 7}, box[3] = {2.0, 2.0, 2.0};
    memset(&zero, 0, sizeof zero);
    md_cuda_pme_plan_destroy(&zero); /* safe on a zeroed plan, GPU or not */
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, 50, box, 1.0, 43));
    memset(&pp, 0, sizeof pp);
    pp.order = 3;
    MD_CHECK_ERROR(md_cuda_pme_plan_create(&g, &pp, box, 50), MD_ERR_RANGE, "order");
    pp.order = 0;
    MD_CHECK_ERROR(md_cuda_pme_plan_create(&g, &pp, box, 0), MD_ERR_INVALID_ARGUMENT, "capacity");
    MD_CHECK_OK(md_cuda_pme_plan_create(&g, &pp, box, 50));
    MD_CHECK_ERROR(md_cuda_pme_plan_upload(&g, s.xyzq, 51, box), MD_ERR_RANGE, "n");
    MD_CHECK_ERROR(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, 0, g.d_box, g.d_out, 50, g.d_out, NULL), MD_ERR_RANGE, "n");
    MD_CHECK_ERROR(md_cuda_pme_plan_enqueue(&g, g.d_xyzq, 50, g.d_box, g.d_out, 49, g.d_out, NULL), MD_ERR_RANGE, "stride");
    MD_CHECK_ERROR(md_cuda_pme_plan_enqueue(&g, NULL, 50, g.d_box, g.d_out, 50, g.d_out, NULL), MD_ERR_INVALID_ARGUMENT,
                   "d_xyzq");
    MD_CHECK_ERROR(md_cuda_pme_plan_set_spread(&g, MD_CUDA_PME_SPREAD_COUNT), MD_ERR_INVALID_ARGUMENT, "spread");
    MD_CHECK_ERROR(md_cuda_pme_plan_set_window_atoms(&g, 48), MD_ERR_RANGE, "atoms");
    MD_CHECK_ERROR(md_cuda_pme_plan_set_window_atoms(&g, 288), MD_ERR_RANGE, "atoms");
    MD_CHECK_ERROR(md_cuda_pme_plan_set_window_atoms(&g, -32), MD_ERR_RANGE, "atoms");
    MD_CHECK(g.window_atoms == 32); /* unchanged by the refusals */
    MD_CHECK_OK(md_cuda_pme_plan_set_window_atoms(&g, 0)); /* the default */
    MD_CHECK(g.window_atoms == 32);
    MD_CHECK_ERROR(md_cuda_pme_plan_enqueue_own(&g), MD_ERR_INVALID_ARGUMENT, "n");
    s.xyzq[1].y = NAN;
    MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, 2, box));
    MD_CHECK_OK(md_cuda_pme_plan_enqueue_own(&g));
    memset(&e, 0, sizeof e);
    e.coul_recip = 7.0;
    MD_CHECK_ERROR(md_cuda_pme_plan_sync(&g, f, &e), MD_ERR_RANGE, "xyzq");
    MD_CHECK(strstr(md_last_error(), "atom 1") != NULL);
    MD_CHECK(f[0] == 7.0 && f[5] == 7.0 && e.coul_recip == 7.0);
    s.xyzq[1].y = 1.0f; /* the flag was cleared by the failed sync: the next batch is clean */
    MD_CHECK_OK(md_cuda_pme_plan_upload(&g, s.xyzq, 2, box));
    MD_CHECK_OK(md_cuda_pme_plan_set_spread(&g, MD_CUDA_PME_SPREAD_GATHER));
    MD_CHECK_OK(md_cuda_pme_plan_enqueue_own(&g));
    MD_CHECK_OK(md_cuda_pme_plan_sync(&g, f, &e));
    md_cuda_pme_plan_destroy(&g);
    md_cuda_pme_plan_destroy(&g);
    md_system_free(&s);
}

int main(void) {
    const char *san = getenv("MD_SANITIZE");
    sanitize = san && san[0] == '1';
    MD_RUN(bspline_matches_md_h);
    MD_RUN(stages_match_cpu);
    MD_RUN(whole_evaluation);
    MD_RUN(window_spread_sorted_and_crowded);
    MD_RUN(adds_and_replays);
    MD_RUN(graph_follows_arguments);
    MD_RUN(benchmark_box_matches_cpu);
    MD_RUN(bad_input);
    return md_test_summary();
}
