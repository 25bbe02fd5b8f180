/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Map layouts shared by the BPF programs and the Rust loader
 * (agent/src/bpf_abi.rs mirrors the structs; agent/build.rs reads their
 * layout from the compiled object's BTF and the #defines and enumerators
 * from here, and the build fails where the Rust side differs).
 */
#ifndef INNOPROF_H
#define INNOPROF_H

/* log2 buckets of nanoseconds: slot i holds waits in [2^i, 2^(i+1)) ns,
 * slot 0 holds [0, 2). 40 slots reach ~18 minutes. */
#define HIST_SLOTS 40

/* Every attached symbol gets one slot id, passed in the attach cookie. */
#define MAX_SLOTS 4096

/*
 * Attach cookie layout: bits 0-31 slot id; bits 32-35 and 36-39 the
 * 1-based register argument holding the caller's `const char *file` and
 * `unsigned line` (0: the probe has no call-site arguments); bits 40-43
 * the argument pointing to the latch object, 44-55 the latch id's offset
 * in it, 56-59 its size in bytes (0: no latch id); bit 60 set when the
 * slot's `created_at` entry says where the latch object keeps its
 * creation site (rw-locks and MySQL 5.6 mutexes carry no latch id).
 */
#define COOKIE_SLOT(c) ((c) & 0xffffffffULL)
#define COOKIE_FILE_ARG(c) (((c) >> 32) & 0xf)
#define COOKIE_LINE_ARG(c) (((c) >> 36) & 0xf)
#define COOKIE_LATCH_ARG(c) (((c) >> 40) & 0xf)
#define COOKIE_LATCH_OFF(c) (((c) >> 44) & 0xfff)
#define COOKIE_LATCH_SIZE(c) (((c) >> 56) & 0xf)
#define COOKIE_CREATED(c) (((c) >> 60) & 0x1)

/* Where the latch object an argument points to keeps the __FILE__ pointer
 * and __LINE__ of its creation (`rw_lock_t::cfile_name`, `cline`): the
 * line may be a bitfield, read as `line_size` bytes at `line_off`, shifted
 * right by `line_shift` and cut to `line_bits` (0: all bits). */
struct created_field {
	__u32 file_off;
	__u32 line_off;
	__u8 arg;
	__u8 line_size;
	__u8 line_shift;
	__u8 line_bits;
	__u32 pad;
};

struct slot_stats {
	__u64 calls;
	__u64 wait_ns_total;
	__u64 wait_ns_max;
	__u64 hist[HIST_SLOTS];
	__u64 stacks; /* stacks taken: the governor's cost model reads it */
	/* Hits while the slot was switched off, before the kernel detached
	 * it (or while a cut probe's links wait to be dropped): no count, no
	 * time, but the server paid the trap. The cost model charges them. */
	__u64 off_hits;
};

/* A call site: the caller's __FILE__ pointer (a string in the target's
 * memory, read by userspace) and __LINE__, the latch id + 1 read from the
 * object the function was called on, and that object's creation site
 * (__FILE__ pointer and __LINE__). Zero when not captured. */
struct callsite {
	__u64 file;
	__u32 line;
	__u32 latch;
	__u64 created_file;
	__u32 created_line;
	__u32 pad;
};

/* User stack depth kept per stack: 64 frames reach from an InnoDB latch
 * to the thread entry point. */
#define STACK_DEPTH 64

struct stack_key {
	__u64 slot;
	/* Keyed hash of the stack's frames (its key in `stacks`); 0: the
	 * stack could not be captured or stored. */
	__u64 stack_hash;
	struct callsite site;
	/* The role of the thread that took the stack (`thread_role`); 0:
	 * unknown. */
	__u32 role;
	__u32 pad;
};

/* A stack's frames, innermost first, zero after the last. */
struct stack_ips {
	__u64 ips[STACK_DEPTH];
};

/* Per probe slot and CPU: the stack sampler's state (add_stack). */
struct stack_hold {
	/* Every hit that reached the sampler (stacks on), exactly: a slot's
	 * stacks carry weighted samples (see add_stack), which userspace
	 * scales to these totals. */
	__u64 seen_count;
	__u64 seen_wait;
	/* The weight of the stacks whose counter found stack_counts full
	 * (DROP_STACK_KEY_FULL): not in any stack, so not scaled onto those
	 * that are. */
	__u64 lost_count;
	__u64 lost_wait;
	/* The sampler on this CPU (add_stack, stack_sampled): the window of
	 * its unsampled stacks (STACK_FREE_WINDOW_NS) and how many it took;
	 * the hits of the current and the previous tau of time; the stratum
	 * of hits it draws one count stack from (its size, the hits left in
	 * it, the one drawn). */
	__u64 free_start;
	__u64 free_taken;
	__u64 rate_start;
	__u64 rate_hits;
	__u64 rate_prev;
	__u64 stratum_k;
	__u64 stratum_left;
	__u64 stratum_pick;
};

/*
 * Which hits take their stacks (stack_sampled), per slot and CPU:
 * - the first STACK_FREE_PER_WINDOW of every STACK_FREE_WINDOW_NS, at
 *   weight 1: a probe seen a few times a second (a contended rw-lock) is
 *   in its stacks hit for hit, where sampling alone left it 1-3 stacks in
 *   10 s and the role and latch split of one thread (91 points from the
 *   exact table);
 * - for the count, past those: one hit drawn at random from each stratum
 *   of k consecutive hits, weighted k calls, k = the hits of the last tau
 *   of time (so about one stack per tau while hot): each hit is drawn
 *   with probability 1/k, and a caller's hits in a row are counted nearly
 *   exactly. Before, the hits between two stacks rode on the next one
 *   under its labels, so a frequent short waiter carried other threads'
 *   hits;
 * - for the wait, past those: a draw of its own with probability
 *   max(wait/tau, 1/k), weighted wait/p: a wait of tau or more always, a
 *   shorter one in proportion to it, and none standing for more than ~k
 *   hits' wait (on the wait alone, the undo walk's ~2 us waits took
 *   stacks weighted ~500 waits each, and their split was a handful's).
 * A hit drawn by one and not the other adds 0 to the other's weight. Each
 * hit's probability is set before it (by the hits before it and a random
 * draw), so every sum over the stacks (by frames, latch, call site, role,
 * statement) estimates the exact one without bias.
 */
#define STACK_FREE_WINDOW_NS 100000000ull
#define STACK_FREE_PER_WINDOW 5

struct site_key {
	__u64 slot;
	struct callsite site;
	/* The calling thread's role (`thread_role`); 0: unknown. */
	__u32 role;
	__u32 pad;
};

struct site_val {
	__u64 calls;
	__u64 wait_ns_total;
	__u64 wait_ns_max;
};

/* What an entry leaves for its return. */
struct start_val {
	__u64 ts;
	struct callsite site;
	/* The latch's exclusive holder at entry, where the latch records it
	 * (holder_at); holder_tid 0: none. */
	__u32 holder_tid;
	__u32 pad;
	__u64 holder_query_id;
	/* What a release that ends this wait is called on (holder_field
	 * woken); 0: none. */
	__u64 wait_key;
	/* Where the recorded holder took the latch (holder_site_at); 0: not
	 * known. */
	__u64 holder_file;
	__u32 holder_line;
	__u32 holder_how; /* HOLDER_* */
};

struct stack_val {
	__u64 count;
	__u64 wait_ns;
};

struct start_key {
	__u64 pid_tgid;
	__u64 slot;
};

/* Indexes of the `drops` array: everything the BPF side could not record. */
enum drop_reason {
	DROP_STACK_MAP_FULL = 0,  /* stacks map full: a new stack not stored */
	DROP_STACK_ERROR = 1,     /* bpf_get_stack failed */
	DROP_STACK_KEY_FULL = 2,  /* stack_counts map full */
	DROP_START_FULL = 3,      /* in-flight entry map full */
	DROP_MISSED_ENTRY = 4,    /* return seen without its entry */
	DROP_STATS_FULL = 5,      /* slot_stats map full */
	DROP_SITE_FULL = 6,       /* site_stats map full */
	DROP_STACK_BUSY = 7,      /* stack scratch held by a preempted hit on this CPU */
	DROP_THREAD_FULL = 8,     /* thread_stats map full: a hit not tied to its thread */
	DROP_MAX = 9,
};

/* Threads whose role is kept (`thread_role`), and (slot, thread) pairs
 * counted apart (`thread_stats`). */
#define MAX_THREADS 8192
#define MAX_THREAD_SLOTS 65536

/* A thread's role is the role of the marker functions on its first stack
 * (a connection handler, `srv_worker_thread`, ...): userspace writes the
 * markers' address ranges in the target, each with its role (1-based;
 * a lower role wins where a stack holds markers of several), into
 * `role_ranges`; an entry with end 0 ends the list. */
#define MAX_ROLE_RANGES 64

/* `thread_role`'s value: the role id in its low bits. While that is 0 (no
 * marker found yet) the high bits count the walks that found none: a
 * stack is walked again at the thread's next hits, up to ROLE_MAX_TRIES
 * walks, before the thread is kept as unknown. One walk is not enough: a
 * stack caught in code without frame pointers or unwind rows (libc, a
 * plugin) can end early, cleanly and without its marker, and a thread
 * kept unknown from it would never be told again. */
#define ROLE_ID_MASK 0xffff
#define ROLE_TRIES_SHIFT 16
#define ROLE_MAX_TRIES 16

struct role_range {
	__u64 start;
	__u64 end;
	__u32 role;
	__u32 pad;
};

/* Per (slot, thread): who made the calls. `tid` is the kernel's thread id
 * (the low half of pid_tgid). */
struct thread_key {
	__u32 slot;
	__u32 tid;
};

struct thread_val {
	__u64 calls;
	__u64 wait_ns;
	/* Of them, the hits made before the thread's role was known (role_of
	 * gave 0: no marker found yet, or the walk's buffer busy): labelled
	 * unknown in the call-site cells and stacks. Userspace gives them the
	 * role the thread settled on, where that is one role for all of a
	 * slot's (collect::settle_unlabelled). */
	__u64 unlabelled_calls;
	__u64 unlabelled_wait_ns;
};

/* Statements. A connection thread's THD (the server's per-connection
 * object) is found from the thread's TLS at a hit, and its `query_id`
 * read: the statement the hit belongs to. A hit adds to its (query_id,
 * slot) counter; the statement's text is read once per thread and
 * statement, at its first hit, into `stmt_text`. Userspace drains both
 * maps and groups statements by fingerprint. */
#define STMT_TEXT_MAX 512
#define MAX_STMT_KEYS 16384
#define MAX_STMT_TEXTS 8192
#define MAX_HOLDER_KEYS 16384

/* Set by the loader (rodata): where THD lives and what is read in it. */
struct thd_layout {
	__u32 how;          /* 0: off, 1: static TLS, 2: pthread key */
	__u32 conn_size;    /* bytes of the connection id: 4 or 8 */
	__s64 tls_off;      /* 1: THD* at fsbase + tls_off */
	__u64 key_block_off;/* 2: the key's block pointer at fsbase + this */
	__u64 key_data_off; /* 2: THD* at block + this */
	__u64 conn_off;     /* THD + this: the connection (processlist) id */
	__u64 query_id_off; /* THD + this: query_id, 8 bytes */
	__u64 query_off;    /* THD + this: the query text pointer */
	__u64 query_len_off;/* THD + this: its length, 8 bytes */
	__u64 pthread_tid_off;/* glibc's struct pthread + this: the kernel's tid */
};

/* Per slot with a latch that records its exclusive holder: where, in the
 * object the `arg`-th argument points to (rw_lock_t::writer_thread, valid
 * while `recursive` is set). */
struct holder_field {
	__u32 thread_off;
	__u32 valid_off;
	/* woken == WOKEN_BY_MEMBER: the member of the object holding what
	 * the release slow path is called on. */
	__u32 woken_off;
	__u8 arg;
	__u8 valid_size;
	__u8 nonpositive; /* 1: valid while signed and <= 0 (lock_word), not non-zero */
	/* A waiter here may be ended by a release seen at a wake slot: the
	 * releaser is its holder (WOKEN_*; 0: not looked up). */
	__u8 woken;
	/* Non-zero at a wake slot (a release slow path, taken only when
	 * someone waits): the argument holding what the waiters wait on. */
	__u8 waker_arg;
	__u8 pad[3];
};

#define WOKEN_BY_OBJECT 1 /* the release is called on the waiter's object */
#define WOKEN_BY_MEMBER 2 /* on the pointer in its member at woken_off */

/* The last release of a latch (keyed by what the release is called on)
 * that woke waiters: its thread and statement. */
struct waker {
	__u64 ts;
	__u64 query_id;
	__u32 tid;
	__u32 pad;
};

/* A waiter's statement and the holder it waited for (its thread and,
 * for a connection, its statement). */
struct holder_key {
	__u64 waiter_query_id;
	__u64 holder_query_id;
	__u32 slot;
	__u32 holder_tid;
	/* Where the holder took the latch, where the latch records it
	 * (__FILE__ pointer, line); 0: not known. */
	__u64 holder_file;
	__u32 holder_line;
	/* HOLDER_RECORDED: read from the latch at the wait's start;
	 * HOLDER_RELEASED: the thread whose release fell in the wait. */
	__u32 how;
};

#define HOLDER_RECORDED 0
#define HOLDER_RELEASED 1

struct stmt_key {
	__u64 query_id;
	__u32 slot;
	__u32 pad;
};

/* A (statement, slot, latch) triple counted apart in `stmt_latch`: the
 * latch as the call site carries it (its id + 1, or its creation site). */
struct stmt_latch_key {
	__u64 query_id;
	__u64 created_file;
	__u32 slot;
	__u32 latch;
	__u32 created_line;
	__u32 pad;
};

/* A stack counter (stack_counts' key), the statement of the hit that took
 * its stack, and the hits that stack carried (a stack_stmt record). */
struct stack_stmt_rec {
	struct stack_key stack;
	__u64 query_id;
	__u64 count;
	__u64 wait_ns;
};

struct stmt_val {
	__u64 calls;
	__u64 wait_ns;
};

/* The statement a thread ran at its last hit. */
struct stmt_now {
	__u64 thd;
	__u64 query_id;
	/* Without a query_id (THD_NO_QUERY_ID): the text the last id was
	 * given for, and the thread's count of statements so far. */
	__u64 str;
	__u64 len;
	__u64 runs;
};

/* thd_layout.query_id_off when the server's query_id is not known (no
 * DWARF, no accessor): a thread's statements are numbered in BPF, a new
 * one whenever the THD's query text (address or length) changes. */
#define THD_NO_QUERY_ID 0xffffffffffffffffULL

struct stmt_text {
	__u32 tid;
	__u32 len;          /* bytes read into text */
	__u64 conn;
	__u64 full_len;     /* the query's length in the server */
	char text[STMT_TEXT_MAX];
};

/* Index of `stmt_lost`. */
enum stmt_lost_reason {
	STMT_LOST_KEYS_FULL = 0,  /* stmt_stats full: a hit not tied to its statement */
	STMT_LOST_TEXT_FULL = 1,  /* stmt_text full: a statement without text */
	STMT_LOST_NO_THD = 2,     /* a connection's hit whose THD or query_id could not be read */
	STMT_LOST_HOLDERS_FULL = 3, /* holder_stats full: a wait not tied to its holder */
	STMT_LOST_LATCHES_FULL = 4, /* stmt_latch full: a latch hit not tied to its statement */
	STMT_LOST_STACKS_FULL = 5, /* stack_stmt full: a stack's hits not tied to its statement */
	STMT_LOST_MAX = 6,
};

#endif
