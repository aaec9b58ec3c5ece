"""Cross-check md.h's nonbonded energies and forces against OpenMM's Reference platform (CPU,
double precision). Prints one SKIP line and exits 0 when `import openmm` fails.

Runs build/reference/dump_nb (see its header) and rebuilds each of its systems in OpenMM
with the same coordinates (md.h's float32 values), box, charges, LJ table and exclusions:
  mix    630 atoms of chains with exclusions, scaled 1-4 pairs and an NBFIX pair
  tip3p  330 TIP3P waters from md_build_water_box;  spce  330 SPC/E waters
  argon  864 argon atoms from md_build_lj_fluid (a jiggled lattice)
and compares md.h's MD_NB_CPU_ALL_PAIRS (double) for these cases:
  truncate_ewald_beta  plain LJ, Ewald real space with beta 3.0 nm^-1, dispersion correction
  truncate_rf          plain LJ, reaction field with eps_rf 78.3, dispersion correction
  shift_ewald          potential-shifted LJ, Ewald real space (beta from tolerance 5e-4)
  switch_rf            force-switched LJ (0.75 to 0.9 nm), reaction field 78.3
How OpenMM is set up, so the same quantity is compared:
  Coulomb  NonbondedForce: PME with alpha = md.h's beta and the reciprocal part in force
           group 1, so group 0 holds the real-space sum, the exclusion correction
           -qq erf(beta r)/r and the 1-4 exceptions (OpenMM puts the self energy with the
           reciprocal part, so it is not compared here: check_nb.py checks it against numpy);
           or CutoffPeriodic, which is OpenMM's reaction field with the same k_rf and c_rf.
           Charges are scaled by sqrt(138.935458 / OpenMM's 1/(4 pi eps0)) so both use md.h's
           Coulomb constant (they differ by 2.5e-9 relative).
  LJ       plain LJ with the dispersion correction: NonbondedForce sigma/epsilon (water and
           argon; OpenMM's correction averages over N(N+1)/2 pairs as md.h's does). The
           potential shift, the force switch, and every LJ of the mix system (its NBFIX pair
           has no NonbondedForce form): a CustomNonbondedForce over type-pair tables
           (Discrete2DFunction of md.h's sigma/epsilon combined by numpy), with the same
           exclusions, no long-range correction; md.h's lj_dispersion is then left out. The
           mix system's scaled 1-4 LJ is a CustomBondForce.
Agreement required: every energy within 1e-11 relative (measured: below 1.3e-13; both sides are
double precision on identical inputs, summed in different orders) and every force component
within 1e-11 of the largest force (measured: below 2.2e-15). Prints PASS/FAIL/SKIP lines; exits non-zero on a failure."""
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERMS = ["lj", "lj_dispersion", "lj14", "coul_real", "coul14", "coul_excl", "coul_self"]
CASES = ["truncate_ewald_beta", "truncate_rf", "shift_ewald", "switch_rf"]
failed = 0


def report(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
    failed += 0 if ok else 1


def force_switch_abc(alpha, r1, rc):
    """GROMACS's closed form of the force-switch constants of an r^-alpha term."""
    A = -alpha * ((alpha + 4) * rc - (alpha + 1) * r1) / (rc ** (alpha + 2) * (rc - r1) ** 2)
    B = alpha * ((alpha + 3) * rc - (alpha + 1) * r1) / (rc ** (alpha + 2) * (rc - r1) ** 3)
    C = rc ** (-alpha) - A / 3 * (rc - r1) ** 3 - B / 4 * (rc - r1) ** 4
    return A, B, C


def openmm_energy_forces(mm, unit, sysd, case):
    """OpenMM's energy and forces of the compared terms; returns (energy, forces, uses_disp)."""
    n, box, xyzq, types = sysd["n"], sysd["box"], sysd["xyzq"], sysd["types"]
    sigma, eps, excl, p14 = sysd["sigma"], sysd["eps"], sysd["excl"], sysd["p14"]
    c6, c12 = sysd["c6"], sysd["c12"]
    p = case["p"]
    one_4pi_eps0 = 1.0 / (4 * math.pi * (1e-6 * 8.8541878128e-12 / (1.602176634e-19 ** 2 * 6.02214076e23)))
    qscale = math.sqrt(nb.COULOMB / one_4pi_eps0)
    system = mm.System()
    for _ in range(n):
        system.addParticle(1.0)
    system.setDefaultPeriodicBoxVectors(mm.Vec3(box[0], 0, 0), mm.Vec3(0, box[1], 0), mm.Vec3(0, 0, box[2]))
    native_lj = p["lj"] == "truncate" and sysd["name"] != "mix"
    nbf = mm.NonbondedForce()
    if p["coul"] == "ewald":
        nbf.setNonbondedMethod(mm.NonbondedForce.PME)
        nbf.setPMEParameters(p["beta"], 32, 32, 32)
        nbf.setReciprocalSpaceForceGroup(1)
    else:
        nbf.setNonbondedMethod(mm.NonbondedForce.CutoffPeriodic)
        nbf.setReactionFieldDielectric(p["eps_rf"])
    nbf.setCutoffDistance(p["cutoff"])
    nbf.setUseSwitchingFunction(False)
    nbf.setUseDispersionCorrection(native_lj and p["disp"])
    nbf.setExceptionsUsePeriodicBoundaryConditions(True)
    for i in range(n):
        if native_lj:
            nbf.addParticle(xyzq[i, 3] * qscale, sigma[types[i]], eps[types[i]])
        else:
            nbf.addParticle(xyzq[i, 3] * qscale, 1.0, 0.0)
    p14set = set(p14)
    for i, j in sorted(excl):
        qq = 0.0
        if (i, j) in p14set:
            qq = (1 / 1.2) * xyzq[i, 3] * xyzq[j, 3] * qscale * qscale
        nbf.addException(i, j, qq, 1.0, 0.0)
    nbf.setForceGroup(0)
    system.addForce(nbf)
    if not native_lj:
        rc = p["cutoff"]
        nt = len(sigma)
        if p["lj"] == "truncate":
            expr = "c12/r^12 - c6/r^6"
        elif p["lj"] == "shift":
            expr = "c12*(r^-12 - rc^-12) - c6*(r^-6 - rc^-6)"
        else:
            expr = ("c12*(r^-12 - s*(a12/3*u^3 + b12/4*u^4) - cc12) - c6*(r^-6 - s*(a6/3*u^3 + b6/4*u^4) - cc6);"
                    "s = step(r - rsw); u = r - rsw")
        expr += "; c12 = t12(type1, type2); c6 = t6(type1, type2)"
        cf = mm.CustomNonbondedForce(expr)
        cf.addTabulatedFunction("t6", mm.Discrete2DFunction(nt, nt, list(c6.T.ravel())))
        cf.addTabulatedFunction("t12", mm.Discrete2DFunction(nt, nt, list(c12.T.ravel())))
        cf.addGlobalParameter("rc", rc)
        if p["lj"] == "switch":
            a6, b6, cc6 = force_switch_abc(6, p["rsw"], rc)
            a12, b12, cc12 = force_switch_abc(12, p["rsw"], rc)
            for k, v in (("rsw", p["rsw"]), ("a6", a6), ("b6", b6), ("cc6", cc6), ("a12", a12), ("b12", b12),
                         ("cc12", cc12)):
                cf.addGlobalParameter(k, v)
        cf.addPerParticleParameter("type")
        for i in range(n):
            cf.addParticle([float(types[i])])
        for i, j in sorted(excl):
            cf.addExclusion(i, j)
        cf.setNonbondedMethod(mm.CustomNonbondedForce.CutoffPeriodic)
        cf.setCutoffDistance(rc)
        cf.setUseLongRangeCorrection(False)
        cf.setForceGroup(2)
        system.addForce(cf)
        if p14:
            bf = mm.CustomBondForce("a12/r^12 - a6/r^6")
            bf.addPerBondParameter("a6")
            bf.addPerBondParameter("a12")
            bf.setUsesPeriodicBoundaryConditions(True)
            for i, j in p14:
                bf.addBond(i, j, [0.5 * c6[types[i], types[j]], 0.5 * c12[types[i], types[j]]])
            bf.setForceGroup(3)
            system.addForce(bf)
    ctx = mm.Context(system, mm.VerletIntegrator(0.001), mm.Platform.getPlatformByName("Reference"))
    ctx.setPositions([mm.Vec3(*xyzq[i, :3]) for i in range(n)])
    st = ctx.getState(getEnergy=True, getForces=True, groups={0, 2, 3})
    e = st.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
    f = np.array(st.getForces(asNumpy=True).value_in_unit(unit.kilojoule_per_mole / unit.nanometer))
    return e, f, native_lj and p["disp"]


def load_system(d, e, name, n, ntypes, nbond, box):
    load = lambda suffix, t: np.fromfile(os.path.join(d, "%s_%s" % (name, suffix)), dtype=e + t)  # noqa: E731
    s = {"name": name, "n": n, "box": box}
    s["xyzq"] = load("xyzq.f32", "f4").reshape(n, 4).astype(np.float64)
    s["types"] = load("type.i32", "i4")
    s["sigma"], s["eps"] = load("sigma.f64", "f8"), load("eps.f64", "f8")
    start, ex = load("excl_start.i32", "i4"), load("excl.i32", "i4")
    s["excl"] = {(i, int(j)) for i in range(n) for j in ex[start[i]:start[i + 1]] if j > i}
    s["p14"] = [tuple(int(x) for x in q) for q in load("pair14.i32", "i4").reshape(-1, 2)]
    s["cases"] = {}
    for line in open(os.path.join(d, "%s_cases.txt" % name)):
        f = line.split()
        s["cases"][f[0]] = {"p": {"lj": {1: "shift", 2: "truncate", 3: "switch", 4: "none"}[int(f[1])],
                                  "coul": {1: "ewald", 2: "cutoff", 3: "rf", 4: "none"}[int(f[2])],
                                  "cutoff": float(f[3]), "rsw": float(f[5]), "eps_rf": float(f[6]),
                                  "beta": float(f[7]), "disp": int(f[8]) == 1},
                            "rule": f[9]}
    return s


def main():
    try:
        import openmm as mm
        from openmm import unit
    except ImportError as err:
        print("SKIP check_openmm: openmm is not installed (%s); tests/setup.sh installs it" % err)
        return 0
    with tempfile.TemporaryDirectory() as d:
        e, meta = nb.run_dump(ROOT, d)
        systems = [load_system(d, e, f[1], int(f[2]), int(f[3]), int(f[4]), np.array([float(x) for x in f[5:8]]))
                   for f in meta if f[0] == "system"]
        for s in systems:
            for cname in CASES:
                case = s["cases"][cname]
                c6, c12 = nb.lj_table(s["sigma"], s["eps"], case["rule"],
                                      [(0, 2, 0.29, 0.5)] if s["name"] == "mix" else [])
                s["c6"], s["c12"] = c6, c12
                buf = np.fromfile(os.path.join(d, "%s_%s_all_pairs.f64" % (s["name"], cname)), dtype=e + "f8")
                terms = dict(zip(TERMS, buf[:7]))
                force = buf[16:].reshape(s["n"], 3)
                e_mm, f_mm, with_disp = openmm_energy_forces(mm, unit, s, case)
                e_md = terms["lj"] + terms["lj14"] + terms["coul_real"] + terms["coul14"] + terms["coul_excl"]
                if with_disp:
                    e_md += terms["lj_dispersion"]
                scale = max(abs(e_md), 1.0)
                fmax = max(np.abs(force).max(), 1e-30)
                de = abs(e_md - e_mm) / scale
                df = np.abs(force - f_mm).max() / fmax
                what = "energy%s and forces" % (" (with dispersion correction)" if with_disp else "")
                report("openmm %s %s: %s agree (energy %.3g relative, forces %.3g of the largest)" %
                       (s["name"], cname, what, de, df), de <= 1e-11 and df <= 1e-11,
                       "md.h %.12g, OpenMM %.12g kJ/mol" % (e_md, e_mm))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
