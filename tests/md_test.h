/* md_test.h - the project's small test runner (C11 and C++17).
 *
 * A test is a function `static void name(void)`; it checks with MD_CHECK*
 * and returns at the first failed check. main() runs each with MD_RUN and
 * returns md_test_summary(). Output, one line per test:
 *     PASS name
 *     FAIL name: file:line: what failed
 *     SKIP name: reason
 * and last "N passed, N failed, N skipped". tests/run.sh adds up these lines
 * over every test program. Set MD_REQUIRE_GPU=1 to turn GPU skips into
 * failures (make test-gpu does). */
#ifndef MD_TEST_H
#define MD_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int md_test__passed, md_test__failed, md_test__skipped;
static int md_test__failed_now;
static char md_test__skip_reason[512];

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void md_test__fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    if (md_test__failed_now) return;
    md_test__failed_now = 1;
    printf("  %s:%d: ", file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/** Fail the current test (and return from it) unless cond holds. */
#define MD_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            md_test__fail(__FILE__, __LINE__, "check failed: %s", #cond);                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/** Like MD_CHECK with a printf-style explanation. */
#define MD_CHECKF(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            md_test__fail(__FILE__, __LINE__, __VA_ARGS__);                                        \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/** The md_status expression must be MD_OK. */
#define MD_CHECK_OK(expr)                                                                          \
    do {                                                                                           \
        md_status md_test__st = (expr);                                                            \
        if (md_test__st != MD_OK) {                                                                \
            md_test__fail(__FILE__, __LINE__, "%s returned %s: %s", #expr,                         \
                          md_status_string(md_test__st), md_last_error());                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/** The md_status expression must return `want` and md_last_error() must contain `text`. */
#define MD_CHECK_ERROR(expr, want, text)                                                           \
    do {                                                                                           \
        md_status md_test__st;                                                                     \
        md_clear_error();                                                                          \
        md_test__st = (expr);                                                                      \
        if (md_test__st != (want)) {                                                               \
            md_test__fail(__FILE__, __LINE__, "%s returned %s, expected %s (message: %s)", #expr,  \
                          md_status_string(md_test__st), md_status_string(want), md_last_error()); \
            return;                                                                                \
        }                                                                                          \
        if (!strstr(md_last_error(), (text))) {                                                    \
            md_test__fail(__FILE__, __LINE__, "%s: message '%s' does not mention '%s'", #expr,     \
                          md_last_error(), (text));                                                \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/** |a - b| <= atol + rtol * |b|, and neither is NaN. */
#define MD_CHECK_CLOSE(a, b, rtol, atol)                                                           \
    do {                                                                                           \
        double md_test__a = (double)(a), md_test__b = (double)(b);                                 \
        if (!(fabs(md_test__a - md_test__b) <= (atol) + (rtol)*fabs(md_test__b))) {                \
            md_test__fail(__FILE__, __LINE__, "%s = %.9g, %s = %.9g (rtol %g, atol %g)", #a,       \
                          md_test__a, #b, md_test__b, (double)(rtol), (double)(atol));             \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/** Skip the current test with a reason (printf-style) and return from it. */
#define MD_SKIP(...)                                                                               \
    do {                                                                                           \
        snprintf(md_test__skip_reason, sizeof md_test__skip_reason, __VA_ARGS__);                  \
        return;                                                                                    \
    } while (0)

static void md_test__run(const char *name, void (*fn)(void)) {
    md_test__failed_now = 0;
    md_test__skip_reason[0] = '\0';
    fflush(stdout);
    fn();
    if (md_test__failed_now) {
        printf("FAIL %s\n", name);
        md_test__failed++;
    } else if (md_test__skip_reason[0]) {
        const char *req = getenv("MD_REQUIRE_GPU");
        if (req && req[0] == '1') {
            printf("FAIL %s: skipped but MD_REQUIRE_GPU=1: %s\n", name, md_test__skip_reason);
            md_test__failed++;
        } else {
            printf("SKIP %s: %s\n", name, md_test__skip_reason);
            md_test__skipped++;
        }
    } else {
        printf("PASS %s\n", name);
        md_test__passed++;
    }
    fflush(stdout);
}

/** Run one test function. */
#define MD_RUN(fn) md_test__run(#fn, fn)

/** Print the closing line and return the process exit code. */
static int md_test_summary(void) {
    printf("%d passed, %d failed, %d skipped\n", md_test__passed, md_test__failed, md_test__skipped);
    return md_test__failed ? 1 : 0;
}

#endif /* MD_TEST_H */
