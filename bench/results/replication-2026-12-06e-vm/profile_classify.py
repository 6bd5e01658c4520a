import sys, collections
def load(fn):
    samples=[];head=None;fr=[]
    for line in open(fn):
        line=line.rstrip('\n')
        if not line.strip():
            if head: samples.append((head,fr))
            head=None;fr=[];continue
        if head is None: head=line.split();continue
        p=line.strip().split(None,1); fr.append(p[1] if len(p)>1 else p[0])
    return samples
def cls(h,f):
    comm=h[0]
    if comm=='swapper': return 'idle'
    if comm.startswith('replication_b'): return 'bench(client)'
    s=' '.join(f)
    if not any(c in comm for c in ['grpcpp','zerostate-serve','zs-pass','nexting','default-exec','grpc_global','resolver','civetweb','timer_man']): return 'other procs'
    if 'faultin_page_range' in s or 'PopulateForWrite' in s: return 'srv populate(madvise)'
    if 'ComputeBlock' in s or 'StepLoop' in s: return 'srv pass'
    if '__x64_sys_sendmsg' in s or '__x64_sys_sendto' in s or 'tcp_sendmsg' in s: return 'srv tcp send'
    if '__x64_sys_recvfrom' in s or '__x64_sys_recvmsg' in s or 'tcp_recvmsg' in s: return 'srv tcp recv'
    if 'munmap' in s: return 'srv munmap'
    if 'exc_page_fault' in s: return 'srv page faults'
    if 'memset' in f[0]: return 'srv memset'
    if 'futex' in s or 'finish_task_switch' in s or 'schedule' in s: return 'srv futex/sched'
    if 'Gather' in s: return 'srv gather'
    if 'Push' in s or 'AddPiece' in s or 'Squared' in s or 'StreamChunks' in s or 'FromBf16' in s: return 'srv push/fold'
    if 'softirq' in s or 'net_rx' in s: return 'srv softirq'
    return 'srv other'
for fn in sys.argv[1:]:
    S=load(fn); c=collections.Counter(cls(h,f) for h,f in S); n=len(S)
    print(fn, n, 'samples')
    for k,v in sorted(c.items()): print(f'  {k:26s} {v:5d} {100*v/n:5.1f}%')
