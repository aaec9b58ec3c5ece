/* Tests of topologies and trajectories: the PSF reader (CHARMM standard, EXT, NAMD layouts),
 * DCD headers and cells as CHARMM, NAMD, OpenMM and MDAnalysis write them, names from a
 * topology on DCD frames (md_system_copy_topology, md_select), and frame reuse, which
 * md_dcd_next and md_xyz_next do alike.
 *
 * Fixtures: tests/data/ (MD_TEST_DATA; run from the repository root as tests/run.sh does),
 * written by tests/data/make_fixtures.py in each tool's layout; expected values are the
 * fixture's numbers. Bad input is checked through the file and the _mem reader, with the
 * output poisoned and compared byte for byte afterwards. Seed 31 (the XYZ frames). Files
 * are written in a mkdtemp directory removed at the end. */
#define _XOPEN_SOURCE 700 /* mkdtemp, rmdir */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"
#include <unistd.h>

#ifndef MD_TEST_DATA
#define MD_TEST_DATA "tests/data/"
#endif

static char tmpdir[64];

static const char *tmp_path(const char *name) {
    static char buf[4][128];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 128, "%s/%s", tmpdir, name);
    return p;
}

static int write_bytes(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* ---- PSF ---- */

/* The water-and-ions system of make_fixtures.py. */
static const char *const psf_name[8] = {"OH2", "H1", "H2", "OH2", "H1", "H2", "SOD", "CLA"};
static const char *const psf_res[8] = {"TIP3", "TIP3", "TIP3", "TIP3", "TIP3", "TIP3", "SOD", "CLA"};
static const char *const psf_element[8] = {"O", "H", "H", "O", "H", "H", "Na", "Cl"};
static const double psf_q[8] = {-0.834, 0.417, 0.417, -0.834, 0.417, 0.417, 1.0, -1.0};
static const double psf_m[8] = {15.9994, 1.008, 1.008, 15.9994, 1.008, 1.008, 22.9898, 35.45};
static const int psf_resid[8] = {1, 1, 1, 2, 2, 2, 1, 2};

/* Everything the three layouts share: names, residues, charges (e), masses (amu, float
 * rounding of the written value: rtol 1e-7), elements, no positions, and the four bonds
 * O-H of two waters (PSF IDs 1-2 1-3 4-5 4-6, stored 0-based). */
static int check_water_ions(const md_system *s, const char *what) {
    static const int bond[8] = {0, 1, 0, 2, 3, 4, 3, 5};
    int i;
    if (s->n != 8 || s->nbond != 4) {
        printf("  %s: %d atoms, %d bonds\n", what, s->n, s->nbond);
        return 0;
    }
    for (i = 0; i < 8; i++) {
        if (strcmp(s->resname[i].s, psf_res[i]) != 0 || strcmp(s->element[i].s, psf_element[i]) != 0 ||
            (s->resid[i] != psf_resid[i] && !s->icode[i]) || /* the NAMD file's 36A */ fabs(s->xyzq[i].w - psf_q[i]) > 1e-7 ||
            fabs(s->mass[i] - psf_m[i]) > 1e-7 * psf_m[i] || s->xyzq[i].x != 0.0f || s->xyzq[i].z != 0.0f) {
            printf("  %s: atom %d: %s %s %d q %g m %g element %s\n", what, i, s->name[i].s, s->resname[i].s,
                   s->resid[i], s->xyzq[i].w, s->mass[i], s->element[i].s);
            return 0;
        }
        if (i < 7 && strcmp(s->name[i].s, psf_name[i]) != 0) return 0;
    }
    for (i = 0; i < 8; i++)
        if (s->bond[i] != bond[i]) return 0;
    return 1;
}

/* CHARMM standard PSF: numeric (IAC) types, kept as text; types numbered by type name. */
static void psf_charmm_standard(void) {
    md_system s;
    MD_CHECK_OK(md_read_psf(MD_TEST_DATA "water_ions.psf", &s));
    MD_CHECK(check_water_ions(&s, "standard"));
    MD_CHECK(strcmp(s.name[7].s, "CLA") == 0 && strcmp(s.segid[0].s, "WAT") == 0 && strcmp(s.segid[7].s, "IONS") == 0);
    MD_CHECK(strcmp(s.type_name[0].s, "75") == 0 && strcmp(s.type_name[1].s, "4") == 0 && strcmp(s.type_name[7].s, "91") == 0);
    /* types 75 4 4 75 4 4 90 91 -> 0 1 1 0 1 1 2 3 */
    MD_CHECK(s.type[0] == 0 && s.type[1] == 1 && s.type[2] == 1 && s.type[3] == 0 && s.type[6] == 2 && s.type[7] == 3);
    MD_CHECK(s.icode[6] == 0 && s.chain[0] == 0 && s.box[0] == 0.0);
    md_system_free(&s);
}

/* CHARMM EXT PSF with X-PLOR type names, an 8-character segid and atom name. */
static void psf_charmm_ext(void) {
    md_system s;
    MD_CHECK_OK(md_read_psf(MD_TEST_DATA "water_ions_ext.psf", &s));
    MD_CHECK(check_water_ions(&s, "EXT"));
    MD_CHECK(strcmp(s.segid[0].s, "SOLVENT1") == 0 && strcmp(s.name[7].s, "CLALONG8") == 0);
    MD_CHECK(strcmp(s.type_name[0].s, "OT") == 0 && strcmp(s.type_name[6].s, "SOD") == 0);
    /* CLALONG8 in CLA: rule 1 does not apply (not the ion's name), rule 3 does: CL... is chlorine */
    MD_CHECK(strcmp(s.element[7].s, "Cl") == 0);
    md_system_free(&s);
}

/* NAMD space-separated PSF: a type too long for the fixed columns, an insertion code. */
static void psf_namd(void) {
    md_system s;
    MD_CHECK_OK(md_read_psf(MD_TEST_DATA "water_ions_namd.psf", &s));
    MD_CHECK(check_water_ions(&s, "NAMD"));
    MD_CHECK(strcmp(s.type_name[2].s, "CG2R61") == 0 && s.icode[6] == 'A' && s.resid[6] == 36);
    /* types OT HT CG2R61 OT HT CG2R61 SOD CLA -> 0 1 2 0 1 2 3 4 */
    MD_CHECK(s.type[2] == 2 && s.type[5] == 2 && s.type[7] == 4);
    md_system_free(&s);
    /* md_read_topology picks the PSF reader by the extension */
    MD_CHECK_OK(md_read_topology(MD_TEST_DATA "water_ions_namd.psf", &s));
    MD_CHECK(s.n == 8 && s.nbond == 4);
    md_system_free(&s);
}

/* A PSF whose fixed-column segid is blank reads as 8 fields; a file without bonds is fine. */
static void psf_blank_segid_and_no_bonds(void) {
    const char *text = "PSF\n\n       1 !NTITLE\n* blank segids\n\n       2 !NATOM\n"
                       "       1      1    ALA  N    NH1   -0.470000       14.0070           0\n"
                       "       2      1    ALA  CA   CT1    0.070000       12.0110           0\n";
    md_system s;
    MD_CHECK_OK(md_read_psf_mem(text, strlen(text), "blank.psf", &s));
    MD_CHECK(s.n == 2 && s.nbond == 0 && s.bond == NULL && s.segid[0].s[0] == '\0');
    MD_CHECK(strcmp(s.name[1].s, "CA") == 0 && strcmp(s.type_name[1].s, "CT1") == 0 && s.resid[1] == 1);
    MD_CHECK_CLOSE(s.xyzq[0].w, -0.47, 1e-7, 0);
    md_system_free(&s);
}

static void bad_psf(const char *name, const char *text, md_status want, const char *msg) {
    md_system s, s0;
    memset(&s, 0xA5, sizeof s);
    s0 = s;
    MD_CHECKF(write_bytes(tmp_path(name), text, strlen(text)), "cannot write %s", name);
    MD_CHECK_ERROR(md_read_psf(tmp_path(name), &s), want, msg);
    MD_CHECK_ERROR(md_read_psf_mem(text, strlen(text), name, &s), want, msg);
    MD_CHECK(memcmp(&s, &s0, sizeof s) == 0);
}

#define BAD_PSF(name, text, want, msg)                                                                        \
    do {                                                                                                      \
        bad_psf(name, text, want, msg);                                                                       \
        if (md_test__failed_now) {                                                                            \
            printf("  (case %s)\n", name);                                                                    \
            return;                                                                                           \
        }                                                                                                     \
    } while (0)

#define PSF_HEAD "PSF EXT\n\n       1 !NTITLE\n* bad\n\n"
#define PSF_ATOM1 "       1 A    1    ALA  N    NH1   -0.47   14.007   0\n"
#define PSF_ATOM2 "       2 A    1    ALA  CA   CT1    0.07   12.011   0\n"

static void psf_bad_input(void) {
    md_system s;
    MD_CHECK_ERROR(md_read_psf(tmp_path("missing.psf"), &s), MD_ERR_IO, "missing.psf: field path: cannot open");
    BAD_PSF("empty.psf", "", MD_ERR_PARSE, "empty.psf:1: field header: missing: empty file");
    BAD_PSF("nopsf.psf", "REMARK\n", MD_ERR_PARSE, "nopsf.psf:1: field header: the first line must start with PSF");
    BAD_PSF("notitle.psf", "PSF\n", MD_ERR_PARSE, "notitle.psf:2: field NTITLE: missing");
    BAD_PSF("title.psf", "PSF\n\n       3 !NTITLE\n* one\n", MD_ERR_PARSE,
            "title.psf:5: field NTITLE: the file ends inside the title (2 lines missing)");
    BAD_PSF("nonatom.psf", PSF_HEAD "       2 !NBOND: bonds\n", MD_ERR_PARSE,
            "nonatom.psf:6: field NATOM: missing: expected the section header 'N !NATOM'");
    BAD_PSF("zero.psf", PSF_HEAD "       0 !NATOM\n", MD_ERR_RANGE, "zero.psf:6: field NATOM: a PSF needs at least one atom");
    BAD_PSF("absurd.psf", PSF_HEAD "  999999 !NATOM\n" PSF_ATOM1, MD_ERR_RANGE,
            "absurd.psf:6: field NATOM: 999999 atoms cannot fit");
    BAD_PSF("few.psf", PSF_HEAD "       3 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n", MD_ERR_PARSE,
            "few.psf:9: field ID: missing");
    BAD_PSF("short.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47\n", MD_ERR_PARSE,
            "short.psf:7: field mass: missing");
    BAD_PSF("order.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM2 PSF_ATOM1, MD_ERR_PARSE,
            "order.psf:7: field ID: atom IDs must run 1, 2, ..., NATOM: expected 1, got 2");
    BAD_PSF("charge.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.4.7   14.007   0\n",
            MD_ERR_PARSE, "charge.psf:7: field charge: not a number ('-0.4.7')");
    BAD_PSF("mass.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47   -14.007   0\n",
            MD_ERR_RANGE, "mass.psf:7: field mass: is negative");
    BAD_PSF("nanq.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   nan   14.007   0\n",
            MD_ERR_RANGE, "nanq.psf:7: field charge: is NaN");
    BAD_PSF("resid.psf", PSF_HEAD "       1 !NATOM\n       1 A    1AB  ALA  N    NH1   -0.47   14.007   0\n",
            MD_ERR_PARSE, "resid.psf:7: field resid");
    BAD_PSF("long.psf", PSF_HEAD "       1 !NATOM\n       1 A 1 ALA N TYPENAMEOFSIXTEEN -0.47 14.007 0\n",
            MD_ERR_RANGE, "long.psf:7: field type: 'TYPENAMEOFSIXTEEN' is longer than 15 characters");
    BAD_PSF("cutatom.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47   14.007   0",
            MD_ERR_PARSE, "cutatom.psf:7: field IMOVE: the file ends inside this line");
    BAD_PSF("nbond.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NTHETA: angles\n", MD_ERR_PARSE,
            "nbond.psf:10: field NBOND: missing: expected the section header 'N !NBOND'");
    BAD_PSF("bondrange.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       3\n",
            MD_ERR_RANGE, "bondrange.psf:11: field NBOND: '3' is out of range 1..2");
    BAD_PSF("bondself.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       2       2\n",
            MD_ERR_PARSE, "bondself.psf:11: field NBOND: atom 2 is bonded to itself");
    BAD_PSF("bondshort.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       2 !NBOND: bonds\n       1       2\n\n",
            MD_ERR_PARSE, "bondshort.psf:12: field NBOND: the section ends after 2 of the 4 atom IDs of 2 bonds");
    BAD_PSF("bondlong.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       2       2\n",
            MD_ERR_PARSE, "bondlong.psf:11: field NBOND: more atom IDs than the 1 bonds declared");
    BAD_PSF("bondcut.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       2",
            MD_ERR_PARSE, "bondcut.psf:11: field NBOND: the file ends inside this line");
    BAD_PSF("nul.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N\0   NH1   -0.47   14.007   0\n", MD_ERR_PARSE,
            "nul.psf:7:");
}

/* ---- DCD ---- */

/* A NAMD-style header: NSAVC 100 steps of DELTA 2 fs (stored as a float in AKMA units, so
 * within float rounding: rtol 1e-6) -> 0.2 ps between frames, not DELTA's 0.002. */
static void dcd_time_is_delta_times_nsavc(void) {
    md_dcd_reader r;
    md_system f;
    int got;
    MD_CHECK_OK(md_dcd_open(&r, MD_TEST_DATA "water_ions.dcd"));
    MD_CHECK(r.natoms == 8 && r.nframes_header == 2 && r.nsavc == 100 && r.has_cell == 1);
    MD_CHECK_CLOSE(r.delta_ps, 0.002, 1e-6, 0);
    MD_CHECK_CLOSE(r.timestep_ps, 0.2, 1e-6, 0);
    memset(&f, 0, sizeof f);
    MD_CHECK_OK(md_dcd_next(&r, &f, &got));
    MD_CHECK(got == 1 && f.n == 8);
    MD_CHECK_CLOSE(f.xyzq[1].x, 0.1957, 1e-6, 0);
    MD_CHECK_CLOSE(f.box[2], 2.2, 1e-12, 0);
    md_dcd_close(&r);
    md_system_free(&f);
}

/* gamma = 60 degrees as cosines (OpenMM, VMD) and as degrees (MDAnalysis); a truncated
 * octahedron (109.4712 degrees) as CHARMM's shape matrix: each message names the angle in
 * degrees and the layout it was read in. The frame is left untouched. */
static void dcd_triclinic_cell_named_in_degrees(void) {
    static const char *const file[3] = {"triclinic_cosines.dcd", "triclinic_degrees.dcd", "octahedron_charmm.dcd"};
    static const char *const msg[3] = {
        "field cell: frame 0: angle gamma = 60 degrees (alpha 90, beta 90, gamma 60; the cell record read as cosines)",
        "field cell: frame 0: angle gamma = 60 degrees (alpha 90, beta 90, gamma 60; the cell record read as degrees)",
        "field cell: frame 0: angle alpha = 109.471 degrees (alpha 109.471, beta 109.471, gamma 109.471; the cell "
        "record read as a CHARMM shape matrix)"};
    char path[256];
    md_dcd_reader r;
    md_system f, f0;
    int got, k;
    for (k = 0; k < 3; k++) {
        snprintf(path, sizeof path, MD_TEST_DATA "%s", file[k]);
        memset(&f, 0x5A, sizeof f);
        f0 = f;
        MD_CHECK_OK(md_dcd_open(&r, path));
        MD_CHECK_ERROR(md_dcd_next(&r, &f, &got), MD_ERR_UNSUPPORTED, msg[k]);
        MD_CHECK(got == 0 && memcmp(&f, &f0, sizeof f) == 0);
        md_dcd_close(&r);
    }
}

/* ---- topologies on trajectories ---- */

/* Names from a PSF on DCD frames: copy the topology onto the first frame, select by name;
 * later frames keep the names and charges and get new positions. */
static void select_by_name_on_dcd_frames(void) {
    md_system top, frame;
    md_traj t;
    int got, *idx = NULL, n = 0, i;
    float x0;
    MD_CHECK_OK(md_read_topology(MD_TEST_DATA "water_ions.psf", &top));
    MD_CHECK_OK(md_traj_open(&t, MD_TEST_DATA "water_ions.dcd"));
    memset(&frame, 0, sizeof frame);
    MD_CHECK_OK(md_traj_next(&t, &frame, &got));
    MD_CHECK(got == 1);
    MD_CHECK_ERROR(md_select(&frame, "name OH2", &idx, &n), MD_ERR_INVALID_ARGUMENT, "matches no atom");
    MD_CHECK_OK(md_system_copy_topology(&frame, &top));
    MD_CHECK_OK(md_select(&frame, "name OH2", &idx, &n));
    MD_CHECK(n == 2 && idx[0] == 0 && idx[1] == 3);
    md_free(idx);
    x0 = frame.xyzq[0].x;
    MD_CHECK_CLOSE(x0, 0.1, 1e-6, 0);
    MD_CHECK_OK(md_traj_next(&t, &frame, &got));
    MD_CHECK(got == 1);
    MD_CHECK_CLOSE(frame.xyzq[0].x, 0.15, 1e-6, 0); /* frame 2: x + 0.5 Angstrom */
    MD_CHECK_CLOSE(frame.box[0], 2.05, 1e-12, 0);
    MD_CHECK_OK(md_select(&frame, "name CLA", &idx, &n));
    MD_CHECK(n == 1 && idx[0] == 7);
    md_free(idx);
    for (i = 0; i < 8; i++) MD_CHECK(frame.xyzq[i].w == top.xyzq[i].w && frame.mass[i] == top.mass[i]);
    MD_CHECK(frame.nbond == 4 && frame.bond != top.bond && frame.bond[7] == 5);
    MD_CHECK_OK(md_traj_next(&t, &frame, &got));
    MD_CHECK(got == 0);
    md_traj_close(&t);
    md_system_free(&frame);
    md_system_free(&top);
}

static void copy_topology_checks_counts(void) {
    md_system a, b, b0;
    MD_CHECK_OK(md_system_alloc(&a, 3));
    MD_CHECK_OK(md_system_alloc(&b, 4));
    b0 = b;
    MD_CHECK_ERROR(md_system_copy_topology(&b, &a), MD_ERR_INVALID_ARGUMENT, "field n: the topology has 3 atoms, the frame 4");
    MD_CHECK(memcmp(&b, &b0, sizeof b) == 0);
    MD_CHECK_ERROR(md_system_copy_topology(NULL, &a), MD_ERR_INVALID_ARGUMENT, "md_system_copy_topology");
    md_system_free(&a);
    md_system_free(&b);
    MD_CHECK_ERROR(md_read_topology(MD_TEST_DATA "water_ions.gro", &a), MD_ERR_UNSUPPORTED, "unknown topology format");
}

/* md_xyz_next and md_dcd_next reuse a frame the same way: same atom count -> positions, box and
 * cell change, everything else (names, charges, velocities, bonds) stays; a different count ->
 * a new frame. Positions are checked against what was written (XYZ %.6f Angstrom: 1e-7 nm;
 * DCD float Angstrom: rtol 1e-6). */
static void xyz_and_dcd_reuse_frames_alike(void) {
    md_system fr[3], frame;
    md_xyz_reader r;
    md_dcd_reader d;
    md_rng rng;
    double box[3] = {2.0, 2.5, 3.0};
    const char *xyz = tmp_path("reuse.xyz"), *dcd = tmp_path("reuse.dcd");
    int k, i, got, kind;
    md_rng_seed(&rng, 31);
    for (k = 0; k < 3; k++) {
        MD_CHECK_OK(md_build_random_charges(&fr[k], k < 2 ? 6 : 4, box, 1.0, 31 + (uint64_t)k));
        for (i = 0; i < fr[k].n; i++) snprintf(fr[k].name[i].s, sizeof fr[k].name[i].s, "%s", i % 2 ? "H" : "O");
        fr[k].box[0] += 0.25 * k;
        MD_CHECK_OK(md_write_xyz(xyz, &fr[k], NULL, k > 0));
    }
    MD_CHECK_OK(md_dcd_write(dcd, fr, 2, NULL));
    for (kind = 0; kind < 2; kind++) {
        memset(&frame, 0, sizeof frame);
        if (kind == 0) MD_CHECK_OK(md_xyz_open(&r, xyz));
        else MD_CHECK_OK(md_dcd_open(&d, dcd));
        MD_CHECK_OK(kind == 0 ? md_xyz_next(&r, &frame, &got) : md_dcd_next(&d, &frame, &got));
        MD_CHECK(got == 1 && frame.n == 6);
        /* the caller's own fields on the frame */
        snprintf(frame.name[0].s, sizeof frame.name[0].s, "OW");
        frame.xyzq[0].w = -0.834f;
        frame.vel[1].y = 1.5f;
        frame.cell[3] = 60.0;
        MD_CHECK_OK(kind == 0 ? md_xyz_next(&r, &frame, &got) : md_dcd_next(&d, &frame, &got));
        MD_CHECK(got == 1 && frame.n == 6);
        MD_CHECK(strcmp(frame.name[0].s, "OW") == 0 && frame.xyzq[0].w == -0.834f && frame.vel[1].y == 1.5f);
        MD_CHECK(frame.cell[3] == 0.0);
        for (i = 0; i < 6; i++) {
            MD_CHECK_CLOSE(frame.xyzq[i].x, fr[1].xyzq[i].x, 1e-6, 1e-7);
            MD_CHECK_CLOSE(frame.xyzq[i].z, fr[1].xyzq[i].z, 1e-6, 1e-7);
        }
        MD_CHECK_CLOSE(frame.box[0], fr[1].box[0], 1e-7, 0);
        if (kind == 0) { /* the third XYZ frame has 4 atoms: a new frame with the file's names */
            MD_CHECK_OK(md_xyz_next(&r, &frame, &got));
            MD_CHECK(got == 1 && frame.n == 4 && strcmp(frame.name[0].s, "O") == 0 && frame.xyzq[0].w == 0.0f);
            MD_CHECK(strcmp(frame.element[1].s, "H") == 0 && frame.mass[1] == 1.008f);
            md_xyz_close(&r);
        } else {
            md_dcd_close(&d);
        }
        md_system_free(&frame);
    }
    for (k = 0; k < 3; k++) md_system_free(&fr[k]);
    remove(xyz);
    remove(dcd);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/md_test_topology_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL test_topology: cannot create a temp directory\n");
        return 1;
    }
    MD_RUN(psf_charmm_standard);
    MD_RUN(psf_charmm_ext);
    MD_RUN(psf_namd);
    MD_RUN(psf_blank_segid_and_no_bonds);
    MD_RUN(psf_bad_input);
    MD_RUN(dcd_time_is_delta_times_nsavc);
    MD_RUN(dcd_triclinic_cell_named_in_degrees);
    MD_RUN(select_by_name_on_dcd_frames);
    MD_RUN(copy_topology_checks_counts);
    MD_RUN(xyz_and_dcd_reuse_frames_alike);
    {
        static const char *const made[] = {"missing.psf", "empty.psf", "nopsf.psf", "notitle.psf", "title.psf",
                                           "nonatom.psf", "zero.psf", "absurd.psf", "few.psf", "short.psf",
                                           "order.psf", "charge.psf", "mass.psf", "nanq.psf", "resid.psf",
                                           "long.psf", "cutatom.psf", "nbond.psf", "bondrange.psf", "bondself.psf",
                                           "bondshort.psf", "bondlong.psf", "bondcut.psf", "nul.psf"};
        size_t k;
        for (k = 0; k < sizeof made / sizeof made[0]; k++) remove(tmp_path(made[k]));
    }
    if (rmdir(tmpdir) != 0) printf("FAIL test_topology: temp directory %s not empty\n", tmpdir);
    return md_test_summary();
}
