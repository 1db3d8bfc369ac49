"""SFT and GRPO on TRL's trainers with a PEFT LoRA adapter, one run directory per run."""
