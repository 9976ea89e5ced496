"""GRPO training: TRL's GRPOTrainer wired to the pipeline's params, rewards and callbacks.

    config.py            PipelineGRPOConfig (GRPOConfig + the pipeline's knobs), grpo_config
    trainer.py           PipelineGRPOTrainer and its TRL contract (the privates it touches)
    dynamic_sampling.py  DAPO's dynamic sampling: tensor helpers on TRL's scored batches
    advantages.py        the running-mean ablation, the forgetting remedies, the group checks
    callbacks.py         beta schedule, NaN guard, DVCLive curves
    checkpoints.py       resume: whole-checkpoint checks, the run fingerprint, the epoch sampler
    run.py               run_grpo: one GRPO run from params (smoke and train call it)
    validation.py        what training scores every eval_steps: the rows and the scorer, passed in
    distributed.py       several processes: accelerate launch, what each rank may do

Import the submodule you need: this package's __init__ imports nothing, so a stage that asks
`distributed` which rank it is does not load TRL.
"""
