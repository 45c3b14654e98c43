/*
 * testhooks.c - the test switches' one definition (include/kura/testhooks.h
 * says what each does).  All off: production code takes a switch's branch
 * only when a unit test has set it.
 */
#include "kura/testhooks.h"

kura_testhooks kura_test;
