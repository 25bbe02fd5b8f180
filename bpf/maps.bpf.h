/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Map helpers shared by the BPF programs (as libbpf-tools' maps.bpf.h).
 * Include after vmlinux.h and <bpf/bpf_helpers.h>.
 */
#ifndef INNOPROF_MAPS_BPF_H
#define INNOPROF_MAPS_BPF_H

/* Returns the value for `key`, inserting `init` first if absent; NULL when
 * the map is full. NOEXIST: another CPU may insert the same key meanwhile,
 * and then its value is the one returned. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

#endif
