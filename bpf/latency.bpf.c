// SPDX-License-Identifier: GPL-2.0
/*
 * Generic uprobe latency/count programs. One program pair serves every
 * probe: userspace attaches the same programs to many symbols and tells
 * them apart by the attach cookie (a slot id). Everything is aggregated
 * here; nothing per event crosses to userspace.
 *
 * The sections say plain uprobe: the loader makes them uprobe_multi
 * programs (expected attach type BPF_TRACE_UPROBE_MULTI) where the kernel
 * has those links, and attaches them per probe event otherwise.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "innoprof.h"
#include "maps.bpf.h"

#define EEXIST 17 /* vmlinux.h carries no errno values */

#include "statement.bpf.h"

/* Set by the loader before load (rodata): only the target's threads count. */
const volatile __u32 target_tgid = 0;
const volatile __u8 capture_stacks = 1;
/* A slot's stack is taken at most once per this many ns on each CPU (0:
 * every hit): the walk is the dear part of a hit. */
const volatile __u64 stack_interval_ns = 1000000;
/* Key of the stack hash, random per session, so that no target can craft
 * two stacks that merge. */
const volatile __u64 stack_seed = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct start_key);
	__type(value, struct start_val);
} starts SEC(".maps");

/* Per slot, per CPU: an array, so a hit is one lookup and plain
 * increments (no hash, no atomics, no creation on first hit). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct slot_stats);
} stats SEC(".maps");

/* Distinct stacks by keyed hash. Not a stack-trace map: that is a fixed
 * table of buckets where a stack whose bucket another stack holds is lost
 * for the whole recording (a probe's busiest stack, on a bad draw). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory follows distinct stacks */
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct stack_ips);
} stacks SEC(".maps");

/* Where a stack is read into (it does not fit the 512-byte BPF stack).
 * A uprobe program runs with migration, not preemption, disabled: `busy`
 * keeps a hit that preempted another on this CPU out of its buffer. */
struct stack_scratch {
	__u32 busy;
	__u32 pad;
	struct stack_ips stack;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_scratch);
} stack_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct stack_hold);
} stack_hold SEC(".maps");

/* Not preallocated (as `stacks`): a preallocated table of 65,536 entries
 * cost every recording ~5-10 ms of kernel CPU to create and free, for the
 * few thousand a recording fills; an entry is allocated when a stack is
 * first seen, at most once per `stack_interval_ns` per CPU and slot. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct stack_key);
	__type(value, struct stack_val);
} stack_counts SEC(".maps");

/* Not preallocated either: one entry per call site seen. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct site_key);
	__type(value, struct site_val);
} site_stats SEC(".maps");

/* Per slot: 1 while the overhead governor has it on. Detaching a uprobe
 * takes ~100 ms and is serialised in the kernel; this flag switches a slot
 * off at once, so counts match the time it was on exactly. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} enabled SEC(".maps");

/* Per slot: of the stacks the sampler would take past each window's
 * first hits (stack_sampled), take one in N, weighted N (the overhead
 * governor's first lever: the stack walk is the dear part of a hit).
 * 0: no stacks, 1: every one the sampler draws. Counts, totals,
 * histograms and call sites stay exact on every hit, and so do the
 * folded totals: userspace scales the weighted stacks to the hits seen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} stack_every SEC(".maps");

/* Per slot with COOKIE_CREATED: where its latch object keeps its
 * creation site (the cookie has no room for two more offsets). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct created_field);
} created_at SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Per (slot, thread): every hit's calls and wait, so that each can be
 * told by the thread that made it (a client connection or a background
 * role). Exact, like `stats`; no histogram. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREAD_SLOTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct thread_key);
	__type(value, struct thread_val);
} thread_stats SEC(".maps");

/* The buffer a thread's first stack is read into: one like the stack
 * sampler's, its own (that one may be held by a preempted hit). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_scratch);
} role_scratch SEC(".maps");

/* The governor's alarm, per CPU: the hits (counted calls and hits on a
 * slot switched off) this CPU may still take before the governor must
 * look again. The hit that takes the last one wakes it through `wakes`;
 * between alarms it sleeps for up to half a second instead of waking
 * twenty times a second to find nothing changed. 0: disarmed. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} wake_left SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} wakes SEC(".maps");

static __always_inline void spend_alarm(void)
{
	__u32 zero = 0;
	__s64 *left = bpf_map_lookup_elem(&wake_left, &zero);
	__u64 cpu;

	if (!left || *left <= 0)
		return;
	*left -= 1;
	if (*left == 0) {
		cpu = bpf_get_smp_processor_id();
		bpf_ringbuf_output(&wakes, &cpu, sizeof(cpu), BPF_RB_FORCE_WAKEUP);
	}
}

static __always_inline void count_drop(__u32 reason)
{
	__u64 *v = bpf_map_lookup_elem(&drops, &reason);

	if (v)
		(*v)++;
}

static __always_inline bool is_target(__u64 pid_tgid)
{
	return target_tgid == 0 || (pid_tgid >> 32) == target_tgid;
}

/* Whether a slot is switched on. A hit on a slot switched off (after the
 * governor's switch-off, before the kernel's detach) is counted here, for
 * the cost model: it is no call, but the server paid its trap. */
static __always_inline bool slot_on(__u64 slot)
{
	__u32 key = (__u32)slot;
	__u32 *on = bpf_map_lookup_elem(&enabled, &key);
	struct slot_stats *s;

	if (on && *on)
		return true;
	s = bpf_map_lookup_elem(&stats, &key);
	if (s)
		s->off_hits++;
	spend_alarm();
	return false;
}

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;

	/* Unrolled binary search keeps the verifier happy and the cost flat. */
	if (v >= (1ULL << 32)) { v >>= 32; slot += 32; }
	if (v >= (1ULL << 16)) { v >>= 16; slot += 16; }
	if (v >= (1ULL << 8))  { v >>= 8;  slot += 8; }
	if (v >= (1ULL << 4))  { v >>= 4;  slot += 4; }
	if (v >= (1ULL << 2))  { v >>= 2;  slot += 2; }
	if (v >= (1ULL << 1))  { slot += 1; }
	return slot < HIST_SLOTS ? slot : HIST_SLOTS - 1;
}

/* The n-th (1-based) integer argument register of the x86-64 SysV ABI.
 * Read through a helper: a switch over ctx fields compiles to ctx+offset
 * arithmetic, which the verifier refuses on a context pointer. */
static __always_inline __u64 reg_arg(struct pt_regs *ctx, __u32 n)
{
	__u64 off, val = 0;

	switch (n) {
	case 1: off = offsetof(struct pt_regs, di); break;
	case 2: off = offsetof(struct pt_regs, si); break;
	case 3: off = offsetof(struct pt_regs, dx); break;
	case 4: off = offsetof(struct pt_regs, cx); break;
	case 5: off = offsetof(struct pt_regs, r8); break;
	case 6: off = offsetof(struct pt_regs, r9); break;
	default: return 0;
	}
	bpf_probe_read_kernel(&val, sizeof(val), (void *)ctx + off);
	return val;
}

/* The latch id inside the object an argument points to, + 1; 0 when it
 * cannot be read. Only these few bytes of the object are read. */
static __always_inline __u32 read_latch(struct pt_regs *ctx, __u64 cookie)
{
	__u64 obj, size = COOKIE_LATCH_SIZE(cookie), id = 0;

	if (!COOKIE_LATCH_ARG(cookie) || !size)
		return 0;
	obj = reg_arg(ctx, COOKIE_LATCH_ARG(cookie));
	if (!obj || bpf_probe_read_user(&id, sizeof(id), (void *)(obj + COOKIE_LATCH_OFF(cookie))))
		return 0;
	if (size < 8)
		id &= (1ULL << (size * 8)) - 1;
	return id < 0xffffffffULL ? (__u32)id + 1 : 0;
}

/* A (__FILE__ pointer, line) pair stored in a latch object (where it was
 * created, or last locked): two small reads, never anything the pointer
 * points to. False if either read failed. */
static __always_inline bool read_file_line(__u64 obj, struct created_field *f, __u64 *file,
					   __u32 *line_out)
{
	__u64 line = 0;

	if (!obj || bpf_probe_read_user(file, sizeof(*file), (void *)(obj + f->file_off)))
		return false;
	if (f->line_size == 8) {
		if (bpf_probe_read_user(&line, 8, (void *)(obj + f->line_off)))
			return false;
	} else if (f->line_size == 4) {
		if (bpf_probe_read_user(&line, 4, (void *)(obj + f->line_off)))
			return false;
	} else if (f->line_size == 2) {
		if (bpf_probe_read_user(&line, 2, (void *)(obj + f->line_off)))
			return false;
	} else {
		return false;
	}
	line >>= f->line_shift & 63;
	if (f->line_bits && f->line_bits < 64)
		line &= (1ULL << f->line_bits) - 1;
	*line_out = (__u32)line;
	return true;
}

/* The creation site stored in the latch object. */
static __always_inline void read_created(struct pt_regs *ctx, __u64 cookie,
					 struct callsite *site)
{
	__u32 slot = (__u32)COOKIE_SLOT(cookie);
	struct created_field *f;
	__u64 file = 0;
	__u32 line = 0;

	if (!COOKIE_CREATED(cookie))
		return;
	f = bpf_map_lookup_elem(&created_at, &slot);
	if (!f || !f->arg)
		return;
	if (!read_file_line(reg_arg(ctx, f->arg), f, &file, &line))
		return;
	site->created_file = file;
	site->created_line = line;
}

/* Only the pointers are kept: strings are read once, by userspace. */
static __always_inline struct callsite read_site(struct pt_regs *ctx, __u64 cookie)
{
	struct callsite site = {};

	if (COOKIE_FILE_ARG(cookie)) {
		site.file = reg_arg(ctx, COOKIE_FILE_ARG(cookie));
		site.line = (__u32)reg_arg(ctx, COOKIE_LINE_ARG(cookie));
	}
	site.latch = read_latch(ctx, cookie);
	read_created(ctx, cookie, &site);
	return site;
}

static __always_inline void add_site(__u64 slot, struct callsite site, __u32 role, __u64 wait_ns)
{
	struct site_key key = { .slot = slot, .site = site, .role = role };
	struct site_val zero_site = {};
	struct site_val *val;

	if (!site.file && !site.latch && !site.created_file)
		return;
	val = lookup_or_init(&site_stats, &key, &zero_site);
	if (!val) {
		count_drop(DROP_SITE_FULL);
		return;
	}
	__sync_fetch_and_add(&val->calls, 1);
	__sync_fetch_and_add(&val->wait_ns_total, wait_ns);
	/* A lost race here only understates the max by one sample. */
	if (wait_ns > val->wait_ns_max)
		val->wait_ns_max = wait_ns;
}

static __always_inline void add_stats(__u64 slot, __u64 wait_ns, bool timed)
{
	__u32 key = (__u32)slot;
	struct slot_stats *s = bpf_map_lookup_elem(&stats, &key);

	if (!s) {
		/* Only a slot id past the slots the loader sized the map for. */
		count_drop(DROP_STATS_FULL);
		return;
	}
	/* Per-CPU values: plain increments are race-free. */
	s->calls++;
	spend_alarm();
	if (!timed)
		return;
	s->wait_ns_total += wait_ns;
	if (wait_ns > s->wait_ns_max)
		s->wait_ns_max = wait_ns;
	s->hist[log2_slot(wait_ns)]++;
}

struct role_search {
	struct stack_ips *s;
	__u32 best;
};

/* One (frame, range) pair: a bpf_loop callback over every frame times
 * every range (once per thread, so the plain scan is cheap enough). */
static long role_step(__u64 i, void *data)
{
	struct role_search *x = data;
	__u32 frame = i / MAX_ROLE_RANGES, idx = i % MAX_ROLE_RANGES;
	__u64 ip;

	if (frame >= STACK_DEPTH)
		return 1;
	ip = x->s->ips[frame];
	if (!ip)
		return 1;
	role_match(idx, ip, &x->best);
	return 0;
}

/* The thread's role: found by walking its stack against the marker
 * ranges at its first hit, and kept. A walk without a marker is tried
 * again at later hits, up to ROLE_MAX_TRIES (innoprof.h). 0: unknown (no
 * marker yet, or this CPU's buffer held by a preempted hit: then the
 * next hit tries). */
static __always_inline __u32 role_of(void *ctx, __u32 tid)
{
	struct role_search x = {};
	struct stack_scratch *scratch;
	__u32 zero = 0, *known;
	int settled;

	known = bpf_map_lookup_elem(&thread_role, &tid);
	settled = settled_role(known);
	if (settled >= 0)
		return settled;
	scratch = bpf_map_lookup_elem(&role_scratch, &zero);
	if (!scratch || __sync_val_compare_and_swap(&scratch->busy, 0, 1) != 0)
		return 0;
	/* bpf_get_stack zeroes the buffer past the frames it copied. */
	if (bpf_get_stack(ctx, &scratch->stack, sizeof(scratch->stack), BPF_F_USER_STACK) > 0) {
		x.s = &scratch->stack;
		bpf_loop(STACK_DEPTH * MAX_ROLE_RANGES, role_step, &x, 0);
	}
	scratch->busy = 0;
	keep_role(tid, known, x.best);
	return x.best;
}

/* Preallocated: a statement's first hit on a probe creates its entry,
 * and most hits are a statement's first (a commit's redo write, a read's
 * version walk): an allocation per entry cost them ~0.5 µs each. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STMT_KEYS);
	__type(key, struct stmt_key);
	__type(value, struct stmt_val);
} stmt_stats SEC(".maps");

/* Per (statement, slot, latch): which statements wait on which latch.
 * Preallocated, as stmt_stats. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STMT_KEYS);
	__type(key, struct stmt_latch_key);
	__type(value, struct stmt_val);
} stmt_latch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct holder_field);
} holder_at SEC(".maps");

/* Per slot whose latch records where its exclusive holder took it
 * (rw_lock_t::last_x_file_name, last_x_line): where. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct created_field);
} holder_site_at SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_HOLDER_KEYS);
	__type(key, struct holder_key);
	__type(value, struct stmt_val);
} holder_stats SEC(".maps");

/* Per what a release slow path is called on (a latch, or its event): the
 * last release that woke waiters. LRU: a latch no one waits on again is
 * forgotten first. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct waker);
} releases SEC(".maps");

/* At a hit of a wake slot (a release taken only when someone waits): this
 * thread, and its statement, are the holder its waiters waited for. */
static __always_inline void note_release(struct pt_regs *ctx, __u64 slot, __u32 tid, __u64 qid)
{
	__u32 key = (__u32)slot;
	struct holder_field *f = bpf_map_lookup_elem(&holder_at, &key);
	struct waker w = {};
	__u64 on;

	if (!f || !f->waker_arg)
		return;
	on = reg_arg(ctx, f->waker_arg);
	if (!on)
		return;
	w.ts = bpf_ktime_get_ns();
	w.query_id = qid;
	w.tid = tid;
	bpf_map_update_elem(&releases, &on, &w, BPF_ANY);
}

/* At a waiter's return, when its latch recorded no holder at entry: the
 * thread whose release (seen by a wake slot) fell within the wait. */
static __always_inline void woken_holder(struct start_val *held, __u32 self)
{
	struct waker *w;

	if (held->holder_tid || !held->wait_key)
		return;
	w = bpf_map_lookup_elem(&releases, &held->wait_key);
	if (!w || w->ts < held->ts || w->tid == self)
		return;
	held->holder_tid = w->tid;
	held->holder_query_id = w->query_id;
	held->holder_how = HOLDER_RELEASED;
}

/* At a waiter's entry: the latch's exclusive holder, where the latch
 * records it (its thread pointer: glibc's struct pthread), its kernel
 * tid and, for a connection, its statement (text read once, as a hit's);
 * and what a release that ends the wait would be called on. */
static __always_inline void read_holder(struct pt_regs *ctx, __u64 slot, struct start_val *val)
{
	struct holder_field *f;
	struct created_field *site;
	__u32 key = (__u32)slot, tid = 0;
	__u64 obj, valid = 0, tp = 0, self = 0, thd_ptr, qid = 0;

	val->holder_tid = 0;
	val->pad = 0;
	val->holder_query_id = 0;
	val->wait_key = 0;
	val->holder_file = 0;
	val->holder_line = 0;
	val->holder_how = HOLDER_RECORDED;
	f = bpf_map_lookup_elem(&holder_at, &key);
	if (!f || !f->arg)
		return;
	obj = reg_arg(ctx, f->arg);
	if (!obj)
		return;
	if (f->woken == WOKEN_BY_OBJECT)
		val->wait_key = obj;
	else if (f->woken == WOKEN_BY_MEMBER &&
		 bpf_probe_read_user(&val->wait_key, sizeof(val->wait_key), (void *)(obj + f->woken_off)))
		val->wait_key = 0;
	if (!thd.how)
		return;
	if (f->valid_size == 1)
		bpf_probe_read_user(&valid, 1, (void *)(obj + f->valid_off));
	else if (f->valid_size == 4)
		bpf_probe_read_user(&valid, 4, (void *)(obj + f->valid_off));
	else if (f->valid_size == 8)
		bpf_probe_read_user(&valid, 8, (void *)(obj + f->valid_off));
	else
		return;
	if (f->nonpositive) {
		/* Sign-extend the member, then: held while <= 0. */
		if (f->valid_size == 4)
			valid = (__u64)(__s64)(__s32)valid;
		else if (f->valid_size == 1)
			valid = (__u64)(__s64)(__s8)valid;
		valid = (__s64)valid <= 0;
	}
	if (!valid || bpf_probe_read_user(&tp, sizeof(tp), (void *)(obj + f->thread_off)) || !tp)
		return;
	/* A thread pointer points to itself: the x86-64 TLS ABI puts the TCB's
	 * address in its first word (what `mov %fs:0` reads). Anything else
	 * is not a holder: a stale or foreign word, or an object of the same
	 * type outside the class that records one (catalog `holder_in`). */
	if (bpf_probe_read_user(&self, sizeof(self), (void *)tp) || self != tp)
		return;
	if (bpf_probe_read_user(&tid, sizeof(tid), (void *)(tp + thd.pthread_tid_off)) || !tid)
		return;
	/* Itself (a recursive x-lock, or a stale field the flag missed): no edge. */
	if (tid == (__u32)bpf_get_current_pid_tgid())
		return;
	val->holder_tid = tid;
	site = bpf_map_lookup_elem(&holder_site_at, &key);
	if (site && site->line_size &&
	    !read_file_line(obj, site, &val->holder_file, &val->holder_line)) {
		val->holder_file = 0;
		val->holder_line = 0;
	}
	thd_ptr = thd_of(tp);
	/* Without a query_id, the holder's statement number is its own
	 * thread's: the holder is named by thread only. */
	if (thd_ptr && thd.query_id_off != THD_NO_QUERY_ID &&
	    !bpf_probe_read_user(&qid, sizeof(qid), (void *)(thd_ptr + thd.query_id_off)) && qid) {
		val->holder_query_id = qid;
		read_statement(thd_ptr, qid, tid);
	}
}

/* Adds (calls, wait) to `key`'s two counters (a struct stmt_val, or the same
 * layout), inserting them as its value when absent: most statement rows are
 * new (a query id is one execution), and inserting the counted value costs
 * a new row one hash operation after the lookup, where lookup_or_init's
 * insert-then-look-up costs two. Non-zero when the map is full. */
static __always_inline long add_counts(void *map, const void *key, __u64 calls, __u64 wait_ns)
{
	struct stmt_val *val = bpf_map_lookup_elem(map, key);
	struct stmt_val init = { .calls = calls, .wait_ns = wait_ns };
	long err;

	if (!val) {
		err = bpf_map_update_elem(map, key, &init, BPF_NOEXIST);
		if (err != -EEXIST)
			return err;
		/* Another CPU inserted it meanwhile. */
		val = bpf_map_lookup_elem(map, key);
		if (!val)
			return -1;
	}
	__sync_fetch_and_add(&val->calls, calls);
	__sync_fetch_and_add(&val->wait_ns, wait_ns);
	return 0;
}

/* One hit (and its wait) on a statement map's row, created on first use;
 * a full map loses the hit under `lost`. */
static __always_inline void count_stmt_val(void *map, const void *key, __u64 wait_ns, __u32 lost)
{
	if (add_counts(map, key, 1, wait_ns))
		stmt_lose(lost);
}

static __always_inline void add_holder(__u64 slot, __u64 waiter_qid, struct start_val *start,
				       __u64 wait_ns)
{
	struct holder_key key = {
		.waiter_query_id = waiter_qid,
		.holder_query_id = start->holder_query_id,
		.slot = (__u32)slot,
		.holder_tid = start->holder_tid,
		.holder_file = start->holder_file,
		.holder_line = start->holder_line,
		.how = start->holder_how,
	};

	if (start->holder_tid)
		count_stmt_val(&holder_stats, &key, wait_ns, STMT_LOST_HOLDERS_FULL);
}

static __always_inline void add_statement(__u64 slot, __u64 query_id, __u64 wait_ns)
{
	struct stmt_key key = { .query_id = query_id, .slot = (__u32)slot };

	if (query_id)
		count_stmt_val(&stmt_stats, &key, wait_ns, STMT_LOST_KEYS_FULL);
}

/* Adds a statement's hit to its (statement, slot, latch) counter, for a
 * probe whose call site names the latch. */
static __always_inline void add_statement_latch(__u64 slot, __u64 query_id, struct callsite *site,
						__u64 wait_ns)
{
	struct stmt_latch_key key = {
		.query_id = query_id,
		.created_file = site->created_file,
		.slot = (__u32)slot,
		.latch = site->latch,
		.created_line = site->created_line,
	};

	if (query_id && (site->latch || site->created_file))
		count_stmt_val(&stmt_latch, &key, wait_ns, STMT_LOST_LATCHES_FULL);
}

/* Adds a hit to its (slot, thread) counter. */
static __always_inline void add_thread(__u64 pid_tgid, __u64 slot, __u64 wait_ns, __u32 role)
{
	struct thread_key key = { .slot = (__u32)slot, .tid = (__u32)pid_tgid };
	struct thread_val zero = {};
	struct thread_val *val = lookup_or_init(&thread_stats, &key, &zero);

	if (!val) {
		count_drop(DROP_THREAD_FULL);
		return;
	}
	__sync_fetch_and_add(&val->calls, 1);
	__sync_fetch_and_add(&val->wait_ns, wait_ns);
	if (!role) {
		__sync_fetch_and_add(&val->unlabelled_calls, 1);
		__sync_fetch_and_add(&val->unlabelled_wait_ns, wait_ns);
	}
}

/* Adds count and wait to the folded counter of `key`; a full map keeps
 * them in the slot's lost weight. */
static __always_inline void add_folded(struct stack_hold *hold, struct stack_key *key, __u64 count,
				       __u64 wait_ns)
{
	struct stack_val zero_stack = {};
	struct stack_val *val = lookup_or_init(&stack_counts, key, &zero_stack);

	if (!val) {
		count_drop(DROP_STACK_KEY_FULL);
		__sync_fetch_and_add(&hold->lost_count, count);
		__sync_fetch_and_add(&hold->lost_wait, wait_ns);
		return;
	}
	__sync_fetch_and_add(&val->count, count);
	__sync_fetch_and_add(&val->wait_ns, wait_ns);
}

struct hashing {
	struct stack_ips *s;
	__u64 h;
};

/* One frame into the hash; a bpf_loop callback, so the verifier checks it
 * once instead of each of STACK_DEPTH unrolled steps in every program that
 * takes stacks (verifying costs the agent CPU at every start). */
static long hash_step(__u64 i, void *data)
{
	struct hashing *x = data;
	__u64 ip;

	if (i >= STACK_DEPTH)
		return 1;
	ip = x->s->ips[i];
	if (!ip)
		return 1;
	x->h = (x->h ^ ip) * 0xff51afd7ed558ccdULL;
	x->h ^= x->h >> 32;
	return 0;
}

/* A keyed multiply-xorshift over the frames (zero after the last). With
 * 64 bits, two of 32,768 distinct stacks merge with odds ~3e-11. */
static __always_inline __u64 stack_hash(struct stack_ips *s)
{
	struct hashing x = { .s = s, .h = stack_seed ^ 0x9e3779b97f4a7c15ULL };
	__u64 h;

	bpf_loop(STACK_DEPTH, hash_step, &x, 0);
	h = x.h ^ (x.h >> 29);
	return h ? h : 1; /* 0 means lost */
}

/* Reads the user stack into the scratch buffer and stores it; its hash, or
 * 0 when it could not be read or stored. */
static __always_inline __u64 take_stack(void *ctx, struct stack_ips *buf)
{
	long n, err;
	__u64 h;

	/* bpf_get_stack zeroes the buffer past the frames it copied. */
	n = bpf_get_stack(ctx, buf, sizeof(*buf), BPF_F_USER_STACK);
	if (n <= 0) {
		count_drop(DROP_STACK_ERROR);
		return 0;
	}
	h = stack_hash(buf);
	if (bpf_map_lookup_elem(&stacks, &h))
		return h;
	err = bpf_map_update_elem(&stacks, &h, buf, BPF_NOEXIST);
	if (err && err != -EEXIST) {
		count_drop(DROP_STACK_MAP_FULL);
		return 0;
	}
	return h;
}

/* Per stack taken by a hit with a statement: the stack counter, the query
 * id and the hits the stack carried, for the statement drain to sum per
 * (stack, fingerprint). A ring, not a hash: every record is new (a query id
 * is one execution), and a hash insert per stack taken (a 64-byte key
 * hashed and locked) cost ~0.3 µs on every hit that took a stack
 * (scripts/stmtcost.py). Records come at most once per `stack_interval_ns`
 * per CPU and probe; 2 MiB holds ~23,000, drained every second (200 ms
 * when busy). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 21);
} stack_stmt SEC(".maps");

/* A ring carries no type: this puts stack_stmt_rec in the object's BTF, for
 * the build's check of its Rust mirror (as libbpf-tools do for events).
 * Read-only (.rodata, with the settings): a writable global would be a .bss
 * map of its own, one more descriptor for nothing. */
const volatile struct stack_stmt_rec *const volatile unused_stack_stmt_rec = 0;

/* The hits a stack just taken carries, under the statement of the hit that
 * took it (the wait profile's `statement` label): as its stack and role,
 * the sampled hit's statement stands for the hits since the last stack.
 * No wakeup: userspace polls at its drains. */
static __always_inline void add_stack_statement(struct stack_key *key, __u64 query_id,
						__u64 count, __u64 wait_ns)
{
	struct stack_stmt_rec r = {
		.stack = *key,
		.query_id = query_id,
		.count = count,
		.wait_ns = wait_ns,
	};

	if (query_id && bpf_ringbuf_output(&stack_stmt, &r, sizeof(r), BPF_RB_NO_WAKEUP))
		stmt_lose(STMT_LOST_STACKS_FULL);
}

/* A uniform draw in [0, n): the high 32 bits of a 32 x 32 product, so no
 * division and no modulo bias worth the name at n up to 2^32. */
static __always_inline __u64 below(__u64 n)
{
	return ((__u64)bpf_get_prandom_u32() * n) >> 32;
}

/*
 * Whether this hit takes its stack, and its weights if so: *count_w calls
 * (for the folded counts) and *wait_w ns (for the folded waits), either
 * possibly 0; see innoprof.h for the scheme. tau = `stack_interval_ns`
 * (0: every hit's stack, weight 1). *free: one of the window's unsampled
 * stacks, which the governor's thinning (`stack_every`) leaves alone: at
 * most 50 a second per CPU, ~0.004 % of a core, where a thinning of 1 in
 * 1,024 left a cut probe's rare connection waits a handful of stacks.
 */
static __always_inline bool stack_sampled(struct stack_hold *hold, __u64 now, __u64 wait_ns,
					  bool timed, __u64 *count_w, __u64 *wait_w, bool *free)
{
	/* below() draws from 32 bits: tau is at most ~4.3 s. */
	__u64 tau = stack_interval_ns < 0xffffffffULL ? stack_interval_ns : 0xffffffffULL;
	__u64 k;

	*count_w = 1;
	*wait_w = wait_ns;
	if (!tau)
		return true;
	if (now - hold->free_start >= STACK_FREE_WINDOW_NS) {
		hold->free_start = now;
		hold->free_taken = 0;
	}
	if (now - hold->rate_start >= tau) {
		hold->rate_start = now;
		hold->rate_prev = hold->rate_hits;
		hold->rate_hits = 0;
	}
	hold->rate_hits++;
	if (hold->free_taken < STACK_FREE_PER_WINDOW) {
		hold->free_taken++;
		*free = true;
		return true;
	}
	/* The count: one hit of each stratum. */
	if (!hold->stratum_left) {
		k = hold->rate_prev > hold->rate_hits ? hold->rate_prev : hold->rate_hits;
		/* At most 2^31: wait * k stays below 2^63 (wait < tau < 2^32). */
		if (k > 0x7fffffffULL)
			k = 0x7fffffffULL;
		if (!k)
			k = 1;
		hold->stratum_k = k;
		hold->stratum_left = k;
		hold->stratum_pick = below(k);
	}
	*count_w = hold->stratum_pick == hold->stratum_k - hold->stratum_left ? hold->stratum_k : 0;
	hold->stratum_left--;
	/* The wait, drawn apart with p = max(wait/tau, 1/k): a long wait
	 * always, and no stack standing for more than ~k hits' wait. A
	 * count-only hit has none to weigh. */
	k = hold->stratum_k;
	if (!timed)
		*wait_w = wait_ns * *count_w;
	else if (wait_ns >= tau)
		*wait_w = wait_ns;
	else if (wait_ns * k >= tau)
		*wait_w = below(tau) < wait_ns ? tau : 0;
	else
		*wait_w = below(k) ? 0 : wait_ns * k;
	return *count_w || *wait_w;
}

static __always_inline void add_stack(void *ctx, __u64 slot, struct callsite site, __u32 role,
				      __u64 query_id, __u64 wait_ns, bool timed)
{
	struct stack_key key = { .slot = slot, .site = site, .role = role };
	struct stack_scratch *scratch;
	struct stack_hold *hold;
	struct slot_stats *st;
	__u32 skey = (__u32)slot, zero = 0, every;
	__u64 now, count_w, wait_w;
	bool free = false;
	__u32 *n;

	if (!capture_stacks)
		return;
	n = bpf_map_lookup_elem(&stack_every, &skey);
	every = n ? *n : 0;
	if (!every)
		return;
	hold = bpf_map_lookup_elem(&stack_hold, &skey);
	scratch = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!hold || !scratch)
		return;
	/* Atomic: a preempted hit on this CPU may be mid-way. */
	__sync_fetch_and_add(&hold->seen_count, 1);
	__sync_fetch_and_add(&hold->seen_wait, wait_ns);
	if (__sync_val_compare_and_swap(&scratch->busy, 0, 1) != 0) {
		/* Another hit on this CPU is mid-way (it was preempted): this
		 * one goes to the lost stack, so the folded totals still add up. */
		count_drop(DROP_STACK_BUSY);
		add_folded(hold, &key, 1, wait_ns);
		return;
	}
	now = bpf_ktime_get_ns();
	if (!stack_sampled(hold, now, wait_ns, timed, &count_w, &wait_w, &free) ||
	    (!free && every > 1 && bpf_get_prandom_u32() % every)) {
		scratch->busy = 0;
		return;
	}
	if (!free) {
		count_w *= every;
		wait_w *= every;
	}
	key.stack_hash = take_stack(ctx, &scratch->stack);
	st = bpf_map_lookup_elem(&stats, &skey);
	if (st)
		st->stacks++;
	add_folded(hold, &key, count_w, wait_w);
	add_stack_statement(&key, query_id, count_w, wait_w);
	scratch->busy = 0;
}

/* Entry of a timed probe: remember when this thread entered this slot. */
SEC("uprobe")
int lat_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct start_key key;
	struct start_val val;

	if (!is_target(pid_tgid) || !slot_on(COOKIE_SLOT(cookie)))
		return 0;
	key.pid_tgid = pid_tgid;
	key.slot = COOKIE_SLOT(cookie);
	val.site = read_site(ctx, cookie);
	read_holder(ctx, key.slot, &val);
	val.ts = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&starts, &key, &val, BPF_ANY))
		count_drop(DROP_START_FULL);
	return 0;
}

/*
 * Return of a timed probe. The stack is taken here, not at entry: at the
 * return address the caller's frame pointer is back in %rbp, so the frame
 * walk starts at the immediate caller instead of skipping it.
 */
SEC("uretprobe")
int lat_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct start_key key;
	struct start_val *start, held;
	struct callsite site;
	__u64 delta, qid;
	__u32 role;

	if (!is_target(pid_tgid))
		return 0;
	key.pid_tgid = pid_tgid;
	key.slot = COOKIE_SLOT(bpf_get_attach_cookie(ctx));
	start = bpf_map_lookup_elem(&starts, &key);
	if (!start) {
		/* Attached while the call was in flight, or evicted. */
		count_drop(DROP_MISSED_ENTRY);
		return 0;
	}
	delta = bpf_ktime_get_ns() - start->ts;
	site = start->site;
	held = *start;
	bpf_map_delete_elem(&starts, &key);
	woken_holder(&held, (__u32)pid_tgid);
	add_stats(key.slot, delta, true);
	role = role_of(ctx, (__u32)pid_tgid);
	add_thread(pid_tgid, key.slot, delta, role);
	qid = statement_of((__u32)pid_tgid, role);
	add_statement(key.slot, qid, delta);
	add_statement_latch(key.slot, qid, &site, delta);
	add_holder(key.slot, qid, &held, delta);
	add_site(key.slot, site, role, delta);
	add_stack(ctx, key.slot, site, role, qid, delta, true);
	return 0;
}

/* Count-only probe (no sound return point, e.g. an inline site). */
SEC("uprobe")
int count_hit(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct callsite site;
	__u64 qid;
	__u32 role;

	if (!is_target(pid_tgid) || !slot_on(COOKIE_SLOT(cookie)))
		return 0;
	site = read_site(ctx, cookie);
	add_stats(COOKIE_SLOT(cookie), 0, false);
	role = role_of(ctx, (__u32)pid_tgid);
	add_thread(pid_tgid, COOKIE_SLOT(cookie), 0, role);
	qid = statement_of((__u32)pid_tgid, role);
	add_statement(COOKIE_SLOT(cookie), qid, 0);
	add_statement_latch(COOKIE_SLOT(cookie), qid, &site, 0);
	note_release(ctx, COOKIE_SLOT(cookie), (__u32)pid_tgid, qid);
	add_site(COOKIE_SLOT(cookie), site, role, 0);
	add_stack(ctx, COOKIE_SLOT(cookie), site, role, qid, 0, false);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
