// SPDX-License-Identifier: GPL-2.0
/*
 * Names kernel addresses the way the kernel itself does (%ps: the
 * symbol holding the address, as kallsyms_lookup finds it), so naming the
 * kernel frames of a recording does not need /proc/kallsyms, which the
 * kernel formats in full (~120,000 lines, ~35 ms of its CPU) for each
 * reader. A BPF_PROG_TYPE_SYSCALL program, run by BPF_PROG_TEST_RUN on a
 * batch of addresses written into its one-entry array.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ksym.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ksym_batch);
} ksym_batches SEC(".maps");

struct loop_ctx {
	struct ksym_batch *batch;
};

static long name_one(__u64 i, void *data)
{
	struct loop_ctx *ctx = data;
	struct ksym_slot *slot;
	__u64 args[1];

	if (i >= KSYM_BATCH)
		return 1;
	slot = &ctx->batch->slots[i];
	args[0] = slot->addr;
	slot->len = bpf_snprintf(slot->name, sizeof(slot->name), "%ps", args, sizeof(args));
	return 0;
}

SEC("syscall")
int name_kernel_addrs(void *unused)
{
	__u32 key = 0;
	struct loop_ctx ctx;
	__u32 n;

	ctx.batch = bpf_map_lookup_elem(&ksym_batches, &key);
	if (!ctx.batch)
		return 0;
	n = ctx.batch->count;
	if (n > KSYM_BATCH)
		n = KSYM_BATCH;
	bpf_loop(n, name_one, &ctx, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
