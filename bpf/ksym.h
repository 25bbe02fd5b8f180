/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Layout of the kernel-name lookup (bpf/ksym.bpf.c), mirrored by
 * agent/src/kernel_names.rs; agent/build.rs checks the mirror against
 * the compiled object's BTF.
 */
#ifndef INNOPROF_KSYM_H
#define INNOPROF_KSYM_H

/* Addresses named per run of the program: one map value of ~36 KiB. */
#define KSYM_BATCH 256
/* Longer names come back cut (len says so); kernel names are rarely over
 * 60 bytes. */
#define KSYM_NAME_BYTES 128

struct ksym_slot {
	__u64 addr;
	/* bpf_snprintf's return: the whole text's length with its NUL
	 * (over KSYM_NAME_BYTES: cut), or a negative errno. */
	__s64 len;
	char name[KSYM_NAME_BYTES];
};

struct ksym_batch {
	__u32 count;
	__u32 pad;
	struct ksym_slot slots[KSYM_BATCH];
};

#endif
