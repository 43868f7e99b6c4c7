#!/usr/bin/env bash
# A verl SFT launch in the shape of verl's Megatron-FSDP example (examples/sft/gsm8k/
# run_qwen_megatron_fsdp.sh: Qwen2.5-Math-7B, 8 GPUs, dynamic token batches, no padding):
# verl's Megatron engine and optimizer (engine=megatron optim=megatron) with Megatron-FSDP
# on (engine.use_megatron_fsdp=True), data parallel only (tensor and pipeline parallel 1, as
# mfsdp trains). `mfsdp config from-verl` reads it without running it:
#   mfsdp config from-verl examples/verl/run_sft_megatron_fsdp.sh > sft.yaml
MODEL_PATH=${MODEL_PATH:-/models/Qwen2.5-Math-7B}

torchrun --standalone --nnodes=1 --nproc-per-node=8 -m verl.trainer.sft_trainer \
    data.train_files=$HOME/data/gsm8k_sft/train.parquet \
    data.val_files=$HOME/data/gsm8k_sft/test.parquet \
    data.messages_key=messages \
    data.train_batch_size=256 \
    data.use_dynamic_bsz=True \
    data.max_token_len_per_gpu=8192 \
    data.pad_mode=no_padding \
    data.max_length=2048 \
    model=hf_model \
    model.path=$MODEL_PATH \
    model.use_remove_padding=True \
    optim=megatron \
    optim.lr=1e-5 \
    optim.lr_warmup_steps_ratio=0.2 \
    optim.weight_decay=0.1 \
    optim.betas="[0.9,0.95]" \
    optim.clip_grad=1.0 \
    optim.lr_warmup_init=0 \
    optim.lr_decay_style=cosine \
    optim.min_lr=1e-6 \
    engine=megatron \
    engine.tensor_model_parallel_size=1 \
    engine.pipeline_model_parallel_size=1 \
    engine.use_mbridge=True \
    engine.vanilla_mbridge=False \
    engine.use_megatron_fsdp=True \
    +engine.override_transformer_config.gradient_accumulation_fusion=False \
    trainer.default_local_dir=checkpoints/gsm8k_sft \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=qwen2.5-math-7b-megatron-fsdp \
    trainer.logger='["console"]' \
    trainer.total_epochs=2 \
    trainer.save_freq=100 \
    trainer.test_freq=50
