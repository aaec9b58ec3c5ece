"""Independent float64 / integer reference of md.h's core: splitmix64 seeding,
xoshiro256** (Blackman & Vigna 2018, https://prng.di.unimi.it/xoshiro256starstar.c),
uniform doubles from the top 53 bits, Box-Muller normals, and md_build_random_charges."""
import math

MASK = (1 << 64) - 1


def splitmix64(x):
    """Return (new state, output) of one splitmix64 step."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class Xoshiro256ss:
    def __init__(self, seed):
        self.s = []
        x = seed & MASK
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * (1.0 / 9007199254740992.0)

    def normal(self):
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def random_charges(n, box, qmax, seed):
    """Positions and charges as md_build_random_charges makes them (float64)."""
    g = Xoshiro256ss(seed)
    atoms = []
    for _ in range(n):
        x, y, z = box[0] * g.uniform(), box[1] * g.uniform(), box[2] * g.uniform()
        q = qmax * (2.0 * g.uniform() - 1.0)
        atoms.append([x, y, z, q])
    mean = sum(a[3] for a in atoms) / n
    for a in atoms:
        a[3] -= mean
    return atoms
