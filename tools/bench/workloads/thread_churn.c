/* thread_churn: threads come and go, each allocating, and their parent frees what they
 * leave behind.
 *
 * BATCH threads at a time are started; each allocates OBJECTS objects (16 B .. 4 KiB),
 * frees half of them itself and leaves the other half to the main thread, then exits.
 * After joining, the main thread checks and frees the leftovers, which belong to the
 * caches of a thread that no longer exists. An allocator with per-thread state pays for
 * setting it up and tearing it down here, and must hand an exited thread's memory on.
 *
 * Usage: thread_churn [SCALE]   (threads scale; 8 at a time) */
#include "workload.h"

enum {
	THREADS = 12000,
	BATCH = 8,
	OBJECTS = 200,
};

struct child {
	uint64_t id;
	pthread_t tid;
	void *p[OBJECTS / 2];
	size_t size[OBJECTS / 2];
};

static void *work(void *arg)
{
	struct child *c = arg;
	uint64_t rng = wl_seed(c->id);
	void *mine[OBJECTS / 2];
	size_t my_size[OBJECTS / 2];
	for (unsigned i = 0; i < OBJECTS / 2; i++) {
		my_size[i] = wl_log_range(&rng, 16, 4096);
		mine[i] = wl_malloc(my_size[i]);
		wl_fill(mine[i], my_size[i], c->id);
		c->size[i] = wl_log_range(&rng, 16, 4096);
		c->p[i] = wl_malloc(c->size[i]);
		wl_check_aligned(c->p[i], c->size[i]);
		wl_fill(c->p[i], c->size[i], c->id);
	}
	for (unsigned i = 0; i < OBJECTS / 2; i++) {
		wl_check(mine[i], my_size[i], c->id);
		free(mine[i]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t threads = wl_scaled(THREADS, wl_scale(argc, argv));
	struct child children[BATCH];
	uint64_t started = 0, left = 0;
	while (started < threads) {
		unsigned n = 0;
		for (; n < BATCH && started < threads; n++) {
			children[n].id = started++;
			children[n].tid = wl_spawn(work, &children[n]);
		}
		for (unsigned i = 0; i < n; i++) {
			wl_join(children[i].tid);
			for (unsigned j = 0; j < OBJECTS / 2; j++) {
				wl_check(children[i].p[j], children[i].size[j], children[i].id);
				free(children[i].p[j]);
				left++;
			}
		}
	}
	return wl_done("%" PRIu64 " threads, %" PRIu64 " objects freed after their thread exited",
		       threads, left);
}
