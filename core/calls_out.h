/* Calls out of the allocator, counted per thread: every layer makes them, the shared
 * files too (types.c's lock), so this sits beside types.h. uslub_tls_out lives in types.c. */
#ifndef USLUB_CALLS_OUT_H
#define USLUB_CALLS_OUT_H

/* Every call the allocator makes that may sleep in the kernel (a system call, a lock that
 * may wait, liburcu's and the dynamic linker's calls, thread creation) or that runs code
 * not ours (an object cache's constructor, an RCU flavour's calls, libnuma's) is
 * made inside USLUB_OUT, which counts it in the calling thread's uslub_tls_out: so the
 * idle drain can tell a thread parked in a call of its own from one parked inside the
 * allocator (thread/thread.c, "a parked thread's sheaves"). tests/test_layers.py holds
 * every such call in core/ and preload/ to it. */
extern __thread unsigned uslub_tls_out;
static inline void uslub_out_begin(void)
{
	uslub_tls_out++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}
static inline void uslub_out_end(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	uslub_tls_out--;
}
/* The value of `call`, made out; USLUB_OUT_VOID for a call of no value. */
#define USLUB_OUT(call)                                                                            \
	({                                                                                         \
		uslub_out_begin();                                                                 \
		__auto_type out_value_ = (call);                                                   \
		uslub_out_end();                                                                   \
		out_value_;                                                                        \
	})
#define USLUB_OUT_VOID(call)                                                                       \
	do {                                                                                       \
		uslub_out_begin();                                                                 \
		call;                                                                              \
		uslub_out_end();                                                                   \
	} while (0)

#endif
