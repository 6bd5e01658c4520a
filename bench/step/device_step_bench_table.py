#!/usr/bin/env python3
"""One table of device_step_bench.sh's figures: a row per step_bench figure,
a column per variant and round (VARIANT.ROUND), each cell value/ratio (the
ratio alone for figures in params/s). Run in the output directory:
    (cd OUT && python3 bench/step/device_step_bench_table.py)
"""
import json,glob,collections,sys
rows=collections.defaultdict(dict)
for f in sorted(glob.glob('*.json')):
    for l in open(f):
        try: o=json.loads(l)
        except: continue
        v,r,name=o['figure'].split('.',2)
        rows[name][f"{v}.{r}"]=(o['value'],o['ratio'])
keys=sorted({k for d in rows.values() for k in d})
want=['part_compute','part_exchange','part_push','part_step','part_gather','step_end_to_end','overlap','step_sum_of_parts','overlap_cores_allow','parts_at_once','overlap_host_allows','overlap_of_what_host_allows','last_step_compute','last_step_exchange','last_step_push','last_step_step','last_step_gather','step_end_to_end_delayed','overlap_delayed','server_optimizer','server_step','server_step_alone','server_step_at_once','speculative_step_end_to_end','speculative_worker_step']
print('%-24s'%'fig'+''.join('%13s'%k for k in keys))
for w in want:
    d=rows.get(w,{})
    print('%-24s'%w+''.join('%13s'%(('%.3f/%.2f'%d[k]) if k in d and d[k][0]<100 else ('-/%.2f'%d[k][1] if k in d else '-')) for k in keys))
