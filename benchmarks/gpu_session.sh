#!/bin/bash
# One GPU-machine session: the MobileBERT GPU driver (mobilebert_gpu.py) and, as soon as each task's
# teacher is fine-tuned, `kdbert compress` on that task (bench_compress.py; target 8x on SST-2, 4x
# elsewhere), all side by side on one GPU. Candidates are timed on the machine's CPU (one ONNX
# Runtime thread), beside the training jobs. Both resume when run again on the same machine.
#
# Here (with ../shared):      python benchmarks/gpu_bundle.py --output-dir runs/carry
# There (runs/carry carried): bash benchmarks/gpu_session.sh DEADLINE_SECONDS BUDGET_MINUTES SEEDS...
# Records: benchmarks/results/gpu-h100/compress.json and benchmarks/results/gpu-h100/mobilebert/;
# logs: runs/logs-gpu/.
deadline=$1; budget=$2; shift 2
export KDBERT_MIXED_PRECISION=bf16 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src
results=benchmarks/results/gpu-h100
mkdir -p runs/logs-gpu
nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)"
python3 benchmarks/mobilebert_gpu.py --data-dir runs/carry/glue_data --corpus runs/carry/corpus.txt.gz \
  --teacher runs/carry/teacher --results-dir $results --seeds "$@" --deadline "$deadline" > runs/logs-gpu/mb.log 2>&1 &
driver=$!
for task in cola sst2 mrpc stsb rte; do
  target=4; [ $task = sst2 ] && target=8
  ( while [ ! -f runs/gpu-mb/teacher-$task/metrics.json ]; do sleep 3; kill -0 $driver 2>/dev/null || exit; done
    KDBERT_RESULTS_DIR=$results OMP_NUM_THREADS=1 timeout $((deadline - SECONDS + 5)) python3 benchmarks/bench_compress.py \
      --task $task --target-speedup $target --threads 1 --budget-minutes "$budget" --word-vectors '' \
      --teacher runs/gpu-mb/teacher-$task --data-dir runs/carry/glue_data --output-dir runs/gpu-compress-$task-x$target \
      > runs/logs-gpu/compress-$task.log 2>&1; echo "compress $task: exit $?" ) &
done
wait
tail -25 runs/logs-gpu/mb.log
