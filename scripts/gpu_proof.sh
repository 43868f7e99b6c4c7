#!/usr/bin/env bash
# GPU proof runs and benchmarks on an H200 machine (NPROC GPUs, default: all it has), one stage
# per argument:
#   scripts/gpu_proof.sh OUTDIR matmul_peak one_rank_test ckpt_io sft_test sft_proof sft_bench
#                        grpo_proof rollout_test rollout_bench mcore_fixtures lora_test lora_bench
# Each stage logs to OUTDIR/<stage>.log and the script goes on to the next one if a stage
# fails. Needs megatron-fsdp importable (PYTHONPATH) and this repo as the working dir.
set -u
out=$1; shift
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# `mfsdp` without installing the package; prints wall time and peak RSS of the command.
mfsdp() { python3 -c 'from cli.main import main; main()' "$@"; }
mfsdp_timed() {
  python3 -c 'import resource, subprocess, sys, time
start = time.time()
code = subprocess.call([sys.executable, "-c", "from cli.main import main; main()", *sys.argv[1:]])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
print(f"wall {time.time() - start:.1f} s, peak RSS {peak:.2f} GiB")
sys.exit(code)' "$@"
}
runs=${RUNS_DIR:-/root/mfsdp_runs}
nproc=${NPROC:-$(nvidia-smi -L | wc -l)}

stage_ckpt_io() {  # quick check of every row: CKPT_IO_ARGS="--shape tiny --threads 2"
  torchrun --nproc-per-node "$nproc" bench/ckpt_io.py --dir "$runs/ckpt_bench" ${CKPT_IO_ARGS:-}
}

stage_sft_test() {
  python3 -m pytest -m gpu -q -x -s -p no:cacheprovider tests/trainer/test_sft_megatron_gpu.py \
    tests/ckpt/test_uneven_chunks_gpu.py
}

stage_sft_proof() {
  python3 -c "from pathlib import Path; from tests.support.sft import write_chat_jsonl; write_chat_jsonl(Path('$runs/train.jsonl'), rows=4096)"
  local args="--config examples/sft_tiny_cpu.yaml --nproc-per-node $nproc model.shape=qwen2-0.5b data.train_files=$runs/train.jsonl trainer.run_dir=$runs/sft05 trainer.device=cuda strategy.name=megatron_fsdp strategy.mixed_precision=bf16 data.global_batch_size=64 data.max_length=512 data.max_tokens_per_micro_batch=8192 optim.lr=1e-4 optim.min_lr=1e-5 trainer.total_steps=60 checkpoint.save_every=30 trainer.eval_every=30 trainer.progress_bar=false"
  python3 -m cli.train sft $args trainer.stop_at_step=30 &&
  python3 -m cli.train sft $args &&
  mfsdp_timed ckpt validate "$runs/sft05" --deep &&
  mfsdp_timed ckpt export-hf "$runs/sft05" --out "$runs/hf05" --verify
}

stage_sft_bench() {  # every lever set on every strategy (equal-lever twins)
  torchrun --nproc-per-node "$nproc" bench/sft_throughput.py --shape qwen2-1.5b \
    --seq "${SFT_SEQ:-4096}" --micro-batch "${SFT_MICRO_BATCH:-2}" --repeat "${SFT_REPEAT:-1}" \
    --strategies "${SFT_STRATEGIES:-fsdp2,megatron_fsdp}" \
    --levers "${SFT_LEVERS:-plain,flce,liger+flce,chunked+compile,flce+compile}" ${SFT_ARGS:-}
}

stage_one_rank_test() {  # Megatron-FSDP on one rank, liger-kernel, varlen attention (1 GPU)
  python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/trainer/test_megatron_one_rank_gpu.py \
    tests/trainer/test_kernels_gpu.py tests/trainer/test_attention_gpu.py
}

stage_matmul_peak() { python3 bench/matmul_peak.py; }

stage_lora_test() {  # LoRA under Megatron-FSDP vs FSDP2, resume, merged export (1 GPU)
  python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/trainer/test_lora_megatron_gpu.py
}

stage_lora_bench() {  # LoRA r64 vs full fine-tuning, 7B and 1.5B shapes, a process per row (1 GPU)
  CUDA_VISIBLE_DEVICES=0 python3 bench/lora.py \
    --strategy "${LORA_STRATEGIES:-megatron_fsdp,fsdp2}" --json "$out/lora.json" ${LORA_ARGS:-}
}

stage_grpo_proof() {  # Megatron-FSDP actor + hf engine, Qwen2-0.5B shape, checkpoint at 2, resume to 4 (NPROC ranks)
  mfsdp data synthetic --out "$runs/addition" || return 1
  # A random model never earns the task's reward; a digit-fraction reward gives non-zero advantages.
  printf 'def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return sum(c.isdigit() for c in solution_str) / max(len(solution_str), 1)\n' >"$runs/digits_reward.py"
  local args="--config examples/grpo_gsm8k_qwen.yaml --nproc-per-node $nproc model.path=null model.shape=qwen2-0.5b model.activation_checkpointing=false data.train_files=$runs/addition/rl/train.parquet data.val_files=$runs/addition/rl/test.parquet data.max_prompt_length=64 rollout.name=hf reward.path=$runs/digits_reward.py trainer.run_dir=$runs/grpo05 trainer.total_steps=4 checkpoint.save_every=2 trainer.eval_every=2 trainer.device=cuda trainer.progress_bar=false"
  mfsdp train grpo $args trainer.stop_at_step=2 && mfsdp train grpo $args &&
  mfsdp ckpt validate "$runs/grpo05" --deep && cat "$runs/grpo05/metrics.jsonl"
}

stage_rollout_test() { python3 -m pytest -m gpu -q -p no:cacheprovider tests/rollout/test_rollout_hf_gpu.py tests/rollout/test_rollout_flash_gpu.py; }

stage_rollout_bench() {
  CUDA_VISIBLE_DEVICES=0 python3 bench/rollout.py --shape qwen2-1.5b --prompts 256 --prompt-len 128 --new-tokens 512 --repeat 1 ${ROLLOUT_ARGS:-}
}

stage_mcore_fixtures() {  # needs megatron-core 0.19.x on PYTHONPATH too
  torchrun --nproc-per-node 2 tests/fixtures/mcore/make_mcore_fixtures.py --out "$runs/mcore"
}

stage_mcore_import() {  # import-hf --layout mcore -> Megatron-LM's fsdp_dtensor load -> logits vs transformers
  for family in qwen2 qwen3 llama; do
    torchrun --nproc-per-node 1 scripts/mcore_import_proof.py --family "$family" \
      --hf-dir "$runs/import_hf_$family" --work "$runs/import_$family" || return 1
  done
}

status=0
for stage in "$@"; do
  echo "=== $stage $(date -u +%H:%M:%S)"
  start=$SECONDS
  if "stage_$stage" >"$out/$stage.log" 2>&1; then result=ok; else result=FAILED; status=1; fi
  echo "=== $stage $result in $((SECONDS - start)) s"
  grep -vE "Warning|warnings.warn|^\s*$" "$out/$stage.log" | tail -n "${TAIL:-15}"
done
exit $status
