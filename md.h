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
 *   ff       md_lj_table (LJ coefficients per type pair, LB / geometric / NBFIX),
 *            md_topology (types, charges, masses, bonds, exclusions, 1-4 pairs,
 *            rigid waters), md_fixed: 64-bit fixed-point sums
 *   nblist   md_cell_list, md_verlet_list (half and full, with a buffer)
 *   nb       md_nb_params, md_nb_plan, md_nb_compute: LJ + Coulomb (cutoff,
 *            reaction field, Ewald real space) forces, energies, virial
 *   integrate md_dynamics, md_integrate_vv: velocity Verlet NVE on the CPU
 *   build    md_build_water_box (TIP3P, SPC/E), md_build_lj_fluid (argon)
 *   ions     md_build_ionic_crystal (rock salt), md_build_salt_water (NaCl in
 *            water), md_topology_water_ions (water and ions read from a file),
 *            md_water_ion_lj_table, md_water_pdb_names
 *   ewald    md_ewald_params, md_ewald_compute: the classic Ewald sum (real,
 *            reciprocal, self, exclusion energies, forces, virial)
 *   pme      md_pme_params, md_pme_choose, md_pme_plan_create/compute/free and
 *            the stages md_pme_spread/forward/solve/backward/gather: smooth PME;
 *            md_fft_plan, md_fft3d: the compact FFT it uses
 *   bonded   md_bonded (harmonic bonds and angles), md_bonded_compute; md_ff_table,
 *            md_read_ff_table, md_topology_from_psf: parameters for a PSF
 *   constraints md_settle_water, md_settle_velocities(_inv), md_constraints:
 *            SETTLE, SHAKE and RATTLE
 *   thermostat md_philox4x32_10, md_langevin_normals: counter-based noise
 *   sim      md_sim_create/step/energy/free: the MD step on the CPU (leapfrog,
 *            Langevin middle, Monte Carlo barostat); energies CSV, progress line
 *   checkpoint md_checkpoint (write, read, md_sim_checkpoint, md_sim_restore);
 *            md_dcd_writer: DCD written frame by frame
 *   co       md_co_create/resume/yield/status/free: stackful coroutines (inline
 *            assembly on x86-64 and AArch64, else ucontext); md_remd: temperature
 *            replica exchange (Metropolis swaps of neighbours, seeded, statistics)
 *   bench    md_bench_result and md_bench_json: benchmark JSON lines
 *
 * LICENSE: MIT (see the end of this file).
 */
#ifndef MD_H
#define MD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>

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
    MD_RDF_GPU_CELL,       /**< GPU: a GPU cell list (cells >= rmax, CUB radix sort) so only pairs
                                in neighbouring cells are visited; one shared histogram per block */
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
/* ff: force field and topology                                             */
/* ======================================================================== */

/* A simulation separates the file record (md_system: names, residues,
 * coordinates, as the readers fill it) from the force field: an md_lj_table
 * of Lennard-Jones coefficients per type pair and an md_topology with each
 * atom's LJ type, charge and mass, the bonds, angles, exclusions, scaled 1-4
 * pairs, rigid water groups and constraints. Builders make both
 * (md_build_water_box, md_build_lj_fluid) or a caller fills them from a file
 * (md_topology_from_system, md_topology_set_lj_types_by_name,
 * md_lj_table_create). */

/** @def MD_HOSTDEV
 *  @brief `__host__ __device__` under a CUDA compiler, else nothing: marks the float
 *  pair arithmetic that md.h's fixed-point rung and the GPU rungs share. */
#if defined(__CUDACC__)
#define MD_HOSTDEV __host__ __device__
#else
#define MD_HOSTDEV
#endif

/** @brief One 64-bit fixed-point accumulator: a value v is stored as round(v * scale) in
 *  two's complement, added with wrap-around unsigned arithmetic (what CUDA's 64-bit
 *  atomicAdd does), so a sum does not depend on the order of its terms. */
typedef unsigned long long md_fixed;

/** @brief Fixed-point units per kJ mol^-1 nm^-1 for forces: 2^32.
 *
 *  The range is +-2^31 = +-2.1e9 kJ/mol/nm per atom (a force in a sane MD system is below
 *  1e5; a float pair force of 1e5 already has an ulp of 0.008, so nothing finer than
 *  2^-32 = 2.3e-10 is ever needed). OpenMM's GPU platforms use the same scale. */
#define MD_FORCE_FIXED_SCALE 4294967296.0

/** @brief Fixed-point units per kJ/mol for energies and virial entries: 2^24.
 *
 *  The range is +-2^39 = +-5.5e11 kJ/mol (a 1e8-atom water box holds about -1.5e9 kJ/mol of
 *  Coulomb energy, and a few bad contacts in a raw structure add 1e8 each); the resolution
 *  6e-8 kJ/mol is below the float rounding of any pair energy above 1 kJ/mol. */
#define MD_ENERGY_FIXED_SCALE 16777216.0

/** @brief The md_fixed value md_fixed_from_float() returns for NaN or a value outside the
 *  range (the most negative 64-bit integer); a rung that sees it reports an overflow. */
#define MD_FIXED_INVALID 0x8000000000000000ULL

/** @brief Float multiply that a CUDA compiler may not fuse into an FMA (__fmul_rn on the
 *  device, a plain product on the host). The shared pair arithmetic uses it for every
 *  product, so host and device round every operation alike.
 *
 *  On the host the compiler must not fuse either: GCC's default for ISO C (-std=c11) and
 *  clang's default (contraction within one source expression only) keep every product
 *  rounded, but GCC fuses across inlined calls in C++ and GNU C modes, so C++ (and nvcc's
 *  host pass) needs -ffp-contract=off for MD_NB_CPU_FIXED to equal the GPU bit for bit.
 *  The Makefile passes it (tests/gpu_nb_float.cu caught the difference on an H100). */
MD_HOSTDEV static inline float md__fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/** @brief IEEE round-to-nearest float division on host and device (also under
 *  --use_fast_math). */
MD_HOSTDEV static inline float md__fdiv(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/** @brief IEEE round-to-nearest float square root on host and device. */
MD_HOSTDEV static inline float md__fsqrt(float a) {
#if defined(__CUDA_ARCH__)
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}

/** @brief Convert @p v * @p scale (scale a power of two, so the product is exact) to
 *  fixed point, rounding to nearest with ties to even: llrintf on the host (in the
 *  default rounding mode), __float2ll_rn on the device, so both give the same bits.
 *  NaN and |v * scale| >= 2^63 give MD_FIXED_INVALID. */
MD_HOSTDEV static inline md_fixed md_fixed_from_float(float v, float scale) {
    float s = md__fmul(v, scale);
    if (!(s > -9223372036854775808.0f && s < 9223372036854775808.0f)) return MD_FIXED_INVALID;
#if defined(__CUDA_ARCH__)
    return (md_fixed)__float2ll_rn(s);
#else
    return (md_fixed)llrintf(s);
#endif
}

/** @brief The signed value of a fixed-point accumulator divided by @p scale (exact when
 *  |v| < 2^53, i.e. forces below 2^21 kJ/mol/nm). */
MD_HOSTDEV static inline double md_fixed_to_double(md_fixed v, double scale) {
    if (v >> 63) return -(double)(~v + 1ULL) / scale;
    return (double)v / scale;
}

/** @brief exp(x) in float from + - * fmaf, rintf and ldexpf only (each exact or correctly
 *  rounded on host and device), so host and device give the same bits.
 *
 *  x is clamped to [-80, 80]; k = rint(x log2 e), r = x - k ln 2 (Cody-Waite, two fmaf),
 *  exp(r) by its Taylor polynomial of degree 7 (truncation error 5e-9 for |r| <= ln2/2),
 *  times 2^k (ldexpf, exact). Relative error below 2e-7 (tests/test_nb.c checks it
 *  against libm's exp). */
MD_HOSTDEV static inline float md_expf(float x) {
    float k, r, p;
    if (x < -80.0f) x = -80.0f;
    if (x > 80.0f) x = 80.0f;
    k = rintf(md__fmul(x, 1.44269504088896341f));
    r = fmaf(k, -0.693145751953125f, x);
    r = fmaf(k, -1.42860676533018708e-6f, r);
    p = fmaf(r, 1.0f / 5040.0f, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return ldexpf(p, (int)k);
}

/** @brief erfc(x) for x >= 0 in float from + - * / fmaf and md_expf, the same bits on host
 *  and device.
 *
 *  The Chebyshev fit of Numerical Recipes in C (2nd ed., section 6.2, erfcc):
 *  erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x/2), P of degree 9, fractional error below
 *  1.2e-7 for every x >= 0; in float it stays below 8e-7 relative for x <= 3.5 (beta r at
 *  the cutoff is 2.63 for the default Ewald tolerance) and 1.5e-6 up to 4.5, where the
 *  float rounding of the argument -x^2 + P(t) dominates (tests/test_nb.c checks both
 *  against libm's erfc). */
MD_HOSTDEV static inline float md_erfcf(float x) {
    float t = md__fdiv(1.0f, fmaf(0.5f, x, 1.0f)), p;
    p = fmaf(t, 0.17087277f, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    return md__fmul(t, md_expf(fmaf(-x, x, p)));
}

/** @brief erf(x) for x >= 0 in float, the same bits on host and device: its Taylor series
 *  (through x^11, relative error below 3e-8) for x < 0.5, else 1 - md_erfcf(x). */
MD_HOSTDEV static inline float md_erff(float x) {
    float x2, p;
    if (x >= 0.5f) return 1.0f - md_erfcf(x);
    x2 = md__fmul(x, x);
    p = fmaf(x2, -1.0f / 1320.0f, 1.0f / 216.0f);
    p = fmaf(p, x2, -1.0f / 42.0f);
    p = fmaf(p, x2, 1.0f / 10.0f);
    p = fmaf(p, x2, -1.0f / 3.0f);
    p = fmaf(p, x2, 1.0f);
    return md__fmul(md__fmul(1.12837916709551257f, x), p); /* 2 / sqrt(pi) */
}

/** @brief How md_lj_table_create() combines per-type sigma and epsilon into a pair's. */
typedef enum md_lj_combine {
    MD_LJ_COMBINE_LB = 0,    /**< Lorentz-Berthelot: sigma_ab = (sigma_a + sigma_b) / 2,
                                  epsilon_ab = sqrt(epsilon_a epsilon_b) (AMBER, CHARMM, OpenMM's
                                  NonbondedForce); the default */
    MD_LJ_COMBINE_GEOMETRIC  /**< geometric: sigma_ab = sqrt(sigma_a sigma_b), epsilon_ab =
                                  sqrt(epsilon_a epsilon_b) (OPLS; the same as
                                  c6_ab = sqrt(c6_a c6_b), c12_ab = sqrt(c12_a c12_b)) */
} md_lj_combine;

/** @brief Lennard-Jones coefficients for every pair of atom types.
 *
 *  The pair energy is E(r) = c12 / r^12 - c6 / r^6 with c6 = 4 epsilon sigma^6 and
 *  c12 = 4 epsilon sigma^12. Entry (a, b) is at index a * ntypes + b and the table is
 *  symmetric: md_lj_table_set_pair() writes both (a, b) and (b, a). Owned by the table
 *  (md_lj_table_free). The CPU reference reads the doubles; float rungs round them
 *  once, (float)c6, (float)c12. */
typedef struct md_lj_table {
    int ntypes;       /**< number of atom types */
    double *sigma;    /**< ntypes per-type sigma (nm), as given to md_lj_table_create() */
    double *epsilon;  /**< ntypes per-type epsilon (kJ/mol), as given */
    double *c6;       /**< ntypes^2 dispersion coefficients (kJ mol^-1 nm^6) */
    double *c12;      /**< ntypes^2 repulsion coefficients (kJ mol^-1 nm^12) */
} md_lj_table;

/** @brief Make the table of @p ntypes types from per-type @p sigma (nm) and @p epsilon
 *  (kJ/mol) with combination rule @p rule.
 *
 *  sigma and epsilon must be finite and >= 0 (a type with epsilon 0, such as TIP3P's
 *  hydrogen, has no LJ interaction). Errors: ntypes outside 1..65536, NULL arrays
 *  (MD_ERR_INVALID_ARGUMENT), a bad value (MD_ERR_RANGE naming sigma[i] or epsilon[i]),
 *  out of memory. On failure @p t is untouched. */
MDDEF md_status md_lj_table_create(md_lj_table *t, int ntypes, const double *sigma, const double *epsilon,
                                   md_lj_combine rule);

/** @brief Override one type pair (NBFIX style): set (a, b) and (b, a) from a pair
 *  @p sigma (nm) and @p epsilon (kJ/mol) instead of the combination rule. */
MDDEF md_status md_lj_table_set_pair(md_lj_table *t, int a, int b, double sigma, double epsilon);

/** @brief Override one type pair with its coefficients @p c6 and @p c12 directly (both
 *  finite and >= 0); sets (a, b) and (b, a). */
MDDEF md_status md_lj_table_set_pair_c6c12(md_lj_table *t, int a, int b, double c6, double c12);

/** @brief Release a table's arrays and zero it. Safe on a zeroed table. */
MDDEF void md_lj_table_free(md_lj_table *t);

/** @brief What md_topology_build_exclusions() does with 1-4 pairs (atoms three bonds apart). */
typedef enum md_pair14_mode {
    MD_PAIR14_SCALE = 0, /**< excluded from the cutoff sum and listed in md_topology::pair14,
                              where they interact with LJ and plain Coulomb scaled by the fudge
                              factors (AMBER, OPLS, CHARMM); the default */
    MD_PAIR14_EXCLUDE,   /**< excluded entirely (GROMACS nrexcl = 3 without [pairs]) */
    MD_PAIR14_KEEP       /**< not excluded: they interact as any other pair */
} md_pair14_mode;

/** @brief How md_topology_build_exclusions() generates exclusions; a zero field takes its
 *  default. 1-2 and 1-3 pairs are always excluded. A pair that is both 1-3 and 1-4 (a
 *  ring) counts as 1-3. */
typedef struct md_exclusion_desc {
    md_pair14_mode pair14; /**< 1-4 treatment (default MD_PAIR14_SCALE) */
    double fudge_lj;       /**< LJ scale of a 1-4 pair (default 0.5, AMBER) */
    double fudge_qq;       /**< Coulomb scale of a 1-4 pair (default 1 / 1.2, AMBER) */
} md_exclusion_desc;

/** @brief The force-field view of a system: per-atom parameters and the connectivity.
 *
 *  Every array is owned by the topology (md_topology_free). Indices are 0-based atom
 *  numbers. Optional parameter arrays may be NULL. md_nb_compute() takes the charges
 *  from the coordinates' fourth component (md_float4 xyzq, as the GPU reads them);
 *  md_topology::charge is where builders record them and md_topology_apply_charges()
 *  copies them into the coordinates. */
typedef struct md_topology {
    int n;                   /**< number of atoms */
    int *lj_type;            /**< n LJ types: rows of an md_lj_table */
    float *charge;           /**< n charges (e) */
    float *mass;             /**< n masses (amu) */
    int nbond;               /**< number of bonds */
    int *bond;               /**< 2 nbond atoms: bond k joins bond[2k] and bond[2k+1] */
    double *bond_r0;         /**< nbond harmonic rest lengths (nm), or NULL */
    double *bond_k;          /**< nbond harmonic constants (kJ mol^-1 nm^-2; E = k/2 (r-r0)^2), or NULL */
    int nangle;              /**< number of angles */
    int *angle;              /**< 3 nangle atoms: angle[3k + 1] is the vertex */
    double *angle_theta0;    /**< nangle rest angles (rad), or NULL */
    double *angle_k;         /**< nangle constants (kJ mol^-1 rad^-2; E = k/2 (t-t0)^2), or NULL */
    int *excl_start;         /**< n + 1 offsets (CSR): atom i's excluded partners are
                                  excl[excl_start[i]] .. excl[excl_start[i+1] - 1] */
    int *excl;               /**< excluded partners: ascending per atom, no self, symmetric
                                  (j is in i's list exactly when i is in j's) */
    int npair14;             /**< number of scaled 1-4 pairs */
    int *pair14;             /**< 2 npair14 atoms, pair14[2k] < pair14[2k+1]; each is also excluded */
    double fudge_lj;         /**< LJ scale of the 1-4 pairs */
    double fudge_qq;         /**< Coulomb scale of the 1-4 pairs */
    int nwater;              /**< number of rigid water molecules */
    int *water;              /**< 3 nwater atoms: O, H, H of each molecule (for SETTLE) */
    double water_doh;        /**< rigid O-H distance (nm) of every water; 0 when nwater is 0 */
    double water_dhh;        /**< rigid H-H distance (nm) of every water; 0 when nwater is 0 */
    int nconstraint;         /**< number of distance constraints other than the rigid waters */
    int *constraint;         /**< 2 nconstraint atoms */
    double *constraint_length; /**< nconstraint lengths (nm) */
} md_topology;

/** @brief Allocate a topology of @p n atoms: lj_type, charge and mass zero, no bonds, angles,
 *  waters or constraints, and an empty exclusion list (excl_start all 0). On failure @p t
 *  is untouched. */
MDDEF md_status md_topology_alloc(md_topology *t, int n);

/** @brief A topology for @p sys: charges from sys->xyzq[i].w, masses from sys->mass,
 *  LJ types from sys->type, the @p nbond bonds at @p bond (2 nbond atom indices; NULL
 *  with nbond 0 for none), and exclusions generated from them with the defaults of
 *  md_exclusion_desc (1-2, 1-3 excluded, 1-4 scaled by 0.5 and 1/1.2).
 *
 *  The readers' md_system::type is the index of an atom's name among the distinct names,
 *  not a force-field type: for a file, assign LJ types with
 *  md_topology_set_lj_types_by_name(). Bonds come as arguments so that any bond list
 *  (CONECT records, a builder, a force-field template) can be used; for the file's own
 *  bonds (PSF NBOND, PDB CONECT) pass sys->nbond and sys->bond. Errors: NULL, a bond
 *  index outside 0..n-1 or a bond of an atom to itself (MD_ERR_RANGE, field bond[k]), out
 *  of memory. */
MDDEF md_status md_topology_from_system(md_topology *t, const md_system *sys, int nbond, const int *bond);

/** @brief Set every atom's LJ type to the index in @p names (of @p count) of its atom name
 *  (sys->name, exact match). An atom whose name is not listed is an error naming it
 *  (MD_ERR_INVALID_ARGUMENT, field name); on failure @p t is untouched. */
MDDEF md_status md_topology_set_lj_types_by_name(md_topology *t, const md_system *sys, const char *const *names,
                                                 int count);

/** @brief Replace the bonds of @p t with @p nbond bonds at @p bond, with optional harmonic
 *  @p r0 and @p k (either may be NULL). Exclusions are not regenerated: call
 *  md_topology_build_exclusions(). */
MDDEF md_status md_topology_set_bonds(md_topology *t, int nbond, const int *bond, const double *r0,
                                      const double *k);

/** @brief Regenerate the exclusions and 1-4 pairs of @p t from its bonds (see
 *  md_exclusion_desc; @p desc may be NULL for the defaults). Rigid water molecules get
 *  their O-H and H-H exclusions from their bonds like any molecule. On failure @p t is
 *  untouched. */
MDDEF md_status md_topology_build_exclusions(md_topology *t, const md_exclusion_desc *desc);

/** @brief 1 if atoms @p i and @p j are excluded from each other (binary search in i's
 *  list), else 0 (also for i == j or an index out of range). */
MDDEF int md_topology_excluded(const md_topology *t, int i, int j);

/** @brief Check that @p t is consistent and fits @p lj (which may be NULL): n >= 1, LJ types in
 *  0..ntypes-1, finite charges and masses, exclusion lists sorted, symmetric, in range and
 *  without self; errors name @p where and the field at fault. */
MDDEF md_status md_topology_check(const md_topology *t, const md_lj_table *lj, const char *where);

/** @brief Copy the topology's charges into the fourth component of @p xyzq (n entries). */
MDDEF md_status md_topology_apply_charges(const md_topology *t, md_float4 *xyzq, int n);

/** @brief Release every array of @p t and zero it. Safe on a zeroed topology. */
MDDEF void md_topology_free(md_topology *t);

/* ======================================================================== */
/* nblist: cell lists and Verlet lists                                      */
/* ======================================================================== */

/** @brief Atoms binned into cells of an orthorhombic periodic box.
 *
 *  dim[d] = floor(box[d] / min_cell) cells along each edge (at least 1), so every cell
 *  edge is >= min_cell and a sphere of radius min_cell around an atom reaches only the
 *  atom's own and neighbouring cells. Atoms are wrapped into [0, box) for binning only. */
typedef struct md_cell_list {
    int n;          /**< atoms binned */
    int dim[3];     /**< cells along x, y, z */
    double cell[3]; /**< cell edges (nm), box[d] / dim[d] */
    int *start;     /**< dim[0] dim[1] dim[2] + 1 offsets: cell c holds atom[start[c]] ..
                         atom[start[c+1] - 1], cell c = (cz * dim[1] + cy) * dim[0] + cx */
    int *atom;      /**< n atom indices ordered by cell, ascending within a cell */
    int *cell_of;   /**< n: the cell of each atom */
    int cap_cells;  /**< allocated entries of start (internal) */
    int cap_atoms;  /**< allocated entries of atom and cell_of (internal) */
} md_cell_list;

/** @brief Bin @p n atoms at @p xyzq into cells of edge >= @p min_cell in @p box (reusing
 *  @p cl's arrays when they are large enough; a zeroed md_cell_list is fine).
 *
 *  Errors: a box edge not finite and > 0 or shorter than min_cell (MD_ERR_RANGE, field
 *  box), a non-finite coordinate (MD_ERR_RANGE, field xyzq[i]), out of memory. On failure
 *  @p cl is untouched. */
MDDEF md_status md_cell_list_build(md_cell_list *cl, const md_float4 *xyzq, int n, const double box[3],
                                   double min_cell);

/** @brief Release a cell list and zero it. Safe on a zeroed list. */
MDDEF void md_cell_list_free(md_cell_list *cl);

/** @brief A Verlet neighbour list: for each atom, the atoms within rlist.
 *
 *  It holds every pair that is not excluded (md_topology_excluded) and whose
 *  minimum-image distance, computed in double from the float coordinates, is below
 *  rlist. Half list: each pair once, in the row of its lower index. Full list: each pair
 *  in both rows. Each row is sorted ascending, so a list depends only on the coordinates,
 *  not on how it was searched. */
typedef struct md_verlet_list {
    int n;           /**< atoms (rows) */
    int full;        /**< 1: full list, 0: half list */
    double rlist;    /**< list radius (nm): cutoff + buffer */
    int *start;      /**< n + 1 offsets: row i is j[start[i]] .. j[start[i+1] - 1] */
    int *j;          /**< neighbour indices */
    size_t npairs;   /**< entries in j */
    size_t cap;      /**< allocated entries of j (internal) */
    int cap_rows;    /**< allocated rows (internal) */
} md_verlet_list;

/** @brief Build a half (@p full 0) or full (@p full 1) Verlet list of radius @p rlist for
 *  @p n atoms, searching the cell list @p cl (rebuilt here with cells >= rlist), skipping
 *  the exclusions of @p t (NULL: no exclusions).
 *
 *  Errors: rlist not finite and > 0, or above half the shortest box edge (MD_ERR_RANGE,
 *  field rlist), a non-finite coordinate, t->n != n (MD_ERR_INVALID_ARGUMENT), out of
 *  memory. On failure @p vl is untouched. */
MDDEF md_status md_verlet_list_build(md_verlet_list *vl, md_cell_list *cl, const md_float4 *xyzq, int n,
                                     const double box[3], double rlist, int full, const md_topology *t);

/** @brief Release a Verlet list and zero it. Safe on a zeroed list. */
MDDEF void md_verlet_list_free(md_verlet_list *vl);

/* ======================================================================== */
/* nb: nonbonded forces (LJ + Coulomb with a cutoff)                        */
/* ======================================================================== */

/* Usage (a TIP3P box, Ewald real space, the CPU reference and the fixed-point rung):
 *     md_system sys; md_topology top; md_lj_table lj; md_nb_plan plan; md_energy e;
 *     md_water_desc wd = {0}; md_nb_params prm = {0};     (zero: every default)
 *     wd.molecules = 7856; wd.edge = 6.2;
 *     md_build_water_box(&sys, &top, &lj, &wd);
 *     md_nb_plan_create(&plan, &prm, sys.n);
 *     double *f = malloc(3 * sys.n * sizeof *f);
 *     md_nb_compute(MD_NB_CPU_VERLET, &plan, &top, &lj, sys.xyzq, sys.box, f, &e);
 *     printf("LJ %g  Coulomb %g  total %g kJ/mol\n", e.lj, e.coul_real + e.coul_excl + e.coul_self,
 *            md_energy_potential(&e));
 *     md_nb_plan_free(&plan); md_topology_free(&top); md_lj_table_free(&lj); md_system_free(&sys);
 * Every call returns md_status (checks left out here). Which comparisons are bitwise and
 * which use a tolerance: see md_nb_variant. The GPU rungs (md_cuda.cu.h) take the same
 * md_topology, md_lj_table, md_nb_params and md_energy, and share md_nb_coeffs and the
 * md_nb_*_f32 pair functions with MD_NB_CPU_FIXED. */

/** @brief Default cutoff (nm) of md_nb_params. */
#define MD_NB_DEFAULT_CUTOFF 0.9
/** @brief Default Verlet buffer (nm) of md_nb_params. */
#define MD_NB_DEFAULT_BUFFER 0.1
/** @brief Default Ewald tolerance of md_nb_params: erfc(beta rc) = 2 tol at the cutoff. */
#define MD_NB_DEFAULT_EWALD_TOLERANCE 5e-4

/** @brief How the LJ potential ends at the cutoff rc. */
typedef enum md_lj_mode {
    MD_LJ_DEFAULT = 0,     /**< MD_LJ_POTENTIAL_SHIFT */
    MD_LJ_POTENTIAL_SHIFT, /**< E(r) - E(rc) inside rc, so the energy is continuous (GROMACS
                                potential-shift; the force is the plain LJ force) */
    MD_LJ_TRUNCATE,        /**< plain LJ inside rc, nothing outside (OpenMM's NonbondedForce
                                without a switching function) */
    MD_LJ_FORCE_SWITCH,    /**< GROMACS / CHARMM force switch: the force of each r^-n term goes
                                smoothly to 0 between switch_radius and rc, energy shifted to 0 at rc */
    MD_LJ_NONE             /**< no LJ at all */
} md_lj_mode;

/** @brief Coulomb interaction within the cutoff rc (k = MD_COULOMB). */
typedef enum md_coul_mode {
    MD_COUL_DEFAULT = 0,      /**< MD_COUL_EWALD */
    MD_COUL_EWALD,            /**< the Ewald real-space term k qi qj erfc(beta r) / r; excluded pairs
                                   get the exclusion correction -k qi qj erf(beta r) / r and the
                                   self term -k beta / sqrt(pi) sum q^2 is added; the reciprocal
                                   part is chapter 07's (md_energy::coul_recip) */
    MD_COUL_CUTOFF,           /**< plain k qi qj / r, truncated at rc */
    MD_COUL_REACTION_FIELD,   /**< k qi qj (1/r + k_rf r^2 - c_rf), k_rf = (eps_rf - 1) /
                                   ((2 eps_rf + 1) rc^3), c_rf = 1/rc + k_rf rc^2 (OpenMM's
                                   CutoffPeriodic; excluded pairs get nothing, as in OpenMM) */
    MD_COUL_NONE              /**< no Coulomb at all */
} md_coul_mode;

/** @brief Nonbonded parameters; a zero field takes its default (sokol style), so
 *  `md_nb_params p = {0};` is a usable set: cutoff 0.9 nm, buffer 0.1 nm, LJ potential
 *  shift, Ewald real space with tolerance 5e-4, no dispersion correction. */
typedef struct md_nb_params {
    double cutoff;          /**< cutoff rc (nm) (default 0.9) */
    double buffer;          /**< Verlet buffer (nm) (default 0.1; negative: none, the list is
                                 rebuilt at every call) */
    md_lj_mode lj;          /**< LJ cutoff treatment (default potential shift) */
    double switch_radius;   /**< MD_LJ_FORCE_SWITCH: where the switch starts (nm), in (0, rc)
                                 (default 0.9 rc) */
    md_coul_mode coul;      /**< Coulomb treatment (default Ewald real space) */
    double epsilon_rf;      /**< MD_COUL_REACTION_FIELD: dielectric constant beyond the cutoff,
                                 > 1 (default 0: infinity, a conductor, k_rf = 1 / (2 rc^3));
                                 OpenMM's default is 78.3 */
    double ewald_beta;      /**< MD_COUL_EWALD: splitting parameter beta (1/nm) (default from
                                 ewald_tolerance) */
    double ewald_tolerance; /**< MD_COUL_EWALD: beta = sqrt(-ln(2 tol)) / rc, OpenMM's rule
                                 (default 5e-4, beta = 2.92 / nm at rc 0.9 nm) */
    int dispersion_correction; /**< 1: add the long-range LJ dispersion correction to the
                                    energy and the virial (md_nb_dispersion_correction);
                                    0 (default): none */
} md_nb_params;

/** @brief Fill the defaults of @p in into @p out and check it: cutoff finite and > 0;
 *  buffer finite (negative becomes 0); switch_radius in (0, cutoff) for the force switch
 *  (0 otherwise); epsilon_rf 0 or > 1 (0 stays 0, meaning infinity); ewald_beta
 *  finite and > 0 and ewald_tolerance in (0, 0.5) for Ewald (ewald_beta is computed when
 *  0; both 0 for other modes); unknown modes. Errors name the field (MD_ERR_RANGE,
 *  MD_ERR_INVALID_ARGUMENT). @p out has no DEFAULT modes left. */
MDDEF md_status md_nb_params_resolve(const md_nb_params *in, md_nb_params *out);

/** @brief Ewald splitting parameter for a cutoff and a tolerance, OpenMM's rule
 *  beta = sqrt(-ln(2 tol)) / rc (1/nm). */
MDDEF double md_ewald_beta(double cutoff, double tolerance);

/** @brief Energies (kJ/mol) and the virial of one configuration, by term.
 *
 *  The virial is W_ab = sum over interacting pairs of (r_i - r_j)_a F_ij,b with F_ij the
 *  force on i from j (row-major, index 3a + b, kJ/mol), so the pressure tensor is
 *  P = (sum_i m_i v_i v_i^T + W) / V and P = (2 E_kin + trace W) / (3 V) (GROMACS's
 *  virial Xi is -W / 2). */
typedef struct md_energy {
    double lj;            /**< LJ of the pairs within the cutoff, as the LJ mode modifies it */
    double lj_dispersion; /**< long-range dispersion correction (0 when off) */
    double lj14;          /**< scaled LJ of the 1-4 pairs */
    double coul_real;     /**< Coulomb of the pairs within the cutoff: erfc(beta r)/r (Ewald),
                               1/r (cutoff) or the reaction-field form */
    double coul14;        /**< scaled plain Coulomb of the 1-4 pairs */
    double coul_excl;     /**< Ewald exclusion correction: -k qi qj erf(beta r)/r over the
                               excluded pairs (every one, at its minimum-image distance) */
    double coul_recip;    /**< Ewald / PME reciprocal space (chapter 07; md_nb_compute sets 0) */
    double coul_self;     /**< Ewald self energy -k beta / sqrt(pi) sum q_i^2 */
    double bonded;        /**< bonds, angles (0 in md_nb_compute) */
    double kinetic;       /**< kinetic energy (0 in md_nb_compute) */
    double virial[9];     /**< W (see above), including the dispersion correction's */
} md_energy;

/** @brief Sum of the potential terms of @p e (every field except kinetic and virial). */
MDDEF double md_energy_potential(const md_energy *e);

/** @brief md_energy_potential() plus the kinetic energy. */
MDDEF double md_energy_total(const md_energy *e);

/** @brief The rungs of the nonbonded ladder, slow to fast.
 *
 *  CPU rungs run in md_nb_compute(), GPU rungs in md_cuda.cu.h. Comparisons:
 *  - the double CPU rungs (all pairs, cell list, Verlet half and full) visit the same pairs
 *    with the same double arithmetic and differ only in the order of the sums: they agree
 *    to about 1e-12 relative (tests/test_nb.c uses 1e-10);
 *  - MD_NB_CPU_FIXED uses the float pair arithmetic of md_nb_pair_f32() and friends and
 *    sums in 64-bit fixed point, so its raw sums (md_nb_plan::fixed_force, fixed_energy,
 *    fixed_virial) are bitwise independent of the list, the pair order and the atom order;
 *    a GPU rung that calls the same md_nb_*_f32 functions on the same float inputs and
 *    converts every pair term with md_fixed_from_float() must match it bitwise;
 *  - every float rung agrees with the double reference to float rounding (forces about
 *    1e-5 relative to the largest force), GPU rungs with their own rsqrt or erfc likewise. */
typedef enum md_nb_variant {
    MD_NB_CPU_ALL_PAIRS = 0,  /**< every pair i < j with the minimum image; double (the reference) */
    MD_NB_CPU_CELL_LIST,      /**< pairs from a cell list with cells >= rc, rebuilt at every call; double */
    MD_NB_CPU_VERLET,         /**< half Verlet list with a buffer, rebuilt when an atom has moved
                                   more than half the buffer; double */
    MD_NB_CPU_VERLET_FULL,    /**< full Verlet list: each atom sums its own force (no writes to j,
                                   the GPU's full-list pattern); double */
    MD_NB_CPU_FIXED,          /**< half Verlet list, float pair arithmetic (md_nb_pair_f32),
                                   64-bit fixed-point sums: the bitwise reference for the GPU.
                                   Per pair, in this order (what a GPU rung must repeat):
                                   r2 = md_nb_delta_f32(xi, yi, zi, xj, yj, zj, &box, d) with
                                   box = md_nb_box_f32_make(box); skip unless r2 < rc2;
                                   fs = md_nb_pair_f32(k, r2, md__fmul(qi, qj), (float)c6,
                                   (float)c12, &elj, &ec); f[a] = md__fmul(fs, d[a]);
                                   F_i[a] += md_fixed_from_float(f[a], FS), F_j[a] -= the same,
                                   FS = (float)MD_FORCE_FIXED_SCALE; W[3a+b] +=
                                   md_fixed_from_float(md__fmul(d[a], f[b]), ES), E_lj +=
                                   md_fixed_from_float(elj, ES), E_coul likewise, ES =
                                   (float)MD_ENERGY_FIXED_SCALE. Excluded pairs (Ewald): every
                                   pair i < j of the exclusion lists, fs from md_nb_excl_f32
                                   with qq = md__fmul(qi, qj), energy into E_excl. 1-4 pairs:
                                   md_nb_pair14_f32 with qq = md__fmul((float)fudge_qq,
                                   md__fmul(qi, qj)), c6 = (float)(fudge_lj c6), c12 likewise.
                                   A full-list rung adds energies and virial only for j > i
                                   (halving them would round differently) */
    MD_NB_GPU_TILES,          /**< GPU: all pairs in shared-memory tiles */
    MD_NB_GPU_FULL_LIST,      /**< GPU: one thread per atom over a full Verlet list */
    MD_NB_GPU_HALF_LIST,      /**< GPU: half Verlet list, atomics for the j forces */
    MD_NB_GPU_CLUSTER,        /**< GPU: cluster pairs (8 x 4 atoms), LJ table through L1 */
    MD_NB_GPU_CLUSTER_SMEM,   /**< GPU: cluster pairs, LJ table in shared memory */
    MD_NB_VARIANT_COUNT       /**< number of rungs */
} md_nb_variant;

/** @brief Short name of a rung ("cpu_all_pairs", ...), never NULL. */
MDDEF const char *md_nb_variant_name(md_nb_variant variant);

/** @brief 1 if @p variant is a GPU rung (md_cuda.cu.h), else 0. */
MDDEF int md_nb_variant_is_gpu(md_nb_variant variant);

/** @brief Float constants of a resolved md_nb_params, as the float pair functions read them.
 *
 *  Made once by md_nb_coeffs_make() on the host (double arithmetic, each value rounded
 *  to float once), then copied to the device unchanged, so host and device use the same
 *  bits. */
typedef struct md_nb_coeffs {
    int lj;              /**< md_lj_mode (resolved, never DEFAULT) */
    int coul;            /**< md_coul_mode (resolved, never DEFAULT) */
    float rc2;           /**< cutoff squared (nm^2): a pair interacts when r^2 < rc2 */
    float coulomb;       /**< MD_COULOMB */
    float beta;          /**< Ewald beta (1/nm) */
    float beta_2_sqrtpi; /**< 2 beta / sqrt(pi) */
    float krf;           /**< reaction field k_rf (nm^-3) */
    float krf2;          /**< 2 k_rf */
    float crf;           /**< reaction field c_rf (1/nm) */
    float sh6;           /**< potential shift: 1 / rc^6; force switch: the constant C of the r^-6 term */
    float sh12;          /**< potential shift: 1 / rc^12; force switch: C of the r^-12 term */
    float rsw;           /**< force switch start (nm) */
    float a6;            /**< force switch A of the r^-6 term */
    float b6;            /**< force switch B of the r^-6 term */
    float a12;           /**< force switch A of the r^-12 term */
    float b12;           /**< force switch B of the r^-12 term */
    float a6_3;          /**< A6 / 3 */
    float b6_4;          /**< B6 / 4 */
    float a12_3;         /**< A12 / 3 */
    float b12_4;         /**< B12 / 4 */
} md_nb_coeffs;

/** @brief Make the float constants of @p params (resolved or not; it is resolved first). */
MDDEF md_status md_nb_coeffs_make(const md_nb_params *params, md_nb_coeffs *k);

/** @brief An orthorhombic box in float: edges and their inverses, each rounded once from
 *  double ((float)box[d], (float)(1.0 / box[d])): make it with md_nb_box_f32_make(). */
typedef struct md_nb_box_f32 {
    float l[3];   /**< edges (nm) */
    float inv[3]; /**< inverse edges (1/nm) */
} md_nb_box_f32;

/** @brief The float box of a double @p box. */
MD_HOSTDEV static inline md_nb_box_f32 md_nb_box_f32_make(const double box[3]) {
    md_nb_box_f32 b;
    int d;
    for (d = 0; d < 3; d++) {
        b.l[d] = (float)box[d];
        b.inv[d] = (float)(1.0 / box[d]);
    }
    return b;
}

/** @brief Minimum-image difference d = (xi - xj) - L rint((xi - xj) / L) per axis in float,
 *  written to @p d; returns r^2 = fmaf(dx, dx, fmaf(dy, dy, dz dz)). Swapping i and j
 *  negates d exactly and keeps r^2, which makes the fixed-point sums order independent. */
MD_HOSTDEV static inline float md_nb_delta_f32(float xi, float yi, float zi, float xj, float yj, float zj,
                                               const md_nb_box_f32 *box, float d[3]) {
    float dx = xi - xj, dy = yi - yj, dz = zi - zj;
    dx = fmaf(-box->l[0], rintf(md__fmul(dx, box->inv[0])), dx);
    dy = fmaf(-box->l[1], rintf(md__fmul(dy, box->inv[1])), dy);
    dz = fmaf(-box->l[2], rintf(md__fmul(dz, box->inv[2])), dz);
    d[0] = dx;
    d[1] = dy;
    d[2] = dz;
    return fmaf(dx, dx, fmaf(dy, dy, md__fmul(dz, dz)));
}

/** @brief LJ + Coulomb of one non-excluded pair within the cutoff, in float: returns F/r
 *  (kJ mol^-1 nm^-2; the force on i is (F/r) d with d from md_nb_delta_f32) and writes the
 *  LJ and Coulomb energies (kJ/mol).
 *
 *  Requires 0 < r2 < k->rc2 (the caller tests the cutoff). @p qq = qi qj (float product),
 *  @p c6, @p c12 the pair's (float) coefficients. Operations: only + - md__fmul md__fdiv
 *  md__fsqrt fmaf md_erfcf md_expf, in a fixed order, so every caller gets the same bits. */
MD_HOSTDEV static inline float md_nb_pair_f32(const md_nb_coeffs *k, float r2, float qq, float c6, float c12,
                                              float *e_lj, float *e_coul) {
    float rinv2 = md__fdiv(1.0f, r2), frl = 0.0f, frc = 0.0f, elj = 0.0f, ec = 0.0f;
    if (k->lj != (int)MD_LJ_NONE) {
        float ir6 = md__fmul(md__fmul(rinv2, rinv2), rinv2);
        float d = fmaf(c12, ir6, -c6);                                         /* c12/r^6 - c6 */
        frl = md__fmul(ir6, fmaf(md__fmul(12.0f, c12), ir6, -md__fmul(6.0f, c6))); /* F r of plain LJ */
        if (k->lj == (int)MD_LJ_TRUNCATE) {
            elj = md__fmul(d, ir6);
        } else if (k->lj == (int)MD_LJ_POTENTIAL_SHIFT) {
            elj = fmaf(d, ir6, -fmaf(c12, k->sh12, -md__fmul(c6, k->sh6)));
        } else { /* MD_LJ_FORCE_SWITCH */
            float s = fmaf(c12, k->sh12, -md__fmul(c6, k->sh6));
            float r = md__fsqrt(r2);
            if (r > k->rsw) {
                float dr = r - k->rsw, dr2 = md__fmul(dr, dr), dr3 = md__fmul(dr2, dr);
                float g = fmaf(c12, fmaf(k->b12_4, dr, k->a12_3), -md__fmul(c6, fmaf(k->b6_4, dr, k->a6_3)));
                float h = fmaf(c12, fmaf(k->b12, dr, k->a12), -md__fmul(c6, fmaf(k->b6, dr, k->a6)));
                elj = fmaf(d, ir6, -fmaf(dr3, g, s));
                frl = fmaf(md__fmul(r, dr2), h, frl);
            } else {
                elj = fmaf(d, ir6, -s);
            }
        }
    }
    if (k->coul != (int)MD_COUL_NONE) {
        float kqq = md__fmul(k->coulomb, qq), rinv = md__fdiv(1.0f, md__fsqrt(r2));
        if (k->coul == (int)MD_COUL_EWALD) {
            float br = md__fmul(k->beta, md__fsqrt(r2)), erfc_rinv = md__fmul(md_erfcf(br), rinv);
            ec = md__fmul(kqq, erfc_rinv);
            frc = md__fmul(kqq, fmaf(k->beta_2_sqrtpi, md_expf(-md__fmul(br, br)), erfc_rinv));
        } else if (k->coul == (int)MD_COUL_REACTION_FIELD) {
            ec = md__fmul(kqq, fmaf(k->krf, r2, rinv) - k->crf);
            frc = md__fmul(kqq, fmaf(-k->krf2, r2, rinv));
        } else { /* MD_COUL_CUTOFF */
            ec = md__fmul(kqq, rinv);
            frc = ec;
        }
    }
    *e_lj = elj;
    *e_coul = ec;
    return md__fmul(frl + frc, rinv2);
}

/** @brief Ewald exclusion correction of one excluded pair in float: E = -k qq erf(beta r)/r
 *  written to @p e_coul; returns F/r. For r2 = 0 (two excluded charges on one spot)
 *  E = -k qq 2 beta / sqrt(pi) and F = 0. Only for MD_COUL_EWALD (else 0 and no energy). */
MD_HOSTDEV static inline float md_nb_excl_f32(const md_nb_coeffs *k, float r2, float qq, float *e_coul) {
    float kqq, r, rinv, br, erf_rinv;
    *e_coul = 0.0f;
    if (k->coul != (int)MD_COUL_EWALD) return 0.0f;
    kqq = md__fmul(k->coulomb, qq);
    if (!(r2 > 0.0f)) {
        *e_coul = -md__fmul(kqq, k->beta_2_sqrtpi);
        return 0.0f;
    }
    r = md__fsqrt(r2);
    rinv = md__fdiv(1.0f, r);
    br = md__fmul(k->beta, r);
    erf_rinv = md__fmul(md_erff(br), rinv);
    *e_coul = -md__fmul(kqq, erf_rinv);
    /* F r = k qq (2 beta / sqrt(pi) exp(-b^2 r^2) - erf(beta r) / r); F/r = that / r^2 */
    return md__fdiv(md__fmul(kqq, fmaf(k->beta_2_sqrtpi, md_expf(-md__fmul(br, br)), -erf_rinv)), r2);
}

/** @brief A scaled 1-4 pair in float: plain LJ c12/r^12 - c6/r^6 and plain Coulomb
 *  k qq / r with no cutoff (the caller passes the fudge-scaled @p qq, @p c6, @p c12);
 *  writes the energies and returns F/r. Requires r2 > 0. */
MD_HOSTDEV static inline float md_nb_pair14_f32(const md_nb_coeffs *k, float r2, float qq, float c6, float c12,
                                                float *e_lj, float *e_coul) {
    float rinv2 = md__fdiv(1.0f, r2), ir6 = md__fmul(md__fmul(rinv2, rinv2), rinv2);
    float rinv = md__fdiv(1.0f, md__fsqrt(r2)), ec = md__fmul(md__fmul(k->coulomb, qq), rinv);
    float frl = md__fmul(ir6, fmaf(md__fmul(12.0f, c12), ir6, -md__fmul(6.0f, c6)));
    *e_lj = md__fmul(fmaf(c12, ir6, -c6), ir6);
    *e_coul = ec;
    return md__fmul(frl + ec, rinv2);
}

/** @brief Indices of md_nb_plan::fixed_energy. */
typedef enum md_nb_fixed_term {
    MD_NB_FIXED_LJ = 0,   /**< md_energy::lj */
    MD_NB_FIXED_COUL,     /**< md_energy::coul_real */
    MD_NB_FIXED_EXCL,     /**< md_energy::coul_excl */
    MD_NB_FIXED_LJ14,     /**< md_energy::lj14 */
    MD_NB_FIXED_COUL14,   /**< md_energy::coul14 */
    MD_NB_FIXED_NTERMS    /**< number of fixed-point energy terms */
} md_nb_fixed_term;

/** @brief The CPU workspace of md_nb_compute(), made once per system size and parameter set.
 *
 *  It holds the resolved parameters, the cell and Verlet lists, the positions and box at
 *  the last list build (for the half-buffer displacement rule), counters, and the raw
 *  fixed-point sums of the last MD_NB_CPU_FIXED call. A plan serves one topology: after
 *  changing its exclusions call md_nb_plan_invalidate(). Not thread-safe: one plan per
 *  thread. */
typedef struct md_nb_plan {
    md_nb_params params;       /**< resolved parameters (md_nb_params_resolve) */
    md_nb_coeffs coeffs;       /**< their float constants (md_nb_coeffs_make) */
    int n;                     /**< atoms */
    md_cell_list cells;        /**< cell list (cells >= rc + buffer for the Verlet list, >= rc for
                                    MD_NB_CPU_CELL_LIST) */
    md_verlet_list list;       /**< the Verlet list (half or full, whichever the last rung needed) */
    int list_valid;            /**< 1 if md_nb_plan::list matches the reference positions */
    float *ref_xyz;            /**< 3 n positions at the last list build (nm) */
    double ref_box[3];         /**< box at the last list build (nm) */
    long long rebuilds;        /**< Verlet list builds so far */
    long long calls;           /**< md_nb_compute calls that succeeded */
    double max_displacement;   /**< largest minimum-image displacement (nm) from the reference
                                    positions found by the last displacement check */
    double *scratch;           /**< 3 n doubles: forces are summed here, then copied (internal) */
    int *mark;                 /**< n exclusion marks (internal) */
    md_fixed *fixed_force;     /**< 3 n raw force sums (x, y, z per atom, MD_FORCE_FIXED_SCALE) of
                                    the last MD_NB_CPU_FIXED call (partial after a failed one) */
    md_fixed fixed_energy[MD_NB_FIXED_NTERMS]; /**< raw energy sums (MD_ENERGY_FIXED_SCALE) of the
                                                    last MD_NB_CPU_FIXED call, by md_nb_fixed_term */
    md_fixed fixed_virial[9];  /**< raw virial sums (MD_ENERGY_FIXED_SCALE) of the last
                                    MD_NB_CPU_FIXED call */
} md_nb_plan;

/** @brief Make a plan for @p n atoms with @p params (NULL: every default). Errors: those of
 *  md_nb_params_resolve(), n < 1, out of memory. On failure @p p is untouched. */
MDDEF md_status md_nb_plan_create(md_nb_plan *p, const md_nb_params *params, int n);

/** @brief Force a Verlet list rebuild at the next call (after changing the topology). */
MDDEF void md_nb_plan_invalidate(md_nb_plan *p);

/** @brief Release a plan and zero it. Safe on a zeroed plan. */
MDDEF void md_nb_plan_free(md_nb_plan *p);

/** @brief Make sure @p p's Verlet list (half: @p full 0, full: 1) is valid for @p xyzq in
 *  @p box: rebuild it (and count the rebuild) when there is none, its kind or the box
 *  changed, or some atom has moved more than half the buffer (minimum image) since the
 *  last build. @p rebuilt (may be NULL) is set to 1 when it was rebuilt. The Verlet rungs
 *  of md_nb_compute() call it; GPU code may use it to build a list on the host. */
MDDEF md_status md_nb_plan_update_list(md_nb_plan *p, const md_topology *t, const md_float4 *xyzq,
                                       const double box[3], int full, int *rebuilt);

/** @brief Check that @p box suits @p params (resolved): edges finite and > 0 and the
 *  cutoff plus buffer at most half the shortest edge. The error (MD_ERR_RANGE) names
 *  @p where and field "cutoff" with the numbers. */
MDDEF md_status md_nb_check_box(const char *where, const md_nb_params *params, const double box[3]);

/** @brief Ewald self energy -k beta / sqrt(pi) sum q_i^2 (kJ/mol) of the charges in @p xyzq
 *  (0 unless params->coul is Ewald; @p params resolved). */
MDDEF double md_nb_self_energy(const md_nb_params *params, const md_float4 *xyzq, int n);

/** @brief Long-range dispersion correction for the LJ pairs beyond the cutoff, assuming
 *  g(r) = 1 there.
 *
 *  E = 2 pi N^2 / V (mean(c12) / (9 rc^9) - mean(c6) / (3 rc^3)) and each diagonal virial entry
 *  W_aa = 2 pi N^2 / V (4 mean(c12) / (9 rc^9) - 2 mean(c6) / (3 rc^3)) (so the pressure changes
 *  by W_aa / V), with the means taken over the N (N + 1) / 2 pairs i <= j (OpenMM's
 *  convention, self pairs included, exclusions ignored). It is the tail of the plain
 *  12-6 potential for every LJ mode: it does not undo the shift or switch inside the
 *  cutoff. Writes 0 when @p params has dispersion_correction 0. */
MDDEF md_status md_nb_dispersion_correction(const md_nb_params *params, const md_topology *t,
                                            const md_lj_table *lj, const double box[3], double *energy,
                                            double *virial_diag);

/** @brief Nonbonded forces, energies and virial of one configuration with a CPU rung.
 *
 *  @p xyzq holds t->n positions (nm) with charges (e) in .w; @p box the orthorhombic
 *  periodic box (nm); minimum image everywhere. Writes the 3 n forces (kJ mol^-1 nm^-1,
 *  x y z per atom) to @p force (may be NULL) and overwrites every field of @p energy
 *  (may be NULL): lj, coul_real, coul_excl, lj14, coul14, coul_self, lj_dispersion and
 *  virial; coul_recip, bonded and kinetic are set to 0. The pair terms are those of
 *  md_lj_mode and md_coul_mode for every non-excluded pair with r < rc; the 1-4 pairs of
 *  t (no cutoff, minimum image); the Ewald exclusion correction over every excluded pair.
 *
 *  Errors: NULL arguments, t->n != p->n (MD_ERR_INVALID_ARGUMENT), an LJ type outside
 *  the table (MD_ERR_RANGE, field lj_type[i]), a non-finite coordinate or charge
 *  (MD_ERR_RANGE, field xyzq[i]), a box that fails md_nb_check_box (the all-pairs and
 *  cell-list rungs check the cutoff alone, the Verlet rungs cutoff + buffer), a GPU rung
 *  (MD_ERR_UNSUPPORTED),
 *  a fixed-point overflow (MD_ERR_RANGE). On failure @p force and @p energy are untouched. */
MDDEF md_status md_nb_compute(md_nb_variant variant, md_nb_plan *p, const md_topology *t, const md_lj_table *lj,
                              const md_float4 *xyzq, const double box[3], double *force, md_energy *energy);

/* ======================================================================== */
/* integrate: velocity Verlet (NVE) on the CPU                              */
/* ======================================================================== */

/** @brief A CPU molecular dynamics run: positions, velocities and forces in double, the
 *  float coordinates md_nb_compute reads, the nonbonded plan, and the energies.
 *
 *  The forces are md_nb_compute()'s alone: no bonded terms and no constraints, so it
 *  suits atomic fluids (md_build_lj_fluid); rigid water needs the constraints of chapter 08.
 *  Positions stay unwrapped in md_dynamics::x; md_dynamics::xyzq holds them wrapped into
 *  the box. The topology and the LJ table are borrowed (they must outlive the run). */
typedef struct md_dynamics {
    int n;                    /**< atoms */
    double dt;                /**< time step (ps) */
    md_nb_variant variant;    /**< CPU nonbonded rung used for the forces */
    double *x;                /**< 3 n positions (nm) */
    double *v;                /**< 3 n velocities (nm/ps) */
    double *f;                /**< 3 n forces at the current positions (kJ mol^-1 nm^-1) */
    double *inv_mass;         /**< n inverse masses (1/amu) */
    md_float4 *xyzq;          /**< n float positions wrapped into the box, charges from the topology */
    double box[3];            /**< box (nm) */
    const md_topology *top;   /**< borrowed topology */
    const md_lj_table *lj;    /**< borrowed LJ table */
    md_nb_plan plan;          /**< nonbonded workspace (its rebuild counter counts list builds) */
    md_energy energy;         /**< energies at the current positions and velocities */
    long long step;           /**< steps taken */
} md_dynamics;

/** @brief Start a run from @p sys (positions, velocities sys->vel, box) with the masses and
 *  charges of @p t, computing the initial forces and energies.
 *
 *  Errors: those of md_nb_compute(), a mass not finite and > 0 (MD_ERR_RANGE, field
 *  mass[i]), dt not finite and > 0, sys->n != t->n, no box. On failure @p d is untouched. */
MDDEF md_status md_dynamics_init(md_dynamics *d, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                                 const md_nb_params *params, md_nb_variant variant, double dt);

/** @brief Advance @p d by @p nsteps velocity Verlet steps (NVE):
 *  v += f/m dt/2; x += v dt; f = F(x); v += f/m dt/2. Afterwards md_dynamics::energy holds
 *  the potential terms of the new positions and the kinetic energy of the new velocities.
 *  Errors: those of md_nb_compute() (the run stops at the failing step). */
MDDEF md_status md_integrate_vv(md_dynamics *d, int nsteps);

/** @brief Kinetic energy sum m v^2 / 2 (kJ/mol) of the current velocities. */
MDDEF double md_dynamics_kinetic(const md_dynamics *d);

/** @brief Kinetic temperature (K) with 3 n - 3 degrees of freedom (NVE conserves momentum). */
MDDEF double md_dynamics_temperature(const md_dynamics *d);

/** @brief Copy the positions (wrapped into the box), velocities and box back into @p sys
 *  (sys->n must equal d->n). */
MDDEF md_status md_dynamics_get_system(const md_dynamics *d, md_system *sys);

/** @brief Release a run and zero it. Safe on a zeroed run. */
MDDEF void md_dynamics_free(md_dynamics *d);

/* ======================================================================== */
/* build: water boxes and LJ fluids                                         */
/* ======================================================================== */

/** @brief Argon's LJ sigma (nm), the md_fcc_desc defaults' argon. */
#define MD_ARGON_SIGMA 0.3405
/** @brief Argon's LJ epsilon (kJ/mol): 119.8 K times MD_KB. */
#define MD_ARGON_EPSILON (119.8 * MD_KB)

/** @brief Rigid three-site water models. */
typedef enum md_water_model {
    MD_WATER_TIP3P = 0, /**< TIP3P (Jorgensen et al., J. Chem. Phys. 79, 926 (1983)); the default */
    MD_WATER_SPCE,      /**< SPC/E (Berendsen, Grigera, Straatsma, J. Phys. Chem. 91, 6269 (1987)) */
    MD_WATER_MODEL_COUNT /**< number of models */
} md_water_model;

/** @brief Parameters of a water model, with the values OpenMM's force-field files use
 *  (tip3p.xml, spce.xml). */
typedef struct md_water_params {
    const char *name;  /**< "tip3p", "spce" */
    double d_oh;       /**< O-H distance (nm) */
    double angle_hoh;  /**< H-O-H angle (rad) */
    double d_hh;       /**< H-H distance (nm), 2 d_oh sin(angle / 2) */
    double q_o;        /**< oxygen charge (e) */
    double q_h;        /**< hydrogen charge (e) */
    double sigma_o;    /**< oxygen LJ sigma (nm) */
    double epsilon_o;  /**< oxygen LJ epsilon (kJ/mol) */
    double mass_o;     /**< oxygen mass (amu) */
    double mass_h;     /**< hydrogen mass (amu) */
} md_water_params;

/** @brief The parameters of @p model (MD_ERR_INVALID_ARGUMENT for an unknown model). */
MDDEF md_status md_water_model_params(md_water_model model, md_water_params *out);

/** @brief How md_build_water_box() builds; a zero field takes its default. */
typedef struct md_water_desc {
    md_water_model model; /**< water model (default TIP3P) */
    int molecules;        /**< number of molecules (default: what fills the box at the density) */
    double edge;          /**< cube edge (nm) (default: what holds the molecules at the density) */
    double density;       /**< mass density (g/cm^3) used for a missing molecules or edge
                               (default 0.997, water at 298 K) */
    double temperature;   /**< initial temperature (K) of the molecules' centre-of-mass motion
                               (default 300; negative: all velocities 0) */
    uint64_t seed;        /**< orientations, site choice and velocities (0 is a valid seed) */
} md_water_desc;

/** @brief A cubic box of rigid water at about 1 g/cm^3: @p sys (atoms O, H, H per molecule,
 *  names OW HW1 HW2, elements O and H, residue HOH numbered from 1, charges, masses, the
 *  two O-H bonds per molecule (md_system::bond), box, velocities),
 *  @p top (LJ types O = 0 and H = 1, two O-H bonds and an H-O-H angle per molecule
 *  at the model's geometry, exclusions from the bonds, the water groups with d_OH and
 *  d_HH) and @p lj (two types: the model's oxygen, and hydrogen with no LJ).
 *
 *  Molecules sit on a simple cubic lattice of m^3 sites, m = ceil(cbrt(molecules)),
 *  spacing edge / m; a seeded shuffle picks the occupied sites and each molecule gets a
 *  seeded random orientation, redrawn (up to 1000 times) until no atom is closer than
 *  0.17 nm to an atom of an earlier molecule (minimum image). Oxygens lie inside the box;
 *  each molecule is whole (its hydrogens may stick out). Velocities: one Maxwell-Boltzmann
 *  velocity per molecule (all three atoms move together, which respects the rigid
 *  geometry), the total momentum removed. Deterministic for a seed. Give molecules
 *  7856 and edge 6.2 for the 23,568-atom benchmark box (0.99 g/cm^3) and 31922 and 9.9
 *  for the 95,766-atom one. Errors: a field out of range (MD_ERR_RANGE naming it), no
 *  placement found (MD_ERR_RANGE, field density), out of memory. On failure the outputs
 *  are untouched. */
MDDEF md_status md_build_water_box(md_system *sys, md_topology *top, md_lj_table *lj, const md_water_desc *desc);

/** @brief An LJ liquid: md_build_fcc() with @p desc (NULL: 864 argon atoms near the triple
 *  point), a topology (type 0, charge 0, the argon mass, no bonds or exclusions) and a
 *  one-type table with MD_ARGON_SIGMA and MD_ARGON_EPSILON. On failure the outputs are
 *  untouched. */
MDDEF md_status md_build_lj_fluid(md_system *sys, md_topology *top, md_lj_table *lj, const md_fcc_desc *desc);

/* ======================================================================== */
/* ions: ionic crystals, salt solutions, water and ions read from a file    */
/* ======================================================================== */

/* Every system of this section uses one four-type LJ table per water model,
 * made by md_water_ion_lj_table(): type 0 the model's oxygen, 1 its hydrogen
 * (no LJ), 2 Na+, 3 Cl-, with the Joung-Cheatham ion parameters OpenMM ships
 * for that model (amber14/tip3p.xml, amber14/spce.xml). So a crystal, a salt
 * solution and a box read from a PDB all share one table layout. */

/** @brief LJ type of the water oxygen in md_water_ion_lj_table(). */
#define MD_TYPE_OW 0
/** @brief LJ type of the water hydrogen (no LJ) in md_water_ion_lj_table(). */
#define MD_TYPE_HW 1
/** @brief LJ type of Na+ in md_water_ion_lj_table(). */
#define MD_TYPE_NA 2
/** @brief LJ type of Cl- in md_water_ion_lj_table(). */
#define MD_TYPE_CL 3

/** @brief Na+ and Cl- parameters for a water model: the Joung-Cheatham ions (J. Phys. Chem. B
 *  112, 9020 (2008)) with the values of OpenMM's amber14/tip3p.xml and amber14/spce.xml. */
typedef struct md_ion_params {
    double sigma_na;   /**< Na+ LJ sigma (nm) */
    double epsilon_na; /**< Na+ LJ epsilon (kJ/mol) */
    double sigma_cl;   /**< Cl- LJ sigma (nm) */
    double epsilon_cl; /**< Cl- LJ epsilon (kJ/mol) */
    double mass_na;    /**< Na mass (amu), 22.99 */
    double mass_cl;    /**< Cl mass (amu), 35.45 */
} md_ion_params;

/** @brief The ion parameters that go with @p model (MD_ERR_INVALID_ARGUMENT for an unknown model). */
MDDEF md_status md_ion_params_for(md_water_model model, md_ion_params *out);

/** @brief The four-type LJ table (O, H, Na+, Cl-; see MD_TYPE_OW) of @p model, Lorentz-Berthelot. */
MDDEF md_status md_water_ion_lj_table(md_water_model model, md_lj_table *lj);

/** @brief A topology and LJ table for water and ions, recognised by residue, for a system read
 *  from a PDB or PQR file (or built here).
 *
 *  Water: three consecutive atoms of one residue (same name and number) named HOH, WAT, SOL,
 *  H2O, TIP3, T3P or SPC, the first an oxygen (atom name O, OW or OH2), then two hydrogens
 *  (names starting with H). Ions: a one-atom residue NA, NA+, Na+ or SOD (Na+, charge +1) or
 *  CL, CL-, Cl- or CLA (Cl-, charge -1). Charges and masses come from @p model and
 *  md_ion_params_for() (the file's own charges are ignored: copy the topology's into the
 *  coordinates with md_topology_apply_charges()); two O-H bonds per water with exclusions
 *  built from them (O-H and H-H excluded), the rigid-water groups (md_topology::water) and
 *  the LJ table of md_water_ion_lj_table(). Errors: an atom of any other residue, or a water
 *  residue out of order (MD_ERR_PARSE naming the atom and its residue), out of memory. On
 *  failure the outputs are untouched. */
MDDEF md_status md_topology_water_ions(const md_system *sys, md_water_model model, md_topology *top,
                                       md_lj_table *lj);

/** @brief Rename the water atoms of @p sys to the PDB's names: OW, HW1, HW2 (as
 *  md_build_water_box() names them) become O, H1, H2, which OpenMM's force-field files
 *  (tip3p.xml, spce.xml) expect in HOH residues. Other atoms are left alone. */
MDDEF void md_water_pdb_names(md_system *sys);

/** @brief How md_build_ionic_crystal() builds; a zero field takes its default. */
typedef struct md_ionic_crystal_desc {
    int cells;            /**< cubic unit cells along each edge, 8 ions each (default 3: 216 ions) */
    double lattice;       /**< lattice constant a (nm) (default 0.5640, rock salt NaCl) */
    md_water_model model; /**< whose ion LJ parameters (default TIP3P's) */
    double jitter;        /**< Gaussian displacement of every ion per axis (nm) (default 0: a perfect
                               crystal; negative is an error) */
    uint64_t seed;        /**< seed of the displacements (0 is a valid seed) */
} md_ionic_crystal_desc;

/** @brief A rock-salt (NaCl) crystal: (2 cells)^3 ions on a simple cubic lattice of spacing a / 2,
 *  Na+ where the three site indices sum to an even number, Cl- elsewhere, so the crystal is
 *  neutral and periodic in its cubic box of edge cells * a. Atom and residue names NA / CL,
 *  one residue per ion, LJ types MD_TYPE_NA / MD_TYPE_CL of md_water_ion_lj_table(), no
 *  bonds or exclusions, velocities 0. Its Coulomb energy is the Madelung energy
 *  -N k M / (2 r0) with M = 1.747564594633 and r0 = a / 2 (N ions), which tests/test_pme.c
 *  checks. Errors: cells outside 1..100, lattice not finite and > 0, jitter < 0. */
MDDEF md_status md_build_ionic_crystal(md_system *sys, md_topology *top, md_lj_table *lj,
                                       const md_ionic_crystal_desc *desc);

/** @brief How md_build_salt_water() builds; a zero field takes its default. */
typedef struct md_salt_water_desc {
    md_water_desc water; /**< the water box built first (md_build_water_box's defaults) */
    int pairs;           /**< Na+ Cl- pairs that replace water molecules (default: the number
                              nearest to 0.15 mol/L in the box, at least 1) */
} md_salt_water_desc;

/** @brief A salt solution: md_build_water_box() with desc->water, then 2 pairs water molecules,
 *  picked by a seeded shuffle (seed desc->water.seed), replaced by ions at their oxygen
 *  positions (Na+ for the first pairs picked, Cl- for the rest), keeping the molecules'
 *  order; the ion takes the molecule's velocity. Residues HOH, NA, CL; the topology and
 *  table of md_topology_water_ions(). Neutral. Errors: those of md_build_water_box(),
 *  pairs < 0 or 2 pairs >= the molecules (MD_ERR_RANGE, field pairs). */
MDDEF md_status md_build_salt_water(md_system *sys, md_topology *top, md_lj_table *lj,
                                    const md_salt_water_desc *desc);

/* ======================================================================== */
/* ewald: the classic Ewald sum, the reference for PME                      */
/* ======================================================================== */

/* The electrostatic energy of point charges in a periodic orthorhombic box
 * (tin-foil boundary: the surroundings are a conductor) split by a Gaussian of
 * width 1/alpha into four parts (k = MD_COULOMB, V the box volume):
 *
 *   real    k sum over pairs and periodic images within rc, not excluded:
 *           qi qj erfc(alpha r) / r
 *   recip   k 2 pi / V  sum over k = 2 pi (mx/Lx, my/Ly, mz/Lz) != 0:
 *           exp(-k^2 / (4 alpha^2)) / k^2 |S(k)|^2,  S(k) = sum_j qj exp(i k.rj)
 *   self    -k alpha / sqrt(pi) sum qi^2
 *   excl    -k sum over excluded pairs (minimum image) qi qj erf(alpha r) / r
 *
 * For a system with net charge Q the sum is that of the charges plus a uniform
 * neutralising background: recip also holds -k pi Q^2 / (2 V alpha^2) (the k = 0
 * limit), as OpenMM, GROMACS and AMBER do. The virial W_ab (md_energy) of the
 * reciprocal part is sum_k E_k (delta_ab - 2 (1 + k^2 / (4 alpha^2)) k_a k_b / k^2)
 * (Essmann et al., J. Chem. Phys. 103, 8577 (1995), eq. 2.11 with md_energy's sign),
 * the background adds its energy to each diagonal entry, and the pair terms add
 * r_a F_b. Because the Coulomb energy is homogeneous of degree -1 in the
 * coordinates, trace W equals the total energy for a converged sum: a check
 * that needs no other code. */

/** @brief The classic Ewald sum's parameters; a zero field takes its default. */
typedef struct md_ewald_params {
    double alpha;     /**< splitting parameter (1/nm) (default md_ewald_beta(rc, tolerance)) */
    double rc;        /**< real-space cutoff (nm) (default MD_NB_DEFAULT_CUTOFF). It may exceed
                           half the box: every periodic image within rc is summed, including an
                           atom's own images */
    int kmax[3];      /**< largest |m| per axis of the reciprocal vectors (default, per axis:
                           ceil(alpha L sqrt(-ln 1e-12) / pi), which leaves out only terms with
                           exp(-k^2 / (4 alpha^2)) < 1e-12) */
    double k2max;     /**< spherical limit: keep m with mx^2 + my^2 + mz^2 <= k2max (integers; a
                           sphere in k for a cubic box). 0: none. The NIST SPC/E reference
                           calculations' "|n|^2 < 27" is k2max 26 */
    double tolerance; /**< only for the default alpha (default MD_NB_DEFAULT_EWALD_TOLERANCE) */
} md_ewald_params;

/** @brief Fill the defaults of @p in for @p box into @p out and check it: alpha, rc finite and
 *  > 0, tolerance in (0, 0.5), kmax in 0..2000 (0 takes the default), k2max >= 0 and finite,
 *  box edges finite and > 0. Errors name the field (MD_ERR_RANGE). */
MDDEF md_status md_ewald_params_resolve(const md_ewald_params *in, const double box[3], md_ewald_params *out);

/** @brief The classic Ewald sum of @p n charges: energies by component, forces and virial.
 *
 *  @p xyzq holds positions (nm, anywhere: they are wrapped) and charges (e); @p t gives the
 *  excluded pairs (NULL: none; else t->n must be n). @p params may be NULL (every default).
 *  Overwrites every field of @p energy (may be NULL): coul_real, coul_recip (with the
 *  neutralising background for a net charge), coul_self, coul_excl and virial (of those four
 *  parts), every other field 0. Writes 3 n forces (kJ mol^-1 nm^-1, x y z per atom) to
 *  @p force (may be NULL). Scaled 1-4 pairs are not this function's (md_nb_compute's coul14):
 *  every pair t excludes gets the exclusion correction.
 *
 *  The slow truth: the real part loops over all pairs and images (O(n^2)), the reciprocal part
 *  over all kept k vectors (O(n K)), in double, with OpenMP over atoms and k vectors; the
 *  results do not depend on the number of threads (sums in a fixed order). Errors: NULL
 *  arguments, n < 1, t->n != n (MD_ERR_INVALID_ARGUMENT), a non-finite coordinate or charge
 *  (MD_ERR_RANGE, field xyzq[i]), those of md_ewald_params_resolve(), out of memory. On
 *  failure @p force and @p energy are untouched. */
MDDEF md_status md_ewald_compute(const md_ewald_params *params, const md_topology *t, const md_float4 *xyzq, int n,
                                 const double box[3], double *force, md_energy *energy);

/* ======================================================================== */
/* pme: smooth particle-mesh Ewald on the CPU, and the FFT it uses          */
/* ======================================================================== */

/* Smooth PME (Essmann et al. 1995) computes the reciprocal part of the Ewald sum
 * on a grid of K0 x K1 x K2 points (index (i K1 + j) K2 + k, the last axis
 * fastest, as cuFFT's 3D plans store it):
 *   1 spread    each charge onto order^3 points with cardinal B-spline weights:
 *               atom at fractional grid position u = K frac(x / L) adds
 *               q M_p(u - g + p - 1) to the points g = floor(u) + 0 .. p-1 (mod K)
 *   2 forward   real-to-complex 3D FFT (K0 x K1 x (K2/2 + 1) complex values)
 *   3 solve     multiply by the influence function
 *               k exp(-pi^2 m^2 / alpha^2) / (pi V m^2 B(m)),  m = (m0/L0, m1/L1, m2/L2),
 *               B(m) = |b0(m0)|^2 |b1(m1)|^2 |b2(m2)|^2 the B-spline moduli
 *               (md_pme_bspline_moduli), 0 at m = 0; the energy is
 *               1/2 sum_m (that factor) |FFT(Q)(m)|^2 and the virial follows from it
 *   4 backward  complex-to-real 3D FFT: the potential on the grid (times the charge)
 *   5 gather    force on atom i = -q_i sum over its points of grad(weights) phi(g)
 * Frequencies: index c along an axis of K points is m = c for c < (K + 1) / 2, else
 * c - K; along the halved last axis m = c. The energy holds the neutralising
 * background -k pi Q^2 / (2 V alpha^2) for a net charge Q, as md_ewald_compute does.
 *
 * The FFT: md.h depends on libm only, so it carries a compact mixed-radix complex
 * FFT (any length; radix 4 and 2 first, then 3, 5, 7 and any other prime by a
 * direct butterfly) and the real-to-complex and complex-to-real wrappers a 3D
 * real transform needs (two real lines packed into one complex transform for an
 * even length). It is there to make the CPU reference self-contained, not to be
 * fast; reference/check_ewald.py checks it against numpy.fft, and md_cuda.cu.h
 * uses cuFFT. */

/** @brief Default B-spline order of md_pme_params (OpenMM's, quartic splines). */
#define MD_PME_DEFAULT_ORDER 5
/** @brief Smallest B-spline order md_pme accepts. */
#define MD_PME_MIN_ORDER 4
/** @brief Largest B-spline order md_pme accepts. */
#define MD_PME_MAX_ORDER 6

/** @brief A plan for complex FFTs of one length n: its factors and twiddle factors. */
typedef struct md_fft_plan {
    int n;            /**< length */
    int nfactors;     /**< number of factors */
    int factor[40];   /**< the radices, product n: 4s, 2s, 3s, 5s, 7s, then other primes */
    double *twiddle;  /**< 2 n doubles: exp(-2 pi i k / n), k = 0 .. n-1 (re, im interleaved) */
} md_fft_plan;

/** @brief Make a plan for length @p n (1 .. 2^24). On failure @p p is untouched. */
MDDEF md_status md_fft_plan_create(md_fft_plan *p, int n);

/** @brief Release a plan and zero it. Safe on a zeroed plan. */
MDDEF void md_fft_plan_free(md_fft_plan *p);

/** @brief One complex FFT of p->n values in place: @p data holds n complex numbers (re, im
 *  interleaved). @p sign -1: forward, X_k = sum_j x_j exp(-2 pi i j k / n); +1: backward, the
 *  same with exp(+...), unnormalised (numpy.fft.ifft times n). @p work holds 4 n doubles. */
MDDEF void md_fft_complex(const md_fft_plan *p, double *data, int sign, double *work);

/** @brief A 3D real-to-complex / complex-to-real FFT of n0 x n1 x n2 reals (last axis fastest). */
typedef struct md_fft3d {
    int n[3];            /**< dimensions */
    int nh;              /**< n[2] / 2 + 1: complex values along the last axis */
    md_fft_plan axis[3]; /**< complex plans of lengths n[0], n[1], n[2] */
    md_fft_plan half;    /**< complex plan of length n[2] / 2 (even n[2]: the packed real lines) */
    int nthreads;        /**< work buffers held (OpenMP threads when made) */
    double *work;        /**< per-thread work buffers (internal) */
    size_t work_stride;  /**< doubles per thread in md_fft3d::work (internal) */
} md_fft3d;

/** @brief Make a 3D real FFT of @p n[0] x @p n[1] x @p n[2] (each 1 .. 2^16, product < 2^31). */
MDDEF md_status md_fft3d_create(md_fft3d *p, const int n[3]);

/** @brief Release a 3D FFT and zero it. Safe on a zeroed one. */
MDDEF void md_fft3d_free(md_fft3d *p);

/** @brief Forward real-to-complex transform: @p in n0 n1 n2 reals, @p out n0 n1 nh complex
 *  values (re, im interleaved), out(a, b, c) = sum in(x, y, z) exp(-2 pi i (a x / n0 + b y / n1
 *  + c z / n2)) for c = 0 .. n2 / 2: numpy.fft.rfftn. */
MDDEF void md_fft3d_r2c(md_fft3d *p, const double *in, double *out);

/** @brief Backward complex-to-real transform, unnormalised (numpy.fft.irfftn times n0 n1 n2):
 *  @p in n0 n1 nh complex values of a Hermitian spectrum (overwritten), @p out n0 n1 n2 reals. */
MDDEF void md_fft3d_c2r(md_fft3d *p, double *in, double *out);

/** @brief Smallest m >= @p n (and >= 1) whose only prime factors are 2, 3, 5 and 7: the sizes
 *  cuFFT and md_fft handle fastest, the rule of OpenMM's GPU platforms. */
MDDEF int md_fft_good_size(int n);

/** @brief Choose PME's alpha and grid for an Ewald error tolerance, OpenMM's rule.
 *
 *  alpha = md_ewald_beta(cutoff, tolerance) = sqrt(-ln(2 tol)) / rc, and along each axis
 *  n = max(6, ceil(2 alpha L / (3 tol^(1/5)))) rounded up by md_fft_good_size() (OpenMM's
 *  NonbondedForceImpl::calcPMEParameters; its Reference and CPU platforms keep the ceiling,
 *  89 for a 9.9 nm box at 5e-4 and 0.9 nm, its CUDA platform rounds it to 90 as here).
 *  Errors: tolerance outside (0, 0.5), cutoff or box not finite and > 0 (MD_ERR_RANGE). */
MDDEF md_status md_pme_choose(double tolerance, double cutoff, const double box[3], double *alpha, int grid[3]);

/** @brief PME parameters; a zero field takes its default, so `md_pme_params p = {0};` gives
 *  OpenMM's settings for tolerance 5e-4, cutoff 0.9 nm, order 5. */
typedef struct md_pme_params {
    double alpha;     /**< splitting parameter (1/nm) (default md_ewald_beta(cutoff, tolerance)) */
    double tolerance; /**< Ewald error tolerance (default MD_NB_DEFAULT_EWALD_TOLERANCE, 5e-4) */
    double cutoff;    /**< the real-space cutoff (nm) alpha is chosen for (default MD_NB_DEFAULT_CUTOFF) */
    int grid[3];      /**< grid points per axis (default: from spacing, else md_pme_choose()) */
    double spacing;   /**< > 0: grid[d] = md_fft_good_size(ceil(L_d / spacing)) for a missing grid */
    int order;        /**< B-spline order MD_PME_MIN_ORDER .. MD_PME_MAX_ORDER (default 5) */
} md_pme_params;

/** @brief Fill the defaults of @p in into @p out for @p box (needed only when a grid size is
 *  missing; may be NULL otherwise) and check: alpha, cutoff finite and > 0, tolerance in
 *  (0, 0.5), order in 4..6, each grid size in order..4096, spacing >= 0. Errors name the field. */
MDDEF md_status md_pme_params_resolve(const md_pme_params *in, const double box[3], md_pme_params *out);

/** @brief The B-spline moduli |b(m)|^-2 of one axis: mod[m] = |sum_{k=0}^{p-2} M_p(k + 1)
 *  exp(2 pi i m k / K)|^2 for m = 0 .. K-1 (M_p the cardinal B-spline of order p); a value
 *  below 1e-7 (m = K/2 for odd p) is replaced by the mean of its neighbours, as Essmann et al.
 *  and OpenMM do. The solve divides by mod. md_cuda.cu.h uploads these same values. */
MDDEF md_status md_pme_bspline_moduli(int K, int order, double *mod);

/** @brief The B-spline weights of one atom along one axis, in double, written for clarity:
 *  for fractional grid position @p u (in [0, K)), w[j] = M_p(u - floor(u) + p - 1 - j) is the
 *  weight of grid point floor(u) + j and dw[j] its derivative with respect to u (either output
 *  may be NULL). M_p is built by the recursion M_k(x) = (x M_{k-1}(x) + (k - x) M_{k-1}(x - 1))
 *  / (k - 1) from M_1 = 1 on [0, 1). The weights sum to 1 and the derivatives to 0. */
MDDEF void md_pme_bspline(double u, int order, double *w, double *dw);

/** @brief A CPU PME plan: resolved parameters, the FFT, the moduli and the grids, made once
 *  and used for many evaluations (the box may change between them; the grid does not). */
typedef struct md_pme_plan {
    md_pme_params params; /**< resolved parameters */
    int capacity;         /**< most atoms per call */
    md_fft3d fft;         /**< the 3D real FFT */
    double *mod[3];       /**< B-spline moduli per axis (md_pme_bspline_moduli) */
    double *grid;         /**< K0 K1 K2 reals: the charges after md_pme_spread, the potential after
                               md_pme_backward */
    double *cgrid;        /**< K0 K1 (K2/2 + 1) complex values: FFT(Q) after md_pme_forward, times
                               the influence function after md_pme_solve */
    double energy;        /**< reciprocal energy of the last md_pme_solve (with the background) */
    double virial[9];     /**< its virial W_ab (index 3a + b) */
    double charge;        /**< sum of the charges of the last md_pme_spread */
    double charge2;       /**< sum of their squares */
    double *scratch;      /**< 3 capacity doubles (internal) */
} md_pme_plan;

/** @brief Make a plan with @p params (NULL: every default) for up to @p capacity atoms; @p box is
 *  needed when the grid is chosen automatically. Errors: those of md_pme_params_resolve(),
 *  capacity < 1, out of memory. On failure @p p is untouched. */
MDDEF md_status md_pme_plan_create(md_pme_plan *p, const md_pme_params *params, const double box[3], int capacity);

/** @brief Release a plan and zero it. Safe on a zeroed plan. */
MDDEF void md_pme_plan_free(md_pme_plan *p);

/** @brief Stage 1: spread the @p n charges at @p xyzq (positions anywhere, wrapped) onto
 *  p->grid for @p box; sets p->charge and p->charge2. Errors: NULL, n outside 1..capacity,
 *  a non-finite coordinate or charge, a bad box (MD_ERR_RANGE). */
MDDEF md_status md_pme_spread(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3]);

/** @brief Stage 2: p->cgrid = the forward real-to-complex FFT of p->grid. */
MDDEF md_status md_pme_forward(md_pme_plan *p);

/** @brief Stage 3: multiply p->cgrid by the influence function for @p box; sets p->energy
 *  (with the background of p->charge) and p->virial. */
MDDEF md_status md_pme_solve(md_pme_plan *p, const double box[3]);

/** @brief Stage 4: p->grid = the backward complex-to-real FFT of p->cgrid (p->cgrid is
 *  overwritten). */
MDDEF md_status md_pme_backward(md_pme_plan *p);

/** @brief Stage 5: add the reciprocal forces of the @p n atoms (the same as given to
 *  md_pme_spread) to @p force (3 n doubles, x y z per atom). */
MDDEF md_status md_pme_gather(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3], double *force);

/** @brief The PME reciprocal part of @p n charges: the five stages.
 *
 *  ADDS the reciprocal forces to @p force (3 n doubles, may be NULL) and the reciprocal virial
 *  to energy->virial, and SETS energy->coul_recip (with the neutralising background for a
 *  net charge) and energy->coul_self = -k alpha / sqrt(pi) sum q^2; every other field of
 *  @p energy (may be NULL) is left as it was. So after md_nb_compute() with MD_COUL_EWALD and
 *  ewald_beta equal to this plan's alpha (which writes the same coul_self), one call here
 *  completes the energy, forces and virial. Errors: those of the stages. On failure @p force
 *  and @p energy are untouched. */
MDDEF md_status md_pme_compute(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3], double *force,
                               md_energy *energy);

/* ======================================================================== */
/* bonded: harmonic bonds and angles, the force-field table of a PSF        */
/* ======================================================================== */

/* Harmonic bonds E = k/2 (r - r0)^2 and angles E = k/2 (theta - theta0)^2, with
 * md_topology's units: k in kJ mol^-1 nm^-2 and kJ mol^-1 rad^-2, the convention
 * of OpenMM's HarmonicBondForce and HarmonicAngleForce (CHARMM and AMBER files list
 * K = k / 2 in kcal/mol/A^2: multiply by 2 x 418.4 for k). md_bonded_compute is the
 * double reference; md_bond_f32 and md_angle_f32 are the float arithmetic of the GPU
 * kernel (md_cuda.cu.h), shared so the host can test it.
 *
 * A PSF holds the atoms, types, charges, masses and bonds of a system but no
 * parameters. The parameters come from a small text table (md_ff_table) that a
 * caller writes for the types it uses; md_topology_from_psf() joins the two:
 *
 *     # md.h force-field table 1 (a '#' starts a comment; blank lines are skipped)
 *     lj     OT    0.315061  0.636386          type sigma(nm) epsilon(kJ/mol)
 *     lj     HT    0         0
 *     bond   OT HT   0.09572  462750.4         types r0(nm) k(kJ/mol/nm^2)
 *     angle  HT OT HT  104.52  836.8           types theta0(degrees) k(kJ/mol/rad^2)
 *     water  OT HT                             a rigid water: oxygen and hydrogen types
 *
 * One entry per line, the keyword first, fields separated by blanks, at most
 * MD_NAME_MAX characters per type. A bond matches its two types in either order, an
 * angle its three in either direction (the vertex in the middle). The same types
 * twice is an error naming both lines. `water` names the types of a rigid three-site
 * water: every residue of an oxygen of that type bonded to two hydrogens of the other
 * type becomes a rigid group (SETTLE), with the O-H distance of the bond entry and the
 * H-H distance from the angle entry. */

/** @brief The harmonic bond and angle terms a simulation evaluates, with their parameters.
 *  Owned arrays (md_bonded_free). */
typedef struct md_bonded {
    int nbond;            /**< bonds */
    int *bond;            /**< 2 nbond atoms */
    double *bond_r0;      /**< nbond rest lengths (nm) */
    double *bond_k;       /**< nbond constants (kJ mol^-1 nm^-2) */
    int nangle;           /**< angles */
    int *angle;           /**< 3 nangle atoms, the vertex in the middle */
    double *angle_theta0; /**< nangle rest angles (rad) */
    double *angle_k;      /**< nangle constants (kJ mol^-1 rad^-2) */
} md_bonded;

/** @brief The bonded terms of @p t: every bond of t when t->bond_k is set (with t->bond_r0) and
 *  every angle when t->angle_k is set (with t->angle_theta0); a topology without them gives an
 *  empty md_bonded.
 *
 *  With @p skip_rigid 1 the terms that constraints hold fixed are left out, as OpenMM's
 *  ForceField does for constrained bonds: a bond inside one rigid water or listed as a
 *  constraint (either order), and an angle whose three atoms are one rigid water. Errors: NULL,
 *  an atom index out of range (MD_ERR_RANGE naming bond[k] or angle[k]), a non-finite or
 *  negative constant or rest value, out of memory. On failure @p b is untouched. */
MDDEF md_status md_bonded_from_topology(md_bonded *b, const md_topology *t, int skip_rigid);

/** @brief Release the arrays of @p b and zero it. Safe on a zeroed md_bonded. */
MDDEF void md_bonded_free(md_bonded *b);

/** @brief Bonded energy, forces and virial of positions @p x (3 @p n doubles, nm), in double.
 *
 *  Each term's vectors are minimum images in @p box (NULL or all zero: no periodic box): bond
 *  d = x_i - x_j, angle a = x_i - x_j and c = x_k - x_j (j the vertex), theta =
 *  atan2(|a x c|, a . c). ADDS the forces to @p force (3 n doubles, may be NULL) and the virial
 *  (W_ab = sum over terms of (x_atom - x_first)_a F_atom,b with the term's own vectors) to
 *  energy->virial, and SETS energy->bonded (@p energy may be NULL); other fields are left as
 *  they were. An angle with sin(theta) below 1e-12 (collinear atoms) gets its energy but no
 *  force, its direction being undefined. Errors: NULL @p b or @p x, n < 1, an atom outside
 *  0..n-1 (MD_ERR_RANGE), a non-finite coordinate (MD_ERR_RANGE, field x[i]). On failure
 *  @p force and @p energy are untouched. */
MDDEF md_status md_bonded_compute(const md_bonded *b, const double *x, int n, const double box[3], double *force,
                                  md_energy *energy);

/** @brief One harmonic bond in float (the GPU kernel's arithmetic): @p d = x_i - x_j (nm, a
 *  minimum image), rest length @p r0, constant @p k. Returns F/r: the force on i is (F/r) d,
 *  on j the opposite; writes the energy to @p e. A zero-length bond gets no force. */
MD_HOSTDEV static inline float md_bond_f32(const float d[3], float r0, float k, float *e) {
    float r2 = fmaf(d[0], d[0], fmaf(d[1], d[1], d[2] * d[2])), r = sqrtf(r2), dr = r - r0;
    *e = 0.5f * k * dr * dr;
    return r > 0.0f ? -k * dr / r : 0.0f;
}

/** @brief One harmonic angle in float (the GPU kernel's arithmetic): @p a = x_i - x_j and
 *  @p c = x_k - x_j (nm, minimum images, j the vertex), rest angle @p theta0 (rad), constant
 *  @p k. Writes the forces on i and k to @p fi and @p fk (the vertex gets -(fi + fk)) and the
 *  energy to @p e. theta = atan2(|a x c|, a . c); with p = a x c the gradients are
 *  d theta / d x_i = (a x p) / (|a|^2 |p|) and d theta / d x_k = (p x c) / (|c|^2 |p|). A
 *  collinear angle (|p| below 1e-12 |a| |c|) gets no force. */
MD_HOSTDEV static inline void md_angle_f32(const float a[3], const float c[3], float theta0, float k, float fi[3],
                                           float fk[3], float *e) {
    float p[3], ap[3], pc[3], pn, a2, c2, th, de;
    int x;
    p[0] = a[1] * c[2] - a[2] * c[1];
    p[1] = a[2] * c[0] - a[0] * c[2];
    p[2] = a[0] * c[1] - a[1] * c[0];
    pn = sqrtf(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
    a2 = a[0] * a[0] + a[1] * a[1] + a[2] * a[2];
    c2 = c[0] * c[0] + c[1] * c[1] + c[2] * c[2];
    th = atan2f(pn, a[0] * c[0] + a[1] * c[1] + a[2] * c[2]);
    de = k * (th - theta0);
    *e = 0.5f * de * (th - theta0);
    for (x = 0; x < 3; x++) fi[x] = fk[x] = 0.0f;
    if (!(pn > 1e-12f * sqrtf(a2 * c2))) return;
    ap[0] = a[1] * p[2] - a[2] * p[1];
    ap[1] = a[2] * p[0] - a[0] * p[2];
    ap[2] = a[0] * p[1] - a[1] * p[0];
    pc[0] = p[1] * c[2] - p[2] * c[1];
    pc[1] = p[2] * c[0] - p[0] * c[2];
    pc[2] = p[0] * c[1] - p[1] * c[0];
    for (x = 0; x < 3; x++) {
        fi[x] = -de * ap[x] / (a2 * pn);
        fk[x] = -de * pc[x] / (c2 * pn);
    }
}

/** @brief Add to @p t one angle per pair of bonds that share an atom (i-j-k for bonds i-j and
 *  j-k, i < k, the vertex in the middle), in order of the vertex, as CHARMM's AUTOGENERATE
 *  ANGLES does and as a PSF's !NTHETA section normally lists them. Existing angles are replaced;
 *  the angle parameters become NULL (md_topology_from_psf fills them). Errors: a bad bond list
 *  (MD_ERR_RANGE), out of memory; on failure @p t is untouched. */
MDDEF md_status md_topology_angles_from_bonds(md_topology *t);

/** @brief A force-field table read by md_read_ff_table() (format: see the section's manual).
 *  Angles are stored in radians. Owned arrays (md_ff_table_free). */
typedef struct md_ff_table {
    int nlj;              /**< `lj` entries */
    md_name *lj_type;     /**< nlj type names */
    double *lj_sigma;     /**< nlj sigma (nm) */
    double *lj_epsilon;   /**< nlj epsilon (kJ/mol) */
    int nbond;            /**< `bond` entries */
    md_name *bond_type;   /**< 2 nbond type names */
    double *bond_r0;      /**< nbond rest lengths (nm) */
    double *bond_k;       /**< nbond constants (kJ mol^-1 nm^-2) */
    int nangle;           /**< `angle` entries */
    md_name *angle_type;  /**< 3 nangle type names, the vertex in the middle */
    double *angle_theta0; /**< nangle rest angles (rad) */
    double *angle_k;      /**< nangle constants (kJ mol^-1 rad^-2) */
    int nwater;           /**< `water` entries */
    md_name *water_type;  /**< 2 nwater type names: oxygen, hydrogen */
} md_ff_table;

/** @brief Read a force-field table file (see the section's manual). Errors name the file, line
 *  and field: an unknown keyword (MD_ERR_PARSE, field keyword), a missing or extra field, a
 *  number that does not parse (MD_ERR_PARSE), a type name longer than MD_NAME_MAX, a value out
 *  of range: sigma, epsilon or k negative, r0 not > 0, theta0 outside (0, 180] degrees
 *  (MD_ERR_RANGE), the same types listed twice (MD_ERR_PARSE naming the earlier line). On
 *  failure @p tab is untouched. */
MDDEF md_status md_read_ff_table(const char *path, md_ff_table *tab);

/** @brief md_read_ff_table() on @p len bytes at @p data (no NUL needed); @p name is used in
 *  messages (NULL: "<memory>"). The fuzzing entry point. */
MDDEF md_status md_read_ff_table_mem(const char *data, size_t len, const char *name, md_ff_table *tab);

/** @brief Release a table's arrays and zero it. Safe on a zeroed table. */
MDDEF void md_ff_table_free(md_ff_table *tab);

/** @brief How md_topology_from_psf() builds a topology; a zero field takes its default. */
typedef struct md_psf_desc {
    md_exclusion_desc exclusions; /**< 1-4 treatment (default: scaled 0.5 / (1/1.2)) */
    int flexible_water;           /**< 1: waters keep their bonds and angles; 0 (default): a
                                       residue matching a `water` entry is rigid (SETTLE) */
    int constrain_hbonds;         /**< 1: every other bond to a hydrogen (element H) becomes a
                                       constraint at its r0 (SHAKE); 0 (default): none */
} md_psf_desc;

/** @brief A topology and LJ table for a system read from a PSF (md_read_psf: type names,
 *  charges, masses, bonds) with the parameters of @p tab.
 *
 *  LJ types: one per distinct type name, in order of first appearance, each with its `lj` entry
 *  (Lorentz-Berthelot). Charges and masses from @p sys. Bonds from sys->bond with their `bond`
 *  entries; angles generated from the bonds (md_topology_angles_from_bonds) with their `angle`
 *  entries; exclusions and 1-4 pairs from the bonds (desc->exclusions). Rigid waters (see the
 *  section's manual; their molecules must have no other bonds) go to md_topology::water; with
 *  desc->constrain_hbonds the other bonds to hydrogens go to md_topology::constraint. A
 *  missing parameter is an error naming the atoms, their types and what is missing
 *  (MD_ERR_INVALID_ARGUMENT, field lj, bond or angle); so are waters of one `water` entry
 *  with different geometry, or masses (field water). On failure the outputs are untouched. */
MDDEF md_status md_topology_from_psf(const md_system *sys, const md_ff_table *tab, const md_psf_desc *desc,
                                     md_topology *top, md_lj_table *lj);

/* ======================================================================== */
/* constraints: SETTLE for rigid water, SHAKE and RATTLE for the others     */
/* ======================================================================== */

/* Constraints keep distances fixed: the three distances of every rigid water
 * (md_topology::water, with md_topology::water_doh and water_dhh) and any other
 * md_topology::constraint. Waters use SETTLE (Miyamoto and Kollman, J. Comput. Chem.
 * 13, 952 (1992)): the analytic solution for a rigid triangle, no iteration, exact to
 * rounding. The others use SHAKE (Ryckaert, Ciccotti and Berendsen, J. Comput. Phys.
 * 23, 327 (1977)) for positions and RATTLE's velocity step (Andersen, J. Comput. Phys.
 * 52, 24 (1983)): Gauss-Seidel sweeps over the constraints until every one holds to the
 * tolerance. SHAKE's tolerance is relative: a constraint of length d holds when
 * |r^2 - d^2| <= 2 tol d^2 (so |r - d| / d <= tol to first order); RATTLE's when
 * |v_ij . r_ij| <= tol |r_ij| (|r_ij| is ~0.1 nm, so tol nm/ps relative to a bond).
 * The default tolerance MD_SHAKE_DEFAULT_TOLERANCE is far below what a float force can
 * resolve and costs a few sweeps more than OpenMM's 1e-5. */

/** @brief Default relative tolerance of SHAKE and RATTLE (md_constraints_desc). */
#define MD_SHAKE_DEFAULT_TOLERANCE 1e-10
/** @brief Default most SHAKE / RATTLE sweeps before MD_ERR_RANGE (md_constraints_desc). */
#define MD_SHAKE_DEFAULT_MAX_ITERATIONS 1000

/** @brief SETTLE for one rigid water, in double: move the unconstrained new positions @p x
 *  (O, H1, H2: 9 doubles) to the nearest (in the mass metric) positions with |O-H1| = |O-H2| =
 *  @p doh and |H1-H2| = @p dhh, the constraint forces along the bonds of the reference
 *  positions @p ref (the molecule's positions before the step, which satisfy the constraints).
 *
 *  Miyamoto and Kollman's construction: in the centre-of-mass frame of @p x, axes from
 *  @p ref (z normal to its plane, x along H1-H2 projected), the canonical triangle is rotated
 *  by the angles phi, psi and theta their equations give. The hydrogens must share one mass
 *  @p mh; @p mo is the oxygen's. Positions may be absolute or relative, but @p ref and @p x must
 *  be in one frame with whole molecules (the caller takes minimum images). Returns 0, or 1 when
 *  the displacement is too large for a solution (a sine above 1: the step has exploded), with
 *  @p x left as it was. Host and device (md_cuda.cu.h) share this code. */
MD_HOSTDEV static inline int md_settle_water(const double ref[9], double x[9], double mo, double mh, double doh,
                                             double dhh) {
    double wo = mo / (mo + 2.0 * mh), wh = mh / (mo + 2.0 * mh);
    double b0[3], c0[3], com[3], a1[3], b1[3], c1[3], ex[3], ey[3], ez[3], n;
    double ra, rb, rc, sphi, cphi, spsi, cpsi, zb, zc, xb0, yb0, xc0, yc0, xb1, yb1, xc1, yc1;
    double ya2, xb2, yb2, yc2, al, be, ga, s2, sth, cth, a3[3], b3[3], c3[3];
    int k;
    for (k = 0; k < 3; k++) {
        b0[k] = ref[3 + k] - ref[k]; /* reference bonds from the oxygen */
        c0[k] = ref[6 + k] - ref[k];
        com[k] = wo * x[k] + wh * (x[3 + k] + x[6 + k]);
        a1[k] = x[k] - com[k];
        b1[k] = x[3 + k] - com[k];
        c1[k] = x[6 + k] - com[k];
    }
    /* z: normal of the reference plane; x: normal of z and a1 (so a1 has no x component); y = z cross x */
    ez[0] = b0[1] * c0[2] - b0[2] * c0[1];
    ez[1] = b0[2] * c0[0] - b0[0] * c0[2];
    ez[2] = b0[0] * c0[1] - b0[1] * c0[0];
    ex[0] = a1[1] * ez[2] - a1[2] * ez[1];
    ex[1] = a1[2] * ez[0] - a1[0] * ez[2];
    ex[2] = a1[0] * ez[1] - a1[1] * ez[0];
    ey[0] = ez[1] * ex[2] - ez[2] * ex[1];
    ey[1] = ez[2] * ex[0] - ez[0] * ex[2];
    ey[2] = ez[0] * ex[1] - ez[1] * ex[0];
    /* unit vectors by one reciprocal each and products: a double division is a long inlined
     * sequence on the device, and the integrate kernel is a latency-bound chain of them */
    n = 1.0 / sqrt(ex[0] * ex[0] + ex[1] * ex[1] + ex[2] * ex[2]);
    for (k = 0; k < 3; k++) ex[k] *= n;
    n = 1.0 / sqrt(ey[0] * ey[0] + ey[1] * ey[1] + ey[2] * ey[2]);
    for (k = 0; k < 3; k++) ey[k] *= n;
    n = 1.0 / sqrt(ez[0] * ez[0] + ez[1] * ez[1] + ez[2] * ez[2]);
    for (k = 0; k < 3; k++) ez[k] *= n;
    /* coordinates in that frame */
    xb0 = ex[0] * b0[0] + ex[1] * b0[1] + ex[2] * b0[2];
    yb0 = ey[0] * b0[0] + ey[1] * b0[1] + ey[2] * b0[2];
    xc0 = ex[0] * c0[0] + ex[1] * c0[1] + ex[2] * c0[2];
    yc0 = ey[0] * c0[0] + ey[1] * c0[1] + ey[2] * c0[2];
    xb1 = ex[0] * b1[0] + ex[1] * b1[1] + ex[2] * b1[2];
    yb1 = ey[0] * b1[0] + ey[1] * b1[1] + ey[2] * b1[2];
    xc1 = ex[0] * c1[0] + ex[1] * c1[1] + ex[2] * c1[2];
    yc1 = ey[0] * c1[0] + ey[1] * c1[1] + ey[2] * c1[2];
    zb = ez[0] * b1[0] + ez[1] * b1[1] + ez[2] * b1[2];
    zc = ez[0] * c1[0] + ez[1] * c1[1] + ez[2] * c1[2];
    /* the canonical triangle: O at (0, ra, 0), H at (-+rc, -rb, 0) about the centre of mass */
    rc = 0.5 * dhh;
    rb = sqrt(doh * doh - rc * rc);
    ra = 2.0 * wh * rb;
    rb -= ra;
    sphi = (ez[0] * a1[0] + ez[1] * a1[1] + ez[2] * a1[2]) / ra;
    if (!(fabs(sphi) <= 1.0)) return 1;
    cphi = sqrt(1.0 - sphi * sphi);
    spsi = (zb - zc) / (2.0 * rc * cphi);
    if (!(fabs(spsi) <= 1.0)) return 1;
    cpsi = sqrt(1.0 - spsi * spsi);
    ya2 = ra * cphi;
    xb2 = -rc * cpsi;
    yb2 = -rb * cphi - rc * spsi * sphi;
    yc2 = -rb * cphi + rc * spsi * sphi;
    /* the rotation theta about z that conserves angular momentum (M&K eqs. A13-A15) */
    al = xb2 * (xb0 - xc0) + yb0 * yb2 + yc0 * yc2;
    be = xb2 * (yc0 - yb0) + xb0 * yb2 + xc0 * yc2;
    ga = xb0 * yb1 - xb1 * yb0 + xc0 * yc1 - xc1 * yc0;
    s2 = al * al + be * be;
    if (!(s2 - ga * ga >= 0.0)) return 1;
    sth = (al * ga - be * sqrt(s2 - ga * ga)) / s2;
    cth = sqrt(1.0 - sth * sth);
    /* rotated triangle, z kept from the unconstrained positions */
    a3[0] = -ya2 * sth;
    a3[1] = ya2 * cth;
    a3[2] = ez[0] * a1[0] + ez[1] * a1[1] + ez[2] * a1[2];
    b3[0] = xb2 * cth - yb2 * sth;
    b3[1] = xb2 * sth + yb2 * cth;
    b3[2] = zb;
    c3[0] = -xb2 * cth - yc2 * sth;
    c3[1] = -xb2 * sth + yc2 * cth;
    c3[2] = zc;
    for (k = 0; k < 3; k++) {
        x[k] = com[k] + ex[k] * a3[0] + ey[k] * a3[1] + ez[k] * a3[2];
        x[3 + k] = com[k] + ex[k] * b3[0] + ey[k] * b3[1] + ez[k] * b3[2];
        x[6 + k] = com[k] + ex[k] * c3[0] + ey[k] * c3[1] + ez[k] * c3[2];
    }
    return 0;
}

/** @brief md_settle_velocities() with the inverse masses @p w (3 values, 1/amu) given instead of
 *  the masses: the integrate kernel passes 1 / m made once on the host, where each call would
 *  divide again (a double division is a long inlined sequence on the device, in a kernel that is
 *  a latency-bound chain). md_settle_velocities(x, v, m) is this function with w[k] = 1.0 / m[k],
 *  so the two give the same bits. Returns 0, or 1 for a degenerate (collinear) triangle, with
 *  @p v left as it was. */
MD_HOSTDEV static inline int md_settle_velocities_inv(const double x[9], double v[9], const double w[3]) {
    /* bonds 0: (0,1), 1: (1,2), 2: (2,0); e = unit vector from the first atom to the second */
    const int ia[3] = {0, 1, 2}, ib[3] = {1, 2, 0};
    double e[3][3], r[3], A[3][3], det, lam[3];
    int p, q, k;
    for (p = 0; p < 3; p++) {
        double s = 0.0;
        for (k = 0; k < 3; k++) {
            e[p][k] = x[3 * ib[p] + k] - x[3 * ia[p] + k];
            s += e[p][k] * e[p][k];
        }
        s = 1.0 / sqrt(s); /* one division per bond, then products (fewer device instructions) */
        for (k = 0; k < 3; k++) e[p][k] *= s;
        /* relative velocity along the bond */
        r[p] = 0.0;
        for (k = 0; k < 3; k++) r[p] += (v[3 * ib[p] + k] - v[3 * ia[p] + k]) * e[p][k];
    }
    /* impulse lam_q along e_q adds -lam_q e_q / m to its first atom and +lam_q e_q / m to its second;
     * A[p][q] = d(relative velocity of bond p) / d lam_q; solve A lam = -r */
    for (p = 0; p < 3; p++)
        for (q = 0; q < 3; q++) {
            double dot = e[p][0] * e[q][0] + e[p][1] * e[q][1] + e[p][2] * e[q][2], c = 0.0;
            if (ib[p] == ib[q]) c += w[ib[p]];
            if (ib[p] == ia[q]) c -= w[ib[p]];
            if (ia[p] == ib[q]) c -= w[ia[p]];
            if (ia[p] == ia[q]) c += w[ia[p]];
            A[p][q] = c * dot;
        }
    det = A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[2][1]) - A[0][1] * (A[1][0] * A[2][2] - A[1][2] * A[2][0]) +
          A[0][2] * (A[1][0] * A[2][1] - A[1][1] * A[2][0]);
    if (!(fabs(det) > 1e-300)) return 1;
    det = 1.0 / det; /* one division: the three below are products */
    for (q = 0; q < 3; q++) {
        double B[3][3], d;
        for (p = 0; p < 3; p++)
            for (k = 0; k < 3; k++) B[p][k] = k == q ? -r[p] : A[p][k];
        d = B[0][0] * (B[1][1] * B[2][2] - B[1][2] * B[2][1]) - B[0][1] * (B[1][0] * B[2][2] - B[1][2] * B[2][0]) +
            B[0][2] * (B[1][0] * B[2][1] - B[1][1] * B[2][0]);
        lam[q] = d * det;
    }
    for (q = 0; q < 3; q++)
        for (k = 0; k < 3; k++) {
            v[3 * ia[q] + k] -= lam[q] * e[q][k] * w[ia[q]];
            v[3 * ib[q] + k] += lam[q] * e[q][k] * w[ib[q]];
        }
    return 0;
}

/** @brief The velocity part of a rigid triangle (SETTLE's velocity correction, RATTLE's second
 *  half for three constraints at once), in double: remove from @p v (O, H1, H2: 9 doubles) the
 *  relative velocities along the three bonds of positions @p x (9 doubles, one frame), by the
 *  impulses along the bonds that make (v_j - v_i) . e_ij = 0 for the three pairs. The 3 x 3
 *  linear system for the impulses is solved by Cramer's rule; masses @p m (3 values) may
 *  differ. Momentum is conserved. Returns 0, or 1 for a degenerate (collinear) triangle, with
 *  @p v left as it was. Host and device share this code. */
MD_HOSTDEV static inline int md_settle_velocities(const double x[9], double v[9], const double m[3]) {
    const double w[3] = {1.0 / m[0], 1.0 / m[1], 1.0 / m[2]};
    return md_settle_velocities_inv(x, v, w);
}

/** @brief How md_constraints_create() sets up; a zero field takes its default. */
typedef struct md_constraints_desc {
    double tolerance;   /**< SHAKE / RATTLE relative tolerance (default MD_SHAKE_DEFAULT_TOLERANCE) */
    int max_iterations; /**< most sweeps before MD_ERR_RANGE (default MD_SHAKE_DEFAULT_MAX_ITERATIONS) */
    int water_by_shake; /**< 1: treat every rigid water as three SHAKE constraints (O-H, O-H, H-H)
                             instead of SETTLE (to compare the two); 0 (default): SETTLE */
} md_constraints_desc;

/** @brief The constraints of a topology, ready to apply (CPU). Owned arrays. */
typedef struct md_constraints {
    int n;                /**< atoms */
    int nwater;           /**< rigid waters handled by SETTLE */
    int *water;           /**< 3 nwater atoms (O, H, H) */
    double doh;           /**< O-H distance (nm) */
    double dhh;           /**< H-H distance (nm) */
    double mass_o;        /**< oxygen mass (amu) of every SETTLE water */
    double mass_h;        /**< hydrogen mass (amu) of every SETTLE water */
    int npair;            /**< SHAKE constraints */
    int *pair;            /**< 2 npair atoms */
    double *length;       /**< npair lengths (nm) */
    double *inv_mass;     /**< n inverse masses (1/amu) */
    double tolerance;     /**< SHAKE / RATTLE tolerance */
    int max_iterations;   /**< most sweeps */
    int last_iterations;  /**< sweeps of the last SHAKE or RATTLE call (0 without SHAKE constraints) */
    double *scratch;      /**< 3 npair doubles (internal) */
} md_constraints;

/** @brief Prepare the constraints of @p t (waters and md_topology::constraint) with @p desc
 *  (NULL: defaults). Errors: a mass not finite and > 0 in a constraint, SETTLE waters whose
 *  oxygen or hydrogen masses differ from the first water's, or whose two hydrogens differ
 *  (MD_ERR_INVALID_ARGUMENT, field water; use water_by_shake), water_doh / water_dhh not a
 *  valid triangle, a constraint length not finite and > 0, an atom out of range, an atom in two
 *  waters or in a water and a constraint (MD_ERR_INVALID_ARGUMENT), out of memory. On failure
 *  @p c is untouched. */
MDDEF md_status md_constraints_create(md_constraints *c, const md_topology *t, const md_constraints_desc *desc);

/** @brief Constrain positions: move @p x (3 n doubles, the unconstrained new positions) onto the
 *  constraints, the constraint directions taken from the reference positions @p ref (3 n, the
 *  positions before the step, which satisfy them). Differences are minimum images in @p box
 *  (NULL: none). Errors: SETTLE without a solution or SHAKE not converged within max_iterations
 *  sweeps (MD_ERR_RANGE naming the water or constraint: the step has exploded). */
MDDEF md_status md_constraints_apply(md_constraints *c, const double *ref, double *x, const double box[3]);

/** @brief Constrain velocities: remove from @p v (3 n doubles) the relative velocity along
 *  every constraint at positions @p x (which satisfy them): md_settle_velocities for the
 *  waters, RATTLE sweeps for the rest. Errors: RATTLE not converged, a degenerate water
 *  (MD_ERR_RANGE). */
MDDEF md_status md_constraints_apply_velocities(md_constraints *c, const double *x, double *v, const double box[3]);

/** @brief Degrees of freedom the constraints remove: 3 per water plus one per constraint. */
MDDEF int md_constraints_count(const md_constraints *c);

/** @brief Largest relative deviation |r - d| / d over every constrained distance of @p x
 *  (water O-H, O-H, H-H and the constraints; minimum images in @p box, may be NULL). */
MDDEF double md_constraints_max_deviation(const md_constraints *c, const double *x, const double box[3]);

/** @brief Release @p c and zero it. Safe on a zeroed md_constraints. */
MDDEF void md_constraints_free(md_constraints *c);

/* ======================================================================== */
/* thermostat: counter-based noise for Langevin dynamics                    */
/* ======================================================================== */

/* The Langevin thermostat needs three normal deviates per atom per step. They come
 * from Philox4x32-10 (Salmon, Moraes, Dror and Shaw, SC'11, "Parallel random numbers:
 * as easy as 1, 2, 3"), a counter-based generator: the numbers are a pure function of
 * (seed, step, atom), so a GPU thread computes its atom's noise with no state to load
 * or save, a CUDA graph replays correctly with the step read from device memory, and
 * the CPU reference draws the very same numbers (curand_kernel.h has Philox too, but
 * only on the device: the host reference could not draw the same stream). A restart
 * needs only the seed and the step. */

/** @brief Philox4x32-10: the 4 x 32-bit output block of counter @p ctr and key @p key (ten
 *  rounds, Random123's constants). Host and device give the same bits; tests/test_step.c checks
 *  Random123's published known-answer vectors. */
MD_HOSTDEV static inline void md_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    int r;
    for (r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/** @brief Three standard normal deviates for atom @p atom at step @p step of the stream @p seed:
 *  one Philox block of counter (atom, step low 32 bits, step high 32 bits, 0x4C414E47) and key
 *  (seed low, seed high), four uniforms u = (word + 0.5) / 2^32 in (0, 1), two Box-Muller pairs
 *  in double (the fourth deviate is dropped). The host takes cos and sin of 2 pi u, the device
 *  sincospi and cospi of 2 u (the same angles, without an argument reduction): host and device
 *  agree to a few units in the last place, the rounding of their log, sqrt, cos and sin. */
MD_HOSTDEV static inline void md_langevin_normals(uint64_t seed, long long step, int atom, double out[3]) {
    uint32_t ctr[4], key[2], w[4];
    double u[4], r0, r1;
    int k;
    ctr[0] = (uint32_t)atom;
    ctr[1] = (uint32_t)((uint64_t)step & 0xFFFFFFFFu);
    ctr[2] = (uint32_t)((uint64_t)step >> 32);
    ctr[3] = 0x4C414E47u;
    key[0] = (uint32_t)(seed & 0xFFFFFFFFu);
    key[1] = (uint32_t)(seed >> 32);
    md_philox4x32_10(ctr, key, w);
    for (k = 0; k < 4; k++) u[k] = ((double)w[k] + 0.5) * 2.3283064365386963e-10;
    r0 = sqrt(-2.0 * log(u[0]));
    r1 = sqrt(-2.0 * log(u[2]));
#if defined(__CUDA_ARCH__)
    { /* the angle as a fraction of a turn: no argument reduction (cos and sin of 2 pi u carry a
       * Payne-Hanek path, local memory and a hundred instructions into a latency-bound kernel) */
        double sn, cs;
        sincospi(2.0 * u[1], &sn, &cs);
        out[0] = r0 * cs;
        out[1] = r0 * sn;
        out[2] = r1 * cospi(2.0 * u[3]);
    }
#else
    out[0] = r0 * cos(6.283185307179586 * u[1]);
    out[1] = r0 * sin(6.283185307179586 * u[1]);
    out[2] = r1 * cos(6.283185307179586 * u[3]);
#endif
}

/* ======================================================================== */
/* sim: the MD step on the CPU (the reference for md_cuda.cu.h's step)      */
/* ======================================================================== */

/* md_sim runs molecular dynamics of a system with a force field: nonbonded forces
 * (md_nb_compute, the double Verlet rung) + PME reciprocal space (md_pme_compute,
 * when the Coulomb mode is Ewald) + harmonic bonds and angles (md_bonded_compute),
 * constraints (SETTLE and SHAKE), the Langevin thermostat, the Monte Carlo barostat.
 * Slow and simple, double everywhere: the reference the GPU step is checked against.
 *
 * THE INTEGRATOR is leapfrog, in the form of OpenMM's VerletIntegrator and
 * LangevinMiddleIntegrator, so a drift comparison with OpenMM compares like with like
 * and the thermostat is the one OpenMM's benchmarks run. The state is the positions x(t)
 * and the half-step velocities v(t - dt/2); one step (F = F(x(t)), m the masses):
 *     v += dt F / m
 *     Langevin only: constrain v at x (RATTLE / SETTLE velocities)
 *     NVE:      D = dt v
 *     Langevin: D = dt/2 v;  v = a v + sqrt((1 - a^2) kT / m) R;  D += dt/2 v,
 *               a = exp(-gamma dt), R three normals (md_langevin_normals(seed, step, atom))
 *     x' = x + D, constrained (SETTLE / SHAKE with x as the reference): D' = x' - x
 *     v += (D' - D) / dt;  x = x'
 *     remove the centre-of-mass velocity (unless disabled)
 *     step += 1; F = F(x); every barostat_interval steps a Monte Carlo volume move.
 * With gamma = 0 the Langevin form is the NVE form plus a velocity constraint. This is the
 * middle scheme of Zhang, Liu and Li (J. Phys. Chem. A 123, 6056 (2019)), "LF-middle":
 * the thermostat sits between the two half drifts, which samples configurations more
 * accurately than the end-of-step placement.
 *
 * THE KINETIC ENERGY at time t is estimated as OpenMM's VerletIntegrator does: v(t) =
 * v(t - dt/2) + dt/2 F(t) / m, constrained (velocities), then sum m v^2 / 2. The
 * temperature divides 2 KE by (3 n - constraints - 3) k_B (the 3: the centre-of-mass
 * motion, removed every step by default as OpenMM's CMMotionRemover does).
 *
 * THE BAROSTAT (isotropic Monte Carlo, as OpenMM's MonteCarloBarostat; Chow and
 * Ferguson, Comput. Phys. Commun. 91, 283 (1995); Aqvist et al., Chem. Phys. Lett.
 * 384, 288 (2004)): every barostat_interval steps a volume change dV uniform in
 * [-s, s] is tried; every molecule (atoms joined by bonds, constraints or a water) is
 * translated so its centre (the mean position of its atoms) scales with the box; the
 * move is accepted when w = U' - U + P dV - N_mol kT ln(V'/V) <= 0, else with
 * probability exp(-w / kT). s starts at 1% of the volume and is adapted every 10
 * attempts toward an acceptance between 25% and 75%. Its random numbers come from an
 * md_rng seeded from the seed (saved in a checkpoint).
 *
 * ERRORS that stop a run (md_sim_step returns them, the state is the last good one up to
 * the failed step): an energy term that is not finite (MD_ERR_RANGE, field energy); an
 * atom that moved more than max_displacement in one step (MD_ERR_RANGE, field x[i]: the
 * neighbour list and cell search assume atoms move less than half the Verlet buffer
 * between checks, so such an atom would escape them; it means the simulation has
 * exploded); SETTLE or SHAKE failing. */

/** @brief Thermostats of md_sim. */
typedef enum md_thermostat {
    MD_THERMOSTAT_NONE = 0,  /**< NVE: leapfrog Verlet (OpenMM's VerletIntegrator) */
    MD_THERMOSTAT_LANGEVIN   /**< Langevin middle (OpenMM's LangevinMiddleIntegrator) */
} md_thermostat;

/** @brief Bar to kJ mol^-1 nm^-3 (1e5 Pa x 1e-27 m^3 x N_A / 1000): P dV in kJ/mol. */
#define MD_BAR 0.06022140857

/** @brief How md_sim_create() sets up a run; a zero field takes its default. */
typedef struct md_sim_desc {
    double dt;                 /**< time step (ps) (default 0.002) */
    md_thermostat thermostat;  /**< default MD_THERMOSTAT_NONE (NVE) */
    double temperature;        /**< thermostat and barostat temperature (K) (default 300) */
    double friction;           /**< Langevin friction gamma (1/ps) (default 1) */
    int barostat_interval;     /**< steps between Monte Carlo volume moves (0, the default: no barostat) */
    double pressure;           /**< barostat pressure (bar) (default 1) */
    uint64_t seed;             /**< thermostat and barostat seed (0 is a valid seed) */
    int com_removal;           /**< 0 (default): remove the centre-of-mass velocity every step; -1: never */
    double max_displacement;   /**< largest move of an atom in one step (nm) before MD_ERR_RANGE (default:
                                    half the Verlet buffer, or 0.05 nm without one) */
    md_nb_params nb;           /**< nonbonded parameters (md_nb_params defaults: Ewald, 0.9 nm) */
    md_pme_params pme;         /**< PME parameters for MD_COUL_EWALD (alpha and cutoff are taken from the
                                    resolved nb parameters; the grid from the box at create) */
    md_constraints_desc constraints; /**< constraint settings */
} md_sim_desc;

/** @brief The Monte Carlo barostat's state (md_sim and md_cuda_sim share it, and a checkpoint
 *  holds it): its random numbers and the adaptation of the largest volume change. */
typedef struct md_barostat {
    md_rng rng;               /**< random numbers (seeded from the run's seed) */
    double scale;             /**< largest volume change of a move (nm^3) */
    int attempted;            /**< moves tried since the last adaptation */
    int accepted;             /**< moves accepted since the last adaptation */
    long long total_attempted; /**< moves tried in the run */
    long long total_accepted;  /**< moves accepted in the run */
} md_barostat;

/** @brief Start a barostat for a run with @p seed in a box of @p volume (nm^3): the generator
 *  seeded from seed XOR 0x9E3779B97F4A7C15, the volume scale 1% of the volume. */
MDDEF void md_barostat_init(md_barostat *b, uint64_t seed, double volume);

/** @brief A trial volume change: dV uniform in [-scale, scale] (one random number). */
MDDEF double md_barostat_propose(md_barostat *b);

/** @brief Decide a move from volume @p volume to @p volume + @p dv that changed the potential
 *  energy by @p de (kJ/mol) for @p nmol molecules at temperature @p kt (kJ/mol) and pressure
 *  @p pressure (bar): accept when w = de + P dv - nmol kT ln(V'/V) <= 0, else with probability
 *  exp(-w / kT) (one random number); count it and, every 10 moves, adapt the scale toward an
 *  acceptance between 25% and 75% (OpenMM's MonteCarloBarostat rule, the scale at most 30% of
 *  the volume). Returns 1 when accepted. */
MDDEF int md_barostat_decide(md_barostat *b, double de, double dv, double volume, int nmol, double kt,
                             double pressure);

/** @brief A CPU molecular dynamics run (see the section's manual). The topology and LJ table
 *  are borrowed and must outlive it. */
typedef struct md_sim {
    int n;                      /**< atoms */
    md_sim_desc desc;           /**< the settings, defaults filled in */
    const md_topology *top;     /**< borrowed topology */
    const md_lj_table *lj;      /**< borrowed LJ table */
    md_nb_plan nb;              /**< nonbonded workspace */
    md_pme_plan pme;            /**< PME plan (grid unset when the Coulomb mode is not Ewald) */
    int use_pme;                /**< 1 when the Coulomb mode is Ewald */
    md_bonded bonded;           /**< the bonds and angles evaluated (rigid ones left out) */
    md_constraints cons;        /**< constraints */
    double *x;                  /**< 3 n positions x(t) (nm), not wrapped (molecules stay whole) */
    double *v;                  /**< 3 n velocities v(t - dt/2) (nm/ps) */
    double *f;                  /**< 3 n forces F(x(t)) (kJ mol^-1 nm^-1) */
    double *inv_mass;           /**< n inverse masses */
    md_float4 *xyzq;            /**< n float positions wrapped into the box and charges (what md_nb_compute reads) */
    double *work;               /**< 9 n doubles of scratch (internal) */
    double box[3];              /**< box (nm) */
    long long step;             /**< steps taken */
    double time_ps;             /**< simulated time (ps) */
    md_energy energy;           /**< potential terms and virial of x(t) (kinetic 0: see md_sim_energy) */
    int ndof;                   /**< degrees of freedom of the temperature */
    int nmol;                   /**< molecules (barostat) */
    int *mol_start;             /**< nmol + 1 offsets into mol_atom */
    int *mol_atom;              /**< n atoms ordered by molecule */
    md_barostat baro;           /**< the Monte Carlo barostat's state */
} md_sim;

/** @brief Start a run of @p sys (positions, velocities sys->vel taken as v(-dt/2), box) with the
 *  force field @p t and @p lj and the settings @p desc (NULL: defaults).
 *
 *  The initial positions are constrained (with themselves as the reference) and the velocities
 *  too, the centre-of-mass velocity removed (unless disabled), then the forces computed. Errors:
 *  those of md_topology_check, md_nb_plan_create, md_pme_plan_create, md_bonded_from_topology,
 *  md_constraints_create and the first force evaluation; sys->n != t->n, no box, a setting out
 *  of range (MD_ERR_RANGE naming it). On failure @p s is untouched. */
MDDEF md_status md_sim_create(md_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                              const md_sim_desc *desc);

/** @brief md_sim_create() without its first force evaluation: the checks, the defaults, the
 *  plans, the constrained initial state, the molecules and the PME grid, with s->f and
 *  s->energy zero until md_sim_compute_forces(). For code that computes the forces elsewhere
 *  (md_cuda_sim_create does, on the GPU). Errors and ownership: those of md_sim_create(). */
MDDEF md_status md_sim_prepare(md_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                               const md_sim_desc *desc);

/** @brief Advance @p s by @p nsteps steps (see the section's manual). On an error the run stops
 *  at the failing step with the error's message naming the step. */
MDDEF md_status md_sim_step(md_sim *s, int nsteps);

/** @brief The forces, potential energy terms and virial of the current positions and box
 *  (recomputed into s->f and s->energy; md_sim_step keeps them current, this is for a caller
 *  that changed s->x or s->box). */
MDDEF md_status md_sim_compute_forces(md_sim *s);

/** @brief The energies at the current time: the potential terms of s->energy and the kinetic
 *  energy of v(t) = v(t - dt/2) + dt/2 F / m, constrained (see the manual), into @p e. */
MDDEF md_status md_sim_energy(md_sim *s, md_energy *e);

/** @brief The name of the first energy term of @p e that is not finite ("lj", "lj_dispersion",
 *  "lj14", "coul_real", "coul14", "coul_excl", "coul_recip", "coul_self", "bonded", "kinetic"),
 *  or NULL when every one is: how a run notices that it has exploded. */
MDDEF const char *md_energy_nonfinite_term(const md_energy *e);

/** @brief Kinetic temperature (K) of a kinetic energy @p kinetic (kJ/mol) with s->ndof degrees
 *  of freedom. */
MDDEF double md_sim_temperature(const md_sim *s, double kinetic);

/** @brief Copy the positions (wrapped into the box, as floats), velocities and box of @p s into
 *  @p sys (sys->n must equal s->n; charges are kept). */
MDDEF md_status md_sim_get_system(const md_sim *s, md_system *sys);

/** @brief Mass density (g/cm^3) of the system in its current box. */
MDDEF double md_sim_density(const md_sim *s);

/** @brief Release @p s and zero it. Safe on a zeroed run. */
MDDEF void md_sim_free(md_sim *s);

/** @brief One line of an energies CSV: where a run is and what it holds. */
typedef struct md_sim_report {
    long long step;      /**< steps taken */
    double time_ps;      /**< simulated time (ps) */
    md_energy energy;    /**< energy terms (kinetic included) */
    double temperature;  /**< kinetic temperature (K) */
    double volume;       /**< box volume (nm^3) */
    double density;      /**< mass density (g/cm^3) */
} md_sim_report;

/** @brief Fill @p r from the current state of @p s (md_sim_energy, md_sim_temperature,
 *  md_sim_density). */
MDDEF md_status md_sim_report_make(md_sim *s, md_sim_report *r);

/** @brief Write the header line of an energies CSV to @p f: step,time_ps,potential,kinetic,total,
 *  temperature_K,volume_nm3,density_g_cm3,lj,lj_dispersion,lj14,coul_real,coul14,coul_excl,
 *  coul_recip,coul_self,bonded (energies in kJ/mol). Errors: a write error (MD_ERR_IO). */
MDDEF md_status md_energy_csv_header(FILE *f);

/** @brief Write one CSV line of @p r in the columns of md_energy_csv_header (%.10g). */
MDDEF md_status md_energy_csv_row(FILE *f, const md_sim_report *r);

/** @brief A progress line into @p buf: "step S/N  t T ps  E_pot P kJ/mol  T K  D g/cm3  R ns/day"
 *  (ns/day from @p ns_per_day; NaN leaves it out). Returns what snprintf returns. */
MDDEF int md_progress_line(char *buf, size_t cap, const md_sim_report *r, long long nsteps, double ns_per_day);

/* ======================================================================== */
/* checkpoint: restartable state                                            */
/* ======================================================================== */

/* A checkpoint holds what a run needs to continue bit for bit: the positions and
 * velocities in double, the box, the step and time, the seed (the thermostat's
 * counter-based noise needs nothing else), the barostat's md_rng state and its
 * adaptation counters. File layout (version 1), little-endian:
 *     8 bytes   "MDCHKPT\n"
 *     u32       version (1)          u32  n (atoms)
 *     i64       step                 f64  time (ps)
 *     f64 x 3   box (nm)             u64  seed
 *     u64 x 4   barostat md_rng      f64  barostat volume scale (nm^3)
 *     u32       attempted            u32  accepted
 *     i64       total attempted      i64  total accepted
 *     f64 x 3n  positions (nm)       f64 x 3n  velocities (nm/ps)
 *     u64       FNV-1a 64 hash of every byte before it
 * The reader checks every field (a truncated file, a wrong magic, version, size or hash
 * is an error naming it) and tests/fuzz/fuzz_checkpoint.c feeds it arbitrary bytes. */

/** @brief Version of the checkpoint layout md_checkpoint_write() writes. */
#define MD_CHECKPOINT_VERSION 1

/** @brief A run's restartable state (see the section's manual). Owned arrays. */
typedef struct md_checkpoint {
    int n;                        /**< atoms */
    long long step;               /**< steps taken */
    double time_ps;               /**< simulated time (ps) */
    double box[3];                /**< box (nm) */
    uint64_t seed;                /**< thermostat / barostat seed */
    md_barostat baro;             /**< the barostat's state */
    double *x;                    /**< 3 n positions (nm) */
    double *v;                    /**< 3 n velocities (nm/ps) */
} md_checkpoint;

/** @brief Copy the restartable state of @p s into a new checkpoint @p ck (free it with
 *  md_checkpoint_free). */
MDDEF md_status md_sim_checkpoint(const md_sim *s, md_checkpoint *ck);

/** @brief Continue @p s from @p ck: positions, velocities, box, step, time, seed and barostat
 *  state are set exactly (no constraint or centre-of-mass step is applied), then the forces are
 *  recomputed. Errors: ck->n != s->n (MD_ERR_INVALID_ARGUMENT), a non-finite value (MD_ERR_RANGE),
 *  a box that fails the nonbonded check; on failure @p s is unchanged. */
MDDEF md_status md_sim_restore(md_sim *s, const md_checkpoint *ck);

/** @brief Write @p ck to @p path atomically (a temporary file renamed over it). */
MDDEF md_status md_checkpoint_write(const char *path, const md_checkpoint *ck);

/** @brief Read a checkpoint file into @p ck. Errors name the file and field: a short file, a
 *  wrong magic or version, n outside 1..MD_DCD_MAX_ATOMS or not matching the size, a hash
 *  mismatch (MD_ERR_PARSE), a non-finite or non-positive box edge, a non-finite coordinate
 *  or velocity (MD_ERR_RANGE). On failure @p ck is untouched. */
MDDEF md_status md_checkpoint_read(const char *path, md_checkpoint *ck);

/** @brief md_checkpoint_read() on @p size bytes at @p data; @p name is used in messages (NULL:
 *  "<memory>"). The fuzzing entry point. */
MDDEF md_status md_checkpoint_read_mem(const void *data, size_t size, const char *name, md_checkpoint *ck);

/** @brief Release @p ck's arrays and zero it. Safe on a zeroed checkpoint. */
MDDEF void md_checkpoint_free(md_checkpoint *ck);

/* ---- DCD written frame by frame ---- */

/** @brief A DCD file being written one frame at a time (a long run writes as it goes). */
typedef struct md_dcd_writer {
    FILE *file;              /**< the open file */
    int natoms;              /**< atoms per frame */
    int nframes;             /**< frames written */
    md_dcd_write_desc desc;  /**< settings */
    unsigned char *buf;      /**< 4 natoms bytes (internal) */
} md_dcd_writer;

/** @brief Create (or truncate) @p path and write a DCD header for frames of @p natoms atoms, in
 *  md_dcd_write()'s layout (@p desc may be NULL). Errors: natoms < 1, I/O. On failure @p w is
 *  untouched and no file is left open. */
MDDEF md_status md_dcd_writer_open(md_dcd_writer *w, const char *path, int natoms, const md_dcd_write_desc *desc);

/** @brief Append one frame: positions @p xyzq (natoms, nm) and @p box (nm; ignored with no_cell),
 *  then rewrite the frame counts of the header and flush, so the file is a valid DCD after
 *  every frame (a run that is stopped leaves a readable trajectory). Errors: a non-finite
 *  coordinate or box edge (MD_ERR_RANGE), I/O. */
MDDEF md_status md_dcd_writer_append(md_dcd_writer *w, const md_float4 *xyzq, const double box[3]);

/** @brief Close the file (safe on a zeroed writer). Returns MD_ERR_IO if the close failed. */
MDDEF md_status md_dcd_writer_close(md_dcd_writer *w);

/* ======================================================================== */
/* co: coroutines, and the replica-exchange logic they run                  */
/* ======================================================================== */

/* COROUTINES. A coroutine is a function with a stack of its own that can stop in the middle
 * (md_co_yield) and be continued later where it stopped (md_co_resume). These are stackful:
 * md_co_yield works at any depth of calls, so a replica's ordinary sequential host code (enqueue
 * steps, wait for the GPU, read the energy, decide, enqueue again) becomes a coroutine as it is,
 * without being rewritten as a state machine. Chapter 10's scheduler (md_cuda.cu.h, section
 * sched) resumes each replica until it would wait for the GPU and then turns to another.
 *
 * THE CONTEXT SWITCH (md_co_backend() names the one compiled in):
 *   "asm-x86_64", "asm-aarch64"  GCC or Clang on x86-64 or AArch64 (Linux, the BSDs, macOS; not
 *       Windows): a few lines of inline assembly save the stack pointer, the frame pointer and a
 *       resume address, load the other context's and jump. Every other register is named as
 *       clobbered by the assembly, so the compiler saves exactly the ones its ABI asks a callee
 *       to keep, with no hand-written register list to get wrong. The function holding it is
 *       kept out of inlining and of GCC's interprocedural register allocation (noipa), so
 *       callers assume the full call clobbers. The resume point starts with the landing pad of
 *       indirect-branch tracking (endbr64; on AArch64 BTI "bti j", and the jump into a new
 *       stack goes through x17, which "bti c" accepts), NOPs where that is not enforced. The
 *       x86-64 shadow stack (CET, off unless a program opts in) is not supported.
 *   "ucontext"  other Unix systems, or anywhere with MD_CO_UCONTEXT defined before the
 *       implementation: POSIX getcontext / makecontext / swapcontext. POSIX.1-2004 marked these
 *       obsolescent and POSIX.1-2008 removed them; glibc and musl keep them (macOS deprecates
 *       them, hence the assembly there). swapcontext also saves and restores the signal mask:
 *       a system call per switch, which the assembly avoids. tests/test_co.c runs every test
 *       with both on x86-64.
 *   "none"  anything else (MSVC): md_co_create returns MD_ERR_UNSUPPORTED.
 *
 * STACKS are one MD_MALLOC block each: stack_size bytes (0 takes MD_CO_STACK_DEFAULT, 256 KiB;
 * at least MD_CO_STACK_MIN) with the switch state above them. There is no guard page (memory
 * from MD_MALLOC cannot be protected portably). Instead the lowest MD_CO_CANARY bytes hold a
 * known pattern, checked each time the coroutine hands control back: an overflow that reached
 * it makes md_co_resume return MD_ERR_RANGE. That is after the fact (memory below the stack
 * may already be damaged), so size stacks with room to spare: md_co_stack_used() tells how
 * deep a coroutine went (the stack is painted at create), a coroutine calling the CUDA
 * runtime needs tens of KiB, and AddressSanitizer makes frames several times larger.
 *
 * SANITIZERS. Under AddressSanitizer every switch is announced to it
 * (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber), so it knows which stack
 * is current: no false stack-buffer-overflow reports, and use-after-return detection works.
 * ThreadSanitizer's fiber calls are not made: do not run coroutines under TSan.
 *
 * RULES. A coroutine is resumed from one thread only (code may keep the address of a
 * thread-local variable across a yield). An md_co must not move in memory between create and
 * free (its function holds its address). A coroutine may resume another (it then has state
 * MD_CO_NORMAL until the inner one yields or returns) but never itself or one that resumed it.
 * Returning from the function finishes the coroutine (MD_CO_DEAD). md_co_free drops a
 * suspended coroutine's stack without unwinding it: what its frames hold is not released, so
 * let functions that own resources return. C++ exceptions must not leave the function.
 *
 * EXAMPLE
 *       static void count(md_co *co, void *arg) {
 *           int *x = (int *)arg;
 *           for (;;) { (*x)++; md_co_yield(co); }
 *       }
 *       md_co co; int x = 0;
 *       md_co_create(&co, count, &x, 0);
 *       md_co_resume(&co); md_co_resume(&co);           (x is 2; co is suspended)
 *       md_co_free(&co);
 *
 * REPLICA EXCHANGE (md_remd). Temperature replica exchange runs one copy of a system at each
 * temperature of a ladder T_0 < T_1 < ... and every so often offers neighbouring temperatures
 * to swap their configurations: a swap of k and k + 1, whose replicas have potential energies
 * U_i (at T_k) and U_j (at T_k+1), is accepted with the Metropolis probability
 *       p = min(1, exp[(1/(kB T_k) - 1/(kB T_k+1)) (U_i - U_j)])          (md_remd_probability)
 * which keeps each temperature's canonical distribution. md_remd keeps the ladder, which
 * replica holds which temperature, a seeded md_rng and the statistics, and decides one round of
 * swaps from the energies (md_remd_exchange): the host logic that must read every replica's
 * energy, and why chapter 10 needs the replicas to stop and wait for the GPU at all. */

/** @brief Default coroutine stack (bytes): what md_co_create(co, fn, arg, 0) allocates. */
#define MD_CO_STACK_DEFAULT (256u * 1024u)
/** @brief Smallest stack md_co_create accepts (bytes). */
#define MD_CO_STACK_MIN (16u * 1024u)
/** @brief Bytes at the bottom of every coroutine stack that hold the overflow canary. */
#define MD_CO_CANARY 256u

/** @brief What a coroutine is doing (md_co_status). */
typedef enum md_co_state {
    MD_CO_DEAD = 0,  /**< finished (its function returned), or never created, or freed */
    MD_CO_SUSPENDED, /**< created and not yet started, or stopped in md_co_yield: md_co_resume continues it */
    MD_CO_RUNNING,   /**< running now (it called md_co_status on itself) */
    MD_CO_NORMAL     /**< it resumed another coroutine and waits for that one to yield or finish */
} md_co_state;

/** @brief A coroutine (see the section's manual). Read its fields; change them only through the
 *  md_co_ functions. */
typedef struct md_co md_co;

/** @brief The body of a coroutine: runs on the coroutine's own stack from the first md_co_resume;
 *  @p co is the coroutine (for md_co_yield), @p arg what md_co_create was given. Returning from it
 *  finishes the coroutine. */
typedef void (*md_co_fn)(md_co *co, void *arg);

/** @brief A coroutine: its function, argument, state and stack. */
struct md_co {
    md_co_fn fn;           /**< the body */
    void *arg;             /**< its argument */
    md_co_state state;     /**< what it is doing (md_co_status) */
    void *stack;           /**< lowest address of its stack (the canary's first byte) */
    size_t stack_size;     /**< bytes of stack, the canary included */
    long long resumes;     /**< md_co_resume calls that ran it so far */
    void *impl;            /**< internal: the MD_MALLOC block (stack and switch state); NULL when freed */
};

/** @brief Make a suspended coroutine that will run @p fn(@p co, @p arg) on a stack of its own of
 *  @p stack_size bytes (0: MD_CO_STACK_DEFAULT), allocated with MD_MALLOC and painted (for
 *  md_co_stack_used). Nothing runs until md_co_resume. Errors: NULL @p co or @p fn
 *  (MD_ERR_INVALID_ARGUMENT), @p stack_size below MD_CO_STACK_MIN (MD_ERR_INVALID_ARGUMENT, field
 *  stack_size), out of memory, a build without a context switch (MD_ERR_UNSUPPORTED, see
 *  md_co_backend). On failure @p co is untouched. */
MDDEF md_status md_co_create(md_co *co, md_co_fn fn, void *arg, size_t stack_size);

/** @brief Run @p co from where it stopped (its start, the first time) until it yields or its
 *  function returns; then this returns MD_OK and md_co_status() says which. Errors
 *  (MD_ERR_INVALID_ARGUMENT, field co): a coroutine never created or freed, finished, running or
 *  waiting on one it resumed. MD_ERR_RANGE: the coroutine overflowed its stack as far as the
 *  canary (it is then marked finished and is never run again; memory below its stack may be
 *  damaged). */
MDDEF md_status md_co_resume(md_co *co);

/** @brief From inside coroutine @p co (its function or anything it calls): stop and hand control
 *  back to whoever resumed it; returns MD_OK when it is resumed again. Errors
 *  (MD_ERR_INVALID_ARGUMENT, field co): @p co is not the coroutine running on this thread. */
MDDEF md_status md_co_yield(md_co *co);

/** @brief What @p co is doing (MD_CO_DEAD for NULL, a zeroed, finished or freed coroutine). */
MDDEF md_co_state md_co_status(const md_co *co);

/** @brief The coroutine running on this thread (the innermost, when they nest), or NULL when the
 *  thread runs its own stack. */
MDDEF md_co *md_co_current(void);

/** @brief Most bytes of its stack @p co has used so far (the painted bytes it wrote over, counted
 *  from the top); 0 for a freed coroutine. Exact for a stack the coroutine wrote over; a frame
 *  that reserves space without writing it is not seen. */
MDDEF size_t md_co_stack_used(const md_co *co);

/** @brief The context switch compiled in: "asm-x86_64", "asm-aarch64", "ucontext" or "none". */
MDDEF const char *md_co_backend(void);

/** @brief Free the stack of @p co and zero it (state MD_CO_DEAD). A suspended coroutine is dropped
 *  without unwinding (see the manual); a running one, or one waiting on another it resumed, is
 *  left alone (freeing the stack under it would crash). Safe on a zeroed coroutine. */
MDDEF void md_co_free(md_co *co);

/** @brief Metropolis acceptance probability of swapping the configurations of temperatures
 *  @p t_i and @p t_j (K) whose replicas have potential energies @p u_i and @p u_j (kJ/mol):
 *  min(1, exp[(1/(kB t_i) - 1/(kB t_j)) (u_i - u_j)]), kB = MD_KB. NaN if an input is not finite
 *  or a temperature is not > 0. */
MDDEF double md_remd_probability(double t_i, double t_j, double u_i, double u_j);

/** @brief Fill @p t with @p n temperatures spaced geometrically from @p t_min to @p t_max (K):
 *  t[k] = t_min (t_max / t_min)^(k / (n - 1)), the spacing that gives about equal acceptance
 *  between neighbours when the heat capacity does not depend on T. n = 1 gives t_min. Errors:
 *  NULL @p t, n < 1, temperatures not finite, t_min <= 0 or t_max < t_min
 *  (MD_ERR_INVALID_ARGUMENT). */
MDDEF md_status md_remd_ladder(double *t, int n, double t_min, double t_max);

/** @brief Replica exchange over a temperature ladder: which replica holds which temperature, the
 *  random stream of the decisions and the statistics. Replicas are numbered 0 .. n-1 (the
 *  configurations, which never move between replicas); slots 0 .. n-1 are the temperatures in
 *  ascending order. Made by md_remd_create, released by md_remd_free. */
typedef struct md_remd {
    int n;                  /**< replicas (= temperatures) */
    double *temperature;    /**< n temperatures (K), ascending: slot k */
    int *replica_at;        /**< n: replica holding slot k's temperature */
    int *slot_of;           /**< n: temperature slot of replica r (the inverse of replica_at) */
    md_rng rng;             /**< the decisions' random stream (one uniform per attempted swap) */
    long long rounds;       /**< md_remd_exchange calls so far */
    long long *attempts;    /**< n - 1: swaps attempted between slots k and k + 1 */
    long long *accepts;     /**< n - 1: of those, accepted */
    int *direction;         /**< n: per replica, +1 after it last held slot 0; after it last held slot n-1, -1
                                 if it came there from slot 0 (a round trip under way), else -2; 0 neither yet */
    long long *round_trips; /**< n: per replica, completed round trips slot 0 -> slot n-1 -> slot 0 */
} md_remd;

/** @brief Make a ladder of @p n replicas at temperatures @p temperature (K, n values, strictly
 *  ascending; copied), replica r starting at slot r, with the decisions seeded by @p seed.
 *  Errors: NULL arguments, n < 1, a temperature not finite and > 0 or not above the one before
 *  (MD_ERR_INVALID_ARGUMENT, field temperature[k]), out of memory. On failure @p x is untouched. */
MDDEF md_status md_remd_create(md_remd *x, int n, const double *temperature, uint64_t seed);

/** @brief One round of exchange attempts from the potential energies @p energy[r] (kJ/mol, n
 *  values, indexed by replica). Round m (m = x->rounds, counted from 0) attempts the pairs of
 *  slots (k, k + 1) with k = m mod 2, m mod 2 + 2, ... (even pairs, then odd pairs, alternately),
 *  in ascending k: for each, one md_rng_uniform u is drawn, whatever the energies, and the swap is
 *  accepted when u < md_remd_probability(T_k, T_k+1, U of the replica at k, U of the one at k+1).
 *  The number of draws per round thus depends on n and m only, so the same seed gives the same
 *  stream of uniforms whatever the energies, and the decisions are a function of the energies
 *  alone. An accepted swap exchanges the two replicas' temperature slots.
 *
 *  Outputs (each may be NULL): @p accepted[k] (n - 1 values) 1 if the pair (k, k + 1) swapped this
 *  round, 0 if it was attempted and refused, -1 if not attempted; @p scale[r] (n values) the factor
 *  sqrt(T_new / T_old) by which replica r's velocities are rescaled to its new temperature (1 if
 *  it kept its slot). Errors: NULL @p x or @p energy, an energy not finite (MD_ERR_RANGE, field
 *  energy[r]); on failure nothing changes (the random stream is not advanced). */
MDDEF md_status md_remd_exchange(md_remd *x, const double *energy, int *accepted, double *scale);

/** @brief Fraction of the attempts between slots @p k and @p k + 1 that were accepted (NaN if none
 *  was attempted or @p k is out of range). */
MDDEF double md_remd_acceptance(const md_remd *x, int k);

/** @brief Release the arrays of @p x and zero it; safe on a zeroed one. */
MDDEF void md_remd_free(md_remd *x);

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
    "cpu_simple", "cpu_private", "gpu_global", "gpu_shared", "gpu_warp", "gpu_passes", "gpu_cell", "unknown"};

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

/* The header, title and NATOM records of a DCD of `nframes` frames (md_dcd_write's layout).
 * Returns 0 on a write error. */
static int md__dcd_put_header(FILE *f, int natoms, int nframes, const md_dcd_write_desc *d) {
    unsigned char h[84], title[84], b4[4];
    uint32_t icntrl[20];
    float delta = (float)(d->timestep_ps / MD__AKMA_PS);
    int k, be = d->big_endian != 0;
    memset(h, 0, sizeof h);
    memcpy(h, "CORD", 4);
    memset(icntrl, 0, sizeof icntrl);
    icntrl[0] = (uint32_t)nframes;
    icntrl[2] = 1;
    icntrl[3] = (uint32_t)nframes;
    memcpy(&icntrl[9], &delta, 4);
    icntrl[10] = d->no_cell ? 0 : 1;
    icntrl[19] = 24;
    for (k = 0; k < 20; k++) md__dcd_put32(h + 4 + 4 * k, icntrl[k], be);
    md__dcd_put32(title, 1, be);
    memset(title + 4, ' ', 80);
    memcpy(title + 4, "REMARKS written by md.h", 23);
    md__dcd_put32(b4, (uint32_t)natoms, be);
    return md__dcd_put_record(f, h, 84, be) && md__dcd_put_record(f, title, 84, be) && md__dcd_put_record(f, b4, 4, be);
}

/* One frame: the cell record (unless no_cell) and the X, Y, Z records (Angstrom); `buf` holds
 * 4 natoms bytes. Returns 0 on a write error. */
static int md__dcd_put_frame(FILE *f, unsigned char *buf, const md_float4 *xyzq, const double box[3], int natoms,
                             const md_dcd_write_desc *d) {
    int i, k, ok = 1, be = d->big_endian != 0;
    if (!d->no_cell) {
        double v[6];
        unsigned char c[48];
        v[0] = 10.0 * box[0];
        v[1] = 0.0; /* cos(gamma) */
        v[2] = 10.0 * box[1];
        v[3] = 0.0; /* cos(beta) */
        v[4] = 0.0; /* cos(alpha) */
        v[5] = 10.0 * box[2];
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
            const md_float4 p = xyzq[i];
            float x = (float)(10.0 * (k == 0 ? p.x : k == 1 ? p.y : p.z));
            uint32_t u;
            memcpy(&u, &x, 4);
            md__dcd_put32(buf + 4 * (size_t)i, u, be);
        }
        ok = md__dcd_put_record(f, buf, 4 * (size_t)natoms, be);
    }
    return ok;
}

MDDEF md_status md_dcd_write(const char *path, const md_system *frames, int nframes,
                             const md_dcd_write_desc *desc) {
    const char *fn = "md_dcd_write";
    md_dcd_write_desc d;
    unsigned char *buf;
    char tmp[4096];
    int natoms, fr, i, k, ok = 1;
    FILE *f;
    if (!path || !frames) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path/frames", "is NULL");
    if (nframes < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nframes", "must be >= 1 (got %d)", nframes);
    if (!md__tmp_path(tmp, sizeof tmp, path)) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path", "is too long");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
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
    if (!(f = fopen(tmp, "wb"))) {
        md_free(buf);
        return md_set_error(MD_ERR_IO, tmp, 0, NULL, "cannot open for writing: %s", strerror(errno));
    }
    ok = md__dcd_put_header(f, natoms, nframes, &d);
    for (fr = 0; ok && fr < nframes; fr++) ok = md__dcd_put_frame(f, buf, frames[fr].xyzq, frames[fr].box, natoms, &d);
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

/* ---- ff ---- */

static md_status md__err_index(md_status st, const char *fn, const char *name, long idx, const char *fmt,
                               double value) {
    char field[64];
    snprintf(field, sizeof field, "%s[%ld]", name, idx);
    return md_set_error(st, fn, 0, field, fmt, value);
}

static int md__finite_nonneg(double v) { return isfinite(v) && v >= 0.0; }

MDDEF md_status md_lj_table_create(md_lj_table *t, int ntypes, const double *sigma, const double *epsilon,
                                   md_lj_combine rule) {
    const char *fn = "md_lj_table_create";
    md_lj_table s;
    size_t nt, nt2;
    int a, b;
    if (!t || !sigma || !epsilon)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t/sigma/epsilon", "is NULL");
    if (ntypes < 1 || ntypes > 65536)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "ntypes", "must be in 1..65536 (got %d)", ntypes);
    if (rule != MD_LJ_COMBINE_LB && rule != MD_LJ_COMBINE_GEOMETRIC)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "rule", "unknown combination rule %d", (int)rule);
    for (a = 0; a < ntypes; a++) {
        if (!md__finite_nonneg(sigma[a]))
            return md__err_index(MD_ERR_RANGE, fn, "sigma", a, "must be finite and >= 0 (got %g)", sigma[a]);
        if (!md__finite_nonneg(epsilon[a]))
            return md__err_index(MD_ERR_RANGE, fn, "epsilon", a, "must be finite and >= 0 (got %g)", epsilon[a]);
    }
    nt = (size_t)ntypes;
    nt2 = nt * nt;
    memset(&s, 0, sizeof s);
    s.sigma = (double *)md_alloc_array(nt, sizeof(double));
    s.epsilon = (double *)md_alloc_array(nt, sizeof(double));
    s.c6 = (double *)md_alloc_array(nt2, sizeof(double));
    s.c12 = (double *)md_alloc_array(nt2, sizeof(double));
    if (!s.sigma || !s.epsilon || !s.c6 || !s.c12) {
        md_lj_table_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "ntypes", "cannot allocate %d types", ntypes);
    }
    s.ntypes = ntypes;
    for (a = 0; a < ntypes; a++) {
        s.sigma[a] = sigma[a];
        s.epsilon[a] = epsilon[a];
    }
    for (a = 0; a < ntypes; a++)
        for (b = 0; b < ntypes; b++) {
            double sig = rule == MD_LJ_COMBINE_LB ? 0.5 * (sigma[a] + sigma[b]) : sqrt(sigma[a] * sigma[b]);
            double eps = sqrt(epsilon[a] * epsilon[b]), s6 = sig * sig * sig * sig * sig * sig;
            s.c6[(size_t)a * nt + b] = 4.0 * eps * s6;
            s.c12[(size_t)a * nt + b] = 4.0 * eps * s6 * s6;
        }
    *t = s;
    return MD_OK;
}

static md_status md__lj_pair_check(const char *fn, const md_lj_table *t, int a, int b) {
    if (!t || !t->c6 || !t->c12) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is NULL or empty");
    if (a < 0 || a >= t->ntypes || b < 0 || b >= t->ntypes)
        return md_set_error(MD_ERR_RANGE, fn, 0, "a/b", "types %d, %d outside 0..%d", a, b, t->ntypes - 1);
    return MD_OK;
}

MDDEF md_status md_lj_table_set_pair_c6c12(md_lj_table *t, int a, int b, double c6, double c12) {
    const char *fn = "md_lj_table_set_pair_c6c12";
    md_status st = md__lj_pair_check(fn, t, a, b);
    if (st != MD_OK) return st;
    if (!md__finite_nonneg(c6)) return md_set_error(MD_ERR_RANGE, fn, 0, "c6", "must be finite and >= 0 (got %g)", c6);
    if (!md__finite_nonneg(c12))
        return md_set_error(MD_ERR_RANGE, fn, 0, "c12", "must be finite and >= 0 (got %g)", c12);
    t->c6[(size_t)a * t->ntypes + b] = t->c6[(size_t)b * t->ntypes + a] = c6;
    t->c12[(size_t)a * t->ntypes + b] = t->c12[(size_t)b * t->ntypes + a] = c12;
    return MD_OK;
}

MDDEF md_status md_lj_table_set_pair(md_lj_table *t, int a, int b, double sigma, double epsilon) {
    const char *fn = "md_lj_table_set_pair";
    md_status st = md__lj_pair_check(fn, t, a, b);
    double s6;
    if (st != MD_OK) return st;
    if (!md__finite_nonneg(sigma))
        return md_set_error(MD_ERR_RANGE, fn, 0, "sigma", "must be finite and >= 0 (got %g)", sigma);
    if (!md__finite_nonneg(epsilon))
        return md_set_error(MD_ERR_RANGE, fn, 0, "epsilon", "must be finite and >= 0 (got %g)", epsilon);
    s6 = sigma * sigma * sigma * sigma * sigma * sigma;
    return md_lj_table_set_pair_c6c12(t, a, b, 4.0 * epsilon * s6, 4.0 * epsilon * s6 * s6);
}

MDDEF void md_lj_table_free(md_lj_table *t) {
    if (!t) return;
    md_free(t->sigma);
    md_free(t->epsilon);
    md_free(t->c6);
    md_free(t->c12);
    memset(t, 0, sizeof *t);
}

MDDEF void md_topology_free(md_topology *t) {
    if (!t) return;
    md_free(t->lj_type);
    md_free(t->charge);
    md_free(t->mass);
    md_free(t->bond);
    md_free(t->bond_r0);
    md_free(t->bond_k);
    md_free(t->angle);
    md_free(t->angle_theta0);
    md_free(t->angle_k);
    md_free(t->excl_start);
    md_free(t->excl);
    md_free(t->pair14);
    md_free(t->water);
    md_free(t->constraint);
    md_free(t->constraint_length);
    memset(t, 0, sizeof *t);
}

MDDEF md_status md_topology_alloc(md_topology *t, int n) {
    const char *fn = "md_topology_alloc";
    md_topology s;
    size_t un;
    if (!t) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be at least 1 (got %d)", n);
    un = (size_t)n;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.lj_type = (int *)md_alloc_array(un, sizeof(int));
    s.charge = (float *)md_alloc_array(un, sizeof(float));
    s.mass = (float *)md_alloc_array(un, sizeof(float));
    s.excl_start = (int *)md_alloc_array(un + 1, sizeof(int));
    s.excl = (int *)md_alloc_array(1, sizeof(int));
    if (!s.lj_type || !s.charge || !s.mass || !s.excl_start || !s.excl) {
        md_topology_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate %d atoms", n);
    }
    memset(s.lj_type, 0, un * sizeof(int));
    memset(s.charge, 0, un * sizeof(float));
    memset(s.mass, 0, un * sizeof(float));
    memset(s.excl_start, 0, (un + 1) * sizeof(int));
    *t = s;
    return MD_OK;
}

static md_status md__check_bonds(const char *fn, int n, int nbond, const int *bond) {
    int k;
    if (nbond < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nbond", "must be >= 0 (got %d)", nbond);
    if (nbond > 0 && !bond) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "bond", "is NULL with nbond %d", nbond);
    for (k = 0; k < nbond; k++) {
        int a = bond[2 * k], b = bond[2 * k + 1];
        char field[48];
        snprintf(field, sizeof field, "bond[%d]", k);
        if (a < 0 || a >= n || b < 0 || b >= n)
            return md_set_error(MD_ERR_RANGE, fn, 0, field, "atoms %d-%d outside 0..%d", a, b, n - 1);
        if (a == b) return md_set_error(MD_ERR_RANGE, fn, 0, field, "bonds atom %d to itself", a);
    }
    return MD_OK;
}

MDDEF md_status md_topology_set_bonds(md_topology *t, int nbond, const int *bond, const double *r0,
                                      const double *k) {
    const char *fn = "md_topology_set_bonds";
    int *nb = NULL;
    double *nr0 = NULL, *nk = NULL;
    md_status st;
    size_t m;
    if (!t || t->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is NULL or empty");
    if ((st = md__check_bonds(fn, t->n, nbond, bond)) != MD_OK) return st;
    m = (size_t)nbond;
    if (nbond > 0) {
        nb = (int *)md_alloc_array(2 * m, sizeof(int));
        if (r0) nr0 = (double *)md_alloc_array(m, sizeof(double));
        if (k) nk = (double *)md_alloc_array(m, sizeof(double));
        if (!nb || (r0 && !nr0) || (k && !nk)) {
            md_free(nb);
            md_free(nr0);
            md_free(nk);
            return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "nbond", "cannot allocate %d bonds", nbond);
        }
        memcpy(nb, bond, 2 * m * sizeof(int));
        if (r0) memcpy(nr0, r0, m * sizeof(double));
        if (k) memcpy(nk, k, m * sizeof(double));
    }
    md_free(t->bond);
    md_free(t->bond_r0);
    md_free(t->bond_k);
    t->nbond = nbond;
    t->bond = nb;
    t->bond_r0 = nr0;
    t->bond_k = nk;
    return MD_OK;
}

static int md__cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Exclusions from bonds: a breadth-first search of depth 3 from every atom over the
 * bond graph (CSR adjacency) gives each reachable atom its bond distance 1, 2 or 3;
 * the shortest path wins, so a ring pair that is both 1-3 and 1-4 counts as 1-3. */
MDDEF md_status md_topology_build_exclusions(md_topology *t, const md_exclusion_desc *desc) {
    const char *fn = "md_topology_build_exclusions";
    md_exclusion_desc d;
    md_status st;
    int n, i, k, *adj_start = NULL, *adj = NULL, *dist = NULL, *seen = NULL, *fill = NULL;
    int *es = NULL, *ex = NULL, *p14 = NULL;
    long long nex = 0, n14 = 0;
    if (!t || t->n < 1 || !t->excl_start)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is NULL or not allocated");
    if ((st = md__check_bonds(fn, t->n, t->nbond, t->bond)) != MD_OK) return st;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.pair14 != MD_PAIR14_SCALE && d.pair14 != MD_PAIR14_EXCLUDE && d.pair14 != MD_PAIR14_KEEP)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "pair14", "unknown mode %d", (int)d.pair14);
    if (d.fudge_lj == 0.0) d.fudge_lj = 0.5;
    if (d.fudge_qq == 0.0) d.fudge_qq = 1.0 / 1.2;
    if (!isfinite(d.fudge_lj) || !isfinite(d.fudge_qq))
        return md_set_error(MD_ERR_RANGE, fn, 0, "fudge_lj/fudge_qq", "must be finite");
    n = t->n;
    adj_start = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    adj = (int *)md_alloc_array(2 * (size_t)t->nbond + 1, sizeof(int));
    dist = (int *)md_alloc_array((size_t)n, sizeof(int));
    seen = (int *)md_alloc_array((size_t)n, sizeof(int));
    fill = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    es = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    if (!adj_start || !adj || !dist || !seen || !fill || !es) goto oom;
    memset(adj_start, 0, ((size_t)n + 1) * sizeof(int));
    for (k = 0; k < t->nbond; k++) {
        adj_start[t->bond[2 * k] + 1]++;
        adj_start[t->bond[2 * k + 1] + 1]++;
    }
    for (i = 0; i < n; i++) adj_start[i + 1] += adj_start[i];
    memcpy(fill, adj_start, ((size_t)n + 1) * sizeof(int));
    for (k = 0; k < t->nbond; k++) {
        int a = t->bond[2 * k], b = t->bond[2 * k + 1];
        adj[fill[a]++] = b;
        adj[fill[b]++] = a;
    }
    for (i = 0; i < n; i++) dist[i] = -1;
    /* two passes: 0 counts, 1 fills */
    {
        int pass;
        for (pass = 0; pass < 2; pass++) {
            nex = 0;
            n14 = 0;
            for (i = 0; i < n; i++) {
                int head = 0, tail = 0, row0 = (int)nex;
                seen[tail++] = i;
                dist[i] = 0;
                while (head < tail) {
                    int a = seen[head++], e;
                    if (dist[a] >= 3) continue;
                    for (e = adj_start[a]; e < adj_start[a + 1]; e++) {
                        int b = adj[e];
                        if (dist[b] >= 0) continue;
                        dist[b] = dist[a] + 1;
                        seen[tail++] = b;
                    }
                }
                for (k = 1; k < tail; k++) {
                    int j = seen[k], dj = dist[j];
                    int excluded = dj <= 2 || (dj == 3 && d.pair14 != MD_PAIR14_KEEP);
                    if (excluded) {
                        if (pass) ex[nex] = j;
                        nex++;
                    }
                    if (dj == 3 && d.pair14 == MD_PAIR14_SCALE && i < j) {
                        if (pass) {
                            p14[2 * n14] = i;
                            p14[2 * n14 + 1] = j;
                        }
                        n14++;
                    }
                }
                for (k = 0; k < tail; k++) dist[seen[k]] = -1;
                if (pass) {
                    es[i] = row0;
                    qsort(ex + row0, (size_t)(nex - row0), sizeof(int), md__cmp_int);
                }
                if (nex > INT_MAX - (long long)n) {
                    md_free(adj_start); md_free(adj); md_free(dist); md_free(seen); md_free(fill); md_free(es);
                    md_free(ex); md_free(p14);
                    return md_set_error(MD_ERR_RANGE, fn, 0, "bond", "too many exclusions");
                }
            }
            if (pass == 0) {
                ex = (int *)md_alloc_array((size_t)nex + 1, sizeof(int));
                p14 = (int *)md_alloc_array(2 * (size_t)n14 + 1, sizeof(int));
                if (!ex || !p14) goto oom;
            }
        }
        es[n] = (int)nex;
    }
    md_free(adj_start);
    md_free(adj);
    md_free(dist);
    md_free(seen);
    md_free(fill);
    md_free(t->excl_start);
    md_free(t->excl);
    md_free(t->pair14);
    t->excl_start = es;
    t->excl = ex;
    t->pair14 = p14;
    t->npair14 = (int)n14;
    t->fudge_lj = d.pair14 == MD_PAIR14_SCALE ? d.fudge_lj : 0.0;
    t->fudge_qq = d.pair14 == MD_PAIR14_SCALE ? d.fudge_qq : 0.0;
    return MD_OK;
oom:
    md_free(adj_start);
    md_free(adj);
    md_free(dist);
    md_free(seen);
    md_free(fill);
    md_free(es);
    md_free(ex);
    md_free(p14);
    return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate the exclusion lists of %d atoms", t->n);
}

MDDEF int md_topology_excluded(const md_topology *t, int i, int j) {
    int lo, hi;
    if (!t || !t->excl_start || !t->excl || i < 0 || j < 0 || i >= t->n || j >= t->n || i == j) return 0;
    lo = t->excl_start[i];
    hi = t->excl_start[i + 1] - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, v = t->excl[mid];
        if (v == j) return 1;
        if (v < j) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

/* What every kernel relies on to stay in bounds: n, arrays present, LJ types inside the
 * table, exclusion offsets and partners and 1-4 pairs in range. O(n + exclusions). */
static md_status md__topology_check_fast(const md_topology *t, const md_lj_table *lj, const char *where) {
    int i, k;
    if (!t) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "t", "is NULL");
    if (t->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "t.n", "must be >= 1 (got %d)", t->n);
    if (!t->lj_type || !t->charge || !t->mass || !t->excl_start || !t->excl)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "t", "has unallocated arrays");
    if (lj && (!lj->c6 || !lj->c12 || lj->ntypes < 1))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "lj", "is empty");
    if (lj)
        for (i = 0; i < t->n; i++)
            if (t->lj_type[i] < 0 || t->lj_type[i] >= lj->ntypes)
                return md__err_index(MD_ERR_RANGE, where, "lj_type", i, "outside the LJ table (type %g)",
                                     (double)t->lj_type[i]);
    if (t->excl_start[0] != 0)
        return md_set_error(MD_ERR_RANGE, where, 0, "excl_start[0]", "must be 0 (got %d)", t->excl_start[0]);
    for (i = 0; i < t->n; i++) {
        if (t->excl_start[i + 1] < t->excl_start[i])
            return md__err_index(MD_ERR_RANGE, where, "excl_start", i + 1, "decreases (%g)",
                                 (double)t->excl_start[i + 1]);
        for (k = t->excl_start[i]; k < t->excl_start[i + 1]; k++)
            if (t->excl[k] < 0 || t->excl[k] >= t->n || t->excl[k] == i)
                return md__err_index(MD_ERR_RANGE, where, "excl", k, "partner %g is out of range or the atom itself",
                                     (double)t->excl[k]);
    }
    if (t->npair14 < 0 || (t->npair14 > 0 && !t->pair14))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "pair14", "count %d without pairs", t->npair14);
    for (k = 0; k < 2 * t->npair14; k++)
        if (t->pair14[k] < 0 || t->pair14[k] >= t->n)
            return md__err_index(MD_ERR_RANGE, where, "pair14", k, "atom %g is out of range", (double)t->pair14[k]);
    return MD_OK;
}

MDDEF md_status md_topology_check(const md_topology *t, const md_lj_table *lj, const char *where) {
    md_status st;
    int i, k;
    if (!where) where = "md_topology_check";
    if ((st = md__topology_check_fast(t, lj, where)) != MD_OK) return st;
    for (i = 0; i < t->n; i++) {
        if (!isfinite(t->charge[i])) return md__err_index(MD_ERR_RANGE, where, "charge", i, "is not finite (%g)", t->charge[i]);
        if (!md__finite_nonneg(t->mass[i]))
            return md__err_index(MD_ERR_RANGE, where, "mass", i, "must be finite and >= 0 (got %g)", t->mass[i]);
        for (k = t->excl_start[i]; k < t->excl_start[i + 1]; k++) {
            if (k > t->excl_start[i] && t->excl[k] <= t->excl[k - 1])
                return md__err_index(MD_ERR_RANGE, where, "excl", k, "row is not strictly ascending (partner %g)",
                                     (double)t->excl[k]);
            if (!md_topology_excluded(t, t->excl[k], i))
                return md__err_index(MD_ERR_RANGE, where, "excl", k, "is not symmetric (partner %g does not exclude the atom)",
                                     (double)t->excl[k]);
        }
    }
    if ((st = md__check_bonds(where, t->n, t->nbond, t->bond)) != MD_OK) return st;
    for (k = 0; k < t->npair14; k++)
        if (t->pair14[2 * k] >= t->pair14[2 * k + 1] || !md_topology_excluded(t, t->pair14[2 * k], t->pair14[2 * k + 1]))
            return md__err_index(MD_ERR_RANGE, where, "pair14", 2 * k, "pair must have i < j and be excluded (i = %g)",
                                 (double)t->pair14[2 * k]);
    if (t->nwater < 0 || (t->nwater > 0 && !t->water))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "water", "count %d without atoms", t->nwater);
    for (k = 0; k < 3 * t->nwater; k++)
        if (t->water[k] < 0 || t->water[k] >= t->n)
            return md__err_index(MD_ERR_RANGE, where, "water", k, "atom %g is out of range", (double)t->water[k]);
    if (t->nconstraint < 0 || (t->nconstraint > 0 && (!t->constraint || !t->constraint_length)))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "constraint", "count %d without atoms or lengths",
                            t->nconstraint);
    for (k = 0; k < 2 * t->nconstraint; k++)
        if (t->constraint[k] < 0 || t->constraint[k] >= t->n)
            return md__err_index(MD_ERR_RANGE, where, "constraint", k, "atom %g is out of range", (double)t->constraint[k]);
    return MD_OK;
}

MDDEF md_status md_topology_from_system(md_topology *t, const md_system *sys, int nbond, const int *bond) {
    const char *fn = "md_topology_from_system";
    md_topology s;
    md_status st;
    int i;
    if (!t || !sys) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t/sys", "is NULL");
    if (!sys->xyzq || !sys->mass || !sys->type || sys->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "is empty");
    if ((st = md__check_bonds(fn, sys->n, nbond, bond)) != MD_OK) return st;
    if ((st = md_topology_alloc(&s, sys->n)) != MD_OK) return st;
    for (i = 0; i < sys->n; i++) {
        s.charge[i] = sys->xyzq[i].w;
        s.mass[i] = sys->mass[i];
        s.lj_type[i] = sys->type[i];
    }
    if ((st = md_topology_set_bonds(&s, nbond, bond, NULL, NULL)) != MD_OK ||
        (st = md_topology_build_exclusions(&s, NULL)) != MD_OK) {
        md_topology_free(&s);
        return st;
    }
    *t = s;
    return MD_OK;
}

MDDEF md_status md_topology_set_lj_types_by_name(md_topology *t, const md_system *sys, const char *const *names,
                                                 int count) {
    const char *fn = "md_topology_set_lj_types_by_name";
    int i, k, *type;
    if (!t || !sys || !names || !t->lj_type || !sys->name)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t/sys/names", "is NULL");
    if (t->n != sys->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has %d atoms, the topology %d", sys->n, t->n);
    if (count < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "count", "must be >= 1 (got %d)", count);
    if (!(type = (int *)md_alloc_array((size_t)t->n, sizeof(int)))) return MD_ERR_OUT_OF_MEMORY;
    for (i = 0; i < t->n; i++) {
        for (k = 0; k < count; k++)
            if (names[k] && strcmp(names[k], sys->name[i].s) == 0) break;
        if (k == count) {
            md_free(type);
            return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "name", "atom %d ('%s') is not one of the %d type names",
                                i, sys->name[i].s, count);
        }
        type[i] = k;
    }
    memcpy(t->lj_type, type, (size_t)t->n * sizeof(int));
    md_free(type);
    return MD_OK;
}

MDDEF md_status md_topology_apply_charges(const md_topology *t, md_float4 *xyzq, int n) {
    int i;
    if (!t || !t->charge || !xyzq)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_topology_apply_charges", 0, "t/xyzq", "is NULL");
    if (n != t->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_topology_apply_charges", 0, "n",
                            "is %d, the topology has %d atoms", n, t->n);
    for (i = 0; i < n; i++) xyzq[i].w = t->charge[i];
    return MD_OK;
}

/* ---- nblist ---- */

/* The distinct cells within `reach` cells of c along an axis of `dim` cells, periodic;
 * with few cells the offsets -reach..reach would visit a cell twice. Returns the count. */
static int md__axis_neighbors(int c, int dim, int reach, int *out) {
    int k, m = 0, o;
    for (o = -reach; o <= reach; o++) {
        int v = ((c + o) % dim + dim) % dim, dup = 0;
        for (k = 0; k < m; k++) dup |= out[k] == v;
        if (!dup) out[m++] = v;
    }
    return m;
}

static md_status md__check_coords(const char *fn, const md_float4 *xyzq, int n, int charges) {
    int i;
    for (i = 0; i < n; i++)
        if (!isfinite(xyzq[i].x) || !isfinite(xyzq[i].y) || !isfinite(xyzq[i].z) || (charges && !isfinite(xyzq[i].w))) {
            char field[40];
            snprintf(field, sizeof field, "xyzq[%d]", i);
            return md_set_error(MD_ERR_RANGE, fn, 0, field, "is not finite (%g %g %g %g)", xyzq[i].x, xyzq[i].y,
                                xyzq[i].z, xyzq[i].w);
        }
    return MD_OK;
}

/* Cell index of one coordinate: wrapped into [0, L) in double, scaled, clamped. */
static int md__cell_coord(double x, double L, int dim) {
    double s = x / L;
    int c;
    s -= floor(s);
    c = (int)(s * dim);
    return c < 0 ? 0 : (c >= dim ? dim - 1 : c);
}

MDDEF md_status md_cell_list_build(md_cell_list *cl, const md_float4 *xyzq, int n, const double box[3],
                                   double min_cell) {
    const char *fn = "md_cell_list_build";
    long long dims[3], limit, ncell;
    int d, i, c, *start, *atom, *cell_of;
    md_status st;
    if (!cl || !xyzq || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "cl/xyzq/box", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (!(min_cell > 0.0) || !isfinite(min_cell))
        return md_set_error(MD_ERR_RANGE, fn, 0, "min_cell", "must be finite and > 0 (got %g)", min_cell);
    for (d = 0; d < 3; d++) {
        if (!(box[d] > 0.0) || !isfinite(box[d]) || box[d] < min_cell)
            return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and >= min_cell %g (got %g %g %g)",
                                min_cell, box[0], box[1], box[2]);
        dims[d] = (long long)floor(box[d] / min_cell);
        if (dims[d] < 1) dims[d] = 1;
        if (dims[d] > 1000000) dims[d] = 1000000;
    }
    /* Never more cells than a few per atom: halving the largest dimension keeps every
     * cell edge >= min_cell. */
    limit = 8LL * n > 64 ? 8LL * n : 64;
    while (dims[0] * dims[1] * dims[2] > limit) {
        int big = dims[1] > dims[0] ? 1 : 0;
        if (dims[2] > dims[big]) big = 2;
        dims[big] = (dims[big] + 1) / 2;
    }
    if ((st = md__check_coords(fn, xyzq, n, 0)) != MD_OK) return st;
    ncell = dims[0] * dims[1] * dims[2];
    start = cl->start;
    atom = cl->atom;
    cell_of = cl->cell_of;
    if (ncell + 1 > cl->cap_cells) start = (int *)md_alloc_array((size_t)ncell + 1, sizeof(int));
    if (n > cl->cap_atoms) {
        atom = (int *)md_alloc_array((size_t)n, sizeof(int));
        cell_of = (int *)md_alloc_array((size_t)n, sizeof(int));
    }
    if (!start || !atom || !cell_of) {
        if (start != cl->start) md_free(start);
        if (atom != cl->atom) md_free(atom);
        if (cell_of != cl->cell_of) md_free(cell_of);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate a cell list of %d atoms", n);
    }
    if (start != cl->start) {
        md_free(cl->start);
        cl->start = start;
        cl->cap_cells = (int)ncell + 1;
    }
    if (atom != cl->atom) {
        md_free(cl->atom);
        md_free(cl->cell_of);
        cl->atom = atom;
        cl->cell_of = cell_of;
        cl->cap_atoms = n;
    }
    cl->n = n;
    for (d = 0; d < 3; d++) {
        cl->dim[d] = (int)dims[d];
        cl->cell[d] = box[d] / (double)dims[d];
    }
    memset(start, 0, ((size_t)ncell + 1) * sizeof(int));
    for (i = 0; i < n; i++) {
        int cx = md__cell_coord(xyzq[i].x, box[0], cl->dim[0]);
        int cy = md__cell_coord(xyzq[i].y, box[1], cl->dim[1]);
        int cz = md__cell_coord(xyzq[i].z, box[2], cl->dim[2]);
        cell_of[i] = (cz * cl->dim[1] + cy) * cl->dim[0] + cx;
        start[cell_of[i] + 1]++;
    }
    for (c = 0; c < ncell; c++) start[c + 1] += start[c];
    /* fill in ascending atom order (stable counting sort); start[c] runs ahead, then is restored */
    for (i = 0; i < n; i++) atom[start[cell_of[i]]++] = i;
    for (c = (int)ncell; c > 0; c--) start[c] = start[c - 1];
    start[0] = 0;
    return MD_OK;
}

MDDEF void md_cell_list_free(md_cell_list *cl) {
    if (!cl) return;
    md_free(cl->start);
    md_free(cl->atom);
    md_free(cl->cell_of);
    memset(cl, 0, sizeof *cl);
}

MDDEF void md_verlet_list_free(md_verlet_list *vl) {
    if (!vl) return;
    md_free(vl->start);
    md_free(vl->j);
    memset(vl, 0, sizeof *vl);
}

/* Minimum-image squared distance in double (the lists' and the double rungs' rule):
 * d - L rint(d / L) per axis, the division skipped when |d| <= L/2 (rint gives 0 there). */
static double md__dist2_f64(const md_float4 *a, const md_float4 *b, const double box[3], double d[3]) {
    double dx = (double)a->x - (double)b->x, dy = (double)a->y - (double)b->y, dz = (double)a->z - (double)b->z;
    if (fabs(dx) > 0.5 * box[0]) dx -= box[0] * rint(dx / box[0]);
    if (fabs(dy) > 0.5 * box[1]) dy -= box[1] * rint(dy / box[1]);
    if (fabs(dz) > 0.5 * box[2]) dz -= box[2] * rint(dz / box[2]);
    d[0] = dx;
    d[1] = dy;
    d[2] = dz;
    return dx * dx + dy * dy + dz * dz;
}

/* Visit the candidate partners of atom i in the cell list: every atom of the distinct
 * cells around i's cell (one cell each way, cells >= the search radius). `fn(ctx, i, j)`
 * is called for every j != i; the caller filters j > i, exclusions and distance. */
typedef void (*md__pair_visitor)(void *ctx, int i, int j);
static void md__cells_visit(const md_cell_list *cl, int i, md__pair_visitor fn, void *ctx) {
    int nx[3], ny[3], nz[3], mx, my, mz, a, b, c, k;
    int cidx = cl->cell_of[i], cx, cy, cz;
    cx = cidx % cl->dim[0];
    cy = (cidx / cl->dim[0]) % cl->dim[1];
    cz = cidx / (cl->dim[0] * cl->dim[1]);
    mx = md__axis_neighbors(cx, cl->dim[0], 1, nx);
    my = md__axis_neighbors(cy, cl->dim[1], 1, ny);
    mz = md__axis_neighbors(cz, cl->dim[2], 1, nz);
    for (c = 0; c < mz; c++)
        for (b = 0; b < my; b++)
            for (a = 0; a < mx; a++) {
                int cell = (nz[c] * cl->dim[1] + ny[b]) * cl->dim[0] + nx[a];
                for (k = cl->start[cell]; k < cl->start[cell + 1]; k++)
                    if (cl->atom[k] != i) fn(ctx, i, cl->atom[k]);
            }
}

typedef struct md__vl_ctx {
    const md_float4 *xyzq;
    const double *box;
    double rlist2;
    int full;
    const int *mark; /* mark[j] == i: j is excluded from i */
    int *row;        /* NULL in the counting pass */
    int count;
} md__vl_ctx;

static void md__vl_visit(void *vctx, int i, int j) {
    md__vl_ctx *c = (md__vl_ctx *)vctx;
    double d[3];
    if (!c->full && j < i) return;
    if (c->mark[j] == i) return;
    if (md__dist2_f64(&c->xyzq[i], &c->xyzq[j], c->box, d) >= c->rlist2) return;
    if (c->row) c->row[c->count] = j;
    c->count++;
}

static void md__mark_exclusions(const md_topology *t, int i, int *mark) {
    int k;
    if (!t) return;
    for (k = t->excl_start[i]; k < t->excl_start[i + 1]; k++) mark[t->excl[k]] = i;
}

MDDEF md_status md_verlet_list_build(md_verlet_list *vl, md_cell_list *cl, const md_float4 *xyzq, int n,
                                     const double box[3], double rlist, int full, const md_topology *t) {
    const char *fn = "md_verlet_list_build";
    md_status st;
    md__vl_ctx ctx;
    int i, *start = NULL, *mark = NULL, *jj = NULL;
    size_t total = 0;
    double half;
    if (!vl || !cl || !xyzq || !box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "vl/cl/xyzq/box", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (t && (st = md__topology_check_fast(t, NULL, fn)) != MD_OK) return st;
    if (t && t->n != n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has %d atoms, n is %d", t->n, n);
    if (!(rlist > 0.0) || !isfinite(rlist))
        return md_set_error(MD_ERR_RANGE, fn, 0, "rlist", "must be finite and > 0 (got %g)", rlist);
    half = 0.5 * (box[0] < box[1] ? (box[0] < box[2] ? box[0] : box[2]) : (box[1] < box[2] ? box[1] : box[2]));
    if (!(rlist <= half))
        return md_set_error(MD_ERR_RANGE, fn, 0, "rlist", "%g nm is more than half the shortest box edge (%g nm)",
                            rlist, 2.0 * half);
    if ((st = md_cell_list_build(cl, xyzq, n, box, rlist)) != MD_OK) return st;
    start = (int *)md_alloc_array((size_t)n + 1, sizeof(int));
    mark = (int *)md_alloc_array((size_t)n, sizeof(int));
    if (!start || !mark) goto oom;
    for (i = 0; i < n; i++) mark[i] = -1;
    ctx.xyzq = xyzq;
    ctx.box = box;
    ctx.rlist2 = rlist * rlist;
    ctx.full = full ? 1 : 0;
    ctx.mark = mark;
    ctx.row = NULL;
    for (i = 0; i < n; i++) { /* pass 1: count */
        ctx.count = 0;
        md__mark_exclusions(t, i, mark);
        md__cells_visit(cl, i, md__vl_visit, &ctx);
        start[i] = (int)total;
        total += (size_t)ctx.count;
        if (total > (size_t)INT_MAX) {
            md_free(start);
            md_free(mark);
            return md_set_error(MD_ERR_RANGE, fn, 0, "rlist", "more than %d pairs within %g nm", INT_MAX, rlist);
        }
    }
    start[n] = (int)total;
    if (total + 1 > vl->cap) {
        if (!(jj = (int *)md_alloc_array(total + 1, sizeof(int)))) goto oom;
    } else {
        jj = vl->j;
    }
    for (i = 0; i < n; i++) mark[i] = -1;
    for (i = 0; i < n; i++) { /* pass 2: fill, then sort the row */
        ctx.count = 0;
        ctx.row = jj + start[i];
        md__mark_exclusions(t, i, mark);
        md__cells_visit(cl, i, md__vl_visit, &ctx);
        qsort(ctx.row, (size_t)ctx.count, sizeof(int), md__cmp_int);
    }
    if (jj != vl->j) {
        md_free(vl->j);
        vl->j = jj;
        vl->cap = total + 1;
    }
    md_free(vl->start);
    vl->start = start;
    vl->cap_rows = n + 1;
    vl->n = n;
    vl->full = ctx.full;
    vl->rlist = rlist;
    vl->npairs = total;
    md_free(mark);
    return MD_OK;
oom:
    md_free(start);
    md_free(mark);
    return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate a Verlet list of %d atoms", n);
}

/* ---- nb ---- */

static const char *const md__nb_names[MD_NB_VARIANT_COUNT + 1] = {
    "cpu_all_pairs", "cpu_cell_list", "cpu_verlet", "cpu_verlet_full", "cpu_fixed",
    "gpu_tiles", "gpu_full_list", "gpu_half_list", "gpu_cluster", "gpu_cluster_smem", "unknown"};

MDDEF const char *md_nb_variant_name(md_nb_variant variant) {
    if ((int)variant < 0 || variant >= MD_NB_VARIANT_COUNT) return "unknown";
    return md__nb_names[variant];
}

MDDEF int md_nb_variant_is_gpu(md_nb_variant variant) {
    return variant >= MD_NB_GPU_TILES && variant < MD_NB_VARIANT_COUNT;
}

MDDEF double md_ewald_beta(double cutoff, double tolerance) { return sqrt(-log(2.0 * tolerance)) / cutoff; }

MDDEF md_status md_nb_params_resolve(const md_nb_params *in, md_nb_params *out) {
    const char *fn = "md_nb_params_resolve";
    md_nb_params p;
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "out", "is NULL");
    if (in) p = *in;
    else memset(&p, 0, sizeof p);
    if (p.cutoff == 0.0) p.cutoff = MD_NB_DEFAULT_CUTOFF;
    if (!(p.cutoff > 0.0) || !isfinite(p.cutoff))
        return md_set_error(MD_ERR_RANGE, fn, 0, "cutoff", "must be finite and > 0 (got %g)", p.cutoff);
    if (p.buffer == 0.0) p.buffer = MD_NB_DEFAULT_BUFFER;
    if (!isfinite(p.buffer)) return md_set_error(MD_ERR_RANGE, fn, 0, "buffer", "must be finite (got %g)", p.buffer);
    if (p.buffer < 0.0) p.buffer = 0.0;
    if ((int)p.lj < (int)MD_LJ_DEFAULT || (int)p.lj > (int)MD_LJ_NONE)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "lj", "unknown LJ mode %d", (int)p.lj);
    if (p.lj == MD_LJ_DEFAULT) p.lj = MD_LJ_POTENTIAL_SHIFT;
    if (p.lj == MD_LJ_FORCE_SWITCH) {
        if (p.switch_radius == 0.0) p.switch_radius = 0.9 * p.cutoff;
        if (!(p.switch_radius > 0.0 && p.switch_radius < p.cutoff))
            return md_set_error(MD_ERR_RANGE, fn, 0, "switch_radius", "must be in (0, cutoff %g) (got %g)", p.cutoff,
                                p.switch_radius);
    } else {
        p.switch_radius = 0.0;
    }
    if ((int)p.coul < (int)MD_COUL_DEFAULT || (int)p.coul > (int)MD_COUL_NONE)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "coul", "unknown Coulomb mode %d", (int)p.coul);
    if (p.coul == MD_COUL_DEFAULT) p.coul = MD_COUL_EWALD;
    if (p.coul == MD_COUL_REACTION_FIELD) {
        if (p.epsilon_rf != 0.0 && !(p.epsilon_rf >= 1.0 && isfinite(p.epsilon_rf)))
            return md_set_error(MD_ERR_RANGE, fn, 0, "epsilon_rf", "must be 0 (infinity) or finite and >= 1 (got %g)",
                                p.epsilon_rf);
    } else {
        p.epsilon_rf = 0.0;
    }
    if (p.coul == MD_COUL_EWALD) {
        if (p.ewald_tolerance == 0.0) p.ewald_tolerance = MD_NB_DEFAULT_EWALD_TOLERANCE;
        if (!(p.ewald_tolerance > 0.0 && p.ewald_tolerance < 0.5))
            return md_set_error(MD_ERR_RANGE, fn, 0, "ewald_tolerance", "must be in (0, 0.5) (got %g)",
                                p.ewald_tolerance);
        if (p.ewald_beta == 0.0) p.ewald_beta = md_ewald_beta(p.cutoff, p.ewald_tolerance);
        if (!(p.ewald_beta > 0.0) || !isfinite(p.ewald_beta))
            return md_set_error(MD_ERR_RANGE, fn, 0, "ewald_beta", "must be finite and > 0 (got %g)", p.ewald_beta);
    } else {
        p.ewald_beta = 0.0;
        p.ewald_tolerance = 0.0;
    }
    p.dispersion_correction = p.dispersion_correction ? 1 : 0;
    *out = p;
    return MD_OK;
}

/* Force-switch constants of one r^-alpha term (GROMACS manual, "Modified non-bonded
 * interactions"): F(r) = alpha / r^(alpha+1) + A (r - r1)^2 + B (r - r1)^3 for r1 <= r < rc,
 * the potential 1/r^alpha - A/3 (r - r1)^3 - B/4 (r - r1)^4 - C, so that F and the
 * potential vanish at rc. */
static void md__force_switch(double alpha, double r1, double rc, double *A, double *B, double *C) {
    double w = rc - r1, rca2 = pow(rc, alpha + 2.0);
    *A = -alpha * ((alpha + 4.0) * rc - (alpha + 1.0) * r1) / (rca2 * w * w);
    *B = alpha * ((alpha + 3.0) * rc - (alpha + 1.0) * r1) / (rca2 * w * w * w);
    *C = pow(rc, -alpha) - *A / 3.0 * w * w * w - *B / 4.0 * w * w * w * w;
}

/* The double constants of the reference rungs. */
typedef struct md__nbk {
    int lj, coul;
    double rc2, beta, b2spi, krf, crf, sh6, sh12, rsw, a6, b6, a12, b12;
} md__nbk;

static void md__nbk_make(const md_nb_params *p, md__nbk *k) {
    double rc = p->cutoff, c6dummy;
    memset(k, 0, sizeof *k);
    k->lj = (int)p->lj;
    k->coul = (int)p->coul;
    k->rc2 = rc * rc;
    k->beta = p->ewald_beta;
    k->b2spi = 2.0 * p->ewald_beta / sqrt(3.14159265358979323846);
    if (p->coul == MD_COUL_REACTION_FIELD) {
        k->krf = p->epsilon_rf == 0.0 ? 0.5 / (rc * rc * rc)
                                      : (p->epsilon_rf - 1.0) / ((2.0 * p->epsilon_rf + 1.0) * rc * rc * rc);
        k->crf = 1.0 / rc + k->krf * rc * rc;
    }
    if (p->lj == MD_LJ_POTENTIAL_SHIFT) {
        k->sh6 = pow(rc, -6.0);
        k->sh12 = pow(rc, -12.0);
    } else if (p->lj == MD_LJ_FORCE_SWITCH) {
        k->rsw = p->switch_radius;
        md__force_switch(6.0, p->switch_radius, rc, &k->a6, &k->b6, &k->sh6);
        md__force_switch(12.0, p->switch_radius, rc, &k->a12, &k->b12, &k->sh12);
    }
    (void)c6dummy;
}

MDDEF md_status md_nb_coeffs_make(const md_nb_params *params, md_nb_coeffs *k) {
    md_nb_params p;
    md__nbk d;
    md_status st;
    if (!k) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_nb_coeffs_make", 0, "k", "is NULL");
    if ((st = md_nb_params_resolve(params, &p)) != MD_OK) return st;
    md__nbk_make(&p, &d);
    memset(k, 0, sizeof *k);
    k->lj = d.lj;
    k->coul = d.coul;
    k->rc2 = (float)d.rc2;
    k->coulomb = (float)MD_COULOMB;
    k->beta = (float)d.beta;
    k->beta_2_sqrtpi = (float)d.b2spi;
    k->krf = (float)d.krf;
    k->krf2 = (float)(2.0 * d.krf);
    k->crf = (float)d.crf;
    k->sh6 = (float)d.sh6;
    k->sh12 = (float)d.sh12;
    k->rsw = (float)d.rsw;
    k->a6 = (float)d.a6;
    k->b6 = (float)d.b6;
    k->a12 = (float)d.a12;
    k->b12 = (float)d.b12;
    k->a6_3 = (float)(d.a6 / 3.0);
    k->b6_4 = (float)(d.b6 / 4.0);
    k->a12_3 = (float)(d.a12 / 3.0);
    k->b12_4 = (float)(d.b12 / 4.0);
    return MD_OK;
}

/* One non-excluded pair within the cutoff in double: returns F/r, writes the energies.
 * The formulas of md_nb_pair_f32 in double, written plainly. */
static double md__nb_pair_f64(const md__nbk *k, double r2, double qq, double c6, double c12, double *elj,
                              double *ec) {
    double rinv2 = 1.0 / r2, fr = 0.0;
    *elj = 0.0;
    *ec = 0.0;
    if (k->lj != (int)MD_LJ_NONE) {
        double ir6 = rinv2 * rinv2 * rinv2, ir12 = ir6 * ir6;
        fr = 12.0 * c12 * ir12 - 6.0 * c6 * ir6;
        if (k->lj == (int)MD_LJ_TRUNCATE) {
            *elj = c12 * ir12 - c6 * ir6;
        } else if (k->lj == (int)MD_LJ_POTENTIAL_SHIFT) {
            *elj = c12 * (ir12 - k->sh12) - c6 * (ir6 - k->sh6);
        } else {
            double r = sqrt(r2);
            if (r > k->rsw) {
                double dr = r - k->rsw, dr2 = dr * dr, dr3 = dr2 * dr;
                double p12 = ir12 - k->a12 / 3.0 * dr3 - k->b12 / 4.0 * dr3 * dr - k->sh12;
                double p6 = ir6 - k->a6 / 3.0 * dr3 - k->b6 / 4.0 * dr3 * dr - k->sh6;
                *elj = c12 * p12 - c6 * p6;
                fr += r * dr2 * (c12 * (k->a12 + k->b12 * dr) - c6 * (k->a6 + k->b6 * dr));
            } else {
                *elj = c12 * (ir12 - k->sh12) - c6 * (ir6 - k->sh6);
            }
        }
    }
    if (k->coul != (int)MD_COUL_NONE) {
        double kqq = MD_COULOMB * qq, r = sqrt(r2), rinv = 1.0 / r;
        if (k->coul == (int)MD_COUL_EWALD) {
            double br = k->beta * r, erfc_rinv = erfc(br) * rinv;
            *ec = kqq * erfc_rinv;
            fr += kqq * (erfc_rinv + k->b2spi * exp(-br * br));
        } else if (k->coul == (int)MD_COUL_REACTION_FIELD) {
            *ec = kqq * (rinv + k->krf * r2 - k->crf);
            fr += kqq * (rinv - 2.0 * k->krf * r2);
        } else {
            *ec = kqq * rinv;
            fr += kqq * rinv;
        }
    }
    return fr * rinv2;
}

/* Ewald exclusion correction of one excluded pair in double: E = -k qq erf(beta r) / r. */
static double md__nb_excl_f64(const md__nbk *k, double r2, double qq, double *ec) {
    double kqq = MD_COULOMB * qq, r, br, erf_rinv;
    if (r2 <= 0.0) {
        *ec = -kqq * k->b2spi;
        return 0.0;
    }
    r = sqrt(r2);
    br = k->beta * r;
    erf_rinv = erf(br) / r;
    *ec = -kqq * erf_rinv;
    return kqq * (k->b2spi * exp(-br * br) - erf_rinv) / r2;
}

/* A scaled 1-4 pair in double (plain LJ and Coulomb, no cutoff). */
static double md__nb_pair14_f64(double r2, double qq, double c6, double c12, double *elj, double *ec) {
    double rinv2 = 1.0 / r2, ir6 = rinv2 * rinv2 * rinv2, ir12 = ir6 * ir6, rinv = sqrt(rinv2);
    *elj = c12 * ir12 - c6 * ir6;
    *ec = MD_COULOMB * qq * rinv;
    return (12.0 * c12 * ir12 - 6.0 * c6 * ir6 + *ec) * rinv2;
}

MDDEF double md_energy_potential(const md_energy *e) {
    if (!e) return 0.0;
    return e->lj + e->lj_dispersion + e->lj14 + e->coul_real + e->coul14 + e->coul_excl + e->coul_recip +
           e->coul_self + e->bonded;
}

MDDEF double md_energy_total(const md_energy *e) { return e ? md_energy_potential(e) + e->kinetic : 0.0; }

static md_status md__nb_check_box(const char *where, const md_nb_params *p, const double box[3], double reach) {
    double shortest;
    int d;
    if (!box) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "box", "is NULL");
    for (d = 0; d < 3; d++)
        if (!(box[d] > 0.0) || !isfinite(box[d]))
            return md_set_error(MD_ERR_RANGE, where, 0, "box", "edges must be finite and > 0 (got %g %g %g)", box[0],
                                box[1], box[2]);
    shortest = box[0] < box[1] ? box[0] : box[1];
    if (box[2] < shortest) shortest = box[2];
    if (reach > 0.5 * shortest) {
        if (reach > p->cutoff)
            return md_set_error(MD_ERR_RANGE, where, 0, "cutoff",
                                "cutoff + buffer = %g + %g nm is more than half the shortest box edge (%g / 2 nm): "
                                "the minimum image would miss pairs",
                                p->cutoff, p->buffer, shortest);
        return md_set_error(MD_ERR_RANGE, where, 0, "cutoff",
                            "%g nm is more than half the shortest box edge (%g / 2 nm): the minimum image would miss pairs",
                            p->cutoff, shortest);
    }
    return MD_OK;
}

MDDEF md_status md_nb_check_box(const char *where, const md_nb_params *params, const double box[3]) {
    if (!params) return md_set_error(MD_ERR_INVALID_ARGUMENT, where ? where : "md_nb_check_box", 0, "params", "is NULL");
    return md__nb_check_box(where ? where : "md_nb_check_box", params, box, params->cutoff + params->buffer);
}

MDDEF double md_nb_self_energy(const md_nb_params *params, const md_float4 *xyzq, int n) {
    double q2 = 0.0;
    int i;
    if (!params || !xyzq || params->coul != MD_COUL_EWALD) return 0.0;
    for (i = 0; i < n; i++) q2 += (double)xyzq[i].w * xyzq[i].w;
    return -MD_COULOMB * params->ewald_beta / sqrt(3.14159265358979323846) * q2;
}

MDDEF md_status md_nb_dispersion_correction(const md_nb_params *params, const md_topology *t,
                                            const md_lj_table *lj, const double box[3], double *energy,
                                            double *virial_diag) {
    const char *fn = "md_nb_dispersion_correction";
    double *count, s6 = 0.0, s12 = 0.0, npairs, N, V, rc, pre;
    md_status st;
    int a, b, i, nt;
    if (!params || !energy || !virial_diag || !box)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "params/energy/virial_diag/box", "is NULL");
    if (!params->dispersion_correction || params->lj == MD_LJ_NONE) {
        *energy = 0.0;
        *virial_diag = 0.0;
        return MD_OK;
    }
    if ((st = md__topology_check_fast(t, lj, fn)) != MD_OK) return st;
    if (!(box[0] > 0 && box[1] > 0 && box[2] > 0) || !isfinite(box[0] * box[1] * box[2]))
        return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and > 0");
    nt = lj->ntypes;
    if (!(count = (double *)md_alloc_array((size_t)nt, sizeof(double)))) return MD_ERR_OUT_OF_MEMORY;
    for (a = 0; a < nt; a++) count[a] = 0.0;
    for (i = 0; i < t->n; i++) count[t->lj_type[i]] += 1.0;
    for (a = 0; a < nt; a++) {
        if (count[a] == 0.0) continue;
        for (b = a; b < nt; b++) {
            double pairs = a == b ? count[a] * (count[a] + 1.0) / 2.0 : count[a] * count[b];
            s6 += pairs * lj->c6[(size_t)a * nt + b];
            s12 += pairs * lj->c12[(size_t)a * nt + b];
        }
    }
    md_free(count);
    N = (double)t->n;
    npairs = N * (N + 1.0) / 2.0;
    s6 /= npairs;
    s12 /= npairs;
    V = box[0] * box[1] * box[2];
    rc = params->cutoff;
    pre = 2.0 * 3.14159265358979323846 * N * N / V;
    *energy = pre * (s12 / (9.0 * pow(rc, 9.0)) - s6 / (3.0 * rc * rc * rc));
    *virial_diag = pre * (4.0 * s12 / (9.0 * pow(rc, 9.0)) - 2.0 * s6 / (3.0 * rc * rc * rc));
    return MD_OK;
}

MDDEF void md_nb_plan_free(md_nb_plan *p) {
    if (!p) return;
    md_cell_list_free(&p->cells);
    md_verlet_list_free(&p->list);
    md_free(p->ref_xyz);
    md_free(p->scratch);
    md_free(p->fixed_force);
    md_free(p->mark);
    memset(p, 0, sizeof *p);
}

MDDEF md_status md_nb_plan_create(md_nb_plan *p, const md_nb_params *params, int n) {
    const char *fn = "md_nb_plan_create";
    md_nb_plan s;
    md_status st;
    size_t un;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    memset(&s, 0, sizeof s);
    if ((st = md_nb_params_resolve(params, &s.params)) != MD_OK) return st;
    if ((st = md_nb_coeffs_make(&s.params, &s.coeffs)) != MD_OK) return st;
    un = (size_t)n;
    s.n = n;
    s.ref_xyz = (float *)md_alloc_array(3 * un, sizeof(float));
    s.scratch = (double *)md_alloc_array(3 * un, sizeof(double));
    s.fixed_force = (md_fixed *)md_alloc_array(3 * un, sizeof(md_fixed));
    s.mark = (int *)md_alloc_array(un, sizeof(int));
    if (!s.ref_xyz || !s.scratch || !s.fixed_force || !s.mark) {
        md_nb_plan_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate a plan for %d atoms", n);
    }
    memset(s.fixed_force, 0, 3 * un * sizeof(md_fixed));
    *p = s;
    return MD_OK;
}

MDDEF void md_nb_plan_invalidate(md_nb_plan *p) {
    if (p) p->list_valid = 0;
}

MDDEF md_status md_nb_plan_update_list(md_nb_plan *p, const md_topology *t, const md_float4 *xyzq,
                                       const double box[3], int full, int *rebuilt) {
    const char *fn = "md_nb_plan_update_list";
    md_status st;
    int i, need, d;
    if (!p || !p->ref_xyz || !t || !xyzq || !box)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p/t/xyzq/box", "is NULL");
    if (t->n != p->n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has %d atoms, the plan %d", t->n, p->n);
    if ((st = md__nb_check_box(fn, &p->params, box, p->params.cutoff + p->params.buffer)) != MD_OK) return st;
    full = full ? 1 : 0;
    need = !p->list_valid || p->list.full != full || p->list.n != p->n;
    for (d = 0; d < 3; d++) need |= box[d] != p->ref_box[d];
    if (!need) {
        double max2 = 0.0, lim;
        for (i = 0; i < p->n; i++) {
            double dd[3], r2;
            md_float4 ref;
            ref.x = p->ref_xyz[3 * i];
            ref.y = p->ref_xyz[3 * i + 1];
            ref.z = p->ref_xyz[3 * i + 2];
            ref.w = 0.0f;
            r2 = md__dist2_f64(&xyzq[i], &ref, box, dd);
            if (!(r2 <= max2)) max2 = r2; /* a NaN coordinate also forces a rebuild (which rejects it) */
        }
        p->max_displacement = sqrt(max2);
        lim = 0.5 * p->params.buffer;
        need = !(max2 <= lim * lim);
    }
    if (rebuilt) *rebuilt = 0;
    if (!need) return MD_OK;
    if ((st = md_verlet_list_build(&p->list, &p->cells, xyzq, p->n, box, p->params.cutoff + p->params.buffer, full,
                                   t)) != MD_OK) {
        p->list_valid = 0;
        return st;
    }
    for (i = 0; i < p->n; i++) {
        p->ref_xyz[3 * i] = xyzq[i].x;
        p->ref_xyz[3 * i + 1] = xyzq[i].y;
        p->ref_xyz[3 * i + 2] = xyzq[i].z;
    }
    for (d = 0; d < 3; d++) p->ref_box[d] = box[d];
    p->list_valid = 1;
    p->rebuilds++;
    p->max_displacement = 0.0;
    if (rebuilt) *rebuilt = 1;
    return MD_OK;
}

/* ---- the double rungs: one pair at a time into scratch forces, energies and virial ---- */

typedef struct md__nb_acc {
    const md__nbk *k;
    const md_lj_table *lj;
    const int *type;
    const md_float4 *xyzq;
    const double *box;
    double *f;
    double lj_e, coul_e, w[9];
} md__nb_acc;

/* Pair (i, j) in double if within the cutoff; `weight` 1 adds -F to j (half lists and all
 * pairs), 0.5 with j untouched is the full-list form. */
static void md__nb_acc_pair(md__nb_acc *a, int i, int j, int full) {
    double d[3], r2 = md__dist2_f64(&a->xyzq[i], &a->xyzq[j], a->box, d), elj, ec, fs;
    size_t tij;
    int x, y;
    if (!(r2 < a->k->rc2)) return;
    tij = (size_t)a->type[i] * (size_t)a->lj->ntypes + (size_t)a->type[j];
    fs = md__nb_pair_f64(a->k, r2, (double)a->xyzq[i].w * a->xyzq[j].w, a->lj->c6[tij], a->lj->c12[tij], &elj, &ec);
    for (x = 0; x < 3; x++) a->f[3 * i + x] += fs * d[x];
    if (full) {
        a->lj_e += 0.5 * elj;
        a->coul_e += 0.5 * ec;
        for (x = 0; x < 3; x++)
            for (y = 0; y < 3; y++) a->w[3 * x + y] += 0.5 * d[x] * fs * d[y];
    } else {
        for (x = 0; x < 3; x++) a->f[3 * j + x] -= fs * d[x];
        a->lj_e += elj;
        a->coul_e += ec;
        for (x = 0; x < 3; x++)
            for (y = 0; y < 3; y++) a->w[3 * x + y] += d[x] * fs * d[y];
    }
}

typedef struct md__cell_ctx {
    md__nb_acc *acc;
    const int *mark;
} md__cell_ctx;

static void md__cell_visit(void *vctx, int i, int j) {
    md__cell_ctx *c = (md__cell_ctx *)vctx;
    if (j < i || c->mark[j] == i) return;
    md__nb_acc_pair(c->acc, i, j, 0);
}

/* Excluded pairs (Ewald correction) and 1-4 pairs in double. */
static void md__nb_bonded_pairs_f64(const md__nbk *k, const md_topology *t, const md_lj_table *lj,
                                    const md_float4 *xyzq, const double box[3], double *f, md_energy *e) {
    int i, m, x, y;
    for (i = 0; i < t->n && k->coul == (int)MD_COUL_EWALD; i++)
        for (m = t->excl_start[i]; m < t->excl_start[i + 1]; m++) {
            int j = t->excl[m];
            double d[3], r2, ec, fs;
            if (j < i) continue;
            r2 = md__dist2_f64(&xyzq[i], &xyzq[j], box, d);
            fs = md__nb_excl_f64(k, r2, (double)xyzq[i].w * xyzq[j].w, &ec);
            e->coul_excl += ec;
            for (x = 0; x < 3; x++) {
                f[3 * i + x] += fs * d[x];
                f[3 * j + x] -= fs * d[x];
                for (y = 0; y < 3; y++) e->virial[3 * x + y] += d[x] * fs * d[y];
            }
        }
    for (m = 0; m < t->npair14; m++) {
        int a = t->pair14[2 * m], b = t->pair14[2 * m + 1];
        size_t tab = (size_t)t->lj_type[a] * (size_t)lj->ntypes + (size_t)t->lj_type[b];
        double d[3], r2 = md__dist2_f64(&xyzq[a], &xyzq[b], box, d), elj, ec, fs;
        double c6 = k->lj == (int)MD_LJ_NONE ? 0.0 : t->fudge_lj * lj->c6[tab];
        double c12 = k->lj == (int)MD_LJ_NONE ? 0.0 : t->fudge_lj * lj->c12[tab];
        double qq = k->coul == (int)MD_COUL_NONE ? 0.0 : t->fudge_qq * ((double)xyzq[a].w * xyzq[b].w);
        fs = md__nb_pair14_f64(r2, qq, c6, c12, &elj, &ec);
        e->lj14 += elj;
        e->coul14 += ec;
        for (x = 0; x < 3; x++) {
            f[3 * a + x] += fs * d[x];
            f[3 * b + x] -= fs * d[x];
            for (y = 0; y < 3; y++) e->virial[3 * x + y] += d[x] * fs * d[y];
        }
    }
}

/* ---- the fixed-point rung ---- */

typedef struct md__nb_fix {
    const md_nb_coeffs *k;
    md_nb_box_f32 box;
    md_fixed *F, E[MD_NB_FIXED_NTERMS], W[9];
    int bad; /* an MD_FIXED_INVALID conversion */
} md__nb_fix;

static md_fixed md__fx(md__nb_fix *s, float v, float scale) {
    md_fixed q = md_fixed_from_float(v, scale);
    s->bad |= q == MD_FIXED_INVALID;
    return q;
}

/* Add one pair's float force F/r * d to i and its negation to j, its virial and energies. */
static void md__nb_fix_add(md__nb_fix *s, int i, int j, float fs, const float d[3], int term_a, float ea,
                           int term_b, float eb) {
    const float fsc = (float)MD_FORCE_FIXED_SCALE, esc = (float)MD_ENERGY_FIXED_SCALE;
    float f[3];
    int x, y;
    for (x = 0; x < 3; x++) {
        md_fixed q;
        f[x] = md__fmul(fs, d[x]);
        q = md__fx(s, f[x], fsc);
        s->F[3 * i + x] += q;
        s->F[3 * j + x] -= q;
    }
    for (x = 0; x < 3; x++)
        for (y = 0; y < 3; y++) s->W[3 * x + y] += md__fx(s, md__fmul(d[x], f[y]), esc);
    if (term_a >= 0) s->E[term_a] += md__fx(s, ea, esc);
    if (term_b >= 0) s->E[term_b] += md__fx(s, eb, esc);
}

static void md__nb_fixed_run(md_nb_plan *p, const md_topology *t, const md_lj_table *lj, const md_float4 *xyzq,
                             const double box[3], md__nb_fix *s) {
    const md_nb_coeffs *k = &p->coeffs;
    const md_verlet_list *vl = &p->list;
    int i, m, nt = lj->ntypes;
    for (i = 0; i < p->n; i++) {
        const float xi = xyzq[i].x, yi = xyzq[i].y, zi = xyzq[i].z, qi = xyzq[i].w;
        const size_t ti = (size_t)t->lj_type[i] * (size_t)nt;
        for (m = vl->start[i]; m < vl->start[i + 1]; m++) {
            int j = vl->j[m];
            float d[3], r2, elj, ec, fs;
            size_t tij;
            r2 = md_nb_delta_f32(xi, yi, zi, xyzq[j].x, xyzq[j].y, xyzq[j].z, &s->box, d);
            if (!(r2 < k->rc2)) continue;
            tij = ti + (size_t)t->lj_type[j];
            fs = md_nb_pair_f32(k, r2, md__fmul(qi, xyzq[j].w), (float)lj->c6[tij], (float)lj->c12[tij], &elj, &ec);
            md__nb_fix_add(s, i, j, fs, d, MD_NB_FIXED_LJ, elj, MD_NB_FIXED_COUL, ec);
        }
    }
    for (i = 0; i < t->n && k->coul == (int)MD_COUL_EWALD; i++)
        for (m = t->excl_start[i]; m < t->excl_start[i + 1]; m++) {
            int j = t->excl[m];
            float d[3], r2, ec, fs;
            if (j < i) continue;
            r2 = md_nb_delta_f32(xyzq[i].x, xyzq[i].y, xyzq[i].z, xyzq[j].x, xyzq[j].y, xyzq[j].z, &s->box, d);
            fs = md_nb_excl_f32(k, r2, md__fmul(xyzq[i].w, xyzq[j].w), &ec);
            md__nb_fix_add(s, i, j, fs, d, MD_NB_FIXED_EXCL, ec, -1, 0.0f);
        }
    for (m = 0; m < t->npair14; m++) {
        int a = t->pair14[2 * m], b = t->pair14[2 * m + 1];
        size_t tab = (size_t)t->lj_type[a] * (size_t)nt + (size_t)t->lj_type[b];
        float d[3], r2, elj, ec, fs;
        float c6 = k->lj == (int)MD_LJ_NONE ? 0.0f : (float)(t->fudge_lj * lj->c6[tab]);
        float c12 = k->lj == (int)MD_LJ_NONE ? 0.0f : (float)(t->fudge_lj * lj->c12[tab]);
        float qq = k->coul == (int)MD_COUL_NONE ? 0.0f : md__fmul((float)t->fudge_qq, md__fmul(xyzq[a].w, xyzq[b].w));
        r2 = md_nb_delta_f32(xyzq[a].x, xyzq[a].y, xyzq[a].z, xyzq[b].x, xyzq[b].y, xyzq[b].z, &s->box, d);
        fs = md_nb_pair14_f32(k, r2, qq, c6, c12, &elj, &ec);
        md__nb_fix_add(s, a, b, fs, d, MD_NB_FIXED_LJ14, elj, MD_NB_FIXED_COUL14, ec);
    }
    (void)box;
}

MDDEF md_status md_nb_compute(md_nb_variant variant, md_nb_plan *p, const md_topology *t, const md_lj_table *lj,
                              const md_float4 *xyzq, const double box[3], double *force, md_energy *energy) {
    const char *fn = "md_nb_compute";
    md__nbk k;
    md__nb_acc acc;
    md_energy e;
    md_status st;
    double reach, wdisp = 0.0;
    int i, m, n, x;
    if (!p || !p->scratch || !t || !lj || !xyzq || !box)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p/t/lj/xyzq/box", "is NULL");
    if (md_nb_variant_is_gpu(variant))
        return md_set_error(MD_ERR_UNSUPPORTED, fn, 0, "variant", "%s is a GPU rung: run it with md_cuda.cu.h",
                            md_nb_variant_name(variant));
    if ((int)variant < 0 || variant >= MD_NB_VARIANT_COUNT)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "unknown rung %d", (int)variant);
    if ((st = md__topology_check_fast(t, lj, fn)) != MD_OK) return st;
    n = p->n;
    if (t->n != n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has %d atoms, the plan %d", t->n, n);
    if ((st = md__check_coords(fn, xyzq, n, 1)) != MD_OK) return st;
    reach = variant == MD_NB_CPU_ALL_PAIRS || variant == MD_NB_CPU_CELL_LIST ? p->params.cutoff
                                                                             : p->params.cutoff + p->params.buffer;
    if ((st = md__nb_check_box(fn, &p->params, box, reach)) != MD_OK) return st;
    md__nbk_make(&p->params, &k);
    memset(&e, 0, sizeof e);
    memset(p->scratch, 0, 3 * (size_t)n * sizeof(double));
    memset(&acc, 0, sizeof acc);
    acc.k = &k;
    acc.lj = lj;
    acc.type = t->lj_type;
    acc.xyzq = xyzq;
    acc.box = box;
    acc.f = p->scratch;
    switch (variant) {
    case MD_NB_CPU_ALL_PAIRS: {
        int j;
        for (i = 0; i < n; i++) p->mark[i] = -1;
        for (i = 0; i < n; i++) {
            md__mark_exclusions(t, i, p->mark);
            for (j = i + 1; j < n; j++)
                if (p->mark[j] != i) md__nb_acc_pair(&acc, i, j, 0);
        }
        break;
    }
    case MD_NB_CPU_CELL_LIST: {
        md__cell_ctx c;
        if ((st = md_cell_list_build(&p->cells, xyzq, n, box, p->params.cutoff)) != MD_OK) return st;
        c.acc = &acc;
        c.mark = p->mark;
        for (i = 0; i < n; i++) p->mark[i] = -1;
        for (i = 0; i < n; i++) {
            md__mark_exclusions(t, i, p->mark);
            md__cells_visit(&p->cells, i, md__cell_visit, &c);
        }
        break;
    }
    case MD_NB_CPU_VERLET:
    case MD_NB_CPU_VERLET_FULL: {
        int full = variant == MD_NB_CPU_VERLET_FULL;
        if ((st = md_nb_plan_update_list(p, t, xyzq, box, full, NULL)) != MD_OK) return st;
        for (i = 0; i < n; i++)
            for (m = p->list.start[i]; m < p->list.start[i + 1]; m++) md__nb_acc_pair(&acc, i, p->list.j[m], full);
        break;
    }
    case MD_NB_CPU_FIXED: {
        md__nb_fix s;
        if ((st = md_nb_plan_update_list(p, t, xyzq, box, 0, NULL)) != MD_OK) return st;
        memset(&s, 0, sizeof s);
        s.k = &p->coeffs;
        s.box = md_nb_box_f32_make(box);
        s.F = p->fixed_force;
        memset(s.F, 0, 3 * (size_t)n * sizeof(md_fixed));
        md__nb_fixed_run(p, t, lj, xyzq, box, &s);
        if (s.bad)
            return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq",
                                "a pair force or energy overflows the fixed-point range (overlapping atoms?)");
        memcpy(p->fixed_energy, s.E, sizeof s.E);
        memcpy(p->fixed_virial, s.W, sizeof s.W);
        for (i = 0; i < 3 * n; i++) p->scratch[i] = md_fixed_to_double(s.F[i], MD_FORCE_FIXED_SCALE);
        e.lj = md_fixed_to_double(s.E[MD_NB_FIXED_LJ], MD_ENERGY_FIXED_SCALE);
        e.coul_real = md_fixed_to_double(s.E[MD_NB_FIXED_COUL], MD_ENERGY_FIXED_SCALE);
        e.coul_excl = md_fixed_to_double(s.E[MD_NB_FIXED_EXCL], MD_ENERGY_FIXED_SCALE);
        e.lj14 = md_fixed_to_double(s.E[MD_NB_FIXED_LJ14], MD_ENERGY_FIXED_SCALE);
        e.coul14 = md_fixed_to_double(s.E[MD_NB_FIXED_COUL14], MD_ENERGY_FIXED_SCALE);
        for (x = 0; x < 9; x++) e.virial[x] = md_fixed_to_double(s.W[x], MD_ENERGY_FIXED_SCALE);
        break;
    }
    default:
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "variant", "unknown rung %d", (int)variant);
    }
    if (variant != MD_NB_CPU_FIXED) {
        e.lj = acc.lj_e;
        e.coul_real = acc.coul_e;
        for (x = 0; x < 9; x++) e.virial[x] = acc.w[x];
        md__nb_bonded_pairs_f64(&k, t, lj, xyzq, box, p->scratch, &e);
    }
    e.coul_self = md_nb_self_energy(&p->params, xyzq, n);
    if ((st = md_nb_dispersion_correction(&p->params, t, lj, box, &e.lj_dispersion, &wdisp)) != MD_OK) return st;
    for (x = 0; x < 3; x++) e.virial[4 * x] += wdisp;
    if (!isfinite(md_energy_potential(&e)))
        return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq", "the energy is not finite (overlapping atoms?)");
    for (i = 0; i < 3 * n; i++)
        if (!isfinite(p->scratch[i]))
            return md__err_index(MD_ERR_RANGE, fn, "force", i / 3, "is not finite (overlapping atoms?) %g",
                                 p->scratch[i]);
    if (force) memcpy(force, p->scratch, 3 * (size_t)n * sizeof(double));
    if (energy) *energy = e;
    p->calls++;
    return MD_OK;
}

/* ---- integrate ---- */

MDDEF void md_dynamics_free(md_dynamics *d) {
    if (!d) return;
    md_free(d->x);
    md_free(d->v);
    md_free(d->f);
    md_free(d->inv_mass);
    md_free(d->xyzq);
    md_nb_plan_free(&d->plan);
    memset(d, 0, sizeof *d);
}

/* xyzq = x wrapped into [0, L) (double), then rounded to float. */
static void md__dynamics_sync(md_dynamics *d) {
    int i, a;
    for (i = 0; i < d->n; i++) {
        float w[3];
        for (a = 0; a < 3; a++) {
            double x = d->x[3 * i + a], L = d->box[a];
            w[a] = (float)(x - L * floor(x / L));
        }
        d->xyzq[i].x = w[0];
        d->xyzq[i].y = w[1];
        d->xyzq[i].z = w[2];
    }
}

MDDEF double md_dynamics_kinetic(const md_dynamics *d) {
    double ke = 0.0;
    int i;
    if (!d || !d->v) return 0.0;
    for (i = 0; i < d->n; i++) {
        const double *v = d->v + 3 * i;
        ke += (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]) / d->inv_mass[i];
    }
    return 0.5 * ke;
}

MDDEF double md_dynamics_temperature(const md_dynamics *d) {
    if (!d || d->n < 2) return 0.0;
    return 2.0 * md_dynamics_kinetic(d) / ((3.0 * d->n - 3.0) * MD_KB);
}

MDDEF md_status md_dynamics_init(md_dynamics *d, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                                 const md_nb_params *params, md_nb_variant variant, double dt) {
    const char *fn = "md_dynamics_init";
    md_dynamics s;
    md_status st;
    size_t un;
    int i;
    if (!d || !sys || !t || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d/sys/t/lj", "is NULL");
    if (!sys->xyzq || !sys->vel || sys->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "is empty");
    if ((st = md__topology_check_fast(t, lj, fn)) != MD_OK) return st;
    if (sys->n != t->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has %d atoms, the topology %d", sys->n, t->n);
    if (!(dt > 0.0) || !isfinite(dt)) return md_set_error(MD_ERR_RANGE, fn, 0, "dt", "must be finite and > 0 (got %g)", dt);
    for (i = 0; i < t->n; i++)
        if (!(t->mass[i] > 0.0f) || !isfinite(t->mass[i]))
            return md__err_index(MD_ERR_RANGE, fn, "mass", i, "must be finite and > 0 (got %g)", t->mass[i]);
    for (i = 0; i < sys->n; i++)
        if (!isfinite(sys->vel[i].x) || !isfinite(sys->vel[i].y) || !isfinite(sys->vel[i].z))
            return md__err_index(MD_ERR_RANGE, fn, "vel", i, "is not finite (x %g)", sys->vel[i].x);
    memset(&s, 0, sizeof s);
    s.n = t->n;
    s.dt = dt;
    s.variant = variant;
    s.top = t;
    s.lj = lj;
    for (i = 0; i < 3; i++) s.box[i] = sys->box[i];
    un = (size_t)s.n;
    s.x = (double *)md_alloc_array(3 * un, sizeof(double));
    s.v = (double *)md_alloc_array(3 * un, sizeof(double));
    s.f = (double *)md_alloc_array(3 * un, sizeof(double));
    s.inv_mass = (double *)md_alloc_array(un, sizeof(double));
    s.xyzq = (md_float4 *)md_alloc_array(un, sizeof(md_float4));
    if (!s.x || !s.v || !s.f || !s.inv_mass || !s.xyzq) {
        md_dynamics_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate a run of %d atoms", s.n);
    }
    for (i = 0; i < s.n; i++) {
        s.x[3 * i] = sys->xyzq[i].x;
        s.x[3 * i + 1] = sys->xyzq[i].y;
        s.x[3 * i + 2] = sys->xyzq[i].z;
        s.v[3 * i] = sys->vel[i].x;
        s.v[3 * i + 1] = sys->vel[i].y;
        s.v[3 * i + 2] = sys->vel[i].z;
        s.inv_mass[i] = 1.0 / (double)t->mass[i];
        s.xyzq[i].w = t->charge[i];
    }
    if ((st = md__check_coords(fn, sys->xyzq, sys->n, 0)) != MD_OK ||
        (st = md_nb_plan_create(&s.plan, params, s.n)) != MD_OK) {
        md_dynamics_free(&s);
        return st;
    }
    md__dynamics_sync(&s);
    if ((st = md_nb_compute(variant, &s.plan, t, lj, s.xyzq, s.box, s.f, &s.energy)) != MD_OK) {
        md_dynamics_free(&s);
        return st;
    }
    s.energy.kinetic = md_dynamics_kinetic(&s);
    *d = s;
    return MD_OK;
}

MDDEF md_status md_integrate_vv(md_dynamics *d, int nsteps) {
    const char *fn = "md_integrate_vv";
    md_status st;
    int s, i, a;
    if (!d || !d->x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d", "is NULL or not initialised");
    if (nsteps < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nsteps", "must be >= 0 (got %d)", nsteps);
    for (s = 0; s < nsteps; s++) {
        const double h = 0.5 * d->dt;
        for (i = 0; i < d->n; i++)
            for (a = 0; a < 3; a++) {
                double *v = &d->v[3 * i + a];
                *v += h * d->f[3 * i + a] * d->inv_mass[i];
                d->x[3 * i + a] += d->dt * *v;
            }
        md__dynamics_sync(d);
        if ((st = md_nb_compute(d->variant, &d->plan, d->top, d->lj, d->xyzq, d->box, d->f, &d->energy)) != MD_OK)
            return st;
        for (i = 0; i < d->n; i++)
            for (a = 0; a < 3; a++) d->v[3 * i + a] += h * d->f[3 * i + a] * d->inv_mass[i];
        d->energy.kinetic = md_dynamics_kinetic(d);
        d->step++;
    }
    return MD_OK;
}

MDDEF md_status md_dynamics_get_system(const md_dynamics *d, md_system *sys) {
    const char *fn = "md_dynamics_get_system";
    int i;
    if (!d || !d->x || !sys || !sys->xyzq || !sys->vel)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "d/sys", "is NULL or empty");
    if (sys->n != d->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has %d atoms, the run %d", sys->n, d->n);
    for (i = 0; i < d->n; i++) {
        sys->xyzq[i] = d->xyzq[i];
        sys->vel[i].x = (float)d->v[3 * i];
        sys->vel[i].y = (float)d->v[3 * i + 1];
        sys->vel[i].z = (float)d->v[3 * i + 2];
    }
    for (i = 0; i < 3; i++) sys->box[i] = d->box[i];
    return MD_OK;
}

/* ---- build ---- */

MDDEF md_status md_water_model_params(md_water_model model, md_water_params *out) {
    md_water_params w;
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_water_model_params", 0, "out", "is NULL");
    memset(&w, 0, sizeof w);
    w.mass_o = 15.99943; /* OpenMM's tip3p.xml / spce.xml */
    w.mass_h = 1.007947;
    switch (model) {
    case MD_WATER_TIP3P:
        w.name = "tip3p";
        w.d_oh = 0.09572;
        w.angle_hoh = 1.82421813418; /* 104.52 degrees */
        w.q_o = -0.834;
        w.q_h = 0.417;
        w.sigma_o = 0.31507524065751241;
        w.epsilon_o = 0.635968;
        break;
    case MD_WATER_SPCE:
        w.name = "spce";
        w.d_oh = 0.1;
        w.angle_hoh = 1.91061193216; /* 109.47 degrees */
        w.q_o = -0.8476;
        w.q_h = 0.4238;
        w.sigma_o = 0.31657195050398818;
        w.epsilon_o = 0.6497752;
        break;
    default:
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_water_model_params", 0, "model", "unknown water model %d",
                            (int)model);
    }
    w.d_hh = 2.0 * w.d_oh * sin(0.5 * w.angle_hoh);
    *out = w;
    return MD_OK;
}

/* Minimum-image squared distance between two double points in a cube of edge L. */
static double md__cube_dist2(const double *a, const double *b, double L) {
    double s = 0.0;
    int k;
    for (k = 0; k < 3; k++) {
        double d = a[k] - b[k];
        d -= L * rint(d / L);
        s += d * d;
    }
    return s;
}

MDDEF md_status md_build_water_box(md_system *sys, md_topology *top, md_lj_table *lj, const md_water_desc *desc) {
    const char *fn = "md_build_water_box";
    const double avogadro = 6.02214076e23, min_dist = 0.17;
    md_water_desc d;
    md_water_params w;
    md_system s;
    md_topology t;
    md_lj_table tab;
    md_rng rng;
    md_status st;
    double mol_mass, L, a, *pos = NULL, local[3][3], sig[2], eps[2], vcm[3] = {0, 0, 0}, ke = 0.0, scale;
    int m, nsite, M, i, k, reach, *site = NULL, *occupant = NULL, *bonds = NULL, *angles = NULL;
    double *r0 = NULL, *kb = NULL, *th0 = NULL, *ka = NULL;
    if (!sys || !top || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/top/lj", "is NULL");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if ((st = md_water_model_params(d.model, &w)) != MD_OK) return st;
    if (d.density == 0.0) d.density = 0.997;
    if (d.temperature == 0.0) d.temperature = 300.0;
    if (!(d.density > 0.0) || !isfinite(d.density))
        return md_set_error(MD_ERR_RANGE, fn, 0, "density", "must be finite and > 0 (got %g)", d.density);
    if (!isfinite(d.temperature)) return md_set_error(MD_ERR_RANGE, fn, 0, "temperature", "must be finite");
    if (d.molecules < 0 || d.molecules > 30000000)
        return md_set_error(MD_ERR_RANGE, fn, 0, "molecules", "must be in 0..30000000 (got %d)", d.molecules);
    if (d.edge < 0.0 || !isfinite(d.edge) || d.edge > 1000.0)
        return md_set_error(MD_ERR_RANGE, fn, 0, "edge", "must be finite and in [0, 1000] nm (got %g)", d.edge);
    mol_mass = w.mass_o + 2.0 * w.mass_h; /* g/mol */
    /* molecules per nm^3 at the density: rho [g/cm^3] * 1e-21 cm^3/nm^3 * N_A / M */
    if (d.molecules == 0 && d.edge == 0.0)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "molecules/edge", "give the number of molecules, the edge or both");
    if (d.edge == 0.0) d.edge = cbrt(d.molecules * mol_mass / (d.density * 1e-21 * avogadro));
    if (d.molecules == 0) {
        double nm = d.density * 1e-21 * avogadro / mol_mass * d.edge * d.edge * d.edge;
        if (nm > 30000000.0) return md_set_error(MD_ERR_RANGE, fn, 0, "edge", "%g nm holds too many molecules", d.edge);
        d.molecules = (int)floor(nm + 0.5);
        if (d.molecules < 1) return md_set_error(MD_ERR_RANGE, fn, 0, "edge", "%g nm holds no molecule", d.edge);
    }
    M = d.molecules;
    L = d.edge;
    m = (int)ceil(cbrt((double)M) - 1e-9);
    while ((long long)m * m * m < M) m++;
    nsite = m * m * m;
    a = L / m;
    if (a < 0.2)
        return md_set_error(MD_ERR_RANGE, fn, 0, "density", "%d molecules in a %g nm cube: lattice spacing %g nm < 0.2 nm",
                            M, L, a);
    site = (int *)md_alloc_array((size_t)nsite, sizeof(int));
    occupant = (int *)md_alloc_array((size_t)nsite, sizeof(int));
    pos = (double *)md_alloc_array(9 * (size_t)M, sizeof(double));
    bonds = (int *)md_alloc_array(4 * (size_t)M, sizeof(int));
    angles = (int *)md_alloc_array(3 * (size_t)M, sizeof(int));
    r0 = (double *)md_alloc_array(2 * (size_t)M, sizeof(double));
    kb = (double *)md_alloc_array(2 * (size_t)M, sizeof(double));
    th0 = (double *)md_alloc_array((size_t)M, sizeof(double));
    ka = (double *)md_alloc_array((size_t)M, sizeof(double));
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    memset(&tab, 0, sizeof tab);
    if (!site || !occupant || !pos || !bonds || !angles || !r0 || !kb || !th0 || !ka) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "molecules", "cannot allocate %d molecules", M);
        goto fail;
    }
    md_rng_seed(&rng, d.seed);
    /* the occupied sites: the first M of a seeded Fisher-Yates shuffle, in ascending order */
    for (i = 0; i < nsite; i++) site[i] = i;
    for (i = nsite - 1; i > 0; i--) {
        int j = (int)(md_rng_uniform(&rng) * (i + 1)), tmp;
        if (j > i) j = i;
        tmp = site[i];
        site[i] = site[j];
        site[j] = tmp;
    }
    qsort(site, (size_t)M, sizeof(int), md__cmp_int);
    for (i = 0; i < nsite; i++) occupant[i] = -1;
    /* the molecule in its own frame: O at the origin, H in the xz plane */
    local[0][0] = local[0][1] = local[0][2] = 0.0;
    local[1][0] = w.d_oh * sin(0.5 * w.angle_hoh);
    local[1][1] = 0.0;
    local[1][2] = w.d_oh * cos(0.5 * w.angle_hoh);
    local[2][0] = -local[1][0];
    local[2][1] = 0.0;
    local[2][2] = local[1][2];
    reach = (int)ceil((min_dist + 2.0 * w.d_oh) / a);
    for (k = 0; k < M; k++) {
        int sx = site[k] % m, sy = (site[k] / m) % m, sz = site[k] / (m * m), tries, ok = 0;
        double o[3];
        o[0] = (sx + 0.5) * a;
        o[1] = (sy + 0.5) * a;
        o[2] = (sz + 0.5) * a;
        for (tries = 0; tries < 1000 && !ok; tries++) {
            double q[4], qn = 0.0, R[3][3], *p = pos + 9 * (size_t)k;
            int nx[64], ny[64], nz[64], cx, cy, cz, b, c;
            int mx = md__axis_neighbors(sx, m, reach < 31 ? reach : 31, nx);
            int my = md__axis_neighbors(sy, m, reach < 31 ? reach : 31, ny);
            int mz = md__axis_neighbors(sz, m, reach < 31 ? reach : 31, nz);
            do { /* a uniform random rotation from a normalised 4D Gaussian quaternion */
                qn = 0.0;
                for (b = 0; b < 4; b++) {
                    q[b] = md_rng_normal(&rng);
                    qn += q[b] * q[b];
                }
            } while (qn < 1e-12);
            qn = 1.0 / sqrt(qn);
            for (b = 0; b < 4; b++) q[b] *= qn;
            R[0][0] = 1 - 2 * (q[2] * q[2] + q[3] * q[3]);
            R[0][1] = 2 * (q[1] * q[2] - q[0] * q[3]);
            R[0][2] = 2 * (q[1] * q[3] + q[0] * q[2]);
            R[1][0] = 2 * (q[1] * q[2] + q[0] * q[3]);
            R[1][1] = 1 - 2 * (q[1] * q[1] + q[3] * q[3]);
            R[1][2] = 2 * (q[2] * q[3] - q[0] * q[1]);
            R[2][0] = 2 * (q[1] * q[3] - q[0] * q[2]);
            R[2][1] = 2 * (q[2] * q[3] + q[0] * q[1]);
            R[2][2] = 1 - 2 * (q[1] * q[1] + q[2] * q[2]);
            for (b = 0; b < 3; b++)
                for (c = 0; c < 3; c++)
                    p[3 * b + c] = o[c] + R[c][0] * local[b][0] + R[c][1] * local[b][1] + R[c][2] * local[b][2];
            ok = 1;
            for (cz = 0; cz < mz && ok; cz++)
                for (cy = 0; cy < my && ok; cy++)
                    for (cx = 0; cx < mx && ok; cx++) {
                        int other = occupant[(nz[cz] * m + ny[cy]) * m + nx[cx]], u, v;
                        if (other < 0) continue;
                        for (u = 0; u < 3 && ok; u++)
                            for (v = 0; v < 3 && ok; v++)
                                if (md__cube_dist2(p + 3 * u, pos + 9 * (size_t)other + 3 * v, L) < min_dist * min_dist)
                                    ok = 0;
                    }
        }
        if (!ok) {
            st = md_set_error(MD_ERR_RANGE, fn, 0, "density",
                              "no overlap-free orientation for molecule %d after 1000 tries (%d molecules in %g nm)", k,
                              M, L);
            goto fail;
        }
        occupant[site[k]] = k;
    }
    if ((st = md_system_alloc(&s, 3 * M)) != MD_OK || (st = md_topology_alloc(&t, 3 * M)) != MD_OK) goto fail;
    for (k = 0; k < M; k++) {
        double v[3];
        int b;
        if (d.temperature > 0.0) {
            double sd = sqrt(MD_KB * d.temperature / mol_mass);
            for (b = 0; b < 3; b++) v[b] = sd * md_rng_normal(&rng);
        } else {
            v[0] = v[1] = v[2] = 0.0;
        }
        for (b = 0; b < 3; b++) {
            int at = 3 * k + b;
            const char *nm = b == 0 ? "OW" : (b == 1 ? "HW1" : "HW2");
            s.xyzq[at].x = (float)pos[9 * (size_t)k + 3 * b];
            s.xyzq[at].y = (float)pos[9 * (size_t)k + 3 * b + 1];
            s.xyzq[at].z = (float)pos[9 * (size_t)k + 3 * b + 2];
            s.xyzq[at].w = (float)(b == 0 ? w.q_o : w.q_h);
            s.vel[at].x = (float)v[0];
            s.vel[at].y = (float)v[1];
            s.vel[at].z = (float)v[2];
            s.mass[at] = (float)(b == 0 ? w.mass_o : w.mass_h);
            s.type[at] = b == 0 ? 0 : 1;
            strcpy(s.name[at].s, nm);
            strcpy(s.element[at].s, b == 0 ? "O" : "H");
            strcpy(s.resname[at].s, "HOH");
            s.resid[at] = k + 1;
            t.lj_type[at] = s.type[at];
            t.charge[at] = s.xyzq[at].w;
            t.mass[at] = s.mass[at];
        }
        bonds[4 * k] = 3 * k;
        bonds[4 * k + 1] = 3 * k + 1;
        bonds[4 * k + 2] = 3 * k;
        bonds[4 * k + 3] = 3 * k + 2;
        r0[2 * k] = r0[2 * k + 1] = w.d_oh;
        kb[2 * k] = kb[2 * k + 1] = 462750.4; /* OpenMM's flexible-water constants, unused when rigid */
        angles[3 * k] = 3 * k + 1;
        angles[3 * k + 1] = 3 * k;
        angles[3 * k + 2] = 3 * k + 2;
        th0[k] = w.angle_hoh;
        ka[k] = 836.8;
        vcm[0] += v[0];
        vcm[1] += v[1];
        vcm[2] += v[2];
    }
    /* remove the net momentum (equal molecules: the mean velocity), then scale the
     * translational kinetic energy to (3M - 3)/2 kT */
    for (i = 0; i < 3 * M; i++) {
        s.vel[i].x = (float)(s.vel[i].x - vcm[0] / M);
        s.vel[i].y = (float)(s.vel[i].y - vcm[1] / M);
        s.vel[i].z = (float)(s.vel[i].z - vcm[2] / M);
        ke += 0.5 * s.mass[i] * ((double)s.vel[i].x * s.vel[i].x + (double)s.vel[i].y * s.vel[i].y +
                                 (double)s.vel[i].z * s.vel[i].z);
    }
    if (d.temperature > 0.0 && M > 1 && ke > 0.0) {
        scale = sqrt(0.5 * (3.0 * M - 3.0) * MD_KB * d.temperature / ke);
        for (i = 0; i < 3 * M; i++) {
            s.vel[i].x = (float)(s.vel[i].x * scale);
            s.vel[i].y = (float)(s.vel[i].y * scale);
            s.vel[i].z = (float)(s.vel[i].z * scale);
        }
    }
    for (i = 0; i < 3; i++) s.box[i] = L;
    if ((st = md_topology_set_bonds(&t, 2 * M, bonds, r0, kb)) != MD_OK ||
        (st = md_topology_build_exclusions(&t, NULL)) != MD_OK)
        goto fail;
    /* the file record keeps the bonds too (md_write_pdb writes them as CONECT records) */
    s.nbond = 2 * M;
    s.bond = bonds;
    bonds = NULL;
    t.nangle = M;
    t.angle = angles;
    t.angle_theta0 = th0;
    t.angle_k = ka;
    angles = NULL;
    th0 = ka = NULL;
    if (!(t.water = (int *)md_alloc_array(3 * (size_t)M, sizeof(int)))) {
        st = MD_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    for (i = 0; i < 3 * M; i++) t.water[i] = i;
    t.nwater = M;
    t.water_doh = w.d_oh;
    t.water_dhh = w.d_hh;
    sig[0] = w.sigma_o;
    sig[1] = 1.0; /* OpenMM's hydrogen: sigma 1, epsilon 0 (no LJ) */
    eps[0] = w.epsilon_o;
    eps[1] = 0.0;
    if ((st = md_lj_table_create(&tab, 2, sig, eps, MD_LJ_COMBINE_LB)) != MD_OK) goto fail;
    md_free(site);
    md_free(occupant);
    md_free(pos);
    md_free(bonds);
    md_free(r0);
    md_free(kb);
    *sys = s;
    *top = t;
    *lj = tab;
    return MD_OK;
fail:
    md_free(site);
    md_free(occupant);
    md_free(pos);
    md_free(bonds);
    md_free(angles);
    md_free(r0);
    md_free(kb);
    md_free(th0);
    md_free(ka);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&tab);
    return st;
}

MDDEF md_status md_build_lj_fluid(md_system *sys, md_topology *top, md_lj_table *lj, const md_fcc_desc *desc) {
    const char *fn = "md_build_lj_fluid";
    md_system s;
    md_topology t;
    md_lj_table tab;
    md_status st;
    double sig = MD_ARGON_SIGMA, eps = MD_ARGON_EPSILON;
    int i;
    if (!sys || !top || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/top/lj", "is NULL");
    if ((st = md_build_fcc(&s, desc)) != MD_OK) return st;
    if ((st = md_topology_alloc(&t, s.n)) != MD_OK) {
        md_system_free(&s);
        return st;
    }
    for (i = 0; i < s.n; i++) t.mass[i] = s.mass[i];
    if ((st = md_lj_table_create(&tab, 1, &sig, &eps, MD_LJ_COMBINE_LB)) != MD_OK) {
        md_system_free(&s);
        md_topology_free(&t);
        return st;
    }
    *sys = s;
    *top = t;
    *lj = tab;
    return MD_OK;
}

/* ---- ions ---- */

MDDEF md_status md_ion_params_for(md_water_model model, md_ion_params *out) {
    md_ion_params p;
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_ion_params_for", 0, "out", "is NULL");
    memset(&p, 0, sizeof p);
    p.mass_na = 22.99; /* OpenMM's amber14 ion files */
    p.mass_cl = 35.45;
    switch (model) {
    case MD_WATER_TIP3P: /* amber14/tip3p.xml, tip3p_standard-Na+ / -Cl- */
        p.sigma_na = 0.2439280690268249;
        p.epsilon_na = 0.3658460312;
        p.sigma_cl = 0.4477656957373345;
        p.epsilon_cl = 0.148912744;
        break;
    case MD_WATER_SPCE: /* amber14/spce.xml, spce_standard-Na+ / -Cl- */
        p.sigma_na = 0.21595384927721822;
        p.epsilon_na = 1.4754532912;
        p.sigma_cl = 0.48304528497569194;
        p.epsilon_cl = 0.05349244;
        break;
    default:
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_ion_params_for", 0, "model", "unknown water model %d",
                            (int)model);
    }
    *out = p;
    return MD_OK;
}

MDDEF md_status md_water_ion_lj_table(md_water_model model, md_lj_table *lj) {
    md_water_params w;
    md_ion_params ion;
    double sig[4], eps[4];
    md_status st;
    memset(&w, 0, sizeof w);
    memset(&ion, 0, sizeof ion);
    if (!lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_water_ion_lj_table", 0, "lj", "is NULL");
    if ((st = md_water_model_params(model, &w)) != MD_OK || (st = md_ion_params_for(model, &ion)) != MD_OK) return st;
    sig[MD_TYPE_OW] = w.sigma_o;
    eps[MD_TYPE_OW] = w.epsilon_o;
    sig[MD_TYPE_HW] = 1.0; /* OpenMM's water hydrogen: sigma 1, epsilon 0 */
    eps[MD_TYPE_HW] = 0.0;
    sig[MD_TYPE_NA] = ion.sigma_na;
    eps[MD_TYPE_NA] = ion.epsilon_na;
    sig[MD_TYPE_CL] = ion.sigma_cl;
    eps[MD_TYPE_CL] = ion.epsilon_cl;
    return md_lj_table_create(lj, 4, sig, eps, MD_LJ_COMBINE_LB);
}

static int md__name_in(const char *name, const char *const *list) {
    for (; *list; list++)
        if (md__caseeq(name, *list)) return 1;
    return 0;
}

static const char *const md__water_resnames[] = {"HOH", "WAT", "SOL", "H2O", "TIP3", "T3P", "SPC", NULL};
static const char *const md__oxygen_names[] = {"O", "OW", "OH2", NULL};
static const char *const md__na_resnames[] = {"NA", "NA+", "SOD", NULL};
static const char *const md__cl_resnames[] = {"CL", "CL-", "CLA", NULL};

/* Atoms i and j belong to one residue: same residue name and number. */
static int md__same_residue(const md_system *s, int i, int j) {
    return s->resid[i] == s->resid[j] && strcmp(s->resname[i].s, s->resname[j].s) == 0;
}

MDDEF md_status md_topology_water_ions(const md_system *sys, md_water_model model, md_topology *top,
                                       md_lj_table *lj) {
    const char *fn = "md_topology_water_ions";
    md_water_params w;
    md_ion_params ion;
    md_topology t;
    md_lj_table tab;
    md_status st;
    int i, nw = 0, nb = 0, *bonds = NULL;
    if (!sys || !top || !lj || !sys->name || !sys->resname || !sys->resid)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/top/lj", "is NULL or has no names");
    if ((st = md_water_model_params(model, &w)) != MD_OK || (st = md_ion_params_for(model, &ion)) != MD_OK) return st;
    memset(&t, 0, sizeof t);
    memset(&tab, 0, sizeof tab);
    if ((st = md_topology_alloc(&t, sys->n)) != MD_OK) return st;
    if (!(bonds = (int *)md_alloc_array((size_t)sys->n + 1, 2 * sizeof(int))) ||
        !(t.water = (int *)md_alloc_array((size_t)sys->n + 1, sizeof(int)))) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate %d atoms", sys->n);
        goto fail;
    }
    for (i = 0; i < sys->n;) {
        const char *res = sys->resname[i].s;
        if (md__name_in(res, md__water_resnames)) {
            int k;
            if (i + 2 >= sys->n || !md__same_residue(sys, i, i + 1) || !md__same_residue(sys, i, i + 2) ||
                !md__name_in(sys->name[i].s, md__oxygen_names) || toupper((unsigned char)sys->name[i + 1].s[0]) != 'H' ||
                toupper((unsigned char)sys->name[i + 2].s[0]) != 'H') {
                st = md_set_error(MD_ERR_PARSE, fn, 0, "name",
                                  "atom %d (%s, residue %s %d): a water residue must be an oxygen (O, OW, OH2) "
                                  "followed by two hydrogens",
                                  i, sys->name[i].s, res, sys->resid[i]);
                goto fail;
            }
            for (k = 0; k < 3; k++) {
                t.lj_type[i + k] = k == 0 ? MD_TYPE_OW : MD_TYPE_HW;
                t.charge[i + k] = (float)(k == 0 ? w.q_o : w.q_h);
                t.mass[i + k] = (float)(k == 0 ? w.mass_o : w.mass_h);
                t.water[3 * nw + k] = i + k;
            }
            bonds[2 * nb] = i;
            bonds[2 * nb + 1] = i + 1;
            bonds[2 * nb + 2] = i;
            bonds[2 * nb + 3] = i + 2;
            nb += 2;
            nw++;
            i += 3;
        } else if (md__name_in(res, md__na_resnames) || md__name_in(res, md__cl_resnames)) {
            int na = md__name_in(res, md__na_resnames);
            t.lj_type[i] = na ? MD_TYPE_NA : MD_TYPE_CL;
            t.charge[i] = na ? 1.0f : -1.0f;
            t.mass[i] = (float)(na ? ion.mass_na : ion.mass_cl);
            i++;
        } else {
            st = md_set_error(MD_ERR_PARSE, fn, 0, "resname",
                              "atom %d (%s, residue %s %d) is neither water (HOH, WAT, SOL, H2O, TIP3, T3P, SPC) "
                              "nor an ion (NA, CL)",
                              i, sys->name[i].s, res, sys->resid[i]);
            goto fail;
        }
    }
    if ((st = md_topology_set_bonds(&t, nb, bonds, NULL, NULL)) != MD_OK ||
        (st = md_topology_build_exclusions(&t, NULL)) != MD_OK || (st = md_water_ion_lj_table(model, &tab)) != MD_OK)
        goto fail;
    t.nwater = nw;
    t.water_doh = nw ? w.d_oh : 0.0;
    t.water_dhh = nw ? w.d_hh : 0.0;
    md_free(bonds);
    *top = t;
    *lj = tab;
    return MD_OK;
fail:
    md_free(bonds);
    md_topology_free(&t);
    md_lj_table_free(&tab);
    return st;
}

MDDEF void md_water_pdb_names(md_system *sys) {
    static const char *const from[3] = {"OW", "HW1", "HW2"}, *const to[3] = {"O", "H1", "H2"};
    int i, k;
    if (!sys || !sys->name) return;
    for (i = 0; i < sys->n; i++)
        for (k = 0; k < 3; k++)
            if (strcmp(sys->name[i].s, from[k]) == 0) md__set_name(&sys->name[i], to[k]);
}

MDDEF md_status md_build_ionic_crystal(md_system *sys, md_topology *top, md_lj_table *lj,
                                       const md_ionic_crystal_desc *desc) {
    const char *fn = "md_build_ionic_crystal";
    md_ionic_crystal_desc d;
    md_ion_params ion;
    md_system s;
    md_topology t;
    md_lj_table tab;
    md_rng rng;
    md_status st;
    int m, i, j, k, a;
    double h;
    if (!sys || !top || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/top/lj", "is NULL");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.cells == 0) d.cells = 3;
    if (d.lattice == 0.0) d.lattice = 0.5640;
    if (d.cells < 1 || d.cells > 100)
        return md_set_error(MD_ERR_RANGE, fn, 0, "cells", "must be in 1..100 (got %d)", d.cells);
    if (!(d.lattice > 0.0) || !isfinite(d.lattice))
        return md_set_error(MD_ERR_RANGE, fn, 0, "lattice", "must be finite and > 0 (got %g)", d.lattice);
    if (!(d.jitter >= 0.0) || !isfinite(d.jitter))
        return md_set_error(MD_ERR_RANGE, fn, 0, "jitter", "must be finite and >= 0 (got %g)", d.jitter);
    if ((st = md_ion_params_for(d.model, &ion)) != MD_OK) return st;
    m = 2 * d.cells;
    h = 0.5 * d.lattice;
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    memset(&tab, 0, sizeof tab);
    if ((st = md_system_alloc(&s, m * m * m)) != MD_OK || (st = md_topology_alloc(&t, m * m * m)) != MD_OK ||
        (st = md_water_ion_lj_table(d.model, &tab)) != MD_OK)
        goto fail;
    md_rng_seed(&rng, d.seed);
    for (k = 0, a = 0; k < m; k++)
        for (j = 0; j < m; j++)
            for (i = 0; i < m; i++, a++) {
                int na = (i + j + k) % 2 == 0;
                /* a quarter spacing off the origin, so no ion sits on a box face */
                s.xyzq[a].x = (float)((i + 0.25) * h + d.jitter * md_rng_normal(&rng));
                s.xyzq[a].y = (float)((j + 0.25) * h + d.jitter * md_rng_normal(&rng));
                s.xyzq[a].z = (float)((k + 0.25) * h + d.jitter * md_rng_normal(&rng));
                s.xyzq[a].w = na ? 1.0f : -1.0f;
                s.mass[a] = (float)(na ? ion.mass_na : ion.mass_cl);
                s.type[a] = na ? MD_TYPE_NA : MD_TYPE_CL;
                md__set_name(&s.name[a], na ? "NA" : "CL");
                md__set_name(&s.resname[a], na ? "NA" : "CL");
                s.resid[a] = a + 1;
                t.lj_type[a] = s.type[a];
                t.charge[a] = s.xyzq[a].w;
                t.mass[a] = s.mass[a];
            }
    s.box[0] = s.box[1] = s.box[2] = d.cells * d.lattice;
    *sys = s;
    *top = t;
    *lj = tab;
    return MD_OK;
fail:
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&tab);
    return st;
}

MDDEF md_status md_build_salt_water(md_system *sys, md_topology *top, md_lj_table *lj,
                                    const md_salt_water_desc *desc) {
    const char *fn = "md_build_salt_water";
    md_salt_water_desc d;
    md_system ws, s;
    md_topology wt, t;
    md_lj_table wl, tab;
    md_rng rng;
    md_status st;
    int M, k, n, a, res, pairs, *order = NULL;
    unsigned char *kind = NULL;
    if (!sys || !top || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/top/lj", "is NULL");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.pairs < 0) return md_set_error(MD_ERR_RANGE, fn, 0, "pairs", "must be >= 0 (got %d)", d.pairs);
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    memset(&tab, 0, sizeof tab);
    if ((st = md_build_water_box(&ws, &wt, &wl, &d.water)) != MD_OK) return st;
    M = ws.n / 3;
    pairs = d.pairs;
    if (pairs == 0) { /* 0.15 mol/L: 0.15 N_A per litre, 1 nm^3 = 1e-24 L */
        pairs = (int)floor(0.15 * 6.02214076e23 * ws.box[0] * ws.box[1] * ws.box[2] * 1e-24 + 0.5);
        if (pairs < 1) pairs = 1;
    }
    if (2.0 * pairs >= M) {
        st = md_set_error(MD_ERR_RANGE, fn, 0, "pairs", "%d ion pairs need more than the %d water molecules", pairs, M);
        goto fail;
    }
    order = (int *)md_alloc_array((size_t)M, sizeof(int));
    kind = (unsigned char *)md_alloc_array((size_t)M, 1);
    n = 3 * (M - 2 * pairs) + 2 * pairs;
    if (!order || !kind || (st = md_system_alloc(&s, n)) != MD_OK) {
        if (!order || !kind) st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "pairs", "out of memory");
        goto fail;
    }
    md_rng_seed(&rng, d.water.seed);
    for (k = 0; k < M; k++) order[k] = k;
    for (k = M - 1; k > 0; k--) { /* Fisher-Yates */
        int j = (int)(md_rng_uniform(&rng) * (k + 1)), tmp;
        if (j > k) j = k;
        tmp = order[k];
        order[k] = order[j];
        order[j] = tmp;
    }
    memset(kind, 0, (size_t)M);
    for (k = 0; k < 2 * pairs; k++) kind[order[k]] = (unsigned char)(k < pairs ? 1 : 2);
    for (k = 0, a = 0, res = 1; k < M; k++, res++) {
        int b, nat = kind[k] ? 1 : 3;
        for (b = 0; b < nat; b++, a++) {
            int src = 3 * k + b;
            s.xyzq[a] = ws.xyzq[src];
            s.vel[a] = ws.vel[src];
            s.mass[a] = ws.mass[src];
            s.name[a] = ws.name[src];
            s.resname[a] = ws.resname[src];
            s.resid[a] = res;
            if (kind[k]) {
                md__set_name(&s.name[a], kind[k] == 1 ? "NA" : "CL");
                md__set_name(&s.resname[a], kind[k] == 1 ? "NA" : "CL");
            }
        }
    }
    memcpy(s.box, ws.box, sizeof s.box);
    if ((st = md_topology_water_ions(&s, d.water.model, &t, &tab)) != MD_OK) goto fail;
    for (a = 0; a < n; a++) {
        s.xyzq[a].w = t.charge[a];
        s.mass[a] = t.mass[a];
        s.type[a] = t.lj_type[a];
    }
    md_free(order);
    md_free(kind);
    md_system_free(&ws);
    md_topology_free(&wt);
    md_lj_table_free(&wl);
    *sys = s;
    *top = t;
    *lj = tab;
    return MD_OK;
fail:
    md_free(order);
    md_free(kind);
    md_system_free(&ws);
    md_topology_free(&wt);
    md_lj_table_free(&wl);
    md_system_free(&s);
    md_topology_free(&t);
    md_lj_table_free(&tab);
    return st;
}

/* ---- ewald ---- */

#define MD__PI 3.14159265358979323846

/* Threads for an OpenMP loop over work buffers held per thread (1 without OpenMP). */
static int md__omp_threads(void) {
#if defined(_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int md__omp_thread(void) {
#if defined(_OPENMP)
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static md_status md__check_box3(const char *fn, const double box[3]) {
    if (!box) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "box", "is NULL");
    if (!md__box_ok(box))
        return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edges must be finite and > 0 (got %g %g %g)", box[0], box[1],
                            box[2]);
    return MD_OK;
}

static md_status md__check_tolerance(const char *fn, double tol) {
    if (!(tol > 0.0 && tol < 0.5))
        return md_set_error(MD_ERR_RANGE, fn, 0, "tolerance", "must be in (0, 0.5) (got %g)", tol);
    return MD_OK;
}

static md_status md__check_positive(const char *fn, const char *field, double v) {
    if (!(v > 0.0) || !isfinite(v)) return md_set_error(MD_ERR_RANGE, fn, 0, field, "must be finite and > 0 (got %g)", v);
    return MD_OK;
}

MDDEF md_status md_ewald_params_resolve(const md_ewald_params *in, const double box[3], md_ewald_params *out) {
    const char *fn = "md_ewald_params_resolve";
    md_ewald_params p;
    md_status st;
    int d;
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "out", "is NULL");
    if (in) p = *in;
    else memset(&p, 0, sizeof p);
    if ((st = md__check_box3(fn, box)) != MD_OK) return st;
    if (p.tolerance == 0.0) p.tolerance = MD_NB_DEFAULT_EWALD_TOLERANCE;
    if (p.rc == 0.0) p.rc = MD_NB_DEFAULT_CUTOFF;
    if ((st = md__check_tolerance(fn, p.tolerance)) != MD_OK || (st = md__check_positive(fn, "rc", p.rc)) != MD_OK)
        return st;
    if (p.alpha == 0.0) p.alpha = md_ewald_beta(p.rc, p.tolerance);
    if ((st = md__check_positive(fn, "alpha", p.alpha)) != MD_OK) return st;
    if (!(p.k2max >= 0.0) || !isfinite(p.k2max))
        return md_set_error(MD_ERR_RANGE, fn, 0, "k2max", "must be finite and >= 0 (got %g)", p.k2max);
    for (d = 0; d < 3; d++) {
        if (p.kmax[d] < 0 || p.kmax[d] > 2000)
            return md_set_error(MD_ERR_RANGE, fn, 0, "kmax", "must be in 0..2000 (got %d)", p.kmax[d]);
        if (p.kmax[d] == 0) {
            /* exp(-pi^2 (m / L)^2 / alpha^2) < 1e-12 beyond: m > alpha L sqrt(-ln 1e-12) / pi */
            double k = ceil(p.alpha * box[d] * sqrt(-log(1e-12)) / MD__PI);
            if (k > 2000)
                return md_set_error(MD_ERR_RANGE, fn, 0, "kmax",
                                    "the default kmax %g along axis %d exceeds 2000 (alpha %g, box %g): give kmax", k,
                                    d, p.alpha, box[d]);
            p.kmax[d] = k < 1 ? 1 : (int)k;
        }
    }
    *out = p;
    return MD_OK;
}

/* Check the inputs every Coulomb routine of this section shares. */
static md_status md__coul_inputs(const char *fn, const md_float4 *xyzq, int n, const double box[3]) {
    md_status st;
    if (!xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "xyzq", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be at least 1 (got %d)", n);
    if ((st = md__check_box3(fn, box)) != MD_OK) return st;
    return md__check_coords(fn, xyzq, n, 1);
}

/* exp(i k.r) of atom j for the vector m (3 ints) from the per-axis tables of exp(i 2 pi m x / L),
 * m >= 0 (a negative m takes the conjugate). */
static void md__ewald_phase(double *const tab[3], const int kmax[3], const int *m, int j, double *re, double *im) {
    double r = 1.0, i = 0.0;
    int d;
    for (d = 0; d < 3; d++) {
        const int am = m[d] < 0 ? -m[d] : m[d];
        const double *z = tab[d] + 2 * ((size_t)j * (kmax[d] + 1) + am);
        const double tr = z[0], ti = m[d] < 0 ? -z[1] : z[1], nr = r * tr - i * ti;
        i = r * ti + i * tr;
        r = nr;
    }
    *re = r;
    *im = i;
}

/* The k-space part of md_ewald_compute: per-atom tables of exp(i 2 pi m x / L), the
 * structure factor of every kept k in the half space, then energy, virial and forces. */
static md_status md__ewald_recip(const md_ewald_params *p, const md_float4 *xyzq, int n, const double box[3],
                                 double *f, double *energy, double w[9]) {
    const double V = box[0] * box[1] * box[2], kc = MD_COULOMB, a2 = 4.0 * p->alpha * p->alpha;
    double *tab[3] = {NULL, NULL, NULL}, *kv = NULL, *S = NULL, e = 0.0, wsum[9];
    int *mv = NULL, d, i, K = 0, mx, my, mz, c;
    md_status st = MD_OK;
    /* the kept vectors m: half space (mx > 0, or mx = 0 and (my > 0, or my = 0 and mz > 0)) */
    for (c = 0; c < 2; c++) {
        K = 0;
        for (mx = 0; mx <= p->kmax[0]; mx++)
            for (my = -p->kmax[1]; my <= p->kmax[1]; my++)
                for (mz = -p->kmax[2]; mz <= p->kmax[2]; mz++) {
                    if (!(mx > 0 || my > 0 || (my == 0 && mz > 0))) continue;
                    if (p->k2max > 0.0 && (double)mx * mx + (double)my * my + (double)mz * mz > p->k2max) continue;
                    if (c == 1) {
                        mv[3 * K] = mx;
                        mv[3 * K + 1] = my;
                        mv[3 * K + 2] = mz;
                    }
                    K++;
                }
        if (c == 0) {
            if (K == 0) break;
            mv = (int *)md_alloc_array(3 * (size_t)K, sizeof(int));
            kv = (double *)md_alloc_array(4 * (size_t)K, sizeof(double)); /* kx ky kz f(k) */
            S = (double *)md_alloc_array(2 * (size_t)K, sizeof(double));
            if (!mv || !kv || !S) {
                st = md_set_error(MD_ERR_OUT_OF_MEMORY, "md_ewald_compute", 0, "kmax", "cannot hold %d k vectors", K);
                goto done;
            }
        }
    }
    for (d = 0; d < 3; d++) {
        int km = p->kmax[d];
        if (!(tab[d] = (double *)md_alloc_array((size_t)n * (size_t)(km + 1), 2 * sizeof(double)))) {
            st = md_set_error(MD_ERR_OUT_OF_MEMORY, "md_ewald_compute", 0, "kmax", "cannot hold the tables");
            goto done;
        }
        MD__OMP_FOR
        for (i = 0; i < n; i++) {
            double x = (&xyzq[i].x)[d];
            int m;
            for (m = 0; m <= km; m++) {
                double th = 2.0 * MD__PI * m * x / box[d];
                tab[d][2 * ((size_t)i * (km + 1) + m)] = cos(th);
                tab[d][2 * ((size_t)i * (km + 1) + m) + 1] = sin(th);
            }
        }
    }
    /* S(k) = sum_j q_j exp(i k.r_j), one k per iteration, atoms in order */
    MD__OMP_FOR
    for (c = 0; c < K; c++) {
        double k[3], k2, C = 0.0, Ss = 0.0;
        int j, dd;
        for (dd = 0; dd < 3; dd++) k[dd] = 2.0 * MD__PI * mv[3 * c + dd] / box[dd];
        k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
        for (j = 0; j < n; j++) {
            double re, im;
            md__ewald_phase(tab, p->kmax, mv + 3 * c, j, &re, &im);
            C += xyzq[j].w * re;
            Ss += xyzq[j].w * im;
        }
        S[2 * c] = C;
        S[2 * c + 1] = Ss;
        kv[4 * c] = k[0];
        kv[4 * c + 1] = k[1];
        kv[4 * c + 2] = k[2];
        kv[4 * c + 3] = exp(-k2 / a2) / k2;
    }
    /* energy and virial: E_k = k 4 pi / V f(k) |S|^2 per half-space vector (its mirror included) */
    memset(wsum, 0, sizeof wsum);
    for (c = 0; c < K; c++) {
        const double *k = kv + 4 * c;
        double k2 = k[0] * k[0] + k[1] * k[1] + k[2] * k[2];
        double ek = kc * 4.0 * MD__PI / V * k[3] * (S[2 * c] * S[2 * c] + S[2 * c + 1] * S[2 * c + 1]);
        double g = 2.0 * (1.0 / k2 + 1.0 / a2);
        int aa, bb;
        e += ek;
        for (aa = 0; aa < 3; aa++)
            for (bb = 0; bb < 3; bb++) wsum[3 * aa + bb] += ek * ((aa == bb ? 1.0 : 0.0) - g * k[aa] * k[bb]);
    }
    /* forces: F_j = k 8 pi / V q_j sum_k f(k) k (C sin(k.r_j) - S cos(k.r_j)) */
    MD__OMP_FOR
    for (i = 0; i < n; i++) {
        double fx = 0.0, fy = 0.0, fz = 0.0, s = kc * 8.0 * MD__PI / V * xyzq[i].w;
        int cc;
        for (cc = 0; cc < K; cc++) {
            double re, im, t;
            md__ewald_phase(tab, p->kmax, mv + 3 * cc, i, &re, &im);
            t = kv[4 * cc + 3] * (S[2 * cc] * im - S[2 * cc + 1] * re);
            fx += t * kv[4 * cc];
            fy += t * kv[4 * cc + 1];
            fz += t * kv[4 * cc + 2];
        }
        f[3 * i] += s * fx;
        f[3 * i + 1] += s * fy;
        f[3 * i + 2] += s * fz;
    }
    *energy = e;
    memcpy(w, wsum, sizeof wsum);
done:
    for (d = 0; d < 3; d++) md_free(tab[d]);
    md_free(mv);
    md_free(kv);
    md_free(S);
    return st;
}

MDDEF md_status md_ewald_compute(const md_ewald_params *params, const md_topology *t, const md_float4 *xyzq, int n,
                                 const double box[3], double *force, md_energy *energy) {
    const char *fn = "md_ewald_compute";
    md_ewald_params p;
    md_energy e;
    md_status st;
    double *f = NULL, *pe = NULL, *pw = NULL, rc2, q = 0.0, q2 = 0.0, wr[9];
    int i, x, nmax[3];
    if ((st = md__coul_inputs(fn, xyzq, n, box)) != MD_OK) return st;
    if (t) {
        if ((st = md__topology_check_fast(t, NULL, fn)) != MD_OK) return st;
        if (t->n != n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has %d atoms, xyzq %d", t->n, n);
    }
    if ((st = md_ewald_params_resolve(params, box, &p)) != MD_OK) return st;
    f = (double *)md_alloc_array(3 * (size_t)n, sizeof(double));
    pe = (double *)md_alloc_array(2 * (size_t)n, sizeof(double)); /* per atom: real, excl */
    pw = (double *)md_alloc_array(9 * (size_t)n, sizeof(double));
    if (!f || !pe || !pw) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate %d atoms", n);
        goto done;
    }
    memset(&e, 0, sizeof e);
    rc2 = p.rc * p.rc;
    for (x = 0; x < 3; x++) { /* |d0 + m L| >= |m| L - L / 2 for a minimum-image d0 */
        nmax[x] = (int)ceil(p.rc / box[x] + 0.5) - 1;
        if (nmax[x] < 0) nmax[x] = 0;
    }
    /* real space and exclusions: atom i sums half of each of its pair terms, all of its force */
    MD__OMP_FOR
    for (i = 0; i < n; i++) {
        double er = 0.0, ex = 0.0, fi[3] = {0.0, 0.0, 0.0}, wi[9];
        int j, a, b, c, k;
        memset(wi, 0, sizeof wi);
        for (j = 0; j < n; j++) {
            double d0[3], qq = MD_COULOMB * (double)xyzq[i].w * xyzq[j].w;
            int excluded = j != i && t && md_topology_excluded(t, i, j);
            for (k = 0; k < 3; k++) {
                d0[k] = (double)(&xyzq[i].x)[k] - (double)(&xyzq[j].x)[k];
                d0[k] -= box[k] * floor(d0[k] / box[k] + 0.5);
            }
            for (a = -nmax[0]; a <= nmax[0]; a++)
                for (b = -nmax[1]; b <= nmax[1]; b++)
                    for (c = -nmax[2]; c <= nmax[2]; c++) {
                        double d[3], r2, r, fr, ee;
                        int image0 = a == 0 && b == 0 && c == 0, u, v;
                        if (j == i && image0) continue;
                        d[0] = d0[0] + a * box[0];
                        d[1] = d0[1] + b * box[1];
                        d[2] = d0[2] + c * box[2];
                        r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
                        if (excluded && image0) { /* -k qq erf(alpha r) / r */
                            if (r2 == 0.0) {
                                ex += 0.5 * -qq * 2.0 * p.alpha / sqrt(MD__PI);
                                continue;
                            }
                            r = sqrt(r2);
                            ee = -qq * erf(p.alpha * r) / r;
                            fr = (qq * 2.0 * p.alpha / sqrt(MD__PI) * exp(-p.alpha * p.alpha * r2) + ee) / r2;
                            ex += 0.5 * ee;
                        } else {
                            if (r2 >= rc2) continue;
                            r = sqrt(r2);
                            ee = qq * erfc(p.alpha * r) / r;
                            fr = (qq * 2.0 * p.alpha / sqrt(MD__PI) * exp(-p.alpha * p.alpha * r2) + ee) / r2;
                            er += 0.5 * ee;
                        }
                        if (j != i)
                            for (u = 0; u < 3; u++) fi[u] += fr * d[u];
                        for (u = 0; u < 3; u++)
                            for (v = 0; v < 3; v++) wi[3 * u + v] += 0.5 * d[u] * fr * d[v];
                    }
        }
        pe[2 * i] = er;
        pe[2 * i + 1] = ex;
        for (k = 0; k < 3; k++) f[3 * i + k] = fi[k];
        for (k = 0; k < 9; k++) pw[9 * i + k] = wi[k];
    }
    for (i = 0; i < n; i++) {
        e.coul_real += pe[2 * i];
        e.coul_excl += pe[2 * i + 1];
        for (x = 0; x < 9; x++) e.virial[x] += pw[9 * i + x];
        q += xyzq[i].w;
        q2 += (double)xyzq[i].w * xyzq[i].w;
    }
    if ((st = md__ewald_recip(&p, xyzq, n, box, f, &e.coul_recip, wr)) != MD_OK) goto done;
    for (x = 0; x < 9; x++) e.virial[x] += wr[x];
    { /* the neutralising background of a net charge: -k pi Q^2 / (2 V alpha^2), W_aa += E */
        double ebg = -MD_COULOMB * MD__PI * q * q / (2.0 * box[0] * box[1] * box[2] * p.alpha * p.alpha);
        e.coul_recip += ebg;
        for (x = 0; x < 3; x++) e.virial[4 * x] += ebg;
    }
    e.coul_self = -MD_COULOMB * p.alpha / sqrt(MD__PI) * q2;
    if (force) memcpy(force, f, 3 * (size_t)n * sizeof(double));
    if (energy) *energy = e;
done:
    md_free(f);
    md_free(pe);
    md_free(pw);
    return st;
}

/* ---- pme: the FFT ---- */

MDDEF void md_fft_plan_free(md_fft_plan *p) {
    if (!p) return;
    md_free(p->twiddle);
    memset(p, 0, sizeof *p);
}

MDDEF md_status md_fft_plan_create(md_fft_plan *p, int n) {
    const char *fn = "md_fft_plan_create";
    md_fft_plan q;
    int m, r, k;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    if (n < 1 || n > (1 << 24)) return md_set_error(MD_ERR_RANGE, fn, 0, "n", "must be in 1..2^24 (got %d)", n);
    memset(&q, 0, sizeof q);
    q.n = n;
    /* radices: 4 while it divides, then 2, then odd numbers upward (only primes divide by then) */
    for (m = n, r = 4; m > 1;) {
        while (m % r) {
            r = r == 4 ? 2 : (r == 2 ? 3 : r + 2);
            if ((long long)r * r > m) r = m;
        }
        q.factor[q.nfactors++] = r;
        m /= r;
    }
    if (!(q.twiddle = (double *)md_alloc_array(2 * (size_t)n, sizeof(double))))
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate twiddles for %d", n);
    for (k = 0; k < n; k++) {
        double th = -2.0 * MD__PI * k / n;
        q.twiddle[2 * k] = cos(th);
        q.twiddle[2 * k + 1] = sin(th);
    }
    *p = q;
    return MD_OK;
}

/* Decimation in time, recursively: out[0 .. L) = DFT of L inputs in[0], in[s], in[2s] .. with
 * L = n / s and s = fstride (complex units). Sub-transform q of length m = L / radix takes the
 * inputs q, q + radix, ...; the butterfly combines the radix sub-results with the twiddles
 * W_L^(q k) = twiddle[fstride q k mod n] (conjugated for the backward sign) by a direct DFT. */
static void md__fft_rec(const md_fft_plan *p, double *out, const double *in, int fstride, int level, int sign,
                        double *scr) {
    const int radix = p->factor[level], L = p->n / fstride, m = L / radix;
    const double *tw = p->twiddle;
    int q, u, k;
    if (m == 1) {
        for (q = 0; q < radix; q++) {
            out[2 * q] = in[2 * (size_t)q * fstride];
            out[2 * q + 1] = in[2 * (size_t)q * fstride + 1];
        }
    } else {
        for (q = 0; q < radix; q++)
            md__fft_rec(p, out + 2 * (size_t)q * m, in + 2 * (size_t)q * fstride, fstride * radix, level + 1, sign, scr);
    }
    for (u = 0; u < m; u++) {
        for (q = 0; q < radix; q++) {
            scr[2 * q] = out[2 * (u + (size_t)q * m)];
            scr[2 * q + 1] = out[2 * (u + (size_t)q * m) + 1];
        }
        for (k = 0; k < radix; k++) {
            const long long step = ((long long)fstride * (u + (long long)k * m)) % p->n;
            long long idx = 0;
            double re = scr[0], im = scr[1];
            for (q = 1; q < radix; q++) {
                double wr, wi;
                idx += step;
                if (idx >= p->n) idx -= p->n;
                wr = tw[2 * idx];
                wi = sign > 0 ? -tw[2 * idx + 1] : tw[2 * idx + 1];
                re += scr[2 * q] * wr - scr[2 * q + 1] * wi;
                im += scr[2 * q] * wi + scr[2 * q + 1] * wr;
            }
            out[2 * (u + (size_t)k * m)] = re;
            out[2 * (u + (size_t)k * m) + 1] = im;
        }
    }
}

MDDEF void md_fft_complex(const md_fft_plan *p, double *data, int sign, double *work) {
    if (!p || !p->twiddle || !data || !work || p->n == 1) return;
    memcpy(work, data, 2 * (size_t)p->n * sizeof(double));
    md__fft_rec(p, data, work, 1, 0, sign, work + 2 * (size_t)p->n);
}

MDDEF void md_fft3d_free(md_fft3d *p) {
    int d;
    if (!p) return;
    for (d = 0; d < 3; d++) md_fft_plan_free(&p->axis[d]);
    md_fft_plan_free(&p->half);
    md_free(p->work);
    memset(p, 0, sizeof *p);
}

MDDEF md_status md_fft3d_create(md_fft3d *p, const int n[3]) {
    const char *fn = "md_fft3d_create";
    md_fft3d q;
    md_status st;
    int d, nmax = 1;
    if (!p || !n) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p/n", "is NULL");
    for (d = 0; d < 3; d++) {
        if (n[d] < 1 || n[d] > 65536) return md_set_error(MD_ERR_RANGE, fn, 0, "n", "must be in 1..65536 (got %d)", n[d]);
        if (n[d] > nmax) nmax = n[d];
    }
    if ((double)n[0] * n[1] * n[2] >= 2147483648.0)
        return md_set_error(MD_ERR_RANGE, fn, 0, "n", "%d x %d x %d points is too many", n[0], n[1], n[2]);
    memset(&q, 0, sizeof q);
    memcpy(q.n, n, sizeof q.n);
    q.nh = n[2] / 2 + 1;
    for (d = 0; d < 3; d++)
        if ((st = md_fft_plan_create(&q.axis[d], n[d])) != MD_OK) goto fail;
    if (n[2] % 2 == 0 && (st = md_fft_plan_create(&q.half, n[2] / 2)) != MD_OK) goto fail;
    q.nthreads = md__omp_threads();
    q.work_stride = 8 * (size_t)nmax + 16; /* a line (2 nmax) and md_fft_complex's work (4 nmax) */
    if (!(q.work = (double *)md_alloc_array((size_t)q.nthreads * q.work_stride, sizeof(double)))) {
        st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate work buffers");
        goto fail;
    }
    *p = q;
    return MD_OK;
fail:
    md_fft3d_free(&q);
    return st;
}

/* One real line x[0 .. n) -> X[0 .. n/2] (n/2 + 1 complex values). Even n: the even and odd
 * samples packed as one complex line z of length h = n/2, Z = FFT(z), then
 * X_k = E_k + w^k O_k with E_k = (Z_k + conj Z_{h-k}) / 2, O_k = (Z_k - conj Z_{h-k}) / (2i),
 * w = exp(-2 pi i / n). Odd n: one complex FFT of the whole line. */
static void md__rfft_line(const md_fft3d *p, const double *x, double *X, double *buf, double *work) {
    const int n = p->n[2];
    int k;
    if (n % 2 == 0) {
        const int h = n / 2;
        const double *tw = p->axis[2].twiddle;
        memcpy(buf, x, (size_t)n * sizeof(double));
        md_fft_complex(&p->half, buf, -1, work);
        for (k = 0; k <= h; k++) {
            int a = k % h, b = (h - k) % h;
            double zr = buf[2 * a], zi = buf[2 * a + 1], cr = buf[2 * b], ci = -buf[2 * b + 1];
            double er = 0.5 * (zr + cr), ei = 0.5 * (zi + ci);
            double orr = 0.5 * (zi - ci), oi = -0.5 * (zr - cr); /* (Z - conj Z') / (2i) */
            double wr = tw[2 * (k % n)], wi = tw[2 * (k % n) + 1];
            X[2 * k] = er + wr * orr - wi * oi;
            X[2 * k + 1] = ei + wr * oi + wi * orr;
        }
    } else {
        for (k = 0; k < n; k++) {
            buf[2 * k] = x[k];
            buf[2 * k + 1] = 0.0;
        }
        md_fft_complex(&p->axis[2], buf, -1, work);
        memcpy(X, buf, 2 * (size_t)p->nh * sizeof(double));
    }
}

/* The inverse of md__rfft_line, unnormalised: X[0 .. n/2] of a Hermitian line -> x[0 .. n).
 * Even n: Z_k = (X_k + conj X_{h-k}) + i w^-k (X_k - conj X_{h-k}), z = IFFT_h(Z), then
 * x[2j] = Re z_j, x[2j+1] = Im z_j. */
static void md__irfft_line(const md_fft3d *p, const double *X, double *x, double *buf, double *work) {
    const int n = p->n[2];
    int k;
    if (n % 2 == 0) {
        const int h = n / 2;
        const double *tw = p->axis[2].twiddle;
        for (k = 0; k < h; k++) {
            double ar = X[2 * k], ai = X[2 * k + 1], br = X[2 * (h - k)], bi = -X[2 * (h - k) + 1];
            double sr = ar + br, si = ai + bi, dr = ar - br, di = ai - bi;
            double wr = tw[2 * k], wi = -tw[2 * k + 1]; /* w^-k = exp(+2 pi i k / n) */
            double tr = wr * dr - wi * di, ti = wr * di + wi * dr;
            buf[2 * k] = sr - ti; /* + i (tr + i ti) */
            buf[2 * k + 1] = si + tr;
        }
        md_fft_complex(&p->half, buf, 1, work);
        memcpy(x, buf, (size_t)n * sizeof(double));
    } else {
        for (k = 0; k < p->nh; k++) {
            buf[2 * k] = X[2 * k];
            buf[2 * k + 1] = X[2 * k + 1];
        }
        for (k = p->nh; k < n; k++) {
            buf[2 * k] = X[2 * (n - k)];
            buf[2 * k + 1] = -X[2 * (n - k) + 1];
        }
        md_fft_complex(&p->axis[2], buf, 1, work);
        for (k = 0; k < n; k++) x[k] = buf[2 * k];
    }
}

/* Complex FFTs along axis 0 (@p axis 0) or 1 of the n0 x n1 x nh half grid @p g, in place. */
static void md__fft3d_axis(md_fft3d *p, double *g, int axis, int sign) {
    const int n0 = p->n[0], n1 = p->n[1], nh = p->nh, len = p->n[axis];
    const int lines = axis == 0 ? n1 * nh : n0 * nh;
    const size_t stride = axis == 0 ? (size_t)n1 * nh : (size_t)nh;
    int l;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(p->nthreads) schedule(static)
#endif
    for (l = 0; l < lines; l++) {
        double *buf = p->work + (size_t)md__omp_thread() * p->work_stride, *work = buf + 2 * (size_t)len + 4;
        size_t base = axis == 0 ? (size_t)l : (size_t)(l / nh) * n1 * nh + (size_t)(l % nh);
        int k;
        for (k = 0; k < len; k++) {
            buf[2 * k] = g[2 * (base + k * stride)];
            buf[2 * k + 1] = g[2 * (base + k * stride) + 1];
        }
        md_fft_complex(&p->axis[axis], buf, sign, work);
        for (k = 0; k < len; k++) {
            g[2 * (base + k * stride)] = buf[2 * k];
            g[2 * (base + k * stride) + 1] = buf[2 * k + 1];
        }
    }
}

MDDEF void md_fft3d_r2c(md_fft3d *p, const double *in, double *out) {
    int r, rows;
    if (!p || !p->work || !in || !out) return;
    rows = p->n[0] * p->n[1];
#if defined(_OPENMP)
#pragma omp parallel for num_threads(p->nthreads) schedule(static)
#endif
    for (r = 0; r < rows; r++) {
        double *buf = p->work + (size_t)md__omp_thread() * p->work_stride;
        md__rfft_line(p, in + (size_t)r * p->n[2], out + 2 * (size_t)r * p->nh, buf, buf + 2 * (size_t)p->n[2] + 4);
    }
    md__fft3d_axis(p, out, 1, -1);
    md__fft3d_axis(p, out, 0, -1);
}

MDDEF void md_fft3d_c2r(md_fft3d *p, double *in, double *out) {
    int r, rows;
    if (!p || !p->work || !in || !out) return;
    rows = p->n[0] * p->n[1];
    md__fft3d_axis(p, in, 0, 1);
    md__fft3d_axis(p, in, 1, 1);
#if defined(_OPENMP)
#pragma omp parallel for num_threads(p->nthreads) schedule(static)
#endif
    for (r = 0; r < rows; r++) {
        double *buf = p->work + (size_t)md__omp_thread() * p->work_stride;
        md__irfft_line(p, in + 2 * (size_t)r * p->nh, out + (size_t)r * p->n[2], buf, buf + 2 * (size_t)p->n[2] + 4);
    }
}

/* ---- pme ---- */

MDDEF int md_fft_good_size(int n) {
    static const int primes[4] = {2, 3, 5, 7};
    if (n < 1) n = 1;
    for (; n < (1 << 30); n++) {
        int m = n, k;
        for (k = 0; k < 4; k++)
            while (m % primes[k] == 0) m /= primes[k];
        if (m == 1) break;
    }
    return n;
}

MDDEF md_status md_pme_choose(double tolerance, double cutoff, const double box[3], double *alpha, int grid[3]) {
    const char *fn = "md_pme_choose";
    md_status st;
    double a;
    int d, g[3];
    if (!alpha || !grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "alpha/grid", "is NULL");
    if ((st = md__check_tolerance(fn, tolerance)) != MD_OK || (st = md__check_positive(fn, "cutoff", cutoff)) != MD_OK ||
        (st = md__check_box3(fn, box)) != MD_OK)
        return st;
    a = md_ewald_beta(cutoff, tolerance);
    for (d = 0; d < 3; d++) {
        double k = ceil(2.0 * a * box[d] / (3.0 * pow(tolerance, 0.2)));
        if (k > 4096)
            return md_set_error(MD_ERR_RANGE, fn, 0, "box", "%g nm needs %g grid points (more than 4096)", box[d], k);
        g[d] = md_fft_good_size(k < 6 ? 6 : (int)k);
    }
    *alpha = a;
    memcpy(grid, g, sizeof g);
    return MD_OK;
}

MDDEF md_status md_pme_params_resolve(const md_pme_params *in, const double box[3], md_pme_params *out) {
    const char *fn = "md_pme_params_resolve";
    md_pme_params p;
    md_status st;
    int d, missing = 0;
    if (!out) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "out", "is NULL");
    if (in) p = *in;
    else memset(&p, 0, sizeof p);
    if (p.tolerance == 0.0) p.tolerance = MD_NB_DEFAULT_EWALD_TOLERANCE;
    if (p.cutoff == 0.0) p.cutoff = MD_NB_DEFAULT_CUTOFF;
    if (p.order == 0) p.order = MD_PME_DEFAULT_ORDER;
    if ((st = md__check_tolerance(fn, p.tolerance)) != MD_OK || (st = md__check_positive(fn, "cutoff", p.cutoff)) != MD_OK)
        return st;
    if (p.alpha == 0.0) p.alpha = md_ewald_beta(p.cutoff, p.tolerance);
    if ((st = md__check_positive(fn, "alpha", p.alpha)) != MD_OK) return st;
    if (p.order < MD_PME_MIN_ORDER || p.order > MD_PME_MAX_ORDER)
        return md_set_error(MD_ERR_RANGE, fn, 0, "order", "must be in %d..%d (got %d)", MD_PME_MIN_ORDER,
                            MD_PME_MAX_ORDER, p.order);
    if (!(p.spacing >= 0.0) || !isfinite(p.spacing))
        return md_set_error(MD_ERR_RANGE, fn, 0, "spacing", "must be finite and >= 0 (got %g)", p.spacing);
    for (d = 0; d < 3; d++) missing |= p.grid[d] == 0;
    if (missing) {
        double a;
        int g[3];
        if ((st = md__check_box3(fn, box)) != MD_OK) return st;
        if ((st = md_pme_choose(p.tolerance, p.cutoff, box, &a, g)) != MD_OK) return st;
        for (d = 0; d < 3; d++) {
            if (p.grid[d] != 0) continue;
            if (p.spacing > 0.0) {
                double k = ceil(box[d] / p.spacing);
                if (k > 4096)
                    return md_set_error(MD_ERR_RANGE, fn, 0, "spacing", "%g nm gives more than 4096 points on %g nm",
                                        p.spacing, box[d]);
                p.grid[d] = md_fft_good_size((int)k);
            } else {
                p.grid[d] = g[d];
            }
        }
    }
    for (d = 0; d < 3; d++)
        if (p.grid[d] < p.order || p.grid[d] > 4096)
            return md_set_error(MD_ERR_RANGE, fn, 0, "grid", "%d points along axis %d: must be in order (%d)..4096",
                                p.grid[d], d, p.order);
    *out = p;
    return MD_OK;
}

MDDEF void md_pme_bspline(double u, int order, double *w, double *dw) {
    double m[MD_PME_MAX_ORDER + 1][MD_PME_MAX_ORDER + 1], t = u - floor(u);
    int k, i, j;
    if (order < 2 || order > MD_PME_MAX_ORDER) return;
    /* m[k][i] = M_k(t + i), i = 0 .. k-1: the order-k spline on its k unit intervals */
    m[1][0] = 1.0;
    for (k = 2; k <= order; k++)
        for (i = 0; i < k; i++) {
            double x = t + i, here = i <= k - 2 ? m[k - 1][i] : 0.0, left = i >= 1 ? m[k - 1][i - 1] : 0.0;
            m[k][i] = (x * here + (k - x) * left) / (k - 1);
        }
    for (j = 0; j < order; j++) {
        i = order - 1 - j; /* grid point floor(u) + j sits at distance t + i from the spline's start */
        if (w) w[j] = m[order][i];
        /* M_p'(x) = M_{p-1}(x) - M_{p-1}(x - 1) */
        if (dw) dw[j] = (i <= order - 2 ? m[order - 1][i] : 0.0) - (i >= 1 ? m[order - 1][i - 1] : 0.0);
    }
}

MDDEF md_status md_pme_bspline_moduli(int K, int order, double *mod) {
    const char *fn = "md_pme_bspline_moduli";
    double w[MD_PME_MAX_ORDER];
    int m, k;
    if (!mod) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "mod", "is NULL");
    if (order < 2 || order > MD_PME_MAX_ORDER || K < order)
        return md_set_error(MD_ERR_RANGE, fn, 0, "K/order", "need 2 <= order <= %d <= K (got order %d, K %d)",
                            MD_PME_MAX_ORDER, order, K);
    md_pme_bspline(0.0, order, w, NULL); /* w[j] = M_p(p - 1 - j): M_p(k + 1) = w[p - 2 - k] */
    for (m = 0; m < K; m++) {
        double sc = 0.0, ss = 0.0;
        for (k = 0; k <= order - 2; k++) {
            double th = 2.0 * MD__PI * (double)m * k / K;
            sc += w[order - 2 - k] * cos(th);
            ss += w[order - 2 - k] * sin(th);
        }
        mod[m] = sc * sc + ss * ss;
    }
    for (m = 0; m < K; m++)
        if (mod[m] < 1e-7) mod[m] = 0.5 * (mod[(m - 1 + K) % K] + mod[(m + 1) % K]);
    return MD_OK;
}

MDDEF void md_pme_plan_free(md_pme_plan *p) {
    int d;
    if (!p) return;
    md_fft3d_free(&p->fft);
    for (d = 0; d < 3; d++) md_free(p->mod[d]);
    md_free(p->grid);
    md_free(p->cgrid);
    md_free(p->scratch);
    memset(p, 0, sizeof *p);
}

MDDEF md_status md_pme_plan_create(md_pme_plan *p, const md_pme_params *params, const double box[3], int capacity) {
    const char *fn = "md_pme_plan_create";
    md_pme_plan q;
    md_status st;
    size_t npts;
    int d;
    if (!p) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL");
    if (capacity < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "capacity", "must be >= 1 (got %d)", capacity);
    memset(&q, 0, sizeof q);
    if ((st = md_pme_params_resolve(params, box, &q.params)) != MD_OK) return st;
    q.capacity = capacity;
    if ((st = md_fft3d_create(&q.fft, q.params.grid)) != MD_OK) return st;
    npts = (size_t)q.params.grid[0] * q.params.grid[1] * q.params.grid[2];
    q.grid = (double *)md_alloc_array(npts, sizeof(double));
    q.cgrid = (double *)md_alloc_array((size_t)q.params.grid[0] * q.params.grid[1] * q.fft.nh, 2 * sizeof(double));
    q.scratch = (double *)md_alloc_array(3 * (size_t)capacity, sizeof(double));
    for (d = 0; d < 3; d++) q.mod[d] = (double *)md_alloc_array((size_t)q.params.grid[d], sizeof(double));
    if (!q.grid || !q.cgrid || !q.scratch || !q.mod[0] || !q.mod[1] || !q.mod[2]) {
        md_pme_plan_free(&q);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "grid", "cannot allocate %d x %d x %d points", q.params.grid[0],
                            q.params.grid[1], q.params.grid[2]);
    }
    for (d = 0; d < 3; d++) (void)md_pme_bspline_moduli(q.params.grid[d], q.params.order, q.mod[d]);
    memset(q.grid, 0, npts * sizeof(double));
    *p = q;
    return MD_OK;
}

/* Fractional grid position of coordinate x on an axis of K points and edge L: in [0, K). */
static double md__pme_u(double x, double L, int K) {
    double s = x / L, u;
    s -= floor(s);
    u = s * K;
    return u >= K ? u - K : u;
}

static md_status md__pme_args(const char *fn, const md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3]) {
    if (!p || !p->grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL or not made");
    if (n > p->capacity)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "%d atoms exceed the plan's capacity %d", n, p->capacity);
    return md__coul_inputs(fn, xyzq, n, box);
}

MDDEF md_status md_pme_spread(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3]) {
    md_status st;
    const int *K;
    int i, o;
    if ((st = md__pme_args("md_pme_spread", p, xyzq, n, box)) != MD_OK) return st;
    K = p->params.grid;
    o = p->params.order;
    memset(p->grid, 0, (size_t)K[0] * K[1] * K[2] * sizeof(double));
    p->charge = p->charge2 = 0.0;
    for (i = 0; i < n; i++) {
        double w[3][MD_PME_MAX_ORDER], q = xyzq[i].w;
        int g0[3], a, b, c, d;
        for (d = 0; d < 3; d++) {
            double u = md__pme_u((&xyzq[i].x)[d], box[d], K[d]);
            g0[d] = (int)u;
            md_pme_bspline(u, o, w[d], NULL);
        }
        for (a = 0; a < o; a++) {
            int ga = (g0[0] + a) % K[0];
            for (b = 0; b < o; b++) {
                int gb = (g0[1] + b) % K[1];
                double *row = p->grid + ((size_t)ga * K[1] + gb) * K[2], qab = q * w[0][a] * w[1][b];
                for (c = 0; c < o; c++) row[(g0[2] + c) % K[2]] += qab * w[2][c];
            }
        }
        p->charge += q;
        p->charge2 += (double)q * q;
    }
    return MD_OK;
}

MDDEF md_status md_pme_forward(md_pme_plan *p) {
    if (!p || !p->grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_pme_forward", 0, "p", "is NULL or not made");
    md_fft3d_r2c(&p->fft, p->grid, p->cgrid);
    return MD_OK;
}

MDDEF md_status md_pme_backward(md_pme_plan *p) {
    if (!p || !p->grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_pme_backward", 0, "p", "is NULL or not made");
    md_fft3d_c2r(&p->fft, p->cgrid, p->grid);
    return MD_OK;
}

MDDEF md_status md_pme_solve(md_pme_plan *p, const double box[3]) {
    const char *fn = "md_pme_solve";
    md_status st;
    const int *K;
    double V, fac, *part, ebg;
    int a, x, nh;
    if (!p || !p->grid) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "p", "is NULL or not made");
    if ((st = md__check_box3(fn, box)) != MD_OK) return st;
    K = p->params.grid;
    nh = p->fft.nh;
    V = box[0] * box[1] * box[2];
    fac = MD__PI * MD__PI / (p->params.alpha * p->params.alpha);
    if (!(part = (double *)md_alloc_array((size_t)K[0], 10 * sizeof(double))))
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "grid", "out of memory");
    /* one plane a per iteration, its energy and virial kept apart and summed in order */
    MD__OMP_FOR
    for (a = 0; a < K[0]; a++) {
        double e = 0.0, w[9], m[3];
        int b, c, u, v;
        memset(w, 0, sizeof w);
        m[0] = (a < (K[0] + 1) / 2 ? a : a - K[0]) / box[0];
        for (b = 0; b < K[1]; b++) {
            m[1] = (b < (K[1] + 1) / 2 ? b : b - K[1]) / box[1];
            for (c = 0; c < nh; c++) {
                double *z = p->cgrid + 2 * (((size_t)a * K[1] + b) * nh + c), m2, eterm, ek, g;
                int weight = (c == 0 || (K[2] % 2 == 0 && c == K[2] / 2)) ? 1 : 2;
                m[2] = c / box[2];
                m2 = m[0] * m[0] + m[1] * m[1] + m[2] * m[2];
                if (m2 == 0.0) {
                    z[0] = z[1] = 0.0;
                    continue;
                }
                eterm = MD_COULOMB * exp(-fac * m2) / (MD__PI * V * m2 * p->mod[0][a] * p->mod[1][b] * p->mod[2][c]);
                ek = 0.5 * weight * eterm * (z[0] * z[0] + z[1] * z[1]);
                g = 2.0 * (1.0 + fac * m2) / m2;
                e += ek;
                for (u = 0; u < 3; u++)
                    for (v = 0; v < 3; v++) w[3 * u + v] += ek * ((u == v ? 1.0 : 0.0) - g * m[u] * m[v]);
                z[0] *= eterm;
                z[1] *= eterm;
            }
        }
        part[10 * (size_t)a] = e;
        for (u = 0; u < 9; u++) part[10 * (size_t)a + 1 + u] = w[u];
    }
    p->energy = 0.0;
    memset(p->virial, 0, sizeof p->virial);
    for (a = 0; a < K[0]; a++) {
        p->energy += part[10 * (size_t)a];
        for (x = 0; x < 9; x++) p->virial[x] += part[10 * (size_t)a + 1 + x];
    }
    md_free(part);
    /* the neutralising background: -k pi Q^2 / (2 V alpha^2), W_aa += E */
    ebg = -MD_COULOMB * MD__PI * p->charge * p->charge / (2.0 * V * p->params.alpha * p->params.alpha);
    p->energy += ebg;
    for (x = 0; x < 3; x++) p->virial[4 * x] += ebg;
    return MD_OK;
}

MDDEF md_status md_pme_gather(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3], double *force) {
    md_status st;
    const int *K;
    int i, o;
    if ((st = md__pme_args("md_pme_gather", p, xyzq, n, box)) != MD_OK) return st;
    if (!force) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_pme_gather", 0, "force", "is NULL");
    K = p->params.grid;
    o = p->params.order;
    MD__OMP_FOR
    for (i = 0; i < n; i++) {
        double w[3][MD_PME_MAX_ORDER], dw[3][MD_PME_MAX_ORDER], f[3] = {0.0, 0.0, 0.0}, q = xyzq[i].w;
        int g0[3], a, b, c, d;
        for (d = 0; d < 3; d++) {
            double u = md__pme_u((&xyzq[i].x)[d], box[d], K[d]);
            g0[d] = (int)u;
            md_pme_bspline(u, o, w[d], dw[d]);
        }
        for (a = 0; a < o; a++) {
            int ga = (g0[0] + a) % K[0];
            for (b = 0; b < o; b++) {
                const double *row = p->grid + ((size_t)ga * K[1] + (g0[1] + b) % K[1]) * K[2];
                for (c = 0; c < o; c++) {
                    double phi = row[(g0[2] + c) % K[2]];
                    f[0] += dw[0][a] * w[1][b] * w[2][c] * phi;
                    f[1] += w[0][a] * dw[1][b] * w[2][c] * phi;
                    f[2] += w[0][a] * w[1][b] * dw[2][c] * phi;
                }
            }
        }
        for (d = 0; d < 3; d++) force[3 * i + d] -= q * f[d] * K[d] / box[d];
    }
    return MD_OK;
}

MDDEF md_status md_pme_compute(md_pme_plan *p, const md_float4 *xyzq, int n, const double box[3], double *force,
                               md_energy *energy) {
    const char *fn = "md_pme_compute";
    md_status st;
    int i, x;
    if ((st = md_pme_spread(p, xyzq, n, box)) != MD_OK || (st = md_pme_forward(p)) != MD_OK ||
        (st = md_pme_solve(p, box)) != MD_OK || (st = md_pme_backward(p)) != MD_OK)
        return st;
    memset(p->scratch, 0, 3 * (size_t)n * sizeof(double));
    if ((st = md_pme_gather(p, xyzq, n, box, p->scratch)) != MD_OK) return st;
    if (!isfinite(p->energy)) return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq", "the reciprocal energy is not finite");
    for (i = 0; i < 3 * n; i++)
        if (!isfinite(p->scratch[i]))
            return md__err_index(MD_ERR_RANGE, fn, "force", i / 3, "is not finite (%g)", p->scratch[i]);
    if (force)
        for (i = 0; i < 3 * n; i++) force[i] += p->scratch[i];
    if (energy) {
        energy->coul_recip = p->energy;
        energy->coul_self = -MD_COULOMB * p->params.alpha / sqrt(MD__PI) * p->charge2;
        for (x = 0; x < 9; x++) energy->virial[x] += p->virial[x];
    }
    return MD_OK;
}

/* ---- bonded ---- */

/* d - L rint(d / L) per axis where box[k] > 0; box NULL: nothing. */
static void md__image3(double d[3], const double *box) {
    int k;
    if (!box) return;
    for (k = 0; k < 3; k++)
        if (box[k] > 0.0) d[k] -= box[k] * rint(d[k] / box[k]);
}

/* The minimum-image vector x[j] - x[i] (3-vectors in a 3 n array). */
static void md__sub_image(const double *x, int i, int j, const double *box, double d[3]) {
    int k;
    for (k = 0; k < 3; k++) d[k] = x[3 * (size_t)j + k] - x[3 * (size_t)i + k];
    md__image3(d, box);
}

/* The rigid water each atom belongs to (-1: none): n ints, or NULL on out of memory. */
static int *md__water_of_atom(const md_topology *t) {
    int *w = (int *)md_alloc_array((size_t)t->n, sizeof(int)), i, k;
    if (!w) return NULL;
    for (i = 0; i < t->n; i++) w[i] = -1;
    for (k = 0; k < 3 * t->nwater; k++)
        if (t->water[k] >= 0 && t->water[k] < t->n) w[t->water[k]] = k / 3;
    return w;
}

static int md__cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Key of an unordered atom pair. */
static long long md__pair_key(int a, int b) {
    return a < b ? (long long)a << 32 | (long long)(unsigned)b : (long long)b << 32 | (long long)(unsigned)a;
}

MDDEF void md_bonded_free(md_bonded *b) {
    if (!b) return;
    md_free(b->bond);
    md_free(b->bond_r0);
    md_free(b->bond_k);
    md_free(b->angle);
    md_free(b->angle_theta0);
    md_free(b->angle_k);
    memset(b, 0, sizeof *b);
}

MDDEF md_status md_bonded_from_topology(md_bonded *b, const md_topology *t, int skip_rigid) {
    const char *fn = "md_bonded_from_topology";
    md_bonded s;
    int *wat = NULL, k, x, nb = 0, na = 0;
    long long *ckey = NULL;
    if (!b || !t) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b/t", "is NULL");
    if (t->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t.n", "must be >= 1 (got %d)", t->n);
    if ((t->bond_k && !t->bond_r0) || (t->angle_k && !t->angle_theta0))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has force constants without rest values");
    if ((t->nbond > 0 && !t->bond) || (t->nangle > 0 && !t->angle) || t->nbond < 0 || t->nangle < 0 ||
        (t->nwater > 0 && !t->water) || (t->nconstraint > 0 && !t->constraint))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has counts without arrays");
    for (k = 0; t->bond_k && k < t->nbond; k++) {
        for (x = 0; x < 2; x++)
            if (t->bond[2 * k + x] < 0 || t->bond[2 * k + x] >= t->n)
                return md__err_index(MD_ERR_RANGE, fn, "bond", k, "atom %g is out of range", (double)t->bond[2 * k + x]);
        if (!md__finite_nonneg(t->bond_k[k]) || !md__finite_nonneg(t->bond_r0[k]))
            return md__err_index(MD_ERR_RANGE, fn, "bond", k, "constant or rest length not finite and >= 0 (k %g)",
                                 t->bond_k[k]);
    }
    for (k = 0; t->angle_k && k < t->nangle; k++) {
        for (x = 0; x < 3; x++)
            if (t->angle[3 * k + x] < 0 || t->angle[3 * k + x] >= t->n)
                return md__err_index(MD_ERR_RANGE, fn, "angle", k, "atom %g is out of range",
                                     (double)t->angle[3 * k + x]);
        if (!md__finite_nonneg(t->angle_k[k]) || !md__finite_nonneg(t->angle_theta0[k]))
            return md__err_index(MD_ERR_RANGE, fn, "angle", k, "constant or rest angle not finite and >= 0 (k %g)",
                                 t->angle_k[k]);
    }
    memset(&s, 0, sizeof s);
    if (skip_rigid) {
        if (!(wat = md__water_of_atom(t))) goto oom;
        if (t->nconstraint > 0) {
            if (!(ckey = (long long *)md_alloc_array((size_t)t->nconstraint, sizeof(long long)))) goto oom;
            for (k = 0; k < t->nconstraint; k++) ckey[k] = md__pair_key(t->constraint[2 * k], t->constraint[2 * k + 1]);
            qsort(ckey, (size_t)t->nconstraint, sizeof *ckey, md__cmp_ll);
        }
    }
    if (t->bond_k && t->nbond > 0) {
        s.bond = (int *)md_alloc_array(2 * (size_t)t->nbond, sizeof(int));
        s.bond_r0 = (double *)md_alloc_array((size_t)t->nbond, sizeof(double));
        s.bond_k = (double *)md_alloc_array((size_t)t->nbond, sizeof(double));
        if (!s.bond || !s.bond_r0 || !s.bond_k) goto oom;
        for (k = 0; k < t->nbond; k++) {
            int i = t->bond[2 * k], j = t->bond[2 * k + 1];
            if (skip_rigid) {
                long long key = md__pair_key(i, j);
                if (wat[i] >= 0 && wat[i] == wat[j]) continue;
                if (ckey && bsearch(&key, ckey, (size_t)t->nconstraint, sizeof *ckey, md__cmp_ll)) continue;
            }
            s.bond[2 * nb] = i;
            s.bond[2 * nb + 1] = j;
            s.bond_r0[nb] = t->bond_r0[k];
            s.bond_k[nb] = t->bond_k[k];
            nb++;
        }
    }
    if (t->angle_k && t->nangle > 0) {
        s.angle = (int *)md_alloc_array(3 * (size_t)t->nangle, sizeof(int));
        s.angle_theta0 = (double *)md_alloc_array((size_t)t->nangle, sizeof(double));
        s.angle_k = (double *)md_alloc_array((size_t)t->nangle, sizeof(double));
        if (!s.angle || !s.angle_theta0 || !s.angle_k) goto oom;
        for (k = 0; k < t->nangle; k++) {
            const int *a = t->angle + 3 * k;
            if (skip_rigid && wat[a[0]] >= 0 && wat[a[0]] == wat[a[1]] && wat[a[1]] == wat[a[2]]) continue;
            for (x = 0; x < 3; x++) s.angle[3 * na + x] = a[x];
            s.angle_theta0[na] = t->angle_theta0[k];
            s.angle_k[na] = t->angle_k[k];
            na++;
        }
    }
    s.nbond = nb;
    s.nangle = na;
    md_free(wat);
    md_free(ckey);
    *b = s;
    return MD_OK;
oom:
    md_free(wat);
    md_free(ckey);
    md_bonded_free(&s);
    return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "t", "cannot allocate the bonded terms");
}

MDDEF md_status md_bonded_compute(const md_bonded *b, const double *x, int n, const double box[3], double *force,
                                  md_energy *energy) {
    const char *fn = "md_bonded_compute";
    const double *bx = NULL;
    double e = 0.0, w[9], *f = NULL;
    int k, i, u, v;
    if (!b || !x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "b/x", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "must be >= 1 (got %d)", n);
    if (box && (box[0] > 0.0 || box[1] > 0.0 || box[2] > 0.0)) bx = box;
    for (k = 0; k < 2 * b->nbond; k++)
        if (b->bond[k] < 0 || b->bond[k] >= n)
            return md__err_index(MD_ERR_RANGE, fn, "bond", k / 2, "atom %g is out of range", (double)b->bond[k]);
    for (k = 0; k < 3 * b->nangle; k++)
        if (b->angle[k] < 0 || b->angle[k] >= n)
            return md__err_index(MD_ERR_RANGE, fn, "angle", k / 3, "atom %g is out of range", (double)b->angle[k]);
    for (i = 0; i < 3 * n; i++)
        if (!isfinite(x[i])) return md__err_index(MD_ERR_RANGE, fn, "x", i / 3, "coordinate is not finite (%g)", x[i]);
    if (force && (b->nbond > 0 || b->nangle > 0)) {
        if (!(f = (double *)md_alloc_array(3 * (size_t)n, sizeof(double))))
            return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate %d forces", n);
        memset(f, 0, 3 * (size_t)n * sizeof(double));
    }
    memset(w, 0, sizeof w);
    for (k = 0; k < b->nbond; k++) {
        int ia = b->bond[2 * k], ib = b->bond[2 * k + 1];
        double d[3], r, dr, fs;
        md__sub_image(x, ib, ia, bx, d); /* d = x_a - x_b */
        r = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
        dr = r - b->bond_r0[k];
        e += 0.5 * b->bond_k[k] * dr * dr;
        fs = r > 0.0 ? -b->bond_k[k] * dr / r : 0.0; /* F_a = fs d */
        for (u = 0; u < 3; u++) {
            if (f) {
                f[3 * ia + u] += fs * d[u];
                f[3 * ib + u] -= fs * d[u];
            }
            for (v = 0; v < 3; v++) w[3 * u + v] += d[u] * fs * d[v];
        }
    }
    for (k = 0; k < b->nangle; k++) {
        int ii = b->angle[3 * k], ij = b->angle[3 * k + 1], ik = b->angle[3 * k + 2];
        double a[3], c[3], p[3], ap[3], pc[3], pn, a2, c2, th, de, fi[3], fk[3];
        md__sub_image(x, ij, ii, bx, a); /* a = x_i - x_j */
        md__sub_image(x, ij, ik, bx, c); /* c = x_k - x_j */
        p[0] = a[1] * c[2] - a[2] * c[1];
        p[1] = a[2] * c[0] - a[0] * c[2];
        p[2] = a[0] * c[1] - a[1] * c[0];
        pn = sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
        a2 = a[0] * a[0] + a[1] * a[1] + a[2] * a[2];
        c2 = c[0] * c[0] + c[1] * c[1] + c[2] * c[2];
        th = atan2(pn, a[0] * c[0] + a[1] * c[1] + a[2] * c[2]);
        de = b->angle_k[k] * (th - b->angle_theta0[k]);
        e += 0.5 * de * (th - b->angle_theta0[k]);
        if (!(pn > 1e-12 * sqrt(a2 * c2))) continue;
        ap[0] = a[1] * p[2] - a[2] * p[1];
        ap[1] = a[2] * p[0] - a[0] * p[2];
        ap[2] = a[0] * p[1] - a[1] * p[0];
        pc[0] = p[1] * c[2] - p[2] * c[1];
        pc[1] = p[2] * c[0] - p[0] * c[2];
        pc[2] = p[0] * c[1] - p[1] * c[0];
        for (u = 0; u < 3; u++) {
            fi[u] = -de * ap[u] / (a2 * pn);
            fk[u] = -de * pc[u] / (c2 * pn);
        }
        for (u = 0; u < 3; u++) {
            if (f) {
                f[3 * ii + u] += fi[u];
                f[3 * ik + u] += fk[u];
                f[3 * ij + u] -= fi[u] + fk[u];
            }
            for (v = 0; v < 3; v++) w[3 * u + v] += a[u] * fi[v] + c[u] * fk[v];
        }
    }
    if (!isfinite(e)) {
        md_free(f);
        return md_set_error(MD_ERR_RANGE, fn, 0, "energy", "the bonded energy is not finite");
    }
    if (f) {
        for (i = 0; i < 3 * n; i++) force[i] += f[i];
        md_free(f);
    }
    if (energy) {
        energy->bonded = e;
        for (u = 0; u < 9; u++) energy->virial[u] += w[u];
    }
    return MD_OK;
}

MDDEF md_status md_topology_angles_from_bonds(md_topology *t) {
    const char *fn = "md_topology_angles_from_bonds";
    md_status st;
    int *start = NULL, *adj = NULL, *fill = NULL, *ang = NULL, i, k, pass;
    long long na = 0;
    if (!t || t->n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is NULL or empty");
    if ((st = md__check_bonds(fn, t->n, t->nbond, t->bond)) != MD_OK) return st;
    start = (int *)md_alloc_array((size_t)t->n + 1, sizeof(int));
    fill = (int *)md_alloc_array((size_t)t->n + 1, sizeof(int));
    adj = (int *)md_alloc_array(2 * (size_t)t->nbond + 1, sizeof(int));
    if (!start || !fill || !adj) goto oom;
    memset(start, 0, ((size_t)t->n + 1) * sizeof(int));
    for (k = 0; k < t->nbond; k++) {
        start[t->bond[2 * k] + 1]++;
        start[t->bond[2 * k + 1] + 1]++;
    }
    for (i = 0; i < t->n; i++) start[i + 1] += start[i];
    memcpy(fill, start, ((size_t)t->n + 1) * sizeof(int));
    for (k = 0; k < t->nbond; k++) {
        adj[fill[t->bond[2 * k]]++] = t->bond[2 * k + 1];
        adj[fill[t->bond[2 * k + 1]]++] = t->bond[2 * k];
    }
    /* sorted neighbours without duplicates, their count back in fill[i] - start[i] */
    for (i = 0; i < t->n; i++) {
        int m = 0, e;
        qsort(adj + start[i], (size_t)(start[i + 1] - start[i]), sizeof(int), md__cmp_int);
        for (e = start[i]; e < start[i + 1]; e++)
            if (m == 0 || adj[start[i] + m - 1] != adj[e]) adj[start[i] + m++] = adj[e];
        fill[i] = start[i] + m;
    }
    for (pass = 0; pass < 2; pass++) {
        na = 0;
        for (i = 0; i < t->n; i++) {
            int p, q;
            for (p = start[i]; p < fill[i]; p++)
                for (q = p + 1; q < fill[i]; q++) {
                    if (pass) {
                        ang[3 * na] = adj[p];
                        ang[3 * na + 1] = i;
                        ang[3 * na + 2] = adj[q];
                    }
                    na++;
                }
            if (na > INT_MAX / 3) {
                md_free(start);
                md_free(fill);
                md_free(adj);
                md_free(ang);
                return md_set_error(MD_ERR_RANGE, fn, 0, "bond", "too many angles");
            }
        }
        if (pass == 0 && !(ang = (int *)md_alloc_array(3 * (size_t)na + 1, sizeof(int)))) goto oom;
    }
    md_free(start);
    md_free(fill);
    md_free(adj);
    md_free(t->angle);
    md_free(t->angle_theta0);
    md_free(t->angle_k);
    t->angle = ang;
    t->angle_theta0 = NULL;
    t->angle_k = NULL;
    t->nangle = (int)na;
    return MD_OK;
oom:
    md_free(start);
    md_free(fill);
    md_free(adj);
    md_free(ang);
    return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate the angles of %d atoms", t->n);
}

/* ---- the force-field table ---- */

MDDEF void md_ff_table_free(md_ff_table *tab) {
    if (!tab) return;
    md_free(tab->lj_type);
    md_free(tab->lj_sigma);
    md_free(tab->lj_epsilon);
    md_free(tab->bond_type);
    md_free(tab->bond_r0);
    md_free(tab->bond_k);
    md_free(tab->angle_type);
    md_free(tab->angle_theta0);
    md_free(tab->angle_k);
    md_free(tab->water_type);
    memset(tab, 0, sizeof *tab);
}

/* One entry's types in canonical order (a bond's two sorted, an angle's ends sorted), the kind
 * (0 lj, 1 bond, 2 angle, 3 water) and its line, for the duplicate check. */
typedef struct md__ff_key {
    int kind;
    md_name t[3];
    long line;
} md__ff_key;

static int md__ff_key_cmp(const void *pa, const void *pb) {
    const md__ff_key *a = (const md__ff_key *)pa, *b = (const md__ff_key *)pb;
    int k, c;
    if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
    for (k = 0; k < 3; k++)
        if ((c = strcmp(a->t[k].s, b->t[k].s)) != 0) return c;
    return (a->line > b->line) - (a->line < b->line);
}

static const char *const md__ff_kinds[4] = {"lj", "bond", "angle", "water"};

/* Parse the table (pass 0: check and count; pass 1: fill). */
static md_status md__ff_parse(md__lines *L, md_ff_table *t, md__ff_key *keys, int pass, long *count) {
    md_status st;
    int got;
    long nkey = 0;
    t->nlj = t->nbond = t->nangle = t->nwater = 0;
    while ((st = md__next_line(L, &got)) == MD_OK && got) {
        char *hash = strchr(L->buf, '#'), *tok[8];
        int nt, kind, ntypes, nnum, k;
        double num[2] = {0.0, 0.0};
        md_name ty[3];
        if (hash) *hash = '\0';
        nt = md__split(L->buf, tok, 8);
        if (nt == 0) continue;
        for (kind = 0; kind < 4; kind++)
            if (strcmp(tok[0], md__ff_kinds[kind]) == 0) break;
        if (kind == 4) return md__lerr(L, MD_ERR_PARSE, "keyword", "unknown entry '%.20s' (lj, bond, angle or water)", tok[0]);
        ntypes = kind == 0 ? 1 : kind == 1 ? 2 : kind == 2 ? 3 : 2;
        nnum = kind == 3 ? 0 : 2;
        if (nt != 1 + ntypes + nnum)
            return md__lerr(L, MD_ERR_PARSE, md__ff_kinds[kind], "%d fields, expected %d", nt - 1, ntypes + nnum);
        memset(ty, 0, sizeof ty);
        for (k = 0; k < ntypes; k++)
            if ((st = md__name_field(L, &ty[k], tok[1 + k], "type")) != MD_OK) return st;
        for (k = 0; k < nnum; k++) {
            static const char *const fields[4][2] = {{"sigma", "epsilon"}, {"r0", "k"}, {"theta0", "k"}, {"", ""}};
            if ((st = md__field_double(L, tok[1 + ntypes + k], fields[kind][k], &num[k])) != MD_OK) return st;
            if (num[k] < 0.0) return md__lerr(L, MD_ERR_RANGE, fields[kind][k], "must be >= 0 (got %g)", num[k]);
        }
        if (kind == 1 && !(num[0] > 0.0)) return md__lerr(L, MD_ERR_RANGE, "r0", "must be > 0 (got %g)", num[0]);
        if (kind == 2 && !(num[0] > 0.0 && num[0] <= 180.0))
            return md__lerr(L, MD_ERR_RANGE, "theta0", "must be in (0, 180] degrees (got %g)", num[0]);
        if (pass) {
            md__ff_key *key = &keys[nkey];
            key->kind = kind;
            key->line = L->line;
            memset(key->t, 0, sizeof key->t);
            for (k = 0; k < ntypes; k++) key->t[k] = ty[k];
            if (kind == 1 && strcmp(ty[0].s, ty[1].s) > 0) {
                key->t[0] = ty[1];
                key->t[1] = ty[0];
            }
            if (kind == 2 && strcmp(ty[0].s, ty[2].s) > 0) {
                key->t[0] = ty[2];
                key->t[2] = ty[0];
            }
            if (kind == 0) {
                t->lj_type[t->nlj] = ty[0];
                t->lj_sigma[t->nlj] = num[0];
                t->lj_epsilon[t->nlj] = num[1];
            } else if (kind == 1) {
                t->bond_type[2 * t->nbond] = ty[0];
                t->bond_type[2 * t->nbond + 1] = ty[1];
                t->bond_r0[t->nbond] = num[0];
                t->bond_k[t->nbond] = num[1];
            } else if (kind == 2) {
                for (k = 0; k < 3; k++) t->angle_type[3 * t->nangle + k] = ty[k];
                t->angle_theta0[t->nangle] = num[0] * (3.14159265358979323846 / 180.0);
                t->angle_k[t->nangle] = num[1];
            } else {
                t->water_type[2 * t->nwater] = ty[0];
                t->water_type[2 * t->nwater + 1] = ty[1];
            }
        }
        if (kind == 0) t->nlj++;
        else if (kind == 1) t->nbond++;
        else if (kind == 2) t->nangle++;
        else t->nwater++;
        if (++nkey > INT_MAX / 4) return md__lerr(L, MD_ERR_RANGE, "text", "too many entries");
    }
    *count = nkey;
    return st;
}

MDDEF md_status md_read_ff_table_mem(const char *data, size_t len, const char *name, md_ff_table *tab) {
    const char *fn = "md_read_ff_table";
    md__lines L;
    md_ff_table t;
    md__ff_key *keys = NULL;
    md_status st;
    long nkey = 0, k;
    if (!tab || (!data && len > 0)) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "tab/data", "is NULL");
    memset(&t, 0, sizeof t);
    md__lines_mem(&L, data, len, name);
    st = md__ff_parse(&L, &t, NULL, 0, &nkey);
    md_free(L.buf);
    if (st != MD_OK) return st;
    if (nkey == 0)
        return md_set_error(MD_ERR_PARSE, name ? name : "<memory>", 0, "text", "no entries (lj, bond, angle, water)");
    keys = (md__ff_key *)md_alloc_array((size_t)nkey, sizeof *keys);
    t.lj_type = (md_name *)md_alloc_array((size_t)t.nlj + 1, sizeof(md_name));
    t.lj_sigma = (double *)md_alloc_array((size_t)t.nlj + 1, sizeof(double));
    t.lj_epsilon = (double *)md_alloc_array((size_t)t.nlj + 1, sizeof(double));
    t.bond_type = (md_name *)md_alloc_array(2 * (size_t)t.nbond + 1, sizeof(md_name));
    t.bond_r0 = (double *)md_alloc_array((size_t)t.nbond + 1, sizeof(double));
    t.bond_k = (double *)md_alloc_array((size_t)t.nbond + 1, sizeof(double));
    t.angle_type = (md_name *)md_alloc_array(3 * (size_t)t.nangle + 1, sizeof(md_name));
    t.angle_theta0 = (double *)md_alloc_array((size_t)t.nangle + 1, sizeof(double));
    t.angle_k = (double *)md_alloc_array((size_t)t.nangle + 1, sizeof(double));
    t.water_type = (md_name *)md_alloc_array(2 * (size_t)t.nwater + 1, sizeof(md_name));
    if (!keys || !t.lj_type || !t.lj_sigma || !t.lj_epsilon || !t.bond_type || !t.bond_r0 || !t.bond_k ||
        !t.angle_type || !t.angle_theta0 || !t.angle_k || !t.water_type) {
        md_free(keys);
        md_ff_table_free(&t);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "text", "cannot allocate %ld entries", nkey);
    }
    md__lines_mem(&L, data, len, name);
    st = md__ff_parse(&L, &t, keys, 1, &nkey);
    md_free(L.buf);
    if (st == MD_OK) {
        qsort(keys, (size_t)nkey, sizeof *keys, md__ff_key_cmp);
        for (k = 1; k < nkey; k++)
            if (keys[k].kind == keys[k - 1].kind && strcmp(keys[k].t[0].s, keys[k - 1].t[0].s) == 0 &&
                strcmp(keys[k].t[1].s, keys[k - 1].t[1].s) == 0 && strcmp(keys[k].t[2].s, keys[k - 1].t[2].s) == 0) {
                st = md_set_error(MD_ERR_PARSE, name ? name : "<memory>", keys[k].line, md__ff_kinds[keys[k].kind],
                                  "types %s %s %s already listed on line %ld", keys[k].t[0].s, keys[k].t[1].s,
                                  keys[k].t[2].s, keys[k - 1].line);
                break;
            }
    }
    md_free(keys);
    if (st != MD_OK) {
        md_ff_table_free(&t);
        return st;
    }
    *tab = t;
    return MD_OK;
}

MDDEF md_status md_read_ff_table(const char *path, md_ff_table *tab) {
    char *data = NULL;
    size_t len = 0;
    md_status st;
    if (!tab) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_read_ff_table", 0, "tab", "is NULL");
    if ((st = md__slurp(path, &data, &len)) != MD_OK) return st;
    st = md_read_ff_table_mem(data, len, path, tab);
    md_free(data);
    return st;
}

/* Index of the entry of `kind` matching the atom types (a bond either way, an angle either
 * direction), or -1. */
static int md__ff_find(const md_ff_table *tab, int kind, const char *a, const char *b, const char *c) {
    int k;
    if (kind == 0) {
        for (k = 0; k < tab->nlj; k++)
            if (strcmp(tab->lj_type[k].s, a) == 0) return k;
    } else if (kind == 1) {
        for (k = 0; k < tab->nbond; k++) {
            const char *p = tab->bond_type[2 * k].s, *q = tab->bond_type[2 * k + 1].s;
            if ((strcmp(p, a) == 0 && strcmp(q, b) == 0) || (strcmp(p, b) == 0 && strcmp(q, a) == 0)) return k;
        }
    } else {
        for (k = 0; k < tab->nangle; k++) {
            const char *p = tab->angle_type[3 * k].s, *q = tab->angle_type[3 * k + 1].s, *r = tab->angle_type[3 * k + 2].s;
            if (strcmp(q, b) != 0) continue;
            if ((strcmp(p, a) == 0 && strcmp(r, c) == 0) || (strcmp(p, c) == 0 && strcmp(r, a) == 0)) return k;
        }
    }
    return -1;
}

/* An atom counts as a hydrogen for constrain_hbonds: element H, or no element and mass < 1.5. */
static int md__is_hydrogen(const md_system *sys, int i) {
    if (sys->element && sys->element[i].s[0]) return strcmp(sys->element[i].s, "H") == 0;
    return sys->mass && sys->mass[i] < 1.5f;
}

MDDEF md_status md_topology_from_psf(const md_system *sys, const md_ff_table *tab, const md_psf_desc *desc,
                                     md_topology *top, md_lj_table *lj) {
    const char *fn = "md_topology_from_psf";
    md_psf_desc d;
    md_topology t;
    md_lj_table tl;
    md_status st = MD_OK;
    md_name *names = NULL;
    double *sig = NULL, *eps = NULL, *r0 = NULL, *kb = NULL, doh = 0.0, dhh = 0.0;
    int *type = NULL, *nbr_start = NULL, *nbr = NULL, *fill = NULL, *wat = NULL, *cons = NULL;
    double *clen = NULL;
    int ntypes = 0, i, k, nw = 0, nc = 0;
    if (!sys || !tab || !top || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys/tab/top/lj", "is NULL");
    if (sys->n < 1 || !sys->xyzq || !sys->mass || !sys->type_name)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "is empty or has no type names (read a PSF)");
    if ((st = md__check_bonds(fn, sys->n, sys->nbond, sys->bond)) != MD_OK) return st;
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    memset(&t, 0, sizeof t);
    memset(&tl, 0, sizeof tl);
    names = (md_name *)md_alloc_array((size_t)sys->n, sizeof(md_name));
    type = (int *)md_alloc_array((size_t)sys->n, sizeof(int));
    sig = (double *)md_alloc_array((size_t)sys->n, sizeof(double));
    eps = (double *)md_alloc_array((size_t)sys->n, sizeof(double));
    r0 = (double *)md_alloc_array((size_t)sys->nbond + 1, sizeof(double));
    kb = (double *)md_alloc_array((size_t)sys->nbond + 1, sizeof(double));
    if (!names || !type || !sig || !eps || !r0 || !kb) goto oom;
    /* LJ types: distinct type names in order of first appearance (a linear search per new name
     * would be quadratic for a file with many types; a PSF has a few hundred at most) */
    for (i = 0; i < sys->n; i++) {
        for (k = ntypes - 1; k >= 0; k--)
            if (strcmp(names[k].s, sys->type_name[i].s) == 0) break;
        if (k < 0) {
            int e = md__ff_find(tab, 0, sys->type_name[i].s, NULL, NULL);
            if (e < 0) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "lj", "atom %d (%s, type '%s') has no lj entry", i,
                                  sys->name ? sys->name[i].s : "", sys->type_name[i].s);
                goto fail;
            }
            names[ntypes] = sys->type_name[i];
            sig[ntypes] = tab->lj_sigma[e];
            eps[ntypes] = tab->lj_epsilon[e];
            k = ntypes++;
        }
        type[i] = k;
    }
    if ((st = md_lj_table_create(&tl, ntypes, sig, eps, MD_LJ_COMBINE_LB)) != MD_OK) goto fail;
    if ((st = md_topology_alloc(&t, sys->n)) != MD_OK) goto fail;
    for (i = 0; i < sys->n; i++) {
        t.lj_type[i] = type[i];
        t.charge[i] = sys->xyzq[i].w;
        t.mass[i] = sys->mass[i];
    }
    for (k = 0; k < sys->nbond; k++) {
        int a = sys->bond[2 * k], b = sys->bond[2 * k + 1];
        int e = md__ff_find(tab, 1, sys->type_name[a].s, sys->type_name[b].s, NULL);
        if (e < 0) {
            st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "bond", "atoms %d-%d (types '%s' '%s') have no bond entry", a,
                              b, sys->type_name[a].s, sys->type_name[b].s);
            goto fail;
        }
        r0[k] = tab->bond_r0[e];
        kb[k] = tab->bond_k[e];
    }
    if ((st = md_topology_set_bonds(&t, sys->nbond, sys->bond, r0, kb)) != MD_OK ||
        (st = md_topology_angles_from_bonds(&t)) != MD_OK || (st = md_topology_build_exclusions(&t, &d.exclusions)) != MD_OK)
        goto fail;
    if (t.nangle > 0) {
        t.angle_theta0 = (double *)md_alloc_array((size_t)t.nangle, sizeof(double));
        t.angle_k = (double *)md_alloc_array((size_t)t.nangle, sizeof(double));
        if (!t.angle_theta0 || !t.angle_k) goto oom;
        for (k = 0; k < t.nangle; k++) {
            const int *a = t.angle + 3 * k;
            int e = md__ff_find(tab, 2, sys->type_name[a[0]].s, sys->type_name[a[1]].s, sys->type_name[a[2]].s);
            if (e < 0) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "angle",
                                  "atoms %d-%d-%d (types '%s' '%s' '%s') have no angle entry", a[0], a[1], a[2],
                                  sys->type_name[a[0]].s, sys->type_name[a[1]].s, sys->type_name[a[2]].s);
                goto fail;
            }
            t.angle_theta0[k] = tab->angle_theta0[e];
            t.angle_k[k] = tab->angle_k[e];
        }
    }
    /* neighbours of every atom (CSR), for the water and hydrogen rules */
    nbr_start = (int *)md_alloc_array((size_t)sys->n + 1, sizeof(int));
    fill = (int *)md_alloc_array((size_t)sys->n + 1, sizeof(int));
    nbr = (int *)md_alloc_array(2 * (size_t)sys->nbond + 1, sizeof(int));
    wat = (int *)md_alloc_array(3 * (size_t)sys->n + 1, sizeof(int));
    if (!nbr_start || !fill || !nbr || !wat) goto oom;
    memset(nbr_start, 0, ((size_t)sys->n + 1) * sizeof(int));
    for (k = 0; k < sys->nbond; k++) {
        nbr_start[sys->bond[2 * k] + 1]++;
        nbr_start[sys->bond[2 * k + 1] + 1]++;
    }
    for (i = 0; i < sys->n; i++) nbr_start[i + 1] += nbr_start[i];
    memcpy(fill, nbr_start, ((size_t)sys->n + 1) * sizeof(int));
    for (k = 0; k < sys->nbond; k++) {
        nbr[fill[sys->bond[2 * k]]++] = sys->bond[2 * k + 1];
        nbr[fill[sys->bond[2 * k + 1]]++] = sys->bond[2 * k];
    }
    if (!d.flexible_water && tab->nwater > 0) {
        int have = 0;
        for (i = 0; i < sys->n; i++) {
            int e, h1, h2, be, ae;
            double wdoh, wdhh;
            for (e = 0; e < tab->nwater; e++)
                if (strcmp(tab->water_type[2 * e].s, sys->type_name[i].s) == 0) break;
            if (e == tab->nwater || nbr_start[i + 1] - nbr_start[i] != 2) continue;
            h1 = nbr[nbr_start[i]];
            h2 = nbr[nbr_start[i] + 1];
            if (h1 > h2) {
                int tmp = h1;
                h1 = h2;
                h2 = tmp;
            }
            if (strcmp(sys->type_name[h1].s, tab->water_type[2 * e + 1].s) != 0 ||
                strcmp(sys->type_name[h2].s, tab->water_type[2 * e + 1].s) != 0 ||
                nbr_start[h1 + 1] - nbr_start[h1] != 1 || nbr_start[h2 + 1] - nbr_start[h2] != 1)
                continue;
            be = md__ff_find(tab, 1, sys->type_name[i].s, sys->type_name[h1].s, NULL);
            ae = md__ff_find(tab, 2, sys->type_name[h1].s, sys->type_name[i].s, sys->type_name[h2].s);
            if (be < 0 || ae < 0) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "water",
                                  "water at atom %d (types '%s' '%s') needs a bond and an angle entry", i,
                                  sys->type_name[i].s, sys->type_name[h1].s);
                goto fail;
            }
            wdoh = tab->bond_r0[be];
            wdhh = 2.0 * wdoh * sin(0.5 * tab->angle_theta0[ae]);
            if (have && (wdoh != doh || wdhh != dhh)) {
                st = md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "water",
                                  "water at atom %d has d_OH %g nm, d_HH %g nm; an earlier one %g, %g (one geometry only)",
                                  i, wdoh, wdhh, doh, dhh);
                goto fail;
            }
            doh = wdoh;
            dhh = wdhh;
            have = 1;
            wat[3 * nw] = i;
            wat[3 * nw + 1] = h1;
            wat[3 * nw + 2] = h2;
            nw++;
        }
    }
    if (d.constrain_hbonds && sys->nbond > 0) {
        int *inw = (int *)md_alloc_array((size_t)sys->n, sizeof(int));
        cons = (int *)md_alloc_array(2 * (size_t)sys->nbond, sizeof(int));
        clen = (double *)md_alloc_array((size_t)sys->nbond, sizeof(double));
        if (!inw || !cons || !clen) {
            md_free(inw);
            goto oom;
        }
        memset(inw, 0, (size_t)sys->n * sizeof(int));
        for (k = 0; k < 3 * nw; k++) inw[wat[k]] = 1;
        for (k = 0; k < sys->nbond; k++) {
            int a = sys->bond[2 * k], b = sys->bond[2 * k + 1];
            if (inw[a] || inw[b] || (!md__is_hydrogen(sys, a) && !md__is_hydrogen(sys, b))) continue;
            cons[2 * nc] = a;
            cons[2 * nc + 1] = b;
            clen[nc] = r0[k];
            nc++;
        }
        md_free(inw);
    }
    if (nw > 0) {
        if (!(t.water = (int *)md_alloc_array(3 * (size_t)nw, sizeof(int)))) goto oom;
        memcpy(t.water, wat, 3 * (size_t)nw * sizeof(int));
        t.nwater = nw;
        t.water_doh = doh;
        t.water_dhh = dhh;
    }
    if (nc > 0) {
        t.constraint = cons;
        t.constraint_length = clen;
        t.nconstraint = nc;
        cons = NULL;
        clen = NULL;
    }
    md_free(names);
    md_free(type);
    md_free(sig);
    md_free(eps);
    md_free(r0);
    md_free(kb);
    md_free(nbr_start);
    md_free(fill);
    md_free(nbr);
    md_free(wat);
    md_free(cons);
    md_free(clen);
    *top = t;
    *lj = tl;
    return MD_OK;
oom:
    st = md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "sys", "cannot allocate the topology of %d atoms", sys->n);
fail:
    md_free(names);
    md_free(type);
    md_free(sig);
    md_free(eps);
    md_free(r0);
    md_free(kb);
    md_free(nbr_start);
    md_free(fill);
    md_free(nbr);
    md_free(wat);
    md_free(cons);
    md_free(clen);
    md_topology_free(&t);
    md_lj_table_free(&tl);
    return st;
}

/* ---- constraints ---- */

MDDEF void md_constraints_free(md_constraints *c) {
    if (!c) return;
    md_free(c->water);
    md_free(c->pair);
    md_free(c->length);
    md_free(c->inv_mass);
    md_free(c->scratch);
    memset(c, 0, sizeof *c);
}

MDDEF md_status md_constraints_create(md_constraints *c, const md_topology *t, const md_constraints_desc *desc) {
    const char *fn = "md_constraints_create";
    md_constraints s;
    md_constraints_desc d;
    int *owner = NULL, i, k, np;
    if (!c || !t) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "c/t", "is NULL");
    if (t->n < 1 || !t->mass) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "is empty");
    if (t->nwater < 0 || (t->nwater > 0 && !t->water) || t->nconstraint < 0 ||
        (t->nconstraint > 0 && (!t->constraint || !t->constraint_length)))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "t", "has counts without arrays");
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.tolerance == 0.0) d.tolerance = MD_SHAKE_DEFAULT_TOLERANCE;
    if (d.max_iterations == 0) d.max_iterations = MD_SHAKE_DEFAULT_MAX_ITERATIONS;
    if (!(d.tolerance > 0.0 && d.tolerance < 0.1))
        return md_set_error(MD_ERR_RANGE, fn, 0, "tolerance", "must be in (0, 0.1) (got %g)", d.tolerance);
    if (d.max_iterations < 1)
        return md_set_error(MD_ERR_RANGE, fn, 0, "max_iterations", "must be >= 1 (got %d)", d.max_iterations);
    if (t->nwater > 0 && !(t->water_doh > 0.0 && t->water_dhh > 0.0 && t->water_dhh < 2.0 * t->water_doh))
        return md_set_error(MD_ERR_RANGE, fn, 0, "water_doh/water_dhh", "%g, %g nm do not make a triangle",
                            t->water_doh, t->water_dhh);
    memset(&s, 0, sizeof s);
    s.n = t->n;
    s.tolerance = d.tolerance;
    s.max_iterations = d.max_iterations;
    s.doh = t->water_doh;
    s.dhh = t->water_dhh;
    np = t->nconstraint + (d.water_by_shake ? 3 * t->nwater : 0);
    owner = (int *)md_alloc_array((size_t)t->n, sizeof(int));
    s.inv_mass = (double *)md_alloc_array((size_t)t->n, sizeof(double));
    s.pair = (int *)md_alloc_array(2 * (size_t)np + 1, sizeof(int));
    s.length = (double *)md_alloc_array((size_t)np + 1, sizeof(double));
    s.scratch = (double *)md_alloc_array(3 * (size_t)np + 1, sizeof(double));
    if (!d.water_by_shake && t->nwater > 0) s.water = (int *)md_alloc_array(3 * (size_t)t->nwater, sizeof(int));
    if (!owner || !s.inv_mass || !s.pair || !s.length || !s.scratch || (!d.water_by_shake && t->nwater > 0 && !s.water)) {
        md_free(owner);
        md_constraints_free(&s);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "t", "cannot allocate the constraints of %d atoms", t->n);
    }
    for (i = 0; i < t->n; i++) {
        owner[i] = 0; /* 0 free, 1 in a water, 2 in a SHAKE constraint */
        s.inv_mass[i] = t->mass[i] > 0.0f && isfinite(t->mass[i]) ? 1.0 / (double)t->mass[i] : 0.0;
    }
#define MD__CONS_FAIL(...)                                                                                             \
    do {                                                                                                               \
        md_status st_ = md_set_error(__VA_ARGS__);                                                                     \
        md_free(owner);                                                                                                \
        md_constraints_free(&s);                                                                                       \
        return st_;                                                                                                    \
    } while (0)
    for (k = 0; k < t->nwater; k++) {
        const int *w = t->water + 3 * k;
        for (i = 0; i < 3; i++) {
            if (w[i] < 0 || w[i] >= t->n) MD__CONS_FAIL(MD_ERR_RANGE, fn, 0, "water", "water %d: atom %d out of range", k, w[i]);
            if (owner[w[i]]) MD__CONS_FAIL(MD_ERR_INVALID_ARGUMENT, fn, 0, "water", "atom %d is in two waters", w[i]);
            if (!(s.inv_mass[w[i]] > 0.0))
                MD__CONS_FAIL(MD_ERR_RANGE, fn, 0, "mass", "atom %d of water %d has mass %g", w[i], k, t->mass[w[i]]);
            owner[w[i]] = 1;
        }
        if (d.water_by_shake) {
            int *p = s.pair + 2 * (size_t)(t->nconstraint + 3 * k);
            double *L = s.length + t->nconstraint + 3 * k;
            p[0] = w[0], p[1] = w[1], L[0] = s.doh;
            p[2] = w[0], p[3] = w[2], L[1] = s.doh;
            p[4] = w[1], p[5] = w[2], L[2] = s.dhh;
            continue;
        }
        if (t->mass[w[1]] != t->mass[w[2]])
            MD__CONS_FAIL(MD_ERR_INVALID_ARGUMENT, fn, 0, "water", "water %d: hydrogens of masses %g and %g (SETTLE needs one)",
                          k, t->mass[w[1]], t->mass[w[2]]);
        if (k == 0) {
            s.mass_o = t->mass[w[0]];
            s.mass_h = t->mass[w[1]];
        } else if ((double)t->mass[w[0]] != s.mass_o || (double)t->mass[w[1]] != s.mass_h) {
            MD__CONS_FAIL(MD_ERR_INVALID_ARGUMENT, fn, 0, "water", "water %d has masses %g, %g; water 0 %g, %g", k,
                          t->mass[w[0]], t->mass[w[1]], s.mass_o, s.mass_h);
        }
        memcpy(s.water + 3 * k, w, 3 * sizeof(int));
    }
    if (!d.water_by_shake) s.nwater = t->nwater;
    for (k = 0; k < t->nconstraint; k++) {
        int a = t->constraint[2 * k], b = t->constraint[2 * k + 1];
        double L = t->constraint_length[k];
        if (a < 0 || a >= t->n || b < 0 || b >= t->n || a == b)
            MD__CONS_FAIL(MD_ERR_RANGE, fn, 0, "constraint", "constraint %d: atoms %d-%d out of range or equal", k, a, b);
        if (owner[a] == 1 || owner[b] == 1)
            MD__CONS_FAIL(MD_ERR_INVALID_ARGUMENT, fn, 0, "constraint", "constraint %d: atom of a rigid water (%d-%d)", k, a, b);
        if (!(L > 0.0) || !isfinite(L))
            MD__CONS_FAIL(MD_ERR_RANGE, fn, 0, "constraint_length", "constraint %d: length %g must be finite and > 0", k, L);
        if (!(s.inv_mass[a] > 0.0) || !(s.inv_mass[b] > 0.0))
            MD__CONS_FAIL(MD_ERR_RANGE, fn, 0, "mass", "constraint %d: atom %d or %d has no positive mass", k, a, b);
        owner[a] = owner[b] = 2;
        s.pair[2 * k] = a;
        s.pair[2 * k + 1] = b;
        s.length[k] = L;
    }
#undef MD__CONS_FAIL
    s.npair = np;
    md_free(owner);
    *c = s;
    return MD_OK;
}

MDDEF int md_constraints_count(const md_constraints *c) { return c ? 3 * c->nwater + c->npair : 0; }

/* Gather a water's three positions relative to `org` (minimum images) into w[9]. */
static void md__water_rel(const double *x, const int *w, const double org[3], const double *box, double out[9]) {
    int a, k;
    for (a = 0; a < 3; a++) {
        double d[3];
        for (k = 0; k < 3; k++) d[k] = x[3 * (size_t)w[a] + k] - org[k];
        md__image3(d, box);
        for (k = 0; k < 3; k++) out[3 * a + k] = d[k];
    }
}

MDDEF md_status md_constraints_apply(md_constraints *c, const double *ref, double *x, const double box[3]) {
    const char *fn = "md_constraints_apply";
    int k, it, a;
    if (!c || !ref || !x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "c/ref/x", "is NULL");
    for (k = 0; k < c->nwater; k++) {
        const int *w = c->water + 3 * k;
        double org[3], r[9], y[9];
        for (a = 0; a < 3; a++) org[a] = ref[3 * (size_t)w[0] + a];
        md__water_rel(ref, w, org, box, r);
        md__water_rel(x, w, org, box, y);
        if (md_settle_water(r, y, c->mass_o, c->mass_h, c->doh, c->dhh) != 0)
            return md_set_error(MD_ERR_RANGE, fn, 0, "water", "water %d (atoms %d %d %d): SETTLE has no solution, the step "
                                "has exploded", k, w[0], w[1], w[2]);
        for (a = 0; a < 9; a++) x[3 * (size_t)w[a / 3] + a % 3] = org[a % 3] + y[a];
    }
    c->last_iterations = 0;
    if (c->npair == 0) return MD_OK;
    /* the reference directions, once */
    for (k = 0; k < c->npair; k++) {
        double *r = c->scratch + 3 * (size_t)k;
        md__sub_image(ref, c->pair[2 * k + 1], c->pair[2 * k], box, r); /* ref_i - ref_j */
    }
    for (it = 1; it <= c->max_iterations; it++) {
        int done = 1;
        for (k = 0; k < c->npair; k++) {
            int i = c->pair[2 * k], j = c->pair[2 * k + 1];
            const double *r = c->scratch + 3 * (size_t)k;
            double d[3], d2, L2 = c->length[k] * c->length[k], diff, rr, g, wi = c->inv_mass[i], wj = c->inv_mass[j];
            md__sub_image(x, j, i, box, d);
            d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            diff = L2 - d2;
            if (fabs(diff) <= 2.0 * c->tolerance * L2) continue;
            rr = r[0] * d[0] + r[1] * d[1] + r[2] * d[2];
            if (!(rr > 1e-6 * L2))
                return md_set_error(MD_ERR_RANGE, fn, 0, "constraint", "constraint %d (atoms %d %d) turned by more than 90 "
                                    "degrees in one step: SHAKE cannot follow, the step has exploded", k, i, j);
            g = diff / (2.0 * (wi + wj) * rr);
            for (a = 0; a < 3; a++) {
                x[3 * (size_t)i + a] += g * wi * r[a];
                x[3 * (size_t)j + a] -= g * wj * r[a];
            }
            done = 0;
        }
        if (done) {
            c->last_iterations = it;
            return MD_OK;
        }
    }
    return md_set_error(MD_ERR_RANGE, fn, 0, "constraint", "SHAKE did not converge to %g in %d sweeps", c->tolerance,
                        c->max_iterations);
}

MDDEF md_status md_constraints_apply_velocities(md_constraints *c, const double *x, double *v, const double box[3]) {
    const char *fn = "md_constraints_apply_velocities";
    int k, a, it;
    if (!c || !x || !v) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "c/x/v", "is NULL");
    for (k = 0; k < c->nwater; k++) {
        const int *w = c->water + 3 * k;
        double org[3], r[9], u[9], m[3];
        for (a = 0; a < 3; a++) org[a] = x[3 * (size_t)w[0] + a];
        md__water_rel(x, w, org, box, r);
        for (a = 0; a < 9; a++) u[a] = v[3 * (size_t)w[a / 3] + a % 3];
        m[0] = c->mass_o;
        m[1] = m[2] = c->mass_h;
        if (md_settle_velocities(r, u, m) != 0)
            return md_set_error(MD_ERR_RANGE, fn, 0, "water", "water %d (atoms %d %d %d) is collinear", k, w[0], w[1], w[2]);
        for (a = 0; a < 9; a++) v[3 * (size_t)w[a / 3] + a % 3] = u[a];
    }
    c->last_iterations = 0;
    if (c->npair == 0) return MD_OK;
    for (k = 0; k < c->npair; k++) md__sub_image(x, c->pair[2 * k + 1], c->pair[2 * k], box, c->scratch + 3 * (size_t)k);
    for (it = 1; it <= c->max_iterations; it++) {
        int done = 1;
        for (k = 0; k < c->npair; k++) {
            int i = c->pair[2 * k], j = c->pair[2 * k + 1];
            const double *r = c->scratch + 3 * (size_t)k;
            double wi = c->inv_mass[i], wj = c->inv_mass[j], dot = 0.0, r2, g;
            for (a = 0; a < 3; a++) dot += r[a] * (v[3 * (size_t)i + a] - v[3 * (size_t)j + a]);
            r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
            if (fabs(dot) <= c->tolerance * c->length[k] * c->length[k]) continue;
            g = dot / ((wi + wj) * r2);
            for (a = 0; a < 3; a++) {
                v[3 * (size_t)i + a] -= g * wi * r[a];
                v[3 * (size_t)j + a] += g * wj * r[a];
            }
            done = 0;
        }
        if (done) {
            c->last_iterations = it;
            return MD_OK;
        }
    }
    return md_set_error(MD_ERR_RANGE, fn, 0, "constraint", "RATTLE did not converge to %g in %d sweeps", c->tolerance,
                        c->max_iterations);
}

MDDEF double md_constraints_max_deviation(const md_constraints *c, const double *x, const double box[3]) {
    double worst = 0.0;
    int k, p;
    if (!c || !x) return NAN;
    for (k = 0; k < c->nwater; k++) {
        const int *w = c->water + 3 * k;
        static const int pa[3] = {0, 0, 1}, pb[3] = {1, 2, 2};
        for (p = 0; p < 3; p++) {
            double d[3], r, L = p < 2 ? c->doh : c->dhh, dev;
            md__sub_image(x, w[pa[p]], w[pb[p]], box, d);
            r = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
            dev = fabs(r - L) / L;
            if (!(dev <= worst)) worst = dev; /* NaN propagates */
        }
    }
    for (k = 0; k < c->npair; k++) {
        double d[3], r, dev;
        md__sub_image(x, c->pair[2 * k], c->pair[2 * k + 1], box, d);
        r = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
        dev = fabs(r - c->length[k]) / c->length[k];
        if (!(dev <= worst)) worst = dev;
    }
    return worst;
}

/* ---- sim ---- */

MDDEF void md_sim_free(md_sim *s) {
    if (!s) return;
    md_nb_plan_free(&s->nb);
    md_pme_plan_free(&s->pme);
    md_bonded_free(&s->bonded);
    md_constraints_free(&s->cons);
    md_free(s->x);
    md_free(s->v);
    md_free(s->f);
    md_free(s->inv_mass);
    md_free(s->xyzq);
    md_free(s->work);
    md_free(s->mol_start);
    md_free(s->mol_atom);
    memset(s, 0, sizeof *s);
}

/* xyzq = x wrapped into [0, L), rounded to float (charges stay). */
static void md__sim_wrap(md_sim *s) {
    int i, a;
    for (i = 0; i < s->n; i++) {
        float w[3];
        for (a = 0; a < 3; a++) {
            double x = s->x[3 * (size_t)i + a], L = s->box[a];
            w[a] = (float)(x - L * floor(x / L));
            if (w[a] >= (float)L) w[a] = 0.0f; /* x just below a multiple of L rounds up to L */
        }
        s->xyzq[i].x = w[0];
        s->xyzq[i].y = w[1];
        s->xyzq[i].z = w[2];
    }
}

MDDEF const char *md_energy_nonfinite_term(const md_energy *e) {
    if (!e) return "e";
    if (!isfinite(e->lj)) return "lj";
    if (!isfinite(e->lj_dispersion)) return "lj_dispersion";
    if (!isfinite(e->lj14)) return "lj14";
    if (!isfinite(e->coul_real)) return "coul_real";
    if (!isfinite(e->coul14)) return "coul14";
    if (!isfinite(e->coul_excl)) return "coul_excl";
    if (!isfinite(e->coul_recip)) return "coul_recip";
    if (!isfinite(e->coul_self)) return "coul_self";
    if (!isfinite(e->bonded)) return "bonded";
    if (!isfinite(e->kinetic)) return "kinetic";
    return NULL;
}

MDDEF md_status md_sim_compute_forces(md_sim *s) {
    const char *fn = "md_sim_compute_forces";
    md_energy e;
    md_status st;
    const char *bad;
    if (!s || !s->x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is NULL or not created");
    md__sim_wrap(s);
    /* nonbonded overwrites the forces, PME and the bonded terms add */
    if ((st = md_nb_compute(MD_NB_CPU_VERLET, &s->nb, s->top, s->lj, s->xyzq, s->box, s->f, &e)) != MD_OK) return st;
    if (s->use_pme && (st = md_pme_compute(&s->pme, s->xyzq, s->n, s->box, s->f, &e)) != MD_OK) return st;
    if ((st = md_bonded_compute(&s->bonded, s->x, s->n, s->box, s->f, &e)) != MD_OK) return st;
    if ((bad = md_energy_nonfinite_term(&e)) != NULL)
        return md_set_error(MD_ERR_RANGE, fn, 0, "energy", "term %s is not finite at step %lld", bad, s->step);
    e.kinetic = 0.0;
    s->energy = e;
    return MD_OK;
}

static void md__sim_remove_com(md_sim *s) {
    double p[3] = {0.0, 0.0, 0.0}, m = 0.0;
    int i, a;
    if (s->desc.com_removal < 0) return;
    for (i = 0; i < s->n; i++) {
        double mi = 1.0 / s->inv_mass[i];
        m += mi;
        for (a = 0; a < 3; a++) p[a] += mi * s->v[3 * (size_t)i + a];
    }
    for (a = 0; a < 3; a++) p[a] /= m;
    for (i = 0; i < s->n; i++)
        for (a = 0; a < 3; a++) s->v[3 * (size_t)i + a] -= p[a];
}

/* Molecules for the barostat: union-find over bonds, constraints and waters; ordered by their
 * lowest atom. */
static md_status md__sim_molecules(md_sim *s, const md_topology *t) {
    int *parent = (int *)md_alloc_array((size_t)s->n, sizeof(int)), *id = NULL, i, k, m = 0;
    if (!parent) return MD_ERR_OUT_OF_MEMORY;
    for (i = 0; i < s->n; i++) parent[i] = i;
#define MD__FIND(x) \
    while (parent[x] != x) x = parent[x] = parent[parent[x]]
#define MD__JOIN(a0, b0)                    \
    do {                                    \
        int ra_ = (a0), rb_ = (b0);         \
        MD__FIND(ra_);                      \
        MD__FIND(rb_);                      \
        if (ra_ < rb_) parent[rb_] = ra_;   \
        else if (rb_ < ra_) parent[ra_] = rb_; \
    } while (0)
    for (k = 0; k < t->nbond; k++) MD__JOIN(t->bond[2 * k], t->bond[2 * k + 1]);
    for (k = 0; k < t->nconstraint; k++) MD__JOIN(t->constraint[2 * k], t->constraint[2 * k + 1]);
    for (k = 0; k < t->nwater; k++) {
        MD__JOIN(t->water[3 * k], t->water[3 * k + 1]);
        MD__JOIN(t->water[3 * k], t->water[3 * k + 2]);
    }
    id = (int *)md_alloc_array((size_t)s->n, sizeof(int));
    s->mol_atom = (int *)md_alloc_array((size_t)s->n, sizeof(int));
    s->mol_start = (int *)md_alloc_array((size_t)s->n + 1, sizeof(int));
    if (!id || !s->mol_atom || !s->mol_start) {
        md_free(parent);
        md_free(id);
        return MD_ERR_OUT_OF_MEMORY;
    }
    for (i = 0; i < s->n; i++) {
        int r = i;
        MD__FIND(r);
        id[i] = r == i ? m++ : id[r]; /* a root is its molecule's lowest atom, seen first */
    }
#undef MD__FIND
#undef MD__JOIN
    memset(s->mol_start, 0, ((size_t)s->n + 1) * sizeof(int));
    for (i = 0; i < s->n; i++) s->mol_start[id[i] + 1]++;
    for (k = 0; k < m; k++) s->mol_start[k + 1] += s->mol_start[k];
    for (k = 0; k < m; k++) parent[k] = s->mol_start[k]; /* next free slot of each molecule */
    for (i = 0; i < s->n; i++) s->mol_atom[parent[id[i]]++] = i;
    s->nmol = m;
    md_free(parent);
    md_free(id);
    return MD_OK;
}

MDDEF md_status md_sim_prepare(md_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                               const md_sim_desc *desc) {
    const char *fn = "md_sim_create";
    md_sim r;
    md_sim_desc d;
    md_nb_params nbp;
    md_status st;
    size_t un;
    int i, a;
    if (!s || !sys || !t || !lj) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s/sys/t/lj", "is NULL");
    if ((st = md_topology_check(t, lj, fn)) != MD_OK) return st;
    if (!sys->xyzq || !sys->vel || sys->n != t->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "sys", "has %d atoms (or no arrays), the topology %d", sys->n,
                            t->n);
    for (a = 0; a < 3; a++)
        if (!(sys->box[a] > 0.0) || !isfinite(sys->box[a]))
            return md_set_error(MD_ERR_RANGE, fn, 0, "box", "edge %d is %g: a periodic box is needed", a, sys->box[a]);
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    if (d.dt == 0.0) d.dt = 0.002;
    if (d.temperature == 0.0) d.temperature = 300.0;
    if (d.friction == 0.0) d.friction = 1.0;
    if (d.pressure == 0.0) d.pressure = 1.0;
    if (!(d.dt > 0.0 && d.dt < 0.1)) return md_set_error(MD_ERR_RANGE, fn, 0, "dt", "must be in (0, 0.1) ps (got %g)", d.dt);
    if (d.thermostat != MD_THERMOSTAT_NONE && d.thermostat != MD_THERMOSTAT_LANGEVIN)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "thermostat", "unknown thermostat %d", (int)d.thermostat);
    if (!(d.temperature > 0.0) || !isfinite(d.temperature))
        return md_set_error(MD_ERR_RANGE, fn, 0, "temperature", "must be finite and > 0 (got %g)", d.temperature);
    if (!(d.friction > 0.0) || !isfinite(d.friction))
        return md_set_error(MD_ERR_RANGE, fn, 0, "friction", "must be finite and > 0 (got %g)", d.friction);
    if (!isfinite(d.pressure)) return md_set_error(MD_ERR_RANGE, fn, 0, "pressure", "must be finite (got %g)", d.pressure);
    if (d.barostat_interval < 0)
        return md_set_error(MD_ERR_RANGE, fn, 0, "barostat_interval", "must be >= 0 (got %d)", d.barostat_interval);
    if ((st = md_nb_params_resolve(&d.nb, &nbp)) != MD_OK) return st;
    d.nb = nbp;
    if (d.max_displacement == 0.0) d.max_displacement = nbp.buffer > 0.0 ? 0.5 * nbp.buffer : 0.05;
    if (!(d.max_displacement > 0.0) || !isfinite(d.max_displacement))
        return md_set_error(MD_ERR_RANGE, fn, 0, "max_displacement", "must be finite and > 0 (got %g)", d.max_displacement);
    for (i = 0; i < t->n; i++)
        if (!(t->mass[i] > 0.0f))
            return md__err_index(MD_ERR_RANGE, fn, "mass", i, "must be > 0 (got %g): massless sites are not supported",
                                 t->mass[i]);
    memset(&r, 0, sizeof r);
    r.n = t->n;
    r.desc = d;
    r.top = t;
    r.lj = lj;
    un = (size_t)r.n;
    r.x = (double *)md_alloc_array(3 * un, sizeof(double));
    r.v = (double *)md_alloc_array(3 * un, sizeof(double));
    r.f = (double *)md_alloc_array(3 * un, sizeof(double));
    r.inv_mass = (double *)md_alloc_array(un, sizeof(double));
    r.xyzq = (md_float4 *)md_alloc_array(un, sizeof(md_float4));
    r.work = (double *)md_alloc_array(9 * un, sizeof(double));
    if (!r.x || !r.v || !r.f || !r.inv_mass || !r.xyzq || !r.work || md__sim_molecules(&r, t) != MD_OK) {
        md_sim_free(&r);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate a run of %d atoms", t->n);
    }
    for (i = 0; i < r.n; i++) {
        const double p[3] = {sys->xyzq[i].x, sys->xyzq[i].y, sys->xyzq[i].z};
        const double u[3] = {sys->vel[i].x, sys->vel[i].y, sys->vel[i].z};
        for (a = 0; a < 3; a++) {
            if (!isfinite(p[a]) || !isfinite(u[a])) {
                md_sim_free(&r);
                return md__err_index(MD_ERR_RANGE, fn, "sys.xyzq/vel", i, "is not finite (component %g)", (double)a);
            }
            r.x[3 * (size_t)i + a] = p[a];
            r.v[3 * (size_t)i + a] = u[a];
        }
        r.inv_mass[i] = 1.0 / (double)t->mass[i];
        r.xyzq[i].w = t->charge[i];
    }
    for (a = 0; a < 3; a++) r.box[a] = sys->box[a];
    r.use_pme = nbp.coul == MD_COUL_EWALD;
    if ((st = md_nb_plan_create(&r.nb, &nbp, r.n)) != MD_OK || (st = md_bonded_from_topology(&r.bonded, t, 1)) != MD_OK ||
        (st = md_constraints_create(&r.cons, t, &d.constraints)) != MD_OK) {
        md_sim_free(&r);
        return st;
    }
    if (r.use_pme) {
        md_pme_params pp = d.pme;
        pp.alpha = nbp.ewald_beta;
        pp.cutoff = nbp.cutoff;
        pp.tolerance = nbp.ewald_tolerance;
        if ((st = md_pme_plan_create(&r.pme, &pp, r.box, r.n)) != MD_OK) {
            md_sim_free(&r);
            return st;
        }
        r.desc.pme = r.pme.params;
    }
    /* constrain the initial state: positions against themselves, then velocities */
    memcpy(r.work, r.x, 3 * un * sizeof(double));
    if ((st = md_constraints_apply(&r.cons, r.work, r.x, r.box)) != MD_OK ||
        (st = md_constraints_apply_velocities(&r.cons, r.x, r.v, r.box)) != MD_OK) {
        md_sim_free(&r);
        return st;
    }
    md__sim_remove_com(&r);
    r.ndof = 3 * r.n - md_constraints_count(&r.cons) - (d.com_removal == 0 || d.thermostat == MD_THERMOSTAT_NONE ? 3 : 0);
    if (r.ndof < 1) r.ndof = 1;
    md_barostat_init(&r.baro, d.seed, r.box[0] * r.box[1] * r.box[2]);
    md__sim_wrap(&r);
    *s = r;
    return MD_OK;
}

MDDEF md_status md_sim_create(md_sim *s, const md_system *sys, const md_topology *t, const md_lj_table *lj,
                              const md_sim_desc *desc) {
    md_sim r;
    md_status st;
    if (!s) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_create", 0, "s", "is NULL");
    if ((st = md_sim_prepare(&r, sys, t, lj, desc)) != MD_OK) return st;
    if ((st = md_sim_compute_forces(&r)) != MD_OK) {
        md_sim_free(&r);
        return st;
    }
    *s = r;
    return MD_OK;
}

MDDEF void md_barostat_init(md_barostat *b, uint64_t seed, double volume) {
    if (!b) return;
    memset(b, 0, sizeof *b);
    md_rng_seed(&b->rng, seed ^ 0x9E3779B97F4A7C15ULL);
    b->scale = 0.01 * volume;
}

MDDEF double md_barostat_propose(md_barostat *b) { return b ? b->scale * 2.0 * (md_rng_uniform(&b->rng) - 0.5) : 0.0; }

MDDEF int md_barostat_decide(md_barostat *b, double de, double dv, double volume, int nmol, double kt,
                             double pressure) {
    double w;
    int accept;
    if (!b) return 0;
    w = de + pressure * MD_BAR * dv - nmol * kt * log((volume + dv) / volume);
    accept = isfinite(w) && !(w > 0.0 && md_rng_uniform(&b->rng) > exp(-w / kt));
    b->attempted++;
    b->total_attempted++;
    if (accept) {
        b->accepted++;
        b->total_accepted++;
    }
    if (b->attempted >= 10) {
        const double v = accept ? volume + dv : volume;
        if (b->accepted < 0.25 * b->attempted) {
            b->scale /= 1.1;
            b->attempted = b->accepted = 0;
        } else if (b->accepted > 0.75 * b->attempted) {
            b->scale = fmin(b->scale * 1.1, 0.3 * v);
            b->attempted = b->accepted = 0;
        }
    }
    return accept;
}

/* One Monte Carlo volume move (see the section's manual). */
static md_status md__sim_barostat(md_sim *s) {
    const double kT = MD_KB * s->desc.temperature;
    double V = s->box[0] * s->box[1] * s->box[2], dV, Vn, sc, e0, box0[3], *x0 = s->work, *f0 = s->work + 3 * (size_t)s->n;
    md_energy en0 = s->energy;
    md_status st;
    int m, a, k, accept;
    size_t bytes = 3 * (size_t)s->n * sizeof(double);
    dV = md_barostat_propose(&s->baro);
    Vn = V + dV;
    if (!(Vn > 0.0)) return MD_OK;
    sc = cbrt(Vn / V);
    e0 = md_energy_potential(&s->energy);
    memcpy(x0, s->x, bytes);
    memcpy(f0, s->f, bytes);
    for (a = 0; a < 3; a++) box0[a] = s->box[a];
    for (m = 0; m < s->nmol; m++) {
        int first = s->mol_atom[s->mol_start[m]], cnt = s->mol_start[m + 1] - s->mol_start[m];
        double c[3] = {0.0, 0.0, 0.0};
        for (k = s->mol_start[m]; k < s->mol_start[m + 1]; k++) {
            double d[3];
            md__sub_image(s->x, first, s->mol_atom[k], s->box, d);
            for (a = 0; a < 3; a++) c[a] += d[a];
        }
        for (a = 0; a < 3; a++) c[a] = s->x[3 * (size_t)first + a] + c[a] / cnt;
        for (k = s->mol_start[m]; k < s->mol_start[m + 1]; k++)
            for (a = 0; a < 3; a++) s->x[3 * (size_t)s->mol_atom[k] + a] += (sc - 1.0) * c[a];
    }
    for (a = 0; a < 3; a++) s->box[a] *= sc;
    st = md_sim_compute_forces(s);
    /* a trial whose energy cannot be computed (an overlap: MD_ERR_RANGE) counts as rejected */
    accept = st == MD_OK ? md_barostat_decide(&s->baro, md_energy_potential(&s->energy) - e0, dV, V, s->nmol, kT,
                                              s->desc.pressure)
                         : (md_barostat_decide(&s->baro, INFINITY, dV, V, s->nmol, kT, s->desc.pressure), 0);
    if (!accept) {
        memcpy(s->x, x0, bytes);
        memcpy(s->f, f0, bytes);
        for (a = 0; a < 3; a++) s->box[a] = box0[a];
        s->energy = en0;
        md__sim_wrap(s);
        if (st != MD_OK && st != MD_ERR_RANGE) return st;
    }
    return MD_OK;
}

MDDEF md_status md_sim_step(md_sim *s, int nsteps) {
    const char *fn = "md_sim_step";
    md_status st;
    int it;
    if (!s || !s->x) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s", "is NULL or not created");
    if (nsteps < 0) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "nsteps", "must be >= 0 (got %d)", nsteps);
    for (it = 0; it < nsteps; it++) {
        const double dt = s->desc.dt, maxd2 = s->desc.max_displacement * s->desc.max_displacement;
        const int lang = s->desc.thermostat == MD_THERMOSTAT_LANGEVIN;
        double *x0 = s->work, *D = s->work + 3 * (size_t)s->n;
        int i, a;
        for (i = 0; i < s->n; i++)
            for (a = 0; a < 3; a++) s->v[3 * (size_t)i + a] += dt * s->f[3 * (size_t)i + a] * s->inv_mass[i];
        if (lang && (st = md_constraints_apply_velocities(&s->cons, s->x, s->v, s->box)) != MD_OK) goto fail;
        if (lang) {
            const double vs = exp(-s->desc.friction * dt), kT = MD_KB * s->desc.temperature;
            for (i = 0; i < s->n; i++) {
                double R[3], sd = sqrt((1.0 - vs * vs) * kT * s->inv_mass[i]);
                md_langevin_normals(s->desc.seed, s->step, i, R);
                for (a = 0; a < 3; a++) {
                    double *v = &s->v[3 * (size_t)i + a];
                    D[3 * (size_t)i + a] = 0.5 * dt * *v;
                    *v = vs * *v + sd * R[a];
                    D[3 * (size_t)i + a] += 0.5 * dt * *v;
                }
            }
        } else {
            for (i = 0; i < 3 * s->n; i++) D[i] = dt * s->v[i];
        }
        memcpy(x0, s->x, 3 * (size_t)s->n * sizeof(double));
        for (i = 0; i < 3 * s->n; i++) s->x[i] += D[i];
        if ((st = md_constraints_apply(&s->cons, x0, s->x, s->box)) != MD_OK) goto fail;
        for (i = 0; i < s->n; i++) {
            double m2 = 0.0;
            for (a = 0; a < 3; a++) {
                size_t j = 3 * (size_t)i + a;
                double dc = s->x[j] - x0[j];
                s->v[j] += (dc - D[j]) / dt;
                m2 += dc * dc;
            }
            if (!(m2 <= maxd2)) {
                st = md__err_index(MD_ERR_RANGE, fn, "x", i, "moved %g nm in one step, more than max_displacement (the "
                                   "neighbour search cannot follow it): the simulation has exploded", sqrt(m2));
                goto fail;
            }
        }
        md__sim_remove_com(s);
        s->step++;
        s->time_ps += dt;
        if ((st = md_sim_compute_forces(s)) != MD_OK) goto fail;
        if (s->desc.barostat_interval > 0 && s->step % s->desc.barostat_interval == 0 &&
            (st = md__sim_barostat(s)) != MD_OK)
            goto fail;
    }
    return MD_OK;
fail: {
    char msg[600]; /* md_last_error() is the buffer md_set_error writes: copy it first */
    snprintf(msg, sizeof msg, "%s", md_last_error());
    return md_set_error(st, fn, 0, "step", "stopped at step %lld: %s", s->step, msg);
}
}

MDDEF md_status md_sim_energy(md_sim *s, md_energy *e) {
    md_status st;
    double ke = 0.0, *u;
    int i, a;
    if (!s || !s->x || !e) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_energy", 0, "s/e", "is NULL");
    u = s->work + 6 * (size_t)s->n;
    for (i = 0; i < s->n; i++)
        for (a = 0; a < 3; a++)
            u[3 * (size_t)i + a] = s->v[3 * (size_t)i + a] + 0.5 * s->desc.dt * s->f[3 * (size_t)i + a] * s->inv_mass[i];
    if ((st = md_constraints_apply_velocities(&s->cons, s->x, u, s->box)) != MD_OK) return st;
    for (i = 0; i < s->n; i++) {
        double v2 = 0.0;
        for (a = 0; a < 3; a++) v2 += u[3 * (size_t)i + a] * u[3 * (size_t)i + a];
        ke += v2 / s->inv_mass[i];
    }
    *e = s->energy;
    e->kinetic = 0.5 * ke;
    return MD_OK;
}

MDDEF double md_sim_temperature(const md_sim *s, double kinetic) {
    if (!s || s->ndof < 1) return 0.0;
    return 2.0 * kinetic / (s->ndof * MD_KB);
}

MDDEF double md_sim_density(const md_sim *s) {
    double m = 0.0;
    int i;
    if (!s || !s->x) return 0.0;
    for (i = 0; i < s->n; i++) m += 1.0 / s->inv_mass[i];
    return m / (602.214076 * s->box[0] * s->box[1] * s->box[2]);
}

MDDEF md_status md_sim_get_system(const md_sim *s, md_system *sys) {
    int i, a;
    if (!s || !s->x || !sys || !sys->xyzq || !sys->vel)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_get_system", 0, "s/sys", "is NULL or empty");
    if (sys->n != s->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_get_system", 0, "sys", "has %d atoms, the run %d", sys->n, s->n);
    for (i = 0; i < s->n; i++) {
        double w[3];
        for (a = 0; a < 3; a++) {
            double x = s->x[3 * (size_t)i + a], L = s->box[a];
            w[a] = x - L * floor(x / L);
        }
        sys->xyzq[i].x = (float)w[0];
        sys->xyzq[i].y = (float)w[1];
        sys->xyzq[i].z = (float)w[2];
        sys->vel[i].x = (float)s->v[3 * (size_t)i];
        sys->vel[i].y = (float)s->v[3 * (size_t)i + 1];
        sys->vel[i].z = (float)s->v[3 * (size_t)i + 2];
    }
    for (a = 0; a < 3; a++) sys->box[a] = s->box[a];
    return MD_OK;
}

MDDEF md_status md_sim_report_make(md_sim *s, md_sim_report *r) {
    md_status st;
    md_sim_report o;
    if (!s || !r) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_report_make", 0, "s/r", "is NULL");
    memset(&o, 0, sizeof o);
    if ((st = md_sim_energy(s, &o.energy)) != MD_OK) return st;
    o.step = s->step;
    o.time_ps = s->time_ps;
    o.temperature = md_sim_temperature(s, o.energy.kinetic);
    o.volume = s->box[0] * s->box[1] * s->box[2];
    o.density = md_sim_density(s);
    *r = o;
    return MD_OK;
}

MDDEF md_status md_energy_csv_header(FILE *f) {
    if (!f) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_energy_csv_header", 0, "f", "is NULL");
    if (fputs("step,time_ps,potential,kinetic,total,temperature_K,volume_nm3,density_g_cm3,lj,lj_dispersion,lj14,"
              "coul_real,coul14,coul_excl,coul_recip,coul_self,bonded\n",
              f) < 0)
        return md_set_error(MD_ERR_IO, "md_energy_csv_header", 0, "f", "write failed: %s", strerror(errno));
    return MD_OK;
}

MDDEF md_status md_energy_csv_row(FILE *f, const md_sim_report *r) {
    const md_energy *e;
    if (!f || !r) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_energy_csv_row", 0, "f/r", "is NULL");
    e = &r->energy;
    if (fprintf(f, "%lld,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g,%.10g\n",
                r->step, r->time_ps, md_energy_potential(e), e->kinetic, md_energy_total(e), r->temperature, r->volume,
                r->density, e->lj, e->lj_dispersion, e->lj14, e->coul_real, e->coul14, e->coul_excl, e->coul_recip,
                e->coul_self, e->bonded) < 0)
        return md_set_error(MD_ERR_IO, "md_energy_csv_row", 0, "f", "write failed: %s", strerror(errno));
    return MD_OK;
}

MDDEF int md_progress_line(char *buf, size_t cap, const md_sim_report *r, long long nsteps, double ns_per_day) {
    char rate[48] = "";
    if (!buf || !r) return -1;
    if (isfinite(ns_per_day)) snprintf(rate, sizeof rate, "  %.1f ns/day", ns_per_day);
    return snprintf(buf, cap, "step %lld/%lld  t %.3f ps  E_pot %.6g kJ/mol  T %.2f K  %.4f g/cm3%s", r->step, nsteps,
                    r->time_ps, md_energy_potential(&r->energy), r->temperature, r->density, rate);
}

/* ---- checkpoint ---- */

#define MD__CHK_HEADER 128

MDDEF void md_checkpoint_free(md_checkpoint *ck) {
    if (!ck) return;
    md_free(ck->x);
    md_free(ck->v);
    memset(ck, 0, sizeof *ck);
}

MDDEF md_status md_sim_checkpoint(const md_sim *s, md_checkpoint *ck) {
    md_checkpoint c;
    size_t bytes;
    if (!s || !s->x || !ck) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_sim_checkpoint", 0, "s/ck", "is NULL");
    memset(&c, 0, sizeof c);
    bytes = 3 * (size_t)s->n * sizeof(double);
    c.x = (double *)md_alloc_array(3 * (size_t)s->n, sizeof(double));
    c.v = (double *)md_alloc_array(3 * (size_t)s->n, sizeof(double));
    if (!c.x || !c.v) {
        md_checkpoint_free(&c);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, "md_sim_checkpoint", 0, "n", "cannot allocate %d atoms", s->n);
    }
    memcpy(c.x, s->x, bytes);
    memcpy(c.v, s->v, bytes);
    c.n = s->n;
    c.step = s->step;
    c.time_ps = s->time_ps;
    memcpy(c.box, s->box, sizeof c.box);
    c.seed = s->desc.seed;
    c.baro = s->baro;
    *ck = c;
    return MD_OK;
}

MDDEF md_status md_sim_restore(md_sim *s, const md_checkpoint *ck) {
    const char *fn = "md_sim_restore";
    md_sim keep;
    md_status st;
    size_t bytes;
    int i;
    if (!s || !s->x || !ck || !ck->x || !ck->v) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "s/ck", "is NULL");
    if (ck->n != s->n)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "n", "checkpoint of %d atoms for a run of %d", ck->n, s->n);
    for (i = 0; i < 3 * ck->n; i++)
        if (!isfinite(ck->x[i]) || !isfinite(ck->v[i]))
            return md__err_index(MD_ERR_RANGE, fn, "x/v", i / 3, "is not finite (%g)", ck->x[i]);
    bytes = 3 * (size_t)s->n * sizeof(double);
    if ((st = md_nb_check_box(fn, &s->nb.params, ck->box)) != MD_OK) return st;
    /* keep the old state until the forces of the new one are computed */
    keep = *s;
    memcpy(s->work, s->x, bytes);
    memcpy(s->work + 3 * (size_t)s->n, s->v, bytes);
    memcpy(s->x, ck->x, bytes);
    memcpy(s->v, ck->v, bytes);
    memcpy(s->box, ck->box, sizeof s->box);
    s->step = ck->step;
    s->time_ps = ck->time_ps;
    s->desc.seed = ck->seed;
    s->baro = ck->baro;
    if ((st = md_sim_compute_forces(s)) != MD_OK) {
        memcpy(s->x, s->work, bytes);
        memcpy(s->v, s->work + 3 * (size_t)s->n, bytes);
        memcpy(s->box, keep.box, sizeof s->box);
        s->step = keep.step;
        s->time_ps = keep.time_ps;
        s->desc.seed = keep.desc.seed;
        s->baro = keep.baro;
        if (md_sim_compute_forces(s) != MD_OK) s->energy = keep.energy;
        return st;
    }
    return MD_OK;
}

static void md__put_u32(unsigned char *p, uint32_t v) {
    int k;
    for (k = 0; k < 4; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void md__put_u64(unsigned char *p, uint64_t v) {
    int k;
    for (k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}
static void md__put_f64(unsigned char *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    md__put_u64(p, u);
}
static uint32_t md__get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t md__get_u64(const unsigned char *p) { return (uint64_t)md__get_u32(p) | (uint64_t)md__get_u32(p + 4) << 32; }
static double md__get_f64(const unsigned char *p) {
    uint64_t u = md__get_u64(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* FNV-1a, 64 bits. */
static uint64_t md__fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t k;
    for (k = 0; k < n; k++) {
        h ^= p[k];
        h *= 0x100000001b3ULL;
    }
    return h;
}

MDDEF md_status md_checkpoint_write(const char *path, const md_checkpoint *ck) {
    const char *fn = "md_checkpoint_write";
    unsigned char *buf, *p;
    char tmp[4096];
    size_t size, k;
    FILE *f;
    int ok;
    if (!path || !ck || !ck->x || !ck->v || ck->n < 1)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path/ck", "is NULL or empty");
    if (!md__tmp_path(tmp, sizeof tmp, path)) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "path", "is too long");
    size = MD__CHK_HEADER + 48 * (size_t)ck->n + 8;
    if (!(buf = (unsigned char *)md_alloc_array(size, 1)))
        return md_set_error(MD_ERR_OUT_OF_MEMORY, fn, 0, "n", "cannot allocate %zu bytes", size);
    memcpy(buf, "MDCHKPT\n", 8);
    md__put_u32(buf + 8, MD_CHECKPOINT_VERSION);
    md__put_u32(buf + 12, (uint32_t)ck->n);
    md__put_u64(buf + 16, (uint64_t)ck->step);
    md__put_f64(buf + 24, ck->time_ps);
    for (k = 0; k < 3; k++) md__put_f64(buf + 32 + 8 * k, ck->box[k]);
    md__put_u64(buf + 56, ck->seed);
    for (k = 0; k < 4; k++) md__put_u64(buf + 64 + 8 * k, ck->baro.rng.s[k]);
    md__put_f64(buf + 96, ck->baro.scale);
    md__put_u32(buf + 104, (uint32_t)ck->baro.attempted);
    md__put_u32(buf + 108, (uint32_t)ck->baro.accepted);
    md__put_u64(buf + 112, (uint64_t)ck->baro.total_attempted);
    md__put_u64(buf + 120, (uint64_t)ck->baro.total_accepted);
    p = buf + MD__CHK_HEADER;
    for (k = 0; k < 3 * (size_t)ck->n; k++) md__put_f64(p + 8 * k, ck->x[k]);
    p += 24 * (size_t)ck->n;
    for (k = 0; k < 3 * (size_t)ck->n; k++) md__put_f64(p + 8 * k, ck->v[k]);
    md__put_u64(buf + size - 8, md__fnv1a(buf, size - 8));
    if (!(f = fopen(tmp, "wb"))) {
        md_free(buf);
        return md_set_error(MD_ERR_IO, tmp, 0, NULL, "cannot open for writing: %s", strerror(errno));
    }
    ok = fwrite(buf, 1, size, f) == size;
    ok &= fclose(f) == 0;
    md_free(buf);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "write failed: %s", strerror(errno));
    }
    return MD_OK;
}

MDDEF md_status md_checkpoint_read_mem(const void *data, size_t size, const char *name, md_checkpoint *ck) {
    const unsigned char *b = (const unsigned char *)data;
    md_checkpoint c;
    uint32_t ver, n;
    size_t k, need;
    if (!name) name = "<memory>";
    if (!ck || (!data && size > 0)) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_checkpoint_read", 0, "ck/data", "is NULL");
    if (size < MD__CHK_HEADER + 8) return md_set_error(MD_ERR_PARSE, name, 0, "size", "%zu bytes: too short for a checkpoint", size);
    if (memcmp(b, "MDCHKPT\n", 8) != 0) return md_set_error(MD_ERR_PARSE, name, 0, "magic", "not an md.h checkpoint");
    ver = md__get_u32(b + 8);
    if (ver != MD_CHECKPOINT_VERSION)
        return md_set_error(MD_ERR_PARSE, name, 0, "version", "%u (this md.h reads version %d)", ver, MD_CHECKPOINT_VERSION);
    n = md__get_u32(b + 12);
    if (n < 1 || n > MD_DCD_MAX_ATOMS) return md_set_error(MD_ERR_PARSE, name, 0, "n", "%u atoms is out of range", n);
    need = MD__CHK_HEADER + 48 * (size_t)n + 8;
    if (size != need) return md_set_error(MD_ERR_PARSE, name, 0, "size", "%zu bytes, %zu expected for %u atoms", size, need, n);
    if (md__get_u64(b + size - 8) != md__fnv1a(b, size - 8))
        return md_set_error(MD_ERR_PARSE, name, 0, "hash", "does not match the content (a damaged file)");
    memset(&c, 0, sizeof c);
    c.n = (int)n;
    c.step = (long long)md__get_u64(b + 16);
    c.time_ps = md__get_f64(b + 24);
    for (k = 0; k < 3; k++) c.box[k] = md__get_f64(b + 32 + 8 * k);
    c.seed = md__get_u64(b + 56);
    for (k = 0; k < 4; k++) c.baro.rng.s[k] = md__get_u64(b + 64 + 8 * k);
    c.baro.scale = md__get_f64(b + 96);
    c.baro.attempted = (int)md__get_u32(b + 104);
    c.baro.accepted = (int)md__get_u32(b + 108);
    c.baro.total_attempted = (long long)md__get_u64(b + 112);
    c.baro.total_accepted = (long long)md__get_u64(b + 120);
    if (c.step < 0) return md_set_error(MD_ERR_RANGE, name, 0, "step", "is negative (%lld)", c.step);
    if (!isfinite(c.time_ps)) return md_set_error(MD_ERR_RANGE, name, 0, "time", "is not finite");
    for (k = 0; k < 3; k++)
        if (!(c.box[k] > 0.0) || !isfinite(c.box[k]))
            return md_set_error(MD_ERR_RANGE, name, 0, "box", "edge %zu is %g, not finite and > 0", k, c.box[k]);
    if (!(c.baro.scale >= 0.0) || !isfinite(c.baro.scale))
        return md_set_error(MD_ERR_RANGE, name, 0, "baro_scale", "is %g, not finite and >= 0", c.baro.scale);
    if (c.baro.attempted < 0 || c.baro.accepted < 0 || c.baro.accepted > c.baro.attempted || c.baro.total_attempted < 0 ||
        c.baro.total_accepted < 0 || c.baro.total_accepted > c.baro.total_attempted)
        return md_set_error(MD_ERR_RANGE, name, 0, "baro_counts", "are inconsistent");
    for (k = 0; k < 48 * (size_t)n; k += 8)
        if (!isfinite(md__get_f64(b + MD__CHK_HEADER + k)))
            return md_set_error(MD_ERR_RANGE, name, 0, k < 24 * (size_t)n ? "x" : "v", "atom %zu: not finite",
                                (k % (24 * (size_t)n)) / 24);
    c.x = (double *)md_alloc_array(3 * (size_t)n, sizeof(double));
    c.v = (double *)md_alloc_array(3 * (size_t)n, sizeof(double));
    if (!c.x || !c.v) {
        md_checkpoint_free(&c);
        return md_set_error(MD_ERR_OUT_OF_MEMORY, name, 0, "n", "cannot allocate %u atoms", n);
    }
    for (k = 0; k < 3 * (size_t)n; k++) {
        c.x[k] = md__get_f64(b + MD__CHK_HEADER + 8 * k);
        c.v[k] = md__get_f64(b + MD__CHK_HEADER + 24 * (size_t)n + 8 * k);
    }
    *ck = c;
    return MD_OK;
}

MDDEF md_status md_checkpoint_read(const char *path, md_checkpoint *ck) {
    char *data = NULL;
    size_t len = 0;
    md_status st;
    if (!ck) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_checkpoint_read", 0, "ck", "is NULL");
    if ((st = md__slurp(path, &data, &len)) != MD_OK) return st;
    st = md_checkpoint_read_mem(data, len, path, ck);
    md_free(data);
    return st;
}

/* ---- DCD written frame by frame ---- */

MDDEF md_status md_dcd_writer_open(md_dcd_writer *w, const char *path, int natoms, const md_dcd_write_desc *desc) {
    const char *fn = "md_dcd_writer_open";
    md_dcd_writer s;
    if (!w || !path) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "w/path", "is NULL");
    if (natoms < 1 || natoms > MD_DCD_MAX_ATOMS)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "natoms", "must be in 1..%d (got %d)", MD_DCD_MAX_ATOMS, natoms);
    memset(&s, 0, sizeof s);
    if (desc) s.desc = *desc;
    s.natoms = natoms;
    if (!(s.buf = (unsigned char *)md_alloc_array((size_t)natoms, 4))) return MD_ERR_OUT_OF_MEMORY;
    if (!(s.file = fopen(path, "wb+"))) {
        md_free(s.buf);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "cannot open for writing: %s", strerror(errno));
    }
    if (!md__dcd_put_header(s.file, natoms, 0, &s.desc) || fflush(s.file) != 0) {
        fclose(s.file);
        md_free(s.buf);
        return md_set_error(MD_ERR_IO, path, 0, NULL, "write failed: %s", strerror(errno));
    }
    *w = s;
    return MD_OK;
}

MDDEF md_status md_dcd_writer_append(md_dcd_writer *w, const md_float4 *xyzq, const double box[3]) {
    const char *fn = "md_dcd_writer_append";
    unsigned char c[4];
    int i, k, ok, be;
    if (!w || !w->file || !xyzq) return md_set_error(MD_ERR_INVALID_ARGUMENT, fn, 0, "w/xyzq", "is NULL or not open");
    for (i = 0; i < w->natoms; i++)
        if (!isfinite(xyzq[i].x) || !isfinite(xyzq[i].y) || !isfinite(xyzq[i].z))
            return md_set_error(MD_ERR_RANGE, fn, 0, "xyzq", "frame %d: atom %d: coordinate is not finite", w->nframes, i);
    if (!w->desc.no_cell)
        for (k = 0; k < 3; k++)
            if (!box || !(box[k] >= 0.0) || !isfinite(box[k]))
                return md_set_error(MD_ERR_RANGE, fn, 0, "box", "frame %d: edge %d is not finite and >= 0", w->nframes, k);
    be = w->desc.big_endian != 0;
    ok = md__dcd_put_frame(w->file, w->buf, xyzq, box, w->natoms, &w->desc);
    /* the frame counts ICNTRL[0] and ICNTRL[3] (bytes 8 and 20), then back to the end */
    md__dcd_put32(c, (uint32_t)(w->nframes + 1), be);
    ok = ok && fseek(w->file, 8, SEEK_SET) == 0 && fwrite(c, 1, 4, w->file) == 4 && fseek(w->file, 20, SEEK_SET) == 0 &&
         fwrite(c, 1, 4, w->file) == 4 && fseek(w->file, 0, SEEK_END) == 0 && fflush(w->file) == 0;
    if (!ok) return md_set_error(MD_ERR_IO, fn, 0, "file", "write failed at frame %d: %s", w->nframes, strerror(errno));
    w->nframes++;
    return MD_OK;
}

MDDEF md_status md_dcd_writer_close(md_dcd_writer *w) {
    int bad = 0;
    if (!w) return MD_OK;
    if (w->file) bad = fclose(w->file) != 0;
    md_free(w->buf);
    memset(w, 0, sizeof *w);
    return bad ? md_set_error(MD_ERR_IO, "md_dcd_writer_close", 0, "file", "close failed: %s", strerror(errno)) : MD_OK;
}

/* ---- co ---- */

/* Which context switch (see the section's manual). */
#if defined(MD_CO_UCONTEXT)
#define MD__CO_UCONTEXT 1
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(_WIN32)
#define MD__CO_ASM_X86_64 1
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__) && !defined(_WIN32)
#define MD__CO_ASM_AARCH64 1
#elif defined(__unix__)
#define MD__CO_UCONTEXT 1
#endif
#if defined(MD__CO_ASM_X86_64) || defined(MD__CO_ASM_AARCH64)
#define MD__CO_ASM 1
#endif
#ifdef MD__CO_UCONTEXT
#include <ucontext.h>
#endif

/* AddressSanitizer's fiber interface (declared here so that no sanitizer header is needed). */
#if defined(__SANITIZE_ADDRESS__)
#define MD__CO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MD__CO_ASAN 1
#endif
#endif
#ifdef MD__CO_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#define MD__CO_NO_ASAN __attribute__((no_sanitize_address))
#else
#define MD__CO_NO_ASAN
#endif

/* Saved by the assembly: offsets 0, 8 and 16 are used there. */
typedef struct md__co_regs {
    void *sp;          /* stack pointer */
    void *fp;          /* frame pointer (rbp, x29) */
    void (*pc)(void);  /* where to continue */
} md__co_regs;

/* The switch state, at the top of a coroutine's block, above its stack. */
typedef struct md__co_impl {
    md__co_regs self, caller;  /* asm: the coroutine's context while it is suspended, the resumer's while it runs */
#ifdef MD__CO_UCONTEXT
    ucontext_t uself, ucaller; /* ucontext: the same */
#endif
    md_co *prev;               /* the coroutine that was current when this one was resumed (NULL: none) */
    void *asan_self_fake;      /* ASan: this coroutine's fake stack while it is suspended */
    void *asan_caller_fake;    /* ASan: the resumer's fake stack while this one runs */
    const void *asan_caller_bottom; /* ASan: the resumer's stack, to switch back to */
    size_t asan_caller_size;
} md__co_impl;

#define MD__CO_PAINT 0xCD
static MD__THREAD_LOCAL md_co *md__co_cur; /* the running coroutine of this thread */

#if defined(MD__CO_ASM_X86_64)
/* Save rsp, rbp and the address of label 1 in *from, load *to's and jump. Every other register
 * is clobbered, so the compiler saves the ones the ABI makes callee-saved in this function's
 * prologue and restores them in its epilogue, which runs when the other side switches back. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
__attribute__((noinline, noipa))
#else
__attribute__((noinline))
#endif
static void md__co_switch(md__co_regs *from, md__co_regs *to) {
    __asm__ __volatile__("leaq 1f(%%rip), %%rax\n\t"
                         "movq %%rsp, 0(%0)\n\t"
                         "movq %%rbp, 8(%0)\n\t"
                         "movq %%rax, 16(%0)\n\t"
                         "movq 16(%1), %%rax\n\t"
                         "movq 0(%1), %%rsp\n\t"
                         "movq 8(%1), %%rbp\n\t"
                         "jmpq *%%rax\n\t"
                         "1:\n\t"
                         ".byte 0xf3, 0x0f, 0x1e, 0xfa\n\t" /* endbr64: a NOP unless IBT is enforced */
                         : "+D"(from), "+S"(to)
                         :
                         : "rax", "rbx", "rcx", "rdx", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "xmm0",
                           "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
                           "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}
#elif defined(MD__CO_ASM_AARCH64)
/* The same on AArch64: sp, x29 and the resume address; x17 carries the jump (BTI "bti c" at a
 * function's entry accepts br x16/x17), and the resume point is a "bti j" landing pad. x29 is
 * loaded last, as %1 may live in it when the frame pointer is omitted; x18 (the platform
 * register) is left alone. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
__attribute__((noinline, noipa))
#else
__attribute__((noinline))
#endif
static void md__co_switch(md__co_regs *from, md__co_regs *to) {
    __asm__ __volatile__("mov x16, sp\n\t"
                         "adr x17, 1f\n\t"
                         "str x16, [%0, #0]\n\t"
                         "str x29, [%0, #8]\n\t"
                         "str x17, [%0, #16]\n\t"
                         "ldr x16, [%1, #0]\n\t"
                         "ldr x17, [%1, #16]\n\t"
                         "ldr x29, [%1, #8]\n\t"
                         "mov sp, x16\n\t"
                         "br x17\n\t"
                         "1:\n\t"
                         "hint #36\n\t" /* bti j: a NOP unless BTI is enforced */
                         : "+r"(from), "+r"(to)
                         :
                         : "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15",
                           "x16", "x17", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", "x30",
                           "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13",
                           "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26",
                           "v27", "v28", "v29", "v30", "v31", "memory", "cc");
}
#endif

#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
static unsigned char md__co_canary_byte(size_t i) { return (unsigned char)(0x5Au ^ (i * 37u)); }

/* The switch state of co: right above its stack. */
static md__co_impl *md__co_state(const md_co *co) {
    return (md__co_impl *)(void *)((unsigned char *)co->stack + co->stack_size);
}

/* Switch into co (from its resumer) and come back when it yields or finishes. */
static void md__co_jump_in(md_co *co, md__co_impl *im) {
#ifdef MD__CO_ASAN
    __sanitizer_start_switch_fiber(&im->asan_caller_fake, co->stack, co->stack_size);
#else
    (void)co;
#endif
#ifdef MD__CO_ASM
    md__co_switch(&im->caller, &im->self);
#else
    swapcontext(&im->ucaller, &im->uself);
#endif
#ifdef MD__CO_ASAN
    __sanitizer_finish_switch_fiber(im->asan_caller_fake, NULL, NULL);
#endif
}

/* Switch from co back to its resumer; returns when co is resumed again (never when finished). */
static void md__co_jump_out(md__co_impl *im, int finished) {
#ifdef MD__CO_ASAN
    __sanitizer_start_switch_fiber(finished ? NULL : &im->asan_self_fake, im->asan_caller_bottom, im->asan_caller_size);
#else
    (void)finished;
#endif
#ifdef MD__CO_ASM
    md__co_switch(&im->self, &im->caller);
#else
    swapcontext(&im->uself, &im->ucaller);
#endif
#ifdef MD__CO_ASAN
    __sanitizer_finish_switch_fiber(im->asan_self_fake, &im->asan_caller_bottom, &im->asan_caller_size);
#endif
}

/* Where a new coroutine starts: md_co_resume made it current before switching. */
static void md__co_entry(void) {
    md_co *co = md__co_cur;
    md__co_impl *im = md__co_state(co);
#ifdef MD__CO_ASAN
    __sanitizer_finish_switch_fiber(NULL, &im->asan_caller_bottom, &im->asan_caller_size);
#endif
    co->fn(co, co->arg);
    co->state = MD_CO_DEAD;
    md__co_jump_out(im, 1); /* never returns: a finished coroutine is not resumed */
}

/* Reads of the stack from outside the coroutine: a suspended one's frames hold ASan redzones. */
MD__CO_NO_ASAN static int md__co_canary_ok(const md_co *co) {
    const unsigned char *b = (const unsigned char *)co->stack;
    size_t i;
    for (i = 0; i < MD_CO_CANARY; i++)
        if (b[i] != md__co_canary_byte(i)) return 0;
    return 1;
}

MD__CO_NO_ASAN static size_t md__co_untouched(const md_co *co) {
    const unsigned char *b = (const unsigned char *)co->stack;
    size_t i = MD_CO_CANARY;
    while (i < co->stack_size && b[i] == MD__CO_PAINT) i++;
    return i - MD_CO_CANARY;
}
#endif

#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
/* Make im->self start md__co_entry on the stack [stack, stack + size). 0 on failure. */
static int md__co_init_context(md__co_impl *im, unsigned char *stack, size_t size) {
#if defined(MD__CO_ASM_X86_64)
    /* as if md__co_entry had been called: rsp = 8 mod 16 with a zero return address on top */
    unsigned char *top = stack + size - 16;
    memset(top, 0, 16);
    im->self.sp = top + 8;
    im->self.fp = NULL;
    im->self.pc = md__co_entry;
    return 1;
#elif defined(MD__CO_ASM_AARCH64)
    unsigned char *top = stack + size - 16; /* sp stays 16-byte aligned */
    memset(top, 0, 16);
    im->self.sp = top;
    im->self.fp = NULL;
    im->self.pc = md__co_entry;
    return 1;
#else
    ucontext_t *u = &im->uself;
    if (getcontext(u) != 0) return 0;
    u->uc_stack.ss_sp = stack;
    u->uc_stack.ss_size = size;
    u->uc_link = NULL;
    makecontext(u, md__co_entry, 0);
    return 1;
#endif
}
#endif

MDDEF const char *md_co_backend(void) {
#if defined(MD__CO_ASM_X86_64)
    return "asm-x86_64";
#elif defined(MD__CO_ASM_AARCH64)
    return "asm-aarch64";
#elif defined(MD__CO_UCONTEXT)
    return "ucontext";
#else
    return "none";
#endif
}

MDDEF md_status md_co_create(md_co *co, md_co_fn fn, void *arg, size_t stack_size) {
    const char *where = "md_co_create";
#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
    size_t head = (sizeof(md__co_impl) + 63) & ~(size_t)63, i;
    unsigned char *block;
    md__co_impl *im;
    if (!co) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "co", "is NULL");
    if (!fn) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "fn", "is NULL");
    if (stack_size == 0) stack_size = MD_CO_STACK_DEFAULT;
    if (stack_size < MD_CO_STACK_MIN)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "stack_size", "%zu bytes is below MD_CO_STACK_MIN (%u)",
                            stack_size, (unsigned)MD_CO_STACK_MIN);
    stack_size &= ~(size_t)63; /* the top of the stack and the state above it stay 64-byte aligned */
    if (stack_size > SIZE_MAX - head - 64)
        return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, "stack_size", "%zu bytes overflows size_t", stack_size);
    block = (unsigned char *)MD_MALLOC(stack_size + head + 64);
    if (!block) return md_set_error(MD_ERR_OUT_OF_MEMORY, where, 0, "stack_size", "cannot allocate %zu bytes", stack_size + head + 64);
    /* [pad][canary | stack, growing down ...][state]: the stack starts 64-byte aligned */
    {
        unsigned char *stack = block + ((64 - ((uintptr_t)block & 63)) & 63);
        for (i = 0; i < MD_CO_CANARY; i++) stack[i] = md__co_canary_byte(i);
        memset(stack + MD_CO_CANARY, MD__CO_PAINT, stack_size - MD_CO_CANARY);
        im = (md__co_impl *)(void *)(stack + stack_size);
        memset(im, 0, sizeof *im);
        co->stack = stack;
    }
    if (!md__co_init_context(im, (unsigned char *)co->stack, stack_size)) {
        MD_FREE(block);
        return md_set_error(MD_ERR_UNSUPPORTED, where, 0, NULL, "getcontext failed");
    }
    co->fn = fn;
    co->arg = arg;
    co->state = MD_CO_SUSPENDED;
    co->stack_size = stack_size;
    co->resumes = 0;
    co->impl = block; /* freed by md_co_free; the switch state is found right above the stack */
    return MD_OK;
#else
    (void)fn;
    (void)arg;
    (void)stack_size;
    if (!co) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "co", "is NULL");
    return md_set_error(MD_ERR_UNSUPPORTED, where, 0, NULL, "this build has no context switch (md_co_backend() is \"none\")");
#endif
}

MDDEF md_status md_co_resume(md_co *co) {
    const char *where = "md_co_resume";
#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
    md__co_impl *im;
    md_co *prev;
    if (!co || !co->impl) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "co", "is not a coroutine (never created, or freed)");
    if (co->state == MD_CO_DEAD) return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "co", "has finished");
    if (co->state != MD_CO_SUSPENDED)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, where, 0, "co",
                            "is %s: a coroutine cannot resume itself or one that resumed it",
                            co->state == MD_CO_RUNNING ? "running" : "waiting on a coroutine it resumed");
    im = md__co_state(co);
    prev = md__co_cur;
    if (prev) prev->state = MD_CO_NORMAL;
    im->prev = prev;
    co->state = MD_CO_RUNNING;
    co->resumes++;
    md__co_cur = co;
    md__co_jump_in(co, im);
    md__co_cur = prev;
    if (prev) prev->state = MD_CO_RUNNING;
    if (co->state == MD_CO_RUNNING) co->state = MD_CO_SUSPENDED;
    if (!md__co_canary_ok(co)) {
        co->state = MD_CO_DEAD;
        return md_set_error(MD_ERR_RANGE, where, 0, "co",
                            "stack overflow: the coroutine wrote over the canary at the bottom of its %zu-byte stack "
                            "(memory below it may be damaged; give it a larger stack)",
                            co->stack_size);
    }
    return MD_OK;
#else
    (void)co;
    return md_set_error(MD_ERR_UNSUPPORTED, where, 0, NULL, "this build has no context switch (md_co_backend() is \"none\")");
#endif
}

MDDEF md_status md_co_yield(md_co *co) {
#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
    if (!co || !co->impl || co != md__co_cur || co->state != MD_CO_RUNNING)
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_co_yield", 0, "co", "is not the coroutine running on this thread");
    md__co_jump_out(md__co_state(co), 0);
    return MD_OK;
#else
    (void)co;
    return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_co_yield", 0, "co", "is not the coroutine running on this thread");
#endif
}

MDDEF md_co_state md_co_status(const md_co *co) { return (co && co->impl) ? co->state : MD_CO_DEAD; }

MDDEF md_co *md_co_current(void) { return md__co_cur; }

MDDEF size_t md_co_stack_used(const md_co *co) {
#if defined(MD__CO_ASM) || defined(MD__CO_UCONTEXT)
    if (co && co->impl) return co->stack_size - MD_CO_CANARY - md__co_untouched(co);
#else
    (void)co;
#endif
    return 0;
}

MDDEF void md_co_free(md_co *co) {
    if (!co || !co->impl) return;
    if (co->state == MD_CO_RUNNING || co->state == MD_CO_NORMAL) return;
    MD_FREE(co->impl);
    memset(co, 0, sizeof *co);
}

/* ---- remd ---- */

MDDEF double md_remd_probability(double t_i, double t_j, double u_i, double u_j) {
    double delta;
    if (!isfinite(t_i) || !isfinite(t_j) || !isfinite(u_i) || !isfinite(u_j) || !(t_i > 0.0) || !(t_j > 0.0)) return NAN;
    delta = (1.0 / (MD_KB * t_i) - 1.0 / (MD_KB * t_j)) * (u_i - u_j);
    return delta >= 0.0 ? 1.0 : exp(delta);
}

MDDEF md_status md_remd_ladder(double *t, int n, double t_min, double t_max) {
    int k;
    if (!t) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_ladder", 0, "t", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_ladder", 0, "n", "must be >= 1 (got %d)", n);
    if (!isfinite(t_min) || !(t_min > 0.0))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_ladder", 0, "t_min", "must be finite and > 0 (got %g)", t_min);
    if (!isfinite(t_max) || !(t_max >= t_min))
        return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_ladder", 0, "t_max", "must be finite and >= t_min (got %g)", t_max);
    for (k = 0; k < n; k++) t[k] = n == 1 ? t_min : t_min * pow(t_max / t_min, (double)k / (double)(n - 1));
    if (n > 1) t[n - 1] = t_max; /* exactly, whatever pow rounds to */
    return MD_OK;
}

MDDEF void md_remd_free(md_remd *x) {
    if (!x) return;
    md_free(x->temperature);
    md_free(x->replica_at);
    md_free(x->slot_of);
    md_free(x->attempts);
    md_free(x->accepts);
    md_free(x->direction);
    md_free(x->round_trips);
    memset(x, 0, sizeof *x);
}

MDDEF md_status md_remd_create(md_remd *x, int n, const double *temperature, uint64_t seed) {
    md_remd r;
    int k;
    if (!x) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_create", 0, "x", "is NULL");
    if (!temperature) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_create", 0, "temperature", "is NULL");
    if (n < 1) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_create", 0, "n", "must be >= 1 (got %d)", n);
    for (k = 0; k < n; k++) {
        char field[40];
        snprintf(field, sizeof field, "temperature[%d]", k);
        if (!isfinite(temperature[k]) || !(temperature[k] > 0.0))
            return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_create", 0, field, "must be finite and > 0 (got %g)", temperature[k]);
        if (k > 0 && !(temperature[k] > temperature[k - 1]))
            return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_create", 0, field,
                                "must be above temperature[%d] (%g K; got %g K): the ladder ascends", k - 1,
                                temperature[k - 1], temperature[k]);
    }
    memset(&r, 0, sizeof r);
    r.n = n;
    r.temperature = (double *)md_alloc_array((size_t)n, sizeof(double));
    r.replica_at = (int *)md_alloc_array((size_t)n, sizeof(int));
    r.slot_of = (int *)md_alloc_array((size_t)n, sizeof(int));
    r.attempts = (long long *)md_alloc_array((size_t)n, sizeof(long long));
    r.accepts = (long long *)md_alloc_array((size_t)n, sizeof(long long));
    r.direction = (int *)md_alloc_array((size_t)n, sizeof(int));
    r.round_trips = (long long *)md_alloc_array((size_t)n, sizeof(long long));
    if (!r.temperature || !r.replica_at || !r.slot_of || !r.attempts || !r.accepts || !r.direction || !r.round_trips) {
        md_remd_free(&r);
        return MD_ERR_OUT_OF_MEMORY;
    }
    for (k = 0; k < n; k++) {
        r.temperature[k] = temperature[k];
        r.replica_at[k] = r.slot_of[k] = k;
        r.attempts[k] = r.accepts[k] = r.round_trips[k] = 0;
        r.direction[k] = 0;
    }
    if (n > 1) {
        r.direction[0] = 1;
        r.direction[n - 1] = -2;
    }
    md_rng_seed(&r.rng, seed);
    *x = r;
    return MD_OK;
}

MDDEF md_status md_remd_exchange(md_remd *x, const double *energy, int *accepted, double *scale) {
    int k, r;
    if (!x || !x->temperature) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_exchange", 0, "x", "is not a replica ladder");
    if (!energy) return md_set_error(MD_ERR_INVALID_ARGUMENT, "md_remd_exchange", 0, "energy", "is NULL");
    for (r = 0; r < x->n; r++)
        if (!isfinite(energy[r])) {
            char field[32];
            snprintf(field, sizeof field, "energy[%d]", r);
            return md_set_error(MD_ERR_RANGE, "md_remd_exchange", 0, field, "replica %d's potential energy is not finite (%g)", r,
                                energy[r]);
        }
    if (accepted)
        for (k = 0; k + 1 < x->n; k++) accepted[k] = -1;
    if (scale)
        for (r = 0; r < x->n; r++) scale[r] = 1.0;
    for (k = (int)(x->rounds % 2); k + 1 < x->n; k += 2) {
        int i = x->replica_at[k], j = x->replica_at[k + 1];
        double u = md_rng_uniform(&x->rng);
        int yes = u < md_remd_probability(x->temperature[k], x->temperature[k + 1], energy[i], energy[j]);
        x->attempts[k]++;
        if (accepted) accepted[k] = yes;
        if (!yes) continue;
        x->accepts[k]++;
        x->replica_at[k] = j;
        x->replica_at[k + 1] = i;
        x->slot_of[i] = k + 1;
        x->slot_of[j] = k;
        if (scale) {
            /* a replica swapped twice in one round is impossible: the pairs of a round are disjoint */
            scale[i] = sqrt(x->temperature[k + 1] / x->temperature[k]);
            scale[j] = sqrt(x->temperature[k] / x->temperature[k + 1]);
        }
    }
    /* round trips: direction +1 after the bottom slot, -1 after the top one reached from the
       bottom (a trip under way), -2 after the top one not reached from the bottom */
    if (x->n > 1)
        for (r = 0; r < x->n; r++) {
            if (x->slot_of[r] == 0) {
                if (x->direction[r] == -1) x->round_trips[r]++;
                x->direction[r] = 1;
            } else if (x->slot_of[r] == x->n - 1) {
                if (x->direction[r] == 1) x->direction[r] = -1;
                else if (x->direction[r] == 0) x->direction[r] = -2;
            }
        }
    x->rounds++;
    return MD_OK;
}

MDDEF double md_remd_acceptance(const md_remd *x, int k) {
    if (!x || !x->attempts || k < 0 || k + 1 >= x->n || x->attempts[k] == 0) return NAN;
    return (double)x->accepts[k] / (double)x->attempts[k];
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
