#!/usr/bin/env python3
"""Peers measured side by side with md.h on the same machine, in the same run.

Every subcommand prints one JSON object per line (schema "md_peer/1"), so a driver can put the
peer's number next to md.h's and print the ratio. Nothing here is a reference for correctness
(reference/ holds those); this file only times other codes on the same inputs.

  openmm-step   OpenMM (CUDA, mixed precision) step time on a TIP3P water box: PME with
                ewaldErrorTolerance 5e-4, cutoff 0.9 nm, rigid water, 2 fs, LangevinMiddle
                300 K, 1/ps. The box is read from --pdb (md.h's water builder writes it, so
                both codes run the same configuration) or built by OpenMM's Modeller (--edge).
  openmm-recip  the same system, integrating only the reciprocal-space force group: PME's
                reciprocal part plus a small integrator (an upper bound on PME reciprocal time)
  openmm-direct the same system, integrating every force but the reciprocal-space group: the
                nonbonded direct space (cutoff pairs with erfc, exclusions, its neighbour list)
                plus the integrator and the constraints (an upper bound on OpenMM's direct-space
                time: the peer of chapter 06's pair kernel and list build)
  openmm-energy the same system's energy components on the given platform (to compare with md.h
                on the same configuration)
  openmm-drift  NVE energy drift: --equil ps of LangevinMiddle (300 K, 1/ps), then --ps ps with a
                VerletIntegrator (2 fs, leapfrog, rigid water), the total energy every 0.1 ps and
                its least-squares slope (chapter 08's --drift does the same with md.h); --seed
                draws the starting velocities and the Langevin noise
  freud-rdf     freud's RDF of one frame (XYZ file, cubic box from --box) with --threads threads

Install on a device machine from carried wheels (bench/README.md):
  openmm, openmm-cuda-13, freud-analysis, rowan, parsnip-cif, more-itertools.
"""
import argparse
import json
import sys
import time


def _openmm_system(args):
    import openmm as mm
    import openmm.app as app
    import openmm.unit as u

    ff = app.ForceField("tip3p.xml")
    if args.pdb:
        pdb = app.PDBFile(args.pdb)
        top, pos = pdb.topology, pdb.positions
    else:
        m = app.Modeller(app.Topology(), [])
        e = args.edge
        m.addSolvent(ff, model="tip3p", boxSize=mm.Vec3(e, e, e) * u.nanometer)
        top, pos = m.topology, m.positions
    system = ff.createSystem(top, nonbondedMethod=app.PME, nonbondedCutoff=args.cutoff * u.nanometer,
                             rigidWater=True, ewaldErrorTolerance=args.tolerance)
    return mm, app, u, top, pos, system


def _platform(mm, name):
    plat = mm.Platform.getPlatformByName(name)
    props = {"Precision": "mixed"} if name in ("CUDA", "OpenCL") else {}
    if name == "CUDA":
        props["DeviceIndex"] = "0"
    return plat, props


def _time_steps(ctx, integrator, steps, warmup):
    integrator.step(warmup)
    ctx.getState(getEnergy=True)  # waits for the GPU
    t0 = time.perf_counter()
    integrator.step(steps)
    ctx.getState(getEnergy=True)
    return (time.perf_counter() - t0) / steps


def openmm_step(args, group=None):
    """group None: the whole step; "recip" or "direct": only that part of the forces integrated."""
    mm, app, u, top, pos, system = _openmm_system(args)
    nb = [f for f in system.getForces() if isinstance(f, mm.NonbondedForce)][0]
    integrator = mm.LangevinMiddleIntegrator(300 * u.kelvin, 1.0 / u.picosecond, 0.002 * u.picoseconds)
    integrator.setRandomNumberSeed(2026)
    if group:
        for f in system.getForces():
            f.setForceGroup(0)
        nb.setReciprocalSpaceForceGroup(1)
        integrator.setIntegrationForceGroups({1} if group == "recip" else {0})
    plat, props = _platform(mm, args.platform)
    ctx = mm.Context(system, integrator, plat, props)
    ctx.setPositions(pos)
    ctx.setVelocitiesToTemperature(300 * u.kelvin, 2026)
    alpha, nx, ny, nz = nb.getPMEParametersInContext(ctx)
    per_step = _time_steps(ctx, integrator, args.steps, args.warmup)
    out = {"schema": "md_peer/1", "peer": "openmm " + mm.__version__, "what": group or "step",
           "platform": args.platform, "atoms": top.getNumAtoms(), "steps": args.steps,
           "s_per_step": per_step, "ns_per_day": 0.002 * 86400.0 / per_step / 1000.0,
           "pme_alpha_per_nm": alpha, "pme_grid": [nx, ny, nz], "cutoff_nm": args.cutoff,
           "ewald_tolerance": args.tolerance}
    print(json.dumps(out), flush=True)


def openmm_energy(args):
    mm, app, u, top, pos, system = _openmm_system(args)
    for i, f in enumerate(system.getForces()):
        f.setForceGroup(i)
    nb = [f for f in system.getForces() if isinstance(f, mm.NonbondedForce)][0]
    nb.setReciprocalSpaceForceGroup(31)
    plat, props = _platform(mm, args.platform)
    ctx = mm.Context(system, mm.VerletIntegrator(0.001), plat, props)
    ctx.setPositions(pos)
    kj = u.kilojoule_per_mole
    total = ctx.getState(getEnergy=True).getPotentialEnergy().value_in_unit(kj)
    recip = ctx.getState(getEnergy=True, groups={31}).getPotentialEnergy().value_in_unit(kj)
    print(json.dumps({"schema": "md_peer/1", "peer": "openmm " + mm.__version__, "what": "energy",
                      "platform": args.platform, "atoms": top.getNumAtoms(), "potential_kj_mol": total,
                      "recip_kj_mol": recip}), flush=True)


def openmm_drift(args):
    mm, app, u, top, pos, system = _openmm_system(args)
    plat, props = _platform(mm, args.platform)
    lang = mm.LangevinMiddleIntegrator(300 * u.kelvin, 1.0 / u.picosecond, 0.002 * u.picoseconds)
    lang.setRandomNumberSeed(args.seed)
    ctx = mm.Context(system, lang, plat, props)
    ctx.setPositions(pos)
    ctx.setVelocitiesToTemperature(300 * u.kelvin, args.seed)
    lang.step(int(round(args.equil / 0.002)))
    st = ctx.getState(getPositions=True, getVelocities=True)
    verlet = mm.VerletIntegrator(0.002 * u.picoseconds)
    ctx2 = mm.Context(system, verlet, plat, props)
    ctx2.setPeriodicBoxVectors(*st.getPeriodicBoxVectors())
    ctx2.setPositions(st.getPositions())
    ctx2.setVelocities(st.getVelocities())
    kj = u.kilojoule_per_mole
    t, e = [], []
    per = 50
    t0 = time.perf_counter()
    for k in range(int(round(args.ps / (per * 0.002))) + 1):
        if k:
            verlet.step(per)
        s = ctx2.getState(getEnergy=True)
        t.append(k * per * 0.002)
        e.append((s.getPotentialEnergy() + s.getKineticEnergy()).value_in_unit(kj))
    n = len(t)
    mt, me = sum(t) / n, sum(e) / n
    slope = sum((a - mt) * (b - me) for a, b in zip(t, e)) / sum((a - mt) ** 2 for a in t)
    dof = 3 * system.getNumParticles() - system.getNumConstraints()
    dof -= 3 if any(isinstance(f, mm.CMMotionRemover) for f in system.getForces()) else 0
    print(json.dumps({"schema": "md_peer/1", "peer": "openmm " + mm.__version__, "what": "drift",
                      "platform": args.platform, "atoms": top.getNumAtoms(), "seed": args.seed, "ps": t[-1],
                      "ewald_tolerance": args.tolerance, "dof": dof,
                      "drift_kj_mol_ns": 1e3 * slope, "drift_kj_mol_ns_per_dof": 1e3 * slope / dof,
                      "max_excursion_kj_mol": max(abs(x - e[0]) for x in e),
                      "wall_s": time.perf_counter() - t0}), flush=True)


def freud_rdf(args):
    import numpy as np
    import freud

    with open(args.xyz) as f:
        n = int(f.readline())
        f.readline()
        pts = np.array([[float(v) for v in f.readline().split()[1:4]] for _ in range(n)], dtype=np.float32)
    pts *= 0.1  # XYZ is in Angstrom; md.h and freud here use nm
    L = args.box
    pts -= np.float32(L / 2)  # freud boxes are centred on the origin
    pts -= np.float32(L) * np.round(pts / np.float32(L))
    freud.parallel.set_num_threads(args.threads)
    box = freud.box.Box.cube(L)
    rdf = freud.density.RDF(bins=args.bins, r_max=args.rmax)
    rdf.compute(system=(box, pts), reset=True)  # warm-up
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        rdf.compute(system=(box, pts), reset=True)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"schema": "md_peer/1", "peer": "freud " + freud.__version__, "what": "rdf",
                      "atoms": n, "threads": args.threads, "rmax_nm": args.rmax, "bins": args.bins,
                      "s_per_frame": times[len(times) // 2]}), flush=True)


def _seed(text):
    v = int(text)
    if not 1 <= v < 2 ** 31:
        raise argparse.ArgumentTypeError("a seed from 1 to 2^31-1, got %s" % text)
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("openmm-step", "openmm-recip", "openmm-direct", "openmm-energy", "openmm-drift"):
        s = sub.add_parser(name)
        s.add_argument("--pdb", help="water box PDB (HOH residues O, H1, H2; CRYST1 box)")
        s.add_argument("--edge", type=float, default=6.2, help="Modeller box edge (nm) when no --pdb")
        s.add_argument("--platform", default="CUDA")
        s.add_argument("--cutoff", type=float, default=0.9)
        s.add_argument("--tolerance", type=float, default=5e-4)
        s.add_argument("--steps", type=int, default=2000)
        s.add_argument("--warmup", type=int, default=200)
        s.add_argument("--ps", type=float, default=100.0, help="openmm-drift: NVE picoseconds")
        s.add_argument("--equil", type=float, default=20.0, help="openmm-drift: Langevin picoseconds first")
        s.add_argument("--seed", type=_seed, default=2026,
                       help="openmm-drift: seed of the starting velocities and the Langevin noise (1..2^31-1; "
                            "OpenMM takes 0 as 'pick one at random')")
    s = sub.add_parser("freud-rdf")
    s.add_argument("--xyz", required=True)
    s.add_argument("--box", type=float, required=True, help="cubic box edge (nm)")
    s.add_argument("--rmax", type=float, default=1.5)
    s.add_argument("--bins", type=int, default=300)
    s.add_argument("--threads", type=int, default=16)
    s.add_argument("--reps", type=int, default=7)
    a = p.parse_args()
    if a.cmd == "openmm-step":
        openmm_step(a)
    elif a.cmd == "openmm-recip":
        openmm_step(a, group="recip")
    elif a.cmd == "openmm-direct":
        openmm_step(a, group="direct")
    elif a.cmd == "openmm-energy":
        openmm_energy(a)
    elif a.cmd == "openmm-drift":
        openmm_drift(a)
    else:
        freud_rdf(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
