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
 *   Readers convert at the boundary (PDB and PQR Angstrom -> nm).
 *
 * ERRORS
 *   Every function that can fail returns md_status (MD_OK is 0). On failure
 *   md_last_error() returns a message (per thread) that names the file, line
 *   and field at fault, e.g. "box.pqr:12: field x: not a number ('1.2.3')",
 *   and the caller's outputs are left untouched. The library never prints,
 *   never calls exit() or abort().
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
 *            velocities, orthorhombic box), builders
 *   grid     md_grid (dimensions, origin, spacing, float data)
 *   io       readers (PQR, PDB, XYZ) and writers (XYZ, PDB, OpenDX)
 *   dcs      direct Coulomb sum potential maps: the CPU ladder
 *   rdf      radial distribution functions
 *   bench    benchmark result records and their JSON lines
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
 *  NaN-poisoned element fails every tolerance); an all-zero @p ref gives the absolute error. */
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

/** @brief A short NUL-terminated name (atom name, element, residue name). */
typedef struct md_name {
    char s[8]; /**< up to 7 characters and a NUL */
} md_name;

/** @brief A system of atoms in an orthorhombic box.
 *
 *  Every array has md_system::n entries and is owned by the system (md_system_free
 *  releases it). A box of all zeros means "no box" (open boundaries). */
typedef struct md_system {
    int n;             /**< number of atoms */
    md_float4 *xyzq;   /**< positions (nm) and charges (e), packed for coalesced GPU loads */
    md_float3 *vel;    /**< velocities (nm/ps) */
    float *mass;       /**< masses (amu) */
    float *radius;     /**< radii (nm): PQR radius, else 0 */
    int *type;         /**< atom type index (0-based), e.g. into a Lennard-Jones table */
    md_name *name;     /**< atom name (PDB, PQR) or element symbol (XYZ) */
    md_name *resname;  /**< residue name (PDB, PQR), else empty */
    int *resid;        /**< residue number (PDB, PQR), else 0 */
    double box[3];     /**< orthorhombic box edge lengths (nm); all zero: no box */
} md_system;

/** @brief Allocate every array of @p sys for @p n atoms, zero-filled, box zero.
 *
 *  On failure @p sys is left untouched. n must be at least 1. */
MDDEF md_status md_system_alloc(md_system *sys, int n);

/** @brief Release every array of @p sys and zero it. Safe on a zeroed system. */
MDDEF void md_system_free(md_system *sys);

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
 *  the requested temperature. Charges 0, type 0, name "Ar". */
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

/* @@io-declarations@@ */

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
    MD_DCS_GPU_L1,         /**< GPU: the unroll-8 kernel reading atoms through L1 from global memory */
    MD_DCS_GPU_SHARED,     /**< GPU: the unroll-8 kernel with atom tiles staged in shared memory */
    MD_DCS_GPU_HYBRID,     /**< GPU: unroll-8 with part of the rsqrts in software on the FMA pipe */
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

/* @@rdf-declarations@@ */

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
    for (i = 0; i < n; i++)
        if (fabs((double)ref[i]) > scale) scale = fabs((double)ref[i]);
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
    if (!s.xyzq || !s.vel || !s.mass || !s.radius || !s.type || !s.name || !s.resname || !s.resid) {
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
    memset(sys, 0, sizeof *sys);
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

/* @@io-implementation@@ */

/* ---- dcs ---- */

static const char *const md__dcs_names[MD_DCS_VARIANT_COUNT + 1] = {
    "cpu_simple", "cpu_scatter", "cpu_rows", "cpu_rows_omp",
    "gpu_scatter", "gpu_gather", "gpu_const", "gpu_unroll4", "gpu_unroll8", "gpu_l1", "gpu_shared",
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
 * row, so the inner loop is one subtraction, one FMA, a sqrt and a divide. */
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

/* @@rdf-implementation@@ */

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
