// SPDX-License-Identifier: GPL-2.0
/*
 * CPU profiler of one process:
 *  - on-CPU: a program on the software cpu-clock perf event, opened once
 *    per CPU for all processes (a per-PID event follows one thread only)
 *    and filtered here by tgid, so threads created later are covered;
 *  - off-CPU: sched_switch (tp_btf) records when and where a thread of the
 *    target blocks, and adds the blocked time to that stack when it runs
 *    again.
 * Everything is aggregated in hash maps keyed by the whole stack; userspace
 * reads the totals at the end.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cpu.h"
#include "innoprof.h"
#include "maps.bpf.h"
#include "statement.bpf.h"

#define TASK_RUNNING 0x0000
#define TASK_DEAD 0x0080 /* vmlinux.h carries no #defines */

/* Set by the loader before load (rodata). */
const volatile __u32 target_tgid = 0;
const volatile __u64 min_block_ns = 1000000;
const volatile __u32 unwind_rows_len = 0;
/* Halvings that narrow unwind_rows_len rows to one (at most 24): a known
 * constant, so the verifier walks the search exactly that many times. */
const volatile __u32 unwind_steps = 0;
/* The index over the rows (cpu.h): its regions, their bucket size as a
 * shift, and the halvings that narrow the regions to one and the fullest
 * bucket's rows to one (each known at load, so each search is a loop of
 * known length without branches). */
const volatile __u32 unwind_regions_len = 0;
const volatile __u32 unwind_region_steps = 0;
const volatile __u32 unwind_shift = 0;
const volatile __u32 unwind_bucket_steps = 0;
/* 1: on-CPU stacks are keyed by statement too (see cpu_stack.query_id);
 * 0: statements are counted in stmt_cpu only. */
const volatile __u8 stmt_in_key = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* memory follows distinct stacks */
	__uint(max_entries, 65536);
	__type(key, struct cpu_stack);
	__type(value, __u64);
} oncpu_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct cpu_stack);
	__type(value, struct offcpu_val);
} offcpu_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 32768);
	__type(key, __u32); /* thread id */
	__type(value, struct offcpu_start);
} offcpu_start SEC(".maps");

/* CFI rows of the target's mapped files, sorted by address; the loader
 * sizes the map to the rows it has and writes them through an mmap of it
 * (one memcpy: the kernel copying ~175,000 rows in, batched, took ~40 ms
 * of CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UNWIND_MAX_REGIONS);
	__type(key, __u32);
	__type(value, struct unwind_region);
} unwind_regions SEC(".maps");

/* Written as unwind_rows is, sized at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_bucket);
} unwind_buckets SEC(".maps");

/* Scratch space (a stack key does not fit the 512-byte BPF stack), one
 * per program so neither can clobber the other's. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_stack);
} oncpu_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cpu_counters SEC(".maps");

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&cpu_counters, &idx);

	if (v)
		*v += n; /* per-CPU: no atomics needed */
}

/* Narrows [*lo, *hi) of unwind_rows to the last row starting at or below
 * `addr`, in `steps` halvings without a branch the verifier must follow
 * both ways (a search with branches was 34 ms of the sampler's 38 ms of
 * verification at every start). Once [lo, hi) holds one row, further
 * steps leave lo where it is. */
static __always_inline int narrow_rows(__u64 addr, __u32 *lo, __u32 *hi, __u32 steps)
{
	__u32 l = *lo, h = *hi, mid, above;
	struct unwind_row *row;
	int i;

	for (i = 0; i < steps && i < 24; i++) {
		mid = l + (h - l) / 2;
		row = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!row)
			return -1;
		/* All ones when the row starts above addr (user addresses are
		 * below 2^63). */
		above = (__u32)((__s64)(addr - row->addr) >> 63);
		l = (l & above) | (mid & ~above);
		h = (mid & above) | (h & ~above);
	}
	*lo = l;
	*hi = h;
	return 0;
}

/* The rows an address's bucket holds, as [*lo, *hi); 0 where no region
 * holds the address. */
static __always_inline int bucket_rows(__u64 addr, __u32 *lo, __u32 *hi)
{
	__u32 l = 0, h = unwind_regions_len, mid, above, k;
	struct unwind_region *r;
	struct unwind_bucket *b;
	int i;

	if (!h)
		return 0;
	/* The last region starting at or below addr, as narrow_rows does. */
	for (i = 0; i < unwind_region_steps && i < 8; i++) {
		mid = l + (h - l) / 2;
		r = bpf_map_lookup_elem(&unwind_regions, &mid);
		if (!r)
			return 0;
		above = (__u32)((__s64)(addr - r->start) >> 63);
		l = (l & above) | (mid & ~above);
		h = (mid & above) | (h & ~above);
	}
	r = bpf_map_lookup_elem(&unwind_regions, &l);
	if (!r || addr < r->start || addr >= r->end)
		return 0;
	k = r->first + (__u32)((addr - r->start) >> unwind_shift);
	b = bpf_map_lookup_elem(&unwind_buckets, &k);
	if (!b || b->hi <= b->lo)
		return 0;
	*lo = b->lo;
	*hi = b->hi;
	return 1;
}

/* The row covering `addr`: the last one starting at or below it. */
static __always_inline struct unwind_row *find_row(__u64 addr)
{
	__u32 lo = 0, hi = unwind_rows_len;
	struct unwind_row *row;
	int err;

	if (!hi)
		return NULL;
	if (bucket_rows(addr, &lo, &hi))
		err = narrow_rows(addr, &lo, &hi, unwind_bucket_steps);
	else
		err = narrow_rows(addr, &lo, &hi, unwind_steps);
	if (err)
		return NULL;
	row = bpf_map_lookup_elem(&unwind_rows, &lo);
	if (!row || row->addr > addr)
		return NULL;
	return row;
}

/* Per CPU, the row last found for each return address, in a direct-mapped
 * table of FRAME_CACHE_SLOTS (cpu.h) per CPU: a server's return
 * addresses repeat from sample to sample (its threads sit in the same few
 * hundred calls: 3 in 4 frames of MariaDB 10.2.11 under oltp_read_write
 * hit), and at a 99 Hz sampler's pace the index and the rows a search
 * reads are cold at each sample (a search was ~600 ns a frame, most of a
 * sample's walk). One plain array, each CPU's slots adjacent (6 KiB: a
 * per-CPU array places every element apart, a page walk each), sized by
 * the loader to the possible CPUs. The rows never change while the
 * profiler runs, so an entry holds until another address takes its slot.
 * Only the perf_event program and the switch program (irqs off, in the
 * scheduler) use it, and neither interrupts the other on its CPU. */
#define FRAME_CACHE_SHIFT 56 /* 64 - log2(FRAME_CACHE_SLOTS) */
_Static_assert(1ULL << (64 - FRAME_CACHE_SHIFT) == FRAME_CACHE_SLOTS, "frame cache shift");
/* Set by the loader (the possible CPUs, the array sized to match). */
const volatile __u32 frame_cache_cpus = 1;

struct frame_cache_entry {
	__u64 ip; /* 0: empty */
	struct unwind_row row;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FRAME_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct frame_cache_entry);
} frame_cache SEC(".maps");

/* find_row through the cache. An address with no row is kept as a
 * frame-pointer row, which the walk treats as it treats no row. */
static __always_inline struct unwind_row *cached_row(__u64 addr)
{
	__u32 k = (__u32)((addr * 0x9e3779b97f4a7c15ULL) >> FRAME_CACHE_SHIFT) +
		  (bpf_get_smp_processor_id() % frame_cache_cpus) * FRAME_CACHE_SLOTS;
	struct frame_cache_entry *e = bpf_map_lookup_elem(&frame_cache, &k);
	struct unwind_row *row;

	if (!e)
		return find_row(addr);
	if (e->ip == addr)
		return &e->row;
	row = find_row(addr);
	if (row) {
		e->row = *row;
	} else {
		__builtin_memset(&e->row, 0, sizeof(e->row));
		e->row.kind = UNWIND_FP;
	}
	e->ip = addr;
	return &e->row;
}

struct walk {
	struct cpu_stack *stack;
	__u64 ip, sp, bp;
	__u32 n;
	__u32 flags;
};

/* One frame: record ip, then find the caller's ip, sp and rbp. Returns 1
 * to end the walk. */
static long walk_step(__u64 i, void *data)
{
	struct walk *w = data;
	struct unwind_row *row;
	__u64 ret = 0, cfa, frame[2];
	__u32 n = w->n;

	if (n >= CPU_USER_DEPTH) {
		w->flags |= CPU_STACK_TRUNCATED;
		return 1;
	}
	w->stack->user[n] = w->ip;
	w->n = n + 1;
	/* Above the first frame ip is a return address: look it up inside the
	 * call instruction, which may be the last of its CFI row. The first
	 * frame is wherever the thread was: too many addresses to cache. */
	row = n ? cached_row(w->ip - 1) : find_row(w->ip);
	if (!row || row->kind == UNWIND_FP) {
		if (!w->bp)
			return 1; /* end of the frame-pointer chain */
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->bp)) {
			w->flags |= CPU_STACK_UNWIND_STOP;
			return 1;
		}
		ret = frame[1];
		w->sp = w->bp + 16;
		/* Frames only move up the stack: anything else is not a chain. */
		w->bp = frame[0] > w->bp ? frame[0] : 0;
	} else if (row->kind == UNWIND_CFA) {
		cfa = (row->cfa_reg == UNWIND_REG_RBP ? w->bp : w->sp) + (__s64)row->cfa_off;
		if (row->rbp_off == -16) {
			/* The usual prologue (push rbp right after the call): the
			 * saved rbp and the return address are adjacent, one read. */
			if (bpf_probe_read_user(frame, sizeof(frame), (void *)(cfa - 16))) {
				w->flags |= CPU_STACK_UNWIND_STOP;
				return 1;
			}
			w->bp = frame[0];
			ret = frame[1];
			w->sp = cfa;
			goto next;
		}
		if (row->rbp_off == UNWIND_RBP_UNDEF) {
			w->bp = 0;
		} else if (row->rbp_off != UNWIND_RBP_SAME &&
			   bpf_probe_read_user(&w->bp, sizeof(w->bp), (void *)(cfa + (__s64)row->rbp_off))) {
			w->flags |= CPU_STACK_UNWIND_STOP;
			return 1;
		}
		if (bpf_probe_read_user(&ret, sizeof(ret), (void *)(cfa - 8))) {
			w->flags |= CPU_STACK_UNWIND_STOP;
			return 1;
		}
		w->sp = cfa;
	} else if (row->kind == UNWIND_PLT) {
		cfa = w->sp + (__s64)row->cfa_off + ((w->ip & 15) >= row->cfa_reg ? 8 : 0);
		if (bpf_probe_read_user(&ret, sizeof(ret), (void *)(cfa - 8))) {
			w->flags |= CPU_STACK_UNWIND_STOP;
			return 1;
		}
		w->sp = cfa;
	} else if (row->kind == UNWIND_END) {
		return 1;
	} else {
		w->flags |= CPU_STACK_UNWIND_STOP;
		return 1;
	}
next:
	if (!ret)
		return 1;
	w->ip = ret;
	return 0;
}

/* Fills stack->user from the user registers; returns its flags. */
static __always_inline __u32 walk_user(struct cpu_stack *stack, __u64 ip, __u64 sp, __u64 bp)
{
	struct walk w = { .stack = stack, .ip = ip, .sp = sp, .bp = bp };

	__builtin_memset(stack->user, 0, sizeof(stack->user));
	/* One more step than frames, to notice a stack deeper than kept. */
	bpf_loop(CPU_USER_DEPTH + 1, walk_step, &w, 0);
	return w.flags;
}

struct role_search {
	struct cpu_stack *s;
	__u32 best;
};

/* One (frame, range) pair, as latency.bpf.c's role_step but over the
 * sample's own walked user stack (no second walk). */
static long role_step(__u64 i, void *data)
{
	struct role_search *x = data;
	__u32 frame = i / MAX_ROLE_RANGES, idx = i % MAX_ROLE_RANGES;
	__u64 ip;

	if (frame >= CPU_USER_DEPTH)
		return 1;
	ip = x->s->user[frame];
	if (!ip)
		return 1;
	role_match(idx, ip, &x->best);
	return 0;
}

/* The sampled thread's role: the one the wait probes found (the map is
 * theirs, shared), else found here from this sample's stack against the
 * same marker ranges, and kept for both. A stack whose walk was cut may
 * lack its marker: then nothing is kept, and the next sample tries again;
 * a whole walk without one counts as one of the thread's ROLE_MAX_TRIES. */
static __always_inline __u32 sample_role(__u32 tid, struct cpu_stack *stack, __u32 flags)
{
	struct role_search x = { .s = stack };
	__u32 *known = bpf_map_lookup_elem(&thread_role, &tid);
	int settled = settled_role(known);

	if (settled >= 0)
		return settled;
	bpf_loop(CPU_USER_DEPTH * MAX_ROLE_RANGES, role_step, &x, 0);
	if (x.best || !(flags & (CPU_STACK_UNWIND_STOP | CPU_STACK_TRUNCATED)))
		keep_role(tid, known, x.best);
	return x.best;
}

/* The statement a sample of a connection thread belongs to, found as a
 * wait probe's hit finds it (statement_of: the THD through the thread's
 * TLS, its query_id, the text read once into the shared stmt_text), and
 * its sample counted per statement. 0: statements off (the loader sets
 * `thd` only when it shares the wait probes' maps), not a connection, or
 * none readable. A handful of user-memory reads per sample: cheap at
 * ~100 samples a second per CPU. */
static __always_inline __u64 sample_statement(__u32 tid, struct cpu_stack *stack, __u32 flags)
{
	__u64 id, one = 0, *n, thd_ptr, len = 0;

	if (!thd.how || !connection_role)
		return 0;
	if (sample_role(tid, stack, flags) != connection_role)
		return 0;
	/* Only while the THD holds a query text. Between statements (the
	 * server empties it at a statement's end) and at a statement's start
	 * (its query_id set before its text), statement_of would tie the
	 * sample to an id whose text is read empty, and that empty text
	 * would stay the id's for every later hit of it. A wait probe rarely
	 * fires in those windows; a sample lands anywhere. */
	thd_ptr = current_thd();
	if (!thd_ptr ||
	    bpf_probe_read_user(&len, sizeof(len), (void *)(thd_ptr + thd.query_len_off)) || !len) {
		count(CNT_CONN_NO_STMT, 1);
		return 0;
	}
	id = statement_of(tid, connection_role);
	if (!id) {
		count(CNT_CONN_NO_STMT, 1);
		return 0;
	}
	count(CNT_STMT_SAMPLES, 1);
	n = lookup_or_init(&stmt_cpu, &id, &one);
	if (!n) {
		count(CNT_STMT_CPU_FULL, 1);
		return id;
	}
	__sync_fetch_and_add(n, 1);
	return id;
}

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 zero = 0, flags;
	struct cpu_stack *key;
	struct pt_regs *regs;
	__u64 *val, one = 0;

	count(CNT_TICKS, 1);
	/* tgid 0 is the idle task: never a target. */
	if (!target_tgid || (__u32)(pid_tgid >> 32) != target_tgid)
		return 0;
	count(CNT_SAMPLES, 1);

	key = bpf_map_lookup_elem(&oncpu_scratch, &zero);
	if (!key)
		return 0;
	key->pad = 0;
	/* Zero-padded (strscpy_pad): equal names give equal keys. */
	bpf_get_current_comm(key->comm, sizeof(key->comm));
	/* x86-64: kernel addresses have the top bit set. */
	if (!(ctx->regs.ip >> 63)) {
		/* User mode was interrupted: its registers are the sample's, and
		 * there is no kernel part. */
		flags = walk_user(key, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp);
		__builtin_memset(key->kern, 0, sizeof(key->kern));
	} else {
		regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		flags = walk_user(key, regs->ip, regs->sp, regs->bp);
		if (bpf_get_stack(ctx, key->kern, sizeof(key->kern), 0) < 0) {
			flags |= CPU_STACK_KERN_LOST;
			count(CNT_KERN_LOST, 1);
		}
	}
	if (flags & CPU_STACK_UNWIND_STOP)
		count(CNT_UNWIND_STOP, 1);
	if (flags & CPU_STACK_TRUNCATED)
		count(CNT_TRUNCATED, 1);
	key->flags = flags;
	key->query_id = sample_statement((__u32)pid_tgid, key, flags);
	if (!stmt_in_key)
		key->query_id = 0;

	val = lookup_or_init(&oncpu_counts, key, &one);
	if (!val) {
		count(CNT_ONCPU_FULL, 1);
		return 0;
	}
	__sync_fetch_and_add(val, 1);
	return 0;
}

/* A target thread leaves the CPU: if it blocks, remember when and where. */
static __always_inline void switch_out(void *ctx, struct task_struct *prev)
{
	__u32 tid = prev->pid, zero = 0, flags;
	unsigned int state = prev->__state;
	struct offcpu_start *s, *init;
	struct pt_regs *regs;

	if (state == TASK_RUNNING) {
		/* Preempted while runnable: waiting for a CPU, not blocked. */
		count(CNT_OFF_PREEMPTED, 1);
		s = bpf_map_lookup_elem(&offcpu_start, &tid);
		if (s)
			s->ts = 0;
		return;
	}
	if (state & TASK_DEAD) {
		bpf_map_delete_elem(&offcpu_start, &tid);
		return;
	}
	init = bpf_map_lookup_elem(&offcpu_zero, &zero);
	if (!init)
		return;
	s = lookup_or_init(&offcpu_start, &tid, init);
	if (!s) {
		count(CNT_OFF_START_FULL, 1);
		return;
	}
	s->ts = 0;
	s->stack.pad = 0;
	s->stack.query_id = 0;
	/* prev is still current here. */
	bpf_get_current_comm(s->stack.comm, sizeof(s->stack.comm));
	/* prev is still current: its user registers are saved at kernel entry. */
	regs = (struct pt_regs *)bpf_task_pt_regs(prev);
	flags = walk_user(&s->stack, regs->ip, regs->sp, regs->bp);
	if (bpf_get_stack(ctx, s->stack.kern, sizeof(s->stack.kern), 0) < 0)
		flags |= CPU_STACK_KERN_LOST;
	s->stack.flags = flags;
	/* Stamped last: a half-written entry is never read as blocked. */
	s->ts = bpf_ktime_get_ns();
}

/* A target thread runs again: its blocked time goes to its stack. */
static __always_inline void switch_in(struct task_struct *next)
{
	__u32 tid = next->pid;
	struct offcpu_start *s = bpf_map_lookup_elem(&offcpu_start, &tid);
	struct offcpu_val *v, zero = {};
	__u64 delta;

	if (!s || !s->ts)
		return; /* blocked before we attached, or was preempted */
	delta = bpf_ktime_get_ns() - s->ts;
	s->ts = 0;
	if (delta < min_block_ns) {
		count(CNT_OFF_SHORT, 1);
		count(CNT_OFF_SHORT_NS, delta);
		return;
	}
	v = lookup_or_init(&offcpu_counts, &s->stack, &zero);
	if (!v) {
		count(CNT_OFF_FULL, 1);
		return;
	}
	count(CNT_OFF_BLOCKS, 1);
	if (s->stack.flags & CPU_STACK_UNWIND_STOP)
		count(CNT_OFF_UNWIND_STOP, 1);
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, delta);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (!target_tgid)
		return 0;
	if (prev->tgid == target_tgid)
		switch_out(ctx, prev);
	if (next->tgid == target_tgid)
		switch_in(next);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
