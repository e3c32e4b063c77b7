#!/bin/bash
# `kdbert compress` on the five local GLUE tasks at a GPU budget, in one call of a GPU machine that
# has no network and no ../shared: the CPU searches' protocol (teachers fine-tuned at the CPU budget
# without the held-out rows, augmented BiLSTM twins, GloVe 50d, target 8x on SST-2 and 4x
# elsewhere), with training on the GPU in bf16. Candidates are still timed on the machine's CPU
# (ONNX Runtime int8, one thread). The five tasks run side by side, each as soon as its teacher is
# fine-tuned; each search is killed at the deadline, so a task that runs out of time records nothing.
#
# Here (with ../shared):
#   python benchmarks/gpu_bundle.py --output-dir runs/carry-h200 --corpus-mb 0 \
#       --word-vectors ../shared/data/glove/glove.6B.50d.txt.gz --nltk-data ../shared/data/nltk_data
#   tar czf runs/carry-h200.tgz -C runs carry-h200
# There (runs/carry-h200.tgz carried; NLTK as a wheel where it is missing):
#   bash benchmarks/gpu_compress.sh BUDGET_MINUTES DEADLINE_SECONDS RESULTS_DIR [TASKS...]
# ($BATCH_SIZE sets the token-level candidates' batch size: default 32, as on the CPU.)
# Records: RESULTS_DIR/compress.json (keys <task>/x<target>-aug-held-out-teacher) and
# RESULTS_DIR/teacher_glue.json; runs under runs/gpu/, logs under runs/logs-gpu/.
budget=$1; deadline=$2; results=$3; shift 3
tasks=${*:-cola sst2 mrpc stsb rte}
export KDBERT_MIXED_PRECISION=${KDBERT_MIXED_PRECISION-bf16} PYTHONUNBUFFERED=1 KDBERT_RESULTS_DIR=$results
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
python=${PYTHON:-python3}
[ -d runs/carry-h200 ] || tar xzf runs/carry-h200.tgz -C runs || exit
carry=runs/carry-h200
mkdir -p runs/logs-gpu "$results"
nvidia-smi -L 2>/dev/null; lscpu | grep -E "Model name|^CPU\(s\)"
for task in $tasks; do
  target=4; [ "$task" = sst2 ] && target=8
  ( OMP_NUM_THREADS=1 $python benchmarks/teacher_glue.py --budget cpu --tasks "$task" --held-out-fraction 0.1 \
      --model $carry/teacher --data-dir $carry/glue_data --runs-dir runs/gpu > runs/logs-gpu/teacher-$task.log 2>&1 \
      || { echo "teacher $task: failed"; exit 1; }
    echo "teacher $task: ready at ${SECONDS}s"
    OMP_NUM_THREADS=1 timeout $((deadline - SECONDS)) $python benchmarks/bench_compress.py --task "$task" \
      --target-speedup $target --threads 1 --budget-minutes "$budget" --rounds 8 --first-steps 300 \
      --intermediate-share 0 --batch-size "${BATCH_SIZE:-32}" --augment bilstm --nltk-data $carry/nltk_data \
      --word-vectors $carry/word_vectors.txt.gz \
      --teacher runs/gpu/teacher-$task-held_out_fraction0.1 --data-dir $carry/glue_data \
      --key-suffix=-aug-held-out-teacher --output-dir runs/gpu/compress-$task-x$target \
      > runs/logs-gpu/compress-$task.log 2>&1
    echo "compress $task: exit $? at ${SECONDS}s" ) &
done
wait
