/* Tests of md.h's file I/O: PQR, PDB, XYZ, PSF and OpenDX readers and writers, DCD headers
 * and cells as CHARMM, NAMD, OpenMM and MDAnalysis write them, names from a topology on
 * DCD frames (md_system_copy_topology, md_select), and frame reuse, which md_dcd_next and
 * md_xyz_next do alike. Fixtures from real tools' layouts are read from tests/data/
 * (MD_TEST_DATA; run from the repository root, as tests/run.sh does), written by
 * tests/data/make_fixtures.py; expected values are the fixture's own numbers.
 *
 * Every bad-input case is checked twice (file reader and _mem reader): the
 * status, a message naming "file:line: field F", and the output left
 * untouched (byte for byte). Round trips write a random system and read it
 * back. Seeds used: 11 (XYZ), 12 (PDB), 13 (DX), 14 (multi-frame XYZ), 31 (frame reuse).
 * Files are written in a mkdtemp directory that is removed at the end. */
#define _XOPEN_SOURCE 700 /* mkdtemp, rmdir */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"
#include <unistd.h>

static char tmpdir[64];
static char created[256][128];
static int ncreated;

/* Path of a file in the temp dir (remembered for clean-up). */
static const char *tmp_path(const char *name) {
    static char buf[4][128];
    static int k;
    char *p = buf[k++ % 4];
    int i;
    snprintf(p, 128, "%s/%s", tmpdir, name);
    for (i = 0; i < ncreated; i++)
        if (strcmp(created[i], p) == 0) return p;
    if (ncreated < 256) snprintf(created[ncreated++], 128, "%s", p);
    return p;
}

static int write_bytes(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

enum { PQR, PDB, XYZ, PSF, DX };

static md_status read_file(int fmt, const char *path, md_system *s, md_grid *g) {
    switch (fmt) {
    case PQR: return md_read_pqr(path, s);
    case PDB: return md_read_pdb(path, s);
    case XYZ: return md_read_xyz(path, s);
    case PSF: return md_read_psf(path, s);
    default: return md_read_dx(path, g);
    }
}

static md_status read_mem(int fmt, const char *d, size_t n, const char *name, md_system *s, md_grid *g) {
    switch (fmt) {
    case PQR: return md_read_pqr_mem(d, n, name, s);
    case PDB: return md_read_pdb_mem(d, n, name, s);
    case XYZ: return md_read_xyz_mem(d, n, name, s);
    case PSF: return md_read_psf_mem(d, n, name, s);
    default: return md_read_dx_mem(d, n, name, g);
    }
}

/* Bad input `len` bytes of `data` saved as `name`: both readers must return `want` with a message
 * containing `text` and leave the (poisoned) output untouched. */
static void bad_input(int fmt, const char *name, const char *data, size_t len, md_status want,
                      const char *text) {
    md_system s, s0;
    md_grid g, g0;
    const char *path = tmp_path(name);
    memset(&s, 0xA5, sizeof s);
    memset(&g, 0xA5, sizeof g);
    s0 = s;
    g0 = g;
    MD_CHECKF(write_bytes(path, data, len), "cannot write %s", path);
    MD_CHECK_ERROR(read_file(fmt, path, &s, &g), want, text);
    MD_CHECK_ERROR(read_mem(fmt, data, len, name, &s, &g), want, text);
    MD_CHECK(memcmp(&s, &s0, sizeof s) == 0);
    MD_CHECK(memcmp(&g, &g0, sizeof g) == 0);
}

#define BAD(fmt, name, text_literal, want, msg)                                                              \
    do {                                                                                                     \
        bad_input(fmt, name, text_literal, sizeof(text_literal) - 1, want, msg);                             \
        if (md_test__failed_now) {                                                                           \
            printf("  (case %s)\n", name);                                                                   \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)

/* ---- reading valid files; expected values are the file's numbers x 0.1 (Angstrom -> nm) and
 * the IUPAC masses of md_element_mass's table ---- */

static void pqr_reads_with_and_without_chain(void) {
    const char *text = "REMARK   1 PQR file\n"
                       "ATOM      1  N   ALA A   1      12.500  -3.250   0.125  -0.3000 1.8240\r\n"
                       "ATOM      2  CA  ALA     1       1.000   2.000   3.000   0.1000 1.9080\n"
                       "HETATM    3  NA  NA      2       4.000   5.000   6.000   1.0000 1.8680\n"
                       "ATOM      4  CA  ALA A   1       7e0     8       9.      0.2    2\n"
                       "TER\nEND\n";
    md_system s;
    MD_CHECK_OK(md_read_pqr_mem(text, strlen(text), "ok.pqr", &s));
    MD_CHECK(s.n == 4);
    MD_CHECK_CLOSE(s.xyzq[0].x, 1.25, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[0].y, -0.325, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[0].z, 0.0125, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[0].w, -0.3, 1e-7, 0);
    MD_CHECK_CLOSE(s.radius[0], 0.1824, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[3].x, 0.7, 1e-7, 0);
    MD_CHECK_CLOSE(s.radius[3], 0.2, 1e-7, 0);
    MD_CHECK(strcmp(s.name[1].s, "CA") == 0 && strcmp(s.resname[1].s, "ALA") == 0 && s.resid[2] == 2);
    /* types in order of first appearance: N=0, CA=1, NA=2, CA=1 */
    MD_CHECK(s.type[0] == 0 && s.type[1] == 1 && s.type[2] == 2 && s.type[3] == 1);
    /* CA in ALA is carbon; NA in residue NA is sodium */
    MD_CHECK(s.mass[0] == 14.007f && s.mass[1] == 12.011f && s.mass[2] == 22.990f);
    MD_CHECK(s.box[0] == 0.0 && s.box[1] == 0.0 && s.box[2] == 0.0);
    md_system_free(&s);
}

/* PDB2PQR writes fixed columns: for residues 1000-9999 the chain letter touches the number. */
static void pqr_reads_chain_run_into_resseq(void) {
    const char *text = "ATOM  17001  OH2 HOH W1000      -1.250   2.500   3.000 -0.8340 1.7682\n"
                       "ATOM  17002  H1  HOH W-999       0.000   0.000   1.000  0.4170 0.0000\n"
                       "ATOM  17003  H2  HOH Q9        0.000   0.000   1.000  0.4170 0.0000\n";
    md_system s;
    MD_CHECK_OK(md_read_pqr_mem(text, strlen(text), "merged.pqr", &s));
    MD_CHECK(s.n == 3 && s.resid[0] == 1000 && s.resid[1] == -999 && s.resid[2] == 9);
    MD_CHECK_CLOSE(s.xyzq[0].x, -0.125, 1e-7, 0);
    md_system_free(&s);
    /* a resSeq that is a word, not chain + number, is still an error naming the field */
    text = "ATOM 1 N ALA WX1 1 2 3 0.1 1\n";
    MD_CHECK_ERROR(md_read_pqr_mem(text, strlen(text), "bad.pqr", &s), MD_ERR_PARSE, "bad.pqr:1: field resSeq");
}

static void pdb_reads_columns_box_charge_element(void) {
    /*        1         2         3         4         5         6         7         8
     * 345678901234567890123456789012345678901234567890123456789012345678901234567890 */
    const char *text = "HEADER    TEST\n"
                       "CRYST1   30.000   40.000   50.000  90.00  90.00  90.00 P 1           1\n"
                       "ATOM      1  N   GLY A   1      11.104   6.134  -6.504  1.00  0.00           N\n"
                       "ATOM      2 CA   GLY A   1      11.639   6.071  -5.147  1.00  0.00          CA2+\n"
                       "HETATM    3 CL   CL  B 999       1.000   2.000   3.000  1.00  0.00\n"
                       "ATOM      4 1HB  GLY A   2       0.000   0.000 999.999\n"
                       "ENDMDL\n"
                       "ATOM      5  N   GLY A   1       1.0     1.0     1.0\n";
    md_system s;
    MD_CHECK_OK(md_read_pdb_mem(text, strlen(text), "ok.pdb", &s));
    MD_CHECK(s.n == 4); /* reading stops at ENDMDL */
    MD_CHECK_CLOSE(s.box[0], 3.0, 1e-15, 0);
    MD_CHECK_CLOSE(s.box[2], 5.0, 1e-15, 0);
    MD_CHECK_CLOSE(s.xyzq[0].x, 1.1104, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[1].z, -0.5147, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[3].z, 99.9999, 1e-7, 0);
    MD_CHECK(s.xyzq[0].w == 0.0f && s.xyzq[1].w == 2.0f);
    MD_CHECK(strcmp(s.name[1].s, "CA") == 0 && strcmp(s.resname[2].s, "CL") == 0);
    MD_CHECK(s.resid[0] == 1 && s.resid[2] == 999 && s.resid[3] == 2);
    /* element column: CA -> calcium; CL in CL -> chlorine; 1HB -> H */
    MD_CHECK(s.mass[0] == 14.007f && s.mass[1] == 40.078f && s.mass[2] == 35.45f && s.mass[3] == 1.008f);
    MD_CHECK(s.type[0] == 0 && s.type[1] == 1 && s.type[2] == 2 && s.type[3] == 3);
    md_system_free(&s);
}

static void pdb_placeholder_cryst1_means_no_box(void) {
    const char *text = "CRYST1    1.000    1.000    1.000  90.00  90.00  90.00 P 1           1\n"
                       "ATOM      1  O   HOH     1       1.000   2.000   3.000\n";
    md_system s;
    MD_CHECK_OK(md_read_pdb_mem(text, strlen(text), "nobox.pdb", &s));
    MD_CHECK(s.box[0] == 0.0 && s.box[1] == 0.0 && s.box[2] == 0.0 && s.mass[0] == 15.999f);
    md_system_free(&s);
}

static void xyz_reads_lattice_and_extra_columns(void) {
    const char *text = "\n  3  \n"
                       "Lattice=\"10.0 0 0 0 20.0 0 0 0 30.5\" Properties=species:S:1:pos:R:3:forces:R:3\n"
                       "O  1.5 -2.5 3.25 9 9 9\n"
                       "H\t0\t0\t1e-3\n"
                       "Zn 1 1 1\n"
                       "2\nsecond frame is not read\nC 0 0 0\nC 0 0 0\n";
    md_system s;
    MD_CHECK_OK(md_read_xyz_mem(text, strlen(text), "ok.xyz", &s));
    MD_CHECK(s.n == 3);
    MD_CHECK_CLOSE(s.box[0], 1.0, 1e-15, 0);
    MD_CHECK_CLOSE(s.box[2], 3.05, 1e-15, 0);
    MD_CHECK_CLOSE(s.xyzq[0].y, -0.25, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[1].z, 1e-4, 1e-7, 0);
    MD_CHECK(s.mass[0] == 15.999f && s.mass[1] == 1.008f && s.mass[2] == 65.38f);
    MD_CHECK(strcmp(s.name[2].s, "Zn") == 0 && s.type[2] == 2 && s.xyzq[0].w == 0.0f);
    md_system_free(&s);
}

static void element_masses(void) {
    MD_CHECK(md_element_mass("Cl") == 35.45f && md_element_mass("CL") == 35.45f);
    MD_CHECK(md_element_mass("Ar") == 39.948f && md_element_mass("k") == 39.098f);
    MD_CHECK(md_element_mass("Xx") == 0.0f && md_element_mass("") == 0.0f && md_element_mass(NULL) == 0.0f);
}

/* ---- committed fixtures (tests/data/, written by tests/data/make_fixtures.py in the layouts of
 * the tools named there); expected values are the fixture's own numbers ---- */

#ifndef MD_TEST_DATA
#define MD_TEST_DATA "tests/data/"
#endif

/* Read a fixture into memory (NUL-terminated) for the _mem readers. */
static char *fixture_text(const char *name, size_t *len) {
    char path[256];
    FILE *f;
    char *buf;
    long n;
    snprintf(path, sizeof path, MD_TEST_DATA "%s", name);
    if (!(f = fopen(path, "rb"))) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (char *)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* PDB2PQR writes the insertion code right after resSeq ("36A"), and runs the chain letter into
 * 4-digit residue numbers ("W1000"). */
static void pqr_pdb2pqr_insertion_codes(void) {
    static const char chain[8] = {'A', 'A', 'A', 'A', 'A', 'W', 'I', 'I'}, icode[8] = {0, 0, 'A', 'A', 'B', 0, 0, 0};
    static const int resid[8] = {35, 35, 36, 36, 36, 1000, 1001, 1002};
    static const char *const element[8] = {"N", "C", "N", "C", "N", "O", "Na", "Cl"};
    md_system s, m;
    size_t len;
    char *text = fixture_text("pdb2pqr_icode.pqr", &len);
    int i;
    MD_CHECK(text != NULL);
    MD_CHECK_OK(md_read_pqr(MD_TEST_DATA "pdb2pqr_icode.pqr", &s));
    MD_CHECK_OK(md_read_pqr_mem(text, len, "pdb2pqr_icode.pqr", &m));
    free(text);
    MD_CHECK(s.n == 8 && m.n == 8);
    for (i = 0; i < 8; i++) {
        MD_CHECKF(s.chain[i] == chain[i] && s.icode[i] == icode[i] && s.resid[i] == resid[i],
                  "atom %d: chain %c icode %c resid %d", i, s.chain[i], s.icode[i], s.resid[i]);
        MD_CHECKF(strcmp(s.element[i].s, element[i]) == 0, "atom %d: element %s", i, s.element[i].s);
        MD_CHECK(m.icode[i] == s.icode[i] && m.chain[i] == s.chain[i] && m.xyzq[i].w == s.xyzq[i].w);
    }
    MD_CHECK_CLOSE(s.xyzq[4].y, -1.0, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[4].w, -0.4157, 1e-7, 0);
    MD_CHECK_CLOSE(s.radius[7], 0.247, 1e-7, 0);
    MD_CHECK(s.mass[6] == 22.990f && s.mass[7] == 35.45f); /* NA in NA, CL in CL: the ions */
    md_system_free(&s);
    md_system_free(&m);
    MD_CHECK_OK(md_read_pqr(MD_TEST_DATA "pdb2pqr_nochain.pqr", &s));
    MD_CHECK(s.n == 5 && s.chain[0] == 0 && s.chain[4] == 0);
    MD_CHECK(s.resid[2] == 36 && s.icode[2] == 'A' && s.icode[4] == 'B' && s.icode[1] == 0);
    md_system_free(&s);
}

/* An RCSB-style PDB: alternate locations, insertion codes, chains, the element column, a
 * formal charge "0" as older writers put it, two models with CONECT records after them. */
static void pdb_altloc_icode_charge0_conect(void) {
    static const char altloc[6] = {0, 'A', 'B', 0, 0, 0}, icode[6] = {0, 0, 0, 'A', 'B', 0};
    static const char chain[6] = {'A', 'A', 'A', 'A', 'A', 'B'};
    static const float q[6] = {0, 0, 0, 0, -1, 2};
    static const int resid[6] = {35, 35, 35, 36, 36, 401};
    md_system s;
    int i;
    MD_CHECK_OK(md_read_pdb(MD_TEST_DATA "altloc_icode.pdb", &s));
    MD_CHECK(s.n == 6); /* the first model */
    for (i = 0; i < 6; i++) {
        MD_CHECKF(s.altloc[i] == altloc[i] && s.icode[i] == icode[i] && s.chain[i] == chain[i],
                  "atom %d: altloc %d icode %d chain %d", i, s.altloc[i], s.icode[i], s.chain[i]);
        MD_CHECKF(s.xyzq[i].w == q[i] && s.resid[i] == resid[i], "atom %d: q %g resid %d", i, s.xyzq[i].w,
                  s.resid[i]);
        MD_CHECK_CLOSE(s.xyzq[i].x, 0.1 * (i + 1.125), 1e-7, 0); /* model 1, not model 2's 9.000 */
    }
    MD_CHECK(strcmp(s.element[5].s, "Zn") == 0 && s.mass[5] == 65.38f && strcmp(s.name[5].s, "ZN") == 0);
    MD_CHECK(strcmp(s.element[1].s, "C") == 0 && s.mass[1] == 12.011f);
    /* CONECT 1-2 1-3, 2-1 (the same bond), 5-6: three bonds, 0-based, sorted */
    MD_CHECK(s.nbond == 3 && s.bond[0] == 0 && s.bond[1] == 1 && s.bond[2] == 0 && s.bond[3] == 2 &&
             s.bond[4] == 4 && s.bond[5] == 5);
    MD_CHECK_CLOSE(s.box[2], 6.0, 1e-15, 0);
    md_system_free(&s);
}

/* CHARMM-GUI-style PDB without element columns: ions get the ion's mass, not the first letter's;
 * the heme's FE is iron and its NA nitrogen; a protein CA is carbon. */
static void pdb_ion_masses_without_element_column(void) {
    static const char *const element[14] = {"N", "C", "Fe", "N", "Na", "Cl", "K", "Ca", "Zn", "Mg", "Na", "Cl", "K", "Cl"};
    static const float mass[14] = {14.007f, 12.011f, 55.845f, 14.007f, 22.990f, 35.45f, 39.098f,
                                   40.078f, 65.38f,  24.305f, 22.990f, 35.45f,  39.098f, 35.45f};
    md_system s;
    int i;
    MD_CHECK_OK(md_read_pdb(MD_TEST_DATA "charmm_ions.pdb", &s));
    MD_CHECK(s.n == 14);
    for (i = 0; i < 14; i++)
        MD_CHECKF(strcmp(s.element[i].s, element[i]) == 0 && s.mass[i] == mass[i], "atom %d (%s in %s): %s %g", i,
                  s.name[i].s, s.resname[i].s, s.element[i].s, s.mass[i]);
    MD_CHECK(strcmp(s.segid[0].s, "PROA") == 0 && strcmp(s.segid[4].s, "IONS") == 0 && s.chain[4] == 0);
    md_system_free(&s);
}

/* The guessing rules one by one (md_guess_element's documentation). */
static void guess_element_rules(void) {
    MD_CHECK(strcmp(md_guess_element("CL", "CLA"), "Cl") == 0 && strcmp(md_guess_element("CLA", "CLA"), "Cl") == 0);
    MD_CHECK(strcmp(md_guess_element("CL", "CL-"), "Cl") == 0 && strcmp(md_guess_element("NA", "SOD"), "Na") == 0);
    MD_CHECK(strcmp(md_guess_element("NA", "NA+"), "Na") == 0 && strcmp(md_guess_element("SOD", "ION"), "Na") == 0);
    MD_CHECK(strcmp(md_guess_element("POT", "POT"), "K") == 0 && strcmp(md_guess_element("K", "K"), "K") == 0);
    MD_CHECK(strcmp(md_guess_element("MG", "MG"), "Mg") == 0 && strcmp(md_guess_element("CAL", "CAL"), "Ca") == 0);
    MD_CHECK(strcmp(md_guess_element("CA", "CA"), "Ca") == 0 && strcmp(md_guess_element("ZN", "ZN2"), "Zn") == 0);
    MD_CHECK(strcmp(md_guess_element("Na+", "Na+"), "Na") == 0 && strcmp(md_guess_element("I", "IOD"), "I") == 0);
    /* not ions: the residue is not an ion, or the atom is not named like the ion */
    MD_CHECK(strcmp(md_guess_element("CA", "ALA"), "C") == 0 && strcmp(md_guess_element("NA", "HEM"), "N") == 0);
    MD_CHECK(strcmp(md_guess_element("CD", "LEU"), "C") == 0 && strcmp(md_guess_element("OW", "NA"), "O") == 0);
    /* two-letter element names, the first letter, leading digits, unknown */
    MD_CHECK(strcmp(md_guess_element("CL12", "LIG"), "Cl") == 0 && strcmp(md_guess_element("FE", "HEM"), "Fe") == 0);
    MD_CHECK(strcmp(md_guess_element("SE", "MSE"), "Se") == 0 && strcmp(md_guess_element("BR1", NULL), "Br") == 0);
    MD_CHECK(strcmp(md_guess_element("1HB", "ALA"), "H") == 0 && strcmp(md_guess_element("HG21", "ILE"), "H") == 0);
    MD_CHECK(strcmp(md_guess_element("XQ", ""), "") == 0 && strcmp(md_guess_element("", "NA"), "") == 0);
    MD_CHECK(strcmp(md_guess_element(NULL, NULL), "") == 0);
}

/* VMD, NAMD and MDAnalysis write "no cell" as CRYST1 0 0 0: no box, no error. */
static void pdb_zero_cell_is_no_box(void) {
    md_system s;
    int k;
    MD_CHECK_OK(md_read_pdb(MD_TEST_DATA "vmd_nocell.pdb", &s));
    MD_CHECK(s.n == 1 && strcmp(s.segid[0].s, "WAT") == 0 && s.chain[0] == 'W');
    for (k = 0; k < 3; k++) MD_CHECK(s.box[k] == 0.0);
    for (k = 0; k < 6; k++) MD_CHECK(s.cell[k] == 0.0);
    md_system_free(&s);
}

/* A truncated octahedron: the atoms are read, the box stays zero, the cell is recorded and the
 * status is MD_WARN_CELL (the caller can accept it). md_write_pdb writes the cell back. */
static void pdb_octahedron_cell_is_a_warning(void) {
    md_system s, b;
    const char *path = tmp_path("octa.pdb");
    int k;
    memset(&s, 0, sizeof s);
    MD_CHECK_ERROR(md_read_pdb(MD_TEST_DATA "octahedron.pdb", &s), MD_WARN_CELL,
                   "octahedron.pdb:1: field alpha: the CRYST1 cell is not orthorhombic");
    MD_CHECK(strstr(md_last_error(), "109.47 109.47 109.47 degrees") != NULL);
    MD_CHECK(s.n == 2 && s.box[0] == 0.0 && s.box[1] == 0.0 && s.box[2] == 0.0);
    MD_CHECK_CLOSE(s.xyzq[1].x, 0.1957, 1e-7, 0);
    for (k = 0; k < 3; k++) MD_CHECK_CLOSE(s.cell[k], 7.7, 1e-15, 0);
    for (k = 3; k < 6; k++) MD_CHECK(s.cell[k] == 109.47);
    MD_CHECK(md_read_topology(MD_TEST_DATA "octahedron.pdb", &b) == MD_WARN_CELL && b.n == 2);
    md_system_free(&b);
    MD_CHECK_OK(md_write_pdb(path, &s));
    MD_CHECK(md_read_pdb(path, &b) == MD_WARN_CELL);
    for (k = 0; k < 6; k++) MD_CHECK_CLOSE(b.cell[k], s.cell[k], 1e-12, 0);
    md_system_free(&b);
    md_system_free(&s);
}

/* Names longer than the old 7 characters are kept whole; longer than MD_NAME_MAX is an error. */
static void long_names_are_kept_or_refused(void) {
    md_system s;
    MD_CHECK_OK(md_read_pqr(MD_TEST_DATA "long_names.pqr", &s));
    MD_CHECK(s.n == 2 && strcmp(s.name[0].s, "C1AB2CD3") == 0 && strcmp(s.name[1].s, "O1P_LONG") == 0);
    MD_CHECK(s.type[0] == 0 && s.type[1] == 1);
    md_system_free(&s);
    BAD(PQR, "name16.pqr", "ATOM 1 ABCDEFGHIJKLMNOP ALA 1 1.0 2.0 3.0 0.1 1.5\n", MD_ERR_RANGE,
        "name16.pqr:1: field name: 'ABCDEFGHIJKLMNOP' is longer than 15 characters");
    BAD(PQR, "res16.pqr", "ATOM 1 N RESIDUENAMEOF16X 1 1.0 2.0 3.0 0.1 1.5\n", MD_ERR_RANGE,
        "res16.pqr:1: field resName");
    BAD(XYZ, "sym16.xyz", "1\n\nSYMBOLOFSIXTEEN1 1 2 3\n", MD_ERR_RANGE, "sym16.xyz:3: field symbol");
}

/* A file cut inside its last number is an error naming the line and field, whichever reader. */
static void cut_last_line_is_an_error(void) {
    md_system s;
    md_xyz_reader r;
    int got;
    size_t len;
    char *text;
    memset(&s, 0, sizeof s);
    MD_CHECK_ERROR(md_read_pqr(MD_TEST_DATA "cut_number.pqr", &s), MD_ERR_PARSE,
                   "cut_number.pqr:2: field r: the file ends inside this line");
    MD_CHECK(s.n == 0);
    MD_CHECK_ERROR(md_read_xyz(MD_TEST_DATA "cut_number.xyz", &s), MD_ERR_PARSE,
                   "cut_number.xyz:4: field z: the file ends inside this line (no end of line after 'H 1.957 2.000 0.1')");
    text = fixture_text("cut_number.xyz", &len);
    MD_CHECK(text != NULL);
    MD_CHECK_ERROR(md_read_xyz_mem(text, len, "cut.xyz", &s), MD_ERR_PARSE, "cut.xyz:4: field z");
    free(text);
    MD_CHECK_OK(md_xyz_open(&r, MD_TEST_DATA "cut_number.xyz"));
    MD_CHECK_ERROR(md_xyz_next(&r, &s, &got), MD_ERR_PARSE, "cut_number.xyz:4: field z");
    MD_CHECK(got == 0 && s.n == 0);
    md_xyz_close(&r);
    /* with the end of line the same text is fine; a CR LF file cut after its CR is complete */
    MD_CHECK_OK(md_read_xyz_mem("1\n\nH 1 2 0.1\n", strlen("1\n\nH 1 2 0.1\n"), "ok.xyz", &s));
    md_system_free(&s);
    MD_CHECK_OK(md_read_xyz_mem("1\r\n\r\nH 1 2 0.1\r", strlen("1\r\n\r\nH 1 2 0.1\r"), "cr.xyz", &s));
    md_system_free(&s);
    BAD(XYZ, "cut6.xyz", "1\n\nH 1 2 3 4.5 6", MD_ERR_PARSE, "cut6.xyz:3: field column 6");
    BAD(PDB, "cut.pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.504  1.00  0.", MD_ERR_PARSE,
        "cut.pdb:1: field tempFactor: the file ends inside this line");
    BAD(PDB, "cutconect.pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.504\nCONECT    1    2", MD_ERR_PARSE,
        "cutconect.pdb:2: field CONECT: the file ends inside this line");
    BAD(DX, "cut.dx",
        "object 1 class gridpositions counts 1 1 2\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 2 data follows\n1.5 0.1",
        MD_ERR_PARSE, "cut.dx:7: field data: the file ends inside this line");
    /* a full 80-column PDB record is complete without an end of line */
    MD_CHECK_OK(md_read_pdb_mem("ATOM      1  N   GLY A   1      11.104   6.134  -6.504  1.00  0.00           N1-", 80,
                                "full.pdb", &s));
    MD_CHECK(s.xyzq[0].w == -1.0f);
    md_system_free(&s);
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

#define PSF_HEAD "PSF EXT\n\n       1 !NTITLE\n* bad\n\n"
#define PSF_ATOM1 "       1 A    1    ALA  N    NH1   -0.47   14.007   0\n"
#define PSF_ATOM2 "       2 A    1    ALA  CA   CT1    0.07   12.011   0\n"

static void psf_bad_input(void) {
    md_system s;
    MD_CHECK_ERROR(md_read_psf(tmp_path("missing.psf"), &s), MD_ERR_IO, "missing.psf: field path: cannot open");
    BAD(PSF, "empty.psf", "", MD_ERR_PARSE, "empty.psf:1: field header: missing: empty file");
    BAD(PSF, "nopsf.psf", "REMARK\n", MD_ERR_PARSE, "nopsf.psf:1: field header: the first line must start with PSF");
    BAD(PSF, "notitle.psf", "PSF\n", MD_ERR_PARSE, "notitle.psf:2: field NTITLE: missing");
    BAD(PSF, "title.psf", "PSF\n\n       3 !NTITLE\n* one\n", MD_ERR_PARSE,
            "title.psf:5: field NTITLE: the file ends inside the title (2 lines missing)");
    BAD(PSF, "nonatom.psf", PSF_HEAD "       2 !NBOND: bonds\n", MD_ERR_PARSE,
            "nonatom.psf:6: field NATOM: missing: expected the section header 'N !NATOM'");
    BAD(PSF, "zero.psf", PSF_HEAD "       0 !NATOM\n", MD_ERR_RANGE, "zero.psf:6: field NATOM: a PSF needs at least one atom");
    BAD(PSF, "absurd.psf", PSF_HEAD "  999999 !NATOM\n" PSF_ATOM1, MD_ERR_RANGE,
            "absurd.psf:6: field NATOM: 999999 atoms cannot fit");
    BAD(PSF, "few.psf", PSF_HEAD "       3 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n", MD_ERR_PARSE,
            "few.psf:9: field ID: missing");
    BAD(PSF, "short.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47\n", MD_ERR_PARSE,
            "short.psf:7: field mass: missing");
    BAD(PSF, "order.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM2 PSF_ATOM1, MD_ERR_PARSE,
            "order.psf:7: field ID: atom IDs must run 1, 2, ..., NATOM: expected 1, got 2");
    BAD(PSF, "charge.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.4.7   14.007   0\n",
            MD_ERR_PARSE, "charge.psf:7: field charge: not a number ('-0.4.7')");
    BAD(PSF, "mass.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47   -14.007   0\n",
            MD_ERR_RANGE, "mass.psf:7: field mass: is negative");
    BAD(PSF, "nanq.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   nan   14.007   0\n",
            MD_ERR_RANGE, "nanq.psf:7: field charge: is NaN");
    BAD(PSF, "resid.psf", PSF_HEAD "       1 !NATOM\n       1 A    1AB  ALA  N    NH1   -0.47   14.007   0\n",
            MD_ERR_PARSE, "resid.psf:7: field resid");
    BAD(PSF, "long.psf", PSF_HEAD "       1 !NATOM\n       1 A 1 ALA N TYPENAMEOFSIXTEEN -0.47 14.007 0\n",
            MD_ERR_RANGE, "long.psf:7: field type: 'TYPENAMEOFSIXTEEN' is longer than 15 characters");
    BAD(PSF, "cutatom.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N    NH1   -0.47   14.007   0",
            MD_ERR_PARSE, "cutatom.psf:7: field IMOVE: the file ends inside this line");
    BAD(PSF, "nbond.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NTHETA: angles\n", MD_ERR_PARSE,
            "nbond.psf:10: field NBOND: missing: expected the section header 'N !NBOND'");
    BAD(PSF, "bondrange.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       3\n",
            MD_ERR_RANGE, "bondrange.psf:11: field NBOND: '3' is out of range 1..2");
    BAD(PSF, "bondself.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       2       2\n",
            MD_ERR_PARSE, "bondself.psf:11: field NBOND: atom 2 is bonded to itself");
    BAD(PSF, "bondshort.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       2 !NBOND: bonds\n       1       2\n\n",
            MD_ERR_PARSE, "bondshort.psf:12: field NBOND: the section ends after 2 of the 4 atom IDs of 2 bonds");
    BAD(PSF, "bondlong.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       2       2\n",
            MD_ERR_PARSE, "bondlong.psf:11: field NBOND: more atom IDs than the 1 bonds declared");
    BAD(PSF, "bondcut.psf", PSF_HEAD "       2 !NATOM\n" PSF_ATOM1 PSF_ATOM2 "\n       1 !NBOND: bonds\n       1       2",
            MD_ERR_PARSE, "bondcut.psf:11: field NBOND: the file ends inside this line");
    BAD(PSF, "nul.psf", PSF_HEAD "       1 !NATOM\n       1 A    1    ALA  N\0   NH1   -0.47   14.007   0\n", MD_ERR_PARSE,
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
 * a new frame. Positions (random, seeds 31-33) are checked against what was written (XYZ
 * %.6f Angstrom: 1e-7 nm; DCD float Angstrom: rtol 1e-6). */
static void xyz_and_dcd_reuse_frames_alike(void) {
    md_system fr[3], frame;
    md_xyz_reader r;
    md_dcd_reader d;
    double box[3] = {2.0, 2.5, 3.0};
    const char *xyz = tmp_path("reuse.xyz"), *dcd = tmp_path("reuse.dcd");
    int k, i, got, kind;
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

/* ---- long lines: a line longer than any fixed buffer is read whole ---- */

static void long_lines_are_read_whole(void) {
    size_t pad = 200000, n = 0;
    char *text = (char *)malloc(3 * pad + 512);
    md_system s;
    MD_CHECK(text != NULL);
    /* XYZ: a 200 kB comment, then an atom line with 200 kB of blanks inside and a 200 kB number */
    n += (size_t)sprintf(text + n, "1\n");
    memset(text + n, 'c', pad);
    n += pad;
    n += (size_t)sprintf(text + n, "\nC 1.5");
    memset(text + n, ' ', pad);
    n += pad;
    text[n++] = '2';
    text[n++] = '.';
    memset(text + n, '0', pad);
    n += pad;
    n += (size_t)sprintf(text + n, "1 3\n");
    md_status st = md_read_xyz_mem(text, n, "long.xyz", &s);
    MD_CHECKF(st == MD_OK, "%s", md_last_error());
    MD_CHECK(s.n == 1);
    MD_CHECK_CLOSE(s.xyzq[0].x, 0.15, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[0].y, 0.2, 1e-7, 0);
    MD_CHECK_CLOSE(s.xyzq[0].z, 0.3, 1e-7, 0);
    md_system_free(&s);
    /* the same through the FILE line reader */
    MD_CHECK(write_bytes(tmp_path("long.xyz"), text, n));
    MD_CHECK_OK(md_read_xyz(tmp_path("long.xyz"), &s));
    MD_CHECK(s.n == 1);
    MD_CHECK_CLOSE(s.xyzq[0].y, 0.2, 1e-7, 0);
    md_system_free(&s);
    /* a long bad field: the message quotes a bounded prefix and names the line */
    n = (size_t)sprintf(text, "1\n\nC ");
    memset(text + n, '7', pad);
    n += pad;
    n += (size_t)sprintf(text + n, "x 0 0\n");
    MD_CHECK_ERROR(md_read_xyz_mem(text, n, "longbad.xyz", &s), MD_ERR_PARSE, "longbad.xyz:3: field x");
    free(text);
}

/* ---- bad input: one check per case ---- */

static void bad_missing_and_empty_files(void) {
    md_system s;
    md_grid g;
    MD_CHECK_ERROR(md_read_pqr(tmp_path("missing.pqr"), &s), MD_ERR_IO,
                   "missing.pqr: field path: cannot open");
    MD_CHECK_ERROR(md_read_pdb(tmp_path("missing.pdb"), &s), MD_ERR_IO,
                   "missing.pdb: field path: cannot open");
    MD_CHECK_ERROR(md_read_xyz(tmp_path("missing.xyz"), &s), MD_ERR_IO,
                   "missing.xyz: field path: cannot open");
    MD_CHECK_ERROR(md_read_dx(tmp_path("missing.dx"), &g), MD_ERR_IO, "missing.dx: field path: cannot open");
    BAD(PQR, "empty.pqr", "", MD_ERR_PARSE, "empty.pqr:1: field ATOM: empty file");
    BAD(PDB, "empty.pdb", "", MD_ERR_PARSE, "empty.pdb:1: field ATOM: empty file");
    BAD(XYZ, "empty.xyz", "", MD_ERR_PARSE, "empty.xyz:1: field atom count: missing");
    BAD(XYZ, "blank.xyz", "\n  \n\n", MD_ERR_PARSE, "blank.xyz:3: field atom count: missing");
    BAD(DX, "empty.dx", "", MD_ERR_PARSE, "empty.dx:1: field object 3");
}

static void bad_no_atoms(void) {
    BAD(PQR, "noatoms.pqr", "REMARK x\nTER\nEND\n", MD_ERR_PARSE, "noatoms.pqr:3: field ATOM: no ATOM");
    BAD(PDB, "noatoms.pdb", "HEADER x\nREMARK y\n", MD_ERR_PARSE, "noatoms.pdb:2: field ATOM: no ATOM");
    BAD(PDB, "endfirst.pdb", "END\nATOM      1  O   HOH     1       1.000   2.000   3.000\n", MD_ERR_PARSE,
        "endfirst.pdb:1: field ATOM");
    BAD(XYZ, "zero.xyz", "0\ncomment\n", MD_ERR_PARSE, "zero.xyz:1: field atom count: is 0");
}

static void bad_truncated(void) {
    BAD(XYZ, "trunc.xyz",
        "10\ncomment\nC 1.000 2.000 3.000\nC 1.000 2.000 3.000\nC 1.000 2.000 3.000\n"
        "C 1.000 2.000 3.000\nC 1.000 2.000 3.000\nC 1.000 2.000 3.000\nC 1.000 2.000 3.000\n",
        MD_ERR_PARSE, "trunc.xyz:10: field atoms: the file ends after 7 of 10 atoms");
    BAD(XYZ, "nocomment.xyz", "1", MD_ERR_RANGE, "nocomment.xyz:1: field atom count");
    BAD(XYZ, "nocomment2.xyz", "1\n", MD_ERR_RANGE, "nocomment2.xyz:1: field atom count");
    BAD(DX, "trunc.dx",
        "object 1 class gridpositions counts 2 2 2\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 8 data follows\n"
        "1.5 2.5 3.5\n4.5 5.5 6.5\n",
        MD_ERR_PARSE, "trunc.dx:9: field data: the file ends after 6 of 8 values");
}

static void bad_short_lines(void) {
    BAD(PQR, "short.pqr", "REMARK\nATOM 1 N ALA 1 1.0 2.0 3.0\n", MD_ERR_PARSE,
        "short.pqr:2: field q: missing");
    BAD(PQR, "long.pqr", "ATOM 1 N ALA A 1 x 1.0 2.0 3.0 0.1 1.5\n", MD_ERR_PARSE,
        "long.pqr:1: field fields");
    BAD(PDB, "short.pdb", "ATOM      1  N   GLY A   1      11.104   6.1\n", MD_ERR_PARSE,
        "short.pdb:1: field y: missing");
    BAD(PDB, "shortz.pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.5\n", MD_ERR_PARSE,
        "shortz.pdb:1: field z: missing");
    BAD(PDB, "shortc.pdb",
        "CRYST1   30.000   40.000   50.000  90.00  90.00\n"
        "ATOM      1  O   HOH     1       1.000   2.000   3.000\n",
        MD_ERR_PARSE, "shortc.pdb:1: field gamma: missing");
    BAD(XYZ, "short.xyz", "2\n\nC 1.0 2.0 3.0\nC 1.0 2.0\n", MD_ERR_PARSE, "short.xyz:4: field z: missing");
    BAD(XYZ, "blankatom.xyz", "2\n\nC 1 2 3\n            \n", MD_ERR_PARSE,
        "blankatom.xyz:4: field symbol: missing");
}

static void bad_numbers(void) {
    BAD(PQR, "bad.pqr", "REMARK\nREMARK\nATOM 1 N ALA 1 1.2.3 2.0 3.0 0.1 1.5\n", MD_ERR_PARSE,
        "bad.pqr:3: field x: not a number ('1.2.3')");
    BAD(PQR, "badq.pqr", "ATOM 1 N ALA 1 1 2.0 3.0 0.1e 1.5\n", MD_ERR_PARSE, "badq.pqr:1: field q");
    BAD(PQR, "badres.pqr", "ATOM 1 N ALA 1.5 1 2.0 3.0 0.1 1.5\n", MD_ERR_PARSE,
        "badres.pqr:1: field resSeq");
    BAD(PQR, "negr.pqr", "ATOM 1 N ALA 1 1 2.0 3.0 0.1 -1.5\n", MD_ERR_RANGE, "negr.pqr:1: field r");
    BAD(PDB, "bad.pdb", "ATOM      1  N   GLY A   1      11.104   6.134  -6.5x4\n", MD_ERR_PARSE,
        "bad.pdb:1: field z: not a number ('-6.5x4')");
    BAD(PDB, "badres.pdb", "ATOM      1  N   GLY A  1a      11.104   6.134  -6.504\n", MD_ERR_PARSE,
        "badres.pdb:1: field resSeq");
    BAD(PDB, "badchg.pdb",
        "ATOM      1  N   GLY A   1      11.104   6.134  -6.504  1.00  0.00           N x\n", MD_ERR_PARSE,
        "badchg.pdb:1: field charge");
    BAD(XYZ, "bad.xyz", "1\n\nC 1 2 3q\n", MD_ERR_PARSE, "bad.xyz:3: field z: not a number ('3q')");
    BAD(XYZ, "badn.xyz", "abc\n\nC 1 2 3\n", MD_ERR_PARSE, "badn.xyz:1: field atom count: not an integer");
    BAD(XYZ, "twon.xyz", "1 2\n\nC 1 2 3\n", MD_ERR_PARSE, "twon.xyz:1: field atom count");
    BAD(DX, "bad.dx",
        "object 1 class gridpositions counts 1 1 2\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 2 data follows\n"
        "1 two\n",
        MD_ERR_PARSE, "bad.dx:7: field data: not a number ('two')");
}

static void bad_nonfinite(void) {
    BAD(XYZ, "nan.xyz", "1\n\nC nan 0 0\n", MD_ERR_RANGE, "nan.xyz:3: field x: is NaN");
    BAD(XYZ, "inf.xyz", "1\n\nC 0 -inf 0\n", MD_ERR_RANGE, "inf.xyz:3: field y: infinite");
    BAD(XYZ, "huge.xyz", "1\n\nC 0 0 1e39\n", MD_ERR_RANGE, "huge.xyz:3: field z: infinite or too large");
    BAD(XYZ, "huge2.xyz", "1\n\nC 0 0 1e999\n", MD_ERR_RANGE, "huge2.xyz:3: field z");
    BAD(PQR, "nan.pqr", "ATOM 1 N ALA 1 1.0 NaN 3.0 0.1 1.5\n", MD_ERR_RANGE, "nan.pqr:1: field y: is NaN");
    BAD(PQR, "inf.pqr", "ATOM 1 N ALA 1 1.0 2.0 3.0 inf 1.5\n", MD_ERR_RANGE, "inf.pqr:1: field q");
    BAD(PDB, "nan.pdb", "ATOM      1  N   GLY A   1         nan   6.134  -6.504\n", MD_ERR_RANGE,
        "nan.pdb:1: field x: is NaN");
    BAD(DX, "nan.dx",
        "object 1 class gridpositions counts 1 1 1\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 1 data follows\nnan\n",
        MD_ERR_RANGE, "nan.dx:7: field data: is NaN");
}

static void bad_atom_counts(void) {
    BAD(XYZ, "neg.xyz", "-3\n\nC 1 2 3\n", MD_ERR_RANGE, "neg.xyz:1: field atom count: is negative");
    BAD(XYZ, "overflow.xyz", "99999999999999999999999\n\nC 1 2 3\n", MD_ERR_RANGE,
        "overflow.xyz:1: field atom count: '99999999999999999999999' is out of range");
    BAD(XYZ, "intmax.xyz", "4294967296\n\nC 1 2 3\n", MD_ERR_RANGE, "intmax.xyz:1: field atom count");
    BAD(XYZ, "absurd.xyz", "1000000\n\nC 1 2 3\n", MD_ERR_RANGE,
        "absurd.xyz:1: field atom count: 1000000 atoms cannot fit");
    BAD(DX, "absurd.dx",
        "object 1 class gridpositions counts 1000 1000 1000\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 1000000000 data "
        "follows\n1\n",
        MD_ERR_RANGE, "absurd.dx:6: field items");
    BAD(DX, "items.dx",
        "object 1 class gridpositions counts 2 2 2\norigin 0 0 0\ndelta 1 0 0\n"
        "delta 0 1 0\ndelta 0 0 1\nobject 3 class array type double rank 0 items 7 data follows\n1\n",
        MD_ERR_PARSE, "items.dx:6: field items: 7 is not nx*ny*nz");
}

static void bad_boxes(void) {
    BAD(XYZ, "zerobox.xyz", "1\nLattice=\"10 0 0 0 0 0 0 0 10\"\nC 1 2 3\n", MD_ERR_RANGE,
        "zerobox.xyz:2: field Lattice: box edge b must be > 0");
    BAD(XYZ, "tric.xyz", "1\nLattice=\"10 0 0 5 10 0 0 0 10\"\nC 1 2 3\n", MD_ERR_UNSUPPORTED,
        "tric.xyz:2: field Lattice: only orthorhombic");
    BAD(XYZ, "quote.xyz", "1\nLattice=\"10 0 0 0 10 0 0 0 10\nC 1 2 3\n", MD_ERR_PARSE,
        "quote.xyz:2: field Lattice: no closing quote");
    BAD(XYZ, "lat8.xyz", "1\nLattice=\"10 0 0 0 10 0 0 0\"\nC 1 2 3\n", MD_ERR_PARSE,
        "lat8.xyz:2: field Lattice: needs 9 numbers");
    BAD(XYZ, "latnan.xyz", "1\nLattice=\"10 0 0 0 nan 0 0 0 10\"\nC 1 2 3\n", MD_ERR_RANGE,
        "latnan.xyz:2: field Lattice: is NaN");
    BAD(PDB, "zerobox.pdb",
        "CRYST1   30.000    0.000   50.000  90.00  90.00  90.00 P 1           1\n"
        "ATOM      1  O   HOH     1       1.000   2.000   3.000\n",
        MD_ERR_RANGE, "zerobox.pdb:1: field b: box edge must be > 0");
    BAD(PDB, "flat.pdb",
        "CRYST1   30.000   40.000   50.000  90.00 180.00  90.00 P 1           1\n"
        "ATOM      1  O   HOH     1       1.000   2.000   3.000\n",
        MD_ERR_RANGE, "flat.pdb:1: field beta: angle must be within (0, 180) degrees (got 180)");
    BAD(PDB, "partbox.pdb",
        "CRYST1   30.000    0.000    0.000  90.00  90.00  90.00 P 1           1\n"
        "ATOM      1  O   HOH     1       1.000   2.000   3.000\n",
        MD_ERR_RANGE, "partbox.pdb:1: field b: box edge must be > 0");
    BAD(PDB, "dup.pdb",
        "CRYST1   30.000   40.000   50.000  90.00  90.00  90.00 P 1           1\n"
        "ATOM      1  O   HOH     1       1.000   2.000   3.000\n"
        "CRYST1   30.000   40.000   50.000  90.00  90.00  90.00 P 1           1\n",
        MD_ERR_PARSE, "dup.pdb:3: field CRYST1: second CRYST1 record (the first is on line 1)");
    BAD(DX, "tilt.dx", "object 1 class gridpositions counts 1 1 1\norigin 0 0 0\ndelta 1 0.5 0\n",
        MD_ERR_UNSUPPORTED, "tilt.dx:3: field delta x: only axis-aligned");
    BAD(DX, "zerodelta.dx",
        "object 1 class gridpositions counts 1 1 1\norigin 0 0 0\ndelta 1 0 0\ndelta 0 0 0\n", MD_ERR_RANGE,
        "zerodelta.dx:4: field delta y: spacing must be > 0");
    BAD(DX, "nodelta.dx",
        "object 1 class gridpositions counts 1 1 1\norigin 0 0 0\n"
        "object 3 class array type double rank 0 items 1 data follows\n1\n",
        MD_ERR_PARSE, "nodelta.dx:3: field delta: missing");
}

static void bad_nul_bytes(void) {
    BAD(XYZ, "nul.xyz", "1\n\nC 1 2\0 3\n", MD_ERR_PARSE, "nul.xyz:3: field text: NUL byte at column 6");
    BAD(XYZ, "nulcount.xyz", "\0001\n\nC 1 2 3\n", MD_ERR_PARSE, "nulcount.xyz:1: field text: NUL byte");
    BAD(PQR, "nul.pqr", "ATOM 1 N ALA 1 1.0 2.0 3.0 0.1 1.5\nREM\0ARK\n", MD_ERR_PARSE,
        "nul.pqr:2: field text: NUL byte at column 4");
    BAD(PDB, "nul.pdb", "ATOM      1  N   GLY A   1      11.104   6.1\00034  -6.504\n", MD_ERR_PARSE,
        "nul.pdb:1: field text: NUL byte at column 45");
    BAD(DX, "nul.dx", "# a\0b\n", MD_ERR_PARSE, "nul.dx:1: field text: NUL byte");
}

/* ---- round trips ---- */

static const char *const names[6] = {"O", "H", "C", "Na", "Cl", "X"};

static md_status random_system(md_system *s, int n, uint64_t seed, int with_box) {
    double box[3] = {3.1, 4.2, 5.3};
    int i;
    md_status st = md_build_random_charges(s, n, box, 1.0, seed);
    if (st != MD_OK) return st;
    for (i = 0; i < n; i++) {
        snprintf(s->name[i].s, sizeof s->name[i].s, "%s", names[i % 6]);
        s->mass[i] = md_element_mass(names[i % 6]);
        s->xyzq[i].x -= 1.0f; /* some negative coordinates */
    }
    if (!with_box) s->box[0] = s->box[1] = s->box[2] = 0.0;
    return MD_OK;
}

/* XYZ prints Angstrom with 6 decimals: error <= 5e-7 A = 5e-8 nm, plus float rounding of the nm
 * value on reading (half an ulp, 2.4e-7 relative at most with the stored value's ulp): tolerance
 * atol 1e-7 nm, rtol 2.4e-7. */
static void xyz_round_trip(void) {
    md_system a, b;
    const char *path = tmp_path("rt.xyz");
    int i;
    MD_CHECK_OK(random_system(&a, 257, 11, 1));
    MD_CHECK_OK(md_write_xyz(path, &a, "random system, seed 11", 0));
    MD_CHECK(!file_exists(tmp_path("rt.xyz.tmp")));
    MD_CHECK_OK(md_read_xyz(path, &b));
    MD_CHECK(b.n == a.n);
    for (i = 0; i < a.n; i++) {
        MD_CHECK_CLOSE(b.xyzq[i].x, a.xyzq[i].x, 2.4e-7, 1e-7);
        MD_CHECK_CLOSE(b.xyzq[i].y, a.xyzq[i].y, 2.4e-7, 1e-7);
        MD_CHECK_CLOSE(b.xyzq[i].z, a.xyzq[i].z, 2.4e-7, 1e-7);
        MD_CHECK(strcmp(a.name[i].s, b.name[i].s) == 0 && a.mass[i] == b.mass[i] && b.type[i] == i % 6);
    }
    /* box printed with 6 decimals in Angstrom: 5e-8 nm */
    for (i = 0; i < 3; i++) MD_CHECK_CLOSE(b.box[i], a.box[i], 0, 5e-8);
    md_system_free(&a);
    md_system_free(&b);
}

/* Three frames written with append=1 and read back with md_xyz_reader; then a partial frame. */
static void xyz_multi_frame(void) {
    md_system f[3], frame, keep;
    md_xyz_reader r;
    const char *path = tmp_path("frames.xyz");
    int k, i, got;
    FILE *fp;
    remove(path);
    for (k = 0; k < 3; k++) {
        MD_CHECK_OK(random_system(&f[k], 10 + k, 14 + (uint64_t)k, k != 1));
        MD_CHECK_OK(md_write_xyz(path, &f[k], "frame", k > 0));
    }
    memset(&frame, 0, sizeof frame);
    MD_CHECK_OK(md_xyz_open(&r, path));
    for (k = 0; k < 3; k++) {
        MD_CHECK_OK(md_xyz_next(&r, &frame, &got));
        MD_CHECK(got == 1 && frame.n == f[k].n && r.frames == k + 1);
        for (i = 0; i < frame.n; i++) MD_CHECK_CLOSE(frame.xyzq[i].z, f[k].xyzq[i].z, 2.4e-7, 1e-7);
        MD_CHECK((frame.box[0] > 0.0) == (k != 1));
    }
    MD_CHECK_OK(md_xyz_next(&r, &frame, &got));
    MD_CHECK(got == 0 && frame.n == f[2].n); /* clean end: frame kept */
    md_xyz_close(&r);
    md_xyz_close(&r); /* safe twice */
    /* a partial 4th frame: error naming the line, frame untouched */
    fp = fopen(path, "ab");
    MD_CHECK(fp != NULL);
    fputs("5\n\nC 0.000000 0.000000 0.000000\nC 0.000000 0.000000 0.000000\n", fp);
    fclose(fp);
    MD_CHECK_OK(md_xyz_open(&r, path));
    for (k = 0; k < 3; k++) MD_CHECK_OK(md_xyz_next(&r, &frame, &got));
    keep = frame;
    MD_CHECK_ERROR(md_xyz_next(&r, &frame, &got), MD_ERR_PARSE,
                   "frames.xyz:44: field atoms: the file ends after 2 of 5");
    MD_CHECK(got == 0 && memcmp(&keep, &frame, sizeof frame) == 0);
    md_xyz_close(&r);
    MD_CHECK_ERROR(md_xyz_open(&r, tmp_path("nope.xyz")), MD_ERR_IO, "nope.xyz: field path: cannot open");
    MD_CHECK(r.file == NULL);
    md_system_free(&frame);
    for (k = 0; k < 3; k++) md_system_free(&f[k]);
}

/* PDB prints %8.3f Angstrom: error <= 5e-4 A = 5e-5 nm (plus float rounding: atol 5.1e-5 nm).
 * Whole charges survive in columns 79-80; masses via the element column. */
static void pdb_round_trip(void) {
    md_system a, b;
    const char *path = tmp_path("rt.pdb");
    int i;
    MD_CHECK_OK(random_system(&a, 123, 12, 1));
    for (i = 0; i < a.n; i++) {
        a.xyzq[i].w = (float)(i % 5 - 2);
        a.resid[i] = i / 3 + 1;
        snprintf(a.resname[i].s, sizeof a.resname[i].s, "%s", i % 2 ? "SOL" : "LIG");
    }
    a.nbond = 40;
    a.bond = (int *)md_alloc_array(80, sizeof(int));
    MD_CHECK(a.bond != NULL);
    for (i = 0; i < a.n; i++) {
        a.chain[i] = (char)(i % 3 ? 'A' + i % 26 : 0);
        a.icode[i] = (char)(i % 4 == 1 ? 'A' + i % 5 : 0);
        a.altloc[i] = (char)(i % 7 == 2 ? 'B' : 0);
        snprintf(a.segid[i].s, sizeof a.segid[i].s, "%s", i % 2 ? "PROA" : "W1");
    }
    for (i = 0; i < a.nbond; i++) { /* distinct pairs, sorted, first < second */
        a.bond[2 * i] = 3 * i;
        a.bond[2 * i + 1] = 3 * i + 1 + i % 2;
    }
    MD_CHECK_OK(md_write_pdb(path, &a));
    MD_CHECK(!file_exists(tmp_path("rt.pdb.tmp")));
    MD_CHECK_OK(md_read_pdb(path, &b));
    MD_CHECK(b.n == a.n && b.nbond == a.nbond);
    for (i = 0; i < 2 * a.nbond; i++) MD_CHECK(b.bond[i] == a.bond[i]);
    for (i = 0; i < a.n; i++) {
        MD_CHECK_CLOSE(b.xyzq[i].x, a.xyzq[i].x, 0, 5.1e-5);
        MD_CHECK_CLOSE(b.xyzq[i].y, a.xyzq[i].y, 0, 5.1e-5);
        MD_CHECK_CLOSE(b.xyzq[i].z, a.xyzq[i].z, 0, 5.1e-5);
        MD_CHECK(b.xyzq[i].w == a.xyzq[i].w && b.resid[i] == a.resid[i] && b.mass[i] == a.mass[i]);
        MD_CHECK(strcmp(a.name[i].s, b.name[i].s) == 0 && strcmp(a.resname[i].s, b.resname[i].s) == 0);
        MD_CHECKF(b.chain[i] == a.chain[i] && b.icode[i] == a.icode[i] && b.altloc[i] == a.altloc[i] &&
                      strcmp(b.segid[i].s, a.segid[i].s) == 0,
                  "atom %d: chain/icode/altloc/segid", i);
    }
    /* a name PDB has no room for is refused, not cut */
    snprintf(a.name[5].s, sizeof a.name[5].s, "%s", "LONGER");
    MD_CHECK_ERROR(md_write_pdb(path, &a), MD_ERR_RANGE, "field name: atom 5: 'LONGER' is longer than the PDB's 4 columns");
    /* box printed %9.3f Angstrom: 5e-5 nm */
    for (i = 0; i < 3; i++) MD_CHECK_CLOSE(b.box[i], a.box[i], 0, 5e-5);
    md_system_free(&a);
    md_system_free(&b);
}

/* DX values are printed %.9g: a float reads back exactly; origin and delta (double, x10, %.9g,
 * x0.1) within 1e-8 relative. */
static void dx_round_trip(void) {
    md_grid a, b;
    md_rng rng;
    double origin[3] = {-1.25, 0.5, 2.0}, h[3] = {0.1, 0.125, 0.0625};
    size_t p;
    int d;
    MD_CHECK_OK(md_grid_alloc(&a, 5, 4, 3, origin, h));
    md_rng_seed(&rng, 13);
    for (p = 0; p < md_grid_count(&a); p++) a.data[p] = (float)(200.0 * md_rng_normal(&rng));
    MD_CHECK_OK(md_write_dx(tmp_path("rt.dx"), &a, "random grid, seed 13"));
    MD_CHECK(!file_exists(tmp_path("rt.dx.tmp")));
    MD_CHECK_OK(md_read_dx(tmp_path("rt.dx"), &b));
    MD_CHECK(b.n[0] == 5 && b.n[1] == 4 && b.n[2] == 3);
    for (d = 0; d < 3; d++) {
        MD_CHECK_CLOSE(b.origin[d], a.origin[d], 1e-8, 0);
        MD_CHECK_CLOSE(b.spacing[d], a.spacing[d], 1e-8, 0);
    }
    for (p = 0; p < md_grid_count(&a); p++) MD_CHECKF(a.data[p] == b.data[p], "point %zu", p);
    md_grid_free(&a);
    md_grid_free(&b);
}

/* DX point order is x slowest, z fastest: a 2x1x2 grid written by hand, values 1 2 3 4 are
 * (i,k) = (0,0) (0,1) (1,0) (1,1); md_grid stores x fastest. The array line has more than 16
 * words (a fuzzing find: the header words beyond 16 are ignored, not indexed). */
static void dx_point_order(void) {
    const char *text = "# hand-written\nobject 1 class gridpositions counts 2 1 2\norigin 10 20 30\n"
                       "delta 2 0 0\ndelta 0 3 0\ndelta 0 0 4\nobject 2 class gridconnections counts 2 1 2\n"
                       "object 3 class array type float rank 0 items 4 data follows w w w w w w w w w w w w\n"
                       "1 2\n3\n4 attribute\n";
    md_grid g;
    MD_CHECK_OK(md_read_dx_mem(text, strlen(text), "order.dx", &g));
    MD_CHECK(g.data[0] == 1.0f && g.data[2] == 2.0f && g.data[1] == 3.0f && g.data[3] == 4.0f);
    MD_CHECK_CLOSE(g.origin[1], 2.0, 1e-15, 0);
    MD_CHECK_CLOSE(g.spacing[2], 0.4, 1e-15, 0);
    md_grid_free(&g);
}

/* Writers refuse bad systems before touching the file, and never leave a .tmp behind. */
static void writers_leave_no_half_files(void) {
    md_system a;
    const char *path = tmp_path("keep.xyz");
    char buf[64];
    FILE *f;
    size_t n;
    MD_CHECK(write_bytes(path, "old contents\n", 13));
    MD_CHECK_OK(random_system(&a, 4, 11, 1));
    a.xyzq[2].y = NAN;
    MD_CHECK_ERROR(md_write_xyz(path, &a, NULL, 0), MD_ERR_RANGE, "keep.xyz: field xyzq: atom 2");
    MD_CHECK_ERROR(md_write_pdb(path, &a), MD_ERR_RANGE, "keep.xyz: field xyzq: atom 2");
    a.xyzq[2].y = 1.0f;
    a.box[1] = 0.0;
    MD_CHECK_ERROR(md_write_xyz(path, &a, NULL, 0), MD_ERR_RANGE, "field box");
    a.box[1] = 1.0;
    MD_CHECK_ERROR(md_write_xyz(path, &a, "two\nlines", 0), MD_ERR_INVALID_ARGUMENT, "field comment");
    a.xyzq[0].x = 1e4f;
    MD_CHECK_ERROR(md_write_pdb(path, &a), MD_ERR_RANGE, "field x: atom 0");
    f = fopen(path, "rb");
    MD_CHECK(f != NULL);
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    MD_CHECK(n == 13 && memcmp(buf, "old contents\n", 13) == 0);
    MD_CHECK(!file_exists(tmp_path("keep.xyz.tmp")));
    /* a directory that does not exist: MD_ERR_IO naming the .tmp path */
    MD_CHECK_ERROR(md_write_xyz(tmp_path("no/such/dir.xyz"), &a, NULL, 0), MD_ERR_IO, "dir.xyz.tmp");
    md_system_free(&a);
}

int main(void) {
    int i;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/md_test_io_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL test_io: cannot create a temp directory\n");
        return 1;
    }
    MD_RUN(pqr_reads_with_and_without_chain);
    MD_RUN(pqr_reads_chain_run_into_resseq);
    MD_RUN(pdb_reads_columns_box_charge_element);
    MD_RUN(pdb_placeholder_cryst1_means_no_box);
    MD_RUN(xyz_reads_lattice_and_extra_columns);
    MD_RUN(element_masses);
    MD_RUN(pqr_pdb2pqr_insertion_codes);
    MD_RUN(pdb_altloc_icode_charge0_conect);
    MD_RUN(pdb_ion_masses_without_element_column);
    MD_RUN(guess_element_rules);
    MD_RUN(pdb_zero_cell_is_no_box);
    MD_RUN(pdb_octahedron_cell_is_a_warning);
    MD_RUN(long_names_are_kept_or_refused);
    MD_RUN(cut_last_line_is_an_error);
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
    MD_RUN(long_lines_are_read_whole);
    MD_RUN(bad_missing_and_empty_files);
    MD_RUN(bad_no_atoms);
    MD_RUN(bad_truncated);
    MD_RUN(bad_short_lines);
    MD_RUN(bad_numbers);
    MD_RUN(bad_nonfinite);
    MD_RUN(bad_atom_counts);
    MD_RUN(bad_boxes);
    MD_RUN(bad_nul_bytes);
    MD_RUN(xyz_round_trip);
    MD_RUN(xyz_multi_frame);
    MD_RUN(pdb_round_trip);
    MD_RUN(dx_round_trip);
    MD_RUN(dx_point_order);
    MD_RUN(writers_leave_no_half_files);
    for (i = 0; i < ncreated; i++) remove(created[i]);
    rmdir(tmpdir);
    return md_test_summary();
}
