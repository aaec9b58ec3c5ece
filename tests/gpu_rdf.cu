/* Tests of md_cuda.cu.h's rdf section: every GPU rung gives exactly the CPU reference's
 * integer counts (tolerance 0: both do the same float operations), with bins not a
 * multiple of the warp, atom counts not a multiple of the block or the tile, A = B and
 * A != B (overlapping and disjoint), many bins in passes, launches split by the pair
 * bound, and a run whose one bin gets more than 2^32 counts (a single 32-bit launch
 * would overflow). The plan: batches of frames enqueued without a sync and synced once
 * (counts, frames and normalisation sums equal to md_rdf_accumulate()'s, exactly), a
 * non-finite coordinate that drops its batch, two plans at once on their own streams,
 * argument errors, destroy on a zeroed plan, and a counting kernel written with the public
 * API only (md_cuda_rdf_plan_gather, md_cuda_rdf_bin), as chapter 05's exercise is.
 * Seeds used: 5, 6, 8, 21, 22, 23.
 *
 * Without a GPU every test prints SKIP with md_last_error() as the reason.
 * MD_SANITIZE=1 (compute-sanitizer) shrinks every size; the overflow test then lowers
 * the pair bound per launch instead, so the same launch-splitting path still runs.
 * Device work without it: about 1 s (the overflow case counts 4.4e9 pairs). */
#define MD_IMPLEMENTATION
#define MD_CUDA_IMPLEMENTATION
#include "md_cuda.cu.h"
#include "md_test.h"

static int sanitize;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!md_cuda_available()) MD_SKIP("%s", md_last_error());                                 \
    } while (0)

static const md_rdf_variant gpu_rungs[4] = {MD_RDF_GPU_GLOBAL, MD_RDF_GPU_SHARED, MD_RDF_GPU_WARP, MD_RDF_GPU_PASSES};

/* Upload n positions; NULL on failure. The copy runs on the legacy stream, which the plans'
 * non-blocking streams do not wait for: the device synchronisation after it makes sure it has
 * landed before a plan reads it. */
static md_float4 *upload(const md_system *s) {
    md_float4 *d = NULL;
    if (cudaMalloc((void **)&d, (size_t)s->n * sizeof(md_float4)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, s->xyzq, (size_t)s->n * sizeof(md_float4), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
        (void)cudaFree(d);
        return NULL;
    }
    return d;
}

/* Poison every device buffer a frame writes (the gathered positions, the 32-bit histogram), on
 * the plan's own stream, so a stale or unwritten value shows. The 64-bit totals are the plan's
 * state across frames (zero after create and after each sync), so they are not poisoned. */
static md_status poison_plan(md_cuda_rdf_plan *p) {
    md_status st;
    if ((st = md_cuda_poison((float *)p->d_a, 4 * (size_t)p->na, p->queue.stream)) != MD_OK) return st;
    if ((st = md_cuda_poison((float *)p->d_b, 4 * (size_t)p->nb, p->queue.stream)) != MD_OK) return st;
    return md_cuda_poison((float *)p->d_h32, (size_t)p->nbins, p->queue.stream);
}

/* Run one GPU rung on one frame and compare with the CPU reference counts exactly. */
static int same_counts(const md_rdf *cpu, const md_rdf *gpu, const char *what) {
    int k;
    for (k = 0; k < cpu->nbins; k++)
        if (cpu->counts[k] != gpu->counts[k]) {
            printf("  %s: bin %d: gpu %llu, cpu %llu\n", what, k, (unsigned long long)gpu->counts[k],
                   (unsigned long long)cpu->counts[k]);
            return 0;
        }
    return cpu->frames == gpu->frames && cpu->sum_pair_density == gpu->sum_pair_density &&
           cpu->sum_centers == gpu->sum_centers;
}

/* Random points (seed 5), some moved out of the box by whole box lengths; 77 bins
 * (not a multiple of 32); N not a multiple of the block (256) or the tile (1024).
 * Cases: A = B (all atoms), A != B overlapping, A != B disjoint. */
static void every_rung_equals_cpu(void) {
    md_system s;
    md_float4 *d = NULL;
    double box[3] = {3.3, 3.5, 3.7};
    int n = sanitize ? 701 : 3001, c, v, i, *sa, *sb, na, nb;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, n, box, 1.0, 5));
    s.xyzq[3].x += 3.3f;
    s.xyzq[10].z -= 7.4f;
    MD_CHECK((d = upload(&s)) != NULL);
    sa = (int *)malloc(sizeof(int) * n);
    sb = (int *)malloc(sizeof(int) * n);
    MD_CHECK(sa && sb);
    for (c = 0; c < 3; c++) {
        const int *pb;
        if (c == 0) { na = n; nb = 0; for (i = 0; i < n; i++) sa[i] = i; pb = NULL; }
        else if (c == 1) { na = n * 3 / 5; nb = n * 3 / 5; for (i = 0; i < na; i++) { sa[i] = i; sb[i] = n - 1 - i; } pb = sb; }
        else { na = n / 3; nb = n - n / 3; for (i = 0; i < na; i++) sa[i] = 3 * i; for (i = 0, v = 0; i < n; i++) if (i % 3 || i / 3 >= na) sb[v++] = i; nb = v; pb = sb; }
        {
            md_rdf ref;
            md_cuda_rdf_plan p;
            MD_CHECK_OK(md_rdf_init(&ref, 1.6, 77));
            MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, sa, na, pb, nb, box));
            MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, sa, na, pb, nb, 77, NULL));
            for (v = 0; v < 4; v++) {
                md_rdf g;
                char what[64];
                MD_CHECK_OK(md_rdf_init(&g, 1.6, 77));
                MD_CHECK_OK(poison_plan(&p));
                MD_CHECK_OK(md_cuda_rdf_accumulate(gpu_rungs[v], &p, &g, d, box));
                snprintf(what, sizeof what, "case %d %s", c, md_rdf_variant_name(gpu_rungs[v]));
                MD_CHECKF(same_counts(&ref, &g, what), "%s differs from cpu_simple", what);
                MD_CHECK(p.launches == 1 && p.passes == 1);
                md_rdf_free(&g);
            }
            md_cuda_rdf_plan_destroy(&p);
            md_rdf_free(&ref);
        }
    }
    free(sa);
    free(sb);
    md_system_free(&s);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* Many bins: 60000 (more than a per-warp histogram can hold in shared memory on any GPU:
 * 8 warps x 4 bytes x 60000 = 1.9 MB) makes MD_RDF_GPU_WARP refuse with a clear message,
 * while MD_RDF_GPU_PASSES counts them exactly; and 77 bins forced into passes of 7 bins
 * (11 passes) give the same counts. Two frames, each synced, accumulate to twice one frame's
 * counts plus nothing else (a sync zeroes the device totals). Seed 6. */
static void passes_and_many_bins(void) {
    md_system s;
    md_float4 *d = NULL;
    double box[3] = {3.0, 3.0, 3.0};
    int n = sanitize ? 333 : 2345, k;
    md_rdf ref, g;
    md_cuda_rdf_plan p;
    md_cuda_rdf_opts o;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, n, box, 1.0, 6));
    MD_CHECK((d = upload(&s)) != NULL);
    MD_CHECK_OK(md_rdf_init(&ref, 1.5, 60000));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &ref, s.xyzq, n, NULL, n, NULL, 0, box));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 60000, NULL));
    MD_CHECK_OK(md_rdf_init(&g, 1.5, 60000));
    MD_CHECK_ERROR(md_cuda_rdf_accumulate(MD_RDF_GPU_WARP, &p, &g, d, box), MD_ERR_UNSUPPORTED, "use MD_RDF_GPU_PASSES");
    MD_CHECK(g.frames == 0);
    MD_CHECK_OK(poison_plan(&p));
    MD_CHECK_OK(md_cuda_rdf_accumulate(MD_RDF_GPU_PASSES, &p, &g, d, box));
    MD_CHECK(same_counts(&ref, &g, "60000 bins in passes"));
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&g);
    md_rdf_free(&ref);

    memset(&o, 0, sizeof o);
    o.max_bins_per_pass = 7;
    MD_CHECK_OK(md_rdf_init(&ref, 1.5, 77));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, NULL, n, NULL, 0, box));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, NULL, n, NULL, 0, box));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 77, &o));
    MD_CHECK_OK(md_rdf_init(&g, 1.5, 77));
    for (k = 0; k < 2; k++) {
        MD_CHECK_OK(poison_plan(&p));
        MD_CHECK_OK(md_cuda_rdf_accumulate(MD_RDF_GPU_PASSES, &p, &g, d, box));
    }
    MD_CHECK(p.passes == 11);
    MD_CHECK(same_counts(&ref, &g, "77 bins in passes of 7, two frames"));
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&g);
    md_rdf_free(&ref);
    md_system_free(&s);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* A low pair bound per launch (5000 pairs) splits one frame into many launches whose
 * 32-bit counts add into the 64-bit totals: the counts still equal the CPU's. */
static void split_launches_equal_cpu(void) {
    md_system s;
    md_float4 *d = NULL;
    double box[3] = {2.6, 2.6, 2.6};
    int n = sanitize ? 300 : 1500, v;
    md_rdf ref;
    md_cuda_rdf_opts o;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, n, box, 1.0, 8));
    MD_CHECK((d = upload(&s)) != NULL);
    MD_CHECK_OK(md_rdf_init(&ref, 1.3, 45));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, s.xyzq, n, NULL, n, NULL, 0, box));
    memset(&o, 0, sizeof o);
    o.max_pairs_per_launch = 5000;
    for (v = 0; v < 4; v++) {
        md_cuda_rdf_plan p;
        md_rdf g;
        MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 45, &o));
        MD_CHECK_OK(md_rdf_init(&g, 1.3, 45));
        MD_CHECK_OK(poison_plan(&p));
        MD_CHECK_OK(md_cuda_rdf_accumulate(gpu_rungs[v], &p, &g, d, box));
        MD_CHECK(p.launches == (n + 5000 / n - 1) / (5000 / n));
        MD_CHECKF(same_counts(&ref, &g, md_rdf_variant_name(gpu_rungs[v])), "%s", md_rdf_variant_name(gpu_rungs[v]));
        md_cuda_rdf_plan_destroy(&p);
        md_rdf_free(&g);
    }
    md_system_free(&s);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* The overflow case. A: na coincident atoms at one point, B: nb coincident atoms 0.5 nm away
 * (box 4 nm, rmax 1 nm, 10 bins). Every one of the na * nb = 4.356e9 pairs falls in one bin,
 * more than 2^32 - 1, so a single launch with 32-bit counters would wrap. The expected bin is
 * the one the CPU reference gives the pair of one A and one B atom; the expected count,
 * na * nb, is exact arithmetic. The global rung is left out: 4.4e9 atomics on one global
 * address would take seconds; it shares the launch splitting with the others, which
 * split_launches_equal_cpu checks for it. Under MD_SANITIZE the clusters shrink to 300 atoms
 * and the bound per launch to 1000 pairs, so the path is the same. */
static void overflow_bin_over_2_32(void) {
    const int na = sanitize ? 300 : 66000, nb = na, n = na + nb;
    md_system s;
    md_float4 *d = NULL;
    double box[3] = {4.0, 4.0, 4.0};
    md_rdf one;
    md_cuda_rdf_opts o;
    int i, v, bin = -1, sa[1] = {0}, sb[1] = {1}, *selb;
    const unsigned long long want = (unsigned long long)na * (unsigned long long)nb;
    NEED_GPU();
    if (!sanitize) MD_CHECK(want > 4294967295ULL);
    MD_CHECK_OK(md_system_alloc(&s, n));
    for (i = 0; i < n; i++) {
        s.xyzq[i].x = i < na ? 1.25f : 1.75f;
        s.xyzq[i].y = 2.0f;
        s.xyzq[i].z = 3.0f;
    }
    MD_CHECK_OK(md_rdf_init(&one, 1.0, 10));
    sb[0] = na;
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &one, s.xyzq, n, sa, 1, sb, 1, box));
    for (i = 0; i < 10; i++)
        if (one.counts[i]) bin = i;
    MD_CHECK(bin == 5);
    MD_CHECK((d = upload(&s)) != NULL);
    selb = (int *)malloc(sizeof(int) * nb);
    MD_CHECK(selb != NULL);
    for (i = 0; i < nb; i++) selb[i] = na + i;
    memset(&o, 0, sizeof o);
    if (sanitize) o.max_pairs_per_launch = 1000;
    for (v = 1; v < 4; v++) {
        md_cuda_rdf_plan p;
        md_rdf g;
        MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, na, selb, nb, 10, &o));
        MD_CHECK_OK(md_rdf_init(&g, 1.0, 10));
        MD_CHECK_OK(poison_plan(&p));
        MD_CHECK_OK(md_cuda_rdf_accumulate(gpu_rungs[v], &p, &g, d, box));
        MD_CHECK(p.launches >= 2);
        for (i = 0; i < 10; i++)
            MD_CHECKF(g.counts[i] == (i == bin ? want : 0ULL), "%s: bin %d has %llu, expected %llu",
                      md_rdf_variant_name(gpu_rungs[v]), i, (unsigned long long)g.counts[i], i == bin ? want : 0ULL);
        md_cuda_rdf_plan_destroy(&p);
        md_rdf_free(&g);
    }
    free(selb);
    md_rdf_free(&one);
    md_system_free(&s);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* Bad input: a CPU rung, a mismatched accumulator, a box below 2 rmax, a NaN coordinate;
 * each a clear error, the accumulator untouched. */
static void gpu_bad_input(void) {
    md_system s;
    md_float4 *d = NULL;
    double box[3] = {3, 3, 3}, small[3] = {3, 3, 2.5};
    md_cuda_rdf_plan p;
    md_rdf g, wrong;
    NEED_GPU();
    MD_CHECK_OK(md_build_random_charges(&s, 100, box, 1.0, 5));
    s.xyzq[42].z = NAN;
    MD_CHECK((d = upload(&s)) != NULL);
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, 100, NULL, 100, NULL, 0, 20, NULL));
    MD_CHECK_OK(md_rdf_init(&g, 1.4, 20));
    MD_CHECK_OK(md_rdf_init(&wrong, 1.4, 21));
    MD_CHECK_ERROR(md_cuda_rdf_accumulate(MD_RDF_CPU_SIMPLE, &p, &g, d, box), MD_ERR_UNSUPPORTED, "not a GPU rung");
    MD_CHECK_ERROR(md_cuda_rdf_accumulate(MD_RDF_GPU_WARP, &p, &wrong, d, box), MD_ERR_INVALID_ARGUMENT, "field nbins");
    MD_CHECK_ERROR(md_cuda_rdf_accumulate(MD_RDF_GPU_WARP, &p, &g, d, small), MD_ERR_RANGE, "field box: edge z");
    MD_CHECK_ERROR(md_cuda_rdf_accumulate(MD_RDF_GPU_SHARED, &p, &g, d, box), MD_ERR_RANGE, "atom 42 has a non-finite");
    MD_CHECK(g.frames == 0 && g.counts[0] == 0);
    MD_CHECK_ERROR(md_cuda_rdf_plan_create(&p, 100, NULL, 0, NULL, 0, 20, NULL), MD_ERR_INVALID_ARGUMENT, "sel_a");
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&g);
    md_rdf_free(&wrong);
    md_system_free(&s);
    MD_CHECK(cudaFree(d) == cudaSuccess);
}

/* ---- the plan: batches of frames, one sync ---- */

/* Three frames of 1500 random atoms (seeds 21, 22, 23; 400 under MD_SANITIZE) in three different
 * boxes, on the host and (d) on the device. */
typedef struct frames3 {
    md_system s[3];
    double boxes[3][3];
    md_float4 *d[3];
    int n;
} frames3;

static void frames3_free(frames3 *fr) {
    for (int f = 0; f < 3; f++) {
        if (fr->d[f]) (void)cudaFree(fr->d[f]);
        md_system_free(&fr->s[f]);
    }
    memset(fr, 0, sizeof *fr);
}

static md_status frames3_make(frames3 *fr) {
    md_status st;
    int f;
    memset(fr, 0, sizeof *fr);
    for (f = 0; f < 3; f++) {
        fr->boxes[f][0] = 3.1 + 0.2 * f;
        fr->boxes[f][1] = 3.3 - 0.1 * f;
        fr->boxes[f][2] = 3.0 + 0.15 * f;
        if ((st = md_build_random_charges(&fr->s[f], sanitize ? 400 : 1500, fr->boxes[f], 1.0, 21 + f)) != MD_OK) {
            frames3_free(fr);
            return st;
        }
        fr->s[f].xyzq[7].y += (float)fr->boxes[f][1]; /* one atom an image away */
    }
    fr->n = fr->s[0].n;
    return MD_OK;
}

/* The frames on the device; 0 on failure. */
static int frames3_upload(frames3 *fr) {
    for (int f = 0; f < 3; f++)
        if (!(fr->d[f] = upload(&fr->s[f]))) return 0;
    return 1;
}

/* Frames enqueued without a sync, then one sync: every rung, A = B and A != B; the accumulator
 * already holds one frame (the third, from the CPU) before the batch, and after the sync its
 * counts, frames and normalisation sums equal, exactly (==), md_rdf_accumulate() of the same
 * frames in the same order. A second batch on the same plan adds on top (the device totals were
 * zeroed by the first sync). A sync with nothing enqueued changes nothing. */
static void batch_of_frames_one_sync(void) {
    frames3 fr;
    int f, v, c, n, *sb = NULL, nb = 0, i;
    NEED_GPU();
    MD_CHECK_OK(frames3_make(&fr));
    n = fr.n;
    MD_CHECK(frames3_upload(&fr));
    sb = (int *)malloc(sizeof(int) * n);
    MD_CHECK(sb != NULL);
    for (i = n / 4; i < n; i++) sb[nb++] = i; /* B overlaps A = 0 .. n/2 - 1 */
    for (c = 0; c < 2; c++) {
        const int na = c == 0 ? n : n / 2;
        const int *pb = c == 0 ? NULL : sb;
        for (v = 0; v < 4; v++) {
            md_rdf ref, g;
            md_cuda_rdf_plan p;
            char what[64];
            MD_CHECK_OK(md_rdf_init(&ref, 1.45, 61));
            MD_CHECK_OK(md_rdf_init(&g, 1.45, 61));
            MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[2].xyzq, n, NULL, na, pb, c ? nb : 0, fr.boxes[2]));
            MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &g, fr.s[2].xyzq, n, NULL, na, pb, c ? nb : 0, fr.boxes[2]));
            for (f = 0; f < 3; f++)
                MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[f].xyzq, n, NULL, na, pb, c ? nb : 0, fr.boxes[f]));
            MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, na, pb, c ? nb : 0, 61, NULL));
            for (f = 0; f < 3; f++) {
                MD_CHECK_OK(poison_plan(&p));
                MD_CHECK_OK(md_cuda_rdf_plan_enqueue(gpu_rungs[v], &p, &g, fr.d[f], fr.boxes[f]));
            }
            MD_CHECK(p.pending == 3 && g.frames == 1); /* nothing added before the sync */
            MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g));
            snprintf(what, sizeof what, "case %d %s, 3 frames", c, md_rdf_variant_name(gpu_rungs[v]));
            MD_CHECKF(same_counts(&ref, &g, what), "%s differs from cpu_simple", what);
            MD_CHECK(g.frames == 4 && p.pending == 0);
            MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g)); /* nothing pending: nothing changes */
            MD_CHECKF(same_counts(&ref, &g, what), "%s: an empty sync changed the accumulator", what);
            MD_CHECK_OK(md_cuda_rdf_plan_enqueue(gpu_rungs[v], &p, &g, fr.d[0], fr.boxes[0]));
            MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g));
            MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[0].xyzq, n, NULL, na, pb, c ? nb : 0, fr.boxes[0]));
            MD_CHECKF(same_counts(&ref, &g, what), "%s: the second batch", what);
            md_cuda_rdf_plan_destroy(&p);
            md_rdf_free(&ref);
            md_rdf_free(&g);
        }
    }
    free(sb);
    frames3_free(&fr);
}

/* A batch with a non-finite coordinate in its second frame (atoms 17 and 5): the sync fails
 * with MD_ERR_RANGE naming atom 5 (the smallest), the accumulator is untouched, the batch is
 * dropped; the next batch on the same plan counts only its own frame. */
static void bad_frame_drops_the_batch(void) {
    frames3 fr;
    md_rdf ref, g;
    md_cuda_rdf_plan p;
    int f, n;
    NEED_GPU();
    MD_CHECK_OK(frames3_make(&fr));
    n = fr.n;
    fr.s[1].xyzq[17].x = NAN;
    fr.s[1].xyzq[5].z = INFINITY;
    MD_CHECK(frames3_upload(&fr));
    MD_CHECK_OK(md_rdf_init(&ref, 1.4, 33));
    MD_CHECK_OK(md_rdf_init(&g, 1.4, 33));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 33, NULL));
    for (f = 0; f < 3; f++) MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_WARP, &p, &g, fr.d[f], fr.boxes[f]));
    MD_CHECK_ERROR(md_cuda_rdf_plan_sync(&p, &g), MD_ERR_RANGE, "field xyz: atom 5 has a non-finite coordinate");
    MD_CHECK(g.frames == 0 && g.counts[0] == 0 && g.sum_pair_density == 0.0 && p.pending == 0);
    MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_WARP, &p, &g, fr.d[2], fr.boxes[2]));
    MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[2].xyzq, n, NULL, n, NULL, 0, fr.boxes[2]));
    MD_CHECK(same_counts(&ref, &g, "the batch after a bad one"));
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&ref);
    md_rdf_free(&g);
    frames3_free(&fr);
}

/* Two plans at once, each on its own stream (A = B with the shared rung; A != B with the warp
 * rung and launches split at 20000 pairs), frames interleaved, synced in the other order: each
 * equals the CPU. */
static void concurrent_plans(void) {
    frames3 fr;
    md_rdf r1, r2, c1, c2;
    md_cuda_rdf_plan p1, p2;
    md_cuda_rdf_opts o;
    int f, n, i, sa[1500], sb[1500], na, nb;
    NEED_GPU();
    MD_CHECK_OK(frames3_make(&fr));
    n = fr.n;
    na = n / 5;
    nb = n / 3;
    for (i = 0; i < na; i++) sa[i] = 3 * i;
    for (i = 0; i < nb; i++) sb[i] = n - 1 - 2 * i; /* overlaps A */
    MD_CHECK(frames3_upload(&fr));
    MD_CHECK_OK(md_rdf_init(&r1, 1.5, 50));
    MD_CHECK_OK(md_rdf_init(&c1, 1.5, 50));
    MD_CHECK_OK(md_rdf_init(&r2, 1.2, 70));
    MD_CHECK_OK(md_rdf_init(&c2, 1.2, 70));
    memset(&o, 0, sizeof o);
    o.max_pairs_per_launch = 8000; /* below na * nb at either size: several launches */
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p1, n, NULL, n, NULL, 0, 50, NULL));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p2, n, sa, na, sb, nb, 70, &o));
    MD_CHECK(p1.queue.stream != p2.queue.stream);
    for (f = 0; f < 3; f++) {
        MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_SHARED, &p1, &r1, fr.d[f], fr.boxes[f]));
        MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_WARP, &p2, &r2, fr.d[f], fr.boxes[f]));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &c1, fr.s[f].xyzq, n, NULL, n, NULL, 0, fr.boxes[f]));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &c2, fr.s[f].xyzq, n, sa, na, sb, nb, fr.boxes[f]));
    }
    MD_CHECK(p2.launches >= 2);
    MD_CHECK_OK(md_cuda_rdf_plan_sync(&p2, &r2));
    MD_CHECK_OK(md_cuda_rdf_plan_sync(&p1, &r1));
    MD_CHECK(same_counts(&c1, &r1, "plan 1 (A = B, shared)"));
    MD_CHECK(same_counts(&c2, &r2, "plan 2 (A != B, warp, split launches)"));
    md_cuda_rdf_plan_destroy(&p1);
    md_cuda_rdf_plan_destroy(&p2);
    md_rdf_free(&r1);
    md_rdf_free(&r2);
    md_rdf_free(&c1);
    md_rdf_free(&c2);
    frames3_free(&fr);
}

/* Argument errors of the batch: frames of one batch must share rmax; the sync needs the
 * accumulator they were enqueued for; neither error changes the accumulator or drops the
 * frames already enqueued. */
static void batch_argument_errors(void) {
    frames3 fr;
    md_rdf g, other, fewer, ref;
    md_cuda_rdf_plan p;
    int n;
    NEED_GPU();
    MD_CHECK_OK(frames3_make(&fr));
    n = fr.n;
    MD_CHECK(frames3_upload(&fr));
    MD_CHECK_OK(md_rdf_init(&g, 1.4, 40));
    MD_CHECK_OK(md_rdf_init(&ref, 1.4, 40));
    MD_CHECK_OK(md_rdf_init(&other, 1.3, 40));
    MD_CHECK_OK(md_rdf_init(&fewer, 1.4, 39));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 40, NULL));
    MD_CHECK_OK(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_GLOBAL, &p, &g, fr.d[0], fr.boxes[0]));
    MD_CHECK_ERROR(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_GLOBAL, &p, &other, fr.d[1], fr.boxes[1]), MD_ERR_INVALID_ARGUMENT,
                   "field rmax");
    MD_CHECK_ERROR(md_cuda_rdf_plan_enqueue(MD_RDF_GPU_GLOBAL, &p, &fewer, fr.d[1], fr.boxes[1]), MD_ERR_INVALID_ARGUMENT,
                   "field nbins");
    MD_CHECK_ERROR(md_cuda_rdf_plan_sync(&p, &other), MD_ERR_INVALID_ARGUMENT, "is not the accumulator");
    MD_CHECK(p.pending == 1 && other.frames == 0);
    MD_CHECK_OK(md_cuda_rdf_plan_sync(&p, &g));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[0].xyzq, n, NULL, n, NULL, 0, fr.boxes[0]));
    MD_CHECK(same_counts(&ref, &g, "after refused calls"));
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&g);
    md_rdf_free(&ref);
    md_rdf_free(&other);
    md_rdf_free(&fewer);
    frames3_free(&fr);
}

/* Host only: destroy is safe on a zeroed plan and twice; a refused create zeroes its plan. */
static void plan_zeroed_destroy(void) {
    md_cuda_rdf_plan p;
    memset(&p, 0, sizeof p);
    md_cuda_rdf_plan_destroy(&p);
    md_cuda_rdf_plan_destroy(&p);
    md_cuda_rdf_plan_destroy(NULL);
    memset(&p, 0x5A, sizeof p);
    MD_CHECK_ERROR(md_cuda_rdf_plan_create(&p, 100, NULL, 100, NULL, 0, 0, NULL), MD_ERR_RANGE, "field nbins");
    MD_CHECK(p.d_h64 == NULL && p.queue.stream == NULL && p.boxes == NULL);
    md_cuda_rdf_plan_destroy(&p);
}

/* A counting kernel written with the public API only, as chapter 05's exercise is:
 * md_cuda_rdf_plan_gather fills the plan's wrapped positions, md_cuda_rdf_bin is the pair rule.
 * One thread per A atom, global atomics. Its counts equal the CPU's. */
__global__ void public_api_count(md_cuda_rdf_geom g, const float4 *a, int na, const float4 *b, int nb, int same,
                                 unsigned int *hist) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j, k;
    if (i >= na) return;
    for (j = same ? i + 1 : 0; j < nb; j++) {
        if (!same && __float_as_int(b[j].w) == __float_as_int(a[i].w)) continue;
        if ((k = md_cuda_rdf_bin(&g, a[i], b[j])) >= 0) atomicAdd(&hist[k], 1u);
    }
}

static md_status count_with_public_api(md_cuda_rdf_plan *p, const md_rdf *r, const md_float4 *d_xyz,
                                       const double box[3], unsigned int *d_hist) {
    md_cuda_rdf_geom g;
    md_status st;
    MD_CUDA_TRY(cudaMemsetAsync(d_hist, 0, (size_t)r->nbins * sizeof(unsigned int), p->queue.stream));
    if ((st = md_cuda_rdf_plan_gather(p, r, d_xyz, box, &g)) != MD_OK) return st;
    MD_CUDA_LAUNCH(public_api_count, (p->na + 127) / 128, 128, 0, p->queue.stream, g, (const float4 *)p->d_a, p->na,
                   (const float4 *)p->d_b, p->nb, p->same, d_hist);
    return md_cuda_rdf_plan_sync(p, NULL); /* waits; no frame was enqueued, so nothing to add */
}

static void public_api_counts_equal_cpu(void) {
    frames3 fr;
    md_float4 *d = NULL;
    md_rdf ref;
    md_cuda_rdf_plan p;
    unsigned int *d_hist = NULL, h[45];
    int k, n;
    NEED_GPU();
    MD_CHECK_OK(frames3_make(&fr));
    n = fr.n;
    MD_CHECK((d = upload(&fr.s[1])) != NULL);
    MD_CHECK_OK(md_rdf_init(&ref, 1.5, 45));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &ref, fr.s[1].xyzq, n, NULL, n, NULL, 0, fr.boxes[1]));
    MD_CHECK_OK(md_cuda_rdf_plan_create(&p, n, NULL, n, NULL, 0, 45, NULL));
    MD_CHECK(cudaMalloc((void **)&d_hist, sizeof h) == cudaSuccess);
    MD_CHECK_OK(poison_plan(&p));
    MD_CHECK_OK(count_with_public_api(&p, &ref, d, fr.boxes[1], d_hist));
    MD_CHECK(cudaMemcpy(h, d_hist, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (k = 0; k < 45; k++)
        MD_CHECKF(h[k] == ref.counts[k], "bin %d: %u, cpu %llu", k, h[k], (unsigned long long)ref.counts[k]);
    md_cuda_rdf_plan_destroy(&p);
    md_rdf_free(&ref);
    MD_CHECK(cudaFree(d_hist) == cudaSuccess && cudaFree(d) == cudaSuccess);
    frames3_free(&fr);
}

/* Run last: the kernels the tests above launched are in the launch registry, each once. */
static void registry_holds_every_rung_kernel(void) {
    static const char *names[] = {"md__rdf_gather_kernel", "md__rdf_kernel<0>", "md__rdf_kernel<1>", "md__rdf_kernel<2>",
                                  "md__rdf_add_kernel"};
    int i, k, found;
    NEED_GPU();
    for (i = 0; i < 5; i++) {
        found = 0;
        for (k = 0; k < md_cuda_kernel_count(); k++) {
            const char *name = NULL;
            MD_CHECK_OK(md_cuda_kernel_at(k, NULL, &name));
            found += strcmp(name, names[i]) == 0;
        }
        MD_CHECKF(found == 1, "%s is registered %d times, want once", names[i], found);
    }
}

int main(void) {
    const char *san = getenv("MD_SANITIZE");
    sanitize = san && san[0] == '1';
    MD_RUN(every_rung_equals_cpu);
    MD_RUN(passes_and_many_bins);
    MD_RUN(split_launches_equal_cpu);
    MD_RUN(overflow_bin_over_2_32);
    MD_RUN(gpu_bad_input);
    MD_RUN(plan_zeroed_destroy);
    MD_RUN(batch_of_frames_one_sync);
    MD_RUN(bad_frame_drops_the_batch);
    MD_RUN(concurrent_plans);
    MD_RUN(batch_argument_errors);
    MD_RUN(public_api_counts_equal_cpu);
    MD_RUN(registry_holds_every_rung_kernel);
    return md_test_summary();
}
