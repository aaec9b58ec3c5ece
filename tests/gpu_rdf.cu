/* Tests of md_cuda.cu.h's rdf section: every GPU rung gives exactly the CPU reference's
 * integer counts (tolerance 0: both do the same float operations), with bins not a
 * multiple of the warp, atom counts not a multiple of the block or the tile, A = B and
 * A != B (overlapping and disjoint), many bins in passes, launches split by the pair
 * bound, and a run whose one bin gets more than 2^32 counts (a single 32-bit launch
 * would overflow). Seeds used: 5, 6, 8.
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

/* Upload n positions; NULL on failure. */
static md_float4 *upload(const md_system *s) {
    md_float4 *d = NULL;
    if (cudaMalloc((void **)&d, (size_t)s->n * sizeof(md_float4)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, s->xyzq, (size_t)s->n * sizeof(md_float4), cudaMemcpyHostToDevice) != cudaSuccess) {
        (void)cudaFree(d);
        return NULL;
    }
    return d;
}

/* Poison every device buffer the plan writes, so a stale or unwritten value shows. */
static md_status poison_plan(md_cuda_rdf_plan *p) {
    md_status st;
    if ((st = md_cuda_poison((float *)p->d_a, 4 * (size_t)p->na, 0)) != MD_OK) return st;
    if ((st = md_cuda_poison((float *)p->d_b, 4 * (size_t)p->nb, 0)) != MD_OK) return st;
    if ((st = md_cuda_poison((float *)p->d_h32, (size_t)p->nbins, 0)) != MD_OK) return st;
    return md_cuda_poison((float *)p->d_h64, 2 * ((size_t)p->nbins + 1), 0);
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
 * (11 passes) give the same counts. Two frames accumulate to twice one frame's counts
 * plus nothing else (the 64-bit totals are reset per frame). Seed 6. */
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
    MD_RUN(registry_holds_every_rung_kernel);
    return md_test_summary();
}
