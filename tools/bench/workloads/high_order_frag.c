/* high_order_frag: message passing on a heap whose free memory is scattered.
 *
 * The load behind SLUB's "don't wait for high-order page allocation" change: first a
 * quarter of the heap is held at random positions (HEAP bytes filled with objects of
 * 64 B .. 32 KiB, then three quarters of them freed at random), so little of the free
 * memory comes in large contiguous runs; then a hackbench-like load runs on top: GROUPS
 * groups of SENDERS senders and RECEIVERS receivers, every sender sending LOOPS messages
 * to every receiver of its group. A message (100 B .. 2 KiB, like the socket buffers
 * hackbench makes the kernel allocate) is allocated by its sender and freed by its
 * receiver. Receivers check each message and count them; the held quarter is checked
 * at the end.
 *
 * Usage: high_order_frag [SCALE]   (heap and loops scale; 4 groups of 4 + 4 threads) */
#include "workload.h"

#include <sys/mman.h>

enum {
	GROUPS = 4,
	SENDERS = 4,
	RECEIVERS = 4,
	LOOPS = 25000,
	BATCH = 32, /* messages handed over per lock of a receiver's queue */
	MSG_MIN = 100,
	MSG_MAX = 2048,
};

#define HEAP ((size_t)512 << 20)

struct msg {
	struct msg *next;
	size_t size;
	uint64_t key;
	unsigned char body[];
};

struct receiver {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct msg *head;
	uint64_t expected, received, sum;
	pthread_t tid;
};

struct sender {
	unsigned group, id;
	pthread_t tid;
	uint64_t sum;
};

static struct receiver receivers[GROUPS][RECEIVERS];
static struct sender senders[GROUPS][SENDERS];
static uint64_t loops;

static void deliver(struct receiver *r, struct msg *first, struct msg *last)
{
	pthread_mutex_lock(&r->lock);
	last->next = r->head;
	r->head = first;
	pthread_cond_signal(&r->more);
	pthread_mutex_unlock(&r->lock);
}

static void *send_all(void *arg)
{
	struct sender *s = arg;
	uint64_t rng = wl_seed(s->group * SENDERS + s->id), serial = 0;
	struct msg *first[RECEIVERS] = {0}, *last[RECEIVERS] = {0};
	unsigned pending[RECEIVERS] = {0};
	for (uint64_t l = 0; l < loops; l++)
		for (unsigned r = 0; r < RECEIVERS; r++) {
			size_t size = wl_range(&rng, MSG_MIN, MSG_MAX);
			struct msg *m = wl_malloc(sizeof(*m) + size);
			m->size = size;
			m->key = ((uint64_t)(s->group * SENDERS + s->id) << 40) | serial++;
			wl_fill(m->body, size, m->key);
			s->sum += m->key;
			m->next = first[r];
			first[r] = m;
			if (last[r] == NULL)
				last[r] = m;
			if (++pending[r] == BATCH) {
				deliver(&receivers[s->group][r], first[r], last[r]);
				first[r] = last[r] = NULL;
				pending[r] = 0;
			}
		}
	for (unsigned r = 0; r < RECEIVERS; r++)
		if (pending[r])
			deliver(&receivers[s->group][r], first[r], last[r]);
	return NULL;
}

static void *receive_all(void *arg)
{
	struct receiver *r = arg;
	while (r->received < r->expected) {
		pthread_mutex_lock(&r->lock);
		while (r->head == NULL)
			pthread_cond_wait(&r->more, &r->lock);
		struct msg *m = r->head;
		r->head = NULL;
		pthread_mutex_unlock(&r->lock);
		while (m != NULL) {
			struct msg *next = m->next;
			wl_check(m->body, m->size, m->key);
			r->sum += m->key;
			r->received++;
			free(m);
			m = next;
		}
	}
	return NULL;
}

struct held {
	void *p;
	uint32_t size;
	uint32_t key;
};

int main(int argc, char **argv)
{
	double scale = wl_scale(argc, argv);
	loops = wl_scaled(LOOPS, scale);

	/* fill the heap, then keep a random quarter of it */
	size_t heap = (size_t)((double)HEAP * (scale < 1.0 ? scale : 1.0));
	size_t cap = heap / 64 + 1;
	struct held *objs = mmap(NULL, cap * sizeof(*objs), PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (objs == MAP_FAILED)
		wl_fail("mmap of the object table failed");
	uint64_t rng = wl_seed(99);
	size_t n = 0, filled = 0, held = 0;
	while (filled < heap && n < cap) {
		objs[n].size = (uint32_t)wl_log_range(&rng, 64, 32 * WL_KIB);
		objs[n].key = (uint32_t)n;
		objs[n].p = wl_malloc(objs[n].size);
		wl_fill(objs[n].p, objs[n].size, objs[n].key);
		filled += objs[n].size;
		n++;
	}
	for (size_t i = 0; i < n; i++) {
		if (wl_rand(&rng) % 4 != 0) {
			free(objs[i].p);
			objs[i].p = NULL;
		} else {
			held += objs[i].size;
		}
	}

	for (unsigned g = 0; g < GROUPS; g++)
		for (unsigned r = 0; r < RECEIVERS; r++) {
			struct receiver *rc = &receivers[g][r];
			pthread_mutex_init(&rc->lock, NULL);
			pthread_cond_init(&rc->more, NULL);
			rc->expected = loops * SENDERS;
			rc->tid = wl_spawn(receive_all, rc);
		}
	for (unsigned g = 0; g < GROUPS; g++)
		for (unsigned s = 0; s < SENDERS; s++) {
			senders[g][s] = (struct sender){.group = g, .id = s};
			senders[g][s].tid = wl_spawn(send_all, &senders[g][s]);
		}
	for (unsigned g = 0; g < GROUPS; g++) {
		uint64_t sent = 0, got = 0;
		for (unsigned s = 0; s < SENDERS; s++) {
			wl_join(senders[g][s].tid);
			sent += senders[g][s].sum;
		}
		for (unsigned r = 0; r < RECEIVERS; r++) {
			wl_join(receivers[g][r].tid);
			got += receivers[g][r].sum;
		}
		if (sent != got)
			wl_fail("group %u: keys sent sum to %" PRIu64 ", received %" PRIu64, g,
				sent, got);
	}

	for (size_t i = 0; i < n; i++)
		if (objs[i].p != NULL) {
			wl_check(objs[i].p, objs[i].size, objs[i].key);
			free(objs[i].p);
		}
	munmap(objs, cap * sizeof(*objs));
	return wl_done("%zu MiB filled, %zu MiB held at random; %" PRIu64 " messages in %d groups",
		       filled >> 20, held >> 20, loops * SENDERS * RECEIVERS * GROUPS, GROUPS);
}
