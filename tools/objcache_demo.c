/* objcache_demo: a program's own object cache on uslub (README.md, "Object caches").
 *
 * A table of sessions looked up under RCU (liburcu's memb flavour) while a writer
 * replaces them: the sessions come from a TYPESAFE_BY_RCU cache with a constructor, so a
 * reader may meet a recycled session but always a session, and re-checks its id; retired
 * sessions are freed with uslub_cache_free at once (the type stays) and their names, plain
 * malloc'd strings, with uslub_free_rcu. Run it with USLUB_STATS=1 to see the cache by
 * name:
 *
 *     cc tools/objcache_demo.c $(pkg-config --cflags --libs uslub) -lurcu -lpthread
 *     USLUB_STATS=1 ./a.out
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <urcu/urcu-memb.h>

#include "uslub.h"

#define SLOTS 256
#define TAG   0x5e55104e5e55104eULL

struct session {
	uint64_t tag; /* set once by the constructor: every session carries it */
	_Atomic uint64_t id;
	char *_Atomic name;
};

static struct session *_Atomic table[SLOTS];
static struct uslub_cache *sessions;
static atomic_bool done;

static void session_ctor(void *p)
{
	struct session *s = p;
	s->tag = TAG;
}

static void *reader(void *arg)
{
	unsigned long found = 0, not_sessions = 0;
	urcu_memb_register_thread();
	for (uint64_t k = 0; !atomic_load(&done); k++) {
		urcu_memb_read_lock();
		struct session *s = rcu_dereference(table[k % SLOTS]);
		if (s) {
			not_sessions += s->tag != TAG;
			/* Recycled meanwhile? Then it names another id: look again. */
			if (atomic_load(&s->id) % SLOTS == k % SLOTS) {
				char *name = atomic_load(&s->name);
				found += name && name[0] == 's';
			}
		}
		urcu_memb_read_unlock();
	}
	urcu_memb_unregister_thread();
	printf("reader: %lu sessions found, %lu objects that were not sessions\n", found,
	       not_sessions);
	*(unsigned long *)arg = not_sessions;
	return NULL;
}

int main(void)
{
	uslub_set_rcu(urcu_memb_call_rcu, urcu_memb_barrier);
	sessions = uslub_cache_create("session", sizeof(struct session), 0,
				      USLUB_CACHE_TYPESAFE_BY_RCU, session_ctor);
	if (!sessions) {
		perror("uslub_cache_create");
		return 1;
	}
	unsigned long bad = 0;
	pthread_t r;
	pthread_create(&r, NULL, reader, &bad);
	for (uint64_t id = 0; id < 2000000; id++) {
		struct session *s = uslub_cache_alloc(sessions);
		char *name = uslub_malloc(32);
		snprintf(name, 32, "session-%llu", (unsigned long long)id);
		atomic_store(&s->id, id);
		atomic_store(&s->name, name);
		struct session *old = rcu_xchg_pointer(&table[id % SLOTS], s);
		if (old) {
			uslub_free_rcu(atomic_load(&old->name));
			uslub_cache_free(sessions, old); /* reused at once: the type stays */
		}
	}
	atomic_store(&done, true);
	pthread_join(r, NULL);
	for (unsigned i = 0; i < SLOTS; i++) {
		struct session *s = atomic_exchange(&table[i], NULL);
		uslub_free_rcu(atomic_load(&s->name));
		uslub_free_rcu(s);
	}
	uslub_rcu_barrier();
	printf("session cache: %zu objects left at destroy\n", uslub_cache_destroy(sessions));
	return bad != 0;
}
