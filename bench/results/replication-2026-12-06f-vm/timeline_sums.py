"""Per primary step: sums sent ahead of / after the decision and the Step's events, from the servers' --timeline files (see timeline.txt)."""
import json, sys, glob, statistics, collections
rows=collections.defaultdict(list)
for path in sys.argv[1:]:
    ev=[json.loads(l) for l in open(path) if l.startswith('{')]
    ev=[e for e in ev if 't_ns' in e]; ev.sort(key=lambda e:e['t_ns'])
    last_end=0; cur=None
    for i,e in enumerate(ev):
        w=e['what']
        if w=='step_begin':
            cur={'k':e['b'],'step':e['a'],'t0':e['t_ns'],'prev_end':last_end,'ahead':0,'after':0}
            # sums ahead since previous step end
            for x in ev[:i]:
                if x['t_ns']>last_end and x['what']=='repl_sum_ahead': cur['ahead']+=1
            folds=[x['t_ns'] for x in ev[:i] if x['t_ns']>last_end and x['what']=='fold_end']
            cur['last_fold']=(max(folds)-cur['t0'])/1e6 if folds else None
            ah=[x['t_ns'] for x in ev[:i] if x['t_ns']>last_end and x['what']=='repl_sum_ahead']
            cur['last_ahead']=(max(ah)-cur['t0'])/1e6 if ah else None
        elif cur is not None:
            t=(e['t_ns']-cur['t0'])/1e6
            if w in ('step_gradients_in','repl_decide','pass_end','repl_lanes_done','repl_applied'): cur[w]=t
            if w=='repl_sum_after': cur['after']+=1; cur['last_after']=t
            if w=='step_end':
                cur['step_end']=t; last_end=e['t_ns']
                if cur['step']>0 and (cur['k']==0 or 'repl_decide' in cur): rows[cur['k']].append(cur)
                cur=None
keys=['last_fold','last_ahead','ahead','after','repl_decide','pass_end','last_after','repl_lanes_done','repl_applied','step_end']
for k in sorted(rows):
    print('k=',k,len(rows[k]))
    for key in keys:
        v=[r[key] for r in rows[k] if r.get(key) is not None]
        if v: print(f'  {key:16s} median {statistics.median(v):8.2f}  min {min(v):8.2f} max {max(v):8.2f}')
print('per-step differences (median):')
for k in (1,2):
    r=[x for x in rows[k] if 'repl_lanes_done' in x and 'repl_applied' in x]
    for a,b in (('pass_end','repl_lanes_done'),('repl_lanes_done','repl_applied'),('repl_applied','step_end'),('pass_end','step_end')):
        v=[x[b]-x[a] for x in r if a in x and b in x]
        print(f'  k{k} {a}->{b}: median {statistics.median(v):.2f} p25 {sorted(v)[len(v)//4]:.2f} p75 {sorted(v)[3*len(v)//4]:.2f}')
