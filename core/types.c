/* The shared data every layer reads through types.h's inline functions: the table that
 * finds a pointer's page (its regions are set up by page/region.c), and each thread's
 * pointer to its state, the shared empty state until the thread has one of its own
 * (thread/thread.c makes and tears down the states). */
#include "types.h"
#include "calls_out.h"

struct uslub_lookup uslub_lookup;
unsigned uslub_nr_thread_states;
unsigned uslub_medium_users;

struct uslub_thread uslub_empty_thread = {.state = THREAD_EMPTY};

__thread struct uslub_thread *uslub_tls_thread __attribute__((tls_model("initial-exec"))) =
    &uslub_empty_thread;
__thread unsigned uslub_tls_out __attribute__((tls_model("initial-exec")));

struct uslub_lock_stat uslub_lock_stats[USLUB_NR_LOCKS];

const char *const uslub_lock_names[USLUB_NR_LOCKS] = {
#define X(id, name) #name,
    USLUB_LOCK_ITEMS(X)
#undef X
};

void uslub_lock_contended(pthread_mutex_t *m, enum uslub_lock_kind k)
{
	uslub_lock_waited(k);
	for (unsigned i = 0; i < USLUB_LOCK_SPINS; i++) {
		cpu_relax();
		if (!__atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) &&
		    !pthread_mutex_trylock(m))
			return;
	}
	USLUB_OUT(pthread_mutex_lock(m));
}
