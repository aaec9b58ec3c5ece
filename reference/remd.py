"""Independent reference of md.h's temperature replica exchange (md_remd): the Metropolis
acceptance probability of swapping neighbouring temperatures and the protocol of one round
(even pairs on even rounds, odd pairs on odd rounds, one uniform per attempted pair in
ascending order, velocity factors sqrt(T_new / T_old)), written from the method's definition
(Sugita & Okamoto 1999; Hansmann 1997) with the random stream of reference/core.py."""
import math

from core import Xoshiro256ss

KB = 0.00831446261815324  # kJ mol^-1 K^-1 (CODATA R / 1000)


def probability(ti, tj, ui, uj):
    """min(1, exp[(1/(kB ti) - 1/(kB tj)) (ui - uj)])."""
    delta = (1.0 / (KB * ti) - 1.0 / (KB * tj)) * (ui - uj)
    return 1.0 if delta >= 0.0 else math.exp(delta)


class Ladder:
    def __init__(self, temps, seed):
        self.t = list(temps)
        self.n = len(temps)
        self.replica_at = list(range(self.n))
        self.rng = Xoshiro256ss(seed)
        self.rounds = 0
        self.attempts = [0] * (self.n - 1)
        self.accepts = [0] * (self.n - 1)

    def slot_of(self):
        s = [0] * self.n
        for k, r in enumerate(self.replica_at):
            s[r] = k
        return s

    def exchange(self, energy):
        """One round; returns (accepted per pair: 1, 0 or -1; velocity factor per replica)."""
        acc = [-1] * (self.n - 1)
        scale = [1.0] * self.n
        for k in range(self.rounds % 2, self.n - 1, 2):
            i, j = self.replica_at[k], self.replica_at[k + 1]
            u = self.rng.uniform()
            yes = u < probability(self.t[k], self.t[k + 1], energy[i], energy[j])
            self.attempts[k] += 1
            acc[k] = 1 if yes else 0
            if yes:
                self.accepts[k] += 1
                self.replica_at[k], self.replica_at[k + 1] = j, i
                scale[i] = math.sqrt(self.t[k + 1] / self.t[k])
                scale[j] = math.sqrt(self.t[k] / self.t[k + 1])
        self.rounds += 1
        return acc, scale
