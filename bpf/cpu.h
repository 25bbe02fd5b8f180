/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Map layouts of the CPU profiler (bpf/cpu.bpf.c). agent/src/cpu/abi.rs
 * mirrors the structs; agent/build.rs reads their layout from the compiled
 * object's BTF and the #defines and enumerators from here, and the build
 * fails where the Rust side differs.
 */
#ifndef INNOPROF_CPU_H
#define INNOPROF_CPU_H

/* perf's default kernel.perf_event_max_stack is 127: the same depth as
 * `perf record -g`. Kernel stacks are short (syscall entry to the
 * scheduler or an interrupt): 64 is plenty. */
#define CPU_USER_DEPTH 127
#define CPU_KERN_DEPTH 64

/* Slots of the unwinder's frame cache per CPU (cpu.bpf.c; a power of two,
 * 2^(64 - FRAME_CACHE_SHIFT)). */
#define FRAME_CACHE_SLOTS 256

/* cpu_stack.flags */
#define CPU_STACK_UNWIND_STOP 1u /* user walk ended early: root frames missing */
#define CPU_STACK_KERN_LOST 2u   /* kernel stack could not be read */
#define CPU_STACK_TRUNCATED 4u   /* user stack deeper than CPU_USER_DEPTH: root frames cut */

/*
 * A whole stack is the hash key: unlike a BPF stack-trace map (a fixed
 * table of hash buckets), two different stacks can never share a slot, so
 * no sample is lost to a bucket collision. Unused entries are zero, so
 * equal stacks give equal keys.
 */
struct cpu_stack {
	__u32 flags;
	__u32 pad;
	/* On-CPU samples of a connection thread: its statement (statement.bpf.h;
	 * 0: none, not a connection, or statements off). In the key rather than
	 * in a separate counter, so that each sample's stack keeps its
	 * statement (the profile's `statement` label); the price is one key
	 * per (stack, statement run), so the map fills sooner on a busy server
	 * (counted, CNT_ONCPU_FULL). Off-CPU stacks leave it 0. */
	__u64 query_id;
	char comm[16]; /* the thread's name, zero-padded */
	__u64 user[CPU_USER_DEPTH]; /* innermost first, zero-terminated */
	__u64 kern[CPU_KERN_DEPTH];
};

struct offcpu_val {
	__u64 count;    /* blocks at or above the threshold */
	__u64 total_ns; /* their summed duration */
};

/* One per thread of the target: when and where it last blocked. */
struct offcpu_start {
	__u64 ts;       /* 0: not blocked (or blocked before we attached) */
	struct cpu_stack stack;
};

/*
 * User stacks are walked here, not with bpf_get_stack: that helper follows
 * frame pointers only, and libc, libstdc++ and much of mysqld are built
 * without them (a thread blocked in futex shows only its libc leaf).
 * Userspace turns the .eh_frame CFI of every mapped file into rows sorted
 * by address; a row holds from its address up to the next row's.
 */
#define UNWIND_CFA 0   /* CFA = (rsp or rbp) + cfa_off; return address at CFA - 8 */
#define UNWIND_FP 1    /* no CFI here: follow the frame pointer */
#define UNWIND_END 2   /* outermost frame (return address undefined) */
#define UNWIND_STOP 3  /* a rule the walker does not implement */
/* A lazy-binding PLT (the one CFI expression compilers emit): CFA = rsp +
 * cfa_off, plus 8 once ip's offset in its 16-byte entry is >= cfa_reg (the
 * entry's `push` has run). cfa_reg holds that threshold for this kind. */
#define UNWIND_PLT 4

#define UNWIND_REG_RSP 0
#define UNWIND_REG_RBP 1

#define UNWIND_RBP_SAME 0x7fff  /* rbp keeps its value in the caller */
#define UNWIND_RBP_UNDEF 0x7ffe /* rbp is not recoverable in the caller */

struct unwind_row {
	__u64 addr;     /* absolute address in the target */
	__s32 cfa_off;
	__s16 rbp_off;  /* caller's rbp saved at CFA + rbp_off, or UNWIND_RBP_* */
	__u8 cfa_reg;
	__u8 kind;
};

/*
 * An index over the rows, so that a frame's search reads a few cache lines
 * instead of one per halving of all the rows (~175,000 for mysqld: 18
 * halvings, each a likely cache miss at a 100 Hz sampler's pace, were most
 * of a sample's cost). Rows close in address form a region; a region is
 * cut into buckets of 2^unwind_shift bytes, and a bucket holds the rows
 * that may cover an address in it: [lo, hi). Addresses outside every
 * region are searched over all the rows, as before.
 */
#define UNWIND_MAX_REGIONS 64

struct unwind_region {
	__u64 start; /* its first bucket's address */
	__u64 end;   /* one past its last bucket's */
	__u32 first; /* its first bucket's index in unwind_buckets */
	__u32 pad;
};

struct unwind_bucket {
	__u32 lo; /* the row covering the bucket's first byte (or 0) */
	__u32 hi; /* one past the last row starting in the bucket */
};

/* Indexes of the per-CPU `cpu_counters` array. */
enum cpu_counter {
	CNT_TICKS = 0,            /* cpu-clock ticks seen, any process */
	CNT_SAMPLES = 1,          /* ticks that landed in the target */
	CNT_UNWIND_STOP = 2,      /* on-CPU samples whose user walk ended early */
	CNT_KERN_LOST = 3,        /* on-CPU samples in kernel mode without a kernel stack */
	CNT_TRUNCATED = 4,        /* on-CPU samples whose user stack was cut */
	CNT_ONCPU_FULL = 5,       /* on-CPU samples lost: stack map full */
	CNT_OFF_BLOCKS = 6,       /* blocks at or above the threshold */
	CNT_OFF_SHORT = 7,        /* blocks below the threshold (not in stacks) */
	CNT_OFF_SHORT_NS = 8,     /* their summed duration */
	CNT_OFF_UNWIND_STOP = 9,  /* counted blocks whose user walk ended early */
	CNT_OFF_FULL = 10,        /* blocks lost: off-CPU stack map full */
	CNT_OFF_START_FULL = 11,  /* blocks lost: per-thread start map full */
	CNT_OFF_PREEMPTED = 12,   /* involuntary switches (runnable, not blocked) */
	CNT_STMT_SAMPLES = 13,    /* on-CPU samples of a connection tied to a statement */
	CNT_CONN_NO_STMT = 14,    /* on-CPU samples of a connection between statements (no query text or THD) */
	CNT_STMT_CPU_FULL = 15,   /* samples not counted per statement: stmt_cpu full */
	CNT_MAX = 16,
};

#endif
