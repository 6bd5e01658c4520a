cd /work/main
for i in 1 2 3 4; do for v in old new; do
  build/bench/step/step_bench --json --server_binary=/tmp/zs-server-$v 2>/dev/null | sed "s/^/$v /"
done; done > /tmp/thp_step.txt
