#!/bin/bash
set -u
OUT=$1; root=$PWD
source .device/env.sh
export ZEROSTATE_CLIENT_LIB=$root/.device/bin/libzerostate_client.so PYTHONPATH=$root/python PROF_OUT=$OUT/prof
mkdir -p $OUT/prof
timeout 200 python3 .device/profile_step.py --model=llama-1.1b --json --server_bin=.device/bin/zerostate-server --servers=2 --server_threads=6 --accum=1,4 --systems=delayed --rounds=1 --moment_format=MOMENTS_INT8 > $OUT/prof/run.json 2> $OUT/prof/run.log
echo "rc=$?"; tail -5 $OUT/prof/run.log
cd $OUT && gzip prof/*.txt; tar czf prof.tar.gz prof; ls -la prof
