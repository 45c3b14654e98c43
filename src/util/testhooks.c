/*
 * testhooks.c - the test switches' one definition (include/kura/testhooks.h
 * says what each does), in test builds only (-DKURA_TEST_HOOKS): a release
 * build has no kura_test at all.  All off: production code takes a
 * switch's branch only when a test has set it.
 */
#include "kura/testhooks.h"

#ifdef KURA_TEST_HOOKS
kura_testhooks kura_test;
#endif
