"""Per job-step spans of replication_bench from the servers' --timeline files (see timeline.txt)."""
import json, sys, statistics, collections
ev=[]
for path in sys.argv[1:]:
    for l in open(path):
        if l.startswith('{'):
            e=json.loads(l)
            if 't_ns' in e: ev.append(e)
ev.sort(key=lambda e:e['t_ns'])
# job-steps in time order: group step_begin events (first 3 per (step,k))
seen=collections.Counter(); js=[]
for e in ev:
    if e['what']=='step_begin':
        key=(e['a'],e['b'])
        if seen[key]<3:
            seen[key]+=1
            if seen[key]==1: js.append({'key':key,'begins':[],'ends':[]})
            [j for j in js if j['key']==key][-1]['begins'].append(e['t_ns'])
ends=collections.defaultdict(list)
for e in ev:
    if e['what']=='step_end': ends[(e['a'])].append(e['t_ns'])
# assign step_end: the first 3 step_end with same step after its begin
for j in js:
    b=min(j['begins']); cand=[t for t in ends[j['key'][0]] if t>=b]
    j['T_end']=sorted(cand)[:3][-1] if len(cand)>=3 else None
    j['T_begin']=b
out=collections.defaultdict(lambda: collections.defaultdict(list))
for i,j in enumerate(js):
    start=js[i-1]['T_end'] if i>0 else 0
    nxt=js[i+1]['T_begin'] if i+1<len(js) else 1e30
    folds=[e['t_ns'] for e in ev if start<e['t_ns']<j['T_begin'] and e['what'].startswith('fold_')]
    if not folds or j['T_end'] is None: continue
    nf=[e['t_ns'] for e in ev if j['T_end']<e['t_ns']<nxt and e['what'].startswith('fold_')]
    gend=min(nf) if nf else nxt
    g=[e['t_ns'] for e in ev if j['T_end']<e['t_ns']<gend and e['what']=='gather_piece']
    if j['key'][0]==0 or not g: continue
    k=j['key'][1]; o=out[k]
    o['first_fold->last_fold'].append((max(folds)-min(folds))/1e6)
    o['last_fold->step_begin'].append((j['T_begin']-max(folds))/1e6)
    o['step_begin->step_end'].append((j['T_end']-j['T_begin'])/1e6)
    o['step_end->last_gather'].append((max(g)-j['T_end'])/1e6)
    o['first_fold->last_gather'].append((max(g)-min(folds))/1e6)
for k in sorted(out):
    print('k',k, ' '.join(f"{n}={statistics.median(v):.1f}" for n,v in out[k].items()), len(out[k]['step_begin->step_end']))
