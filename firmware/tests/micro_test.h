/* A tiny micro_test-style harness: TEST(name) { ... EXPECT_*(...) ... }, RUN(name). */
#ifndef MICRO_TEST_H
#define MICRO_TEST_H
#include <stdio.h>
#include <string.h>

static int mt_failures, mt_checks;
#define TEST(name) static void name(void)
#define EXPECT(cond) do { mt_checks++; if (!(cond)) { mt_failures++; \
    fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define EXPECT_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); mt_checks++; \
    if (_a != _b) { mt_failures++; fprintf(stderr, "%s:%d: FAILED: %s == %s (%lld vs %lld)\n", \
    __FILE__, __LINE__, #a, #b, _a, _b); } } while (0)
#define RUN(name) do { int _f = mt_failures; name(); \
    fprintf(stderr, "%s %s\n", mt_failures == _f ? "ok  " : "FAIL", #name); } while (0)
#define MT_EXIT() (fprintf(stderr, "%d checks, %d failures\n", mt_checks, mt_failures), mt_failures ? 1 : 0)
#endif
