"""Compare md.h's Ewald real space + PME with OpenMM's Reference platform (double precision) on the
same water boxes, with the same alpha, grid and spline order (5, OpenMM's only order).

Runs build/reference/dump_ewald, which writes water.pdb (216 TIP3P molecules), salt.pdb (290 TIP3P
molecules and 5 Na+ Cl- pairs) and charged.pdb (salt.pdb with one Cl- made Na+: net charge +2 e)
and md.h's answers on the positions read back from those files (so both codes see the same
coordinates; md.h rounds them to float). OpenMM reads the PDB, builds the system with tip3p.xml
(water) or amber14/tip3p.xml (water and ions), PME with cutoff 0.9 nm, then: LJ switched off
(every epsilon 0, no dispersion correction), setPMEParameters(md.h's alpha and grid), the
reciprocal part in its own force group.

What is compared (OpenMM's split of the terms, found by this check and stated here):
  direct  OpenMM's NonbondedForce without the reciprocal group = md.h coul_real + coul_excl
          (real space erfc(alpha r)/r within the cutoff, and -erf(alpha r)/r for the O-H and H-H
          exclusions OpenMM makes from the water bonds)
  recip   OpenMM's reciprocal group = md.h coul_recip + coul_self (OpenMM puts the self energy,
          and for a charged system the neutralising background, with the reciprocal part)
  forces  the sum of both groups against md.h's total Coulomb forces
Tolerances: energies 1e-6 relative (md.h holds the coordinates in float: 1e-7 nm in a 2 nm box
moves the energies by ~1e-7 relative), forces 1e-5 of the largest force (the same rounding).
Prints SKIP when `import openmm` fails, PASS/FAIL lines otherwise; exits non-zero on a failure."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ewald  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
report = ewald.Report()
meta = ewald.read_meta


def openmm_coulomb(mm, app, u, pdb_path, ffname, alpha, grid):
    pdb = app.PDBFile(pdb_path)
    ff = app.ForceField(ffname)
    system = ff.createSystem(pdb.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * u.nanometer,
                             rigidWater=True)
    nb = [f for f in system.getForces() if isinstance(f, mm.NonbondedForce)][0]
    for i in range(system.getNumForces()):
        system.getForce(i).setForceGroup(2)
    nb.setForceGroup(0)
    nb.setReciprocalSpaceForceGroup(1)
    nb.setUseDispersionCorrection(False)
    for i in range(nb.getNumParticles()):
        q, s, _ = nb.getParticleParameters(i)
        nb.setParticleParameters(i, q, s, 0.0)
    for i in range(nb.getNumExceptions()):
        a, b, q, s, _ = nb.getExceptionParameters(i)
        nb.setExceptionParameters(i, a, b, q, s, 0.0)
    nb.setPMEParameters(alpha, *grid)
    ctx = mm.Context(system, mm.VerletIntegrator(0.001), mm.Platform.getPlatformByName("Reference"))
    ctx.setPositions(pdb.positions)
    kj = u.kilojoule_per_mole
    direct = ctx.getState(getEnergy=True, groups={0}).getPotentialEnergy().value_in_unit(kj)
    recip = ctx.getState(getEnergy=True, groups={1}).getPotentialEnergy().value_in_unit(kj)
    f = ctx.getState(getForces=True, groups={0, 1}).getForces(asNumpy=True).value_in_unit(kj / u.nanometer)
    used = nb.getPMEParametersInContext(ctx)
    return direct, recip, np.asarray(f), used


def main():
    try:
        import openmm as mm
        import openmm.app as app
        import openmm.unit as u
    except ImportError as e:
        print("SKIP openmm PME reference check: import openmm failed (%s)" % e)
        return 0
    exe = os.path.join(ROOT, "build", "reference", "dump_ewald")
    if not os.path.exists(exe):
        subprocess.check_call(["make", "-s", "build/reference/dump_ewald"], cwd=ROOT)
    with tempfile.TemporaryDirectory() as d:
        subprocess.check_call([exe, d])
        end = "<" if meta(os.path.join(d, "meta.txt"))["endian"][0] == "little" else ">"
        for tag, ffname in (("water", "tip3p.xml"), ("salt", "amber14/tip3p.xml"), ("charged", "amber14/tip3p.xml")):
            m = meta(os.path.join(d, tag + "_meta.txt"))
            alpha, grid = float(m["alpha"][0]), [int(x) for x in m["grid"]]
            direct, recip, f, used = openmm_coulomb(mm, app, u, os.path.join(d, tag + ".pdb"), ffname, alpha, grid)
            en = np.fromfile(os.path.join(d, tag + "_energy.f64"), dtype=end + "f8")
            md_f = np.fromfile(os.path.join(d, tag + "_force.f64"), dtype=end + "f8").reshape(-1, 3)
            name = "openmm %s %s (%d atoms, alpha %.4f, grid %s, order 5)" % (mm.__version__, tag, len(md_f), alpha, grid)
            report(name + ": OpenMM used the same alpha and grid",
                   abs(used[0] - alpha) < 1e-12 and list(used[1:]) == grid, "OpenMM %s" % (used,))
            md_direct, md_recip = en[0] + en[1], en[3] + en[2]
            report(name + ": direct = coul_real + coul_excl", abs(direct - md_direct) <= 1e-6 * abs(direct),
                   "OpenMM %.10g md.h %.10g" % (direct, md_direct))
            report(name + ": reciprocal group = coul_recip + coul_self", abs(recip - md_recip) <= 1e-6 * abs(recip),
                   "OpenMM %.10g md.h %.10g" % (recip, md_recip))
            err = np.abs(f - md_f).max() / np.abs(f).max()
            report(name + ": forces", err <= 1e-5, "max |dF| / max |F| = %.3g" % err)
            print("  %s: direct %.6f vs %.6f, recip+self %.6f vs %.6f kJ/mol, force error %.2g" %
                  (tag, direct, md_direct, recip, md_recip, err))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
