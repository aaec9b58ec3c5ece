/* md.h - molecular dynamics building blocks, CPU reference code.      v0.1
 *
 * A single-header C11 library (it also compiles as C++17). It holds tested CPU
 * code for Coulomb potential maps, radial distribution functions and file I/O;
 * md_cuda.cu.h holds the GPU version of every kernel with the same API.
 *
 * USING IT
 *   In exactly one C or C++ file of your project:
 *       #define MD_IMPLEMENTATION
 *       #include "md.h"
 *   Everywhere else include "md.h" without the define. Link with -lm.
 *   Compile with -fopenmp to enable the OpenMP rungs (they fall back to one
 *   thread otherwise). Options, defined before the include with the
 *   implementation:
 *       MD_STATIC          make every function static to this file
 *       MD_MALLOC(n)       allocator (default malloc); MD_FREE(p) (default free)
 *       MD_ASSERT(x)       internal invariant check (default assert)
 *
 * UNITS (the OpenMM / GROMACS convention)
 *   length nm, time ps, mass amu (g/mol), charge e, energy kJ/mol,
 *   temperature K. Velocities nm/ps. The Coulomb constant is MD_COULOMB,
 *   138.935458 kJ mol^-1 nm e^-2; an electrostatic potential is in kJ mol^-1 e^-1.
 *   Readers and writers convert at the boundary (PDB, PQR, XYZ, DCD and
 *   OpenDX use Angstrom; md.h uses nm).
 *
 * ERRORS
 *   Every function that can fail returns md_status (MD_OK is 0). On failure
 *   md_last_error() returns a message (per thread) that names the file, line
 *   and field at fault, e.g. "box.pqr:12: field x: not a number ('1.2.3')",
 *   and the caller's outputs are left untouched. The library never prints,
 *   never calls exit() or abort(). One status is not a failure: MD_WARN_CELL
 *   (md_read_pdb of a file whose cell is not orthorhombic) means the atoms
 *   were read and the output filled, without a box; accept it or treat it
 *   as an error, but free the output either way.
 *
 * PRECISION
 *   Kernels compute in float; the reference rungs accumulate in double.
 *
 * EXAMPLE (potential map of random charges)
 *       #define MD_IMPLEMENTATION
 *       #include "md.h"
 *       #include <stdio.h>
 *       int main(void) {
 *           md_system sys; md_grid grid;
 *           double box[3] = {4, 4, 4}, origin[3] = {0, 0, 0}, h[3] = {0.1, 0.1, 0.1};
 *           if (md_build_random_charges(&sys, 1000, box, 1.0, 42) != MD_OK ||
 *               md_grid_alloc(&grid, 40, 40, 40, origin, h) != MD_OK) {
 *               fprintf(stderr, "%s\n", md_last_error()); return 1;
 *           }
 *           md_dcs(MD_DCS_CPU_ROWS, sys.xyzq, sys.n, &grid);
 *           printf("V(0,0,0) = %g kJ/mol/e\n", grid.data[0]);
 *           md_grid_free(&grid); md_system_free(&sys);
 *           return 0;
 *       }
 *
 * CONTENTS
 *   core     md_status, md_last_error, allocation, timing, md_median
 *   rng      md_rng: xoshiro256** seeded by splitmix64
 *   system   md_system (positions+charges as float4, types, masses,
 *            velocities, orthorhombic box, names, residues, bonds), builders,
 *            md_system_copy_topology (names of a topology onto trajectory frames)
 *   grid     md_grid (dimensions, origin, spacing, float data)
 *   io       md_read_pqr, md_read_pdb, md_read_xyz, md_read_psf, md_read_dx
 *            (and their _mem forms), md_read_topology (by extension),
 *            md_xyz_open/next/close (multi-frame XYZ), md_write_xyz,
 *            md_write_pdb, md_write_dx, md_element_mass, md_guess_element
 *   dcs      md_dcs: direct Coulomb sum potential maps, the CPU ladder
 *   rdf      md_rdf_init/accumulate/normalize/write_csv: radial distribution
 *            functions; md_select: atom selections ("name OW", "index 0-9")
 *   dcd      md_dcd_open/open_mem/next/close, md_dcd_write: DCD trajectories
 *   traj     md_traj_open/next/close: any trajectory (.dcd, .xyz) by extension
 *   bench    md_bench_result and md_bench_json: benchmark JSON lines
 *
 * LICENSE: MIT (see the end of this file).
 */
#ifndef MD_H
#define MD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** @def MDDEF
 *  @brief Storage class of every public function: extern, or static when MD_STATIC is defined. */
#ifdef MD_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define MDDEF static __attribute__((unused))
#else
#define MDDEF static
#endif
#else
#ifdef __cplusplus
#define MDDEF extern "C"
#else
#define MDDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* core                                                                     */
/* ======================================================================== */

/** @file md.h
 *  @brief Molecular dynamics building blocks: the CPU reference library.
 *
 *  See the manual at the top of the file for how to include it, the units
 *  and the error model. */

/** @brief Version of md.h as a string. */
#define MD_VERSION "0.1.0"

/** @brief Coulomb constant 1/(4 pi eps0) in kJ mol^-1 nm e^-2. */
#define MD_COULOMB 138.935458

/** @brief Boltzmann constant in kJ mol^-1 K^-1. */
#define MD_KB 0.00831446261815324

/** @brief Status code returned by every function that can fail. */
typedef enum md_status {
    MD_OK = 0,               /**< success */
    MD_ERR_INVALID_ARGUMENT, /**< a caller passed a bad argument (NULL, n <= 0, ...) */
    MD_ERR_OUT_OF_MEMORY,    /**< an allocation failed or its size overflows */
    MD_ERR_IO,               /**< a file could not be opened, read or written */
    MD_ERR_PARSE,            /**< a file's content is malformed */
    MD_ERR_RANGE,            /**< a value is out of range: NaN, infinite, overflow, box too small */
    MD_ERR_UNSUPPORTED,      /**< the request is valid but this build or rung cannot do it */
    MD_ERR_CUDA,             /**< a CUDA call failed (md_cuda.cu.h) */
    MD_ERR_NO_DEVICE,        /**< no usable CUDA device (md_cuda.cu.h) */
    MD_WARN_CELL,            /**< not a failure: the file was read and the output filled, but its periodic
                                  cell is not orthorhombic, which md.h cannot use, so md_system::box is
                                  zero and md_system::cell holds the cell. Accept it (st == MD_OK ||
                                  st == MD_WARN_CELL) to use the atoms without periodic boundaries, and
                                  free the output as after MD_OK (md_read_pdb) */
    MD_STATUS_COUNT          /**< number of status codes */
} md_status;

/** @brief One fixed sentence describing a status code (never NULL). */
MDDEF const char *md_status_string(md_status status);

/** @brief The message of the last failure on this thread.
 *
 *  It names the file (or function), line and field at fault. It stays valid
 *  until the next failing call on the same thread. Empty if nothing failed. */
MDDEF const char *md_last_error(void);

/** @brief Clear this thread's last error message. */
MDDEF void md_clear_error(void);

/** @brief Record an error and return @p status.
 *
 *  For extensions of the library (md_cuda.cu.h uses it). @p where is a file
 *  name or function name, @p line the line number (<= 0: none), @p field the
 *  field at fault (NULL: none), then a printf-style message. */
MDDEF md_status md_set_error(md_status status, const char *where, long line, const char *field,
                             const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/** @brief Wall-clock seconds from an arbitrary origin (C11 timespec_get). */
MDDEF double md_wall_seconds(void);

/** @brief Median of @p n values; sorts @p v in place. Returns NaN for n <= 0. */
MDDEF double md_median(double *v, int n);

/** @brief Largest |out[i] - ref[i]| / max_i |ref[i]| over @p n values: the error measure
 *  every check uses. Potential maps change sign, so the error is relative to the largest
 *  magnitude rather than point by point. Any NaN in @p out gives +infinity (so an unwritten,
 *  NaN-poisoned element fails every tolerance), and so does a NaN or infinite value in
 *  @p ref (a broken reference passes no check); an all-zero @p ref gives the absolute error. */
MDDEF double md_max_rel_error(const float *out, const float *ref, size_t n);

/** @brief Allocate @p count * @p size bytes with MD_MALLOC, checking the product for overflow.
 *  Returns NULL (and sets the error) on overflow or failure. */
MDDEF void *md_alloc_array(size_t count, size_t size);

/** @brief Release memory from md_alloc_array (MD_FREE). NULL is allowed. */
MDDEF void md_free(void *p);

/* ======================================================================== */
/* rng                                                                      */
/* ======================================================================== */

/** @brief Deterministic random number generator: xoshiro256** (Blackman & Vigna, 2018).
 *
 *  The 64-bit seed is expanded to the 256-bit state by splitmix64, so every
 *  seed (0 included) gives a valid stream. The same seed gives the same
 *  numbers on every platform. */
typedef struct md_rng {
    uint64_t s[4]; /**< generator state */
} md_rng;

/** @brief Seed @p rng from a 64-bit seed (state = four splitmix64 outputs). */
MDDEF void md_rng_seed(md_rng *rng, uint64_t seed);

/** @brief Next 64 random bits (xoshiro256**). */
MDDEF uint64_t md_rng_next(md_rng *rng);

/** @brief Uniform double in [0, 1) from the top 53 bits of md_rng_next. */
MDDEF double md_rng_uniform(md_rng *rng);

/** @brief Standard normal deviate (Box-Muller, one value per call, two uniforms consumed). */
MDDEF double md_rng_normal(md_rng *rng);

/* ======================================================================== */
/* system                                                                   */
/* ======================================================================== */

/** @brief Four packed floats: a position and a charge (x, y, z, q), or any 4-vector. */
typedef struct md_float4 {
    float x; /**< x (nm) */
    float y; /**< y (nm) */
    float z; /**< z (nm) */
    float w; /**< fourth component: the charge (e) in md_system::xyzq */
} md_float4;

/** @brief Three packed floats (velocities, forces). */
typedef struct md_float3 {
    float x; /**< x component */
    float y; /**< y component */
    float z; /**< z component */
} md_float3;

/** @brief Longest name an md_name holds (characters, without the NUL). Readers reject a
 *  longer name with an error naming the line and field rather than cut it. */
#define MD_NAME_MAX 15

/** @brief A short NUL-terminated name (atom name, element, residue name, segment, type). */
typedef struct md_name {
    char s[MD_NAME_MAX + 1]; /**< up to MD_NAME_MAX characters and a NUL */
} md_name;

/** @brief A system of atoms in an orthorhombic box: the file record readers fill.
 *
 *  Every per-atom array has md_system::n entries, md_system::bond has 2 * md_system::nbond;
 *  all are owned by the system (md_system_free releases them). A box of all zeros means
 *  "no box" (open boundaries). At most one of md_system::box and md_system::cell is set.
 *  A one-character field (chain, icode, altloc) is 0 when the file leaves it blank. */
typedef struct md_system {
    int n;             /**< number of atoms */
    md_float4 *xyzq;   /**< positions (nm) and charges (e), packed for coalesced GPU loads */
    md_float3 *vel;    /**< velocities (nm/ps) */
    float *mass;       /**< masses (amu) */
    float *radius;     /**< radii (nm): PQR radius, else 0 */
    int *type;         /**< atom type index (0-based), e.g. into a Lennard-Jones table: the index
                            of the atom's md_system::type_name (PSF) or md_system::name (other
                            formats) among the distinct ones, in order of first appearance */
    md_name *name;     /**< atom name (PDB, PQR, PSF) or element symbol (XYZ) */
    md_name *resname;  /**< residue name (PDB, PQR, PSF), else empty */
    int *resid;        /**< residue number (PDB, PQR, PSF), else 0 */
    char *chain;       /**< chain identifier (PDB column 22, PQR chain field), else 0 */
    char *icode;       /**< residue insertion code (PDB column 27; the "A" of "36A" in PQR and
                            PSF), else 0 */
    char *altloc;      /**< alternate location indicator (PDB column 17), else 0 */
    md_name *element;  /**< element symbol the mass comes from ("C", "Cl"), see md_guess_element;
                            empty when unknown */
    md_name *segid;    /**< segment identifier (PSF segid, PDB columns 73-76), else empty */
    md_name *type_name; /**< force-field atom type (PSF type column), else empty */
    int nbond;         /**< number of bonds in md_system::bond */
    int *bond;         /**< 2 * nbond atom indices (0-based): bond k joins bond[2k] < bond[2k+1];
                            sorted, no duplicates (PSF NBOND, PDB CONECT); NULL when nbond is 0 */
    double box[3];     /**< orthorhombic box edge lengths (nm); all zero: no box */
    double cell[6];    /**< a non-orthorhombic unit cell the file declared (a, b, c in nm, alpha,
                            beta, gamma in degrees), which md.h cannot use as a box (see
                            MD_WARN_CELL); all zero otherwise, orthorhombic cells go to box */
} md_system;

/** @brief Allocate every per-atom array of @p sys for @p n atoms, zero-filled; box, cell
 *  and bonds zero.
 *
 *  On failure @p sys is left untouched. n must be at least 1. */
MDDEF md_status md_system_alloc(md_system *sys, int n);

/** @brief Release every array of @p sys (bonds included) and zero it. Safe on a zeroed system. */
MDDEF void md_system_free(md_system *sys);

/** @brief Copy the topology of @p src onto @p dst: every per-atom field except positions and
 *  velocities (names, residues, chain, insertion code, alternate location, element,
 *  segment, type name, type, mass, charge, radius) and the bonds.
 *
 *  This is how a trajectory gets names: a DCD frame holds positions only, so copy a PDB,
 *  PQR or PSF topology onto the first frame; md_dcd_next and md_xyz_next keep every field
 *  but the positions, box and cell of a frame they reuse, so md_select by name then works on
 *  every frame. dst->xyzq x, y, z, dst->vel, dst->box and dst->cell are kept. Errors: NULL
 *  or unallocated systems (MD_ERR_INVALID_ARGUMENT), different atom counts
 *  (MD_ERR_INVALID_ARGUMENT, field n), out of memory; on failure @p dst is untouched. */
MDDEF md_status md_system_copy_topology(md_system *dst, const md_system *src);

/** @brief Sum of the charges, accumulated in double. */
MDDEF double md_system_charge(const md_system *sys);

/** @brief Kinetic temperature (K) with 3n - 3 degrees of freedom (momentum removed). */
MDDEF double md_system_temperature(const md_system *sys);

/** @brief n random atoms uniform in the box [0, box), charges uniform in [-qmax, qmax].
 *
 *  The mean charge is subtracted (in double) so the system is neutral to float
 *  rounding. Mass 1 amu, type 0, name "Q". Deterministic for a given @p seed.
 *  On failure @p sys is untouched. */
MDDEF md_status md_build_random_charges(md_system *sys, int n, const double box[3], double qmax,
                                        uint64_t seed);

/** @brief Parameters of an FCC lattice; a zero field takes its default.
 *
 *  The defaults are liquid argon near its triple point (Lennard-Jones
 *  sigma 0.3405 nm, epsilon/kB 119.8 K, reduced density 0.8442, reduced
 *  temperature 0.722). */
typedef struct md_fcc_desc {
    int cells;          /**< unit cells along each edge; 4 atoms each (default 6: 864 atoms) */
    double lattice;     /**< lattice constant (nm) (default 0.5719) */
    double temperature; /**< initial temperature (K) (default 86.5) */
    double mass;        /**< atom mass (amu) (default 39.948, argon) */
    uint64_t seed;      /**< velocity seed (0 is a valid seed and the default) */
} md_fcc_desc;

/** @brief Face-centred cubic lattice with Maxwell-Boltzmann velocities.
 *
 *  4 * cells^3 atoms in a cubic box of edge cells * lattice. Velocities are
 *  drawn from the Maxwell-Boltzmann distribution, the centre-of-mass
 *  velocity is removed and they are scaled so md_system_temperature() equals
 *  the requested temperature. Charges 0, type 0, name and element "Ar". */
MDDEF md_status md_build_fcc(md_system *sys, const md_fcc_desc *desc);

/* ======================================================================== */
/* grid                                                                     */
/* ======================================================================== */

/** @brief A 3D grid of floats. Point (i, j, k) is at origin + (i, j, k) * spacing
 *  and stored at data[((size_t)k * n[1] + j) * n[0] + i] (x fastest). */
typedef struct md_grid {
    int n[3];          /**< points along x, y, z */
    double origin[3];  /**< position of point (0, 0, 0) (nm) */
    double spacing[3]; /**< distance between neighbouring points along x, y, z (nm) */
    float *data;       /**< n[0] * n[1] * n[2] values */
} md_grid;

/** @brief Allocate a zero-filled grid. On failure @p grid is untouched. */
MDDEF md_status md_grid_alloc(md_grid *grid, int nx, int ny, int nz, const double origin[3],
                              const double spacing[3]);

/** @brief Release a grid's data and zero it. Safe on a zeroed grid. */
MDDEF void md_grid_free(md_grid *grid);

/** @brief Number of points in the grid. */
MDDEF size_t md_grid_count(const md_grid *grid);

/* ======================================================================== */
/* io                                                                       */
/* ======================================================================== */

/* Readers parse a whole file (or a buffer in memory, for fuzzing and embedded
 * data) into a new md_system. They share one line reader (any line length,
 * CR LF or LF, an embedded NUL byte is an error) and one pair of field
 * parsers: a number must fill its whole field (strtod/strtol end pointer),
 * must be finite and must fit a float. On any failure the reader returns
 * non-OK, md_last_error() names "file:line: field F: why", and *sys is left
 * untouched. On success *sys is overwritten (free any previous contents
 * first) and every md_system field is filled:
 *   xyzq      position converted to nm (files hold Angstrom, x 0.1) and the charge (e)
 *   radius    PQR radius in nm (x 0.1), else 0
 *   name      atom name (PDB, PQR, PSF) or element symbol (XYZ)
 *   resname   residue name (PDB, PQR, PSF), else empty
 *   resid     residue number (PDB, PQR, PSF), else 0
 *   chain, icode, altloc, segid   as the format has them (see each reader), else 0 / empty
 *   element   the element column (PDB 77-78) when not blank, else md_guess_element
 *   mass      PSF: the mass column; else md_element_mass(element), 0 when the element is
 *             unknown (set such masses yourself before dynamics)
 *   type_name PSF: the atom type column; else empty
 *   type      index of the atom's type name (PSF) or name (other formats) among the
 *             distinct ones, in order of first appearance (the first atom's is type 0)
 *   bond      PSF NBOND section, PDB CONECT records, else none
 *   vel       zero
 *   box       orthorhombic box (nm) from CRYST1 / Lattice=, else all zero
 *   cell      a non-orthorhombic CRYST1 (see md_read_pdb), else all zero
 * Names are never cut: a name, residue name, segment or type longer than
 * MD_NAME_MAX (15) characters is an error (MD_ERR_RANGE) naming the line and field.
 * A file whose last line holds atom data (an atom line, a PSF bond line, DX
 * values) but ends without an end of line is an error naming that line and
 * its last field: a file cut short inside a number ("0.17" cut to "0.1")
 * cannot be told from a complete one otherwise. (A PDB record that reaches
 * column 80 is complete and accepted.)
 * Numbers are read with strtod, so the C locale's decimal point is assumed
 * (do not read files after setlocale() to a locale with a decimal comma).
 * md_read_dx / md_read_dx_mem read an OpenDX grid the same way into an md_grid. */

/** @brief Mass (amu) of an element from the readers' table, or 0 when unknown.
 *
 *  The table holds H He Li B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Mn Fe Co Ni
 *  Cu Zn Se Br Kr Rb Sr Cd I Xe Cs Ba (IUPAC 2021 standard atomic weights, abridged to
 *  five significant digits); @p symbol is matched case-insensitively ("CL", "Cl", "cl"). */
MDDEF float md_element_mass(const char *symbol);

/** @brief The element of an atom guessed from its name and residue name (for files
 *  without an element column): a symbol of md_element_mass's table ("C", "Cl"), or ""
 *  when no rule applies. Never NULL; the string is static.
 *
 *  The rules, in order (case-insensitive; @p resname may be NULL or empty):
 *  1. Ions by residue: when @p resname names an ion (NA NA+ SOD | CL CL- CLA | K K+ POT |
 *     MG MG2 MG2+ | CA CA2 CA2+ CAL | ZN ZN2 ZN2+ | LI LI+ LIT | RB RB+ RUB | CS CS+ CES |
 *     BA BA2 BAR | SR | CD CD2 | MN | FE FE2 | CU CU1 | BR BR- | IOD | F F-) and @p name is
 *     that element's symbol or another of its names (SOD in NA+, NA in SOD, CLA in CLA),
 *     the atom is that ion: NA in NA+ or SOD is sodium, CA in CAL is calcium.
 *  2. CHARMM ion atom names in any residue: SOD Na, POT K, CLA Cl, CAL Ca, LIT Li,
 *     RUB Rb, CES Cs, BAR Ba.
 *  3. After any leading digits, a name starting with CL, BR, FE, ZN, MG, MN, CU or SE
 *     is that element (CL1 chlorine, FE heme iron, SE selenomethionine). Other two-letter
 *     starts are not read as elements, since proteins use them for carbons, nitrogens
 *     and hydrogens (CA, CD, CE, NA, NE, HG).
 *  4. Otherwise the first letter after leading digits, if it is an element of the table
 *     (H C N O S P F I K B): "1HB" hydrogen, "CA" in ALA carbon, "NA" in HEM nitrogen.
 *  The element column of a PDB, when present, always wins over these guesses. */
MDDEF const char *md_guess_element(const char *name, const char *resname);

/** @brief Read a PQR file (as PDB2PQR writes it) into @p sys.
 *
 *  Accepts whitespace-separated `ATOM` / `HETATM` lines
 *  `ATOM serial name resName [chain] resSeq x y z q r` (10 or 11 fields; the
 *  numeric fields are counted from the end of the line, so the chain column is
 *  optional; leading blanks are allowed). resSeq may carry an insertion code,
 *  "36A" (resid 36, md_system::icode 'A', as PDB2PQR writes it), and a chain letter
 *  run into a 4-digit residue number, as fixed-column writers produce for residues
 *  1000-9999 ("A1000", "A1000B"), is read as chain + resSeq (+ insertion code). A
 *  one-character chain field goes to md_system::chain; a longer one (APBS allows any
 *  string) to md_system::segid. x y z and r are Angstrom (stored
 *  in nm), q is the charge in e, r must be >= 0. Every other line (REMARK,
 *  TER, END, ...) is ignored. At least one atom is required. There is no
 *  box. Errors: MD_ERR_IO (cannot open or read), MD_ERR_PARSE (short line,
 *  non-numeric field, no atoms, NUL byte, last atom line without an end of
 *  line), MD_ERR_RANGE (NaN, infinite or too large a value, negative radius,
 *  a name longer than MD_NAME_MAX), MD_ERR_OUT_OF_MEMORY. */
MDDEF md_status md_read_pqr(const char *path, md_system *sys);

/** @brief md_read_pqr on @p len bytes at @p data (no NUL needed); @p name is used in messages. */
MDDEF md_status md_read_pqr_mem(const char *data, size_t len, const char *name, md_system *sys);

/** @brief Read the first model of a PDB file into @p sys.
 *
 *  Fixed columns (1-based, inclusive). `ATOM` / `HETATM` records: serial 7-11, name 13-16,
 *  altLoc 17, resName 18-21, chainID 22, resSeq 23-26 (blank: 0; a digit in column 27
 *  makes a 5-digit resSeq 23-27, as writers of large systems produce), iCode 27,
 *  x y z 31-38, 39-46, 47-54 (Angstrom, stored in nm; the line must reach column 54),
 *  segID 73-76, element 77-78 and charge 79-80 ("1-", "2+", "-1", "+2"; a bare digit,
 *  "0" as older writers put there, is that charge with a + sign; blank or absent: 0).
 *  The radius is 0. Every alternate location is read as an atom of its own (md_system::altloc
 *  tells them apart).
 *
 *  `CRYST1` a b c at 7-15, 16-24, 25-33 (Angstrom) and alpha beta gamma at 34-40, 41-47,
 *  48-54 (degrees). Edges all zero (as VMD, NAMD and MDAnalysis write for "no cell") or all
 *  1.000 (the PDB's placeholder) mean no box. Otherwise every edge must be > 0 and every
 *  angle within (0, 180) (else MD_ERR_RANGE naming it). Angles of 90 (to 1e-3) set
 *  md_system::box. Any other cell is not orthorhombic: the atoms are still read, box
 *  stays zero, md_system::cell holds a, b, c (nm) and the angles, and the reader returns
 *  MD_WARN_CELL (not MD_OK) with *sys filled and md_last_error() naming the line and the
 *  angle; accept that status to use the atoms without periodic boundaries. A second
 *  CRYST1 is an error.
 *
 *  `CONECT` records (serial 7-11, bonded serials 12-16, 17-21, 22-26, 27-31) become
 *  md_system::bond; a serial that no atom of the first model has, or that two atoms share,
 *  is an error naming the CONECT line. Reading of atoms stops at the first `ENDMDL`
 *  (CONECT records after it are still read) and the whole file at `END`; other records are
 *  ignored. At least one atom is required. */
MDDEF md_status md_read_pdb(const char *path, md_system *sys);

/** @brief md_read_pdb on @p len bytes at @p data (no NUL needed); @p name is used in messages. */
MDDEF md_status md_read_pdb_mem(const char *data, size_t len, const char *name, md_system *sys);

/** @brief Read the first frame of an XYZ file into @p sys.
 *
 *  A frame is: a line holding only the atom count (1 or more; blank lines
 *  before it are skipped), a comment line, then one line per atom
 *  `symbol x y z [more columns, ignored]` with x y z in Angstrom (stored in
 *  nm). The comment may hold an extended-XYZ `Lattice="ax 0 0 0 by 0 0 0 cz"`
 *  (Angstrom): the off-diagonal entries must be 0 (else MD_ERR_UNSUPPORTED)
 *  and the edges > 0 (else MD_ERR_RANGE); it sets the box. Charges and radii
 *  are 0. The element is the symbol when it is one of md_element_mass's table,
 *  else md_guess_element of the symbol ("OW" oxygen). An atom count larger than
 *  the rest of the file could hold (each atom line takes at least 8 bytes) is
 *  rejected before anything is allocated. */
MDDEF md_status md_read_xyz(const char *path, md_system *sys);

/** @brief md_read_xyz on @p len bytes at @p data (no NUL needed); @p name is used in messages. */
MDDEF md_status md_read_xyz_mem(const char *data, size_t len, const char *name, md_system *sys);

/** @brief Read a PSF topology (CHARMM, X-PLOR, NAMD) into @p sys.
 *
 *  The layout follows CHARMM's psffres.src as quoted in MDAnalysis's PSF format page
 *  (userguide.mdanalysis.org, formats/reference/psf) and VMD's psfplugin: a first line
 *  `PSF [EXT] [NAMD] [XPLOR] [CHEQ] [CMAP] [DRUDE]`, `N !NTITLE` and N title lines, `N !NATOM`
 *  and N atom lines
 *  `ID segid resid resname name type charge mass IMOVE [more columns, ignored]`,
 *  then `M !NBOND: bonds` and 2M atom IDs, any number per line (CHARMM writes 4 pairs).
 *  Standard (I8, A4 fields), EXT (I10, A8 fields) and NAMD (space-separated) files all
 *  separate their fields by blanks, so every variant is read by splitting on blanks; the
 *  type is a type name (X-PLOR, NAMD) or a CHARMM type number, kept as text in
 *  md_system::type_name either way. An atom line of 8 fields is read as one with a blank
 *  segid (fixed-column files) when its second field is a residue number and its third is
 *  not, else as a line without IMOVE. resid may carry an insertion code ("36A"). IDs must
 *  run 1, 2, ..., N. Charges are e, masses amu, both as written (mass >= 0). A PSF holds
 *  no coordinates: positions are zero; copy the topology onto frames with
 *  md_system_copy_topology. Bonds are checked (IDs in 1..N, no atom
 *  bonded to itself) and stored 0-based, sorted, once each. A file that ends after the
 *  atoms has no bonds; the sections after NBOND (angles, dihedrals, ...) are not read.
 *  Errors name the file, line and field: MD_ERR_PARSE (no PSF header, a missing section
 *  or field, a truncated section or last line), MD_ERR_RANGE (a count or ID out of range,
 *  NaN, negative mass, a name longer than MD_NAME_MAX). */
MDDEF md_status md_read_psf(const char *path, md_system *sys);

/** @brief md_read_psf on @p len bytes at @p data (no NUL needed); @p name is used in messages. */
MDDEF md_status md_read_psf_mem(const char *data, size_t len, const char *name, md_system *sys);

/** @brief Read a topology or structure file, choosing the reader by the extension
 *  (case-insensitive): .psf md_read_psf, .pdb / .ent md_read_pdb, .pqr md_read_pqr,
 *  .xyz md_read_xyz. Other extensions: MD_ERR_UNSUPPORTED naming the file. Returns what the
 *  reader returns (MD_WARN_CELL included). */
MDDEF md_status md_read_topology(const char *path, md_system *sys);

/** @brief A multi-frame XYZ file being read frame by frame (md_xyz_open, md_xyz_next,
 *  md_xyz_close). Frames follow the format of md_read_xyz. */
typedef struct md_xyz_reader {
    FILE *file;     /**< the open file; NULL when closed */
    char *path;     /**< copy of the path, used in messages */
    long line;      /**< number of the last line read (1-based; 0 before the first) */
    long frames;    /**< frames read so far */
    char *buf;      /**< line buffer, grown to hold the longest line */
    size_t cap;     /**< capacity of md_xyz_reader::buf in bytes */
    long long size; /**< file size in bytes, or -1 when it cannot be known (a pipe) */
    long long pos;  /**< bytes consumed so far */
} md_xyz_reader;

/** @brief Open @p path for md_xyz_next. On failure (MD_ERR_IO: cannot open) @p r is zeroed. */
MDDEF md_status md_xyz_open(md_xyz_reader *r, const char *path);

/** @brief Read the next frame into @p frame, *got = 1; at a clean end of file (only blank
 *  lines left) *got = 0, MD_OK and @p frame is unchanged.
 *
 *  Pass a zeroed md_system the first time. Frames are reused exactly as md_dcd_next reuses
 *  them: when frame->n differs from the new frame's atom count (always the first time),
 *  @p frame is freed and replaced by a new system holding everything the XYZ frame has
 *  (names, elements, masses, types, positions, box); when it is the same, only the
 *  positions (xyzq x, y, z), md_system::box and md_system::cell (zeroed) are overwritten and
 *  every other field is kept, so names copied from a topology (md_system_copy_topology),
 *  charges and velocities survive. The symbols of such a frame are neither compared nor
 *  stored (as in VMD and MDAnalysis, names come from the first frame or the topology). Free
 *  @p frame with md_system_free when done. A truncated or malformed frame returns an
 *  error naming the line and field, *got = 0, and @p frame is unchanged; the reader is
 *  then mid-frame, so close it. */
MDDEF md_status md_xyz_next(md_xyz_reader *r, md_system *frame, int *got);

/** @brief Close the file and free the reader's buffers; @p r is zeroed. Safe to call twice. */
MDDEF void md_xyz_close(md_xyz_reader *r);

/** @brief Write @p sys as one XYZ frame (symbol from md_system::name, "X" if empty;
 *  positions in Angstrom with 6 decimals, i.e. +-5e-7 Angstrom).
 *
 *  The comment line is `Lattice="ax 0 0 0 by 0 0 0 cz" Properties=species:S:1:pos:R:3 `
 *  followed by @p comment when a box is set (all three edges > 0; a partly
 *  zero box is MD_ERR_RANGE), else just @p comment (NULL: empty; it must not
 *  hold a newline). With @p append = 0 the file is written to "<path>.tmp"
 *  and renamed over @p path, so @p path is never half-written. With
 *  @p append = 1 the frame is added to the end of @p path (created if absent)
 *  with a single fwrite of the whole frame text; should that write fail,
 *  at most the last frame is partial, which md_xyz_next reports as a
 *  truncated frame. */
MDDEF md_status md_write_xyz(const char *path, const md_system *sys, const char *comment, int append);

/** @brief Write @p sys as a PDB file (positions in Angstrom, %8.3f: +-5e-4 Angstrom).
 *
 *  `CRYST1 a b c 90 90 90 P 1` when a box is set (or the angles of md_system::cell when it
 *  holds a non-orthorhombic cell), one `ATOM` record per atom in md_read_pdb's columns:
 *  serial and resSeq wrap modulo 100000 and 10000 as usual; name, altLoc, resName, chainID,
 *  iCode, segID; element from md_system::element, else from the mass when it matches
 *  md_element_mass of a table element; charge in columns 79-80 only when it is a whole
 *  number from -9 to 9, since PDB has no column for fractional charges. Then, when there
 *  are bonds and at most 99999 atoms, two `CONECT` records per bond (one from each atom;
 *  PDB serials have 5 columns, so a larger system's bonds are not written: keep its PSF),
 *  then `END`. A coordinate that does not fit its 8 columns, or a name, residue name or
 *  segment longer than 4 characters, or an element longer than 2, is MD_ERR_RANGE naming
 *  the atom and field (PDB has no room for them; nothing is cut). Written to "<path>.tmp",
 *  then renamed over @p path. */
MDDEF md_status md_write_pdb(const char *path, const md_system *sys);

/** @brief Write @p grid as an OpenDX scalar field (the format APBS writes and VMD,
 *  PyMOL and ChimeraX open).
 *
 *  Origin and deltas are converted nm -> Angstrom; the values are written as
 *  they are (md_dcs maps are kJ mol^-1 e^-1) with %.9g, which a float reads
 *  back exactly. Points are written x slowest, z fastest, as DX requires.
 *  @p comment (NULL: none; no newline) becomes a `#` line. Written to
 *  "<path>.tmp", then renamed over @p path. */
MDDEF md_status md_write_dx(const char *path, const md_grid *grid, const char *comment);

/** @brief Read an OpenDX scalar field (as md_write_dx or APBS write it) into a new grid.
 *
 *  Accepts `#` comment lines, `object 1 class gridpositions counts nx ny nz`,
 *  `origin x y z` and three `delta` lines (Angstrom, stored in nm; the deltas
 *  must be axis-aligned, else MD_ERR_UNSUPPORTED), an optional
 *  `object 2 class gridconnections` line, and
 *  `object 3 class array type double|float rank 0 items N data follows`
 *  with N = nx*ny*nz, then N finite numbers (x slowest, z fastest) spread
 *  over any number of lines; what follows them is ignored. The line holding the
 *  last value must end with an end of line. On failure @p grid is untouched. */
MDDEF md_status md_read_dx(const char *path, md_grid *grid);

/** @brief md_read_dx on @p len bytes at @p data (no NUL needed); @p name is used in messages. */
MDDEF md_status md_read_dx_mem(const char *data, size_t len, const char *name, md_grid *grid);
/* ======================================================================== */
/* dcs: direct Coulomb sum potential map                                    */
/* ======================================================================== */

/** @brief An atom closer than sqrt(MD_DCS_MIN_R2) = 1e-5 nm to a grid point adds
 *  nothing to that point (a point charge's own potential is infinite). Every
 *  rung, CPU and GPU, applies this same rule. */
#define MD_DCS_MIN_R2 1e-10f

/** @brief The rungs of the direct-Coulomb-sum ladder, slow to fast.
 *
 *  CPU rungs run in md_dcs(); GPU rungs run in md_cuda_dcs() (md_cuda.cu.h). */
typedef enum md_dcs_variant {
    MD_DCS_CPU_SIMPLE = 0, /**< output-oriented: each point loops over all atoms; double (the reference) */
    MD_DCS_CPU_SCATTER,    /**< input-oriented: each atom adds to every point; float */
    MD_DCS_CPU_ROWS,       /**< plane by plane, dz^2 and dy^2+dz^2 precomputed per atom row; float */
    MD_DCS_CPU_ROWS_OMP,   /**< MD_DCS_CPU_ROWS with planes shared among OpenMP threads */
    MD_DCS_GPU_SCATTER,    /**< GPU: one thread per atom, atomicAdd into the grid */
    MD_DCS_GPU_GATHER,     /**< GPU: one thread per point, atoms read from global memory */
    MD_DCS_GPU_CONST,      /**< GPU: gather with atoms in __constant__ memory, chunk by chunk */
    MD_DCS_GPU_UNROLL4,    /**< GPU: constant memory, 4 points per thread spaced by the block width */
    MD_DCS_GPU_UNROLL8,    /**< GPU: constant memory, 8 points per thread, grid padded to whole tiles */
    MD_DCS_GPU_UNROLL8X2,  /**< GPU: constant memory, 8 points in each of 2 rows per thread */
    MD_DCS_GPU_L1,         /**< GPU: the 8 x 2 kernel reading atoms through L1 from global memory */
    MD_DCS_GPU_SHARED,     /**< GPU: the 8 x 2 kernel with atom tiles staged in shared memory */
    MD_DCS_GPU_HYBRID,     /**< GPU: 8 x 4 points with part of the rsqrts in software on the FMA pipe */
    MD_DCS_VARIANT_COUNT   /**< number of rungs */
} md_dcs_variant;

/** @brief Short name of a rung ("cpu_simple", ...), never NULL. */
MDDEF const char *md_dcs_variant_name(md_dcs_variant variant);

/** @brief 1 if @p variant is a GPU rung (run it with md_cuda_dcs), else 0. */
MDDEF int md_dcs_variant_is_gpu(md_dcs_variant variant);

/** @brief Reference rung: for each point, V = MD_COULOMB * sum_i q_i / r_i, in double. */
MDDEF md_status md_dcs_simple(const md_float4 *xyzq, int n, md_grid *grid);

/** @brief Input-oriented rung: each atom adds q/r to every grid point (float). */
MDDEF md_status md_dcs_scatter(const md_float4 *xyzq, int n, md_grid *grid);

/** @brief Plane-by-plane rung with dz^2 and dy^2 + dz^2 precomputed per atom and row (float). */
MDDEF md_status md_dcs_rows(const md_float4 *xyzq, int n, md_grid *grid);

/** @brief md_dcs_rows with the planes shared among OpenMP threads (one thread without -fopenmp). */
MDDEF md_status md_dcs_rows_omp(const md_float4 *xyzq, int n, md_grid *grid);

/** @brief Compute the potential map (kJ mol^-1 e^-1) of @p n charges on every point of
 *  @p grid with a CPU rung, overwriting grid->data.
 *
 *  Errors: NULL pointers, n < 1, a grid without data (MD_ERR_INVALID_ARGUMENT),
 *  a GPU rung (MD_ERR_UNSUPPORTED: call md_cuda_dcs). */
MDDEF md_status md_dcs(md_dcs_variant variant, const md_float4 *xyzq, int n, md_grid *grid);

/* ======================================================================== */
/* rdf: radial distribution functions                                       */
/* ======================================================================== */

/** @brief Default number of RDF bins (md_rdf_init with nbins 0). */
#define MD_RDF_DEFAULT_NBINS 200

/** @brief Histogram of pair distances accumulated over frames, and what its
 *  normalization needs.
 *
 *  Bins cover r in [0, rmax) with width rmax / nbins; a pair with
 *  r^2 < rmax^2 (float) lands in bin (int)(r * (nbins / rmax)) clamped to nbins - 1.
 *  Counts are exact 64-bit integers, so every rung (CPU and GPU) must give the
 *  same counts. Per frame the accumulator adds the number of distinct pairs
 *  counted divided by the box volume (md_rdf::sum_pair_density) and the
 *  number of centres (md_rdf::sum_centers); md_rdf_normalize() turns the counts into
 *  g(r) and the coordination number n(r).
 *
 *  Pairs counted per frame: A = B (one selection): each unordered pair i < j once,
 *  na (na - 1) / 2 pairs, na / 2 centres (each pair is a neighbour of both of its
 *  atoms). A != B: ordered pairs (a, b) with a in A, b in B and a != b,
 *  na nb - (atoms in both) pairs, na centres. Both conventions give the same g(r). */
typedef struct md_rdf {
    int nbins;               /**< number of bins */
    double rmax;             /**< outer edge of the last bin (nm) */
    uint64_t *counts;        /**< nbins pair counts, summed over frames */
    long long frames;        /**< frames accumulated */
    double sum_pair_density; /**< sum over frames of (pairs counted) / (box volume) (nm^-3) */
    double sum_centers;      /**< sum over frames of the centres: na, or na / 2 when A = B */
} md_rdf;

/** @brief Allocate a zeroed accumulator of @p nbins bins over [0, @p rmax).
 *
 *  nbins 0 takes MD_RDF_DEFAULT_NBINS. Errors: rmax not finite and > 0, or nbins
 *  outside 1..2^26 (MD_ERR_RANGE, naming the field). On failure @p r is untouched. */
MDDEF md_status md_rdf_init(md_rdf *r, double rmax, int nbins);

/** @brief Zero the counts and the normalization sums of @p r (keeps its bins). */
MDDEF void md_rdf_reset(md_rdf *r);

/** @brief Release the counts of @p r and zero it. Safe on a zeroed accumulator. */
MDDEF void md_rdf_free(md_rdf *r);

/** @brief The rungs of the RDF ladder, slow to fast.
 *
 *  CPU rungs run in md_rdf_accumulate(); GPU rungs in md_cuda_rdf_accumulate()
 *  (md_cuda.cu.h). Every rung gives exactly the same integer counts. */
typedef enum md_rdf_variant {
    MD_RDF_CPU_SIMPLE = 0, /**< one loop over the pairs, one histogram (the reference) */
    MD_RDF_CPU_PRIVATE,    /**< rows of A shared among OpenMP threads, one private histogram per
                                thread, summed at the end */
    MD_RDF_GPU_GLOBAL,     /**< GPU: one thread per A atom, atomicAdd into one global histogram */
    MD_RDF_GPU_SHARED,     /**< GPU: one shared-memory histogram per block, B tiles in shared memory */
    MD_RDF_GPU_WARP,       /**< GPU: one shared-memory histogram per warp (fewer collisions), B tiles
                                in shared memory */
    MD_RDF_GPU_PASSES,     /**< GPU: the shared-histogram kernel in passes over bin ranges, for
                                histograms larger than shared memory */
    MD_RDF_VARIANT_COUNT   /**< number of rungs */
} md_rdf_variant;

/** @brief Short name of a rung ("cpu_simple", ...), never NULL. */
MDDEF const char *md_rdf_variant_name(md_rdf_variant variant);

/** @brief 1 if @p variant is a GPU rung (run it with md_cuda_rdf_accumulate), else 0. */
MDDEF int md_rdf_variant_is_gpu(md_rdf_variant variant);

/** @brief Check two selections and count what one frame adds to the normalization.
 *
 *  @p sel_a holds @p na atom indices into a frame of @p natoms atoms (NULL: atoms
 *  0 .. na - 1); likewise @p sel_b / @p nb. A = B when sel_b is NULL, or sel_b == sel_a
 *  and nb == na. Writes the pairs a frame counts to @p pairs and its centres to
 *  @p centers (see md_rdf). Errors: na or nb < 1, an index outside 0..natoms-1
 *  or repeated within a selection (MD_ERR_INVALID_ARGUMENT, naming sel_a or sel_b),
 *  out of memory. */
MDDEF md_status md_rdf_selection_pairs(int natoms, const int *sel_a, int na, const int *sel_b, int nb,
                                       double *pairs, double *centers);

/** @brief Check that an orthorhombic @p box holds a sphere of radius @p rmax under the
 *  minimum-image convention: every edge finite and >= 2 rmax (else MD_ERR_RANGE,
 *  field "box"). @p where names the caller in the message. */
MDDEF md_status md_rdf_check_box(const char *where, const double box[3], double rmax);

/** @brief Add one frame's normalization (volume of @p box, @p pairs, @p centers) to @p r.
 *  For extensions (the GPU rungs call it after adding their counts). */
MDDEF md_status md_rdf_add_frame(md_rdf *r, const double box[3], double pairs, double centers);

/** @brief Add one frame's pair distances between selections A and B to @p r with a CPU rung.
 *
 *  @p xyz holds @p natoms positions (nm; .w ignored). Selections and the A = B rule are
 *  those of md_rdf_selection_pairs(). Minimum image in the orthorhombic @p box: each
 *  coordinate is first wrapped into [0, L) as x - L floor(x / L) (float, one fmaf), then
 *  each difference d becomes min(|d|, L - |d|), the nearer image; r^2 is two fmaf. Every
 *  rung, CPU and GPU, does exactly these float operations, so their counts are equal. Errors: those of md_rdf_selection_pairs(),
 *  box edges below 2 rmax (MD_ERR_RANGE, field box), a non-finite coordinate
 *  (MD_ERR_RANGE, field xyz), a GPU rung (MD_ERR_UNSUPPORTED). On failure @p r is untouched. */
MDDEF md_status md_rdf_accumulate(md_rdf_variant variant, md_rdf *r, const md_float4 *xyz, int natoms,
                                  const int *sel_a, int na, const int *sel_b, int nb,
                                  const double box[3]);

/** @brief g(r) and the running coordination number n(r) of an accumulator, per bin.
 *
 *  g[k] = counts[k] / (V_k * sum_pair_density), with V_k = 4/3 pi (r_{k+1}^3 - r_k^3) the
 *  shell volume of bin k; coordination[k] = (sum of counts[0..k]) / sum_centers, the mean
 *  number of B atoms within r_{k+1} of an A atom. Either output may be NULL. Errors: no
 *  frame accumulated (MD_ERR_INVALID_ARGUMENT, field frames). */
MDDEF md_status md_rdf_normalize(const md_rdf *r, double *g, double *coordination);

/** @brief Write "r_nm,g,n" CSV (bin centres, g(r), n(r)) to @p path, atomically (a
 *  temporary file renamed over @p path), so a failure never leaves a partial file. */
MDDEF md_status md_rdf_write_csv(const char *path, const md_rdf *r);

/** @brief Select atoms of @p sys by an expression; the indices go to a new array @p idx
 *  (free it with md_free) and their number to @p count.
 *
 *  Expressions: "all"; "name NAME" (atom name, exact, up to MD_NAME_MAX characters);
 *  "type T" (type index); "index I" or "index I-J" (0-based, inclusive). A DCD frame has
 *  no names: copy a topology onto it first (md_system_copy_topology). Errors: an unknown
 *  keyword, a bad number or range (MD_ERR_PARSE, field expr), a selection that matches no atom
 *  (MD_ERR_INVALID_ARGUMENT, field expr). On failure the outputs are untouched. */
MDDEF md_status md_select(const md_system *sys, const char *expr, int **idx, int *count);

/* ---- DCD trajectories (CHARMM / NAMD / VMD / OpenMM binary format) ---- */

/** @brief Largest atom count a DCD header may declare (larger is rejected as absurd). */
#define MD_DCD_MAX_ATOMS 100000000

/** @brief A DCD trajectory being read frame by frame, from a file or from memory.
 *
 *  Layout: Fortran unformatted records, each framed by a 4-byte length before and after.
 *  Header record (84 bytes: "CORD" and 20 int32 ICNTRL; ICNTRL[0] frames, [8] fixed atoms,
 *  [10] 1 if every frame has a unit cell, [11] 1 for a fourth dimension), a title record
 *  (int32 count and 80-byte lines), a NATOM record; then per frame an optional cell record
 *  of 6 doubles (A, gamma, B, beta, alpha, C in Angstrom and degrees, or cosines of
 *  the angles) and three records of NATOM floats X, Y, Z (Angstrom). The byte order
 *  is detected from the first length marker (84), so either endianness reads.
 *  Fixed atoms and 4D files are not supported (MD_ERR_UNSUPPORTED).
 *
 *  Time: CHARMM-style headers (ICNTRL[19] != 0) hold DELTA, the MD time step, as a float
 *  in ICNTRL[9] (AKMA time units, 0.04888821 ps) and NSAVC, the steps between saved frames,
 *  in ICNTRL[2]; the time between frames is DELTA x NSAVC. X-PLOR headers (ICNTRL[19] = 0)
 *  are read without a time (md_dcd_reader::timestep_ps 0). */
typedef struct md_dcd_reader {
    FILE *file;                 /**< the open file (NULL when reading memory) */
    const unsigned char *mem;   /**< the memory being read (NULL when reading a file) */
    size_t mem_size;            /**< bytes in md_dcd_reader::mem */
    size_t pos;                 /**< read position in memory */
    long long size;             /**< total bytes of the input */
    char name[256];             /**< file name (or the name given to the memory) for messages */
    int big_endian;             /**< 1 if the file is big-endian, 0 if little-endian */
    int natoms;                 /**< atoms per frame */
    int nframes_header;         /**< frame count the header declares (may be 0 or stale) */
    int has_cell;               /**< 1 if every frame starts with a unit-cell record */
    int frame;                  /**< frames read so far */
    int nsavc;                  /**< NSAVC, MD steps between frames (ICNTRL[2]); taken as 1 when
                                     the header holds 0 or less */
    double delta_ps;            /**< DELTA, the MD time step (ps), 0 if unknown */
    double timestep_ps;         /**< time between frames, delta_ps x nsavc (ps), 0 if unknown */
    float *buf;                 /**< 3 * natoms floats: the last frame's X, Y, Z (Angstrom) */
} md_dcd_reader;

/** @brief Open a DCD file and read its header. Errors name the file and the record:
 *  wrong length markers or magic (MD_ERR_PARSE), NATOM < 1 or above MD_DCD_MAX_ATOMS or
 *  more than the file can hold (MD_ERR_PARSE, field NATOM), I/O (MD_ERR_IO). */
MDDEF md_status md_dcd_open(md_dcd_reader *r, const char *path);

/** @brief Like md_dcd_open() reading @p size bytes at @p data (which must outlive the
 *  reader); @p name is used in messages (NULL: "memory"). The fuzzing entry point. */
MDDEF md_status md_dcd_open_mem(md_dcd_reader *r, const void *data, size_t size, const char *name);

/** @brief Read the next frame into @p frame; @p got is 1 if a frame was read, 0 at the
 *  end of the trajectory.
 *
 *  Frames are reused as md_xyz_next reuses them: if frame->n differs from the trajectory's
 *  atom count, @p frame is (re)allocated with md_system_alloc (a zeroed md_system is fine;
 *  a DCD holds no names, so every other field is then zero); otherwise only its positions
 *  (xyzq x, y, z in nm), md_system::box (nm; zero if the file has no cell) and
 *  md_system::cell (zeroed) are overwritten, and every other field (names from
 *  md_system_copy_topology, charges, masses, velocities, bonds) is kept.
 *
 *  The unit cell record is read in each of the three layouts writers use: angle cosines
 *  (CHARMM, NAMD > 2.5, OpenMM, VMD: all three within [-1, 1]), degrees (NAMD 2.5,
 *  MDAnalysis: all three within (0, 180) and forming a valid cell) or else CHARMM's
 *  symmetric shape matrix (h11 h21 h22 h31 h32 h33, its rows the cell vectors; used when
 *  it is positive definite, else each entry is read alone: a cosine within [-1, 1], else
 *  degrees). An orthorhombic cell (every angle 90 degrees, to 1e-3) sets the box; any other
 *  is MD_ERR_UNSUPPORTED (field cell), its message naming the first angle that is not 90, in
 *  degrees, and the layout it was read in. Errors: a truncated frame or a wrong length
 *  marker (MD_ERR_PARSE, naming the file, frame and record), a negative or
 *  non-finite cell entry (MD_ERR_RANGE, field cell), a non-finite coordinate
 *  (MD_ERR_RANGE). On failure @p frame is untouched. */
MDDEF md_status md_dcd_next(md_dcd_reader *r, md_system *frame, int *got);

/** @brief Close the file and release the reader's buffer; safe on a zeroed reader. */
MDDEF void md_dcd_close(md_dcd_reader *r);

/** @brief How md_dcd_write writes; a zero field takes its default. */
typedef struct md_dcd_write_desc {
    int big_endian;     /**< 1: big-endian; 0 (default): little-endian */
    int no_cell;        /**< 1: omit the unit-cell records; 0 (default): write each frame's box */
    double timestep_ps; /**< time between frames (ps), stored in the header (default 0) */
} md_dcd_write_desc;

/** @brief Write @p nframes frames (all with the same atom count) as a DCD file, atomically
 *  (a temporary file renamed over @p path). Positions nm -> Angstrom, box as an orthorhombic
 *  cell (angles as cosines 0, the convention of recent CHARMM and NAMD). The header holds
 *  NSAVC 1 and DELTA = timestep_ps in AKMA units. @p desc may be NULL. */
MDDEF md_status md_dcd_write(const char *path, const md_system *frames, int nframes,
                             const md_dcd_write_desc *desc);

/* ---- trajectories of any supported format ---- */

/** @brief Trajectory formats md_traj_open() understands. */
typedef enum md_traj_format {
    MD_TRAJ_DCD = 1, /**< .dcd: md_dcd_reader */
    MD_TRAJ_XYZ = 2  /**< .xyz: multi-frame XYZ (md_xyz_reader; box from the extended-XYZ Lattice, if any) */
} md_traj_format;

/** @brief An open trajectory of any supported format (see md_traj_open()). */
typedef struct md_traj {
    md_traj_format format; /**< which reader is open */
    md_dcd_reader dcd;     /**< the DCD reader (format MD_TRAJ_DCD) */
    md_xyz_reader xyz;     /**< the XYZ reader (format MD_TRAJ_XYZ) */
} md_traj;

/** @brief Open a trajectory, choosing the reader by the file extension (.dcd, .xyz,
 *  case-insensitive). Unknown extension: MD_ERR_UNSUPPORTED naming the file. */
MDDEF md_status md_traj_open(md_traj *t, const char *path);

/** @brief Read the next frame (see md_dcd_next() and md_xyz_next() for @p frame and @p got:
 *  both overwrite a reused frame's positions, box and cell only). */
MDDEF md_status md_traj_next(md_traj *t, md_system *frame, int *got);

/** @brief Close a trajectory; safe on a zeroed one. */
MDDEF void md_traj_close(md_traj *t);

/* ======================================================================== */
/* bench                                                                    */
/* ======================================================================== */

/** @brief One benchmark measurement, written as one JSON line by md_bench_json(). */
typedef struct md_bench_result {
    const char *chapter;     /**< chapter id, e.g. "01_sequential_coulomb" */
    const char *variant;     /**< rung name, e.g. "cpu_rows" */
    long long size;          /**< problem size in md_bench_result::size_unit */
    const char *size_unit;   /**< what md_bench_result::size counts, e.g. "atoms*points" */
    double time_s;           /**< median time of one run (s) */
    double rate;             /**< work per second in md_bench_result::unit */
    const char *unit;        /**< unit of md_bench_result::rate, e.g. "atom-evals/s" */
    double ceiling;          /**< the bounding unit's measured rate in md_bench_result::unit; NaN if none */
    double error;            /**< max relative error against the reference; NaN if not checked */
    const char *device;      /**< where it ran, e.g. "cpu: 2 threads" or the GPU's name */
} md_bench_result;

/** @brief Format @p r as one JSON object (no newline) into @p buf.
 *
 *  Keys: schema ("md_bench/1"), chapter, variant, size, size_unit, time_s, rate, unit, ceiling,
 *  ceiling_fraction, error, device. NaN numbers are written as null.
 *  Returns the length the full line needs (like snprintf); the line was
 *  written whole only if that is < @p cap. */
MDDEF int md_bench_json(char *buf, size_t cap, const md_bench_result *r);

#ifdef __cplusplus
}
#endif

#endif /* MD_H */

/* ======================================================================== */
/* implementation                                                           */
/* ======================================================================== */

#ifdef MD_IMPLEMENTATION
#ifndef MD_IMPLEMENTATION_INCLUDED
#define MD_IMPLEMENTATION_INCLUDED

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MD_MALLOC
#define MD_MALLOC(n) malloc(n)
#endif
#ifndef MD_FREE
#define MD_FREE(p) free(p)
#endif
#ifndef MD_ASSERT
#include <assert.h>
#define MD_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus)
#define MD__THREAD_LOCAL thread_local
#elif defined(_MSC_VER)
#define MD__THREAD_LOCAL __declspec(thread)
#else
#define MD__THREAD_LOCAL _Thread_local
#endif

#if defined(_OPENMP)
#include <omp.h>
#define MD__OMP_FOR _Pragma("omp parallel for schedule(dynamic, 1)")
#else
#define MD__OMP_FOR
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- core ---- */

static MD__THREAD_LOCAL char md__error_message[512];

MDDEF const char *md_status_string(md_status status) {
    switch (status) {
    case MD_OK: return "success";
    case MD_ERR_INVALID_ARGUMENT: return "invalid argument";
    case MD_ERR_OUT_OF_MEMORY: return "out of memory";
    case MD_ERR_IO: return "input/output error";
    case MD_ERR_PARSE: return "malformed input";
    case MD_ERR_RANGE: return "value out of range";
    case MD_ERR_UNSUPPORTED: return "not supported";
    case MD_ERR_CUDA: return "CUDA error";
    case MD_ERR_NO_DEVICE: return "no CUDA device";
    case MD_WARN_CELL: return "read, but the non-orthorhombic cell is not used (no box)";
    case MD_STATUS_COUNT: break;
    }
    return "unknown status";
}

MDDEF const char *md_last_error(void) { return md__error_message; }

MDDEF void md_clear_error(void) { md__error_message[0] = '\0'; }

MDDEF md_status md_set_error(md_status status, const char *where, long line, const char *field,
                             const char *fmt, ...) {
    char *b = md__error_message;
    size_t cap = sizeof md__error_message, len = 0;
    int k;
    va_list ap;
    if (!where) where = "md";
    if (line > 0) k = snprintf(b, cap, "%s:%ld: ", where, line);
    else k = snprintf(b, cap, "%s: ", where);
    if (k > 0) len = (size_t)k < cap ? (size_t)k : cap - 1;
    if (field && len < cap) {
        k = snprintf(b + len, cap - len, "field %s: ", field);
        if (k > 0) len += (size_t)k < cap - len ? (size_t)k : cap - len - 1;
    }
    if (len < cap) {
        va_start(ap, fmt);
        vsnprintf(b + len, cap - len, fmt, ap);
        va_end(ap);
    }
    return status;
}

MDDEF double md_wall_seconds(void) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int md__cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

MDDEF double md_median(double *v, int n) {
    if (!v || n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, md__cmp_double);
    return (n & 1) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

MDDEF double md_max_rel_error(const float *out, const float *ref, size_t n) {
    double scale = 0.0, worst = 0.0;
    size_t i;
    if (!out || !ref) return INFINITY;
    for (i = 0; i < n; i++) {
        if (!isfinite(ref[i])) return INFINITY;
        if (fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
    }
    if (scale == 0.0) scale = 1.0;
    for (i = 0; i < n; i++) {
        double e;
        if (isnan(out[i])) return INFINITY;
        e = fabs((double)out[i] - (double)ref[i]) / scale;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

MDDEF void *md_alloc_array(size_t count, size_t size) {
    void *p;
    if (count == 0 || size == 0) count = size = 1;
    if (count > SIZE_MAX / size) {
        md_set_error(MD_ERR_OUT_OF_MEMORY, "md_alloc_array", 0, NULL,
                     "%zu * %zu bytes overflows size_t", count, size);
        return NULL;
    }
    p = MD_MALLOC(count * size);
    if (!p)
        md_set_error(MD_ERR_OUT_OF_MEMORY, "md_alloc_array", 0, NULL,
                     "cannot allocate %zu bytes", count * size);
    return p;
}

MDDEF void md_free(void *p) {
    if (p) MD_FREE(p);
}

/* ---- rng ---- */

static uint64_t md__splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t md__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

MDDEF void md_rng_seed(md_rng *rng, uint64_t seed) {
    int i;
    for (i = 0; i < 4; i++) rng->s[i] = md__splitmix64(&seed);
}

MDDEF uint64_t md_rng_next(md_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = md__rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = md__rotl(s[3], 45);
    return result;
}

MDDEF double md_rng_uniform(md_rng *rng) {
    return (double)(md_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

MDDEF double md_rng_normal(md_rng *rng) {
    double u1 = 1.0 - md_rng_uniform(rng); /* (0, 1]: log is finite */
    double u2 = md_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- system ---- */

MDDEF md_status md_system_alloc(md_system *sys, int n) {
    md_system s;
    size_t un;
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_system_alloc", 0, "sys", "is NULL");
    if (n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_system_alloc", 0, "n",
                            "must be at least 1 (got %d)", n);
    un = (size_t)n;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.xyzq = (md_float4 *)md_alloc_array(un, sizeof *s.xyzq);
    s.vel = (md_float3 *)md_alloc_array(un, sizeof *s.vel);
    s.mass = (float *)md_alloc_array(un, sizeof *s.mass);
    s.radius = (float *)md_alloc_array(un, sizeof *s.radius);
    s.type = (int *)md_alloc_array(un, sizeof *s.type);
    s.name = (md_name *)md_alloc_array(un, sizeof *s.name);
    s.resname = (md_name *)md_alloc_array(un, sizeof *s.resname);
    s.resid = (int *)md_alloc_array(un, sizeof *s.resid);
    s.chain = (char *)md_alloc_array(un, 1);
    s.icode = (char *)md_alloc_array(un, 1);
    s.altloc = (char *)md_alloc_array(un, 1);
    s.element = (md_name *)md_alloc_array(un, sizeof *s.element);
    s.segid = (md_name *)md_alloc_array(un, sizeof *s.segid);
    s.type_name = (md_name *)md_alloc_array(un, sizeof *s.type_name);
    if (!s.xyzq || !s.vel || !s.mass || !s.radius || !s.type || !s.name || !s.resname || !s.resid ||
        !s.chain || !s.icode || !s.altloc || !s.element || !s.segid || !s.type_name) {
        md_system_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, "md_system_alloc", 0, "n",
                            "cannot allocate %d atoms", n);
    }
    memset(s.xyzq, 0, un * sizeof *s.xyzq);
    memset(s.vel, 0, un * sizeof *s.vel);
    memset(s.mass, 0, un * sizeof *s.mass);
    memset(s.radius, 0, un * sizeof *s.radius);
    memset(s.type, 0, un * sizeof *s.type);
    memset(s.name, 0, un * sizeof *s.name);
    memset(s.resname, 0, un * sizeof *s.resname);
    memset(s.resid, 0, un * sizeof *s.resid);
    memset(s.chain, 0, un);
    memset(s.icode, 0, un);
    memset(s.altloc, 0, un);
    memset(s.element, 0, un * sizeof *s.element);
    memset(s.segid, 0, un * sizeof *s.segid);
    memset(s.type_name, 0, un * sizeof *s.type_name);
    *sys = s;
    return MD_OK;
}

MDDEF void md_system_free(md_system *sys) {
    if (!sys) return;
    md_free(sys->xyzq);
    md_free(sys->vel);
    md_free(sys->mass);
    md_free(sys->radius);
    md_free(sys->type);
    md_free(sys->name);
    md_free(sys->resname);
    md_free(sys->resid);
    md_free(sys->chain);
    md_free(sys->icode);
    md_free(sys->altloc);
    md_free(sys->element);
    md_free(sys->segid);
    md_free(sys->type_name);
    md_free(sys->bond);
    memset(sys, 0, sizeof *sys);
}

/* memcpy of n elements when both arrays exist (a hand-built system may lack some). */
static void md__copy_field(void *dst, const void *src, size_t n, size_t size) {
    if (dst && src) memcpy(dst, src, n * size);
}

MDDEF md_status md_system_copy_topology(md_system *dst, const md_system *src) {
    const char *fn = "md_system_copy_topology";
    size_t n;
    int *bond = NULL, i;
    if (!dst || !src || !dst->xyzq || !src->xyzq)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "dst/src", "is NULL or not allocated");
    if (dst->n != src->n || src->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n",
                            "the topology has %d atoms, the frame %d", src->n, dst->n);
    if (src->nbond < 0 || (src->nbond > 0 && !src->bond))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nbond", "src has %d bonds and bond %s",
                            src->nbond, src->bond ? "set" : "NULL");
    n = (size_t)src->n;
    if (src->nbond > 0) {
        if (!(bond = (int *)md_alloc_array((size_t)src->nbond, 2 * sizeof *bond))) return MD_ERR_OUT_OF_MEMORY;
        memcpy(bond, src->bond, (size_t)src->nbond * 2 * sizeof *bond);
    }
    md__copy_field(dst->mass, src->mass, n, sizeof *dst->mass);
    md__copy_field(dst->radius, src->radius, n, sizeof *dst->radius);
    md__copy_field(dst->type, src->type, n, sizeof *dst->type);
    md__copy_field(dst->name, src->name, n, sizeof *dst->name);
    md__copy_field(dst->resname, src->resname, n, sizeof *dst->resname);
    md__copy_field(dst->resid, src->resid, n, sizeof *dst->resid);
    md__copy_field(dst->chain, src->chain, n, 1);
    md__copy_field(dst->icode, src->icode, n, 1);
    md__copy_field(dst->altloc, src->altloc, n, 1);
    md__copy_field(dst->element, src->element, n, sizeof *dst->element);
    md__copy_field(dst->segid, src->segid, n, sizeof *dst->segid);
    md__copy_field(dst->type_name, src->type_name, n, sizeof *dst->type_name);
    for (i = 0; i < src->n; i++) dst->xyzq[i].w = src->xyzq[i].w;
    md_free(dst->bond);
    dst->bond = bond;
    dst->nbond = src->nbond;
    return MD_OK;
}

MDDEF double md_system_charge(const md_system *sys) {
    double q = 0.0;
    int i;
    if (!sys || !sys->xyzq) return 0.0;
    for (i = 0; i < sys->n; i++) q += sys->xyzq[i].w;
    return q;
}

MDDEF double md_system_temperature(const md_system *sys) {
    double ke = 0.0, p[3] = {0, 0, 0}, m = 0.0;
    int i, dof;
    if (!sys || !sys->vel || !sys->mass || sys->n < 2) return 0.0;
    for (i = 0; i < sys->n; i++) {
        double mi = sys->mass[i];
        ke += mi * ((double)sys->vel[i].x * sys->vel[i].x + (double)sys->vel[i].y * sys->vel[i].y +
                    (double)sys->vel[i].z * sys->vel[i].z);
        p[0] += mi * sys->vel[i].x;
        p[1] += mi * sys->vel[i].y;
        p[2] += mi * sys->vel[i].z;
        m += mi;
    }
    if (m <= 0.0) return 0.0;
    ke -= (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) / m; /* kinetic energy of the centre of mass */
    dof = 3 * sys->n - 3;
    return ke / (dof * MD_KB); /* ke holds 2 * kinetic energy */
}

static int md__box_ok(const double box[3]) {
    int d;
    for (d = 0; d < 3; d++)
        if (!(box[d] > 0.0) || !isfinite(box[d])) return 0;
    return 1;
}

MDDEF md_status md_build_random_charges(md_system *sys, int n, const double box[3], double qmax,
                                        uint64_t seed) {
    md_system s;
    md_rng rng;
    double mean = 0.0;
    md_status st;
    int i;
    const char *fn = "md_build_random_charges";
    if (!sys || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/box", "is NULL");
    if (!md__box_ok(box))
        return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and > 0 (got %g %g %g)",
                            box[0], box[1], box[2]);
    if (!(qmax > 0.0) || !isfinite(qmax))
        return md_set_error(MD_ERR_RANGE, fn, 0, "qmax", "must be finite and > 0 (got %g)", qmax);
    if ((st = md_system_alloc(&s, n)) != MD_OK) return st;
    md_rng_seed(&rng, seed);
    for (i = 0; i < n; i++) {
        double q;
        s.xyzq[i].x = (float)(box[0] * md_rng_uniform(&rng));
        s.xyzq[i].y = (float)(box[1] * md_rng_uniform(&rng));
        s.xyzq[i].z = (float)(box[2] * md_rng_uniform(&rng));
        q = qmax * (2.0 * md_rng_uniform(&rng) - 1.0);
        s.xyzq[i].w = (float)q;
        mean += q;
        s.mass[i] = 1.0f;
        s.name[i].s[0] = 'Q';
    }
    mean /= n;
    if (n > 1)
        for (i = 0; i < n; i++) s.xyzq[i].w = (float)((double)s.xyzq[i].w - mean);
    for (i = 0; i < 3; i++) s.box[i] = box[i];
    *sys = s;
    return MD_OK;
}

MDDEF md_status md_build_fcc(md_system *sys, const md_fcc_desc *desc) {
    static const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
    md_fcc_desc d;
    md_system s;
    md_rng rng;
    md_status st;
    double sd, vcm[3] = {0, 0, 0}, t, scale;
    int i, j, k, b, n, a = 0;
    const char *fn = "md_build_fcc";
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "is NULL");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.cells == 0) d.cells = 6;
    if (d.lattice == 0.0) d.lattice = 0.5719;
    if (d.temperature == 0.0) d.temperature = 86.5;
    if (d.mass == 0.0) d.mass = 39.948;
    if (d.cells < 1 || d.cells > 500)
        return md_set_error(MD_ERR_RANGE, fn, 0, "cells", "must be in 1..500 (got %d)", d.cells);
    if (!(d.lattice > 0.0) || !isfinite(d.lattice))
        return md_set_error(MD_ERR_RANGE, fn, 0, "lattice", "must be finite and > 0");
    if (!(d.temperature > 0.0) || !isfinite(d.temperature))
        return md_set_error(MD_ERR_RANGE, fn, 0, "temperature", "must be finite and > 0");
    if (!(d.mass > 0.0) || !isfinite(d.mass))
        return md_set_error(MD_ERR_RANGE, fn, 0, "mass", "must be finite and > 0");
    n = 4 * d.cells * d.cells * d.cells;
    if ((st = md_system_alloc(&s, n)) != MD_OK) return st;
    md_rng_seed(&rng, d.seed);
    sd = sqrt(MD_KB * d.temperature / d.mass);
    for (k = 0; k < d.cells; k++)
        for (j = 0; j < d.cells; j++)
            for (i = 0; i < d.cells; i++)
                for (b = 0; b < 4; b++, a++) {
                    s.xyzq[a].x = (float)((i + basis[b][0] + 0.25) * d.lattice);
                    s.xyzq[a].y = (float)((j + basis[b][1] + 0.25) * d.lattice);
                    s.xyzq[a].z = (float)((k + basis[b][2] + 0.25) * d.lattice);
                    s.xyzq[a].w = 0.0f;
                    s.vel[a].x = (float)(sd * md_rng_normal(&rng));
                    s.vel[a].y = (float)(sd * md_rng_normal(&rng));
                    s.vel[a].z = (float)(sd * md_rng_normal(&rng));
                    s.mass[a] = (float)d.mass;
                    s.name[a].s[0] = 'A';
                    s.name[a].s[1] = 'r';
                    s.element[a] = s.name[a];
                }
    for (a = 0; a < n; a++) {
        vcm[0] += s.vel[a].x;
        vcm[1] += s.vel[a].y;
        vcm[2] += s.vel[a].z;
    }
    for (a = 0; a < n; a++) { /* equal masses: the COM velocity is the mean velocity */
        s.vel[a].x = (float)(s.vel[a].x - vcm[0] / n);
        s.vel[a].y = (float)(s.vel[a].y - vcm[1] / n);
        s.vel[a].z = (float)(s.vel[a].z - vcm[2] / n);
    }
    t = md_system_temperature(&s);
    scale = t > 0.0 ? sqrt(d.temperature / t) : 1.0;
    for (a = 0; a < n; a++) {
        s.vel[a].x = (float)(s.vel[a].x * scale);
        s.vel[a].y = (float)(s.vel[a].y * scale);
        s.vel[a].z = (float)(s.vel[a].z * scale);
    }
    for (i = 0; i < 3; i++) s.box[i] = d.cells * d.lattice;
    *sys = s;
    return MD_OK;
}

/* ---- grid ---- */

MDDEF md_status md_grid_alloc(md_grid *grid, int nx, int ny, int nz, const double origin[3],
                              const double spacing[3]) {
    md_grid g;
    size_t count;
    int d;
    const char *fn = "md_grid_alloc";
    if (!grid || !origin || !spacing)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "grid/origin/spacing", "is NULL");
    if (nx < 1 || ny < 1 || nz < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "dimensions must be >= 1 (got %d %d %d)",
                            nx, ny, nz);
    for (d = 0; d < 3; d++) {
        if (!isfinite(origin[d]))
            return md_set_error(MD_ERR_RANGE, fn, 0, "origin", "must be finite");
        if (!(spacing[d] > 0.0) || !isfinite(spacing[d]))
            return md_set_error(MD_ERR_RANGE, fn, 0, "spacing", "must be finite and > 0 (got %g)",
                                spacing[d]);
    }
    if ((size_t)nx > SIZE_MAX / (size_t)ny || (size_t)nx * ny > SIZE_MAX / (size_t)nz)
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "point count overflows");
    count = (size_t)nx * ny * nz;
    memset(&g, 0, sizeof g);
    g.data = (float *)md_alloc_array(count, sizeof(float));
    if (!g.data) return MD_ERR_OUT_OF_MEMORY;
    memset(g.data, 0, count * sizeof(float));
    g.n[0] = nx;
    g.n[1] = ny;
    g.n[2] = nz;
    for (d = 0; d < 3; d++) {
        g.origin[d] = origin[d];
        g.spacing[d] = spacing[d];
    }
    *grid = g;
    return MD_OK;
}

MDDEF void md_grid_free(md_grid *grid) {
    if (!grid) return;
    md_free(grid->data);
    memset(grid, 0, sizeof *grid);
}

MDDEF size_t md_grid_count(const md_grid *grid) {
    if (!grid) return 0;
    return (size_t)grid->n[0] * (size_t)grid->n[1] * (size_t)grid->n[2];
}

/* ---- io ---- */

/* Every reader pulls lines from one line source (a buffer in memory or a
 * FILE). Each line is copied into buf, grown as needed, NUL-terminated,
 * without its "\n" or "\r\n"; a NUL byte inside a line is an error. eol
 * tells whether the line ended with an end of line ("\n", or a "\r" cut from
 * its "\n"): only the last line of a file can lack one. */
typedef struct md__lines {
    const char *name;    /* file name for messages */
    const char *p, *end; /* memory source (file == NULL) */
    FILE *file;          /* file source */
    char *buf;           /* the current line */
    size_t cap, len;     /* capacity of buf, length of the current line */
    long line;           /* number of the current line (1-based) */
    long long size, pos; /* input size (-1: unknown) and bytes consumed */
    int eol;             /* the current line ended with an end of line */
} md__lines;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static md_status
md__lerr(const md__lines *L, md_status st, const char *field, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return md_set_error(st, L->name, L->line > 0 ? L->line : 1, field, "%s", msg);
}

static void md__lines_mem(md__lines *L, const char *data, size_t len, const char *name) {
    memset(L, 0, sizeof *L);
    L->name = name ? name : "<memory>";
    L->p = data;
    L->end = data ? data + len : data;
    L->size = (long long)len;
}

static md_status md__lines_reserve(md__lines *L, size_t need) {
    char *b;
    size_t cap = L->cap ? L->cap : 256;
    if (need <= L->cap) return MD_OK;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return md__lerr(L, MD_ERR_OUT_OF_MEMORY, "text", "line too long");
        cap *= 2;
    }
    if (!(b = (char *)md_alloc_array(cap, 1)))
        return md__lerr(L, MD_ERR_OUT_OF_MEMORY, "text", "line too long");
    if (L->len) memcpy(b, L->buf, L->len);
    md_free(L->buf);
    L->buf = b;
    L->cap = cap;
    return MD_OK;
}

/* Read the next line into L->buf: *got = 1, or *got = 0 at the end of the input. */
static md_status md__next_line(md__lines *L, int *got) {
    md_status st;
    size_t n = 0;
    *got = 0;
    L->len = 0;
    L->eol = 0;
    if (!L->file) {
        const char *nl, *z;
        if (!L->p || L->p >= L->end) return MD_OK;
        nl = (const char *)memchr(L->p, '\n', (size_t)(L->end - L->p));
        n = nl ? (size_t)(nl - L->p) : (size_t)(L->end - L->p);
        L->line++;
        if ((z = (const char *)memchr(L->p, '\0', n)) != NULL)
            return md__lerr(L, MD_ERR_PARSE, "text", "NUL byte at column %zu", (size_t)(z - L->p) + 1);
        if ((st = md__lines_reserve(L, n + 1)) != MD_OK) return st;
        memcpy(L->buf, L->p, n);
        L->p += n + (nl != NULL);
        L->pos += (long long)(n + (nl != NULL));
        L->eol = nl != NULL;
    } else {
        int c = getc(L->file);
        if (c == EOF) {
            if (ferror(L->file)) return md__lerr(L, MD_ERR_IO, "text", "read error");
            return MD_OK;
        }
        L->line++;
        for (; c != EOF && c != '\n'; c = getc(L->file)) {
            if (c == '\0') return md__lerr(L, MD_ERR_PARSE, "text", "NUL byte at column %zu", n + 1);
            if (n + 1 >= L->cap && (st = md__lines_reserve(L, n + 2)) != MD_OK) return st;
            L->buf[n++] = (char)c;
            L->len = n;
        }
        if (c == EOF && ferror(L->file)) return md__lerr(L, MD_ERR_IO, "text", "read error");
        if ((st = md__lines_reserve(L, n + 1)) != MD_OK) return st;
        L->pos += (long long)(n + (c == '\n'));
        L->eol = c == '\n';
    }
    if (n > 0 && L->buf[n - 1] == '\r') {
        n--;
        L->eol = 1;
    }
    L->buf[n] = '\0';
    L->len = n;
    *got = 1;
    return MD_OK;
}

/* Bytes of input not yet consumed, or -1 when unknown. */
static long long md__lines_left(const md__lines *L) { return L->size < 0 ? -1 : L->size - L->pos; }

static int md__is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Next whitespace-separated token of *s (NUL-terminated in place), or NULL. */
static char *md__token(char **s) {
    char *p = *s, *t;
    while (md__is_space(*p)) p++;
    if (!*p) {
        *s = p;
        return NULL;
    }
    for (t = p; *p && !md__is_space(*p); p++) {}
    if (*p) *p++ = '\0';
    *s = p;
    return t;
}

/* Split s into tokens; stores the first max, returns how many there are. */
static int md__split(char *s, char **tok, int max) {
    int n = 0;
    char *t;
    while ((t = md__token(&s)) != NULL) {
        if (n < max) tok[n] = t;
        n++;
    }
    return n;
}

/* Field -> double: the whole field must be a number, finite and within float range. */
static md_status md__field_double(const md__lines *L, const char *s, const char *field, double *out) {
    char *end;
    double v;
    if (!*s) return md__lerr(L, MD_ERR_PARSE, field, "missing (blank)");
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end) return md__lerr(L, MD_ERR_PARSE, field, "not a number ('%.40s')", s);
    if (isnan(v)) return md__lerr(L, MD_ERR_RANGE, field, "is NaN ('%.40s')", s);
    if ((errno == ERANGE && fabs(v) > 1.0) || !isfinite(v) || fabs(v) > FLT_MAX)
        return md__lerr(L, MD_ERR_RANGE, field, "infinite or too large for a float ('%.40s')", s);
    *out = v;
    return MD_OK;
}

/* Field -> integer in [lo, hi]. */
static md_status md__field_long(const md__lines *L, const char *s, const char *field, long lo, long hi,
                                long *out) {
    char *end;
    long v;
    if (!*s) return md__lerr(L, MD_ERR_PARSE, field, "missing (blank)");
    errno = 0;
    v = strtol(s, &end, 10);
    if (end == s || *end) return md__lerr(L, MD_ERR_PARSE, field, "not an integer ('%.40s')", s);
    if (errno == ERANGE || v < lo || v > hi)
        return md__lerr(L, MD_ERR_RANGE, field, "'%.40s' is out of range %ld..%ld", s, lo, hi);
    *out = v;
    return MD_OK;
}

/* Columns c0..c1 (1-based, inclusive) of the current line with blanks trimmed, into out
 * (room for c1 - c0 + 2 chars). */
static char *md__cols(const md__lines *L, size_t c0, size_t c1, char *out) {
    size_t a = c0 - 1, b = c1 < L->len ? c1 : L->len, n = 0;
    if (a < b) {
        while (a < b && md__is_space(L->buf[a])) a++;
        while (b > a && md__is_space(L->buf[b - 1])) b--;
        n = b - a;
        memcpy(out, L->buf + a, n);
    }
    out[n] = '\0';
    return out;
}

/* Copy s into a name; s must be at most MD_NAME_MAX characters (callers check with
 * md__name_field; the builders' literals are short). */
static void md__set_name(md_name *dst, const char *s) {
    size_t n = strlen(s);
    if (n > MD_NAME_MAX) n = MD_NAME_MAX;
    memset(dst->s, 0, sizeof dst->s);
    memcpy(dst->s, s, n);
}

/* A name field of a file: at most MD_NAME_MAX characters, else an error (never cut). */
static md_status md__name_field(const md__lines *L, md_name *dst, const char *s, const char *field) {
    if (strlen(s) > MD_NAME_MAX)
        return md__lerr(L, MD_ERR_RANGE, field, "'%.40s' is longer than %d characters", s, MD_NAME_MAX);
    md__set_name(dst, s);
    return MD_OK;
}

/* One character of a fixed-column field: 0 when blank or beyond the line. */
static char md__col_char(const md__lines *L, size_t c) {
    return c <= L->len && !md__is_space(L->buf[c - 1]) ? L->buf[c - 1] : 0;
}

static int md__caseeq(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* IUPAC 2021 standard atomic weights (abridged to five significant digits; conventional
 * values for H Li B C N O Mg Si S Cl Br). */
static const struct md__element {
    char sym[3];
    float mass;
} md__elements[] = {{"H", 1.008f},    {"He", 4.0026f},  {"Li", 6.94f},    {"B", 10.81f},   {"C", 12.011f},
                    {"N", 14.007f},   {"O", 15.999f},   {"F", 18.998f},   {"Ne", 20.180f}, {"Na", 22.990f},
                    {"Mg", 24.305f},  {"Al", 26.982f},  {"Si", 28.085f},  {"P", 30.974f},  {"S", 32.06f},
                    {"Cl", 35.45f},   {"Ar", 39.948f},  {"K", 39.098f},   {"Ca", 40.078f}, {"Mn", 54.938f},
                    {"Fe", 55.845f},  {"Co", 58.933f},  {"Ni", 58.693f},  {"Cu", 63.546f}, {"Zn", 65.38f},
                    {"Se", 78.971f},  {"Br", 79.904f},  {"Kr", 83.798f},  {"Rb", 85.468f}, {"Sr", 87.62f},
                    {"Cd", 112.41f},  {"I", 126.90f},   {"Xe", 131.29f},  {"Cs", 132.91f}, {"Ba", 137.33f}};
#define MD__NELEMENTS ((int)(sizeof md__elements / sizeof md__elements[0]))

/* The table's entry for a symbol (case-insensitive), or NULL. */
static const struct md__element *md__element_of(const char *symbol) {
    int e;
    if (!symbol) return NULL;
    for (e = 0; e < MD__NELEMENTS; e++)
        if (md__caseeq(symbol, md__elements[e].sym)) return &md__elements[e];
    return NULL;
}

MDDEF float md_element_mass(const char *symbol) {
    const struct md__element *e = md__element_of(symbol);
    return e ? e->mass : 0.0f;
}

/* Names of ions (residue names, and atom names in those residues) and their element:
 * GROMACS/PDB (NA CL K MG CA ZN ...), AMBER (Na+ Cl- K+ ...), CHARMM (SOD CLA POT CAL
 * ZN2 LIT RUB CES BAR), PDB ligands (IOD, FE2, CU1, CD). */
static const struct md__ion {
    char name[5];
    char sym[3];
} md__ions[] = {{"NA", "Na"},   {"NA+", "Na"},  {"SOD", "Na"},  {"CL", "Cl"},   {"CL-", "Cl"},  {"CLA", "Cl"},
                {"K", "K"},     {"K+", "K"},    {"POT", "K"},   {"MG", "Mg"},   {"MG2", "Mg"},  {"MG2+", "Mg"},
                {"CA", "Ca"},   {"CA2", "Ca"},  {"CA2+", "Ca"}, {"CAL", "Ca"},  {"ZN", "Zn"},   {"ZN2", "Zn"},
                {"ZN2+", "Zn"}, {"LI", "Li"},   {"LI+", "Li"},  {"LIT", "Li"},  {"RB", "Rb"},   {"RB+", "Rb"},
                {"RUB", "Rb"},  {"CS", "Cs"},   {"CS+", "Cs"},  {"CES", "Cs"},  {"BA", "Ba"},   {"BA2", "Ba"},
                {"BAR", "Ba"},  {"SR", "Sr"},   {"CD", "Cd"},   {"CD2", "Cd"},  {"MN", "Mn"},   {"FE", "Fe"},
                {"FE2", "Fe"},  {"CU", "Cu"},   {"CU1", "Cu"},  {"BR", "Br"},   {"BR-", "Br"},  {"IOD", "I"},
                {"F", "F"},     {"F-", "F"}};
#define MD__NIONS ((int)(sizeof md__ions / sizeof md__ions[0]))

static const char *md__ion_element(const char *name) {
    int k;
    for (k = 0; name && k < MD__NIONS; k++)
        if (md__caseeq(name, md__ions[k].name)) return md__ions[k].sym;
    return NULL;
}

MDDEF const char *md_guess_element(const char *name, const char *resname) {
    static const char *const charmm[8][2] = {{"SOD", "Na"}, {"POT", "K"},  {"CLA", "Cl"}, {"CAL", "Ca"},
                                            {"LIT", "Li"}, {"RUB", "Rb"}, {"CES", "Cs"}, {"BAR", "Ba"}};
    static const char *const two[8] = {"CL", "BR", "FE", "ZN", "MG", "MN", "CU", "SE"};
    const struct md__element *e;
    const char *ion, *p;
    char one[2];
    int k;
    if (!name) return "";
    /* 1. an ion residue holding an atom named like that ion */
    if ((ion = md__ion_element(resname)) != NULL) {
        const char *self = md__ion_element(name);
        if (md__caseeq(name, ion) || (self && strcmp(self, ion) == 0)) return md__element_of(ion)->sym;
    }
    /* 2. CHARMM ion atom names in any residue */
    for (k = 0; k < 8; k++)
        if (md__caseeq(name, charmm[k][0])) return md__element_of(charmm[k][1])->sym;
    /* 3. two letters that only begin element names, 4. the first letter */
    for (p = name; *p >= '0' && *p <= '9'; p++) {}
    for (k = 0; k < 8; k++)
        if (toupper((unsigned char)p[0]) == two[k][0] && toupper((unsigned char)p[1]) == two[k][1]) {
            char sym[3];
            sym[0] = two[k][0];
            sym[1] = two[k][1];
            sym[2] = '\0';
            return md__element_of(sym)->sym;
        }
    one[0] = *p;
    one[1] = '\0';
    e = *p ? md__element_of(one) : NULL;
    return e ? e->sym : "";
}

/* Element and mass of an atom: the element column when not blank (its table spelling when
 * known, else as written), else md_guess_element. */
static void md__set_element(md_system *s, int i, const char *column) {
    const struct md__element *e;
    if (column && *column) {
        e = md__element_of(column);
        md__set_name(&s->element[i], e ? e->sym : column);
    } else {
        md__set_name(&s->element[i], md_guess_element(s->name[i].s, s->resname[i].s));
    }
    s->mass[i] = md_element_mass(s->element[i].s);
}

/* type[i] = index of key[i] among the distinct keys in order of first appearance
 * (open-addressing hash of the first atom of each key: linear time). */
static md_status md__assign_types(md_system *s, const md_name *key) {
    size_t cap = 16, h, k;
    int *first, i, ntypes = 0;
    while (cap < 2 * (size_t)s->n) cap *= 2;
    if (!(first = (int *)md_alloc_array(cap, sizeof *first))) return MD_ERR_OUT_OF_MEMORY;
    for (h = 0; h < cap; h++) first[h] = -1;
    for (i = 0; i < s->n; i++) {
        uint64_t x = 14695981039346656037ull;
        for (k = 0; k < sizeof key[i].s && key[i].s[k]; k++)
            x = (x ^ (unsigned char)key[i].s[k]) * 1099511628211ull;
        h = (size_t)x & (cap - 1);
        while (first[h] >= 0 && strcmp(key[first[h]].s, key[i].s) != 0) h = (h + 1) & (cap - 1);
        if (first[h] < 0) {
            first[h] = i;
            s->type[i] = ntypes++;
        } else {
            s->type[i] = s->type[first[h]];
        }
    }
    md_free(first);
    return MD_OK;
}

/* An atom line must end with an end of line: a file cut short inside its last number
 * ("0.17" cut to "0.1") looks complete otherwise. */
static md_status md__check_eol(const md__lines *L, const char *field) {
    char tail[24];
    size_t k, n = L->len < 20 ? L->len : 20;
    if (L->eol) return MD_OK;
    for (k = 0; k < n; k++) { /* the line's last characters (md__split may have put NULs in it) */
        char c = L->buf[L->len - n + k];
        tail[k] = c ? c : ' ';
    }
    tail[n] = '\0';
    return md__lerr(L, MD_ERR_PARSE, field,
                    "the file ends inside this line (no end of line after '%s'): it may be cut "
                    "short; if the file is complete, end its last line with a newline",
                    tail);
}

/* Bonds as pairs of atom indices: sorted so bond[2k] < bond[2k+1], pairs in increasing
 * order, duplicates removed. */
static int md__cmp_pair(const void *a, const void *b) {
    const int *x = (const int *)a, *y = (const int *)b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int md__normalize_bonds(int *bond, int nbond) {
    int k, m = 0;
    for (k = 0; k < nbond; k++)
        if (bond[2 * k] > bond[2 * k + 1]) {
            int t = bond[2 * k];
            bond[2 * k] = bond[2 * k + 1];
            bond[2 * k + 1] = t;
        }
    if (nbond > 1) qsort(bond, (size_t)nbond, 2 * sizeof *bond, md__cmp_pair);
    for (k = 0; k < nbond; k++)
        if (m == 0 || bond[2 * k] != bond[2 * m - 2] || bond[2 * k + 1] != bond[2 * m - 1]) {
            bond[2 * m] = bond[2 * k];
            bond[2 * m + 1] = bond[2 * k + 1];
            m++;
        }
    return m;
}

/* Read a whole file into memory. */
static md_status md__slurp(const char *path, char **data, size_t *len) {
    FILE *f;
    char *buf = NULL, *b;
    size_t cap = 0, n = 0, k;
    if (!path) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read", 0, "path", "is NULL");
    if (!(f = fopen(path, "rb")))
        return md_set_error(MD_ERR_IO, path, 0, "path", "cannot open (%s)", strerror(errno));
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 65536;
            if (ncap < cap || !(b = (char *)md_alloc_array(ncap, 1))) {
                md_free(buf);
                fclose(f);
                return md_set_error(MD_ERR_OUT_OF_MEMORY, path, 0, "path", "file too large for memory");
            }
            if (n) memcpy(b, buf, n);
            md_free(buf);
            buf = b;
            cap = ncap;
        }
        k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    if (ferror(f)) {
        md_free(buf);
        fclose(f);
        return md_set_error(MD_ERR_IO, path, 0, "path", "read error");
    }
    fclose(f);
    *data = buf;
    *len = n;
    return MD_OK;
}

typedef md_status (*md__mem_reader)(const char *, size_t, const char *, md_system *);

static md_status md__read_path(const char *path, md_system *sys, md__mem_reader mem) {
    char *data;
    size_t len;
    md_status st = md__slurp(path, &data, &len);
    if (st != MD_OK) return st;
    st = mem(data, len, path, sys);
    md_free(data);
    return st;
}

static md_status md__mem_args(const char *fn, const char *data, size_t len, const void *out) {
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "is NULL");
    if (!data && len) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "data", "is NULL");
    return MD_OK;
}

/* PQR and PDB: pass 0 counts the ATOM/HETATM records, pass 1 parses them. */
static int md__is_atom_record(const char *line) {
    return strncmp(line, "ATOM", 4) == 0 || strncmp(line, "HETATM", 6) == 0;
}

static md_status md__no_atoms(const md__lines *L) {
    if (L->line == 0) return md__lerr(L, MD_ERR_PARSE, "ATOM", "empty file");
    return md__lerr(L, MD_ERR_PARSE, "ATOM", "no ATOM or HETATM records in %ld lines", L->line);
}

/* The PQR and PDB readers read the lines twice. Pass 0 counts the atom records
 * (md__count_atom); at the end of pass 0 there must be one and *s is allocated
 * for them; at the end of pass 1 (which fills *s) the types are assigned. */
static md_status md__count_atom(const md__lines *L, int *n) {
    if (*n == INT_MAX) return md__lerr(L, MD_ERR_RANGE, "ATOM", "more than %d atoms", INT_MAX);
    ++*n;
    return MD_OK;
}

static md_status md__end_pass(const md__lines *L, int pass, int n, md_system *s) {
    if (pass == 1) return md__assign_types(s, s->name);
    if (n == 0) return md__no_atoms(L);
    return md_system_alloc(s, n);
}

/* A residue number with an optional insertion code ("36", "-5", "36A") -> resid, icode. */
static md_status md__resseq_icode(const md__lines *L, const char *tok, const char *field, int *resid,
                                  char *icode) {
    char buf[32];
    size_t n = strlen(tok);
    long v;
    md_status st;
    *icode = 0;
    if (n >= 2 && n < sizeof buf && isalpha((unsigned char)tok[n - 1]) && isdigit((unsigned char)tok[n - 2])) {
        memcpy(buf, tok, n - 1);
        buf[n - 1] = '\0';
        if ((st = md__field_long(L, buf, field, INT_MIN, INT_MAX, &v)) != MD_OK) return st;
        *icode = tok[n - 1];
    } else if ((st = md__field_long(L, tok, field, INT_MIN, INT_MAX, &v)) != MD_OK) {
        return st;
    }
    *resid = (int)v;
    return MD_OK;
}

MDDEF md_status md_read_pqr_mem(const char *data, size_t len, const char *name, md_system *sys) {
    static const char *const need[10] = {"record", "serial", "name", "resName", "resSeq",
                                         "x",      "y",      "z",    "q",       "r"};
    md__lines L;
    md_system s;
    md_status st;
    char *tok[12];
    int pass, got, n = 0, i = 0, nt;
    if ((st = md__mem_args("md_read_pqr_mem", data, len, sys)) != MD_OK) return st;
    memset(&s, 0, sizeof s);
    memset(&L, 0, sizeof L);
    for (pass = 0; pass < 2; pass++) {
        md_free(L.buf);
        md__lines_mem(&L, data, len, name);
        for (i = 0;;) {
            double v[5];
            const char *rs;
            int k;
            if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
            if (!got) break;
            nt = md__split(L.buf, tok, 12);
            if (nt == 0 || (strcmp(tok[0], "ATOM") != 0 && strcmp(tok[0], "HETATM") != 0)) continue;
            if (pass == 0) {
                if ((st = md__count_atom(&L, &n)) != MD_OK) goto fail;
                continue;
            }
            if (nt < 10) {
                st = md__lerr(&L, MD_ERR_PARSE, need[nt],
                              "missing: the line has %d fields, a PQR atom needs"
                              " 10 or 11 (ATOM serial name resName [chain] resSeq x y z q r)",
                              nt);
                goto fail;
            }
            if (nt > 11) {
                st = md__lerr(&L, MD_ERR_PARSE, "fields", "the line has %d fields, a PQR atom has 10 or 11",
                              nt);
                goto fail;
            }
            if ((st = md__check_eol(&L, "r")) != MD_OK) goto fail;
            rs = tok[nt - 6];
            /* a fixed-column writer runs the chain letter into a 4-digit residue number
             * ("A1000", "A1000B"): with 10 fields, a letter then a digit is chain + resSeq */
            if (nt == 10 && isalpha((unsigned char)rs[0]) && (isdigit((unsigned char)rs[1]) || rs[1] == '-'))
                s.chain[i] = *rs++;
            if ((st = md__resseq_icode(&L, rs, "resSeq", &s.resid[i], &s.icode[i])) != MD_OK) goto fail;
            for (k = 0; k < 5; k++)
                if ((st = md__field_double(&L, tok[nt - 5 + k], need[5 + k], &v[k])) != MD_OK) goto fail;
            if (v[4] < 0.0) {
                st = md__lerr(&L, MD_ERR_RANGE, "r", "negative radius (%g)", v[4]);
                goto fail;
            }
            if ((st = md__name_field(&L, &s.name[i], tok[2], "name")) != MD_OK ||
                (st = md__name_field(&L, &s.resname[i], tok[3], "resName")) != MD_OK)
                goto fail;
            if (nt == 11 && strlen(tok[4]) == 1) s.chain[i] = tok[4][0];
            else if (nt == 11 && (st = md__name_field(&L, &s.segid[i], tok[4], "chain")) != MD_OK) goto fail;
            s.xyzq[i].x = (float)(0.1 * v[0]);
            s.xyzq[i].y = (float)(0.1 * v[1]);
            s.xyzq[i].z = (float)(0.1 * v[2]);
            s.xyzq[i].w = (float)v[3];
            s.radius[i] = (float)(0.1 * v[4]);
            md__set_element(&s, i, NULL);
            i++;
        }
        if ((st = md__end_pass(&L, pass, n, &s)) != MD_OK) goto fail;
    }
    md_free(L.buf);
    *sys = s;
    return MD_OK;
fail:
    md_free(L.buf);
    md_system_free(&s);
    return st;
}

MDDEF md_status md_read_pqr(const char *path, md_system *sys) {
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_pqr", 0, "sys", "is NULL");
    return md__read_path(path, sys, md_read_pqr_mem);
}

/* "END" (not ENDMDL) ends a PDB file. */
static int md__is_end_record(const char *line) {
    return strncmp(line, "END", 3) == 0 && (line[3] == '\0' || md__is_space(line[3]));
}

/* CRYST1 a b c alpha beta gamma -> an orthorhombic box (nm), or a non-orthorhombic cell
 * (cell, and *odd = index 3..5 of the first angle that is not 90), or neither: edges all
 * zero (VMD, NAMD, MDAnalysis) or all 1 (the PDB's placeholder) mean "no unit cell". */
static md_status md__pdb_cryst1(const md__lines *L, double box[3], double cell[6], int *odd) {
    static const char *const fields[6] = {"a", "b", "c", "alpha", "beta", "gamma"};
    static const size_t c0[6] = {7, 16, 25, 34, 41, 48}, c1[6] = {15, 24, 33, 40, 47, 54};
    char col[16];
    double v[6];
    md_status st;
    int k;
    for (k = 0; k < 6; k++) {
        if (L->len < c1[k])
            return md__lerr(L, MD_ERR_PARSE, fields[k],
                            "missing: the CRYST1 line ends at column %zu, before "
                            "columns %zu-%zu",
                            L->len, c0[k], c1[k]);
        if ((st = md__field_double(L, md__cols(L, c0[k], c1[k], col), fields[k], &v[k])) != MD_OK) return st;
    }
    if ((v[0] == 0.0 && v[1] == 0.0 && v[2] == 0.0) || (v[0] == 1.0 && v[1] == 1.0 && v[2] == 1.0))
        return MD_OK;
    for (k = 0; k < 3; k++)
        if (!(v[k] > 0.0)) return md__lerr(L, MD_ERR_RANGE, fields[k], "box edge must be > 0 (got %g)", v[k]);
    for (k = 3; k < 6; k++)
        if (!(v[k] > 0.0 && v[k] < 180.0))
            return md__lerr(L, MD_ERR_RANGE, fields[k], "angle must be within (0, 180) degrees (got %g)", v[k]);
    for (k = 3; k < 6 && fabs(v[k] - 90.0) <= 1e-3; k++) {}
    if (k == 6) {
        for (k = 0; k < 3; k++) box[k] = 0.1 * v[k];
        return MD_OK;
    }
    *odd = k;
    for (k = 0; k < 6; k++) cell[k] = k < 3 ? 0.1 * v[k] : v[k];
    return MD_OK;
}

/* PDB charge columns 79-80: "2+", "1-", "+2", "-1", or one digit ("0" from older writers:
 * that charge, positive); blank -> 0. */
static md_status md__pdb_charge(const md__lines *L, const char *c, double *q) {
    size_t n = strlen(c);
    *q = 0.0;
    if (n == 0) return MD_OK;
    if (n == 1 && c[0] >= '0' && c[0] <= '9')
        *q = c[0] - '0';
    else if (n == 2 && c[0] >= '0' && c[0] <= '9' && (c[1] == '+' || c[1] == '-'))
        *q = (c[1] == '-' ? -1.0 : 1.0) * (c[0] - '0');
    else if (n == 2 && c[1] >= '0' && c[1] <= '9' && (c[0] == '+' || c[0] == '-'))
        *q = (c[0] == '-' ? -1.0 : 1.0) * (c[1] - '0');
    else
        return md__lerr(L, MD_ERR_PARSE, "charge", "columns 79-80 must be like '1-', '2+' or '0' (got '%s')", c);
    return MD_OK;
}

/* The field of an ATOM record that ends at column col (>= 54). */
static const char *md__pdb_field_at(size_t col) {
    return col <= 54 ? "z" : col <= 60 ? "occupancy" : col <= 66 ? "tempFactor" : col <= 76 ? "segID"
         : col <= 78 ? "element" : "charge";
}

/* An atom serial (columns 7-11) for CONECT, or LONG_MIN when it is not a plain integer
 * (hybrid-36 or hexadecimal serials of large files: such atoms cannot be bonded by CONECT). */
static long md__pdb_serial(const md__lines *L) {
    char col[8], *end;
    long v;
    if (!*md__cols(L, 7, 11, col)) return LONG_MIN;
    errno = 0;
    v = strtol(col, &end, 10);
    return (*end || errno == ERANGE || v == LONG_MIN) ? LONG_MIN : v;
}

/* CONECT pairs of serials, with the line they came from: a growing array of triples. */
typedef struct md__conect {
    long *v; /* serial a, serial b, line */
    size_t n, cap;
} md__conect;

static md_status md__conect_add(const md__lines *L, md__conect *c, long a, long b) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        long *v;
        if (cap > SIZE_MAX / 6 || !(v = (long *)md_alloc_array(cap, 3 * sizeof *v)))
            return md__lerr(L, MD_ERR_OUT_OF_MEMORY, "CONECT", "too many bonds");
        if (c->n) memcpy(v, c->v, c->n * 3 * sizeof *v);
        md_free(c->v);
        c->v = v;
        c->cap = cap;
    }
    c->v[3 * c->n] = a;
    c->v[3 * c->n + 1] = b;
    c->v[3 * c->n + 2] = L->line;
    c->n++;
    return MD_OK;
}

static md_status md__pdb_conect(const md__lines *L, md__conect *c) {
    static const size_t c0[4] = {12, 17, 22, 27};
    char col[8];
    long a, b;
    md_status st;
    int k;
    if ((st = md__check_eol(L, "CONECT")) != MD_OK) return st;
    if ((st = md__field_long(L, md__cols(L, 7, 11, col), "CONECT", LONG_MIN + 1, LONG_MAX, &a)) != MD_OK) return st;
    for (k = 0; k < 4; k++) {
        if (!*md__cols(L, c0[k], c0[k] + 4, col)) continue;
        if ((st = md__field_long(L, col, "CONECT", LONG_MIN + 1, LONG_MAX, &b)) != MD_OK) return st;
        if ((st = md__conect_add(L, c, a, b)) != MD_OK) return st;
    }
    return MD_OK;
}

typedef struct md__serial {
    long serial;
    int index;
} md__serial;

static int md__cmp_serial(const void *a, const void *b) {
    long x = ((const md__serial *)a)->serial, y = ((const md__serial *)b)->serial;
    return x < y ? -1 : x > y;
}

/* The atom with this serial, or an error naming the CONECT line. */
static md_status md__serial_index(const md__lines *L, const md__serial *map, size_t m, long serial, long line,
                                  int *index) {
    md__serial key;
    const md__serial *hit;
    key.serial = serial;
    key.index = 0;
    hit = m ? (const md__serial *)bsearch(&key, map, m, sizeof *map, md__cmp_serial) : NULL;
    if (!hit)
        return md_set_error(MD_ERR_PARSE, L->name, line, "CONECT",
                            "atom serial %ld is not the serial of an atom of the first model", serial);
    if ((hit > map && hit[-1].serial == serial) || (hit + 1 < map + m && hit[1].serial == serial))
        return md_set_error(MD_ERR_PARSE, L->name, line, "CONECT", "atom serial %ld belongs to more than one atom",
                            serial);
    *index = hit->index;
    return MD_OK;
}

/* CONECT pairs of serials -> s->bond (atom indices, normalized). */
static md_status md__pdb_bonds(const md__lines *L, const md__conect *c, const long *serial, md_system *s) {
    md__serial *map;
    size_t m = 0, k;
    int i, *bond;
    md_status st = MD_OK;
    if (c->n == 0) return MD_OK;
    if (c->n > INT_MAX / 2) return md__lerr(L, MD_ERR_RANGE, "CONECT", "more than %d bonds", INT_MAX / 2);
    map = (md__serial *)md_alloc_array((size_t)s->n, sizeof *map);
    bond = (int *)md_alloc_array(c->n, 2 * sizeof *bond);
    if (!map || !bond) {
        md_free(map);
        md_free(bond);
        return MD_ERR_OUT_OF_MEMORY;
    }
    for (i = 0; i < s->n; i++)
        if (serial[i] != LONG_MIN) {
            map[m].serial = serial[i];
            map[m++].index = i;
        }
    qsort(map, m, sizeof *map, md__cmp_serial);
    for (k = 0; k < c->n && st == MD_OK; k++) {
        long line = c->v[3 * k + 2];
        if ((st = md__serial_index(L, map, m, c->v[3 * k], line, &bond[2 * k])) != MD_OK ||
            (st = md__serial_index(L, map, m, c->v[3 * k + 1], line, &bond[2 * k + 1])) != MD_OK)
            break;
        if (bond[2 * k] == bond[2 * k + 1])
            st = md_set_error(MD_ERR_PARSE, L->name, line, "CONECT", "atom serial %ld is bonded to itself",
                              c->v[3 * k]);
    }
    md_free(map);
    if (st != MD_OK) {
        md_free(bond);
        return st;
    }
    s->nbond = md__normalize_bonds(bond, (int)c->n);
    s->bond = bond;
    return MD_OK;
}

MDDEF md_status md_read_pdb_mem(const char *data, size_t len, const char *name, md_system *sys) {
    static const char *const xyz[3] = {"x", "y", "z"};
    static const char *const angle[6] = {"", "", "", "alpha", "beta", "gamma"};
    md__lines L;
    md_system s;
    md_status st;
    md__conect conect;
    double box[3] = {0, 0, 0}, cell[6] = {0, 0, 0, 0, 0, 0};
    long cryst1_line = 0, *serial = NULL;
    int pass, got, n = 0, i = 0, k, model_done, odd = 0;
    if ((st = md__mem_args("md_read_pdb_mem", data, len, sys)) != MD_OK) return st;
    memset(&s, 0, sizeof s);
    memset(&L, 0, sizeof L);
    memset(&conect, 0, sizeof conect);
    for (pass = 0; pass < 2; pass++) {
        md_free(L.buf);
        md__lines_mem(&L, data, len, name);
        for (i = 0, model_done = 0;;) {
            char col[16], element[4], rs[8];
            double v[3], q;
            long resid = 0;
            if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
            if (!got || md__is_end_record(L.buf)) break;
            if (strncmp(L.buf, "ENDMDL", 6) == 0) { /* the first model ends; CONECT may follow */
                model_done = 1;
                continue;
            }
            if (strncmp(L.buf, "CONECT", 6) == 0) {
                if (pass == 1 && (st = md__pdb_conect(&L, &conect)) != MD_OK) goto fail;
                continue;
            }
            if (model_done) continue;
            if (pass == 1 && strncmp(L.buf, "CRYST1", 6) == 0) {
                if (cryst1_line) {
                    st = md__lerr(&L, MD_ERR_PARSE, "CRYST1",
                                  "second CRYST1 record (the first is on line %ld)", cryst1_line);
                    goto fail;
                }
                cryst1_line = L.line;
                if ((st = md__pdb_cryst1(&L, box, cell, &odd)) != MD_OK) goto fail;
                continue;
            }
            if (!md__is_atom_record(L.buf)) continue;
            if (pass == 0) {
                if ((st = md__count_atom(&L, &n)) != MD_OK) goto fail;
                continue;
            }
            for (k = 0; k < 3; k++) {
                if (L.len < 38 + 8 * (size_t)k) {
                    st = md__lerr(&L, MD_ERR_PARSE, xyz[k],
                                  "missing: the line ends at column %zu, before "
                                  "columns %d-%d",
                                  L.len, 31 + 8 * k, 38 + 8 * k);
                    goto fail;
                }
                if ((st = md__field_double(&L, md__cols(&L, 31 + 8 * k, 38 + 8 * k, col), xyz[k], &v[k])) !=
                    MD_OK)
                    goto fail;
            }
            if (L.len < 80 && (st = md__check_eol(&L, md__pdb_field_at(L.len))) != MD_OK) goto fail;
            /* a digit in column 27 continues a 5-digit resSeq (large systems), else it is iCode */
            if (isdigit((unsigned char)md__col_char(&L, 27))) {
                md__cols(&L, 23, 27, rs);
            } else {
                md__cols(&L, 23, 26, rs);
                s.icode[i] = md__col_char(&L, 27);
            }
            if (*rs && (st = md__field_long(&L, rs, "resSeq", INT_MIN, INT_MAX, &resid)) != MD_OK) goto fail;
            if ((st = md__pdb_charge(&L, md__cols(&L, 79, 80, col), &q)) != MD_OK) goto fail;
            md__set_name(&s.name[i], md__cols(&L, 13, 16, col));
            md__set_name(&s.resname[i], md__cols(&L, 18, 21, col));
            md__set_name(&s.segid[i], md__cols(&L, 73, 76, col));
            s.altloc[i] = md__col_char(&L, 17);
            s.chain[i] = md__col_char(&L, 22);
            s.resid[i] = (int)resid;
            s.xyzq[i].x = (float)(0.1 * v[0]);
            s.xyzq[i].y = (float)(0.1 * v[1]);
            s.xyzq[i].z = (float)(0.1 * v[2]);
            s.xyzq[i].w = (float)q;
            md__set_element(&s, i, md__cols(&L, 77, 78, element));
            serial[i] = md__pdb_serial(&L);
            i++;
        }
        if ((st = md__end_pass(&L, pass, n, &s)) != MD_OK) goto fail;
        if (pass == 0 && !(serial = (long *)md_alloc_array((size_t)n, sizeof *serial))) {
            st = MD_ERR_OUT_OF_MEMORY;
            goto fail;
        }
    }
    if ((st = md__pdb_bonds(&L, &conect, serial, &s)) != MD_OK) goto fail;
    for (k = 0; k < 3; k++) s.box[k] = box[k];
    for (k = 0; k < 6; k++) s.cell[k] = cell[k];
    md_free(L.buf);
    md_free(serial);
    md_free(conect.v);
    *sys = s;
    if (odd)
        return md_set_error(MD_WARN_CELL, L.name, cryst1_line, angle[odd],
                            "the CRYST1 cell is not orthorhombic (a b c %g %g %g Angstrom, alpha beta gamma "
                            "%g %g %g degrees): md.h uses orthorhombic boxes only, so the atoms were read "
                            "without a box (md_system::cell holds the cell)",
                            10.0 * cell[0], 10.0 * cell[1], 10.0 * cell[2], cell[3], cell[4], cell[5]);
    return MD_OK;
fail:
    md_free(L.buf);
    md_free(serial);
    md_free(conect.v);
    md_system_free(&s);
    return st;
}

MDDEF md_status md_read_pdb(const char *path, md_system *sys) {
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_pdb", 0, "sys", "is NULL");
    return md__read_path(path, sys, md_read_pdb_mem);
}

/* Extended-XYZ Lattice="ax 0 0 0 by 0 0 0 cz" (Angstrom) in a comment line -> box (nm). */
static md_status md__xyz_lattice(const md__lines *L, const char *comment, double box[3]) {
    const char *p = strstr(comment, "Lattice=\""), *q;
    char text[512], *tok[9];
    double m[9];
    md_status st;
    int k, nt;
    if (!p) return MD_OK;
    p += 9;
    if (!(q = strchr(p, '"'))) return md__lerr(L, MD_ERR_PARSE, "Lattice", "no closing quote");
    if ((size_t)(q - p) >= sizeof text) return md__lerr(L, MD_ERR_PARSE, "Lattice", "value too long");
    memcpy(text, p, (size_t)(q - p));
    text[q - p] = '\0';
    if ((nt = md__split(text, tok, 9)) != 9)
        return md__lerr(L, MD_ERR_PARSE, "Lattice", "needs 9 numbers (got %d)", nt);
    for (k = 0; k < 9; k++)
        if ((st = md__field_double(L, tok[k], "Lattice", &m[k])) != MD_OK) return st;
    for (k = 0; k < 9; k++)
        if (k % 4 != 0 && m[k] != 0.0)
            return md__lerr(L, MD_ERR_UNSUPPORTED, "Lattice",
                            "only orthorhombic cells are supported "
                            "(entry %d is %g, must be 0)",
                            k + 1, m[k]);
    for (k = 0; k < 3; k++)
        if (!(m[4 * k] > 0.0))
            return md__lerr(L, MD_ERR_RANGE, "Lattice", "box edge %c must be > 0 (got %g)", "abc"[k],
                            m[4 * k]);
    for (k = 0; k < 3; k++) box[k] = 0.1 * m[4 * k];
    return MD_OK;
}

/* One XYZ frame from L into a new system *out; *got = 0 at a clean end of input. */
static md_status md__xyz_frame(md__lines *L, md_system *out, int *got) {
    static const char *const fields[4] = {"symbol", "x", "y", "z"};
    md_system s;
    md_status st;
    char *tok[4];
    double box[3] = {0, 0, 0}, v[3];
    long n;
    long long bytes;
    int g, nt = 0, i, k;
    *got = 0;
    do {
        if ((st = md__next_line(L, &g)) != MD_OK) return st;
        if (!g) return MD_OK;
    } while ((nt = md__split(L->buf, tok, 4)) == 0);
    if (nt > 1)
        return md__lerr(L, MD_ERR_PARSE, "atom count",
                        "the frame's first line must hold only the atom "
                        "count (found '%.40s' after it)",
                        tok[1]);
    if ((st = md__field_long(L, tok[0], "atom count", LONG_MIN, LONG_MAX, &n)) != MD_OK) return st;
    if (n < 0) return md__lerr(L, MD_ERR_RANGE, "atom count", "is negative (%ld)", n);
    if (n == 0) return md__lerr(L, MD_ERR_PARSE, "atom count", "is 0: a frame needs at least one atom");
    bytes = md__lines_left(L);
    if (n > INT_MAX || (bytes >= 0 && n > bytes / 8))
        return md__lerr(L, MD_ERR_RANGE, "atom count",
                        "%ld atoms cannot fit in the %lld bytes left "
                        "(an atom line takes at least 8)",
                        n, bytes);
    if ((st = md__next_line(L, &g)) != MD_OK) return st;
    if (!g) {
        L->line++;
        return md__lerr(L, MD_ERR_PARSE, "comment", "missing: the file ends after the atom count");
    }
    if ((st = md__xyz_lattice(L, L->buf, box)) != MD_OK) return st;
    if ((st = md_system_alloc(&s, (int)n)) != MD_OK) return st;
    for (i = 0; i < n; i++) {
        if ((st = md__next_line(L, &g)) != MD_OK) goto fail;
        if (!g) {
            L->line++;
            st = md__lerr(L, MD_ERR_PARSE, "atoms", "the file ends after %d of %ld atoms (truncated frame)",
                          i, n);
            goto fail;
        }
        if ((nt = md__split(L->buf, tok, 4)) < 4) {
            st = md__lerr(L, MD_ERR_PARSE, fields[nt], "missing: an atom line is 'symbol x y z'");
            goto fail;
        }
        if (!L->eol) {
            char last[24];
            if (nt == 4) snprintf(last, sizeof last, "z");
            else snprintf(last, sizeof last, "column %d", nt);
            if ((st = md__check_eol(L, last)) != MD_OK) goto fail;
        }
        for (k = 0; k < 3; k++)
            if ((st = md__field_double(L, tok[k + 1], fields[k + 1], &v[k])) != MD_OK) goto fail;
        if ((st = md__name_field(L, &s.name[i], tok[0], "symbol")) != MD_OK) goto fail;
        s.xyzq[i].x = (float)(0.1 * v[0]);
        s.xyzq[i].y = (float)(0.1 * v[1]);
        s.xyzq[i].z = (float)(0.1 * v[2]);
        md__set_element(&s, i, md__element_of(tok[0]) ? tok[0] : NULL);
    }
    if ((st = md__assign_types(&s, s.name)) != MD_OK) goto fail;
    for (k = 0; k < 3; k++) s.box[k] = box[k];
    *out = s;
    *got = 1;
    return MD_OK;
fail:
    md_system_free(&s);
    return st;
}

MDDEF md_status md_read_xyz_mem(const char *data, size_t len, const char *name, md_system *sys) {
    md__lines L;
    md_system s;
    md_status st;
    int got;
    if ((st = md__mem_args("md_read_xyz_mem", data, len, sys)) != MD_OK) return st;
    md__lines_mem(&L, data, len, name);
    st = md__xyz_frame(&L, &s, &got);
    if (st == MD_OK && !got) st = md__lerr(&L, MD_ERR_PARSE, "atom count", "missing: empty file");
    md_free(L.buf);
    if (st == MD_OK) *sys = s;
    return st;
}

MDDEF md_status md_read_xyz(const char *path, md_system *sys) {
    md_xyz_reader r;
    md_system s;
    md_status st;
    int got;
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_xyz", 0, "sys", "is NULL");
    if ((st = md_xyz_open(&r, path)) != MD_OK) return st;
    memset(&s, 0, sizeof s);
    st = md_xyz_next(&r, &s, &got);
    if (st == MD_OK && !got)
        st = md_set_error(MD_ERR_PARSE, path, r.line > 0 ? r.line : 1, "atom count", "missing: empty file");
    md_xyz_close(&r);
    if (st == MD_OK) *sys = s;
    return st;
}

MDDEF md_status md_xyz_open(md_xyz_reader *r, const char *path) {
    md_xyz_reader z;
    long end;
    if (!r || !path) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_xyz_open", 0, "r/path", "is NULL");
    memset(r, 0, sizeof *r);
    memset(&z, 0, sizeof z);
    if (!(z.path = (char *)md_alloc_array(strlen(path) + 1, 1))) return MD_ERR_OUT_OF_MEMORY;
    memcpy(z.path, path, strlen(path) + 1);
    if (!(z.file = fopen(path, "rb"))) {
        md_status st = md_set_error(MD_ERR_IO, path, 0, "path", "cannot open (%s)", strerror(errno));
        md_free(z.path);
        return st;
    }
    z.size = -1;
    if (fseek(z.file, 0, SEEK_END) == 0 && (end = ftell(z.file)) >= 0) z.size = end;
    if (fseek(z.file, 0, SEEK_SET) != 0) {
        clearerr(z.file);
        z.size = -1;
    }
    *r = z;
    return MD_OK;
}

MDDEF md_status md_xyz_next(md_xyz_reader *r, md_system *frame, int *got) {
    md__lines L;
    md_system s;
    md_status st;
    int g = 0;
    if (got) *got = 0;
    if (!r || !r->file || !frame || !got)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_xyz_next", 0, "r/frame/got", "is NULL or closed");
    memset(&L, 0, sizeof L);
    L.name = r->path;
    L.file = r->file;
    L.buf = r->buf;
    L.cap = r->cap;
    L.line = r->line;
    L.size = r->size;
    L.pos = r->pos;
    st = md__xyz_frame(&L, &s, &g);
    r->buf = L.buf;
    r->cap = L.cap;
    r->line = L.line;
    r->pos = L.pos;
    if (st != MD_OK || !g) return st;
    if (frame->n == s.n && frame->xyzq) { /* reuse: positions, box and cell only */
        int i, k;
        for (i = 0; i < s.n; i++) {
            frame->xyzq[i].x = s.xyzq[i].x;
            frame->xyzq[i].y = s.xyzq[i].y;
            frame->xyzq[i].z = s.xyzq[i].z;
        }
        for (k = 0; k < 3; k++) frame->box[k] = s.box[k];
        for (k = 0; k < 6; k++) frame->cell[k] = 0.0;
        md_system_free(&s);
    } else {
        md_system_free(frame);
        *frame = s;
    }
    *got = 1;
    r->frames++;
    return MD_OK;
}

MDDEF void md_xyz_close(md_xyz_reader *r) {
    if (!r) return;
    if (r->file) fclose(r->file);
    md_free(r->path);
    md_free(r->buf);
    memset(r, 0, sizeof *r);
}

/* ---- PSF ---- */

/* Next line that is not blank; *got = 0 at the end of the input. */
static md_status md__next_nonblank(md__lines *L, int *got) {
    md_status st;
    const char *p;
    for (;;) {
        if ((st = md__next_line(L, got)) != MD_OK || !*got) return st;
        for (p = L->buf; md__is_space(*p); p++) {}
        if (*p) return MD_OK;
    }
}

/* A PSF section header "N !TAG..." (the line is already read) -> N in 0..max. */
static md_status md__psf_count(md__lines *L, const char *tag, long max, long *count) {
    char *tok[2];
    int nt = md__split(L->buf, tok, 2);
    if (nt < 2 || strncmp(tok[1], tag, strlen(tag)) != 0)
        return md__lerr(L, MD_ERR_PARSE, tag + 1, "missing: expected the section header 'N %s' (got '%.40s%s%.40s')",
                        tag, nt > 0 ? tok[0] : "", nt > 1 ? " " : "", nt > 1 ? tok[1] : "");
    return md__field_long(L, tok[0], tag + 1, 0, max, count);
}

/* A residue number token: an optional sign, digits, an optional insertion code letter. */
static int md__is_resid(const char *t) {
    if (*t == '+' || *t == '-') t++;
    if (!isdigit((unsigned char)*t)) return 0;
    while (isdigit((unsigned char)*t)) t++;
    if (isalpha((unsigned char)*t)) t++;
    return *t == '\0';
}

/* The NBOND section: 2 * m atom IDs in 1..n over any number of lines -> normalized bonds. */
static md_status md__psf_bonds(md__lines *L, long m, int n, md_system *s) {
    long long left = md__lines_left(L);
    long k = 0, id;
    int *bond, got;
    md_status st;
    char *p, *tok;
    if (m == 0) return MD_OK;
    if (left >= 0 && m > left / 4)
        return md__lerr(L, MD_ERR_RANGE, "NBOND", "%ld bonds cannot fit in the %lld bytes left", m, left);
    if (!(bond = (int *)md_alloc_array((size_t)m, 2 * sizeof *bond))) return MD_ERR_OUT_OF_MEMORY;
    while (k < 2 * m) {
        if ((st = md__next_line(L, &got)) != MD_OK) goto fail;
        if (!got) L->line++;
        for (p = L->buf; got && md__is_space(*p); p++) {}
        if (!got || !*p) {
            st = md__lerr(L, MD_ERR_PARSE, "NBOND", "the section ends after %ld of the %ld atom IDs of %ld bonds", k,
                          2 * m, m);
            goto fail;
        }
        for (p = L->buf; (tok = md__token(&p)) != NULL; k++) {
            if (k == 2 * m) {
                st = md__lerr(L, MD_ERR_PARSE, "NBOND", "more atom IDs than the %ld bonds declared ('%.40s')", m, tok);
                goto fail;
            }
            if ((st = md__field_long(L, tok, "NBOND", 1, n, &id)) != MD_OK) goto fail;
            bond[k] = (int)id - 1;
            if (k % 2 == 1 && bond[k] == bond[k - 1]) {
                st = md__lerr(L, MD_ERR_PARSE, "NBOND", "atom %ld is bonded to itself", id);
                goto fail;
            }
        }
    }
    if ((st = md__check_eol(L, "NBOND")) != MD_OK) goto fail;
    s->nbond = md__normalize_bonds(bond, (int)m);
    s->bond = bond;
    return MD_OK;
fail:
    md_free(bond);
    return st;
}

MDDEF md_status md_read_psf_mem(const char *data, size_t len, const char *name, md_system *sys) {
    static const char *const fields[9] = {"ID", "segid", "resid", "resname", "name", "type", "charge", "mass", "IMOVE"};
    md__lines L;
    md_system s;
    md_status st;
    char *tok[9], *p;
    long ntitle, natom, nbond, id;
    long long left;
    int got, i, k, nt;
    if ((st = md__mem_args("md_read_psf_mem", data, len, sys)) != MD_OK) return st;
    memset(&s, 0, sizeof s);
    md__lines_mem(&L, data, len, name);
    if ((st = md__next_nonblank(&L, &got)) != MD_OK) goto fail;
    for (p = L.buf; got && md__is_space(*p); p++) {}
    if (!got || strncmp(p, "PSF", 3) != 0) {
        st = md__lerr(&L, MD_ERR_PARSE, "header", got ? "the first line must start with PSF" : "missing: empty file");
        goto fail;
    }
    if ((st = md__next_nonblank(&L, &got)) != MD_OK) goto fail;
    if (!got) L.line++;
    if (!got || (st = md__psf_count(&L, "!NTITLE", LONG_MAX, &ntitle)) != MD_OK) {
        if (st == MD_OK) st = md__lerr(&L, MD_ERR_PARSE, "NTITLE", "missing: the file ends after the header");
        goto fail;
    }
    for (; ntitle > 0; ntitle--) {
        if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
        if (!got) {
            L.line++;
            st = md__lerr(&L, MD_ERR_PARSE, "NTITLE", "the file ends inside the title (%ld lines missing)", ntitle);
            goto fail;
        }
    }
    if ((st = md__next_nonblank(&L, &got)) != MD_OK) goto fail;
    if (!got) {
        L.line++;
        st = md__lerr(&L, MD_ERR_PARSE, "NATOM", "missing: the file ends after the title");
        goto fail;
    }
    if ((st = md__psf_count(&L, "!NATOM", INT_MAX, &natom)) != MD_OK) goto fail;
    left = md__lines_left(&L);
    if (natom < 1 || (left >= 0 && natom > left / 16)) {
        st = md__lerr(&L, MD_ERR_RANGE, "NATOM",
                      natom < 1 ? "a PSF needs at least one atom (got %ld)"
                                : "%ld atoms cannot fit in the bytes left (an atom line takes at least 16)",
                      natom);
        goto fail;
    }
    if ((st = md_system_alloc(&s, (int)natom)) != MD_OK) goto fail;
    for (i = 0; i < s.n; i++) {
        char *f[9];
        if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
        if (!got) {
            L.line++;
            st = md__lerr(&L, MD_ERR_PARSE, "NATOM", "the file ends after %d of %d atoms", i, s.n);
            goto fail;
        }
        nt = md__split(L.buf, tok, 9);
        if (nt < 8) {
            st = md__lerr(&L, MD_ERR_PARSE, fields[nt],
                          "missing: a PSF atom line is 'ID segid resid resname name type charge mass IMOVE'");
            goto fail;
        }
        for (k = 0; k < 8; k++) f[k] = tok[k];
        if (nt == 8 && md__is_resid(tok[1]) && !md__is_resid(tok[2])) { /* a blank segid (fixed columns) */
            f[1] = L.buf + L.len;                /* "" */
            for (k = 2; k < 8; k++) f[k] = tok[k - 1];
        }
        if (!L.eol) {
            char last[24];
            if (nt <= 9) snprintf(last, sizeof last, "%s", nt == 8 && f[1] == tok[1] ? "mass" : "IMOVE");
            else snprintf(last, sizeof last, "column %d", nt);
            if ((st = md__check_eol(&L, last)) != MD_OK) goto fail;
        }
        if ((st = md__field_long(&L, f[0], "ID", LONG_MIN, LONG_MAX, &id)) != MD_OK) goto fail;
        if (id != i + 1) {
            st = md__lerr(&L, MD_ERR_PARSE, "ID", "atom IDs must run 1, 2, ..., NATOM: expected %d, got %ld", i + 1,
                          id);
            goto fail;
        }
        if ((st = md__name_field(&L, &s.segid[i], f[1], "segid")) != MD_OK ||
            (st = md__resseq_icode(&L, f[2], "resid", &s.resid[i], &s.icode[i])) != MD_OK ||
            (st = md__name_field(&L, &s.resname[i], f[3], "resname")) != MD_OK ||
            (st = md__name_field(&L, &s.name[i], f[4], "name")) != MD_OK ||
            (st = md__name_field(&L, &s.type_name[i], f[5], "type")) != MD_OK)
            goto fail;
        {
            double q, m;
            if ((st = md__field_double(&L, f[6], "charge", &q)) != MD_OK ||
                (st = md__field_double(&L, f[7], "mass", &m)) != MD_OK)
                goto fail;
            if (m < 0.0) {
                st = md__lerr(&L, MD_ERR_RANGE, "mass", "is negative (%g)", m);
                goto fail;
            }
            s.xyzq[i].w = (float)q;
            md__set_name(&s.element[i], md_guess_element(s.name[i].s, s.resname[i].s));
            s.mass[i] = (float)m;
        }
    }
    if ((st = md__next_nonblank(&L, &got)) != MD_OK) goto fail;
    if (got) {
        if ((st = md__psf_count(&L, "!NBOND", INT_MAX / 2, &nbond)) != MD_OK) goto fail;
        if ((st = md__psf_bonds(&L, nbond, s.n, &s)) != MD_OK) goto fail;
    }
    if ((st = md__assign_types(&s, s.type_name)) != MD_OK) goto fail;
    md_free(L.buf);
    *sys = s;
    return MD_OK;
fail:
    md_free(L.buf);
    md_system_free(&s);
    return st;
}

MDDEF md_status md_read_psf(const char *path, md_system *sys) {
    if (!sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_psf", 0, "sys", "is NULL");
    return md__read_path(path, sys, md_read_psf_mem);
}

/* The extension of path (after the last '.') equals ext (lower case), case-insensitively. */
static int md__ext_is(const char *path, const char *ext) {
    const char *dot = strrchr(path, '.');
    size_t k;
    if (!dot || strlen(dot + 1) != strlen(ext)) return 0;
    for (k = 0; ext[k]; k++)
        if (tolower((unsigned char)dot[1 + k]) != ext[k]) return 0;
    return 1;
}

MDDEF md_status md_read_topology(const char *path, md_system *sys) {
    if (!path || !sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_topology", 0, "path/sys", "is NULL");
    if (md__ext_is(path, "psf")) return md_read_psf(path, sys);
    if (md__ext_is(path, "pdb") || md__ext_is(path, "ent")) return md_read_pdb(path, sys);
    if (md__ext_is(path, "pqr")) return md_read_pqr(path, sys);
    if (md__ext_is(path, "xyz")) return md_read_xyz(path, sys);
    return md_set_error(MD_ERR_UNSUPPORTED, path, 0, NULL,
                        "unknown topology format (expected .psf, .pdb, .ent, .pqr or .xyz)");
}

/* A growing text buffer for the writers: the whole file (or frame) is built in
 * memory, then written with one fwrite. */
typedef struct md__text {
    char *s;
    size_t len, cap;
    int failed;
} md__text;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
md__text_printf(md__text *t, const char *fmt, ...) {
    va_list ap;
    int k;
    while (!t->failed) {
        size_t room = t->cap - t->len, cap;
        char *b;
        va_start(ap, fmt);
        k = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) break;
        if ((size_t)k < room) {
            t->len += (size_t)k;
            return;
        }
        cap = t->cap ? t->cap : 4096;
        while (cap - t->len <= (size_t)k && cap <= SIZE_MAX / 2) cap *= 2;
        if (cap - t->len <= (size_t)k || !(b = (char *)md_alloc_array(cap, 1))) break;
        if (t->len) memcpy(b, t->s, t->len);
        md_free(t->s);
        t->s = b;
        t->cap = cap;
    }
    t->failed = 1;
}

/* Write the text to path: append, or to "<path>.tmp" renamed over path. Frees the text. */
static md_status md__write_text(const char *path, md__text *t, int append) {
    md_status st = MD_OK;
    char *tmp = NULL;
    FILE *f;
    int ok;
    if (t->failed) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, path, 0, "text", "cannot build the file text in memory");
        goto done;
    }
    if (!append) {
        if (!(tmp = (char *)md_alloc_array(strlen(path) + 5, 1))) {
            st = MD_ERR_OUT_OF_MEMORY;
            goto done;
        }
        snprintf(tmp, strlen(path) + 5, "%s.tmp", path);
    }
    if (!(f = fopen(append ? path : tmp, append ? "ab" : "wb"))) {
        st = md_set_error(MD_ERR_IO, append ? path : tmp, 0, "path", "cannot open for writing (%s)",
                          strerror(errno));
        goto done;
    }
    ok = fwrite(t->s, 1, t->len, f) == t->len;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        st = md_set_error(MD_ERR_IO, append ? path : tmp, 0, "path", "write failed (%s)", strerror(errno));
        if (!append) remove(tmp);
        goto done;
    }
    if (!append && rename(tmp, path) != 0) {
        st = md_set_error(MD_ERR_IO, path, 0, "path", "cannot rename %s over it (%s)", tmp, strerror(errno));
        remove(tmp);
    }
done:
    md_free(tmp);
    md_free(t->s);
    memset(t, 0, sizeof *t);
    return st;
}

static md_status md__writer_args(const char *fn, const char *path, const md_system *sys,
                                 const char *comment) {
    int i;
    if (!path || !sys || !sys->xyzq)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path/sys", "is NULL");
    if (sys->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", sys->n);
    if (comment && strpbrk(comment, "\r\n"))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "comment", "must be one line");
    for (i = 0; i < sys->n; i++)
        if (!isfinite(sys->xyzq[i].x) || !isfinite(sys->xyzq[i].y) || !isfinite(sys->xyzq[i].z))
            return md_set_error(MD_ERR_RANGE, path, 0, "xyzq", "atom %d has a non-finite position", i);
    if (sys->name)
        for (i = 0; i < sys->n; i++)
            if (strpbrk(sys->name[i].s, " \t\r\n\v\f"))
                return md_set_error(MD_ERR_INVALID_ARGUMENT, path, 0, "name", "atom %d's name holds a blank",
                                    i);
    return MD_OK;
}

/* 1: a box is set; 0: no box (all zero); -1: partly set or not finite (an error). */
static int md__box_state(const double box[3]) {
    if (box[0] == 0.0 && box[1] == 0.0 && box[2] == 0.0) return 0;
    return md__box_ok(box) ? 1 : -1;
}

MDDEF md_status md_write_xyz(const char *path, const md_system *sys, const char *comment, int append) {
    md__text t;
    md_status st;
    int i, box;
    if ((st = md__writer_args("md_write_xyz", path, sys, comment)) != MD_OK) return st;
    if ((box = md__box_state(sys->box)) < 0)
        return md_set_error(MD_ERR_RANGE, path, 0, "box", "edges must all be > 0 or all 0 (got %g %g %g)",
                            sys->box[0], sys->box[1], sys->box[2]);
    if (!comment) comment = "";
    memset(&t, 0, sizeof t);
    md__text_printf(&t, "%d\n", sys->n);
    if (box)
        md__text_printf(&t, "Lattice=\"%.6f 0 0 0 %.6f 0 0 0 %.6f\" Properties=species:S:1:pos:R:3%s%s\n",
                        10.0 * sys->box[0], 10.0 * sys->box[1], 10.0 * sys->box[2], *comment ? " " : "",
                        comment);
    else
        md__text_printf(&t, "%s\n", comment);
    for (i = 0; i < sys->n; i++)
        md__text_printf(&t, "%s %.6f %.6f %.6f\n", sys->name && sys->name[i].s[0] ? sys->name[i].s : "X",
                        10.0 * sys->xyzq[i].x, 10.0 * sys->xyzq[i].y, 10.0 * sys->xyzq[i].z);
    return md__write_text(path, &t, append);
}

/* A PDB field that must fit its columns: an error naming atom i and the field, never a cut. */
static md_status md__pdb_fits(const char *path, const md_name *names, int i, size_t width, const char *field) {
    if (names && strlen(names[i].s) > width)
        return md_set_error(MD_ERR_RANGE, path, 0, field, "atom %d: '%s' is longer than the PDB's %zu columns", i,
                            names[i].s, width);
    return MD_OK;
}

/* A one-character PDB field: blank for 0 (and for a NULL array). */
static char md__pdb_char(const char *c, int i) { return c && c[i] ? c[i] : ' '; }

MDDEF md_status md_write_pdb(const char *path, const md_system *sys) {
    static const char *const xyz[3] = {"x", "y", "z"};
    md__text t;
    md_status st;
    int i, k, box;
    if ((st = md__writer_args("md_write_pdb", path, sys, NULL)) != MD_OK) return st;
    if ((box = md__box_state(sys->box)) < 0)
        return md_set_error(MD_ERR_RANGE, path, 0, "box", "edges must all be > 0 or all 0 (got %g %g %g)",
                            sys->box[0], sys->box[1], sys->box[2]);
    if (sys->nbond < 0 || (sys->nbond > 0 && !sys->bond))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, path, 0, "nbond", "%d bonds and bond %s", sys->nbond,
                            sys->bond ? "set" : "NULL");
    for (i = 0; i < sys->n; i++) {
        for (k = 0; k < 3; k++) {
            double v = 10.0 * (&sys->xyzq[i].x)[k];
            if (!(v > -999.9995 && v < 9999.9995))
                return md_set_error(MD_ERR_RANGE, path, 0, xyz[k],
                                    "atom %d: %g Angstrom does not fit "
                                    "the PDB's 8 columns (%%8.3f)",
                                    i, v);
        }
        if ((st = md__pdb_fits(path, sys->name, i, 4, "name")) != MD_OK ||
            (st = md__pdb_fits(path, sys->resname, i, 4, "resname")) != MD_OK ||
            (st = md__pdb_fits(path, sys->segid, i, 4, "segid")) != MD_OK ||
            (st = md__pdb_fits(path, sys->element, i, 2, "element")) != MD_OK)
            return st;
    }
    for (k = 0; k < sys->nbond && sys->n <= 99999; k++)
        if (sys->bond[2 * k] < 0 || sys->bond[2 * k] >= sys->n || sys->bond[2 * k + 1] < 0 ||
            sys->bond[2 * k + 1] >= sys->n)
            return md_set_error(MD_ERR_INVALID_ARGUMENT, path, 0, "bond", "bond %d joins atoms %d and %d of %d", k,
                                sys->bond[2 * k], sys->bond[2 * k + 1], sys->n);
    memset(&t, 0, sizeof t);
    if (box)
        md__text_printf(&t, "CRYST1%9.3f%9.3f%9.3f%7.2f%7.2f%7.2f P 1           1\n", 10.0 * sys->box[0],
                        10.0 * sys->box[1], 10.0 * sys->box[2], 90.0, 90.0, 90.0);
    else if (md__box_ok(sys->cell))
        md__text_printf(&t, "CRYST1%9.3f%9.3f%9.3f%7.2f%7.2f%7.2f P 1           1\n", 10.0 * sys->cell[0],
                        10.0 * sys->cell[1], 10.0 * sys->cell[2], sys->cell[3], sys->cell[4], sys->cell[5]);
    for (i = 0; i < sys->n; i++) {
        const char *name = sys->name ? sys->name[i].s : "", *res = sys->resname ? sys->resname[i].s : "";
        const char *seg = sys->segid ? sys->segid[i].s : "";
        char elem[3] = {0, 0, 0}, nm[8], chg[3] = {0, 0, 0};
        double q = sys->xyzq[i].w;
        int e, resid = sys->resid ? sys->resid[i] % 10000 : 0;
        if (resid < -999) resid = -(-resid % 1000);
        if (sys->element && sys->element[i].s[0]) {
            elem[0] = (char)toupper((unsigned char)sys->element[i].s[0]);
            elem[1] = (char)toupper((unsigned char)sys->element[i].s[1]);
        } else {
            for (e = 0; sys->mass && e < MD__NELEMENTS; e++)
                if (fabs(sys->mass[i] - md__elements[e].mass) < 1e-3f) {
                    elem[0] = md__elements[e].sym[0];
                    elem[1] = (char)toupper((unsigned char)md__elements[e].sym[1]);
                }
        }
        if (strlen(name) < 4 && strlen(elem) < 2)
            snprintf(nm, sizeof nm, " %-3.3s", name);
        else
            snprintf(nm, sizeof nm, "%-4.4s", name);
        if (q != 0.0 && q == floor(q) && fabs(q) <= 9.0) {
            chg[0] = (char)('0' + (int)fabs(q));
            chg[1] = q < 0 ? '-' : '+';
        }
        md__text_printf(&t,
                        "ATOM  %5d %-4.4s%c%-4.4s%c%4d%c   %8.3f%8.3f%8.3f%6.2f%6.2f      %-4.4s%2s%2s\n",
                        (i + 1) % 100000, nm, md__pdb_char(sys->altloc, i), res, md__pdb_char(sys->chain, i),
                        resid, md__pdb_char(sys->icode, i), 10.0 * sys->xyzq[i].x, 10.0 * sys->xyzq[i].y,
                        10.0 * sys->xyzq[i].z, 1.0, 0.0, seg, elem, chg);
    }
    for (k = 0; k < sys->nbond && sys->n <= 99999; k++) {
        md__text_printf(&t, "CONECT%5d%5d\n", sys->bond[2 * k] + 1, sys->bond[2 * k + 1] + 1);
        md__text_printf(&t, "CONECT%5d%5d\n", sys->bond[2 * k + 1] + 1, sys->bond[2 * k] + 1);
    }
    md__text_printf(&t, "END\n");
    return md__write_text(path, &t, 0);
}

MDDEF md_status md_write_dx(const char *path, const md_grid *grid, const char *comment) {
    md__text t;
    size_t count, p = 0;
    int i, j, k, d;
    if (!path || !grid || !grid->data)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_write_dx", 0, "path/grid", "is NULL or has no data");
    if (grid->n[0] < 1 || grid->n[1] < 1 || grid->n[2] < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, path, 0, "n", "dimensions must be >= 1");
    if (comment && strpbrk(comment, "\r\n"))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, path, 0, "comment", "must be one line");
    for (d = 0; d < 3; d++)
        if (!isfinite(grid->origin[d]) || !(grid->spacing[d] > 0.0) || !isfinite(grid->spacing[d]))
            return md_set_error(MD_ERR_RANGE, path, 0, "origin/spacing", "must be finite, spacing > 0");
    count = md_grid_count(grid);
    for (p = 0; p < count; p++)
        if (!isfinite(grid->data[p]))
            return md_set_error(MD_ERR_RANGE, path, 0, "data", "point %zu is not finite", p);
    memset(&t, 0, sizeof t);
    if (comment) md__text_printf(&t, "# %s\n", comment);
    md__text_printf(&t, "object 1 class gridpositions counts %d %d %d\n", grid->n[0], grid->n[1], grid->n[2]);
    md__text_printf(&t, "origin %.9g %.9g %.9g\n", 10.0 * grid->origin[0], 10.0 * grid->origin[1],
                    10.0 * grid->origin[2]);
    md__text_printf(&t, "delta %.9g 0 0\ndelta 0 %.9g 0\ndelta 0 0 %.9g\n", 10.0 * grid->spacing[0],
                    10.0 * grid->spacing[1], 10.0 * grid->spacing[2]);
    md__text_printf(&t, "object 2 class gridconnections counts %d %d %d\n", grid->n[0], grid->n[1],
                    grid->n[2]);
    md__text_printf(&t, "object 3 class array type double rank 0 items %zu data follows\n", count);
    p = 0;
    for (i = 0; i < grid->n[0]; i++)
        for (j = 0; j < grid->n[1]; j++)
            for (k = 0; k < grid->n[2]; k++, p++)
                md__text_printf(&t, "%.9g%c", grid->data[((size_t)k * grid->n[1] + j) * grid->n[0] + i],
                                (p % 3 == 2 || p + 1 == count) ? '\n' : ' ');
    md__text_printf(&t, "attribute \"dep\" string \"positions\"\n"
                        "object \"regular positions regular connections\" class field\n"
                        "component \"positions\" value 1\ncomponent \"connections\" value 2\n"
                        "component \"data\" value 3\n");
    return md__write_text(path, &t, 0);
}

MDDEF md_status md_read_dx_mem(const char *data, size_t len, const char *name, md_grid *grid) {
    static const char *const dname[3] = {"delta x", "delta y", "delta z"};
    md__lines L;
    md_grid g;
    md_status st;
    char *s, *tok, *w[16];
    long cnt[3] = {0, 0, 0}, items;
    double origin[3] = {0, 0, 0}, h[3] = {0, 0, 0}, v;
    size_t count = 0, p = 0;
    int got, nt, k, ndelta = 0, have_counts = 0, have_origin = 0;
    if (!grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_dx_mem", 0, "grid", "is NULL");
    if (!data && len) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_dx_mem", 0, "data", "is NULL");
    memset(&g, 0, sizeof g);
    md__lines_mem(&L, data, len, name);
    for (;;) { /* header, up to the data array */
        if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
        if (!got) {
            st = md__lerr(&L, MD_ERR_PARSE, "object 3",
                          L.line ? "missing: no 'class array' data object" : "missing: empty file");
            goto fail;
        }
        if ((s = strchr(L.buf, '#')) != NULL) *s = '\0';
        if ((nt = md__split(L.buf, w, 16)) == 0) continue;
        if (nt > 16) nt = 16; /* later words are ignored */
        if (strcmp(w[0], "origin") == 0 || strcmp(w[0], "delta") == 0) {
            int isd = w[0][0] == 'd';
            const char *f = isd ? (ndelta < 3 ? dname[ndelta] : "delta") : "origin";
            double x[3];
            if (isd && ndelta == 3) {
                st = md__lerr(&L, MD_ERR_PARSE, f, "more than 3 delta lines");
                goto fail;
            }
            if (nt != 4) {
                st = md__lerr(&L, MD_ERR_PARSE, f, "needs 3 numbers (got %d)", nt - 1);
                goto fail;
            }
            for (k = 0; k < 3; k++)
                if ((st = md__field_double(&L, w[k + 1], f, &x[k])) != MD_OK) goto fail;
            if (!isd) {
                for (k = 0; k < 3; k++) origin[k] = 0.1 * x[k];
                have_origin = 1;
                continue;
            }
            for (k = 0; k < 3; k++)
                if (k != ndelta && x[k] != 0.0) {
                    st = md__lerr(&L, MD_ERR_UNSUPPORTED, f, "only axis-aligned grids are supported");
                    goto fail;
                }
            if (!(x[ndelta] > 0.0)) {
                st = md__lerr(&L, MD_ERR_RANGE, f, "spacing must be > 0 (got %g)", x[ndelta]);
                goto fail;
            }
            h[ndelta] = 0.1 * x[ndelta];
            ndelta++;
            continue;
        }
        if (strcmp(w[0], "object") != 0 || nt < 4 || strcmp(w[2], "class") != 0) continue;
        if (strcmp(w[3], "gridpositions") == 0) {
            if (nt != 8 || strcmp(w[4], "counts") != 0) {
                st = md__lerr(&L, MD_ERR_PARSE, "counts", "expected 'counts nx ny nz'");
                goto fail;
            }
            for (k = 0; k < 3; k++)
                if ((st = md__field_long(&L, w[5 + k], "counts", 1, INT_MAX, &cnt[k])) != MD_OK) goto fail;
            have_counts = 1;
        } else if (strcmp(w[3], "array") == 0) {
            long long left;
            for (k = 4; k + 1 < nt && strcmp(w[k], "items") != 0; k++) {}
            if (k + 1 >= nt) {
                st = md__lerr(&L, MD_ERR_PARSE, "items", "missing: expected 'items N'");
                goto fail;
            }
            if ((st = md__field_long(&L, w[k + 1], "items", 1, LONG_MAX, &items)) != MD_OK) goto fail;
            for (k = 4; k + 1 < nt; k++)
                if (strcmp(w[k], "rank") == 0 && strcmp(w[k + 1], "0") != 0) {
                    st = md__lerr(&L, MD_ERR_UNSUPPORTED, "rank", "only scalar data (rank 0) is supported");
                    goto fail;
                }
            if (!have_counts || !have_origin || ndelta < 3) {
                st = md__lerr(&L, MD_ERR_PARSE,
                              !have_counts   ? "counts"
                              : !have_origin ? "origin"
                                             : "delta",
                              "missing before the data array");
                goto fail;
            }
            count = (size_t)cnt[0] * (size_t)cnt[1];
            if ((size_t)cnt[2] > SIZE_MAX / count || (unsigned long)items != count * (size_t)cnt[2]) {
                st = md__lerr(&L, MD_ERR_PARSE, "items", "%ld is not nx*ny*nz = %ld*%ld*%ld", items, cnt[0],
                              cnt[1], cnt[2]);
                goto fail;
            }
            count = (size_t)items;
            left = md__lines_left(&L);
            if ((unsigned long long)items > (unsigned long long)left / 2 + 1) {
                st = md__lerr(&L, MD_ERR_RANGE, "items", "%ld values cannot fit in the %lld bytes left",
                              items, left);
                goto fail;
            }
            break;
        }
    }
    if ((st = md_grid_alloc(&g, (int)cnt[0], (int)cnt[1], (int)cnt[2], origin, h)) != MD_OK) goto fail;
    while (p < count) { /* values, x slowest, z fastest */
        if ((st = md__next_line(&L, &got)) != MD_OK) goto fail;
        if (!got) {
            L.line++;
            st = md__lerr(&L, MD_ERR_PARSE, "data", "the file ends after %zu of %zu values", p, count);
            goto fail;
        }
        for (s = L.buf; p < count && (tok = md__token(&s)) != NULL; p++) {
            size_t k2 = p % (size_t)cnt[2], j2 = p / (size_t)cnt[2] % (size_t)cnt[1];
            size_t i2 = p / ((size_t)cnt[2] * (size_t)cnt[1]);
            if ((st = md__field_double(&L, tok, "data", &v)) != MD_OK) goto fail;
            g.data[(k2 * (size_t)cnt[1] + j2) * (size_t)cnt[0] + i2] = (float)v;
        }
    }
    if ((st = md__check_eol(&L, "data")) != MD_OK) goto fail;
    md_free(L.buf);
    *grid = g;
    return MD_OK;
fail:
    md_free(L.buf);
    md_grid_free(&g);
    return st;
}

MDDEF md_status md_read_dx(const char *path, md_grid *grid) {
    char *data;
    size_t len;
    md_status st;
    if (!grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_dx", 0, "grid", "is NULL");
    if ((st = md__slurp(path, &data, &len)) != MD_OK) return st;
    st = md_read_dx_mem(data, len, path, grid);
    md_free(data);
    return st;
}
/* ---- dcs ---- */

static const char *const md__dcs_names[MD_DCS_VARIANT_COUNT + 1] = {
    "cpu_simple", "cpu_scatter", "cpu_rows", "cpu_rows_omp",
    "gpu_scatter", "gpu_gather", "gpu_const", "gpu_unroll4", "gpu_unroll8", "gpu_unroll8x2", "gpu_l1", "gpu_shared",
    "gpu_hybrid",
    "unknown"};

MDDEF const char *md_dcs_variant_name(md_dcs_variant variant) {
    if ((int)variant < 0 || variant >= MD_DCS_VARIANT_COUNT) return "unknown";
    return md__dcs_names[variant];
}

MDDEF int md_dcs_variant_is_gpu(md_dcs_variant variant) {
    return variant >= MD_DCS_GPU_SCATTER && variant < MD_DCS_VARIANT_COUNT;
}

static md_status md__dcs_check(const char *fn, const md_float4 *xyzq, int n, const md_grid *grid) {
    if (!xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (!grid || !grid->data)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "grid", "has no data");
    if (grid->n[0] < 1 || grid->n[1] < 1 || grid->n[2] < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "grid.n", "dimensions must be >= 1");
    return MD_OK;
}

/* For every point, loop over every atom. The distance is recomputed in full
 * for each pair; accumulation is in double. This is the reference. */
MDDEF md_status md_dcs_simple(const md_float4 *xyzq, int n, md_grid *grid) {
    md_status st = md__dcs_check("md_dcs_simple", xyzq, n, grid);
    int i, j, k, a;
    if (st != MD_OK) return st;
    for (k = 0; k < grid->n[2]; k++) {
        double z = grid->origin[2] + k * grid->spacing[2];
        for (j = 0; j < grid->n[1]; j++) {
            double y = grid->origin[1] + j * grid->spacing[1];
            for (i = 0; i < grid->n[0]; i++) {
                double x = grid->origin[0] + i * grid->spacing[0], v = 0.0;
                for (a = 0; a < n; a++) {
                    double dx = x - xyzq[a].x, dy = y - xyzq[a].y, dz = z - xyzq[a].z;
                    double r2 = dx * dx + dy * dy + dz * dz;
                    if (r2 >= (double)MD_DCS_MIN_R2) v += xyzq[a].w / sqrt(r2);
                }
                grid->data[((size_t)k * grid->n[1] + j) * grid->n[0] + i] = (float)(MD_COULOMB * v);
            }
        }
    }
    return MD_OK;
}

/* For every atom, add its contribution to every point: the whole grid is read
 * and written once per atom. */
MDDEF md_status md_dcs_scatter(const md_float4 *xyzq, int n, md_grid *grid) {
    md_status st = md__dcs_check("md_dcs_scatter", xyzq, n, grid);
    size_t count, p;
    int i, j, k, a;
    float hx, hy, hz, ox, oy, oz;
    if (st != MD_OK) return st; /* before grid is read: it may be NULL */
    hx = (float)grid->spacing[0];
    hy = (float)grid->spacing[1];
    hz = (float)grid->spacing[2];
    ox = (float)grid->origin[0];
    oy = (float)grid->origin[1];
    oz = (float)grid->origin[2];
    count = md_grid_count(grid);
    for (p = 0; p < count; p++) grid->data[p] = 0.0f;
    for (a = 0; a < n; a++) {
        const float ax = xyzq[a].x, ay = xyzq[a].y, az = xyzq[a].z, q = xyzq[a].w;
        float *out = grid->data;
        for (k = 0; k < grid->n[2]; k++) {
            const float dz = oz + k * hz - az;
            for (j = 0; j < grid->n[1]; j++) {
                const float dy = oy + j * hy - ay;
                for (i = 0; i < grid->n[0]; i++, out++) {
                    const float dx = ox + i * hx - ax;
                    const float r2 = dx * dx + dy * dy + dz * dz;
                    if (r2 >= MD_DCS_MIN_R2) *out += q / sqrtf(r2);
                }
            }
        }
    }
    for (p = 0; p < count; p++) grid->data[p] *= (float)MD_COULOMB;
    return MD_OK;
}

/* One plane (fixed k) at a time: the plane stays in cache while every atom
 * adds to it; per atom dz^2 is computed once per plane, dy^2 + dz^2 once per
 * row, so the inner loop is dx, one multiply-add, a sqrt and a divide. */
static void md__dcs_plane(const md_float4 *xyzq, int n, md_grid *grid, int k) {
    const int nx = grid->n[0], ny = grid->n[1];
    const float hx = (float)grid->spacing[0], hy = (float)grid->spacing[1];
    const float ox = (float)grid->origin[0], oy = (float)grid->origin[1];
    const float z = (float)(grid->origin[2] + k * grid->spacing[2]);
    const size_t count = (size_t)nx * ny;
    float *plane = grid->data + (size_t)k * count;
    size_t p;
    int i, j, a;
    for (p = 0; p < count; p++) plane[p] = 0.0f;
    for (a = 0; a < n; a++) {
        const float dz = z - xyzq[a].z, dz2 = dz * dz, q = xyzq[a].w;
        const float ax = xyzq[a].x, ay = xyzq[a].y;
        for (j = 0; j < ny; j++) {
            const float dy = oy + j * hy - ay, dydz2 = dy * dy + dz2;
            float *row = plane + (size_t)j * nx;
            for (i = 0; i < nx; i++) {
                const float dx = ox + i * hx - ax;
                const float r2 = dx * dx + dydz2;
                if (r2 >= MD_DCS_MIN_R2) row[i] += q / sqrtf(r2);
            }
        }
    }
    for (p = 0; p < count; p++) plane[p] *= (float)MD_COULOMB;
}

MDDEF md_status md_dcs_rows(const md_float4 *xyzq, int n, md_grid *grid) {
    md_status st = md__dcs_check("md_dcs_rows", xyzq, n, grid);
    int k;
    if (st != MD_OK) return st;
    for (k = 0; k < grid->n[2]; k++) md__dcs_plane(xyzq, n, grid, k);
    return MD_OK;
}

MDDEF md_status md_dcs_rows_omp(const md_float4 *xyzq, int n, md_grid *grid) {
    md_status st = md__dcs_check("md_dcs_rows_omp", xyzq, n, grid);
    int k;
    if (st != MD_OK) return st;
    MD__OMP_FOR
    for (k = 0; k < grid->n[2]; k++) md__dcs_plane(xyzq, n, grid, k);
    return MD_OK;
}

MDDEF md_status md_dcs(md_dcs_variant variant, const md_float4 *xyzq, int n, md_grid *grid) {
    switch (variant) {
    case MD_DCS_CPU_SIMPLE: return md_dcs_simple(xyzq, n, grid);
    case MD_DCS_CPU_SCATTER: return md_dcs_scatter(xyzq, n, grid);
    case MD_DCS_CPU_ROWS: return md_dcs_rows(xyzq, n, grid);
    case MD_DCS_CPU_ROWS_OMP: return md_dcs_rows_omp(xyzq, n, grid);
    default: break;
    }
    if (md_dcs_variant_is_gpu(variant))
        return md_set_error(MD_ERR_UNSUPPORTED, "md_dcs", 0, "variant",
                            "%s is a GPU rung: run it with md_cuda_dcs (md_cuda.cu.h)",
                            md_dcs_variant_name(variant));
    return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_dcs", 0, "variant", "unknown rung %d", (int)variant);
}

/* ---- rdf ---- */

static const char *const md__rdf_names[MD_RDF_VARIANT_COUNT + 1] = {
    "cpu_simple", "cpu_private", "gpu_global", "gpu_shared", "gpu_warp", "gpu_passes", "unknown"};

MDDEF const char *md_rdf_variant_name(md_rdf_variant variant) {
    if ((int)variant < 0 || variant >= MD_RDF_VARIANT_COUNT) return "unknown";
    return md__rdf_names[variant];
}

MDDEF int md_rdf_variant_is_gpu(md_rdf_variant variant) {
    return variant >= MD_RDF_GPU_GLOBAL && variant < MD_RDF_VARIANT_COUNT;
}

MDDEF md_status md_rdf_init(md_rdf *r, double rmax, int nbins) {
    md_rdf t;
    const char *fn = "md_rdf_init";
    if (!r) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r", "is NULL");
    if (nbins == 0) nbins = MD_RDF_DEFAULT_NBINS;
    if (!(rmax > 0.0) || !isfinite(rmax))
        return md_set_error(MD_ERR_RANGE, fn, 0, "rmax", "must be finite and > 0 (got %g)", rmax);
    if (nbins < 1 || nbins > (1 << 26))
        return md_set_error(MD_ERR_RANGE, fn, 0, "nbins", "must be in 1..%d (got %d)", 1 << 26, nbins);
    memset(&t, 0, sizeof t);
    t.counts = (uint64_t *)md_alloc_array((size_t)nbins, sizeof(uint64_t));
    if (!t.counts) return MD_ERR_OUT_OF_MEMORY;
    memset(t.counts, 0, (size_t)nbins * sizeof(uint64_t));
    t.nbins = nbins;
    t.rmax = rmax;
    *r = t;
    return MD_OK;
}

MDDEF void md_rdf_reset(md_rdf *r) {
    if (!r) return;
    if (r->counts) memset(r->counts, 0, (size_t)r->nbins * sizeof(uint64_t));
    r->frames = 0;
    r->sum_pair_density = 0.0;
    r->sum_centers = 0.0;
}

MDDEF void md_rdf_free(md_rdf *r) {
    if (!r) return;
    md_free(r->counts);
    memset(r, 0, sizeof *r);
}

static int md__rdf_same(const int *sel_a, int na, const int *sel_b, int nb) {
    return sel_b == NULL || (sel_b == sel_a && nb == na);
}

MDDEF md_status md_rdf_selection_pairs(int natoms, const int *sel_a, int na, const int *sel_b, int nb,
                                       double *pairs, double *centers) {
    const char *fn = "md_rdf_selection_pairs";
    int same = md__rdf_same(sel_a, na, sel_b, nb), k;
    long long common = 0;
    unsigned char *mark;
    if (natoms < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "natoms", "must be >= 1 (got %d)", natoms);
    if (na < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_a", "is empty (na = %d)", na);
    if (!same && nb < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_b", "is empty (nb = %d)", nb);
    mark = (unsigned char *)md_alloc_array((size_t)natoms, 1);
    if (!mark) return MD_ERR_OUT_OF_MEMORY;
    memset(mark, 0, (size_t)natoms);
    for (k = 0; k < na; k++) {
        int i = sel_a ? sel_a[k] : k;
        if (i < 0 || i >= natoms) {
            md_free(mark);
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_a",
                                "entry %d is atom %d, outside 0..%d", k, i, natoms - 1);
        }
        if (mark[i] & 1) {
            md_free(mark);
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_a", "atom %d appears twice", i);
        }
        mark[i] |= 1;
    }
    if (!same) {
        for (k = 0; k < nb; k++) {
            int j = sel_b ? sel_b[k] : k;
            if (j < 0 || j >= natoms) {
                md_free(mark);
                return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_b",
                                    "entry %d is atom %d, outside 0..%d", k, j, natoms - 1);
            }
            if (mark[j] & 2) {
                md_free(mark);
                return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sel_b", "atom %d appears twice", j);
            }
            mark[j] |= 2;
            if (mark[j] & 1) common++;
        }
    }
    md_free(mark);
    if (pairs) *pairs = same ? 0.5 * (double)na * (double)(na - 1) : (double)na * (double)nb - (double)common;
    if (centers) *centers = same ? 0.5 * na : (double)na;
    return MD_OK;
}

MDDEF md_status md_rdf_check_box(const char *where, const double box[3], double rmax) {
    int d;
    if (!box) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "box", "is NULL");
    for (d = 0; d < 3; d++)
        if (!isfinite(box[d]) || !(box[d] >= 2.0 * rmax))
            return md_set_error(MD_ERR_RANGE, where, 0, "box",
                                "edge %c = %g nm is below 2 rmax = %g nm (the minimum image needs "
                                "every edge >= 2 rmax; lower rmax or use a bigger box)",
                                "xyz"[d], box[d], 2.0 * rmax);
    return MD_OK;
}

MDDEF md_status md_rdf_add_frame(md_rdf *r, const double box[3], double pairs, double centers) {
    if (!r || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_rdf_add_frame", 0, "r/box", "is NULL");
    r->frames++;
    r->sum_pair_density += pairs / (box[0] * box[1] * box[2]);
    r->sum_centers += centers;
    return MD_OK;
}

/* The float geometry every rung (CPU and GPU) uses, derived from the box and
 * the accumulator the same way on the host. */
typedef struct md__rdf_geom {
    float L[3], iL[3], rmax2, inv_w;
    int nbins;
} md__rdf_geom;

static void md__rdf_geom_set(md__rdf_geom *g, const double box[3], const md_rdf *r) {
    int d;
    for (d = 0; d < 3; d++) {
        g->L[d] = (float)box[d];
        g->iL[d] = (float)(1.0 / box[d]);
    }
    g->rmax2 = (float)(r->rmax * r->rmax);
    g->inv_w = (float)((double)r->nbins / r->rmax);
    g->nbins = r->nbins;
}

/* Wrap into [0, L): x - L floor(x / L) with one fused multiply-add, so no
 * compiler can contract it differently. */
static float md__rdf_wrap(float x, float L, float iL) { return fmaf(-L, floorf(x * iL), x); }

/* Magnitude of the minimum image of a difference of wrapped coordinates (|d| < L):
 * only its square is used, so the sign is dropped; min(|d|, L - |d|) picks the nearer
 * image (L - |d| is exact when |d| >= L/2, by Sterbenz's lemma, so this equals the
 * test |d| > L/2 bit for bit). */
static float md__rdf_image(float d, float L) {
    const float e = L - fabsf(d);
    return e < fabsf(d) ? e : fabsf(d);
}

/* Bin of the pair (a, b) of wrapped positions, or -1 when r^2 >= rmax^2. */
static int md__rdf_bin(const md__rdf_geom *g, const float *a, const float *b) {
    float dx = md__rdf_image(b[0] - a[0], g->L[0]);
    float dy = md__rdf_image(b[1] - a[1], g->L[1]);
    float dz = md__rdf_image(b[2] - a[2], g->L[2]);
    float r2 = fmaf(dx, dx, fmaf(dy, dy, dz * dz));
    int k;
    if (!(r2 < g->rmax2)) return -1;
    k = (int)(sqrtf(r2) * g->inv_w);
    return k < g->nbins ? k : g->nbins - 1;
}

/* Wrapped positions of a selection, 3 floats per atom; NULL on failure (error set). */
static float *md__rdf_gather(const char *fn, const md__rdf_geom *g, const md_float4 *xyz, const int *sel, int n,
                              md_status *st) {
    float *w = (float *)md_alloc_array((size_t)n, 3 * sizeof(float));
    int k;
    *st = MD_ERR_OUT_OF_MEMORY;
    if (!w) return NULL;
    *st = MD_ERR_RANGE;
    for (k = 0; k < n; k++) {
        int i = sel ? sel[k] : k;
        const md_float4 p = xyz[i];
        if (!isfinite(p.x) || !isfinite(p.y) || !isfinite(p.z)) {
            md_free(w);
            md_set_error(MD_ERR_RANGE, fn, 0, "xyz", "atom %d has a non-finite coordinate", i);
            return NULL;
        }
        w[3 * k + 0] = md__rdf_wrap(p.x, g->L[0], g->iL[0]);
        w[3 * k + 1] = md__rdf_wrap(p.y, g->L[1], g->iL[1]);
        w[3 * k + 2] = md__rdf_wrap(p.z, g->L[2], g->iL[2]);
    }
    return w;
}

/* Pairs of row i of A with B into histogram h. */
static void md__rdf_row(const md__rdf_geom *g, const float *wa, const int *sel_a, int i, const float *wb,
                        const int *sel_b, int nb, int same, uint64_t *h) {
    int j, ia = sel_a ? sel_a[i] : i;
    const float *a = wa + 3 * (size_t)i;
    for (j = same ? i + 1 : 0; j < nb; j++) {
        int k;
        if (!same && (sel_b ? sel_b[j] : j) == ia) continue;
        k = md__rdf_bin(g, a, wb + 3 * (size_t)j);
        if (k >= 0) h[k]++;
    }
}

MDDEF md_status md_rdf_accumulate(md_rdf_variant variant, md_rdf *r, const md_float4 *xyz, int natoms,
                                  const int *sel_a, int na, const int *sel_b, int nb,
                                  const double box[3]) {
    const char *fn = "md_rdf_accumulate";
    md__rdf_geom g;
    md_status st;
    double pairs = 0.0, centers = 0.0;
    int same, i, k, nthreads = 1;
    float *wa = NULL, *wb = NULL;
    uint64_t *h = NULL;
    if (!r || !r->counts || r->nbins < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r", "is not initialized (md_rdf_init)");
    if (!xyz) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyz", "is NULL");
    if (variant != MD_RDF_CPU_SIMPLE && variant != MD_RDF_CPU_PRIVATE) {
        if (md_rdf_variant_is_gpu(variant))
            return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "variant",
                                "%s is a GPU rung: run it with md_cuda_rdf_accumulate (md_cuda.cu.h)",
                                md_rdf_variant_name(variant));
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "unknown rung %d", (int)variant);
    }
    if ((st = md_rdf_selection_pairs(natoms, sel_a, na, sel_b, nb, &pairs, &centers)) != MD_OK) return st;
    if ((st = md_rdf_check_box(fn, box, r->rmax)) != MD_OK) return st;
    same = md__rdf_same(sel_a, na, sel_b, nb);
    if (same) {
        sel_b = sel_a;
        nb = na;
    }
    md__rdf_geom_set(&g, box, r);
    if (!(wa = md__rdf_gather(fn, &g, xyz, sel_a, na, &st))) return st;
    if (same) wb = wa;
    else if (!(wb = md__rdf_gather(fn, &g, xyz, sel_b, nb, &st))) {
        md_free(wa);
        return st;
    }
#if defined(_OPENMP)
    if (variant == MD_RDF_CPU_PRIVATE) nthreads = omp_get_max_threads();
#endif
    h = (uint64_t *)md_alloc_array((size_t)nthreads * (size_t)r->nbins, sizeof(uint64_t));
    if (!h) {
        if (wb != wa) md_free(wb);
        md_free(wa);
        return MD_ERR_OUT_OF_MEMORY;
    }
    memset(h, 0, (size_t)nthreads * (size_t)r->nbins * sizeof(uint64_t));
    if (variant == MD_RDF_CPU_SIMPLE || nthreads == 1) {
        for (i = 0; i < na; i++) md__rdf_row(&g, wa, sel_a, i, wb, sel_b, nb, same, h);
    } else {
#if defined(_OPENMP)
#pragma omp parallel num_threads(nthreads)
        {
            uint64_t *mine = h + (size_t)omp_get_thread_num() * (size_t)r->nbins;
            int row;
#pragma omp for schedule(dynamic, 16)
            for (row = 0; row < na; row++) md__rdf_row(&g, wa, sel_a, row, wb, sel_b, nb, same, mine);
        }
#endif
    }
    for (i = 0; i < nthreads; i++)
        for (k = 0; k < r->nbins; k++) r->counts[k] += h[(size_t)i * r->nbins + k];
    (void)md_rdf_add_frame(r, box, pairs, centers); /* r and box were checked above: cannot fail */
    md_free(h);
    if (wb != wa) md_free(wb);
    md_free(wa);
    return MD_OK;
}

MDDEF md_status md_rdf_normalize(const md_rdf *r, double *g, double *coordination) {
    const char *fn = "md_rdf_normalize";
    double w, cum = 0.0;
    int k;
    if (!r || !r->counts) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r", "is not initialized");
    if (r->frames < 1 || !(r->sum_pair_density > 0.0) || !(r->sum_centers > 0.0))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "frames", "no frame with pairs was accumulated");
    w = r->rmax / r->nbins;
    for (k = 0; k < r->nbins; k++) {
        double lo = k * w, hi = (k + 1) * w;
        double shell = 4.0 / 3.0 * 3.14159265358979323846 * (hi * hi * hi - lo * lo * lo);
        cum += (double)r->counts[k];
        if (g) g[k] = (double)r->counts[k] / (shell * r->sum_pair_density);
        if (coordination) coordination[k] = cum / r->sum_centers;
    }
    return MD_OK;
}

/* path + ".tmp" into buf; 0 if it does not fit. */
static int md__tmp_path(char *buf, size_t cap, const char *path) {
    int k = snprintf(buf, cap, "%s.tmp", path);
    return k > 0 && (size_t)k < cap;
}

MDDEF md_status md_rdf_write_csv(const char *path, const md_rdf *r) {
    const char *fn = "md_rdf_write_csv";
    char tmp[4096];
    double *g, *n, w;
    FILE *f;
    md_status st;
    int k, bad;
    if (!path) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path", "is NULL");
    if (!md__tmp_path(tmp, sizeof tmp, path)) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path", "is too long");
    if (!r || !r->counts) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "r", "is not initialized");
    g = (double *)md_alloc_array((size_t)r->nbins, 2 * sizeof(double));
    if (!g) return MD_ERR_OUT_OF_MEMORY;
    n = g + r->nbins;
    if ((st = md_rdf_normalize(r, g, n)) != MD_OK) {
        md_free(g);
        return st;
    }
    if (!(f = fopen(tmp, "w"))) {
        md_free(g);
        return md_set_error(MD_ERR_IO, tmp, 0, NULL, "cannot open for writing: %s", strerror(errno));
    }
    w = r->rmax / r->nbins;
    fprintf(f, "r_nm,g,n\n");
    for (k = 0; k < r->nbins; k++) fprintf(f, "%.9g,%.9g,%.9g\n", (k + 0.5) * w, g[k], n[k]);
    bad = ferror(f);
    bad |= fclose(f) != 0;
    md_free(g);
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "write failed: %s", strerror(errno));
    }
    return MD_OK;
}

/* ---- selections ---- */

/* Next whitespace-separated token of *s into tok (cap bytes); 0 if none or too long. */
static int md__sel_token(const char **s, char *tok, size_t cap, int *too_long) {
    const char *p = *s;
    size_t k = 0;
    *too_long = 0;
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    while (*p && !isspace((unsigned char)*p)) {
        if (k + 1 < cap) tok[k++] = *p;
        else *too_long = 1;
        p++;
    }
    tok[k] = '\0';
    *s = p;
    return !*too_long;
}

static int md__sel_int(const char *t, long *v) {
    char *end;
    errno = 0;
    *v = strtol(t, &end, 10);
    return end != t && *end == '\0' && errno == 0 && *v >= 0 && *v <= INT_MAX;
}

MDDEF md_status md_select(const md_system *sys, const char *expr, int **idx, int *count) {
    const char *fn = "md_select", *p = expr;
    char key[16], arg[64], extra[8];
    long lo = 0, hi = -1;
    int kind, i, n = 0, *out, tl;
    if (!sys || !expr || !idx || !count)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/expr/idx/count", "is NULL");
    if (sys->n < 1 || !sys->name || !sys->type)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has no atoms");
    if (!md__sel_token(&p, key, sizeof key, &tl))
        return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': expected all, name NAME, type T or index I[-J]", expr);
    if (strcmp(key, "all") == 0) kind = 0;
    else if (strcmp(key, "name") == 0) kind = 1;
    else if (strcmp(key, "type") == 0) kind = 2;
    else if (strcmp(key, "index") == 0) kind = 3;
    else return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': unknown keyword '%s' (all, name, type, index)", expr, key);
    if (kind != 0) {
        if (!md__sel_token(&p, arg, sizeof arg, &tl))
            return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': '%s' needs %s", expr, key,
                                tl ? "a shorter argument" : "an argument");
        if (kind == 1 && strlen(arg) >= sizeof sys->name[0].s)
            return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': atom names have at most %d characters", expr,
                                (int)sizeof sys->name[0].s - 1);
        if (kind == 2 && !md__sel_int(arg, &lo))
            return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': type '%s' is not a non-negative integer", expr, arg);
        if (kind == 3) {
            char *dash = strchr(arg, '-');
            if (dash) *dash = '\0';
            if (!md__sel_int(arg, &lo) || (dash && !md__sel_int(dash + 1, &hi)))
                return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': expected index I or index I-J with integers >= 0", expr);
            if (!dash) hi = lo;
            if (hi < lo) return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': range %ld-%ld is reversed", expr, lo, hi);
        }
    }
    if (md__sel_token(&p, extra, sizeof extra, &tl) || tl)
        return md_set_error(MD_ERR_PARSE, fn, 0, "expr", "'%s': unexpected text after the selection", expr);
    for (i = 0; i < sys->n; i++) {
        int hit = kind == 0 || (kind == 1 && strcmp(sys->name[i].s, arg) == 0) ||
                  (kind == 2 && sys->type[i] == lo) || (kind == 3 && i >= lo && i <= hi);
        n += hit;
    }
    if (n == 0)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "expr", "'%s' matches no atom (of %d)", expr, sys->n);
    out = (int *)md_alloc_array((size_t)n, sizeof(int));
    if (!out) return MD_ERR_OUT_OF_MEMORY;
    for (i = 0, n = 0; i < sys->n; i++) {
        int hit = kind == 0 || (kind == 1 && strcmp(sys->name[i].s, arg) == 0) ||
                  (kind == 2 && sys->type[i] == lo) || (kind == 3 && i >= lo && i <= hi);
        if (hit) out[n++] = i;
    }
    *idx = out;
    *count = n;
    return MD_OK;
}

/* ---- DCD ---- */

/* AKMA time unit in ps: CHARMM stores the timestep in these units. */
#define MD__AKMA_PS 0.04888821

static size_t md__dcd_read(md_dcd_reader *r, void *dst, size_t n) {
    if (r->file) {
        size_t k = fread(dst, 1, n, r->file);
        r->pos += k;
        return k;
    }
    if (n > r->mem_size - r->pos) n = r->mem_size - r->pos;
    memcpy(dst, r->mem + r->pos, n);
    r->pos += n;
    return n;
}

static uint32_t md__dcd_u32(const md_dcd_reader *r, const unsigned char *p) {
    if (r->big_endian)
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
    return ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | (uint32_t)p[0];
}

static double md__dcd_f64(const md_dcd_reader *r, const unsigned char *p) {
    uint64_t lo = md__dcd_u32(r, p + (r->big_endian ? 4 : 0)), hi = md__dcd_u32(r, p + (r->big_endian ? 0 : 4));
    uint64_t u = (hi << 32) | lo;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* Read one record of exactly `expect` bytes into dst (NULL: skip), checking both
 * length markers. `frame` < 0 means the header. */
static md_status md__dcd_record(md_dcd_reader *r, const char *what, long frame, unsigned char *dst, size_t expect) {
    unsigned char m[4], chunk[256];
    size_t left = expect;
    char where[32];
    uint32_t v;
    if (frame < 0) snprintf(where, sizeof where, "header");
    else snprintf(where, sizeof where, "frame %ld", frame);
    if (md__dcd_read(r, m, 4) != 4)
        return md_set_error(MD_ERR_PARSE, r->name, 0, what, "%s: truncated: record %s is missing", where, what);
    if ((v = md__dcd_u32(r, m)) != expect)
        return md_set_error(MD_ERR_PARSE, r->name, 0, what, "%s: record %s: length marker %lu, expected %lu",
                            where, what, (unsigned long)v, (unsigned long)expect);
    while (left > 0) {
        size_t k = dst ? left : (left < sizeof chunk ? left : sizeof chunk);
        size_t got = md__dcd_read(r, dst ? dst + (expect - left) : chunk, k);
        left -= got;
        if (got != k)
            return md_set_error(MD_ERR_PARSE, r->name, 0, what, "%s: record %s: truncated (%lu of %lu bytes)",
                                where, what, (unsigned long)(expect - left), (unsigned long)expect);
    }
    if (md__dcd_read(r, m, 4) != 4)
        return md_set_error(MD_ERR_PARSE, r->name, 0, what, "%s: record %s: truncated (end marker missing)", where, what);
    if ((v = md__dcd_u32(r, m)) != expect)
        return md_set_error(MD_ERR_PARSE, r->name, 0, what, "%s: record %s: end marker %lu, expected %lu",
                            where, what, (unsigned long)v, (unsigned long)expect);
    return MD_OK;
}

static long long md__dcd_frame_bytes(const md_dcd_reader *r) {
    return (r->has_cell ? 56LL : 0LL) + 3LL * (8LL + 4LL * r->natoms);
}

static md_status md__dcd_header(md_dcd_reader *r) {
    unsigned char h[84], m[4], b4[4];
    int32_t icntrl[20];
    uint32_t len, ntitle;
    int k;
    md_status st;
    if (md__dcd_read(r, m, 4) != 4)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "header", "file is shorter than a DCD header");
    r->big_endian = 0;
    if (md__dcd_u32(r, m) != 84) {
        r->big_endian = 1;
        if (md__dcd_u32(r, m) != 84)
            return md_set_error(MD_ERR_PARSE, r->name, 0, "header",
                                "first length marker is not 84 in either byte order (not a DCD file, "
                                "or one with 64-bit markers)");
    }
    r->pos = 0;
    if (r->file && fseek(r->file, 0, SEEK_SET) != 0)
        return md_set_error(MD_ERR_IO, r->name, 0, NULL, "cannot seek: %s", strerror(errno));
    if ((st = md__dcd_record(r, "header", -1, h, 84)) != MD_OK) return st;
    if (memcmp(h, "CORD", 4) != 0)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "header", "magic is not CORD (a velocity DCD is not supported)");
    for (k = 0; k < 20; k++) icntrl[k] = (int32_t)md__dcd_u32(r, h + 4 + 4 * k);
    if (icntrl[8] != 0)
        return md_set_error(MD_ERR_UNSUPPORTED, r->name, 0, "ICNTRL[8]", "header: %d fixed atoms: not supported", (int)icntrl[8]);
    if (icntrl[19] != 0 && icntrl[11] != 0)
        return md_set_error(MD_ERR_UNSUPPORTED, r->name, 0, "ICNTRL[11]", "header: 4D trajectories are not supported");
    r->nframes_header = icntrl[0] > 0 ? icntrl[0] : 0;
    r->has_cell = icntrl[19] != 0 && icntrl[10] != 0;
    r->nsavc = icntrl[2] > 0 ? icntrl[2] : 1;
    if (icntrl[19] != 0) { /* CHARMM: DELTA is a float in AKMA time units; frames are NSAVC steps apart */
        float delta;
        uint32_t u = (uint32_t)icntrl[9];
        memcpy(&delta, &u, sizeof delta);
        r->delta_ps = isfinite(delta) && delta > 0.0f ? delta * MD__AKMA_PS : 0.0;
        r->timestep_ps = r->delta_ps * r->nsavc;
    }
    /* title: int32 count and count lines of 80 characters */
    if (md__dcd_read(r, m, 4) != 4)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "title", "header: truncated: title record is missing");
    len = md__dcd_u32(r, m);
    if (len < 4 || (len - 4) % 80 != 0 || len > 4 + 80 * 10000)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "title", "header: title record length %lu is not 4 + 80 k",
                            (unsigned long)len);
    if (md__dcd_read(r, b4, 4) != 4)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "title", "header: title record truncated");
    ntitle = md__dcd_u32(r, b4);
    if (4 + 80 * (unsigned long)ntitle != len)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "title", "header: %lu title lines do not fill %lu bytes",
                            (unsigned long)ntitle, (unsigned long)len);
    r->pos -= 8; /* re-read the title as one checked record */
    if (r->file && fseek(r->file, (long)r->pos, SEEK_SET) != 0)
        return md_set_error(MD_ERR_IO, r->name, 0, NULL, "cannot seek: %s", strerror(errno));
    if ((st = md__dcd_record(r, "title", -1, NULL, len)) != MD_OK) return st;
    if ((st = md__dcd_record(r, "NATOM", -1, b4, 4)) != MD_OK) return st;
    k = (int32_t)md__dcd_u32(r, b4);
    if (k < 1 || k > MD_DCD_MAX_ATOMS)
        return md_set_error(MD_ERR_PARSE, r->name, 0, "NATOM", "header: %d atoms is absurd (1..%d)", k, MD_DCD_MAX_ATOMS);
    r->natoms = k;
    if (r->size - (long long)r->pos > 0 && r->size - (long long)r->pos < md__dcd_frame_bytes(r))
        return md_set_error(MD_ERR_PARSE, r->name, 0, "NATOM",
                            "header: %d atoms need %lld bytes per frame but only %lld bytes follow", k,
                            md__dcd_frame_bytes(r), r->size - (long long)r->pos);
    return MD_OK;
}

static md_status md__dcd_begin(md_dcd_reader *r, md_dcd_reader *t) {
    md_status st = md__dcd_header(t);
    if (st != MD_OK) {
        if (t->file) fclose(t->file);
        return st;
    }
    *r = *t;
    return MD_OK;
}

MDDEF md_status md_dcd_open(md_dcd_reader *r, const char *path) {
    md_dcd_reader t;
    long end;
    if (!r || !path) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_dcd_open", 0, "r/path", "is NULL");
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", path);
    if (!(t.file = fopen(path, "rb"))) return md_set_error(MD_ERR_IO, path, 0, NULL, "cannot open: %s", strerror(errno));
    if (fseek(t.file, 0, SEEK_END) != 0 || (end = ftell(t.file)) < 0 || fseek(t.file, 0, SEEK_SET) != 0) {
        fclose(t.file);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "cannot seek (a DCD must be a regular file)");
    }
    t.size = end;
    return md__dcd_begin(r, &t);
}

MDDEF md_status md_dcd_open_mem(md_dcd_reader *r, const void *data, size_t size, const char *name) {
    md_dcd_reader t;
    if (!r || (!data && size)) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_dcd_open_mem", 0, "r/data", "is NULL");
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name ? name : "memory");
    t.mem = (const unsigned char *)(data ? data : "");
    t.mem_size = size;
    t.size = (long long)size;
    return md__dcd_begin(r, &t);
}

/* Angle in degrees from its cosine; 90 - asin(c) keeps a cosine of 0 exactly 90 (as VMD's
 * dcdplugin does). */
static double md__deg_of_cos(double c) {
    return 90.0 - asin(c < -1.0 ? -1.0 : c > 1.0 ? 1.0 : c) * (180.0 / 3.14159265358979323846);
}

/* The angles alpha, beta, gamma (degrees) of a DCD cell record A, gamma, B, beta, alpha, C
 * in whichever layout it is written; returns the layout's name (see md_dcd_next). */
static const char *md__dcd_cell_angles(const double v[6], double ang[3]) {
    static const int sym[9] = {0, 1, 3, 1, 2, 4, 3, 4, 5}; /* h11 h21 h31 / h21 h22 h32 / h31 h32 h33 */
    const double s[3] = {v[4], v[3], v[1]};                /* the alpha, beta and gamma slots */
    double h[3][3], len[3], det;
    int k, ok;
    for (k = 0, ok = 1; k < 3; k++) ok &= fabs(s[k]) <= 1.0;
    if (ok) {
        for (k = 0; k < 3; k++) ang[k] = md__deg_of_cos(s[k]);
        return "cosines";
    }
    for (k = 0, ok = 1; k < 3; k++) ok &= s[k] > 0.0 && s[k] < 180.0;
    if (ok && s[0] < s[1] + s[2] && s[1] < s[0] + s[2] && s[2] < s[0] + s[1] && s[0] + s[1] + s[2] < 360.0) {
        for (k = 0; k < 3; k++) ang[k] = s[k];
        return "degrees";
    }
    /* CHARMM's symmetric shape matrix h11 h21 h22 h31 h32 h33: rows are the cell vectors */
    for (k = 0; k < 9; k++) h[k / 3][k % 3] = v[sym[k]];
    det = h[0][0] * (h[1][1] * h[2][2] - h[1][2] * h[2][1]) - h[0][1] * (h[1][0] * h[2][2] - h[1][2] * h[2][0]) +
          h[0][2] * (h[1][0] * h[2][1] - h[1][1] * h[2][0]);
    for (k = 0; k < 3; k++) len[k] = sqrt(h[k][0] * h[k][0] + h[k][1] * h[k][1] + h[k][2] * h[k][2]);
    if (h[0][0] > 0.0 && h[0][0] * h[1][1] - h[0][1] * h[1][0] > 0.0 && det > 0.0) {
        static const int pair[3][2] = {{1, 2}, {0, 2}, {0, 1}}; /* alpha: b.c, beta: a.c, gamma: a.b */
        for (k = 0; k < 3; k++) {
            const double *a = h[pair[k][0]], *b = h[pair[k][1]];
            ang[k] = md__deg_of_cos((a[0] * b[0] + a[1] * b[1] + a[2] * b[2]) / (len[pair[k][0]] * len[pair[k][1]]));
        }
        return "a CHARMM shape matrix";
    }
    for (k = 0; k < 3; k++) ang[k] = fabs(s[k]) <= 1.0 ? md__deg_of_cos(s[k]) : s[k];
    return "cosines and degrees, entry by entry";
}

MDDEF md_status md_dcd_next(md_dcd_reader *r, md_system *frame, int *got) {
    static const char *const rec[3] = {"X", "Y", "Z"};
    long long left, need;
    double box[3] = {0.0, 0.0, 0.0};
    size_t nb;
    md_status st;
    int i, k;
    if (!r || !frame || !got) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_dcd_next", 0, "r/frame/got", "is NULL");
    if (!r->file && !r->mem) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_dcd_next", 0, "r", "is not open");
    *got = 0;
    left = r->size - (long long)r->pos;
    if (left == 0) return MD_OK;
    need = md__dcd_frame_bytes(r);
    if (left < need) { /* name the first record that does not fit */
        long long at = 0, len[4];
        const char *names[4] = {"cell", "X", "Y", "Z"};
        len[0] = r->has_cell ? 56 : 0;
        len[1] = len[2] = len[3] = 8 + 4LL * r->natoms;
        for (k = 0; k < 4 && at + len[k] <= left; k++) at += len[k];
        if (k > 3) k = 3;
        return md_set_error(MD_ERR_PARSE, r->name, 0, names[k],
                            "frame %d: truncated: record %s is cut short (a frame needs %lld bytes, %lld remain)",
                            r->frame, names[k], need, left);
    }
    nb = 4 * (size_t)r->natoms;
    if (!r->buf && !(r->buf = (float *)md_alloc_array((size_t)r->natoms, 3 * sizeof(float)))) return MD_ERR_OUT_OF_MEMORY;
    if (r->has_cell) {
        static const char *const cname[6] = {"A", "gamma", "B", "beta", "alpha", "C"};
        static const char *const aname[3] = {"alpha", "beta", "gamma"};
        unsigned char c[48];
        double v[6], ang[3];
        const char *layout;
        if ((st = md__dcd_record(r, "cell", r->frame, c, 48)) != MD_OK) return st;
        for (k = 0; k < 6; k++) {
            v[k] = md__dcd_f64(r, c + 8 * k);
            if (!isfinite(v[k]))
                return md_set_error(MD_ERR_RANGE, r->name, 0, "cell", "frame %d: %s is not finite", r->frame, cname[k]);
        }
        if (v[0] < 0.0 || v[2] < 0.0 || v[5] < 0.0)
            return md_set_error(MD_ERR_RANGE, r->name, 0, "cell", "frame %d: negative edge length", r->frame);
        layout = md__dcd_cell_angles(v, ang);
        for (k = 0; k < 3; k++)
            if (fabs(ang[k] - 90.0) > 1e-3)
                return md_set_error(MD_ERR_UNSUPPORTED, r->name, 0, "cell",
                                    "frame %d: angle %s = %.6g degrees (alpha %.6g, beta %.6g, gamma %.6g; the cell "
                                    "record read as %s): only orthorhombic cells are supported",
                                    r->frame, aname[k], ang[k], ang[0], ang[1], ang[2], layout);
        box[0] = 0.1 * v[0];
        box[1] = 0.1 * v[2];
        box[2] = 0.1 * v[5];
    }
    for (k = 0; k < 3; k++) {
        unsigned char *p = (unsigned char *)(r->buf + (size_t)k * r->natoms);
        if ((st = md__dcd_record(r, rec[k], r->frame, p, nb)) != MD_OK) return st;
        for (i = 0; i < r->natoms; i++) {
            uint32_t u = md__dcd_u32(r, p + 4 * (size_t)i);
            float f;
            memcpy(&f, &u, sizeof f);
            if (!isfinite(f))
                return md_set_error(MD_ERR_RANGE, r->name, 0, rec[k], "frame %d: atom %d: coordinate is not finite",
                                    r->frame, i);
            r->buf[(size_t)k * r->natoms + i] = f;
        }
    }
    if (frame->n != r->natoms || !frame->xyzq) {
        md_system s;
        if ((st = md_system_alloc(&s, r->natoms)) != MD_OK) return st;
        md_system_free(frame);
        *frame = s;
    }
    for (i = 0; i < r->natoms; i++) {
        frame->xyzq[i].x = (float)(0.1 * r->buf[i]);
        frame->xyzq[i].y = (float)(0.1 * r->buf[(size_t)r->natoms + i]);
        frame->xyzq[i].z = (float)(0.1 * r->buf[2 * (size_t)r->natoms + i]);
    }
    for (k = 0; k < 3; k++) frame->box[k] = box[k];
    for (k = 0; k < 6; k++) frame->cell[k] = 0.0;
    r->frame++;
    *got = 1;
    return MD_OK;
}

MDDEF void md_dcd_close(md_dcd_reader *r) {
    if (!r) return;
    if (r->file) fclose(r->file);
    md_free(r->buf);
    memset(r, 0, sizeof *r);
}

static void md__dcd_put32(unsigned char *p, uint32_t v, int be) {
    int k;
    for (k = 0; k < 4; k++) p[be ? 3 - k : k] = (unsigned char)(v >> (8 * k));
}

/* Write a record: marker, payload, marker. Returns 0 on a write error. */
static int md__dcd_put_record(FILE *f, const unsigned char *payload, size_t n, int be) {
    unsigned char m[4];
    md__dcd_put32(m, (uint32_t)n, be);
    return fwrite(m, 1, 4, f) == 4 && fwrite(payload, 1, n, f) == n && fwrite(m, 1, 4, f) == 4;
}

MDDEF md_status md_dcd_write(const char *path, const md_system *frames, int nframes,
                             const md_dcd_write_desc *desc) {
    const char *fn = "md_dcd_write";
    md_dcd_write_desc d;
    unsigned char h[84], title[84], b4[4], *buf;
    char tmp[4096];
    int natoms, fr, i, k, ok = 1, be;
    FILE *f;
    if (!path || !frames) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path/frames", "is NULL");
    if (nframes < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nframes", "must be >= 1 (got %d)", nframes);
    if (!md__tmp_path(tmp, sizeof tmp, path)) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path", "is too long");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    be = d.big_endian != 0;
    natoms = frames[0].n;
    for (fr = 0; fr < nframes; fr++) {
        if (frames[fr].n != natoms || natoms < 1 || !frames[fr].xyzq)
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "frames",
                                "frame %d has %d atoms; every frame needs the same count >= 1", fr, frames[fr].n);
        for (i = 0; i < natoms; i++)
            if (!isfinite(frames[fr].xyzq[i].x) || !isfinite(frames[fr].xyzq[i].y) || !isfinite(frames[fr].xyzq[i].z))
                return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq", "frame %d: atom %d: coordinate is not finite", fr, i);
        if (!d.no_cell)
            for (k = 0; k < 3; k++)
                if (!(frames[fr].box[k] >= 0.0) || !isfinite(frames[fr].box[k]))
                    return md_set_error(MD_ERR_RANGE, fn, 0, "box", "frame %d: edge %d is not finite and >= 0", fr, k);
    }
    buf = (unsigned char *)md_alloc_array((size_t)natoms, 4);
    if (!buf) return MD_ERR_OUT_OF_MEMORY;
    memset(h, 0, sizeof h);
    memcpy(h, "CORD", 4);
    {
        uint32_t icntrl[20];
        float delta = (float)(d.timestep_ps / MD__AKMA_PS);
        memset(icntrl, 0, sizeof icntrl);
        icntrl[0] = (uint32_t)nframes;
        icntrl[2] = 1;
        icntrl[3] = (uint32_t)nframes;
        memcpy(&icntrl[9], &delta, 4);
        icntrl[10] = d.no_cell ? 0 : 1;
        icntrl[19] = 24;
        for (k = 0; k < 20; k++) md__dcd_put32(h + 4 + 4 * k, icntrl[k], be);
    }
    md__dcd_put32(title, 1, be);
    memset(title + 4, ' ', 80);
    memcpy(title + 4, "REMARKS written by md.h", 23);
    if (!(f = fopen(tmp, "wb"))) {
        md_free(buf);
        return md_set_error(MD_ERR_IO, tmp, 0, NULL, "cannot open for writing: %s", strerror(errno));
    }
    md__dcd_put32(b4, (uint32_t)natoms, be);
    ok = md__dcd_put_record(f, h, 84, be) && md__dcd_put_record(f, title, 84, be) && md__dcd_put_record(f, b4, 4, be);
    for (fr = 0; ok && fr < nframes; fr++) {
        if (!d.no_cell) {
            double v[6];
            unsigned char c[48];
            v[0] = 10.0 * frames[fr].box[0];
            v[1] = 0.0; /* cos(gamma) */
            v[2] = 10.0 * frames[fr].box[1];
            v[3] = 0.0; /* cos(beta) */
            v[4] = 0.0; /* cos(alpha) */
            v[5] = 10.0 * frames[fr].box[2];
            for (k = 0; k < 6; k++) {
                uint64_t u;
                memcpy(&u, &v[k], 8);
                md__dcd_put32(c + 8 * k + (be ? 4 : 0), (uint32_t)u, be);
                md__dcd_put32(c + 8 * k + (be ? 0 : 4), (uint32_t)(u >> 32), be);
            }
            ok = md__dcd_put_record(f, c, 48, be);
        }
        for (k = 0; ok && k < 3; k++) {
            for (i = 0; i < natoms; i++) {
                const md_float4 p = frames[fr].xyzq[i];
                float x = (float)(10.0 * (k == 0 ? p.x : k == 1 ? p.y : p.z));
                uint32_t u;
                memcpy(&u, &x, 4);
                md__dcd_put32(buf + 4 * (size_t)i, u, be);
            }
            ok = md__dcd_put_record(f, buf, 4 * (size_t)natoms, be);
        }
    }
    md_free(buf);
    ok &= !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "write failed: %s", strerror(errno));
    }
    return MD_OK;
}

/* ---- trajectories ---- */

MDDEF md_status md_traj_open(md_traj *t, const char *path) {
    md_traj n;
    md_status st;
    if (!t || !path) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_traj_open", 0, "t/path", "is NULL");
    memset(&n, 0, sizeof n);
    if (md__ext_is(path, "dcd")) {
        if ((st = md_dcd_open(&n.dcd, path)) != MD_OK) return st;
        n.format = MD_TRAJ_DCD;
    } else if (md__ext_is(path, "xyz")) {
        if ((st = md_xyz_open(&n.xyz, path)) != MD_OK) return st;
        n.format = MD_TRAJ_XYZ;
    } else {
        return md_set_error(MD_ERR_UNSUPPORTED, path, 0, NULL, "unknown trajectory format (expected .dcd or .xyz)");
    }
    *t = n;
    return MD_OK;
}

MDDEF md_status md_traj_next(md_traj *t, md_system *frame, int *got) {
    if (!t) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_traj_next", 0, "t", "is NULL");
    switch (t->format) {
    case MD_TRAJ_DCD: return md_dcd_next(&t->dcd, frame, got);
    case MD_TRAJ_XYZ: return md_xyz_next(&t->xyz, frame, got);
    default: break;
    }
    return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_traj_next", 0, "t", "is not open");
}

MDDEF void md_traj_close(md_traj *t) {
    if (!t) return;
    if (t->format == MD_TRAJ_DCD) md_dcd_close(&t->dcd);
    if (t->format == MD_TRAJ_XYZ) md_xyz_close(&t->xyz);
    memset(t, 0, sizeof *t);
}

/* ---- bench ---- */

/* A string builder that never overflows and counts what the whole text needs. */
typedef struct md__sb {
    char *buf;
    size_t cap, len;
} md__sb;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void md__sb_printf(md__sb *b, const char *fmt, ...) {
    char dummy[1];
    int fits = b->buf && b->len < b->cap, k;
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(fits ? b->buf + b->len : dummy, fits ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) b->len += (size_t)k;
}

static void md__json_number(md__sb *b, const char *key, double v) {
    if (!isfinite(v)) md__sb_printf(b, ",\"%s\":null", key);
    else md__sb_printf(b, ",\"%s\":%.6g", key, v);
}

static void md__json_string(md__sb *b, const char *key, const char *s) {
    const char *c;
    md__sb_printf(b, ",\"%s\":\"", key);
    for (c = s ? s : ""; *c; c++) {
        if (*c == '"' || *c == '\\') md__sb_printf(b, "\\%c", *c);
        else if ((unsigned char)*c < 0x20) md__sb_printf(b, "\\u%04x", (unsigned)(unsigned char)*c);
        else md__sb_printf(b, "%c", *c);
    }
    md__sb_printf(b, "\"");
}

MDDEF int md_bench_json(char *buf, size_t cap, const md_bench_result *r) {
    md__sb b;
    double frac;
    if (!r) return -1;
    b.buf = buf;
    b.cap = buf ? cap : 0;
    b.len = 0;
    md__sb_printf(&b, "{\"schema\":\"md_bench/1\"");
    md__json_string(&b, "chapter", r->chapter);
    md__json_string(&b, "variant", r->variant);
    md__sb_printf(&b, ",\"size\":%lld", r->size);
    md__json_string(&b, "size_unit", r->size_unit);
    md__json_number(&b, "time_s", r->time_s);
    md__json_number(&b, "rate", r->rate);
    md__json_string(&b, "unit", r->unit);
    md__json_number(&b, "ceiling", r->ceiling);
    frac = (isfinite(r->ceiling) && r->ceiling > 0.0) ? r->rate / r->ceiling : NAN;
    md__json_number(&b, "ceiling_fraction", frac);
    md__json_number(&b, "error", r->error);
    md__json_string(&b, "device", r->device);
    md__sb_printf(&b, "}");
    return b.len > (size_t)INT_MAX ? INT_MAX : (int)b.len;
}

#ifdef __cplusplus
}
#endif

#endif /* MD_IMPLEMENTATION_INCLUDED */
#endif /* MD_IMPLEMENTATION */

/*
 * LICENSE (MIT)
 * Copyright (c) 2026 the md.h developers
 * Permission is hereby granted, free of charge, to any person obtaining a copy
 * of this software and associated documentation files (the "Software"), to deal
 * in the Software without restriction, including without limitation the rights
 * to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 * copies of the Software, and to permit persons to whom the Software is
 * furnished to do so, subject to the following conditions: the above copyright
 * notice and this permission notice shall be included in all copies or
 * substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS IS",
 * WITHOUT WARRANTY OF ANY KIND.
 */
