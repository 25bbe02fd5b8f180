/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Map layouts shared by the BPF programs and the Rust loader
 * (agent/src/bpf_abi.rs mirrors every struct here; keep them in step).
 */
#ifndef INNOPROF_H
#define INNOPROF_H

/* log2 buckets of nanoseconds: slot i holds waits in [2^i, 2^(i+1)) ns,
 * slot 0 holds [0, 2). 40 slots reach ~18 minutes. */
#define HIST_SLOTS 40

/* Every attached symbol gets one slot id, passed as the attach cookie. */
#define MAX_SLOTS 4096

struct slot_stats {
	__u64 calls;
	__u64 wait_ns_total;
	__u64 wait_ns_max;
	__u64 hist[HIST_SLOTS];
};

struct stack_key {
	__u64 slot;
	__s64 stack_id; /* negative: the stack could not be captured */
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
	DROP_STACK_COLLISION = 0, /* stack map bucket held another stack */
	DROP_STACK_ERROR = 1,     /* bpf_get_stackid failed otherwise */
	DROP_STACK_KEY_FULL = 2,  /* stack_counts map full */
	DROP_START_FULL = 3,      /* in-flight entry map full */
	DROP_MISSED_ENTRY = 4,    /* return seen without its entry */
	DROP_STATS_FULL = 5,      /* slot_stats map full */
	DROP_MAX = 6,
};

#endif
