package main

/*
#include <time.h>
// spin keeps the CPU busy for ns nanoseconds, as a driver query does.
static void spin(long ns) {
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do { clock_gettime(CLOCK_MONOTONIC, &b); } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}
*/
import "C"

func spin(ns int) { C.spin(C.long(ns)) }
