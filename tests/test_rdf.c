/* Tests of md.h's rdf section: the CPU RDF rungs, normalization, selections,
 * the DCD reader/writer and trajectories.
 * Seeds used: 3, 11, 17, 29, 101..110 (ideal gas frames), 555. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"

#define TMPDIR "build/test-tmp"
#define PI 3.14159265358979323846

static void make_tmpdir(void) {
    /* build/ exists whenever the tests run from the repository root (make test) */
    FILE *f;
    if ((f = fopen(TMPDIR "/.keep", "w"))) { fclose(f); return; }
    if (system("mkdir -p " TMPDIR) != 0) return;
}

/* n uniform random points in [0, box) (float), seed fixed by the caller. */
static md_status random_points(md_system *s, int n, const double box[3], uint64_t seed) {
    md_status st = md_build_random_charges(s, n, box, 1.0, seed);
    return st;
}

/* Brute force in double: the same bins, minimum image by rint in double. */
static void count_double(const md_float4 *x, const int *sa, int na, const int *sb, int nb, int same,
                         const double box[3], double rmax, int nbins, uint64_t *h) {
    int i, j, d;
    memset(h, 0, (size_t)nbins * sizeof *h);
    for (i = 0; i < na; i++)
        for (j = same ? i + 1 : 0; j < nb; j++) {
            int a = sa[i], b = same ? sa[j] : sb[j];
            double dd[3], r2 = 0;
            if (a == b) continue;
            dd[0] = (double)x[b].x - x[a].x;
            dd[1] = (double)x[b].y - x[a].y;
            dd[2] = (double)x[b].z - x[a].z;
            for (d = 0; d < 3; d++) {
                dd[d] -= box[d] * rint(dd[d] / box[d]);
                r2 += dd[d] * dd[d];
            }
            if (r2 < rmax * rmax) {
                int k = (int)(sqrt(r2) / (rmax / nbins));
                h[k < nbins ? k : nbins - 1]++;
            }
        }
}

/* The private-histogram rung gives exactly the counts of the simple rung (integer
 * counts: tolerance 0), for A = B and for overlapping A != B; both agree with a
 * double-precision brute force within the pairs that float rounding can move
 * across a bin edge (at most 0.1% of a bin + 2 pairs). */
static void cpu_rungs_equal_exactly(void) {
    md_system s;
    md_rdf r1, r2;
    double box[3] = {3.0, 3.2, 3.4};
    int i, k, sa[800], sb[1000], all[1500];
    uint64_t ref[70];
    MD_CHECK_OK(random_points(&s, 1500, box, 3));
    for (i = 0; i < 1500; i++) all[i] = i;
    for (i = 0; i < 800; i++) sa[i] = i;
    for (i = 0; i < 1000; i++) sb[i] = 500 + i;
    /* a few atoms outside the box: wrapping must bring them back */
    s.xyzq[7].x += 3.0f;
    s.xyzq[9].y -= 3.2f;
    s.xyzq[600].z += 6.8f;
    for (k = 0; k < 2; k++) {
        const int *b = k == 0 ? NULL : sb;
        int na = k == 0 ? 1500 : 800, nb = k == 0 ? 0 : 1000;
        const int *a = k == 0 ? all : sa;
        MD_CHECK_OK(md_rdf_init(&r1, 1.4, 70));
        MD_CHECK_OK(md_rdf_init(&r2, 1.4, 70));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r1, s.xyzq, s.n, a, na, b, nb, box));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r2, s.xyzq, s.n, a, na, b, nb, box));
        count_double(s.xyzq, a, na, b, k == 0 ? na : nb, k == 0, box, 1.4, 70, ref);
        for (i = 0; i < 70; i++) {
            MD_CHECKF(r1.counts[i] == r2.counts[i], "case %d bin %d: simple %llu private %llu", k, i,
                      (unsigned long long)r1.counts[i], (unsigned long long)r2.counts[i]);
            MD_CHECKF(fabs((double)r1.counts[i] - (double)ref[i]) <= 1e-3 * (double)ref[i] + 2.0, "case %d bin %d: %llu vs double %llu", k, i, (unsigned long long)r1.counts[i], (unsigned long long)ref[i]);
        }
        MD_CHECK(r1.frames == 1 && r2.frames == 1);
        MD_CHECK(r1.sum_pair_density == r2.sum_pair_density);
        md_rdf_free(&r1);
        md_rdf_free(&r2);
    }
    md_system_free(&s);
}

/* A = B as one selection (unordered pairs, i < j) and as two equal arrays (ordered
 * pairs) count every pair twice in the second case but give the same g(r) and n(r)
 * (relative 1e-12: the same integers scaled by normalizations that differ by 2). */
static void same_and_ordered_normalize_alike(void) {
    md_system s;
    md_rdf u, o;
    double box[3] = {2.5, 2.5, 2.5}, gu[30], go[30], nu[30], no[30];
    int i, a[400], b[400];
    MD_CHECK_OK(random_points(&s, 400, box, 11));
    for (i = 0; i < 400; i++) a[i] = b[i] = i;
    MD_CHECK_OK(md_rdf_init(&u, 1.2, 30));
    MD_CHECK_OK(md_rdf_init(&o, 1.2, 30));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &u, s.xyzq, s.n, a, 400, a, 400, box));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &o, s.xyzq, s.n, a, 400, b, 400, box));
    MD_CHECK_OK(md_rdf_normalize(&u, gu, nu));
    MD_CHECK_OK(md_rdf_normalize(&o, go, no));
    for (i = 0; i < 30; i++) {
        MD_CHECK(o.counts[i] == 2 * u.counts[i]);
        MD_CHECK_CLOSE(gu[i], go[i], 1e-12, 0);
        MD_CHECK_CLOSE(nu[i], no[i], 1e-12, 0);
    }
    md_rdf_free(&u);
    md_rdf_free(&o);
    md_system_free(&s);
}

/* Ideal gas: 10 frames of 2000 uniform points (seeds 101..110) in a 4 nm cube,
 * rmax 2 nm, 40 bins. For independent uniform points in a periodic box the pair
 * count in bin k is binomial with mean E_k = V_k * sum(pairs / V) (the positions
 * of pairs sharing an atom are uncorrelated because the box has no edges), so
 * g_k - 1 has standard deviation sigma_k = 1 / sqrt(E_k) (up to sqrt(1 - p) <= 1).
 * Check |g_k - 1| <= 5 sigma_k on every bin, and n(r) at rmax against the mean
 * number of other atoms in a sphere, (N - 1) / V * 4/3 pi rmax^3, within 5 sigma
 * of its count. */
static void ideal_gas_gives_one(void) {
    md_rdf r;
    md_system s;
    double box[3] = {4.0, 4.0, 4.0}, g[40], n[40], w = 2.0 / 40, want, sig;
    int f, k;
    MD_CHECK_OK(md_rdf_init(&r, 2.0, 40));
    for (f = 0; f < 10; f++) {
        MD_CHECK_OK(random_points(&s, 2000, box, 101 + f));
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r, s.xyzq, s.n, NULL, s.n, NULL, 0, box));
        md_system_free(&s);
    }
    MD_CHECK(r.frames == 10);
    MD_CHECK_CLOSE(r.sum_pair_density, 10 * 2000.0 * 1999.0 / 2 / 64.0, 1e-12, 0);
    MD_CHECK_OK(md_rdf_normalize(&r, g, n));
    for (k = 0; k < 40; k++) {
        double lo = k * w, hi = lo + w, e = 4.0 / 3.0 * PI * (hi * hi * hi - lo * lo * lo) * r.sum_pair_density;
        MD_CHECKF(fabs(g[k] - 1.0) <= 5.0 / sqrt(e), "bin %d: g = %.5f, expected 1 +- %.5f (5 sigma)", k, g[k],
                  5.0 / sqrt(e));
    }
    want = 1999.0 / 64.0 * 4.0 / 3.0 * PI * 8.0;
    sig = sqrt(want / (10 * 1000.0)); /* the count behind n(rmax) is ~ 10 * 1000 * want pairs */
    MD_CHECK_CLOSE(n[39], want, 0, 5 * sig);
    md_rdf_free(&r);
}

/* Independent derivation of the FCC shells: sites of an FCC lattice of constant a
 * are (i, j, k) a/2 with i + j + k even; count the lattice vectors by squared length
 * (units (a/2)^2). Textbook values (e.g. Ashcroft & Mermin, ch. 4; Kittel, table 1.2):
 * 12 at a/sqrt2, 6 at a, 24 at a sqrt(3/2), 12 at a sqrt2, 24 at a sqrt(5/2). */
static int fcc_shell(int m2) {
    int i, j, k, c = 0;
    for (i = -6; i <= 6; i++) /* |i|, |j|, |k| <= 6 holds every vector with m2 <= 36 */
        for (j = -6; j <= 6; j++)
            for (k = -6; k <= 6; k++)
                if (((i + j + k) & 1) == 0 && i * i + j * j + k * k == m2) c++;
    return c;
}

/* FCC lattice (4 cells, a = 0.5 nm, box 2 nm) with rmax 0.85 nm, 97 bins: every pair
 * lands in the bin of its exact shell distance; n(r) after each shell is the running
 * sum of the shell counts (exact up to double rounding: 1e-12). */
static void fcc_shells(void) {
    md_fcc_desc d;
    md_system s;
    md_rdf r;
    double g[97], n[97], w = 0.85 / 97, a = 0.5, cum = 0, gmax = 0;
    int shells[5], m2, k, expect_bin[5], nz = 0;
    MD_CHECK(fcc_shell(2) == 12 && fcc_shell(4) == 6 && fcc_shell(6) == 24 && fcc_shell(8) == 12 &&
             fcc_shell(10) == 24);
    memset(&d, 0, sizeof d);
    d.cells = 4;
    d.lattice = a;
    MD_CHECK_OK(md_build_fcc(&s, &d));
    MD_CHECK_OK(md_rdf_init(&r, 0.85, 97));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r, s.xyzq, s.n, NULL, s.n, NULL, 0, s.box));
    MD_CHECK_OK(md_rdf_normalize(&r, g, n));
    for (m2 = 2, k = 0; k < 5; m2 += 2, k++) {
        shells[k] = fcc_shell(m2);
        expect_bin[k] = (int)(0.5 * a * sqrt((double)m2) / w);
    }
    for (k = 0; k < 97; k++)
        if (r.counts[k]) nz++;
    MD_CHECK(nz == 5);
    for (k = 0; k < 5; k++) {
        cum += shells[k];
        MD_CHECKF(r.counts[expect_bin[k]] == (uint64_t)s.n * shells[k] / 2, "shell %d: bin %d has %llu pairs", k,
                  expect_bin[k], (unsigned long long)r.counts[expect_bin[k]]);
        MD_CHECK_CLOSE(n[expect_bin[k]], cum, 1e-12, 0);
        if (g[expect_bin[k]] > gmax) gmax = g[expect_bin[k]];
    }
    MD_CHECK(g[expect_bin[0]] == gmax); /* the first peak, at a/sqrt2, is the highest */
    MD_CHECK_CLOSE(n[96], 78.0, 1e-12, 0);
    md_rdf_free(&r);
    md_system_free(&s);
}

static void selections(void) {
    md_system s;
    int *idx = NULL, n = 0, i;
    MD_CHECK_OK(md_system_alloc(&s, 9));
    for (i = 0; i < 9; i++) {
        strcpy(s.name[i].s, i % 3 == 0 ? "OW" : "HW");
        s.type[i] = i % 3 == 0 ? 0 : 1;
    }
    MD_CHECK_OK(md_select(&s, "name OW", &idx, &n));
    MD_CHECK(n == 3 && idx[0] == 0 && idx[1] == 3 && idx[2] == 6);
    md_free(idx);
    MD_CHECK_OK(md_select(&s, "  type 1 ", &idx, &n));
    MD_CHECK(n == 6 && idx[0] == 1 && idx[5] == 8);
    md_free(idx);
    MD_CHECK_OK(md_select(&s, "index 2-4", &idx, &n));
    MD_CHECK(n == 3 && idx[0] == 2 && idx[2] == 4);
    md_free(idx);
    MD_CHECK_OK(md_select(&s, "index 8", &idx, &n));
    MD_CHECK(n == 1 && idx[0] == 8);
    md_free(idx);
    MD_CHECK_OK(md_select(&s, "all", &idx, &n));
    MD_CHECK(n == 9);
    md_free(idx);
    idx = NULL;
    n = -1;
    MD_CHECK_ERROR(md_select(&s, "name CA", &idx, &n), MD_ERR_INVALID_ARGUMENT, "matches no atom");
    MD_CHECK(idx == NULL && n == -1);
    MD_CHECK_ERROR(md_select(&s, "index 20-30", &idx, &n), MD_ERR_INVALID_ARGUMENT, "matches no atom");
    MD_CHECK_ERROR(md_select(&s, "resname SOL", &idx, &n), MD_ERR_PARSE, "unknown keyword 'resname'");
    MD_CHECK_ERROR(md_select(&s, "type x", &idx, &n), MD_ERR_PARSE, "field expr");
    MD_CHECK_ERROR(md_select(&s, "index 5-2", &idx, &n), MD_ERR_PARSE, "reversed");
    MD_CHECK_ERROR(md_select(&s, "name", &idx, &n), MD_ERR_PARSE, "needs an argument");
    MD_CHECK_ERROR(md_select(&s, "all atoms", &idx, &n), MD_ERR_PARSE, "unexpected text");
    MD_CHECK_ERROR(md_select(&s, "", &idx, &n), MD_ERR_PARSE, "expected all");
    md_system_free(&s);
}

static void rdf_bad_input(void) {
    md_system s;
    md_rdf r;
    double small[3] = {3.0, 1.9, 3.0}, box[3] = {3, 3, 3};
    int sel[2] = {1, 1}, out[1] = {12};
    MD_CHECK_ERROR(md_rdf_init(&r, -1.0, 10), MD_ERR_RANGE, "field rmax");
    MD_CHECK_ERROR(md_rdf_init(&r, 1.0, -3), MD_ERR_RANGE, "field nbins");
    MD_CHECK_OK(md_rdf_init(&r, 1.0, 0));
    MD_CHECK(r.nbins == MD_RDF_DEFAULT_NBINS);
    MD_CHECK_OK(random_points(&s, 10, box, 17));
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, NULL, 10, NULL, 0, small), MD_ERR_RANGE,
                   "field box: edge y = 1.9 nm is below 2 rmax = 2 nm");
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, NULL, 0, NULL, 0, box),
                   MD_ERR_INVALID_ARGUMENT, "field sel_a: is empty");
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, NULL, 5, out, 0, box),
                   MD_ERR_INVALID_ARGUMENT, "field sel_b: is empty");
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, sel, 2, NULL, 0, box),
                   MD_ERR_INVALID_ARGUMENT, "atom 1 appears twice");
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, NULL, 3, out, 1, box),
                   MD_ERR_INVALID_ARGUMENT, "atom 12, outside 0..9");
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_GPU_WARP, &r, s.xyzq, s.n, NULL, 3, NULL, 0, box), MD_ERR_UNSUPPORTED,
                   "md_cuda_rdf_accumulate");
    s.xyzq[4].y = NAN;
    MD_CHECK_ERROR(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r, s.xyzq, s.n, NULL, 10, NULL, 0, box), MD_ERR_RANGE,
                   "atom 4 has a non-finite coordinate");
    MD_CHECK(r.frames == 0); /* untouched after every failure */
    MD_CHECK_ERROR(md_rdf_normalize(&r, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "field frames");
    md_rdf_free(&r);
    md_system_free(&s);
}

/* CSV: header, one line per bin, values equal to md_rdf_normalize (printed with 9
 * significant digits: relative 1e-8); a path in a missing folder fails with
 * MD_ERR_IO and leaves no file. */
static void csv_is_written_whole(void) {
    md_system s;
    md_rdf r;
    double box[3] = {2.2, 2.2, 2.2}, g[11], n[11], x, gg, nn;
    char line[256];
    int k;
    FILE *f;
    make_tmpdir();
    MD_CHECK_OK(random_points(&s, 300, box, 29));
    MD_CHECK_OK(md_rdf_init(&r, 1.1, 11));
    MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &r, s.xyzq, s.n, NULL, s.n, NULL, 0, box));
    MD_CHECK_OK(md_rdf_normalize(&r, g, n));
    MD_CHECK_OK(md_rdf_write_csv(TMPDIR "/rdf.csv", &r));
    MD_CHECK((f = fopen(TMPDIR "/rdf.csv", "r")) != NULL);
    MD_CHECK(fgets(line, sizeof line, f) && strcmp(line, "r_nm,g,n\n") == 0);
    for (k = 0; k < 11; k++) {
        if (!fgets(line, sizeof line, f) || sscanf(line, "%lf,%lf,%lf", &x, &gg, &nn) != 3) {
            fclose(f);
            MD_CHECKF(0, "line %d unreadable", k + 2);
        }
        MD_CHECK_CLOSE(x, (k + 0.5) * 0.1, 1e-8, 0);
        MD_CHECK_CLOSE(gg, g[k], 1e-8, 1e-300);
        MD_CHECK_CLOSE(nn, n[k], 1e-8, 1e-300);
    }
    MD_CHECK(fgets(line, sizeof line, f) == NULL);
    fclose(f);
    MD_CHECK_ERROR(md_rdf_write_csv(TMPDIR "/no/such/dir/rdf.csv", &r), MD_ERR_IO, "cannot open");
    MD_CHECK((f = fopen(TMPDIR "/no/such/dir/rdf.csv", "r")) == NULL);
    md_rdf_free(&r);
    md_system_free(&s);
}

/* Three frames of 37 atoms (seed 555, each frame moved and its box changed). */
static md_status three_frames(md_system fr[3]) {
    double box[3] = {2.0, 2.5, 3.0};
    int f, i;
    md_status st;
    for (f = 0; f < 3; f++) {
        box[0] += 0.1 * f;
        if ((st = random_points(&fr[f], 37, box, 555 + f)) != MD_OK) return st;
        for (i = 0; i < 37; i++) fr[f].xyzq[i].x -= 0.5f; /* some negative coordinates */
    }
    return MD_OK;
}

static long file_bytes(const char *path, unsigned char **data) {
    FILE *f = fopen(path, "rb");
    long n;
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = (unsigned char *)malloc((size_t)n + 1);
    if (!*data || fread(*data, 1, (size_t)n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

static int write_bytes(const char *path, const unsigned char *data, long n) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, (size_t)n, f) == (size_t)n;
    return (fclose(f) == 0) && ok;
}

/* Round trip through md_dcd_write and md_traj_open/next in both byte orders, with
 * and without cells. Positions go nm -> Angstrom float -> nm: two float roundings,
 * so relative 1e-6 (about 8 ulp); the box is double all the way: 1e-12. The file
 * starts with the marker 84 in the requested byte order, and reading the same bytes
 * from memory gives the same frames. */
static void dcd_round_trip(void) {
    md_system fr[3], got;
    md_dcd_write_desc d;
    md_traj t;
    md_dcd_reader m;
    unsigned char *bytes = NULL;
    long nbytes;
    int be, cell, f, i, k, ok;
    make_tmpdir();
    memset(fr, 0, sizeof fr);
    MD_CHECK_OK(three_frames(fr));
    for (be = 0; be < 2; be++)
        for (cell = 0; cell < 2; cell++) {
            memset(&d, 0, sizeof d);
            d.big_endian = be;
            d.no_cell = !cell;
            d.timestep_ps = 0.002;
            MD_CHECK_OK(md_dcd_write(TMPDIR "/rt.DCD", fr, 3, &d));
            nbytes = file_bytes(TMPDIR "/rt.DCD", &bytes);
            MD_CHECK(nbytes == 4 + 84 + 4 + 4 + 84 + 4 + 12 + 3 * ((cell ? 56 : 0) + 3 * (8 + 4 * 37)));
            MD_CHECK(bytes[be ? 3 : 0] == 84 && bytes[be ? 0 : 3] == 0);
            MD_CHECK_OK(md_traj_open(&t, TMPDIR "/rt.DCD"));
            MD_CHECK(t.format == MD_TRAJ_DCD && t.dcd.natoms == 37 && t.dcd.nframes_header == 3);
            MD_CHECK(t.dcd.has_cell == cell && t.dcd.big_endian == be);
            MD_CHECK_CLOSE(t.dcd.timestep_ps, 0.002, 1e-6, 0);
            MD_CHECK_OK(md_dcd_open_mem(&m, bytes, (size_t)nbytes, "rt-mem"));
            memset(&got, 0, sizeof got);
            for (f = 0; f < 3; f++) {
                md_system gm;
                memset(&gm, 0, sizeof gm);
                MD_CHECK_OK(md_traj_next(&t, &got, &ok));
                MD_CHECK(ok == 1 && got.n == 37);
                MD_CHECK_OK(md_dcd_next(&m, &gm, &ok));
                MD_CHECK(ok == 1);
                for (i = 0; i < 37; i++) {
                    MD_CHECK_CLOSE(got.xyzq[i].x, fr[f].xyzq[i].x, 1e-6, 1e-7);
                    MD_CHECK_CLOSE(got.xyzq[i].y, fr[f].xyzq[i].y, 1e-6, 1e-7);
                    MD_CHECK_CLOSE(got.xyzq[i].z, fr[f].xyzq[i].z, 1e-6, 1e-7);
                    MD_CHECK(gm.xyzq[i].x == got.xyzq[i].x && gm.xyzq[i].z == got.xyzq[i].z);
                }
                for (k = 0; k < 3; k++) MD_CHECK_CLOSE(got.box[k], cell ? fr[f].box[k] : 0.0, 1e-12, 0);
                md_system_free(&gm);
            }
            MD_CHECK_OK(md_traj_next(&t, &got, &ok));
            MD_CHECK(ok == 0);
            md_traj_close(&t);
            md_dcd_close(&m);
            md_system_free(&got);
            free(bytes);
            bytes = NULL;
        }
    for (f = 0; f < 3; f++) md_system_free(&fr[f]);
}

/* Offsets in a little-endian file with cells written by md_dcd_write. */
#define DCD_FRAME0 (4 + 84 + 4 + 4 + 84 + 4 + 12)
#define DCD_FRAME_BYTES(n) (56 + 3 * (8 + 4 * (n)))

static void set_le32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
    p[2] = (unsigned char)(u >> 16);
    p[3] = (unsigned char)(u >> 24);
}

/* Each damaged file gives a clear error naming the file, the frame and the record or
 * field; md_dcd_next leaves the caller's frame untouched. */
static void dcd_bad_input(void) {
    md_system fr[3], got;
    md_dcd_reader r;
    md_traj t;
    unsigned char *good = NULL, *bad;
    long n;
    int ok, i;
    double c;
    const char *path = TMPDIR "/bad.dcd";
    make_tmpdir();
    memset(fr, 0, sizeof fr);
    MD_CHECK_OK(three_frames(fr));
    MD_CHECK_OK(md_dcd_write(TMPDIR "/good.dcd", fr, 3, NULL));
    n = file_bytes(TMPDIR "/good.dcd", &good);
    MD_CHECK(n == DCD_FRAME0 + 3 * DCD_FRAME_BYTES(37));
    bad = (unsigned char *)malloc((size_t)n);
    MD_CHECK(bad != NULL);
    memset(&got, 0, sizeof got);

    /* truncated last frame: 10 bytes short, inside record Z of frame 2 */
    MD_CHECK(write_bytes(path, good, n - 10));
    MD_CHECK_OK(md_dcd_open(&r, path));
    MD_CHECK_OK(md_dcd_next(&r, &got, &ok));
    MD_CHECK_OK(md_dcd_next(&r, &got, &ok));
    got.xyzq[0].x = 123.0f;
    MD_CHECK_ERROR(md_dcd_next(&r, &got, &ok), MD_ERR_PARSE, "bad.dcd: field Z: frame 2: truncated");
    MD_CHECK(got.xyzq[0].x == 123.0f);
    md_dcd_close(&r);
    /* truncated inside the cell record of frame 1 */
    MD_CHECK(write_bytes(path, good, DCD_FRAME0 + DCD_FRAME_BYTES(37) + 20));
    MD_CHECK_OK(md_dcd_open(&r, path));
    MD_CHECK_OK(md_dcd_next(&r, &got, &ok));
    MD_CHECK_ERROR(md_dcd_next(&r, &got, &ok), MD_ERR_PARSE, "field cell: frame 1: truncated");
    md_dcd_close(&r);

    /* wrong record marker: the X record of frame 1 claims 4 bytes too many */
    memcpy(bad, good, (size_t)n);
    set_le32(bad + DCD_FRAME0 + DCD_FRAME_BYTES(37) + 56, 4 * 37 + 4);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_OK(md_dcd_open(&r, path));
    MD_CHECK_OK(md_dcd_next(&r, &got, &ok));
    MD_CHECK_ERROR(md_dcd_next(&r, &got, &ok), MD_ERR_PARSE, "field X: frame 1: record X: length marker 152, expected 148");
    md_dcd_close(&r);
    /* wrong end marker of record Y, frame 0 */
    memcpy(bad, good, (size_t)n);
    set_le32(bad + DCD_FRAME0 + 56 + (8 + 4 * 37) + 4 + 4 * 37, 7);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_OK(md_dcd_open(&r, path));
    MD_CHECK_ERROR(md_dcd_next(&r, &got, &ok), MD_ERR_PARSE, "frame 0: record Y: end marker 7");
    md_dcd_close(&r);

    /* absurd NATOM: negative, and more atoms than the file could hold */
    memcpy(bad, good, (size_t)n);
    set_le32(bad + DCD_FRAME0 - 8, -5);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_ERROR(md_dcd_open(&r, path), MD_ERR_PARSE, "bad.dcd: field NATOM: header: -5 atoms is absurd");
    set_le32(bad + DCD_FRAME0 - 8, 50000000);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_ERROR(md_dcd_open(&r, path), MD_ERR_PARSE, "field NATOM: header: 50000000 atoms need");

    /* not a DCD at all, and a wrong magic */
    MD_CHECK(write_bytes(path, (const unsigned char *)"hello world, this is text", 25));
    MD_CHECK_ERROR(md_dcd_open(&r, path), MD_ERR_PARSE, "first length marker is not 84");
    memcpy(bad, good, (size_t)n);
    memcpy(bad + 4, "VELD", 4);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_ERROR(md_dcd_open(&r, path), MD_ERR_PARSE, "magic is not CORD");

    /* a triclinic cell (gamma = 60 degrees) is refused */
    memcpy(bad, good, (size_t)n);
    c = 60.0;
    memcpy(bad + DCD_FRAME0 + 4 + 8, &c, 8); /* this machine is little-endian: checked below */
    i = 1;
    MD_CHECK(*(unsigned char *)&i == 1);
    MD_CHECK(write_bytes(path, bad, n));
    MD_CHECK_OK(md_dcd_open(&r, path));
    MD_CHECK_ERROR(md_dcd_next(&r, &got, &ok), MD_ERR_UNSUPPORTED, "field cell: frame 0: angle gamma = 60");
    md_dcd_close(&r);

    MD_CHECK_ERROR(md_dcd_open(&r, TMPDIR "/does-not-exist.dcd"), MD_ERR_IO, "does-not-exist.dcd");
    MD_CHECK_ERROR(md_traj_open(&t, TMPDIR "/rt.trr"), MD_ERR_UNSUPPORTED, "unknown trajectory format");
    MD_CHECK_ERROR(md_dcd_write(TMPDIR "/no/such/dir/x.dcd", fr, 3, NULL), MD_ERR_IO, "cannot open");
    fr[1].n = 5;
    MD_CHECK_ERROR(md_dcd_write(path, fr, 3, NULL), MD_ERR_INVALID_ARGUMENT, "frame 1 has 5 atoms");
    fr[1].n = 37;
    md_system_free(&got);
    free(bad);
    free(good);
    for (i = 0; i < 3; i++) md_system_free(&fr[i]);
}

/* A whole trajectory through the RDF: DCD frames -> md_traj -> accumulate equals
 * accumulating the original frames (up to the nm/Angstrom roundings, so counts may
 * move by a few pairs across bin edges: 1% + 2). */
static void rdf_of_a_trajectory(void) {
    md_system fr[3], got;
    md_traj t;
    md_rdf a, b;
    int f, ok, k;
    make_tmpdir();
    memset(fr, 0, sizeof fr);
    memset(&got, 0, sizeof got);
    MD_CHECK_OK(three_frames(fr));
    MD_CHECK_OK(md_dcd_write(TMPDIR "/traj.dcd", fr, 3, NULL));
    MD_CHECK_OK(md_rdf_init(&a, 0.95, 19));
    MD_CHECK_OK(md_rdf_init(&b, 0.95, 19));
    for (f = 0; f < 3; f++) MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_SIMPLE, &a, fr[f].xyzq, 37, NULL, 37, NULL, 0, fr[f].box));
    MD_CHECK_OK(md_traj_open(&t, TMPDIR "/traj.dcd"));
    for (;;) {
        MD_CHECK_OK(md_traj_next(&t, &got, &ok));
        if (!ok) break;
        MD_CHECK_OK(md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &b, got.xyzq, got.n, NULL, got.n, NULL, 0, got.box));
    }
    md_traj_close(&t);
    MD_CHECK(b.frames == 3);
    MD_CHECK_CLOSE(b.sum_pair_density, a.sum_pair_density, 1e-12, 0);
    for (k = 0; k < 19; k++) MD_CHECK_CLOSE((double)b.counts[k], (double)a.counts[k], 0.01, 2);
    md_rdf_free(&a);
    md_rdf_free(&b);
    md_system_free(&got);
    for (f = 0; f < 3; f++) md_system_free(&fr[f]);
}

/* md_traj_open dispatches .xyz to the XYZ reader: two frames written with
 * md_write_xyz (positions printed with 6 decimals in Angstrom: +-5e-8 nm) read back
 * with their boxes, then the clean end. */
static void xyz_trajectory(void) {
    md_system fr[3], got;
    md_traj t;
    int f, i, ok;
    make_tmpdir();
    memset(fr, 0, sizeof fr);
    memset(&got, 0, sizeof got);
    MD_CHECK_OK(three_frames(fr));
    remove(TMPDIR "/traj.xyz");
    for (f = 0; f < 2; f++) MD_CHECK_OK(md_write_xyz(TMPDIR "/traj.xyz", &fr[f], "rdf test", 1));
    MD_CHECK_OK(md_traj_open(&t, TMPDIR "/traj.xyz"));
    MD_CHECK(t.format == MD_TRAJ_XYZ);
    for (f = 0; f < 2; f++) {
        MD_CHECK_OK(md_traj_next(&t, &got, &ok));
        MD_CHECK(ok == 1 && got.n == 37);
        for (i = 0; i < 37; i++) MD_CHECK_CLOSE(got.xyzq[i].y, fr[f].xyzq[i].y, 0, 1e-6);
        for (i = 0; i < 3; i++) MD_CHECK_CLOSE(got.box[i], fr[f].box[i], 1e-6, 0);
    }
    MD_CHECK_OK(md_traj_next(&t, &got, &ok));
    MD_CHECK(ok == 0);
    md_traj_close(&t);
    md_system_free(&got);
    for (f = 0; f < 3; f++) md_system_free(&fr[f]);
}

/* Files written by an independent writer (tests/fuzz/make_dcd_corpus.py, struct from the
 * format description): 3 atoms, 2 frames, atom i of frame f at x = 1.5 i + 0.25 f,
 * y = x + 1, z = x + 2 Angstrom; cell 20 x 21 x (22 + f) Angstrom, angles as cosines 0.
 * Exact in float, so compare to 1e-7 relative (the Angstrom -> nm float rounding). */
static void dcd_reads_independent_files(void) {
    static const char *const files[4] = {"le_cell", "be_cell", "le_nocell", "be_nocell"};
    int k, f, i, ok;
    for (k = 0; k < 4; k++) {
        char path[256];
        md_dcd_reader r;
        md_system s;
        memset(&s, 0, sizeof s);
        snprintf(path, sizeof path, "tests/fuzz/corpus/dcd/%s.dcd", files[k]);
        MD_CHECK_OK(md_dcd_open(&r, path));
        MD_CHECK(r.natoms == 3 && r.has_cell == (k < 2) && r.big_endian == (k % 2));
        for (f = 0; f < 2; f++) {
            MD_CHECK_OK(md_dcd_next(&r, &s, &ok));
            MD_CHECK(ok == 1);
            for (i = 0; i < 3; i++) {
                double x = 0.1 * (1.5 * i + 0.25 * f);
                MD_CHECK_CLOSE(s.xyzq[i].x, x, 1e-7, 1e-8);
                MD_CHECK_CLOSE(s.xyzq[i].y, x + 0.1, 1e-7, 1e-8);
                MD_CHECK_CLOSE(s.xyzq[i].z, x + 0.2, 1e-7, 1e-8);
            }
            MD_CHECK_CLOSE(s.box[0], k < 2 ? 2.0 : 0.0, 1e-12, 0);
            MD_CHECK_CLOSE(s.box[2], k < 2 ? 2.2 + 0.1 * f : 0.0, 1e-12, 0);
        }
        MD_CHECK_OK(md_dcd_next(&r, &s, &ok));
        MD_CHECK(ok == 0);
        md_dcd_close(&r);
        md_system_free(&s);
    }
}

/* The usage snippet quoted in tutorials/05_histograms.md, verbatim, on an FCC crystal
 * (md_build_fcc defaults: 864 argon atoms, lattice a = 0.5719 nm, box 3.43 nm); its
 * statuses are not checked in the snippet, so its results are: one frame, 300 bins, no
 * pair closer than the first shell (g = 0 in bin 0), n(rmax) equal to the number of
 * lattice neighbours within 1.5 nm counted by fcc_shell (shells at a/2 sqrt(m2) for
 * m2 = 2 .. 26; the next, m2 = 28, lies at 1.513 nm), and the CSV written (removed
 * first, so an earlier test's file cannot stand in for it). */
static void tutorial_snippet(void) {
    md_system sys;
    double g[300], n[300], want = 0.0;
    int m2;
    FILE *f;
    make_tmpdir();
    remove("build/test-tmp/rdf.csv");
    for (m2 = 2; 0.5 * 0.5719 * sqrt((double)m2) < 1.5; m2 += 2) want += fcc_shell(m2);
    MD_CHECK(m2 == 28);
    MD_CHECK_OK(md_build_fcc(&sys, NULL));
    {
    md_rdf r;
    md_rdf_init(&r, 1.5 /* rmax, nm */, 300 /* bins */);
    md_rdf_accumulate(MD_RDF_CPU_PRIVATE, &r, sys.xyzq, sys.n, NULL, sys.n, NULL, 0, sys.box);
    md_rdf_normalize(&r, g, n);           /* g(r) and n(r) per bin */
    md_rdf_write_csv("build/test-tmp/rdf.csv", &r);      /* r_nm,g,n; written to a .tmp file, then renamed */
    MD_CHECK(r.frames == 1 && r.nbins == 300);
    md_rdf_free(&r);
    }
    MD_CHECK(g[0] == 0.0);
    MD_CHECK_CLOSE(n[299], want, 1e-12, 0); /* exact integers over exact integers */
    MD_CHECK((f = fopen("build/test-tmp/rdf.csv", "r")) != NULL);
    fclose(f);
    md_system_free(&sys);
}

int main(void) {
    MD_RUN(cpu_rungs_equal_exactly);
    MD_RUN(same_and_ordered_normalize_alike);
    MD_RUN(ideal_gas_gives_one);
    MD_RUN(fcc_shells);
    MD_RUN(selections);
    MD_RUN(rdf_bad_input);
    MD_RUN(csv_is_written_whole);
    MD_RUN(dcd_round_trip);
    MD_RUN(dcd_reads_independent_files);
    MD_RUN(dcd_bad_input);
    MD_RUN(rdf_of_a_trajectory);
    MD_RUN(xyz_trajectory);
    MD_RUN(tutorial_snippet);
    return md_test_summary();
}
