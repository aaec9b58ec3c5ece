"""Write a small box of TIP3P water as PQR: the sample input of potential_map.

    python3 examples/potential_map/make_water_pqr.py > water.pqr      (examples/potential_map/water.pqr)
    python3 examples/potential_map/make_water_pqr.py --cells 33 > big.pqr   (107,811 atoms)

512 molecules (1,536 atoms) on an 8 x 8 x 8 cubic lattice (--cells N: N^3 molecules) whose spacing gives
the density of liquid water (0.997 g/cm^3: 30.0 A^3 per molecule, 3.107 A),
each with a random orientation (numpy seed 2026). TIP3P (Jorgensen,
Chandrasekhar, Madura, Impey & Klein, J. Chem. Phys. 79, 926 (1983)): rigid
geometry r(OH) = 0.9572 A, angle HOH = 104.52 deg; charges O -0.834 e,
H +0.417 e. Radii: O 1.7682 A (the Rmin/2 of the TIP3P oxygen in the CHARMM
force field, the value PDB2PQR writes), H 0 (TIP3P hydrogens have no
Lennard-Jones site). A lattice is not an equilibrated liquid: the file is an
input for the potential map, not for dynamics."""
import argparse

import numpy as np

R_OH = 0.9572                       # Angstrom
ANGLE = np.deg2rad(104.52)
Q_O, Q_H = -0.834, 0.417            # e
RADIUS_O, RADIUS_H = 1.7682, 0.0    # Angstrom
CELLS = 8
SPACING = (18.015 / (0.997 * 0.6022140)) ** (1.0 / 3.0)   # A: the cube root of 30.0 A^3 per molecule


def random_rotation(rng):
    """Uniform random rotation matrix from a random unit quaternion."""
    q = rng.normal(size=4)
    a, b, c, d = q / np.linalg.norm(q)
    return np.array([[a*a + b*b - c*c - d*d, 2*(b*c - a*d), 2*(b*d + a*c)],
                     [2*(b*c + a*d), a*a - b*b + c*c - d*d, 2*(c*d - a*b)],
                     [2*(b*d - a*c), 2*(c*d + a*b), a*a - b*b - c*c + d*d]])


def main():
    ap = argparse.ArgumentParser(description="TIP3P water box as PQR on stdout")
    ap.add_argument("--cells", type=int, default=CELLS, help="molecules per edge (default 8)")
    cells = ap.parse_args().cells
    rng = np.random.default_rng(2026)
    # molecule frame: O at the origin, the H atoms in the xy plane
    h1 = R_OH * np.array([np.sin(ANGLE / 2), np.cos(ANGLE / 2), 0.0])
    h2 = R_OH * np.array([-np.sin(ANGLE / 2), np.cos(ANGLE / 2), 0.0])
    print("REMARK   TIP3P water box, %d molecules, lattice %.4f A, seed 2026" % (cells**3, SPACING))
    print("REMARK   made by examples/potential_map/make_water_pqr.py")
    serial = 1
    res = 1
    for k in range(cells):
        for j in range(cells):
            for i in range(cells):
                o = SPACING * (np.array([i, j, k]) + 0.5)
                rot = random_rotation(rng)
                for name, pos, q, r in (("OH2", o, Q_O, RADIUS_O),
                                        ("H1", o + rot @ h1, Q_H, RADIUS_H),
                                        ("H2", o + rot @ h2, Q_H, RADIUS_H)):
                    # serial and residue numbers wrap as in PDB files past 99,999 and 9,999
                    print("ATOM  %5d %-4s HOH W%4d    %8.3f%8.3f%8.3f %7.4f %6.4f"
                          % (serial % 100000, " " + name if len(name) < 4 else name, res % 10000,
                             pos[0], pos[1], pos[2], q, r))
                    serial += 1
                res += 1
    print("END")


if __name__ == "__main__":
    main()
