/* Tests of md.h's replica-exchange logic (md_remd, section co): the acceptance probability
 * against its formula, the ladder, the pairs of each round, statistics against the
 * probabilities, the canonical distributions kept (detailed balance, with a wrong criterion
 * shown to fail the same check), determinism, round trips and errors. The exact decision
 * stream is compared with an independent Python implementation by reference/check_remd.py.
 * Seeds used: 3, 4, 5, 21, 22, 99. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"

/* kB in kJ mol^-1 K^-1 written out (CODATA R / 1000), not taken from MD_KB */
#define TEST_KB 0.00831446261815324

static void probability_matches_formula(void) {
    /* a colder replica with the lower energy: exchange is uphill, p = exp(-(b1 - b2)(u2 - u1)) */
    double t1 = 300.0, t2 = 330.0, u1 = -1000.0, u2 = -990.0;
    double b1 = 1.0 / (TEST_KB * t1), b2 = 1.0 / (TEST_KB * t2);
    double want = exp((b1 - b2) * (u1 - u2)); /* (b1 - b2) > 0, (u1 - u2) < 0 */
    MD_CHECK(want > 0.3 && want < 0.9); /* a probability strictly inside (0, 1): the case is not trivial */
    MD_CHECK_CLOSE(md_remd_probability(t1, t2, u1, u2), want, 1e-14, 0.0);
    /* downhill: the colder one has the higher energy: always accepted */
    MD_CHECK(md_remd_probability(t1, t2, u2, u1) == 1.0);
    /* equal temperatures or equal energies: always */
    MD_CHECK(md_remd_probability(t1, t1, u1, u2) == 1.0);
    MD_CHECK(md_remd_probability(t1, t2, u1, u1) == 1.0);
    /* symmetry of detailed balance: p(x -> y) / p(y -> x) = exp(delta) */
    MD_CHECK_CLOSE(md_remd_probability(t1, t2, u1, u2) / md_remd_probability(t2, t1, u1, u2), want, 1e-14, 0.0);
    /* a large gap underflows to 0, not NaN */
    MD_CHECK(md_remd_probability(300.0, 600.0, -1e6, 0.0) == 0.0);
    MD_CHECK(isnan(md_remd_probability(NAN, t2, u1, u2)));
    MD_CHECK(isnan(md_remd_probability(t1, t2, INFINITY, u2)));
    MD_CHECK(isnan(md_remd_probability(0.0, t2, u1, u2)));
}

static void ladder_is_geometric(void) {
    double t[12];
    int k;
    MD_CHECK_OK(md_remd_ladder(t, 12, 300.0, 450.0));
    MD_CHECK(t[0] == 300.0 && t[11] == 450.0);
    for (k = 1; k < 12; k++) MD_CHECK_CLOSE(t[k] / t[k - 1], pow(1.5, 1.0 / 11.0), 1e-13, 0.0);
    MD_CHECK_OK(md_remd_ladder(t, 1, 310.0, 400.0));
    MD_CHECK(t[0] == 310.0);
    MD_CHECK_ERROR(md_remd_ladder(t, 0, 300.0, 400.0), MD_ERR_INVALID_ARGUMENT, "n");
    MD_CHECK_ERROR(md_remd_ladder(t, 3, -1.0, 400.0), MD_ERR_INVALID_ARGUMENT, "t_min");
    MD_CHECK_ERROR(md_remd_ladder(t, 3, 300.0, 200.0), MD_ERR_INVALID_ARGUMENT, "t_max");
    MD_CHECK_ERROR(md_remd_ladder(NULL, 3, 300.0, 400.0), MD_ERR_INVALID_ARGUMENT, "t");
}

/* Energies that make every swap certain: the replica in the colder slot always has the higher
 * energy (E = -1000 x slot). Then the permutation follows the pair schedule exactly. */
static void fill_downhill(const md_remd *x, double *e) {
    int r;
    for (r = 0; r < x->n; r++) e[r] = -1000.0 * x->slot_of[r];
}

static void rounds_alternate_even_and_odd_pairs(void) {
    md_remd x;
    double t[5], e[5], scale[5];
    int acc[4], k, r, round;
    MD_CHECK_OK(md_remd_ladder(t, 5, 300.0, 400.0));
    MD_CHECK_OK(md_remd_create(&x, 5, t, 3));
    for (round = 0; round < 6; round++) {
        int before[5];
        for (r = 0; r < 5; r++) before[r] = x.slot_of[r];
        fill_downhill(&x, e);
        MD_CHECK_OK(md_remd_exchange(&x, e, acc, scale));
        for (k = 0; k < 4; k++) MD_CHECK(acc[k] == ((k % 2) == (round % 2) ? 1 : -1));
        for (r = 0; r < 5; r++) {
            int moved = x.slot_of[r] != before[r];
            int in_pair = (before[r] < 4 && before[r] % 2 == round % 2) || (before[r] > 0 && (before[r] - 1) % 2 == round % 2);
            MD_CHECK(moved == in_pair);
            /* the velocity factor takes the replica to its new temperature */
            MD_CHECK_CLOSE(scale[r], sqrt(t[x.slot_of[r]] / t[before[r]]), 1e-15, 0.0);
            MD_CHECK(x.replica_at[x.slot_of[r]] == r);
        }
    }
    for (k = 0; k < 4; k++) MD_CHECK(x.attempts[k] == 3 && x.accepts[k] == 3 && md_remd_acceptance(&x, k) == 1.0);
    MD_CHECK(x.rounds == 6);
    MD_CHECK(isnan(md_remd_acceptance(&x, 4)) && isnan(md_remd_acceptance(&x, -1)));
    md_remd_free(&x);
}

/* With certain swaps on 3 slots, replica 0 goes 0 -> 1 (round 0, pair 0-1) -> 2 (round 1, pair
 * 1-2) -> stays (round 2) -> 1 (round 3) -> 0 (round 4): one round trip after 5 rounds.
 * Replica 2 starts at the top, so its first descent is not a trip: 2 -> 1 (round 1) -> 0
 * (round 2) -> 1 (round 4) -> 2 (round 5) -> 1 (round 7). */
static void round_trips_counted(void) {
    md_remd x;
    double t[3] = {300.0, 320.0, 340.0}, e[3];
    int round;
    long long trips0[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    MD_CHECK_OK(md_remd_create(&x, 3, t, 4));
    for (round = 0; round < 8; round++) {
        fill_downhill(&x, e);
        MD_CHECK_OK(md_remd_exchange(&x, e, NULL, NULL));
        MD_CHECKF(x.round_trips[0] == trips0[round], "round %d: replica 0 has %lld trips", round, x.round_trips[0]);
    }
    MD_CHECK(x.slot_of[0] == 2 && x.slot_of[2] == 1);
    MD_CHECK(x.round_trips[2] == 0 && x.direction[2] == -1); /* on its way down, from the bottom */
    md_remd_free(&x);
}

/* Energies chosen per slot so that every pair's acceptance probability is a known p_k; the
 * accepted fraction must then be p_k to within binomial noise. */
static void acceptance_statistics(void) {
    md_remd x;
    double t[4], e[4], gap[3], p[3] = {0.2, 0.5, 0.8};
    int k, r, round, rounds = 40000;
    MD_CHECK_OK(md_remd_ladder(t, 4, 300.0, 360.0));
    /* energy of slot k: cumulative gaps g_k with exp(-(b_k - b_k+1) g_k) = p_k, i.e. the colder
       slot holds the LOWER energy by g_k (uphill) */
    for (k = 0; k < 3; k++) gap[k] = -log(p[k]) / (1.0 / (TEST_KB * t[k]) - 1.0 / (TEST_KB * t[k + 1]));
    MD_CHECK_OK(md_remd_create(&x, 4, t, 5));
    for (round = 0; round < rounds; round++) {
        for (r = 0; r < 4; r++) {
            double u = -5000.0;
            for (k = 0; k < x.slot_of[r]; k++) u += gap[k];
            e[r] = u;
        }
        MD_CHECK_OK(md_remd_exchange(&x, e, NULL, NULL));
    }
    for (k = 0; k < 3; k++) {
        double n = (double)x.attempts[k], sd = sqrt(p[k] * (1.0 - p[k]) / n);
        MD_CHECK(x.attempts[k] == rounds / 2); /* pair k is attempted every other round */
        /* 5 standard deviations of a binomial fraction */
        MD_CHECKF(fabs(md_remd_acceptance(&x, k) - p[k]) < 5.0 * sd, "pair %d: %.4f accepted, p = %.2f (sd %.4f)", k,
                  md_remd_acceptance(&x, k), p[k], sd);
    }
    md_remd_free(&x);
}

/* Detailed balance. Each round every replica draws a fresh configuration from the canonical
 * distribution of its current temperature (a perfect sampler: U ~ Gamma(m, kB T), the
 * potential energy of 2m harmonic degrees of freedom), then one exchange round runs. A correct
 * criterion keeps the distribution of the energy each slot holds after the exchange canonical:
 * mean m kB T_k. criterion 0: md_remd_exchange; 1: the same swaps with the sign of the
 * exponent flipped (a classic bug), which must fail the same check. */
static double gamma_m(md_rng *r, int m, double kt) {
    double s = 0.0;
    int i;
    for (i = 0; i < m; i++) s -= log(1.0 - md_rng_uniform(r));
    return kt * s;
}

static double worst_slot_bias(int criterion, uint64_t seed) {
    enum { N = 4, M = 3 };
    md_remd x;
    md_rng draws;
    double t[N], e[N], sum[N] = {0}, worst = 0.0;
    long long count[N] = {0};
    int r, k, round;
    if (md_remd_ladder(t, N, 300.0, 420.0) != MD_OK || md_remd_create(&x, N, t, seed) != MD_OK) return INFINITY;
    md_rng_seed(&draws, seed + 1000);
    for (round = 0; round < 60000; round++) {
        for (r = 0; r < N; r++) e[r] = gamma_m(&draws, M, TEST_KB * t[x.slot_of[r]]);
        if (criterion == 0) {
            if (md_remd_exchange(&x, e, NULL, NULL) != MD_OK) return INFINITY;
        } else {
            for (k = (int)(round % 2); k + 1 < N; k += 2) {
                int i = x.replica_at[k], j = x.replica_at[k + 1];
                double u = md_rng_uniform(&x.rng);
                if (u < md_remd_probability(t[k], t[k + 1], e[j], e[i])) { /* flipped */
                    x.replica_at[k] = j;
                    x.replica_at[k + 1] = i;
                    x.slot_of[i] = k + 1;
                    x.slot_of[j] = k;
                }
            }
        }
        for (r = 0; r < N; r++) {
            sum[x.slot_of[r]] += e[r];
            count[x.slot_of[r]]++;
        }
    }
    for (k = 0; k < N; k++) {
        double mean = sum[k] / (double)count[k], want = M * TEST_KB * t[k];
        if (fabs(mean / want - 1.0) > worst) worst = fabs(mean / want - 1.0);
    }
    md_remd_free(&x);
    return worst;
}

static void exchange_keeps_canonical_distributions(void) {
    /* standard error of a slot's mean: 1 / sqrt(M x 60000) = 0.24% of it; 1.2% is 5 of them */
    double good = worst_slot_bias(0, 21), bad = worst_slot_bias(1, 22);
    MD_CHECKF(good < 0.012, "md_remd_exchange: a slot's mean energy is off by %.2f%%", 100.0 * good);
    MD_CHECKF(bad > 0.03, "the flipped criterion went unnoticed (worst bias %.2f%%)", 100.0 * bad);
}

static void same_seed_same_decisions(void) {
    md_remd a, b, c;
    md_rng r;
    double t[6], e[6];
    int acc_a[5], acc_b[5], acc_c[5], round, k, rr, differ = 0;
    MD_CHECK_OK(md_remd_ladder(t, 6, 290.0, 400.0));
    MD_CHECK_OK(md_remd_create(&a, 6, t, 99));
    MD_CHECK_OK(md_remd_create(&b, 6, t, 99));
    MD_CHECK_OK(md_remd_create(&c, 6, t, 100));
    md_rng_seed(&r, 7);
    for (round = 0; round < 200; round++) {
        for (rr = 0; rr < 6; rr++) e[rr] = -20000.0 + 300.0 * md_rng_normal(&r) + 150.0 * a.slot_of[rr];
        MD_CHECK_OK(md_remd_exchange(&a, e, acc_a, NULL));
        MD_CHECK_OK(md_remd_exchange(&b, e, acc_b, NULL));
        MD_CHECK_OK(md_remd_exchange(&c, e, acc_c, NULL));
        for (k = 0; k < 5; k++) {
            MD_CHECK(acc_a[k] == acc_b[k]);
            differ += acc_a[k] != acc_c[k];
        }
    }
    MD_CHECK(memcmp(a.slot_of, b.slot_of, sizeof(int) * 6) == 0);
    MD_CHECK(memcmp(&a.rng, &b.rng, sizeof a.rng) == 0);
    MD_CHECK(differ > 0); /* another seed, other decisions */
    for (k = 0; k < 5; k++) MD_CHECK(a.accepts[k] > 0 && a.accepts[k] < a.attempts[k]); /* not all-or-nothing */
    md_remd_free(&a);
    md_remd_free(&b);
    md_remd_free(&c);
}

static void errors_change_nothing(void) {
    md_remd x, y;
    double t[3] = {300.0, 310.0, 320.0}, bad[3] = {300.0, 300.0, 320.0}, e[3] = {-1.0, NAN, -3.0};
    int acc[2] = {7, 7};
    double scale[3] = {7, 7, 7};
    memset(&y, 0x5A, sizeof y);
    x = y;
    MD_CHECK_ERROR(md_remd_create(&x, 3, bad, 1), MD_ERR_INVALID_ARGUMENT, "temperature[1]");
    MD_CHECK_ERROR(md_remd_create(&x, 0, t, 1), MD_ERR_INVALID_ARGUMENT, "n");
    MD_CHECK_ERROR(md_remd_create(&x, 3, NULL, 1), MD_ERR_INVALID_ARGUMENT, "temperature");
    MD_CHECK(memcmp(&x, &y, sizeof x) == 0);
    MD_CHECK_OK(md_remd_create(&x, 3, t, 1));
    y = x;
    MD_CHECK_ERROR(md_remd_exchange(&x, e, acc, scale), MD_ERR_RANGE, "energy[1]");
    MD_CHECK(memcmp(&x.rng, &y.rng, sizeof x.rng) == 0 && x.rounds == 0 && x.attempts[0] == 0);
    MD_CHECK(acc[0] == 7 && scale[0] == 7.0);
    MD_CHECK_ERROR(md_remd_exchange(&x, NULL, acc, scale), MD_ERR_INVALID_ARGUMENT, "energy");
    md_remd_free(&x);
    MD_CHECK_ERROR(md_remd_exchange(&x, e, NULL, NULL), MD_ERR_INVALID_ARGUMENT, "x");
    md_remd_free(&x); /* twice: safe */
    /* one replica: nothing to exchange, the round still counts */
    MD_CHECK_OK(md_remd_create(&x, 1, t, 1));
    MD_CHECK_OK(md_remd_exchange(&x, t, NULL, scale));
    MD_CHECK(x.rounds == 1 && scale[0] == 1.0);
    md_remd_free(&x);
}

int main(void) {
    MD_RUN(probability_matches_formula);
    MD_RUN(ladder_is_geometric);
    MD_RUN(rounds_alternate_even_and_odd_pairs);
    MD_RUN(round_trips_counted);
    MD_RUN(acceptance_statistics);
    MD_RUN(exchange_keeps_canonical_distributions);
    MD_RUN(same_seed_same_decisions);
    MD_RUN(errors_change_nothing);
    return md_test_summary();
}
