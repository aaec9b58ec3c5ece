/* Tests of md.h's core: status messages, errors, RNG, builders, grid, bench JSON.
 * Seeds used: 1, 2, 7, 42, 1234. */
#define MD_IMPLEMENTATION
#include "md.h"
#include "md_test.h"

static void status_strings_are_distinct(void) {
    int a, b;
    for (a = 0; a < MD_STATUS_COUNT; a++) {
        MD_CHECK(md_status_string((md_status)a) != NULL);
        for (b = a + 1; b < MD_STATUS_COUNT; b++)
            MD_CHECK(strcmp(md_status_string((md_status)a), md_status_string((md_status)b)) != 0);
    }
    MD_CHECK(strcmp(md_status_string(MD_STATUS_COUNT), "unknown status") == 0);
}

static void error_names_file_line_field(void) {
    md_status st = md_set_error(MD_ERR_PARSE, "water.pdb", 12, "x", "not a number ('%s')", "1.2.3");
    MD_CHECK(st == MD_ERR_PARSE);
    MD_CHECK(strcmp(md_last_error(), "water.pdb:12: field x: not a number ('1.2.3')") == 0);
    md_clear_error();
    MD_CHECK(md_last_error()[0] == '\0');
}

static void error_message_truncates_safely(void) {
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    md_set_error(MD_ERR_IO, big, 3, big, "%s", big);
    MD_CHECK(strlen(md_last_error()) < 512);
}

/* The exact streams are checked against an independent Python
 * implementation by reference/check_core.py. Here: determinism, distinct
 * seeds, range and moments. */
static void rng_is_deterministic(void) {
    md_rng a, b, c;
    int i;
    md_rng_seed(&a, 1234);
    md_rng_seed(&b, 1234);
    md_rng_seed(&c, 1235);
    for (i = 0; i < 100; i++) {
        uint64_t x = md_rng_next(&a);
        MD_CHECK(x == md_rng_next(&b));
        MD_CHECK(x != md_rng_next(&c));
    }
}

static void rng_uniform_and_normal_moments(void) {
    md_rng r;
    double s = 0, s2 = 0, n1 = 0, n2 = 0, n4 = 0;
    const int n = 200000;
    int i;
    md_rng_seed(&r, 7);
    for (i = 0; i < n; i++) {
        double u = md_rng_uniform(&r), g;
        MD_CHECK(u >= 0.0 && u < 1.0);
        s += u;
        s2 += u * u;
        g = md_rng_normal(&r);
        MD_CHECK(isfinite(g));
        n1 += g;
        n2 += g * g;
        n4 += g * g * g * g;
    }
    /* tolerances: about 5 standard errors of each sample moment */
    MD_CHECK_CLOSE(s / n, 0.5, 0, 5 * sqrt(1.0 / 12 / n));
    MD_CHECK_CLOSE(s2 / n, 1.0 / 3, 0, 5 * sqrt(4.0 / 45 / n));
    MD_CHECK_CLOSE(n1 / n, 0.0, 0, 5 * sqrt(1.0 / n));
    MD_CHECK_CLOSE(n2 / n, 1.0, 0, 5 * sqrt(2.0 / n));
    MD_CHECK_CLOSE(n4 / n, 3.0, 0, 5 * sqrt(96.0 / n));
}

static void random_charges_are_neutral_and_inside(void) {
    md_system s;
    double box[3] = {3.0, 4.0, 5.0}, qabs = 0;
    int i;
    MD_CHECK_OK(md_build_random_charges(&s, 1001, box, 1.0, 42));
    MD_CHECK(s.n == 1001);
    for (i = 0; i < s.n; i++) {
        MD_CHECK(s.xyzq[i].x >= 0 && s.xyzq[i].x <= 3.0f);
        MD_CHECK(s.xyzq[i].y >= 0 && s.xyzq[i].y <= 4.0f);
        MD_CHECK(s.xyzq[i].z >= 0 && s.xyzq[i].z <= 5.0f);
        MD_CHECK(fabs(s.xyzq[i].w) <= 2.0f);
        qabs += fabs(s.xyzq[i].w);
    }
    MD_CHECK(qabs > 100.0); /* charges are not all zero */
    /* neutral to float rounding: |sum| <= n * ulp(1) */
    MD_CHECK_CLOSE(md_system_charge(&s), 0.0, 0, 1001 * 1.2e-7);
    MD_CHECK(s.box[0] == 3.0 && s.box[1] == 4.0 && s.box[2] == 5.0);
    md_system_free(&s);
    MD_CHECK(s.xyzq == NULL && s.n == 0);
}

static void builders_reject_bad_input(void) {
    md_system s;
    double good[3] = {1, 1, 1}, zero[3] = {1, 0, 1}, nan3[3] = {1, NAN, 1};
    md_fcc_desc d;
    memset(&s, 0x5A, sizeof s); /* must stay untouched */
    MD_CHECK_ERROR(md_build_random_charges(&s, 0, good, 1.0, 1), MD_ERR_INVALID_ARGUMENT, "field n");
    MD_CHECK_ERROR(md_build_random_charges(&s, 10, zero, 1.0, 1), MD_ERR_RANGE, "field box");
    MD_CHECK_ERROR(md_build_random_charges(&s, 10, nan3, 1.0, 1), MD_ERR_RANGE, "field box");
    MD_CHECK_ERROR(md_build_random_charges(&s, 10, good, -1.0, 1), MD_ERR_RANGE, "field qmax");
    memset(&d, 0, sizeof d);
    d.cells = -2;
    MD_CHECK_ERROR(md_build_fcc(&s, &d), MD_ERR_RANGE, "field cells");
    d.cells = 2;
    d.temperature = NAN;
    MD_CHECK_ERROR(md_build_fcc(&s, &d), MD_ERR_RANGE, "field temperature");
    MD_CHECK(s.n == 0x5A5A5A5A);
}

static void fcc_lattice_geometry_and_temperature(void) {
    md_system s;
    md_fcc_desc d;
    double p[3] = {0, 0, 0}, dmin = 1e9, ke = 0.0;
    int i, j;
    memset(&d, 0, sizeof d);
    d.cells = 3;
    d.temperature = 120.0;
    d.seed = 2;
    MD_CHECK_OK(md_build_fcc(&s, &d));
    MD_CHECK(s.n == 108);
    MD_CHECK_CLOSE(s.box[0], 3 * 0.5719, 1e-12, 0);
    MD_CHECK_CLOSE(md_system_temperature(&s), 120.0, 1e-4, 0);
    for (i = 0; i < s.n; i++) {
        p[0] += s.mass[i] * s.vel[i].x;
        p[1] += s.mass[i] * s.vel[i].y;
        p[2] += s.mass[i] * s.vel[i].z;
        ke += 0.5 * s.mass[i] * ((double)s.vel[i].x * s.vel[i].x + (double)s.vel[i].y * s.vel[i].y +
                                 (double)s.vel[i].z * s.vel[i].z);
    }
    /* The temperature again from the definition, not from md_system_temperature: equipartition
     * KE = (3n - 3) kB T / 2 with the COM momentum removed (3 degrees of freedom fewer).
     * Tolerance 1e-4: the velocities are stored as float (relative rounding 6e-8 each). */
    MD_CHECK_CLOSE(2.0 * ke / ((3.0 * s.n - 3.0) * 0.00831446261815324), 120.0, 1e-4, 0);
    MD_CHECK_CLOSE(p[0], 0.0, 0, 1e-3);
    MD_CHECK_CLOSE(p[1], 0.0, 0, 1e-3);
    MD_CHECK_CLOSE(p[2], 0.0, 0, 1e-3);
    /* nearest neighbour in FCC is a / sqrt(2), with minimum image */
    for (i = 0; i < s.n; i++)
        for (j = i + 1; j < s.n; j++) {
            double dx = s.xyzq[i].x - s.xyzq[j].x, dy = s.xyzq[i].y - s.xyzq[j].y,
                   dz = s.xyzq[i].z - s.xyzq[j].z, r;
            dx -= s.box[0] * floor(dx / s.box[0] + 0.5);
            dy -= s.box[1] * floor(dy / s.box[1] + 0.5);
            dz -= s.box[2] * floor(dz / s.box[2] + 0.5);
            r = sqrt(dx * dx + dy * dy + dz * dz);
            if (r < dmin) dmin = r;
        }
    MD_CHECK_CLOSE(dmin, 0.5719 / sqrt(2.0), 1e-5, 0);
    md_system_free(&s);
}

static void grid_layout_and_errors(void) {
    md_grid g;
    double o[3] = {-1, 0, 2}, h[3] = {0.1, 0.2, 0.3}, bad[3] = {0.1, 0, 0.1};
    MD_CHECK_OK(md_grid_alloc(&g, 3, 4, 5, o, h));
    MD_CHECK(md_grid_count(&g) == 60);
    MD_CHECK(g.data[59] == 0.0f);
    md_grid_free(&g);
    MD_CHECK(g.data == NULL);
    MD_CHECK_ERROR(md_grid_alloc(&g, 0, 4, 5, o, h), MD_ERR_INVALID_ARGUMENT, "field n");
    MD_CHECK_ERROR(md_grid_alloc(&g, 3, 4, 5, o, bad), MD_ERR_RANGE, "field spacing");
    MD_CHECK_ERROR(md_grid_alloc(&g, 1 << 30, 1 << 30, 1 << 30, o, h), MD_ERR_OUT_OF_MEMORY, "field n: point count overflows"); /* 2^90 points */
}

static void alloc_array_detects_overflow(void) {
    MD_CHECK(md_alloc_array(SIZE_MAX / 2, 4) == NULL);
    MD_CHECK(strstr(md_last_error(), "overflows") != NULL);
}

static void median_of_odd_and_even(void) {
    double a[5] = {5, 1, 4, 2, 3}, b[4] = {4, 1, 3, 2};
    MD_CHECK(md_median(a, 5) == 3.0);
    MD_CHECK(md_median(b, 4) == 2.5);
    MD_CHECK(isnan(md_median(b, 0)));
}

static void max_rel_error_measure(void) {
    float ref[4] = {-2.0f, 1.0f, 0.5f, 4.0f}, out[4] = {-2.0f, 1.2f, 0.5f, 4.0f};
    MD_CHECK_CLOSE(md_max_rel_error(out, ref, 4), 0.2 / 4.0, 1e-6, 0); /* |1.2-1| / max|ref| */
    out[2] = NAN;
    MD_CHECK(isinf(md_max_rel_error(out, ref, 4)));
    MD_CHECK(md_max_rel_error(ref, ref, 4) == 0.0);
    /* a broken reference (NaN or infinite) fails too, even where out matches it elsewhere */
    out[2] = 0.5f;
    ref[0] = NAN;
    MD_CHECK(isinf(md_max_rel_error(out, ref, 4)));
    ref[0] = INFINITY;
    MD_CHECK(isinf(md_max_rel_error(out, ref, 4)));
}

static void bench_json_line(void) {
    md_bench_result r;
    char buf[1024], small[16];
    int len;
    memset(&r, 0, sizeof r);
    r.chapter = "01_sequential_coulomb";
    r.variant = "cpu \"rows\"";
    r.size = 123456789012LL;
    r.size_unit = "atoms*points";
    r.time_s = 0.5;
    r.rate = 2e9;
    r.unit = "atom-evals/s";
    r.ceiling = 4e9;
    r.error = NAN;
    r.device = "cpu";
    len = md_bench_json(buf, sizeof buf, &r);
    MD_CHECK(len > 0 && (size_t)len < sizeof buf && (size_t)len == strlen(buf));
    MD_CHECKF(strcmp(buf, "{\"schema\":\"md_bench/1\",\"chapter\":\"01_sequential_coulomb\","
                          "\"variant\":\"cpu \\\"rows\\\"\",\"size\":123456789012,"
                          "\"size_unit\":\"atoms*points\",\"time_s\":0.5,\"rate\":2e+09,"
                          "\"unit\":\"atom-evals/s\",\"ceiling\":4e+09,\"ceiling_fraction\":0.5,"
                          "\"error\":null,\"device\":\"cpu\"}") == 0, "got %s", buf);
    MD_CHECK(md_bench_json(small, sizeof small, &r) == len); /* truncated, but length reported */
    MD_CHECK(strlen(small) == sizeof small - 1);
}

int main(void) {
    MD_RUN(status_strings_are_distinct);
    MD_RUN(error_names_file_line_field);
    MD_RUN(error_message_truncates_safely);
    MD_RUN(rng_is_deterministic);
    MD_RUN(rng_uniform_and_normal_moments);
    MD_RUN(random_charges_are_neutral_and_inside);
    MD_RUN(builders_reject_bad_input);
    MD_RUN(fcc_lattice_geometry_and_temperature);
    MD_RUN(grid_layout_and_errors);
    MD_RUN(alloc_array_detects_overflow);
    MD_RUN(median_of_odd_and_even);
    MD_RUN(max_rel_error_measure);
    MD_RUN(bench_json_line);
    return md_test_summary();
}
