#!/usr/bin/env bash
# Make tutorials/img/ch05_rdf_lj_mc.png: a Metropolis Monte Carlo Lennard-Jones liquid
# (tutorials/scripts/lj_mc_traj.py) -> DCD -> examples/rdf -> CSV -> plot_rdf.py.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p build/tutorials
make -s build/examples/rdf
python3 tutorials/scripts/lj_mc_traj.py build/tutorials/lj_mc.dcd
build/examples/rdf build/tutorials/lj_mc.dcd build/tutorials/lj_mc_rdf.csv --rmax 1.1 --bins 110
python3 tutorials/scripts/plot_rdf.py tutorials/img/ch05_rdf_lj_mc.png \
  "build/tutorials/lj_mc_rdf.csv:LJ argon, MC, 86.5 K, 256 atoms, 40 frames" \
  --title "g(r) by examples/rdf (md_rdf_accumulate, cpu_private)"
