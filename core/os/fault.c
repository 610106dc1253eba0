/* Fault injection for the tests: uslub_os_fail's window of calls, and the USLUB_FAULT
 * rules (os.h). Every call of os.c that can report ENOMEM asks here first. */
#include "os/fault.h"
#include "os/os.h"

#include <errno.h>
#include <stdatomic.h>

/* One rule per kind: fail the nth call (nth > 0), and/or every call whose number is a
 * multiple of `every`. "all" counts the calls of every kind together. Counters start at
 * zero when the rules are installed, so a test can install them between phases. */
struct fault_rule {
	unsigned long nth, every;
	_Atomic unsigned long calls;
};

static struct fault_rule fault_rules[NR_FAULT_KINDS];
_Static_assert(NR_FAULT_KINDS ==
		   sizeof(((struct uslub_fault_plan *)0)->nth) / sizeof(unsigned long),
	       "one plan entry per kind");
static _Atomic int fault_armed;
static _Atomic unsigned long fault_injected;

static int rule_fires(struct fault_rule *r)
{
	if (!r->nth && !r->every)
		return 0;
	unsigned long n = atomic_fetch_add_explicit(&r->calls, 1, memory_order_relaxed) + 1;
	return n == r->nth || (r->every && n % r->every == 0);
}

static int fault_rule_fires(enum fault_kind kind)
{
	if (!atomic_load_explicit(&fault_armed, memory_order_relaxed))
		return 0;
	/* Both counters advance on every call, so "all:every:2" means every second OS call
	 * whatever the kind, and a kind's own rule is unaffected by the other kinds. */
	int fire = rule_fires(&fault_rules[kind]);
	fire |= rule_fires(&fault_rules[FAULT_ALL]);
	if (fire)
		atomic_fetch_add_explicit(&fault_injected, 1, memory_order_relaxed);
	return fire;
}

void uslub_os_fault_set(const struct uslub_fault_plan *plan)
{
	int armed = 0;
	atomic_store(&fault_armed, 0);
	for (int k = 0; k < NR_FAULT_KINDS; k++) {
		fault_rules[k].nth = plan ? plan->nth[k] : 0;
		fault_rules[k].every = plan ? plan->every[k] : 0;
		atomic_store(&fault_rules[k].calls, 0);
		armed |= fault_rules[k].nth || fault_rules[k].every;
	}
	atomic_store(&fault_armed, armed);
}

unsigned long uslub_os_fault_injected(void)
{
	return atomic_load_explicit(&fault_injected, memory_order_relaxed);
}

static unsigned long fail_skip, fail_count;

int uslub_os_injected_failure(enum fault_kind kind)
{
	if (fail_count) {
		if (fail_skip) {
			fail_skip--;
		} else {
			fail_count--;
			errno = ENOMEM;
			return 1;
		}
	}
	if (fault_rule_fires(kind)) {
		errno = ENOMEM;
		return 1;
	}
	return 0;
}

void uslub_os_fail(unsigned long skip, unsigned long count)
{
	fail_skip = skip;
	fail_count = count;
}
