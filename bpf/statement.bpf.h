// SPDX-License-Identifier: GPL-2.0
/*
 * A connection thread's current statement, shared by the wait probes
 * (latency.bpf.c) and the CPU sampler (cpu.bpf.c): both find the THD
 * through the thread's TLS the same way, and a statement first seen by
 * either gets its text read once into the same `stmt_text`. The loader
 * makes the CPU object reuse the latency object's maps declared here
 * (libbpf's reuse_fd before load), so one drain sees every statement and
 * a thread's role found by one program is known to the other.
 *
 * Include after vmlinux.h, the libbpf headers and innoprof.h.
 */
#ifndef INNOPROF_STATEMENT_BPF_H
#define INNOPROF_STATEMENT_BPF_H

#include <bpf/bpf_core_read.h>

#ifndef EEXIST
#define EEXIST 17 /* vmlinux.h carries no errno values */
#endif

/* Per thread: its role, found at its first hits (`role_of`; the value's
 * encoding is in innoprof.h, ROLE_ID_MASK). LRU: `serve`
 * runs for days over a server whose connections come and go, and a full
 * map would make every new thread's every hit walk its stack; an evicted
 * thread that comes back is walked once more. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} thread_role SEC(".maps");

/* The settled role of a `thread_role` value, or -1 while the thread must
 * be walked again (no marker found yet, fewer than ROLE_MAX_TRIES walks). */
static __always_inline int settled_role(const __u32 *known)
{
	if (!known)
		return -1;
	if ((*known & ROLE_ID_MASK) || (*known >> ROLE_TRIES_SHIFT) >= ROLE_MAX_TRIES)
		return *known & ROLE_ID_MASK;
	return -1;
}

/* Keeps what a walk found: its role, or one more walk that found none. */
static __always_inline void keep_role(__u32 tid, const __u32 *known, __u32 found)
{
	__u32 v = found;

	if (!found)
		v = ((known ? *known >> ROLE_TRIES_SHIFT : 0) + 1) << ROLE_TRIES_SHIFT;
	bpf_map_update_elem(&thread_role, &tid, &v, BPF_ANY);
}

/* The marker functions' ranges in the target (see innoprof.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_ROLE_RANGES);
	__type(key, __u32);
	__type(value, struct role_range);
} role_ranges SEC(".maps");

/* One (frame, range) pair of a role search: a return address `ip` inside
 * marker range `idx` makes its role the best so far when it is the first
 * or a lower (more specific) one. For both role searches' bpf_loop steps
 * (latency.bpf.c over a bpf_get_stack copy, cpu.bpf.c over the sample's
 * own walked stack). */
static __always_inline void role_match(__u32 idx, __u64 ip, __u32 *best)
{
	struct role_range *r = bpf_map_lookup_elem(&role_ranges, &idx);

	/* A return address may be one past its call's last byte: inside. */
	if (r && r->end && ip > r->start && ip <= r->end && (!*best || r->role < *best))
		*best = r->role;
}

/* Where a connection's THD is and what is read in it (see innoprof.h);
 * `how` 0 leaves statements off. */
const volatile struct thd_layout thd = {};
/* The role id of client connections (only their hits have statements). */
const volatile __u32 connection_role = 0;

/* Per thread: the statement of its last hit, so that the text is read
 * once per statement, not per hit. Task-local storage: found through the
 * task itself, no hash lookup or LRU update (half the price of an
 * LRU_HASH here, at every connection hit), and freed with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stmt_now);
} stmt_now SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STMT_TEXTS);
	__type(key, __u64);
	__type(value, struct stmt_text);
} stmt_text SEC(".maps");

/* Per statement: the CPU sampler's on-CPU samples of it (cpu.bpf.c
 * counts, userspace takes them with the wait counters, so a statement's
 * samples meet its text in the same drain; the same samples are also in
 * the sampler's stack map, keyed by statement, for the profile's labels).
 * Declared here so that the drain finds it in the latency object, whose
 * map the sampler reuses. Not preallocated: unused without the sampler. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_STMT_KEYS);
	__type(key, __u64);
	__type(value, __u64);
} stmt_cpu SEC(".maps");

/* The text is read here first (it does not fit the BPF stack). Each
 * object keeps its own: a sample (a timer interrupt) may land in the
 * middle of a uprobe's read on the same CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stmt_text);
} stmt_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STMT_LOST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stmt_lost SEC(".maps");

static __always_inline void stmt_lose(__u32 reason)
{
	__u64 *v = bpf_map_lookup_elem(&stmt_lost, &reason);

	if (v)
		(*v)++;
}

/* The thread's THD: a TLS variable (`current_thd`, `THR_THD`) at a fixed
 * offset from the thread pointer, or a pthread key's value (glibc's
 * `pthread_getspecific`, its layout from libc's own `_thread_db_*`
 * descriptors). The thread pointer (fsbase) is read through CO-RE, the
 * only field of the kernel's structs these programs read. */
static __always_inline __u64 thd_of(__u64 tp)
{
	__u64 block = 0, p = 0;

	if (!tp)
		return 0;
	if (thd.how == 1) {
		bpf_probe_read_user(&p, sizeof(p), (void *)(tp + thd.tls_off));
		return p;
	}
	if (thd.how == 2) {
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(tp + thd.key_block_off)) ||
		    !block)
			return 0;
		bpf_probe_read_user(&p, sizeof(p), (void *)(block + thd.key_data_off));
		return p;
	}
	return 0;
}

static __always_inline __u64 current_thd(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return thd_of(BPF_CORE_READ(task, thread.fsbase));
}

/* A statement's text, conn id and thread, read at its first hit. */
static __always_inline void read_statement(__u64 thd_ptr, __u64 query_id, __u32 tid)
{
	struct stmt_text *t;
	__u32 zero = 0;
	__u64 str = 0, len = 0, n;
	long err;

	t = bpf_map_lookup_elem(&stmt_scratch, &zero);
	if (!t)
		return;
	t->tid = tid;
	t->conn = 0;
	t->len = 0;
	bpf_probe_read_user(&t->conn, thd.conn_size == 4 ? 4 : 8, (void *)(thd_ptr + thd.conn_off));
	bpf_probe_read_user(&str, sizeof(str), (void *)(thd_ptr + thd.query_off));
	bpf_probe_read_user(&len, sizeof(len), (void *)(thd_ptr + thd.query_len_off));
	t->full_len = len;
	n = len < STMT_TEXT_MAX ? len : STMT_TEXT_MAX;
	if (str && n > 0 && n <= STMT_TEXT_MAX && !bpf_probe_read_user(t->text, n, (void *)str))
		t->len = n;
	err = bpf_map_update_elem(&stmt_text, &query_id, t, BPF_NOEXIST);
	if (err && err != -EEXIST)
		stmt_lose(STMT_LOST_TEXT_FULL);
}

/* The statement a connection's hit belongs to (its query_id), its text
 * read when the thread is on a statement not seen before; 0: none. */
/* Without a query_id: the thread's statement is numbered here, a new
 * number whenever the THD's query text moves or changes length (ids
 * (tid << 32 | n): unique across threads, never 0). Consecutive runs of
 * one text with no hit between them count as one. */
static __always_inline __u64 statement_by_text(__u64 thd_ptr, __u32 tid)
{
	struct stmt_now *last;
	__u64 str = 0, len = 0, id;

	if (bpf_probe_read_user(&str, sizeof(str), (void *)(thd_ptr + thd.query_off)) ||
	    bpf_probe_read_user(&len, sizeof(len), (void *)(thd_ptr + thd.query_len_off)) ||
	    !str || !len) {
		stmt_lose(STMT_LOST_NO_THD);
		return 0;
	}
	last = bpf_task_storage_get(&stmt_now, bpf_get_current_task_btf(), 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!last)
		return 0;
	if (last->thd == thd_ptr && last->str == str && last->len == len && last->query_id)
		return last->query_id;
	last->runs++;
	id = ((__u64)tid << 32) | (last->runs & 0xffffffff);
	if (!(id & 0xffffffff))
		id |= 1;
	read_statement(thd_ptr, id, tid);
	last->thd = thd_ptr;
	last->str = str;
	last->len = len;
	last->query_id = id;
	return id;
}

static __always_inline __u64 statement_of(__u32 tid, __u32 role)
{
	struct stmt_now now = {}, *last;
	__u64 thd_ptr;

	if (!thd.how || role != connection_role)
		return 0;
	thd_ptr = current_thd();
	if (thd_ptr && thd.query_id_off == THD_NO_QUERY_ID)
		return statement_by_text(thd_ptr, tid);
	if (!thd_ptr ||
	    bpf_probe_read_user(&now.query_id, sizeof(now.query_id), (void *)(thd_ptr + thd.query_id_off)) ||
	    !now.query_id) {
		stmt_lose(STMT_LOST_NO_THD);
		return 0;
	}
	now.thd = thd_ptr;
	last = bpf_task_storage_get(&stmt_now, bpf_get_current_task_btf(), 0,
				    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (last && last->thd == now.thd && last->query_id == now.query_id)
		return now.query_id;
	read_statement(thd_ptr, now.query_id, tid);
	if (last) {
		last->thd = now.thd;
		last->query_id = now.query_id;
	}
	return now.query_id;
}

#endif
